"""Client workloads of the nemesis suite, and the checks of their histories.

Owns: the clients that load an ensemble while faults are injected, what they record, and
what their histories must satisfy. Every client is a real kazoo client with a session of its
own, pinned to ONE member (`hosts=` that member only): when its member is cut off, frozen or
dead, its ops fail or hang rather than move elsewhere. Every op is tried once: kazoo's
connection retry only reconnects (to the same member), nothing re-sends a write, and each
wait is bounded (`op_timeout`). A write whose answer is ConnectionLoss, a timeout or
SessionExpired is "info" (it may or may not have taken effect); a read that fails is "fail"
and tells nothing. Every written value is unique.

Workloads (each a `Workload`: setup(admin), start(), stop(), final(hostports), check()):

  Registers  a few keys at a time (fresh ones every `rotate` s, Jepsen's independent keys,
             so each key's history stays small enough to search); ops qread (a quorum
             barrier -- a multi holding only check(path, -1), which the leader must commit
             with a quorum -- then get(path) on the same session), read (sync(path) then
             get(path)), pread (plain get), write (set(v, -1)), cas (set(v, version) with the
             version of this client's last read of the key; BadVersion -> "fail").
             Checks: every key's qread/write/cas history is linearizable (checker.py, with
             final quorum reads through every member appended); every read of any kind keeps
             ZooKeeper's session promise -- within one session no read shows a key older than
             the newest state the session has already seen (its high-water zxid, from its
             reads and its own writes); no read returns a value nobody wrote, or an
             acknowledged value with another version. On ZooKeeper sync+get reads are also
             put through the linearizability search, but a failure there is reported
             (final_info "stale_synced_reads"), not counted: ZooKeeper's sync is not a quorum
             operation, and its deposed leader, resumed after a SIGSTOP, answers sync+get with
             its old state until it notices (seen with seed 3114867). On Warden (strict_sync)
             sync+get reads are checked like qreads: its sync is a read index a quorum
             confirms; with readMode=linearizable (strict_plain) plain reads are too.
  SetAdds    sequential creates under <base>/set/e- with unique data. After the heal, every
             member (after sync) must list the same children; every acknowledged create is
             there (at the path it was acknowledged with), no value never attempted, no value
             twice; an "info" create may be there or not.
  Locks      kazoo Lock holders. A holder's fencing token is its lock node's czxid; it writes
             the resource through a transaction check(lock node, version) + set_data(resource,
             "token:process:n"). Checks: in the order the writes were applied (their returned
             mzxid), tokens never decrease (a write with token t after one with t' > t means
             two holders interleaved); mzxids are distinct; the resource ends at a version
             between #ok and #ok+#info writes, holding the last acknowledged value or an
             "info" one.

An anomaly is a dict {workload, kind, message, evidence: [lines]} with the smallest evidence
that shows it.
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import time
from typing import Callable, Optional

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    LockTimeout,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import RetryFailedError

import checker
from history import History, OpRecord

# kazoo logs every reconnect attempt; a run makes thousands. Keep them out of the output.
_KAZOO_LOG = logging.getLogger("nemesis.kazoo")
_KAZOO_LOG.setLevel(logging.CRITICAL)
_KAZOO_LOG.propagate = False

SESSION_TIMEOUT = 6.0  # seconds (ZooKeeper and Warden negotiate 6000 ms with tickTime 2000)
OP_TIMEOUT = 5.0  # seconds a client waits for one answer before calling the op "info"


def make_client(hostport: str, session_timeout: float = SESSION_TIMEOUT, command_retry: Optional[dict] = None,
                start_timeout: float = 20.0) -> KazooClient:
    """A started kazoo client pinned to one member. Connection retry: reconnect to that member
    forever (it only ever re-establishes the connection); command retry: none (max_tries=1:
    KazooClient.retry gives up on the first ConnectionLoss) unless `command_retry` says."""
    c = KazooClient(
        hosts=hostport,
        timeout=session_timeout,
        randomize_hosts=False,
        connection_retry=dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5),
        command_retry=command_retry or dict(max_tries=1),
        logger=_KAZOO_LOG,
    )
    c.start(timeout=start_timeout)
    return c


def close_client(c: KazooClient) -> None:
    try:
        c.stop()
    except Exception:  # noqa: BLE001 - best effort at teardown
        pass
    try:
        c.close()
    except Exception:  # noqa: BLE001
        pass


def session_of(c: KazooClient) -> Optional[int]:
    cid = c.client_id
    return cid[0] if cid else None


def err(e: BaseException) -> str:
    return f"{type(e).__name__}{e.args if e.args else ''}"


def synced_listing(hostports: list[str], parent: str, read: Callable, keep: Callable, errors: list[str],
                   what: str) -> dict:
    """Every member's children of `parent` after sync: {member: {path: keep(result)}}, with
    `read(zk, path)` an async read of one child and `keep` its value (None drops the child)."""
    views = {}
    for m, hp in enumerate(hostports):
        if hp is None:  # a member that is not running (see run.py)
            continue
        zk = make_client(hp)
        try:
            zk.sync(parent)
            names = zk.get_children(parent)
            pending = [(f"{parent}/{nm}", read(zk, f"{parent}/{nm}")) for nm in names]
            view = {}
            for path, r in pending:
                value = keep(r.get(timeout=30))
                if value is not None:
                    view[path] = value
            views[m] = view
        except (KazooException, KazooTimeoutError) as e:
            errors.append(f"final read of the {what} on member {m + 1}: {err(e)}")
        finally:
            close_client(zk)
    return views


def anomaly(workload: str, kind: str, message: str, evidence: list[str]) -> dict:
    return {"workload": workload, "kind": kind, "message": message, "evidence": evidence}


class Workload:
    """Client threads against the members' hostports; subclasses define `client_loop`."""

    name = "?"
    write_types: tuple = ()
    op_types: tuple = ()

    def __init__(self, hostports: list[str], history: History, base: str, rng: random.Random, clients: int,
                 op_timeout: float = OP_TIMEOUT, pace: tuple = (0.005, 0.03)):
        self.hostports = hostports
        self.history = history
        self.base = base
        self.rng = random.Random(rng.random())
        self.n_clients = clients
        self.op_timeout = op_timeout
        self.pace = pace
        self.halt = threading.Event()
        self.threads: list[threading.Thread] = []
        self.clients: list[KazooClient] = []
        self.errors: list[str] = []  # unexpected exceptions in client threads (harness bugs)
        self.final_info: dict = {}
        self.offset = 0  # client c is pinned to member (c + offset) % n

    # -- lifecycle -----------------------------------------------------------------------
    def setup(self, admin: KazooClient) -> None:
        raise NotImplementedError

    def member_of(self, c: int) -> int:
        return (c + self.offset) % len(self.hostports)

    def start(self) -> None:
        for c in range(self.n_clients):
            m = self.member_of(c)
            self.clients.append(self._client(self.hostports[m]))
        for c in range(self.n_clients):
            t = threading.Thread(target=self._run, args=(c,), name=f"{self.name}-{c}", daemon=True)
            self.threads.append(t)
            t.start()

    def _client(self, hostport: str) -> KazooClient:
        return make_client(hostport)

    def _run(self, c: int) -> None:
        rng = random.Random(self.rng.random() + c)
        try:
            self.client_loop(c, self.clients[c], rng)
        except Exception as e:  # noqa: BLE001 - recorded, reported by run.py
            import traceback
            self.errors.append(f"{self.name} client {c}: {err(e)}\n{traceback.format_exc()}")

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every client thread to end after its current op (each op is bounded)."""
        self.halt.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            self.errors.append(f"{self.name}: client threads still running {timeout:.0f}s after stop: {stuck}")

    def close(self) -> None:
        for c in self.clients:
            close_client(c)

    def wait_connected(self, zk: KazooClient, rng: random.Random) -> bool:
        """True if connected now; otherwise sleeps a little (ops sent while disconnected are
        queued by kazoo and only add indeterminate ops) and returns False."""
        if zk.state == KazooState.CONNECTED:
            return True
        self.halt.wait(0.05 + rng.random() * 0.05)
        return False

    def sleep(self, rng: random.Random) -> None:
        self.halt.wait(rng.uniform(*self.pace))

    def diagnose(self) -> list[str]:
        return []

    def stacks(self) -> list[str]:
        """Where each client thread is now (for a workload that stopped making progress)."""
        import sys
        import traceback
        frames = sys._current_frames()
        out = []
        for t in self.threads:
            f = frames.get(t.ident)
            if f is not None:
                out.append(f"thread {t.name}: " + " <- ".join(
                    f"{fs.name}:{fs.lineno}" for fs in reversed(traceback.extract_stack(f)[-8:])))
        return out

    def final(self, hostports: list[str | None]) -> None:
        """After the heal, with the ensemble stable: the final reads the checks need, through
        every member whose host:port is given (None: a member not running, skipped; member
        numbers are positions in the list)."""

    def check(self) -> list[dict]:
        raise NotImplementedError

    def counts(self) -> dict:
        return self.history.counts(self.op_types)


# --------------------------------------------------------------------------------------------
# registers


INIT = b"init"


class Registers(Workload):
    name = "registers"
    write_types = ("write", "cas")
    op_types = ("qread", "read", "pread", "write", "cas")

    def __init__(self, *a, keys: int = 3, rotate: float = 6.0, horizon: float = 240.0,
                 strict_sync: bool = False, strict_plain: bool = False, **kw):
        super().__init__(*a, **kw)
        # strict_sync: sync+get reads must be linearizable too (Warden promises it: its sync
        # is a read-index round confirmed by a quorum). strict_plain: so must plain reads
        # (Warden's readMode=linearizable).
        self.strict_types = {"qread", "write", "cas"} | ({"read"} if strict_sync else set()) \
            | ({"pread"} if strict_plain else set())
        # Jepsen's "independent keys": every `rotate` seconds the clients move on to fresh
        # keys, so each key's history stays short enough for the linearizability search
        # (in-doubt writes nobody read make it exponential in their number).
        self.rotate = rotate
        self.epochs = max(1, int(horizon / rotate) + 1)
        self.key_sets = [[f"{self.base}/reg/e{e:03d}-k{i}" for i in range(keys)] for e in range(self.epochs)]
        self.keys = [k for ks in self.key_sets for k in ks]
        self.t_start = time.monotonic()
        self.check_budget = 60.0  # seconds per key
        self.missing: list[str] = []  # ops that found a key missing (see setup)

    def setup(self, admin: KazooClient) -> None:
        admin.create(f"{self.base}/reg", b"", makepath=True)
        for k in self.keys:
            admin.create_async(k, INIT)
        admin.sync(f"{self.base}/reg")
        missing = [k for k in self.keys if admin.exists(k) is None]
        assert not missing, f"setup: {len(missing)} register keys not created"
        # Every member holds every key before the clients start, and keys are never deleted:
        # from here on, NoNode for a key from any member is a member serving lost state.
        for m, hp in enumerate(self.hostports):
            zk = make_client(hp)
            try:
                zk.sync(f"{self.base}/reg")
                pending = [(k, zk.exists_async(k)) for k in self.keys]
                lacking = [k for k, r in pending if r.get(timeout=30) is None]
                assert not lacking, f"setup: member {m + 1} lacks {len(lacking)} register keys after sync"
            finally:
                close_client(zk)

    def start(self) -> None:
        self.t_start = time.monotonic()
        super().start()

    def current_keys(self) -> list[str]:
        e = int((time.monotonic() - self.t_start) / self.rotate)
        return self.key_sets[min(e, self.epochs - 1)]

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        last_version: dict[str, int] = {}
        gen, n = 0, 0
        h, member, t = self.history, self.member_of(c), self.op_timeout
        while not self.halt.is_set():
            if not self.wait_connected(zk, rng):
                continue
            key = rng.choice(self.current_keys())
            proc = f"r{c}.{gen}"
            roll = rng.random()
            sid = session_of(zk)
            if roll < 0.3 or (roll >= 0.7 and key not in last_version):
                quorum = roll < 0.15 or roll >= 0.7
                rec = h.invoke(proc, "qread" if quorum else "read", key, member=member)
                try:
                    if quorum:
                        _quorum_barrier(zk, key, t)
                    else:
                        zk.sync_async(key).get(timeout=t)
                    left = max(0.1, t - (time.monotonic() - rec.invoke))
                    data, st = zk.get_async(key).get(timeout=left)
                except NoNodeError as e:
                    h.complete(rec, "fail", error=err(e))
                    self.missing.append(rec.describe())
                except (KazooException, KazooTimeoutError) as e:
                    h.complete(rec, "fail", error=err(e))
                else:
                    last_version[key] = st.version
                    h.complete(rec, "ok", {"data": data.decode(), "version": st.version, "mzxid": st.mzxid},
                               session=_same(sid, zk))
            elif roll < 0.45:
                rec = h.invoke(proc, "pread", key, member=member)
                try:
                    data, st = zk.get_async(key).get(timeout=t)
                except NoNodeError as e:
                    h.complete(rec, "fail", error=err(e))
                    self.missing.append(rec.describe())
                except (KazooException, KazooTimeoutError) as e:
                    h.complete(rec, "fail", error=err(e))
                else:
                    last_version[key] = st.version
                    h.complete(rec, "ok", {"data": data.decode(), "version": st.version, "mzxid": st.mzxid},
                               session=_same(sid, zk))
            else:
                n += 1
                value = f"v{c}-{n}"
                cas = roll >= 0.7
                args = {"value": value}
                if cas:
                    args["version"] = last_version[key]
                rec = h.invoke(proc, "cas" if cas else "write", key, args, member=member)
                try:
                    st = zk.set_async(key, value.encode(), args["version"] if cas else -1).get(timeout=t)
                except BadVersionError as e:
                    h.complete(rec, "fail", error=err(e), session=_same(sid, zk))
                except (KazooException, KazooTimeoutError) as e:
                    # NoNode too is recorded as in doubt (for the linearizability search it
                    # is neither a BadVersion nor a success) and reported as missing-key.
                    h.complete(rec, "info", error=err(e))
                    if isinstance(e, NoNodeError):
                        self.missing.append(rec.describe())
                    gen += 1  # an in-doubt op: later ops belong to a new logical process
                else:
                    h.complete(rec, "ok", {"version": st.version, "mzxid": st.mzxid}, session=_same(sid, zk))
            self.sleep(rng)

    def final(self, hostports: list[str]) -> None:
        """Synced reads of every key used through every member, appended to the history."""
        used = sorted({op.key for op in self.history.ops() if op.type in self.op_types})
        for m, hp in enumerate(hostports):
            if hp is None:
                continue
            zk = make_client(hp)
            try:
                for key in used:
                    rec = self.history.invoke(f"final-m{m + 1}", "qread", key, member=m)
                    try:
                        _quorum_barrier(zk, key, 30)
                        data, st = zk.get(key)
                    except NoNodeError as e:
                        self.history.complete(rec, "fail", error=err(e))
                        self.missing.append(rec.describe())
                    except KazooException as e:
                        self.history.complete(rec, "fail", error=err(e))
                        self.errors.append(f"final read of {key} on member {m + 1}: {err(e)}")
                    else:
                        self.history.complete(rec, "ok", {"data": data.decode(), "version": st.version,
                                                          "mzxid": st.mzxid})
            finally:
                close_client(zk)

    # -- checks ------------------------------------------------------------------------
    def check(self) -> list[dict]:
        out: list[dict] = []
        ops = [op for op in self.history.ops() if op.type in self.op_types]
        by_key: dict[str, list] = {}
        synced: dict[str, list] = {}
        for op in ops:
            if op.type in self.strict_types or op.type == "read":
                c = _to_checker(op)
                if c is not None:
                    (by_key if op.type in self.strict_types else synced).setdefault(op.key, []).append(c)
        t0 = time.monotonic()
        slowest = (0.0, None)
        unknown = []
        for key, cops in sorted(by_key.items()):
            t1 = time.monotonic()
            res = check_budgeted(cops, (INIT, 0), self.check_budget)
            slowest = max(slowest, (time.monotonic() - t1, key), key=lambda x: x[0])
            if res is None:
                unknown.append(f"{key} ({len(cops)} ops)")
                continue
            if not res.ok:
                by_id = {op.id: op for op in ops}
                ev = [res.report()]
                ev.append("  (the same ops as recorded: member, session, error)")
                ev += [f"    {by_id[o.id].describe()}" for o in res.window if o.id in by_id]
                out.append(anomaly(self.name, "not-linearizable", f"{key}: {res.report().splitlines()[0]}", ev))
            elif synced.get(key):
                # sync+get is not a quorum read: ZooKeeper's deposed leader, resumed after a
                # SIGSTOP, answers one with its old state until it notices. Reported, not failed.
                res2 = check_budgeted(sorted(cops + synced[key], key=lambda o: o.id), (INIT, 0), self.check_budget)
                if res2 is not None and not res2.ok:
                    by_id = {op.id: op for op in ops}
                    self.final_info.setdefault("stale_synced_reads", []).append(
                        f"{key}: {by_id[res2.stuck.id].describe()}" if res2.stuck and res2.stuck.id in by_id
                        else f"{key}: {res2.report().splitlines()[0]}")
        self.final_info["keys_checked"] = len(by_key)
        self.final_info["check_seconds"] = round(time.monotonic() - t0, 2)
        self.final_info["slowest_key"] = f"{slowest[1]} {slowest[0]:.2f}s"
        if unknown:
            # The search ran out of time: no anomaly found, but none ruled out either, so the
            # schedule cannot pass (a harness error, exit 2).
            self.final_info["unchecked_keys"] = unknown
            self.errors.append(f"registers: linearizability not decided within {self.check_budget:.0f}s "
                               f"for {len(unknown)} keys: {unknown[:5]}")
        if self.missing:
            out.append(anomaly(self.name, "missing-key",
                               f"{len(self.missing)} ops found a register key missing (created on every "
                               "member before the clients started, never deleted)", self.missing[:10]))
        if not any(op.type == "qread" and op.final_outcome == "ok" and not op.process.startswith("final-")
                   for op in ops):
            self.errors.append("registers: not one quorum read succeeded during the faults: nothing was checked")
        out += self._check_sessions(ops)
        out += self._check_phantoms(ops)
        return out

    def _check_phantoms(self, ops: list[OpRecord]) -> list[dict]:
        """A read's value must be the initial one or one somebody tried to write, and an
        acknowledged value only ever appears with the version its write was given."""
        out = []
        attempted = {(op.key, op.args["value"]) for op in ops if op.type in ("write", "cas")}
        acked = {(op.key, op.args["value"]): op for op in ops
                 if op.type in ("write", "cas") and op.final_outcome == "ok"}
        for op in ops:
            if op.type not in ("qread", "read", "pread") or op.final_outcome != "ok":
                continue
            data, ver = op.result["data"], op.result["version"]
            if data == INIT.decode():
                if ver != 0:
                    out.append(anomaly(self.name, "phantom-read", f"{op.key}: initial value at version {ver}",
                                       [op.describe()]))
                continue
            if (op.key, data) not in attempted:
                out.append(anomaly(self.name, "phantom-read", f"{op.key}: read {data!r}, never written",
                                   [op.describe()]))
            elif (op.key, data) in acked and acked[(op.key, data)].result["version"] != ver:
                w = acked[(op.key, data)]
                out.append(anomaly(self.name, "phantom-read",
                                   f"{op.key}: read {data!r} at version {ver}; its write was acknowledged "
                                   f"with version {w.result['version']}", [w.describe(), op.describe()]))
        return out

    def _check_sessions(self, ops: list[OpRecord]) -> list[dict]:
        """ZooKeeper's session guarantee for reads with or without sync: once a session has
        seen zxid H (the mzxid of something it read, or of its own acknowledged write), no read
        of any key in that session returns a state older than that key's state at H: its mzxid
        is at least the largest mzxid of that key known (from any session) to be <= H."""
        out = []
        known: dict[str, list[int]] = {}
        for op in ops:
            if op.final_outcome == "ok" and op.type in self.op_types:
                known.setdefault(op.key, []).append(op.result["mzxid"])
        for k in known:
            known[k] = sorted(set(known[k]))
        by_session: dict[int, list[OpRecord]] = {}
        for op in ops:
            if op.final_outcome == "ok" and op.session is not None and op.type in self.op_types:
                by_session.setdefault(op.session, []).append(op)
        import bisect
        for sid, sops in by_session.items():
            sops.sort(key=lambda o: o.invoke)
            done = sorted(sops, key=lambda o: o.complete)
            hw, hw_op, j = 0, None, 0
            for op in sops:
                while j < len(done) and done[j].complete < op.invoke:
                    if done[j].result["mzxid"] > hw:
                        hw, hw_op = done[j].result["mzxid"], done[j]
                    j += 1
                if op.type not in ("qread", "read", "pread"):
                    continue
                ks = known.get(op.key, [])
                i = bisect.bisect_right(ks, hw)
                floor = ks[i - 1] if i else 0
                if op.result["mzxid"] < floor:
                    writer = next((o for o in ops if o.key == op.key and o.final_outcome == "ok"
                                   and o.result["mzxid"] == floor), None)
                    ev = [f"session 0x{sid:x} had seen zxid 0x{hw:x} through: {hw_op.describe()}",
                          f"{op.key} was already at mzxid 0x{floor:x} by then"
                          + (f": {writer.describe()}" if writer else ""),
                          f"yet the session then read mzxid 0x{op.result['mzxid']:x}: {op.describe()}"]
                    out.append(anomaly(self.name, "session-went-back",
                                       f"{op.key}: a {op.type} in session 0x{sid:x} went back in time", ev))
        return out


def _check_child(conn, cops, initial) -> None:
    conn.send(checker.check(cops, initial))
    conn.close()


def check_budgeted(cops: list, initial: tuple, budget: float) -> Optional[checker.Result]:
    """checker.check in a forked child that gets `budget` seconds; None if it ran out (the
    search is exponential in the number of in-doubt writes nobody read)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_check_child, args=(w, cops, initial), daemon=True)
    p.start()
    w.close()
    try:
        if r.poll(budget):
            try:
                return r.recv()
            except EOFError:
                raise RuntimeError(f"the checker process died (exit code {p.exitcode})")
        return None
    finally:
        r.close()
        if p.is_alive():
            p.kill()
        p.join(10)


