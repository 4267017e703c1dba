"""Worker placement (`runtime.spreadWorkers`, Warden's own zoo.cfg key): while several
clients are served at once, each tokio worker thread of the server is pinned to a CPU of its
own; a lone client, or no load, leaves them wherever the kernel puts them. While a lone
client writes, all workers but one are held (the `warden_runtime_workers_held` gauge), on a
standalone server and on ensemble members alike.

Black box: a real Warden process, real kazoo clients, and what the kernel reports of the
server's threads (`/proc/<pid>/task/<tid>/status`, `Cpus_allowed_list`), plus the
`warden_runtime_workers_spread` gauge on /metrics. Warden only (ZooKeeper has no such key);
skipped on a one-CPU machine, where there is nothing to place.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import harness
from ops_common import WARDEN, http, wait_for, wait_http

pytestmark = [
    pytest.mark.skipif(not WARDEN, reason="runtime.spreadWorkers is Warden's own key"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to place"),
]

CPUS = len(os.sched_getaffinity(0))


def cpu_list_len(text: str) -> int:
    """Number of CPUs in a kernel CPU list such as '0-3,6'."""
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def worker_cpus(pid: int) -> list[int]:
    """For each of the process's tokio threads, how many CPUs it may run on."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != "tokio-rt-worker":
                continue
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        m = re.search(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M)
        if m:
            out.append(cpu_list_len(m.group(1)))
    return out


