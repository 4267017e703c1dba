"""Cutting a 3-member Apache ZooKeeper 3.8 ensemble over to a 3-member Warden ensemble (issue 38).

Each test runs a real ZooKeeper ensemble (ensemble.py, `snapCount=40` so the data dirs hold
many snapshots and a log tail), stops it, and starts Warden on every member's own zoo.cfg and
dataDir (same `server.N` lines, same `myid`): the members tell each other the last zxid of
their imported ZooKeeper data and the one with the newest (zxid, id) makes its state the
group's first snapshot (Warden's log: "bootstrap: decided how this member starts
decision=Import|Join"). Checked:

- a writer running until the stop (SIGTERM, or SIGKILL of all members at once, or the members
  stopped one at a time so they hold different last zxids): every create ZooKeeper
  acknowledged is on every Warden member, and nothing that was never attempted; with the
  staggered stop, the member Warden chose is the one whose ZooKeeper txn log ends at the
  highest zxid (read here from the `log.*` files, independently of Warden);
- a live kazoo session survives the cutover (same session id, its ephemerals, its watch);
- two members started first wait for the third (they must not serve), then all three serve;
- a member killed with -9 after the cutover, and then the whole ensemble, restart from
  Warden's own state without importing ZooKeeper's files again.

Warden only (it needs both servers; skipped with COMPAT_SERVER=zookeeper).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

import harness
import zkfiles
import zkwire
from ensemble import Ensemble, srvr_mode

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(harness.default_kind() != "warden",
                       reason="a ZooKeeper-to-Warden cutover (COMPAT_SERVER=warden only)"),
]

ZK_CFG = {"snapCount": 40}
PARENT = "/mig"
wait_until = harness.wait_until


# --------------------------------------------------------------------------------------------
# helpers


def zk_ensemble(name: str) -> Ensemble:
    """A running 3-member Apache ZooKeeper 3.8 ensemble with PARENT created."""
    ens = Ensemble(3, kind="zookeeper", name=name, extra_cfg=ZK_CFG).start()
    try:
        c = client(ens.connect_string)
        c.ensure_path(PARENT)
        c.stop()
        c.close()
    except BaseException:
        ens.close()
        raise
    return ens


def client(hosts: str, timeout: float = 10.0, **kw) -> KazooClient:
    c = KazooClient(hosts, timeout=timeout, randomize_hosts=False,
                    connection_retry=dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5), **kw)
    c.start(timeout=30)
    return c


def cutover(ens: Ensemble, members=None, timeout: float = 60.0) -> float:
    """Start Warden on the (stopped) members' zoo.cfg and data dirs; wait until all serve."""
    members = range(ens.n) if members is None else members
    t0 = time.monotonic()
    for i in members:
        ens.members[i].kind = "warden"
        ens.start(i, wait=False)
    ens.wait_stable(timeout)
    return time.monotonic() - t0


def signal_all(ens: Ensemble, sig: int) -> None:
    """Send `sig` to every member by PID in one tight loop (nearly the same instant), then reap."""
    pids = [m.pid for m in ens.members]
    for pid in pids:
        os.kill(pid, sig)
    for m in ens.members:
        if sig == signal.SIGKILL:
            m.kill()
        else:
            m.stop(timeout=20)


def run_log(m) -> str:
    """What member m logged since its latest start (harness appends one '=== start' per start)."""
    text = Path(m.log_path).read_text(errors="replace")
    return text[text.rfind("\n=== start "):]


def bootstrap_of(m) -> dict:
    """From a Warden member's current log: its decision and the zxid of its own ZooKeeper data."""
    log = run_log(m)
    dec = re.findall(r"bootstrap: decided how this member starts decision=(\w+)", log)
    own = re.findall(r"imported this member's ZooKeeper data.*?report=zxid (0x[0-9a-f]+)", log)
    return {"decision": dec[-1] if dec else None, "zxid": int(own[-1], 16) if own else None}


def zk_last_zxid(data_dir: str) -> int:
    """The zxid of the last complete, checksummed entry in ZooKeeper's txn logs, read from
    ZooKeeper's `log.*` files independently of Warden."""
    return zkfiles.data_dir_last_zxid(data_dir)


