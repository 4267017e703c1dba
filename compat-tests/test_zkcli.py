"""Apache ZooKeeper's own CLI (zkCli.sh, the Java client) against the server under test.

Each test runs one scripted zkCli session (see zkcli.py) and compares what
each command printed. Outputs are compared exactly, except zxids, times and
session ids, which are checked through their relations (e.g. cZxid == mZxid
after a create) instead of their values. The message texts ("Node already
exists: ...", "version No is not valid : ...") are zkCli's renderings of the
server's error codes, recorded from ZooKeeper 3.8.0.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kazoo.client import KazooClient

import harness
import zkcli
from zkcli import split_stat, stat_ints


@pytest.fixture
def base():
    return "/cli-" + uuid.uuid4().hex[:10]


@pytest.fixture
def kz(shared_server):
    c = KazooClient(shared_server.hostport, timeout=10)
    c.start()
    yield c
    c.stop()
    c.close()


def cli(srv, *commands):
    return zkcli.run(srv.hostport, list(commands))


def wait_until(pred, timeout=15.0, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def test_create_get_stat(shared_server, base):
    """create/get -s/stat print the data and a fresh node's stat; duplicate and orphan creates fail with zkCli's messages."""
    r = cli(
        shared_server,
        f"create {base} hello",
        f"get -s {base}",
        f"stat {base}",
        f"create {base} again",
        f"create {base}/x/y orphan",
        f"get {base}/missing",
        f"stat {base}/missing",
    )
    assert r.out(0) == [f"Created {base}"], r
    rest, stat = split_stat(r.out(1))
    assert rest == ["hello"], r
    s = stat_ints(stat)
    assert s["cZxid"] == s["mZxid"] == s["pZxid"] > 0
    assert (s["cversion"], s["dataVersion"], s["aclVersion"]) == (0, 0, 0)
    assert (s["ephemeralOwner"], s["dataLength"], s["numChildren"]) == (0, 5, 0)
    assert stat["ctime"] == stat["mtime"]
    assert list(stat) == list(zkcli.STAT_KEYS)  # all 11 fields, in zkCli's order
    rest2, stat2 = split_stat(r.out(2))
    assert rest2 == [] and stat2 == stat
    assert r.out(3) == [f"Node already exists: {base}"]
    assert r.out(4) == [f"Node does not exist: {base}/x/y"]
    assert r.out(5) == [f"Node does not exist: {base}/missing"]
    assert r.out(6) == [f"Node does not exist: {base}/missing"]


def test_null_versus_empty_data(shared_server, base):
    """A node created without data reads back as null; one created with "" reads back as empty."""
    r = cli(
        shared_server,
        f"create {base}",
        f"get {base}",
        f"create {base}/e \"\"",
        f"get {base}/e",
        f"set {base} \"\"",
        f"get {base}",
        f"create {base}/sp \"a b  c\"",
        f"get {base}/sp",
    )
    assert r.out(1) == ["null"], r
    assert r.out(3) == [""], r
    assert r.out(5) == [""], r
    assert r.out(7) == ["a b  c"], r


def test_create_ephemeral(shared_server, base, kz):
    """create -e makes a session-owned node that cannot have children and vanishes when the CLI session closes."""
    r = cli(
        shared_server,
        f"create {base} p",
        f"create -e {base}/eph data",
        f"stat {base}/eph",
        f"create {base}/eph/child",
        f"getEphemerals {base}",
    )
    assert r.out(1) == [f"Created {base}/eph"]
    s = stat_ints(split_stat(r.out(2))[1])
    assert s["ephemeralOwner"] != 0 and s["dataLength"] == 4
    assert r.out(3) == [f"Ephemerals cannot have children: {base}/eph/child"]
    assert r.out(4) == [f"[{base}/eph]"]
    # `quit` closed the session: the ephemeral is gone.
    assert kz.exists(base + "/eph") is None
    assert kz.exists(base) is not None


def test_create_sequential(shared_server, base):
    """create -s appends a 10-digit counter shared by all creates under the parent; -s -e combines both."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create -s {base}/n- a",
        f"create -s {base}/n- b",
        f"create {base}/plain",
        f"create -s {base}/n- c",
        f"create -s -e {base}/e- d",
        f"ls {base}",
        f"stat {base}/e-0000000004",
        f"create -s {base}/",
    )
    assert [o[0] for o in r.outputs[1:6]] == [
        f"Created {base}/n-0000000000",
        f"Created {base}/n-0000000001",
        f"Created {base}/plain",
        f"Created {base}/n-0000000003",
        f"Created {base}/e-0000000004",
    ], r
    assert r.out(6) == ["[e-0000000004, n-0000000000, n-0000000001, n-0000000003, plain]"]
    assert stat_ints(split_stat(r.out(7))[1])["ephemeralOwner"] != 0
    assert r.out(8) == [f"Created {base}/0000000005"]


