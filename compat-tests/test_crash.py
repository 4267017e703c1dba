"""Durability across SIGKILL: every write the server acknowledged survives a crash and restart.

A raw-wire writer (zkwire) keeps 8 create2/setData requests outstanding on one
session and records every reply it receives. After a random 0.2-1.0 s the
server is SIGKILLed, restarted on the same data dir, and a fresh session
checks each acknowledged write: the data is the acknowledged data (or the
data of a later write that was in flight at the crash), the Stat agrees with
the one in the reply, no in-flight write "before" an applied one is missing
(one session's writes apply in order), and zxids keep growing. Repeated on the
same data dir so the state accumulates across crashes.

Set COMPAT_CRASH_SEED to replay a run; the seed is printed in failures.
"""

from __future__ import annotations

import os
import random
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import zkwire as w

OP_CREATE2 = 15
ROOT = "/crash"
ROUNDS = 6
PIPELINE_DEPTH = 8


@dataclass
class WriteOp:
    seq: int  # global issue order across all rounds
    kind: str  # "create" | "set"
    path: str
    data: bytes
    xid: int = 0
    acked: bool = False
    stat: dict | None = None  # the Stat carried by the successful reply
    zxid: int = 0  # ReplyHeader.zxid of the successful reply


@dataclass
class Node:
    """What the test knows about one znode: the last verified state and the writes since."""

    base: tuple[bytes, dict] | None = None  # (data, stat) observed by the last verification
    ops: list[WriteOp] = field(default_factory=list)


def _create2_body(path: str, data: bytes) -> bytes:
    return w.ustring(path) + w.buffer(data) + w.acl_vector(w.OPEN_ACL) + struct.pack(">i", 0)


def _set_body(path: str, data: bytes) -> bytes:
    return w.ustring(path) + w.buffer(data) + struct.pack(">i", -1)


def _parse_create2(body: bytes) -> dict:
    (n,) = struct.unpack(">i", body[:4])
    return w.parse_stat(body[4 + n:])


class Writer(threading.Thread):
    """Pipelined writes on one session until the connection dies (the server is killed)."""

    def __init__(self, hostport: str, nodes: dict[str, Node], round_no: int, seq0: int, rng: random.Random):
        super().__init__(daemon=True, name=f"crash-writer-{round_no}")
        self.hostport = hostport
        self.nodes = nodes
        self.round_no = round_no
        self.seq = seq0
        self.rng = rng
        self.sent: list[WriteOp] = []
        self.connected = threading.Event()
        self.errors: list[str] = []
        self.ended_by: str = ""
        # setData targets: nodes known to exist (verified, or whose create was acked).
        self.existing = [p for p, n in nodes.items() if n.base is not None]

    def _next_op(self) -> WriteOp:
        self.seq += 1
        pad = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(0, 300)))
        if self.existing and self.rng.random() < 0.5:
            path = self.rng.choice(self.existing)
            kind = "set"
        else:
            path = f"{ROOT}/r{self.round_no}-{self.seq}"
            kind = "create"
        data = f"r{self.round_no}-s{self.seq}|".encode() + pad
        return WriteOp(self.seq, kind, path, data)

    def run(self) -> None:
        try:
            conn = w.Conn(self.hostport, timeout_ms=10000)
        except OSError as e:
            self.errors.append(f"writer could not connect: {e!r}")
            self.connected.set()
            return
        self.connected.set()
        outstanding: deque[WriteOp] = deque()
        try:
            while True:
                while len(outstanding) < PIPELINE_DEPTH:
                    op = self._next_op()
                    if op.kind == "create":
                        conn.send_only(OP_CREATE2, _create2_body(op.path, op.data))
                    else:
                        conn.send_only(w.OP_SET_DATA, _set_body(op.path, op.data))
                    op.xid = conn.xid
                    self.sent.append(op)
                    self.nodes.setdefault(op.path, Node()).ops.append(op)
                    outstanding.append(op)
                r = conn.read_reply()
                op = outstanding.popleft()
                if r.xid != op.xid:
                    self.errors.append(f"reply xid {r.xid}, expected {op.xid} (replies out of order)")
                    return
                if r.err != 0:
                    self.errors.append(f"{op.kind} {op.path} failed with err {r.err}")
                    return
                op.acked, op.zxid = True, r.zxid
                op.stat = _parse_create2(r.body) if op.kind == "create" else w.parse_stat(r.body)
                if op.kind == "create":
                    self.existing.append(op.path)
        except OSError as e:  # the server died: EOF, reset, broken pipe, or a stalled socket
            self.ended_by = repr(e)
        finally:
            conn.sock.close()


