"""Apache Curator 5.4 recipes against the server under test.

Each test runs one Java program from compat-tests/curator/ (compiled once by
curator/build.sh against Debian's jars) through curator/run.sh HOSTPORT TEST.
The program prints every check it makes; on failure that output is the
assertion message. Every program works under its own fresh base path.
Needs: javac, /usr/share/java/curator-*.jar, zookeeper.jar, guava, slf4j
(see install.sh).
"""

from __future__ import annotations

import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CURATOR_DIR = os.path.join(HERE, "curator")
BUILD = os.path.join(CURATOR_DIR, "build.sh")
RUN = os.path.join(CURATOR_DIR, "run.sh")
RUN_TIMEOUT = 240  # the Java side has its own 180 s watchdog


@pytest.fixture(scope="session")
def curator_build():
    """Compile the Java programs once per session (a no-op when up to date)."""
    proc = subprocess.run([BUILD], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"curator/build.sh failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def run_curator(server, test: str) -> str:
    try:
        proc = subprocess.run([RUN, server.hostport, test], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"curator test {test} did not finish in {RUN_TIMEOUT}s against {server.hostport}\n{out}")
    out = proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr.strip() else "")
    print(out)
    assert proc.returncode == 0, (
        f"curator test {test} failed against {server.kind} {server.hostport} (rc {proc.returncode}):\n{out}"
    )
    assert f"PASS {test}:" in proc.stdout, out
    return proc.stdout


@pytest.mark.timeout(300)
def test_curator_mutex(server, curator_build):
    """InterProcessMutex: 8 sessions x 10 acquisitions, never two holders."""
    run_curator(server, "mutex")


@pytest.mark.timeout(300)
def test_curator_leader_latch(server, curator_build):
    """LeaderLatch: one leader of 3; closing it (and then its session) elects another."""
    run_curator(server, "leader_latch")


@pytest.mark.timeout(300)
def test_curator_leader_selector(server, curator_build):
    """LeaderSelector with autoRequeue: exclusive, rotating leadership."""
    run_curator(server, "leader_selector")


@pytest.mark.timeout(300)
def test_curator_semaphore(server, curator_build):
    """InterProcessSemaphoreV2: leases never exceed the limit."""
    run_curator(server, "semaphore")


@pytest.mark.timeout(300)
def test_curator_atomic_long(server, curator_build):
    """DistributedAtomicLong: 8 x 25 concurrent increments sum exactly."""
    run_curator(server, "atomic_long")


@pytest.mark.timeout(300)
def test_curator_barrier(server, curator_build):
    """DistributedBarrier: waiters block until removeBarrier."""
    run_curator(server, "barrier")


@pytest.mark.timeout(300)
def test_curator_double_barrier(server, curator_build):
    """DistributedDoubleBarrier: enter only when all 3 arrived."""
    run_curator(server, "double_barrier")


@pytest.mark.timeout(300)
def test_curator_cache(server, curator_build):
    """CuratorCache: create/change/delete events, in order, one change at a time."""
    run_curator(server, "cache")


@pytest.mark.timeout(300)
def test_curator_ttl_node(server, curator_build):
    """PersistentTtlNode and direct TTL creates (needs extended types)."""
    run_curator(server, "ttl_node")


@pytest.mark.timeout(300)
def test_curator_parent_containers(server, curator_build):
    """creatingParentContainersIfNeeded: parents created, leaf created."""
    run_curator(server, "parent_containers")
