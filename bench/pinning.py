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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import compare  # noqa: E402  (the TLS material)

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--warden-bin", default=str(REPO / "target/release/warden"))
ap.add_argument("--bench-bin", default=str(REPO / "target/release/warden-bench"))
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--json")
opts = ap.parse_args()
W, B, ROUNDS = opts.warden_bin, opts.bench_bin, opts.rounds
d = Path(tempfile.mkdtemp(prefix="tlsexp-"))
m = compare.make_tls_material(d)
CONFIGS = [("tls", None, None), ("tls", "0", "0"), ("tls", "0", "1"), ("plain", None, None), ("plain", "0", "0"), ("plain", "0", "1")]
res = {}
port = 21900
for r in range(ROUNDS):
    for tls, scpu, ccpu in CONFIGS:
        port += 1
        dd = d / f"data-{port}"; dd.mkdir()
        cfg = d / f"zoo-{port}.cfg"
        lines = ["tickTime=2000", f"dataDir={dd}", f"clientPort={port}", "clientPortAddress=127.0.0.1", "admin.enableServer=false"]
        if tls == "tls":
            lines += ["client.portUnification=true", f"ssl.keyStore.location={m['server']}", "ssl.keyStore.type=PEM",
                      f"ssl.trustStore.location={m['ca']}", "ssl.trustStore.type=PEM", "ssl.clientAuth=need"]
        cfg.write_text("\n".join(lines) + "\n")
        pre = ["taskset", "-c", scpu] if scpu else []
        srv = subprocess.Popen(pre + [W, "--config", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close(); break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.5)
        cpre = ["taskset", "-c", ccpu] if ccpu else []
        targs = ["--tls-ca", m["ca"], "--tls-cert", m["client_cert"], "--tls-key", m["client_key"]] if tls == "tls" else []
        out = subprocess.run(cpre + [B, "--servers", f"127.0.0.1:{port}", "--json", *targs, "--workload", "get", "--clients", "1",
                              "--inflight", "1", "--size", "100", "--duration", "5"], capture_output=True, text=True, timeout=120)
        srv.terminate(); srv.wait(10)
        try:
            j = json.loads(out.stdout.strip().splitlines()[-1])
        except Exception:
            print("failed", tls, scpu, ccpu, out.stderr[-400:]); continue
        key = f"{tls} server@{scpu or 'any'} client@{ccpu or 'any'}"
        row = {k: j.get(k) for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "ops_per_sec")}
        res.setdefault(key, []).append(row)
        print(r, key, row, flush=True)
if opts.json:
    Path(opts.json).write_text(json.dumps(res, indent=1) + "\n")
for k, rows in res.items():
    print(k, " ".join(f"{f}={statistics.median(x[f] for x in rows):.3f}" for f in ("p50_ms", "p90_ms", "p99_ms", "p999_ms")))
