"""Migration from a standalone Apache ZooKeeper 3.8 to the server under test (issue 38).

A tree is built with real clients on Debian's ZooKeeper 3.8 (`harness.Server(kind="zookeeper")`,
whatever COMPAT_SERVER says), ZooKeeper is stopped (SIGTERM) or killed (SIGKILL), and the
*successor* is started from the same zoo.cfg settings on the same dataDir and client port:
Warden (COMPAT_SERVER=warden, the default), which imports ZooKeeper's files on its first start,
or ZooKeeper 3.8 again (COMPAT_SERVER=zookeeper), which simply restarts on its own files. So
the tests that only need a successor run in both modes, and the ZooKeeper mode proves them:
a ZooKeeper restart keeps the full dump (paths, data, ACLs, every Stat field), the sessions,
their ephemerals and watches. Tests of Warden's own tools (`warden import`, `warden export`,
`warden dump`) and of Warden's log are skipped with COMPAT_SERVER=zookeeper.

Where ZooKeeper's data is damaged, ZooKeeper 3.8 itself is started on an identical damaged
copy and its outcome (refuses to start, or serves a tree) is the expectation.

Files under test are ZooKeeper's `dataDir/version-2/snapshot.<zxid>[.gz|.snappy]` and
`log.<zxid>`; `zk_snapshot()` and `zk_log_entries()` below parse just enough of their format
(jute, see ZooKeeper's FileSnap/FileTxnLog) to damage a chosen byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.security import ACL, Id, Permissions, make_digest_acl

import cache_witness
import harness
import zkcli
import zkwire as w

SUCCESSOR = harness.default_kind()
WARDEN = SUCCESSOR == "warden"
warden_only = pytest.mark.skipif(not WARDEN, reason="Warden-only: Warden's import/export/dump tools and log")


SUPER_AUTH = [("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")]
IMPORT_LOG_RE = re.compile(r"imported the ZooKeeper data dir report=zxid (0x[0-9a-f]+): (\d+) znodes")
ZK_FILE_RE = re.compile(r"^(snapshot|log)\.([0-9a-f]+)(\.gz|\.snappy)?$")
# Session timeouts (ms) of the clients that hold ephemerals across a cutover: long enough that
# no session ends while a test dumps or restarts (tickTime 2000: ZooKeeper allows 4 s..40 s).
HOLDER_TIMEOUT_MS = 30000


# -- servers -------------------------------------------------------------------------------


@pytest.fixture
def servers(request):
    """make(kind, name, extra_cfg=None, data_dir=None, port=None) -> an unstarted harness.Server,
    optionally on another server's data dir and port; all are killed by PID and their temp
    dirs removed at the end of the test."""
    made: list[harness.Server] = []

    def make(kind, name, extra_cfg=None, data_dir=None, port=None):
        srv = harness.Server(kind, name=f"{request.node.name[:24]}-{name}".replace("/", "_"), extra_cfg=extra_cfg)
        made.append(srv)
        if data_dir is not None or port is not None:
            on(srv, data_dir=data_dir, port=port)
        return srv

    try:
        yield make
    finally:
        keep = os.environ.get("COMPAT_KEEP_LOGS")
        for srv in made:
            if keep:
                srv.kill()
                os.makedirs(keep, exist_ok=True)
                shutil.copy(srv.log_path, os.path.join(keep, f"{srv.base_dir.name}.log"))
            srv.close()


def on(srv: harness.Server, data_dir=None, port=None) -> harness.Server:
    """Point an unstarted server at another data dir and/or client port (rewrites its zoo.cfg)."""
    if data_dir is not None:
        srv.data_dir = str(data_dir)
    if port is not None:
        srv.port = int(port)
        srv.hostport = f"{srv.host}:{srv.port}"
    srv._write_config()
    return srv


def successor_of(servers, zk: harness.Server, name: str = "successor") -> harness.Server:
    """The server under test (COMPAT_SERVER) on ZooKeeper's data dir and port, with its zoo.cfg keys."""
    return servers(SUCCESSOR, name, extra_cfg=zk.extra_cfg, data_dir=zk.data_dir, port=zk.port)


