"""Ensembles: 3 and 5 servers on 127.0.0.1, real clients on different members, and faults.

Each test starts its own ensemble (ensemble.py) of kind COMPAT_SERVER, so the
same tests run against Apache ZooKeeper 3.8 ensembles (to prove them) and
against Warden. Sessions use a 4 s timeout (tickTime 2000).

Fault tests run fenced lock clients in subprocesses (ensemble_worker.py on
kazoo's Lock; curator/src/warden/compat/FencedLockWorker.java, on Curator's
InterProcessMutex, speaks the same JSON-lines protocol): each holder appends
[token, worker, n] to a JSON list in a guarded znode with setData(version it
read); token = its lock node's sequence number.
Afterwards the list, read from every member after sync, must be identical
everywhere, contain every write any client saw acknowledged, and have
non-decreasing tokens; a check-and-set refused while its writer held the
lock means two holders overlapped. Every acknowledged ack-node create must
exist on every member.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException
from kazoo.handlers.threading import KazooTimeoutError

import harness
import zkwire as w
from ensemble import Ensemble, srvr_mode

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ensemble_worker.py")
CURATOR_RUN = os.path.join(HERE, "curator", "run_ensemble.sh")
CURATOR_DIR = os.path.join(HERE, "curator")
CURATOR_WORKER_MAIN = "warden.compat.FencedLockWorker"  # run by curator/run.sh via CURATOR_COMPAT_MAIN
SESSION_TIMEOUT = 4.0  # seconds; ZooKeeper and Warden negotiate 4000 ms with tickTime 2000

pytestmark = pytest.mark.timeout(150)
WARDEN = harness.default_kind() == "warden"


def warden_bug(reason: str):
    """xfail(strict) for Warden only: a Warden bug this test exposes (ZooKeeper 3.8 passes it)."""
    return pytest.mark.xfail(WARDEN, reason=f"Warden bug: {reason}", strict=True)


def uniq(prefix: str) -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:8]}"


def rotated(hostports: list[str], first: int) -> list[str]:
    return hostports[first:] + hostports[:first]


wait_until = harness.wait_until


def connected_port(c: KazooClient) -> int | None:
    """The member port this kazoo client is connected to right now."""
    try:
        return c._connection._socket.getpeername()[1]
    except (AttributeError, OSError):
        return None


# --------------------------------------------------------------------------------------------
# fenced lock workers


class LockRun:
    """Fenced lock workers (subprocesses) against one ensemble, and the checks made afterwards.

    worker="kazoo" runs ensemble_worker.py; worker="curator" runs FencedLockWorker.java through
    curator/run.sh (same config, same events; its stderr goes to tmp_path/curator-worker-N.log)."""

    def __init__(self, ens, tmp_path, make_client, worker_hosts: list[list[str]], worker: str = "kazoo", **cfg):
        assert worker in ("kazoo", "curator"), worker
        self.ens = ens
        self.make_client = make_client
        self.worker = worker
        self.tmp_path = tmp_path
        self.logs: list[str | None] = []
        base = uniq("fenced")
        self.lock = base + "/lock"
        self.fence = base + "/fence"
        self.acks = base + "/acks"
        self.stop_file = str(tmp_path / f"stop-{uuid.uuid4().hex[:6]}")
        admin = make_client(ens.connect_string)
        admin.create(self.fence, b"[]", makepath=True)
        admin.create(self.acks)
        admin.create(self.lock)
        self.events: list[list[dict]] = []
        self.procs: list[subprocess.Popen] = []
        self._cond = threading.Condition()
        self.cfg = cfg
        for hosts in worker_hosts:
            self.add_worker(hosts, **cfg)

    def add_worker(self, hosts: list[str], **over) -> int:
        wid = len(self.procs)
        cfg = dict(hosts=",".join(hosts), id=wid, lock=self.lock, fence=self.fence, acks=self.acks,
                   stop=self.stop_file, writes_per_hold=2, hold_s=0.02, session_timeout=SESSION_TIMEOUT)
        cfg.update(self.cfg)
        cfg.update(over)
        if self.worker == "curator":
            log = str(self.tmp_path / f"curator-worker-{wid}.log")
            env = dict(os.environ, CURATOR_COMPAT_MAIN=CURATOR_WORKER_MAIN,
                       CURATOR_COMPAT_LOG=os.environ.get("CURATOR_COMPAT_LOG", "warn"))
            with open(log, "w") as err:  # a file, not a pipe nobody reads: Curator logs with stack traces
                proc = subprocess.Popen([os.path.join(CURATOR_DIR, "run.sh"), json.dumps(cfg)],
                                        stdout=subprocess.PIPE, stderr=err, text=True, cwd=HERE, env=env,
                                        preexec_fn=harness._die_with_parent)
        else:
            log = None
            proc = subprocess.Popen([sys.executable, WORKER, json.dumps(cfg)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=HERE)
        harness._LIVE[proc.pid] = proc  # killed at interpreter exit if a test forgets
        self.logs.append(log)
        evs: list[dict] = []
        self.events.append(evs)
        self.procs.append(proc)
        threading.Thread(target=self._pump, args=(proc, evs), daemon=True).start()
        return wid

    def _pump(self, proc, evs):
        for line in proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "garbage", "line": line, "t": time.time()}
            with self._cond:
                evs.append(ev)
                self._cond.notify_all()

    def all_events(self, kind: str | None = None, since: float = 0.0) -> list[tuple[int, dict]]:
        with self._cond:
            return [(w, e) for w, evs in enumerate(self.events) for e in evs
                    if (kind is None or e["ev"] == kind) and e["t"] >= since]

    def wait_event(self, pred, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for evs in self.events:
                    for e in evs:
                        if pred(e):
                            return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}; "
                                         f"{self.summary()}")
                self._cond.wait(min(left, 0.2))

    def wait_acks(self, count: int, since: float = 0.0, timeout: float = 30.0) -> list[tuple[int, dict]]:
        """Wait until `count` fence writes were acknowledged after time `since`."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.all_events("ack", since)
            if len(got) >= count:
                return got
            dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
            if time.monotonic() > deadline or (dead and len(dead) == len(self.procs)):
                raise AssertionError(
                    f"only {len(got)} of {count} acknowledged fence writes after t={since:.2f} "
                    f"within {timeout}s (modes {self.ens.modes()}); {self.summary()}")
            time.sleep(0.05)

    def summary(self) -> str:
        parts = []
        for w, evs in enumerate(self.events):
            kinds: dict[str, int] = {}
            for e in evs:
                kinds[e["ev"]] = kinds.get(e["ev"], 0) + 1
            errs = [e for e in evs if e["ev"] in ("error", "rejected", "fenced")][-3:]
            parts.append(f"worker {w} (rc {self.procs[w].poll()}): {kinds} {errs}")
            if self.logs[w] and self.procs[w].poll() is not None:
                with open(self.logs[w], errors="replace") as f:
                    parts.append("  stderr tail: " + "  ".join(f.readlines()[-5:]))
        return "\n".join(parts)

    def finish(self, timeout: float = 40.0) -> None:
        """Ask every worker to end after its current hold; SIGKILL those that do not."""
        open(self.stop_file, "w").close()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for p in self.procs:
            harness._LIVE.pop(p.pid, None)

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
                p.wait()
            harness._LIVE.pop(p.pid, None)

    def verify(self, members: list[int] | None = None, allow_rejected_workers: tuple[int, ...] = (),
               allow_lost_workers: tuple[int, ...] = ()) -> list[list]:
        """The invariants; returns the fence history."""
        members = list(range(self.ens.n)) if members is None else members
        hists, children = {}, {}
        for i in members:
            c = self.make_client([self.ens.hostports[i]])
            c.sync(self.fence)
            hists[i] = json.loads(c.get(self.fence)[0])
            c.sync(self.acks)
            children[i] = set(c.get_children(self.acks))
            c.stop()
        first = hists[members[0]]
        for i in members:
            assert hists[i] == first, f"fence history differs between member {members[0]} and {i}"
            assert children[i] == children[members[0]], f"ack nodes differ between members {members[0]} and {i}"
        hist = first
        tokens = [e[0] for e in hist]
        assert tokens == sorted(tokens), f"accepted fencing tokens went backwards: {tokens}"
        assert len({tuple(e) for e in hist}) == len(hist), "an entry was written twice"
        acked = [e["entry"] for _, e in self.all_events("ack")]
        missing = [e for e in acked if e not in hist]
        assert not missing, f"acknowledged fence writes lost: {missing} (history has {len(hist)})"
        created = {e["path"].rsplit("/", 1)[1] for _, e in self.all_events("created")}
        assert created <= children[members[0]], f"acknowledged creates lost: {sorted(created - children[members[0]])}"
        for w, e in self.all_events("rejected") + self.all_events("fenced"):
            assert w in allow_rejected_workers, (
                f"worker {w} held the lock but its check-and-set was refused: two holders at once? {e}")
        for w, e in self.all_events("state"):
            if e["state"] == "LOST":
                assert w in allow_lost_workers, f"worker {w}'s session expired: {e}"
        for w, evs in enumerate(self.events):
            ts = [e["token"] for e in evs if e["ev"] == "acquired"]
            assert ts == sorted(ts), f"worker {w} acquired with decreasing tokens {ts}"
        assert [x for x in self.all_events("garbage")] == []
        return hist


