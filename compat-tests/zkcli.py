"""Drive Apache ZooKeeper's zkCli.sh (the Java CLI) as a black box.

A script of commands is fed on stdin. zkCli prints some results on stdout
(data, stats, lists) and others on stderr ("Created ...", error messages),
and the order between the two streams is lost in a shared pipe, so they are
captured separately and each is cut into one chunk per command by a marker:
after every command we insert `printwatches` (a local command that prints
"printwatches is on" on stdout) and `get <marker path>` (whose "Node does
not exist: <marker path>" goes to stderr). Commands run one at a time, so
within a stream the split is exact. Watch events are printed on stdout by
another thread, each message as one "\n" + text line; they are pulled out
into `events` together with the blank line in front of each.
JVM/SLF4J start-up noise and the banner are dropped.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

import harness

MARKER_CMD = "printwatches"
MARKER_OUT = "printwatches is on"
MARKER_PATH = "/zkcli-compat-marker-0f9d"  # never created
MARKER_ERR_CMD = f"get {MARKER_PATH}"
MARKER_ERR = f"Node does not exist: {MARKER_PATH}"
NOISE = (
    re.compile(r"^SLF4J: "),
    re.compile(r"^Connecting to "),
    re.compile(r"^Welcome to ZooKeeper!$"),
    re.compile(r"^JLine support is (disabled|enabled)$"),
)
EVENT_RE = re.compile(r"^WatchedEvent state:(\S+) type:(\S+) path:(.*)$")
STAT_KEYS = ("cZxid", "ctime", "mZxid", "mtime", "pZxid", "cversion", "dataVersion",
             "aclVersion", "ephemeralOwner", "dataLength", "numChildren")


@dataclass
class CliRun:
    commands: list[str]
    outputs: list[list[str]]        # lines printed by each command, in order
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (state, type, path)
    raw: str = ""
    returncode: int = 0

    def out(self, i: int) -> list[str]:
        return self.outputs[i]

    def node_events(self) -> list[tuple[str, str]]:
        """(type, path) of every event except connection-state events."""
        return [(t, p) for (_s, t, p) in self.events if t != "None"]

    def __str__(self) -> str:
        parts = [f"> {c}\n" + "\n".join(o) for c, o in zip(self.commands, self.outputs)]
        return "\n".join(parts) + f"\nevents={self.events}\n--- raw ---\n{self.raw}"


def _clean(raw: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Drop noise; pull out watcher messages (each with the blank line before it)."""
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    kept: list[str] = []
    events: list[tuple[str, str, str]] = []
    for line in lines:
        if any(p.search(line) for p in NOISE):
            continue
        m = EVENT_RE.match(line)
        if line == "WATCHER::" or m:
            if m:
                events.append(m.groups())
            # printMessage() wrote "\n" + text in one (atomic) println, so the
            # blank line it produced is the line right before this one.
            if kept and kept[-1] == "":
                kept.pop()
            continue
        kept.append(line)
    return kept, events


def _split(lines: list[str], marker: str, n: int, stream: str, raw: str) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    for line in lines:
        if line == marker:
            chunks.append([])
        else:
            chunks[-1].append(line)
    tail = chunks.pop()  # after the last marker: output of `quit`
    if len(chunks) != n or any(l.strip() for l in tail):
        raise AssertionError(
            f"zkCli {stream}: {len(chunks)} markers for {n} commands, tail {tail!r}\n{raw}"
        )
    return chunks


def run(hostport: str, commands: list[str], timeout: float = 90.0) -> CliRun:
    """Run `commands` in one zkCli session (ending with `quit`)."""
    script = []
    for c in commands:
        script += [c, MARKER_CMD, MARKER_ERR_CMD]
    script.append("quit")
    proc = subprocess.run(
        [harness.ZKCLI, "-server", hostport],
        input="\n".join(script) + "\n",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    raw = f"--- stdout ---\n{proc.stdout}--- stderr ---\n{proc.stderr}"
    out_lines, events = _clean(proc.stdout)
    err_lines, err_events = _clean(proc.stderr)
    assert not err_events, raw
    outs = _split(out_lines, MARKER_OUT, len(commands), "stdout", raw)
    errs = _split(err_lines, MARKER_ERR, len(commands), "stderr", raw)
    # stdout then stderr: no zkCli command used here prints on both.
    outputs = [o + e for o, e in zip(outs, errs)]
    return CliRun(commands, outputs, events, raw, proc.returncode)


def oneshot(hostport: str, *args: str, timeout: float = 90.0) -> tuple[int, list[str]]:
    """Run `zkCli.sh -server HOSTPORT args...` (one command, then exit): (exit code, cleaned lines)."""
    proc = subprocess.run(
        [harness.ZKCLI, "-server", hostport, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    kept, _ = _clean(proc.stdout)
    return proc.returncode, [l for l in kept if l != ""]


def split_stat(lines: list[str]) -> tuple[list[str], dict[str, str]]:
    """Separate zkCli's stat block ("cZxid = 0x..", ...) from the other lines."""
    stat: dict[str, str] = {}
    rest: list[str] = []
    for line in lines:
        key, sep, value = line.partition(" = ")
        if sep and key in STAT_KEYS:
            stat[key] = value
        else:
            rest.append(line)
    return rest, stat


def stat_ints(stat: dict[str, str]) -> dict[str, int]:
    """Stat values as ints (zxids and owners from hex); times are dropped."""
    out = {}
    for k, v in stat.items():
        if k in ("ctime", "mtime"):
            continue
        out[k] = int(v, 16) if v.startswith("0x") else int(v)
    return out
