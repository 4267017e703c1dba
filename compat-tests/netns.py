"""Real network partitions between the members of an ensemble on one machine (root only).

Each member runs in a network namespace of its own, with its own address on a private /24,
joined by a Linux bridge that lives in one more namespace (not the root namespace, whose
FORWARD policy the Docker engine sets to DROP). The test process stays in the root namespace
and reaches every member through one more veth pair into the bridge, so clients and
four-letter words work as usual; only member-to-member traffic is cut. A cut is an iptables
DROP inside the receiving member's namespace (the root namespace's firewall is never
touched); a heal flushes them.

    net = Net(3)                        # namespaces, bridge, addresses 10.213.K.1..3
    ens = NetEnsemble(net, 3, extra_cfg={...}).start()   # an ensemble.Ensemble on them
    net.isolate(1)                      # member index 1 cut off from the others, both ways
    net.split([0], [1, 2]); net.cut(0, 1)  # a split; a one-way drop (0's packets to 1)
    net.heal()
    ens.close(); net.close()            # (also at exit, and on SIGTERM/SIGINT)

Members are signalled by PID as before: `ip netns exec` execs, so the PID is the server's.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess

import ensemble
import harness

_OPEN: list["Net"] = []


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"wnprobe{os.getpid() % 100000}"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    if _run("which", "iptables", check=False).returncode != 0:
        return "iptables is not installed"
    return None


class Net:
    """`n` member namespaces on one bridge, reachable from the root namespace."""

    def __init__(self, n: int):
        self.n = n
        pid = os.getpid()
        self.tag = f"{pid % 100000:05d}{len(_OPEN)}"
        self.subnet = f"10.213.{20 + (pid + len(_OPEN)) % 200}"
        self.bridge_ns = f"wn{self.tag}b"
        self.ns = [f"wn{self.tag}m{i + 1}" for i in range(n)]
        self.root_if = f"wn{self.tag}r"
        self.client_addr = f"{self.subnet}.254"
        self._made: list[str] = []
        _OPEN.append(self)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        b = self.bridge_ns
        _run("ip", "netns", "add", b)
        self._made.append(b)
        _run("ip", "-n", b, "link", "set", "lo", "up")
        _run("ip", "-n", b, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", b, "link", "set", "br0", "up")
        for i, ns in enumerate(self.ns):
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            inner, outer = f"wn{self.tag}a{i + 1}", f"wn{self.tag}c{i + 1}"
            _run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "netns", b)
            _run("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", b, "link", "set", outer, "master", "br0")
            _run("ip", "-n", b, "link", "set", outer, "up")
        peer = f"wn{self.tag}q"
        _run("ip", "link", "add", self.root_if, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", b)
        _run("ip", "-n", b, "link", "set", peer, "master", "br0")
        _run("ip", "-n", b, "link", "set", peer, "up")
        _run("ip", "addr", "add", f"{self.client_addr}/24", "dev", self.root_if)
        _run("ip", "link", "set", self.root_if, "up")

    def addr(self, i: int) -> str:
        """Member i's address (0-based index)."""
        return f"{self.subnet}.{i + 1}"

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program in member i's namespace."""
        return ["ip", "netns", "exec", self.ns[i]]

    # Set by the nemesis before members start, for the disk faults: the slow-disk shim
    # (compat-tests/slowsync.c, built), preloaded into every member.
    slowsync_shim: str | None = None
    # Set by the nemesis before members start, for the clock faults: the name of the file in
    # each member's directory from which libfaketime (harness.FAKETIME_LIB) reads its offset.
    faketime_file: str | None = None

    def member_env(self, base_dir) -> dict[str, str]:
        """Environment for a member whose files are in `base_dir`: the disk shim and the file the
        nemesis writes to slow the member's disk (ms added to each fsync); libfaketime and the
        file that moves its wall clock."""
        env: dict[str, str] = {}
        preload = []
        if self.slowsync_shim:
            preload.append(self.slowsync_shim)
            env["SLOWSYNC_FILE"] = os.path.join(str(base_dir), "slowsync_ms")
        if self.faketime_file:
            preload.append(harness.FAKETIME_LIB)
            env.update(harness.faketime_env(os.path.join(str(base_dir), self.faketime_file)))
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        return env

    # -- faults ------------------------------------------------------------
    def cut(self, src: int, dst: int) -> None:
        """Drops what member `src` sends to member `dst` (one way)."""
        _run("ip", "netns", "exec", self.ns[dst], "iptables", "-A", "INPUT", "-s", self.addr(src), "-j", "DROP")

    def isolate(self, i: int) -> None:
        """Member i hears nobody and nobody hears it (clients still reach every member)."""
        for j in range(self.n):
            if j != i:
                self.cut(i, j)
                self.cut(j, i)

    def split(self, a: list[int], b: list[int]) -> None:
        """Nothing crosses between the groups `a` and `b`, either way."""
        for i in a:
            for j in b:
                self.cut(i, j)
                self.cut(j, i)

    def heal(self) -> None:
        """Removes every cut."""
        for ns in self.ns:
            _run("ip", "netns", "exec", ns, "iptables", "-F", "INPUT", check=False)

    def close(self) -> None:
        """Deletes the namespaces and the root veth (idempotent)."""
        _run("ip", "link", "del", self.root_if, check=False)
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()
        if self in _OPEN:
            _OPEN.remove(self)


def _close_all(*_args) -> None:
    for net in list(_OPEN):
        net.close()


atexit.register(_close_all)
for _sig in (signal.SIGTERM,):
    _previous = signal.getsignal(_sig)

    def _on_signal(signum, frame, _previous=_previous):
        _close_all()
        if callable(_previous):
            _previous(signum, frame)
        else:
            raise SystemExit(128 + signum)

    signal.signal(_sig, _on_signal)


class NetMember(ensemble.Member):
    """An ensemble member that listens on its namespace's address and runs inside it."""

    def __init__(self, kind, name, myid, extra_cfg, client_port, net: Net):
        self.net = net
        super().__init__(kind, name, myid, extra_cfg, client_port)
        self.host = net.addr(myid - 1)
        self.hostport = f"{self.host}:{self.port}"
        self._write_config()

    # Environment for this member's next start only (the nemesis's crash points).
    extra_env: dict[str, str] = {}

    def command(self) -> list[str]:
        env = {**self.net.member_env(self.base_dir), **self.extra_env}
        pre = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
        return self.net.prefix(self.myid - 1) + pre + super().command()


class NetEnsemble(ensemble.Ensemble):
    """An `ensemble.Ensemble` whose members each live in a namespace of `net`."""

    def __init__(self, net: Net, n: int, kind: str | None = None, name: str = "netens",
                 extra_cfg: dict[str, object] | None = None):
        self.net = net

        def factory(kind, name, myid, cfg, client_port):
            return NetMember(kind, name, myid, cfg, client_port, net)

        super().__init__(n, kind=kind, name=name, extra_cfg=extra_cfg, member_factory=factory,
                         hosts=[net.addr(i) for i in range(n)])


__all__ = ["Net", "NetEnsemble", "available", "harness"]
