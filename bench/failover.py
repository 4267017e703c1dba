#!/usr/bin/env python3
"""Failover time, Warden vs Apache ZooKeeper 3.8, 3-server ensembles on 127.0.0.1.

One round per kind, alternating (ZooKeeper, Warden, ZooKeeper, ...): find the leader,
kill -9 it (or `--signal TERM|STOP`), start `warden-bench --workload probe` against the two survivors (a new
connect + session + create every 10 ms until one succeeds), record its `first_write_ms`,
restart the victim and wait until the ensemble is whole again. Both ensembles run with
their default timing for tickTime=2000 (ZooKeeper: initLimit=5, syncLimit=2, as the
compat suite; Warden: no raft.* keys), fsync on. Prints min/median/max per kind and the
Warden/ZooKeeper ratio of the medians; `--json FILE` keeps every sample.

  cargo build --release && cargo build --release -p warden-bench
  python3 bench/failover.py --runs 10 [--warden-cfg raft.heartbeatMs=20 ...]

Processes are started through compat-tests/ensemble.py (killed by PID, temp dirs removed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "compat-tests"))
os.environ.setdefault("WARDEN_BIN", str(REPO / "target" / "release" / "warden"))

import ensemble  # noqa: E402  (needs the path above)

BENCH = REPO / "target" / "release" / "warden-bench"


def one_run(ens: ensemble.Ensemble, sig: str) -> dict:
    leader = ens.wait_stable(60)
    survivors = [ens.hostports[i] for i in range(ens.n) if i != leader]
    if sig == "KILL":
        ens.kill(leader)
    elif sig == "STOP":  # a frozen leader: its port accepts, nobody answers (the election timer's path)
        ens.sigstop(leader)
    else:  # SIGTERM: a graceful stop; the process exits by itself (waited for below)
        os.kill(ens.pid(leader), signal.SIGTERM)
    out = subprocess.run(
        [str(BENCH), "--workload", "probe", "--servers", ",".join(survivors), "--duration", "30", "--json"],
        capture_output=True, text=True, timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"probe failed: {out.stdout}\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if sig == "STOP":
        ens.sigcont(leader)
    else:
        if sig != "KILL":
            ens.members[leader].proc.wait(timeout=30)
            ens._down.add(leader)
        ens.start(leader, wait=True, timeout=60)
    ens.wait_stable(60)
    time.sleep(1.0)  # let the rejoined member settle before the next kill
    return {"leader": leader + 1, **res}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--kinds", default="zookeeper,warden")
    ap.add_argument("--warden-cfg", nargs="*", default=[], help="extra zoo.cfg lines for Warden (key=value)")
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--signal", choices=["KILL", "TERM", "STOP"], default="KILL",
                    help="how the leader is stopped (TERM: graceful shutdown, leadership handover; "
                         "STOP: frozen, then thawed after the probe)")
    opts = ap.parse_args()
    if not BENCH.exists():
        print(f"{BENCH} missing: cargo build --release -p warden-bench", file=sys.stderr)
        return 2
    kinds = opts.kinds.split(",")
    extra = {"warden": dict(kv.split("=", 1) for kv in opts.warden_cfg), "zookeeper": {}}
    ensembles = {}
    samples: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for k in kinds:
            ensembles[k] = ensemble.Ensemble(3, kind=k, name=f"failover-{k}", extra_cfg=extra[k]).start()
        for run in range(opts.runs):
            for k in kinds:
                r = one_run(ensembles[k], opts.signal)
                samples[k].append(r)
                print(f"run {run + 1} {k:9s} leader {r['leader']} stopped ({opts.signal}) -> first write after "
                      f"{r['first_write_ms']:7.1f} ms ({r['attempts']} attempts)", flush=True)
    finally:
        for e in ensembles.values():
            e.close()
    med = {}
    print()
    for k in kinds:
        xs = [s["first_write_ms"] for s in samples[k]]
        med[k] = statistics.median(xs)
        print(f"{k:9s} first write after the leader's SIG{opts.signal}: min {min(xs):.0f} ms, median {med[k]:.0f} ms, "
              f"max {max(xs):.0f} ms ({len(xs)} runs)")
    if "warden" in med and "zookeeper" in med:
        print(f"Warden/ZooKeeper (medians): {med['warden'] / med['zookeeper']:.2f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"runs": opts.runs, "warden_cfg": extra["warden"],
                                               "samples": samples, "median_ms": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
