"""Wire-level behaviours that client libraries hide, and the four-letter words, via zkwire.py."""

from __future__ import annotations

import socket
import uuid

import pytest

import harness
import zkwire as w


@pytest.fixture
def conn(shared_server):
    c = w.Conn(shared_server.hostport)
    yield c
    c.close()


@pytest.fixture
def base(conn):
    path = "/wire-" + uuid.uuid4().hex[:10]
    assert conn.create(path).err == 0
    return path


def test_session_timeout_negotiation(shared_server):
    """Requested session timeouts are clamped to [2, 20] x tickTime (4000..40000 ms with tickTime=2000)."""
    for asked, expected in [(1000, 4000), (4000, 4000), (10000, 10000), (40000, 40000), (100000, 40000)]:
        c = w.Conn(shared_server.hostport, timeout_ms=asked)
        try:
            assert c.timeout_ms == expected, asked
            assert c.protocol_version == 0 and c.session_id != 0 and len(c.passwd) == 16
        finally:
            c.close()


def test_connect_response_readonly_byte_mirrors_request(shared_server):
    """ConnectResponse carries the trailing readOnly byte only when the ConnectRequest had one."""
    new = w.Conn(shared_server.hostport, send_readonly=True)
    old = w.Conn(shared_server.hostport, send_readonly=False)
    try:
        assert new.connect_response_len == 4 + 4 + 8 + 4 + 16 + 1 and new.read_only is False
        assert old.connect_response_len == 4 + 4 + 8 + 4 + 16 and old.read_only is None
        assert old.exists("/").err == 0  # an "old" client is fully usable
    finally:
        new.close()
        old.close()


def test_session_ids_are_distinct(shared_server):
    """Each new connection gets its own session id and password."""
    conns = [w.Conn(shared_server.hostport) for _ in range(5)]
    try:
        assert len({c.session_id for c in conns}) == 5
        assert len({c.passwd for c in conns}) == 5
    finally:
        for c in conns:
            c.close()


def test_ping_and_reply_zxid(conn, base):
    """Ping replies with xid -2; a write's reply zxid is its txn zxid and later reads report at least that."""
    p = conn.ping()
    assert (p.xid, p.err, p.body) == (-2, 0, b"")
    r = conn.create(base + "/z", b"1")
    assert r.err == 0 and r.body == w.ustring(base + "/z")
    g = conn.get_data(base + "/z")
    data, stat = w.parse_get_data(g.body)
    assert data == b"1" and stat["czxid"] == r.zxid
    assert g.zxid >= r.zxid
    assert conn.ping().zxid >= r.zxid


def test_error_codes_on_the_wire(conn, base):
    """Errors come back as the documented codes with no body: NoNode, NodeExists, BadVersion, NotEmpty, NoChildrenForEphemerals, InvalidACL."""
    r = conn.get_data(base + "/missing")
    assert (r.err, r.body) == (-101, b"")
    assert conn.exists(base + "/missing").err == -101
    assert conn.create(base).err == -110
    assert conn.set_data(base, b"x", version=5).err == -103
    assert conn.create(base + "/kid").err == 0
    assert conn.delete(base).err == -111
    assert conn.delete(base + "/kid", version=3).err == -103
    assert conn.create(base + "/eph", flags=1).err == 0
    assert conn.create(base + "/eph/kid").err == -108
    assert conn.create(base + "/noacl", acl=[]).err == -114
    assert conn.create(base + "/nested/missing").err == -101


