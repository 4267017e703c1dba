"""reconfig (opcode 16) and /zookeeper/config, as ZooKeeper 3.5.3+ does them, through kazoo and zkCli.

Every ensemble here starts the way ZooKeeper 3.8's documentation shows: the members in
`zoo.cfg.dynamic.100000000` next to each zoo.cfg, `reconfigEnabled=true`, the digest super user.
A member to be added is started first with the current members and itself in its own dynamic
file (ZooKeeper's documented procedure), then added. What this file shows:

- `/zookeeper/config` (and zkCli's `config`) holds ZooKeeper's `server.N=...` lines and
  `version=<hex zxid>`; the same on every member.
- reconfig is refused without `reconfigEnabled` (ReconfigDisabled) and to anyone but the super
  user (NoAuth); `from_config` other than the current version is BadVersion; a new config whose
  voters in step with the leader are no majority is NewConfigNoQuorum; none of them changes it.
- Incremental add and remove (the leader too), non-incremental `new_members`, an observer, and
  zkCli's `reconfig -add/-remove`: the answer is the new config, every member shows it, a watch
  on it fires, data before and after is served, and the membership really changed: quorums
  are counted over the new voters.
- Every member rewrites its files (`zoo.cfg.dynamic.<version>` next to zoo.cfg, and zoo.cfg's
  `dynamicConfigFile` line), so after a full restart from them the new membership holds.

ZooKeeper 3.8 keeps a removed member running as a "non-voting follower" that still serves
clients (zookeeperReconfig.md, "Removing servers"), so the tests assert only what makes it no
longer a member: its vote does not count.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NewConfigNoQuorumError,
    NoAuthError,
    NodeExistsError,
    ReconfigDisabledError,
)

import harness
import zkcli
from ensemble import Ensemble, free_ports

CONFIG = "/zookeeper/config"
FIRST_VERSION = "100000000"  # the suffix of the dynamic file every ensemble here starts from
RECONFIG = {"reconfigEnabled": "true"}
SUPER = [("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")]
SERVING = ("leader", "follower", "observer")


# -- configuration files ----------------------------------------------------------------
def server_line(ens: Ensemble, i: int, role: str = "participant") -> str:
    """Member i's line as ZooKeeper writes it: server.N=host:peer:election:role;host:client."""
    h = harness.HOST
    return (f"server.{i + 1}={h}:{ens.peer_ports[i]}:{ens.election_ports[i]}:{role};"
            f"{h}:{ens.members[i].port}")


def use_dynamic_file(member, servers: list[str], version: str) -> None:
    """Move member's membership out of zoo.cfg into zoo.cfg.dynamic.<version> next to it."""
    path = os.path.join(str(member.base_dir), f"zoo.cfg.dynamic.{version}")
    with open(path, "w") as f:
        f.write("\n".join(servers) + "\n")
    for key in member.extra_cfg:
        if key.startswith("server."):
            member.extra_cfg[key] = None
    member.extra_cfg["dynamicConfigFile"] = path
    member._write_config()


@contextmanager
def dynamic_ensemble(name: str, reconfig_enabled: bool = True):
    """A started 3-member ensemble whose members are in zoo.cfg.dynamic.100000000; closed after."""
    ens = Ensemble(3, name=name, extra_cfg=RECONFIG if reconfig_enabled else None)
    try:
        for m in ens.members:
            use_dynamic_file(m, [server_line(ens, i) for i in range(3)], FIRST_VERSION)
        ens.start()
        yield ens
    finally:
        ens.close()


def dynamic_file_of(member) -> Path:
    """The file zoo.cfg's one dynamicConfigFile line names (relative to zoo.cfg's dir)."""
    with open(member.conf_path) as f:
        values = [line.split("=", 1)[1].strip() for line in f if line.startswith("dynamicConfigFile=")]
    assert len(values) == 1, f"{member.conf_path}: dynamicConfigFile lines {values}"
    return (Path(member.base_dir) / values[0]).resolve()


def start_joiner(ens: Ensemble, current: bytes, role: str = "participant") -> tuple[int, str]:
    """Start one more member as ZooKeeper documents: its dynamic file (named by the current
    version) lists the current members and itself. Not waited for (ZooKeeper serves it as a
    non-voting follower until it is added; Warden serves nothing). Returns (index, its line)."""
    servers, version = parse_config(current)
    i = ens.add_member(extra_cfg=RECONFIG)
    line = server_line(ens, i, role)
    use_dynamic_file(ens.members[i], servers + [line], version)
    ens.start(i, wait=False)
    return i, line


# -- /zookeeper/config and reconfig -------------------------------------------------------
def parse_config(data: bytes) -> tuple[list[str], str]:
    """(server lines, version hex) of /zookeeper/config's data: lines, then `version=` last."""
    *servers, last = data.decode().split("\n")
    assert last.startswith("version="), data
    return servers, last[len("version="):]


