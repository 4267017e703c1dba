"""Minimal raw ZooKeeper (jute) client for black-box differential testing.

Synchronous, one request in flight per call unless the caller pipelines with
send()/recv() pairs. Notifications (xid -1) that arrive while waiting for a
reply are appended to Conn.events in arrival order. No reconnects, no pings:
the caller keeps every session busy enough that it never times out.

Framing: 4-byte big-endian length, then the record. See
shared/reference/zookeeper-facts.md section 1 for every record used here.
"""

from __future__ import annotations

import socket
import struct

# opcodes
CREATE, DELETE, EXISTS, GETDATA, SETDATA, GETACL, SETACL, GETCHILDREN, SYNC = 1, 2, 3, 4, 5, 6, 7, 8, 9
PING, GETCHILDREN2, CHECK, MULTI, CREATE2 = 11, 12, 13, 14, 15
CREATE_CONTAINER, CREATE_TTL = 19, 21
GET_EPHEMERALS, GET_ALL_CHILDREN_NUMBER = 103, 104
AUTH, CLOSE_SESSION = 100, -11

NOTIFICATION_XID, PING_XID, AUTH_XID = -1, -2, -4

ERR_NAMES = {
    0: "OK", -1: "SystemError", -2: "RuntimeInconsistency", -3: "DataInconsistency",
    -4: "ConnectionLoss", -5: "MarshallingError", -6: "Unimplemented", -7: "OperationTimeout",
    -8: "BadArguments", -12: "UnknownSession", -13: "NewConfigNoQuorum", -14: "ReconfigInProgress",
    -100: "APIError", -101: "NoNode", -102: "NoAuth", -103: "BadVersion",
    -108: "NoChildrenForEphemerals", -110: "NodeExists", -111: "NotEmpty", -112: "SessionExpired",
    -113: "InvalidCallback", -114: "InvalidACL", -115: "AuthFailed", -118: "SessionMoved",
    -119: "NotReadOnly", -120: "EphemeralOnLocalSession", -121: "NoWatcher", -122: "RequestTimeout",
    -123: "ReconfigDisabled", -124: "SessionClosedRequireSaslAuth", -125: "QuotaExceeded",
    -127: "ThrottledOp",
}

EVENT_NAMES = {-1: "None", 1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged",
               4: "NodeChildrenChanged", 5: "DataWatchRemoved", 6: "ChildWatchRemoved",
               7: "PersistentWatchRemoved"}


def err_name(code: int) -> str:
    return ERR_NAMES.get(code, str(code))


# ---------------------------------------------------------------- encoding

def w_int(v: int) -> bytes:
    return struct.pack(">i", v)


def w_long(v: int) -> bytes:
    return struct.pack(">q", v)


