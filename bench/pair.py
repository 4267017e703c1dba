#!/usr/bin/env python3
"""Paired A/B of Warden builds or settings: every variant is up at once, and short
warden-bench runs alternate between them, so a slow phase of a shared host hits all alike.
The ratio is taken within each cycle (variant / the first variant) and summarised as
median, min, max and the number of cycles won.

    python3 bench/pair.py --cycles 16 --seconds 1.5 --workload set \\
        base:/tmp/warden-before now:target/release/warden one:target/release/warden:TOKIO_WORKER_THREADS=1

A variant is NAME:BINARY[:KEY=VALUE,...] (environment for that server). By default each
variant is a 3-member ensemble on 127.0.0.1 and the client talks to its lowest-myid
follower (--target leader|follower|all); --standalone runs one server per variant. Besides
latency and throughput it reports the servers' CPU per operation and their thread switches
per operation (voluntary + involuntary, summed over every thread, from /proc), and those per
member (leader, client's follower, other follower).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "compat-tests"))

import harness  # noqa: E402

METRICS = ("p50", "p99", "ops_s", "cpu_us_op", "ctx_op")


def server_lines(data_dir: str, port: int, host: str) -> list[str]:
    return [
        "tickTime=2000", f"dataDir={data_dir}", f"clientPort={port}", f"clientPortAddress={host}",
        "maxClientCnxns=0", "4lw.commands.whitelist=*", "admin.enableServer=false",
    ]


def with_env(binary: str, env: dict[str, str], conf: str) -> list[str]:
    return ["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], binary, "--config", conf]


def member_factory(binary: str, env: dict[str, str]):
    import ensemble  # noqa: PLC0415 - only for ensembles (it imports pytest)

    class Member(ensemble.Member):
        def _default_config_lines(self) -> list[str]:
            return server_lines(self.data_dir, self.port, self.host)

        def command(self) -> list[str]:
            return with_env(binary, env, self.conf_path)

    return Member


class Standalone(harness.Server):
    def __init__(self, binary: str, env: dict[str, str], name: str):
        self._binary, self._env = binary, env
        super().__init__("warden", name=name)

    def _default_config_lines(self) -> list[str]:
        return server_lines(self.data_dir, self.port, self.host)

    def command(self) -> list[str]:
        return with_env(self._binary, self._env, self.conf_path)


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def switches(pid: int) -> int:
    n = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                for line in (task / "status").read_text().splitlines():
                    if "ctxt_switches" in line:
                        n += int(line.split()[1])
            except OSError:
                pass
    except OSError:
        pass
    return n


def parse_variant(spec: str) -> tuple[str, str, dict[str, str]]:
    parts = spec.split(":", 2)
    if len(parts) < 2:
        raise SystemExit(f"bad variant {spec!r}: NAME:BINARY[:KEY=VALUE,...]")
    env = dict(kv.split("=", 1) for kv in parts[2].split(",")) if len(parts) > 2 and parts[2] else {}
    return parts[0], str(Path(parts[1]).resolve()), env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", help="NAME:BINARY[:KEY=VALUE,...]; the first is the baseline")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each run")
    ap.add_argument("--workload", default="set")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--inflight", type=int, default=1)
    ap.add_argument("--size", type=int, help="value bytes (warden-bench's default if not given)")
    ap.add_argument("--keys", type=int, help="keys per client (warden-bench's default if not given)")
    ap.add_argument("--target", choices=["follower", "leader", "all"], default="follower")
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--bench", default=str(REPO_ROOT / "target" / "release" / "warden-bench"))
    ap.add_argument("--json", help="write every run's figures here")
    opts = ap.parse_args()

    variants = [parse_variant(v) for v in opts.variants]
    # compat-tests/harness.py checks WARDEN_BIN before it starts a server whose command line
    # is ours: point it at a binary that exists, not at a debug build that may not.
    os.environ.setdefault("WARDEN_BIN", variants[0][1])
    up = []  # (name, closable, client hostports, pids in report order)
    try:
        for name, binary, env in variants:
            if opts.standalone:
                srv = Standalone(binary, env, name).start()
                up.append((name, srv, srv.hostport, [srv.pid]))
                continue
            import ensemble  # noqa: PLC0415

            ens = ensemble.Ensemble(3, kind="warden", name=name, extra_cfg={},
                                    member_factory=member_factory(binary, env))
            ens.start()
            leader = ens.wait_stable(60)
            follower = ens.followers()[0]
            hostport = {"leader": ens.hostports[leader], "follower": ens.hostports[follower],
                        "all": ens.connect_string}[opts.target]
            order = [leader, follower] + [i for i in range(3) if i not in (leader, follower)]
            up.append((name, ens, hostport, [ens.pid(i) for i in order]))

        def bench(hostport: str, seconds: float) -> dict:
            out = subprocess.run(
                [opts.bench, "--servers", hostport, "--workload", opts.workload, "--clients", str(opts.clients),
                 "--inflight", str(opts.inflight), "--duration", str(seconds), "--json"]
                + (["--size", str(opts.size)] if opts.size else []) + (["--keys", str(opts.keys)] if opts.keys else []),
                capture_output=True, text=True, check=True)
            return json.loads(out.stdout.strip().splitlines()[-1])

        for _, _, hostport, _ in up:
            bench(hostport, 1.0)  # warm-up, not measured
        runs: dict[str, list[dict]] = {v[0]: [] for v in variants}
        for cycle in range(opts.cycles):
            for name, _, hostport, pids in (up if cycle % 2 == 0 else list(reversed(up))):
                cpu0, sw0 = cpu_seconds(pids), [switches(p) for p in pids]
                r = bench(hostport, opts.seconds)
                cpu1, sw1 = cpu_seconds(pids), [switches(p) for p in pids]
                ops = max(r["ok"], 1)
                per = [(b - a) / ops for a, b in zip(sw0, sw1)]
                runs[name].append({"p50": r["p50_ms"], "p99": r["p99_ms"], "ops_s": r["ops_per_sec"],
                                   "cpu_us_op": (cpu1 - cpu0) * 1e6 / ops, "ctx_op": sum(per),
                                   "ctx_op_per_member": [round(x, 1) for x in per], "errors": r["errors"]})
            print(f"cycle {cycle}: " + "  ".join(
                f"{n}: p50 {rs[-1]['p50']:.3f} p99 {rs[-1]['p99']:.3f} ops/s {rs[-1]['ops_s']:.0f} "
                f"cpu/op {rs[-1]['cpu_us_op']:.0f} us switches/op {rs[-1]['ctx_op']:.1f} "
                f"{rs[-1]['ctx_op_per_member']}" for n, rs in runs.items()), flush=True)

        base = variants[0][0]
        print(f"\nratios to {base}, per cycle (won = better than {base}; ops/s higher, the rest lower):")
        for name, rs in runs.items():
            if name == base:
                continue
            for k in METRICS:
                ratios = [b[k] / a[k] for a, b in zip(runs[base], rs) if a[k] and b[k]]
                if not ratios:
                    continue
                won = sum(1 for x in ratios if (x > 1) == (k == "ops_s"))
                print(f"  {name}/{base} {k}: median {statistics.median(ratios):.3f} "
                      f"min {min(ratios):.3f} max {max(ratios):.3f} won {won}/{len(ratios)}")
        print("\nmedians:")
        for name, rs in runs.items():
            print(f"  {name}: " + ", ".join(f"{k} {statistics.median(r[k] for r in rs):.3f}" for k in METRICS))
        if opts.json:
            Path(opts.json).write_text(json.dumps({"variants": variants, "runs": runs}, indent=1))
    finally:
        for _, closable, _, _ in up:
            closable.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
