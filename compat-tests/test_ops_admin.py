"""The admin HTTP server: ZooKeeper's AdminServer /commands, and Warden's own
/ready, /health, /sessions and POST /sessions/{id}/kill.

The server is started with admin.enableServer=true, admin.serverAddress=127.0.0.1
and admin.serverPort=<free port> (harness passes the same keys to ZooKeeper as
-Dzookeeper.admin.* properties; ZooKeeper's Jetty needs javax.servlet, which the
harness adds to its classpath).

/commands tests run on both servers. The JSON fields asserted are what
ZooKeeper 3.8.0 returns (checked with COMPAT_SERVER=zookeeper); where Warden's
JSON differs the case is marked `deviation(...)` (xfail(strict) for Warden
only). /ready, /health and /sessions are Warden's own and skipped against
ZooKeeper.
"""

from __future__ import annotations

import json
import threading

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import EventType

import harness
from ops_common import WARDEN, deviation, http, wait_for, wait_http

warden_only = pytest.mark.skipif(
    not WARDEN, reason="Warden-only endpoint: ZooKeeper 3.8's AdminServer has no /ready, /health or /sessions"
)


# Warden's admin.authToken (ZooKeeper ignores the key): the kill endpoint is off without one.
ADMIN_TOKEN = "ops-admin-token"


def admin_cfg(port: int, **extra) -> dict:
    cfg = {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port}
    cfg.update(extra)
    return cfg


class Admin:
    """A running server plus its admin base URL."""

    def __init__(self, srv: harness.Server, port: int, token: str | None = None):
        self.srv = srv
        self.token = token
        self.base = f"http://127.0.0.1:{port}"
        wait_http(self.base + "/commands/ruok")

    def get(self, path: str, headers=None):
        return http("GET", self.base + path, headers)

    def get_json(self, path: str):
        status, headers, body = self.get(path)
        assert status == 200, (path, status, body)
        assert headers.get("content-type", "").startswith("application/json"), headers
        return json.loads(body)

    def post(self, path: str, headers=None):
        """POST, with the bearer token (if the server has one) unless headers are given."""
        if headers is None and self.token:
            headers = {"Authorization": f"Bearer {self.token}"}
        return http("POST", self.base + path, headers)


@pytest.fixture(scope="module")
def admin():
    port = harness.free_port()
    srv = harness.started(None, name="ops-admin", extra_cfg=admin_cfg(port, **{"admin.authToken": ADMIN_TOKEN}))
    try:
        yield Admin(srv, port, ADMIN_TOKEN)
    finally:
        srv.close()


def started_kazoo(hostport: str, states: list | None = None) -> KazooClient:
    zk = KazooClient(hostport, timeout=10.0)
    if states is not None:
        zk.add_listener(states.append)
    zk.start()
    return zk


def local_address(zk: KazooClient) -> str:
    host, port = zk._connection._socket.getsockname()[:2]
    return f"{host}:{port}"


class Ctx:
    """What the /commands field checks compare against: the server and a kazoo session."""

    def __init__(self, srv: harness.Server, zk: KazooClient):
        self.srv = srv
        self.zk = zk


@pytest.fixture(scope="module")
def ctx(admin):
    """A kazoo session holding ephemeral /admin-eph with data watches on /admin-eph and /admin-missing."""
    zk = started_kazoo(admin.srv.hostport)
    zk.create("/admin-eph", b"abc", ephemeral=True)
    zk.get("/admin-eph", watch=lambda e: None)
    zk.exists("/admin-missing", watch=lambda e: None)
    try:
        yield Ctx(admin.srv, zk)
    finally:
        zk.stop()
        zk.close()


# --------------------------------------------------------------------------- /commands (both servers)

CANONICAL = [
    "ruok", "stats", "server_stats", "monitor", "configuration", "connections",
    "connection_stat_reset", "environment", "watch_summary", "watches", "watches_by_path",
    "dump", "is_read_only", "stat_reset", "dirs", "get_trace_mask", "hash",
]
ALIASES = {
    "stat": "stats", "srvr": "server_stats", "mntr": "monitor", "conf": "configuration",
    "config": "configuration", "cons": "connections", "crst": "connection_stat_reset",
    "envi": "environment", "env": "environment", "wchs": "watch_summary", "wchc": "watches",
    "wchp": "watches_by_path", "isro": "is_read_only", "srst": "stat_reset", "gtmk": "get_trace_mask",
}


