#!/bin/sh
# Runs the whole test suite, installing what is missing into .venv first. Extra arguments go to pytest,
# e.g. `sh tests/run.sh -m "not multihost"` or `sh tests/run.sh tests/test_config.py`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
sh "$root/roles/bootstrap.sh" test
sh "$root/tests/system_packages.sh"  # sshd, rsync, nftables for the multi-host tests (root only)
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
