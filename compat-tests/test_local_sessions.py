"""Local sessions (localSessionsEnabled, localSessionsUpgradingEnabled) on a 3-member ensemble,
run the same against ZooKeeper 3.8: a new session lives on its member only, with no log entry
(no zxid taken), and cannot move to another member; with upgrading, its first ephemeral makes it
global (it then moves); without, an ephemeral create fails with EphemeralOnLocalSession.
"""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import EphemeralOnLocalSessionError, RolledBackError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

import harness
from ensemble import Ensemble


def kazoo(hostport: str, **kw) -> KazooClient:
    c = KazooClient(hostport, timeout=10, **kw)
    c.start()
    return c


def mntr(hostport: str) -> dict[str, str]:
    text = harness.four_letter(hostport, "mntr")
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def zxid(hostport: str) -> int:
    return int(harness.four_letter(hostport, "srvr").split("Zxid: ")[1].split()[0], 16)


def resumes(hostport: str, client_id) -> bool:
    """Whether the session `client_id` (id, password) can be taken up on `hostport`."""
    c = KazooClient(hostport, timeout=4, client_id=client_id, connection_retry={"max_tries": 0})
    try:
        c.start(timeout=6)
        # On an expired session kazoo starts a new one by itself.
        return c.client_id[0] == client_id[0]
    except (SessionExpiredError, KazooTimeoutError):
        return False
    finally:
        c.stop()
        c.close()


@pytest.fixture(scope="module")
def upgrading():
    with Ensemble(3, name="local-up", extra_cfg={"localSessionsEnabled": "true",
                                                 "localSessionsUpgradingEnabled": "true"}) as ens:
        yield ens


def test_local_session_takes_no_log_entry_and_stays_on_its_member(upgrading):
    """Sessions that only read take no zxid; mntr counts them as local on their member; a local
    session cannot be resumed on another member, but can on its own."""
    ens = upgrading
    leader = ens.leader()
    member = next(i for i in range(3) if i != leader)
    other = next(i for i in range(3) if i not in (leader, member))
    hp = ens.members[member].hostport
    before = zxid(ens.members[leader].hostport)
    clients = [kazoo(hp) for _ in range(5)]
    for c in clients:
        c.get("/zookeeper")
    assert int(mntr(hp)["zk_local_sessions"]) >= 5
    assert zxid(ens.members[leader].hostport) == before, "a local session took a zxid"
    keep = clients[0]
    sid, pw = keep.client_id
    # Closing a local session takes no zxid either.
    for c in clients[1:]:
        c.stop()
        c.close()
    time.sleep(0.3)
    assert zxid(ens.members[leader].hostport) == before
    assert not resumes(ens.members[other].hostport, (sid, pw)), "a local session moved"
    keep.stop()
    keep.close()


def test_first_ephemeral_makes_the_session_global(upgrading):
    """With upgrading, a local session's ephemeral create succeeds (the session becomes global,
    taking a zxid), and the session can then be resumed on another member, its ephemeral intact."""
    ens = upgrading
    leader = ens.leader()
    member = next(i for i in range(3) if i != leader)
    other = next(i for i in range(3) if i not in (leader, member))
    zk = kazoo(ens.members[member].hostport)
    zk.create("/local-persistent", b"p")
    zk.create("/local-eph", b"e", ephemeral=True)
    sid, pw = zk.client_id
    assert zk.exists("/local-eph").owner_session_id == sid
    c = kazoo(ens.members[other].hostport, client_id=(sid, pw))
    try:
        c.sync("/")
        assert c.client_id[0] == sid
        assert c.exists("/local-eph").owner_session_id == sid
    finally:
        c.stop()
        c.close()
    zk.stop()
    zk.close()
    watcher = kazoo(ens.members[leader].hostport)
    deadline = time.time() + 10
    while watcher.exists("/local-eph") and time.time() < deadline:
        time.sleep(0.1)
    assert not watcher.exists("/local-eph"), "the upgraded session's close did not remove its ephemeral"
    watcher.stop()
    watcher.close()


def test_ephemeral_without_upgrading_fails():
    """Without upgrading, an ephemeral create on a local session fails with
    EphemeralOnLocalSession (-120); in a multi the ephemeral create fails with SessionExpired
    and the multi is rolled back, as ZooKeeper 3.8 answers; persistent writes work."""
    with Ensemble(3, name="local-noup", extra_cfg={"localSessionsEnabled": "true"}) as ens:
        leader = ens.leader()
        member = next(i for i in range(3) if i != leader)
        zk = kazoo(ens.members[member].hostport)
        zk.create("/np", b"x")
        with pytest.raises(EphemeralOnLocalSessionError):
            zk.create("/np-eph", ephemeral=True)
        tx = zk.transaction()
        tx.create("/np-plain")
        tx.create("/np-multi", ephemeral=True)
        results = tx.commit()
        assert [type(r) for r in results] == [RolledBackError, SessionExpiredError], results
        assert not zk.exists("/np-eph") and not zk.exists("/np-multi") and not zk.exists("/np-plain")
        zk.stop()
        zk.close()