@pytest.fixture
def lock_runs():
    runs: list[LockRun] = []
    yield runs
    for r in runs:
        r.kill_all()


def start_lock_run(ens, tmp_path, clients, lock_runs, worker_first: list[int], **cfg) -> LockRun:
    run = LockRun(ens, tmp_path, clients, [rotated(ens.hostports, f) for f in worker_first], **cfg)
    lock_runs.append(run)
    return run


@pytest.fixture(scope="module")
def curator_built():
    """Compile the Curator programs once, before a test's clock matters (curator/run.sh would, per worker)."""
    proc = subprocess.run([os.path.join(CURATOR_DIR, "build.sh")], capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------------------------
# 3 members, no faults


def test_write_through_each_member_readable_on_every_member(shared_ensemble3, clients):
    """A create and a setData through each member are readable, with identical stats, on every member after sync."""
    ens = shared_ensemble3
    cs = [clients([hp]) for hp in ens.hostports]
    base = uniq("ens-rw")
    cs[0].create(base)
    for i, c in enumerate(cs):
        c.create(f"{base}/n{i}", f"v{i}".encode())
    for i, c in enumerate(cs):
        c.set(f"{base}/n{(i + 1) % 3}", f"set-by-{i}".encode())
    stats = []
    for j, c in enumerate(cs):
        c.sync(base)
        assert sorted(c.get_children(base)) == ["n0", "n1", "n2"], f"member {j}"
        row = []
        for i in range(3):
            data, st = c.get(f"{base}/n{i}")
            assert data == f"set-by-{(i - 1) % 3}".encode(), f"member {j} node n{i}"
            assert st.version == 1
            row.append((st.czxid, st.mzxid, st.ctime, st.mtime, st.version))
        stats.append(row)
    assert stats[0] == stats[1] == stats[2], "stats differ between members"
    # A reader on a member that did not take the write sees it after sync, right away.
    cs[2].set(f"{base}/n0", b"last")
    cs[0].sync(f"{base}/n0")
    assert cs[0].get(f"{base}/n0")[0] == b"last"


def test_own_writes_on_a_follower_seen_at_once_and_events_before_replies(shared_ensemble3):
    """On a follower, a session's read sent right behind its write sees it, and a watched write's
    event comes before its reply, whether or not the session held a watch when it wrote.

    Warden answers a watch-free session's write on the leader's word, before the follower has
    applied it; its next reads must wait for the apply (ZooKeeper's follower answers only
    after applying, so both orders hold there by construction)."""
    ens = shared_ensemble3
    follower = ens.hostports[ens.followers()[0]]
    base = uniq("ens-fence")
    setup = w.Conn(follower)
    assert setup.create(base).err == 0
    assert setup.create(base + "/x", b"v").err == 0
    setup.close()

    def set_body(data: bytes) -> bytes:
        return w.ustring(base + "/x") + w.buffer(data) + b"\xff\xff\xff\xff"

    def get_body(watch: bool) -> bytes:
        return w.ustring(base + "/x") + struct.pack(">?", watch)

    # A session that never watches: pipelined write then read, and one after the other.
    c = w.Conn(follower)
    for i in range(150):
        data = f"p{i}".encode()
        c.send_only(w.OP_SET_DATA, set_body(data))
        c.send_only(w.OP_GET_DATA, get_body(False))
        r_set, r_get = c.read_reply(), c.read_reply()
        assert (r_set.err, r_get.err) == (0, 0)
        got, stat = w.parse_get_data(r_get.body)
        assert got == data, f"round {i}: a read right behind the session's write saw {got!r}"
        assert r_get.zxid >= r_set.zxid, f"round {i}: the read's zxid is behind the write's"
        data = f"s{i}".encode()
        assert c.set_data(base + "/x", data).err == 0
        assert w.parse_get_data(c.get_data(base + "/x").body)[0] == data, f"round {i}: read after the reply"
    # A request refused before the log, right behind a write, is not answered with an older
    # zxid than the write's (ZooKeeper logs it as an error txn with a zxid of its own). Both
    # go in one send, so the server reads the refused one before the write is committed.
    bad_create = w.ustring(base + "/bad") + w.buffer(b"") + w.acl_vector(w.OPEN_ACL) + struct.pack(">i", 99)
    for i in range(50):
        c.send_together([(w.OP_SET_DATA, set_body(f"r{i}".encode())), (w.OP_CREATE, bad_create)])
        r_set, r_bad = c.read_reply(), c.read_reply()
        assert r_set.err == 0 and r_bad.err != 0, (r_set, r_bad)
        assert r_bad.zxid >= r_set.zxid, f"round {i}: refused request's zxid {r_bad.zxid} < write's {r_set.zxid}"
    # The same session starts watching between two pipelined writes: the first is answered
    # as before, the read sees it, and the second's event precedes the second's reply.
    for i in range(30):
        first, second = f"a{i}".encode(), f"b{i}".encode()
        c.send_only(w.OP_SET_DATA, set_body(first))
        c.send_only(w.OP_GET_DATA, get_body(True))
        c.send_only(w.OP_SET_DATA, set_body(second))
        frames = [c.read_reply() for _ in range(4)]
        assert [f.xid for f in frames] == [c.xid - 2, c.xid - 1, w.NOTIFICATION_XID, c.xid], (
            f"round {i}: frames {[(f.xid, f.err) for f in frames]}")
        assert w.parse_get_data(frames[1].body)[0] == first
        assert w.parse_event(frames[2].body).type == w.EV_DATA_CHANGED
    c.close()


def test_watch_on_one_member_fires_for_write_on_another(shared_ensemble3, clients):
    """Data, child and exists watches set through one member fire for writes made through the others."""
    ens = shared_ensemble3
    a, b, c = (clients([hp]) for hp in ens.hostports)
    base = uniq("ens-watch")
    a.create(base, b"0")
    a.sync(base)
    c.sync(base)
    got: dict[str, list] = {"data": [], "child": [], "exists": []}
    fired = {k: threading.Event() for k in got}

    def watcher(kind):
        def w(ev):
            got[kind].append(ev)
            fired[kind].set()
        return w

    assert a.get(base, watch=watcher("data"))[0] == b"0"
    assert c.get_children(base, watch=watcher("child")) == []
    assert a.exists(base + "/later", watch=watcher("exists")) is None
    b.set(base, b"1")
    assert fired["data"].wait(10), "data watch on member 0 did not fire for setData on member 1"
    assert (got["data"][0].type, got["data"][0].path) == ("CHANGED", base)
    assert a.get(base)[0] == b"1", "a read after the event must show the change"
    b.create(base + "/later")
    assert fired["child"].wait(10), "child watch on member 2 did not fire for a create on member 1"
    assert (got["child"][0].type, got["child"][0].path) == ("CHILD", base)
    assert fired["exists"].wait(10), "exists watch on member 0 did not fire for a create on member 1"
    assert (got["exists"][0].type, got["exists"][0].path) == ("CREATED", base + "/later")
    assert c.get_children(base) == ["later"]
    time.sleep(0.3)
    assert [len(v) for v in got.values()] == [1, 1, 1], "a one-shot watch fired more than once"


def test_sequential_names_unique_across_members(shared_ensemble3, clients):
    """Concurrent sequential creates through 3 members get distinct, gap-free sequence numbers, seen alike everywhere."""
    ens = shared_ensemble3
    cs = [clients([hp]) for hp in ens.hostports]
    base = uniq("ens-seq")
    cs[0].create(base)
    for c in cs:
        c.sync(base)
    per = 40
    names: list[list[str]] = [[] for _ in cs]
    errors = []

    def creator(i):
        try:
            for _ in range(per):
                names[i].append(cs[i].create(f"{base}/s-", f"m{i}".encode(), sequence=True))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=creator, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    flat = [n for ns in names for n in ns]
    assert len(flat) == 3 * per and len(set(flat)) == 3 * per, "duplicate sequential names"
    assert sorted(int(n[-10:]) for n in flat) == list(range(3 * per))
    for ns in names:  # one session's creates are ordered
        assert [int(n[-10:]) for n in ns] == sorted(int(n[-10:]) for n in ns)
    views = []
    for c in cs:
        c.sync(base)
        views.append(sorted(c.get_children(base)))
    assert views[0] == views[1] == views[2] == sorted(n.rsplit("/", 1)[1] for n in flat)


def test_kazoo_lock_clients_on_three_members(shared_ensemble3, clients):
    """kazoo Lock with one client per member: never two holders, and every check-and-set inside the lock succeeds."""
    ens = shared_ensemble3
    cs = [clients([hp]) for hp in ens.hostports]
    base = uniq("ens-klock")
    cs[0].create(base + "/counter", b"0", makepath=True)
    rounds = 8
    in_section, max_in, cas_fail, errors = [0], [0], [0], []
    mu = threading.Lock()

    def contender(i):
        try:
            c = cs[i]
            for _ in range(rounds):
                lock = c.Lock(base + "/lock", f"c{i}")
                assert lock.acquire(timeout=30)
                try:
                    with mu:
                        in_section[0] += 1
                        max_in[0] = max(max_in[0], in_section[0])
                    # Read on this client's own member: it must already reflect the previous holder.
                    raw, st = c.get(base + "/counter")
                    try:
                        c.set(base + "/counter", str(int(raw) + 1).encode(), version=st.version)
                    except BadVersionError:
                        with mu:
                            cas_fail[0] += 1
                    time.sleep(0.005)
                    with mu:
                        in_section[0] -= 1
                finally:
                    lock.release()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=contender, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    assert not errors, errors
    assert max_in[0] == 1
    assert cas_fail[0] == 0, f"{cas_fail[0]} check-and-sets inside the lock were refused"
    for c in cs:
        c.sync(base + "/counter")
        assert c.get(base + "/counter")[0] == str(3 * rounds).encode()


def test_kazoo_election_clients_on_three_members(shared_ensemble3, clients):
    """kazoo Election with one client per member: one leader at a time, all agree on contenders, leadership passes on."""
    ens = shared_ensemble3
    cs = [clients([hp]) for hp in ens.hostports]
    path = uniq("ens-election")
    order: list[int] = []
    leading, max_leading = [0], [0]
    mu = threading.Lock()
    done = {i: threading.Event() for i in range(3)}
    elected = threading.Condition()

    def lead(i):
        with mu:
            leading[0] += 1
            max_leading[0] = max(max_leading[0], leading[0])
        with elected:
            order.append(i)
            elected.notify_all()
        done[i].wait(60)
        with mu:
            leading[0] -= 1

    elections = [c.Election(path, f"c{i}") for i, c in enumerate(cs)]
    ts = [threading.Thread(target=e.run, args=(lead, i), daemon=True) for i, e in enumerate(elections)]
    for t in ts:
        t.start()
    for k in range(3):
        with elected:
            assert elected.wait_for(lambda: len(order) > k, 20), f"no leader #{k + 1}"
        for e in elections:
            wait_until(lambda e=e: len(e.contenders()) == 3 - k, 10, "contenders to settle")
            assert e.contenders()[0] == f"c{order[k]}", "a member reports a different leader"
            assert sorted(e.contenders()) == sorted(f"c{i}" for i in range(3) if i not in order[:k])
        time.sleep(0.2)
        assert len(order) == k + 1, "a second contender was elected while the leader still led"
        done[order[k]].set()
    for t in ts:
        t.join(10)
    assert sorted(order) == [0, 1, 2] and max_leading[0] == 1


def run_curator_ensemble(ens, test: str) -> str:
    proc = subprocess.run([CURATOR_RUN, ",".join(ens.hostports), test], capture_output=True,
                          text=True, timeout=200)
    out = proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr.strip() else "")
    print(out)
    assert proc.returncode == 0 and f"PASS {test}:" in proc.stdout, out
    return out


