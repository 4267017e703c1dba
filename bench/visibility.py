#!/usr/bin/env python3
"""Visibility lag (issue 40): from a write's acknowledgement on member A to the value being
readable on members B and C of a 3-member ensemble, Warden and Apache ZooKeeper 3.8 side by
side, alternating servers over rounds.

A writes `i` to one znode through a raw wire connection (compat-tests/zkwire.py, so no client
library's threads add noise); as soon as the acknowledgement arrives, connections to B and C
read the znode, again and again, until each sees `i`. The lag of a member is the time from the
acknowledgement to the reply that first shows `i`: 0-lag reads still cost one round trip, so
the figure is a read's latency when the member is already fresh. A is the leader (`--writer
leader`, default) or a follower.

    python3 bench/visibility.py --warden-bin target/release/warden --writes 10000 --rounds 2

Prints p50/p99/max per server and the ratio Warden / ZooKeeper; --json writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "compat-tests"))


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(kind: str, writes: int, writer: str) -> dict:
    import zkwire  # noqa: PLC0415
    from ensemble import Ensemble  # noqa: PLC0415

    ens = Ensemble(3, kind=kind, name=f"vis-{kind}").start()
    try:
        lead = ens.leader()
        a_at = lead if writer == "leader" else (lead + 1) % 3
        others = [i for i in range(3) if i != a_at]
        a = zkwire.Conn(ens.hostports[a_at])
        readers = [zkwire.Conn(ens.hostports[i]) for i in others]
        path = "/visibility"
        assert a.create(path, b"-1").err == 0
        lags: list[float] = []
        stale_reads = 0
        for i in range(writes):
            want = str(i).encode()
            r = a.set_data(path, want)
            assert r.err == 0, r
            acked = time.perf_counter()
            for c in readers:
                while True:
                    r = c.get_data(path)
                    assert r.err == 0, r
                    if zkwire.parse_get_data(r.body)[0] == want:
                        lags.append((time.perf_counter() - acked) * 1000)
                        break
                    stale_reads += 1
                    if time.perf_counter() - acked > 5:
                        raise AssertionError(f"{kind}: member never showed write {i}")
        for c in [a, *readers]:
            c.close()
        return {"lags_ms": lags, "stale_reads": stale_reads}
    finally:
        ens.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warden-bin", default=str(REPO_ROOT / "target" / "release" / "warden"))
    ap.add_argument("--writes", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--writer", choices=["leader", "follower"], default="leader")
    ap.add_argument("--json")
    ap.add_argument("--one", choices=["warden", "zookeeper"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["WARDEN_BIN"] = os.path.abspath(args.warden_bin)
    if args.one:
        # One measurement in a process of its own (each round's servers start from scratch;
        # a ZooKeeper round following another in one process stalled for 10 s at times).
        print(json.dumps(measure(args.one, args.writes, args.writer)))
        return 0
    results: dict[str, list[dict]] = {"warden": [], "zookeeper": [], "failed": []}
    for rnd in range(args.rounds):
        for kind in ("warden", "zookeeper") if rnd % 2 == 0 else ("zookeeper", "warden"):
            time.sleep(5)  # let the last round's ports and processes go
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", kind, "--warden-bin", args.warden_bin,
                     "--writes", str(args.writes), "--writer", args.writer],
                    capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    raise OSError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
                r = json.loads(proc.stdout.strip().splitlines()[-1])
            except (OSError, AssertionError, subprocess.TimeoutExpired) as e:
                # A read or write that got no answer in 10 s: reported, and the round is not
                # counted for either server.
                print(f"round {rnd} {kind:9}: FAILED ({e!r}); round dropped", flush=True)
                results["failed"].append({"round": rnd, "kind": kind, "error": repr(e)})
                continue
            lags = r["lags_ms"]
            summary = {
                "p50_ms": percentile(lags, 50),
                "p99_ms": percentile(lags, 99),
                "max_ms": max(lags),
                "stale_reads": r["stale_reads"],
            }
            summary["round"] = rnd
            results[kind].append(summary)
            print(f"round {rnd} {kind:9}: p50 {summary['p50_ms']:.3f} ms  p99 {summary['p99_ms']:.3f} ms  "
                  f"max {summary['max_ms']:.2f} ms  stale reads {summary['stale_reads']}", flush=True)
    print()
    for metric in ("p50_ms", "p99_ms"):
        zk = {z["round"]: z for z in results["zookeeper"]}
        ratios = [w[metric] / zk[w["round"]][metric] for w in results["warden"] if w["round"] in zk]
        if not ratios:
            print(f"{metric}: no round completed on both servers")
            continue
        print(f"{metric}: warden/zookeeper median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
