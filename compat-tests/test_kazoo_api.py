"""Core ZooKeeper client API through kazoo (the Python client), against the server under test.

Most tests share one server per module (`shared_server`) and work under their
own root path; tests that stop, kill or restart the server take `server`.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadArgumentsError,
    BadVersionError,
    InvalidACLError,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType, KazooState, ZnodeStat
from kazoo.security import (
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    ACL,
    Id,
    Permissions,
    make_digest_acl,
    make_digest_acl_credential,
)

import harness

EVENT_WAIT = 10.0


@pytest.fixture
def clients(shared_server):
    """Factory for started KazooClients on the shared server; all stopped at teardown."""
    made = []

    def make(hosts=None, **kw):
        kw.setdefault("timeout", 10)
        c = KazooClient(hosts or shared_server.hostport, **kw)
        made.append(c)
        c.start(timeout=15)
        return c

    yield make
    for c in made:
        try:
            c.stop()
        finally:
            c.close()


@pytest.fixture
def zk(clients):
    return clients()


@pytest.fixture
def root(zk, request):
    """A fresh persistent root path for this test."""
    path = f"/api-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    zk.create(path, b"root")
    return path


def _events():
    """A queue and a watch callback that appends each WatchedEvent to it."""
    q: queue.Queue = queue.Queue()
    return q, q.put


def _no_more(q: queue.Queue, wait: float = 0.5):
    try:
        ev = q.get(timeout=wait)
    except queue.Empty:
        return
    raise AssertionError(f"unexpected extra watch event {ev}")


# --------------------------------------------------------------------------- create


def test_create_persistent_stat(zk, root):
    """A persistent create returns its path; the node's stat starts at version 0 with czxid == mzxid == pzxid."""
    path = zk.create(root + "/p", b"hello")
    assert path == root + "/p"
    data, stat = zk.get(path)
    assert data == b"hello"
    assert (stat.version, stat.cversion, stat.aversion) == (0, 0, 0)
    assert stat.ephemeralOwner == 0
    assert stat.dataLength == 5 and stat.numChildren == 0
    assert stat.czxid == stat.mzxid == stat.pzxid
    assert stat.ctime == stat.mtime and stat.ctime > 0
    # ctime is wall-clock milliseconds
    assert abs(stat.ctime / 1000.0 - time.time()) < 300


def test_create2_include_data(zk, root):
    """create(include_data=True) (create2) returns the new node's stat together with its path."""
    path, stat = zk.create(root + "/c2", b"abc", include_data=True)
    assert path == root + "/c2"
    assert isinstance(stat, ZnodeStat)
    assert stat.dataLength == 3 and stat.version == 0
    assert zk.exists(path) == stat


def test_create_updates_parent_stat(zk, root):
    """Creating children bumps the parent's cversion and numChildren and sets pzxid to the child's czxid."""
    _, before = zk.get(root)
    _, child = zk.create(root + "/a", include_data=True)
    _, after = zk.get(root)
    assert after.cversion == before.cversion + 1
    assert after.numChildren == before.numChildren + 1
    assert after.pzxid == child.czxid
    assert after.version == before.version and after.mzxid == before.mzxid
    zk.delete(root + "/a")
    _, deleted = zk.get(root)
    assert deleted.numChildren == before.numChildren
    assert deleted.pzxid > child.czxid


def test_create_ephemeral_owned_by_session(zk, root):
    """An ephemeral node's ephemeralOwner is the creating session's id."""
    zk.create(root + "/e", b"x", ephemeral=True)
    stat = zk.exists(root + "/e")
    assert stat.ephemeralOwner == zk.client_id[0] != 0


def test_create_sequence_names(zk, root):
    """Sequential nodes get a 10-digit counter suffix that every create under the parent advances."""
    names = [zk.create(root + "/job-", sequence=True) for _ in range(3)]
    assert names == [root + "/job-0000000000", root + "/job-0000000001", root + "/job-0000000002"]
    assert zk.exists(root).cversion == 3
    # A plain create advances the same counter.
    zk.create(root + "/plain")
    assert zk.create(root + "/", sequence=True) == root + "/0000000004"
    # The suffix may follow a path ending in "/" or any prefix, and is per parent.
    assert zk.create(root + "/plain/x", sequence=True) == root + "/plain/x0000000000"
    # After a delete the counter still only moves forward. (ZooKeeper 3.8.0's
    # exact next number after a delete is not pinned here; see README.)
    zk.delete(root + "/job-0000000001")
    after = zk.create(root + "/job-", sequence=True)
    assert after.startswith(root + "/job-") and int(after[-10:]) >= 5


