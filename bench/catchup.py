#!/usr/bin/env python3
"""Catch-up time of a cut-off follower, Warden vs Apache ZooKeeper 3.8, 3-member ensembles.

Each member runs in its own network namespace (compat-tests/netns.py; root needed). The tree
is loaded with --znodes znodes of 100 bytes; then, per run, one follower is cut off by a real
partition for --cut seconds while the leader takes --writes more creates (pipelined), the
newest write of the run is a marker, and the partition heals. The figure is the time from the
heal to the first read, on a client that can reach only the returning follower, that shows
the marker: how long the member takes from its return to serving the newest write.

With --restart the follower is stopped instead (SIGTERM, after which it is down) for the writes,
then started again: the figure is from its start (spawn) to serving the newest write (issue
40: a follower that was down while 1,000,000 znodes were written:
`--znodes 10000 --writes 1000000 --restart`). Both
ensembles keep their defaults (ZooKeeper: initLimit=5, syncLimit=2, -Xmx2g; Warden: no
raft.* keys), tickTime=2000, fsync on.

  cargo build --release && cargo build --release -p warden-bench
  sudo python3 bench/catchup.py --znodes 10000,1000000 --runs 3 --json bench/results/catchup.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "compat-tests"))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("WARDEN_BIN", str(REPO / "target" / "release" / "warden"))

import compare  # noqa: E402  (the pipelined loader)
import netns  # noqa: E402

BUCKET = 1000


class BigHeapMember(netns.NetMember):
    """ZooKeeper with the heap a million znodes need (the compat harness gives it 512 MiB)."""

    def command(self) -> list[str]:
        return ["-Xmx2g" if a == "-Xmx512m" else a for a in super().command()]


def ensemble(net, kind: str, extra_cfg: dict | None = None) -> netns.NetEnsemble:
    ens = netns.NetEnsemble.__new__(netns.NetEnsemble)
    ens.net = net

    def factory(kind, name, myid, cfg, client_port):
        return BigHeapMember(kind, name, myid, cfg, client_port, net)

    netns.ensemble.Ensemble.__init__(ens, 3, kind=kind, name=f"catchup-{kind}", member_factory=factory,
                                     hosts=[net.addr(i) for i in range(3)], extra_cfg=extra_cfg)
    return ens


def load(host: str, port: int, start: int, count: int, conns: int = 8) -> dict:
    """`count` new znodes of 100 bytes from index `start` (bucket parents made first)."""
    compare.HOST = host
    c = compare.JuteConn(port, sock_timeout=120)
    try:
        c.create("/warden-mem", b"")
        for b in range(start // BUCKET, (start + count + BUCKET - 1) // BUCKET):
            c.create(f"/warden-mem/b{b}", b"")
    finally:
        c.close()
    out: dict = {}
    t0 = time.monotonic()
    per = (count + conns - 1) // conns
    import threading
    threads = []
    for k in range(conns):
        r = range(start + k * per, min(start + count, start + (k + 1) * per))
        if len(r):
            th = threading.Thread(target=compare._load_range, args=(port, r, BUCKET, b"x" * 100, 256, out), daemon=True)
            th.start()
            threads.append(th)
    for th in threads:
        th.join()
    out["seconds"] = time.monotonic() - t0
    return out


def set_marker(host: str, port: int, value: bytes) -> None:
    compare.HOST = host
    c = compare.JuteConn(port)
    try:
        err = c.create("/catchup-marker", value)
        if err != 0:  # exists: setData
            e, _ = c.call(5, compare._jstr("/catchup-marker") + struct.pack(">i", len(value)) + value
                          + struct.pack(">i", -1))
            assert e == 0, f"setData marker: err {e}"
    finally:
        c.close()


def read_marker(host: str, port: int) -> bytes | None:
    """The marker as the member serves it now; None while it refuses or fails."""
    compare.HOST = host
    try:
        c = compare.JuteConn(port, sock_timeout=2)
    except (OSError, ConnectionError, struct.error):
        return None
    try:
        err, data = c.get_data("/catchup-marker")
        return data if err == 0 else None
    except (OSError, ConnectionError, struct.error):
        return None
    finally:
        try:
            c.sock.close()
        except OSError:
            pass


# --by-snapshot: both servers keep few txns for a follower's catch-up and snapshot often, so
# the returning member is sent a snapshot (ZooKeeper: SNAP instead of DIFF; Warden: the
# leader's snapshot instead of log entries).
BY_SNAPSHOT = {"snapCount": 10000, "commitLogCount": 20, "snapshotSizeFactor": 0}


def snapshots_taken(ens, i: int) -> int:
    """How many snapshots member i has written so far (files for ZooKeeper, log lines for Warden)."""
    m = ens.members[i]
    if m.kind == "warden":
        return open(m.log_path, errors="replace").read().count("snapshot written")
    return len([f for f in os.listdir(os.path.join(m.data_dir, "version-2")) if f.startswith("snapshot.")])


def one_kind(kind: str, znodes: int, runs: int, cut: float, writes: int, by_snapshot: bool,
             restart: bool = False) -> list[dict]:
    net = netns.Net(3)
    ens = None
    samples = []
    try:
        ens = ensemble(net, kind, BY_SNAPSHOT if by_snapshot else None).start()
        leader = ens.leader(120)
        lh, lp = ens.members[leader].host, ens.members[leader].port
        loaded = load(lh, lp, 0, znodes)
        print(f"{kind}: {loaded.get('ok', 0):,} of {znodes:,} znodes loaded in {loaded['seconds']:.1f}s"
              f"{' errors ' + str(loaded['errors']) if loaded.get('errors') else ''}", flush=True)
        if loaded.get("ok", 0) != znodes:
            raise RuntimeError(f"{kind}: the load failed: {loaded}")
        next_index = znodes
        run_snapshots = [0, 0, 0]
        for run in range(runs):
            leader = ens.leader(120)
            lh, lp = ens.members[leader].host, ens.members[leader].port
            f = (leader + 1 + run % 2) % 3
            fh, fp = ens.members[f].host, ens.members[f].port
            snaps = snapshots_taken(ens, leader)
            if restart:
                ens.stop(f)
            else:
                net.isolate(f)
            t_cut = time.monotonic()
            extra = load(lh, lp, next_index, writes)
            if extra.get("ok", 0) != writes:
                raise RuntimeError(f"{kind}: writes during the cut failed: {extra}")
            next_index += writes
            marker = f"{kind}-{znodes}-{run}-{time.time_ns()}".encode()
            set_marker(lh, lp, marker)
            if by_snapshot:
                # The leader must have snapshotted past what the cut-off member has.
                deadline = time.monotonic() + 180
                while snapshots_taken(ens, leader) <= snaps and time.monotonic() < deadline:
                    time.sleep(0.2)
            time.sleep(max(0.0, cut - (time.monotonic() - t_cut)))
            if restart:
                t0 = time.monotonic()
                ens.start(f, wait=False)
            else:
                net.heal()
                t0 = time.monotonic()
            while read_marker(fh, fp) != marker:
                if time.monotonic() - t0 > 300:
                    raise RuntimeError(f"{kind}: member {f + 1} did not serve the marker within 300 s")
                time.sleep(0.01)
            took = time.monotonic() - t0
            samples.append({"run": run, "member": f + 1, "cut_s": time.monotonic() - t_cut - took,
                            "writes_during_cut": writes, "write_s": extra["seconds"], "catch_up_s": took})
            how = ""
            if kind == "warden":
                log = open(ens.members[f].log_path, errors="replace").read()
                how = " (snapshot installed)" if log.count("snapshot installed from the leader") > run_snapshots[f] else " (from the log)"
                run_snapshots[f] = log.count("snapshot installed from the leader")
            samples[-1]["how"] = how.strip(" ()")
            print(f"{kind:9s} {znodes:>9,} znodes run {run + 1}: member {f + 1} served the newest write "
                  f"{took * 1000:7.0f} ms after the {'restart' if restart else 'heal'}{how}", flush=True)
            ens.wait_stable(120)
            time.sleep(2)
    finally:
        if ens is not None:
            ens.close()
        net.close()
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--znodes", default="10000,1000000", help="comma-separated tree sizes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kinds", default="zookeeper,warden")
    ap.add_argument("--cut", type=float, default=8.0, help="seconds the follower stays cut off")
    ap.add_argument("--writes", type=int, default=20000, help="creates the leader takes during the cut")
    ap.add_argument("--by-snapshot", action="store_true",
                    help="make the returning member catch up from a snapshot (snapCount=10000, commitLogCount=20, "
                         "ZooKeeper's snapshotSizeFactor=0)")
    ap.add_argument("--restart", action="store_true",
                    help="stop the follower during the writes and start it again, instead of a partition")
    ap.add_argument("--json")
    opts = ap.parse_args()
    why = netns.available()
    if why:
        print(f"catchup.py: {why}", file=sys.stderr)
        return 2
    results: dict = {"cut_s": opts.cut, "writes": opts.writes, "by_snapshot": opts.by_snapshot,
                     "restart": opts.restart, "runs": {}}
    for n in [int(x) for x in opts.znodes.split(",")]:
        for kind in opts.kinds.split(","):
            s = one_kind(kind, n, opts.runs, opts.cut, opts.writes, opts.by_snapshot, opts.restart)
            results["runs"].setdefault(str(n), {})[kind] = s
    print()
    for n, by_kind in results["runs"].items():
        med = {k: statistics.median(x["catch_up_s"] for x in v) for k, v in by_kind.items()}
        line = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in med.items())
        ratio = f"; Warden/ZooKeeper {med['warden'] / med['zookeeper']:.2f}" if {"warden", "zookeeper"} <= med.keys() else ""
        print(f"{int(n):>9,} znodes: median catch-up {line}{ratio}")
        results.setdefault("median_s", {})[n] = med
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