def test_curator_mutex_clients_on_three_members(shared_ensemble3):
    """Curator InterProcessMutex, one client per member: exclusive, and every check-and-set inside succeeds."""
    run_curator_ensemble(shared_ensemble3, "mutex")


def test_curator_leader_latch_clients_on_three_members(shared_ensemble3):
    """Curator LeaderLatch, one client per member: one leader agreed by all, handed over on close and on session end."""
    run_curator_ensemble(shared_ensemble3, "leader_latch")


# --------------------------------------------------------------------------------------------
# faults under fenced lock load


def test_leader_kill9_under_lock_load(ensemble3, clients, lock_runs, tmp_path):
    """kill -9 of the leader, twice (the second time the new one): sessions survive, no acknowledged write is lost, tokens only grow."""
    ens = ensemble3
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [0, 1, 2])
    run.wait_acks(6)
    for round_ in (1, 2):
        old = ens.leader()
        t_kill = time.time()
        ens.kill(old)
        new = ens.wait_stable(30)
        assert new != old
        after = run.wait_acks(6, since=t_kill, timeout=30)
        failover = min(e["t"] for _, e in after) - t_kill
        print(f"round {round_}: leader {old + 1} killed; member {new + 1} leads; "
              f"first acknowledged write after {failover:.2f}s")
        ens.start(old)
        ens.wait_stable(30)
        run.wait_acks(4, since=time.time())
    run.finish()
    run.verify()


