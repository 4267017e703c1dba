#!/usr/bin/env python3
"""Side-by-side benchmark: Warden vs Apache ZooKeeper 3.8 (Debian's package), standalone,
or with --ensemble 3 the throughput and latency phases against 3-server ensembles of each kind.

Python 3 standard library only. Everything binds 127.0.0.1; every process this
script starts is killed by PID at the end (also on Ctrl-C, SIGTERM or an
exception) and every temp dir is removed.

Phases (select with --phases):
  throughput  create / set / get / mixed(90% reads), 16 sessions x 8 in flight, 100-byte values
  latency     get / create / set at 1 session x 1 in flight (p50, p99)
  watch       N watchers on one node, setData -> last event (warden-bench watch)
  sessions    N concurrent sessions held for --session-hold s; held count, RSS per session (over
              several loopback source addresses past 20,000 sessions); --rounds rounds
  memory      RSS after --znodes znodes of --znode-size bytes (ZooKeeper also after a forced GC),
              the snapshot holding them, then kill -9 + restart, timed from process start to the
              first successful getData; --rounds rounds

Every throughput/latency/watch run gets a FRESH server (new temp dataDir, new
port): for each workload, rounds run ZooKeeper, Warden, ZooKeeper, Warden, ...
(A B A B), and a round's ratio is Warden/ZooKeeper of that round's pair.

--ensemble 3: a fresh 3-server ensemble per throughput/latency run instead, started through
compat-tests/ensemble.py with the standalone zoo.cfg lines and command line (plus initLimit,
syncLimit, server.N, myid); throughput clients spread over all members, the latency client on
the lowest-myid follower (on the leader with --latency-client leader). Rows are labelled "(3-node ensemble)". Other phases: standalone only.

See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import ctypes
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
TICK_TIME_MS = 2000
ZK_JAVA = "/usr/bin/java"
ZK_CLASSPATH = ":".join(
    [
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/zookeeper-jute.jar",
        "/usr/share/java/slf4j-simple.jar",
    ]
)
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Debian's zookeeper.jar manifest leaves out jars its Netty connection factory needs
# (netty-codec holds SslHandler's base class): added for --tls.
ZK_NETTY_JARS = [f"/usr/share/java/{j}.jar" for j in
                 ("netty-codec", "netty-resolver", "netty-transport-native-unix-common")]

# Targets from the issue: Warden/ZooKeeper ratios.
THROUGHPUT_TARGET = 2.0  # ratio >= this
LATENCY_TARGETS = {"get": 0.5, "create": 0.75, "set": 0.75}  # p50 and p99 ratio <= this

THROUGHPUT_WORKLOADS = [
    # (row name, warden-bench arguments)
    ("create", ["--workload", "create"]),
    ("set", ["--workload", "set"]),
    ("get", ["--workload", "get"]),
    ("mixed 90/10", ["--workload", "mixed", "--read-ratio", "0.9"]),
]
LATENCY_WORKLOADS = ["get", "create", "set"]
ALL_PHASES = ["throughput", "latency", "watch", "sessions", "memory", "bigvalues", "wideparent", "overload",
              "storms", "cpu", "idle", "snapload"]
ENSEMBLE_PHASES = ["throughput", "latency", "bigvalues", "cpu"]  # the phases --ensemble supports
# The default standalone run leaves out `cpu` (its target is set on a 3-member ensemble).
DEFAULT_STANDALONE_PHASES = [p for p in ALL_PHASES if p != "cpu"]
SNAPLOAD_TARGET = 0.5  # snapload: p99 / p99.9 during a snapshot, Warden/ZooKeeper, <= this
SNAPLOAD_SELF_TARGET = 1.5  # snapload: Warden's p99 during a snapshot / its own outside one, <= this
STORM_TARGET = 0.5  # storms: time to finish and the unrelated client's p99, ratio <= this
CPU_TARGET = 0.33  # cpu: CPU-seconds per 1,000 ops summed over members, ratio <= this
IDLE_TARGET = 0.25  # idle: RSS of a fresh server that served one client, ratio <= this
IDLE_SETTLE_S = 10.0
KINDS = ["zookeeper", "warden"]
LABEL = {"zookeeper": "ZooKeeper", "warden": "Warden"}


class BenchAbort(Exception):
    """Raised from the SIGTERM/SIGHUP handler so `finally` blocks clean up."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Process bookkeeping: everything we start is in _LIVE and is killed by PID.
# ---------------------------------------------------------------------------
_LIVE: dict[int, subprocess.Popen] = {}
_TEMP_DIRS: list[Path] = []
_ENSEMBLES: list = []  # live compat-tests ensemble.Ensemble objects (--ensemble)


def _child_setup() -> None:
    """preexec_fn: raise the fd soft limit to the hard limit; die with the parent."""
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=_child_setup, **kw)
    _LIVE[proc.pid] = proc
    return proc


def kill_proc(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is not None:
        _LIVE.pop(proc.pid, None)


def cleanup_all() -> None:
    for ens in list(_ENSEMBLES):
        try:
            ens.close()  # SIGKILL every member by PID, remove its temp dirs
        except Exception:  # noqa: BLE001 - keep cleaning up
            pass
        _ENSEMBLES.remove(ens)
    for proc in list(_LIVE.values()):
        kill_proc(proc)
    for d in list(_TEMP_DIRS):
        shutil.rmtree(d, ignore_errors=True)
        _TEMP_DIRS.remove(d)


def make_temp_dir(prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix))
    _TEMP_DIRS.append(d)
    return d


def remove_temp_dir(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
    if d in _TEMP_DIRS:
        _TEMP_DIRS.remove(d)


def _on_signal(signum, _frame):
    raise BenchAbort(f"signal {signum}")


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def four_letter(port: int, word: str, timeout: float = 5.0) -> str:
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def srvr_field(port: int, field: str) -> str | None:
    try:
        for line in four_letter(port, "srvr", timeout=5).splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_detail(pid: int | None) -> dict | None:
    """VmRSS, RssAnon, RssFile, RssShmem (bytes) and VmHWM from /proc/<pid>/status."""
    if pid is None:
        return None
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[k] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return out


def proc_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a live process, seconds."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_busy_s() -> tuple[float, float] | None:
    """(busy CPU seconds, wall seconds x CPUs) counters from /proc/stat's cpu line."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / hz, sum(v[:8]) / hz


def jcmd_gc(pid: int) -> str | None:
    """Force a full GC in the JVM; returns an error string or None."""
    jcmd = shutil.which("jcmd")
    if not jcmd:
        return "jcmd not found"
    try:
        p = subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "jcmd timed out"
    if p.returncode != 0:
        return f"jcmd exit {p.returncode}: {(p.stdout + p.stderr).strip()[:200]}"
    time.sleep(1.0)  # let the GC finish returning memory before reading VmRSS
    return None


def mib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / (1 << 20):.1f} MiB"


def fmt_num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def stats3(xs: list[float]) -> tuple[float, float, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return (min(xs), statistics.median(xs), max(xs))


def fmt_stats3(s, digits: int = 3) -> str:
    if s is None:
        return "n/a"
    return " / ".join(f"{x:.{digits}f}" for x in s)


def machine_info() -> dict:
    info: dict = {"nproc": os.cpu_count()}
    try:
        info["nproc_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_total_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["kernel"] = platform.release()
    info["python"] = platform.python_version()
    info["loadavg_at_start"] = os.getloadavg()
    info["nofile_limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        info["java"] = subprocess.run(
            [ZK_JAVA, "-version"], capture_output=True, text=True, timeout=30
        ).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        info["java"] = "unknown"
    return info


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------
def server_cfg_lines(opts: argparse.Namespace, kind: str, data_dir, port: int) -> list[str]:
    """zoo.cfg lines shared by standalone servers and ensemble members (which add initLimit,
    syncLimit and the server.N lines); Warden's also get --warden-cfg."""
    return [
        f"tickTime={TICK_TIME_MS}",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        f"clientPortAddress={HOST}",
        # 0 = unlimited connections per client IP (all our clients are 127.0.0.1;
        # ZooKeeper's default of 60 would refuse the sessions/watch phases).
        "maxClientCnxns=0",
        *([f"clientPortListenBacklog={opts.listen_backlog}"] if opts.listen_backlog > 0 else []),
        "4lw.commands.whitelist=*",
        "admin.enableServer=false",
        *(tls_cfg_lines(opts, kind) if opts.tls else []),
        *(opts.warden_cfg if kind == "warden" else []),
    ]


def make_tls_material(d: Path) -> dict:
    """A CA, a server key store (PEM: key + certificate) and a client certificate and key,
    made with openssl in `d` (X.509 v3, as rustls requires)."""
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=str(d))
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=warden-bench CA")
    (d / "server.ext").write_text(f"subjectAltName=DNS:localhost,IP:{HOST}\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
             "-subj", f"/CN=warden-bench {who}")
        ossl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.crt")
    (d / "server.pem").write_text((d / "server.key").read_text() + (d / "server.crt").read_text())
    return {"ca": str(d / "ca.pem"), "server": str(d / "server.pem"),
            "client_cert": str(d / "client.crt"), "client_key": str(d / "client.key")}


def tls_cfg_lines(opts: argparse.Namespace, kind: str) -> list[str]:
    """--tls: the client port takes TLS and plaintext (port unification, so the four-letter
    words and the znode loader stay plaintext); clients must present a certificate. Both
    servers read the same keys; ZooKeeper needs its Netty connection factory for TLS, and the
    x509 provider or it closes TLS clients."""
    m = opts.tls_material
    return [
        "client.portUnification=true",
        f"ssl.keyStore.location={m['server']}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={m['ca']}",
        "ssl.trustStore.type=PEM",
        "ssl.clientAuth=need",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    ]


def server_command(opts: argparse.Namespace, kind: str, cfg_path) -> list[str]:
    """The command line of one server process, standalone or ensemble member."""
    if kind == "warden":
        return [opts.warden_bin_run, "--config", str(cfg_path)]
    return [
        ZK_JAVA,
        f"-Xmx{opts.zk_heap}",
        *shlex.split(opts.zk_java_opts),
        "-Dzookeeper.4lw.commands.whitelist=*",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        ":".join([ZK_CLASSPATH, *(ZK_NETTY_JARS if opts.tls else [])]),
        ZK_MAIN,
        str(cfg_path),
    ]