def test_create_container(shared_server, base, kz):
    """create -c makes a container that the server deletes once its last child is gone (never-used ones stay in 3.8)."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create -c {base}/cont",
        f"create -c {base}/unused",
        f"create {base}/cont/kid k",
        f"stat {base}/cont",
        f"delete {base}/cont/kid",
    )
    assert r.out(1) == [f"Created {base}/cont"], r
    assert r.out(2) == [f"Created {base}/unused"]
    s = stat_ints(split_stat(r.out(4))[1])
    assert s["ephemeralOwner"] == 0  # containers are not visible in Stat
    assert s["numChildren"] == 1
    assert r.out(5) == []
    assert wait_until(lambda: kz.exists(base + "/cont") is None, timeout=15), "container not reaped"
    assert kz.exists(base + "/unused") is not None


def test_create_ttl(shared_server, base, kz):
    """create -t makes a TTL node (ephemeralOwner shows 0x0) that the server deletes after the TTL expires."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create -t 1500 {base}/ttl t",
        f"create -t 600000 {base}/long t",
        f"stat {base}/ttl",
        f"create -s -t 1500 {base}/sttl- x",
    )
    assert r.out(1) == [f"Created {base}/ttl"], r
    assert r.out(2) == [f"Created {base}/long"]
    s = stat_ints(split_stat(r.out(3))[1])
    assert s["ephemeralOwner"] == 0 and s["dataLength"] == 1
    assert r.out(4) == [f"Created {base}/sttl-0000000002"]
    assert wait_until(lambda: kz.exists(base + "/ttl") is None, timeout=20), "TTL node not expired"
    assert wait_until(lambda: kz.exists(base + "/sttl-0000000002") is None, timeout=10)
    assert kz.exists(base + "/long") is not None


def test_set_with_version(shared_server, base):
    """set -v succeeds with the current version and fails with a stale one; set -s prints the new stat."""
    r = cli(
        shared_server,
        f"create {base} v0",
        f"set -v 0 {base} v1",
        f"set -v 0 {base} stale",
        f"get {base}",
        f"set -s {base} v2",
        f"set -v -1 {base} v3",
        f"get -s {base}",
        f"set {base}/missing x",
    )
    assert r.out(1) == [], r
    assert r.out(2) == [f"version No is not valid : {base}"]
    assert r.out(3) == ["v1"]
    rest, stat = split_stat(r.out(4))
    assert rest == [] and stat["dataVersion"] == "2" and stat["dataLength"] == "2"
    assert r.out(5) == []
    rest, stat = split_stat(r.out(6))
    s = stat_ints(stat)
    assert rest == ["v3"] and s["dataVersion"] == 3
    assert s["mZxid"] > s["cZxid"] and s["pZxid"] == s["cZxid"]
    assert r.out(7) == [f"Node does not exist: {base}/missing"]