def test_follower_kill9_under_lock_load(ensemble3, clients, lock_runs, tmp_path):
    """kill -9 of a follower: the leader stays, its clients move, nothing acknowledged is lost, and it catches up on restart."""
    ens = ensemble3
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [0, 1, 2])
    run.wait_acks(6)
    leader = ens.leader()
    victim = [i for i in range(3) if i != leader][0]
    t_kill = time.time()
    ens.kill(victim)
    run.wait_acks(6, since=t_kill, timeout=30)
    assert ens.wait_stable(10) == leader, "the leader changed when a follower died"
    ens.start(victim)
    ens.wait_stable(30)
    run.wait_acks(4, since=time.time())
    run.finish()
    run.verify()


def test_two_of_five_kill9_under_lock_load(ensemble5, clients, lock_runs, tmp_path):
    """kill -9 of the leader and a follower of 5: the other 3 carry on; nothing acknowledged is lost; both rejoin."""
    ens = ensemble5
    leader = ens.leader()
    follower = [i for i in range(5) if i != leader][0]
    survivor = [i for i in range(5) if i not in (leader, follower)][0]
    # Workers start on the two victims and on a survivor.
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [leader, follower, survivor])
    run.wait_acks(6)
    t_kill = time.time()
    ens.kill(leader)
    ens.kill(follower)
    new = ens.wait_stable(30)
    assert new not in (leader, follower)
    after = run.wait_acks(6, since=t_kill, timeout=30)
    print(f"first acknowledged write {min(e['t'] for _, e in after) - t_kill:.2f}s after the kills")
    ens.start(leader)
    ens.start(follower)
    ens.wait_stable(30)
    run.wait_acks(4, since=time.time())
    run.finish()
    run.verify()


def rolling_restart(ens, run: LockRun, first_acks_timeout: float = 30.0) -> list[list]:
    """SIGTERM and restart each member in turn; writes must go on while it is down and after; then verify."""
    run.wait_acks(6, timeout=first_acks_timeout)
    for i in range(ens.n):
        t = time.time()
        ens.stop(i)
        ens.wait_stable(30)
        run.wait_acks(3, since=t, timeout=30)
        ens.start(i)
        ens.wait_stable(30)
        run.wait_acks(3, since=time.time(), timeout=30)
    run.finish()
    return run.verify()


def test_rolling_restart_under_lock_load(ensemble3, clients, lock_runs, tmp_path):
    """Restart every member in turn (SIGTERM, start) while lock clients run: writes continue throughout, nothing is lost."""
    run = start_lock_run(ensemble3, tmp_path, clients, lock_runs, [0, 1, 2])
    rolling_restart(ensemble3, run)