def test_set_watches_on_reconnect(shared_server, conn, base):
    """SetWatches fires for changes after relativeZxid (data changed, deleted, created, children changed) and re-registers the rest."""
    for p in ("/d", "/gone", "/same", "/c"):
        assert conn.create(base + p, b"v").err == 0
    zxid = conn.exists(base).zxid  # everything the watcher "has seen"
    assert conn.set_data(base + "/d", b"v2").err == 0
    assert conn.delete(base + "/gone").err == 0
    assert conn.create(base + "/new").err == 0
    assert conn.create(base + "/c/kid").err == 0

    other = w.Conn(shared_server.hostport)
    try:
        r = other.set_watches(
            zxid,
            data=[base + "/d", base + "/gone", base + "/same"],
            exist=[base + "/new", base + "/absent"],
            child=[base + "/c", base + "/same"],
        )
        assert (r.xid, r.err) == (-8, 0)
        fired = set()
        for _ in range(4):
            ev = other.wait_event()
            assert ev.state == w.STATE_SYNC_CONNECTED
            fired.add((ev.type, ev.path))
        assert fired == {
            (w.EV_DATA_CHANGED, base + "/d"),
            (w.EV_DELETED, base + "/gone"),
            (w.EV_CREATED, base + "/new"),
            (w.EV_CHILDREN_CHANGED, base + "/c"),
        }
        other.no_event()
        # The unchanged ones were re-registered and fire on the next change.
        assert conn.set_data(base + "/same", b"v2").err == 0
        ev = other.wait_event()
        assert (ev.type, ev.path) == (w.EV_DATA_CHANGED, base + "/same")
        assert conn.create(base + "/absent").err == 0
        ev = other.wait_event()
        assert (ev.type, ev.path) == (w.EV_CREATED, base + "/absent")
        assert conn.create(base + "/same/kid").err == 0
        ev = other.wait_event()
        assert (ev.type, ev.path) == (w.EV_CHILDREN_CHANGED, base + "/same")
        other.no_event()
    finally:
        other.close()


def test_exists_watch_on_missing_node_is_registered(shared_server, conn, base):
    """exists with watch on a missing node returns NoNode and still fires NodeCreated later."""
    r = conn.exists(base + "/later", watch=True)
    assert r.err == -101
    other = w.Conn(shared_server.hostport)
    try:
        assert other.create(base + "/later").err == 0
    finally:
        other.close()
    ev = conn.wait_event()
    assert (ev.type, ev.state, ev.path) == (w.EV_CREATED, w.STATE_SYNC_CONNECTED, base + "/later")


def test_notification_precedes_reply_on_same_session(conn, base):
    """When a session's own write triggers its watch, the notification arrives before that write's reply."""
    assert conn.create(base + "/n", b"1").err == 0
    assert conn.get_data(base + "/n", watch=True).err == 0
    conn.send_only(w.OP_SET_DATA, w.ustring(base + "/n") + w.buffer(b"2") + b"\xff\xff\xff\xff")
    first = conn.read_reply()
    assert first.xid == w.NOTIFICATION_XID
    ev = w.parse_event(first.body)
    assert (ev.type, ev.path) == (w.EV_DATA_CHANGED, base + "/n")
    second = conn.read_reply()
    assert second.xid == conn.xid and second.err == 0
    # ZooKeeper 3.8 sends notifications with zxid -1; newer servers may carry
    # the triggering txn's zxid. Clients ignore it; either is accepted.
    assert first.zxid in (-1, second.zxid)


def test_notification_precedes_read_reflecting_change(shared_server, conn, base):
    """A watcher sees the watch event before any read reply that reflects the change made by another session."""
    assert conn.create(base + "/x", b"old").err == 0
    writer = w.Conn(shared_server.hostport)
    try:
        for i in range(20):
            assert conn.get_data(base + "/x", watch=True).err == 0
            new = f"v{i}".encode()
            writer.send_only(w.OP_SET_DATA, w.ustring(base + "/x") + w.buffer(new) + b"\xff\xff\xff\xff")
            while True:
                r = conn.get_data(base + "/x")  # stashes any notification read first
                data, _ = w.parse_get_data(r.body)
                if data == new:
                    break
                assert not conn.events, "event arrived while reads still showed the old value"
            assert [(e.type, e.path) for e in conn.events] == [(w.EV_DATA_CHANGED, base + "/x")]
            conn.events.clear()
            assert writer.read_reply().err == 0
    finally:
        writer.close()


