"""`python -m bench.online.rows_on_ps_rack [--quick]` (root): a checkpoint's time written through the chief against
written by each ps (training.output_dir_shared) with 1, 2 and 4 ps on a rack-like network, into
bench/RESULTS-rows-on-ps-rack.md (machine and date; not with --quick, which only proves the bench runs).

Each task host is a network namespace (tests/netns.py) whose link is limited to `task_mbit` each way (tc token
buckets, tests/shaping.py); the shared folder is served from a namespace of its own over a link of `storage_mbit`
each way, by its sshd's SFTP, and mounted with sshfs at the same path on every task host (where NFS is not in the
kernel, FUSE is). The chief and its one worker share a host; each ps has its own. For each ps count the chief
(bench/online/rows_on_ps.py's) trains a step of a dlrm of 26 hashed tables of dimension 16 with Adagrad slots and
saves it, has the exporter write a serving version of that checkpoint (its rows linked where the folder allows it),
and writes a serving delta of every row, the two ways, alternating, `repeats` times each.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import PYTHON, ROOT

HERE = Path(__file__).resolve().parents[1]
SIZES = {"quick": {"rows": 26_000, "ps": (1, 2), "repeats": 1, "chunk_mb": 0.1},
         "full": {"rows": 1_300_000, "ps": (1, 2, 4), "repeats": 2, "chunk_mb": 16.0}}
STORAGE, CHIEF = 0, 1  # host indexes: the shared folder's, the chief's (and its worker's); the ps' follow
PORT = 2222


def main(quick: bool = False, task_mbit: float = 200, storage_mbit: float = 800) -> None:
    from bench.kit.quiet import require_quiet

    size = SIZES["quick" if quick else "full"]
    require_quiet()
    _install_sshfs()
    sys.path.insert(0, str(ROOT / "tests"))
    results = {"machine": machine(), "rows": size["rows"], "repeats": size["repeats"], "task_mbit": task_mbit,
               "storage_mbit": storage_mbit, "by_ps": {}}
    with tempfile.TemporaryDirectory(prefix="bench-rows-on-ps-rack-") as directory:
        for ps in size["ps"]:
            results["by_ps"][ps] = measure(ps, size, Path(directory) / f"ps{ps}", task_mbit, storage_mbit)
    text = report(results)
    print(text)
    if not quick:
        (HERE / "results-rows-on-ps-rack.json").write_text(json.dumps(results, indent=2))
        write_keeping_notes(HERE / "RESULTS-rows-on-ps-rack.md", text)


def measure(ps: int, size: dict, directory: Path, task_mbit: float, storage_mbit: float) -> list[dict]:
    from netns import create_hosts
    from shaping import shape_host

    directory.mkdir(parents=True)
    with create_hosts(ps + 2) as hosts:
        shape_host(hosts, STORAGE, storage_mbit)
        for index in range(CHIEF, ps + 2):
            shape_host(hosts, index, task_mbit)
        shared = _mount_shared(hosts, range(CHIEF, ps + 2))
        cluster = _cluster_file(hosts, ps, directory)
        servers = [_start(hosts, CHIEF, ["-m", "roles.server", "--role", "worker", "--index", "0", "--cluster",
                                         str(cluster)], directory / "worker-0.log")]
        servers += [_start(hosts, CHIEF + 1 + i, ["-m", "roles.server", "--role", "ps", "--index", str(i),
                                                  "--cluster", str(cluster)], directory / f"ps-{i}.log")
                    for i in range(ps)]
        try:
            chief = _start(hosts, CHIEF, ["-m", "bench.online.rows_on_ps", "chief", str(cluster), f"{shared}/output",
                                          str(size["rows"]), str(size["repeats"]), str(size["chunk_mb"]), "",
                                          str(directory / "saves.json")], directory / "chief.log", quiet=False)
            if chief.wait(timeout=3600):
                raise RuntimeError(f"the chief failed: {(directory / 'chief.log').read_text()[-3000:]}")
        finally:
            for server in servers:
                server.kill()
                server.wait()
        return json.loads((directory / "saves.json").read_text())


def _install_sshfs() -> None:
    """What the hosts need (tests/system_packages.sh: sshd, iproute2, ...) and sshfs, where missing."""
    subprocess.run(["sh", str(ROOT / "tests" / "system_packages.sh")], check=True, stdin=subprocess.DEVNULL,
                   timeout=1200)
    if shutil.which("sshfs") is None:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "sshfs"], check=True,
                       stdin=subprocess.DEVNULL, timeout=600)


def _mount_shared(hosts, task_hosts) -> Path:
    """The storage host's folder, mounted with sshfs at `<workdir>/shared` on each of `task_hosts`."""
    storage, shared = hosts.workdir / "storage", hosts.workdir / "shared"
    hosts.exec_in(STORAGE, ["mkdir", "-p", str(storage)]).check_returncode()
    for index in task_hosts:
        hosts.exec_in(index, ["mkdir", "-p", str(shared)]).check_returncode()
        mounted = hosts.exec_in(index, ["sshfs", "-o", "ssh_command=ssh " + " ".join(hosts.ssh_options),
                                        f"{hosts.addresses[STORAGE]}:{storage}", str(shared)], timeout_s=60)
        if mounted.returncode:
            raise RuntimeError(f"sshfs on host {index}: {mounted.stdout}{mounted.stderr}")
    return shared


