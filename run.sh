#!/bin/sh
# Runs the cluster described by cluster.json (or the file given) to a trained, evaluated, exported model,
# installing what is missing into .venv first.
# Usage: sh run.sh [cluster.json]            run in the foreground (Ctrl-C stops everything)
#        sh run.sh --detach [cluster.json]   run in the background
#        sh run.sh --fresh [cluster.json]    start over: move a previous run in output_dir aside first
#        sh run.sh status [cluster.json]     show each task and the run's progress
#        sh run.sh reload [cluster.json]     a running job takes the edited file's worker and ps lists
set -eu
root=$(cd "$(dirname "$0")" && pwd)
python="$root/.venv/bin/python"
if [ "${1:-}" = status ] || [ "${1:-}" = reload ]; then
    PSCLUSTER_CLUSTER="${2:-$root/cluster.json}" sh "$root/roles/bootstrap.sh" run
    cd "$root"
    exec "$python" -m roles.launch "$1" "${2:-$root/cluster.json}"
fi
cluster="$root/cluster.json"
flags=""
for argument in "$@"; do
    case "$argument" in
        --detach|--fresh) flags="$flags $argument" ;;
        -*) echo "[launcher] error: unknown option $argument; use --detach, --fresh, status or reload" >&2; exit 2 ;;
        *) cluster="$argument" ;;
    esac
done
PSCLUSTER_CLUSTER="$cluster" sh "$root/roles/bootstrap.sh" run  # the Kafka client too when it follows a topic
cd "$root"
# shellcheck disable=SC2086
exec "$python" -m roles.launch run "$cluster" $flags