def test_create_ephemeral_sequential(zk, root):
    """Ephemeral + sequence gives a suffixed name owned by the session."""
    p1 = zk.create(root + "/lock-", b"", ephemeral=True, sequence=True)
    p2 = zk.create(root + "/lock-", b"", ephemeral=True, sequence=True)
    assert (p1, p2) == (root + "/lock-0000000000", root + "/lock-0000000001")
    assert zk.exists(p2).ephemeralOwner == zk.client_id[0]


def test_create_makepath(zk, root):
    """makepath creates missing persistent parents, and the leaf may be ephemeral."""
    leaf = zk.create(root + "/x/y/z", b"leaf", makepath=True, ephemeral=True)
    assert leaf == root + "/x/y/z"
    assert zk.exists(root + "/x/y").ephemeralOwner == 0
    assert zk.exists(leaf).ephemeralOwner == zk.client_id[0]
    assert zk.get_children(root + "/x") == ["y"]
    zk.ensure_path(root + "/x/y/w")
    assert sorted(zk.get_children(root + "/x/y")) == ["w", "z"]


def test_create_errors(zk, root):
    """create fails with NodeExists, NoNode (missing parent) and NoChildrenForEphemerals."""
    zk.create(root + "/dup")
    with pytest.raises(NodeExistsError):
        zk.create(root + "/dup")
    with pytest.raises(NoNodeError):
        zk.create(root + "/missing/child")
    zk.create(root + "/eph", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create(root + "/eph/child")


def test_special_nodes(zk):
    """/zookeeper, /zookeeper/quota and /zookeeper/config always exist, cannot be deleted, and config is read-only."""
    assert "zookeeper" in zk.get_children("/")
    assert {"config", "quota"} <= set(zk.get_children("/zookeeper"))
    for path in ("/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"):
        with pytest.raises(BadArgumentsError):
            zk.delete(path)
    assert zk.get_acls("/zookeeper/config")[0] == READ_ACL_UNSAFE
    with pytest.raises(NoAuthError):
        zk.set("/zookeeper/config", b"server.1=evil")


def test_unicode_and_binary_data(zk, root):
    """Unicode node names round-trip through getChildren, and data is returned byte for byte."""
    blob = bytes(range(256)) * 4
    zk.create(root + "/ünïcødé-✓", blob)
    assert zk.get_children(root) == ["ünïcødé-✓"]
    assert zk.get(root + "/ünïcødé-✓")[0] == blob


def test_empty_and_large_data(zk, root):
    """Empty data reads back as b'' with dataLength 0; a ~1 MB value round-trips."""
    zk.create(root + "/empty")
    data, stat = zk.get(root + "/empty")
    assert data == b"" and stat.dataLength == 0
    big = os.urandom(1024 * 1024 - 4096)
    zk.create(root + "/big", big)
    data, stat = zk.get(root + "/big")
    assert data == big and stat.dataLength == len(big)


# --------------------------------------------------------------------------- get/set/delete


def test_set_with_versions(zk, root):
    """setData bumps version and mzxid only; a stale expected version fails with BadVersion."""
    zk.create(root + "/v", b"0")
    _, s0 = zk.get(root + "/v")
    s1 = zk.set(root + "/v", b"1", version=0)
    assert s1.version == 1 and s1.czxid == s0.czxid and s1.mzxid > s0.mzxid
    assert s1.mtime >= s0.mtime and s1.ctime == s0.ctime
    assert s1.dataLength == 1 and s1.cversion == s0.cversion and s1.aversion == s0.aversion
    with pytest.raises(BadVersionError):
        zk.set(root + "/v", b"stale", version=0)
    assert zk.get(root + "/v")[0] == b"1"
    s2 = zk.set(root + "/v", b"any", version=-1)
    assert s2.version == 2
    with pytest.raises(NoNodeError):
        zk.set(root + "/nope", b"x")


def test_delete_semantics(zk, root):
    """delete honours versions, refuses non-empty nodes and missing nodes; recursive delete removes a subtree."""
    zk.create(root + "/d", b"")
    zk.set(root + "/d", b"1")
    with pytest.raises(BadVersionError):
        zk.delete(root + "/d", version=0)
    zk.create(root + "/d/child")
    with pytest.raises(NotEmptyError):
        zk.delete(root + "/d")
    zk.delete(root + "/d/child")
    zk.delete(root + "/d", version=1)
    assert zk.exists(root + "/d") is None
    with pytest.raises(NoNodeError):
        zk.delete(root + "/d")
    zk.create(root + "/tree/a/b", makepath=True)
    zk.create(root + "/tree/c")
    zk.delete(root + "/tree", recursive=True)
    assert zk.exists(root + "/tree") is None


def test_get_children_and_include_data(zk, root):
    """getChildren lists child names (unordered); include_data (getChildren2) also returns the parent's stat."""
    for n in ("b", "a", "c"):
        zk.create(f"{root}/{n}")
    assert sorted(zk.get_children(root)) == ["a", "b", "c"]
    children, stat = zk.get_children(root, include_data=True)
    assert sorted(children) == ["a", "b", "c"]
    assert stat.numChildren == 3 and stat == zk.exists(root)
    assert zk.get_children(root + "/a") == []
    with pytest.raises(NoNodeError):
        zk.get_children(root + "/none")


def test_sync_and_exists(zk, root):
    """sync returns the path; exists returns None for a missing node and a stat for a present one."""
    assert zk.sync(root) == root
    assert zk.exists(root + "/missing") is None
    assert zk.exists(root).numChildren == 0


def test_read_your_writes_across_sessions(clients, root):
    """A write acknowledged to one session is visible to another session after sync."""
    a, b = clients(), clients()
    a.create(root + "/rw", b"1")
    for i in range(20):
        a.set(root + "/rw", str(i).encode())
        b.sync(root + "/rw")
        assert b.get(root + "/rw")[0] == str(i).encode()


# --------------------------------------------------------------------------- watches


def test_exists_watch_fires_once_on_create(clients, root):
    """An exists watch on a missing node fires NodeCreated once, and not again on later changes."""
    a, b = clients(), clients()
    q, cb = _events()
    assert a.exists(root + "/w", watch=cb) is None
    b.create(root + "/w", b"1")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CREATED, root + "/w")
    b.set(root + "/w", b"2")
    b.delete(root + "/w")
    _no_more(q)


