"""Quotas as ZooKeeper 3.7+ keeps them: zkCli's setquota/listquota/delquota, the usage the
server writes into /zookeeper/quota/<path>/zookeeper_stats, and, with zookeeper.enforceQuota,
QuotaExceeded (-125) for a create or setData over a hard limit.

zkCli does the quota bookkeeping on the client side (it creates the limits and stats nodes
with ordinary creates); the server counts the subtree when the stats node appears and keeps
the count as the subtree changes. The differential tests run the same zkCli script against
the server under test and a real ZooKeeper 3.8 and compare every line zkCli printed.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import QuotaExceededError

import harness
import zkcli
from ensemble import Ensemble

ENFORCED = {"enforceQuota": "true"}


def kazoo(hostport: str) -> KazooClient:
    c = KazooClient(hostport, timeout=10)
    c.start()
    return c


def stats(zk: KazooClient, path: str) -> str:
    return zk.get(f"/zookeeper/quota{path}/zookeeper_stats")[0].decode()


def limits(zk: KazooClient, path: str) -> str:
    return zk.get(f"/zookeeper/quota{path}/zookeeper_limits")[0].decode()


def run_both(server, reference_zk, commands: list[str]):
    """The zkCli script against both servers: (ours, ZooKeeper's) outputs per command."""
    ours = zkcli.run(server.hostport, commands)
    theirs = zkcli.run(reference_zk.hostport, commands)
    return ours, theirs


def test_zkcli_quota_matches_zookeeper(server, reference_zk):
    """setquota/listquota/delquota print the same on both servers, and the usage the server keeps
    (count includes the quota'd node itself, bytes are data bytes) moves the same way through
    creates, setData, deletes and a nested quota refused by zkCli."""
    script = [
        "create /qd",
        "create /qd/a 12345",
        "create /qd/b",
        "setquota -n 5 /qd",
        "setquota -B 100 /qd",
        "listquota /qd",
        "create /qd/c xyz",
        "set /qd/a 1",
        "delete /qd/b",
        "create /qd/c/d hello",
        "listquota /qd",
        "get /zookeeper/quota/qd/zookeeper_stats",
        "setquota -n 2 /qd/c",
        "setquota -n 1 /qd",
        "delquota -n /qd",
        "listquota /qd",
        "delquota /qd",
        "listquota /qd",
        "ls /zookeeper/quota",
        "create /qd/e",
        "setquota -b 3 /qd/c",
        "listquota /qd/c",
    ]
    ours, theirs = run_both(server, reference_zk, script)
    for i, cmd in enumerate(script):
        assert ours.out(i) == theirs.out(i), f"{cmd!r}: ours {ours.out(i)} vs ZooKeeper {theirs.out(i)}\n{ours}"
    # The values themselves, not only agreement: after the creates, set and delete, /qd holds
    # /qd, /qd/a ("1"), /qd/c ("xyz") and /qd/c/d ("hello").
    assert ours.out(10) == [
        "Output quota for /qd count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1",
        "Output stat for /qd count=4,bytes=9",
        "absolute path is /zookeeper/quota/qd/zookeeper_limits",
    ], ours
    assert ours.out(11) == ["count=4,bytes=9"], ours
    assert any("has a parent /qd which has a quota" in line for line in ours.out(12)), ours
    # The stats node's own Stat never moves: the server writes only its data.
    for srv in (server, reference_zk):
        zk = kazoo(srv.hostport)
        try:
            data, stat = zk.get("/zookeeper/quota/qd/c/zookeeper_stats")
            assert data == b"count=2,bytes=8", srv.kind
            assert stat.version == 0 and stat.data_length == len(data), (srv.kind, stat)
        finally:
            zk.stop()
            zk.close()


@pytest.mark.parametrize("kind", ["warden", "zookeeper"])
def test_enforced_quota_zkcli_messages(server_factory, kind):
    """With enforceQuota, zkCli sees QuotaExceeded for a create and a set over a hard limit, with
    the same messages on both servers (recorded from ZooKeeper 3.8), and nothing changes."""
    srv = server_factory(kind=kind, extra_cfg=ENFORCED)
    r = zkcli.run(srv.hostport, [
        "create /he",
        "setquota -N 2 /he",
        "setquota -B 4 /he",
        "create /he/a ab",
        "create /he/b",
        "set /he/a abcde",
        "set /he/a abcd",
        "listquota /he",
    ])
    assert r.out(3) == ["Created /he/a"], r
    assert r.out(4) == ["Quota has exceeded : /he/b"], r
    assert r.out(5) == ["Quota has exceeded : /he/a"], r
    assert r.out(6) == [], r
    assert "Output stat for /he count=2,bytes=4" in r.out(7), r


def test_enforced_hard_limits(server_factory):
    """kazoo gets QuotaExceededError for creates (plain, sequential, in a transaction) past the
    hard count and setData past the hard byte limit; the node, its data and the usage stay as
    they were; a delete makes room again."""
    srv = server_factory(extra_cfg=ENFORCED)
    zk = kazoo(srv.hostport)
    try:
        base = "/h" + uuid.uuid4().hex[:6]
        zk.create(base)
        zk.create(f"/zookeeper/quota{base}", makepath=True)
        zk.create(f"/zookeeper/quota{base}/zookeeper_limits",
                  b"count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=3")
        zk.create(f"/zookeeper/quota{base}/zookeeper_stats", b"count=0,bytes=0")
        assert stats(zk, base) == "count=1,bytes=0"
        zk.create(f"{base}/a", b"12345")
        zk.create(f"{base}/b")
        assert stats(zk, base) == "count=3,bytes=5"
        with pytest.raises(QuotaExceededError):
            zk.create(f"{base}/c")
        with pytest.raises(QuotaExceededError):
            zk.create(f"{base}/s-", sequence=True)
        assert sorted(zk.get_children(base)) == ["a", "b"]
        with pytest.raises(QuotaExceededError):
            zk.set(f"{base}/a", b"123456789ab")
        assert zk.get(f"{base}/a")[0] == b"12345"
        assert zk.get(f"{base}/a")[1].version == 0
        zk.set(f"{base}/a", b"1234567890")
        assert stats(zk, base) == "count=3,bytes=10"
        tx = zk.transaction()
        tx.check(f"{base}/a", 1)
        tx.create(f"{base}/t")
        results = tx.commit()
        assert isinstance(results[1], QuotaExceededError), results
        assert not zk.exists(f"{base}/t")
        assert stats(zk, base) == "count=3,bytes=10"
        # Outside the quota'd subtree nothing is limited.
        zk.create(base + "-sibling", b"x" * 100)
        zk.delete(f"{base}/b")
        zk.create(f"{base}/c")
        assert stats(zk, base) == "count=3,bytes=10"
    finally:
        zk.stop()
        zk.close()


def test_soft_limit_warns_and_allows(server_factory):
    """A soft limit never refuses; going past it logs ZooKeeper's "Quota exceeded" warning."""
    srv = server_factory(extra_cfg=ENFORCED)
    zk = kazoo(srv.hostport)
    try:
        zk.create("/soft")
        zk.create("/zookeeper/quota/soft", makepath=True)
        zk.create("/zookeeper/quota/soft/zookeeper_limits", b"count=2,bytes=-1")
        zk.create("/zookeeper/quota/soft/zookeeper_stats", b"")
        for i in range(4):
            zk.create(f"/soft/n{i}")
        assert stats(zk, "/soft") == "count=5,bytes=0"
    finally:
        zk.stop()
        zk.close()
    harness.wait_until(lambda: "Quota exceeded: /soft" in open(srv.log_path, errors="replace").read(),
                       10, "the soft-limit warning in the server log")


def test_usage_survives_snapshots_and_restarts(server_factory):
    """The usage is kept across snapshots (snapCount=10 forces several), a clean restart and a
    kill -9: after each, it is what it was and keeps counting from there."""
    srv = server_factory(extra_cfg={"snapCount": "10"})
    zk = kazoo(srv.hostport)
    try:
        zk.create("/keep", b"ab")
        zk.create("/zookeeper/quota/keep", makepath=True)
        zk.create("/zookeeper/quota/keep/zookeeper_limits", b"count=100,bytes=-1")
        zk.create("/zookeeper/quota/keep/zookeeper_stats", b"count=0,bytes=0")
        for i in range(30):
            zk.create(f"/keep/n{i}", b"xyz")
        for i in range(5):
            zk.set(f"/keep/n{i}", b"x")
        assert stats(zk, "/keep") == "count=31,bytes=82"
    finally:
        zk.stop()
        zk.close()
    srv.stop()
    srv.start()
    zk = kazoo(srv.hostport)
    try:
        assert stats(zk, "/keep") == "count=31,bytes=82"
        zk.create("/keep/after", b"1")
        assert stats(zk, "/keep") == "count=32,bytes=83"
    finally:
        zk.stop()
        zk.close()
    srv.kill()
    srv.start()
    zk = kazoo(srv.hostport)
    try:
        assert stats(zk, "/keep") == "count=32,bytes=83"
        zk.delete("/keep/after")
        assert stats(zk, "/keep") == "count=31,bytes=82"
    finally:
        zk.stop()
        zk.close()


def test_quota_across_failover():
    """On a 3-member ensemble with enforceQuota, every member holds the same usage; after the
    leader is killed the survivors still count and still refuse past the hard limit."""
    with Ensemble(3, name="quota", extra_cfg=ENFORCED) as ens:
        leader = ens.leader()
        follower = next(i for i in range(3) if i != leader)
        zk = kazoo(ens.members[follower].hostport)
        try:
            zk.create("/fo")
            zk.create("/zookeeper/quota/fo", makepath=True)
            zk.create("/zookeeper/quota/fo/zookeeper_limits",
                      b"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=4")
            zk.create("/zookeeper/quota/fo/zookeeper_stats", b"count=0,bytes=0")
            for i in range(3):
                zk.create(f"/fo/n{i}", b"d")
            with pytest.raises(QuotaExceededError):
                zk.create("/fo/over")
        finally:
            zk.stop()
            zk.close()
        for m in ens.members:
            c = kazoo(m.hostport)
            try:
                c.sync("/")
                assert stats(c, "/fo") == "count=4,bytes=3", m.hostport
            finally:
                c.stop()
                c.close()
        ens.kill(leader)
        ens.wait_stable(60)
        survivor = next(i for i in range(3) if i != leader)
        zk = kazoo(ens.members[survivor].hostport)
        try:
            assert stats(zk, "/fo") == "count=4,bytes=3"
            with pytest.raises(QuotaExceededError):
                zk.create("/fo/over")
            zk.delete("/fo/n0")
            zk.create("/fo/n9", b"dd")
            deadline = time.time() + 10
            while stats(zk, "/fo") != "count=4,bytes=4" and time.time() < deadline:
                time.sleep(0.1)
            assert stats(zk, "/fo") == "count=4,bytes=4"
        finally:
            zk.stop()
            zk.close()


@pytest.mark.skipif(harness.default_kind() != "warden",
                    reason="Debian's ZooKeeper 3.8 has no PrometheusMetricsProvider jar")
def test_quota_metrics(server_factory):
    """ZooKeeper's quota metrics, labelled by top-level namespace: limits (hard over soft), usage,
    and refusals under enforceQuota."""
    import urllib.request

    port = harness.free_port()
    srv = server_factory(extra_cfg={
        **ENFORCED,
        "metricsProvider.className": "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider",
        "metricsProvider.httpHost": "127.0.0.1",
        "metricsProvider.httpPort": port,
    })
    zk = kazoo(srv.hostport)
    try:
        zk.create("/pm/a", makepath=True)
        zk.create("/zookeeper/quota/pm/a", makepath=True)
        zk.create("/zookeeper/quota/pm/a/zookeeper_limits", b"count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=2")
        zk.create("/zookeeper/quota/pm/a/zookeeper_stats", b"count=0,bytes=0")
        zk.create("/pm/a/x", b"abc")
        with pytest.raises(QuotaExceededError):
            zk.create("/pm/a/y")
    finally:
        zk.stop()
        zk.close()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    want = {
        'quota_count_limit_per_namespace{key="pm"}': 2,
        'quota_bytes_limit_per_namespace{key="pm"}': -1,
        'quota_count_usage_per_namespace{key="pm"}': 2,
        'quota_bytes_usage_per_namespace{key="pm"}': 3,
        'quota_exceeded_error_per_namespace{key="pm"}': 1,
    }
    got = {}
    for line in text.splitlines():
        for series in want:
            if line.startswith(series + " "):
                got[series] = float(line.split()[-1])
    assert got == want, text