class Writer:
    """One kazoo session creating PARENT/wNNNNNN (value = NNNNNN) one at a time; a create counts
    as acknowledged only when its reply arrived within 2 s. Records the time of every ack."""

    def __init__(self, hosts: str):
        self.client = client(hosts)
        self.attempted = 0
        self.acked: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            i = self.attempted
            self.attempted += 1
            try:
                self.client.create_async(f"{PARENT}/w{i:06d}", str(i).encode()).get(timeout=2)
                self.acked[i] = time.monotonic()
            except Exception:  # noqa: BLE001 - not acknowledged: in doubt, may or may not exist
                pass

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        assert not self._thread.is_alive(), "the writer thread did not end"
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # noqa: BLE001
            pass


def check_writes(ens: Ensemble, w: Writer, must: set[int]) -> None:
    """On every member (after sync): every index in `must` is there with its value, and no
    znode under PARENT was never attempted."""
    for i, hp in enumerate(ens.hostports):
        c = client(hp)
        try:
            c.sync(PARENT)
            kids = c.get_children(PARENT)
            present = {int(k[1:]) for k in kids}
            missing = sorted(must - present)
            assert not missing, (f"member {i + 1}: {len(missing)} acknowledged creates missing, "
                                 f"e.g. {missing[:10]} (of {len(must)}; {w.attempted} attempted)")
            never = sorted(present - set(range(w.attempted)))
            assert not never, f"member {i + 1}: znodes never attempted: {never[:10]}"
            gets = {j: c.get_async(f"{PARENT}/w{j:06d}") for j in must}
            wrong = [j for j, a in gets.items() if a.get(timeout=30)[0] != str(j).encode()]
            assert not wrong, f"member {i + 1}: wrong values for {wrong[:10]}"
        finally:
            c.stop()
            c.close()


def decisions(ens: Ensemble) -> list[dict]:
    return [bootstrap_of(m) for m in ens.members]


# --------------------------------------------------------------------------------------------
# tests


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_acknowledged_writes_survive_cutover(sig):
    """Every create ZooKeeper acknowledged before all members were stopped at once (SIGTERM or SIGKILL) is on
    every Warden member after the cutover, and nothing never attempted is."""
    ens = zk_ensemble(f"mig-all-{signal.Signals(sig).name.lower()}")
    try:
        w = Writer(ens.connect_string).start()
        wait_until(lambda: len(w.acked) >= 300, 60, "300 acknowledged creates on ZooKeeper")
        signal_all(ens, sig)
        w.finish()
        acked = set(w.acked)
        took = cutover(ens)
        check_writes(ens, w, acked)
        ds = decisions(ens)
        assert sorted(d["decision"] for d in ds) == ["Import", "Join", "Join"], ds
        print(f"{len(acked)} acked of {w.attempted} attempted; Warden served {took:.2f}s after start; {ds}")
    finally:
        ens.close()


def test_staggered_stop_newest_member_wins():
    """With the ZooKeeper members stopped one at a time under a writer, Warden takes the state of the member
    whose txn log ends at the highest zxid, and keeps every create acknowledged while only two members ran."""
    ens = zk_ensemble("mig-staggered")
    try:
        w = Writer(ens.connect_string).start()
        wait_until(lambda: len(w.acked) >= 200, 60, "200 acknowledged creates on ZooKeeper")
        leader = ens.leader()
        f1, f2 = [i for i in range(3) if i != leader]
        ens.stop(f1)  # a follower: the other two go on acknowledging
        t_two = time.monotonic()
        n0 = len(w.acked)
        wait_until(lambda: len(w.acked) >= n0 + 150, 60, "150 creates acknowledged by the last two members")
        ens.stop(leader)  # the last follower loses its quorum: nothing more is acknowledged
        time.sleep(1.0)
        ens.stop(f2)
        w.finish()
        acked = set(w.acked)
        by_two = {i for i, t in w.acked.items() if t > t_two}
        assert len(by_two) >= 150, len(by_two)
        zxids = [zk_last_zxid(m.data_dir) for m in ens.members]
        assert zxids[f1] < max(zxids), f"the members do not hold different last zxids: {zxids}"
        winner = max(range(3), key=lambda i: (zxids[i], i + 1))

        cutover(ens)
        check_writes(ens, w, acked)
        ds = decisions(ens)
        assert [d["zxid"] for d in ds] == zxids, f"Warden read other last zxids than the txn logs hold: {ds} {zxids}"
        assert [d["decision"] for d in ds] == ["Import" if i == winner else "Join" for i in range(3)], \
            f"member {winner + 1} holds the newest state (zxids {[hex(z) for z in zxids]}), decisions {ds}"
        print(f"stopped {f1 + 1}, {leader + 1} (leader), {f2 + 1}; zxids {[hex(z) for z in zxids]}; "
              f"member {winner + 1} imported; {len(by_two)} of {len(acked)} acks came from the last two")
    finally:
        ens.close()


