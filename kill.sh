#!/bin/sh
# Stops every task of the cluster (by pid file and process group); safe to run again.
# Usage: sh kill.sh [cluster.json]
set -eu
root=$(cd "$(dirname "$0")" && pwd)
sh "$root/roles/bootstrap.sh" run
exec "$root/.venv/bin/python" -m roles.launch down "${1:-$root/cluster.json}"
