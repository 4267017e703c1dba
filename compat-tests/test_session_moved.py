"""SessionMoved (issue 40): when a session is resumed on another member while its old
connection is still open, a write arriving on the old connection is refused and that
connection is closed, as ZooKeeper does; the write never happens, and the session goes on
through its new connection.

A raw wire client (zkwire) holds both connections, which no client library does on purpose.
ZooKeeper 3.8 closes the old connection without an answer; Warden answers SessionMoved (-118)
first, then closes it. Both are accepted here: the write fails and the connection goes. When
the old connection is on the leader, both servers close it as soon as the session moves.
"""

from __future__ import annotations

import pytest

import zkwire
from ensemble import Ensemble

SESSION_MOVED = -118


@pytest.fixture(scope="module")
def ens():
    e = Ensemble(3, name="moved").start()
    yield e
    e.close()


def _write_refused(conn: zkwire.Conn, path: str) -> None:
    """A write on `conn` is refused with SessionMoved or the connection is closed, and
    `conn` is closed afterwards."""
    try:
        r = conn.set_data(path, b"from-the-old-connection")
        assert r.err == SESSION_MOVED, f"a write on the old connection got err {r.err}"
    except OSError:
        pass  # closed without an answer (ZooKeeper)
    with pytest.raises(OSError):
        conn.ping()
        conn.ping()


@pytest.mark.parametrize("where", ["follower-to-follower", "leader-to-follower", "follower-to-leader"])
def test_write_on_the_old_connection_is_refused(ens, where):
    """Session resumed elsewhere: its old connection's write fails and the connection closes."""
    lead = ens.leader()
    f1, f2 = (lead + 1) % 3, (lead + 2) % 3
    old_at, new_at = {"follower-to-follower": (f1, f2), "leader-to-follower": (lead, f1),
                      "follower-to-leader": (f1, lead)}[where]
    path = f"/moved-{where}"
    old = zkwire.Conn(ens.hostports[old_at])
    assert old.create(path, b"before").err == 0
    new = zkwire.Conn(ens.hostports[new_at], session_id=old.session_id, passwd=old.passwd)
    assert new.session_id == old.session_id
    _write_refused(old, path)
    # The refused write did not happen; the session goes on through the new connection.
    r = new.get_data(path)
    assert r.err == 0 and zkwire.parse_get_data(r.body)[0] == b"before"
    assert new.set_data(path, b"after").err == 0
    new.close()
