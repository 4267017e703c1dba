"""The linearizability checker on hand-made histories: valid ones pass, and each kind of
anomaly a broken server could show (stale read, lost write, CAS after an overwrite, a read
of a value never written) is reported with the op it could not place and the window around it.
No server is involved."""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checker import Op, check  # noqa: E402

INIT = (b"0", 0)


class H:
    """A history builder: ops get ids in order; times are given explicitly."""

    def __init__(self):
        self.ops = []

    def add(self, p, kind, t0, t1, outcome="ok", value=None, ver=None, result=None):
        op = Op(len(self.ops), p, kind, t0, t1 if outcome != "info" else None, outcome, value, ver, result)
        self.ops.append(op)
        return op


def test_sequential_history_is_linearizable():
    """Writes then reads one after the other, each read seeing the last write."""
    h = H()
    h.add(1, "write", 0, 1, value=b"a", result=(1,))
    h.add(2, "read", 2, 3, result=(b"a", 1))
    h.add(1, "cas", 4, 5, value=b"b", ver=1, result=(2,))
    h.add(2, "cas", 6, 7, "fail", value=b"c", ver=1)
    h.add(2, "read", 8, 9, result=(b"b", 2))
    assert check(h.ops, INIT).ok


def test_concurrent_ops_may_take_effect_in_either_order():
    """A read overlapping a write may see the old or the new value."""
    for seen in ((b"0", 0), (b"a", 1)):
        h = H()
        h.add(1, "write", 0, 10, value=b"a", result=(1,))
        h.add(2, "read", 1, 2, result=seen)
        assert check(h.ops, INIT).ok


def test_stale_read_is_caught():
    """A read that begins after a write completed but returns the old value."""
    h = H()
    w = h.add(1, "write", 0, 1, value=b"a", result=(1,))
    r = h.add(2, "read", 2, 3, result=(b"0", 0))
    res = check(h.ops, INIT)
    assert not res.ok
    assert {op.id for op in res.window} >= {r.id} and res.stuck in (w, r)
    assert "NOT linearizable" in res.report()


def test_lost_write_is_caught():
    """An acknowledged write that a later read never sees (and nothing overwrote)."""
    h = H()
    h.add(1, "write", 0, 1, value=b"a", result=(1,))
    h.add(1, "write", 2, 3, value=b"b", result=(2,))
    h.add(2, "read", 4, 5, result=(b"a", 1))
    assert not check(h.ops, INIT).ok


def test_cas_after_overwrite_is_caught():
    """A CAS on version 1 succeeds although another write had moved the version to 2 before it began."""
    h = H()
    h.add(1, "write", 0, 1, value=b"a", result=(1,))
    h.add(2, "write", 2, 3, value=b"b", result=(2,))
    h.add(1, "cas", 4, 5, value=b"c", ver=1, result=(2,))
    assert not check(h.ops, INIT).ok


def test_read_of_a_value_never_written_is_caught():
    h = H()
    h.add(1, "write", 0, 1, value=b"a", result=(1,))
    h.add(2, "read", 2, 3, result=(b"zzz", 1))
    res = check(h.ops, INIT)
    assert not res.ok and res.stuck is not None


def test_indeterminate_write_may_or_may_not_happen():
    """A write whose outcome is unknown explains a later read of its value, or of the old one."""
    for seen in ((b"a", 1), (b"0", 0)):
        h = H()
        h.add(1, "write", 0, None, "info", value=b"a")
        h.add(2, "read", 5, 6, result=seen)
        assert check(h.ops, INIT).ok, seen
    # ... but not a read of its value before it was invoked.
    h = H()
    h.add(2, "read", 0, 1, result=(b"a", 1))
    h.add(1, "write", 2, None, "info", value=b"a")
    assert not check(h.ops, INIT).ok


def test_failed_cas_constrains_the_version():
    """A CAS that failed with BadVersion cannot be placed where the version matched."""
    h = H()
    h.add(1, "cas", 0, 1, "fail", value=b"a", ver=0)
    assert not check(h.ops, INIT).ok


def test_cas_acknowledged_with_a_wrong_version_is_caught():
    """A CAS's reply names the version it made; any other than expected + 1 is an anomaly,
    even if no read ever looks at it."""
    h = H()
    h.add(1, "cas", 0, 1, value=b"a", ver=0, result=(7,))
    assert not check(h.ops, INIT).ok
    h = H()
    h.add(1, "cas", 0, 1, value=b"a", ver=0, result=(1,))
    assert check(h.ops, INIT).ok


def simulate(seed, clients=5, ops=60, bug=False):
    """A history from a real linearizable register (ops take effect at a random point inside
    their interval); with `bug`, one read is made stale."""
    rng = random.Random(seed)
    state = [b"0", 0]
    events = []
    t = 0.0
    pending = []
    h = H()
    for i in range(ops):
        t += rng.random()
        kind = rng.choice(["read", "write", "cas"])
        start = t
        lin = start + rng.random() * 2
        end = lin + rng.random() * 2
        events.append((lin, i, kind, start, end))
    events.sort()
    made_stale = False
    for lin, i, kind, start, end in events:
        p = i % clients
        if kind == "read":
            result = (state[0], state[1])
            if bug and not made_stale and state[1] >= 2:
                result = (b"stale", state[1] - 1)
                made_stale = True
            h.add(p, "read", start, end, result=result)
        elif kind == "write":
            state = [f"v{i}".encode(), state[1] + 1]
            h.add(p, "write", start, end, value=state[0], result=(state[1],))
        else:
            ver = state[1] if rng.random() < 0.5 else state[1] + 1
            if ver == state[1]:
                state = [f"c{i}".encode(), ver + 1]
                h.add(p, "cas", start, end, value=state[0], ver=ver, result=(ver + 1,))
            else:
                h.add(p, "cas", start, end, "fail", value=b"x", ver=ver)
    return h.ops


def test_random_linearizable_histories_pass():
    """Histories of a correct register with heavy overlap always check out."""
    for seed in range(40):
        assert check(simulate(seed), INIT).ok, seed


def test_random_histories_with_a_stale_read_fail():
    failures = 0
    for seed in range(40):
        ops = simulate(seed, bug=True)
        if any(op.kind == "read" and op.result and op.result[0] == b"stale" for op in ops):
            assert not check(ops, INIT).ok, seed
            failures += 1
    assert failures > 10