def test_live_session_survives_cutover():
    """A kazoo session open on ZooKeeper keeps its id and its ephemerals across the cutover to Warden without
    ever being LOST, a watch set on ZooKeeper is re-registered on Warden with SetWatches and fires for a
    change made in between, and a session abandoned during the cutover expires."""
    ens = zk_ensemble("mig-live")
    c = raw = None
    try:
        c = KazooClient(ens.connect_string, timeout=30, randomize_hosts=False,
                        connection_retry=dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1.0))
        states: list[str] = []
        c.add_listener(lambda s: states.append(s))
        c.start(timeout=30)
        sid = c.client_id[0]
        c.create(f"{PARENT}/eph", b"e", ephemeral=True)
        seq = c.create(f"{PARENT}/seq-", b"s", ephemeral=True, sequence=True)
        c.create(f"{PARENT}/watched", b"0")
        # kazoo drops its watches on a disconnect; a raw session keeps one as the Java and C
        # clients do, and re-sends it with the last zxid it saw (SetWatches).
        raw = zkwire.Conn(ens.hostports[0], timeout_ms=30000)
        r = raw.get_data(f"{PARENT}/watched", watch=True)
        assert r.err == 0
        raw_sid, raw_pw, seen = raw.session_id, raw.passwd, r.zxid
        # a session whose client goes away during the cutover: Warden must expire it
        gone = zkwire.Conn(ens.hostports[2], timeout_ms=6000)
        assert gone.create(f"{PARENT}/abandoned", b"", flags=1).err == 0  # ephemeral
        gone.sock.close()

        signal_all(ens, signal.SIGTERM)
        raw.sock.close()
        cutover(ens)
        wait_until(lambda: c.state == KazooState.CONNECTED, 30, "the old session to reconnect to Warden")
        assert c.client_id[0] == sid, f"session {c.client_id[0]:#x}, was {sid:#x}"
        assert KazooState.LOST not in states, states

        other = client(ens.connect_string)
        try:
            for p in (f"{PARENT}/eph", seq):
                st = other.exists(p)
                assert st is not None and st.ephemeralOwner == sid, (p, st)
            other.set(f"{PARENT}/watched", b"1")  # before the raw session is back
            raw = zkwire.Conn(ens.hostports[1], timeout_ms=30000, session_id=raw_sid, passwd=raw_pw, last_zxid=seen)
            assert raw.session_id == raw_sid, "the raw session was not resumed on Warden"
            assert raw.set_watches(seen, data=[f"{PARENT}/watched"]).err == 0
            ev = raw.wait_event(10)
            assert (ev.type, ev.path) == (zkwire.EV_DATA_CHANGED, f"{PARENT}/watched"), ev
            raw.close()
            raw = None

            wait_until(lambda: other.exists(f"{PARENT}/abandoned") is None, 30,
                       "Warden to expire the session abandoned during the cutover", interval=0.5)
            c.create(f"{PARENT}/eph-after", b"", ephemeral=True)  # the old session writes on Warden
            c.stop()
            c.close()
            c = None
            other.sync(PARENT)
            assert other.get_children(PARENT) == ["watched"], "the session's ephemerals outlived its close"
        finally:
            other.stop()
            other.close()
    finally:
        if c is not None:
            c.stop()
            c.close()
        if raw is not None:
            raw.sock.close()
        ens.close()


