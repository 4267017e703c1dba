"""The set and lock workloads' checks on hand-made histories: a sequence number that goes
back in real time, and a fenced write that succeeds after a later holder had the lock without
the two holders' writes interleaving, are reported; clean histories pass. No server is
involved."""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from history import History  # noqa: E402
from workloads import Locks, SetAdds  # noqa: E402


def timed(h: History, proc: str, type: str, key: str, args: dict, t0: float, t1: float, outcome: str = "ok",
          result=None):
    rec = h.invoke(proc, type, key, args)
    h.complete(rec, outcome, result)
    rec.invoke, rec.complete = t0, t1
    return rec


# -- set ---------------------------------------------------------------------------------------


def set_workload(h: History, paths: dict) -> SetAdds:
    w = SetAdds(["h:1"], h, "/b", random.Random(1), 1)
    w.parent = "/b/set"
    w.final_info["views"] = {0: paths}
    return w


def add(h, value, seq, t0, t1):
    return timed(h, "s0.0", "add", "/b/set", {"value": value}, t0, t1, result={"path": f"/b/set/e-{seq:010d}"})


def test_set_in_order_passes():
    h = History()
    add(h, "a", 1, 0.0, 1.0)
    add(h, "b", 3, 2.0, 3.0)
    add(h, "c", 2, 2.5, 3.5)  # concurrent with b: either order
    w = set_workload(h, {"/b/set/e-0000000001": "a", "/b/set/e-0000000003": "b", "/b/set/e-0000000002": "c"})
    assert w.check() == []


def test_set_sequence_going_back_is_caught():
    h = History()
    add(h, "a", 7, 0.0, 1.0)
    add(h, "b", 3, 2.0, 3.0)  # sent after a was acknowledged, yet numbered lower
    w = set_workload(h, {"/b/set/e-0000000007": "a", "/b/set/e-0000000003": "b"})
    kinds = [a["kind"] for a in w.check()]
    assert kinds == ["sequence-went-back"], kinds


# -- locks -------------------------------------------------------------------------------------


def lock_workload(h: History, writes_ok: int, final_version: int, final_mzxid: int, value: str) -> Locks:
    w = Locks(["h:1"], h, "/b", random.Random(1), 1)
    fin = {"data": value, "version": final_version, "mzxid": final_mzxid}
    w.final_info["resource"] = fin
    w.final_info["resource_views"] = {0: fin, 1: dict(fin)}
    return w


def hold(h, proc, token, t):
    return timed(h, proc, "hold", f"/b/lock/n{token}", {"token": token}, t, t)


def fenced(h, proc, token, value, mzxid, version, t0, t1):
    return timed(h, proc, "fenced-write", "/b/resource", {"token": token, "value": value, "node": f"/b/lock/n{token}"},
                 t0, t1, result={"mzxid": mzxid, "version": version})


def test_locks_in_turn_pass():
    h = History()
    hold(h, "l0.0", 100, 0.0)
    fenced(h, "l0.0", 100, "100:a", 101, 1, 0.1, 0.2)
    hold(h, "l1.0", 102, 1.0)
    fenced(h, "l1.0", 102, "102:b", 103, 2, 1.1, 1.2)
    w = lock_workload(h, 2, 2, 103, "102:b")
    assert w.check() == []


def test_a_write_after_a_later_hold_is_caught_without_interleaving():
    """A holds with token 100; B's hold with token 102 is seen; only then A's write is sent
    and succeeds (mzxid 103), before any write of B's: the mzxid order of the writes alone
    shows nothing wrong."""
    h = History()
    hold(h, "l0.0", 100, 0.0)
    hold(h, "l1.0", 102, 1.0)
    fenced(h, "l0.0", 100, "100:a", 103, 1, 1.5, 1.6)
    fenced(h, "l1.0", 102, "102:b", 104, 2, 1.7, 1.8)
    w = lock_workload(h, 2, 2, 104, "102:b")
    kinds = [a["kind"] for a in w.check()]
    assert kinds == ["holders-overlap"], kinds


def test_members_disagreeing_on_the_resource_is_caught():
    h = History()
    hold(h, "l0.0", 100, 0.0)
    fenced(h, "l0.0", 100, "100:a", 101, 1, 0.1, 0.2)
    w = lock_workload(h, 1, 1, 101, "100:a")
    w.final_info["resource_views"][1] = {"data": "init", "version": 0, "mzxid": 5}
    kinds = [a["kind"] for a in w.check()]
    assert kinds == ["members-disagree"], kinds


# -- registers ---------------------------------------------------------------------------------


def test_a_missing_register_key_is_an_anomaly():
    """Keys exist on every member before the clients start and are never deleted, so an op
    that found one missing is reported even though the checker drops failed reads."""
    from workloads import Registers
    h = History()
    key = "/b/reg/e000-k0"
    timed(h, "r0.0", "qread", key, {}, 0.0, 0.1, result={"data": "init", "version": 0, "mzxid": 5})
    miss = timed(h, "r1.0", "pread", key, {}, 0.2, 0.3, outcome="fail")
    w = Registers(["h:1"], h, "/b", random.Random(1), 1)
    assert w.check() == []
    w.missing.append(miss.describe())
    kinds = [a["kind"] for a in w.check()]
    assert kinds == ["missing-key"], kinds