def _same(sid: Optional[int], zk: KazooClient) -> Optional[int]:
    """The session id if the op certainly ran in it (same session before and after)."""
    after = session_of(zk)
    return sid if sid is not None and sid == after else None


def _quorum_barrier(zk: KazooClient, key: str, timeout: float) -> None:
    """A multi holding only check(key, -1): a no-op that still goes through the leader's
    quorum, so a get on the same session after it sees every write committed before it began
    (a deposed leader cannot commit it; sync alone does not guarantee that in ZooKeeper)."""
    tx = zk.transaction()
    tx.check(key, -1)
    res = tx.commit_async().get(timeout=timeout)
    if len(res) == 1 and isinstance(res[0], NoNodeError):
        raise NoNodeError(f"quorum barrier: {key}")
    if not (len(res) == 1 and res[0] is True):
        raise KazooException(f"quorum barrier refused: {res}")


def _to_checker(op: OpRecord) -> Optional[checker.Op]:
    outcome = op.final_outcome
    if op.type in ("read", "qread", "pread"):
        if outcome != "ok":
            return None
        return checker.Op(op.id, op.process, "read", op.invoke, op.complete, "ok",
                          result=(op.result["data"].encode(), op.result["version"]))
    value = op.args["value"].encode()
    if op.type == "write":
        if outcome == "fail":  # (never recorded: a write with version -1 cannot be refused)
            return None
        return checker.Op(op.id, op.process, "write", op.invoke, op.complete if outcome == "ok" else None, outcome,
                          value=value, result=(op.result["version"],) if outcome == "ok" else None)
    return checker.Op(op.id, op.process, "cas", op.invoke, op.complete if outcome != "info" else None, outcome,
                      value=value, expected_version=op.args["version"],
                      result=(op.result["version"],) if outcome == "ok" else None)


