#!/usr/bin/env python3
"""A rolling restart under load, Warden vs Apache ZooKeeper 3.8, 3-server ensembles on 127.0.0.1.

Each round (alternating kinds, ZooKeeper first): a 3-member ensemble, fresh; 16 kazoo clients
on the whole connect string, each with 8 threads doing a 90/10 mix of getData/setData on its
own keys (16x8 mixed), kept up for a warm-up; then every member in turn is stopped with
SIGTERM (a graceful stop, as an operator's restart does), started again on its data dir, and
waited for until it serves, with a pause between members; the load runs on for a while after.
A request that fails (connection loss, session moved or expired, timeout) is counted once: its
thread then waits for its client to reconnect (kazoo does that by itself) before the next.

Reported per round: failed requests, and the longest write stall: the longest time during the
restarts when no setData anywhere completed successfully. Prints min/median/max per kind and
the Warden/ZooKeeper ratio of the medians; `--json FILE` keeps every round.

  cargo build --release
  python3 bench/rolling.py --rounds 3

The load runs in 4 worker processes (4 clients each) so that the Python client is not the
bottleneck of one interpreter; on 2 cores it still takes CPU the servers would use, equally
for both kinds. Processes are started through compat-tests/ensemble.py (killed by PID, temp
dirs removed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "compat-tests"))
os.environ.setdefault("WARDEN_BIN", str(REPO / "target" / "release" / "warden"))

import ensemble  # noqa: E402  (needs the path above)

PROCS, CLIENTS_PER_PROC, THREADS, KEYS = 4, 4, 8, 8


def worker(hosts: str, wid: int, stop, out: mp.Queue) -> None:
    """Runs CLIENTS_PER_PROC clients x THREADS threads until `stop` (an mp.Event) is set; sends back
    (successful write completion times, failures with their times, ops done)."""
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState

    writes: list[float] = []
    failures: list[float] = []
    done = [0]
    lock = threading.Lock()

    def client_loop(zk, connected: threading.Event, prefix: str, seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            key = f"{prefix}/k{rng.randrange(KEYS)}"
            write = rng.random() < 0.1
            try:
                if write:
                    zk.set(key, b"v" * 16)
                else:
                    zk.get(key)
                now = time.time()
                with lock:
                    done[0] += 1
                    if write:
                        writes.append(now)
            except Exception:  # noqa: BLE001 - any failure counts; the thread goes on
                with lock:
                    failures.append(time.time())
                while not stop.is_set() and not connected.wait(timeout=0.2):
                    pass

    threads = []
    clients = []
    for c in range(CLIENTS_PER_PROC):
        zk = KazooClient(hosts, timeout=10, connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
                         command_retry=None)
        connected = threading.Event()

        def listener(state, ev=connected):
            if state == KazooState.CONNECTED:
                ev.set()
            else:
                ev.clear()

        zk.add_listener(listener)
        zk.start(timeout=30)
        connected.set()
        prefix = f"/roll/w{wid}c{c}"
        zk.ensure_path(prefix)
        for k in range(KEYS):
            zk.ensure_path(f"{prefix}/k{k}")
        clients.append(zk)
        for t in range(THREADS):
            th = threading.Thread(target=client_loop, args=(zk, connected, prefix, wid * 1000 + c * 10 + t),
                                  daemon=True)
            threads.append(th)
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for zk in clients:
        try:
            zk.stop()
            zk.close()
        except Exception:  # noqa: BLE001
            pass
    out.put((writes, failures, done[0]))


def one_round(kind: str, warm: float, pause: float, tail: float) -> dict:
    ens = ensemble.Ensemble(3, kind=kind, name=f"rolling-{kind}").start()
    try:
        ens.wait_stable(60)
        setup = __import__("kazoo.client", fromlist=["KazooClient"]).KazooClient(ens.connect_string)
        setup.start()
        setup.ensure_path("/roll")
        setup.stop()
        setup.close()
        q: mp.Queue = mp.Queue()
        stop = mp.Event()
        procs = [mp.Process(target=worker, args=(ens.connect_string, w, stop, q)) for w in range(PROCS)]
        for p in procs:
            p.start()
        time.sleep(warm)
        t_start = time.time()
        order = []
        for i in range(3):
            order.append(ens.mode(i))
            os.kill(ens.pid(i), signal.SIGTERM)
            ens.members[i].proc.wait(timeout=60)
            ens._down.add(i)
            ens.start(i, wait=True, timeout=60)
            ens.wait_stable(60)
            time.sleep(pause)
        t_end = time.time()
        time.sleep(tail)
        stop.set()
        results = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        writes = sorted(t for w, _, _ in results for t in w)
        failures = [t for _, f, _ in results for t in f]
        ops = sum(n for _, _, n in results)
        window = [t for t in writes if t_start - 1 <= t <= t_end + 1]
        edges = [t_start] + window + [t_end]
        stall = max(b - a for a, b in zip(edges, edges[1:]))
        return {
            "kind": kind,
            "roles_in_order": order,
            "restart_s": round(t_end - t_start, 2),
            "failed": len(failures),
            "failed_during_restarts": sum(1 for t in failures if t_start <= t <= t_end + 1),
            "ops": ops,
            "longest_write_stall_ms": round(stall * 1000, 1),
        }
    finally:
        ens.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="zookeeper,warden")
    ap.add_argument("--warm", type=float, default=5.0, help="seconds of load before the first restart")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds between one member serving and the next stop")
    ap.add_argument("--json", help="write every round here")
    opts = ap.parse_args()
    if not Path(os.environ["WARDEN_BIN"]).exists():
        print(f"{os.environ['WARDEN_BIN']} missing: cargo build --release", file=sys.stderr)
        return 2
    kinds = opts.kinds.split(",")
    rounds: dict[str, list[dict]] = {k: [] for k in kinds}
    for r in range(opts.rounds):
        for k in kinds:
            res = one_round(k, opts.warm, opts.pause, tail=2.0)
            rounds[k].append(res)
            print(f"round {r + 1} {k:9s} restarts {res['restart_s']:5.1f} s: failed {res['failed']:5d} "
                  f"(during restarts {res['failed_during_restarts']}), longest write stall "
                  f"{res['longest_write_stall_ms']:8.1f} ms, {res['ops']} ops", flush=True)
    print()
    med: dict[str, dict[str, float]] = {}
    for k in kinds:
        med[k] = {}
        for field in ("failed", "longest_write_stall_ms"):
            xs = [x[field] for x in rounds[k]]
            med[k][field] = statistics.median(xs)
            print(f"{k:9s} {field:24s} min {min(xs):9.1f}  median {med[k][field]:9.1f}  max {max(xs):9.1f}")
    if "warden" in med and "zookeeper" in med:
        for field in ("failed", "longest_write_stall_ms"):
            z = med["zookeeper"][field]
            ratio = med["warden"][field] / z if z else float("nan")
            print(f"Warden/ZooKeeper {field} (medians): {ratio:.3f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"rounds": rounds, "median": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