def test_ls_variants(shared_server, base):
    """ls prints sorted children, ls -s adds the parent's stat, ls -R prints every path of the subtree."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create {base}/zeta",
        f"create {base}/alpha",
        f"create {base}/mid",
        f"create {base}/alpha/x",
        f"create {base}/alpha/x/deep",
        f"create {base}/zeta/y",
        f"ls {base}",
        f"ls -s {base}",
        f"ls -R {base}",
        f"ls {base}/mid",
        f"ls {base}/missing",
        "ls /zookeeper",
    )
    assert r.out(7) == ["[alpha, mid, zeta]"], r
    rest, stat = split_stat(r.out(8))
    assert rest == ["[alpha, mid, zeta]"]
    assert stat["numChildren"] == "3" and stat["cversion"] == "3"
    tree = r.out(9)
    assert tree[0] == base
    assert sorted(tree) == sorted(
        [base] + [f"{base}/{p}" for p in ("zeta", "alpha", "mid", "alpha/x", "alpha/x/deep", "zeta/y")]
    )
    assert r.out(10) == ["[]"]
    assert r.out(11) == [f"Node does not exist: {base}/missing"]
    assert r.out(12) == ["[config, quota]"]


def test_delete_and_deleteall(shared_server, base, kz):
    """delete refuses non-empty nodes and wrong versions; deleteall removes a whole subtree."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create {base}/a",
        f"create {base}/a/b",
        f"create {base}/c",
        f"delete {base}",
        f"set {base}/c x",
        f"delete -v 0 {base}/c",
        f"delete -v 1 {base}/c",
        f"delete {base}/missing",
        f"deleteall {base}",
        f"stat {base}",
    )
    assert r.out(4) == [f"Node not empty: {base}"], r
    assert r.out(6) == [f"version No is not valid : {base}/c"]
    assert r.out(7) == []
    assert r.out(8) == [f"Node does not exist: {base}/missing"]
    assert r.out(9) == []
    assert r.out(10) == [f"Node does not exist: {base}"]
    assert kz.exists(base) is None


def test_acls_and_addauth(shared_server, base):
    """getAcl/setAcl show and change ACLs (digest hashes masked without ADMIN); addauth digest unlocks writes; setAcl -v checks the ACL version."""
    ident = harness.digest("u1", "p1")
    r = cli(
        shared_server,
        "getAcl /",
        f"create {base} secret",
        f"setAcl {base} digest:{ident}:cdrwa,world:anyone:r",
        f"getAcl {base}",
        f"get {base}",
        f"set {base} x",
        "addauth digest u1:p1",
        f"set {base} y",
        f"getAcl -s {base}",
        f"setAcl -v 0 {base} world:anyone:cdrwa",
        f"setAcl -v 1 {base} world:anyone:cdrwa",
        f"getAcl {base}",
        f"create {base}/c data digest:{ident}:cdrwa",
        f"getAcl {base}/c",
    )
    assert r.out(0) == ["'world,'anyone", ": cdrwa"], r
    assert r.out(2) == []
    # Without ADMIN on the node the digest hash is masked (ZooKeeper 3.6+,
    # FinalRequestProcessor handleGetACLRequest): user:x.
    assert r.out(3) == ["'digest,'u1:x", ": cdrwa", "'world,'anyone", ": r"]
    assert r.out(4) == ["secret"]
    assert r.out(5) == [f"Insufficient permission : {base}"]
    assert r.out(6) == [] and r.out(7) == []
    rest, stat = split_stat(r.out(8))
    assert rest == [f"'digest,'{ident}", ": cdrwa", "'world,'anyone", ": r"]
    assert stat["aclVersion"] == "1" and stat["dataVersion"] == "1"
    assert r.out(9) == [f"version No is not valid : {base}"]
    assert r.out(10) == []
    assert r.out(11) == ["'world,'anyone", ": cdrwa"]
    assert r.out(13) == [f"'digest,'{ident}", ": cdrwa"]