class Server:
    """One standalone server (Warden or ZooKeeper) with its own temp dir and port."""

    def __init__(self, kind: str, opts: argparse.Namespace, name: str):
        self.kind = kind
        self.opts = opts
        self.port = free_port()
        self.base = make_temp_dir(f"warden-bench-{kind}-{name}-")
        self.data_dir = self.base / "data"
        self.data_dir.mkdir()
        self.cfg = self.base / "zoo.cfg"
        self.log_path = self.base / "server.log"
        self.proc: subprocess.Popen | None = None
        self._logf = None
        self.cfg.write_text("\n".join(server_cfg_lines(opts, kind, self.data_dir, self.port)) + "\n")

    @property
    def label(self) -> str:
        return LABEL[self.kind]

    def command(self) -> list[str]:
        return server_command(self.opts, self.kind, self.cfg)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait until srvr reports a Mode; returns seconds to ready."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("already running")
        self._logf = open(self.log_path, "ab")
        cmd = self.command()
        self._logf.write(f"\n=== start {' '.join(cmd)}\n".encode())
        self._logf.flush()
        t0 = time.monotonic()
        self.proc = spawn(cmd, stdout=self._logf, stderr=subprocess.STDOUT, cwd=str(self.base))
        self.wait_ready(t0, timeout)
        return time.monotonic() - t0

    def spawn_only(self) -> float:
        """Start without waiting; returns the monotonic start time (for the restart test)."""
        self._logf = open(self.log_path, "ab")
        cmd = self.command()
        self._logf.write(f"\n=== restart {' '.join(cmd)}\n".encode())
        self._logf.flush()
        t0 = time.monotonic()
        self.proc = spawn(cmd, stdout=self._logf, stderr=subprocess.STDOUT, cwd=str(self.base))
        return t0

    def wait_ready(self, t0: float, timeout: float) -> None:
        deadline = t0 + timeout
        last = "no reply"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode}\n{self.log_tail()}")
            try:
                reply = four_letter(self.port, "srvr", timeout=2)
                if any(line.startswith("Mode:") for line in reply.splitlines()):
                    return
                last = reply[:200]
            except OSError as e:
                last = repr(e)
            time.sleep(0.05)
        raise RuntimeError(f"{self.label} not ready after {timeout:.0f}s ({last})\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def rss(self) -> int | None:
        return rss_bytes(self.proc.pid) if self.proc and self.proc.poll() is None else None

    def kill(self) -> None:
        kill_proc(self.proc)
        if self._logf:
            self._logf.close()
            self._logf = None

    def close(self) -> None:
        try:
            self.kill()
        finally:
            remove_temp_dir(self.base)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def topology(opts) -> str:
    return f"{opts.ensemble}-node ensemble" if opts.ensemble else "standalone"


class StandaloneTarget:
    """What a throughput/latency run measures: one fresh standalone Server."""

    def __init__(self, kind: str, opts: argparse.Namespace, name: str, clients_to: str):
        self.kind = kind
        self.srv = Server(kind, opts, name)
        self.info: dict = {"topology": "standalone"}

    def start(self) -> None:
        self.info["start_s"] = round(self.srv.start(), 2)

    @property
    def bench_servers(self) -> str:
        return f"{HOST}:{self.srv.port}"

    @property
    def pids(self) -> list[int | None]:
        return [self.srv.pid]

    def rss(self) -> int | None:
        return self.srv.rss()

    def after_run(self) -> str | None:
        return None

    def close(self) -> None:
        self.srv.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _import_ensemble():
    """compat-tests/ensemble.py (and harness.py), as bench/failover.py uses them."""
    d = str(REPO_ROOT / "compat-tests")
    if d not in sys.path:
        sys.path.insert(0, d)
    import ensemble  # noqa: PLC0415 - only needed with --ensemble (it imports pytest)

    return ensemble


def bench_member_factory(opts: argparse.Namespace):
    """Ensemble members with exactly the standalone zoo.cfg lines and command line (same JVM
    flags: -Xmx<zk-heap>, --zk-java-opts, default GC) instead of the compat suite's
    (-Xmx512m -XX:+UseSerialGC, extended types, super digest, 1 s container checks).
    The ensemble adds initLimit=5, syncLimit=2 and the server.N lines; dataDir/myid per member."""
    ensemble = _import_ensemble()

    class BenchMember(ensemble.Member):
        def _default_config_lines(self) -> list[str]:
            return server_cfg_lines(opts, self.kind, self.data_dir, self.port)

        def command(self) -> list[str]:
            return server_command(opts, self.kind, self.conf_path)

    return BenchMember


class EnsembleTarget:
    """A fresh N-member ensemble (compat-tests/ensemble.py) of one kind.

    clients_to="all": warden-bench gets every member's client port (its clients are spread
    round-robin, myid order); "follower": only the lowest-myid follower's; "leader": only the
    leader's.
    """

    def __init__(self, kind: str, opts: argparse.Namespace, name: str, clients_to: str):
        ensemble = _import_ensemble()
        self.kind = kind
        self.opts = opts
        self.clients_to = clients_to
        self.ens = ensemble.Ensemble(opts.ensemble, kind=kind, name=f"bench-{name}",
                                     member_factory=bench_member_factory(opts))
        _ENSEMBLES.append(self.ens)
        self.info: dict = {"topology": topology(opts), "members": list(self.ens.hostports)}
        self._servers: str | None = None

    def start(self) -> None:
        t0 = time.monotonic()
        self.ens.start(timeout=self.opts.ensemble_start_timeout)  # closes itself on failure
        leader = self.ens.wait_stable(60)
        self.info["start_s"] = round(time.monotonic() - t0, 2)
        self.info["leader_myid"] = leader + 1
        if self.clients_to == "all":
            self._servers = self.ens.connect_string
            self.info["client_myids"] = list(range(1, self.ens.n + 1))
        elif self.clients_to == "leader":
            self._servers = self.ens.hostports[leader]
            self.info["client_myids"] = [leader + 1]
        else:
            followers = self.ens.followers()
            if not followers:
                raise RuntimeError(f"no follower serving (modes {self.ens.modes()})")
            self._servers = self.ens.hostports[followers[0]]
            self.info["client_myids"] = [followers[0] + 1]
        self.info["client_role"] = {"all": "all members"}.get(self.clients_to, self.clients_to)

    @property
    def bench_servers(self) -> str:
        return self._servers

    @property
    def pids(self) -> list[int | None]:
        return [self.ens.pid(i) for i in range(self.ens.n)]

    def rss(self) -> int | None:
        vals = [rss_bytes(p) if p else None for p in self.pids]
        return None if any(v is None for v in vals) else sum(vals)

    def after_run(self) -> str | None:
        """Modes after the measured run; a note if the leader changed or a member stopped serving."""
        modes = self.ens.modes()
        self.info["modes_after"] = modes
        expect = self.info.get("leader_myid")
        if modes.count("leader") != 1 or modes.index("leader") + 1 != expect or \
                any(md not in ("leader", "follower") for md in modes):
            return f"ensemble changed during the run: leader was myid {expect}, modes now {modes}"
        return None

    def close(self) -> None:
        try:
            self.ens.close()
        finally:
            if self.ens in _ENSEMBLES:
                _ENSEMBLES.remove(self.ens)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def bench_target(kind: str, opts: argparse.Namespace, name: str, clients_to: str = "all"):
    cls = EnsembleTarget if opts.ensemble else StandaloneTarget
    return cls(kind, opts, name, clients_to)


def sum_cpu_s(pids: list[int | None]) -> float | None:
    vals = [proc_cpu_s(p) for p in pids]
    return None if any(v is None for v in vals) else sum(vals)


# ---------------------------------------------------------------------------
# warden-bench runner
# ---------------------------------------------------------------------------
def run_bench(opts, servers: int | str, args: list[str], timeout: float, tool: str = "warden-bench") -> dict:
    """warden-bench --json (or with tool="cload", bench/cload on ZooKeeper's C client) against
    `servers`: a port on HOST or a host:port,... list."""
    if isinstance(servers, int):
        servers = f"{HOST}:{servers}"
    tls = []
    if opts.tls:
        m = opts.tls_material
        tls = ["--tls-ca", m["ca"], "--tls-cert", m["client_cert"], "--tls-key", m["client_key"]]
    binary = opts.cload_bin_run if tool == "cload" else opts.bench_bin_run
    procs = ["--procs", str(opts.load_procs)] if tool == "cload" else []
    cmd = [binary, "--servers", servers, "--json", *tls, *procs, *args]
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_proc(proc)
        return {"failed": f"warden-bench timed out after {timeout:.0f}s", "cmd": cmd}
    finally:
        if proc.poll() is not None:
            _LIVE.pop(proc.pid, None)
    if proc.returncode != 0:
        return {"failed": f"exit {proc.returncode}: {err.strip()[-500:]}", "cmd": cmd}
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"failed": f"unparseable output: {out[-300:]!r} {err[-300:]!r}", "cmd": cmd}
    res["cmd"] = cmd
    return res


def bench_problems(res: dict) -> str | None:
    """A short note when a bench run failed or saw errors."""
    if "failed" in res:
        return res["failed"]
    notes = []
    if res.get("errors"):
        notes.append(f"errors {res['errors']}")
    if res.get("client_failures"):
        notes.append(f"client failures {res['client_failures'][:3]}")
    if res.get("ensemble_note"):
        notes.append(res["ensemble_note"])
    return "; ".join(notes) or None


# ---------------------------------------------------------------------------
# A minimal jute client (raw wire protocol) for the loader and the restart probe
# ---------------------------------------------------------------------------
OP_CREATE, OP_GETDATA, OP_GETCHILDREN, OP_PING, OP_CLOSE = 1, 4, 8, 11, -11
OPEN_ACL = struct.pack(">iii", 1, 31, 5) + b"world" + struct.pack(">i", 6) + b"anyone"


def _jstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">i", len(b)) + b


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def create_frame(xid: int, path: str, data: bytes) -> bytes:
    body = (
        struct.pack(">ii", xid, OP_CREATE)
        + _jstr(path)
        + struct.pack(">i", len(data))
        + data
        + OPEN_ACL
        + struct.pack(">i", 0)
    )
    return _frame(body)