def test_rolling_restart_under_curator_lock_load(curator_built, ensemble3, clients, lock_runs, tmp_path):
    """The same with Curator InterProcessMutex clients (FencedLockWorker.java), client i starting on member i."""
    ens = ensemble3
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [0, 1, 2], worker="curator")
    hist = rolling_restart(ens, run, first_acks_timeout=60)  # three JVMs start on 2 cores
    for w in range(3):
        first = next(e for e in run.events[w] if e["ev"] == "session")
        assert first["server"] == ens.hostports[w], f"worker {w} first connected to {first['server']}, not member {w}"
        assert any(e["ev"] == "done" for e in run.events[w]), f"worker {w} did not end cleanly; {run.summary()}"
    susp = [e["suspended_s"] for _, e in run.all_events("state") if e.get("suspended_s") is not None]
    acks = run.all_events("ack")
    print(f"curator rolling restart: {len(hist)} fence entries, {len(acks)} acknowledged "
          f"({[sum(1 for w, _ in acks if w == k) for k in range(3)]} per worker), "
          f"{len(run.all_events('acquired'))} holds, {len(run.all_events('retry'))} retried connection errors, "
          f"{len(run.all_events('error'))} errors, {len(susp)} reconnects, longest SUSPENDED "
          f"{max(susp, default=0):.2f}s (Curator declares LOST itself after the {SESSION_TIMEOUT:.0f}s session timeout)")


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_sigstopped_lock_holder_expires_and_late_write_rejected(ensemble3, clients, lock_runs, tmp_path, role):
    """A lock holder frozen (SIGSTOP) past its session timeout loses the lock; its late check-and-set is refused."""
    ens = ensemble3
    leader = ens.leader()
    target = leader if role == "leader" else (leader + 1) % 3
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [])
    a = run.add_worker(rotated(ens.hostports, target), pause_after_read_s=2.0, writes_per_hold=1, max_holds=1)
    read = run.wait_event(lambda e: e["ev"] == "read", 20, "the holder to read the fence")
    os.kill(run.procs[a].pid, signal.SIGSTOP)
    t_stop = time.time()
    a_token = read["token"]
    b = run.add_worker(rotated(ens.hostports, (target + 1) % 3))
    acq = run.wait_event(lambda e: e["ev"] == "acquired" and e["token"] != a_token, 25,
                         "a second client to get the lock")
    waited = acq["t"] - t_stop
    assert waited >= SESSION_TIMEOUT - 1.5, f"lock passed on {waited:.2f}s after the holder froze: before its session expired"
    run.wait_acks(2, since=acq["t"], timeout=20)
    os.kill(run.procs[a].pid, signal.SIGCONT)
    rej = run.wait_event(lambda e: e["ev"] == "rejected", 30, "the frozen holder's late write to be refused")
    assert rej["entry"][0] == a_token and rej["fence_last"][0] > a_token
    run.wait_event(lambda e: e["ev"] == "done", 30, "the old holder to end")
    lost = [e for w, e in run.all_events("state") if w == a and e["state"] == "LOST"]
    assert lost, "the frozen holder never saw its session expire"
    print(f"lock passed on {waited:.2f}s after SIGSTOP; late write refused: {rej}")
    run.finish()
    hist = run.verify(allow_rejected_workers=(a,), allow_lost_workers=(a,))
    assert rej["entry"] not in hist
    assert all(e[1] == b for e in hist), "only the second client's writes were accepted"


# --------------------------------------------------------------------------------------------
# ephemerals and sessions across member failures


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_ephemeral_survives_when_client_moves_to_another_member(ensemble3, clients, role):
    """The client's member is killed; it reconnects elsewhere within the timeout, keeps its session and ephemeral."""
    ens = ensemble3
    leader = ens.leader()
    target = leader if role == "leader" else (leader + 1) % 3
    other = (target + 1) % 3
    states: list[str] = []
    c = clients(rotated(ens.hostports, target))
    c.add_listener(lambda s: states.append(s))
    assert connected_port(c) == ens.members[target].port
    path = uniq("ens-eph")
    c.create(path, b"mine", ephemeral=True)
    sid = c.client_id[0]
    obs = clients([ens.hostports[other]])
    t_kill = time.time()
    ens.kill(target)
    wait_until(lambda: c.state == KazooState.CONNECTED and connected_port(c) not in (None, ens.members[target].port),
               3 * SESSION_TIMEOUT, "the client to reconnect to another member")
    moved = time.time() - t_kill
    time.sleep(max(0.0, t_kill + 2 * SESSION_TIMEOUT - time.time()))
    obs.sync(path)
    st = obs.exists(path)
    assert st is not None, f"ephemeral gone {2 * SESSION_TIMEOUT}s after its member died, though the client reconnected in {moved:.2f}s"
    assert st.ephemeralOwner == sid
    assert c.client_id[0] == sid and KazooState.LOST not in states, f"session changed: {states}"
    assert c.get(path)[0] == b"mine"
    c.set(path, b"still")
    c.stop()
    obs.sync(path)
    assert obs.exists(path) is None, "closing the session did not delete its ephemeral"