# --------------------------------------------------------------------------------------------
# set


class SetAdds(Workload):
    name = "set"
    write_types = ("add",)
    op_types = ("add",)

    def setup(self, admin: KazooClient) -> None:
        self.parent = f"{self.base}/set"
        admin.create(self.parent, b"", makepath=True)

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        h, member, t = self.history, self.member_of(c), self.op_timeout
        n, gen = 0, 0
        while not self.halt.is_set():
            if not self.wait_connected(zk, rng):
                continue
            n += 1
            value = f"s{c}-{n}"
            rec = h.invoke(f"s{c}.{gen}", "add", self.parent, {"value": value}, member=member)
            try:
                path = zk.create_async(self.parent + "/e-", value.encode(), sequence=True).get(timeout=t)
            except (KazooException, KazooTimeoutError) as e:
                h.complete(rec, "info", error=err(e))
                gen += 1
            else:
                h.complete(rec, "ok", {"path": path})
            self.sleep(rng)

    def final(self, hostports: list[str]) -> None:
        """Every member's children of the set, with their data, after sync."""
        self.final_info["views"] = synced_listing(hostports, self.parent, lambda zk, p: zk.get_async(p),
                                                  lambda r: r[0].decode(), self.errors, "set")

    def check(self) -> list[dict]:
        out = []
        views = self.final_info.get("views") or {}
        if not views:
            return [anomaly(self.name, "no-final-read", "no member answered the final read", [])]
        ms = sorted(views)
        first = views[ms[0]]
        for m in ms[1:]:
            if views[m] != first:
                a, b = set(first.items()), set(views[m].items())
                out.append(anomaly(self.name, "members-disagree",
                                   f"members {ms[0] + 1} and {m + 1} list different sets after sync",
                                   [f"only on member {ms[0] + 1}: {sorted(a - b)[:10]}",
                                    f"only on member {m + 1}: {sorted(b - a)[:10]}"]))
        adds = self.history.ops("add")
        attempted = {op.args["value"]: op for op in adds}
        seen: dict[str, list[str]] = {}
        for path, value in first.items():
            seen.setdefault(value, []).append(path)
        for value, paths in seen.items():
            if value not in attempted:
                out.append(anomaly(self.name, "unexpected", f"value {value!r} was never added", paths))
            elif len(paths) > 1:
                out.append(anomaly(self.name, "duplicate", f"value {value!r} is there {len(paths)} times",
                                   paths + [attempted[value].describe()]))
        lost = [op for op in adds if op.final_outcome == "ok" and first.get(op.result["path"]) != op.args["value"]]
        if lost:
            out.append(anomaly(self.name, "lost", f"{len(lost)} acknowledged adds missing from the final set",
                               [f"{op.describe()} (final: {first.get(op.result['path'])!r})" for op in lost[:10]]))
        out += self._check_order([op for op in adds if op.final_outcome == "ok"])
        infos = [op for op in adds if op.final_outcome == "info"]
        self.final_info["info_present"] = sum(1 for op in infos if op.args["value"] in seen)
        self.final_info["info_absent"] = len(infos) - self.final_info["info_present"]
        self.final_info["size"] = len(first)
        return out

    def _check_order(self, acked: list[OpRecord]) -> list[dict]:
        """Sequence numbers follow real time: an add acknowledged before another was sent has
        the smaller number (the parent's counter only grows, in log order)."""
        out = []
        for op, best_op in _greatest_done_before(acked, acked, lambda o: _seq(o.result["path"])):
            if best_op is not None and _seq(op.result["path"]) <= _seq(best_op.result["path"]):
                out.append(anomaly(self.name, "sequence-went-back",
                                   f"an add got {op.result['path']} after another had been acknowledged with "
                                   f"{best_op.result['path']}", [best_op.describe(), op.describe()]))
                if len(out) >= 10:
                    break
        return out


