"""Four-letter words as an operator sees them, and tools/zkstat.sh.

Every format assertion here was checked against Apache ZooKeeper 3.8.0
(COMPAT_SERVER=zookeeper). Where Warden prints something else, the test keeps
ZooKeeper's assertion and is marked `deviation(...)` (xfail(strict) for Warden
only); the reason names the difference.

Sessions whose per-connection numbers are asserted use zkwire.Conn with a 40 s
timeout: it sends nothing on its own (no pings), so its counters are exact.
"""

from __future__ import annotations

import os
import platform
import pwd
import re
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import harness
import zkwire

ZKSTAT = str(Path(__file__).resolve().parent / "tools" / "zkstat.sh")
EPHEMERAL = 1  # CreateMode flag
NO_NODE = -101  # KeeperException.Code.NONODE

# srvr's lines, in ZooKeeper's order (standalone: no leader-only lines).
SRVR_LINES = [
    r"Zookeeper version: 3\.\d+\.\d+.*",
    r"Latency min/avg/max: \d+/\d+\.\d+/\d+",
    r"Received: \d+",
    r"Sent: \d+",
    r"Connections: \d+",
    r"Outstanding: \d+",
    r"Zxid: 0x[0-9a-f]+",
    r"Mode: standalone",
    r"Node count: \d+",
]
REFUSAL = "{} is not executed because it is not in the whitelist.\n"


def fl(srv, word: str) -> str:
    return harness.four_letter(srv.hostport, word)


def raw_4lw(srv, payload: bytes) -> tuple[str, int]:
    """Send raw bytes; return (reply, our local port) -- for words with arguments
    and for finding our own connection in cons."""
    with socket.create_connection((srv.host, srv.port), timeout=5) as s:
        local_port = s.getsockname()[1]
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(), local_port