def test_data_watch_change_and_delete(clients, root):
    """A getData watch fires NodeDataChanged once; a new watch fires NodeDeleted on delete."""
    a, b = clients(), clients()
    b.create(root + "/d", b"1")
    q, cb = _events()
    a.get(root + "/d", watch=cb)
    b.set(root + "/d", b"2")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CHANGED, root + "/d")
    b.set(root + "/d", b"3")
    _no_more(q)
    a.get(root + "/d", watch=cb)
    b.delete(root + "/d")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.DELETED, root + "/d")
    _no_more(q)


def test_exists_watch_on_existing_node(clients, root):
    """An exists watch on a present node fires NodeDataChanged on set."""
    a, b = clients(), clients()
    b.create(root + "/x", b"1")
    q, cb = _events()
    assert a.exists(root + "/x", watch=cb) is not None
    b.set(root + "/x", b"2")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CHANGED, root + "/x")


def test_children_watch(clients, root):
    """A getChildren watch fires NodeChildrenChanged on child create/delete but not on the parent's data change."""
    a, b = clients(), clients()
    q, cb = _events()
    a.get_children(root, watch=cb)
    b.set(root, b"data change is not a child change")
    _no_more(q)
    b.create(root + "/c1")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CHILD, root)
    b.create(root + "/c2")
    _no_more(q)
    a.get_children(root, watch=cb)
    b.delete(root + "/c1")
    ev = q.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CHILD, root)


def test_delete_fires_data_and_parent_child_watches(clients, root):
    """Deleting a node fires NodeDeleted on its own watches and NodeChildrenChanged on the parent's."""
    a, b = clients(), clients()
    b.create(root + "/n", b"")
    qd, cbd = _events()
    qc, cbc = _events()
    qn, cbn = _events()
    a.get(root + "/n", watch=cbd)
    a.get_children(root + "/n", watch=cbn)
    a.get_children(root, watch=cbc)
    b.delete(root + "/n")
    assert qd.get(timeout=EVENT_WAIT).type == EventType.DELETED
    assert qn.get(timeout=EVENT_WAIT).type == EventType.DELETED
    ev = qc.get(timeout=EVENT_WAIT)
    assert (ev.type, ev.path) == (EventType.CHILD, root)


