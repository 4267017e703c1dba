#!/usr/bin/env python3
"""Differential tester: the same seeded random ZooKeeper operations against two
servers, A and B, with normalized results compared op by op.

    diff.py --a HOST:PORT --b HOST:PORT [--seeds N] [--ops M] [--seed-base S]
            [--jobs J] [--run-tag TAG] [--trace]

Per seed: a fresh subtree /<run-tag>/s<seed>, 3 sessions (more are opened when
one is closed; session 1, 4, 7, ... authenticate as digest alice:pw), then M
random ops. Each op goes to both servers; results are normalized (see
normalize_*) and compared. Exit 0 iff no differences and no invariant
violations. On a difference the seed, op index, the op and both normalized
results are printed; rerun one seed with --seed-base SEED --seeds 1 --trace.

Comparison rules (what is NOT compared byte for byte, and why):
  * session ids: replaced by the session's index in the seed ("S0", "S1", ...);
    ephemeralOwner becomes "0", "S<k>" or "other".
  * zxids (czxid, mzxid, pzxid): replaced by the op that produced them,
    "w<i>" = the zxid returned in the reply header of successful write op i
    (setup is op -1); any other zxid (e.g. a closeSession txn) becomes
    "after-w<i>" for the newest labelled zxid below it. So only the ORDER of
    zxids relative to the op sequence is compared, not their values.
    Reply-header zxids of reads and failed writes are not compared (ZooKeeper
    burns a zxid on every failed write; that is not client-visible semantics).
  * ctime/mtime: not compared across servers; per server they are checked to
    be consistent with zxid order (same zxid => same time, larger zxid =>
    time not smaller) and inside the run's wall-clock window.
  * child lists and getEphemerals lists: sorted (ZooKeeper returns hash order).
  * watch events: per session, in arrival order, attributed to the op after
    which they arrived: after every op each live session sends exists("/") and
    all events received before that reply belong to the op. Events the op's own
    session receives before the op's reply are recorded separately ("ev_pre").
    For a closeSession op the events are sorted (ZooKeeper deletes the
    session's ephemerals in hash-set order, all in one txn).
  * notification header zxid: not compared (3.8 sends -1).
Operations deliberately not generated (ZooKeeper 3.8.0 misbehaves, or no client
sends them): standalone check (opcode 13; 3.8.0 never replies when the version
matches), createTTL with a non-TTL mode and ttl < 0 (crashes 3.8.0's
SyncThread and the server exits), createContainer with flags != 4, TTL/container
modes with a mismatched opcode inside multi, reads of syntactically invalid
paths (3.8 does not validate them), and anything at "/" or "/zookeeper".
Deletes under container nodes and ephemerals under containers are avoided so
that the container reaper (timer based) never races the op sequence; TTLs are
>= 1 hour so TTL expiry never happens during a run.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diffwire as W  # noqa: E402

OPEN = [[31, "world", "anyone"]]
ALICE = ("alice", "pw")
ALICE_ID = "alice:" + base64.b64encode(hashlib.sha1(b"alice:pw").digest()).decode()
NAMES = ["a", "b", "c", "d", "e"]
SEQ_PREFIXES = ["q-", "r", ""]
MAX_DEPTH = 4  # relative to base
TTL_MIN = 3_600_000
SESSION_TIMEOUT_MS = 30000
DEFAULT_IO_TIMEOUT = 20.0

WRITE_KINDS = {"create", "delete", "setData", "setACL", "multi"}


# ===================================================================== model

class Node:
    __slots__ = ("kind", "owner", "version", "aversion")

    def __init__(self, kind: str, owner: int | None):
        self.kind = kind  # persistent | ephemeral | container | ttl
        self.owner = owner
        self.version = 0
        self.aversion = 0


class Model:
    """The generator's view of the tree, updated from server A's results only.
    It steers op choice (target mostly existing paths, avoid container races);
    it is never used to judge correctness."""

    def __init__(self, base: str):
        self.base = base
        self.nodes: dict[str, Node] = {base: Node("persistent", None)}

    def paths(self) -> list[str]:
        return sorted(self.nodes)

    @staticmethod
    def parent(path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    def depth(self, path: str) -> int:
        return path[len(self.base):].count("/")

    def children(self, path: str) -> list[str]:
        pre = path + "/"
        return [p for p in self.nodes if p.startswith(pre) and "/" not in p[len(pre):]]

    def parent_is_container(self, path: str) -> bool:
        n = self.nodes.get(self.parent(path))
        return n is not None and n.kind == "container"

    def add(self, path: str, kind: str, owner: int | None) -> None:
        self.nodes[path] = Node(kind, owner)

    def remove(self, path: str) -> None:
        self.nodes.pop(path, None)

    def note_stat(self, path: str, st: dict | None) -> None:
        n = self.nodes.get(path)
        if n is not None and st:
            n.version = st["version"]
            n.aversion = st["aversion"]


def mode_kind(flags: int, opcode: int) -> str:
    if opcode == W.CREATE_CONTAINER or flags == 4:
        return "container"
    if flags in (5, 6):
        return "ttl"
    if flags in (1, 3):
        return "ephemeral"
    return "persistent"


# ================================================================= generator

class Gen:
    def __init__(self, rng: random.Random, model: Model):
        self.rng = rng
        self.m = model
        self.recent: list[str] = []  # recently targeted paths: re-targeting them makes watches fire

    def touch(self, path: str) -> str:
        self.recent.append(path)
        del self.recent[:-8]
        return path

    # --- values
    def data(self):
        r = self.rng.random()
        if r < 0.05:
            return None
        if r < 0.15:
            return b""
        return self.rng.randbytes(self.rng.randint(1, 40))

    def acl(self, authed: bool):
        r = self.rng.random()
        if r < 0.80:
            return OPEN
        choices = [
            [[1, "world", "anyone"]],                        # read only: no children, no writes
            [[27, "world", "anyone"]],                       # all but CREATE
            [[23, "world", "anyone"]],                       # all but DELETE: children stick
            [[31, "ip", "127.0.0.1"]],                       # the test client's own address
            [[31, "ip", "127.0.0.0/8"]],
            [[31, "ip", "10.0.0.0/8"]],                      # not us: NoAuth
            [[31, "digest", ALICE_ID]],                      # only authed sessions
            [[31, "auth", ""]],                              # InvalidACL unless authed
            [[1, "world", "anyone"], [31, "digest", ALICE_ID]],
            [[0, "world", "anyone"]],                        # nobody can do anything
            [],                                              # InvalidACL
            [[31, "world", "nobody"]],                       # InvalidACL
            [[31, "digest", "bob"]],                         # InvalidACL (no ':')
            [[31, "ip", "1.2.3"]],                           # InvalidACL
            [[31, "world", "anyone"], [31, "world", "anyone"]],  # duplicate entries
        ]
        return self.rng.choice(choices)

    def version(self, current: int) -> int:
        r = self.rng.random()
        if r < 0.40:
            return -1
        if r < 0.75:
            return current
        return current + self.rng.choice([1, 2, 5, -2, 1000])

    # --- paths
    def existing(self, allow_base: bool = True) -> str:
        hot = [p for p in self.recent if p in self.m.nodes and (allow_base or p != self.m.base)]
        if hot and self.rng.random() < 0.5:
            return self.rng.choice(hot)
        ps = self.m.paths()
        if not allow_base:
            ps = [p for p in ps if p != self.m.base]
            if not ps:
                return self.m.base + "/" + self.rng.choice(NAMES)
        return self.rng.choice(ps)

    def missing(self) -> str:
        cold = [p for p in self.recent if p not in self.m.nodes]
        if cold and self.rng.random() < 0.3:
            return self.rng.choice(cold)
        r = self.rng.random()
        if r < 0.7:
            parent = self.rng.choice([p for p in self.m.paths() if self.m.depth(p) < MAX_DEPTH])
            return parent + "/" + self.rng.choice(NAMES)
        depth = self.rng.randint(1, MAX_DEPTH)
        return self.m.base + "".join("/" + self.rng.choice(NAMES) for _ in range(depth))

    def target(self, p_existing: float, allow_base: bool = True) -> str:
        if self.rng.random() < p_existing:
            return self.touch(self.existing(allow_base))
        return self.touch(self.missing())

    # --- ops
    def create(self, session: int, authed: bool, in_multi: bool = False) -> dict:
        rng = self.rng
        parents = [p for p in self.m.paths() if self.m.depth(p) < MAX_DEPTH]
        if rng.random() < 0.85:
            parent = rng.choice(parents)
        else:
            parent = self.m.parent(self.missing())
        r = rng.random()
        edge = None
        if r < 0.33:
            flags = 0
        elif r < 0.46:
            flags = 1
        elif r < 0.58:
            flags = 2
        elif r < 0.68:
            flags = 3
        elif r < 0.78:
            flags = 4
        elif r < 0.87:
            flags = 5
        elif r < 0.93:
            flags = 6
        else:
            flags = 0
            edge = rng.choice(["ttl0", "ttlbig", "ttlneg", "ttl_on_create", "ttl_nonttl_mode",
                               "badflag", "badpath", "trailing_slash"])
        if flags in (1, 3) and self.m.nodes.get(parent) is not None and self.m.nodes[parent].kind == "container":
            flags -= 1  # no ephemerals under containers (their deletion would arm the reaper)
        seq = flags in (2, 3, 6)
        name = rng.choice(SEQ_PREFIXES) if seq else rng.choice(NAMES)
        path = parent + "/" + name
        cold = [p for p in self.recent if p not in self.m.nodes and self.m.parent(p) in self.m.nodes]
        if not seq and cold and rng.random() < 0.35:
            path = rng.choice(cold)  # something may be watching it with exists()
            parent = self.m.parent(path)
            pn = self.m.nodes[parent]
            if flags in (1, 3) and pn.kind == "container":
                flags -= 1
        if flags in (0, 1, 2, 3):
            opcode = rng.choice([W.CREATE, W.CREATE2])
        elif flags == 4:
            opcode = W.CREATE_CONTAINER
        else:
            opcode = W.CREATE_TTL
        ttl = TTL_MIN + rng.randrange(1_000_000)
        if edge == "ttl0":
            flags, opcode, ttl = 5, W.CREATE_TTL, 0
        elif edge == "ttlbig":
            flags, opcode, ttl = 6, W.CREATE_TTL, 1 << 40
        elif edge == "ttlneg":
            flags, opcode, ttl = 5, W.CREATE_TTL, -1
        elif edge == "ttl_on_create" and not in_multi:
            flags, opcode = rng.choice([5, 6]), rng.choice([W.CREATE, W.CREATE2])
        elif edge == "ttl_nonttl_mode" and not in_multi:
            # ttl >= 0 only: ttl -1 with a non-TTL mode kills ZooKeeper 3.8.0
            flags, opcode, ttl = rng.choice([0, 2]), W.CREATE_TTL, rng.choice([0, 1000])
        elif edge == "badflag":
            flags, opcode = rng.choice([7, -1, 100]), rng.choice([W.CREATE, W.CREATE2])
        elif edge == "badpath":
            path = rng.choice([parent + "//x", parent + "/x/", parent + "/./x", parent + "/x/..",
                               path.lstrip("/")])
        elif edge == "trailing_slash":
            flags, opcode = 2, W.CREATE
            path = parent + "/"
        if not seq:
            self.touch(path)
        op = {"kind": "create", "opcode": opcode, "path": path, "data": self.data(),
              "acl": self.acl(authed), "flags": flags, "session": session}
        if opcode == W.CREATE_TTL:
            op["ttl"] = ttl
        return op

    def delete(self, session: int) -> dict:
        path = self.target(0.8, allow_base=False)
        n = self.m.nodes.get(path)
        return {"kind": "delete", "path": path, "version": self.version(n.version if n else 0),
                "session": session}

    def set_data(self, session: int) -> dict:
        path = self.target(0.85)
        n = self.m.nodes.get(path)
        return {"kind": "setData", "path": path, "data": self.data(),
                "version": self.version(n.version if n else 0), "session": session}

    def set_acl(self, session: int, authed: bool) -> dict:
        path = self.target(0.85, allow_base=False)
        n = self.m.nodes.get(path)
        acl = self.acl(authed)
        return {"kind": "setACL", "path": path, "acl": acl,
                "version": self.version(n.aversion if n else 0), "session": session}

    def multi(self, session: int, authed: bool) -> dict:
        """A multi; 'plan' decides whether it is meant to succeed."""
        rng = self.rng
        plan = rng.choice(["success", "success", "fail", "random"])
        ops = []
        created: list[str] = []
        n_ops = rng.randint(1, 5) if rng.random() > 0.03 else 0
        for _ in range(n_ops):
            k = rng.random()
            if plan == "random":
                if k < 0.35:
                    ops.append(self.create(session, authed, in_multi=True))
                elif k < 0.55:
                    d = self.delete(session)
                    ops.append(d)
                elif k < 0.80:
                    ops.append(self.set_data(session))
                else:
                    p = self.target(0.8)
                    n = self.m.nodes.get(p)
                    ops.append({"kind": "check", "path": p, "version": self.version(n.version if n else 0)})
                continue
            # planned ops: valid on the model as of now
            if k < 0.45 or not created and k < 0.6:
                parents = [p for p in self.m.paths() if self.m.depth(p) < MAX_DEPTH - 1
                           and self.m.nodes[p].kind in ("persistent", "container", "ttl")] + created
                parent = rng.choice(parents)
                flags = rng.choice([0, 0, 1, 2, 3, 4, 5, 6])
                pn = self.m.nodes.get(parent)
                if flags in (1, 3) and (pn is not None and pn.kind == "container" or parent in created):
                    flags -= 1
                name = rng.choice(["ma", "mb", "mc"]) if flags not in (2, 3, 6) else "mq-"
                opcode = {0: rng.choice([W.CREATE, W.CREATE2]), 1: W.CREATE2, 2: W.CREATE, 3: W.CREATE2,
                          4: W.CREATE_CONTAINER, 5: W.CREATE_TTL, 6: W.CREATE_TTL}[flags]
                op = {"kind": "create", "opcode": opcode, "path": parent + "/" + name,
                      "data": self.data(), "acl": OPEN, "flags": flags}
                if opcode == W.CREATE_TTL:
                    op["ttl"] = TTL_MIN + rng.randrange(1000)
                ops.append(op)
                if flags not in (2, 3, 6) and flags not in (1, 3) and flags != 4:
                    created.append(op["path"])
            elif k < 0.7:
                p = self.existing()
                n = self.m.nodes[p]
                ops.append({"kind": "setData", "path": p, "data": self.data(),
                            "version": rng.choice([-1, n.version])})
            elif k < 0.85:
                p = self.existing()
                ops.append({"kind": "check", "path": p, "version": self.m.nodes[p].version})
            else:
                leaves = [p for p in self.m.paths() if p != self.m.base and not self.m.children(p)
                          and not self.m.parent_is_container(p)]
                if created and rng.random() < 0.5:
                    p = created.pop()
                    ops.append({"kind": "delete", "path": p, "version": rng.choice([-1, 0])})
                elif leaves:
                    p = rng.choice(leaves)
                    ops.append({"kind": "delete", "path": p, "version": -1})
        if plan == "fail" and ops:
            i = rng.randrange(len(ops))
            bad = rng.choice(["badcheck", "exists", "nonode"])
            if bad == "badcheck":
                p = self.existing()
                ops.insert(i, {"kind": "check", "path": p, "version": self.m.nodes[p].version + 7})
            elif bad == "exists":
                ops.insert(i, {"kind": "create", "opcode": W.CREATE, "path": self.m.base, "data": b"",
                               "acl": OPEN, "flags": 0})
            else:
                ops.insert(i, {"kind": "delete", "path": self.m.base + "/nonexistent/x", "version": -1})
        # No deletes under containers, whatever the plan.
        ops = [o for o in ops if not (o["kind"] == "delete" and self.m.parent_is_container(o["path"]))]
        return {"kind": "multi", "ops": ops, "plan": plan, "session": session}

    def read(self, kind: str, session: int) -> dict:
        path = self.target(0.75)
        op = {"kind": kind, "path": path, "session": session}
        if kind in ("exists", "getData", "getChildren", "getChildren2"):
            op["watch"] = self.rng.random() < 0.6
        return op


OP_WEIGHTS = [
    ("create", 20), ("delete", 14), ("setData", 12), ("exists", 10), ("getData", 10),
    ("getChildren", 5), ("getChildren2", 6), ("getACL", 3), ("setACL", 4), ("multi", 9),
    ("sync", 1), ("getEphemerals", 2), ("getAllChildrenNumber", 1),
]
OP_KINDS = [k for k, _ in OP_WEIGHTS]
OP_CUM = []
_acc = 0
for _k, _w in OP_WEIGHTS:
    _acc += _w
    OP_CUM.append(_acc)


def set_excluded(kinds) -> None:
    """Drop op kinds from the mix (changes the sequence, deterministically)."""
    global OP_KINDS, OP_CUM
    unknown = set(kinds) - {k for k, _ in OP_WEIGHTS}
    if unknown:
        raise SystemExit(f"--exclude: unknown op kind(s) {sorted(unknown)}; known: {[k for k, _ in OP_WEIGHTS]}")
    OP_KINDS, OP_CUM, acc = [], [], 0
    for k, w in OP_WEIGHTS:
        if k not in kinds:
            acc += w
            OP_KINDS.append(k)
            OP_CUM.append(acc)


def pick_kind(rng: random.Random) -> str:
    x = rng.random() * OP_CUM[-1]
    for k, c in zip(OP_KINDS, OP_CUM):
        if x < c:
            return k
    return OP_KINDS[-1]


# ================================================================ execution

class SeedAbort(Exception):
    pass


class Session:
    def __init__(self, idx: int, conns: dict, authed: bool):
        self.idx = idx
        self.conns = conns  # "A"/"B" -> zkwire.Conn
        self.authed = authed
        self.alive = True


class Runner:
    def __init__(self, servers: dict, seed: int, n_ops: int, base: str, trace: bool,
                 io_timeout: float):
        self.servers = servers  # "A"/"B" -> hostport
        self.seed = seed
        self.n_ops = n_ops
        self.base = base
        self.trace = trace
        self.io_timeout = io_timeout
        self.rng = random.Random(seed)
        self.model = Model(base)
        self.gen = Gen(self.rng, self.model)
        self.sessions: list[Session] = []
        self.sid_map = {"A": {}, "B": {}}  # session id -> idx
        # raw records: one per op: {"i":, "op":, "A": raw, "B": raw}
        self.records: list[dict] = []
        self.invariant_failures: list[str] = []
        self.t_start = time.time()

    # --- sessions
    def open_session(self) -> Session:
        idx = len(self.sessions)
        authed = idx % 3 == 1
        conns, raw = {}, {}
        for s, hp in self.servers.items():
            try:
                c = W.Conn(hp, SESSION_TIMEOUT_MS, self.io_timeout)
            except Exception as e:  # noqa: BLE001
                raise SeedAbort(f"server {s} ({hp}): cannot open session {idx}: {e!r}")
            conns[s] = c
            self.sid_map[s][c.session_id] = idx
            raw[s] = {"err": 0, "open": {"timeout": c.negotiated_timeout, "passwd_len": len(c.passwd or b""),
                                         "readOnly": c.read_only, "protocolVersion": c.protocol_version,
                                         "sid_nonzero": c.session_id != 0}}
            if authed:
                raw[s]["auth_err"] = c.add_auth("digest", f"{ALICE[0]}:{ALICE[1]}".encode())
        sess = Session(idx, conns, authed)
        self.sessions.append(sess)
        self.records.append({"i": len(self.records), "op": {"kind": "openSession", "session": idx},
                             "A": raw["A"], "B": raw["B"]})
        return sess

    def live(self) -> list[Session]:
        return [s for s in self.sessions if s.alive]

    # --- one op on both servers
    def execute(self, op: dict) -> dict:
        sess = self.sessions[op["session"]]
        code, body = W.enc_request(op)
        xids = {}
        for s in ("A", "B"):
            c = sess.conns[s]
            try:
                xids[s] = c.send(code, body)
            except OSError as e:
                raise SeedAbort(f"server {s}: send failed for {op['kind']}: {e!r}")
        raw = {}
        for s in ("A", "B"):
            c = sess.conns[s]
            try:
                zxid, err, r = c.recv(xids[s])
            except Exception as e:  # noqa: BLE001 -- closed, timed out, bad frame, xid mismatch
                raise SeedAbort(f"server {s}: no reply to {op['kind']} on session {sess.idx}: {e!r}")
            res = {"err": err, "zxid": zxid}
            if r.remaining():
                try:
                    res["body"] = W.dec_response(op, code, r)
                except Exception as e:  # noqa: BLE001
                    res["body_error"] = repr(e)
                if r.remaining():
                    res["trailing_bytes"] = r.remaining()
            res["ev_pre"] = [self.norm_event(e) for e in c.events]
            c.events.clear()
            raw[s] = res
        rec = {"i": len(self.records), "op": op, "A": raw["A"], "B": raw["B"]}
        self.records.append(rec)
        return rec

    def close_session(self, sess: Session) -> dict:
        op = {"kind": "closeSession", "session": sess.idx}
        rec = self.execute(op)
        sess.alive = False
        for c in sess.conns.values():
            c.close()
        return rec

    def drain(self, rec: dict) -> None:
        """exists("/") on every live session; events that arrive first belong to rec."""
        live = self.live()
        pending = []
        for sess in live:
            for s in ("A", "B"):
                c = sess.conns[s]
                try:
                    pending.append((sess, s, c.send(W.EXISTS, W.w_string("/") + W.w_bool(False))))
                except OSError as e:
                    raise SeedAbort(f"server {s}: drain send failed on session {sess.idx}: {e!r}")
        for sess, s, xid in pending:
            c = sess.conns[s]
            try:
                c.recv(xid)
            except Exception as e:  # noqa: BLE001
                raise SeedAbort(f"server {s}: drain on session {sess.idx} failed after op {rec['i']}: {e!r}")
        for s in ("A", "B"):
            evs = {}
            for sess in live:
                c = sess.conns[s]
                if c.events:
                    evs[str(sess.idx)] = [self.norm_event(e) for e in c.events]
                    c.events.clear()
            rec[s]["ev"] = evs

    def norm_event(self, e) -> list:
        typ, state, path, _zxid = e
        return [W.EVENT_NAMES.get(typ, str(typ)), state, self.rel(path)]

    def rel(self, path):
        if path is None:
            return None
        if path == self.base:
            return "~"
        if path.startswith(self.base + "/"):
            return "~" + path[len(self.base):]
        return path

    # --- model update from A
    def update_model(self, op: dict, res: dict) -> None:
        m = self.model
        kind = op["kind"]
        body = res.get("body") or {}
        if res["err"] != 0:
            return
        if kind == "create":
            m.add(body.get("path", op["path"]), mode_kind(op["flags"], op["opcode"]),
                  op["session"] if op["flags"] in (1, 3) else None)
        elif kind == "delete":
            m.remove(op["path"])
        elif kind in ("setData", "exists", "getData", "setACL", "getChildren2", "getACL"):
            m.note_stat(op["path"], body.get("stat"))
        elif kind == "multi":
            results = body.get("results", [])
            if any(r["type"] == -1 for r in results):
                return
            for sub, r in zip(op["ops"], results):
                if sub["kind"] == "create":
                    m.add(r.get("path", sub["path"]), mode_kind(sub["flags"], sub["opcode"]),
                          op["session"] if sub["flags"] in (1, 3) else None)
                elif sub["kind"] == "delete":
                    m.remove(sub["path"])
                elif sub["kind"] == "setData":
                    m.note_stat(sub["path"], r.get("stat"))

    # --- main loop
    def run(self) -> None:
        rng = self.rng
        # setup: the seed's base node (op index -1 in reports)
        setup = None
        for s, hp in self.servers.items():
            top = self.base.rsplit("/", 1)[0]
            code, body = W.enc_request({"kind": "create", "opcode": W.CREATE, "path": top, "data": b"",
                                        "acl": OPEN, "flags": 0})
            try:
                c = W.Conn(hp, SESSION_TIMEOUT_MS, self.io_timeout)
                c.call(code, body)  # NodeExists is fine
                c.close()
            except Exception as e:  # noqa: BLE001
                raise SeedAbort(f"server {s} ({hp}): cannot create {top}: {e!r}")
        for _ in range(3):
            self.open_session()
        setup_op = {"kind": "create", "opcode": W.CREATE2, "path": self.base, "data": b"base",
                    "acl": OPEN, "flags": 0, "session": 0, "setup": True}
        rec = self.execute(setup_op)
        self.drain(rec)
        forced_close_at = self.n_ops // 2
        done = 0
        while done < self.n_ops:
            live = self.live()
            want_close = (done == forced_close_at) or (rng.random() < 0.004)
            if want_close and len(live) > 1:
                if done == forced_close_at:
                    counts = {s.idx: 0 for s in live}
                    for n in self.model.nodes.values():
                        if n.owner in counts:
                            counts[n.owner] += 1
                    victim_idx = max(sorted(counts), key=lambda k: counts[k])
                    victim = self.sessions[victim_idx]
                else:
                    victim = rng.choice(live)
                rec = self.close_session(victim)
                self.drain(rec)
                done += 1
                # its ephemerals must be gone, on both servers
                gone = sorted(p for p, n in self.model.nodes.items() if n.owner == victim.idx)
                for p in gone:
                    self.model.remove(p)
                survivors = self.live()
                for p in gone:
                    if done >= self.n_ops:
                        break
                    checker = rng.choice(survivors)
                    op = {"kind": "exists", "path": p, "watch": False, "session": checker.idx,
                          "expect": "NoNode"}
                    rec = self.execute(op)
                    self.drain(rec)
                    done += 1
                    for s in ("A", "B"):
                        if rec[s]["err"] != -101:
                            self.invariant_failures.append(
                                f"seed {self.seed} op {rec['i']}: server {s}: ephemeral {self.rel(p)} of closed "
                                f"session S{victim.idx} still exists (err {W.err_name(rec[s]['err'])})")
                if len(self.live()) < 3:
                    self.open_session()
                continue
            sess = rng.choice(live)
            kind = pick_kind(rng)
            g = self.gen
            if kind == "create":
                op = g.create(sess.idx, sess.authed)
            elif kind == "delete":
                op = g.delete(sess.idx)
                if self.model.parent_is_container(op["path"]):
                    op = {"kind": "exists", "path": op["path"], "watch": False, "session": sess.idx}
            elif kind == "setData":
                op = g.set_data(sess.idx)
            elif kind == "setACL":
                op = g.set_acl(sess.idx, sess.authed)
            elif kind == "multi":
                op = g.multi(sess.idx, sess.authed)
            else:
                op = g.read(kind, sess.idx)
            rec = self.execute(op)
            self.drain(rec)
            self.update_model(op, rec["A"])
            done += 1
        self.t_end = time.time()
        for sess in self.live():
            for c in sess.conns.values():
                c.close()


# ============================================================ normalization

def setup_offset(records: list[dict]) -> int:
    # op index used in reports: the setup create is -1, ops are 0..n-1
    for rec in records:
        if rec["op"].get("setup"):
            return rec["i"]
    return 0


class Normalizer:
    def __init__(self, runner: Runner, s: str):
        self.r = runner
        self.s = s
        self.sids = runner.sid_map[s]
        off = setup_offset(runner.records)
        self.labelled = []
        for rec in runner.records:
            op, res = rec["op"], rec[s]
            if op["kind"] in WRITE_KINDS and res.get("err") == 0:
                if op["kind"] == "multi":
                    results = (res.get("body") or {}).get("results", [])
                    if not op["ops"] or any(r["type"] == -1 for r in results):
                        continue
                self.labelled.append((res["zxid"], rec["i"] - off - 1))
        self.labelled.sort()
        self.label_of = {}
        for z, i in self.labelled:
            self.label_of.setdefault(z, i)
        self.keys = [z for z, _ in self.labelled]
        self.time_pairs = []  # (zxid, time, where)

    def op_index(self, rec) -> int:
        return rec["i"] - setup_offset(self.r.records) - 1

    def zx(self, z: int) -> str:
        if z in self.label_of:
            return "w%d" % self.label_of[z]
        # newest labelled zxid below z
        k = bisect.bisect_left(self.keys, z)
        if k == 0:
            return "before-start" if z != 0 else "0"
        return "after-w%d" % self.label_of[self.keys[k - 1]]

    def owner(self, eo: int) -> str:
        if eo == 0:
            return "0"
        if eo in self.sids:
            return "S%d" % self.sids[eo]
        return "other"

    def stat(self, st: dict | None, where: str):
        if st is None:
            return None
        self.time_pairs.append((st["czxid"], st["ctime"], where + ".ctime"))
        self.time_pairs.append((st["mzxid"], st["mtime"], where + ".mtime"))
        return {"czxid": self.zx(st["czxid"]), "mzxid": self.zx(st["mzxid"]), "pzxid": self.zx(st["pzxid"]),
                "version": st["version"], "cversion": st["cversion"], "aversion": st["aversion"],
                "ephemeralOwner": self.owner(st["ephemeralOwner"]), "dataLength": st["dataLength"],
                "numChildren": st["numChildren"]}

    def body(self, kind: str, b: dict, where: str) -> dict:
        out = {}
        for k, v in b.items():
            if k == "stat":
                out[k] = self.stat(v, where)
            elif k == "path":
                out[k] = self.r.rel(v)
            elif k == "data":
                out[k] = None if v is None else v.hex()
            elif k == "children":
                out[k] = None if v is None else sorted(v)
            elif k == "ephemerals":
                out[k] = None if v is None else sorted(self.r.rel(p) for p in v)
            elif k == "results":
                out[k] = []
                for j, sub in enumerate(v):
                    sb = {"type": sub["type"], "err": W.err_name(sub["err"])}
                    if "path" in sub:
                        sb["path"] = self.r.rel(sub["path"])
                    if "stat" in sub:
                        sb["stat"] = self.stat(sub["stat"], f"{where}.results[{j}]")
                    out[k].append(sb)
            else:
                out[k] = v
        return out

    def record(self, rec: dict) -> dict:
        res = rec[self.s]
        op = rec["op"]
        where = "op %d" % self.op_index(rec)
        out = {"err": W.err_name(res.get("err", 0))}
        for k in ("open", "auth_err", "body_error", "trailing_bytes"):
            if k in res:
                out[k] = res[k]
        if "body" in res:
            out["body"] = self.body(op["kind"], res["body"], where)
        ev_pre = res.get("ev_pre") or []
        ev = res.get("ev") or {}
        if op["kind"] == "closeSession":
            ev_pre = sorted(ev_pre)
            ev = {k: sorted(v) for k, v in ev.items()}
        if ev_pre:
            out["ev_pre"] = ev_pre
        if ev:
            out["ev"] = ev
        return out

    def check_times(self, t0: float, t1: float) -> list[str]:
        fails = []
        by_z = {}
        for z, t, where in self.time_pairs:
            if z in by_z and by_z[z][0] != t:
                fails.append(f"server {self.s}: zxid {self.zx(z)} has two times: {by_z[z][0]} ({by_z[z][1]}) "
                             f"and {t} ({where})")
            by_z.setdefault(z, (t, where))
        prev = None
        lo, hi = int((t0 - 10) * 1000), int((t1 + 10) * 1000)
        for z in sorted(by_z):
            t, where = by_z[z]
            if z == 0:
                continue
            if z in self.label_of or self.zx(z) != "before-start":
                if not lo <= t <= hi:
                    fails.append(f"server {self.s}: time {t} of {self.zx(z)} ({where}) outside the run "
                                 f"window [{lo}, {hi}]")
            if prev is not None and t < prev[1]:
                fails.append(f"server {self.s}: time goes backwards: {self.zx(prev[0])}@{prev[1]} ({prev[2]}) "
                             f"then {self.zx(z)}@{t} ({where})")
            prev = (z, t, where)
        # write zxids must increase with op order
        ops_order = [(i, z) for z, i in self.labelled]
        ops_order.sort()
        for (i1, z1), (i2, z2) in zip(ops_order, ops_order[1:]):
            if not z2 > z1:
                fails.append(f"server {self.s}: write op {i2} has zxid {z2:#x} <= zxid {z1:#x} of earlier write op {i1}")
        return fails[:10]


def describe_op(op: dict, rel) -> dict:
    out = {}
    for k, v in op.items():
        if k == "path":
            out[k] = rel(v)
        elif k == "data":
            out[k] = None if v is None else v.hex()
        elif k == "ops":
            out[k] = [describe_op(o, rel) for o in v]
        else:
            out[k] = v
    return out


# ==================================================================== seeds

def run_seed(args_tuple) -> dict:
    a, b, seed, n_ops, run_tag, trace, max_report, io_timeout = args_tuple
    base = f"/{run_tag}/s{seed}"
    runner = Runner({"A": a, "B": b}, seed, n_ops, base, trace, io_timeout)
    lines: list[str] = []
    aborted = None
    t0 = time.time()
    try:
        runner.run()
    except SeedAbort as e:
        aborted = str(e)
    except Exception:  # noqa: BLE001
        aborted = "internal error:\n" + traceback.format_exc()
    finally:
        for sess in runner.sessions:
            for c in sess.conns.values():
                c.close()
    t1 = time.time()
    na, nb = Normalizer(runner, "A"), Normalizer(runner, "B")
    mismatches = 0
    off = setup_offset(runner.records)
    for rec in runner.records:
        ra, rb = na.record(rec), nb.record(rec)
        idx = rec["i"] - off - 1
        ja, jb = json.dumps(ra, sort_keys=True), json.dumps(rb, sort_keys=True)
        if trace:
            lines.append(f"seed {seed} op {idx}: {json.dumps(describe_op(rec['op'], runner.rel), sort_keys=True)}")
            lines.append(f"    A: {ja}")
            if ja != jb:
                lines.append(f"    B: {jb}")
        if ja != jb:
            mismatches += 1
            if mismatches <= max_report:
                lines.append(f"MISMATCH seed {seed} op {idx} (session S{rec['op'].get('session')}):")
                lines.append(f"  op: {json.dumps(describe_op(rec['op'], runner.rel), sort_keys=True)}")
                lines.append(f"  A:  {ja}")
                lines.append(f"  B:  {jb}")
    inv = list(runner.invariant_failures)
    if not aborted:
        inv += na.check_times(runner.t_start, t1) + nb.check_times(runner.t_start, t1)
    for f in inv[:max_report]:
        lines.append(f"INVARIANT seed {seed}: {f}")
    if aborted:
        lines.append(f"ABORTED seed {seed} after {len(runner.records)} records: {aborted}")
    n_done = sum(1 for r in runner.records if r["op"]["kind"] != "openSession" and not r["op"].get("setup"))
    return {"seed": seed, "ops": n_done, "records": len(runner.records), "mismatches": mismatches,
            "invariants": len(inv), "aborted": aborted is not None, "lines": lines,
            "sessions": len(runner.sessions), "seconds": t1 - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="HOST:PORT of server A (the reference)")
    ap.add_argument("--b", required=True, help="HOST:PORT of server B (under test)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--ops", type=int, default=500, help="ops per seed")
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="seeds run in parallel (default 2)")
    ap.add_argument("--run-tag", default=None, help="top-level node name (default wdiff-<time>-<pid>)")
    ap.add_argument("--trace", action="store_true", help="print every op and its normalized result")
    ap.add_argument("--max-report", type=int, default=5, help="mismatches printed per seed")
    ap.add_argument("--exclude", default="",
                    help="comma-separated op kinds not to generate (changes the op sequence): "
                         + ",".join(k for k, _ in OP_WEIGHTS))
    ap.add_argument("--io-timeout", type=float, default=DEFAULT_IO_TIMEOUT,
                    help="seconds to wait for any single reply")
    args = ap.parse_args(argv)
    if args.exclude:
        set_excluded({k.strip() for k in args.exclude.split(",") if k.strip()})
    run_tag = args.run_tag or f"wdiff-{int(time.time() * 1000)}-{os.getpid()}"
    seeds = list(range(args.seed_base, args.seed_base + args.seeds))
    work = [(args.a, args.b, sd, args.ops, run_tag, args.trace, args.max_report, args.io_timeout) for sd in seeds]
    t0 = time.time()
    print(f"diff.py: A={args.a} B={args.b} seeds {seeds[0]}..{seeds[-1]} x {args.ops} ops, "
          f"run tag /{run_tag}, {args.jobs} job(s)", flush=True)
    if args.jobs > 1 and len(seeds) > 1:
        with multiprocessing.get_context("fork").Pool(min(args.jobs, len(seeds))) as pool:
            results = list(pool.imap(run_seed, work))
    else:
        results = [run_seed(w) for w in work]
    total_ops = total_mm = total_inv = aborted = 0
    for r in results:
        for line in r["lines"]:
            print(line)
        status = "OK" if not (r["mismatches"] or r["invariants"] or r["aborted"]) else "DIFF"
        print(f"seed {r['seed']}: {status} {r['ops']} ops, {r['sessions']} sessions, "
              f"{r['mismatches']} mismatches, {r['invariants']} invariant failures"
              f"{', ABORTED' if r['aborted'] else ''} ({r['seconds']:.1f}s)", flush=True)
        total_ops += r["ops"]
        total_mm += r["mismatches"]
        total_inv += r["invariants"]
        aborted += r["aborted"]
    dt = time.time() - t0
    print(f"TOTAL: {len(results)} seeds, {total_ops} ops, {total_mm} mismatched results, "
          f"{total_inv} invariant failures, {aborted} aborted seeds, {dt:.1f}s")
    return 0 if not (total_mm or total_inv or aborted) else 1


if __name__ == "__main__":
    sys.exit(main())
