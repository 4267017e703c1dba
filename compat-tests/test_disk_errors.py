"""A member whose disk fails: what it had written stays consistent with the others.

Every member runs with compat-tests/slowsync.c preloaded and reads the fault from
`slowsync_ms` in its own directory (its working directory): `eio 300` makes each fsync
sleep 300 ms, do the real call, then fail with EIO, a disk whose write-back failed.

The scenario the nemesis suite found (its `eio` fault): with one follower down, the leader
sends a write to the other follower, which makes it durable, while the leader's own fsync
fails. The leader stops (Warden exits; ZooKeeper is killed here if it does not) and is
restarted with a good disk. Warden's leader used to come back as leader of its old term and
number its new entries from the end of its own log, which no longer held the failed write:
the follower already had an entry under that number with other contents, and the two trees
diverged (later sequential creates got different names on each).
"""

from __future__ import annotations

import os
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

import harness
from ensemble import Ensemble


def _shim(tmp_path, monkeypatch) -> None:
    harness.disk_shim(monkeypatch, tmp_path)
    monkeypatch.setenv("SLOWSYNC_FILE", "slowsync_ms")  # relative: each member's own directory


def _disk(ens: Ensemble, i: int, value: str) -> None:
    path = os.path.join(str(ens.members[i].base_dir), "slowsync_ms")
    with open(path + ".tmp", "w") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)


def _client(hostport: str) -> KazooClient:
    c = KazooClient(hosts=hostport, timeout=10.0)
    c.start(timeout=30)
    return c


def _tree(hostport: str, path: str) -> dict[str, bytes]:
    c = _client(hostport)
    try:
        c.sync(path)
        return {name: c.get(f"{path}/{name}")[0] for name in sorted(c.get_children(path))}
    finally:
        c.stop()
        c.close()


def test_leader_whose_fsync_failed_rejoins_without_diverging(tmp_path, monkeypatch):
    _shim(tmp_path, monkeypatch)
    ens = Ensemble(3, name="diskerr")
    try:
        ens.start()
        lead = ens.leader()
        follower, down = [i for i in range(3) if i != lead]
        ens.kill(down)
        c = _client(ens.hostports[follower])
        c.create("/div", b"")
        acked = {}
        for k in range(5):
            acked[c.create("/div/s-", f"before-{k}".encode(), sequence=True).rsplit("/", 1)[1]] = f"before-{k}".encode()

        # The leader's next fsync fails after the entry has gone to the follower.
        _disk(ens, lead, "eio 300")
        try:
            c.create("/div/s-", b"in-doubt", sequence=True)
        except KazooException:
            pass  # the leader could not make it durable: indeterminate
        c.stop()
        c.close()
        leader_proc = ens.members[lead]
        deadline = time.monotonic() + 15
        while leader_proc.running and time.monotonic() < deadline:
            time.sleep(0.1)
        exited = not leader_proc.running
        if ens.kind == "warden":
            assert exited, "Warden's leader kept running with a disk whose fsync fails"
        ens.kill(lead)
        _disk(ens, lead, "0")
        ens.start(lead)
        harness.wait_until(lambda: ens.mode(lead) in ("leader", "follower") and
                           ens.mode(follower) in ("leader", "follower"), 60, "the two members to serve")

        # Sequential creates through both: each name is the one its member announced, and
        # both members hold the same children with the same data.
        for k in range(10):
            for i in (lead, follower):
                c = _client(ens.hostports[i])
                try:
                    name = c.create("/div/s-", f"after-{k}-{i}".encode(), sequence=True).rsplit("/", 1)[1]
                    acked[name] = f"after-{k}-{i}".encode()
                finally:
                    c.stop()
                    c.close()
        ens.start(down)
        trees = {i: _tree(ens.hostports[i], "/div") for i in range(3)}
        for i in range(3):
            for name, data in acked.items():
                assert trees[i].get(name) == data, (
                    f"server.{i + 1}: {name} holds {trees[i].get(name)!r}, acknowledged as {data!r}")
        assert trees[lead] == trees[follower] == trees[down], "the members' trees differ"
    finally:
        ens.close()
