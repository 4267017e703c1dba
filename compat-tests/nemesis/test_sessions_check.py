"""The sessions workload's checks on hand-made histories: a clean history passes; a live
session that loses its ephemeral, and an ephemeral that outlives its expired session (seen by
the synced look after the expiry, or in a member's final list), are each reported. No server
is involved."""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from history import History  # noqa: E402
from workloads import Sessions  # noqa: E402

S1, S2 = 0x100, 0x200
NODE1, NODE2 = "/b/eph/c0-1", "/b/eph/c0-2"


class FakeClient:
    def __init__(self, session: int):
        self.client_id = (session, b"")
        self.state = "CONNECTED"


def workload(history: History, current_session: int) -> Sessions:
    w = Sessions(["h:1"], history, "/b", random.Random(1), 1)
    w.parent = "/b/eph"
    w.current = {}
    w.clients = [FakeClient(current_session)]
    return w


def op(h: History, type: str, key: str, session_arg: int, outcome: str, result=None, session=None):
    rec = h.invoke("e0", type, key, {"session": session_arg})
    h.complete(rec, outcome, result, session=session)
    return rec


def clean_history() -> History:
    """Session S1 makes its node and looks at it; it expires; S2 finds it gone, makes its own."""
    h = History()
    op(h, "eph-create", NODE1, S1, "ok", session=S1)
    op(h, "eph-check", NODE1, S1, "ok", {"present": True, "owner": S1}, session=S1)
    op(h, "eph-gone", NODE1, S1, "ok", {"present": False, "owner": None}, session=S2)
    op(h, "eph-create", NODE2, S2, "ok", session=S2)
    op(h, "eph-check", NODE2, S2, "ok", {"present": True, "owner": S2}, session=S2)
    return h


def final(w: Sessions, view: dict) -> None:
    w.final_info["views"] = {0: view, 1: dict(view)}
    w.final_info["live"] = {0: (S2, NODE2)}


def test_a_clean_history_passes():
    w = workload(clean_history(), S2)
    final(w, {NODE2: S2})
    assert w.check() == []


def test_a_live_session_that_loses_its_ephemeral_is_reported():
    h = clean_history()
    op(h, "eph-check", NODE2, S2, "ok", {"present": False, "owner": None}, session=S2)
    later = op(h, "eph-check", NODE2, S2, "ok", {"present": True, "owner": S2}, session=S2)
    w = workload(h, S2)
    final(w, {NODE2: S2})
    found = w.check()
    assert [a["kind"] for a in found] == ["lost-while-live"], found
    assert later.describe() in found[0]["evidence"][1]


def test_a_missing_ephemeral_of_a_session_that_then_expired_is_not_an_anomaly():
    """The look that found it missing may have come after the server expired the session;
    nothing more succeeded in that session."""
    h = clean_history()
    op(h, "eph-check", NODE2, S2, "ok", {"present": False, "owner": None}, session=S2)
    w = workload(h, 0x300)
    w.final_info["views"] = {0: {}}
    w.final_info["live"] = {}
    assert w.check() == []


def test_an_ephemeral_seen_after_its_session_expired_is_reported():
    h = clean_history()
    op(h, "eph-gone", NODE1, S1, "ok", {"present": True, "owner": S1}, session=S2)
    w = workload(h, S2)
    final(w, {NODE2: S2})
    assert [a["kind"] for a in w.check()] == ["outlived"]


def test_final_lists_catch_an_outliving_and_a_lost_ephemeral():
    w = workload(clean_history(), S2)
    w.final_info["views"] = {0: {NODE1: S1, NODE2: S2}, 1: {}}
    w.final_info["live"] = {0: (S2, NODE2)}
    kinds = sorted(a["kind"] for a in w.check())
    assert kinds == ["lost", "outlived"], kinds