def test_acl_denials_without_auth(shared_server, base):
    """Without credentials a digest-only node refuses get, ls, getAcl and child creation; auth:: without auth is an invalid ACL."""
    ident = harness.digest("u2", "p2")
    r = cli(
        shared_server,
        f"create {base} d digest:{ident}:cdrwa",
        f"get {base}",
        f"ls {base}",
        f"getAcl {base}",
        f"create {base}/kid",
        f"stat {base}",
        f"create {base}-auth x auth::cdrwa",
        "addauth digest u2:wrong",
        f"get {base}",
    )
    assert r.out(0) == [f"Created {base}"], r
    for i in (1, 2, 3, 4):
        assert r.out(i) == [f"Insufficient permission : {base}" if i != 4 else f"Insufficient permission : {base}/kid"], r
    assert stat_ints(split_stat(r.out(5))[1])["dataLength"] == 1  # stat needs no permission
    assert r.out(6) == [f"KeeperErrorCode = InvalidACL for {base}-auth", f"Acl is not valid : {base}-auth"]
    assert r.out(8) == [f"Insufficient permission : {base}"]


def test_auth_acl_scheme_and_super(shared_server, base):
    """auth:: expands to the session's digest id; the configured super user passes every ACL."""
    ident = harness.digest("u3", "p3")
    r = cli(
        shared_server,
        "addauth digest u3:p3",
        f"create {base} mine auth::cdrwa",
        f"getAcl {base}",
    )
    assert r.out(1) == [f"Created {base}"], r
    assert r.out(2) == [f"'digest,'{ident}", ": cdrwa"]
    r2 = cli(
        shared_server,
        f"get {base}",
        f"addauth digest {harness.SUPER_USER}:{harness.SUPER_PASSWORD}",
        f"get {base}",
        f"set {base} by-super",
        f"get {base}",
    )
    assert r2.out(0) == [f"Insufficient permission : {base}"], r2
    assert r2.out(2) == ["mine"]
    assert r2.out(4) == ["by-super"]


def test_whoami(shared_server):
    """whoami lists the session's auth ids: ip always, plus digest users after addauth."""
    r = cli(
        shared_server,
        "whoami",
        "addauth digest alice:pw",
        "whoami",
    )
    assert r.out(0) == ["Auth scheme: User", "ip: 127.0.0.1"], r
    assert r.out(1) == []
    assert sorted(r.out(2)[1:]) == ["digest: alice", "ip: 127.0.0.1"]
    assert r.out(2)[0] == "Auth scheme: User"


def test_sync(shared_server, base):
    """sync prints "Sync is OK", also for a path that does not exist."""
    r = cli(shared_server, f"create {base}", f"sync {base}", "sync /", f"sync {base}/missing")
    assert r.out(1) == ["Sync is OK"], r
    assert r.out(2) == ["Sync is OK"]
    assert r.out(3) == ["Sync is OK"]


def test_one_shot_watches(shared_server, base):
    """get -w, ls -w and stat -w set one-shot watches that fire once: NodeDataChanged, NodeChildrenChanged, NodeCreated."""
    r = cli(
        shared_server,
        f"create {base} d",
        f"get -w {base}",
        f"set {base} d2",
        f"set {base} d3",
        f"ls -w {base}",
        f"create {base}/kid",
        f"create {base}/kid2",
        f"stat -w {base}/later",
        f"create {base}/later",
        f"delete {base}/later",
        "sync /",
    )
    assert r.out(1) == ["d"], r
    assert r.out(4) == ["[]"]
    assert r.out(7) == [f"Node does not exist: {base}/later"]
    assert r.node_events() == [
        ("NodeDataChanged", base),
        ("NodeChildrenChanged", base),
        ("NodeCreated", f"{base}/later"),
    ], r
    assert all(s == "SyncConnected" for (s, t, p) in r.events if t != "None")