def settled(fn, timeout: float = 20.0):
    """fn(), again while the client is between servers (ConnectionLoss), for up to timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except ConnectionLoss:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_config(client) -> tuple[bytes, int]:
    """sync, then /zookeeper/config's data and mzxid as this client's member has them."""
    def read():
        client.sync(CONFIG)
        data, stat = client.get(CONFIG)
        return data, stat.mzxid
    return settled(read)


def create_once(client, path: str, data: bytes) -> None:
    """create path, retried across a reconnect (NodeExists then means an earlier try committed)."""
    def create():
        try:
            client.create(path, data)
        except NodeExistsError:
            assert client.get(path)[0] == data
    settled(create)


def reconfig(client, joining=None, leaving=None, new_members=None, timeout: float = 20.0):
    """client.reconfig, again while the answer is NewConfigNoQuorum (a new member still catching
    up with the leader), for up to timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.reconfig(joining, leaving, new_members)
        except NewConfigNoQuorumError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


# -- members serving ----------------------------------------------------------------------
def wait_serving(ens: Ensemble, idxs, timeout: float = 30.0) -> int:
    """Wait until exactly one of idxs leads and the rest follow; return the leader's index."""
    idxs = list(idxs)

    def one_leader():
        modes = [ens.mode(i) for i in idxs]
        ok = modes.count("leader") == 1 and all(m in ("leader", "follower") for m in modes)
        return ok and idxs[modes.index("leader")] + 1  # +1: index 0 is falsy
    return harness.wait_until(one_leader, timeout, f"one leader among members {idxs}") - 1


def assert_never_serve(ens: Ensemble, idxs, timeout: float = 20.0, hold: float = 4.0) -> None:
    """None of idxs serves within timeout s, and none does again for hold s more."""
    harness.wait_until(lambda: all(ens.mode(i) not in SERVING for i in idxs), timeout,
                       f"members {idxs} to stop serving (modes {ens.modes()})")
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:
        modes = [ens.mode(i) for i in idxs]
        assert not any(m in SERVING for m in modes), f"members {idxs} serve again: {modes}"
        time.sleep(0.2)


# -- tests --------------------------------------------------------------------------------
def test_get_config_lists_members_in_zookeepers_format(clients):
    """Every member's /zookeeper/config, zkCli's `config` and `config -c` show the three lines and version."""
    with dynamic_ensemble("cfg") as ens:
        servers = [server_line(ens, i) for i in range(3)]
        want = "\n".join(servers) + f"\nversion={FIRST_VERSION}"
        for hp in ens.hostports:
            data, stat = clients(hp).get(CONFIG)
            assert data.decode() == want, hp
            assert (stat.version, stat.mzxid) == (-1, int(FIRST_VERSION, 16)), (hp, stat)
        run = zkcli.run(ens.hostports[1], ["config", "config -c"])
        assert run.out(0) == want.split("\n"), run
        version, _, hostports = run.out(1)[0].partition(" ")
        assert (version, sorted(hostports.split(","))) == (FIRST_VERSION, sorted(ens.hostports)), run


def test_reconfig_disabled_without_reconfig_enabled(clients):
    """Without reconfigEnabled even the super user gets ReconfigDisabled (-123); nothing changes."""
    with dynamic_ensemble("off", reconfig_enabled=False) as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        before = read_config(su)
        for c in (su, clients(ens.hostports[1])):
            with pytest.raises(ReconfigDisabledError):
                c.reconfig(None, "3", None)
        assert read_config(su) == before


def test_reconfig_needs_the_super_user(clients):
    """No auth or a wrong super password: NoAuth and nothing changes; the super user may."""
    with dynamic_ensemble("auth") as ens:
        leader = ens.leader()
        victim = next(i for i in range(3) if i != leader)
        plain = clients(ens.hostports[leader])
        wrong = clients(ens.hostports[leader], auth_data=[("digest", f"{harness.SUPER_USER}:wrong")])
        before = read_config(plain)
        for c in (plain, wrong):
            with pytest.raises(NoAuthError):
                c.reconfig(None, str(victim + 1), None)
        assert read_config(plain) == before
        su = clients(ens.hostports[leader], auth_data=SUPER)
        data, _ = su.reconfig(None, str(victim + 1), None)
        assert parse_config(data)[0] == [server_line(ens, i) for i in range(3) if i != victim]


