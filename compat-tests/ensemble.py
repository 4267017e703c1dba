"""Start and stop a multi-server ensemble (Warden or Apache ZooKeeper 3.8) on 127.0.0.1.

`Ensemble(n)` writes one zoo.cfg per member (identical except `dataDir`,
`clientPort`), all with the same `server.N=127.0.0.1:<peerPort>:<electionPort>`
lines, writes `dataDir/myid`, starts every member (`warden --config zoo.cfg`,
or ZooKeeper's QuorumPeerMain with the same -D properties the single-server
harness uses) and waits until exactly one member reports `Mode: leader` and
every running member serves (`Mode: leader|follower` in `srvr`).

Each member is a `harness.Server` (same log/dir/kill-by-PID handling); the
ensemble adds the quorum lines, `myid`, and a non-blocking start. Processes
are SIGKILLed by PID and temp dirs removed in `close()`, at interpreter exit
(harness's atexit hook) and through PR_SET_PDEATHSIG if pytest dies.

API (indices are 0-based; member i has myid i+1):
  ens = Ensemble(3, kind=None, extra_cfg=None).start()   # or `with Ensemble(3) as ens:`
                       (member_factory=callable(kind, name, myid, cfg, client_port) builds the
                       members instead of Member, e.g. a subclass with another command line)
  ens.hostports        ["127.0.0.1:P1", ...]
  ens.connect_string   "127.0.0.1:P1,127.0.0.1:P2,..."
  ens.mode(i)          "leader" | "follower" | "not serving" | "down" | "stopped" | "no reply"
  ens.leader()         index of the single leader (waits for a stable ensemble)
  ens.followers()      indices of the running, serving non-leaders
  ens.wait_stable()    wait until exactly one leader and every running, non-SIGSTOPped member serves
  ens.kill(i)          SIGKILL member i        ens.stop(i)   SIGTERM (SIGKILL after 15 s)
  ens.start(i)         restart member i on the same ports and data dir (wait=True: until it serves;
                       ens.start() with no index starts the whole ensemble)
  ens.sigstop(i) / ens.sigcont(i)   freeze / thaw member i (pid: ens.pid(i))
  ens.add_member(extra_cfg=None) -> i   one more member (myid i+1) on new ports, not started: its
                       zoo.cfg holds the others' server.N lines and its own; the caller gives it its
                       membership (e.g. a dynamic file) and starts it with ens.start(i)
  ens.per_member(key, values)   zoo.cfg `key`=values[i] on member i, before start (own ports)
  ens.close()          SIGKILL everything, remove temp dirs

Fixtures (re-exported by conftest.py): `ensemble3` (function scope),
`shared_ensemble3` (module scope), `ensemble5` (function scope), and `clients`:
make(hosts, timeout=4.0, **kw) -> a started KazooClient trying the hosts in order, stopped
at teardown. Kind is
COMPAT_SERVER (warden | zookeeper).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

import harness

# ZooKeeper: followers must connect within initLimit ticks and stay within syncLimit
# ticks of the leader; with tickTime=2000, syncLimit=2 means a leader that loses its
# quorum (or a follower that loses its leader) gives up after about 4 s.
ZK_QUORUM_CFG = {"initLimit": "5", "syncLimit": "2"}


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now (held open together, then released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((harness.HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def srvr_mode(hostport: str, timeout: float = 2.0) -> str:
    """`leader`, `follower`, `standalone`, `not serving`, or `no reply` from one `srvr`."""
    try:
        reply = harness.four_letter(hostport, "srvr", timeout=timeout)
    except OSError:
        return "no reply"
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    if "not currently serving" in reply:
        return "not serving"
    return "no reply"


class Member(harness.Server):
    """One ensemble member: a harness.Server plus myid and a start that need not wait."""

    def __init__(self, kind, name, myid, extra_cfg, client_port):
        self.myid = myid
        super().__init__(kind, name=name, extra_cfg=extra_cfg)
        # Use the port the ensemble reserved together with the peer ports (all distinct).
        self.port = client_port
        self.hostport = f"{self.host}:{self.port}"
        self._write_config()
        with open(os.path.join(self.data_dir, "myid"), "w") as f:
            f.write(f"{myid}\n")

    def start(self, timeout: float | None = None, wait: bool = True) -> "Member":
        if wait:
            return super().start(timeout)
        # harness.Server.start always waits; skip the wait by swapping it out for one call.
        self._wait_ready = lambda _timeout: None  # type: ignore[method-assign]
        try:
            return super().start(timeout)
        finally:
            del self._wait_ready

    def _wait_ready(self, timeout: float) -> None:
        # A member is ready when it serves as leader or follower (not merely answers ruok).
        deadline = time.monotonic() + timeout
        mode = "no reply"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise harness.ServerStartError(
                    f"{self.kind} member {self.myid} exited with code {self.proc.returncode}.\n"
                    f"{self.describe_log()}"
                )
            mode = srvr_mode(self.hostport)
            if mode in ("leader", "follower"):
                return
            time.sleep(0.1)
        raise harness.ServerStartError(
            f"{self.kind} member {self.myid} on {self.hostport} not serving after {timeout:.0f}s "
            f"(srvr mode: {mode}).\n{self.describe_log()}"
        )


class Ensemble:
    def __init__(self, n: int, kind: str | None = None, name: str = "ens",
                 extra_cfg: dict[str, object] | None = None, member_factory=None,
                 hosts: list[str] | None = None):
        # member_factory(kind, name, myid, cfg, client_port) -> Member (or a subclass):
        # lets a caller such as bench/compare.py change a member's command line or
        # default zoo.cfg lines; None = Member, as the compat tests use. hosts: each
        # member's address for the server.N lines (netns.NetEnsemble); default all HOST.
        self.n = n
        self.kind = kind or harness.default_kind()
        ports = free_ports(3 * n)
        self.peer_ports = ports[:n]
        self.election_ports = ports[n:2 * n]
        client_ports = ports[2 * n:]
        quorum = {
            f"server.{i + 1}": f"{(hosts or [harness.HOST] * n)[i]}:{self.peer_ports[i]}:{self.election_ports[i]}"
            for i in range(n)
        }
        cfg: dict[str, object] = {**ZK_QUORUM_CFG, **quorum}
        cfg.update(extra_cfg or {})
        self._cfg, self._name, self._member_factory = cfg, name, member_factory  # for add_member
        self.members: list[Member] = []
        self._stopped: set[int] = set()  # SIGSTOPped
        self._down: set[int] = set()  # stopped or killed on purpose (not yet restarted)
        try:
            for i in range(n):
                self.members.append((member_factory or Member)(self.kind, f"{name}-{i + 1}", i + 1, cfg,
                                                               client_ports[i]))
        except BaseException:
            self.close()
            raise
        self.hostports = [m.hostport for m in self.members]
        self.connect_string = ",".join(self.hostports)

    def per_member(self, key: str, values: list) -> "Ensemble":
        """Sets zoo.cfg `key` to values[i] on member i, before they start (each its own admin or
        metrics port)."""
        for m, v in zip(self.members, values):
            m.extra_cfg[key] = str(v)
            m._write_config()
        return self

    def add_member(self, extra_cfg: dict[str, object] | None = None) -> int:
        """Append member n+1 (index n) on three new free ports, not started; return its index.

        Its zoo.cfg is the ensemble's (every server.N line, its own added) with extra_cfg on
        top. Used to grow an ensemble by reconfig: the caller writes the membership the new
        member starts with, then ens.start(i, wait=...)."""
        taken = {*self.peer_ports, *self.election_ports, *(m.port for m in self.members)}
        for _ in range(20):
            ports = free_ports(3)
            if not taken.intersection(ports):
                break
        else:
            raise RuntimeError(f"no three free ports outside {sorted(taken)}")
        i = self.n
        peer, election, client = ports
        cfg = {**self._cfg, f"server.{i + 1}": f"{harness.HOST}:{peer}:{election}", **(extra_cfg or {})}
        member = (self._member_factory or Member)(self.kind, f"{self._name}-{i + 1}", i + 1, cfg, client)
        self.members.append(member)
        self.peer_ports.append(peer)
        self.election_ports.append(election)
        self.n += 1
        self.hostports = [m.hostport for m in self.members]
        self.connect_string = ",".join(self.hostports)
        return i

    # -- lifecycle -------------------------------------------------------
    def start(self, i: int | None = None, wait: bool = True, timeout: float | None = None) -> "Ensemble":
        """start(): start every member and wait for one leader and all serving (on failure,
        clean up and raise). start(i): restart member i on its ports and data dir; with
        wait, until it serves."""
        timeout = timeout or float(os.environ.get("COMPAT_START_TIMEOUT", "60"))
        if i is not None:
            self._down.discard(i)
            self.members[i].start(timeout=timeout, wait=wait)
            return self
        try:
            for m in self.members:
                m.start(wait=False)
            self.wait_stable(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def wait_stable(self, timeout: float = 30.0) -> int:
        """Wait until exactly one running member is leader and every running one serves; return the leader."""
        deadline = time.monotonic() + timeout
        modes: list[str] = []
        while True:
            modes = [self.mode(i) for i in range(self.n)]
            live = [md for md in modes if md not in ("down", "stopped")]
            for i, m in enumerate(self.members):
                if m.proc is not None and m.proc.poll() is not None and i not in self._down:
                    raise harness.ServerStartError(
                        f"member {i + 1} exited by itself with code {m.proc.returncode}.\n{m.describe_log()}")
            if live and all(md in ("leader", "follower") for md in live) and modes.count("leader") == 1:
                return modes.index("leader")
            if time.monotonic() > deadline:
                raise harness.ServerStartError(
                    f"{self.kind} ensemble not stable after {timeout:.0f}s: modes {modes}\n"
                    + "\n".join(m.describe_log(20) for m in self.members)
                )
            time.sleep(0.1)

    def mode(self, i: int) -> str:
        m = self.members[i]
        if not m.running:
            return "down"
        if i in self._stopped:
            return "stopped"
        return srvr_mode(m.hostport)

    def modes(self) -> list[str]:
        return [self.mode(i) for i in range(self.n)]

    def leader(self, timeout: float = 30.0) -> int:
        return self.wait_stable(timeout)

    def followers(self) -> list[int]:
        return [i for i in range(self.n) if self.mode(i) == "follower"]

    def pid(self, i: int) -> int | None:
        return self.members[i].pid

    def kill(self, i: int) -> None:
        """SIGKILL member i (by PID)."""
        self._stopped.discard(i)
        self._down.add(i)
        self.members[i].kill()

    def stop(self, i: int) -> None:
        """SIGTERM member i; SIGKILL if it is still there after 15 s."""
        if i in self._stopped:
            self.sigcont(i)
        self._down.add(i)
        self.members[i].stop()

    def sigstop(self, i: int) -> None:
        """Freeze member i with SIGSTOP (a process that stops answering, like a partitioned host)."""
        os.kill(self.members[i].pid, signal.SIGSTOP)
        self._stopped.add(i)

    def sigcont(self, i: int) -> None:
        os.kill(self.members[i].pid, signal.SIGCONT)
        self._stopped.discard(i)

    def close(self) -> None:
        """SIGKILL every member by PID (frozen ones too) and remove the temp dirs."""
        keep = os.environ.get("COMPAT_KEEP_LOGS")
        for i, m in enumerate(self.members):
            try:
                m.kill()
            except Exception:
                pass
            if keep:
                try:
                    os.makedirs(keep, exist_ok=True)
                    shutil.copy(m.log_path, os.path.join(keep, f"{Path(m.base_dir).name}.log"))
                except OSError:
                    pass
            harness.remember_log(m)
            shutil.rmtree(m.base_dir, ignore_errors=True)
        self._stopped.clear()

    def __enter__(self) -> "Ensemble":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Ensemble {self.kind} x{self.n} {self.connect_string}>"


def _start_ensemble(n: int, name: str, extra_cfg=None) -> Ensemble:
    return Ensemble(n, name=name, extra_cfg=extra_cfg).start()


def _fixture(n: int, name: str):
    ens = _start_ensemble(n, name)
    try:
        yield ens
    finally:
        ens.close()


def _label(request) -> str:
    return request.node.name[:28].replace("/", "_").replace("[", "-").replace("]", "")


@pytest.fixture
def ensemble3(request):
    """A fresh 3-member ensemble (COMPAT_SERVER kind) for one test."""
    yield from _fixture(3, _label(request))


@pytest.fixture(scope="module")
def shared_ensemble3(request):
    """One 3-member ensemble for a whole module; tests must use distinct paths and leave it whole."""
    yield from _fixture(3, request.module.__name__.rsplit(".", 1)[-1][:28])


@pytest.fixture
def ensemble5(request):
    """A fresh 5-member ensemble for one test."""
    yield from _fixture(5, _label(request))


@pytest.fixture
def clients():
    """make(hosts, **kw) -> started KazooClient (hosts tried in order); all stopped at teardown."""
    from kazoo.client import KazooClient  # here, so bench scripts importing this need no kazoo

    made: list = []

    def make(hosts, timeout: float = 4.0, start_timeout: float = 15, **kw):
        if isinstance(hosts, (list, tuple)):
            hosts = ",".join(hosts)
        c = KazooClient(
            hosts,
            timeout=timeout,
            randomize_hosts=False,
            connection_retry=dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5),
            **kw,
        )
        made.append(c)
        c.start(timeout=start_timeout)
        return c

    yield make
    for c in made:
        try:
            c.stop()
            c.close()
        except Exception:
            pass