def test_rewatch_fires_once_per_change(clients, root):
    """Re-arming a data watch after each change yields exactly one NodeDataChanged per change."""
    a, b = clients(), clients()
    a.create(root + "/o", b"0")
    seen = []
    for i in range(1, 11):
        fired = threading.Event()

        def cb(ev, fired=fired):
            seen.append((ev.type, ev.path))
            fired.set()

        a.get(root + "/o", watch=cb)
        b.set(root + "/o", str(i).encode())
        assert fired.wait(EVENT_WAIT)
        assert a.get(root + "/o")[0] == str(i).encode()
    time.sleep(0.3)
    assert seen == [(EventType.CHANGED, root + "/o")] * 10


# --------------------------------------------------------------------------- transactions


def test_transaction_commit_results(zk, root):
    """A transaction applies every op and returns one result per op, all at one zxid."""
    zk.create(root + "/t1", b"a")
    tx = zk.transaction()
    tx.create(root + "/t2", b"b")
    tx.create(root + "/t3-", b"c", sequence=True)
    tx.set_data(root + "/t1", b"a2", version=0)
    tx.check(root + "/t1", 1)
    tx.delete(root + "/t2")
    results = tx.commit()
    assert results[0] == root + "/t2"
    assert results[1] == root + "/t3-0000000002"
    assert isinstance(results[2], ZnodeStat) and results[2].version == 1
    assert results[3] is True and results[4] is True
    assert zk.exists(root + "/t2") is None
    assert zk.get(root + "/t1")[0] == b"a2"
    # all ops of one multi share a zxid
    assert zk.exists(root + "/t3-0000000002").czxid == zk.exists(root + "/t1").mzxid


def test_transaction_all_or_nothing(zk, root):
    """A failing op aborts the whole transaction: earlier ops roll back, later ops report RuntimeInconsistency."""
    zk.create(root + "/keep", b"v0")
    tx = zk.transaction()
    tx.create(root + "/new", b"")
    tx.set_data(root + "/keep", b"changed")
    tx.check(root + "/keep", 7)  # wrong version
    tx.create(root + "/new2", b"")
    results = tx.commit()
    assert [type(r) for r in results] == [
        RolledBackError,
        RolledBackError,
        BadVersionError,
        RuntimeInconsistency,
    ]
    assert zk.exists(root + "/new") is None and zk.exists(root + "/new2") is None
    data, stat = zk.get(root + "/keep")
    assert data == b"v0" and stat.version == 0


def test_transaction_failure_codes(zk, root):
    """A transaction reports the failing op's own error (NodeExists, NoNode, NotEmpty)."""
    zk.create(root + "/p/c", makepath=True)
    for build, err in [
        (lambda tx: tx.create(root + "/p"), NodeExistsError),
        (lambda tx: tx.delete(root + "/absent"), NoNodeError),
        (lambda tx: tx.delete(root + "/p"), NotEmptyError),
    ]:
        tx = zk.transaction()
        build(tx)
        (res,) = tx.commit()
        assert isinstance(res, err)


def test_transaction_ops_see_earlier_ops(zk, root):
    """Later ops in a transaction see the effects of earlier ones (create then child create then check)."""
    tx = zk.transaction()
    tx.create(root + "/m", b"")
    tx.create(root + "/m/child", b"")
    tx.set_data(root + "/m", b"x", version=0)
    tx.check(root + "/m", 1)
    tx.delete(root + "/m/child")
    tx.delete(root + "/m", version=1)
    results = tx.commit()
    assert not any(isinstance(r, Exception) for r in results), results
    assert zk.exists(root + "/m") is None


# --------------------------------------------------------------------------- ACLs and auth


def test_digest_acl_enforced(clients, root):
    """A digest ACL admits the matching user only; others get NoAuth (including a wrong password)."""
    owner = clients(auth_data=[("digest", "alice:pw1")])
    acl = [make_digest_acl("alice", "pw1", all=True)]
    owner.create(root + "/secret", b"s3", acl=acl)
    assert owner.get(root + "/secret")[0] == b"s3"
    assert owner.get_acls(root + "/secret")[0] == acl

    anon = clients()
    with pytest.raises(NoAuthError):
        anon.get(root + "/secret")
    with pytest.raises(NoAuthError):
        anon.set(root + "/secret", b"x")
    with pytest.raises(NoAuthError):
        anon.create(root + "/secret/child")
    with pytest.raises(NoAuthError):
        anon.get_children(root + "/secret")
    # exists needs no permission
    assert anon.exists(root + "/secret") is not None

    wrong = clients(auth_data=[("digest", "alice:wrong")])
    with pytest.raises(NoAuthError):
        wrong.get(root + "/secret")

    late = clients()
    late.add_auth("digest", "alice:pw1")
    assert late.get(root + "/secret")[0] == b"s3"


