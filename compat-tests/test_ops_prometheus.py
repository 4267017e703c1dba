"""Prometheus metrics: Warden's /metrics, scraped by a real Prometheus server.

Warden serves http://metricsProvider.httpHost:metricsProvider.httpPort/metrics
when zoo.cfg names ZooKeeper's PrometheusMetricsProvider, as ZooKeeper
configs do. Debian's ZooKeeper 3.8 ships without the
zookeeper-prometheus-metrics jar, so these tests skip when
COMPAT_SERVER=zookeeper.

The scrape test runs Debian's `prometheus` (install.sh) with a temp config
that scrapes Warden every second, a temp storage dir and a free 127.0.0.1 web
port, then asks its HTTP API for Warden's series. Prometheus is killed by PID
at teardown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import harness
from ops_common import WARDEN, http, wait_for, wait_http

pytestmark = pytest.mark.skipif(
    not WARDEN, reason="Debian's ZooKeeper 3.8 has no PrometheusMetricsProvider jar; /metrics is tested on Warden only"
)

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

# ZooKeeper metric names (mntr keys without zk_) that Warden must export.
ZK_NAMES = [
    "znode_count", "watch_count", "ephemerals_count", "approximate_data_size", "num_alive_connections",
    "outstanding_requests", "packets_received", "packets_sent", "global_sessions", "quorum_size",
]
WARDEN_NAMES = ["warden_raft_term", "warden_raft_applied_index"]


@pytest.fixture(scope="module")
def metrics_server():
    """Warden with the Prometheus metrics provider on a free 127.0.0.1 port; yields (server, metrics URL)."""
    port = harness.free_port()
    srv = harness.started(None, name="ops-prometheus", extra_cfg={
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1",
        "metricsProvider.httpPort": port,
    })
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(url)
        yield srv, url
    finally:
        srv.close()


def parse_exposition(text: str) -> tuple[dict[str, list[str]], dict[str, float]]:
    """(family -> its TYPE lines' types, 'name{labels}' -> value) from the text format."""
    types: dict[str, list[str]] = {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types.setdefault(name, []).append(kind)
        elif line and not line.startswith("#"):
            m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)(?: \d+)?", line)
            assert m, f"not an exposition sample line: {line!r}"
            samples[m.group(1)] = float(m.group(2))
    return types, samples


def test_metrics_has_zookeeper_names(metrics_server):
    """/metrics is Prometheus text with ZooKeeper's metric names (znode_count, watch_count, ...) whose values match mntr, plus warden_* series."""
    srv, url = metrics_server
    zk = KazooClient(srv.hostport)
    zk.start()
    try:
        zk.create("/prom-eph", b"12345", ephemeral=True)
        zk.get("/prom-eph", watch=lambda e: None)
        status, headers, body = http("GET", url)
        assert status == 200
        assert headers["content-type"].startswith("text/plain")
        types, samples = parse_exposition(body)
        missing = [n for n in ZK_NAMES + WARDEN_NAMES if n not in samples]
        assert not missing, missing
        mntr = dict(l.split("\t", 1) for l in harness.four_letter(srv.hostport, "mntr").splitlines())
        for name in ("znode_count", "ephemerals_count", "watch_count", "global_sessions", "quorum_size"):
            assert samples[name] == float(mntr[f"zk_{name}"]), name
        assert samples["ephemerals_count"] >= 1 and samples["watch_count"] >= 1
        assert samples["quorum_size"] == 1
        assert samples["warden_raft_term"] >= 1 and samples["warden_raft_applied_index"] >= 1
        # per-op request latency histogram, labelled by op
        assert any(k.startswith('warden_request_latency_seconds_count{op="create"') for k in samples), \
            [k for k in samples if k.startswith("warden_request_latency")]
        assert any(k.startswith('warden_request_latency_seconds_bucket{op="create",le="0.001"') for k in samples), \
            [k for k in samples if k.startswith("warden_request_latency")][:10]
        assert types.get("warden_request_latency_seconds") == ["histogram"]
    finally:
        zk.stop()
        zk.close()


def test_metrics_declares_each_family_once(metrics_server):
    """Every metric family in /metrics has exactly one # TYPE line."""
    _, url = metrics_server
    types, _ = parse_exposition(http("GET", url)[2])
    assert {n: t for n, t in types.items() if len(t) > 1} == {}


class Prometheus:
    """A Debian prometheus process scraping targets (a host:port or a list), with `rules` (a
    rule file) loaded if given; killed by PID in stop()."""

    def __init__(self, target, rules: str | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="compat-prometheus-"))
        self.port = harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        targets = ", ".join(f"'{t}'" for t in ([target] if isinstance(target, str) else target))
        (self.dir / "prometheus.yml").write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            + (f"rule_files: ['{rules}']\n" if rules else "")
            + "scrape_configs:\n"
            "  - job_name: warden\n"
            "    static_configs:\n"
            f"      - targets: [{targets}]\n"
        )
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(self.dir),
            preexec_fn=harness._die_with_parent,
        )
        harness._LIVE[self.proc.pid] = self.proc

    def api(self, path: str, **params) -> dict:
        status, _, body = http("GET", f"{self.base}{path}?{urllib.parse.urlencode(params)}")
        assert status == 200, body
        obj = json.loads(body)
        assert obj["status"] == "success", obj
        return obj["data"]

    def query(self, expr: str) -> list:
        return self.api("/api/v1/query", query=expr)["result"]

    def log_tail(self) -> str:
        self.log.flush()
        return (self.dir / "prometheus.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        harness._LIVE.pop(self.proc.pid, None)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def prometheus(metrics_server):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"{PROMETHEUS} not found: install Debian's prometheus (compat-tests/install.sh)")
    _, url = metrics_server
    prom = Prometheus(urllib.parse.urlsplit(url).netloc)
    try:
        yield prom
    finally:
        prom.stop()


def test_prometheus_scrapes_warden(metrics_server, prometheus):
    """A real Prometheus scraping Warden's /metrics every second returns Warden's znode_count series (> 0) through /api/v1/query."""
    srv, _ = metrics_server
    start = time.monotonic()
    wait_http(prometheus.base + "/-/ready", timeout=15)
    try:
        # Prometheus applies a new target list at most every 5 s, then scrapes every 1 s.
        result = wait_for(lambda: prometheus.query("znode_count"), timeout=25, interval=0.3,
                          what="a znode_count sample in Prometheus")
    except AssertionError:
        raise AssertionError("no znode_count in Prometheus; its log:\n" + prometheus.log_tail())
    (series,) = result
    assert series["metric"]["job"] == "warden"
    assert series["metric"]["instance"] == urllib.parse.urlsplit(metrics_server[1]).netloc
    assert float(series["value"][1]) > 0
    assert float(series["value"][1]) == float(harness.four_letter(srv.hostport, "srvr")
                                              .split("Node count: ")[1].split()[0])
    (up,) = prometheus.query('up{job="warden"}')
    assert up["value"][1] == "1"
    (target,) = prometheus.api("/api/v1/targets")["activeTargets"]
    assert target["health"] == "up" and target["lastError"] == "", target
    assert prometheus.query("warden_raft_term"), "warden_raft_term not stored"
    assert time.monotonic() - start < 30


@pytest.mark.skipif(not WARDEN, reason="checks Warden's own log line and metric")
def test_a_slow_fsync_is_logged_once_and_measured(tmp_path, monkeypatch):
    """Every fsync 100 ms slower (compat-tests/slowsync.c through LD_PRELOAD) and ZooKeeper's
    fsync.warningthresholdms at 50: the server logs one warning naming the key for a burst of
    slow writes (not one per fsync), and warden_raft_fsync_seconds shows them over 0.1 s."""
    harness.slow_disk(monkeypatch, tmp_path, 100)
    port = harness.free_port()
    srv = harness.started(None, name="ops-slow-fsync", extra_cfg={
        "fsync.warningthresholdms": "50",
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1",
        "metricsProvider.httpPort": port,
    })
    c = KazooClient(hosts=srv.hostport, timeout=10.0)
    try:
        c.start(timeout=15)
        for i in range(5):
            c.create(f"/slow-fsync-{i}", b"x")
        with open(srv.log_path, errors="replace") as f:
            lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in f if "fsync.warningthresholdms" in line]
        assert len(lines) == 1, lines
        assert "took_ms=" in lines[0] and "threshold_ms=50" in lines[0], lines[0]
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url)
        _, _, body = http("GET", url)
        _, samples = parse_exposition(body)
        total = samples["warden_raft_fsync_seconds_count"]
        fast = samples['warden_raft_fsync_seconds_bucket{le="0.1"}']
        assert total >= 5 and fast < total, (fast, total)
    finally:
        c.stop()
        c.close()
        srv.close()


