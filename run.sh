#!/bin/sh
# Runs the cluster described by cluster.json (or the file given) to a trained, exported model;
# installs what is missing into .venv first.
# Usage: sh run.sh [cluster.json]
set -eu
root=$(cd "$(dirname "$0")" && pwd)
sh "$root/roles/bootstrap.sh" run
exec "$root/.venv/bin/python" -m roles.launch run "${1:-$root/cluster.json}"