def start_fails(srv: harness.Server, timeout: float = 60.0) -> str:
    """Start srv expecting it to exit by itself before serving: returns its log. Fails if it serves."""
    try:
        srv.start(timeout=timeout)
    except harness.ServerStartError as e:
        # The harness SIGKILLs a server that never got ready (a negative return code): not a refusal.
        assert srv.proc is not None and srv.proc.returncode is not None and srv.proc.returncode > 0, \
            f"{srv.kind} did not exit with an error status by itself: {e}"
        with open(srv.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()
    pytest.fail(f"{srv.kind} started and serves on {srv.hostport}; it should have refused\n{srv.describe_log(30)}")


def import_reports(srv: harness.Server) -> list[tuple[int, int]]:
    """(last zxid, znodes) of every 'imported the ZooKeeper data dir' line in a Warden log."""
    with open(srv.log_path, encoding="utf-8", errors="replace") as f:
        return [(int(z, 16), int(n)) for z, n in IMPORT_LOG_RE.findall(f.read())]


def copy_dir(src, dst) -> str:
    """cp -a, keeping ZooKeeper's preallocated (sparse) log padding sparse."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True, timeout=120)
    return str(dst)


def version2(data_dir) -> Path:
    return Path(data_dir) / "version-2"


def zk_files(data_dir) -> list[Path]:
    """ZooKeeper's snapshot.* and log.* files in dataDir/version-2, by name."""
    return sorted(p for p in version2(data_dir).iterdir() if ZK_FILE_RE.match(p.name))


def zxid_of(p: Path) -> int:
    return int(ZK_FILE_RE.match(p.name).group(2), 16)


def snapshots(data_dir) -> list[Path]:
    """ZooKeeper's snapshots, oldest first."""
    return sorted((p for p in zk_files(data_dir) if p.name.startswith("snapshot.")), key=zxid_of)


def logs(data_dir) -> list[Path]:
    """ZooKeeper's txn logs, oldest first."""
    return sorted((p for p in zk_files(data_dir) if p.name.startswith("log.")), key=zxid_of)


def file_digest(path: Path, block: int = 4096) -> str:
    """sha256 of a file's content that reads only its data extents (SEEK_DATA/SEEK_HOLE): the
    size, then every block that is not all zeros with its offset. Equal for equal content, and
    quick on ZooKeeper's logs, which are preallocated 64 MB files that are mostly a hole."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(struct.pack(">q", size))
    zero = bytes(block)
    with open(path, "rb") as f:
        fd = f.fileno()
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            off = start - start % block
            f.seek(off)
            while off < end:
                chunk = f.read(block)
                if not chunk:
                    break
                if chunk != zero[:len(chunk)]:
                    h.update(struct.pack(">q", off) + chunk)
                off += len(chunk)
            pos = max(end, off)
    return h.hexdigest()


def checksums(data_dir) -> dict[str, str]:
    """file_digest of every file in dataDir/version-2 now (call it while only ZooKeeper's are there)."""
    return {p.name: file_digest(p) for p in sorted(version2(data_dir).iterdir()) if p.is_file()}


def assert_untouched(before: dict[str, str], data_dir, what: str) -> None:
    """Every file recorded in `before` is still there with the same content."""
    after = checksums(data_dir)
    changed = [n for n in before if after.get(n) != before[n]]
    assert not changed, f"{what} changed or removed ZooKeeper's files: {changed} (now in version-2: {sorted(after)})"


# -- clients and dumps ---------------------------------------------------------------------


def kazoo(hostport: str, timeout: float = 30.0, super_user: bool = False, **kw) -> KazooClient:
    """A started kazoo client that retries a lost connection at least once a second (kazoo's
    default backs off to a minute, longer than the sessions here live without a server)."""
    kw.setdefault("connection_retry", {"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0})
    c = KazooClient(hosts=hostport, timeout=timeout, auth_data=SUPER_AUTH if super_user else None, **kw)
    c.start(timeout=30)
    return c


def stop_client(c: KazooClient) -> None:
    try:
        c.stop()
    finally:
        c.close()


def abandon(c: KazooClient) -> None:
    """Stop a kazoo client while no server runs: it cannot send closeSession, so its session
    (and its ephemerals) stay open in the data dir until a server expires it."""
    stop_client(c)


STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
               "ephemeralOwner", "dataLength", "numChildren", "pzxid")


def full_dump(hostport: str, root: str = "/") -> dict[str, tuple]:
    """Every node under `root` read as the super user: path -> (data, ACL list, Stat tuple).
    Pipelined level by level (getData, getACL, getChildren of a whole level at once)."""
    c = kazoo(hostport, super_user=True)
    try:
        c.sync(root)
        out: dict[str, tuple] = {}
        level = [root]
        while level:
            futs = [(p, c.get_async(p), c.get_acls_async(p), c.get_children_async(p)) for p in level]
            nxt = []
            for p, fg, fa, fc in futs:
                data, stat = fg.get(timeout=120)
                acls, _ = fa.get(timeout=120)
                children = fc.get(timeout=120)
                out[p] = (data, tuple((a.perms, a.id.scheme, a.id.id) for a in acls),
                          tuple(getattr(stat, f) for f in STAT_FIELDS))
                nxt.extend(("" if p == "/" else p) + "/" + ch for ch in sorted(children))
            level = nxt
        return out
    finally:
        stop_client(c)


def _short(v, limit: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"... ({len(v) if hasattr(v, '__len__') else '?'} long)"


def dump_diff(a: dict, b: dict, names=("zookeeper", "successor"), limit: int = 40) -> list[str]:
    """Human-readable differences between two full dumps; [] when identical."""
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            out.append(f"only in {names[0]}: {p}")
        elif p not in a:
            out.append(f"only in {names[1]}: {p}")
        elif a[p] != b[p]:
            (da, aa, sa), (db, ab, sb) = a[p], b[p]
            if da != db:
                out.append(f"{p} data: {_short(da)} != {_short(db)}")
            if aa != ab:
                out.append(f"{p} acl: {aa} != {ab}")
            for f, x, y in zip(STAT_FIELDS, sa, sb):
                if x != y:
                    out.append(f"{p} {f}: {x:#x} != {y:#x}" if "zxid" in f or f == "ephemeralOwner" else f"{p} {f}: {x} != {y}")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def assert_same_dump(a: dict, b: dict, names=("zookeeper", "successor")) -> None:
    d = dump_diff(a, b, names)
    assert not d, f"{len(d)} differences between {names[0]} ({len(a)} nodes) and {names[1]} ({len(b)} nodes):\n" + "\n".join(d)


def create_many(c: KazooClient, items, window: int = 500) -> list[str]:
    """Async creates ((path, data, kwargs) each) with at most `window` outstanding; the created paths."""
    pending: deque = deque()
    made = []
    for path, data, kw in items:
        pending.append(c.create_async(path, data, **kw))
        if len(pending) >= window:
            made.append(pending.popleft().get(timeout=60))
    while pending:
        made.append(pending.popleft().get(timeout=60))
    return made


def raw_create(hostport: str, path: str, data: bytes | None, flags: int = 0, timeout_ms: int = 30000) -> w.Conn:
    """create through the raw wire client (data None is a null buffer, which kazoo cannot send);
    returns the open connection (its session)."""
    conn = w.Conn(hostport, timeout_ms=timeout_ms)
    r = conn.create(path, data, flags)
    assert r.err == 0, f"create {path} -> err {r.err}"
    return conn


# -- ZooKeeper's files (just enough of the format to damage a chosen byte) -----------------


def _ustring(b: bytes, off: int) -> tuple[bytes | None, int]:
    (n,) = struct.unpack_from(">i", b, off)
    off += 4
    if n < 0:
        return None, off
    return b[off:off + n], off + n


def zk_snapshot(path: Path) -> tuple[set[int], list[dict]]:
    """The ACL ids and the nodes of an uncompressed ZooKeeper snapshot:
    ({ACL id}, [{path, data_off, data_len, acl, stat_off}]) (FileSnap: header, sessions, the ACL
    table, then path + DataNode until the path "/")."""
    b = path.read_bytes()
    magic, version, _dbid = struct.unpack_from(">iiq", b, 0)
    assert magic == 0x5A4B534E, f"{path}: not an uncompressed ZooKeeper snapshot"
    off = 16
    (count,) = struct.unpack_from(">i", b, off)
    off += 4 + count * 12  # sessions: id long, timeout int
    (count,) = struct.unpack_from(">i", b, off)
    off += 4
    acl_ids = set()
    for _ in range(count):  # the ACL table: id long, then a vector of (perms, scheme, id)
        (key, n) = struct.unpack_from(">qi", b, off)
        acl_ids.add(key)
        off += 12
        for _ in range(n):
            off += 4
            _, off = _ustring(b, off)
            _, off = _ustring(b, off)
    nodes = []
    while True:
        p, off = _ustring(b, off)
        if p == b"/":
            return acl_ids, nodes
        (dlen,) = struct.unpack_from(">i", b, off)
        data_off = off + 4
        off = data_off + max(dlen, 0)
        (acl,) = struct.unpack_from(">q", b, off)
        off += 8
        nodes.append({"path": p.decode() or "/", "data_off": data_off, "data_len": dlen, "acl": acl, "stat_off": off})
        off += 8 * 4 + 4 * 3 + 8 * 2  # StatPersisted


def zk_snapshot_nodes(path: Path) -> list[dict]:
    return zk_snapshot(path)[1]


def zk_log_entries(path: Path) -> list[dict]:
    """The entries of a ZooKeeper txn log: [{off, len, zxid, type}] (FileTxnLog: header, then
    crc long, len int, TxnHeader+txn bytes, 'B'; a zero length is the preallocated end)."""
    b = path.read_bytes()
    magic, _version, _dbid = struct.unpack_from(">iiq", b, 0)
    assert magic == 0x5A4B4C47, f"{path}: not a ZooKeeper txn log"
    off, out = 16, []
    while off + 12 <= len(b):
        (n,) = struct.unpack_from(">i", b, off + 8)
        if n <= 0 or off + 12 + n + 1 > len(b):
            break
        _client, _cxid, zxid, _time, typ = struct.unpack_from(">qiqqi", b, off + 12)
        out.append({"off": off, "len": n, "zxid": zxid, "type": typ})
        off += 12 + n + 1
    return out


def flip_byte(path: Path, off: int) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        (v,) = f.read(1)
        f.seek(off)
        f.write(bytes([v ^ 0x5A]))


# -- building a tree on ZooKeeper ----------------------------------------------------------


class Built:
    """What build_tree() left running: the clients holding ephemerals (their session ids)."""

    def __init__(self):
        self.holders: list[KazooClient] = []
        self.big_children = 0

    def session_ids(self) -> list[int]:
        return [h.client_id[0] for h in self.holders]

    def close(self) -> None:
        for h in self.holders:
            try:
                stop_client(h)
            except Exception:
                pass


def build_tree(zk: harness.Server, big_children: int = 10000, seed: int = 38) -> Built:
    """Every node type, ACL scheme and kind of history on a running ZooKeeper, through kazoo,
    zkCli.sh (container, TTL) and the raw wire client (null data). Sessions that hold ephemerals
    stay open (returned); everything else is closed."""
    rng = random.Random(seed)
    built = Built()
    hp = zk.hostport
    c = kazoo(hp, super_user=True)
    try:
        c.add_auth("digest", "bob:bobpw")
        alice = make_digest_acl("alice", "alicepw", all=True)
        reader = make_digest_acl("carol", "carolpw", read=True)
        world_read = ACL(Permissions.READ, Id("world", "anyone"))
        # ACL schemes: world (default), digest, auth (stored as bob's digest), ip (host and mask).
        c.create("/acl", b"acls")
        c.create("/acl/world", b"w")
        c.create("/acl/digest", b"d", acl=[alice, world_read])
        c.create("/acl/auth", b"a", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        c.create("/acl/ip", b"i", acl=[ACL(Permissions.READ | Permissions.WRITE, Id("ip", "127.0.0.1")),
                                       ACL(Permissions.ALL, Id("ip", "10.0.0.0/8"))])
        c.create("/acl/mixed", b"m", acl=[alice, reader, ACL(Permissions.ADMIN, Id("ip", "127.0.0.1"))])
        c.create("/acl/secret", b"nobody-but-super", acl=[reader])  # world cannot read it
        c.create("/acl/set", b"x")
        c.set_acls("/acl/set", [alice])
        c.set_acls("/acl/set", [alice, world_read])  # [alice] is no longer used: ZooKeeper drops it
        # Every ACL list new to ZooKeeper's ACL table was made above, within the first 20 txns,
        # before ZooKeeper can take its first snapshot (snapCount >= 50 rolls after > 25 txns):
        # see test_migration_fuzzy_snapshot_with_new_acl for why.
        # Data: binary, empty, null (raw wire), large.
        c.create("/data", b"")
        c.create("/data/binary", bytes(range(256)) * 3)
        c.create("/data/empty", b"")
        raw_create(hp, "/data/null", None).close()
        c.create("/data/utf8", "grüße ✓".encode())
        c.create("/data/big", rng.randbytes(1_040_000))  # under ZooKeeper's 1 MiB jute.maxbuffer
        # Node types.
        c.create("/types", b"t")
        c.create("/types/persistent", b"p")
        for i in range(5):
            c.create("/types/pseq-", b"%d" % i, sequence=True)
        c.delete(c.create("/types/pseq-", b"gone", sequence=True))  # a gap in the counter
        run = zkcli.run(hp, ["create -c /types/container cdata", "create /types/container/kid k",
                             "create -c /types/container-empty", "create -t 3600000 /types/ttl ttldata",
                             "create -t 7200000 -s /types/ttlseq- x"])
        assert all(o and o[-1].startswith("Created ") for o in run.outputs), str(run)
        # History: setData, setACL, delete, creates and deletes that move cversion/pzxid.
        c.create("/hist", b"h0")
        for i in range(1, 6):
            c.set("/hist", b"h%d" % i)
        c.create("/hist/acl", b"x")
        c.set_acls("/hist/acl", [alice, world_read])
        c.set_acls("/hist/acl", [reader])
        for i in range(10):
            c.create(f"/hist/tmp{i}", b"t")
        for i in range(0, 10, 2):
            c.delete(f"/hist/tmp{i}")
        c.create("/hist/deep/a/b/c", b"deep", makepath=True)
        # A multi that commits and one that fails (logged as an error txn by ZooKeeper).
        t = c.transaction()
        t.create("/hist/multi", b"m1")
        t.create("/hist/multi/child", b"m2")
        t.set_data("/hist", b"h-multi")
        t.delete("/hist/tmp1")
        t.check("/hist/acl", 0)
        results = t.commit()
        assert not any(isinstance(r, Exception) for r in results), f"the multi failed: {results}"
        t = c.transaction()
        t.create("/hist/never", b"x")
        t.check("/hist", 999)
        assert any(isinstance(r, Exception) for r in t.commit()), "the failing multi succeeded"
        # Many children under one parent; sequential names under another.
        c.create("/big", b"parent")
        built.big_children = big_children
        create_many(c, ((f"/big/child-{i:05d}", b"%d" % i, {}) for i in range(big_children)))
        c.create("/seq", b"")
        create_many(c, (("/seq/item-", b"", {"sequence": True}) for _ in range(50)))
        # Live sessions holding ephemerals and ephemeral-sequentials.
        c.create("/live", b"")
        for k in range(2):
            h = kazoo(hp, timeout=HOLDER_TIMEOUT_MS / 1000)
            h.create(f"/live/h{k}-eph", b"e%d" % k, ephemeral=True)
            h.create(f"/live/h{k}-es-", b"", ephemeral=True, sequence=True)
            h.create(f"/live/h{k}-es-", b"", ephemeral=True, sequence=True)
            built.holders.append(h)
        built.holders[1].create("/acl/eph-digest", b"", acl=[alice, world_read], ephemeral=True)
        c.create("/types/after-holders", b"last")
    finally:
        stop_client(c)
    return built


class InflightWriter(threading.Thread):
    """Pipelined creates (8 outstanding) under `parent` on one raw-wire session until the
    connection dies; `acked` holds every path whose create the server acknowledged."""

    def __init__(self, hostport: str, parent: str, depth: int = 8):
        super().__init__(daemon=True, name="inflight-writer")
        self.hostport, self.parent, self.depth = hostport, parent, depth
        self.acked: list[str] = []
        self.sent = 0
        self.errors: list[str] = []
        self.connected = threading.Event()

    def run(self) -> None:
        conn = w.Conn(self.hostport, timeout_ms=HOLDER_TIMEOUT_MS)
        self.connected.set()
        outstanding: deque = deque()
        try:
            while True:
                while len(outstanding) < self.depth:
                    path = f"{self.parent}/n-{self.sent:06d}"
                    self.sent += 1
                    conn.send_only(w.OP_CREATE, w.ustring(path) + w.buffer(b"inflight") + w.acl_vector(w.OPEN_ACL)
                                   + struct.pack(">i", 0))
                    outstanding.append((conn.xid, path))
                r = conn.read_reply()
                xid, path = outstanding.popleft()
                if r.xid != xid or r.err != 0:
                    self.errors.append(f"{path}: reply xid {r.xid} (sent {xid}) err {r.err}")
                    return
                self.acked.append(path)
        except OSError:  # the server died
            pass
        finally:
            conn.sock.close()


class JavaWitness:
    """curator/src/warden/compat/SessionWitness.java as a process (built by curator/build.sh):
    stdout lines collected with a reader thread, commands on stdin. See the Java file."""

    MAIN = "warden.compat.SessionWitness"

    def __init__(self, *args: str):
        cache_witness.build()
        fd, self.log_path = tempfile.mkstemp(prefix="session-witness-", suffix=".log")
        os.close(fd)
        env = dict(os.environ, CURATOR_COMPAT_MAIN=self.MAIN, CURATOR_COMPAT_LOG=os.environ.get("CURATOR_COMPAT_LOG", "warn"))
        with open(self.log_path, "w") as err:
            self.proc = subprocess.Popen([os.path.join(cache_witness.CURATOR_DIR, "run.sh"), *args],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         encoding="utf-8", bufsize=1, env=env, preexec_fn=harness._die_with_parent)
        harness._LIVE[self.proc.pid] = self.proc
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        threading.Thread(target=self._read, daemon=True, name=f"session-witness-{self.proc.pid}").start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                with self._cond:
                    self._lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    def describe(self) -> str:
        try:
            err = Path(self.log_path).read_text(errors="replace").splitlines()[-30:]
        except OSError:
            err = []
        return ("--- witness stdout ---\n" + "\n".join(self.lines()) + "\n--- witness stderr ---\n" + "\n".join(err))

    def wait_line(self, pred, timeout: float, what: str, start: int = 0) -> tuple[int, str]:
        """(index, line) of the first line from index `start` with pred(line) true."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self._lines):
                    line = self._lines[i]
                    if pred(line):
                        return i, line
                    if line.startswith("error "):
                        raise AssertionError(f"witness failed waiting for {what}: {line}\n{self.describe()}")
                    i += 1
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    raise AssertionError(f"no {what} from the witness after {timeout:.0f}s\n{self.describe()}")
                self._cond.wait(left)

    def ask(self, cmd: str, prefix: str, timeout: float = 30.0) -> str:
        start = len(self.lines())
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.wait_line(lambda l: l.startswith(prefix + " "), timeout, prefix, start)[1]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        harness._LIVE.pop(self.proc.pid, None)
        if self.proc.returncode == 0:
            os.unlink(self.log_path)


def warden_tool(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `warden ARGS...` (the import/export/dump tools); output captured as text."""
    return subprocess.run([harness.warden_bin(), *args], capture_output=True, text=True, timeout=timeout)


def json_lines(text: str) -> list[dict]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        obj = json.loads(line)
        assert isinstance(obj, dict) and "kind" in obj, f"line {n} has no kind: {line[:200]}"
        out.append(obj)
    return out


def as_int(v) -> int:
    """A zxid or session id as the tools print it: an integer or a hex string."""
    return v if isinstance(v, int) else int(v, 16 if str(v).startswith("0x") else 10)


def wait_reconnected(c: KazooClient, states: list, timeout: float = 45.0) -> None:
    """Wait until a kazoo client that lost its server is CONNECTED again."""
    harness.wait_until(lambda: "SUSPENDED" in states and c.state == KazooState.CONNECTED, timeout,
                       f"kazoo reconnected (states {states})")


def watch_states(c: KazooClient) -> list[str]:
    states: list[str] = []
    c.add_listener(lambda s: states.append(str(s)))
    return states


# -- 1. the whole tree ---------------------------------------------------------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_migration_full_tree_identical(servers, tmp_path, how):
    """A tree built on ZooKeeper 3.8 with snapCount=100 (dozens of fuzzy snapshots and logs) --
    every node type (persistent, sequential, ephemeral, ephemeral-sequential, container, TTL),
    ACL schemes world/auth/digest/ip, binary, empty, null and ~1 MB data, 10,000 children under
    one parent, setData/setACL/delete/multi history, live sessions holding ephemerals -- reads
    back identically (paths, data, ACLs, every Stat field) from the successor started on
    ZooKeeper's dataDir and port after ZooKeeper was stopped (SIGTERM) or killed (SIGKILL with
    creates in flight: then the successor serves exactly what ZooKeeper restarted on a copy of
    the same files serves, every acknowledged create included); the sessions keep their ids and
    ephemerals, and ZooKeeper's files are not changed."""
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 100})
    zk.start()
    t0 = time.monotonic()
    built = build_tree(zk)
    phases = {"build": time.monotonic() - t0}
    try:
        sessions = built.session_ids()
        states = [watch_states(h) for h in built.holders]
        if how == "sigkill":
            kazoo_c = kazoo(zk.hostport)
            kazoo_c.create("/inflight", b"")
            stop_client(kazoo_c)
        before = full_dump(zk.hostport)
        assert len(before) >= built.big_children + 100
        assert len(snapshots(zk.data_dir)) >= 5 and len(logs(zk.data_dir)) >= 5, zk_files(zk.data_dir)
        writer = None
        if how == "sigterm":
            zk.stop()
        else:
            writer = InflightWriter(zk.hostport, "/inflight")
            writer.start()
            harness.wait_until(lambda: len(writer.acked) >= 300 or not writer.is_alive(), 30, "300 acked creates")
            zk.kill()
            writer.join(20)
            assert not writer.errors and len(writer.acked) >= 300, (writer.errors, len(writer.acked))
        sums = checksums(zk.data_dir)
        ref_dir = copy_dir(zk.data_dir, tmp_path / "zk-copy") if how == "sigkill" else None

        succ = successor_of(servers, zk)
        t0 = time.monotonic()
        succ.start()
        phases["successor start"] = time.monotonic() - t0
        after = full_dump(succ.hostport)
        phases["dump"] = time.monotonic() - t0 - phases["successor start"]
        if how == "sigterm":
            assert_same_dump(before, after)
        else:
            ref = servers("zookeeper", "zk-restarted", extra_cfg=zk.extra_cfg, data_dir=ref_dir)
            ref.start()
            expected = full_dump(ref.hostport)
            ref.stop()
            assert_same_dump(expected, after, names=("zookeeper restarted on a copy", SUCCESSOR))
            missing = [p for p in writer.acked if p not in after]
            assert not missing, f"{len(missing)} acknowledged creates missing: {missing[:5]}"
            outside = lambda d: {p: v for p, v in d.items() if not p.startswith("/inflight")}  # noqa: E731
            assert_same_dump(outside(before), outside(after), names=("zookeeper before the kill", SUCCESSOR))
            print(f"{len(writer.acked)} of {writer.sent} in-flight creates acknowledged; "
                  f"{sum(p.startswith('/inflight/') for p in after)} present after the kill")
        t0 = time.monotonic()
        for k, (h, sid, st) in enumerate(zip(built.holders, sessions, states)):
            wait_reconnected(h, st)
            assert h.client_id[0] == sid and "LOST" not in st, (hex(sid), h.client_id, st)
            assert h.exists(f"/live/h{k}-eph").ephemeralOwner == sid
        phases["reconnect"] = time.monotonic() - t0
        assert_untouched(sums, zk.data_dir, SUCCESSOR)
        if WARDEN:
            reports = import_reports(succ)
            assert len(reports) == 1 and reports[0][1] == len(after), reports
            assert "digest differs" not in Path(succ.log_path).read_text(errors="replace")
        print(f"{how}: {len(after)} nodes, {len(snapshots(zk.data_dir))} snapshots and {len(logs(zk.data_dir))} "
              f"logs of ZooKeeper; seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    finally:
        built.close()


# -- 2. sessions across a live cutover -----------------------------------------------------


@pytest.mark.timeout(240)
def test_migration_sessions_survive_live_cutover(servers):
    """Clients connected to ZooKeeper keep their sessions when ZooKeeper is stopped and the
    successor takes over its data dir and port: a kazoo client keeps its session id and
    ephemerals and never sees LOST; a Java client's data watch set on ZooKeeper fires
    (NodeDataChanged) for a write made on the successor, with no Expired event; a Curator
    InterProcessMutex held before is still held after (its lock node still exists, owned by the
    same session, and a new client cannot take it); and an imported session nobody reconnects
    expires after its timeout, its ephemeral with it."""
    zk = servers("zookeeper", "zk")
    zk.start()
    setup = kazoo(zk.hostport)
    setup.create("/sess/watched", b"v0", makepath=True)
    stop_client(setup)
    k = kazoo(zk.hostport, timeout=HOLDER_TIMEOUT_MS / 1000)
    k_states = watch_states(k)
    sid = k.client_id[0]
    k.create("/sess/k-eph", b"k", ephemeral=True)
    k_es = k.create("/sess/k-es-", b"", ephemeral=True, sequence=True)
    orphan = raw_create(zk.hostport, "/sess/orphan", b"o", flags=1, timeout_ms=6000)  # ephemeral, 6 s
    assert orphan.timeout_ms == 6000
    witness = JavaWitness(zk.hostport, "/sess/watched", "/sess/lock", str(HOLDER_TIMEOUT_MS))
    try:
        _, line = witness.wait_line(lambda l: l.startswith("locked "), 60, "the lock")
        lock_node = line.split(" ", 1)[1]
        assert "," not in lock_node, line
        zk_sid = int(witness.wait_line(lambda l: l.startswith("zk-session "), 5, "zk-session")[1].split()[1], 16)
        cur_sid = int(witness.wait_line(lambda l: l.startswith("curator-session "), 5, "curator-session")[1].split()[1], 16)
        witness.wait_line(lambda l: l == "watching /sess/watched 0", 5, "the watch")
        mark = len(witness.lines())

        zk.stop()
        orphan.sock.close()  # gone with ZooKeeper; it never comes back
        succ = successor_of(servers, zk)
        succ.start()
        started = time.monotonic()
        check = kazoo(succ.hostport)
        try:
            st = check.exists("/sess/orphan")
            assert st is not None and st.ephemeralOwner == orphan.session_id, \
                f"the unreconnected session's ephemeral is gone {time.monotonic() - started:.1f}s after the start: {st}"
            # kazoo: same session, its ephemerals, never LOST.
            wait_reconnected(k, k_states)
            assert k.client_id[0] == sid, (hex(sid), k.client_id)
            for p in ("/sess/k-eph", k_es):
                assert check.exists(p).ephemeralOwner == sid, p
            # Java: reconnected without expiry; the watch set on ZooKeeper fires for a write on the successor.
            i, _ = witness.wait_line(lambda l: l == "zk-state Disconnected", 30, "Disconnected", mark)
            witness.wait_line(lambda l: l == "zk-state SyncConnected", 45, "SyncConnected again", i)
            witness.wait_line(lambda l: l == "curator-state RECONNECTED", 45, "Curator RECONNECTED", mark)
            time.sleep(0.5)  # the client sent SetWatches right after its ConnectRequest
            check.set("/sess/watched", b"v1")
            witness.wait_line(lambda l: l == "watch NodeDataChanged /sess/watched", 30, "the watch to fire", mark)
            held = witness.ask("check", "held").split()
            assert held == ["held", "true", hex(zk_sid), hex(cur_sid)], held
            st = check.exists(lock_node)
            assert st is not None and st.ephemeralOwner == cur_sid, (lock_node, st, hex(cur_sid))
            assert check.get_children("/sess/lock") == [lock_node.rsplit("/", 1)[1]]
            assert witness.ask("contend", "contend") == "contend false"
            bad = [l for l in witness.lines() if l in ("zk-state Expired", "curator-state LOST")]
            assert not bad, witness.describe()
            assert "LOST" not in k_states, k_states
            # The session nobody came back for expires: ZooKeeper gives a loaded session its timeout again.
            harness.wait_until(lambda: check.exists("/sess/orphan") is None, 6 + 2 * harness.TICK_TIME_MS / 1000 + 10,
                               "the unreconnected session to expire")
            gone = time.monotonic() - started
            assert k.client_id[0] == sid and check.exists("/sess/k-eph") is not None
            print(f"the unreconnected 6 s session expired {gone:.1f}s after the successor started")
        finally:
            stop_client(check)
    finally:
        witness.close()
        stop_client(k)


# -- 3. the way back: warden export --------------------------------------------------------


@warden_only
@pytest.mark.timeout(300)
def test_migration_round_trip_export(servers, tmp_path):
    """ZooKeeper 3.8 -> Warden (import on start) -> more writes on Warden (new sessions with
    ephemerals, container, TTL, multi, setACL, deletes) -> Warden stopped -> `warden export` ->
    ZooKeeper 3.8 started on a fresh dataDir holding only the exported snapshot serves exactly
    the dump Warden served before the stop (every Stat field, the ephemerals of sessions made
    on ZooKeeper and on Warden), logs no digest mismatch, and takes back the sessions: clients
    connected to Warden reconnect to it with the same session ids."""
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 100})
    zk.start()
    built = build_tree(zk, big_children=2000)
    extra: list[KazooClient] = []
    try:
        zk.stop()
        wd = successor_of(servers, zk, "warden")
        wd.start()
        c = kazoo(wd.hostport, super_user=True)
        try:
            c.create("/onwarden/a", b"made on warden", makepath=True)
            c.set("/hist", b"set on warden")
            c.set_acls("/acl/world", [make_digest_acl("dave", "davepw", all=True)])
            c.delete("/hist/tmp3")
            c.delete("/big/child-00007")
            create_many(c, ((f"/big/more-{i}", b"w", {}) for i in range(100)))
            t = c.transaction()
            t.create("/onwarden/multi", b"m")
            t.set_data("/onwarden/a", b"a2")
            t.delete("/hist/tmp5")
            assert not any(isinstance(r, Exception) for r in t.commit())
            run = zkcli.run(wd.hostport, ["create -c /onwarden/container", "create /onwarden/container/kid k",
                                          "create -t 3600000 /onwarden/ttl t"])
            assert all(o and o[-1].startswith("Created ") for o in run.outputs), str(run)
        finally:
            stop_client(c)
        for k in range(2):
            h = kazoo(wd.hostport, timeout=HOLDER_TIMEOUT_MS / 1000)
            h.create(f"/onwarden/eph-{k}", b"", ephemeral=True)
            h.create(f"/onwarden/es-{k}-", b"", ephemeral=True, sequence=True)
            extra.append(h)
        holders = built.holders + extra
        sessions = [h.client_id[0] for h in holders]
        states = [watch_states(h) for h in holders]
        before = full_dump(wd.hostport)
        wd.stop()

        out_dir = tmp_path / "export"
        out_dir.mkdir()
        res = warden_tool("export", "--data-dir", zk.data_dir, "--zookeeper-snapshot", str(out_dir))
        assert res.returncode == 0, f"warden export failed: {res.stdout}\n{res.stderr}"
        exported = list(out_dir.iterdir())
        assert len(exported) == 1 and re.fullmatch(r"snapshot\.[0-9a-f]+", exported[0].name), exported
        print(res.stdout.strip())

        back = servers("zookeeper", "zk-back", extra_cfg=zk.extra_cfg, port=wd.port)  # fresh dataDir
        version2(back.data_dir).mkdir()
        shutil.copy(exported[0], version2(back.data_dir))
        back.start()
        after = full_dump(back.hostport)
        assert_same_dump(before, after, names=("warden before the stop", "zookeeper on the export"))
        for h, sid, st in zip(holders, sessions, states):
            wait_reconnected(h, st)
            assert h.client_id[0] == sid and "LOST" not in st, (hex(sid), h.client_id, st)
        assert h.exists("/onwarden/eph-1").ephemeralOwner == sid
        # ZooKeeper computed the loaded tree's digest and it is the one the export recorded.
        log = Path(back.log_path).read_text(errors="replace")
        assert not re.search(r"digests? (are )?not matching|digest mismatch", log, re.I), \
            [l for l in log.splitlines() if "igest" in l][:5]
        recorded = re.search(r"The digest in the snapshot has digest version of \d+, with zxid as (0x[0-9a-f]+), "
                             r"and digest value as (-?\d+)", log)
        computed = re.search(r"Snapshot loaded in \d+ ms, highest zxid is (0x[0-9a-f]+), digest is (-?\d+)", log)
        assert recorded and computed and recorded.groups() == computed.groups(), \
            [l for l in log.splitlines() if "igest" in l][:5]
    finally:
        for h in extra:
            stop_client(h)
        built.close()


# -- 4. damaged files ----------------------------------------------------------------------


class Base:
    """A ZooKeeper data dir left by a stopped ZooKeeper, the zoo.cfg keys it ran with, and the
    full dump it served just before it was stopped."""

    def __init__(self, data_dir: str, cfg: dict, dump: dict):
        self.data_dir, self.cfg, self.dump = data_dir, cfg, dump


@pytest.fixture(scope="module")
def damage_bases(tmp_path_factory):
    """Two ZooKeeper data dirs to damage copies of:
    single: snapshot.0 (written at ZooKeeper's first start) and the one log holding every write;
    multi: snapCount=50 history (several snapshots and logs), a restart (ZooKeeper writes a
    snapshot of the whole tree at start), then 20 more writes and a session holding an
    ephemeral, all in the last log, after the newest snapshot."""
    bases, made = {}, []
    try:
        zk = harness.Server("zookeeper", name="damage-single")
        made.append(zk)
        zk.start()
        c = kazoo(zk.hostport)
        c.create("/s", b"single")
        create_many(c, ((f"/s/n{i}", b"%d" % i, {}) for i in range(40)))
        c.set("/s", b"single-2")
        stop_client(c)
        dump = full_dump(zk.hostport)
        zk.stop()
        assert [p.name for p in zk_files(zk.data_dir)] == ["log.1", "snapshot.0"], zk_files(zk.data_dir)
        bases["single"] = Base(copy_dir(zk.data_dir, tmp_path_factory.mktemp("single") / "data"), zk.extra_cfg, dump)

        cfg = {"snapCount": 50}
        zk = harness.Server("zookeeper", name="damage-multi", extra_cfg=cfg)
        made.append(zk)
        zk.start()
        c = kazoo(zk.hostport)
        c.create("/m", b"multi")
        for i in range(60):
            c.create(f"/m/n{i}", b"%d" % i)
        for i in range(60):
            c.set(f"/m/n{i}", b"v2-%d" % i)
        for i in range(0, 60, 3):
            c.delete(f"/m/n{i}")
        stop_client(c)
        zk.stop()
        zk.start()  # ZooKeeper snapshots the loaded tree at start
        h = kazoo(zk.hostport, timeout=40)  # the longest session tickTime 2000 allows
        h.create("/m/eph", b"held", ephemeral=True)
        for i in range(10):
            h.create(f"/m/tail{i}", b"t%d" % i)
            h.set("/m", b"m%d" % i)
        dump = full_dump(zk.hostport)
        zk.stop()
        abandon(h)  # its session stays open in the files
        snaps, lgs = snapshots(zk.data_dir), logs(zk.data_dir)
        assert len(snaps) >= 3 and len(lgs) >= 3 and zxid_of(lgs[-1]) > zxid_of(snaps[-1]), (snaps, lgs)
        assert len(zk_log_entries(lgs[-1])) >= 20, zk_log_entries(lgs[-1])
        bases["multi"] = Base(copy_dir(zk.data_dir, tmp_path_factory.mktemp("multi") / "data"), cfg, dump)
        yield bases
    finally:
        for srv in made:
            srv.close()


def _newest_snapshot(d):
    return snapshots(d)[-1]


def _last_log(d):
    return logs(d)[-1]


def damage_only_snapshot_flipped(d):
    """One byte of a Stat (the ctime of /zookeeper) flipped in snapshot.0, the only snapshot."""
    snap = _newest_snapshot(d)
    assert snap.name == "snapshot.0"
    node = next(n for n in zk_snapshot_nodes(snap) if n["path"] == "/zookeeper")
    flip_byte(snap, node["stat_off"] + 16 + 7)  # ctime's low byte
    return snap


def damage_newest_snapshot_cut(d):
    """The newest snapshot cut to half its length."""
    snap = _newest_snapshot(d)
    os.truncate(snap, snap.stat().st_size // 2)
    return snap


def damage_newest_snapshot_flipped(d):
    """One byte of a node's data flipped in the newest snapshot (the file is complete, its checksum wrong)."""
    snap = _newest_snapshot(d)
    node = next(n for n in zk_snapshot_nodes(snap) if n["path"] == "/m/n1")
    flip_byte(snap, node["data_off"])
    return snap


def damage_newest_snapshot_magic(d):
    """The newest snapshot's magic number (ZKSN) overwritten."""
    snap = _newest_snapshot(d)
    flip_byte(snap, 1)
    return snap


def damage_log_torn_cut(d):
    """The last log cut in the middle of its 8th-from-last entry (a server that died writing it
    to a file without preallocation)."""
    log = _last_log(d)
    e = zk_log_entries(log)[-8]
    os.truncate(log, e["off"] + 12 + e["len"] // 2)
    return log


def damage_log_torn_zeroed(d):
    """The last log zeroed from the middle of its 8th-from-last entry on, its size kept (a server
    that died writing into ZooKeeper's preallocated, zero-filled log)."""
    log = _last_log(d)
    e = zk_log_entries(log)[-8]
    start = e["off"] + 12 + e["len"] // 2
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.seek(start)
        f.write(bytes(size - start))
    return log


def damage_log_entry_flipped(d):
    """One byte inside the 8th-from-last entry of the last log flipped (its checksum is wrong)."""
    log = _last_log(d)
    e = zk_log_entries(log)[-8]
    flip_byte(log, e["off"] + 12 + e["len"] - 3)
    return log


def damage_log_magic(d):
    """The last log's magic number (ZKLG) overwritten."""
    log = _last_log(d)
    flip_byte(log, 2)
    return log


# case: (base, damage, what ZooKeeper 3.8 does: "refuses" to start, or serves the "whole" tree
# it served before the stop, or a "prefix" of it)
DAMAGE_CASES = {
    "only-snapshot-flipped-byte": ("single", damage_only_snapshot_flipped, "refuses"),
    "newest-snapshot-cut-short": ("multi", damage_newest_snapshot_cut, "whole"),
    "newest-snapshot-flipped-byte": ("multi", damage_newest_snapshot_flipped, "whole"),
    "newest-snapshot-wrong-magic": ("multi", damage_newest_snapshot_magic, "whole"),
    "log-torn-tail-cut": ("multi", damage_log_torn_cut, "prefix"),
    "log-torn-tail-zeroed": ("multi", damage_log_torn_zeroed, "prefix"),
    "log-entry-flipped-byte": ("multi", damage_log_entry_flipped, "refuses"),
    "log-wrong-magic": ("multi", damage_log_magic, "refuses"),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", list(DAMAGE_CASES))
def test_migration_damaged_zookeeper_files(damage_bases, servers, tmp_path, case):
    """The successor does with a damaged ZooKeeper data dir what ZooKeeper 3.8 does with an
    identical copy: a flipped byte in the only snapshot, a flipped byte inside a log entry, or a
    wrong magic number in a log -> it refuses to start (exit status not 0; Warden names the
    file), never serving an empty or partial tree; a newest snapshot cut short, with a flipped
    byte or a wrong magic number -> it falls back to an older snapshot and the logs and serves
    the whole tree; a log whose tail entry is cut short or zeroed -> it serves the txns before
    it. ZooKeeper's files are never changed."""
    base_name, damage, expect = DAMAGE_CASES[case]
    base = damage_bases[base_name]
    ref_dir = copy_dir(base.data_dir, tmp_path / "zk-copy")
    succ_dir = copy_dir(base.data_dir, tmp_path / "successor-copy")
    damage(Path(ref_dir))
    damaged = damage(Path(succ_dir))
    assert checksums(ref_dir) == checksums(succ_dir)
    sums = checksums(succ_dir)

    ref = servers("zookeeper", "zk-ref", extra_cfg=base.cfg, data_dir=ref_dir)
    succ = servers(SUCCESSOR, "successor", extra_cfg=base.cfg, data_dir=succ_dir)
    if expect == "refuses":
        zk_log = start_fails(ref)  # proves the expectation
        log = start_fails(succ)
        if WARDEN:
            assert str(damaged) in log or damaged.name in log, \
                f"Warden's error does not name {damaged}:\n{succ.describe_log(15)}"
            assert not import_reports(succ)
        print(f"{case}: ZooKeeper: {[l for l in zk_log.splitlines() if 'Exception' in l or 'ERROR' in l][:2]}\n"
              f"  {SUCCESSOR}: {[l for l in log.splitlines() if damaged.name in l][:2]}")
    else:
        ref.start()
        expected = full_dump(ref.hostport)
        ref.stop()
        if expect == "whole":
            assert_same_dump(base.dump, expected, names=("zookeeper before the damage", "zookeeper on the damaged copy"))
        else:
            assert expected != base.dump and expected["/m"][0] != base.dump["/m"][0], "the damage lost nothing"
            assert "/m/eph" in expected and "/m/tail0" in expected
        succ.start()
        got = full_dump(succ.hostport)
        assert_same_dump(expected, got, names=("zookeeper on the damaged copy", SUCCESSOR))
        print(f"{case}: served {len(got)} nodes, /m = {got['/m'][0]!r} (before the damage {base.dump['/m'][0]!r})")
    succ.kill()
    assert_untouched(sums, succ_dir, SUCCESSOR)


# -- 5. compressed snapshots ---------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["gz", "snappy"])
def test_migration_compressed_snapshots(servers, method):
    """ZooKeeper 3.8 run with zookeeper.snapshot.compression.method=gz or =snappy writes
    `snapshot.<zxid>.gz` / `.snappy`; the successor started on that data dir after a SIGTERM
    serves the identical tree, with the live sessions and their ephemerals."""
    # The harness passes the zoo.cfg key on to ZooKeeper as -Dzookeeper.snapshot.compression.method.
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 50, "snapshot.compression.method": method})
    try:
        zk.start()
    except harness.ServerStartError as e:
        if method == "snappy" and "snappy" in str(e).lower():
            pytest.skip(f"Debian's ZooKeeper cannot write snappy snapshots here (snappy-java): {str(e)[-300:]}")
        raise
    built = build_tree(zk, big_children=300)
    try:
        sessions = built.session_ids()
        states = [watch_states(h) for h in built.holders]
        before = full_dump(zk.hostport)
        zk.stop()
        snaps = snapshots(zk.data_dir)
        assert len(snaps) >= 3 and all(p.name.endswith("." + method) for p in snaps), snaps
        succ = successor_of(servers, zk)
        succ.start()
        assert_same_dump(before, full_dump(succ.hostport))
        for h, sid, st in zip(built.holders, sessions, states):
            wait_reconnected(h, st)
            assert h.client_id[0] == sid and "LOST" not in st, (hex(sid), h.client_id, st)
        if WARDEN:
            log = Path(succ.log_path).read_text(errors="replace")
            m = re.search(r"imported the ZooKeeper data dir report=.* from (\S+) and", log)
            assert m and m.group(1) == str(snaps[-1]), (m and m.group(0), snaps[-1])
    finally:
        built.close()


# -- 6. warden dump and warden import ------------------------------------------------------


@warden_only
@pytest.mark.timeout(180)
def test_migration_dump_and_import_tools(servers, tmp_path):
    """On a real ZooKeeper 3.8 data dir with a separate dataLogDir: `warden dump snapshot|log
    --json` prints every snapshot and log as JSON Lines (each object has a kind; header first;
    the trailer's node count and the end's txn count match the lines; zxids follow each other
    across the logs); `warden import --json` reports the newest snapshot, the logs replayed, the
    last zxid of the logs, no torn log or passed-over snapshot, a matching ZooKeeper digest, and
    the znode, session and ephemeral counts of the snapshot ZooKeeper itself writes when
    restarted on a copy; Warden started on the imported dir serves ZooKeeper's tree without
    importing again, and `warden dump` reads Warden's own snapshot and log. ZooKeeper's files
    are only read."""
    zk_log_dir = tmp_path / "zk-datalog"
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 50, "dataLogDir": str(zk_log_dir)})
    zk.start()
    built = build_tree(zk, big_children=300)
    zk.stop()
    for h in built.holders:
        abandon(h)  # their sessions and ephemerals stay in the files
    snaps, lgs = snapshots(zk.data_dir), logs(zk_log_dir)
    assert len(snaps) >= 3 and len(lgs) >= 3 and not logs(zk.data_dir), (snaps, lgs)
    sums = {**checksums(zk.data_dir), **{f"log-dir/{k}": v for k, v in checksums(zk_log_dir).items()}}

    for snap in snaps:
        r = warden_tool("dump", "snapshot", str(snap), "--json")
        assert r.returncode == 0, f"dump snapshot {snap.name}: {r.stderr}"
        objs = json_lines(r.stdout)
        assert objs[0]["kind"] == "header" and as_int(objs[0]["zxid"]) == zxid_of(snap), objs[0]
        assert objs[-1]["kind"] == "trailer" and objs[-1]["checksum"] == "ok", objs[-1]
        nodes = [o["path"] for o in objs if o["kind"] == "node"]
        assert objs[-1]["nodes"] == len(nodes) == len(set(nodes)) and "/" in nodes, (snap.name, objs[-1])
    txn_zxids: list[int] = []
    for lg in lgs:
        r = warden_tool("dump", "log", str(lg), "--json")
        assert r.returncode == 0, f"dump log {lg.name}: {r.stderr}"
        objs = json_lines(r.stdout)
        assert objs[0]["kind"] == "header" and objs[-1]["kind"] == "end" and objs[-1]["end"] == "clean", (objs[0], objs[-1])
        zxids = [as_int(o["zxid"]) for o in objs if o["kind"] == "txn"]
        assert objs[-1]["txns"] == len(zxids) and zxids and zxids[0] == zxid_of(lg), (lg.name, objs[-1], zxids[:3])
        txn_zxids += zxids
    assert txn_zxids == list(range(1, len(txn_zxids) + 1)), "the logs' zxids do not follow each other"
    assert warden_tool("dump", "log", str(snaps[-1])).returncode != 0, "dump log accepted a snapshot"
    assert warden_tool("dump", "snapshot", str(lgs[-1])).returncode != 0, "dump snapshot accepted a log"

    out = tmp_path / "imported"
    r = warden_tool("import", "--zookeeper-data-dir", zk.data_dir, "--zookeeper-data-log-dir", str(zk_log_dir),
                    "--data-dir", str(out), "--json")
    assert r.returncode == 0, f"warden import: {r.stdout}\n{r.stderr}"
    report = json.loads(r.stdout)
    print(json.dumps(report))
    assert report["snapshot"] == str(snaps[-1]) and report["snapshot_zxid"] == zxid_of(snaps[-1]), report
    assert report["invalid_snapshots"] == [] and report["torn_logs"] == [] and report["orphan_ephemerals"] == []
    assert report["last_zxid"] == txn_zxids[-1], (hex(report["last_zxid"]), hex(txn_zxids[-1]))
    assert report["logs"] and set(report["logs"]) <= {str(p) for p in lgs}, report["logs"]
    assert report["replay"]["txns"] == sum(z > report["snapshot_zxid"] for z in txn_zxids), report["replay"]
    d = report["digest"]
    assert d and as_int(d["zxid"]) == report["last_zxid"] and d["recorded"] == d["computed"], d

    # ZooKeeper restarted on a copy writes a snapshot of exactly what it loaded: the reference counts.
    ref_log_dir = copy_dir(zk_log_dir, tmp_path / "zk-datalog-copy")
    ref = servers("zookeeper", "zk-ref", extra_cfg={**zk.extra_cfg, "dataLogDir": ref_log_dir},
                  data_dir=copy_dir(zk.data_dir, tmp_path / "zk-copy"))
    ref.start()
    expected = full_dump(ref.hostport)
    ref.stop()
    ref_snap = snapshots(ref.data_dir)[-1]
    assert zxid_of(ref_snap) == report["last_zxid"], (ref_snap.name, hex(report["last_zxid"]))
    objs = json_lines(warden_tool("dump", "snapshot", str(ref_snap), "--json").stdout)
    assert report["znodes"] == objs[-1]["nodes"] == len(expected), (report["znodes"], objs[-1], len(expected))
    assert report["sessions"] == sum(o["kind"] == "session" for o in objs) == len(built.holders), report
    assert report["ephemerals"] == sum(v[2][STAT_FIELDS.index("ephemeralOwner")] > 0 for v in expected.values()), report

    wsnaps = sorted(version2(out).glob("snapshot-*.bin"))
    assert len(wsnaps) == 1, sorted(version2(out).iterdir())
    objs = json_lines(warden_tool("dump", "snapshot", str(wsnaps[0]), "--json").stdout)
    assert objs[0]["kind"] == "header" and objs[-1]["kind"] == "end", (objs[0], objs[-1])
    assert objs[-1]["nodes"] == report["znodes"] and as_int(objs[-1]["last_zxid"]) == report["last_zxid"], objs[-1]
    assert sum(o["kind"] == "session" for o in objs) == report["sessions"]

    srv = servers("warden", "imported", extra_cfg={"snapCount": 50}, data_dir=out)
    srv.start()
    c = kazoo(srv.hostport)
    c.create("/after-import", b"x")
    stop_client(c)
    got = full_dump(srv.hostport)
    srv.stop()
    assert not import_reports(srv), "Warden imported again on a data dir holding Warden state"
    del got["/after-import"]
    got["/"] = expected["/"]  # its cversion/pzxid moved with /after-import
    assert_same_dump(expected, got, names=("zookeeper restarted on a copy", "warden on the imported dir"))
    r = warden_tool("dump", "log", str(out), "--json")
    assert r.returncode == 0, r.stderr
    entries = json_lines(r.stdout)
    assert entries and all(o["kind"] == "entry" for o in entries)
    assert "/after-import" in r.stdout
    after = {**checksums(zk.data_dir), **{f"log-dir/{k}": v for k, v in checksums(zk_log_dir).items()}}
    assert after == sums, "warden import or dump changed ZooKeeper's files"


# -- 7. imported once ----------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_migration_data_dir_never_reimported(servers):
    """Once the successor has taken over ZooKeeper's data dir, restarts (SIGKILL right after
    the takeover, then SIGTERM and SIGKILL after writes) serve the successor's own state, the
    writes made on it included, never ZooKeeper's files again; Warden logs exactly one import
    and leaves ZooKeeper's files as they were."""
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 50})
    zk.start()
    built = build_tree(zk, big_children=300)
    built.close()  # closeSession: no ephemerals left to expire between the restarts
    zk.stop()
    sums = checksums(zk.data_dir)
    succ = successor_of(servers, zk)
    succ.start()
    first = full_dump(succ.hostport)
    succ.kill()
    succ.start()
    assert_same_dump(first, full_dump(succ.hostport), names=("after the takeover", "after a SIGKILL"))
    c = kazoo(succ.hostport, super_user=True)
    c.create("/after/created", b"on the successor", makepath=True)
    c.set("/hist", b"changed on the successor")
    c.delete("/big/child-00000")
    c.set_acls("/acl/world", [make_digest_acl("erin", "erinpw", all=True)])
    create_many(c, ((f"/after/n{i}", b"", {}) for i in range(120)))  # past snapCount: the successor snapshots
    stop_client(c)
    mine = full_dump(succ.hostport)
    assert mine["/hist"][0] == b"changed on the successor" and "/big/child-00000" not in mine
    for restart in ("stop", "kill"):
        getattr(succ, restart)()
        succ.start()
        assert_same_dump(mine, full_dump(succ.hostport), names=("before the restart", f"after {restart}"))
    assert_untouched(sums, zk.data_dir, SUCCESSOR)
    if WARDEN:
        assert len(import_reports(succ)) == 1, import_reports(succ)