def _greatest_done_before(ops: list[OpRecord], earlier: list[OpRecord], value: Callable):
    """Each of `ops` in invoke order, with the op of `earlier` of the greatest `value` among
    those completed before it was invoked (None if none was)."""
    done = sorted(earlier, key=lambda o: o.complete)
    best_op, j = None, 0
    for op in sorted(ops, key=lambda o: o.invoke):
        while j < len(done) and done[j].complete < op.invoke:
            if best_op is None or value(done[j]) > value(best_op):
                best_op = done[j]
            j += 1
        yield op, best_op


def _seq(path: str) -> int:
    """The counter a sequential node's name ends in (ZooKeeper's 10 digits)."""
    return int(path[-10:])


# --------------------------------------------------------------------------------------------
# locks


class Locks(Workload):
    name = "locks"
    write_types = ("fenced-write",)
    op_types = ("fenced-write",)

    def _check_holds(self, ok: list[OpRecord]) -> list[dict]:
        """Fenced holders never overlap, even where their writes do not interleave: a client
        sees itself holding with token t' only once its member shows every lower contender
        node gone, and a member's state is a committed prefix, so those deletions are final;
        a fenced write with token t < t' sent after that hold was seen must fail its check.
        (Holds alone may overlap: a client on a lagging member can believe it still holds.
        That is what the fencing token is for, so only the writes are checked.)"""
        out = []
        holds = [op for op in self.history.ops("hold") if op.final_outcome == "ok"]
        for op, held in _greatest_done_before(ok, holds, lambda o: o.args["token"]):
            if held is not None and op.args["token"] < held.args["token"]:
                out.append(anomaly(self.name, "holders-overlap",
                                   f"a write with token 0x{op.args['token']:x} succeeded after a holder with "
                                   f"token 0x{held.args['token']:x} had the lock", [held.describe(), op.describe()]))
                if len(out) >= 10:
                    break
        return out

    def setup(self, admin: KazooClient) -> None:
        self.lock_path = f"{self.base}/lock"
        self.resource = f"{self.base}/resource"
        admin.create(self.lock_path, b"", makepath=True)
        admin.create(self.resource, b"")

    def _client(self, hostport: str) -> KazooClient:
        # The Lock recipe re-sends its own idempotent calls (it finds its node by a uuid
        # prefix after a ConnectionLoss); release() goes through client.retry, bounded here.
        # The fenced writes are this module's and are sent once.
        return make_client(hostport, command_retry=dict(max_tries=30, delay=0.05, backoff=1.5, max_delay=0.5,
                                                        deadline=10))

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        h, member, t = self.history, self.member_of(c), self.op_timeout
        n, gen = 0, 0
        while not self.halt.is_set():
            if not self.wait_connected(zk, rng):
                continue
            proc = f"l{c}.{gen}"
            lock = zk.Lock(self.lock_path, proc)
            try:
                got = lock.acquire(timeout=3)
            except (LockTimeout, RetryFailedError, KazooException, KazooTimeoutError):
                got = False
            if not got:
                # kazoo's acquire cleans up its contender node only on a best-effort basis: a
                # node left behind by this live session would block every holder for good.
                if not self._abandon(zk, lock):
                    close_client(zk)
                    zk = self._reconnect(c)
                    if zk is None:
                        return
                    gen += 1
                continue
            node = f"{self.lock_path}/{lock.node}"
            try:
                st = zk.exists_async(node).get(timeout=t)
            except (KazooException, KazooTimeoutError):
                st = None
            if st is not None:
                token = st.czxid
                rec = h.invoke(proc, "hold", node, {"token": token}, member=member)
                h.complete(rec, "ok", {"token": token})
                for _ in range(rng.randint(1, 3)):
                    if self.halt.is_set():
                        break
                    n += 1
                    value = f"{token}:{proc}:{n}"
                    rec = h.invoke(proc, "fenced-write", self.resource,
                                   {"token": token, "value": value, "node": node}, member=member)
                    tx = zk.transaction()
                    tx.check(node, st.version)
                    tx.set_data(self.resource, value.encode())
                    try:
                        res = tx.commit_async().get(timeout=t)
                    except (KazooException, KazooTimeoutError) as e:
                        h.complete(rec, "info", error=err(e))
                        gen += 1
                        break
                    if len(res) == 2 and isinstance(res[1], ZnodeStat):
                        h.complete(rec, "ok", {"mzxid": res[1].mzxid, "version": res[1].version})
                    else:
                        h.complete(rec, "fail", error=", ".join(err(x) if isinstance(x, BaseException) else repr(x)
                                                                  for x in res))
                        break
                    self.halt.wait(rng.uniform(0.0, 0.03))
            try:
                lock.release()
            except (KazooException, KazooTimeoutError, RetryFailedError):
                # In doubt whether the node is gone: end the session, which removes it, and
                # carry on with a new one (the client stays pinned to the same member).
                close_client(zk)
                zk = self._reconnect(c)
                if zk is None:
                    return
                gen += 1
            self.sleep(rng)

    def _abandon(self, zk: KazooClient, lock) -> bool:
        """Deletes this Lock's contender node(s) if any; False if it cannot be sure they are gone."""
        t = self.op_timeout
        try:
            kids = zk.get_children_async(self.lock_path).get(timeout=t)
            for k in kids:
                if k.startswith(lock.prefix):
                    try:
                        zk.delete_async(f"{self.lock_path}/{k}").get(timeout=t)
                    except NoNodeError:
                        pass
            return True
        except (KazooException, KazooTimeoutError):
            return False

    def diagnose(self) -> list[str]:
        """The lock's contenders and their owners, and the sessions of this workload's clients."""
        out = [f"lock clients' sessions: {[hex(session_of(c) or 0) for c in self.clients]} "
               f"states {[c.state for c in self.clients]}"]
        zk = None
        try:
            zk = make_client(self.hostports[0])
            zk.sync(self.lock_path)
            for k in sorted(zk.get_children(self.lock_path)):
                st = zk.exists(f"{self.lock_path}/{k}")
                out.append(f"contender {k}: czxid 0x{st.czxid:x} owner 0x{st.ephemeralOwner:x}" if st else
                           f"contender {k}: gone")
        except Exception as e:  # noqa: BLE001 - diagnostics only
            out.append(f"(could not list the lock: {err(e)})")
        finally:
            if zk is not None:
                close_client(zk)
        return out

    def _reconnect(self, c: int) -> Optional[KazooClient]:
        """A new session on client c's member (None if halted before it connects)."""
        while not self.halt.is_set():
            try:
                zk = self._client(self.hostports[self.member_of(c)])
            except (KazooException, KazooTimeoutError):
                continue
            self.clients[c] = zk
            return zk
        return None

    def final(self, hostports: list[str]) -> None:
        """The resource through every member, after a quorum barrier on each."""
        views = {}
        for m, hp in enumerate(hostports):
            if hp is None:
                continue
            zk = make_client(hp)
            try:
                _quorum_barrier(zk, self.resource, 30)
                data, st = zk.get(self.resource)
                views[m] = {"data": data.decode(), "version": st.version, "mzxid": st.mzxid}
            except (KazooException, KazooTimeoutError) as e:
                self.errors.append(f"final read of the lock resource on member {m + 1}: {err(e)}")
            finally:
                close_client(zk)
        if views:
            self.final_info["resource"] = views[min(views)]
            self.final_info["resource_views"] = views

    def check(self) -> list[dict]:
        out = []
        writes = self.history.ops("fenced-write")
        ok = sorted((op for op in writes if op.final_outcome == "ok"), key=lambda o: o.result["mzxid"])
        info = [op for op in writes if op.final_outcome == "info"]
        for a, b in zip(ok, ok[1:]):
            if a.result["mzxid"] == b.result["mzxid"]:
                out.append(anomaly(self.name, "same-mzxid", "two acknowledged writes share an mzxid",
                                   [a.describe(), b.describe()]))
            elif b.args["token"] < a.args["token"]:
                out.append(anomaly(self.name, "token-went-back",
                                   f"a write with token 0x{b.args['token']:x} was applied after one with token "
                                   f"0x{a.args['token']:x}: two holders interleaved",
                                   [f"mzxid 0x{a.result['mzxid']:x}: {a.describe()}",
                                    f"mzxid 0x{b.result['mzxid']:x}: {b.describe()}"]))
            if b.result["version"] <= a.result["version"]:
                out.append(anomaly(self.name, "version-order", "resource versions disagree with mzxid order",
                                   [a.describe(), b.describe()]))
        out += self._check_holds(ok)
        fin = self.final_info.get("resource")
        if fin is None:
            return out + [anomaly(self.name, "no-final-read", "the resource could not be read at the end", [])]
        views = self.final_info.get("resource_views") or {}
        for m, v in sorted(views.items()):
            if v != fin:
                out.append(anomaly(self.name, "members-disagree", f"member {m + 1} ends with another resource "
                                   f"than member {min(views) + 1}", [str(fin), str(v)]))
        if not (len(ok) <= fin["version"] <= len(ok) + len(info)):
            out.append(anomaly(self.name, "write-count",
                               f"the resource ends at version {fin['version']}, but {len(ok)} writes were "
                               f"acknowledged and {len(info)} are in doubt", [str(fin)]))
        last_mzxid = ok[-1].result["mzxid"] if ok else 0
        if ok and fin["mzxid"] < last_mzxid:
            out.append(anomaly(self.name, "lost", "the resource ends older than the last acknowledged write",
                               [str(fin), ok[-1].describe()]))
        elif ok and fin["mzxid"] == last_mzxid and fin["data"] != ok[-1].args["value"]:
            out.append(anomaly(self.name, "wrong-value", "the resource holds another value than its last write",
                               [str(fin), ok[-1].describe()]))
        elif fin["mzxid"] > last_mzxid and fin["version"] > 0 and fin["data"] not in {op.args["value"] for op in info}:
            out.append(anomaly(self.name, "unexpected",
                               "the resource ends newer than its last acknowledged write, with a value no "
                               "in-doubt write sent", [str(fin)] + [op.describe() for op in ok[-1:]]))
        return out