def w_bool(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def w_buffer(b: bytes | None) -> bytes:
    if b is None:
        return w_int(-1)
    return w_int(len(b)) + b


def w_string(s: str | None) -> bytes:
    if s is None:
        return w_int(-1)
    return w_buffer(s.encode("utf-8"))


def w_acls(acls) -> bytes:
    """acls: list of (perms, scheme, id) or None."""
    if acls is None:
        return w_int(-1)
    out = [w_int(len(acls))]
    for perms, scheme, ident in acls:
        out.append(w_int(perms) + w_string(scheme) + w_string(ident))
    return b"".join(out)


def enc_request(op: dict) -> tuple[int, bytes]:
    """(opcode, body) for one request described by an op dict."""
    kind = op["kind"]
    if kind == "create":
        body = w_string(op["path"]) + w_buffer(op["data"]) + w_acls(op["acl"]) + w_int(op["flags"])
        if op["opcode"] == CREATE_TTL:
            body += w_long(op["ttl"])
        return op["opcode"], body
    if kind == "delete":
        return DELETE, w_string(op["path"]) + w_int(op["version"])
    if kind == "exists":
        return EXISTS, w_string(op["path"]) + w_bool(op["watch"])
    if kind == "getData":
        return GETDATA, w_string(op["path"]) + w_bool(op["watch"])
    if kind == "setData":
        return SETDATA, w_string(op["path"]) + w_buffer(op["data"]) + w_int(op["version"])
    if kind == "getACL":
        return GETACL, w_string(op["path"])
    if kind == "setACL":
        return SETACL, w_string(op["path"]) + w_acls(op["acl"]) + w_int(op["version"])
    if kind == "getChildren":
        return GETCHILDREN, w_string(op["path"]) + w_bool(op["watch"])
    if kind == "getChildren2":
        return GETCHILDREN2, w_string(op["path"]) + w_bool(op["watch"])
    if kind == "sync":
        return SYNC, w_string(op["path"])
    if kind == "check":
        return CHECK, w_string(op["path"]) + w_int(op["version"])
    if kind == "getEphemerals":
        return GET_EPHEMERALS, w_string(op["path"])
    if kind == "getAllChildrenNumber":
        return GET_ALL_CHILDREN_NUMBER, w_string(op["path"])
    if kind == "multi":
        parts = []
        for sub in op["ops"]:
            code, body = enc_request(sub)
            parts.append(w_int(code) + w_bool(False) + w_int(-1) + body)
        parts.append(w_int(-1) + w_bool(True) + w_int(-1))
        return MULTI, b"".join(parts)
    if kind == "closeSession":
        return CLOSE_SESSION, b""
    raise ValueError(f"unknown op kind {kind}")


# ---------------------------------------------------------------- decoding

class Reader:
    __slots__ = ("b", "i")

    def __init__(self, b: bytes, i: int = 0):
        self.b = b
        self.i = i

    def remaining(self) -> int:
        return len(self.b) - self.i

    def int(self) -> int:
        v = struct.unpack_from(">i", self.b, self.i)[0]
        self.i += 4
        return v

    def long(self) -> int:
        v = struct.unpack_from(">q", self.b, self.i)[0]
        self.i += 8
        return v

    def bool(self) -> bool:
        v = self.b[self.i] != 0
        self.i += 1
        return v

    def buffer(self) -> bytes | None:
        n = self.int()
        if n < 0:
            return None
        v = self.b[self.i:self.i + n]
        if len(v) != n:
            raise ValueError("short buffer")
        self.i += n
        return bytes(v)

    def string(self) -> str | None:
        v = self.buffer()
        return None if v is None else v.decode("utf-8")

    def stat(self) -> dict:
        czxid, mzxid, ctime, mtime = struct.unpack_from(">qqqq", self.b, self.i)
        self.i += 32
        version, cversion, aversion = struct.unpack_from(">iii", self.b, self.i)
        self.i += 12
        eph = self.long()
        data_len, num_children = struct.unpack_from(">ii", self.b, self.i)
        self.i += 8
        pzxid = self.long()
        return {"czxid": czxid, "mzxid": mzxid, "ctime": ctime, "mtime": mtime,
                "version": version, "cversion": cversion, "aversion": aversion,
                "ephemeralOwner": eph, "dataLength": data_len, "numChildren": num_children,
                "pzxid": pzxid}

    def strings(self) -> list | None:
        n = self.int()
        if n < 0:
            return None
        return [self.string() for _ in range(n)]

    def acls(self) -> list | None:
        n = self.int()
        if n < 0:
            return None
        return [[self.int(), self.string(), self.string()] for _ in range(n)]


def dec_response(op: dict, opcode: int, r: Reader) -> dict:
    """Decode the body of a successful (or body-carrying) reply."""
    kind = op["kind"]
    if kind == "create":
        if opcode == CREATE:
            return {"path": r.string()}
        return {"path": r.string(), "stat": r.stat()}
    if kind in ("exists", "setData", "check"):
        return {"stat": r.stat()}
    if kind == "getData":
        return {"data": r.buffer(), "stat": r.stat()}
    if kind == "getACL":
        return {"acl": r.acls(), "stat": r.stat()}
    if kind == "setACL":
        return {"stat": r.stat()}
    if kind == "getChildren":
        return {"children": r.strings()}
    if kind == "getChildren2":
        return {"children": r.strings(), "stat": r.stat()}
    if kind == "sync":
        return {"path": r.string()}
    if kind == "getEphemerals":
        return {"ephemerals": r.strings()}
    if kind == "getAllChildrenNumber":
        return {"total": r.int()}
    if kind == "multi":
        results = []
        while True:
            typ, done, err = r.int(), r.bool(), r.int()
            if done:
                break
            if typ == -1:
                results.append({"type": -1, "err": r.int()})
                continue
            res = {"type": typ, "err": err}
            if typ == CREATE:
                res["path"] = r.string()
            elif typ in (CREATE2, CREATE_TTL, CREATE_CONTAINER):
                res["path"] = r.string()
                res["stat"] = r.stat()
            elif typ == SETDATA:
                res["stat"] = r.stat()
            elif typ in (DELETE, CHECK):
                pass
            else:
                raise ValueError(f"unexpected multi result type {typ}")
            results.append(res)
        return {"results": results}
    return {}


# ---------------------------------------------------------------- connection

class ConnectionClosed(Exception):
    pass


class Conn:
    """One ZooKeeper session over one TCP connection."""

    def __init__(self, hostport: str, timeout_ms: int = 30000, io_timeout: float = 30.0):
        host, _, port = hostport.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=io_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.xid = 0
        self.events: list = []  # (type, state, path, zxid)
        self.closed = False
        req = w_int(0) + w_long(0) + w_int(timeout_ms) + w_long(0) + w_buffer(b"\0" * 16) + w_bool(False)
        self._send_frame(req)
        r = Reader(self._read_frame())
        self.protocol_version = r.int()
        self.negotiated_timeout = r.int()
        self.session_id = r.long()
        self.passwd = r.buffer()
        self.read_only = r.bool() if r.remaining() > 0 else None

    # framing
    def _send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                self.closed = True
                raise ConnectionClosed("server closed the connection")
            self.buf += chunk

    def _read_frame(self) -> bytes:
        self._fill(4)
        (n,) = struct.unpack_from(">i", self.buf, 0)
        if n < 0 or n > 64 * 1024 * 1024:
            raise ValueError(f"bad frame length {n}")
        self._fill(4 + n)
        frame = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        return frame

    # requests
    def send(self, opcode: int, body: bytes, xid: int | None = None) -> int:
        if xid is None:
            self.xid += 1
            xid = self.xid
        self._send_frame(w_int(xid) + w_int(opcode) + body)
        return xid

    def recv(self, xid: int) -> tuple[int, int, Reader]:
        """Wait for the reply to xid; returns (zxid, err, reader at body)."""
        while True:
            frame = self._read_frame()
            r = Reader(frame)
            rxid, zxid, err = r.int(), r.long(), r.int()
            if rxid == NOTIFICATION_XID:
                typ, state, path = r.int(), r.int(), r.string()
                self.events.append((typ, state, path, zxid))
                continue
            if rxid == PING_XID and xid != PING_XID:
                continue
            if rxid != xid:
                raise ValueError(f"xid mismatch: expected {xid}, got {rxid} (err {err})")
            return zxid, err, r

    def call(self, opcode: int, body: bytes) -> tuple[int, int, Reader]:
        return self.recv(self.send(opcode, body))

    def add_auth(self, scheme: str, auth: bytes) -> int:
        self.send(AUTH, w_int(0) + w_string(scheme) + w_buffer(auth), xid=AUTH_XID)
        _, err, _ = self.recv(AUTH_XID)
        return err

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True
