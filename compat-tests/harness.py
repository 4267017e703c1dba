"""Start and stop the server under test for the black-box compatibility suite.

Owns: writing zoo.cfg, launching Warden or Apache ZooKeeper 3.8 (Debian's
package) on a free 127.0.0.1 port, waiting until it answers a four-letter
word, and killing it by PID afterwards. Knows nothing about tests; conftest.py
turns it into pytest fixtures.

Both servers are started from the same zoo.cfg. ZooKeeper also gets the
equivalent -Dzookeeper.* system properties, because some of these keys are
system properties in ZooKeeper (see shared/reference/running-zookeeper.md).

Environment:
  COMPAT_SERVER   warden (default) | zookeeper  -- what the `server` fixture runs
  WARDEN_BIN      path to the Warden binary (default <repo>/target/debug/warden)
  COMPAT_START_TIMEOUT  seconds to wait for readiness (default 60)
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ZK_JAVA = os.environ.get("COMPAT_JAVA", "/usr/bin/java")
# zookeeper.jar's manifest Class-Path brings netty, jline, slf4j-api and the rest;
# slf4j-simple is the logging binding (writes to stderr, which we capture).
ZK_CLASSPATH = ":".join(
    [
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/zookeeper-jute.jar",
        "/usr/share/java/slf4j-simple.jar",
        # javax.servlet for the Jetty AdminServer (only loaded when a test sets
        # admin.enableServer=true); zookeeper.jar's manifest lacks it.
        "/usr/share/java/servlet-api.jar",
        # netty's codec classes (SslHandler's superclass), which the quorum's TLS socket
        # loads when a member connects; the manifest lacks them too, and without them
        # ZooKeeper's election listener dies silently and an sslQuorum ensemble never forms.
        "/usr/share/java/netty-codec.jar",
    ]
)
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"
CLI_MT = "/usr/lib/zookeeper/bin/cli_mt"

HOST = "127.0.0.1"
TICK_TIME_MS = 2000
# The digest super user every server is configured with: `addauth digest super:secret`.
SUPER_USER = "super"
SUPER_PASSWORD = "secret"
# How often the server looks for expired TTL nodes and empty containers.
# ZooKeeper reads it from the JVM property znode.container.checkIntervalMs (default 60 s);
# Warden is expected to read the same key from zoo.cfg.
CONTAINER_CHECK_INTERVAL_MS = 1000


def digest(user: str, password: str) -> str:
    """The id ZooKeeper's digest scheme stores: user:base64(sha1(user:password))."""
    sha = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(sha).decode()}"


SUPER_DIGEST = digest(SUPER_USER, SUPER_PASSWORD)


def default_kind() -> str:
    kind = os.environ.get("COMPAT_SERVER", "warden").strip().lower()
    if kind not in ("warden", "zookeeper"):
        raise ValueError(f"COMPAT_SERVER must be 'warden' or 'zookeeper', not {kind!r}")
    return kind


def warden_bin() -> str:
    return os.environ.get("WARDEN_BIN", str(REPO_ROOT / "target" / "debug" / "warden"))


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def four_letter(hostport: str, word: str, timeout: float = 5.0) -> str:
    """Send a four-letter word (ruok, srvr, mntr, ...) and return the whole reply."""
    host, _, port = hostport.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGKILL if the pytest process dies first."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


# Every live process this module started, so atexit can kill it by PID even
# when a fixture's teardown never ran.
_LIVE: dict[int, subprocess.Popen] = {}


# Servers whose temp dir still exists, and the log tails of those removed since the
# current test began: conftest.py attaches both to a failed test's report, so a flake
# seen only in CI can still be read after the fact.
OPEN_SERVERS: dict[int, "Server"] = {}
CLOSED_LOG_TAILS: list[tuple[str, str]] = []
LOG_TAIL_LINES = 80


