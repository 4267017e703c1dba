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