def test_two_members_wait_for_the_third():
    """Two Warden members started on ZooKeeper data do not serve until the third member answers, then all three
    serve every acknowledged write."""
    ens = zk_ensemble("mig-order")
    try:
        w = Writer(ens.connect_string).start()
        wait_until(lambda: len(w.acked) >= 100, 60, "100 acknowledged creates")
        ens.stop(0)
        n0 = len(w.acked)
        wait_until(lambda: len(w.acked) >= n0 + 100, 60, "100 creates acknowledged by members 2 and 3")
        ens.stop(1)
        ens.stop(2)  # member 3 stopped last: it holds the newest state
        w.finish()
        zxids = [zk_last_zxid(m.data_dir) for m in ens.members]

        for i in (0, 1):
            ens.members[i].kind = "warden"
            ens.start(i, wait=False)
        deadline = time.monotonic() + 25
        waiting = [False, False]
        while not all(waiting):
            for i in (0, 1):
                m = ens.members[i]
                assert m.running, f"member {i + 1} exited.\n{m.describe_log()}"
                mode = srvr_mode(m.hostport)
                assert mode not in ("leader", "follower", "standalone"), \
                    f"member {i + 1} serves ({mode}) before member 3 answered"
                log = run_log(m)
                assert "bootstrap: decided" not in log, f"member {i + 1} decided without member 3:\n{log[-2000:]}"
                waiting[i] = "bootstrap: waiting for every member" in log
            assert time.monotonic() < deadline, "no 'bootstrap: waiting for every member' in 25 s"
            time.sleep(0.2)

        cutover(ens, members=[2])
        check_writes(ens, w, set(w.acked))
        ds = decisions(ens)
        winner = max(range(3), key=lambda i: (zxids[i], i + 1))
        assert [d["decision"] for d in ds] == ["Import" if i == winner else "Join" for i in range(3)], (ds, zxids)
    finally:
        ens.close()


def test_restart_after_cutover_does_not_reimport():
    """A Warden follower killed with -9 after the cutover, and then the whole ensemble, restart from Warden's own
    state without importing ZooKeeper's files again and serve the same data."""
    ens = zk_ensemble("mig-restart")
    try:
        w = Writer(ens.connect_string).start()
        wait_until(lambda: len(w.acked) >= 200, 60, "200 acknowledged creates")
        signal_all(ens, signal.SIGTERM)
        w.finish()
        cutover(ens)
        check_writes(ens, w, set(w.acked))
        assert sorted(d["decision"] for d in decisions(ens)) == ["Import", "Join", "Join"]

        # writes on Warden (through the leader), some of them while the follower is down
        leader = ens.leader()
        f = ens.followers()[0]
        c = client(ens.hostports[leader])
        try:
            for i in range(50):
                c.create(f"{PARENT}/after-{i:03d}", b"a")
            ens.kill(f)
            for i in range(50, 100):
                c.create(f"{PARENT}/after-{i:03d}", b"a")
            expected = sorted(c.get_children(PARENT))
        finally:
            c.stop()
            c.close()
        ens.start(f)
        ens.wait_stable(60)
        log = run_log(ens.members[f])
        assert "importing it" not in log and "bootstrap:" not in log, \
            f"member {f + 1} imported or bootstrapped again after kill -9:\n{log[-3000:]}"

        def children_on(i: int) -> list[str]:
            cc = client(ens.hostports[i])
            try:
                cc.sync(PARENT)
                return sorted(cc.get_children(PARENT))
            finally:
                cc.stop()
                cc.close()

        assert children_on(f) == expected, f"member {f + 1} serves other data after its restart"

        # the whole ensemble, SIGTERM, started again
        signal_all(ens, signal.SIGTERM)
        cutover(ens)
        for i, m in enumerate(ens.members):
            log = run_log(m)
            assert "importing it" not in log and "bootstrap: decided" not in log, \
                f"member {i + 1} imported or bootstrapped again on a restart:\n{log[-3000:]}"
            assert children_on(i) == expected, f"member {i + 1} serves other data after the restart"
    finally:
        ens.close()
