"""Backup and restore: ZooKeeper 3.9's admin `snapshot` and `restore` commands, `last_snapshot`,
and `warden backup` / `warden restore` for cron.

Warden only: Debian's ZooKeeper 3.8 has no snapshot or restore command. The format is proved
against ZooKeeper all the same: a backup is a ZooKeeper snapshot file, and a real ZooKeeper 3.8
started on a data dir holding only that file serves the same tree; the other way, the snapshot
file a real ZooKeeper 3.8 wrote restores into Warden.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType
from kazoo.security import make_digest_acl

import harness
from ensemble import Ensemble
from ops_common import http, wait_http

pytestmark = pytest.mark.skipif(harness.default_kind() != "warden",
                                reason="ZooKeeper 3.8 has no admin snapshot/restore (3.9 does)")

SUPER = f"digest {harness.SUPER_USER}:{harness.SUPER_PASSWORD}"


def admin_cfg(port: int, **extra) -> dict:
    return {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port,
            "admin.rateLimiterIntervalInMS": 0, **extra}


def kazoo(hostport: str) -> KazooClient:
    c = KazooClient(hostport, timeout=10)
    c.start()
    return c


def warden(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([harness.warden_bin(), *args], capture_output=True, text=True, timeout=120, check=check)


def tree_of(zk: KazooClient, root: str) -> dict[str, bytes]:
    out = {}

    def walk(path):
        out[path] = zk.get(path)[0]
        for child in zk.get_children(path):
            walk(f"{path}/{child}" if path != "/" else f"/{child}")

    walk(root)
    return out


@pytest.fixture
def served(server_factory):
    port = harness.free_port()
    srv = server_factory(extra_cfg=admin_cfg(port))
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/commands/ruok")
    return srv, port, base


def test_snapshot_needs_an_admin_and_is_zookeepers_format(served, tmp_path):
    """Without auth 401, a user without ALL on / 403; the super user gets the snapshot with
    ZooKeeper's last_zxid and snapshot_size headers, and a real ZooKeeper 3.8 loads it."""
    srv, port, base = served
    zk = kazoo(srv.hostport)
    zk.create("/bk/a", b"alpha", makepath=True)
    zk.create("/bk/b", b"beta")
    zk.create("/bk/b/c", b"x" * 1000)
    want = tree_of(zk, "/bk")
    status, _, body = http("GET", base + "/commands/snapshot")
    assert status == 401 and json.loads(body)["error"] == "Auth info is missing for the command", body
    status, _, body = http("GET", base + "/commands/snapshot", {"Authorization": "sasl whoever"})
    assert status == 401, body
    # Only the super user may read / now.
    zk.add_auth("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")
    zk.set_acls("/", [make_digest_acl("admin", "pw", all=True)])
    status, _, body = http("GET", base + "/commands/snapshot", {"Authorization": "digest bob:pw"})
    assert status == 403 and json.loads(body)["error"] == "Not authorized", body
    status, headers, body = http("GET", base + "/commands/snapshot?streaming=false", {"Authorization": SUPER})
    assert status == 200 and json.loads(body) == {"command": "snapshot", "error": None}, body
    assert headers["last_zxid"].startswith("0x") and int(headers["snapshot_size"]) > 1000, headers

    out = tmp_path / "backup.snap"
    r = warden("backup", "--server", f"127.0.0.1:{port}", "--out", str(out), "--auth", SUPER)
    assert "znodes" in r.stdout, r
    # A second backup to the same file is refused, leaving it alone.
    again = warden("backup", "--server", f"127.0.0.1:{port}", "--out", str(out), "--auth", SUPER, check=False)
    assert again.returncode != 0 and "exists" in again.stderr, again
    zk.stop()
    zk.close()

    # A real ZooKeeper 3.8 on a data dir holding only the backup serves the same tree.
    ref = harness.Server("zookeeper", name="backup-load")
    try:
        zxid = r.stdout.split("zxid 0x", 1)[1].split(",", 1)[0]
        os.makedirs(os.path.join(ref.data_dir, "version-2"))
        shutil.copy(out, os.path.join(ref.data_dir, "version-2", f"snapshot.{zxid}"))
        ref.start()
        c = kazoo(ref.hostport)
        c.add_auth("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")
        assert tree_of(c, "/bk") == want
        c.stop()
        c.close()
    finally:
        ref.close()


def test_restore_keeps_sessions_and_fires_watches(served, tmp_path):
    """After a restore the tree is the backup's; a connected client keeps its session and its
    ephemeral, its watches fire for what the restore changed, and writes go on with higher zxids."""
    srv, port, base = served
    zk = kazoo(srv.hostport)
    zk.create("/rs/keep", b"v1", makepath=True)
    zk.create("/rs/changed", b"before")
    zk.create("/rs/eph", b"", ephemeral=True)
    out = tmp_path / "b.snap"
    warden("backup", "--server", f"127.0.0.1:{port}", "--out", str(out), "--auth", SUPER)
    zk.set("/rs/changed", b"after")
    zk.create("/rs/new", b"n")
    zk.delete("/rs/keep")
    events = []
    zk.get("/rs/changed", watch=lambda e: events.append((e.type, e.path)))
    zk.exists("/rs/keep", watch=lambda e: events.append((e.type, e.path)))
    zk.exists("/rs/new", watch=lambda e: events.append((e.type, e.path)))
    before = zk.get("/rs/changed")[1].mzxid
    session = zk.client_id

    r = warden("restore", "--server", f"127.0.0.1:{port}", "--in", str(out), "--auth", SUPER)
    assert "restored" in r.stdout, r
    deadline = time.time() + 10
    while len(events) < 3 and time.time() < deadline:
        time.sleep(0.05)
    assert sorted(events) == sorted([(EventType.CHANGED, "/rs/changed"), (EventType.CREATED, "/rs/keep"),
                                     (EventType.DELETED, "/rs/new")]), events
    assert zk.get("/rs/changed")[0] == b"before"
    assert zk.exists("/rs/keep") and not zk.exists("/rs/new")
    assert zk.client_id == session and zk.exists("/rs/eph").owner_session_id == session[0]
    zk.create("/rs/after", b"")
    assert zk.exists("/rs/after").czxid > before
    zk.stop()
    zk.close()