def spread_gauge(url: str) -> float | None:
    _, _, body = http("GET", url)
    m = re.search(r"^warden_runtime_workers_spread (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def held_gauge(url: str) -> float | None:
    _, _, body = http("GET", url)
    m = re.search(r"^warden_runtime_workers_held (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


class Load:
    """`clients` kazoo sessions, each sending getData (or setData) in a loop on its own thread."""

    def __init__(self, hostport: str, clients: int, write: bool = False):
        self.write = write
        self.stop = threading.Event()
        self.zks = [KazooClient(hosts=hostport, timeout=10) for _ in range(clients)]
        for zk in self.zks:
            zk.start(timeout=15)
        self.zks[0].ensure_path("/placement")
        self.threads = [threading.Thread(target=self._run, args=(zk,), daemon=True) for zk in self.zks]
        for t in self.threads:
            t.start()

    def _run(self, zk: KazooClient) -> None:
        while not self.stop.is_set():
            if self.write:
                zk.set("/placement", b"x" * 100)
            else:
                zk.get("/placement")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        for zk in self.zks:
            zk.stop()
            zk.close()


def started_with_metrics(name: str, extra: dict[str, object]):
    port = harness.free_port()
    srv = harness.started(None, name=name, extra_cfg={
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1",
        "metricsProvider.httpPort": port,
        **extra,
    })
    url = f"http://127.0.0.1:{port}/metrics"
    wait_http(url)
    return srv, url


def test_workers_are_spread_under_several_clients_and_freed_after():
    """auto (the default): idle and under one client the workers may use every CPU; with four
    clients sending at once each worker is pinned to one CPU, different CPUs for the first
    ones; once the load stops they get every CPU back."""
    srv, url = started_with_metrics("placement-auto", {})
    try:
        assert spread_gauge(url) == 0
        assert all(n == CPUS for n in worker_cpus(srv.pid)), worker_cpus(srv.pid)

        lone = Load(srv.hostport, 1)
        try:
            time.sleep(0.5)
            assert spread_gauge(url) == 0, "a lone client never has the workers pinned"
            assert all(n == CPUS for n in worker_cpus(srv.pid))
        finally:
            lone.close()

        load = Load(srv.hostport, 4)
        try:
            wait_for(lambda: spread_gauge(url) == 1, timeout=10, what="the workers to be spread")
            pinned = wait_for(lambda: [n for n in worker_cpus(srv.pid) if n == 1] or None, timeout=10,
                              what="a worker thread pinned to one CPU")
            assert len(pinned) >= min(2, CPUS), worker_cpus(srv.pid)
        finally:
            load.close()

        wait_for(lambda: spread_gauge(url) == 0, timeout=10, what="the workers to be freed")
        wait_for(lambda: all(n == CPUS for n in worker_cpus(srv.pid)), timeout=10,
                 what="every worker to get every CPU back")
    finally:
        srv.close()


def test_a_lone_writer_is_served_by_one_worker():
    """auto on a standalone server: while one client writes (at a kazoo client's pace), all
    workers but one are held; its writes keep succeeding. A lone reader, several writers,
    or no load: nobody is held."""
    srv, url = started_with_metrics("placement-hold", {})
    try:
        # A server holds its workers from ~0.2 to ~0.7 s after start (its load's running mean
        # starts busy and decays through the hold band), so a first look may find none held
        # just before the hold begins: wait for a second without one.
        quiet_since = [time.monotonic()]

        def quiet_for(seconds: float) -> bool:
            if held_gauge(url) != 0:
                quiet_since[0] = time.monotonic()
            return time.monotonic() - quiet_since[0] >= seconds

        wait_for(lambda: quiet_for(1.0), timeout=15, what="no hold while idle, for a second")
        reader = Load(srv.hostport, 1)
        try:
            time.sleep(0.5)
            assert held_gauge(url) == 0, "a lone reader runs on every worker"
        finally:
            reader.close()

        writer = Load(srv.hostport, 1, write=True)
        try:
            wait_for(lambda: held_gauge(url) == 1, timeout=10, what="workers held under a lone writer")
            before = writer.zks[0].get("/placement")[1].version
            time.sleep(0.5)
            assert writer.zks[0].get("/placement")[1].version > before + 10, "writes go on while held"
            others = Load(srv.hostport, 3, write=True)
            try:
                wait_for(lambda: held_gauge(url) == 0, timeout=10, what="the hold to end under four writers")
            finally:
                others.close()
        finally:
            writer.close()
        wait_for(lambda: held_gauge(url) == 0, timeout=10, what="no hold once the load stops")
    finally:
        srv.close()


def test_ensemble_members_hold_under_a_lone_writer():
    """auto on a 3-member ensemble: while one client writes through a follower, the leader
    and that follower hold all workers but one too (the leader's log writer thread wakes
    openraft from outside the runtime and releases the held worker each time), and the
    writes keep succeeding; once the load stops nobody is held."""
    import ensemble  # noqa: PLC0415 - imports pytest fixtures only the ensemble tests need

    ens = ensemble.Ensemble(3, name="placement-ens", extra_cfg={
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1",
    })
    try:
        urls = []
        for m in ens.members:
            port = harness.free_port()
            m.extra_cfg["metricsProvider.httpPort"] = str(port)
            m._write_config()
            urls.append(f"http://127.0.0.1:{port}/metrics")
        ens.start()
        leader = ens.wait_stable(60)
        follower = ens.followers()[0]
        for url in urls:
            wait_http(url)
        writer = Load(ens.hostports[follower], 1, write=True)
        try:
            for i in (leader, follower):
                wait_for(lambda i=i: held_gauge(urls[i]) == 1, timeout=15,
                         what=f"member {i + 1}'s workers held under a lone writer")
            before = writer.zks[0].get("/placement")[1].version
            time.sleep(1.0)
            assert writer.zks[0].get("/placement")[1].version > before + 10, "writes go on while held"
            assert held_gauge(urls[leader]) == 1, "the leader still holds"
        finally:
            writer.close()
        for url in urls:
            wait_for(lambda url=url: held_gauge(url) == 0, timeout=15, what="no hold once the load stops")
    finally:
        ens.close()


def test_spreading_can_be_switched_off():
    """runtime.spreadWorkers=false: the workers stay on every CPU under the same load."""
    srv, url = started_with_metrics("placement-off", {"runtime.spreadWorkers": "false"})
    try:
        load = Load(srv.hostport, 4)
        try:
            time.sleep(1.0)
            assert all(n == CPUS for n in worker_cpus(srv.pid)), worker_cpus(srv.pid)
            assert spread_gauge(url) is None, "no placement: no gauge"
        finally:
            load.close()
    finally:
        srv.close()


def test_a_bad_value_stops_start_up_naming_the_key():
    """A config mistake stops start-up with a message naming the key."""
    srv = harness.Server(None, name="placement-bad", extra_cfg={"runtime.spreadWorkers": "sometimes"})
    try:
        with pytest.raises(harness.ServerStartError) as e:
            srv.start(timeout=20)
        assert "runtime.spreadWorkers" in str(e.value)
    finally:
        srv.close()
