"""Replica digests (digest.enabled, on by default): a member whose tree silently diverged from
its leader's is caught by the digest comparison, stops serving, re-syncs from the leader's
snapshot and serves the right data again.

The divergence comes from a test-only failpoint compiled into debug builds only: with
WARDEN_TEST_CORRUPT_CREATED=<path> in its environment, that one member changes the node's
data right after applying its create, behind the log's back. Warden only: ZooKeeper 3.8
logs a digest mismatch and goes on serving the diverged tree.
"""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient

import harness
from ensemble import Ensemble

pytestmark = pytest.mark.skipif(harness.default_kind() != "warden",
                                reason="ZooKeeper only logs a digest mismatch; the re-sync is Warden's")

VICTIM = "/dg/victim"


def mntr(hostport: str) -> dict[str, str]:
    try:
        text = harness.four_letter(hostport, "mntr")
    except OSError:
        return {}
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def wait(pred, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_diverged_member_is_caught_and_resynced(monkeypatch):
    ens = Ensemble(3, name="digests")
    try:
        # Members 1 and 2 first, so the corrupted member 3 joins as a follower.
        ens.start(0, wait=False)
        ens.start(1, wait=False)
        ens.wait_stable(60)
        monkeypatch.setenv("WARDEN_TEST_CORRUPT_CREATED", VICTIM)
        ens.start(2)
        monkeypatch.delenv("WARDEN_TEST_CORRUPT_CREATED")
        bad = ens.members[2]
        zk = KazooClient(ens.members[ens.leader()].hostport, timeout=10)
        zk.start()
        zk.create(VICTIM, b"good", makepath=True)
        # Past two digest points (every 128 zxids) so both sides record one after the change.
        for i in range(300):
            zk.create(f"/dg/n{i}")
        wait(lambda: mntr(bad.hostport).get("zk_digest_mismatches_count", "0") != "0", 20,
             "member 3 to find its digest differs")
        log = open(bad.log_path, errors="replace").read()
        assert "differs from the leader's" in log, log[-3000:]
        # Re-synced: serving again, with the leader's data.
        wait(lambda: mntr(bad.hostport).get("zk_digest_diverged") == "0", 60, "member 3 to re-sync")
        wait(lambda: ens.mode(2) == "follower", 30, "member 3 to serve again")
        c = KazooClient(bad.hostport, timeout=10)
        c.start()
        try:
            c.sync("/")
            assert c.get(VICTIM)[0] == b"good"
            assert len(c.get_children("/dg")) == 301
        finally:
            c.stop()
            c.close()
        assert "re-synced from the leader's snapshot" in open(bad.log_path, errors="replace").read()
        # The healthy members found nothing, and the ensemble goes on.
        for m in ens.members[:2]:
            assert mntr(m.hostport).get("zk_digest_mismatches_count") == "0", m.hostport
        for i in range(200):
            zk.create(f"/dg/after{i}")
        time.sleep(2.5)
        assert mntr(bad.hostport).get("zk_digest_mismatches_count") == "1"
        zk.stop()
        zk.close()
    finally:
        ens.close()