def _get_all(conn: w.Conn, paths: list[str], window: int = 64) -> dict[str, tuple[bytes, dict] | None]:
    """Pipelined getData on every path: path -> (data, stat), or None for NoNode."""
    out: dict[str, tuple[bytes, dict] | None] = {}
    pending: deque[tuple[int, str]] = deque()
    it = iter(paths)
    done = False
    while pending or not done:
        while not done and len(pending) < window:
            p = next(it, None)
            if p is None:
                done = True
                break
            conn.send_only(w.OP_GET_DATA, w.ustring(p) + b"\0")
            pending.append((conn.xid, p))
        if not pending:
            break
        r = conn.read_reply()
        xid, p = pending.popleft()
        assert r.xid == xid, f"getData reply xid {r.xid}, expected {xid}"
        if r.err == -101:
            out[p] = None
        else:
            assert r.err == 0, f"getData {p} -> err {r.err}"
            out[p] = w.parse_get_data(r.body)
    return out


def _verify(nodes: dict[str, Node], observed: dict, sent: list[WriteOp], ctx: str) -> int:
    """Check what survived against what was acknowledged; return how many acked writes were checked."""
    problems: list[str] = []
    checked = 0
    max_applied_seq = 0  # the latest in-flight (unacked) write that we can see was applied
    for path, node in nodes.items():
        got = observed[path]
        acked = [op for op in node.ops if op.acked]
        checked += len(acked)
        last = acked[-1] if acked else None
        later = node.ops[node.ops.index(last) + 1:] if last else list(node.ops)
        creates = [op for op in node.ops if op.kind == "create"]
        create_op = creates[0] if creates else None
        want_czxid = (
            node.base[1]["czxid"] if node.base
            else create_op.stat["czxid"] if create_op and create_op.acked else None
        )
        if got is None:
            if node.base is not None or last is not None:
                problems.append(f"{path}: acknowledged node is missing (last ack: {f'seq {last.seq} {last.kind}' if last else 'verified in an earlier round'})")
            continue
        data, stat = got
        if want_czxid is not None and stat["czxid"] != want_czxid:
            problems.append(f"{path}: czxid {stat['czxid']:#x}, acknowledged {want_czxid:#x}")
        if last is not None and data == last.data:
            if (stat["version"], stat["mzxid"]) != (last.stat["version"], last.stat["mzxid"]):
                problems.append(
                    f"{path}: data of ack seq {last.seq} but version/mzxid {stat['version']}/{stat['mzxid']:#x}, "
                    f"the reply said {last.stat['version']}/{last.stat['mzxid']:#x}"
                )
            continue
        if last is None and node.base is not None and data == node.base[0]:
            if (stat["version"], stat["mzxid"]) != (node.base[1]["version"], node.base[1]["mzxid"]):
                problems.append(f"{path}: data unchanged since last verification but Stat changed: {stat} vs {node.base[1]}")
            continue
        match = [op for op in later if op.data == data]
        if not match:
            problems.append(
                f"{path}: data {data[:24]!r} is neither the acknowledged write "
                f"({(last.data if last else node.base[0] if node.base else None)!r:.40}) nor a later in-flight one"
            )
            continue
        applied = match[0]
        max_applied_seq = max(max_applied_seq, applied.seq)
        floor = last.stat["version"] if last else node.base[1]["version"] if node.base else -1
        if stat["version"] <= floor:
            problems.append(f"{path}: in-flight write seq {applied.seq} applied but version {stat['version']} <= acked {floor}")
    # One session's writes apply in order: every create issued before an applied write must exist.
    for op in sent:
        if op.kind == "create" and not op.acked and op.seq < max_applied_seq and observed.get(op.path) is None:
            problems.append(f"{op.path}: in-flight create seq {op.seq} lost although later write seq {max_applied_seq} survived")
    assert not problems, f"{ctx}: {len(problems)} durability problems:\n" + "\n".join(problems[:30])
    return checked


def test_acknowledged_writes_survive_repeated_sigkill(server):
    """Every acknowledged create2/setData survives 6 SIGKILL+restart cycles on one data dir with data and Stat intact, and the server accepts new writes after each."""
    _sigkill_rounds(server)