# --------------------------------------------------------------------------------------------
# sessions and ephemerals


class Sessions(Workload):
    """Each client keeps one ephemeral node of its current session and keeps looking at it.
    A session that expires (kazoo then opens a new one, on the same member) is followed by a
    synced look through the new session: the old node must be gone. Checks: a live session
    never loses its ephemeral (a look that finds it missing, followed by any op that still
    succeeds in that session); an ephemeral never outlives its expired session (the synced
    look after the expiry, and, at the end, every member's list after sync: each node must
    belong to a session that is still live, and each live session's node must be there)."""

    name = "sessions"
    write_types = ("eph-create", "eph-set")
    op_types = ("eph-create", "eph-check", "eph-set", "eph-gone")

    def __init__(self, *a, strict_expiry: bool = True, **kw):
        super().__init__(*a, **kw)
        # strict_expiry: once a client is told its session expired, a synced look must find
        # its ephemeral gone. Warden promises it (a member answers Expired only after applying
        # the session's close). ZooKeeper's leader may answer Expired to a reconnect while the
        # close is still on its way (seen with seed 4323), so there such a look is noted in
        # final_info["outlived_expiry_notice"], not counted; the final lists are strict on both.
        self.strict_expiry = strict_expiry

    def _client(self, hostport: str) -> KazooClient:
        # The shortest timeout the members grant (2 ticks): faults of 4-6 s then expire some
        # sessions, which is what this workload looks at.
        return make_client(hostport, session_timeout=4.0)

    def setup(self, admin: KazooClient) -> None:
        self.parent = f"{self.base}/eph"
        admin.create(self.parent, b"", makepath=True)
        self.current: dict[int, tuple] = {}  # client -> (session, node) acknowledged

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        h, member, t = self.history, self.member_of(c), self.op_timeout
        cur, node, gen = None, None, 0
        gone_pending: list[tuple] = []  # (expired session, its node) to look for
        while not self.halt.is_set():
            if not self.wait_connected(zk, rng):
                continue
            s = session_of(zk)
            if s != cur:
                if cur is not None and node is not None:
                    gone_pending.append((cur, node))
                self.current.pop(c, None)
                cur, node = s, None
            for old, old_node in list(gone_pending):
                rec = h.invoke(f"e{c}", "eph-gone", old_node, {"session": old}, member=member)
                try:
                    zk.sync_async(old_node).get(timeout=t)
                    left = max(0.1, t - (time.monotonic() - rec.invoke))
                    st = zk.exists_async(old_node).get(timeout=left)
                except (KazooException, KazooTimeoutError) as e:
                    h.complete(rec, "fail", error=err(e))
                    break
                h.complete(rec, "ok", {"present": st is not None, "owner": st.ephemeralOwner if st else None},
                           session=_same(s, zk))
                gone_pending.remove((old, old_node))
            if node is None:
                gen += 1
                path = f"{self.parent}/c{c}-{gen}"
                rec = h.invoke(f"e{c}", "eph-create", path, {"session": s}, member=member)
                try:
                    zk.create_async(path, f"{s:x}".encode(), ephemeral=True).get(timeout=t)
                except (KazooException, KazooTimeoutError) as e:
                    # In doubt: if it was made, it belongs to this session and goes with it.
                    h.complete(rec, "info", error=err(e))
                    self.sleep(rng)
                    continue
                h.complete(rec, "ok", session=_same(s, zk))
                if _same(s, zk) is None:
                    continue  # the session changed under the create: look again from the top
                node = path
                self.current[c] = (s, node)
            if rng.random() < 0.25:
                # A write to it: the session's node takes writes while the session lives
                # (NoNode here is a look that found it gone).
                rec = h.invoke(f"e{c}", "eph-set", node, {"session": s}, member=member)
                try:
                    st = zk.set_async(node, f"{s:x}".encode()).get(timeout=t)
                except NoNodeError as e:
                    h.complete(rec, "ok", {"present": False, "owner": None}, error=err(e), session=_same(s, zk))
                except (KazooException, KazooTimeoutError) as e:
                    h.complete(rec, "info", error=err(e))
                else:
                    h.complete(rec, "ok", {"present": True, "owner": st.ephemeralOwner}, session=_same(s, zk))
            else:
                rec = h.invoke(f"e{c}", "eph-check", node, {"session": s}, member=member)
                try:
                    st = zk.exists_async(node).get(timeout=t)
                except (KazooException, KazooTimeoutError) as e:
                    h.complete(rec, "fail", error=err(e))
                else:
                    h.complete(rec, "ok", {"present": st is not None, "owner": st.ephemeralOwner if st else None},
                               session=_same(s, zk))
            self.halt.wait(rng.uniform(0.05, 0.15))

    def final(self, hostports: list[str]) -> None:
        """Every member's ephemerals with their owners, after sync; and which sessions were live
        (connected, unchanged) before and after those reads."""
        def live() -> dict:
            return {c: v for c, v in self.current.items()
                    if self.clients[c].state == KazooState.CONNECTED and session_of(self.clients[c]) == v[0]}
        before = live()
        views = synced_listing(hostports, self.parent, lambda zk, p: zk.exists_async(p),
                               lambda st: st.ephemeralOwner if st is not None else None, self.errors, "ephemerals")
        after = live()
        self.final_info["views"] = views
        # Every client's session now (the clients are closed before the checks run).
        self.final_info["current_sessions"] = [session_of(c) for c in self.clients]
        self.final_info["live"] = {c: v for c, v in before.items() if after.get(c) == v}
        self.final_info["sessions_started"] = len({op.args["session"] for op in self.history.ops("eph-create")})

    def check(self) -> list[dict]:
        out = []
        by_session: dict[int, list] = {}
        for op in self.history.ops():
            if op.type in self.op_types and op.final_outcome == "ok" and op.session is not None:
                by_session.setdefault(op.session, []).append(op)
        for op in self.history.ops("eph-check") + self.history.ops("eph-set"):
            if op.final_outcome != "ok" or op.session is None or op.result["present"]:
                continue
            later = [o for o in by_session.get(op.session, []) if o.invoke > op.complete]
            if later:
                out.append(anomaly(self.name, "lost-while-live",
                                   f"session 0x{op.session:x} found its ephemeral gone, then went on",
                                   [op.describe(), later[0].describe()]))
        noted = []
        for op in self.history.ops("eph-gone"):
            if op.final_outcome == "ok" and op.result["present"] and op.result["owner"] == op.args["session"]:
                if not self.strict_expiry:
                    noted.append(op.describe())
                    continue
                out.append(anomaly(self.name, "outlived", f"the ephemeral of expired session "
                                   f"0x{op.args['session']:x} was still there after a synced look", [op.describe()]))
        if noted:
            self.final_info["outlived_expiry_notice"] = noted
        views = self.final_info.get("views") or {}
        if not views:
            return out + [anomaly(self.name, "no-final-read", "no member answered the final read", [])]
        live = self.final_info.get("live") or {}
        live_sessions = {s for s, _ in live.values()}
        all_live = set(self.final_info.get("current_sessions") or [session_of(c) for c in self.clients])
        for m, view in views.items():
            for path, owner in view.items():
                if owner not in all_live:
                    out.append(anomaly(self.name, "outlived", f"member {m + 1} still holds {path} of session "
                                       f"0x{owner:x}, which is not live", []))
            for s, path in live.values():
                if view.get(path) != s:
                    out.append(anomaly(self.name, "lost", f"member {m + 1} lacks {path} of live session 0x{s:x}",
                                       [f"owner there: {view.get(path)}"]))
        self.final_info["live_sessions"] = len(live_sessions)
        return out