def test_commands_lists_every_command(admin):
    """GET /commands answers 200 and names every command (ZooKeeper: HTML links, Warden: a JSON list)."""
    status, _, body = admin.get("/commands")
    assert status == 200
    missing = [name for name in CANONICAL if name not in body]
    assert not missing, missing


@pytest.mark.parametrize("name", CANONICAL + sorted(ALIASES))
def test_command_answers_json_with_canonical_name(admin, name):
    """GET /commands/<name or alias> answers JSON whose "command" is the canonical name and "error" is null."""
    obj = admin.get_json(f"/commands/{name}")
    assert obj["command"] == ALIASES.get(name, name)
    assert obj["error"] is None


def _connection_entry(obj, ctx):
    addr = local_address(ctx.zk)
    entries = [c for c in obj["connections"] if c["remote_socket_address"] == addr]
    assert len(entries) == 1, (addr, obj["connections"])
    return entries[0]


def check_stats_common(obj, ctx):
    assert obj["version"].startswith("3.")
    assert isinstance(obj["node_count"], int) and obj["node_count"] >= 6
    entry = _connection_entry(obj, ctx)
    for key in ("packets_received", "packets_sent", "outstanding_requests"):
        assert isinstance(entry[key], int), key


def check_stats_zk(obj, ctx):
    check_server_stats_zk(obj, ctx)
    assert obj["secure_connections"] == []


def check_server_stats_zk(obj, ctx):
    assert obj["read_only"] is False
    ss = obj["server_stats"]
    assert ss["server_state"] == "standalone"
    for key in ("packets_sent", "packets_received", "outstanding_requests", "num_alive_client_connections",
                "last_processed_zxid", "min_latency", "max_latency", "uptime", "data_dir_size", "log_dir_size"):
        assert isinstance(ss[key], int), key
    assert isinstance(ss["avg_latency"], float)
    assert isinstance(obj["client_response"], dict)


def check_server_stats_common(obj, ctx):
    assert obj["version"].startswith("3.")
    assert isinstance(obj["node_count"], int) and obj["node_count"] >= 6
    assert "connections" not in obj


MONITOR_INTS = ["znode_count", "watch_count", "ephemerals_count", "approximate_data_size", "num_alive_connections",
                "outstanding_requests", "packets_received", "packets_sent", "global_sessions", "min_latency",
                "max_latency", "open_file_descriptor_count", "uptime"]


def check_monitor_common(obj, ctx):
    assert obj["server_state"] == "standalone"
    assert obj["version"].startswith("3.")
    for key in MONITOR_INTS:
        assert isinstance(obj[key], int), (key, obj.get(key))
    assert obj["ephemerals_count"] >= 1 and obj["watch_count"] >= 2 and obj["znode_count"] >= 6


def check_monitor_latency_type(obj, ctx):
    assert isinstance(obj["avg_latency"], float), obj["avg_latency"]


def check_configuration_zk(obj, ctx):
    assert obj["client_port"] == ctx.srv.port
    assert obj["tick_time"] == harness.TICK_TIME_MS
    assert obj["max_client_cnxns"] == 0
    assert obj["min_session_timeout"] == 2 * harness.TICK_TIME_MS
    assert obj["max_session_timeout"] == 20 * harness.TICK_TIME_MS
    assert isinstance(obj["data_dir"], str) and obj["data_log_dir"] == obj["data_dir"]
    assert isinstance(obj["server_id"], int)
    assert obj["client_port_listen_backlog"] == -1


def check_connections_common(obj, ctx):
    entry = _connection_entry(obj, ctx)
    for key in ("packets_received", "packets_sent", "outstanding_requests"):
        assert isinstance(entry[key], int), key


def check_connections_zk(obj, ctx):
    entry = _connection_entry(obj, ctx)
    assert entry["session_id"] == ctx.zk.client_id[0]
    assert entry["session_timeout"] == 10000
    assert isinstance(entry["last_operation"], str)
    assert obj["secure_connections"] == []


def check_environment_zk(obj, ctx):
    assert obj["zookeeper.version"].startswith("3.")
    for key in ("host.name", "os.name", "os.arch", "user.name", "user.dir"):
        assert isinstance(obj[key], str), key