def test_permission_bits(clients, root):
    """Each permission bit gates its own operation (READ, WRITE, CREATE, DELETE, ADMIN)."""
    zk = clients()
    base = root + "/perm"
    zk.create(base)
    cases = {
        "r": Permissions.READ,
        "w": Permissions.WRITE,
        "c": Permissions.CREATE,
        "d": Permissions.DELETE,
        "a": Permissions.ADMIN,
    }
    for name, perm in cases.items():
        zk.create(f"{base}/{name}", b"v", acl=[ACL(perm, Id("world", "anyone"))])

    zk.get(f"{base}/r")
    with pytest.raises(NoAuthError):
        zk.set(f"{base}/r", b"x")
    zk.set(f"{base}/w", b"x")
    with pytest.raises(NoAuthError):
        zk.get(f"{base}/w")
    zk.create(f"{base}/c/kid")
    with pytest.raises(NoAuthError):
        zk.create(f"{base}/d/kid")
    with pytest.raises(NoAuthError):
        zk.delete(f"{base}/c/kid")  # parent c lacks DELETE
    zk.set_acls(f"{base}/a", OPEN_ACL_UNSAFE)  # ADMIN allows setACL
    with pytest.raises(NoAuthError):
        zk.set_acls(f"{base}/r", OPEN_ACL_UNSAFE)
    # Deleting a node needs DELETE on the parent, not on the node itself.
    zk.create(base + "/open", acl=OPEN_ACL_UNSAFE)
    zk.create(base + "/open/locked", acl=READ_ACL_UNSAFE)
    zk.delete(base + "/open/locked")


def test_set_acls_versions(zk, root):
    """setACL bumps aversion only and honours the expected ACL version."""
    zk.create(root + "/acl", b"d")
    read_admin = [ACL(Permissions.READ | Permissions.ADMIN, Id("world", "anyone"))]
    s = zk.set_acls(root + "/acl", read_admin, version=0)
    assert s.aversion == 1 and s.version == 0 and s.cversion == 0
    acls, stat = zk.get_acls(root + "/acl")
    assert acls == read_admin and stat.aversion == 1 and stat.mzxid == s.mzxid
    with pytest.raises(BadVersionError):
        zk.set_acls(root + "/acl", OPEN_ACL_UNSAFE, version=0)
    with pytest.raises(NoAuthError):  # the new ACL is in force: no WRITE
        zk.set(root + "/acl", b"x")
    assert zk.set_acls(root + "/acl", OPEN_ACL_UNSAFE, version=-1).aversion == 2


def test_creator_all_acl(clients, root):
    """CREATOR_ALL_ACL needs an authenticated creator (else InvalidACL) and expands to its digest id."""
    anon = clients()
    with pytest.raises(InvalidACLError):
        anon.create(root + "/mine", acl=CREATOR_ALL_ACL)
    bob = clients(auth_data=[("digest", "bob:pw")])
    bob.create(root + "/mine", b"b", acl=CREATOR_ALL_ACL)
    acls, _ = bob.get_acls(root + "/mine")
    assert acls == [ACL(Permissions.ALL, Id("digest", make_digest_acl_credential("bob", "pw")))]
    assert acls[0].id.id == harness.digest("bob", "pw")
    with pytest.raises(NoAuthError):
        anon.get(root + "/mine")


def test_super_digest_bypasses_acls(clients, root):
    """The configured super user (digest super:secret) passes every ACL check."""
    owner = clients(auth_data=[("digest", "carol:pw")])
    owner.create(root + "/locked", b"l", acl=[make_digest_acl("carol", "pw", all=True)])
    su = clients(auth_data=[("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")])
    assert su.get(root + "/locked")[0] == b"l"
    su.set(root + "/locked", b"overwritten")
    su.delete(root + "/locked")


