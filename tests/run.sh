#!/bin/sh
# Runs the whole test suite, installing what is missing into .venv first. Extra arguments go to pytest,
# e.g. `sh tests/run.sh -m "not multihost"` or `sh tests/run.sh tests/test_config.py`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
sh "$root/roles/bootstrap.sh" test
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