def check_watch_summary_zk(obj, ctx):
    assert obj["num_connections"] >= 1
    assert obj["num_paths"] >= 2
    assert obj["num_total_watches"] >= 2


def check_watches_zk(obj, ctx):
    paths = obj["session_id_to_watched_paths"][str(ctx.zk.client_id[0])]
    assert {"/admin-eph", "/admin-missing"} <= set(paths)


def check_watches_by_path_zk(obj, ctx):
    assert ctx.zk.client_id[0] in obj["path_to_session_ids"]["/admin-eph"]
    assert ctx.zk.client_id[0] in obj["path_to_session_ids"]["/admin-missing"]


def check_dump_zk(obj, ctx):
    sid = ctx.zk.client_id[0]
    assert obj["session_id_to_ephemeral_paths"][str(sid)] == ["/admin-eph"]
    assert any(sid in ids for ids in obj["expiry_time_to_session_ids"].values())


def check_is_read_only(obj, ctx):
    assert obj["read_only"] is False


def check_dirs(obj, ctx):
    assert isinstance(obj["datadir_size"], int) and obj["datadir_size"] > 0
    assert isinstance(obj["logdir_size"], int) and obj["logdir_size"] > 0


def check_get_trace_mask_zk(obj, ctx):
    assert obj["tracemask"] == 306


def check_hash_zk(obj, ctx):
    assert isinstance(obj["digests"], list)


FIELD_CASES = [
    pytest.param("stats", check_stats_common, id="stats"),
    pytest.param("stats", check_stats_zk, id="stats-nested-server_stats"),
    pytest.param("server_stats", check_server_stats_common, id="server_stats"),
    pytest.param("server_stats", check_server_stats_zk, id="server_stats-nested"),
    pytest.param("monitor", check_monitor_common, id="monitor"),
    pytest.param("monitor", check_monitor_latency_type, id="monitor-avg_latency-number"),
    pytest.param("configuration", check_configuration_zk, id="configuration"),
    pytest.param("connections", check_connections_common, id="connections"),
    pytest.param("connections", check_connections_zk, id="connections-session-fields"),
    pytest.param("environment", check_environment_zk, id="environment"),
    pytest.param("watch_summary", check_watch_summary_zk, id="watch_summary"),
    pytest.param("watches", check_watches_zk, id="watches"),
    pytest.param("watches_by_path", check_watches_by_path_zk, id="watches_by_path"),
    pytest.param("dump", check_dump_zk, id="dump"),
    pytest.param("is_read_only", check_is_read_only, id="is_read_only"),
    pytest.param("dirs", check_dirs, id="dirs"),
    pytest.param("get_trace_mask", check_get_trace_mask_zk, id="get_trace_mask"),
    pytest.param("hash", check_hash_zk, id="hash"),
]


@pytest.mark.parametrize("name,check", FIELD_CASES)
def test_command_key_fields(admin, ctx, name, check):
    """GET /commands/<name> carries the key fields ZooKeeper's AdminServer returns, with values matching the server's state."""
    check(admin.get_json(f"/commands/{name}"), ctx)


def test_unknown_command(admin):
    """GET /commands/<unknown> answers 200 JSON whose error is 'Unknown command: <name>'."""
    status, _, body = admin.get("/commands/no_such_command")
    assert status == 200
    obj = json.loads(body)
    assert obj == {"command": "no_such_command", "error": "Unknown command: no_such_command"}


@pytest.mark.parametrize("kind", [None, "zookeeper"], ids=["under_test", "reference_zk"])
def test_admin_server_disabled(server_factory, kind):
    """admin.enableServer=false leaves the admin port closed while the client port serves."""
    port = harness.free_port()
    srv = server_factory(kind, extra_cfg=admin_cfg(port, **{"admin.enableServer": "false"}))
    assert "Mode: standalone" in harness.four_letter(srv.hostport, "srvr")
    with pytest.raises(OSError):
        http("GET", f"http://127.0.0.1:{port}/commands/ruok", timeout=2)


# --------------------------------------------------------------------------- Warden's own endpoints


@warden_only
def test_ready_and_health(admin):
    """GET /ready and GET /health answer 200 on a serving standalone server."""
    for path in ("/ready", "/health"):
        status, _, _ = admin.get(path)
        assert status == 200, path


