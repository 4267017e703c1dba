"""A deliberately tiny ZooKeeper wire client for the few behaviours no library exposes.

Used by test_wire_basics.py for things a real client hides: the negotiated
session timeout, the optional readOnly byte in ConnectResponse, SetWatches
(opcode 101, xid -8) semantics, and raw error codes. Encodings follow
zookeeper.jute (see shared/reference/zookeeper-facts.md section 1).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

NOTIFICATION_XID = -1
PING_XID = -2
SET_WATCHES_XID = -8

OP_CREATE = 1
OP_DELETE = 2
OP_EXISTS = 3
OP_GET_DATA = 4
OP_SET_DATA = 5
OP_GET_CHILDREN = 8
OP_PING = 11
OP_SET_WATCHES = 101
OP_CLOSE = -11

EV_CREATED, EV_DELETED, EV_DATA_CHANGED, EV_CHILDREN_CHANGED = 1, 2, 3, 4
STATE_SYNC_CONNECTED = 3

STAT = struct.Struct(">qqqqiiiqiiq")


def ustring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">i", -1)
    b = s.encode()
    return struct.pack(">i", len(b)) + b


def buffer(b: bytes | None) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


def vector_ustring(items: list[str]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(ustring(i) for i in items)


def acl_vector(acls: list[tuple[int, str, str]]) -> bytes:
    return struct.pack(">i", len(acls)) + b"".join(
        struct.pack(">i", perms) + ustring(scheme) + ustring(ident) for perms, scheme, ident in acls
    )


OPEN_ACL = [(31, "world", "anyone")]


@dataclass
class Reply:
    xid: int
    zxid: int
    err: int
    body: bytes


@dataclass
class Event:
    type: int
    state: int
    path: str


class Conn:
    def __init__(self, hostport: str, timeout_ms: int = 10000, session_id: int = 0,
                 passwd: bytes = b"\0" * 16, last_zxid: int = 0, send_readonly: bool = True):
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        body = struct.pack(">iqiq", 0, last_zxid, timeout_ms, session_id) + buffer(passwd)
        if send_readonly:
            body += b"\0"
        self._send(body)
        resp = self._recv_frame()
        self.connect_response_len = len(resp)
        self.protocol_version, self.timeout_ms, self.session_id = struct.unpack(">iiq", resp[:16])
        (plen,) = struct.unpack(">i", resp[16:20])
        self.passwd = resp[20:20 + plen]
        rest = resp[20 + plen:]
        self.read_only = bool(rest[0]) if rest else None
        self.xid = 0
        self.events: list[Event] = []

    # framing
    def _send(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return buf

    def _recv_frame(self) -> bytes:
        (n,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(n)

    def read_reply(self) -> Reply:
        frame = self._recv_frame()
        xid, zxid, err = struct.unpack(">iqi", frame[:16])
        return Reply(xid, zxid, err, frame[16:])

    def _read_until(self, xid: int) -> Reply:
        """Read frames, stashing notifications, until the reply for `xid`."""
        while True:
            r = self.read_reply()
            if r.xid == NOTIFICATION_XID:
                self.events.append(parse_event(r.body))
                continue
            if r.xid != xid:
                raise AssertionError(f"reply xid {r.xid} while waiting for {xid}")
            return r

    def call(self, op: int, body: bytes = b"", xid: int | None = None) -> Reply:
        if xid is None:
            self.xid += 1
            xid = self.xid
        self._send(struct.pack(">ii", xid, op) + body)
        return self._read_until(xid)

    def send_only(self, op: int, body: bytes = b"", xid: int | None = None) -> None:
        if xid is None:
            self.xid += 1
            xid = self.xid
        self._send(struct.pack(">ii", xid, op) + body)

    def send_together(self, requests: list[tuple[int, bytes]]) -> None:
        """Send several requests (op, body) in one write, so the server reads them at once."""
        out = b""
        for op, body in requests:
            self.xid += 1
            payload = struct.pack(">ii", self.xid, op) + body
            out += struct.pack(">i", len(payload)) + payload
        self.sock.sendall(out)

    def wait_event(self, timeout: float = 5.0) -> Event:
        if self.events:
            return self.events.pop(0)
        self.sock.settimeout(timeout)
        try:
            r = self.read_reply()
        finally:
            self.sock.settimeout(10)
        assert r.xid == NOTIFICATION_XID, f"expected a notification, got xid {r.xid}"
        return parse_event(r.body)

    def no_event(self, timeout: float = 0.5) -> None:
        assert not self.events, self.events
        self.sock.settimeout(timeout)
        try:
            r = self.read_reply()
        except socket.timeout:
            return
        finally:
            self.sock.settimeout(10)
        raise AssertionError(f"unexpected frame xid={r.xid} err={r.err}")

    # operations
    def create(self, path: str, data: bytes = b"", flags: int = 0, acl=OPEN_ACL) -> Reply:
        return self.call(OP_CREATE, ustring(path) + buffer(data) + acl_vector(acl) + struct.pack(">i", flags))

    def get_data(self, path: str, watch: bool = False) -> Reply:
        return self.call(OP_GET_DATA, ustring(path) + struct.pack(">?", watch))

    def exists(self, path: str, watch: bool = False) -> Reply:
        return self.call(OP_EXISTS, ustring(path) + struct.pack(">?", watch))

    def set_data(self, path: str, data: bytes, version: int = -1) -> Reply:
        return self.call(OP_SET_DATA, ustring(path) + buffer(data) + struct.pack(">i", version))

    def delete(self, path: str, version: int = -1) -> Reply:
        return self.call(OP_DELETE, ustring(path) + struct.pack(">i", version))

    def set_watches(self, relative_zxid: int, data=(), exist=(), child=()) -> Reply:
        body = struct.pack(">q", relative_zxid) + vector_ustring(list(data)) + \
            vector_ustring(list(exist)) + vector_ustring(list(child))
        return self.call(OP_SET_WATCHES, body, xid=SET_WATCHES_XID)

    def ping(self) -> Reply:
        return self.call(OP_PING, xid=PING_XID)

    def close(self) -> Reply | None:
        """closeSession, tolerating replies still in flight from an aborted test."""
        r = None
        try:
            self.send_only(OP_CLOSE)
            while True:
                r = self.read_reply()
                if r.xid == self.xid:
                    break
        except (ConnectionError, OSError):
            r = None
        self.sock.close()
        return r


def parse_event(body: bytes) -> Event:
    etype, state, plen = struct.unpack(">iii", body[:12])
    return Event(etype, state, body[12:12 + plen].decode())


def parse_stat(b: bytes) -> dict:
    names = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
             "ephemeralOwner", "dataLength", "numChildren", "pzxid")
    return dict(zip(names, STAT.unpack(b[:STAT.size])))


def parse_get_data(body: bytes) -> tuple[bytes, dict]:
    (n,) = struct.unpack(">i", body[:4])
    data = body[4:4 + max(n, 0)]
    return data, parse_stat(body[4 + max(n, 0):])