def remember_log(srv: "Server") -> None:
    """Keep the tail of srv's log (its temp dir is about to go) for a failure report."""
    if OPEN_SERVERS.pop(id(srv), None) is not None:
        CLOSED_LOG_TAILS.append((srv.label(), srv.describe_log(LOG_TAIL_LINES)))


def _kill_all_live() -> None:
    for pid, proc in list(_LIVE.items()):
        if proc.poll() is None:
            try:
                os.kill(pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        _LIVE.pop(pid, None)


atexit.register(_kill_all_live)


# zoo.cfg keys (or key prefixes before the first dot) that ZooKeeper's
# QuorumPeerConfig parses itself instead of turning them into zookeeper.* properties.
_ZK_PARSED_KEY_PREFIXES = {
    "dataDir", "dataLogDir", "clientPort", "clientPortAddress", "secureClientPort",
    "secureClientPortAddress", "tickTime", "maxClientCnxns", "minSessionTimeout",
    "maxSessionTimeout", "initLimit", "syncLimit", "metricsProvider", "server",
    "standaloneEnabled", "reconfigEnabled", "autopurge", "electionAlg", "peerType",
}


class ServerStartError(RuntimeError):
    pass


class Server:
    """One server process (Warden or ZooKeeper) with its own port and data dir.

    The port and data dir stay fixed across stop()/start(), so a restart sees
    the same persisted state at the same address.
    """

    def __init__(
        self,
        kind: str | None = None,
        name: str = "server",
        extra_cfg: dict[str, object] | None = None,
    ):
        self.kind = kind or default_kind()
        # zoo.cfg keys that replace (same key) or extend the defaults below,
        # e.g. {"4lw.commands.whitelist": "srvr,ruok", "admin.enableServer": "true"};
        # a value of None leaves the key out (the server's own default applies).
        self.extra_cfg = {k: (None if v is None else str(v)) for k, v in (extra_cfg or {}).items()}
        if self.kind not in ("warden", "zookeeper"):
            raise ValueError(f"unknown server kind {self.kind!r}")
        self.host = HOST
        self.port = free_port()
        self.hostport = f"{self.host}:{self.port}"
        self.base_dir = Path(tempfile.mkdtemp(prefix=f"compat-{self.kind}-{name}-"))
        self.data_dir = str(self.base_dir / "data")
        os.makedirs(self.data_dir)
        self.conf_path = str(self.base_dir / "zoo.cfg")
        self.log_path = str(self.base_dir / "server.log")
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self._write_config()
        OPEN_SERVERS[id(self)] = self

    # -- configuration ---------------------------------------------------
    def config_lines(self) -> list[str]:
        """The zoo.cfg lines: the defaults, with extra_cfg keys replacing or appended."""
        lines = []
        extra = dict(self.extra_cfg)
        for line in self._default_config_lines():
            key = line.split("=", 1)[0]
            if key not in extra:
                lines.append(line)
            elif extra[key] is not None:
                lines.append(f"{key}={extra[key]}")
            extra.pop(key, None)
        lines.extend(f"{k}={v}" for k, v in extra.items() if v is not None)
        return lines

    def _default_config_lines(self) -> list[str]:
        return [
            f"tickTime={TICK_TIME_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            # 0 = unlimited connections per client IP. Every client in this
            # suite comes from 127.0.0.1, and kazoo's upstream tests and the
            # Curator programs open many sessions at once; ZooKeeper's default
            # of 60 per IP would turn a busy test into a refused connection.
            "maxClientCnxns=0",
            "extendedTypesEnabled=true",
            "4lw.commands.whitelist=*",
            "admin.enableServer=false",
            f"DigestAuthenticationProvider.superDigest={SUPER_DIGEST}",
            # Not a zoo.cfg key in ZooKeeper (it is the JVM property
            # znode.container.checkIntervalMs, passed below); Warden reads it
            # here so TTL/container expiry can be tested in seconds.
            f"znode.container.checkIntervalMs={CONTAINER_CHECK_INTERVAL_MS}",
        ]

    def _write_config(self) -> None:
        with open(self.conf_path, "w") as f:
            f.write("\n".join(self.config_lines()) + "\n")

    def command(self) -> list[str]:
        if self.kind == "warden":
            return [warden_bin(), "--config", self.conf_path]
        props = {
            "zookeeper.extendedTypesEnabled": "true",
            "zookeeper.4lw.commands.whitelist": "*",
            "zookeeper.admin.enableServer": "false",
            "zookeeper.DigestAuthenticationProvider.superDigest": SUPER_DIGEST,
        }
        # ZooKeeper turns every zoo.cfg key it does not parse itself into the
        # system property zookeeper.<key>; pass extra keys the same way too so
        # a -D default above never contradicts the zoo.cfg.
        for key, value in self.extra_cfg.items():
            if key.split(".", 1)[0] in _ZK_PARSED_KEY_PREFIXES:
                continue
            if key.startswith(("java.", "readonlymode.")):
                # A JVM property ZooKeeper reads as is (java.security.auth.login.config,
                # the JAAS file; readonlymode.enabled; its start scripts pass them in
                # SERVER_JVMFLAGS); Warden reads the same key from zoo.cfg.
                if value is not None:
                    props[key] = value
                continue
            if value is None:
                props.pop(f"zookeeper.{key}", None)
            else:
                props[f"zookeeper.{key}"] = value
        return [
            ZK_JAVA,
            "-Xmx512m",
            "-XX:+UseSerialGC",
            *(f"-D{k}={v}" for k, v in props.items()),
            f"-Dznode.container.checkIntervalMs={CONTAINER_CHECK_INTERVAL_MS}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-cp",
            ZK_CLASSPATH,
            ZK_MAIN,
            self.conf_path,
        ]

    # -- lifecycle -------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float | None = None) -> "Server":
        """Start (or restart) on the same port and data dir; wait until ready."""
        if self.running:
            raise RuntimeError(f"{self.kind} on {self.hostport} is already running")
        cmd = self.command()
        if self.kind == "warden" and not os.access(warden_bin(), os.X_OK):
            raise ServerStartError(
                f"WARDEN_BIN {warden_bin()!r} is not an executable file; build Warden "
                "(cargo build) or set WARDEN_BIN, or run with COMPAT_SERVER=zookeeper"
            )
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"\n=== start {' '.join(cmd)}\n".encode())
        self._log_file.flush()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=str(self.base_dir),
            preexec_fn=_die_with_parent,
        )
        _LIVE[self.proc.pid] = self.proc
        self._wait_ready(timeout or float(os.environ.get("COMPAT_START_TIMEOUT", "60")))
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_err = "no reply yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.kind} exited with code {self.proc.returncode} before it "
                    f"was ready on {self.hostport}.\n{self.describe_log()}"
                )
            try:
                reply = four_letter(self.hostport, "srvr", timeout=2)
                if any(line.startswith("Mode:") for line in reply.splitlines()):
                    return
                # ZooKeeper answers ruok with imok before it serves requests, so
                # ruok only counts when srvr did not say it is not serving yet.
                if "not currently serving" not in reply and (
                    four_letter(self.hostport, "ruok", timeout=2).strip() == "imok"
                ):
                    return
                last_err = f"srvr replied {reply[:200]!r}"
            except OSError as e:
                last_err = repr(e)
            time.sleep(0.1)
        pid = self.proc.pid
        self.kill()
        raise ServerStartError(
            f"{self.kind} (pid {pid}) not ready on {self.hostport} after {timeout:.0f}s "
            f"(last: {last_err}).\n{self.describe_log()}"
        )

    def label(self) -> str:
        return f"{self.kind} {self.hostport} ({self.base_dir.name})"

    def describe_log(self, tail: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                # The tail only: a long test's log can run to megabytes.
                f.seek(max(0, os.fstat(f.fileno()).st_size - 256 * 1024))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return f"(no log at {self.log_path})"
        return f"--- last {tail} lines of {self.log_path} ---\n" + "\n".join(lines[-tail:])

    def _reap(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is not None:
                _LIVE.pop(self.proc.pid, None)
            if self._log_file:
                self._log_file.close()
                self._log_file = None

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM by PID, SIGKILL if it lingers."""
        if not self.proc or self.proc.poll() is not None:
            if self.proc:
                self._reap(0)
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self._reap(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Crash: SIGKILL by PID."""
        if not self.proc:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap(15)

    def close(self) -> None:
        """Kill the process (if any) and remove the temp dir."""
        try:
            self.kill()
        finally:
            remember_log(self)
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<Server {self.kind} {self.hostport} pid={self.pid} data={self.data_dir}>"

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def started(
    kind: str | None = None, name: str = "server", extra_cfg: dict[str, object] | None = None
) -> Server:
    """A Server that is already running; on a start failure its dir is removed."""
    srv = Server(kind, name=name, extra_cfg=extra_cfg)
    try:
        srv.start()
    except BaseException:
        srv.close()  # the exception message already carries the log tail
        raise
    return srv


def disk_shim(monkeypatch, tmp_path) -> None:
    """Preload compat-tests/slowsync.c (built with gcc; the test is skipped without it) into
    servers started from now on in this test, through monkeypatch (undone at its end)."""
    import pytest  # only the compat tests call this; the harness is also used by bench scripts

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the disk shim")
    shim = Path(tmp_path) / "slowsync.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(shim),
                    str(Path(__file__).with_name("slowsync.c")), "-ldl"], check=True, timeout=60)
    monkeypatch.setenv("LD_PRELOAD", str(shim))