# -- 4b. a fuzzy snapshot ------------------------------------------------------------------


def dangling_acls(snap: Path) -> list[tuple[str, int]]:
    """(path, ACL id) of nodes in a snapshot that refer to an ACL its ACL table does not hold;
    [] also for a snapshot still being written."""
    try:
        acl_ids, nodes = zk_snapshot(snap)
    except (struct.error, AssertionError, UnicodeDecodeError):
        return []
    return [(n["path"], n["acl"]) for n in nodes if n["acl"] != -1 and n["acl"] not in acl_ids]


@pytest.mark.timeout(240)
def test_migration_fuzzy_snapshot_with_new_acl(servers, tmp_path):
    """ZooKeeper writes a snapshot while txns go on (a fuzzy snapshot): its ACL table is written
    before the nodes, so a node created with a new ACL list meanwhile can refer to an ACL id the
    table does not hold. ZooKeeper loads such a snapshot: replaying the node's create txn adds
    the ACL under the same id first (DataTree.createNode). A data dir holding only such a
    snapshot and the logs from it on (what a purge of older snapshots leaves) is served by the
    successor exactly as ZooKeeper 3.8 serves it."""
    zk = servers("zookeeper", "zk", extra_cfg={"snapCount": 20})
    zk.start()
    c = kazoo(zk.hostport)
    c.create("/pad", b"")
    create_many(c, ((f"/pad/p{i}", b"x" * 200, {}) for i in range(3000)))  # slower snapshots
    c.create("/r", b"")
    found = None
    for rnd in range(10):
        create_many(c, ((f"/r/n{rnd}-{i}", b"", {"acl": [make_digest_acl(f"u{rnd}-{i}", "pw", all=True)]})
                        for i in range(300)), window=50)
        found = next((p for p in snapshots(zk.data_dir)[:-1] if dangling_acls(p)), None)
        if found:
            break
    stop_client(c)
    zk.stop()
    if found is None:
        pytest.skip("no snapshot was written while a create with a new ACL was applied (10 rounds)")
    print(f"{found.name}: {dangling_acls(found)[:3]}")
    purged = tmp_path / "purged"
    version2(purged).mkdir(parents=True)
    shutil.copy(found, version2(purged))
    needed = [p for p in logs(zk.data_dir) if zxid_of(p) <= zxid_of(found)][-1:] + \
             [p for p in logs(zk.data_dir) if zxid_of(p) > zxid_of(found)]
    for p in needed:
        subprocess.run(["cp", "--sparse=always", str(p), str(version2(purged))], check=True)
    ref = servers("zookeeper", "zk-ref", extra_cfg=zk.extra_cfg, data_dir=copy_dir(purged, tmp_path / "zk-copy"))
    ref.start()
    expected = full_dump(ref.hostport)
    ref.stop()
    path, _ = dangling_acls(found)[0]
    assert expected[path][1][0][1] == "digest", expected[path]
    succ = servers(SUCCESSOR, "successor", extra_cfg=zk.extra_cfg, data_dir=purged)
    succ.start()
    assert_same_dump(expected, full_dump(succ.hostport), names=("zookeeper", SUCCESSOR))
