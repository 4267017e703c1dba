"""A server whose wall clock jumps (an NTP step, an operator's `date -s`): times in Stats move
with it, sessions and the ensemble do not; in an ensemble only the leader's clock stamps
writes, so a follower's clock moves nothing.

Each server runs with libfaketime preloaded (harness.clock_shim) and reads its clock offset
from a file of its own, so one process's wall clock is moved by hours, forward and back, while
its monotonic clock (which session expiry, elections and leases must use) runs on. ZooKeeper
stamps ctime/mtime and judges TTL nodes by the wall clock (`Time.currentWallTime`) and times
sessions by the monotonic one (`Time.currentElapsedTime`); the same tests run against it.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kazoo.client import KazooClient, KazooState

import harness
import zkcli
import zkwire
from ensemble import Ensemble

HOUR = 3600


def _client(hostport: str) -> KazooClient:
    # 4 s: the shortest timeout a tickTime of 2000 allows, so a session judged by the jumped
    # wall clock would be gone well within the waits below.
    c = KazooClient(hosts=hostport, timeout=4.0)
    c.start(timeout=30)
    return c


def _clock_offset(c: KazooClient, path: str) -> float:
    """A write through `c`; how far its mtime is from this machine's clock, in seconds."""
    stat = c.set(path, uuid.uuid4().hex.encode())
    return stat.mtime / 1000.0 - time.time()


def _wait_offset(c: KazooClient, path: str, want: int) -> None:
    harness.wait_until(lambda: abs(_clock_offset(c, path) - want) < 5, 10,
                       f"the server's clock {want:+d}s from the real one (a write's mtime)", interval=0.3)


def _abandoned_session_expires_on_time(hostport: str, zk: KazooClient) -> None:
    """A session whose client vanishes (socket closed, no closeSession) expires after its
    timeout by the server's monotonic clock: not at once (a clock gone forward), not hours
    late (a clock gone back)."""
    conn = zkwire.Conn(hostport, timeout_ms=4000)
    path = f"/clock/abandoned-{uuid.uuid4().hex[:8]}"
    assert conn.create(path, b"", flags=1).err == 0  # ephemeral
    conn.sock.close()
    t0 = time.monotonic()
    time.sleep(2.0)
    assert zk.exists(path) is not None, "a session expired well before its 4 s timeout"
    harness.wait_until(lambda: zk.exists(path) is None, 15, "an abandoned 4 s session to expire", interval=0.2)
    took = time.monotonic() - t0
    assert took < 14, f"an abandoned 4 s session took {took:.1f}s to expire"


def test_standalone_clock_jumps_move_mtimes_not_sessions(monkeypatch):
    harness.clock_shim(monkeypatch, "faketime")
    srv = harness.Server(name="clock")
    ctl = str(srv.base_dir / "faketime")
    harness.set_clock(ctl, 0)
    srv.start()
    zk = None
    try:
        zk = _client(srv.hostport)
        zk.create("/clock", b"")
        zk.create("/clock/eph", b"", ephemeral=True)
        # A TTL node (1 h) with no children, made with zkCli (kazoo has no TTL create): judged
        # by the wall clock, as in ZooKeeper.
        r = zkcli.run(srv.hostport, [f"create -t {HOUR * 1000} /clock/ttl t"])
        assert r.out(0) == ["Created /clock/ttl"], r
        session = zk.client_id[0]
        _wait_offset(zk, "/clock", 0)
        for offset in (2 * HOUR, -HOUR, 0):
            harness.set_clock(ctl, offset)
            _wait_offset(zk, "/clock", offset)
            # Longer than the session timeout: a session timed by the wall clock would have
            # expired (forward) or been kept alive wrongly; here it is simply still there.
            time.sleep(6)
            assert zk.state == KazooState.CONNECTED and zk.client_id[0] == session
            assert zk.exists("/clock/eph") is not None, f"the ephemeral went with a {offset:+d}s jump"
            # A new session starts and ends cleanly under the moved clock.
            other = _client(srv.hostport)
            try:
                p = other.create("/clock/other-", b"", ephemeral=True, sequence=True)
            finally:
                other.stop()
                other.close()
            assert zk.exists(p) is None
            _abandoned_session_expires_on_time(srv.hostport, zk)
            if offset == 2 * HOUR:
                # Two hours on, the 1 h TTL node has outlived its TTL by the server's clock.
                harness.wait_until(lambda: zk.exists("/clock/ttl") is None, 15,
                                   "the 1 h TTL node to expire two hours on")
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        srv.close()


def test_ensemble_members_clocks_jump_and_it_keeps_serving(monkeypatch):
    if harness.default_kind() == "zookeeper":
        # Measured: under the shim a JVM's Object.wait(500) returns at once and its threads'
        # timed waits go wrong once the clock moves, so a ZooKeeper leader two hours ahead
        # stopped pinging and its followers timed out; a real clock step does not do that to
        # a JVM (its timed waits use the monotonic clock). Nothing to compare here.
        pytest.skip("libfaketime breaks the JVM's timed waits: not a faithful clock step for ZooKeeper")
    harness.clock_shim(monkeypatch, "faketime")  # relative: each member's own directory
    ens = Ensemble(3, name="clock")
    ctls = [str(m.base_dir / "faketime") for m in ens.members]
    for ctl in ctls:
        harness.set_clock(ctl, 0)
    clients: list[KazooClient] = []
    try:
        ens.start()
        lead = ens.leader()
        clients = [_client(hp) for hp in ens.hostports]
        clients[0].create("/clock", b"")
        eph = [c.create("/clock/eph-", b"", ephemeral=True, sequence=True) for c in clients]
        sessions = [c.client_id[0] for c in clients]
        follower = next(i for i in range(3) if i != lead)
        # The leader two hours ahead, a follower two hours behind, then the leader behind.
        for moves in ({lead: 2 * HOUR, follower: -2 * HOUR}, {lead: -HOUR}):
            for i, offset in moves.items():
                harness.set_clock(ctls[i], offset)
            # Every write is stamped with the leader's clock, as ZooKeeper's leader stamps
            # them: one taken through the follower too, whatever the follower's clock says.
            _wait_offset(clients[lead], "/clock", moves[lead])
            follower_off = _clock_offset(clients[follower], "/clock")
            assert abs(follower_off - moves[lead]) < 5, (
                f"a write through the follower was stamped {follower_off:+.0f}s off, the leader is at {moves[lead]:+d}s")
            if len(moves) == 2:
                # A 1 h TTL node made through the follower (two hours behind) while the leader
                # is two hours ahead: its mtime is the leader's, so it is not four hours old.
                r = zkcli.run(ens.hostports[follower], [f"create -t {HOUR * 1000} /clock/ttl t"])
                assert r.out(0) == ["Created /clock/ttl"], r
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                for c in clients:
                    c.set("/clock", b"x")
                time.sleep(0.2)
            for c, s, p in zip(clients, sessions, eph):
                assert c.state == KazooState.CONNECTED and c.client_id[0] == s
                assert c.exists(p) is not None
            # (TTL checks run every second here: 8 s of them.)
            assert clients[lead].exists("/clock/ttl") is not None, "a 1 h TTL node expired within seconds"
            assert ens.leader() == lead, "a clock jump moved the leadership"
        for ctl in ctls:
            harness.set_clock(ctl, 0)
        _wait_offset(clients[lead], "/clock", 0)
        names = [sorted(c.get_children("/clock")) for c in clients]
        assert names[0] == names[1] == names[2] and len(names[0]) == 4  # 3 ephemerals, the TTL node
    finally:
        for c in clients:
            c.stop()
            c.close()
        ens.close()