def test_bad_restore_changes_nothing(served, tmp_path):
    """A body that is not a ZooKeeper snapshot (or a damaged one) gets 400 and a reason; the
    tree is untouched. An empty body is refused too."""
    srv, port, base = served
    zk = kazoo(srv.hostport)
    zk.create("/untouched", b"1")
    out = tmp_path / "b.snap"
    warden("backup", "--server", f"127.0.0.1:{port}", "--out", str(out), "--auth", SUPER)
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0xFF
    for body in (b"not a snapshot", bytes(data)):
        req = urllib.request.Request(base + "/commands/restore", data=body, method="POST",
                                     headers={"Authorization": SUPER})
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 400, e.code
            assert "not a usable ZooKeeper snapshot" in json.loads(e.read())["error"]
    damaged = tmp_path / "damaged.snap"
    damaged.write_bytes(bytes(data))
    r = warden("restore", "--server", f"127.0.0.1:{port}", "--in", str(damaged), "--auth", SUPER, check=False)
    assert r.returncode != 0 and "damaged.snap" in r.stderr, r
    assert zk.get("/untouched")[0] == b"1"
    zk.stop()
    zk.close()


def test_rate_limit_and_last_snapshot(server_factory):
    """With ZooKeeper's default interval a second snapshot within 5 minutes gets 429;
    last_snapshot reports the newest snapshot's zxid (hex) and time."""
    port = harness.free_port()
    srv = server_factory(extra_cfg={**admin_cfg(port), "admin.rateLimiterIntervalInMS": None, "snapCount": "10"})
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/commands/ruok")
    zk = kazoo(srv.hostport)
    for i in range(30):
        zk.create(f"/ls{i}")
    zk.stop()
    zk.close()
    assert http("GET", base + "/commands/snapshot?streaming=false", {"Authorization": SUPER})[0] == 200
    assert http("GET", base + "/commands/snapshot?streaming=false", {"Authorization": SUPER})[0] == 429
    deadline = time.time() + 10
    while True:
        last = json.loads(http("GET", base + "/commands/last_snapshot")[2])
        if last["timestamp"] > 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert set(last) == {"command", "error", "zxid", "timestamp"}, last
    assert int(last["zxid"], 16) > 0 and abs(last["timestamp"] - time.time()) < 300, last


def test_zookeeper_snapshot_restores_into_warden(served, tmp_path):
    """The snapshot file a real ZooKeeper 3.8 wrote (it snapshots at start) restores into
    Warden: the way an operator moves a ZooKeeper backup over."""
    srv, port, base = served
    ref = harness.started("zookeeper", name="backup-src")
    try:
        c = kazoo(ref.hostport)
        c.create("/fromzk/a", b"A", makepath=True)
        c.create("/fromzk/b", b"B" * 300)
        want = tree_of(c, "/fromzk")
        c.stop()
        c.close()
        ref.stop()
        ref.start()  # ZooKeeper writes a snapshot of what it loaded
        ref.stop()
        snaps = sorted(glob.glob(os.path.join(ref.data_dir, "version-2", "snapshot.*")),
                       key=lambda p: int(p.rsplit(".", 1)[1], 16))
        assert snaps, os.listdir(os.path.join(ref.data_dir, "version-2"))
        snapshot = tmp_path / "zk.snap"
        shutil.copy(snaps[-1], snapshot)
    finally:
        ref.close()
    warden("restore", "--server", f"127.0.0.1:{port}", "--in", str(snapshot), "--auth", SUPER)
    zk = kazoo(srv.hostport)
    assert tree_of(zk, "/fromzk") == want
    zk.stop()
    zk.close()


def test_restore_reaches_every_member(tmp_path):
    """On a 3-member ensemble, a restore sent to one member's admin API replaces the tree on
    all three, and the ensemble keeps taking writes."""
    ports = [harness.free_port() for _ in range(3)]
    ens = Ensemble(3, name="restore-ens", extra_cfg={"admin.enableServer": "true",
                                                      "admin.serverAddress": "127.0.0.1",
                                                      "admin.rateLimiterIntervalInMS": "0"})
    try:
        ens.per_member("admin.serverPort", ports).start()
        leader = ens.leader()
        follower = next(i for i in range(3) if i != leader)
        zk = kazoo(ens.connect_string)
        zk.create("/ens/x", b"1", makepath=True)
        out = tmp_path / "e.snap"
        wait_http(f"http://127.0.0.1:{ports[follower]}/commands/ruok")
        warden("backup", "--server", f"127.0.0.1:{ports[follower]}", "--out", str(out), "--auth", SUPER)
        zk.set("/ens/x", b"2")
        zk.create("/ens/y")
        warden("restore", "--server", f"127.0.0.1:{ports[follower]}", "--in", str(out), "--auth", SUPER)
        zk.stop()
        zk.close()
        for m in ens.members:
            c = kazoo(m.hostport)
            c.sync("/")
            assert c.get("/ens/x")[0] == b"1" and not c.exists("/ens/y"), m.hostport
            c.stop()
            c.close()
        zk = kazoo(ens.connect_string)
        zk.create("/ens/z")
        zk.stop()
        zk.close()
    finally:
        ens.close()
