"""A witness of what a Curator CuratorCache sees, for checking a cached view against the tree.

`CacheWitness(connect_string, path)` runs curator/src/warden/compat/CacheWitness.java (through
curator/run.sh, built first by curator/build.sh if needed) as its own process: one Curator
client (RetryForever 200 ms, connection timeout 15 s, the given session timeout) and one
CuratorCache on `path` with default options (the node and its whole subtree, with data). A
reader thread collects its stdout lines with their arrival time (time.time()); see the Java
file for the line protocol.

    with CacheWitness(server.hostport, "/app") as w:
        w.wait_ready(30)
        ... writes, faults ...
        w.wait_quiet(1.0, 30)
        assert not diff(w.dump(), tree_view(kazoo_client, "/app"))

  w.wait_ready(timeout)        time the cache's initial load finished
  w.states()                   [(t, "CONNECTED" | "SUSPENDED" | "RECONNECTED" | "LOST" | "READ_ONLY")]
  w.events()                   [(t, "NODE_CREATED" | "NODE_CHANGED" | "NODE_DELETED", path, version)]
  w.errors()                   [(t, line)] of `error` lines (the program exits 1 after one)
  w.wait_state(name, timeout, since=0.0)   time of the first such state change at or after `since`
  w.wait_quiet(quiet_s, timeout)           wait until no event line arrived for quiet_s seconds
                                           (at least quiet_s from the call)
  w.dump(timeout)              {path: {"version": int, "cversion": int, "data": bytes}} held by the cache
  w.close()                    quit, wait, SIGKILL by PID if it lingers; returns the exit status
  tree_view(kazoo_client, path)   the same shape read from the server (after sync)
  diff(a, b, ...)              short human-readable differences, [] when equal

Note: Curator's cache re-reads a node only when the node itself is created or changed, when a
reconnect rebuilds the cache, or when its parent is re-read with a new cversion (its persistent
recursive watch reports no child changes), so a cached cversion is the one of the last read and
lags after children come or go (seen on ZooKeeper 3.8 as on Warden). diff() therefore compares
version and data by default; pass fields=("version", "cversion", "data") to compare cversion too.

The process is started with PR_SET_PDEATHSIG and registered in harness._LIVE, so it is killed
by PID if the test process dies or exits without closing it. Its stderr (Curator's logging,
level CURATOR_COMPAT_LOG, default warn) goes to a temp file, `w.log_path`, removed by close()
when the process exited 0 unless keep_log=True.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
CURATOR_DIR = os.path.join(HERE, "curator")
MAIN = "warden.compat.CacheWitness"

_build_lock = threading.Lock()
_built = False


def build(timeout: float = 300.0) -> None:
    """Compile the Curator programs if needed (curator/build.sh; it skips an up-to-date build)."""
    global _built
    with _build_lock:
        if _built:
            return
        proc = subprocess.run([os.path.join(CURATOR_DIR, "build.sh")], capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"curator/build.sh failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        _built = True


class WitnessError(RuntimeError):
    pass


class CacheWitness:
    def __init__(self, connect_string: str, path: str, session_timeout_ms: int = 30000,
                 log_path: str | None = None, keep_log: bool = False):
        self.connect_string = connect_string
        self.path = path
        self.session_timeout_ms = session_timeout_ms
        build()
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="cache-witness-", suffix=".log")
            os.close(fd)
        else:
            keep_log = True
        self.log_path = log_path
        self.keep_log = keep_log
        self.returncode: int | None = None
        self._lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._dump_lock = threading.Lock()
        self._eof = False
        env = dict(os.environ, CURATOR_COMPAT_MAIN=MAIN,
                   CURATOR_COMPAT_LOG=os.environ.get("CURATOR_COMPAT_LOG", "warn"))
        with open(self.log_path, "w") as err:  # a file: Curator logs stack traces nobody reads live
            self.proc = subprocess.Popen(
                [os.path.join(CURATOR_DIR, "run.sh"), connect_string, path, str(session_timeout_ms)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, encoding="utf-8",
                bufsize=1, cwd=HERE, env=env, preexec_fn=harness._die_with_parent)
        harness._LIVE[self.proc.pid] = self.proc
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name=f"cache-witness-{self.pid}", daemon=True)
        self._reader.start()

    # -- output ----------------------------------------------------------
    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                with self._cond:
                    self._lines.append((time.time(), line.rstrip("\n")))
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def lines(self) -> list[tuple[float, str]]:
        """Every stdout line so far, [(t, line)]."""
        with self._cond:
            return list(self._lines)

    def states(self) -> list[tuple[float, str]]:
        return [(t, l[6:]) for t, l in self.lines() if l.startswith("state ")]

    def events(self) -> list[tuple[float, str, str, int]]:
        out = []
        for t, l in self.lines():
            if l.startswith("event "):
                kind, rest = l[6:].split(" ", 1)
                path, version = rest.rsplit(" ", 1)  # a path may hold spaces, never a newline
                out.append((t, kind, path, int(version)))
        return out

    def errors(self) -> list[tuple[float, str]]:
        return [(t, l) for t, l in self.lines() if l.startswith("error ")]

    def stderr_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def describe(self, tail: int = 40) -> str:
        """The last lines of stdout and stderr, for an assertion message."""
        out = "\n".join(f"  {t:.3f} {l}" for t, l in self.lines()[-tail:])
        err = "\n".join(self.stderr_text().splitlines()[-tail:])
        return (f"cache witness pid {self.pid} on {self.connect_string} {self.path} (rc {self.proc.poll()}):\n"
                f"--- stdout ---\n{out}\n--- stderr ({self.log_path}) ---\n{err}")

    def _wait_line(self, pred, timeout: float, what: str, start: int = 0) -> tuple[float, str]:
        """The first line from index `start` on with pred(line) true; WitnessError on timeout,
        on an `error` line, or when the process ends first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self._lines):
                    t, l = self._lines[i]
                    i += 1
                    if pred(l):
                        return t, l
                    if l.startswith("error "):
                        raise WitnessError(f"witness failed while waiting for {what}: {l}\n{self.describe()}")
                if self._eof:
                    raise WitnessError(f"witness exited while waiting for {what}\n{self.describe()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WitnessError(f"timed out after {timeout:.1f}s waiting for {what}\n{self.describe()}")
                self._cond.wait(left)

    def wait_ready(self, timeout: float = 60.0) -> float:
        return self._wait_line(lambda l: l == "ready", timeout, "ready")[0]

    def wait_state(self, name: str, timeout: float, since: float = 0.0) -> float:
        """Time of the first `state NAME` line that arrived at or after `since` (time.time())."""
        with self._cond:
            start = next((i for i, (t, _) in enumerate(self._lines) if t >= since), len(self._lines))
        return self._wait_line(lambda l: l == f"state {name}", timeout, f"state {name}", start)[0]

    def wait_quiet(self, quiet_s: float = 1.0, timeout: float = 30.0) -> float:
        """Wait until no event line has arrived for quiet_s seconds, counted from the later of this
        call and the last event (so it always waits at least quiet_s: a burst that has not begun
        yet, e.g. the re-read after a reconnect, is not mistaken for quiet). Returns the last
        event's time (0.0 if none)."""
        start = time.time()
        deadline = time.monotonic() + timeout
        while True:
            evs = self.events()
            last = evs[-1][0] if evs else 0.0
            idle = time.time() - max(last, start)
            if idle >= quiet_s:
                return last
            if time.monotonic() + (quiet_s - idle) > deadline:
                raise WitnessError(f"events still arriving after {timeout:.1f}s\n{self.describe()}")
            if self.proc.poll() is not None:
                raise WitnessError(f"witness exited\n{self.describe()}")
            time.sleep(min(quiet_s - idle, 0.1) + 0.01)

    # -- commands --------------------------------------------------------
    def _send(self, cmd: str) -> None:
        try:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise WitnessError(f"cannot send {cmd!r}: {e!r}\n{self.describe()}") from e

    def dump(self, timeout: float = 30.0) -> dict[str, dict]:
        """What the cache holds now: {path: {"version", "cversion", "data": bytes}}."""
        with self._dump_lock:
            with self._cond:
                start = len(self._lines)
            self._send("dump")
            _, line = self._wait_line(lambda l: l.startswith("dump "), timeout, "dump", start)
        raw = json.loads(line[5:])
        return {p: {"version": v["version"], "cversion": v["cversion"], "data": base64.b64decode(v["data"])}
                for p, v in raw.items()}

    def close(self, timeout: float = 20.0) -> int:
        """Send quit (and EOF), wait up to `timeout` s, SIGKILL by PID if still running. Exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        harness._LIVE.pop(self.proc.pid, None)
        self._reader.join(timeout=5)
        self.returncode = self.proc.returncode
        if self.returncode == 0 and not self.keep_log:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
        return self.returncode

    def __enter__(self) -> "CacheWitness":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tree_view(client, path: str) -> dict[str, dict]:
    """The subtree at `path` read through a kazoo client after sync(path), in dump()'s shape.
    Not atomic: call it when writes have stopped. A node deleted while it is read is left out."""
    from kazoo.exceptions import NoNodeError

    try:
        client.sync(path)
    except NoNodeError:
        pass
    view: dict[str, dict] = {}

    def walk(p: str) -> None:
        try:
            data, stat = client.get(p)
            children = client.get_children(p)
        except NoNodeError:
            return
        view[p] = {"version": stat.version, "cversion": stat.cversion, "data": data or b""}
        for c in sorted(children):
            walk(p.rstrip("/") + "/" + c)

    walk(path)
    return view


def _short(v, limit: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def diff(a: dict[str, dict], b: dict[str, dict], fields: tuple[str, ...] = ("version", "data"),
         names: tuple[str, str] = ("witness", "server"), limit: int = 50) -> list[str]:
    """Differences between two views ({path: {field: value}}), at most `limit` lines; [] when equal."""
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            out.append(f"only in {names[0]}: {p} {_short(a[p])}")
        elif p not in a:
            out.append(f"only in {names[1]}: {p} {_short(b[p])}")
        else:
            for f in fields:
                if a[p].get(f) != b[p].get(f):
                    out.append(f"{p} {f}: {names[0]} {_short(a[p].get(f))} != {names[1]} {_short(b[p].get(f))}")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out
