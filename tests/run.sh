#!/bin/sh
# Runs the whole test suite, installing what is missing into .venv first: the multi-host tests beside the others
# (tests/lanes.py), then pytest's durations and the total. Extra arguments go to pytest, e.g.
# `sh tests/run.sh -m "not multihost"`, `sh tests/run.sh -k reload`; a path runs one plain pytest on it
# (`sh tests/run.sh tests/test_config.py`).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
# The Debian packages (sshd, rsync, nftables, Slurm for the multi-host tests; root only) install beside .venv's:
# on a fresh machine apt's some 20 s and pip's some 50 s of mostly one core each then overlap.
sh "$root/tests/system_packages.sh" &
packages=$!
sh "$root/roles/bootstrap.sh" test || { status=$?; wait "$packages" || true; exit "$status"; }
wait "$packages"
cd "$root"
# Python keeps the project's compiled modules (__pycache__, never committed nor synced to hosts): with
# PYTHONDONTWRITEBYTECODE=1, as these machines set it, each of the suite's thousands of Python processes that does
# not fork from one compiled the project's modules again (a launcher 0.28 s instead of 0.20).
unset PYTHONDONTWRITEBYTECODE
exec "$root/.venv/bin/python" "$root/tests/lanes.py" "$@"
