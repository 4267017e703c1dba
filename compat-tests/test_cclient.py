"""ZooKeeper's C client (libzookeeper_mt, via its `cli_mt` program) against the server under test.

Most checks use cli_mt's batch mode (`cli_mt HOSTPORT cmd:"..."`: connect,
run one command, print its completion, exit). cli_mt prints zxids in hex
without 0x and times as dates; both are checked through relations only.
One interactive session checks that a watch set through the C client fires.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

import harness

NOISE = re.compile(r"^(Watcher SESSION_EVENT state = CONNECTED_STATE|Got a new session id: 0x[0-9a-f]+|"
                   r"Batch mode: .*|time = \d+ msec)$")


def cli_mt(hostport: str, command: str, timeout: float = 30.0) -> list[str]:
    """Run one cli_mt batch command; return its output lines minus connection/timing noise."""
    proc = subprocess.run(
        [harness.CLI_MT, hostport, f"cmd:{command}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout
    lines = [l.rstrip("\n") for l in proc.stdout.splitlines()]
    return [l for l in lines if not NOISE.match(l)]


def parse_stat(lines: list[str]) -> dict:
    """Pull czxid/mzxid/version/aversion/ephemeralOwner out of cli_mt's stat block."""
    text = "\n".join(lines)
    out = {}
    for key, rx, base in [
        ("czxid", r"czxid=([0-9a-f]+)", 16),
        ("mzxid", r"mzxid=([0-9a-f]+)", 16),
        ("version", r"\bversion=(-?\d+)", 10),
        ("aversion", r"aversion=(-?\d+)", 10),
        ("ephemeralOwner", r"ephemeralOwner = ([0-9a-f]+)", 16),
    ]:
        m = re.search(rx, text)
        if m:
            out[key] = int(m.group(1), base)
    return out


@pytest.fixture
def base():
    return "/c-" + uuid.uuid4().hex[:10]


@pytest.fixture
def kz(shared_server):
    c = KazooClient(shared_server.hostport, timeout=10)
    c.start()
    yield c
    c.stop()
    c.close()


def test_create_and_get(shared_server, base):
    """create reports rc 0 and the node name; get returns the data, its length and a version-0 stat; errors are -110/-101."""
    hp = shared_server.hostport
    assert cli_mt(hp, f"create {base}") == [f"Creating [{base}] node (mode: 0)", f"[{base}]: rc = 0", f"\tname = {base}"]
    assert cli_mt(hp, f"create {base}") == [f"Creating [{base}] node (mode: 0)", f"[{base}]: rc = -110"]
    assert cli_mt(hp, f"create {base}/x/y")[-1] == f"[{base}/x/y]: rc = -101"
    cli_mt(hp, f"set {base} hello")
    out = cli_mt(hp, f"get {base}")
    assert out[:3] == [f"{base}: rc = 0", " value_len = 5", "hello"], out
    st = parse_stat(out)
    assert st["version"] == 1 and st["aversion"] == 0 and st["ephemeralOwner"] == 0
    assert st["mzxid"] > st["czxid"] > 0
    out = cli_mt(hp, f"get {base}/missing")
    assert out[0] == f"{base}/missing: rc = -101", out


def test_set_bumps_version(shared_server, base, kz):
    """set returns the new stat (version+1, mzxid > czxid) and the data is visible to other clients."""
    hp = shared_server.hostport
    kz.create(base, b"v0")
    _, before = kz.get(base)
    out = cli_mt(hp, f"set {base} v1")
    assert out[0] == f"{base}: rc = 0 Stat:", out
    st = parse_stat(out)
    assert st["version"] == 1 and st["czxid"] == before.czxid and st["mzxid"] > before.mzxid
    data, after = kz.get(base)
    assert data == b"v1" and after.mzxid == st["mzxid"]
    out = cli_mt(hp, f"set {base}/missing x")
    assert out[0].startswith(f"{base}/missing: rc = -101"), out