@warden_only
def test_sessions_lists_kazoo_sessions(admin):
    """GET /sessions lists each kazoo session with its hex id, negotiated timeout, client address, server and ephemeral count."""
    holder = started_kazoo(admin.srv.hostport)
    idle = started_kazoo(admin.srv.hostport)
    try:
        holder.create("/sessions-e1", b"", ephemeral=True)
        holder.create("/sessions-e2", b"", ephemeral=True)
        holder.create("/sessions-persistent", b"")
        sessions = admin.get_json("/sessions")
        assert isinstance(sessions, list)
        by_id = {s["id"]: s for s in sessions}
        h = by_id[hex(holder.client_id[0])]
        i = by_id[hex(idle.client_id[0])]
        assert h["ephemeral_count"] == 2
        assert i["ephemeral_count"] == 0
        for zk, s in ((holder, h), (idle, i)):
            assert s["timeout_ms"] == 10000
            assert s["client_address"] == local_address(zk)
            assert isinstance(s["connected_server"], int)
            assert 0 <= s["last_heard_ms_ago"] < 10000
    finally:
        for zk in (holder, idle):
            zk.stop()
            zk.close()


@warden_only
def test_kill_session_end_to_end(admin):
    """POST /sessions/<hex id>/kill expires a live session: its ephemeral goes, another client's watch fires NodeDeleted, its own client sees LOST."""
    states: list = []
    victim = started_kazoo(admin.srv.hostport, states)
    observer = started_kazoo(admin.srv.hostport)
    deleted = threading.Event()
    try:
        victim.create("/kill-eph", b"mine", ephemeral=True)

        @observer.DataWatch("/kill-eph")
        def _watch(data, stat, event):
            if event is not None and event.type == EventType.DELETED:
                deleted.set()

        sid = hex(victim.client_id[0])
        assert sid in {s["id"] for s in admin.get_json("/sessions")}
        status, _, body = admin.post(f"/sessions/{sid}/kill")
        assert status == 200, body
        assert json.loads(body) == {"killed": sid}

        assert deleted.wait(10), "observer's DataWatch saw no NodeDeleted for /kill-eph"
        assert observer.exists("/kill-eph") is None
        wait_for(lambda: KazooState.LOST in states, timeout=15, what="victim's listener to see LOST")
        assert sid not in {s["id"] for s in admin.get_json("/sessions")}
        status, _, _ = admin.post(f"/sessions/{sid}/kill")
        assert status == 404  # already gone
    finally:
        for zk in (victim, observer):
            zk.stop()
            zk.close()


@warden_only
def test_kill_by_decimal_id_and_bad_ids(admin):
    """The kill endpoint takes a decimal id too; an unknown id answers 404, a malformed one 400, GET 405."""
    zk = started_kazoo(admin.srv.hostport)
    try:
        zk.create("/kill-dec", b"", ephemeral=True)
        sid = zk.client_id[0]
        assert admin.post("/sessions/0x1234abcd/kill")[0] == 404
        assert admin.post("/sessions/not-an-id/kill")[0] == 400
        assert admin.get(f"/sessions/{sid}/kill")[0] == 405
        status, _, body = admin.post(f"/sessions/{sid}/kill")
        assert status == 200 and json.loads(body) == {"killed": hex(sid)}
        other = started_kazoo(admin.srv.hostport)
        try:
            wait_for(lambda: other.exists("/kill-dec") is None, timeout=10, what="/kill-dec to be deleted")
        finally:
            other.stop()
            other.close()
    finally:
        zk.stop()
        zk.close()


@warden_only
def test_kill_is_off_without_a_token(server_factory):
    """Without admin.authToken the mutating endpoint answers 403 and kills nothing."""
    port = harness.free_port()
    srv = server_factory(extra_cfg=admin_cfg(port))
    adm = Admin(srv, port)
    zk = started_kazoo(srv.hostport)
    try:
        zk.create("/no-token-eph", b"", ephemeral=True)
        sid = hex(zk.client_id[0])
        status, _, body = adm.post(f"/sessions/{sid}/kill")
        assert status == 403 and "admin.authToken" in body, (status, body)
        assert zk.exists("/no-token-eph") is not None
    finally:
        zk.stop()
        zk.close()