def test_unknown_auth_scheme_fails(clients):
    """add_auth with a scheme the server does not know raises AuthFailed."""
    zk = clients()
    with pytest.raises(AuthFailedError):
        zk.add_auth("nosuchscheme", "whatever")


def test_get_acl_of_open_node(zk, root):
    """Default ACL is world:anyone with all permissions."""
    zk.create(root + "/o")
    acls, stat = zk.get_acls(root + "/o")
    assert acls == OPEN_ACL_UNSAFE and stat.aversion == 0
    assert zk.get_acls("/")[0] == OPEN_ACL_UNSAFE


# --------------------------------------------------------------------------- sessions


def _drop_connection(client: KazooClient) -> None:
    """Break the TCP connection (not the session) and wait until the client is connected again."""
    from kazoo.protocol.connection import _CONNECTION_DROP

    states: queue.Queue = queue.Queue()
    client.add_listener(states.put)
    client._call(_CONNECTION_DROP, None)
    assert states.get(timeout=5) == KazooState.SUSPENDED
    assert states.get(timeout=15) == KazooState.CONNECTED
    client.remove_listener(states.put)


def test_reconnect_keeps_session(clients, root):
    """Dropping the TCP connection and reconnecting resumes the same session with its ephemerals."""
    a = clients()
    a.create(root + "/eph", b"e", ephemeral=True)
    sid = a.client_id[0]
    _drop_connection(a)
    assert a.client_id[0] == sid
    assert a.exists(root + "/eph").ephemeralOwner == sid
    a.create(root + "/eph2", ephemeral=True)


def test_resume_session_from_another_client(clients, root):
    """A second client given (session id, password) takes over the session and its ephemerals."""
    a = clients()
    a.create(root + "/owned", ephemeral=True)
    sid, pwd = a.client_id
    b = clients(client_id=(sid, pwd))
    assert b.client_id[0] == sid
    b.create(root + "/also", ephemeral=True)
    assert b.exists(root + "/also").ephemeralOwner == sid


_HOLDER = r"""
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(sys.argv[1], timeout=float(sys.argv[2]))
zk.start(timeout=15)
for p in sys.argv[3:]:
    zk.create(p, b"held", ephemeral=True)
sid, pwd = zk.client_id
print(sid, pwd.hex(), flush=True)
time.sleep(3600)
"""


def hold_ephemerals(hostport: str, paths: list[str], timeout: float = 4.0):
    """Start a separate process whose session creates `paths` ephemerally; return (proc, sid, passwd)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, hostport, str(timeout), *paths],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline().split()
    if len(line) != 2:
        proc.kill()
        proc.wait()
        raise AssertionError("holder process did not start its session")
    return proc, int(line[0]), bytes.fromhex(line[1])


def test_session_expiry_removes_ephemerals(clients, shared_server, root):
    """When a client dies silently its session expires after the timeout, deleting its ephemerals and firing watches."""
    watcher = clients()
    proc, sid, _ = hold_ephemerals(shared_server.hostport, [root + "/e1", root + "/e2"], timeout=4.0)
    try:
        assert watcher.exists(root + "/e1").ephemeralOwner == sid
        q, cb = _events()
        watcher.exists(root + "/e1", watch=cb)
        qc, cbc = _events()
        watcher.get_children(root, watch=cbc)
        killed_at = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        ev = q.get(timeout=20)
        waited = time.time() - killed_at
        assert (ev.type, ev.path) == (EventType.DELETED, root + "/e1")
        assert qc.get(timeout=5).type == EventType.CHILD
        # not before the session timeout (4 s), and not much later than timeout + a tick
        assert 2.0 <= waited <= 15, waited
        assert watcher.get_children(root) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_expired_session_cannot_be_resumed(clients, shared_server, root):
    """Reconnecting with an expired session's id and password reports LOST (SessionExpired) and gets a new session."""
    proc, sid, pwd = hold_ephemerals(shared_server.hostport, [root + "/gone"], timeout=4.0)
    watcher = clients()
    q, cb = _events()
    watcher.exists(root + "/gone", watch=cb)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert q.get(timeout=20).type == EventType.DELETED
    states: list = []
    c = KazooClient(shared_server.hostport, client_id=(sid, pwd), timeout=10)
    c.add_listener(states.append)
    try:
        # kazoo logs "Session has expired" and silently starts a new session.
        c.start(timeout=15)
        assert c.client_id[0] != sid
        assert c.exists(root + "/gone") is None
        c.create(root + "/gone", ephemeral=True)
        assert c.exists(root + "/gone").ephemeralOwner == c.client_id[0]
    finally:
        c.stop()
        c.close()


