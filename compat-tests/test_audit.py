"""The audit log (audit.enable): the same mixed workload, driven by kazoo, against the server
under test and a real ZooKeeper 3.8, and the two audit logs compared line by line: the same
fields in the same order, the same results and levels. Session ids differ between servers, so
each is replaced by its order of first appearance.

ZooKeeper writes its audit lines through slf4j (to the server log here, where Debian's
slf4j-simple sends them); Warden writes them, in the line pattern of ZooKeeper's logback audit
appender, to <dataDir>/zookeeper_audit.log.
"""

from __future__ import annotations

import os
import re
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.security import make_acl, make_digest_acl

import harness

AUDIT = {"audit.enable": "true"}


def workload(hostport: str) -> None:
    zk = KazooClient(hostport, timeout=10)
    zk.start()
    zk.create("/au", b"a")
    zk.create("/au/e-", b"", ephemeral=True, sequence=True)
    zk.set("/au", b"x")
    try:
        zk.set("/au", b"y", version=5)
    except BadVersionError:
        pass
    try:
        zk.delete("/au/missing")
    except NoNodeError:
        pass
    try:
        zk.create("/au")
    except NodeExistsError:
        pass
    zk.set_acls("/au", [make_acl("world", "anyone", all=True), make_digest_acl("bob", "pw", read=True)])
    tx = zk.transaction()
    tx.create("/au/t1", b"1")
    tx.set_data("/au", b"z")
    tx.check("/au", 2)
    tx.delete("/au/t1")
    tx.commit()
    tx = zk.transaction()
    tx.create("/au/t2")
    tx.check("/au", 99)
    tx.commit()
    zk.add_auth("digest", "alice:pw")
    zk.create("/au/d", b"", acl=[make_acl("auth", "", all=True)])
    zk.stop()
    zk.close()


def zookeeper_lines(srv) -> list[tuple[str, str]]:
    out = []
    for line in open(srv.log_path, errors="replace"):
        m = re.search(r"\] (INFO|ERROR) org\.apache\.zookeeper\.audit\.Slf4jAuditLogger - (.*)$", line.rstrip("\n"))
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def warden_lines(srv) -> list[tuple[str, str]]:
    path = os.path.join(srv.data_dir, "zookeeper_audit.log")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path, errors="replace"):
        m = re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|ERROR) audit\.Slf4jAuditLogger: (.*)$",
                     line.rstrip("\n"))
        assert m, f"not in ZooKeeper's audit line pattern: {line!r}"
        out.append((m.group(1), m.group(2)))
    return out


def normalised(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    sessions: dict[str, str] = {}

    def session(m: re.Match) -> str:
        return "session=" + sessions.setdefault(m.group(1), f"S{len(sessions) + 1}")

    return [(level, re.sub(r"session=(0x[0-9a-f]+)", session, msg)) for level, msg in lines]


def audit_of(srv) -> list[tuple[str, str]]:
    return normalised(zookeeper_lines(srv) if srv.kind == "zookeeper" else warden_lines(srv))


def test_audit_log_matches_zookeeper(server_factory):
    """One line per write with ZooKeeper's fields (session, user, ip, operation, znode,
    znode_type, acl, result), failures at ERROR; a multi's ops one line each, a failed multi
    one multiOperation line; the ephemeral a closed session loses; serverStart first and
    serverStop (invoked) last, at a clean stop."""
    logs = {}
    for kind in ("zookeeper", "warden"):
        srv = server_factory(kind=kind, extra_cfg=AUDIT)
        workload(srv.hostport)
        # The session's close (and its ephemeral's removal) is logged after the reply.
        harness.wait_until(lambda: any("ephemeralZNode" in m for _, m in audit_of(srv)), 10,
                           f"{kind}: the ephemeral deletion in the audit log")
        srv.stop()
        logs[kind] = audit_of(srv)
    theirs, ours = logs["zookeeper"], logs["warden"]
    assert ours == theirs, "\n".join(
        ["ours:"] + [f"  {l}" for l in ours] + ["ZooKeeper's:"] + [f"  {l}" for l in theirs])
    # And what they hold, not only that they agree.
    messages = [m for _, m in ours]
    assert messages[-1].endswith("operation=serverStop\tresult=invoked"), messages[-1]
    assert messages[0].startswith("user=") and messages[0].endswith("operation=serverStart\tresult=success")
    assert "session=S1\tuser=127.0.0.1\tip=127.0.0.1\toperation=create\tznode=/au\tznode_type=persistent\tresult=success" in messages
    assert ("ERROR", "session=S1\tuser=127.0.0.1\tip=127.0.0.1\toperation=setData\tznode=/au\tresult=failure") in ours
    assert any("operation=setAcl" in m and "acl=world:anyone:cdrwadigest:bob:" in m for m in messages)
    assert ("ERROR", "session=S1\tuser=127.0.0.1\tip=127.0.0.1\toperation=multiOperation\tresult=failure") in ours
    assert any("user=127.0.0.1,alice" in m and "znode=/au/d" in m for m in messages)
    assert any("operation=ephemeralZNodeDeletionOnSessionCloseOrExpire\tznode=/au/e-0000000000" in m for m in messages)


def test_audit_off_by_default(server):
    """Without audit.enable no audit file appears."""
    zk = KazooClient(server.hostport, timeout=10)
    zk.start()
    zk.create("/no-audit")
    zk.stop()
    zk.close()
    time.sleep(0.2)
    assert not os.path.exists(os.path.join(server.data_dir, "zookeeper_audit.log"))
