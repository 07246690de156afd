#!/bin/sh
# Creates .venv and installs what pyproject.toml lists, only when something is missing or changed.
# Usage: sh roles/bootstrap.sh [run|kafka|test|bench]   (kafka, test and bench add their extras from pyproject.toml;
# run becomes kafka when the cluster file, PSCLUSTER_CLUSTER or cluster.json, follows a Kafka topic)
# PSCLUSTER_TF_PACKAGE replaces the CPU wheel, e.g. PSCLUSTER_TF_PACKAGE='tensorflow[and-cuda]==2.21.0' on GPU hosts.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
purpose="${1:-run}"
if [ "$purpose" = run ] && grep -qs '"kafka://' "${PSCLUSTER_CLUSTER:-$root/cluster.json}"; then
    purpose=kafka
fi
tf_package="${PSCLUSTER_TF_PACKAGE:-}"

say() { echo "[bootstrap] $*" >&2; }

find_python() {
    for candidate in "${PYTHON:-}" python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$candidate"; return 0
        fi
    done
    say "error: Python 3.11 not found; install python3.11 or set PYTHON=/path/to/python3.11"
    exit 2
}

stamp_file="$venv/.pscluster-$purpose"
stamp="$(cat "$root/pyproject.toml" "$0" | cksum)|$tf_package"
done_files="$stamp_file"
[ "$purpose" != run ] || done_files="$stamp_file $venv/.pscluster-test $venv/.pscluster-bench"  # they hold a run's
[ "$purpose" != kafka ] || done_files="$stamp_file $venv/.pscluster-test"
for done_file in $done_files; do
    if [ -x "$venv/bin/python" ] && [ -f "$done_file" ] && [ "$(cat "$done_file")" = "$stamp" ]; then
        exit 0
    fi
done

pip_log=$(mktemp)
created=no
# On any failure: the cause in a line or two, and no half-built .venv left to confuse the next run.
cleanup() {
    status=$?
    if [ "$status" -ne 0 ]; then
        [ ! -s "$pip_log" ] || cat "$pip_log" >&2
        explain_failure
        if [ "$created" = yes ]; then
            rm -rf "$venv"
            say "removed the unfinished $venv"
        fi
    fi
    rm -f "$pip_log"
    exit "$status"
}
explain_failure() {
    [ -s "$pip_log" ] || return 0
    index="${PIP_INDEX_URL:-}"
    [ -n "$index" ] || index=$("$venv/bin/python" -m pip config list 2>/dev/null |
        sed -n "s/^[^.]*[.]index-url='\(.*\)'\$/\1/p" | tail -n 1)
    [ -n "$index" ] || index=https://pypi.org/simple/
    if reason=$(probe_index "$index"); then
        say "error: pip could not install the packages: $(grep '^ERROR' "$pip_log" | tail -n 1)"
    else
        say "error: the package index $index is unreachable from this host ($reason)"
        say "error: let this host reach it, or point pip at a mirror it can reach (index-url in /etc/pip.conf)"
    fi
}
probe_index() {  # prints why the index cannot be reached, and fails; an HTTP answer of any kind counts as reached
    "$venv/bin/python" - "$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=10).close()
except urllib.error.HTTPError:
    pass
except Exception as error:
    print(getattr(error, "reason", error))
    sys.exit(1)
PY
}
trap cleanup EXIT

if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    created=yes
    "$(find_python)" -m venv "$venv"
fi

# Reads the pins from pyproject.toml so they live in one place; tf-keras goes in separately (see pyproject.toml).
requirements=$("$venv/bin/python" - "$root/pyproject.toml" "$purpose" "$tf_package" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
deps = list(project["dependencies"])
deps += project["optional-dependencies"].get(sys.argv[2], [])
if sys.argv[3]:
    deps = [sys.argv[3] if d.startswith("tensorflow-cpu") else d for d in deps]
print("\n".join(deps))
PY
)
keras=$(echo "$requirements" | grep '^tf-keras')
others=$(echo "$requirements" | grep -v '^tf-keras')
say "installing into .venv ($purpose): $(echo $others) $keras"
# The CPU and CUDA wheels overwrite each other's files: remove the one not asked for before installing.
case "$others" in
    *tensorflow-cpu==*) unwanted=tensorflow ;;
    *) unwanted=tensorflow-cpu ;;
esac
if "$venv/bin/python" -m pip show --quiet "$unwanted" >/dev/null 2>&1; then
    say "removing $unwanted (replaced by the wheel asked for)"
    "$venv/bin/python" -m pip uninstall --quiet --yes "$unwanted"
fi
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check $others 2>"$pip_log"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$keras" 2>"$pip_log"
echo "$stamp" > "$stamp_file"
say "done"
