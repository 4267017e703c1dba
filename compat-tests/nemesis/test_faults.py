"""The nemesis itself, without servers: a fault aimed at a member that already exited by
itself is skipped (the exit stays recorded as a crash), not a reason to abort the schedule."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import faults  # noqa: E402


class DeadProc:
    returncode = 1

    def poll(self):
        return 1


class DeadMember:
    proc = DeadProc()
    running = False

    def describe_log(self, n):
        return "Unable to load database on disk"


class FakeEnsemble:
    def __init__(self):
        self.members = [DeadMember()]
        self.n = 1

    def sigstop(self, i):
        raise ProcessLookupError(3, "No such process")


def test_a_pause_of_a_member_that_exited_by_itself_is_skipped_and_the_exit_recorded():
    ens = FakeEnsemble()
    nem = faults.Nemesis(ens, net=None, log=lambda _line: None)
    nem.leader = lambda: None
    f = faults.Fault(index=3, kind="pause", target="random", perm=[0], draw=0.5, at=1.0, duration=2.0, gap=1.0)
    end = nem.start(f)
    end()
    assert [c["member"] for c in nem.crashes] == [1]
    assert [e["action"] for e in nem.events] == ["skip"]
    assert faults.summarise(nem.events) == {}


class Proc:
    def __init__(self):
        self.returncode = None

    def poll(self):
        return self.returncode


class DiskMember:
    """A member whose process runs until the test makes it exit, with a log tail it sets."""

    def __init__(self, base_dir):
        self.base_dir = base_dir
        self.proc = Proc()
        self.hostport = "127.0.0.1:1"  # nothing answers: the clock probe sees nothing
        self.log_tail = ""
        self.starts = 0

    @property
    def running(self):
        return self.proc.returncode is None

    def describe_log(self, n):
        return self.log_tail


class DiskEnsemble:
    def __init__(self, base_dir):
        self.members = [DiskMember(base_dir)]
        self.n = 1

    def start(self, i, wait=True):
        m = self.members[i]
        m.proc = Proc()
        m.starts += 1


def _eio_fault_then_exit(tmp_path, log_tail, after=0.0):
    ens = DiskEnsemble(tmp_path)
    nem = faults.Nemesis(ens, net=None, log=lambda _line: None)
    nem.leader = lambda: None
    f = faults.Fault(index=1, kind="eio", target="random", perm=[0], draw=0.5, at=1.0, duration=2.0, gap=1.0)
    end = nem.start(f)
    end()  # the member still runs when its disk comes back
    if after:
        nem._disk_back[0] -= after  # as if that long ago
    m = ens.members[0]
    m.log_tail, m.proc.returncode = log_tail, 1  # ... and exits now
    nem.check_crashes()
    return nem, m


def test_an_exit_on_the_disk_error_just_after_the_fault_ended_is_the_faults_and_is_restarted(tmp_path):
    tail = "ERROR raft stopped on a storage error: snapshot: No space left on device (os error 28)"
    nem, m = _eio_fault_then_exit(tmp_path, tail)
    assert nem.crashes == []
    assert m.starts == 1 and m.running
    assert [e["kind"] for e in nem.events][-1] == "diskerror-late"
    assert faults.summarise(nem.events) == {"eio": 1}


def test_an_exit_without_a_disk_error_after_the_fault_is_a_crash(tmp_path):
    nem, m = _eio_fault_then_exit(tmp_path, "thread 'main' panicked at src/tree/mod.rs")
    assert [c["member"] for c in nem.crashes] == [1]
    assert m.starts == 0


def test_an_exit_on_a_disk_error_long_after_the_fault_is_a_crash(tmp_path):
    tail = "ERROR raft stopped on a storage error: No space left on device (os error 28)"
    nem, m = _eio_fault_then_exit(tmp_path, tail, after=faults.DISK_ERROR_GRACE + 1.0)
    assert [c["member"] for c in nem.crashes] == [1]
    assert m.starts == 0


def test_clock_offsets_go_both_ways_from_a_second_to_two_hours():
    offsets = [faults.clock_offset(k / 1000) for k in range(1000)]
    assert min(offsets) >= -7200 and max(offsets) <= 7200 and all(o != 0 for o in offsets)
    assert sum(o > 0 for o in offsets) == 500 and abs(min(offsets)) > 3600 and max(offsets) > 3600
    assert any(abs(o) < 10 for o in offsets)


def test_a_clock_jump_writes_the_members_offset_and_puts_it_back(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "CLOCK_PICKUP", 0.3)
    ens = DiskEnsemble(tmp_path)
    nem = faults.Nemesis(ens, net=None, log=lambda _line: None)
    nem.leader = lambda: None
    path = faults.clock_file(ens.members[0])
    f = faults.Fault(index=2, kind="clockjump", target="random", perm=[0], draw=0.75, at=1.0, duration=0.3, gap=1.0)
    end = nem.start(f)
    assert open(path).read().strip() == f"{faults.clock_offset(0.75):+d}"
    end()
    assert open(path).read().strip() == "+0"
    assert faults.summarise(nem.events) == {"clockjump": 1}
    assert [e["what"] for e in nem.events if e["action"] == "observe"] == [
        "member 1's clock: not observed (no answer from `cons` in time)"]