def test_close_session_then_socket_closes(shared_server):
    """closeSession (-11) gets an OK reply, then the server closes the socket and the session's ephemerals go."""
    c = w.Conn(shared_server.hostport)
    path = "/wire-close-" + uuid.uuid4().hex[:8]
    assert c.create(path, flags=1).err == 0
    c.send_only(w.OP_CLOSE)
    r = c.read_reply()
    assert (r.xid, r.err) == (c.xid, 0)
    c.sock.settimeout(5)
    assert c.sock.recv(1) == b""
    c.sock.close()
    probe = w.Conn(shared_server.hostport)
    try:
        assert probe.exists(path).err == -101
    finally:
        probe.close()


def test_resume_with_bad_password_is_refused(shared_server):
    """Reconnecting to a live session with a wrong password gets timeOut=0, sessionId=0 (expired) and a close."""
    a = w.Conn(shared_server.hostport)
    try:
        bad = bytes([a.passwd[0] ^ 0xFF]) + a.passwd[1:]
        b = w.Conn(shared_server.hostport, session_id=a.session_id, passwd=bad)
        assert (b.timeout_ms, b.session_id) == (0, 0)
        b.sock.settimeout(5)
        assert b.sock.recv(1) == b""
        b.sock.close()
        good = w.Conn(shared_server.hostport, session_id=a.session_id, passwd=a.passwd)
        assert good.session_id == a.session_id and good.timeout_ms > 0
        assert good.exists("/").err == 0
        good.close()
    finally:
        a.sock.close()


# --------------------------------------------------------------------------- four-letter words


def test_4lw_ruok(shared_server):
    """ruok answers imok."""
    assert harness.four_letter(shared_server.hostport, "ruok") == "imok"


def test_4lw_srvr_and_stat(shared_server):
    """srvr and stat report a standalone server with version, zxid and node count lines."""
    srvr = harness.four_letter(shared_server.hostport, "srvr")
    lines = dict(l.split(": ", 1) for l in srvr.splitlines() if ": " in l)
    assert lines["Mode"] == "standalone"
    assert lines["Zookeeper version"].startswith("3.")
    assert lines["Zxid"].startswith("0x")
    assert int(lines["Node count"]) >= 4
    stat = harness.four_letter(shared_server.hostport, "stat")
    assert "Clients:" in stat and "Mode: standalone" in stat


def test_4lw_mntr(shared_server):
    """mntr prints tab-separated zk_* keys including version, server state and znode count."""
    out = harness.four_letter(shared_server.hostport, "mntr")
    kv = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    assert kv["zk_server_state"] == "standalone"
    assert kv["zk_version"].startswith("3.")
    for key in ("zk_znode_count", "zk_num_alive_connections", "zk_watch_count",
                "zk_ephemerals_count", "zk_outstanding_requests", "zk_approximate_data_size"):
        assert int(kv[key]) >= 0, key


def test_4lw_conf_and_envi(shared_server):
    """conf echoes the client port and tickTime; envi reports zookeeper.version (what kazoo's server_version reads)."""
    conf = harness.four_letter(shared_server.hostport, "conf")
    kv = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line)
    assert kv["clientPort"] == str(shared_server.port)
    assert kv["tickTime"] == str(harness.TICK_TIME_MS)
    assert kv["maxSessionTimeout"] == str(20 * harness.TICK_TIME_MS)
    envi = harness.four_letter(shared_server.hostport, "envi")
    assert any(line.startswith("zookeeper.version=3.") for line in envi.splitlines())


def test_4lw_unknown_word_closes(shared_server):
    """An unknown four-letter word gets no reply and a closed connection, and the server keeps serving."""
    try:
        out = harness.four_letter(shared_server.hostport, "zzzz")
    except (ConnectionError, socket.timeout):
        out = ""
    assert "imok" not in out
    assert harness.four_letter(shared_server.hostport, "ruok") == "imok"
