"""Whether a task's process group lives, told from its leader when it can be (every poll asks it of every task) and
from the whole of /proc only when the leader is gone or a zombie while other processes of the group remain."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterkit import wait_until
from common.proc import start_ticks
from launcher import process
from launcher.process import PidRecord


def group_of(script: str) -> subprocess.Popen:
    """`sh -c script` leading a session (and group) of its own, its output a pipe."""
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL)


def record_of(leader: subprocess.Popen) -> PidRecord:
    return PidRecord(leader.pid, start_ticks(leader.pid) or 0, ("sh",), group=leader.pid)


class ProcRead(AssertionError):
    pass


@pytest.fixture
def proc_unread(monkeypatch):
    """Fails the test if the group check lists /proc (its leader should have told)."""
    real = Path

    def guarded(*parts):
        if parts == ("/proc",):
            raise ProcRead("/proc listed")
        return real(*parts)

    monkeypatch.setattr(process, "Path", guarded)


def is_zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_group_whose_leader_lives_is_alive_without_reading_all_of_proc(proc_unread):
    leader = group_of("sleep 30")
    try:
        assert process.group_alive(record_of(leader))
    finally:
        leader.kill()
        leader.wait()


def test_a_group_with_no_process_left_is_gone_without_reading_all_of_proc(proc_unread):
    leader = group_of("exit 0")
    record = PidRecord(leader.pid, 0, ("sh",), group=leader.pid)
    leader.wait()  # reaped: nothing of the group is left
    assert not process.group_alive(record)


def test_a_member_outlives_its_leader_and_the_group_lives_until_it_ends():
    leader = group_of("sleep 30 & echo $!; exit 0")
    record = record_of(leader)
    member = int(leader.stdout.readline())
    try:
        assert wait_until(lambda: leader.poll() is not None, 10, 0.02)  # reaped: only the member is left
        assert process.group_alive(record)
    finally:
        os.kill(member, 9)
    assert wait_until(lambda: not process.group_alive(record), 10, 0.02)


def test_a_zombie_leader_alone_is_no_live_group_but_one_with_a_live_member_is():
    alone = group_of("exit 0")
    record = record_of(alone)
    with_member = group_of("sleep 30 & echo $!; exit 0")
    record_with_member = record_of(with_member)
    member = int(with_member.stdout.readline())
    try:  # neither leader is reaped: each stays a zombie while this test looks
        assert wait_until(lambda: is_zombie(alone.pid) and is_zombie(with_member.pid), 10, 0.02)
        assert not process.group_alive(record)
        assert process.group_alive(record_with_member)
    finally:
        os.kill(member, 9)
        alone.wait()
        with_member.wait()
