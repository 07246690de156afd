#!/bin/sh
# Runs the cluster described by cluster.json (or the file given) to a trained, evaluated, exported model,
# installing what is missing into .venv first.
# Usage: sh run.sh [cluster.json]            run in the foreground (Ctrl-C stops everything)
#        sh run.sh --detach [cluster.json]   run in the background
#        sh run.sh status [cluster.json]     show each task and the run's progress
set -eu
root=$(cd "$(dirname "$0")" && pwd)
sh "$root/roles/bootstrap.sh" run
python="$root/.venv/bin/python"
cd "$root"
case "${1:-}" in
    status) exec "$python" -m roles.launch status "${2:-$root/cluster.json}" ;;
    --detach) exec "$python" -m roles.launch run "${2:-$root/cluster.json}" --detach ;;
    *) exec "$python" -m roles.launch run "${1:-$root/cluster.json}" ;;
esac