# --------------------------------------------------------------------------------------------
# watches


class Watches(Workload):
    """Client 0 writes one key without pause; every other client watches it with kazoo's
    one-shot data watch and reads it again only when its watch fires (or when its session
    was replaced after an expiry, which drops watches): a watch lost anywhere -- across a
    reconnect (setWatches), a failover, a member's restart -- leaves that client stuck on an
    old value. Checks: each watcher's reads never go back within a session (mzxid order);
    after the heal, a last write reaches every watcher (its watch fires and it reads the
    value) within 20 s.

    One more watcher speaks the wire itself (zkwire, on one more member), since kazoo hands
    events to another thread: it sets a data watch with a read, then reads without a watch
    every few ms, and any reply that shows a newer mzxid than the watched read must come
    after the NodeDataChanged event on the connection (ZooKeeper's promise: a client sees
    the watch event before the new data). It re-arms once it has seen the change; on any
    error it starts over on a new session."""

    name = "watches"
    write_types = ("watch-write",)
    op_types = ("watch-write", "watch-read")

    def setup(self, admin: KazooClient) -> None:
        self.key = f"{self.base}/watch"
        admin.create(self.key, b"init", makepath=True)
        self.writer_halt = threading.Event()
        self.latest: dict[int, tuple] = {}  # watcher -> (value, mzxid) of its last read

    def client_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        if c == 0:
            self._write_loop(zk, rng)
        else:
            self._watch_loop(c, zk, rng)

    def start(self) -> None:
        super().start()
        self.order = {"changes_seen": 0, "violations": [], "stale_after_event": [], "sessions": 0}
        t = threading.Thread(target=self._order_guarded, name=f"{self.name}-wire", daemon=True)
        self.threads.append(t)
        t.start()

    def _order_guarded(self) -> None:
        try:
            self._order_loop()
        except Exception as e:  # noqa: BLE001 - recorded, reported by run.py
            import traceback
            self.errors.append(f"{self.name} wire watcher: {err(e)}\n{traceback.format_exc()}")

    def _order_loop(self) -> None:
        import zkwire
        member = self.member_of(self.n_clients)
        conn = None
        armed = None  # mzxid the watch was set at
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = zkwire.Conn(self.hostports[member], timeout_ms=4000)
                    conn.sock.settimeout(self.op_timeout)
                    self.order["sessions"] += 1
                    armed = None
                if armed is None:
                    conn.events.clear()
                    r = conn.get_data(self.key, watch=True)
                    if r.err != 0:
                        raise ConnectionError(f"watched read: error {r.err}")
                    armed = zkwire.parse_get_data(r.body)[1]["mzxid"]
                    continue
                r = conn.get_data(self.key)
                if r.err != 0:
                    raise ConnectionError(f"read: error {r.err}")
                mzxid = zkwire.parse_get_data(r.body)[1]["mzxid"]
                # Events that came before this reply on the connection are in conn.events.
                fired = [e for e in conn.events if e.type == EVENT_NODE_DATA_CHANGED and e.path == self.key]
                if mzxid > armed:
                    self.order["changes_seen"] += 1
                    if not fired:
                        self.order["violations"].append(
                            f"session 0x{conn.session_id:x} on member {member + 1}: a read answered with mzxid "
                            f"0x{mzxid:x} before the NodeDataChanged event of the watch set at mzxid 0x{armed:x}")
                    armed = None
                elif fired:
                    # The event came first, so the server read for this reply after the change
                    # it announces: the reply must show it.
                    self.order["stale_after_event"].append(
                        f"session 0x{conn.session_id:x} on member {member + 1}: after the NodeDataChanged event "
                        f"of the watch set at mzxid 0x{armed:x}, a read answered with mzxid 0x{mzxid:x}")
                    armed = None
                self.halt.wait(0.005)
            except (OSError, ConnectionError, struct.error, IndexError) as e:
                if conn is not None:
                    try:
                        conn.sock.close()
                    except OSError:
                        pass
                conn = None
                del e
                self.halt.wait(0.1)
        if conn is not None:
            conn.close()

    def _write_loop(self, zk: KazooClient, rng: random.Random) -> None:
        h, t, n, gen = self.history, self.op_timeout, 0, 0
        while not (self.halt.is_set() or self.writer_halt.is_set()):
            if not self.wait_connected(zk, rng):
                continue
            n += 1
            value = f"w-{n}"
            rec = h.invoke(f"ww.{gen}", "watch-write", self.key, {"value": value}, member=self.member_of(0))
            try:
                st = zk.set_async(self.key, value.encode()).get(timeout=t)
            except (KazooException, KazooTimeoutError) as e:
                h.complete(rec, "info", error=err(e))
                gen += 1
            else:
                h.complete(rec, "ok", {"mzxid": st.mzxid})
            self.halt.wait(rng.uniform(0.02, 0.06))

    def _watch_loop(self, c: int, zk: KazooClient, rng: random.Random) -> None:
        h, t, member = self.history, self.op_timeout, self.member_of(c)
        fired = threading.Event()
        armed_in = None  # the session whose watch is set
        while not self.halt.is_set():
            if armed_in is not None:
                # Wait for the watch alone; look up only to notice a replaced session.
                if not fired.wait(0.25):
                    if session_of(zk) == armed_in or zk.state != KazooState.CONNECTED:
                        continue
            if not self.wait_connected(zk, rng):
                continue
            fired.clear()
            sid = session_of(zk)
            rec = h.invoke(f"wr{c}", "watch-read", self.key, member=member)
            try:
                data, st = zk.get_async(self.key, watch=lambda _e: fired.set()).get(timeout=t)
            except (KazooException, KazooTimeoutError) as e:
                h.complete(rec, "fail", error=err(e))
                armed_in = None
                self.halt.wait(0.05)
                continue
            h.complete(rec, "ok", {"data": data.decode(), "mzxid": st.mzxid}, session=_same(sid, zk))
            self.latest[c] = (data.decode(), st.mzxid)
            armed_in = sid

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the writer only: the watchers keep watching for the final write."""
        self.writer_halt.set()
        if self.threads:
            self.threads[0].join(timeout)

    def final(self, hostports: list[str]) -> None:
        """A last write through a fresh session; then every watcher must read it."""
        zk = make_client(next(hp for hp in hostports if hp is not None))
        value = f"final-{time.monotonic():.3f}"
        try:
            st = zk.set(self.key, value.encode())
        except (KazooException, KazooTimeoutError) as e:
            self.errors.append(f"the final write of the watched key: {err(e)}")
            return
        finally:
            close_client(zk)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(self.latest.get(c, ("", 0))[0] == value for c in range(1, self.n_clients)):
                break
            time.sleep(0.05)
        self.final_info["final"] = {"value": value, "mzxid": st.mzxid}
        self.final_info["seen"] = {c: self.latest.get(c) for c in range(1, self.n_clients)}
        super().stop()
        self.final_info["wire_order"] = {"changes_seen": self.order["changes_seen"],
                                         "violations": len(self.order["violations"]),
                                         "stale_after_event": len(self.order["stale_after_event"]),
                                         "sessions": self.order["sessions"]}

    def check(self) -> list[dict]:
        out = []
        fin = self.final_info.get("final")
        if fin is None:
            return [anomaly(self.name, "no-final-write", "the final write did not happen", [])]
        for c, seen in self.final_info["seen"].items():
            if seen is None or seen[0] != fin["value"]:
                reads = [op for op in self.history.ops("watch-read") if op.process == f"wr{c}"]
                out.append(anomaly(self.name, "lost-watch",
                                   f"watcher {c} (member {self.member_of(c) + 1}) never read the final write "
                                   f"(mzxid 0x{fin['mzxid']:x}) within 20 s; it last read {seen}",
                                   [op.describe() for op in reads[-3:]]))
        order = getattr(self, "order", {})
        violations = order.get("violations", [])
        if violations:
            out.append(anomaly(self.name, "reply-before-event",
                               f"{len(violations)} replies showed a watched change before its event", violations[:5]))
        stale = order.get("stale_after_event", [])
        if stale:
            out.append(anomaly(self.name, "stale-after-event",
                               f"{len(stale)} replies after a watch event did not show the change", stale[:5]))
        writes = sum(1 for op in self.history.ops("watch-write") if op.final_outcome == "ok")
        if order and order.get("changes_seen", 0) == 0 and writes >= 20:
            self.errors.append(f"watches: the wire watcher saw none of {writes} acknowledged changes "
                               f"({order.get('sessions', 0)} sessions): its order was not checked")
        last: dict[tuple, object] = {}
        for op in self.history.ops("watch-read"):
            if op.final_outcome != "ok" or op.session is None:
                continue
            k = (op.process, op.session)
            prev = last.get(k)
            if prev is not None and op.result["mzxid"] < prev.result["mzxid"]:
                out.append(anomaly(self.name, "went-back", f"{op.process} read an older value than before "
                                   "in the same session", [prev.describe(), op.describe()]))
            last[k] = op
        return out


EVENT_NODE_DATA_CHANGED = 3

WORKLOADS: dict[str, Callable] = {"registers": Registers, "set": SetAdds, "locks": Locks, "sessions": Sessions,
                                  "watches": Watches}
