"""Differential test: the same seeded random op sequence against a real
ZooKeeper 3.8 (A) and the server under test (B); normalized results must be
identical. See differential/diff.py for what is normalized and why.

Environment knobs (defaults give 20 seeds x 500 ops = 10,000 ops):
  COMPAT_DIFF_SEEDS, COMPAT_DIFF_OPS, COMPAT_DIFF_SEED_BASE, COMPAT_DIFF_JOBS
Reproduce one failing seed by hand:
  python3 compat-tests/differential/diff.py --a ZK --b WARDEN --seed-base SEED --seeds 1 --ops 500 --trace
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DIFF = os.path.join(HERE, "differential", "diff.py")
sys.path.insert(0, os.path.join(HERE, "differential"))

import diffwire  # noqa: E402

SEEDS = int(os.environ.get("COMPAT_DIFF_SEEDS", "20"))
OPS = int(os.environ.get("COMPAT_DIFF_OPS", "500"))
SEED_BASE = int(os.environ.get("COMPAT_DIFF_SEED_BASE", "0"))
JOBS = int(os.environ.get("COMPAT_DIFF_JOBS", "2"))
TOTAL_RE = re.compile(r"TOTAL: (\d+) seeds, (\d+) ops, (\d+) mismatched results, (\d+) invariant failures, "
                      r"(\d+) aborted seeds")


def run_diff(a: str, b: str, *extra: str, timeout: float = 900) -> tuple[int, str, tuple]:
    cmd = [sys.executable, DIFF, "--a", a, "--b", b, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + (("\n--- stderr ---\n" + proc.stderr) if proc.stderr.strip() else "")
    m = TOTAL_RE.search(proc.stdout)
    totals = tuple(int(x) for x in m.groups()) if m else None
    return proc.returncode, out, totals


@pytest.mark.timeout(900)
def test_differential_random_ops(server, reference_zk):
    """>= 10,000 random ops: server under test == ZooKeeper 3.8, result by result."""
    rc, out, totals = run_diff(reference_zk.hostport, server.hostport, "--seeds", str(SEEDS),
                               "--ops", str(OPS), "--seed-base", str(SEED_BASE), "--jobs", str(JOBS))
    print(out)
    assert totals is not None, f"diff.py produced no TOTAL line (rc {rc}):\n{out[-20000:]}"
    n_seeds, n_ops, mismatches, invariants, aborted = totals
    assert (mismatches, invariants, aborted) == (0, 0, 0) and rc == 0, (
        f"{server.kind} differs from ZooKeeper: {mismatches} mismatched results, {invariants} invariant "
        f"failures, {aborted} aborted seeds over {n_ops} ops\n{out[-20000:]}"
    )
    assert n_ops == SEEDS * OPS, out


@pytest.mark.timeout(300)
def test_differential_tool_detects_a_difference(reference_zk, shared_reference_zk):
    """Self-check of diff.py on two real ZooKeepers: identical runs report zero
    differences; a node that exists only on B is reported with seed and op index."""
    rc, out, totals = run_diff(reference_zk.hostport, shared_reference_zk.hostport,
                               "--seeds", "2", "--ops", "300", "--seed-base", "7000")
    assert rc == 0 and totals is not None and totals[2:] == (0, 0, 0), out

    tag = "wdiff-selfcheck"
    conn = diffwire.Conn(shared_reference_zk.hostport)
    try:
        for path in (f"/{tag}", f"/{tag}/s7100", f"/{tag}/s7100/a"):
            code, body = diffwire.enc_request({"kind": "create", "opcode": diffwire.CREATE, "path": path,
                                              "data": b"pre", "acl": [[31, "world", "anyone"]], "flags": 0})
            _, err, _ = conn.call(code, body)
            assert err == 0, diffwire.err_name(err)
    finally:
        conn.close()
    rc, out, totals = run_diff(reference_zk.hostport, shared_reference_zk.hostport,
                               "--seeds", "2", "--ops", "200", "--seed-base", "7100", "--run-tag", tag)
    assert rc == 1 and totals is not None and totals[2] > 0, out
    assert "MISMATCH seed 7100 op -1" in out, out  # the seed's base node already exists on B
    assert "seed 7101: OK" in out, out  # the untouched seed still matches