def test_follower_back_after_long_absence_catches_up_from_snapshot(clients):
    """A follower is down while the others write far past snapCount and compact their logs; restarted, it catches up (from a snapshot) and serves every write."""
    n_writes = 1500  # one log entry each (sequential creates): well past snapCount + the 1000 entries kept
    with Ensemble(3, name="ens-snap", extra_cfg={"snapCount": 200}) as ens:
        leader = ens.leader()
        away = (leader + 1) % 3
        c = clients([ens.hostports[leader]])
        base = uniq("ens-snap")
        c.create(base, b"")
        c.create(f"{base}/before", b"b")
        ens.kill(away)
        for i in range(n_writes):
            c.create(f"{base}/n{i:05d}", str(i).encode())
        c.set(base, b"last")
        ens.start(away)
        ens.wait_stable(60)
        f = clients([ens.hostports[away]])
        f.sync(base)
        assert f.get(base)[0] == b"last"
        kids = f.get_children(base)
        assert len(kids) == n_writes + 1, f"{len(kids)} children on the returning follower"
        for i in (0, n_writes // 2, n_writes - 1):
            assert f.get(f"{base}/n{i:05d}")[0] == str(i).encode()
        f.create(f"{base}/after", b"a")  # and it takes writes
        c.sync(base)
        assert c.exists(f"{base}/after") is not None
        if WARDEN:
            log = open(ens.members[away].log_path, errors="replace").read()
            assert "snapshot installed from the leader" in log, "the follower caught up without a snapshot: " + log[-1500:]
            llog = open(ens.members[leader].log_path, errors="replace").read()
            assert "snapshot written" in llog


@pytest.mark.skipif(not WARDEN, reason="checks Warden's own log lines")
def test_a_down_member_is_logged_once_not_per_heartbeat(ensemble3, clients):
    """A member killed under writes: the leader logs it once (openraft alone warned ~40 times a
    second for as long as it was down), and logs it back when it returns."""
    ens = ensemble3
    leader = ens.leader()
    away = ens.followers()[0]
    c = clients([ens.hostports[leader]])
    path = uniq("ens-down-log")
    c.create(path, b"x")

    def lines() -> list[str]:
        with open(ens.members[leader].log_path, errors="replace") as f:
            return f.read().splitlines()

    start = len(lines())
    ens.kill(away)
    deadline = time.monotonic() + 3
    i = 0
    while time.monotonic() < deadline:  # writes keep replication to the dead member retrying
        c.set(path, str(i).encode())
        i += 1
        time.sleep(0.01)
    new = lines()[start:]
    down = [line for line in new if "peer does not answer" in line]
    assert len(down) == 1, f"{len(down)} 'peer does not answer' lines:\n" + "\n".join(new[-20:])
    assert len(new) <= 10, f"the leader logged {len(new)} lines in 3 s with one member down:\n" + "\n".join(new[:20])
    ens.start(away)
    ens.wait_stable(30)
    wait_until(lambda: any("peer answers again" in line for line in lines()[start:]), 10,
               "the leader to log the member back")


def _votes_saved_slowly(ens) -> int:
    n = 0
    for m in ens.members:
        with open(m.log_path, errors="replace") as f:
            n += "saving the Raft vote took over half the time a candidate waits" in f.read()
    return n


@pytest.mark.skipif(not WARDEN, reason="emulates a slow disk under Warden's process")
def test_slow_disk_ensemble_elects_and_fails_over_with_default_timing(tmp_path, monkeypatch, clients):
    """Every fsync 80 ms slower (an LD_PRELOAD shim), default timing: a vote's answer is sent
    once the vote is durable (one fdatasync), ~80 ms after the request, later than the 75 ms
    a candidate used to wait for it (such an ensemble never elected). The candidate now waits
    for answers for just under the leader lease (149 ms; 80 ms leaves room for a slow real
    fsync on a busy test machine) and nobody starts a new term meanwhile, so the ensemble
    elects, takes writes, and elects again after kill -9 of its leader."""
    harness.slow_disk(monkeypatch, tmp_path, 80)
    ens = Ensemble(3, name="slowdisk-default").start(timeout=60)
    try:
        leader = ens.leader()
        f = (leader + 1) % 3
        c = clients([ens.hostports[f]], timeout=10.0)
        path = uniq("ens-slow-disk")
        c.create(path, b"durable")
        ens.kill(leader)
        t0 = time.monotonic()
        wait_until(lambda: _write_ok(c, path), 30, "a write through a survivor after kill -9 of the leader")
        print(f"slow disk: a write through a survivor {time.monotonic() - t0:.2f}s after kill -9 of the leader")
        assert c.get(path)[0] == b"after"
    finally:
        ens.close()


def _write_ok(c, path) -> bool:
    try:
        c.set(path, b"after")
        return True
    except Exception:
        return False


@pytest.mark.skipif(not WARDEN, reason="checks Warden's own log line and config key")
def test_slow_disk_ensemble_warns_then_elects_with_a_longer_election_timeout(tmp_path, monkeypatch, clients):
    """Every fsync 300 ms slower: with the default timing a vote's answer comes later than
    the 149 ms a candidate waits for it, so no election completes, and each member says so
    and names raft.electionTimeoutMs; with that key at 600 the ensemble elects and takes writes."""
    harness.slow_disk(monkeypatch, tmp_path, 300)
    slow = Ensemble(3, name="slowdisk-300")
    try:
        for m in slow.members:
            m.start(wait=False)
        wait_until(lambda: _votes_saved_slowly(slow) >= 2, 20,
                   "members to warn that their votes are saved too slowly")
        for m in slow.members:  # whichever members warned (not always the first) name the key
            with open(m.log_path, errors="replace") as f:
                text = f.read()
            if "saving the Raft vote took over half the time" in text:
                assert "raise raft.electionTimeoutMs" in text
    finally:
        slow.close()
    tuned = Ensemble(3, name="slowdisk-tuned", extra_cfg={"raft.electionTimeoutMs": "600"}).start(timeout=90)
    try:
        leader = tuned.leader()
        c = clients(tuned.hostports, timeout=10.0)
        path = uniq("ens-slow-disk")
        c.create(path, b"durable")
        f = clients([tuned.hostports[(leader + 1) % 3]], timeout=10.0)
        f.sync(path)
        assert f.get(path)[0] == b"durable"
    finally:
        tuned.close()


@pytest.mark.skipif(not WARDEN, reason="raft.* are Warden's own keys")
def test_an_election_timeout_below_the_heartbeat_stops_start_up_naming_the_key():
    """raft.electionTimeoutMs not above raft.heartbeatMs: start-up stops with a message naming
    the key (openraft's own check named fields that appear in no zoo.cfg)."""
    srv = harness.Server(None, name="raft-timing-bad",
                         extra_cfg={"raft.heartbeatMs": "20", "raft.electionTimeoutMs": "5"})
    try:
        with pytest.raises(harness.ServerStartError) as e:
            srv.start(timeout=20)
        assert "raft.electionTimeoutMs" in str(e.value) and "heartbeat" in str(e.value), str(e.value)[-500:]
    finally:
        srv.close()


def test_leader_sigterm_hands_over_and_clients_keep_sessions(ensemble3, clients):
    """SIGTERM to the leader: it exits cleanly, another member leads, its client moves with session and ephemeral."""
    ens = ensemble3
    leader = ens.leader()
    c = clients(rotated(ens.hostports, leader))
    assert connected_port(c) == ens.members[leader].port
    states: list[str] = []
    c.add_listener(lambda s: states.append(s))
    path = uniq("ens-term")
    c.create(path, b"mine", ephemeral=True)
    sid = c.client_id[0]
    t0 = time.monotonic()
    ens.stop(leader)
    if WARDEN:  # the JVM exits 143 on SIGTERM
        assert ens.members[leader].proc.returncode == 0, f"exit code {ens.members[leader].proc.returncode} after SIGTERM"
    new_leader = ens.wait_stable(30)
    assert new_leader != leader
    wait_until(lambda: c.state == KazooState.CONNECTED and connected_port(c) != ens.members[leader].port,
               3 * SESSION_TIMEOUT, "the client to move to another member")
    c.set(path, b"after")
    print(f"SIGTERM -> new leader member {new_leader + 1}, client writing again after {time.monotonic() - t0:.2f}s")
    assert c.client_id[0] == sid and KazooState.LOST not in states, f"session changed: {states}"
    for i in range(3):
        if i == leader:
            continue
        o = clients([ens.hostports[i]])
        o.sync(path)
        assert o.get(path)[0] == b"after"
    if WARDEN:
        log = open(ens.members[leader].log_path, errors="replace").read()
        # Handed over by openraft's transfer-leader while the peer port still answered, not
        # after the lease ran out.
        assert "leadership handed over" in log and "stopped" in log, log[-2000:]
    ens.start(leader)
    ens.wait_stable(30)


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_ephemeral_vanishes_after_timeout_when_client_cannot_reconnect(ensemble3, clients, role):
    """The client's only member is killed: its ephemeral stays within the session timeout, then goes."""
    ens = ensemble3
    leader = ens.leader()
    target = leader if role == "leader" else (leader + 1) % 3
    other = (target + 1) % 3
    c = clients([ens.hostports[target]])  # knows only this member: it cannot move
    path = uniq("ens-eph-gone")
    c.create(path, b"x", ephemeral=True)
    obs = clients([ens.hostports[other]])
    assert obs.exists(path) is not None
    # Poll rather than watch: kazoo drops its watches (firing a NONE event) whenever its own
    # connection drops, which the observer's member may do while a new leader is elected.
    t_kill = time.time()
    ens.kill(target)
    seen_at_1_5 = None
    while True:
        now = time.time() - t_kill
        try:
            obs.sync(path)
            present = obs.exists(path) is not None
        except (KazooException, KazooTimeoutError):
            present = None  # the observer is reconnecting
        if seen_at_1_5 is None and 1.5 <= now <= SESSION_TIMEOUT - 1.0 and present is not None:
            seen_at_1_5 = present
            assert present, f"ephemeral deleted {now:.2f}s after the kill, before its session could time out"
        if present is False:
            break
        assert now < 3 * SESSION_TIMEOUT + 2, "ephemeral of a client that cannot reconnect never went away"
        time.sleep(0.1)
    after = time.time() - t_kill
    print(f"ephemeral deleted {after:.2f}s after its client's member was killed")
    assert SESSION_TIMEOUT - 2.0 <= after <= SESSION_TIMEOUT + 2 * harness.TICK_TIME_MS / 1000 + 2.5, after
    c.stop()


_FROZEN_CLIENT = r"""
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(sys.argv[1], timeout=float(sys.argv[3]))
zk.start(timeout=15)
zk.create(sys.argv[2], b"frozen", ephemeral=True)
print(zk.client_id[0], flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_ephemeral_of_frozen_client_vanishes_after_timeout(ensemble3, clients, role):
    """A client process frozen with SIGSTOP (its member stays up) loses its session and ephemeral after the timeout."""
    ens = ensemble3
    leader = ens.leader()
    target = leader if role == "leader" else (leader + 1) % 3
    path = uniq("ens-frozen")
    proc = subprocess.Popen([sys.executable, "-c", _FROZEN_CLIENT, ens.hostports[target], path,
                             str(SESSION_TIMEOUT)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    harness._LIVE[proc.pid] = proc
    try:
        sid = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGSTOP)
        t_stop = time.time()
        obs = clients([ens.hostports[(target + 1) % 3]])
        time.sleep(1.0)
        obs.sync(path)
        st = obs.exists(path)
        assert st is not None and st.ephemeralOwner == sid, "ephemeral gone before the session timed out"
        while True:
            obs.sync(path)
            if obs.exists(path) is None:
                break
            assert time.time() - t_stop < 3 * SESSION_TIMEOUT + 3, (
                f"ephemeral of a client frozen on the {role} still there after "
                f"{time.time() - t_stop:.1f}s (session timeout {SESSION_TIMEOUT}s)")
            time.sleep(0.1)
        after = time.time() - t_stop
        print(f"frozen client's ephemeral deleted {after:.2f}s after SIGSTOP")
        assert after >= SESSION_TIMEOUT - 2.0
    finally:
        proc.kill()
        proc.wait()
        harness._LIVE.pop(proc.pid, None)


# --------------------------------------------------------------------------------------------
# a member cut off from the majority


def raw_session_attempt(hostport: str, timeout: float = 3.0) -> str:
    """Try to open a session with a ConnectRequest; say how the member answered."""
    host, port = hostport.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as e:
        return f"refused ({e.__class__.__name__})"
    try:
        body = struct.pack(">iqiq", 0, 0, 4000, 0) + struct.pack(">i", 16) + b"\0" * 16 + b"\0"
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return "closed"
            head += chunk
        (n,) = struct.unpack(">i", head)
        resp = s.recv(n)
        _, to, sid = struct.unpack(">iiq", resp[:16])
        return "session" if sid != 0 else "closed"
    except socket.timeout:
        return "no answer"
    except OSError as e:
        return f"closed ({e.__class__.__name__})"
    finally:
        s.close()


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_member_cut_off_from_majority_stops_serving(ensemble3, clients, role):
    """The two other members are SIGSTOPped: this one drops its clients and refuses sessions; after SIGCONT it serves."""
    ens = ensemble3
    leader = ens.leader()
    x = leader if role == "leader" else (leader + 1) % 3
    others = [i for i in range(3) if i != x]
    states: list[tuple[float, str]] = []
    c = clients([ens.hostports[x]])
    c.add_listener(lambda s: states.append((time.time(), s)))
    path = uniq("ens-part")
    c.create(path, b"before")
    t0 = time.time()
    for i in others:
        ens.sigstop(i)
    try:
        # Writes sent now can reach no quorum: they must not be acknowledged. (Their outcome is
        # unknown to the client, so they may still be applied after the heal: ZooKeeper does.)
        writes = {"create": c.create_async(path + "/during", b"d"), "set": c.set_async(path, b"during")}
        wait_until(lambda: any(s == KazooState.SUSPENDED for _, s in states), 20,
                   "the isolated member to drop its client")
        for name, res in writes.items():
            res.wait(10)
            assert not res.successful(), f"{name} acknowledged by a member cut off from the majority"
        dropped = next(t for t, s in states if s == KazooState.SUSPENDED) - t0
        wait_until(lambda: srvr_mode(ens.hostports[x]) == "not serving", 10, "srvr to say not serving")
        how = raw_session_attempt(ens.hostports[x])
        assert how != "session", "the isolated member opened a new session"
        with pytest.raises(KazooTimeoutError):
            clients([ens.hostports[x]], start_timeout=3)
        assert c.state != KazooState.CONNECTED
        print(f"isolated {role} dropped its client after {dropped:.2f}s; a new session attempt: {how}")
    finally:
        for i in others:
            ens.sigcont(i)
    ens.wait_stable(30)
    assert srvr_mode(ens.hostports[x]) in ("leader", "follower")
    fresh = clients([ens.hostports[x]])
    fresh.set(path, b"after")
    fresh.sync(path)
    assert fresh.get(path)[0] == b"after"
    for i in others:
        o = clients([ens.hostports[i]])
        o.sync(path)
        assert o.get(path)[0] == b"after"


def raft_term(hostport: str) -> int | None:
    """Warden's Raft term from `mntr` (zk_raft_term); None for ZooKeeper, which has no such line."""
    for line in harness.four_letter(hostport, "mntr").splitlines():
        if line.startswith("zk_raft_term"):
            return int(line.split()[1])
    return None


def test_paused_follower_does_not_depose_the_leader(ensemble3, clients):
    """A follower frozen (SIGSTOP) well past the election timeout, as by a long GC or VM pause,
    is thawed while writes go on: it rejoins as a follower, and the leader keeps its place.
    Warden: its Raft term is unchanged too (a paused member asks the others before it
    campaigns, and they still hear their leader). Without that pre-vote the thawed follower
    bumped its term on waking and deposed the leader every time."""
    ens = ensemble3
    leader = ens.leader()
    f = (leader + 1) % 3
    terms = [raft_term(ens.hostports[i]) for i in range(3)]
    c = clients([ens.hostports[leader]])
    path = uniq("paused-follower")
    c.create(path, b"")
    for trial in range(2):
        ens.sigstop(f)
        try:
            for k in range(5):
                c.create(f"{path}/t{trial}-{k}", b"x")
                time.sleep(0.3)  # 1.5 s frozen: 5x the 300 ms it takes a follower to give up
        finally:
            ens.sigcont(f)
        time.sleep(2)
        assert ens.wait_stable(30) == leader, f"trial {trial}: the thawed follower's return moved the leadership"
        assert c.state == KazooState.CONNECTED
        o = clients([ens.hostports[f]])
        o.sync(path)
        assert len(o.get_children(path)) == 5 * (trial + 1), f"trial {trial}: the thawed follower missed writes"
    after = [raft_term(ens.hostports[i]) for i in range(3)]
    assert after == terms, f"Raft terms moved: {terms} -> {after}"


def test_leader_frozen_by_sigstop_under_lock_load(ensemble3, clients, lock_runs, tmp_path):
    """The leader is frozen (SIGSTOP) for twice the session timeout: the others take over, sessions survive; after SIGCONT it rejoins."""
    ens = ensemble3
    leader = ens.leader()
    others = [i for i in range(3) if i != leader]
    run = start_lock_run(ens, tmp_path, clients, lock_runs, [leader, others[0], others[1]])
    run.wait_acks(6)
    t_stop = time.time()
    ens.sigstop(leader)
    try:
        wait_until(lambda: sorted(ens.mode(i) for i in others) == ["follower", "leader"], 20,
                   "the other two to elect a leader")
        after = run.wait_acks(6, since=t_stop, timeout=30)
        first = min(e['t'] for _, e in after) - t_stop
        print(f"first acknowledged write {first:.2f}s after freezing the leader")
        if ens.kind == "warden":
            # A follower fails its forward to the frozen leader once another is elected, so
            # writes resume well before a lock waiter's 10 s acquire timeout (they used to
            # wait out the 10 s forward timeout).
            assert first < 8.0, f"first acknowledged write {first:.2f}s after freezing the leader"
        time.sleep(max(0.0, t_stop + 2 * SESSION_TIMEOUT - time.time()))
    finally:
        ens.sigcont(leader)
    t_cont = time.time()
    ens.wait_stable(30)
    run.wait_acks(6, since=t_cont, timeout=30)
    run.finish()
    run.verify()


def test_one_member_ensemble_keeps_serving_when_idle(clients):
    """A zoo.cfg with a single server.1 line: that member is its own quorum and keeps serving
    after idling longer than the leader lease (Warden suspended it for good once it idled two
    leases: nobody acknowledged a sole voter, and no client could connect to write again)."""
    ens = Ensemble(1, name="ens-one")
    try:
        # ZooKeeper runs a one-server configuration standalone (standaloneEnabled), which
        # Ensemble.start's wait for a leader would not accept.
        ens.members[0].start(wait=False)
        deadline = time.monotonic() + 60
        while srvr_mode(ens.hostports[0]) not in ("standalone", "leader"):
            assert time.monotonic() < deadline, srvr_mode(ens.hostports[0])
            time.sleep(0.1)
        path = uniq("one-member")
        zk = clients(ens.hostports[0])
        zk.create(path, b"before")
        zk.stop()
        # The serving check allows max(2 leases, one tick) = 2 s since the last acknowledgement.
        time.sleep(3.5)
        assert srvr_mode(ens.hostports[0]) in ("standalone", "leader"), srvr_mode(ens.hostports[0])
        zk = clients(ens.hostports[0])
        assert zk.get(path)[0] == b"before"
        zk.set(path, b"after")
        time.sleep(3.5)
        assert zk.get(path)[0] == b"after"
        assert zk.state == KazooState.CONNECTED
    finally:
        ens.close()
