"""Overload protection with ZooKeeper's keys, run the same against ZooKeeper 3.8 where it
makes the same promise:

- `globalOutstandingLimit`: clients pipelining far more writes than the server can serve keep
  the requests in process near the limit, and a well-behaved kazoo session beside them keeps
  its session (its pings are answered) with bounded latency;
- a client that sends and never reads costs bounded memory, and Warden closes it after its
  session timeout (Warden-only: ZooKeeper queues every reply);
- a thousand connections that never finish a handshake (some holding half a frame that
  claims a megabyte) cost bounded memory and are closed after the handshake timeout;
- `connection_throttle_tokens`: new sessions beyond the bucket are refused;
- `largeRequestThreshold`/`largeRequestMaxBytes`: a large request past the budget closes its
  connection;
- `request_throttle_max_requests`: requests wait, all are answered, in order.

Memory is read from /proc/<pid>/status (VmRSS) of the server process.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from kazoo.client import KazooClient, KazooState

import harness
import zkwire


def rss_mib(srv: harness.Server) -> float:
    with open(f"/proc/{srv.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def mntr(srv: harness.Server) -> dict[str, str]:
    text = harness.four_letter(srv.hostport, "mntr")
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def frame(xid: int, op: int, body: bytes) -> bytes:
    payload = struct.pack(">ii", xid, op) + body
    return struct.pack(">i", len(payload)) + payload


def set_data_body(path: str, data: bytes) -> bytes:
    return zkwire.ustring(path) + zkwire.buffer(data) + struct.pack(">i", -1)


class Flooder:
    """One raw session that pipelines setData requests as fast as the socket takes them, with a
    second thread reading (and checking the order of) the replies, for `seconds`."""

    def __init__(self, hostport: str, path: str, size: int, seconds: float):
        self.conn = zkwire.Conn(hostport, timeout_ms=30000)
        self.path, self.size, self.seconds = path, size, seconds
        self.sent = 0
        self.answered = 0
        self.errors: list[str] = []
        self._done_sending = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True),
                        threading.Thread(target=self._read, daemon=True)]
        for t in self.threads:
            t.start()

    def _send(self) -> None:
        body = set_data_body(self.path, b"x" * self.size)
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end:
                batch = b"".join(frame(self.sent + i + 1, zkwire.OP_SET_DATA, body) for i in range(64))
                self.conn.sock.sendall(batch)
                self.sent += 64
        except OSError as e:
            self.errors.append(f"send: {e}")
        self._done_sending.set()

    def _read(self) -> None:
        try:
            while not (self._done_sending.is_set() and self.answered >= self.sent):
                r = self.conn.read_reply()
                if r.xid != self.answered + 1:
                    self.errors.append(f"reply xid {r.xid} after {self.answered}")
                    return
                if r.err != 0:
                    self.errors.append(f"error {r.err}")
                    return
                self.answered += 1
        except OSError as e:
            self.errors.append(f"read: {e}")

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)
        self.conn.sock.close()


def test_pipelined_floods_stay_near_the_outstanding_limit_and_pings_go_on():
    """8 sessions pipeline 1 KiB setData without pause for 8 s (each keeps thousands of
    requests on the wire): the requests in process stay within globalOutstandingLimit plus one
    a connection, memory stays bounded, every flooded request is answered in order, and a kazoo
    session with a 4 s timeout beside them is never suspended and keeps reading."""
    limit = 200
    with harness.Server(name="overload", extra_cfg={"globalOutstandingLimit": limit}) as srv:
        k = KazooClient(srv.hostport, timeout=4)
        k.start()
        states: list[str] = []
        k.add_listener(lambda s: states.append(s))
        k.create("/flood", b"")
        base = rss_mib(srv) if srv.kind == "warden" else 0.0
        flooders = [Flooder(srv.hostport, "/flood", 1024, 8.0) for _ in range(8)]
        peak_outstanding, peak_rss, latencies = 0, base, []
        end = time.monotonic() + 8.0
        while time.monotonic() < end:
            t0 = time.monotonic()
            k.get("/flood")
            latencies.append(time.monotonic() - t0)
            peak_outstanding = max(peak_outstanding, int(mntr(srv)["zk_outstanding_requests"]))
            if srv.kind == "warden":
                peak_rss = max(peak_rss, rss_mib(srv))
            time.sleep(0.05)
        for f in flooders:
            f.join(60)
        sent = sum(f.sent for f in flooders)
        answered = sum(f.answered for f in flooders)
        errors = [e for f in flooders for e in f.errors]
        latencies.sort()
        print(f"{srv.kind}: sent {sent}, answered {answered}, peak outstanding {peak_outstanding}, "
              f"rss {base:.0f} -> {peak_rss:.0f} MiB, kazoo get p50 {latencies[len(latencies) // 2] * 1e3:.1f} ms "
              f"max {latencies[-1] * 1e3:.1f} ms over {len(latencies)}")
        assert not errors, errors[:5]
        assert answered == sent, (answered, sent)
        assert sent > 20 * limit, f"the flood was too small to test anything: {sent}"
        assert KazooState.SUSPENDED not in states and KazooState.LOST not in states, states
        assert latencies[-1] < 2.0, f"a kazoo read waited {latencies[-1]:.2f} s behind the flood"
        # Warden looks at the limit before each request it reads; ZooKeeper's selector threads
        # read what one wake-up brings, so it overshoots by a few dozen.
        slack = len(flooders) + 2 if srv.kind == "warden" else limit // 2
        assert peak_outstanding <= limit + slack, peak_outstanding
        if srv.kind == "warden":
            assert peak_rss - base < 60, f"RSS grew {peak_rss - base:.0f} MiB under the flood"
        k.stop()
        k.close()


@pytest.mark.skipif(harness.default_kind() != "warden",
                    reason="ZooKeeper queues every reply of a client that never reads")
def test_a_client_that_never_reads_costs_bounded_memory_and_is_closed():
    """A session sends 4,000 getData of a 256 KiB node (1 GiB of replies) and reads nothing:
    the server's memory grows by a bounded amount (the requests are small: the server reads
    them all, and holds back the replies), it closes the connection about one session timeout
    after its socket filled, and another client is served all along."""
    with harness.Server(name="noread") as srv:
        k = KazooClient(srv.hostport, timeout=10)
        k.start()
        k.create("/big", b"y" * 262144)
        base = rss_mib(srv)
        c = zkwire.Conn(srv.hostport, timeout_ms=4000)
        body = zkwire.ustring("/big") + b"\0"
        c.sock.settimeout(1.0)
        sent = 0
        closed_at = None
        start = time.monotonic()
        peak = base
        while time.monotonic() - start < 25:
            try:
                if sent < 4000:
                    c.sock.sendall(frame(sent + 1, zkwire.OP_GET_DATA, body))
                    sent += 1
                else:
                    time.sleep(0.2)
                    c.sock.send(b"")
            except socket.timeout:
                pass  # the server stopped reading: our send buffer is full
            except OSError:
                closed_at = time.monotonic()
                break
            peak = max(peak, rss_mib(srv))
            assert k.exists("/big") is not None
            if closed_at is None and _peer_closed(c.sock):
                closed_at = time.monotonic()
                break
        print(f"sent {sent} of 4000, rss {base:.0f} -> {peak:.0f} MiB, closed after "
              f"{None if closed_at is None else round(closed_at - start, 1)} s")
        assert closed_at is not None, "the server kept a connection that never reads"
        assert closed_at - start < 20
        assert peak - base < 100, f"RSS grew {peak - base:.0f} MiB for a client that never reads"
        k.stop()
        k.close()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the server closed (or reset) the connection; unread replies are skipped."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)
        sock.settimeout(1.0)


def test_a_thousand_half_open_connections_cost_bounded_memory_and_are_closed():
    """1,000 connections that never finish a handshake (half of them sent 4 bytes claiming a
    1 MB frame and 10 bytes of it) cost little memory, do not stop a real client, and are
    closed by the server after its handshake timeout (10 s in both servers)."""
    with harness.Server(name="halfopen") as srv:
        base = rss_mib(srv) if srv.kind == "warden" else 0.0
        socks = []
        for i in range(1000):
            s = socket.create_connection((srv.host, srv.port), timeout=5)
            if i % 2:
                s.sendall(struct.pack(">i", 1_000_000) + b"\0" * 10)
            socks.append(s)
        time.sleep(0.5)
        grown = rss_mib(srv) - base if srv.kind == "warden" else 0.0
        k = KazooClient(srv.hostport, timeout=10)
        k.start()
        k.get("/")
        deadline = time.monotonic() + 25
        open_ = list(socks)
        while open_ and time.monotonic() < deadline:
            open_ = [s for s in open_ if not _peer_closed(s)]
            time.sleep(0.5)
        for s in socks:
            s.close()
        print(f"{srv.kind}: 1000 half-open connections grew RSS {grown:.1f} MiB; {len(open_)} still open after 25 s")
        assert not open_, f"{len(open_)} half-open connections still open"
        if srv.kind == "warden":
            assert grown < 40, f"1,000 half-open connections cost {grown:.1f} MiB"
        k.stop()
        k.close()


@pytest.mark.parametrize("where", ["zoo.cfg", "SERVER_JVMFLAGS"])
def test_the_connection_throttle_refuses_sessions_past_its_bucket(where, monkeypatch):
    """connection_throttle_tokens=5 with one token a minute: of 12 handshakes in a row the
    first 5 get sessions and the rest are closed unanswered; an existing session goes on.
    The keys work from zoo.cfg and as `-Dzookeeper.*` in SERVER_JVMFLAGS, as ZooKeeper's
    start scripts pass them."""
    cfg = {"connection_throttle_tokens": 5, "connection_throttle_fill_time": 60000,
           "connection_throttle_fill_count": 1}
    if where == "SERVER_JVMFLAGS":
        if harness.default_kind() != "warden":
            pytest.skip("the harness starts ZooKeeper's JVM itself, not through zkServer.sh")
        monkeypatch.setenv("SERVER_JVMFLAGS", " ".join(f"-Dzookeeper.{k}={v}" for k, v in cfg.items()))
        cfg = {}
    with harness.Server(name="connthrottle", extra_cfg=cfg) as srv:
        ok, refused = [], 0
        for _ in range(12):
            try:
                ok.append(zkwire.Conn(srv.hostport, timeout_ms=10000))
            except (ConnectionError, OSError, struct.error):
                refused += 1
        assert len(ok) == 5 and refused == 7, (len(ok), refused)
        assert ok[0].ping().err == 0
        for c in ok:
            c.sock.close()


def test_a_large_request_past_the_budget_closes_its_connection(monkeypatch, tmp_path):
    """largeRequestThreshold=1024, largeRequestMaxBytes=4096, a disk made 300 ms slower: ten
    2 KiB setData sent together hold more than the budget, so the connection is closed before
    all are answered; small requests on another connection are served."""
    cfg = {"largeRequestThreshold": 1024, "largeRequestMaxBytes": 4096}
    harness.slow_disk(monkeypatch, tmp_path, 300)
    with harness.Server(name="large", extra_cfg=cfg) as srv:
        k = KazooClient(srv.hostport, timeout=10)
        k.start()
        k.create("/large", b"")
        c = zkwire.Conn(srv.hostport, timeout_ms=10000)
        body = set_data_body("/large", b"z" * 2048)
        c.sock.sendall(b"".join(frame(i + 1, zkwire.OP_SET_DATA, body) for i in range(10)))
        answered = 0
        with pytest.raises((ConnectionError, OSError)):
            for _ in range(10):
                r = c.read_reply()
                assert r.err == 0
                answered += 1
        assert answered < 10
        k.set("/large", b"small")
        assert k.get("/large")[0] == b"small"
        k.stop()
        k.close()


@pytest.mark.skipif(harness.default_kind() != "warden", reason="reads Warden's metrics endpoint")
def test_the_request_throttle_holds_requests_and_answers_all_in_order():
    """request_throttle_max_requests=4: 2,000 pipelined writes from 4 sessions all succeed,
    in order, and the wait counter says requests waited."""
    port = harness.free_port()
    cfg = {"request_throttle_max_requests": 4, "request_throttle_stall_time": 5,
           "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
           "metricsProvider.httpPort": port, "metricsProvider.httpHost": "127.0.0.1"}
    with harness.Server(name="reqthrottle", extra_cfg=cfg) as srv:
        k = KazooClient(srv.hostport, timeout=10)
        k.start()
        k.create("/rt", b"")
        conns = [zkwire.Conn(srv.hostport) for _ in range(4)]
        body = set_data_body("/rt", b"v")
        for c in conns:
            c.sock.sendall(b"".join(frame(i + 1, zkwire.OP_SET_DATA, body) for i in range(500)))
        for c in conns:
            for i in range(500):
                r = c.read_reply()
                assert (r.xid, r.err) == (i + 1, 0)
            c.sock.close()
        assert k.exists("/rt").version == 2000
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        waits = [float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("request_throttle_wait_count")]
        assert waits and waits[0] > 0, "no request waited"
        k.stop()
        k.close()
