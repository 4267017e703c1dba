#!/usr/bin/env python3
"""Where Warden's get 1x1 latency tail comes from: one client, one request in flight, against a
standalone Warden over TLS (port unification, client certificates, as `compare.py --tls`) and
over plaintext, with the server and warden-bench unpinned, both on CPU 0, or on CPUs 0 and 1
(`taskset`); configurations interleaved, --rounds rounds, 5 s each. Prints p50/p90/p99/p99.9
per configuration (medians over the rounds) and writes every run to --json.

  cargo build --release && cargo build --release -p warden-bench
  python3 bench/pinning.py --rounds 3 --json bench/results/pinning.json
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import compare  # noqa: E402  (server config, TLS material, process and temp-dir handling)

CONFIGS = [("tls", None, None), ("tls", "0", "0"), ("tls", "0", "1"),
           ("plain", None, None), ("plain", "0", "0"), ("plain", "0", "1")]


def serving(port: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if compare.four_letter(port, "ruok", timeout=1.0).startswith("imok"):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def one_run(opts, base: Path, tls: bool, scpu: str | None, ccpu: str | None) -> dict:
    """A fresh server, 5 s of get 1x1 from one warden-bench; its latency figures."""
    port = compare.free_port()
    data = base / f"data-{port}"
    data.mkdir()
    # The same zoo.cfg lines `compare.py` (with --tls or without) gives a standalone Warden.
    cfg_opts = argparse.Namespace(tls=tls, tls_material=opts.tls_material, warden_cfg=[], listen_backlog=1024)
    cfg = base / f"zoo-{port}.cfg"
    cfg.write_text("\n".join(compare.server_cfg_lines(cfg_opts, "warden", data, port)) + "\n")
    pin = (lambda cpu: ["taskset", "-c", cpu] if cpu else [])
    srv = compare.spawn(pin(scpu) + [opts.warden_bin, "--config", str(cfg)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not serving(port):
            return {"failed": "the server did not answer ruok"}
        m = opts.tls_material
        tls_args = ["--tls-ca", m["ca"], "--tls-cert", m["client_cert"], "--tls-key", m["client_key"]] if tls else []
        out = subprocess.run(pin(ccpu) + [opts.bench_bin, "--servers", f"{compare.HOST}:{port}", "--json", *tls_args,
                                          "--workload", "get", "--clients", "1", "--inflight", "1", "--size", "100",
                                          "--duration", "5"], capture_output=True, text=True, timeout=120)
        try:
            j = json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return {"failed": out.stderr[-400:]}
        return {k: j.get(k) for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "ops_per_sec")}
    finally:
        compare.kill_proc(srv)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warden-bin", default=str(REPO / "target/release/warden"))
    ap.add_argument("--bench-bin", default=str(REPO / "target/release/warden-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    opts = ap.parse_args()
    res: dict = {}
    try:
        base = compare.make_temp_dir("warden-pinning-")
        opts.tls_material = compare.make_tls_material(base)
        for r in range(opts.rounds):
            for tls, scpu, ccpu in CONFIGS:
                key = f"{tls} server@{scpu or 'any'} client@{ccpu or 'any'}"
                row = one_run(opts, base, tls == "tls", scpu, ccpu)
                print(r, key, row, flush=True)
                if "failed" not in row:
                    res.setdefault(key, []).append(row)
    finally:
        compare.cleanup_all()
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1) + "\n")
    for k, rows in res.items():
        print(k, " ".join(f"{f}={statistics.median(x[f] for x in rows):.3f}"
                          for f in ("p50_ms", "p90_ms", "p99_ms", "p999_ms")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