DASHBOARD = harness.REPO_ROOT / "docker" / "grafana" / "dashboards" / "warden.json"
ALERTS = harness.REPO_ROOT / "docker" / "prometheus" / "alerts.yml"


def test_dashboard_queries_and_alert_rules():
    """docker/grafana's dashboard and docker/prometheus's alert rules against a real Prometheus
    scraping a real 3-member ensemble under load: every panel query is valid PromQL and
    returns series (with the dashboard's $instance variable at "all"), every alert rule loads
    healthy, and none fires on a healthy ensemble."""
    import ensemble

    ports = [harness.free_port() for _ in range(3)]
    ens = ensemble.Ensemble(3, name="dashboard", extra_cfg={
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1"})
    prom = None
    try:
        ens.per_member("metricsProvider.httpPort", ports).start()
        zk = KazooClient(ens.connect_string)
        zk.start()
        zk.create("/dash")
        zk.create("/zookeeper/quota/dash", makepath=True)
        zk.create("/zookeeper/quota/dash/zookeeper_limits", b"count=100,bytes=-1")
        zk.create("/zookeeper/quota/dash/zookeeper_stats", b"count=0,bytes=0")
        prom = Prometheus([f"127.0.0.1:{p}" for p in ports], rules=str(ALERTS))
        wait_http(prom.base + "/-/ready", timeout=15)
        panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
        exprs = [(p["title"], t["expr"].replace("$instance", ".*")) for p in panels for t in p["targets"]]
        # Traffic for the rates, long enough for several scrapes.
        deadline = time.monotonic() + 8
        i = 0
        while time.monotonic() < deadline:
            zk.create(f"/dash/n{i}", b"x")
            zk.get(f"/dash/n{i}")
            i += 1
        empty = []
        for title, expr in exprs:
            try:
                result = wait_for(lambda: prom.query(expr), timeout=15, interval=0.5, what=expr)
            except AssertionError:
                result = []
            if not result:
                empty.append((title, expr))
        assert not empty, f"panels with no data: {empty}\n{prom.log_tail()}"
        groups = prom.api("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert sorted(r["name"] for r in rules) == sorted([
            "WardenQuorumLost", "WardenLeaderChurn", "WardenFsyncSlow", "WardenDigestMismatch",
            "WardenMemberNotServing"]), rules
        assert all(r["health"] == "ok" for r in rules), rules
        assert prom.query('ALERTS{alertstate="firing"}') == []
        zk.stop()
        zk.close()
    finally:
        if prom:
            prom.stop()
        ens.close()