def test_acknowledged_writes_survive_repeated_sigkill_with_spread_workers(server_factory):
    """The same with `runtime.spreadWorkers=true`: a standalone Warden then hands its log appends
    to the log's writer thread and answers once that thread's fsync is done, as it does under
    many clients (ZooKeeper ignores the unknown key)."""
    _sigkill_rounds(server_factory(extra_cfg={"runtime.spreadWorkers": "true"}))


def test_acknowledged_writes_survive_repeated_sigkill_with_force_sync_off(server_factory):
    """The same with `forceSync=no` (ZooKeeper's key: the log is written, not fsynced): a kill
    -9 of the process loses nothing, since what was written is in the page cache (a crash of
    the machine could lose it, which this test cannot show)."""
    _sigkill_rounds(server_factory(extra_cfg={"forceSync": "no"}))


def _sigkill_rounds(server):
    seed = int(os.environ.get("COMPAT_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    ctx = f"[{server.kind}, COMPAT_CRASH_SEED={seed}]"
    nodes: dict[str, Node] = {}
    seq = 0
    max_acked_zxid = 0
    total_acked = 0

    setup = w.Conn(server.hostport)
    assert setup.create(ROOT).err == 0
    setup.close()

    for round_no in range(1, ROUNDS + 1):
        writer = Writer(server.hostport, nodes, round_no, seq, rng)
        writer.start()
        assert writer.connected.wait(15), f"{ctx} round {round_no}: writer never connected"
        time.sleep(rng.uniform(0.2, 1.0))
        server.kill()
        writer.join(20)
        assert not writer.is_alive(), f"{ctx} round {round_no}: writer still running after SIGKILL"
        assert not writer.errors, f"{ctx} round {round_no}: {writer.errors}"
        seq = writer.seq
        acked = [op for op in writer.sent if op.acked]
        assert writer.sent, f"{ctx} round {round_no}: the writer sent nothing"
        # Zxids of acknowledged writes increase, including across the previous restart.
        zxids = [op.zxid for op in acked]
        assert zxids == sorted(zxids) and len(set(zxids)) == len(zxids), f"{ctx} round {round_no}: acked zxids not increasing"
        if acked:
            assert acked[0].zxid > max_acked_zxid, (
                f"{ctx} round {round_no}: first zxid after restart {acked[0].zxid:#x} <= earlier acked {max_acked_zxid:#x}"
            )
            max_acked_zxid = acked[-1].zxid
        total_acked += len(acked)
        print(f"{ctx} round {round_no}: {len(acked)} acked, {len(writer.sent)} sent, "
              f"{len(nodes)} nodes tracked, writer ended by {writer.ended_by}")

        server.start()
        checker = w.Conn(server.hostport)
        try:
            observed = _get_all(checker, list(nodes))
            _verify(nodes, observed, writer.sent, f"{ctx} round {round_no} ({len(acked)} acked, {len(writer.sent)} sent)")
            # The restarted server takes new writes, with zxids beyond everything acknowledged.
            r = checker.call(OP_CREATE2, _create2_body(f"{ROOT}/after-restart-{round_no}", b"alive"))
            assert r.err == 0, f"{ctx} round {round_no}: create after restart -> {r.err}"
            assert r.zxid > max_acked_zxid, f"{ctx}: zxid went back: {r.zxid:#x} <= {max_acked_zxid:#x}"
            max_acked_zxid = r.zxid
            g = checker.get_data(f"{ROOT}/after-restart-{round_no}")
            assert g.err == 0 and w.parse_get_data(g.body)[0] == b"alive"
        finally:
            checker.close()
        # What we saw is now the baseline; in-flight writes that survived are durable from here on.
        for path, node in list(nodes.items()):
            if observed[path] is None:
                del nodes[path]
            else:
                node.base, node.ops = observed[path], []

    assert total_acked >= 50, f"{ctx}: only {total_acked} writes acknowledged in {ROUNDS} rounds; the test proved little"
    # A final graceful look: everything known is still there through a fresh session.
    final = w.Conn(server.hostport)
    try:
        observed = _get_all(final, list(nodes))
        changed = [p for p, v in observed.items() if v != nodes[p].base]
        assert not changed, f"{ctx}: changed without a crash: {changed[:10]}"
        r = final.call(w.OP_GET_CHILDREN, w.ustring(ROOT) + b"\0")
        assert r.err == 0
    finally:
        final.close()