def test_ls_and_ls2(shared_server, base, kz):
    """ls lists the children; ls2 lists them together with the parent's stat."""
    hp = shared_server.hostport
    kz.create(base)
    for n in ("b", "a", "c"):
        kz.create(f"{base}/{n}")
    out = cli_mt(hp, f"ls {base}")
    assert out[0] == f"{base}: rc = 0"
    assert sorted(l.strip() for l in out[1:]) == ["a", "b", "c"], out
    out = cli_mt(hp, f"ls2 {base}")
    assert out[0] == f"{base}: rc = 0"
    assert sorted(l.strip() for l in out[1:4]) == ["a", "b", "c"], out
    st = parse_stat(out[4:])
    assert st["czxid"] == kz.exists(base).czxid
    out = cli_mt(hp, f"ls {base}/a")
    assert out == [f"{base}/a: rc = 0"], out
    out = cli_mt(hp, f"ls {base}/missing")
    assert out == [f"{base}/missing: rc = -101"], out


def test_delete(shared_server, base, kz):
    """delete refuses a non-empty node (-111), deletes a leaf (rc 0) and reports a missing node (-101)."""
    hp = shared_server.hostport
    kz.create(base + "/leaf", makepath=True)
    assert cli_mt(hp, f"delete {base}") == [f"{base}: rc = -111"]
    assert cli_mt(hp, f"delete {base}/leaf") == [f"{base}/leaf: rc = 0"]
    assert kz.exists(base + "/leaf") is None
    assert cli_mt(hp, f"delete {base}/leaf") == [f"{base}/leaf: rc = -101"]
    assert cli_mt(hp, f"delete {base}") == [f"{base}: rc = 0"]
    assert kz.exists(base) is None


def test_create_modes(shared_server, base, kz):
    """create +s names sequentially, +e lives only as long as cli_mt's session, create2 returns a stat, sync succeeds."""
    hp = shared_server.hostport
    kz.create(base)
    assert cli_mt(hp, f"create +s {base}/s-")[-1] == f"\tname = {base}/s-0000000000"
    assert cli_mt(hp, f"create +s {base}/s-")[-1] == f"\tname = {base}/s-0000000001"
    out = cli_mt(hp, f"create +e {base}/eph")
    assert out == [f"Creating [{base}/eph] node (mode: 1)", f"[{base}/eph]: rc = 0", f"\tname = {base}/eph"]
    # cli_mt closed its session on exit, so the ephemeral is gone
    assert kz.exists(base + "/eph") is None
    out = cli_mt(hp, f"create2 {base}/c2")
    assert out[:3] == [f"Creating [{base}/c2] node (mode: 0)", f"[{base}/c2]: rc = 0", f"\tname = {base}/c2"]
    st = parse_stat(out)
    assert st["version"] == 0 and st["czxid"] == st["mzxid"] == kz.exists(base + "/c2").czxid
    assert cli_mt(hp, f"sync {base}") == [f"[{base}]: rc = 0", f"\tname = {base}"]
    assert sorted(kz.get_children(base)) == ["c2", "s-0000000000", "s-0000000001"]


def test_interactive_session_and_watch(shared_server, base, kz):
    """An interactive cli_mt session connects, and its get watch fires CHANGED_EVENT when another client sets the node."""
    kz.create(base, b"one")
    proc = subprocess.Popen(
        [harness.CLI_MT, shared_server.hostport],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(l.rstrip("\n")) for l in proc.stdout], daemon=True)
    reader.start()

    def expect(pred, what, timeout=15.0):
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            try:
                line = lines.get(timeout=max(0.05, deadline - time.time()))
            except queue.Empty:
                break
            seen.append(line)
            if pred(line):
                return line
        raise AssertionError(f"no {what} in cli_mt output: {seen}")

    try:
        expect(lambda l: l == "Watcher SESSION_EVENT state = CONNECTED_STATE", "connected event")
        sid = expect(lambda l: l.startswith("Got a new session id: 0x"), "session id")
        assert int(sid.rsplit("0x", 1)[1], 16) != 0
        proc.stdin.write(f"get {base}\n")
        proc.stdin.flush()
        expect(lambda l: l == "one", "data line")
        kz.set(base, b"two")
        expect(lambda l: l == f"Watcher CHANGED_EVENT state = CONNECTED_STATE for path {base}", "watch event")
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