@warden_only
def test_kill_needs_the_bearer_token(server_factory):
    """With admin.authToken set, kill without a token, with a wrong one, or without 'Bearer ' answers 401 and kills nothing; the right token kills."""
    port = harness.free_port()
    token = "s3cret-Token"
    srv = server_factory(extra_cfg=admin_cfg(port, **{"admin.authToken": token}))
    adm = Admin(srv, port)
    states: list = []
    zk = started_kazoo(srv.hostport, states)
    try:
        zk.create("/token-eph", b"", ephemeral=True)
        sid = hex(zk.client_id[0])
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token},
                        {"Authorization": f"Basic {token}"}):
            status, _, body = adm.post(f"/sessions/{sid}/kill", headers)
            assert status == 401, (headers, status, body)
        # nothing was killed; read-only endpoints need no token
        assert zk.exists("/token-eph") is not None
        assert sid in {s["id"] for s in adm.get_json("/sessions")}
        assert adm.get_json("/commands/ruok")["error"] is None
        assert KazooState.LOST not in states

        status, _, body = adm.post(f"/sessions/{sid}/kill", {"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(body) == {"killed": sid}
        wait_for(lambda: KazooState.LOST in states, timeout=15, what="LOST after an authorised kill")
    finally:
        zk.stop()
        zk.close()


# -- the commands beyond the four-letter words ---------------------------------------------------

MORE = {"initial_configuration": "icfg", "leader": "lead", "observer_connection_stat_reset": "orst",
        "observers": "obsr", "system_properties": "sysp", "voting_view": None, "zabstate": None}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_commands_standalone(admin, name):
    """ZooKeeper 3.8's other admin commands, by name and short name, with its keys on a
    standalone server (where it has no leader, no voting view and no ZAB state)."""
    obj = admin.get_json(f"/commands/{name}")
    if MORE[name]:
        assert admin.get_json(f"/commands/{MORE[name]}")["command"] == name
    assert obj["command"] == name
    if name == "leader":
        assert obj["error"] == "server is not initialized", obj
        return
    assert obj["error"] is None, obj
    if name == "initial_configuration":
        assert f"clientPort={admin.srv.port}" in obj["initial_configuration"], obj
    elif name == "observers":
        assert obj["synced_observers"] == 0 and list(obj["observers"]) == [], obj
    elif name == "system_properties":
        for key in ("os.name", "os.arch", "user.dir", "user.name", "file.separator", "path.separator"):
            assert isinstance(obj[key], str), key
    elif name == "voting_view":
        assert obj["current_config"] == {}, obj
    elif name == "zabstate":
        assert obj["voting"] is False and obj["zabstate"] == "", obj
    else:
        assert set(obj) == {"command", "error"}, obj


def test_leader_voting_view_and_zabstate_on_an_ensemble():
    import ensemble

    ports = [harness.free_port() for _ in range(3)]
    ens = ensemble.Ensemble(3, name="admin-ens", extra_cfg={"admin.enableServer": "true",
                                                            "admin.serverAddress": "127.0.0.1"})
    try:
        ens.per_member("admin.serverPort", ports).start()
        leader = ens.leader()
        for i in range(3):
            base = f"http://127.0.0.1:{ports[i]}/commands"
            wait_http(base + "/ruok")
            lead = json.loads(http("GET", base + "/leader")[2])
            assert lead["is_leader"] is (i == leader) and lead["leader_id"] == leader + 1, lead
            assert isinstance(lead["leader_ip"], str), lead
            view = json.loads(http("GET", base + "/voting_view")[2])["current_config"]
            assert sorted(view) == ["1", "2", "3"], view
            for sid, entry in view.items():
                j = int(sid) - 1
                # A member knows its own client address; the others' only if their server.N
                # lines name one (these do not).
                assert entry == {
                    "server_addresses": [f"127.0.0.1:{ens.peer_ports[j]}"],
                    "election_addresses": [f"127.0.0.1:{ens.election_ports[j]}"],
                    "client_address": ens.hostports[j] if j == i else "",
                    "learner_type": "participant",
                }, (i, sid, entry)
            zab = json.loads(http("GET", base + "/zabstate")[2])
            assert {"myid", "is_leader", "quorum_address", "election_address", "client_address", "voting",
                    "last_zxid", "zab_epoch", "zab_counter", "zabstate"} <= set(zab), zab
            assert zab["myid"] == i + 1 and zab["voting"] is True and zab["zabstate"] == "broadcast", zab
            assert zab["is_leader"] is (i == leader), zab
    finally:
        ens.close()