def test_incremental_add_of_a_fourth_member(clients):
    """-add server.4: the new config comes back, every member shows it, a watch fires, the 4th serves."""
    with dynamic_ensemble("add") as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        su.create("/before", b"1")
        current, _ = read_config(su)
        j, line = start_joiner(ens, current)
        fired, events = threading.Event(), []
        clients(ens.hostports[1]).get(CONFIG, watch=lambda e: (events.append(e), fired.set()))

        data, stat = reconfig(su, joining=line)
        servers, version = parse_config(data)
        assert servers == [server_line(ens, i) for i in range(3)] + [line]
        # The version is the zxid of the reconfig's txn; the stat's version stays -1.
        assert int(version, 16) > int(FIRST_VERSION, 16)
        assert (stat.mzxid, stat.version) == (int(version, 16), -1), stat
        assert fired.wait(10), "no watch event for /zookeeper/config on member 2"
        assert (events[0].type, events[0].path) == ("CHANGED", CONFIG)

        su.create("/after", b"2")
        wait_serving(ens, range(4))
        for hp in ens.hostports:
            assert read_config(clients(hp)) == (data, int(version, 16)), hp
        fourth = clients(ens.hostports[j])
        fourth.sync("/after")
        assert (fourth.get("/before")[0], fourth.get("/after")[0]) == (b"1", b"2")


def test_incremental_remove_of_the_leader(clients):
    """-remove <leader>: the other two elect and keep data and writes; the removed one's vote no longer counts."""
    with dynamic_ensemble("rm") as ens:
        old = ens.leader()
        rest = [i for i in range(3) if i != old]
        su = clients([ens.hostports[i] for i in rest], auth_data=SUPER)
        su.create("/before", b"1")
        want = [server_line(ens, i) for i in rest]
        try:
            data, _ = su.reconfig(None, str(old + 1), None)
            assert parse_config(data)[0] == want
        except ConnectionLoss:
            # ZooKeeper 3.8: at the leader hand-off every follower restarts its client service,
            # sometimes before the answer is out. The change is committed all the same.
            pass
        leader = wait_serving(ens, rest)
        assert parse_config(read_config(su)[0])[0] == want
        assert settled(lambda: su.get("/before"))[0] == b"1"
        create_once(su, "/after", b"2")
        # Were the removed member still a voter, it and the survivor would be a quorum of 3.
        ens.kill(leader)
        assert_never_serve(ens, [i for i in rest if i != leader] + [old])


def test_non_incremental_new_members(clients):
    """new_members with four lines, then with the original three: each is exactly the new config."""
    with dynamic_ensemble("members") as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        base = [server_line(ens, i) for i in range(3)]
        j, line = start_joiner(ens, read_config(su)[0])
        data, _ = reconfig(su, new_members=",".join(base + [line]))
        servers, grown = parse_config(data)
        assert servers == base + [line]
        wait_serving(ens, range(4))
        su.create("/four", b"4")

        data, _ = su.reconfig(None, None, ",".join(base))
        servers, shrunk = parse_config(data)
        assert servers == base and int(shrunk, 16) > int(grown, 16)
        create_once(su, "/three", b"3")
        for i in range(3):
            c = clients(ens.hostports[i])
            assert read_config(c)[0] == data, i
            assert (c.get("/four")[0], c.get("/three")[0]) == (b"4", b"3")


def test_from_config_must_be_the_current_version(clients):
    """from_config not the current version (never was, or stale): BadVersion, config unchanged."""
    with dynamic_ensemble("fromcfg") as ens:
        leader = ens.leader()
        victim = next(i for i in range(3) if i != leader)
        su = clients(ens.hostports[leader], auth_data=SUPER)
        first = read_config(su)
        v0 = int(parse_config(first[0])[1], 16)
        with pytest.raises(BadVersionError):
            su.reconfig(None, str(victim + 1), None, from_config=v0 + 1)
        assert read_config(su) == first

        data, _ = su.reconfig(None, str(victim + 1), None, from_config=v0)
        assert parse_config(data)[0] == [server_line(ens, i) for i in range(3) if i != victim]
        second = read_config(su)
        with pytest.raises(BadVersionError):
            su.reconfig(server_line(ens, victim), None, None, from_config=v0)
        assert read_config(su) == second


def test_new_config_needs_a_quorum_that_is_up(clients):
    """Four absent members (3 of 7 up): NewConfigNoQuorum (-13), nothing changes; one (3 of 4 up) is accepted."""
    with dynamic_ensemble("noquorum") as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        ports = free_ports(12)
        h = harness.HOST
        absent = [f"server.{4 + k}={h}:{ports[3 * k]}:{ports[3 * k + 1]}:participant;{h}:{ports[3 * k + 2]}"
                  for k in range(4)]
        before = read_config(su)
        with pytest.raises(NewConfigNoQuorumError):
            su.reconfig(",".join(absent), None, None)
        assert read_config(su) == before

        # ZooKeeper counts the voters of the new config in step with the leader: 3 of 4 will do.
        data, _ = su.reconfig(absent[0], None, None)
        assert parse_config(data)[0] == [server_line(ens, i) for i in range(3)] + [absent[0]]
        create_once(su, "/three-of-four", b"ok")