class JuteConn:
    def __init__(self, port: int, session_timeout_ms: int = 30000, sock_timeout: float = 10.0):
        self.sock = socket.create_connection((HOST, port), timeout=sock_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.xid = 0
        body = struct.pack(">iqiq", 0, 0, session_timeout_ms, 0) + struct.pack(">i", 16) + b"\0" * 16 + b"\0"
        self.sock.sendall(_frame(body))
        resp = self.read_frame()
        _proto, _to, sid = struct.unpack_from(">iiq", resp, 0)
        if sid == 0:
            raise ConnectionError("session refused")
        self.session_id = sid

    def read_frame(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">i", self.buf, 0)
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed by server")
            self.buf += chunk

    def call(self, op: int, payload: bytes) -> tuple[int, bytes]:
        self.xid += 1
        xid = self.xid
        self.sock.sendall(_frame(struct.pack(">ii", xid, op) + payload))
        while True:
            f = self.read_frame()
            rxid, _zxid, err = struct.unpack_from(">iqi", f, 0)
            if rxid == xid:
                return err, f[16:]

    def get_data(self, path: str) -> tuple[int, bytes | None]:
        err, body = self.call(OP_GETDATA, _jstr(path) + b"\0")
        if err != 0:
            return err, None
        (n,) = struct.unpack_from(">i", body, 0)
        return 0, body[4 : 4 + n] if n >= 0 else b""

    def create(self, path: str, data: bytes) -> int:
        err, _ = self.call(OP_CREATE, create_frame(0, path, data)[12:])
        return err

    def close(self) -> None:
        try:
            self.call(OP_CLOSE, b"")
        except OSError:
            pass
        finally:
            self.sock.close()


def _mix(i: int) -> int:
    """A 64-bit scramble of i (Fibonacci hashing): node i's "random" bits, the same every run."""
    return (i * 0x9E3779B97F4A7C15) & 0xFFFF_FFFF_FFFF_FFFF


def node_path(i: int, bucket: int, path_len: int = 0, varied: bool = False) -> str:
    """The memory phase's i-th znode: /warden-mem/b<i // bucket>/n<i % bucket>, its name padded
    to path_len characters in all (0: no padding) with "-ppp..." or, `varied`, with hex digits
    that differ per node (like the UUIDs and hashes real znode names carry)."""
    p = f"/warden-mem/b{i // bucket}/n{i % bucket}"
    if len(p) + 1 >= path_len:
        return p
    pad = path_len - len(p) - 1
    if varied:
        h = f"{_mix(i):016x}{_mix(i + 1):016x}"
        return p + "-" + (h * (pad // len(h) + 1))[:pad]
    return p + "-" + "p" * pad


def node_value(i: int, size: int) -> bytes:
    """A `size`-byte value that differs per node, shaped like what services keep in znodes
    (a small JSON record: address, port, ids), cut or padded with spaces to size."""
    m = _mix(i)
    v = (f'{{"host":"10.{(m >> 8) & 255}.{(m >> 16) & 255}.{(m >> 24) & 255}","port":{1024 + m % 60000},'
         f'"id":{i},"epoch":{(m >> 32) % 100000},"state":"{("ready", "leader", "follower")[m % 3]}"}}').encode()
    return v[:size] if len(v) >= size else v + b" " * (size - len(v))


def _load_range(port: int, indices: range, bucket: int, value: bytes, window: int, out: dict,
                path_len: int = 0, varied: bool = False) -> None:
    """Pipelined creates of node_path(i) for i in indices over one session."""
    conn = JuteConn(port, session_timeout_ms=30000, sock_timeout=120.0)
    sem = threading.Semaphore(window)
    total = len(indices)
    ok = 0
    errors: dict[int, int] = {}
    send_err: list[BaseException] = []

    def sender():
        try:
            xid = 0
            batch = []
            for i in indices:
                sem.acquire()
                xid += 1
                batch.append(create_frame(xid, node_path(i, bucket, path_len, varied),
                                          node_value(i, len(value)) if varied else value))
                if len(batch) >= 64:
                    conn.sock.sendall(b"".join(batch))
                    batch = []
            if batch:
                conn.sock.sendall(b"".join(batch))
        except BaseException as e:  # noqa: BLE001 - reported by the receiver
            send_err.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    received = 0
    buf = b""
    try:
        while received < total:
            if send_err:
                raise send_err[0]
            chunk = conn.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed during load")
            buf = buf + chunk if buf else chunk
            off = 0
            blen = len(buf)
            while blen - off >= 4:
                (n,) = struct.unpack_from(">i", buf, off)
                if blen - off - 4 < n:
                    break
                xid, _zxid, err = struct.unpack_from(">iqi", buf, off + 4)
                off += 4 + n
                if xid < 0:
                    continue  # ping / notification
                received += 1
                sem.release()
                if err == 0:
                    ok += 1
                else:
                    errors[err] = errors.get(err, 0) + 1
            buf = buf[off:]
        t.join(timeout=30)
    except BaseException as e:  # noqa: BLE001
        out.setdefault("failures", []).append(repr(e))
        for _ in range(window):  # unblock the sender so its thread ends (its sendall then fails)
            sem.release()
    finally:
        out["ok"] = out.get("ok", 0) + ok
        for k, v in errors.items():
            out.setdefault("errors", {})[k] = out.get("errors", {}).get(k, 0) + v
        conn.close()


def load_znodes(port: int, n: int, size: int, conns: int, window: int, bucket: int, path_len: int = 0,
                varied: bool = False) -> dict:
    """Create /warden-mem, n/bucket bucket parents, then n nodes of `size` bytes, pipelined
    (`varied`: names and values that differ per node, see node_path and node_value)."""
    value = b"x" * size
    t0 = time.monotonic()
    c = JuteConn(port)
    try:
        c.create("/warden-mem", b"")
        nb = (n + bucket - 1) // bucket
        # Bucket parents: pipelined too (on the same session, simple window).
        for start in range(0, nb, 500):
            frames = [create_frame(j + 1, f"/warden-mem/b{j}", b"") for j in range(start, min(nb, start + 500))]
            c.sock.sendall(b"".join(frames))
            for _ in frames:
                c.read_frame()
    finally:
        c.close()
    out: dict = {}
    threads = []
    per = (n + conns - 1) // conns
    for k in range(conns):
        r = range(k * per, min(n, (k + 1) * per))
        if len(r) == 0:
            continue
        th = threading.Thread(target=_load_range, args=(port, r, bucket, value, window, out, path_len, varied),
                              daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    out["seconds"] = time.monotonic() - t0
    out["rate_per_sec"] = out.get("ok", 0) / out["seconds"] if out["seconds"] > 0 else None
    out["parents"] = (n + bucket - 1) // bucket + 1
    return out


def _parse_frames(buf: bytes) -> tuple[list[bytes], bytes]:
    frames = []
    off = 0
    while len(buf) - off >= 4:
        (n,) = struct.unpack_from(">i", buf, off)
        if len(buf) - off - 4 < n:
            break
        frames.append(buf[off + 4 : off + 4 + n])
        off += 4 + n
    return frames, buf[off:]


def python_watch(port: int, watchers: int, setup_timeout: float = 240.0, event_timeout: float = 60.0) -> dict:
    """`watchers` sessions each getData(watch=true) one node; one setData; time to the last event.

    A raw-jute, single-threaded epoll client (the default; `--watch-tool bench` uses `warden-bench --workload watch`,
    see README). Connections are opened in batches of 256; each does the handshake, then the
    watching getData; the clock starts just before the setData is sent and stops when the last
    NodeDataChanged notification (xid -1) has been read.
    """
    import select

    node = f"/warden-watch-{os.getpid()}-{time.monotonic_ns()}"
    admin = JuteConn(port, session_timeout_ms=30000, sock_timeout=30)
    socks: dict[int, socket.socket] = {}
    bufs: dict[int, bytes] = {}
    state: dict[int, int] = {}  # 0 handshake sent, 1 getData sent, 2 watching, 3 event received
    ep = select.epoll()
    result: dict = {"workload": "watch", "tool": "compare.py python_watch", "watchers_requested": watchers}
    hs = _frame(struct.pack(">iqiq", 0, 0, 30000, 0) + struct.pack(">i", 16) + b"\0" * 16 + b"\0")
    get = _frame(struct.pack(">ii", 1, OP_GETDATA) + _jstr(node) + b"\1")
    failed = 0
    try:
        if admin.create(node, b"") != 0:
            raise RuntimeError("create of the watched node failed")
        t_setup = time.monotonic()
        deadline = t_setup + setup_timeout

        def pump(timeout: float) -> None:
            nonlocal failed
            for fd, _ev in ep.poll(timeout):
                s = socks.get(fd)
                if s is None:
                    continue
                try:
                    chunk = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    ep.unregister(fd)
                    s.close()
                    del socks[fd]
                    failed += 1
                    if state[fd] == 2:
                        count[2] -= 1
                    state[fd] = -1
                    continue
                frames, bufs[fd] = _parse_frames(bufs[fd] + chunk)
                for f in frames:
                    st = state[fd]
                    if st == 0:
                        state[fd] = 1
                        s.sendall(get)
                    elif st == 1:
                        (xid,) = struct.unpack_from(">i", f, 0)
                        if xid == 1:
                            state[fd] = 2
                            count[2] += 1
                    elif st == 2:
                        (xid,) = struct.unpack_from(">i", f, 0)
                        if xid == -1:
                            state[fd] = 3
                            count[3] += 1
                            last[0] = time.monotonic()

        last = [0.0]
        count = {2: 0, 3: 0}  # sessions watching / events received
        opened = 0
        while opened < watchers and time.monotonic() < deadline:
            for _ in range(min(256, watchers - opened)):
                try:
                    s = socket.create_connection((HOST, port), timeout=30)
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    s.sendall(hs)
                    s.setblocking(False)
                except OSError:
                    failed += 1
                    opened += 1
                    continue
                socks[s.fileno()] = s
                bufs[s.fileno()] = b""
                state[s.fileno()] = 0
                ep.register(s.fileno(), select.EPOLLIN)
                opened += 1
            pump(0)
        while time.monotonic() < deadline and count[2] < len(socks):
            pump(0.1)
        ready = count[2]
        result["setup_s"] = time.monotonic() - t_setup
        result["watchers"] = ready
        result["setup_failures"] = failed
        # Fire.
        c0 = time.process_time()
        t0 = time.monotonic()
        admin.xid += 1
        admin.sock.sendall(
            _frame(struct.pack(">ii", admin.xid, 5) + _jstr(node) + struct.pack(">i", 1) + b"x" + struct.pack(">i", -1))
        )
        end = t0 + event_timeout
        while time.monotonic() < end and count[3] < ready:
            pump(0.05)
        events = count[3]
        result["events"] = events
        result["last_event_ms"] = (last[0] - t0) * 1000.0 if events else None
        # CPU this (single-threaded) client spent until the last event: close to last_event_ms
        # means the client, not the server, was the bottleneck.
        result["client_cpu_ms"] = (time.process_time() - c0) * 1000.0
        if events < ready:
            result["note"] = f"only {events} of {ready} events within {event_timeout:.0f}s"
    finally:
        for s in socks.values():
            try:
                s.close()
            except OSError:
                pass
        ep.close()
        admin.close()
    return result


def first_read(port: int, path: str, size: int, deadline: float) -> tuple[bool, str]:
    """Retry connect + getData(path) until it succeeds with `size` bytes or the deadline passes."""
    last = "never tried"
    while time.monotonic() < deadline:
        try:
            c = JuteConn(port, sock_timeout=5.0)
            try:
                err, data = c.get_data(path)
            finally:
                try:
                    c.sock.close()
                except OSError:
                    pass
            if err == 0 and data is not None and len(data) == size:
                return True, "ok"
            last = f"getData err {err}, {None if data is None else len(data)} bytes"
        except (OSError, struct.error) as e:
            last = repr(e)
        time.sleep(0.01)
    return False, last


# ---------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------
def bench_timeout(opts, extra: float = 0.0) -> float:
    return opts.duration * 2 + 180 + extra


def phase_pairs(opts, results: dict, phase: str, rows: list[tuple[str, list[str]]],
                clients_to: str = "all") -> None:
    """Fresh server (or ensemble) per run; per row, rounds go ZooKeeper, Warden, ZooKeeper, Warden, ..."""
    out = results.setdefault(phase, {})
    topo = topology(opts)
    # --load-tool cload drives the throughput rows with ZooKeeper's C client instead.
    tool = opts.load_tool if phase == "throughput" else "warden-bench"
    for name, bargs in rows:
        # Ensemble rows carry the topology in their name (Markdown and JSON); "workload" keeps
        # the bare name for the targets.
        key = name if not opts.ensemble else f"{name} ({topo})"
        if tool == "cload":
            key += " [C client]"
        row = out.setdefault(key, {"workload": name, "topology": topo, "args": bargs,
                                   "runs": {k: [] for k in KINDS}})
        for r in range(opts.rounds):
            for kind in KINDS:
                log(f"{phase} {key}: round {r + 1}/{opts.rounds} {LABEL[kind]}")
                try:
                    tgt = bench_target(kind, opts, f"{phase}-{r}", clients_to)
                except (OSError, RuntimeError) as e:
                    row["runs"][kind].append({"failed": f"setup: {e}"})
                    log(f"  setup failed: {e}")
                    continue
                with tgt:
                    try:
                        tgt.start()
                    except RuntimeError as e:
                        row["runs"][kind].append({"failed": f"start: {e}", "target": tgt.info})
                        log(f"  start failed: {e}")
                        continue
                    if opts.ensemble:
                        log(f"  ensemble up in {tgt.info['start_s']:.1f}s, leader myid {tgt.info['leader_myid']}, "
                            f"warden-bench -> myid {','.join(map(str, tgt.info['client_myids']))}")
                    if opts.warmup > 0:
                        # Same workload, unmeasured, on the same fresh server (JIT / caches warm).
                        wargs = list(bargs)
                        if "--cpu-pids" in wargs:
                            del wargs[wargs.index("--cpu-pids"):wargs.index("--cpu-pids") + 2]
                        wargs[wargs.index("--duration") + 1] = str(opts.warmup)
                        wres = run_bench(opts, tgt.bench_servers, wargs, bench_timeout(opts), tool)
                        if "failed" in wres:
                            log(f"  warmup failed: {wres['failed']}")
                    pids = tgt.pids
                    # "{pids}" in a row's arguments stands for the server PIDs (warden-bench --cpu-pids).
                    run_args = [",".join(str(p) for p in pids if p) if a == "{pids}" else a for a in bargs]
                    cpu0, m0, ru0 = sum_cpu_s(pids), machine_busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.monotonic()
                    res = run_bench(opts, tgt.bench_servers, run_args, bench_timeout(opts), tool)
                    wall = time.monotonic() - t0
                    cpu1, m1, ru1 = sum_cpu_s(pids), machine_busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
                    res["server_rss_end"] = tgt.rss()
                    res["cpu"] = cpu_accounting(wall, cpu0, cpu1, m0, m1, ru0, ru1)
                    if opts.ensemble:
                        res["member_rss_end"] = [rss_bytes(p) if p else None for p in pids]
                        note = tgt.after_run()
                        if note:
                            res["ensemble_note"] = note
                        res["target"] = tgt.info
                    row["runs"][kind].append(res)
                    p = bench_problems(res)
                    if "failed" in res:
                        log(f"  FAILED: {res['failed']}")
                    else:
                        log(
                            f"  {res.get('ops_per_sec', 0):,.0f} ops/s p50 {res.get('p50_ms')} ms "
                            f"p99 {res.get('p99_ms')} ms; cores: server {res['cpu'].get('server_cores', 0):.2f} "
                            f"bench {res['cpu'].get('bench_cores', 0):.2f} other {res['cpu'].get('other_cores', 0):.2f}"
                            + (f"  [{p}]" if p else "")
                        )


def cpu_accounting(wall, cpu0, cpu1, m0, m1, ru0, ru1) -> dict:
    """CPU use during one warden-bench run (whole run incl. its setup), in cores (CPU-seconds per second).

    other = machine busy - server - warden-bench: everything else on the machine (this script
    included, but it is idle while the bench runs), i.e. background noise.
    """
    out: dict = {"wall_s": wall}
    if wall <= 0:
        return out
    if cpu0 is not None and cpu1 is not None:
        out["server_cores"] = (cpu1 - cpu0) / wall
    bench = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    out["bench_cores"] = bench / wall
    if m0 and m1:
        out["machine_cores"] = (m1[0] - m0[0]) / wall
        out["other_cores"] = out["machine_cores"] - out.get("server_cores", 0) - out["bench_cores"]
    return out


def phase_throughput(opts, results):
    rows = [
        (name, [*a, "--clients", "16", "--inflight", "8", "--size", "100", "--duration", str(opts.duration)])
        for name, a in THROUGHPUT_WORKLOADS
    ]
    phase_pairs(opts, results, "throughput", rows)


def phase_bigvalues(opts, results):
    """Issue 43's big values: set and get of 512 KiB values, 16x8, 4 keys per client (so the
    preload stays at 32 MiB); reported with the throughput rows."""
    size = str(512 << 10)
    rows = [
        (f"{w} 512 KiB", ["--workload", w, "--clients", "16", "--inflight", "8", "--size", size, "--keys", "4",
                          "--duration", str(opts.duration)])
        for w in ("set", "get")
    ]
    phase_pairs(opts, results, "throughput", rows)


def phase_wideparent(opts, results, children: int = 100_000, calls: int = 200):
    """Issue 43's wide parent: getChildren of one parent with 100,000 children (names ~6
    bytes, empty data), one session, one call at a time: latency from the request to the
    whole reply (read as one frame, not parsed), and the server's RSS growth over the calls."""
    out = results.setdefault("wideparent", {"children": children, "calls": calls, "runs": {k: [] for k in KINDS}})
    for r in range(opts.rounds):
        for kind in KINDS:
            log(f"wideparent: round {r + 1}/{opts.rounds} {LABEL[kind]} ({children:,} children)")
            with Server(kind, opts, f"wide-{r}") as srv:
                try:
                    srv.start()
                    loaded = load_znodes(srv.port, children, 0, opts.loader_conns, opts.loader_window, children)
                    conn = JuteConn(srv.port, sock_timeout=60.0)
                    payload = _jstr("/warden-mem/b0") + b"\0"
                    for _ in range(20):  # warm-up
                        conn.call(OP_GETCHILDREN, payload)
                    rss0 = srv.rss()
                    times = []
                    size = 0
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        err, body = conn.call(OP_GETCHILDREN, payload)
                        times.append((time.perf_counter() - t0) * 1000)
                        if err != 0:
                            raise RuntimeError(f"getChildren error {err}")
                        size = len(body)
                    conn.close()
                    times.sort()
                    res = {"p50_ms": times[len(times) // 2], "p99_ms": times[int(len(times) * 0.99) - 1],
                           "reply_bytes": size, "loaded": loaded.get("ok"), "rss_growth": (srv.rss() or 0) - (rss0 or 0)}
                except (OSError, RuntimeError, struct.error) as e:
                    res = {"failed": repr(e)}
                out["runs"][kind].append(res)
                log(f"  {res}")


# Overload: the 16x8 throughput runs keep 128 requests in flight, which saturates either
# server here; these keep 10x and 50x that many (clients x inflight).
OVERLOAD_FACTORS = ((10, 80, 16), (50, 400, 16))


def _overload_probe(port: int, stop: threading.Event, out: dict) -> None:
    """A well-behaved client beside the flood: one session (4 s timeout) reading a node every
    100 ms, and a new connection's handshake timed every 500 ms."""
    lat, connects, failures = [], [], []
    conn = None
    try:
        conn = JuteConn(port, session_timeout_ms=4000, sock_timeout=8.0)
        next_connect = time.monotonic()
        while not stop.is_set():
            t0 = time.perf_counter()
            err, _ = conn.call(OP_GETDATA, _jstr("/probe") + b"\0")
            lat.append((time.perf_counter() - t0) * 1000)
            if err != 0:
                failures.append(f"getData error {err}")
                break
            if time.monotonic() >= next_connect:
                next_connect += 0.5
                t0 = time.perf_counter()
                try:
                    c = JuteConn(port, session_timeout_ms=4000, sock_timeout=8.0)
                    connects.append((time.perf_counter() - t0) * 1000)
                    c.close()
                except (OSError, ConnectionError) as e:
                    failures.append(f"connect: {e!r}")
            stop.wait(0.1)
    except (OSError, ConnectionError, struct.error) as e:
        failures.append(f"probe session: {e!r}")
    finally:
        if conn is not None:
            conn.close()
    lat.sort()
    connects.sort()
    out.update({
        "probe_reads": len(lat),
        "probe_p50_ms": lat[len(lat) // 2] if lat else None,
        "probe_p99_ms": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else None,
        "probe_max_ms": lat[-1] if lat else None,
        "connect_p99_ms": connects[max(0, int(len(connects) * 0.99) - 1)] if connects else None,
        "connect_max_ms": connects[-1] if connects else None,
        "probe_failures": failures,
    })


def phase_overload(opts, results):
    """Issue 41's overload protection: a set flood with 10x and 50x the requests in flight of
    the saturating 16x8 run, beside a well-behaved probe session (4 s timeout: reads every
    100 ms, a new connection every 500 ms). Per run: the flood's throughput and errors, the
    probe's read latency and whether it kept its session, handshake latency, and the
    server's peak RSS over its RSS before the flood."""
    out = results.setdefault("overload", {"runs": {}})
    for factor, clients, inflight in OVERLOAD_FACTORS:
        rows = out["runs"].setdefault(f"{factor}x", {k: [] for k in KINDS})
        for r in range(opts.rounds):
            for kind in KINDS:
                log(f"overload {factor}x ({clients} clients x {inflight}): round {r + 1}/{opts.rounds} {LABEL[kind]}")
                with Server(kind, opts, f"overload-{factor}-{r}") as srv:
                    try:
                        srv.start()
                        c = JuteConn(srv.port)
                        if c.create("/probe", b"p") != 0:
                            raise RuntimeError("cannot create /probe")
                        c.close()
                    except (OSError, RuntimeError, ConnectionError, struct.error) as e:
                        rows[kind].append({"failed": f"start: {e!r}"})
                        continue
                    rss0 = srv.rss() or 0
                    peak = [rss0]
                    stop = threading.Event()
                    probe: dict = {}

                    def sample():
                        while not stop.wait(0.25):
                            peak[0] = max(peak[0], srv.rss() or 0)

                    threads = [threading.Thread(target=_overload_probe, args=(srv.port, stop, probe)),
                               threading.Thread(target=sample)]
                    for t in threads:
                        t.start()
                    res = run_bench(opts, srv.port, ["--workload", "set", "--clients", str(clients), "--inflight",
                                                     str(inflight), "--keys", "10", "--size", "100",
                                                     "--duration", str(opts.duration)],
                                    bench_timeout(opts, 120))
                    stop.set()
                    for t in threads:
                        t.join(30)
                    res.update(probe)
                    res["rss_growth"] = peak[0] - rss0
                    res["rss_peak"] = peak[0]
                rows[kind].append(res)
                log(f"  ops/s {res.get('ops_per_sec')} probe p99 {res.get('probe_p99_ms')} ms max "
                    f"{res.get('probe_max_ms')} failures {res.get('probe_failures')} rss +{mib(res.get('rss_growth'))}"
                    f"{' ' + res['failed'] if 'failed' in res else ''}")


def phase_cpu(opts, results):
    """Issue 43's CPU per operation: 90/10 mixed offered at a fixed --cpu-rate (default 20,000
    ops/s) over 16 sessions, CPU-seconds (user + system) of the server(s) over the measured
    window per 1,000 successful operations (warden-bench --rate --cpu-pids)."""
    rows = [(f"mixed 90/10 at {opts.cpu_rate:,} ops/s",
             ["--workload", "mixed", "--read-ratio", "0.9", "--clients", "16", "--inflight", "8", "--size", "100",
              "--rate", str(opts.cpu_rate), "--cpu-pids", "{pids}", "--duration", str(opts.duration)])]
    phase_pairs(opts, results, "cpu", rows)


def phase_storms(opts, results):
    """Issue 43's storms, standalone, a fresh server per run, alternating ZooKeeper and Warden:
    --storm-sessions sessions with an ephemeral each lose their connections at once (session
    timeout --storm-timeout ms), and --storm-nodes nodes watched by 10 sessions each (of
    --storm-nodes / 10 sessions) all set by one multi. Each run also reports an unrelated
    client's read and write latencies during the storm and just before it."""
    out = results.setdefault("storms", {})
    kinds = [
        ("expiry", ["--workload", "expiry-storm", "--clients", str(opts.storm_sessions),
                    "--session-timeout", str(opts.storm_timeout)]),
        ("watch", ["--workload", "watch-storm", "--nodes", str(opts.storm_nodes), "--watchers-per-node", "10",
                   "--clients", str(max(1, opts.storm_nodes // 10))]),
    ]
    for name, bargs in kinds:
        row = out.setdefault(name, {"args": bargs, "runs": {k: [] for k in KINDS}})
        for r in range(opts.rounds):
            for kind in KINDS:
                log(f"storms {name}: round {r + 1}/{opts.rounds} {LABEL[kind]}")
                with Server(kind, opts, f"storm-{name}-{r}") as srv:
                    try:
                        srv.start()
                    except RuntimeError as e:
                        row["runs"][kind].append({"failed": f"start: {e}"})
                        continue
                    res = run_bench(opts, srv.port, bargs, 900)
                    res["server_rss_end"] = srv.rss()
                # Flatten the fields the report compares.
                if "failed" not in res:
                    res["finish_ms"] = res.get("storm_ms") if name == "expiry" else res.get("last_event_ms")
                    for w in ("read", "write"):
                        res[f"probe_{w}_p99_ms"] = ((res.get("probe_storm") or {}).get(w) or {}).get("p99_ms")
                        res[f"probe_{w}_p99_before_ms"] = ((res.get("probe_before") or {}).get(w) or {}).get("p99_ms")
                row["runs"][kind].append(res)
                log(f"  finish {res.get('finish_ms')} ms, probe p99 read {res.get('probe_read_p99_ms')} / write "
                    f"{res.get('probe_write_p99_ms')} ms (before: {res.get('probe_read_p99_before_ms')} / "
                    f"{res.get('probe_write_p99_before_ms')}){' ' + res['failed'] if 'failed' in res else ''}")


def phase_idle(opts, results):
    """Issue 43's idle footprint: a fresh standalone server serves one client (a create and a
    getData), which disconnects; IDLE_SETTLE_S later its RSS (VmRSS, with RssAnon/RssFile).
    Alternating ZooKeeper and Warden over --rounds."""
    out = results.setdefault("idle", {"settle_s": IDLE_SETTLE_S, "runs": {k: [] for k in KINDS}})
    for r in range(opts.rounds):
        for kind in KINDS:
            log(f"idle: round {r + 1}/{opts.rounds} {LABEL[kind]}")
            with Server(kind, opts, f"idle-{r}") as srv:
                try:
                    srv.start()
                    c = JuteConn(srv.port)
                    if c.create("/idle", b"x") != 0 or c.get_data("/idle")[0] != 0:
                        raise RuntimeError("create/getData of /idle failed")
                    c.close()
                except (OSError, RuntimeError, ConnectionError, struct.error) as e:
                    out["runs"][kind].append({"failed": f"start: {e!r}"})
                    continue
                time.sleep(IDLE_SETTLE_S)
                d = rss_detail(srv.pid) or {}
                res = {"rss": d.get("VmRSS"), "detail": d}
            out["runs"][kind].append(res)
            log(f"  RSS {mib(res.get('rss'))} (anon {mib(d.get('RssAnon'))}, file {mib(d.get('RssFile'))})")


def phase_latency(opts, results):
    rows = [
        (w, ["--workload", w, "--clients", "1", "--inflight", "1", "--size", "100", "--duration", str(opts.duration)])
        for w in LATENCY_WORKLOADS
    ]
    # Ensemble: the single session talks to a follower (the lowest-myid one), or with
    # --latency-client leader, to the leader.
    phase_pairs(opts, results, "latency", rows, clients_to=opts.latency_client)


def phase_watch(opts, results):
    out = results.setdefault("watch", {"watchers": opts.watchers, "runs": {k: [] for k in KINDS}})
    for r in range(opts.rounds):
        for kind in KINDS:
            log(f"watch: round {r + 1}/{opts.rounds} {LABEL[kind]} ({opts.watchers} watchers)")
            with Server(kind, opts, f"watch-{r}") as srv:
                try:
                    srv.start()
                except RuntimeError as e:
                    out["runs"][kind].append({"failed": f"start: {e}"})
                    continue
                if opts.watch_tool == "bench":
                    res = run_bench(opts, srv.port, ["--workload", "watch", "--clients", str(opts.watchers)], 900)
                else:
                    try:
                        res = python_watch(srv.port, opts.watchers)
                    except (OSError, RuntimeError, struct.error) as e:
                        res = {"failed": f"python_watch: {e!r}"}
                res["server_rss_end"] = srv.rss()
                out["runs"][kind].append(res)
                log(f"  {res.get('failed') or res}")


# One (source address, server address) pair has ip_local_port_range's ~28,000 ephemeral ports;
# the sessions phase spreads more sessions than this over 127.0.0.2, 127.0.0.3, ... (all of
# 127/8 is loopback on Linux) so that the server's zoo.cfg stays the same one-address setup.
SESSIONS_PER_SOURCE_ADDR = 20_000


def session_source_addrs(n: int) -> list[str]:
    """The loopback source addresses for n sessions: 127.0.0.1 and as many more as needed."""
    return [f"127.0.0.{i + 1}" for i in range(max(1, -(-n // SESSIONS_PER_SOURCE_ADDR)))]


def alternate_rounds(opts, runs: dict, what: str, run) -> None:
    """--rounds rounds of `run(opts, kind, rec)`, ZooKeeper then Warden in each, a fresh record
    appended to runs[kind] for each run."""
    for rnd in range(opts.rounds):
        for kind in KINDS:
            log(f"{what}: round {rnd + 1}/{opts.rounds} {LABEL[kind]}")
            rec: dict = {}
            runs[kind].append(rec)
            run(opts, kind, rec)


def phase_sessions(opts, results):
    """--sessions sessions held --session-hold seconds, a fresh server per run, --rounds rounds
    alternating ZooKeeper and Warden; runs[kind] is one record per round."""
    out = results.setdefault("sessions", {"sessions": opts.sessions, "hold_s": opts.session_hold,
                                          "runs": {k: [] for k in KINDS}})
    alternate_rounds(opts, out["runs"], f"sessions: {opts.sessions} sessions held {opts.session_hold}s",
                     sessions_run)


def sessions_run(opts, kind: str, rec: dict) -> None:
    """One sessions run against a fresh server of `kind`; fills `rec`."""
    n = opts.sessions
    with Server(kind, opts, "sessions") as srv:
        try:
            srv.start()
        except RuntimeError as e:
            rec["failed"] = f"start: {e}"
            return
        time.sleep(2.0)
        rec["rss_before"] = srv.rss()
        rec["rss_before_detail"] = rss_detail(srv.pid)
        if kind == "zookeeper":
            rec["gc_before_error"] = jcmd_gc(srv.pid)
            rec["rss_before_gc"] = srv.rss()
        cmd = [
            opts.bench_bin_run, "--servers", f"{HOST}:{srv.port}", "--json",
            "--workload", "sessions", "--clients", str(n), "--duration", str(opts.session_hold),
            *(["--local-addrs", ",".join(session_source_addrs(n))] if n > SESSIONS_PER_SOURCE_ADDR else []),
        ]
        t0 = time.monotonic()
        bench = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Watch the server's connection count; sample RSS once all N are connected, or
            # once the count has not grown for 10 s (some could not open: the rest are held
            # together from then on, see warden-bench's sessions workload).
            peak = 0
            reached_at = None
            grew_at = time.monotonic()
            while time.monotonic() < t0 + 600 and bench.poll() is None:
                c = srvr_field(srv.port, "Connections")
                if c is not None and c.isdigit():
                    if int(c) > peak:
                        peak, grew_at = int(c), time.monotonic()
                    if int(c) >= n:
                        reached_at = time.monotonic() - t0
                        break
                if peak > 0 and time.monotonic() - grew_at > 10:
                    break
                time.sleep(0.5)
            time.sleep(1.0)
            c = srvr_field(srv.port, "Connections")
            rec["connections_at_sample"] = int(c) if c and c.isdigit() else None
            rec["peak_connections_seen"] = max(peak, rec["connections_at_sample"] or 0)
            rec["all_connected_after_s"] = reached_at
            rec["rss_held"] = srv.rss()
            rec["rss_held_detail"] = rss_detail(srv.pid)
            rec["sampled_at_s"] = time.monotonic() - t0
            if kind == "zookeeper":
                rec["gc_held_error"] = jcmd_gc(srv.pid)
                rec["rss_held_gc"] = srv.rss()
            try:
                stdout, stderr = bench.communicate(timeout=opts.session_hold + 600)
            except subprocess.TimeoutExpired:
                kill_proc(bench)
                rec["bench"] = {"failed": "warden-bench sessions timed out"}
            else:
                if bench.returncode != 0:
                    rec["bench"] = {"failed": f"exit {bench.returncode}: {stderr.strip()[-300:]}"}
                else:
                    try:
                        rec["bench"] = json.loads(stdout.strip().splitlines()[-1])
                    except (ValueError, IndexError):
                        rec["bench"] = {"failed": f"unparseable: {stdout[-200:]!r}"}
        finally:
            kill_proc(bench)
        b = rec.get("bench", {})
        log(f"  held {b.get('held')} / {b.get('opened')}; RSS {mib(rec['rss_before'])} -> {mib(rec['rss_held'])}")


def snapshot_files(kind: str, data_dir: Path) -> list[Path]:
    """The server's complete snapshot files: ZooKeeper's version-2/snapshot.<zxid>, Warden's
    version-2/snapshot-<term>-<index>.bin (written to a temp name, then renamed)."""
    d = data_dir / "version-2"
    pat = "snapshot.*" if kind == "zookeeper" else "snapshot-*.bin"
    try:
        return [f for f in d.glob(pat) if f.is_file()]
    except OSError:
        return []


def settled_snapshot(kind: str, data_dir: Path, newer_than: float, timeout: float = 300.0) -> dict:
    """Waits for a snapshot file modified after `newer_than` (wall clock) whose size has not
    changed for 3 s, and returns its name, size and the seconds waited."""
    t0 = time.monotonic()
    last: tuple[str, int] | None = None
    stable_since = time.monotonic()
    while time.monotonic() - t0 < timeout:
        files = [f for f in snapshot_files(kind, data_dir) if f.stat().st_mtime >= newer_than]
        if files:
            f = max(files, key=lambda x: x.stat().st_mtime)
            cur = (f.name, f.stat().st_size)
            if cur != last:
                last, stable_since = cur, time.monotonic()
            elif time.monotonic() - stable_since >= 3.0:
                return {"file": cur[0], "bytes": cur[1], "waited_s": time.monotonic() - t0}
        time.sleep(0.5)
    return {"failed": f"no settled snapshot newer than the load after {timeout:.0f}s (last seen {last})"}


def phase_memory(opts, results):
    """--znodes znodes loaded into a fresh server per run, --rounds rounds alternating
    ZooKeeper and Warden: RSS, the size of the snapshot that holds them all, and restart
    (kill -9) to the first read. runs[kind] is one record per round."""
    out = results.setdefault("memory", {"znodes": opts.znodes, "size": opts.znode_size, "path_len": opts.path_len,
                                        "varied": opts.varied, "bucket": opts.bucket,
                                        "runs": {k: [] for k in KINDS}})
    alternate_rounds(opts, out["runs"], f"memory: loading {opts.znodes} znodes of {opts.znode_size} bytes",
                     memory_run)


def memory_run(opts, kind: str, rec: dict) -> None:
    """One memory run against a fresh server of `kind`; fills `rec`."""
    n = opts.znodes
    known = node_path(n - 1, opts.bucket, opts.path_len, opts.varied)
    with Server(kind, opts, "memory") as srv:
        try:
            srv.start()
        except RuntimeError as e:
            rec["failed"] = f"start: {e}"
            return
        time.sleep(1.0)
        rec["rss_idle"] = srv.rss()
        rec["rss_idle_detail"] = rss_detail(srv.pid)
        rec["load"] = load_znodes(srv.port, n, opts.znode_size, opts.loader_conns, opts.loader_window, opts.bucket,
                                  opts.path_len, opts.varied)
        log(f"  loaded {rec['load'].get('ok')} in {rec['load']['seconds']:.1f}s "
            f"({rec['load'].get('rate_per_sec') or 0:,.0f}/s) errors={rec['load'].get('errors')} "
            f"failures={rec['load'].get('failures')}")
        nc = srvr_field(srv.port, "Node count")
        rec["node_count"] = int(nc) if nc and nc.isdigit() else nc
        time.sleep(2.0)
        rec["rss_loaded"] = srv.rss()
        rec["rss_loaded_detail"] = rss_detail(srv.pid)
        if kind == "zookeeper":
            rec["gc_error"] = jcmd_gc(srv.pid)
            rec["rss_loaded_gc"] = srv.rss()
            rec["rss_loaded_gc_detail"] = rss_detail(srv.pid)
        log(f"  RSS idle {mib(rec['rss_idle'])} loaded {mib(rec['rss_loaded'])}"
            + (f" after GC {mib(rec.get('rss_loaded_gc'))}" if kind == "zookeeper" else ""))

        # Snapshot size: both servers snapshot every snapCount (100,000) txns, so a burst of
        # setData (3 s of set 16x8 on 16,000 small keys of their own, well over 100,000 txns
        # on either server) after the load makes each write one that holds the whole tree.
        filler_start = time.time()
        rec["snapshot_filler"] = run_bench(opts, srv.port, [
            "--workload", "set", "--clients", "16", "--inflight", "8", "--size", "100",
            "--duration", "3"], timeout=bench_timeout(opts, 120.0))
        rec["snapshot"] = settled_snapshot(kind, srv.data_dir, filler_start)
        log(f"  snapshot after the load: {rec['snapshot']}")

        # Restart: kill -9, start, time to the first successful getData of a known node.
        ok, why = first_read(srv.port, known, opts.znode_size, time.monotonic() + 30)
        rec["pre_restart_read"] = why
        srv.kill()
        t0 = srv.spawn_only()
        ok, why = first_read(srv.port, known, opts.znode_size, t0 + opts.restart_timeout)
        rec["restart_first_read_s"] = (time.monotonic() - t0) if ok else None
        rec["restart_result"] = why
        if ok:
            nc = srvr_field(srv.port, "Node count")
            rec["node_count_after_restart"] = int(nc) if nc and nc.isdigit() else nc
            time.sleep(1.0)
            rec["rss_after_restart"] = srv.rss()
            rec["rss_after_restart_detail"] = rss_detail(srv.pid)
        log(f"  restart: first read after {rec['restart_first_read_s']} s ({why}); "
            f"RSS after restart {mib(rec.get('rss_after_restart'))}")


class SnapshotWatcher:
    """Polls a server's version-2 directory every 10 ms from a thread and records when each
    snapshot written after start() was being written: from the first sight of its file
    (ZooKeeper's snapshot.<zxid>, Warden's snapshot-<term>-<index>.tmp, renamed to .bin when
    durable) to the last poll that saw it grow or change name. Wall-clock seconds."""

    def __init__(self, data_dir: Path):
        self.dir = data_dir / "version-2"
        self.stop_ev = threading.Event()
        self.seen: dict[str, list] = {}  # key -> [first_seen, last_change, (name, size)]
        self.before: set[str] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _key(name: str) -> str:
        for suffix in (".tmp", ".bin"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        return name

    def _scan(self) -> dict[str, tuple[str, int]]:
        out = {}
        try:
            with os.scandir(self.dir) as it:
                for e in it:
                    if e.name.startswith("snapshot"):
                        try:
                            out[self._key(e.name)] = (e.name, e.stat().st_size)
                        except OSError:
                            pass
        except OSError:
            pass
        return out

    def start(self) -> None:
        self.before = set(self._scan())
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_ev.wait(0.01):
            now = time.time()
            for key, state in self._scan().items():
                if key in self.before:
                    continue
                rec = self.seen.get(key)
                if rec is None:
                    self.seen[key] = [now, now, state]
                elif rec[2] != state:
                    rec[1], rec[2] = now, state

    def stop(self) -> list[tuple[float, float]]:
        """The snapshot-writing intervals seen, (start, end) in wall-clock seconds."""
        self.stop_ev.set()
        self.thread.join(5)
        return sorted((first, last + 0.01) for first, last, _ in self.seen.values())


def pct(xs: list[int], q: float) -> float | None:
    """The q-quantile (0..1) of sorted xs (nearest rank), or None if empty."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(q * len(xs) + 0.5) - 1))]


def split_samples(path: Path, start_unix_s: float, intervals: list[tuple[float, float]]) -> dict:
    """warden-bench --samples-out lines ("completion_us latency_us") split into operations that
    overlapped a snapshot interval and those that did not; latency percentiles of each, ms."""
    iv = sorted(((a - start_unix_s) * 1e6, (b - start_unix_s) * 1e6) for a, b in intervals)
    starts = [a for a, _ in iv]
    during: list[int] = []
    outside: list[int] = []
    with open(path) as f:
        for line in f:
            c, lat = map(int, line.split())
            s0 = c - lat
            k = bisect.bisect_left(starts, c)  # iv[:k] began before the op completed
            hit = any(b > s0 for _, b in iv[max(0, k - 4): k])  # snapshots are seconds apart
            (during if hit else outside).append(lat)
    out: dict = {"ops_during": len(during), "ops_outside": len(outside)}
    for name, xs in (("during", during), ("outside", outside), ("all", during + outside)):
        xs.sort()
        for q, label in ((0.5, "p50"), (0.99, "p99"), (0.999, "p999")):
            v = pct(xs, q)
            out[f"{name}_{label}_ms"] = None if v is None else v / 1000.0
        out[f"{name}_max_ms"] = xs[-1] / 1000.0 if xs else None
    return out


def phase_snapload(opts, results):
    """Issue 43's snapshots under load, standalone, a fresh server per run, --rounds rounds
    alternating ZooKeeper and Warden: load --snap-znodes znodes of 100 bytes; measure the
    server's set capacity (16x8, 3 s); then offer --snap-load of that capacity as setData at a
    fixed rate (16 sessions, up to 64 in flight each, latency counted from when each request
    was due) for --duration seconds while the server snapshots on its own every snapCount
    (100,000) txns, as both do by default. Operations are split by whether they overlapped a
    snapshot being written (SnapshotWatcher); p99 and p99.9 of each part."""
    out = results.setdefault("snapload", {"znodes": opts.snap_znodes, "load": opts.snap_load,
                                          "runs": {k: [] for k in KINDS}})
    for rnd in range(opts.rounds):
        for kind in KINDS:
            log(f"snapload: round {rnd + 1}/{opts.rounds} {LABEL[kind]} {opts.snap_znodes} znodes")
            rec: dict = {}
            out["runs"][kind].append(rec)
            with Server(kind, opts, f"snapload-{rnd}") as srv:
                try:
                    srv.start()
                except RuntimeError as e:
                    rec["failed"] = f"start: {e}"
                    continue
                rec["load"] = load_znodes(srv.port, opts.snap_znodes, 100, opts.loader_conns, opts.loader_window,
                                          opts.bucket)
                cap = run_bench(opts, srv.port, ["--workload", "set", "--clients", "16", "--inflight", "8",
                                                 "--size", "100", "--duration", "3"], bench_timeout(opts, 120))
                if "failed" in cap or not cap.get("ops_per_sec"):
                    rec["failed"] = f"capacity run: {cap.get('failed', cap)}"
                    continue
                rec["capacity_ops_per_sec"] = cap["ops_per_sec"]
                rate = cap["ops_per_sec"] * opts.snap_load
                time.sleep(3.0)  # let a snapshot the capacity run started finish
                watcher = SnapshotWatcher(srv.data_dir)
                watcher.start()
                samples = srv.base / "samples.txt"
                res = run_bench(opts, srv.port, ["--workload", "set", "--clients", "16", "--inflight", "64",
                                                 "--size", "100", "--rate", f"{rate:.0f}",
                                                 "--duration", str(opts.duration), "--samples-out", str(samples)],
                                bench_timeout(opts, 120))
                intervals = watcher.stop()
                rec["run"] = res
                if "failed" in res:
                    rec["failed"] = f"loaded run: {res['failed']}"
                    continue
                rec["offered_ops_per_sec"] = rate
                rec["snapshots"] = [(a - res["start_unix_s"], b - a) for a, b in intervals]
                rec.update(split_samples(samples, res["start_unix_s"], intervals))
                durs = [b - a for a, b in intervals]
                log(f"  capacity {cap['ops_per_sec']:,.0f}/s, offered {rate:,.0f}/s, delivered "
                    f"{res.get('ops_per_sec', 0):,.0f}/s; {len(intervals)} snapshots "
                    f"(median {statistics.median(durs) if durs else 0:.2f} s); p99/p99.9 during "
                    f"{rec.get('during_p99_ms')}/{rec.get('during_p999_ms')} ms, outside "
                    f"{rec.get('outside_p99_ms')}/{rec.get('outside_p999_ms')} ms")


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
def ok_runs(runs: list[dict]) -> list[dict | None]:
    return [None if (r is None or "failed" in r) else r for r in runs]


def paired_ratios(zk: list[dict], wd: list[dict], key: str) -> list[float]:
    out = []
    for z, w in zip(ok_runs(zk), ok_runs(wd)):
        if z and w and z.get(key) and w.get(key) is not None:
            out.append(w[key] / z[key])
    return out


def raw_list(runs: list[dict], key: str, digits: int = 3) -> str:
    vals = []
    for r in runs:
        if r is None or "failed" in r:
            vals.append("FAIL")
        else:
            vals.append(fmt_num(r.get(key), digits))
    return ", ".join(vals) or "n/a"


def median_of(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in ok_runs(runs) if r and r.get(key) is not None]
    return statistics.median(xs) if xs else None


def verdict(s, target: float, higher_is_better: bool) -> str:
    if s is None:
        return "n/a"
    mn, med, mx = s
    if higher_is_better:
        if mn >= target:
            return "yes"
        return "median yes, not all rounds" if med >= target else "no"
    if mx <= target:
        return "yes"
    return "median yes, not all rounds" if med <= target else "no"


def per_run_rows(L: list[str], rows, cell) -> None:
    """Appends one table row per (phase, workload): each kind's runs as `cell(run)`, comma-separated."""
    for ph, name, row in rows:
        cells = {k: ", ".join(cell(r) for r in row["runs"][k]) for k in ("zookeeper", "warden")}
        L.append(f"| {ph} | {name} | {cells['zookeeper']} | {cells['warden']} |")
    L.append("")


def fsync_label(opts) -> str:
    """How the run treats fsync, for the report's header: forceSync=no on either side is said
    in bold, so such a figure is never taken for a durable one."""
    warden_off = any(kv.replace(" ", "") == "forceSync=no" for kv in (opts.warden_cfg or []))
    zk_off = "zookeeper.forceSync=no" in (opts.zk_java_opts or "")
    if not (warden_off or zk_off):
        return "fsync on (defaults)"
    off = [name for name, is_off in (("Warden", warden_off), ("ZooKeeper", zk_off)) if is_off]
    return f"**fsync OFF for {' and '.join(off)} (forceSync=no): not a durable configuration**"


def render_markdown(opts, results: dict, meta: dict) -> str:
    L: list[str] = []
    m = meta["machine"]
    topo = topology(opts)
    ens = bool(opts.ensemble)
    L.append(f"# Warden vs Apache ZooKeeper 3.8 — {topo}")
    L.append("")
    L.append(f"- Date: {meta['date']} (took {meta.get('elapsed_s', 0):.0f} s)")
    L.append(f"- Command: `{meta['command']}`")
    L.append(
        f"- Machine: {m.get('nproc')} CPUs ({m.get('cpu_model', 'unknown CPU')}), "
        f"{m.get('mem_total_gib')} GiB RAM, Linux {m.get('kernel')}; "
        f"load average at start {', '.join(f'{x:.2f}' for x in m.get('loadavg_at_start', []))}"
        + (f", at end {', '.join(f'{x:.2f}' for x in meta['loadavg_at_end'])}" if meta.get("loadavg_at_end") else "")
    )
    L.append(f"- Servers: {meta.get('zk_version', 'ZooKeeper ?')} on {m.get('java')} "
             f"(`-Xmx{opts.zk_heap} {opts.zk_java_opts}`, default GC unless set); "
             f"Warden `{meta.get('warden_version', '?')}` ({meta.get('warden_bin')}). "
             + (f"Both as {topo}s (server.1-{opts.ensemble} on 127.0.0.1, one zoo.cfg per member with its own "
                f"clientPort and dataDir/myid, initLimit=5, syncLimit=2 as compat-tests/ensemble.py; every member "
                f"started with the standalone command line above)" if ens else "Both standalone")
             + f", {fsync_label(opts)}, tickTime={TICK_TIME_MS}, maxClientCnxns=0, "
             "127.0.0.1, fresh temp dataDir.")
    L.append(
        "- **Note: the load generator (warden-bench / the Python loader) runs on the same "
        f"{m.get('nproc')} cores as the server under test**, so absolute numbers are lower than on "
        "separate machines and a server that burns less CPU leaves more for the client."
    )
    if meta.get("load_tool"):
        L.append(f"- Throughput load generator: {meta['load_tool']}, same sessions x in flight and values as "
                 "warden-bench's; rows marked [C client].")
    if ens:
        L.append(f"- **{topo}**: throughput clients are spread round-robin over all {opts.ensemble} members "
                 "(`warden-bench --servers` with every client port, myid order); the latency client talks to "
                 + ("the leader" if opts.latency_client == "leader" else
                    "one follower (the lowest-myid follower once the ensemble is stable)")
                 + ". Server CPU and RSS are the sums "
                 "over the members. The targets are the standalone ones, applied with the same ratio logic.")
    L.append(f"- Method: a fresh {'ensemble (new ports, new temp dataDirs)' if ens else 'server (new port, new temp dataDir)'} "
             f"for every {'throughput/latency' if ens else 'throughput/latency/watch'} run; "
             f"per workload the runs alternate ZooKeeper, Warden, ZooKeeper, Warden ... for {opts.rounds} round(s) "
             f"of {opts.duration:g} s each (after {opts.warmup:g} s of unmeasured warm-up of the same workload "
             f"on the same {'ensemble' if ens else 'server'}); the ratio is Warden/ZooKeeper within a round; "
             "min / median / max over rounds.")
    L.append("")

    if "throughput" in results:
        L.append(f"## Throughput — {topo} (16 sessions x 8 in flight"
                 + (f" spread over all {opts.ensemble} servers" if ens else "") + ", 100-byte values)")
        L.append("")
        L.append(f"Target: Warden/ZooKeeper >= {THROUGHPUT_TARGET:g}.")
        L.append("")
        L.append("| workload | ZooKeeper ops/s (median) | Warden ops/s (median) | ratio min / med / max | target met | "
                 "ZooKeeper ops/s per round | Warden ops/s per round | notes |")
        L.append("|---|---:|---:|---|---|---|---|---|")
        for name, row in results["throughput"].items():
            zk, wd = row["runs"]["zookeeper"], row["runs"]["warden"]
            s = stats3(paired_ratios(zk, wd, "ops_per_sec"))
            notes = sorted({f"{LABEL[k]}: {p}" for k in KINDS for r in row["runs"][k] if (p := bench_problems(r))})
            L.append(
                f"| {name} | {fmt_num(median_of(zk, 'ops_per_sec'))} | {fmt_num(median_of(wd, 'ops_per_sec'))} | "
                f"{fmt_stats3(s, 2)} | {verdict(s, THROUGHPUT_TARGET, True)} | "
                f"{raw_list(zk, 'ops_per_sec')} | {raw_list(wd, 'ops_per_sec')} | {'; '.join(notes)[:300]} |"
            )
        L.append("")

    if "latency" in results:
        L.append(f"## Latency — {topo} (1 session x 1 in flight"
                 + ((" on the leader" if opts.latency_client == "leader" else " on a follower (lowest myid)")
                    if ens else "") + ", 100-byte values), ms")
        L.append("")
        L.append("Targets: Warden/ZooKeeper p50 and p99 <= 0.5 for get, <= 0.75 for create and set.")
        L.append("")
        L.append("| op | ZK p50 | Warden p50 | p50 ratio min / med / max | ZK p99 | Warden p99 | p99 ratio min / med / max | "
                 "target | met (p50, p99) | ZK p50 / p99 per round | Warden p50 / p99 per round | notes |")
        L.append("|---|---:|---:|---|---:|---:|---|---|---|---|---|---|")
        for name, row in results["latency"].items():
            zk, wd = row["runs"]["zookeeper"], row["runs"]["warden"]
            s50 = stats3(paired_ratios(zk, wd, "p50_ms"))
            s99 = stats3(paired_ratios(zk, wd, "p99_ms"))
            t = LATENCY_TARGETS.get(row.get("workload", name), 0.75)
            notes = sorted({f"{LABEL[k]}: {p}" for k in KINDS for r in row["runs"][k] if (p := bench_problems(r))})

            def per_round(runs):
                return ", ".join(
                    "FAIL" if (r is None or "failed" in r) else f"{fmt_num(r.get('p50_ms'))} / {fmt_num(r.get('p99_ms'))}"
                    for r in runs
                )

            L.append(
                f"| {name} | {fmt_num(median_of(zk, 'p50_ms'))} | {fmt_num(median_of(wd, 'p50_ms'))} | {fmt_stats3(s50, 3)} | "
                f"{fmt_num(median_of(zk, 'p99_ms'))} | {fmt_num(median_of(wd, 'p99_ms'))} | {fmt_stats3(s99, 3)} | "
                f"<= {t:g} | {verdict(s50, t, False)}, {verdict(s99, t, False)} | {per_round(zk)} | {per_round(wd)} | "
                f"{'; '.join(notes)[:300]} |"
            )
        L.append("")
        L.append("Latency-run throughput (ops/s, 1x1), for reference:")
        L.append("")
        L.append("| op | ZooKeeper per round | Warden per round |")
        L.append("|---|---|---|")
        for name, row in results["latency"].items():
            L.append(f"| {name} | {raw_list(row['runs']['zookeeper'], 'ops_per_sec')} | "
                     f"{raw_list(row['runs']['warden'], 'ops_per_sec')} |")
        L.append("")

    cpu_rows = [(ph, name, row) for ph in ("throughput", "latency") for name, row in results.get(ph, {}).items()]
    if cpu_rows:
        L.append("## CPU during the throughput/latency runs (cores = CPU-seconds per second, whole bench run incl. setup)"
                 + (f" — {topo}, server = sum over the {opts.ensemble} members" if ens else ""))
        L.append("")
        L.append("Per round: server / warden-bench / other. \"other\" is everything else on the machine "
                 f"(busy CPU from /proc/stat minus the two); with {meta['machine'].get('nproc')} cores, "
                 "a large \"other\" means background load distorted that run.")
        L.append("")
        L.append("| phase | workload | ZooKeeper runs | Warden runs |")
        L.append("|---|---|---|---|")

        def cpu_run(r):
            c = (r or {}).get("cpu") or {}
            if "failed" in (r or {"failed": 1}) or not c:
                return "n/a"
            return f"{c.get('server_cores', 0):.2f} / {c.get('bench_cores', 0):.2f} / {c.get('other_cores', 0):.2f}"

        per_run_rows(L, cpu_rows, cpu_run)

    if ens and cpu_rows:
        L.append(f"## {topo}: leader and the server(s) warden-bench talked to, per run")
        L.append("")
        L.append("Per round: leader myid / myid(s) warden-bench connected to / seconds from spawn until one "
                 "leader and every member serving.")
        L.append("")
        L.append("| phase | workload | ZooKeeper runs | Warden runs |")
        L.append("|---|---|---|---|")

        def ens_run(r):
            t = (r or {}).get("target") or {}
            if "leader_myid" not in t:
                return "FAIL"
            return f"{t['leader_myid']} / {','.join(map(str, t.get('client_myids', [])))} / {t.get('start_s', 0):.1f} s"

        per_run_rows(L, cpu_rows, ens_run)

    if "memory" in results:
        mem = results["memory"]
        n = mem["znodes"]
        size = mem.get("size", 100)
        runs = {k: v if isinstance(v, list) else [v] for k, v in mem["runs"].items()}  # older files: one run
        pairs = list(zip(*(runs.get(k, []) for k in KINDS)))
        L.append(f"## Memory: {n:,} znodes of {size} bytes (plus {((n + opts.bucket - 1) // opts.bucket) + 1:,} "
                 f"empty parents), {len(pairs)} round(s)")
        L.append("")
        L.append("Loaded by a pipelined raw-jute Python loader "
                 f"({opts.loader_conns} sessions x {opts.loader_window} in flight), nodes "
                 f"`/warden-mem/b<i/{mem.get('bucket', opts.bucket)}>/n<i%{mem.get('bucket', opts.bucket)}>`"
                 + (f" padded to {mem['path_len']}-character paths" if mem.get("path_len") else "")
                 + (" (names and values varied per node: hex-digit name suffixes, JSON-like records)"
                    if mem.get("varied") else "")
                 + ". RSS = VmRSS from /proc/<pid>/status. Snapshot: the newest complete snapshot file after "
                 "3 s of set 16x8 made each server write one holding the whole tree.")
        L.append("")
        L.append("| server | RSS idle | RSS after load | of which RssAnon / RssFile | RSS after load + forced GC | "
                 "(RSS - idle)/znode | node count (srvr) | load time / rate | snapshot bytes | load errors |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---|---:|---|")

        def snap_bytes(r: dict) -> int | None:
            return (r.get("snapshot") or {}).get("bytes")

        for rnd, pair in enumerate(pairs):
            for kind, r in zip(KINDS, pair):
                if "failed" in r:
                    L.append(f"| {LABEL[kind]} (round {rnd + 1}) | FAILED: {r['failed'][:200]} |||||||||")
                    continue
                ld = r.get("load", {})
                base = r.get("rss_loaded_gc") if kind == "zookeeper" and r.get("rss_loaded_gc") else r.get("rss_loaded")
                per = (base - r["rss_idle"]) / n if base and r.get("rss_idle") else None
                gc = mib(r.get("rss_loaded_gc")) if kind == "zookeeper" else "(no GC)"
                if kind == "zookeeper" and r.get("gc_error"):
                    gc = f"n/a ({r['gc_error']})"
                errs = {k: v for k, v in ld.items() if k in ("errors", "failures")}
                d = r.get("rss_loaded_detail") or {}
                sb = snap_bytes(r)
                snap = f"{sb:,}" if sb else f"n/a ({str((r.get('snapshot') or {}).get('failed', 'not measured'))[:80]})"
                L.append(
                    f"| {LABEL[kind]} (round {rnd + 1}) | {mib(r.get('rss_idle'))} | {mib(r.get('rss_loaded'))} | "
                    f"{mib(d.get('RssAnon'))} / {mib(d.get('RssFile'))} | {gc} | "
                    f"{'n/a' if per is None else f'{per:.0f} B'} | {r.get('node_count')} | "
                    f"{ld.get('seconds', 0):.1f} s / {ld.get('rate_per_sec') or 0:,.0f} per s | {snap} | "
                    f"{errs or 'none'} |"
                )
        L.append("")
        L.append("(RSS - idle)/znode uses ZooKeeper's after-GC RSS. RssFile counts file pages mapped into the process "
                 "(e.g. an mmap'd database file).")
        L.append("")

        def ratio_line(what: str, key) -> None:
            xs = [key(w) / key(z) for z, w in pairs
                  if "failed" not in z and "failed" not in w and key(z) and key(w) is not None]
            if xs:
                L.append(f"- Warden/ZooKeeper {what}, min / median / max over {len(xs)} round(s): "
                         f"{fmt_stats3(stats3(xs))}")

        ratio_line("RSS after load", lambda r: r.get("rss_loaded"))
        ratio_line("RSS after load, ZooKeeper's after a forced GC",
                   lambda r: r.get("rss_loaded_gc") or r.get("rss_loaded"))
        ratio_line("snapshot size on disk", snap_bytes)
        ratio_line("restart to first read", lambda r: r.get("restart_first_read_s"))
        L.append("")
        L.append("## Restart with those znodes present (kill -9, start, first successful getData of a known node)")
        L.append("")
        L.append("| server | process start -> first successful read | node count after restart | RSS after restart | result |")
        L.append("|---|---:|---:|---:|---|")
        for rnd, pair in enumerate(pairs):
            for kind, r in zip(KINDS, pair):
                if "failed" in r:
                    continue
                t = r.get("restart_first_read_s")
                L.append(f"| {LABEL[kind]} (round {rnd + 1}) | {'n/a' if t is None else f'{t:.2f} s'} | "
                         f"{r.get('node_count_after_restart')} | {mib(r.get('rss_after_restart'))} | "
                         f"{r.get('restart_result')} |")
        L.append("")

    if "sessions" in results:
        ss = results["sessions"]
        L.append(f"## Sessions: {ss['sessions']:,} concurrent sessions held {ss['hold_s']:g} s")
        L.append("")
        L.append("All sessions are opened (256 handshakes at a time, each pinged every 10 s from then on), then "
                 "held together for the hold time. RSS sampled once the server reported all sessions connected "
                 "(srvr `Connections:`), or once that count stopped growing for 10 s; per session = "
                 "(RSS held - RSS before) / requested sessions.")
        L.append("")
        L.append("| server | opened | held to the end | connections at sample (peak) | all connected after | "
                 "RSS before | RSS held | RSS per session | after forced GC: before / held / per session |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        n = ss["sessions"]

        def per_session(r: dict) -> float | None:
            return (r["rss_held"] - r["rss_before"]) / n if r.get("rss_held") and r.get("rss_before") else None

        runs = {k: v if isinstance(v, list) else [v] for k, v in ss["runs"].items()}  # older files: one run
        for rnd, pair in enumerate(zip(*(runs.get(k, []) for k in KINDS))):
            for kind, r in zip(KINDS, pair):
                if "failed" in r:
                    L.append(f"| {LABEL[kind]} | FAILED: {r['failed'][:200]} ||||||||")
                    continue
                b = r.get("bench", {})
                per = per_session(r)
                gc = "n/a"
                if kind == "zookeeper":
                    if r.get("rss_held_gc") and r.get("rss_before_gc"):
                        gper = (r["rss_held_gc"] - r["rss_before_gc"]) / n
                        gc = f"{mib(r['rss_before_gc'])} / {mib(r['rss_held_gc'])} / {gper / 1024:.1f} KiB"
                    if r.get("gc_held_error"):
                        gc = f"n/a ({r['gc_held_error']})"
                at = r.get("all_connected_after_s")
                held = b.get("held", f"FAIL: {b.get('failed', '')[:120]}")
                L.append(
                    f"| {LABEL[kind]} (round {rnd + 1}) | {b.get('opened', n)} | {held} | {r.get('connections_at_sample')} "
                    f"({r.get('peak_connections_seen')}) | {'not reached' if at is None else f'{at:.1f} s'} | "
                    f"{mib(r.get('rss_before'))} | {mib(r.get('rss_held'))} | "
                    f"{'n/a' if per is None else f'{per / 1024:.1f} KiB'} | {gc} |"
                )
        L.append("")
        ratios = [per_session(w) / per_session(z) for z, w in zip(runs.get("zookeeper", []), runs.get("warden", []))
                  if "failed" not in z and "failed" not in w and per_session(z) and per_session(w) is not None]
        if ratios:
            L.append(f"Warden/ZooKeeper RSS per session, min / median / max over {len(ratios)} rounds: "
                     f"{fmt_stats3(stats3(ratios))}")
            L.append("")

    if "watch" in results:
        w = results["watch"]
        L.append(f"## Watch fan-out: {w['watchers']:,} watchers on one node, setData -> last event (ms)")
        L.append("")
        if opts.watch_tool == "bench":
            L.append("Client: `warden-bench --workload watch`.")
        else:
            L.append("Client: compare.py's single-threaded raw-jute epoll client (`--watch-tool python`; "
                     "its per-event Python overhead is included in the time, equally for both servers).")
        L.append("")
        L.append("| server | watchers registered per round | events per round | last_event_ms per round | median | "
                 "client CPU ms per round |")
        L.append("|---|---|---|---|---:|---|")
        for kind in KINDS:
            runs = w["runs"][kind]
            L.append(f"| {LABEL[kind]} | {raw_list(runs, 'watchers')} | {raw_list(runs, 'events')} | "
                     f"{raw_list(runs, 'last_event_ms')} | {fmt_num(median_of(runs, 'last_event_ms'))} | "
                     f"{raw_list(runs, 'client_cpu_ms')} |")
        s = stats3(paired_ratios(w["runs"]["zookeeper"], w["runs"]["warden"], "last_event_ms"))
        L.append("")
        L.append(f"Warden/ZooKeeper last-event time, min / median / max: {fmt_stats3(s, 2)}")
        L.append("")

    if "wideparent" in results:
        w = results["wideparent"]
        L.append(f"## getChildren of a parent with {w['children']:,} children ({w['calls']} calls, one at a time)")
        L.append("")
        L.append("| server | p50 ms per round | p99 ms per round | reply bytes | RSS growth over the calls |")
        L.append("|---|---|---|---|---|")
        for kind in KINDS:
            runs = w["runs"][kind]
            L.append(f"| {LABEL[kind]} | {raw_list(runs, 'p50_ms')} | {raw_list(runs, 'p99_ms')} | "
                     f"{raw_list(runs, 'reply_bytes')} | {raw_list(runs, 'rss_growth')} |")
        for field in ("p50_ms", "p99_ms"):
            s = stats3(paired_ratios(w["runs"]["zookeeper"], w["runs"]["warden"], field))
            L.append("")
            L.append(f"Warden/ZooKeeper {field}, min / median / max: {fmt_stats3(s, 3)}")
        L.append("")

    if "overload" in results:
        L.append("## Overload: a set flood at 10x and 50x the saturating requests in flight")
        L.append("")
        L.append("Beside the flood, one probe session (4 s timeout) reads every 100 ms and a new "
                 "connection is opened every 500 ms. RSS growth is the server's peak over its RSS "
                 "before the flood.")
        L.append("")
        L.append("| load | server | flood ops/s per round | probe p99 ms | probe max ms | connect max ms | "
                 "probe failures | RSS growth |")
        L.append("|---|---|---|---|---|---|---|---|")
        for load, by_kind in results["overload"]["runs"].items():
            for kind in KINDS:
                runs = by_kind[kind]
                fails = sum(len(r.get("probe_failures") or []) for r in runs if r)
                growth = ", ".join(mib(r.get("rss_growth")) for r in runs if r)
                L.append(f"| {load} | {LABEL[kind]} | {raw_list(runs, 'ops_per_sec', 0)} | "
                         f"{raw_list(runs, 'probe_p99_ms')} | {raw_list(runs, 'probe_max_ms')} | "
                         f"{raw_list(runs, 'connect_max_ms')} | {fails} | {growth} |")
            for field in ("ops_per_sec", "probe_p99_ms", "rss_growth"):
                st = stats3(paired_ratios(by_kind["zookeeper"], by_kind["warden"], field))
                L.append("")
                L.append(f"{load}: Warden/ZooKeeper {field}, min / median / max: {fmt_stats3(st, 3)}")
            L.append("")
        L.append("")

    if "idle" in results:
        L.append("## Idle footprint — standalone")
        L.append("")
        L.append(f"VmRSS of a fresh server {IDLE_SETTLE_S:g} s after it served one client (a create and a getData). "
                 f"Target: Warden/ZooKeeper <= {IDLE_TARGET:g}.")
        L.append("")
        L.append("| server | RSS per round | RssAnon / RssFile per round |")
        L.append("|---|---|---|")
        for kind in KINDS:
            runs = results["idle"]["runs"][kind]
            detail = ", ".join("FAIL" if (not r or "failed" in r) else
                               f"{mib(r['detail'].get('RssAnon'))} / {mib(r['detail'].get('RssFile'))}" for r in runs)
            L.append(f"| {LABEL[kind]} | {', '.join(mib(r.get('rss')) for r in runs if r)} | {detail} |")
        st = stats3(paired_ratios(results["idle"]["runs"]["zookeeper"], results["idle"]["runs"]["warden"], "rss"))
        L.append("")
        L.append(f"Warden/ZooKeeper RSS, min / median / max: {fmt_stats3(st, 3)} "
                 f"(target met: {verdict(st, IDLE_TARGET, False)})")
        L.append("")

    if "cpu" in results:
        L.append(f"## CPU per operation — {topo}, a fixed offered load")
        L.append("")
        L.append("CPU-seconds (user + system) of the server" + (f"s, summed over the {opts.ensemble} members," if ens else ",")
                 + " over the measured window, per 1,000 successful operations (warden-bench `--rate --cpu-pids`). "
                 f"Target: Warden/ZooKeeper <= {CPU_TARGET:g}.")
        L.append("")
        L.append("| load | ZooKeeper CPU-s/1,000 ops per round | Warden per round | ZooKeeper ops/s | Warden ops/s | "
                 "ratio min / med / max | target met |")
        L.append("|---|---|---|---|---|---|---|")
        for name, row in results["cpu"].items():
            zk, wd = row["runs"]["zookeeper"], row["runs"]["warden"]
            st = stats3(paired_ratios(zk, wd, "cpu_s_per_1000_ops"))
            L.append(f"| {name} | {raw_list(zk, 'cpu_s_per_1000_ops')} | {raw_list(wd, 'cpu_s_per_1000_ops')} | "
                     f"{raw_list(zk, 'ops_per_sec', 0)} | {raw_list(wd, 'ops_per_sec', 0)} | {fmt_stats3(st, 3)} | "
                     f"{verdict(st, CPU_TARGET, False)} |")
        L.append("")

    if "snapload" in results:
        sl = results["snapload"]
        runs = sl["runs"]
        pairs = list(zip(*(runs.get(k, []) for k in KINDS)))
        wruns = [r for r in runs.get("warden", []) if "failed" not in r]
        L.append(f"## Snapshots under load: {sl['znodes']:,} znodes, setData at {sl['load']:.0%} of each server's "
                 f"own capacity, {len(pairs)} round(s)")
        L.append("")
        L.append("Capacity: set 16x8 for 3 s on the loaded server. Then setData offered at a fixed rate (16 sessions, "
                 "up to 64 in flight each; latency counted from when each request was due, so a stall delays the "
                 "sends it holds up and they count). Both servers snapshot on their own every snapCount "
                 "(100,000) txns. An operation is *during* a snapshot if it overlapped the time a snapshot file was "
                 "being written (the data dir polled every 10 ms), *outside* otherwise. Latencies in ms.")
        L.append("")
        L.append("| server | capacity, ops/s | offered / delivered, ops/s | snapshots (median s to write) | "
                 "ops during / outside | during p99 / p99.9 / max | outside p99 / p99.9 |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for rnd, pair in enumerate(pairs):
            for kind, r in zip(KINDS, pair):
                if "failed" in r:
                    L.append(f"| {LABEL[kind]} (round {rnd + 1}) | FAILED: {r['failed'][:200]} ||||||")
                    continue
                snaps = r.get("snapshots") or []
                med = statistics.median([d for _, d in snaps]) if snaps else None
                L.append(
                    f"| {LABEL[kind]} (round {rnd + 1}) | {r['capacity_ops_per_sec']:,.0f} | "
                    f"{r['offered_ops_per_sec']:,.0f} / {r['run'].get('ops_per_sec', 0):,.0f} | "
                    f"{len(snaps)} ({fmt_num(med)}) | {r.get('ops_during'):,} / {r.get('ops_outside'):,} | "
                    f"{fmt_num(r.get('during_p99_ms'))} / {fmt_num(r.get('during_p999_ms'))} / "
                    f"{fmt_num(r.get('during_max_ms'))} | "
                    f"{fmt_num(r.get('outside_p99_ms'))} / {fmt_num(r.get('outside_p999_ms'))} |")
        L.append("")
        if len(KINDS) == 2:
            ok = [(z, w) for z, w in pairs if "failed" not in z and "failed" not in w]

            def ratios(fw, fz) -> list[float]:
                return [fw(w) / fz(z) for z, w in ok if fz(z) and fw(w) is not None]

            for label, key in (("p99", "during_p99_ms"), ("p99.9", "during_p999_ms")):
                st = stats3(ratios(lambda r, k=key: r.get(k), lambda r, k=key: r.get(k)))
                L.append(f"- Warden/ZooKeeper write {label} during a snapshot: {fmt_stats3(st)} "
                         f"(target <= {SNAPLOAD_TARGET}: {verdict(st, SNAPLOAD_TARGET, False)})")
        st = stats3([w["during_p99_ms"] / w["outside_p99_ms"] for w in wruns
                     if w.get("during_p99_ms") is not None and w.get("outside_p99_ms")])
        L.append(f"- Warden's p99 during a snapshot / its own p99 outside one: {fmt_stats3(st)} "
                 f"(target <= {SNAPLOAD_SELF_TARGET}: {verdict(st, SNAPLOAD_SELF_TARGET, False)})")
        L.append("")

    if "storms" in results:
        L.append("## Storms — standalone")
        L.append("")
        L.append("expiry: sessions with one ephemeral each drop their connections at once; finish = the first "
                 "ephemeral's deletion to the last one's (an observer polls the parent every 5 ms). watch: one "
                 "multi sets every watched node; finish = the multi sent to the last event. The probe is an "
                 "unrelated session alternating getData and setData of its own node, one at a time: its p99 "
                 "during the storm (and in the 1.5 s before it). "
                 f"Target: Warden/ZooKeeper <= {STORM_TARGET:g} for finish and both p99s.")
        L.append("")
        L.append("| storm | server | finish ms per round | probe read p99 ms | probe write p99 ms | "
                 "before: read / write p99 ms | storm size |")
        L.append("|---|---|---|---|---|---|---|")
        for name, row in results["storms"].items():
            for kind in KINDS:
                runs = row["runs"][kind]
                before = ", ".join("FAIL" if (not r or "failed" in r) else
                                   f"{fmt_num(r.get('probe_read_p99_before_ms'))} / "
                                   f"{fmt_num(r.get('probe_write_p99_before_ms'))}" for r in runs)
                size = next((f"{r.get('ephemerals')} ephemerals of {r.get('sessions')} sessions" if name == "expiry"
                             else f"{r.get('events')} of {r.get('watches')} events, {r.get('nodes')} nodes"
                             for r in ok_runs(runs) if r), "n/a")
                L.append(f"| {name} | {LABEL[kind]} | {raw_list(runs, 'finish_ms')} | "
                         f"{raw_list(runs, 'probe_read_p99_ms')} | {raw_list(runs, 'probe_write_p99_ms')} | "
                         f"{before} | {size} |")
            for field in ("finish_ms", "probe_read_p99_ms", "probe_write_p99_ms"):
                st = stats3(paired_ratios(row["runs"]["zookeeper"], row["runs"]["warden"], field))
                L.append("")
                L.append(f"{name}: Warden/ZooKeeper {field}, min / median / max: {fmt_stats3(st, 3)} "
                         f"(target met: {verdict(st, STORM_TARGET, False)})")
            L.append("")
        L.append("")

    if meta.get("problems"):
        L.append("## Problems during the run")
        L.append("")
        for p in meta["problems"]:
            L.append(f"- {p}")
        L.append("")
    return "\n".join(L)


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Benchmark Warden against Apache ZooKeeper 3.8 (standalone, or 3-server ensembles "
                    "with --ensemble 3) on this machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds per throughput/latency/watch workload")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of measured load per warden-bench run")
    ap.add_argument("--warmup", type=float, default=3.0,
                    help="seconds of unmeasured load (same workload) on each fresh server before the measured run; 0 = none")
    ap.add_argument("--znodes", type=int, default=1_000_000, help="znodes for the memory/restart phase")
    ap.add_argument("--znode-size", type=int, default=100, help="value bytes of each memory-phase znode")
    ap.add_argument("--varied", action="store_true",
                    help="memory phase: names and values that differ per node (hex name suffixes, JSON-like "
                         "values) instead of repeated bytes, so a compressed snapshot is not flattered")
    ap.add_argument("--snap-znodes", type=int, default=1_000_000, help="znodes (100 bytes) for the snapload phase")
    ap.add_argument("--snap-load", type=float, default=0.5,
                    help="snapload phase: the fraction of each server's own set capacity offered")
    ap.add_argument("--path-len", type=int, default=0,
                    help="memory phase: pad each znode's name so its whole path has this many characters "
                         "(0: /warden-mem/b<i>/n<j> as is, ~20)")
    ap.add_argument("--sessions", type=int, default=10_000, help="concurrent sessions for the sessions phase")
    ap.add_argument("--session-hold", type=float, default=60.0, help="seconds the sessions are held")
    ap.add_argument("--watchers", type=int, default=10_000, help="watchers on one node for the watch phase")
    ap.add_argument("--phases", default=None,
                    help=f"comma-separated subset of {','.join(ALL_PHASES)} (memory includes the restart test); "
                         f"default: all, or {','.join(ENSEMBLE_PHASES)} with --ensemble")
    ap.add_argument("--markdown", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--json", metavar="FILE", help="write all raw numbers here")
    ap.add_argument("--warden-bin", default=str(REPO_ROOT / "target/release/warden"))
    ap.add_argument("--bench-bin", default=str(REPO_ROOT / "target/release/warden-bench"))
    ap.add_argument("--zk-heap", default="2g", help="ZooKeeper -Xmx")
    ap.add_argument("--warden-cfg", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra zoo.cfg lines for Warden only (e.g. runtime.spreadWorkers=false)")
    ap.add_argument("--zk-java-opts", default="", help="extra JVM options for ZooKeeper (e.g. '-XX:+UseSerialGC')")
    ap.add_argument("--listen-backlog", type=int, default=1024,
                    help="clientPortListenBacklog in zoo.cfg for both servers (ZooKeeper's default is 50, which "
                         "makes bursts of connects stall 1 s on SYN retransmits; Warden's is 1024, and before "
                         "2026-12-02 it ignored the key and listened with 128); 0 = leave the key out")
    ap.add_argument("--restart-timeout", type=float, default=600.0, help="seconds to wait for the first read after a restart")
    ap.add_argument("--loader-conns", type=int, default=4, help="sessions used by the znode loader")
    ap.add_argument("--loader-window", type=int, default=500, help="creates in flight per loader session")
    ap.add_argument("--bucket", type=int, default=1000, help="znodes per parent in the memory phase")
    ap.add_argument("--watch-tool", choices=["python", "bench"], default="python",
                    help="watch fan-out client: this script's raw-jute epoll client, or warden-bench --workload watch "
                         "(see bench/README.md)")
    ap.add_argument("--ensemble", type=int, default=0, metavar="N",
                    help="run the throughput and latency phases against N-server ensembles of each kind "
                         "(N=3; 0 = standalone). Throughput clients are spread over all members, the latency "
                         "client talks to the lowest-myid follower (see --latency-client). Other phases are "
                         "standalone-only.")
    ap.add_argument("--latency-client", choices=["follower", "leader"], default="follower",
                    help="with --ensemble: which member the latency phase's single session talks to (ZooKeeper "
                         "clients usually reach a follower: the default)")
    ap.add_argument("--tls", action="store_true",
                    help="clients connect with TLS and a client certificate (both servers: port unification, "
                         "PEM stores made with openssl; ZooKeeper on its Netty factory)")
    ap.add_argument("--load-tool", choices=["warden-bench", "cload"], default="warden-bench",
                    help="load generator of the throughput phase: warden-bench, or bench/cload/cload.c, built here "
                         "with gcc on ZooKeeper's single-threaded C client (Debian's libzookeeper-st2 runtime, headers from libzookeeper-mt-dev): an "
                         "independent client that does its own encoding and session handling")
    ap.add_argument("--load-procs", type=int, default=2,
                    help="with --load-tool cload: processes the sessions are split over (the library runs one "
                         "thread per process, which alone cannot load either server)")
    ap.add_argument("--storm-sessions", type=int, default=10_000,
                    help="storms: sessions (each with one ephemeral) whose connections drop at once")
    ap.add_argument("--storm-timeout", type=int, default=4000,
                    help="storms: their session timeout, ms (ZooKeeper's minimum at tickTime=2000 is 4000)")
    ap.add_argument("--storm-nodes", type=int, default=10_000,
                    help="storms: nodes set by one multi, each watched by 10 sessions (of nodes/10 sessions)")
    ap.add_argument("--cpu-rate", type=int, default=20_000,
                    help="cpu: the fixed offered load, ops/s over all 16 sessions")
    ap.add_argument("--ensemble-start-timeout", type=float, default=180.0,
                    help="seconds to wait for a fresh ensemble to elect a leader and serve on every member")
    ap.add_argument("--servers", choices=["both", "warden"], default="both",
                    help="warden: run Warden alone, to compare Warden builds or settings run after run (only "
                         "the snapload phase, whose self-ratio needs no ZooKeeper)")
    opts = ap.parse_args(argv)
    if opts.ensemble and (opts.ensemble < 3 or opts.ensemble % 2 == 0):
        ap.error("--ensemble N needs an odd N >= 3 (e.g. --ensemble 3), or 0 for standalone")
    if opts.phases is None:
        opts.phases = ",".join(ENSEMBLE_PHASES if opts.ensemble else DEFAULT_STANDALONE_PHASES)
    phases = [p.strip() for p in opts.phases.split(",") if p.strip()]
    bad = [p for p in phases if p not in ALL_PHASES]
    if bad:
        ap.error(f"unknown phase(s) {bad}; choose from {ALL_PHASES}")
    if opts.ensemble and (standalone_only := [p for p in phases if p not in ENSEMBLE_PHASES]):
        ap.error(f"phase(s) {','.join(standalone_only)} are standalone-only; with --ensemble use "
                 f"--phases {','.join(ENSEMBLE_PHASES)} (or a subset), and run the others in a separate "
                 "standalone invocation")
    opts.phase_list = phases
    if opts.servers == "warden":
        if phases != ["snapload"]:
            ap.error("--servers warden runs only --phases snapload")
        KINDS[:] = ["warden"]
    if opts.load_tool == "cload" and opts.tls:
        ap.error("--load-tool cload has no TLS; leave out --tls")
    if opts.rounds < 1 or opts.duration <= 0 or opts.znodes < 1 or opts.sessions < 1 or opts.watchers < 1:
        ap.error("--rounds, --duration, --znodes, --sessions and --watchers must be positive")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    for b in (opts.warden_bin, opts.bench_bin):
        if not os.access(b, os.X_OK):
            print(f"compare.py: {b} is not an executable file (build with cargo build --release"
                  " && cargo build --release -p warden-bench)", file=sys.stderr)
            return 2
    if not os.path.exists(ZK_JAVA) or not os.path.exists("/usr/share/java/zookeeper.jar"):
        print("compare.py: Debian's zookeeper package / java not found", file=sys.stderr)
        return 2
    if opts.ensemble:
        try:
            _import_ensemble()
        except ImportError as e:
            print(f"compare.py: --ensemble needs compat-tests/ensemble.py and its imports ({e})", file=sys.stderr)
            return 2

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    atexit.register(cleanup_all)
    # Our own fd limit too (the children raise theirs in _child_setup).
    try:
        _s, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    need = max(opts.sessions, opts.watchers, opts.storm_sessions) + 200
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < need:
        try:  # as root, raise the hard limit itself (children inherit it)
            resource.setrlimit(resource.RLIMIT_NOFILE, (need + 1000, need + 1000))
            hard = need + 1000
        except (ValueError, OSError):
            pass
    problems: list[str] = []
    if hard != resource.RLIM_INFINITY and hard < need:
        problems.append(f"RLIMIT_NOFILE hard limit {hard} < {need} needed for {max(opts.sessions, opts.watchers)} sessions")

    t_start = time.monotonic()
    meta = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "machine": machine_info(),
        "topology": topology(opts),
        "problems": problems,
    }
    results: dict = {}
    try:
        # Run private copies of the binaries so a concurrent cargo build cannot swap them mid-run.
        bindir = make_temp_dir("warden-bench-bin-")
        opts.warden_bin_run = str(bindir / "warden")
        opts.bench_bin_run = str(bindir / "warden-bench")
        shutil.copy2(opts.warden_bin, opts.warden_bin_run)
        shutil.copy2(opts.bench_bin, opts.bench_bin_run)
        # compat-tests/harness.py checks WARDEN_BIN before it starts a member (whose command
        # line is ours): point it at the binary the members run, not at a debug build.
        os.environ["WARDEN_BIN"] = opts.warden_bin_run
        opts.cload_bin_run = str(bindir / "cload")
        if opts.load_tool == "cload":
            build = subprocess.run(["gcc", "-O2", "-o", opts.cload_bin_run, str(REPO_ROOT / "bench/cload/cload.c"),
                                    "-l:libzookeeper_st.so.2"], capture_output=True, text=True)
            if build.returncode != 0:
                raise RuntimeError(f"cannot build bench/cload/cload.c (gcc, libzookeeper-mt-dev and libzookeeper-st2 needed): "
                                   f"{build.stderr.strip()[-500:]}")
            meta["load_tool"] = (f"cload (bench/cload/cload.c on ZooKeeper's C client, libzookeeper_st), sessions "
                                 f"split over {opts.load_procs} processes")
        if opts.tls:
            opts.tls_material = make_tls_material(make_temp_dir("warden-bench-tls-"))
            meta["tls"] = "client port with TLS (port unification), client certificates required"
        meta["warden_bin"] = f"{opts.warden_bin}, mtime {time.ctime(os.path.getmtime(opts.warden_bin))}"
        try:
            meta["warden_version"] = subprocess.run(
                [opts.warden_bin_run, "--version"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            meta["warden_version"] = "?"
        # Version strings from srvr of a short-lived ZooKeeper.
        with Server("zookeeper", opts, "probe") as z:
            z.start()
            meta["zk_version"] = (srvr_field(z.port, "Zookeeper version") or "?").split(",")[0]
            meta["zk_version"] = "ZooKeeper " + meta["zk_version"]

        phase_fns = {
            "throughput": phase_throughput,
            "bigvalues": phase_bigvalues,
            "wideparent": phase_wideparent,
            "overload": phase_overload,
            "storms": phase_storms,
            "idle": phase_idle,
            "cpu": phase_cpu,
            "latency": phase_latency,
            "watch": phase_watch,
            "sessions": phase_sessions,
            "memory": phase_memory,
            "snapload": phase_snapload,
        }
        for ph in opts.phase_list:
            try:
                phase_fns[ph](opts, results)
            except (KeyboardInterrupt, BenchAbort):
                raise
            except Exception as e:  # noqa: BLE001 - report and go on with the next phase
                import traceback

                problems.append(f"phase {ph} aborted: {e!r}")
                log(f"phase {ph} aborted:\n{traceback.format_exc()}")
    except (KeyboardInterrupt, BenchAbort) as e:
        problems.append(f"interrupted ({e!r}); partial results")
        log("interrupted; killing servers and writing partial results")
    finally:
        cleanup_all()
        meta["elapsed_s"] = time.monotonic() - t_start
        meta["loadavg_at_end"] = os.getloadavg()
        md = render_markdown(opts, results, meta)
        print(md)
        if opts.markdown:
            Path(opts.markdown).write_text(md + "\n")
        if opts.json:
            Path(opts.json).write_text(json.dumps({"meta": meta, "options": {
                k: v for k, v in vars(opts).items() if isinstance(v, (int, float, str, list, bool, type(None)))
            }, "results": results}, indent=2, default=str) + "\n")
    return 1 if any("interrupted" in p for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
