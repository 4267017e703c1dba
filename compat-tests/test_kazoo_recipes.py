"""kazoo recipes across separate processes, where a participant dies without closing its session.

kazoo's upstream recipe tests (test_kazoo_upstream.py) run all contenders in
one process and end sessions politely or by client-side simulation; these
tests kill a real process, so only server-side session expiry can free what
it held.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

_CONTENDER = r"""
import sys, time
from kazoo.client import KazooClient
hostport, kind, path = sys.argv[1:4]
zk = KazooClient(hostport, timeout=4.0)
zk.start(timeout=15)
if kind == "lock":
    lock = zk.Lock(path, "holder")
    lock.acquire(timeout=15)
    print("acquired", flush=True)
elif kind == "election":
    def lead():
        print("leading", flush=True)
        time.sleep(3600)
    zk.Election(path, "proc").run(lead)
elif kind == "semaphore":
    sem = zk.Semaphore(path, max_leases=2)
    sem.acquire(timeout=15)
    print("acquired", flush=True)
time.sleep(3600)
"""


def start_contender(hostport: str, kind: str, path: str):
    proc = subprocess.Popen(
        [sys.executable, "-c", _CONTENDER, hostport, kind, path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline().strip()
    if line not in ("acquired", "leading"):
        proc.kill()
        proc.wait()
        raise AssertionError(f"contender {kind} did not get going: {line!r}")
    return proc


@pytest.fixture
def zk(shared_server):
    c = KazooClient(shared_server.hostport, timeout=10)
    c.start()
    yield c
    c.stop()
    c.close()


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_lock_freed_by_session_expiry(shared_server, zk, procs):
    """A Lock held by a process that is SIGKILLed becomes available once its session expires, and not before."""
    path = "/recipe-lock-" + uuid.uuid4().hex[:8]
    holder = start_contender(shared_server.hostport, "lock", path)
    procs.append(holder)
    lock = zk.Lock(path, "waiter")
    assert lock.acquire(blocking=False) is False
    assert zk.Lock(path).contenders() == ["holder"]
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    killed = time.time()
    assert lock.acquire(timeout=20)
    waited = time.time() - killed
    assert 2.0 <= waited <= 15, waited  # the session timeout is 4 s
    assert zk.Lock(path).contenders() == ["waiter"]
    lock.release()


def test_election_fails_over_on_session_expiry(shared_server, zk, procs):
    """When the elected leader's process dies, the next contender is elected after its session expires."""
    path = "/recipe-election-" + uuid.uuid4().hex[:8]
    leader = start_contender(shared_server.hostport, "election", path)
    procs.append(leader)
    election = zk.Election(path, "local")
    elected = threading.Event()
    t = threading.Thread(target=election.run, args=(elected.set,), daemon=True)
    t.start()
    deadline = time.time() + 10
    while len(election.contenders()) < 2:
        assert time.time() < deadline, election.contenders()
        time.sleep(0.05)
    assert election.contenders() == ["proc", "local"]
    assert not elected.wait(1.0)
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    assert elected.wait(20)
    election.cancel()
    t.join(10)


def test_semaphore_lease_freed_by_session_expiry(shared_server, zk, procs):
    """Semaphore leases held by killed processes return to the pool after their sessions expire."""
    path = "/recipe-sem-" + uuid.uuid4().hex[:8]
    holders = [start_contender(shared_server.hostport, "semaphore", path) for _ in range(2)]
    procs.extend(holders)
    sem = zk.Semaphore(path, max_leases=2)
    assert sem.acquire(blocking=False) is False
    assert len(sem.lease_holders()) == 2
    for h in holders:
        os.kill(h.pid, signal.SIGKILL)
        h.wait()
    assert sem.acquire(timeout=20)
    sem.release()