def test_zkcli_reconfig_add_and_remove(clients):
    """zkCli: reconfig without auth is refused; as super, -add and -remove print the committed config."""
    with dynamic_ensemble("zkcli") as ens:
        base = [server_line(ens, i) for i in range(3)]
        j, line = start_joiner(ens, read_config(clients(ens.hostports[0]))[0])
        run = zkcli.run(ens.hostports[0], [
            f"reconfig -remove {j + 1}",
            f"addauth digest {harness.SUPER_USER}:{harness.SUPER_PASSWORD}",
            f"reconfig -add {line}",
            "config",
            f"reconfig -remove {j + 1}",
        ])
        assert run.out(0) == ["Insufficient permission : "], run
        added, removed = run.out(2), run.out(4)
        assert added[:-1] == ["Committed new configuration:", *base, line], run
        assert run.out(3) == added[1:], run
        assert removed[:-1] == ["Committed new configuration:", *base], run
        v_added, v_removed = (int(out[-1].removeprefix("version="), 16) for out in (added, removed))
        assert v_removed > v_added > int(FIRST_VERSION, 16), run
        assert read_config(clients(ens.hostports[1]))[0].decode().split("\n") == removed[1:]


def test_restart_from_rewritten_files_keeps_membership(clients):
    """After -add, each member's zoo.cfg names zoo.cfg.dynamic.<version>; restarted from them, four voters hold."""
    with dynamic_ensemble("restart") as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        j, line = start_joiner(ens, read_config(su)[0])
        data, _ = reconfig(su, joining=line)
        servers, version = parse_config(data)
        su.create("/kept", b"k")
        wait_serving(ens, range(4))
        su.stop()
        for i in range(4):
            ens.stop(i)
        for m in ens.members:
            path = dynamic_file_of(m)
            assert path == (Path(m.base_dir) / f"zoo.cfg.dynamic.{version}").resolve(), m.conf_path
            # No version= line: ZooKeeper refuses a dynamic file holding one.
            assert path.read_text().split() == servers, path

        for i in range(4):
            ens.start(i, wait=False)
        wait_serving(ens, range(4), timeout=60)
        for hp in ens.hostports:
            c = clients(hp)
            assert read_config(c)[0] == data, hp
            assert c.get("/kept")[0] == b"k", hp
        # Four voters: members 1 and 2 alone are no quorum (they were one among three).
        ens.kill(2)
        ens.kill(3)
        assert_never_serve(ens, [0, 1])


def test_observer_added_and_removed(clients):
    """-add ...:observer: listed as observer, serves reads, forwards writes; -remove takes it out of the config."""
    with dynamic_ensemble("observer") as ens:
        su = clients(ens.hostports[0], auth_data=SUPER)
        su.create("/before", b"1")
        base = [server_line(ens, i) for i in range(3)]
        j, line = start_joiner(ens, read_config(su)[0], role="observer")
        assert line.endswith(f":observer;{harness.HOST}:{ens.members[j].port}")
        data, _ = reconfig(su, joining=line)
        assert parse_config(data)[0] == base + [line]
        harness.wait_until(lambda: ens.mode(j) == "observer", 30, "srvr on the observer to say observer")

        obs = clients(ens.hostports[j])
        obs.sync("/before")
        assert obs.get("/before")[0] == b"1"
        obs.create("/from-observer", b"2")
        su.sync("/from-observer")
        assert su.get("/from-observer")[0] == b"2"
        assert read_config(obs)[0] == data

        removed, _ = su.reconfig(None, str(j + 1), None)
        servers, version = parse_config(removed)
        assert servers == base and int(version, 16) > int(parse_config(data)[1], 16)
        for i in range(3):
            assert read_config(clients(ens.hostports[i]))[0] == removed, i


def test_curator_ensemble_tracker_follows_a_reconfig():
    """Curator's EnsembleTracker: a client given member 1 alone learns all three from
    /zookeeper/config, removes member 1 with reconfig (as the super user), drops it from its
    connection string and keeps writing through the other two."""
    import subprocess

    curator = os.path.join(os.path.dirname(os.path.abspath(__file__)), "curator")
    built = subprocess.run([os.path.join(curator, "build.sh")], capture_output=True, text=True, timeout=170)
    assert built.returncode == 0, built.stdout + built.stderr
    with dynamic_ensemble("rc-curator") as ens:
        proc = subprocess.run([os.path.join(curator, "run_ensemble.sh"), ",".join(ens.hostports), "ensemble_tracker"],
                              capture_output=True, text=True, timeout=200)
        out = proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr.strip() else "")
        assert proc.returncode == 0 and "PASS ensemble_tracker:" in proc.stdout, out
