"""`readMode=linearizable` (Warden's own key): every read on any member sees every write
acknowledged before the read was sent, without the client sending `sync` (issue 41; the
Curator DistributedBarrier case of issue 40: client A sets, client B on another member reads).

ZooKeeper's default promise is weaker (a member's reads may lag another member's
acknowledged write), so the default mode is only measured here, not asserted. Warden only.
"""

from __future__ import annotations

import subprocess
import threading

import pytest

import harness
from ensemble import Ensemble

pytestmark = pytest.mark.skipif(harness.default_kind() != "warden", reason="readMode is Warden's own key")


def _stale_reads(ens: Ensemble, clients, rounds: int) -> int:
    """Client W on the leader writes value i and, once acknowledged, client R on a follower
    reads: how many reads showed an older value."""
    leader = ens.leader()
    w = clients([ens.hostports[leader]])
    r = clients([ens.hostports[(leader + 1) % 3]])
    path = f"/read-mode-{threading.get_ident()}"
    w.create(path, b"-1")
    r.sync(path)
    stale = 0
    for i in range(rounds):
        w.set(path, str(i).encode())
        data, _ = r.get(path)
        stale += data != str(i).encode()
    return stale


def test_linearizable_reads_see_every_acknowledged_write(clients):
    ens = Ensemble(3, name="readmode-lin", extra_cfg={"readMode": "linearizable"}).start(timeout=60)
    try:
        stale = _stale_reads(ens, clients, 300)
        assert stale == 0, f"{stale} of 300 reads on a follower missed a write acknowledged before them"
        # Many reads at once share rounds and all stay fresh: 8 readers on every member.
        leader = ens.leader()
        w = clients([ens.hostports[leader]])
        w.create("/read-mode-burst", b"0")
        readers = [clients([ens.hostports[m]]) for m in range(3) for _ in range(3)]
        errors: list[str] = []

        def read_after(c, want: bytes):
            got = c.get("/read-mode-burst")[0]
            if got != want:
                errors.append(f"{got!r} != {want!r}")

        for i in range(1, 30):
            want = str(i).encode()
            w.set("/read-mode-burst", want)
            ts = [threading.Thread(target=read_after, args=(c, want)) for c in readers]
            for t in ts:
                t.start()
            for t in ts:
                t.join(10)
        assert not errors, errors[:5]
    finally:
        ens.close()


def test_default_read_mode_is_zookeepers(clients):
    """Measured, not asserted: with the default mode a follower may answer before it applied
    a write another member acknowledged (ZooKeeper's promise allows it)."""
    ens = Ensemble(3, name="readmode-zk").start(timeout=60)
    try:
        stale = _stale_reads(ens, clients, 300)
        print(f"default readMode: {stale} of 300 follower reads missed the write acknowledged just before")
    finally:
        ens.close()


def test_bad_read_mode_stops_start_up():
    srv = harness.Server(kind="warden", name="readmode-bad", extra_cfg={"readMode": "eventual"})
    try:
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30, cwd=str(srv.base_dir))
        assert r.returncode == 2 and "readMode" in r.stderr, (r.returncode, r.stderr[-1000:])
    finally:
        srv.close()