def _cluster_file(hosts, ps: int, directory: Path) -> Path:
    address = hosts.addresses
    document = {"cluster": {"chief": [f"{address[CHIEF]}:{PORT}"], "worker": [f"{address[CHIEF]}:{PORT + 1}"],
                            "ps": [f"{address[CHIEF + 1 + i]}:{PORT}" for i in range(ps)]},
                "launcher": {"logs_dir": str(directory / "logs"), "ready_timeout_s": 120}, "training": {}}
    path = directory / "cluster.json"
    path.write_text(json.dumps(document))
    return path


def _start(hosts, index: int, args: list[str], log: Path, quiet: bool = True) -> subprocess.Popen:
    """`python ARGS` on host `index`, in its namespaces (it sees that host's shared folder)."""
    enter = ["nsenter", f"--target={hosts.sshd_pids[index]}", "--net", "--mount", "--pid", f"--wd={ROOT}", "--"]
    with open(log, "wb") as out:
        started = subprocess.Popen([*enter, PYTHON, *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT if quiet else out)
    return started


def report(results: dict) -> str:
    lines = [f"# A checkpoint, a version and a delta written through the chief or by each ps, rack-like "
             f"({results['machine']['date']})", "",
             f"Machine: {results['machine']}.", "",
             f"{results['rows']:,} rows in 26 tables of dimension 16 with Adagrad slots; 1 worker on the chief's "
             f"host; every task host's link {results['task_mbit']:g} Mbit/s each way, the shared folder's "
             f"{results['storage_mbit']:g} Mbit/s (sshfs over its own link); each save, version (its checkpoint "
             "and its export, on the chief's host) and delta (of every row) timed alone, the two ways alternating, "
             f"{results['repeats']} times each (`python -m bench.online.rows_on_ps_rack`).", "",
             "| ps | what | way | seconds (median) | MB/s | of the limit | chief wrote MB |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for ps, saves in results["by_ps"].items():
        for what in ("checkpoint", "version", "delta"):
            for way in ("through_chief", "rows_on_ps"):
                lines.append(_row(results, ps, what, way, [s for s in saves if (s["way"], s["what"]) == (way, what)]))
    return "\n".join(lines) + "\n"


def _row(results: dict, ps, what: str, way: str, mine: list[dict]) -> str:
    """A what (a version: its checkpoint and its export together) written one way with `ps` ps."""
    if not mine:
        return f"| {ps} | {what} | {way} | not measured | | | |"
    seconds, total = statistics.median(s["seconds"] for s in mine), mine[-1]["written_mb"]
    limit = (results["task_mbit"] if way == "through_chief" else  # the chief's link, or the ps' and the folder's
             min(results["storage_mbit"], results["task_mbit"] * int(ps))) / 8 * 1e6 / (1 << 20)
    export = (f"; export {statistics.median(s['export_s'] for s in mine):.2f} s, {mine[-1]['linked_mb']} MB linked"
              if what == "version" else "")
    return (f"| {ps} | {what} | {way} | {seconds:.2f} ({', '.join(str(s['seconds']) for s in mine)}{export}) | "
            f"{total / seconds:.1f} | {total / seconds / limit:.0%} of {limit:.0f} | {mine[-1]['chief_mb']} |")


if __name__ == "__main__":
    fire.Fire(main)