def slow_disk(monkeypatch, tmp_path, ms: int) -> None:
    """Make every fsync/fdatasync of servers started from now on in this test `ms` slower
    (the shim, and SLOWSYNC_MS)."""
    disk_shim(monkeypatch, tmp_path)
    monkeypatch.setenv("SLOWSYNC_MS", str(ms))


# libfaketime (Debian's `libfaketime`), the thread-safe build: moves a process's wall clock
# (CLOCK_REALTIME, gettimeofday, time) by what a control file says, and leaves its monotonic
# clocks alone, as a real clock step (an NTP step, an operator's `date -s`) does.
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def clock_shim(monkeypatch, control_file: str) -> None:
    """Preload libfaketime into servers started from now on in this test (skipped without
    it); each reads its clock offset (`+0`, `+7200`, `-3600`: seconds) from `control_file`
    (relative: each server's own directory), re-read at most once a second. Composes with
    disk_shim (both preloaded)."""
    import pytest

    if not os.path.exists(FAKETIME_LIB):
        pytest.skip(f"libfaketime is needed to move a server's clock ({FAKETIME_LIB}; compat-tests/install.sh)")
    pre = os.environ.get("LD_PRELOAD")
    monkeypatch.setenv("LD_PRELOAD", f"{pre}:{FAKETIME_LIB}" if pre else FAKETIME_LIB)
    for key, value in faketime_env(control_file).items():
        monkeypatch.setenv(key, value)


def faketime_env(control_file: str) -> dict[str, str]:
    """libfaketime's settings (besides LD_PRELOAD): the offset read from `control_file` at
    most once a second, the monotonic clocks left alone."""
    return {"FAKETIME_TIMESTAMP_FILE": control_file, "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def set_clock(path: str, offset_s: int) -> None:
    """Writes a libfaketime control file: the clock `offset_s` seconds from the real one."""
    with open(f"{path}.tmp", "w") as f:
        f.write(f"{offset_s:+d}\n")
    os.replace(f"{path}.tmp", path)


def wait_until(cond, timeout: float, what: str, interval: float = 0.05):
    """Poll cond() until it returns something truthy (returned); AssertionError after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)