def test_add_watch_persistent_recursive(shared_server, base):
    """addWatch (default PERSISTENT_RECURSIVE) reports every create/change/delete below the path, repeatedly, without NodeChildrenChanged."""
    r = cli(
        shared_server,
        f"create {base}",
        f"addWatch {base}",
        f"create {base}/a 1",
        f"create {base}/a/b 2",
        f"set {base}/a/b 3",
        f"set {base}/a/b 4",
        f"delete {base}/a/b",
        f"set {base} root",
        "sync /",
    )
    assert r.out(1) == [], r
    assert r.node_events() == [
        ("NodeCreated", f"{base}/a"),
        ("NodeCreated", f"{base}/a/b"),
        ("NodeDataChanged", f"{base}/a/b"),
        ("NodeDataChanged", f"{base}/a/b"),
        ("NodeDeleted", f"{base}/a/b"),
        ("NodeDataChanged", base),
    ], r


def test_add_watch_persistent(shared_server, base):
    """addWatch -m PERSISTENT fires NodeChildrenChanged and NodeDataChanged for the node itself, every time, but not for grandchildren."""
    r = cli(
        shared_server,
        f"create {base}",
        f"addWatch -m PERSISTENT {base}",
        f"create {base}/c1",
        f"create {base}/c1/gc",
        f"set {base} x",
        f"set {base} y",
        f"delete {base}/c1/gc",
        f"delete {base}/c1",
        "sync /",
    )
    assert r.out(1) == [], r
    assert r.node_events() == [
        ("NodeChildrenChanged", base),
        ("NodeDataChanged", base),
        ("NodeDataChanged", base),
        ("NodeChildrenChanged", base),
    ], r


def test_get_ephemerals(shared_server, base):
    """getEphemerals lists only this session's ephemerals, optionally filtered by a string prefix."""
    other = cli(shared_server, f"create {base}-other")  # someone else's (closed) session
    assert other.out(0) == [f"Created {base}-other"]
    r = cli(
        shared_server,
        "getEphemerals",
        f"create {base}",
        f"create -e {base}/b x",
        f"create -e {base}/a x",
        f"create -e {base}-sib x",
        f"create -s -e {base}/s- x",
        f"getEphemerals {base}/a",
        f"getEphemerals {base}",
        "getEphemerals",
        f"getEphemerals {base}/nomatch",
    )
    assert r.out(0) == ["[]"], r

    def items(line):
        assert line.startswith("[") and line.endswith("]"), line
        return sorted(x for x in line[1:-1].split(", ") if x)

    assert items(r.out(6)[0]) == [f"{base}/a"]
    # The filter is a plain string prefix, so {base}-sib matches {base} too.
    assert items(r.out(7)[0]) == [f"{base}-sib", f"{base}/a", f"{base}/b", f"{base}/s-0000000002"]
    assert items(r.out(8)[0]) == items(r.out(7)[0])
    assert r.out(9) == ["[]"]


def test_get_all_children_number(shared_server, base):
    """getAllChildrenNumber counts all descendants (not the node itself)."""
    r = cli(
        shared_server,
        f"create {base}",
        f"create {base}/a",
        f"create {base}/a/b",
        f"create {base}/a/b/c",
        f"create {base}/d",
        f"getAllChildrenNumber {base}",
        f"getAllChildrenNumber {base}/a",
        f"getAllChildrenNumber {base}/d",
        f"getAllChildrenNumber {base}/missing",
    )
    assert r.out(5) == ["4"], r
    assert r.out(6) == ["2"]
    assert r.out(7) == ["0"]
    assert r.out(8) == [f"Node does not exist: {base}/missing"]


def test_one_shot_mode_exit_codes(shared_server, base):
    """zkCli with a command on its command line runs it and exits 0 on success and non-zero on a server error."""
    rc, lines = zkcli.oneshot(shared_server.hostport, "create", base, "oneshot")
    assert rc == 0 and lines == [f"Created {base}"], lines
    rc, lines = zkcli.oneshot(shared_server.hostport, "get", base)
    assert rc == 0 and lines == ["oneshot"], lines
    rc, lines = zkcli.oneshot(shared_server.hostport, "create", base, "dup")
    assert rc != 0 and lines == [f"Node already exists: {base}"], lines
    rc, lines = zkcli.oneshot(shared_server.hostport, "get", base + "/missing")
    assert rc != 0 and lines == [f"Node does not exist: {base}/missing"], lines
