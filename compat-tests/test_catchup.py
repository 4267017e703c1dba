"""A member that falls behind and catches up (by log or by a snapshot from the leader) keeps
ZooKeeper's promises to the clients connected to it:

- a client sees a watch event before any reply that shows its change, and no watch set on
  the member is lost, whatever way the member caught up;
- a session the ensemble expired while the member was cut off is never served again by it:
  its client learns the session expired.

Scenarios (each against a real 3-member ensemble of COMPAT_SERVER, so the same tests prove
themselves on Apache ZooKeeper 3.8): a follower frozen by SIGSTOP while the others write far
past `snapCount` and `commitLogCount` (so Warden's follower installs a snapshot without ever
losing its leader for long), a follower cut off by a real network partition (its own network
namespace) long enough for the leader to expire a session connected to it, and a seeded
random mix of both. The watchers are kazoo clients, a raw-wire client that checks the order
of events and replies frame by frame (`WatchProbe`), and a Curator CuratorCache
(cache_witness.py) whose view must end equal to the tree.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
import uuid

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import KazooException

import harness
import netns
import zkwire as w
from cache_witness import CacheWitness, diff, tree_view
from ensemble import Ensemble

WARDEN = harness.default_kind() == "warden"
pytestmark = pytest.mark.timeout(240)

# Small enough that a few hundred writes purge what a lagging follower would need, so
# Warden's leader sends it a snapshot (ZooKeeper's leader sends a SNAP past commitLogCount).
CATCHUP_CFG = {"snapCount": 100, "commitLogCount": 20}
wait_until = harness.wait_until


def uniq(prefix: str) -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:8]}"


def needs_netns():
    why = netns.available()
    return pytest.mark.skipif(why is not None, reason=f"real partitions need network namespaces: {why}")


def write_many(c, base: str, n: int) -> None:
    """n writes, one log entry each (each waits for the one before)."""
    for i in range(n):
        retrying(lambda: c.set(base, str(i).encode()))


def retrying(op, patience: float = 30.0):
    """`op()`, again after a ConnectionLoss or a similar in-doubt failure (an election, a
    client moving to another member); its writes are idempotent setData calls."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return op()
        except KazooException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class WatchProbe:
    """A raw-wire session on one member with a data watch on each key. Every read it makes
    checks ZooKeeper's promise frame by frame: a reply showing a version newer than the one
    the key's watch was set at must come after that watch's event. When the member closes the
    connection (it lost its leader, or is catching up), it reconnects to the same member with
    the same session and re-sends its watches (setWatches, as every client does)."""

    def __init__(self, hostport: str, keys: list[str], timeout_ms: int = 30000):
        self.hostport, self.keys, self.timeout_ms = hostport, list(keys), timeout_ms
        self.conn: w.Conn | None = w.Conn(hostport, timeout_ms=timeout_ms)
        self.session, self.passwd = self.conn.session_id, self.conn.passwd
        self.last_zxid = 0
        self.armed: dict[str, int | None] = {}  # key -> version its watch was set at; None: fired
        self.violations: list[str] = []
        self.events = 0
        self.reconnects = 0
        self.expired = False
        for k in self.keys:
            self._arm(k)

    def _absorb(self) -> None:
        """The notifications that arrived before the reply just read."""
        assert self.conn is not None
        while self.conn.events:
            e = self.conn.events.pop(0)
            if e.path in self.armed and e.type in (w.EV_DATA_CHANGED, w.EV_DELETED):
                self.armed[e.path] = None
                self.events += 1

    def _get(self, key: str, watch: bool) -> int:
        assert self.conn is not None
        r = self.conn.get_data(key, watch=watch)
        self.last_zxid = max(self.last_zxid, r.zxid)
        self._absorb()
        if r.err != 0:
            raise AssertionError(f"getData {key} on {self.hostport}: err {r.err}")
        return w.parse_get_data(r.body)[1]["version"]

    def _arm(self, key: str) -> None:
        self.armed[key] = self._get(key, watch=True)

    def _reconnect(self, patience: float) -> bool:
        """Back on the same member with the same session; False if it stays unreachable."""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                c = w.Conn(self.hostport, timeout_ms=self.timeout_ms, session_id=self.session,
                           passwd=self.passwd, last_zxid=self.last_zxid)
            except (OSError, ConnectionError, struct.error):
                time.sleep(0.1)
                continue
            if c.session_id == 0 or c.timeout_ms <= 0:
                self.expired = True
                c.sock.close()
                return False
            self.conn = c
            self.reconnects += 1
            watched = [k for k, v in self.armed.items() if v is not None]
            r = c.set_watches(self.last_zxid, data=watched)
            self.last_zxid = max(self.last_zxid, r.zxid)
            self._absorb()
            return True
        return False

    def probe(self, patience: float = 30.0) -> None:
        """Reads every key once, checking each reply against the watches."""
        for key in self.keys:
            try:
                if self.conn is None and not self._reconnect(patience):
                    return
                v = self._get(key, watch=False)
                armed = self.armed[key]
                if armed is not None and v > armed:
                    self.violations.append(
                        f"{self.hostport} {key}: read version {v} before the event of the watch set at "
                        f"version {armed}")
                if self.armed[key] is None:
                    self._arm(key)
            except (OSError, ConnectionError, struct.error):
                if self.conn is not None:
                    self.conn.sock.close()
                self.conn = None
                if not self._reconnect(patience):
                    return

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class Prober(threading.Thread):
    """Probes every `WatchProbe` in a loop until stopped."""

    def __init__(self, probes: list[WatchProbe]):
        super().__init__(daemon=True)
        self.probes, self.halt, self.errors = probes, threading.Event(), []

    def run(self) -> None:
        while not self.halt.is_set():
            for p in self.probes:
                try:
                    p.probe(patience=5.0)
                except Exception as e:  # noqa: BLE001  (reported by the test)
                    self.errors.append(f"{p.hostport}: {e!r}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)


def kazoo_events(c, path: str) -> list:
    """A one-shot data watch on `path` through kazoo; the list fills with its events."""
    got: list = []
    c.get(path, watch=lambda e: got.append((time.monotonic(), e.type, e.path)))
    return got


def ready_status(host: str, port: int = 8080) -> int | None:
    """The HTTP status of Warden's GET /ready on `host`."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/ready", timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def installed_snapshot(ens, i: int) -> bool:
    return "snapshot installed from the leader" in open(ens.members[i].log_path, errors="replace").read()


def test_frozen_follower_catching_up_by_snapshot_fires_every_watch(clients):
    """A follower is frozen (SIGSTOP, 3 s) while the leader takes a few hundred writes, far past
    snapCount and commitLogCount; tickTime 6000 keeps the pause inside the time a follower may
    go without its leader, so it does not drop its clients. Thawed, it catches up (Warden: by
    installing the leader's snapshot): kazoo's data watch set before the pause fires, and the
    raw-wire watcher on that follower never reads a newer version before its watch's event."""
    cfg = {**CATCHUP_CFG, "tickTime": 6000}
    with Ensemble(3, name="frozen-snap", extra_cfg=cfg) as ens:
        leader = ens.leader()
        f = (leader + 1) % 3
        writer = clients([ens.hostports[leader]], timeout=30)
        base = uniq("frozen")
        keys = [f"{base}/k{i}" for i in range(3)]
        writer.create(base, b"")
        for k in keys:
            writer.create(k, b"v0")
        watcher = clients([ens.hostports[f]], timeout=30)
        watcher.sync(base)
        got = kazoo_events(watcher, keys[0])
        probe = WatchProbe(ens.hostports[f], keys)
        cache = CacheWitness(ens.hostports[f], base)
        cache.wait_ready(120)
        ens.sigstop(f)
        try:
            for k in keys:
                writer.set(k, b"v1")
            write_many(writer, base, 400)
            time.sleep(3)
        finally:
            ens.sigcont(f)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and probe.events < len(keys):
            probe.probe()
            time.sleep(0.02)
        assert not probe.violations, probe.violations
        assert probe.events == len(keys), f"{probe.events} of {len(keys)} watch events arrived on the raw watcher"
        wait_until(lambda: got, 20, "kazoo's watch event after the catch-up")
        assert got[0][1:] == ("CHANGED", keys[0])
        watcher.sync(base)
        assert watcher.get(keys[0])[0] == b"v1"
        cache.wait_quiet(1.0, 60)
        differences = diff(cache.dump(), tree_view(writer, base))
        assert not differences, f"Curator's cache on the follower ended unlike the tree: {differences}"
        assert not cache.errors(), cache.describe()
        cache.close()
        if WARDEN:
            assert installed_snapshot(ens, f), "the follower caught up without a snapshot: the test missed its case"
            assert probe.reconnects == 0, "the follower dropped its client although it never lost its leader"
        probe.close()


@needs_netns()
def test_cut_off_follower_never_serves_a_session_expired_meanwhile(clients):
    """A follower is cut off by a real partition while the leader expires a session whose client
    can reach only that follower, and takes writes far past snapCount. After the heal the client
    must learn its session expired: the follower never accepts it again. A watcher on the same
    follower (a longer session) gets the events for what changed meanwhile."""
    net = netns.Net(3)
    # Warden's /ready tells an orchestrator whether a member serves (ZooKeeper has no /ready).
    admin = {"admin.enableServer": "true", "admin.serverAddress": "0.0.0.0", "admin.serverPort": 8080} if WARDEN else {}
    try:
        with netns.NetEnsemble(net, 3, name="cut-expire", extra_cfg={**CATCHUP_CFG, **admin}) as ens:
            leader = ens.leader()
            f = (leader + 1) % 3
            writer = clients([ens.hostports[leader]], timeout=30)
            base = uniq("cut")
            writer.create(base, b"")
            writer.create(f"{base}/w", b"v0")
            states: list[tuple[float, str]] = []
            doomed = clients([ens.hostports[f]], timeout=4.0)
            doomed.add_listener(lambda s: states.append((time.monotonic(), s)))
            doomed.create(f"{base}/eph", b"", ephemeral=True)
            watcher = clients([ens.hostports[f]], timeout=30)
            watcher.sync(base)
            got = kazoo_events(watcher, f"{base}/w")
            probe = WatchProbe(ens.hostports[f], [f"{base}/w"])
            cache = CacheWitness(ens.hostports[f], base)
            cache.wait_ready(120)
            cut_at = time.monotonic()
            net.isolate(f)
            try:
                writer.set(f"{base}/w", b"v1")
                write_many(writer, base, 300)
                wait_until(lambda: writer.exists(f"{base}/eph") is None, 30,
                           "the leader to expire the cut-off client's session")
                expired_at = time.monotonic()
                if WARDEN:
                    assert ready_status(net.addr(f)) == 503, "a member cut off from its leader says it is ready"
                time.sleep(2)
            finally:
                net.heal()
            # kazoo opens a new session right after LOST: only states between the cut and LOST
            # belong to the expired one.
            lost_at = wait_until(lambda: next((t for t, st in states if st == KazooState.LOST), None), 60,
                                 "the client to learn its session expired")
            after_cut = [st for t, st in states if cut_at < t <= lost_at]
            assert KazooState.CONNECTED not in after_cut, f"the expired session was served again: {states}"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and probe.events < 1:
                probe.probe()
                time.sleep(0.05)
            assert not probe.violations, probe.violations
            assert probe.events == 1 and not probe.expired
            wait_until(lambda: got, 30, "the watcher's event after the heal")
            if WARDEN:
                wait_until(lambda: ready_status(net.addr(f)) == 200, 30, "the returning member to be ready again")
            cache.wait_state("RECONNECTED", 60, since=cut_at)
            cache.wait_quiet(1.0, 60)
            differences = diff(cache.dump(), tree_view(writer, base))
            assert not differences, f"Curator's cache on the returning follower ended unlike the tree: {differences}"
            assert not cache.errors(), cache.describe()
            cache.close()
            print(f"session expired {expired_at - cut_at:.1f}s into the cut; states after it: {after_cut}; "
                  f"raw watcher reconnects: {probe.reconnects}")
            if WARDEN:
                assert installed_snapshot(ens, f), "the follower caught up without a snapshot"
            probe.close()
    finally:
        net.close()


@needs_netns()
def test_random_cut_offs_keep_watch_order_and_expired_sessions_out(clients):
    """Seeded random rounds (COMPAT_CATCHUP_ROUNDS, default 4; COMPAT_CATCHUP_SEED): a random
    follower is frozen or cut off for 1-8 s while a writer sets random keys and pads the log
    past commitLogCount; raw-wire watchers on every member probe continuously. Over all
    rounds no probe read shows a newer version than its watch's event, and a session the
    leader expired during a cut is never connected again."""
    rounds = int(os.environ.get("COMPAT_CATCHUP_ROUNDS", "4"))
    seed = int(os.environ.get("COMPAT_CATCHUP_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"seed {seed}, {rounds} rounds")
    net = netns.Net(3)
    try:
        with netns.NetEnsemble(net, 3, name="cut-random", extra_cfg=CATCHUP_CFG) as ens:
            leader = ens.leader()
            writer = clients([ens.hostports[leader]] + [hp for i, hp in enumerate(ens.hostports) if i != leader],
                             timeout=30)
            base = uniq("random")
            keys = [f"{base}/k{i}" for i in range(4)]
            writer.create(base, b"")
            for k in keys:
                writer.create(k, b"0")
            probes = [WatchProbe(hp, keys) for hp in ens.hostports]
            prober = Prober(probes)
            prober.start()
            served_expired: list[str] = []
            try:
                for r in range(rounds):
                    leader = ens.leader(60)
                    f = rng.choice([i for i in range(3) if i != leader])
                    how = rng.choice(["sigstop", "partition"])
                    secs = rng.uniform(1.0, 8.0)
                    states: list[tuple[float, str]] = []
                    s = clients([ens.hostports[f]], timeout=4.0)
                    s.add_listener(lambda st, states=states: states.append((time.monotonic(), st)))
                    eph = f"{base}/eph{r}"
                    s.create(eph, b"", ephemeral=True)
                    t0 = time.monotonic()
                    (ens.sigstop(f) if how == "sigstop" else net.isolate(f))
                    expired_at = None
                    try:
                        end = t0 + secs
                        i = 0
                        while time.monotonic() < end:
                            key, value = rng.choice(keys), str(r * 100000 + i).encode()
                            retrying(lambda: writer.set(key, value))
                            write_many(writer, base, 20)
                            i += 1
                            if expired_at is None and retrying(lambda: writer.exists(eph)) is None:
                                expired_at = time.monotonic()
                    finally:
                        (ens.sigcont(f) if how == "sigstop" else net.heal())
                    ens.wait_stable(60)
                    def lost() -> float | None:
                        return next((t for t, st in states if st == KazooState.LOST), None)

                    wait_until(lambda: s.state == KazooState.CONNECTED or lost(), 60,
                               f"round {r}: the cut-off client to reconnect or learn its session expired")
                    if expired_at is None and retrying(lambda: writer.exists(eph)) is None:
                        expired_at = time.monotonic()
                    if expired_at is not None:
                        # kazoo opens a new session right after LOST; states up to LOST are the
                        # expired session's.
                        lost_at = wait_until(lost, 30, f"round {r}: the client to learn it expired")
                        if any(st == KazooState.CONNECTED and expired_at < t < lost_at for t, st in states):
                            served_expired.append(f"round {r} ({how} {secs:.1f}s of member {f + 1}): {states}")
                    print(f"round {r}: {how} member {f + 1} for {secs:.1f}s; session "
                          f"{'expired' if expired_at else 'kept'}; probe events so far "
                          f"{[p.events for p in probes]}")
            finally:
                prober.stop()
            for p in probes:
                p.probe()
            violations = [v for p in probes for v in p.violations]
            assert not prober.errors, prober.errors
            assert not violations, violations
            assert not served_expired, served_expired
            assert all(not p.expired for p in probes), "a long-session watcher expired"
            for p in probes:
                p.close()
    finally:
        net.close()