def kv_colon(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def mntr(srv) -> dict[str, str]:
    out = fl(srv, "mntr")
    return dict(line.split("\t", 1) for line in out.splitlines())


def cons_lines(text: str) -> dict[int, dict[str, str]]:
    """cons/stat client lines ' /127.0.0.1:PORT[N](k=v,...)' keyed by client port."""
    result = {}
    for line in text.splitlines():
        m = re.fullmatch(r" /127\.0\.0\.1:(\d+)\[\d+\]\((.*)\)", line)
        if m:
            result[int(m.group(1))] = dict(kv.split("=", 1) for kv in m.group(2).split(","))
    return result


def blocks(text: str) -> dict[str, set[str]]:
    """wchc/wchp output: a header line, then tab-indented items, repeated."""
    result: dict[str, set[str]] = {}
    header = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("\t"):
            result[header].add(line[1:])
        else:
            header = line
            result[header] = set()
    return result


def get_children_watch(conn: zkwire.Conn, path: str) -> zkwire.Reply:
    return conn.call(zkwire.OP_GET_CHILDREN, zkwire.ustring(path) + struct.pack(">?", True))


@pytest.fixture
def conn(shared_server):
    c = zkwire.Conn(shared_server.hostport, timeout_ms=40000)
    yield c
    c.close()


# --------------------------------------------------------------------------- zkstat.sh


def run_zkstat(srv) -> tuple[int, dict[str, str], str]:
    p = subprocess.run([ZKSTAT, srv.host, str(srv.port)], capture_output=True, text=True, timeout=60)
    return p.returncode, kv_colon(p.stdout), p.stdout + p.stderr


def test_zkstat_summarises_warden_and_zookeeper(server, reference_zk):
    """tools/zkstat.sh prints the same parsable summary for the server under test and for Apache ZooKeeper 3.8."""
    for srv in (server, reference_zk):
        zk = KazooClient(srv.hostport)
        zk.start()
        try:
            before = int(kv_colon(fl(srv, "srvr"))["Node count"])
            zk.create("/zkstat-a", b"12345")
            zk.create("/zkstat-e", b"", ephemeral=True)
            zk.exists("/zkstat-a", watch=lambda e: None)
            rc, out, text = run_zkstat(srv)
            srvr = kv_colon(fl(srv, "srvr"))
            assert rc == 0, (srv.kind, text)
            assert out["server"] == srv.hostport
            assert out["version"] == srvr["Zookeeper version"], text
            assert out["mode"] == "standalone", text
            zxid = int(srvr["Zxid"], 16)
            assert out["zxid"] == f"{srvr['Zxid']} (epoch {zxid >> 32}, counter {zxid & 0xFFFFFFFF})", text
            assert int(out["node_count"]) == before + 2 == int(srvr["Node count"]), text
            # our kazoo session plus zkstat's own four-letter connection
            assert int(out["connections"]) >= 2, text
            assert int(out["clients_listed"]) >= 2, text
            assert int(out["outstanding"]) == 0
            assert int(out["received"]) >= 1 and int(out["sent"]) >= 0
            lat_min, lat_avg, lat_max = (float(out[f"latency_{k}_ms"]) for k in ("min", "avg", "max"))
            assert 0 <= lat_min <= lat_avg <= lat_max, text
            assert int(out["zk_znode_count"]) == before + 2, text
            assert int(out["zk_ephemerals_count"]) == 1, text
            assert int(out["zk_watch_count"]) >= 1, text
            assert int(out["zk_num_alive_connections"]) >= 2, text
            assert int(out["zk_approximate_data_size"]) > 0, text
        finally:
            zk.stop()
            zk.close()


def test_zkstat_reports_refused_words(server_factory):
    """zkstat.sh still summarises srvr when stat and mntr are not whitelisted, and says they were refused."""
    srv = server_factory(extra_cfg={"4lw.commands.whitelist": "srvr"})
    rc, out, text = run_zkstat(srv)
    assert rc == 0, text
    assert out["mode"] == "standalone"
    assert int(out["node_count"]) >= 5
    assert out["stat"] == "refused (not in 4lw.commands.whitelist)", text
    assert out["mntr"] == "refused (not in 4lw.commands.whitelist)", text
    assert "zk_znode_count" not in out


def test_zkstat_unreachable_port_exits_1():
    """zkstat.sh exits 1 with an error line when nothing listens on the port."""
    p = subprocess.run([ZKSTAT, "127.0.0.1", str(harness.free_port())], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "error: no reply to srvr" in p.stdout


def test_zkstat_usage_exits_2():
    """zkstat.sh without HOST PORT prints usage and exits 2."""
    p = subprocess.run([ZKSTAT], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "usage:" in p.stderr


# --------------------------------------------------------------------------- whitelist

BOTH = pytest.mark.parametrize("kind", [None, "zookeeper"], ids=["under_test", "reference_zk"])


@BOTH
def test_whitelist_refuses_other_words(server_factory, kind):
    """With 4lw.commands.whitelist=srvr,ruok, mntr/stat/conf/isro get ZooKeeper's exact refusal text and srvr/ruok still work."""
    srv = server_factory(kind, extra_cfg={"4lw.commands.whitelist": "srvr,ruok"})
    for word in ("mntr", "stat", "conf", "isro", "wchs", "dump"):
        assert fl(srv, word) == REFUSAL.format(word)
    assert fl(srv, "ruok") == "imok"
    assert "Mode: standalone" in fl(srv, "srvr").splitlines()


@BOTH
def test_default_whitelist_is_srvr_only(server_factory, kind):
    """Without 4lw.commands.whitelist only srvr is served (even ruok is refused), as in ZooKeeper."""
    srv = server_factory(kind, extra_cfg={"4lw.commands.whitelist": None})
    assert "Mode: standalone" in fl(srv, "srvr").splitlines()
    for word in ("ruok", "mntr", "stat", "envi"):
        assert fl(srv, word) == REFUSAL.format(word)


def listen_backlog(port: int) -> int:
    """The accept queue's size for the listening socket on 127.0.0.1:port, as `ss` shows it."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    return int(lines[0][2])  # State Recv-Q Send-Q ...: Send-Q is the backlog


@BOTH
def test_client_port_listen_backlog_is_honoured(server_factory, kind):
    """clientPortListenBacklog sets the client port's accept queue, and conf reports it."""
    srv = server_factory(kind, extra_cfg={"clientPortListenBacklog": 300})
    assert listen_backlog(srv.port) == 300
    assert dict(line.split("=", 1) for line in fl(srv, "conf").splitlines())["clientPortListenBacklog"] == "300"


def test_default_listen_backlog_is_1024(shared_server):
    """Unset, Warden's backlog is 1024, not the 128 of a plain bind: a burst of reconnects
    (every client of a failed server) overflowed 128, and each SYN dropped there waited a
    second to be sent again (ZooKeeper's JVM default is 50, with the same effect)."""
    if shared_server.kind != "warden":
        pytest.skip("ZooKeeper's default backlog is the JVM's")
    assert listen_backlog(shared_server.port) == 1024


# --------------------------------------------------------------------------- one test per word


def test_ruok(shared_server):
    """ruok answers exactly 'imok' (no newline)."""
    assert fl(shared_server, "ruok") == "imok"


def test_srvr_lines_in_zookeeper_order(shared_server, conn):
    """srvr prints ZooKeeper's nine 'Key: value' lines in order, and Zxid/Node count follow writes."""
    before = kv_colon(fl(shared_server, "srvr"))
    r = conn.create("/srvr-node", b"x")
    assert r.err == 0
    out = fl(shared_server, "srvr")
    assert out.endswith("\n")
    lines = out.splitlines()
    assert len(lines) == len(SRVR_LINES), out
    for line, pattern in zip(lines, SRVR_LINES):
        assert re.fullmatch(pattern, line), (line, pattern)
    kv = kv_colon(out)
    assert int(kv["Zxid"], 16) == r.zxid
    assert int(kv["Node count"]) == int(before["Node count"]) + 1
    assert int(kv["Connections"]) >= 2  # conn + this four-letter connection


def test_stat_lists_clients_then_srvr_lines(shared_server, conn):
    """stat prints the version, 'Clients:', one ' /ip:port[n](queued=,recved=,sent=...)' line per connection (ours included), a blank line, then srvr's lines."""
    my_port = conn.sock.getsockname()[1]
    out = fl(shared_server, "stat")
    lines = out.splitlines()
    assert re.fullmatch(SRVR_LINES[0], lines[0])
    assert lines[1] == "Clients:"
    blank = lines.index("")
    clients = lines[2:blank]
    assert clients and all(re.fullmatch(r" /127\.0\.0\.1:\d+\[\d+\]\(queued=\d+,recved=\d+,sent=\d+.*\)", c) for c in clients), clients
    assert my_port in cons_lines(out)
    rest = lines[blank + 1:]
    assert len(rest) == len(SRVR_LINES) - 1, out
    for line, pattern in zip(rest, SRVR_LINES[1:]):
        assert re.fullmatch(pattern, line), (line, pattern)


# mntr keys both servers print, with integer values (zk_avg_latency is a decimal).
MNTR_INT_KEYS = [
    "zk_max_latency", "zk_min_latency", "zk_packets_received", "zk_packets_sent",
    "zk_num_alive_connections", "zk_outstanding_requests", "zk_znode_count", "zk_watch_count",
    "zk_ephemerals_count", "zk_approximate_data_size", "zk_open_file_descriptor_count",
    "zk_max_file_descriptor_count", "zk_global_sessions", "zk_local_sessions", "zk_uptime",
]


def test_mntr_format_and_values(shared_server, conn):
    """mntr prints 'zk_key<TAB>value' lines starting with zk_version and zk_server_state; counts follow an ephemeral create and a watch."""
    out = fl(shared_server, "mntr")
    assert out.endswith("\n")
    lines = out.splitlines()
    # (ZooKeeper's per-namespace keys carry the top-level znode name, e.g. zk_avg_my-app_write_per_namespace)
    assert all(re.fullmatch(r"zk_[^\t]+\t[^\t]*", line) for line in lines), [l for l in lines if l.count("\t") != 1]
    assert lines[0].startswith("zk_version\t3.")
    assert lines[1] == "zk_server_state\tstandalone"
    before = dict(line.split("\t", 1) for line in lines)
    for key in MNTR_INT_KEYS:
        assert re.fullmatch(r"-?\d+", before[key]), (key, before[key])
    assert re.fullmatch(r"\d+\.\d+", before["zk_avg_latency"])

    path, data = "/mntr-eph", b"0123456789"
    assert conn.create(path, data, flags=EPHEMERAL).err == 0
    assert conn.exists("/mntr-watched", watch=True).err == NO_NODE
    after = mntr(shared_server)
    assert int(after["zk_znode_count"]) == int(before["zk_znode_count"]) + 1
    assert int(after["zk_ephemerals_count"]) == int(before["zk_ephemerals_count"]) + 1
    assert int(after["zk_watch_count"]) == int(before["zk_watch_count"]) + 1
    assert int(after["zk_approximate_data_size"]) == int(before["zk_approximate_data_size"]) + len(path) + len(data)
    assert int(after["zk_znode_count"]) == int(kv_colon(fl(shared_server, "srvr"))["Node count"])
    assert int(after["zk_global_sessions"]) >= 1


def test_mntr_has_every_zookeeper_gauge(shared_server):
    """mntr includes every non-leader gauge ZooKeeper 3.8's server registers."""
    kv = mntr(shared_server)
    gauges = MNTR_INT_KEYS + [
        "zk_avg_latency", "zk_connection_drop_probability", "zk_last_client_response_size",
        "zk_max_client_response_size", "zk_min_client_response_size", "zk_outstanding_tls_handshake",
        "zk_auth_failed_count", "zk_non_mtls_remote_conn_count", "zk_non_mtls_local_conn_count",
    ]
    missing = [g for g in gauges if g not in kv]
    assert not missing, missing


def test_mntr_version_is_srvr_version(shared_server):
    """mntr's zk_version is the same full version string srvr prints (including ', built on ...')."""
    assert mntr(shared_server)["zk_version"] == kv_colon(fl(shared_server, "srvr"))["Zookeeper version"]


def test_mntr_approximate_data_size_counts_paths_and_data(shared_server):
    """zk_approximate_data_size is the sum of path length + data length over all znodes, plus 1 for the root's '/' alias."""
    zk = KazooClient(shared_server.hostport)
    zk.start()
    try:
        total = 1  # ZooKeeper keeps the root under both "" and "/"
        stack = ["/"]
        while stack:
            path = stack.pop()
            data, _ = zk.get(path)
            total += (0 if path == "/" else len(path)) + len(data or b"")
            stack.extend(("" if path == "/" else path) + "/" + c for c in zk.get_children(path))
        assert int(mntr(shared_server)["zk_approximate_data_size"]) == total
    finally:
        zk.stop()
        zk.close()


CONF_KEYS = [
    "clientPort", "secureClientPort", "dataDir", "dataDirSize", "dataLogDir", "dataLogSize",
    "tickTime", "maxClientCnxns", "minSessionTimeout", "maxSessionTimeout",
    "clientPortListenBacklog", "serverId",
]


def test_conf_keys_and_values(shared_server):
    """conf prints ZooKeeper's standalone keys in order with the configured values."""
    out = fl(shared_server, "conf")
    assert out.endswith("\n")
    pairs = [line.split("=", 1) for line in out.splitlines()]
    assert [k for k, _ in pairs] == CONF_KEYS, out
    kv = dict(pairs)
    assert kv["clientPort"] == str(shared_server.port)
    assert kv["secureClientPort"] == "-1"
    assert kv["tickTime"] == str(harness.TICK_TIME_MS)
    assert kv["maxClientCnxns"] == "0"
    assert kv["minSessionTimeout"] == str(2 * harness.TICK_TIME_MS)
    assert kv["maxSessionTimeout"] == str(20 * harness.TICK_TIME_MS)
    assert kv["clientPortListenBacklog"] == "-1"
    assert kv["dataDir"].startswith(shared_server.data_dir)
    assert kv["dataLogDir"] == kv["dataDir"]
    assert int(kv["dataDirSize"]) > 0 and int(kv["dataLogSize"]) > 0
    assert re.fullmatch(r"\d+", kv["serverId"])


def test_conf_standalone_values(shared_server):
    """A standalone ZooKeeper reports serverId=0 and its snapshot directory <dataDir>/version-2 as dataDir/dataLogDir."""
    kv = dict(line.split("=", 1) for line in fl(shared_server, "conf").splitlines())
    assert kv["serverId"] == "0"
    assert kv["dataDir"] == kv["dataLogDir"] == os.path.join(shared_server.data_dir, "version-2")


def test_cons_session_line(shared_server, conn):
    """cons prints one line per connection; a session's line carries sid, to, lcxid, lzxid, est and latency fields; output ends with a blank line."""
    my_port = conn.sock.getsockname()[1]
    t0 = int(time.time() * 1000)
    r = conn.create("/cons-node", b"")
    assert r.err == 0
    assert conn.get_data("/cons-node").err == 0
    out = fl(shared_server, "cons")
    assert out.endswith("\n\n")
    mine = cons_lines(out)[my_port]
    assert list(mine) == ["queued", "recved", "sent", "sid", "lop", "est", "to", "lcxid", "lzxid",
                          "lresp", "llat", "minlat", "avglat", "maxlat"], mine
    assert mine["sid"] == f"0x{conn.session_id:x}"
    assert mine["to"] == str(conn.timeout_ms) == "40000"
    assert mine["lcxid"] == f"0x{conn.xid:x}"
    assert int(mine["lzxid"], 16) == r.zxid
    assert abs(int(mine["est"]) - t0) < 60_000  # wall-clock ms when the connection was made
    assert int(mine["minlat"]) <= int(mine["avglat"]) <= int(mine["maxlat"])
    assert mine["queued"] == "0"


def test_cons_counts_connect_packets(shared_server, conn):
    """cons's recved/sent include the session's ConnectRequest/ConnectResponse (connect + 2 requests = 3 each)."""
    my_port = conn.sock.getsockname()[1]
    conn.create("/cons-count", b"")
    conn.exists("/cons-count")
    mine = cons_lines(fl(shared_server, "cons"))[my_port]
    assert (mine["recved"], mine["sent"]) == ("3", "3"), mine


def test_cons_last_op_codes(shared_server, conn):
    """cons shows the last operation as ZooKeeper's op code: CREA after a create, GETD after a getData, EXIS after exists."""
    my_port = conn.sock.getsockname()[1]
    for call, code in ((lambda: conn.create("/cons-lop", b""), "CREA"),
                       (lambda: conn.get_data("/cons-lop"), "GETD"),
                       (lambda: conn.exists("/cons-lop"), "EXIS")):
        call()
        assert cons_lines(fl(shared_server, "cons"))[my_port]["lop"] == code


def test_cons_sessionless_connection_is_bare(shared_server):
    """cons shows a connection that has no session as ' /ip:port[n](queued=0,recved=1,sent=0)'."""
    out, my_port = raw_4lw(shared_server, b"cons")
    line = next(l for l in out.splitlines() if l.startswith(f" /127.0.0.1:{my_port}["))
    assert re.fullmatch(r" /127\.0\.0\.1:\d+\[\d+\]\(queued=0,recved=1,sent=0\)", line), line


def test_crst_resets_connection_counters(shared_server, conn):
    """crst answers 'Connection stats reset.' and zeroes each connection's recved/sent and latencies."""
    my_port = conn.sock.getsockname()[1]
    conn.create("/crst-node", b"")
    assert int(cons_lines(fl(shared_server, "cons"))[my_port]["recved"]) >= 1
    assert fl(shared_server, "crst") == "Connection stats reset.\n"
    mine = cons_lines(fl(shared_server, "cons"))[my_port]
    assert (mine["recved"], mine["sent"]) == ("0", "0"), mine
    assert (mine["minlat"], mine["avglat"], mine["maxlat"]) == ("0", "0", "0"), mine


def test_crst_resets_last_operation(shared_server, conn):
    """After crst a session's cons line shows lop=NA, no lcxid, lzxid=0xffffffffffffffff, lresp=0, llat=0."""
    my_port = conn.sock.getsockname()[1]
    conn.create("/crst-lop", b"")
    fl(shared_server, "crst")
    mine = cons_lines(fl(shared_server, "cons"))[my_port]
    assert mine["lop"] == "NA"
    assert "lcxid" not in mine
    assert mine["lzxid"] == "0xffffffffffffffff"
    assert (mine["lresp"], mine["llat"]) == ("0", "0")


def test_envi_format(shared_server):
    """envi prints 'Environment:' then key=value lines with zookeeper.version (as srvr), host.name, os.name, os.arch, user.name and user.dir (the server's cwd)."""
    out = fl(shared_server, "envi")
    lines = out.splitlines()
    assert lines[0] == "Environment:"
    kv = dict(line.split("=", 1) for line in lines[1:])
    assert kv["zookeeper.version"] == kv_colon(fl(shared_server, "srvr"))["Zookeeper version"]
    for key in ("host.name", "os.name", "os.arch", "user.name", "user.dir"):
        assert key in kv, key
    assert os.path.realpath(kv["user.dir"]) == os.path.realpath(shared_server.base_dir)


def test_envi_os_and_user_values(shared_server):
    """envi reports os.name, os.version, user.name and user.home with the values the JVM reports on this machine."""
    kv = dict(line.split("=", 1) for line in fl(shared_server, "envi").splitlines()[1:])
    me = pwd.getpwuid(os.getuid())
    assert kv["os.name"] == platform.system()
    assert kv["os.version"] == platform.release()
    assert kv["user.name"] == me.pw_name
    assert kv["user.home"] == me.pw_dir


def test_wchs_counts_a_new_sessions_watches(shared_server, conn):
    """wchs prints 'N connections watching P paths' and 'Total watches:T'; a session watching two paths adds 1/2/2."""
    pattern = r"(\d+) connections watching (\d+) paths\nTotal watches:(\d+)\n"
    before = re.fullmatch(pattern, fl(shared_server, "wchs"))
    assert before, fl(shared_server, "wchs")
    conn.create("/wchs-b", b"")
    assert conn.exists("/wchs-a", watch=True).err == NO_NODE
    assert conn.get_data("/wchs-b", watch=True).err == 0
    after = re.fullmatch(pattern, fl(shared_server, "wchs"))
    assert after
    assert [int(a) - int(b) for a, b in zip(after.groups(), before.groups())] == [1, 2, 2]


def test_wchc_lists_paths_per_session(shared_server, conn):
    """wchc prints '0x<session>' then one tab-indented line per watched path."""
    conn.create("/wchc-b", b"")
    conn.exists("/wchc-a", watch=True)
    conn.get_data("/wchc-b", watch=True)
    assert blocks(fl(shared_server, "wchc"))[f"0x{conn.session_id:x}"] == {"/wchc-a", "/wchc-b"}


def test_wchp_lists_sessions_per_path(shared_server, conn):
    """wchp prints each watched path then one tab-indented '0x<session>' line per watcher."""
    conn.create("/wchp-b", b"")
    conn.exists("/wchp-a", watch=True)
    conn.get_data("/wchp-b", watch=True)
    other = zkwire.Conn(shared_server.hostport, timeout_ms=40000)
    try:
        other.get_data("/wchp-b", watch=True)
        by_path = blocks(fl(shared_server, "wchp"))
        assert by_path["/wchp-a"] == {f"0x{conn.session_id:x}"}
        assert by_path["/wchp-b"] == {f"0x{conn.session_id:x}", f"0x{other.session_id:x}"}
    finally:
        other.close()


def test_wchc_wchp_end_with_blank_line(shared_server, conn):
    """wchc and wchp output ends with an empty line ('\\n\\n'), as ZooKeeper's println after the dump."""
    conn.exists("/wch-blank", watch=True)
    assert fl(shared_server, "wchc").endswith("\n\n")
    assert fl(shared_server, "wchp").endswith("\n\n")


def test_wch_words_report_data_watches_only(shared_server, conn):
    """A session with only a child watch counts in mntr's zk_watch_count but is not listed by wchc/wchp."""
    before = int(mntr(shared_server)["zk_watch_count"])
    conn.create("/wch-child", b"")
    assert get_children_watch(conn, "/wch-child").err == 0
    assert int(mntr(shared_server)["zk_watch_count"]) == before + 1
    assert f"0x{conn.session_id:x}" not in blocks(fl(shared_server, "wchc"))
    assert "/wch-child" not in blocks(fl(shared_server, "wchp"))


def test_dump_lists_ephemerals_by_session(shared_server, conn):
    """dump starts with 'SessionTracker dump:' and its 'ephemeral nodes dump:' lists '0x<session>:' then the session's ephemeral paths."""
    assert conn.create("/dump-eph", b"", flags=EPHEMERAL).err == 0
    out = fl(shared_server, "dump")
    assert out.startswith("SessionTracker dump:\n")
    eph = out.split("ephemeral nodes dump:\n", 1)[1]
    assert re.match(r"Sessions with Ephemerals \((\d+)\):\n", eph)
    assert f"\n0x{conn.session_id:x}:\n\t/dump-eph\n" in eph


def test_dump_standalone_sessions_and_connections(shared_server, conn):
    """Standalone dump lists sessions by expiry bucket ('Session Sets') and a 'Connections dump:' with each connection's ip and session id."""
    my_port = conn.sock.getsockname()[1]
    out = fl(shared_server, "dump")
    assert re.search(r"^Session Sets \(\d+\)/\(\d+\):$", out, re.M)
    assert re.search(r"^\d+ expire at .+:$", out, re.M)
    assert f"\n\t0x{conn.session_id:x}\n" in out
    assert "\nConnections dump:\n" in out
    assert f"\tip: /127.0.0.1:{my_port} sessionId: 0x{conn.session_id:x}\n" in out


def test_isro(shared_server):
    """isro answers exactly 'rw' on a writable server."""
    assert fl(shared_server, "isro") == "rw"


def test_srst_resets_server_counters(shared_server, conn):
    """srst answers 'Server stats reset.' and srvr's Received/Sent and latencies start over."""
    for i in range(5):
        conn.create(f"/srst-{i}", b"")
    assert int(kv_colon(fl(shared_server, "srvr"))["Received"]) >= 5
    assert fl(shared_server, "srst") == "Server stats reset.\n"
    kv = kv_colon(fl(shared_server, "srvr"))
    assert int(kv["Received"]) <= 2 and int(kv["Sent"]) <= 2, kv
    lat_min, _, lat_max = kv["Latency min/avg/max"].split("/")
    assert (lat_min, lat_max) == ("0", "0")


def test_srst_latency_line_exact(shared_server):
    """Right after srst, srvr prints exactly 'Latency min/avg/max: 0/0.0/0'."""
    fl(shared_server, "srst")
    assert kv_colon(fl(shared_server, "srvr"))["Latency min/avg/max"] == "0/0.0/0"


def test_dirs(shared_server):
    """dirs prints 'datadir_size: N' and 'logdir_size: N' (bytes, non-zero once data exists)."""
    out = fl(shared_server, "dirs")
    m = re.fullmatch(r"datadir_size: (\d+)\nlogdir_size: (\d+)\n", out)
    assert m, out
    assert int(m.group(1)) > 0 and int(m.group(2)) > 0


DEFAULT_TRACE_MASK = 306  # ZooTrace's default mask


def test_gtmk_default_mask(shared_server):
    """gtmk answers the current trace mask in decimal with no newline: 306 by default."""
    assert fl(shared_server, "gtmk") == str(DEFAULT_TRACE_MASK)


def test_stmk_sets_mask(shared_server):
    """stmk followed by an 8-byte big-endian mask sets the trace mask, answers it, and gtmk then reports it."""
    try:
        out, _ = raw_4lw(shared_server, b"stmk" + struct.pack(">q", 0x1F2))
        assert out == str(0x1F2)
        assert fl(shared_server, "gtmk") == str(0x1F2)
    finally:
        raw_4lw(shared_server, b"stmk" + struct.pack(">q", DEFAULT_TRACE_MASK))


def test_hash_lists_digests_every_128_txns(shared_server):
    """hash prints one '<zxid in hex>: <decimal digest>' line per 128th zxid once the server has passed it."""
    zk = KazooClient(shared_server.hostport)
    zk.start()
    try:
        zxid = int(kv_colon(fl(shared_server, "srvr"))["Zxid"], 16)
        target = (zxid // 128 + 1) * 128
        pending = [zk.create_async(f"/hash-{i}") for i in range(target - zxid)]
        for p in pending:
            p.get(timeout=30)
        assert int(kv_colon(fl(shared_server, "srvr"))["Zxid"], 16) >= target
    finally:
        zk.stop()
        zk.close()
    out = fl(shared_server, "hash")
    lines = out.splitlines()
    assert lines and all(re.fullmatch(r"[0-9a-f]+: \d+", l) for l in lines), out
    assert any(l.startswith(f"{target:x}: ") for l in lines), out