def test_wrong_session_password_is_expired(clients, shared_server):
    """A reconnect with a live session id but the wrong password is treated as expired, leaving the real session intact."""
    a = clients()
    sid, pwd = a.client_id
    bad = bytes([pwd[0] ^ 0xFF]) + pwd[1:]
    states: list = []
    c = KazooClient(shared_server.hostport, client_id=(sid, bad), timeout=10)
    c.add_listener(states.append)
    try:
        c.start(timeout=15)  # refused as expired; kazoo then opens a new session
        assert c.client_id[0] != sid
    finally:
        c.stop()
        c.close()
    assert a.exists("/") is not None and a.client_id[0] == sid


def test_close_session_removes_ephemerals_immediately(clients, root):
    """A clean session close deletes the session's ephemerals at once, without waiting for the timeout."""
    a, b = clients(), clients()
    a.create(root + "/bye", ephemeral=True)
    q, cb = _events()
    b.exists(root + "/bye", watch=cb)
    start = time.time()
    a.stop()
    assert q.get(timeout=5).type == EventType.DELETED
    assert time.time() - start < 3


def test_server_version(zk):
    """kazoo's server_version() (the `envi` four-letter word) reports ZooKeeper 3.x."""
    version = zk.server_version()
    assert version[0] == 3 and version[1] >= 5


# --------------------------------------------------------------------------- durability (own server)


def test_data_survives_restart(server):
    """Persistent nodes, data, versions and sequence counters survive a clean stop and start."""
    zk = KazooClient(server.hostport, timeout=10)
    zk.start()
    zk.create("/dur/a", b"one", makepath=True)
    zk.set("/dur/a", b"two")
    zk.create("/dur/s-", sequence=True)
    _, before = zk.get("/dur/a")
    zk.stop()
    zk.close()
    server.stop()
    server.start()
    zk = KazooClient(server.hostport, timeout=10)
    zk.start()
    try:
        data, after = zk.get("/dur/a")
        assert data == b"two"
        assert (after.version, after.czxid, after.mzxid) == (before.version, before.czxid, before.mzxid)
        assert zk.create("/dur/s-", sequence=True) == "/dur/s-0000000002"
        assert zk.exists("/dur/a").mzxid < zk.exists("/dur/s-0000000002").czxid
    finally:
        zk.stop()
        zk.close()


def test_acknowledged_writes_survive_kill(server):
    """Every write acknowledged before a SIGKILL is present after restart."""
    zk = KazooClient(server.hostport, timeout=10)
    zk.start()
    zk.create("/k")
    for i in range(50):
        zk.create(f"/k/n{i:03d}", str(i).encode())
    zk.set("/k", b"last")
    server.kill()
    zk.stop()
    zk.close()
    server.start()
    zk = KazooClient(server.hostport, timeout=10)
    zk.start()
    try:
        assert sorted(zk.get_children("/k")) == [f"n{i:03d}" for i in range(50)]
        assert zk.get("/k")[0] == b"last"
        assert zk.get("/k/n049")[0] == b"49"
    finally:
        zk.stop()
        zk.close()


def test_session_survives_server_restart(server):
    """A session and its ephemeral survive a server restart shorter than the session timeout."""
    a = KazooClient(server.hostport, timeout=20)
    states: queue.Queue = queue.Queue()
    a.add_listener(states.put)
    a.start()
    sid, pwd = a.client_id
    a.create("/ephem", b"e", ephemeral=True)
    assert states.get(timeout=5) == KazooState.CONNECTED
    server.stop()
    assert states.get(timeout=10) == KazooState.SUSPENDED
    # Stop the old client while disconnected: it cannot send closeSession, so
    # the session lives on. (Letting it retry would race ZooKeeper's start-up,
    # which can swallow a reconnect that arrives too early.)
    a.stop()
    a.close()
    server.start()
    b = KazooClient(server.hostport, timeout=20, client_id=(sid, pwd))
    b.start()
    try:
        assert b.client_id[0] == sid
        assert b.exists("/ephem").ephemeralOwner == sid
        assert b.get("/ephem")[0] == b"e"
    finally:
        b.stop()
        b.close()
