"""docker/docker-compose.yml for real: 3 Warden containers + Prometheus, and a real network partition.

The module builds the FROM-scratch images with docker/build.sh (binary: WARDEN_BIN) into a temp
build dir, starts the compose project under a unique name (`wardentest<pid><hex>`) with every
published port chosen free on 127.0.0.1 (the compose file's `${WARDENn_CLIENT_PORT:-2181}`...
variables), and always runs `docker-compose down -v --remove-orphans` and removes the temp dir.

The compose file has two networks: `peers` carries Raft traffic only (zoo.cfg says
`server.N=peerN:2888:3888`, names that exist on that network alone), the default network carries
the published client/admin/metrics ports and Prometheus's scrapes. So
`docker network disconnect <project>_peers <container>` cuts a node off from the other two while
its clients still reach it: whether they keep being served is the server's own decision.

- `test_prometheus_scrapes_all_three_nodes`: the compose Prometheus, asked through its HTTP API,
  has `up == 1` for warden1..3 and a `znode_count` series for each.
- `test_leader_partition`: the leader is disconnected from `peers`. The other two elect a leader;
  the old leader drops its client itself (kazoo sees SUSPENDED/LOST; `srvr` there says "not
  currently serving") and does not acknowledge a write sent to it; a write on the majority side
  succeeds. After `docker network connect` the old leader is a follower again, serves, and reads
  (after sync) show the majority's writes. Every acknowledged write is present on all 3 nodes.
  The heal must not cost an election: the Raft terms at the end equal the majority's term
  before the heal (the rejoining member pre-votes, and the others still hear their leader).
  Printed, not asserted: timings, whether the majority-side client was dropped after the heal.

Warden only (Debian's ZooKeeper has no Docker image here). Skipped when `docker info` fails or
docker-compose is missing. COMPAT_KEEP_LOGS=DIR keeps `docker-compose logs` there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

import harness
from ensemble import free_ports, srvr_mode
from ops_common import http

REPO = harness.REPO_ROOT
DOCKER_DIR = REPO / "docker"
COMPOSE_FILE = DOCKER_DIR / "docker-compose.yml"
BUILD_SH = DOCKER_DIR / "build.sh"
PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
IMAGE_REPO = "warden-compat-test"  # stable tags :warden / :prometheus keep the build cache
NODES = ("warden1", "warden2", "warden3")
NOT_SERVING = "This ZooKeeper instance is not currently serving requests"
SESSION_TIMEOUT = 10.0  # kazoo's default; the partition lasts about 4 s (a LOST session is accepted too)

pytestmark = [
    pytest.mark.timeout(170),
    pytest.mark.skipif(harness.default_kind() != "warden",
                       reason="runs Warden's docker images (docker/); nothing to prove against ZooKeeper"),
]

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HEARTBEAT_NOISE = re.compile(r"openraft::(replication|engine::handler::replication_handler)\b.*"
                             r"(timed out after|timeout after|cannot connect|connection to .* lost)")


def run(cmd: list[str], timeout: float = 120, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout: {proc.stdout[-3000:]}\n"
                           f"stderr: {proc.stderr[-3000:]}")
    return proc


wait_until = harness.wait_until


def docker_unavailable() -> str | None:
    """Why the module cannot run here, or None."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    if shutil.which("docker-compose") is None:
        return "docker-compose (v1) is not installed"
    try:
        if run(["docker", "info"], timeout=30, check=False).returncode != 0:
            return "`docker info` fails (no Docker daemon reachable)"
    except subprocess.TimeoutExpired:
        return "`docker info` timed out"
    if not os.access(PROMETHEUS_BIN, os.X_OK):
        return f"{PROMETHEUS_BIN} missing (install.sh installs Debian's prometheus; build.sh copies it into an image)"
    return None


def image_id(ref: str) -> str:
    return run(["docker", "image", "inspect", "-f", "{{.Id}}", ref], check=False).stdout.strip()


def drop_if_untagged(iid: str) -> None:
    """Remove image IID if no tag names it any more (another run's tag keeps it; so does a container)."""
    if not iid:
        return
    tags = run(["docker", "image", "inspect", "-f", "{{len .RepoTags}}", iid], check=False).stdout.strip()
    if tags == "0":
        run(["docker", "rmi", iid], check=False)


def build_image(context: str, target: str, stable_tag: str, run_tag: str) -> None:
    """docker build --target TARGET, tagged STABLE_TAG (reused as cache next time) and RUN_TAG (ours).

    When the stable tag moves to a new image (a new binary), the image it named before is removed
    unless another tag (a concurrent run's) still names it, so changing binaries do not pile up."""
    old = image_id(stable_tag)
    run(["docker", "build", "-q", "-f", os.path.join(context, "Dockerfile"), "--target", target,
         "-t", stable_tag, "-t", run_tag, context], timeout=300)
    if old and old != image_id(stable_tag):
        drop_if_untagged(old)


class DockerEnsemble:
    """The compose project: client ports, srvr modes, containers, partition/heal, logs."""

    def __init__(self, project: str, env: dict, ports: dict[str, int]):
        self.project = project
        self.env = env
        self.client_ports = [ports[f"WARDEN{i}_CLIENT_PORT"] for i in (1, 2, 3)]
        self.metrics_urls = [f"http://127.0.0.1:{ports[f'WARDEN{i}_METRICS_PORT']}/metrics" for i in (1, 2, 3)]
        self.hostports = [f"127.0.0.1:{p}" for p in self.client_ports]
        self.prometheus_url = f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}"
        self.peers_network = f"{project}_peers"
        self._ids: dict[str, str] = {}

    def compose(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return run(["docker-compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args],
                   timeout=timeout, env=self.env, check=check)

    def container(self, i: int) -> str:
        """Container id of node i (0-based)."""
        if i not in self._ids:
            cid = self.compose("ps", "-q", NODES[i]).stdout.strip()
            assert cid, f"no container for {NODES[i]}"
            self._ids[i] = cid
        return self._ids[i]

    def srvr(self, i: int) -> str:
        try:
            return harness.four_letter(self.hostports[i], "srvr", timeout=3)
        except OSError as e:
            return f"<{e!r}>"

    def mode(self, i: int) -> str:
        return srvr_mode(self.hostports[i], timeout=3)

    def modes(self) -> list[str]:
        return [self.mode(i) for i in range(3)]

    def wait_stable(self, timeout: float = 60) -> int:
        """Wait for one leader and two followers; return the leader's index."""
        seen: list[list[str]] = [[]]

        def stable():
            seen[0] = self.modes()
            return sorted(seen[0]) == ["follower", "follower", "leader"]

        try:
            wait_until(stable, timeout, "one leader and two followers", interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}: srvr modes {seen[0]}") from None
        return seen[0].index("leader")

    def raft_term(self, i: int) -> int | None:
        """warden_raft_term from node i's published /metrics (None if unreadable)."""
        try:
            status, _, body = http("GET", self.metrics_urls[i], timeout=3)
        except OSError:
            return None
        m = re.search(r"^warden_raft_term(?:\{[^}]*\})? (\S+)", body, re.M) if status == 200 else None
        return int(float(m.group(1))) if m else None

    def peers_ip(self, i: int) -> str | None:
        out = run(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", self.container(i)]).stdout
        net = json.loads(out).get(self.peers_network)
        return net["IPAddress"] if net else None

    def partition(self, i: int) -> None:
        """Cut node i off from the other nodes (its client, admin and metrics ports stay reachable)."""
        run(["docker", "network", "disconnect", self.peers_network, self.container(i)], timeout=60)

    def heal(self, i: int) -> None:
        run(["docker", "network", "connect", "--alias", f"peer{i + 1}", self.peers_network, self.container(i)],
            timeout=60)

    def logs(self, tail: int = 400, quiet: bool = True) -> str:
        """The services' logs; quiet drops openraft's per-heartbeat replication errors (a
        partitioned node logs several every 50 ms), in case a log filter lets them through:
        Warden's default filter keeps them out and logs a silent peer once a minute."""
        try:
            out = self.compose("logs", "--no-color", f"--tail={tail}", timeout=60, check=False).stdout
        except subprocess.TimeoutExpired:
            return "(docker-compose logs timed out)"
        lines = ANSI.sub("", out).splitlines()
        if not quiet:
            return "\n".join(lines)
        kept = [line for line in lines if not HEARTBEAT_NOISE.search(line)]
        return "\n".join(kept) + f"\n({len(lines) - len(kept)} openraft replication-error lines left out)"


@pytest.fixture(scope="module")
def docker_ensemble():
    why = docker_unavailable()
    if why:
        pytest.skip(why)
    binary = harness.warden_bin()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"WARDEN_BIN {binary!r} is not an executable file (cargo build, or set WARDEN_BIN)")
    project = f"wardentest{os.getpid()}{uuid.uuid4().hex[:4]}"
    tmp = tempfile.mkdtemp(prefix="compat-docker-")
    build_dir = os.path.join(tmp, "build")
    names = [f"WARDEN{i}_{kind}_PORT" for i in (1, 2, 3) for kind in ("CLIENT", "ADMIN", "METRICS")]
    ports = dict(zip(names + ["PROMETHEUS_PORT"], free_ports(len(names) + 1)))
    env = {
        **os.environ,
        "WARDEN_BIN": binary,
        "WARDEN_BUILD_DIR": build_dir,
        "WARDEN_IMAGE": f"{IMAGE_REPO}:warden-{project}",
        "WARDEN_PROMETHEUS_IMAGE": f"{IMAGE_REPO}:prometheus-{project}",
        **{k: str(v) for k, v in ports.items()},
    }
    env.pop("COMPOSE_FILE", None)
    env.pop("COMPOSE_PROJECT_NAME", None)
    ens = DockerEnsemble(project, env, ports)
    up = False
    try:
        run(["bash", str(BUILD_SH)], env=env, timeout=120)
        build_image(build_dir, "warden", f"{IMAGE_REPO}:warden", env["WARDEN_IMAGE"])
        build_image(build_dir, "prometheus", f"{IMAGE_REPO}:prometheus", env["WARDEN_PROMETHEUS_IMAGE"])
        up = True
        ens.compose("up", "-d", "--no-build", timeout=180)
        try:
            ens.wait_stable(60)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{ens.logs()}") from None
        yield ens
    finally:
        if up:
            keep = os.environ.get("COMPAT_KEEP_LOGS")
            if keep:
                os.makedirs(keep, exist_ok=True)
                Path(keep, f"{project}.log").write_text(ens.logs(tail=100000, quiet=False))
            try:
                ens.compose("down", "-v", "--remove-orphans", "-t", "10", timeout=180, check=False)
            except subprocess.TimeoutExpired:
                pass
        for tag in (env["WARDEN_IMAGE"], env["WARDEN_PROMETHEUS_IMAGE"]):
            iid = image_id(tag)
            if iid:
                run(["docker", "rmi", tag], check=False)  # our per-run tag; the stable tag keeps the image
                drop_if_untagged(iid)  # unless the stable tag moved on meanwhile
        shutil.rmtree(tmp, ignore_errors=True)


def create_acked(c: KazooClient, path: str, data: bytes, timeout: float = 30) -> None:
    """Create a unique path, retrying lost connections until the server acknowledges it.

    NodeExists after a retry means an earlier attempt was applied (the path is unique)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.create(path, data)
            return
        except NodeExistsError:
            return
        except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError) as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"create {path} not acknowledged within {timeout:.0f}s: {e!r}") from e
            time.sleep(0.2)


def prom_query(base: str, query: str) -> list[dict]:
    status, _, body = http("GET", f"{base}/api/v1/query?query={urllib.parse.quote(query)}", timeout=5)
    if status != 200:
        return []
    doc = json.loads(body)
    return doc["data"]["result"] if doc.get("status") == "success" else []


def test_prometheus_scrapes_all_three_nodes(docker_ensemble):
    """The compose Prometheus scrapes warden1..3 over the client network: up == 1 and a znode_count each."""
    ens = docker_ensemble
    want = {f"{n}:7000" for n in NODES}
    last: dict[str, object] = {}

    def all_up():
        try:
            res = prom_query(ens.prometheus_url, 'up{job="warden"}')
        except OSError as e:  # Prometheus still starting
            last["up"] = repr(e)
            return False
        last["up"] = {r["metric"]["instance"]: r["value"][1] for r in res}
        return last["up"] == {i: "1" for i in want}

    try:
        wait_until(all_up, 60, "up == 1 for all three Warden targets", interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; last `up`: {last.get('up')}") from None

    def znode_counts():
        res = prom_query(ens.prometheus_url, "znode_count")
        last["znode_count"] = {r["metric"].get("instance"): r["value"][1] for r in res}
        return set(last["znode_count"]) == want

    try:
        wait_until(znode_counts, 30, "a znode_count series for each instance", interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; last znode_count: {last.get('znode_count')}") from None
    assert all(float(v) >= 1 for v in last["znode_count"].values()), last["znode_count"]
    print(f"Prometheus: up {last['up']}, znode_count {last['znode_count']}")


def test_leader_partition(docker_ensemble, clients):
    """The leader is disconnected from the peers network: the majority goes on, the old leader stops serving."""
    ens = docker_ensemble
    try:
        _leader_partition(ens, clients)
    except BaseException:
        print(f"--- modes now: {[ens.srvr(i)[:200] for i in range(3)]}")
        print(f"--- docker-compose logs (tail) ---\n{ens.logs()}")
        raise


def _leader_partition(ens: DockerEnsemble, clients) -> None:
    old = ens.wait_stable(30)
    maj = [i for i in range(3) if i != old]
    base = f"/docker-partition-{uuid.uuid4().hex[:8]}"
    acked: dict[str, bytes] = {}

    # Clients: one that knows only the leader, one that knows only the two others.
    oc = clients([ens.hostports[old]], timeout=SESSION_TIMEOUT)
    states: list[tuple[float, str]] = []
    oc.add_listener(lambda s: states.append((time.monotonic(), s)))
    mc = clients([ens.hostports[i] for i in maj], timeout=SESSION_TIMEOUT)
    mstates: list[tuple[float, str]] = []
    mc.add_listener(lambda s: mstates.append((time.monotonic(), s)))
    oc.create(base, b"start")
    acked[base] = b"start"
    for k in range(3):
        for name, c in (("leader", oc), ("majority", mc)):
            p = f"{base}/before-{name}-{k}"
            c.create(p, p.encode())
            acked[p] = p.encode()
    ip_before = ens.peers_ip(old)

    # -- partition ------------------------------------------------------------------------
    t0 = time.monotonic()
    ens.partition(old)
    try:
        # Sent at once to the old leader: it can reach no quorum, so it must never say "done".
        stray = {"create": oc.create_async(f"{base}/through-old-leader", b"stray"),
                 "set": oc.set_async(base, b"through-old-leader")}

        def majority_leader():
            ms = [ens.mode(i) for i in maj]
            return sorted(ms) == ["follower", "leader"] and [maj[ms.index("leader")]]

        [new] = wait_until(majority_leader, 30, "the two connected nodes to elect a leader")
        t_elected = time.monotonic() - t0

        wait_until(lambda: any(s in (KazooState.SUSPENDED, KazooState.LOST) for _, s in states), 30,
                   "the old leader to drop its client (kazoo SUSPENDED or LOST)")
        t_dropped = next(t for t, s in states if s in (KazooState.SUSPENDED, KazooState.LOST)) - t0
        reply = wait_until(lambda: (lambda r: r if NOT_SERVING in r else None)(ens.srvr(old)), 15,
                           "srvr on the old leader to say it is not serving")
        assert "Mode:" not in reply, reply

        for name, res in stray.items():
            res.wait(15)
            assert res.ready(), f"{name} through the old leader neither acknowledged nor failed after 15 s"
            assert not res.successful(), f"{name} sent to the partitioned old leader was acknowledged"

        # The majority side takes writes while the old leader is cut off.
        for k in range(5):
            p = f"{base}/during-majority-{k}"
            create_acked(mc, p, p.encode())
            acked[p] = p.encode()
        mc.retry(mc.set, base, b"majority")
        acked[base] = b"majority"
        t_writes = time.monotonic() - t0

        # Still cut off: still not serving, and no new session is opened there.
        assert NOT_SERVING in ens.srvr(old), f"old leader serves again while partitioned: {ens.srvr(old)!r}"
        probe = KazooClient(ens.hostports[old], timeout=SESSION_TIMEOUT,
                            connection_retry=dict(max_tries=-1, delay=0.1, max_delay=0.5))
        try:
            with pytest.raises(KazooTimeoutError):
                probe.start(timeout=3)
        finally:
            try:
                probe.stop()
                probe.close()
            except Exception:
                pass
        assert oc.state != KazooState.CONNECTED, "the old leader's client is connected during the partition"
        print(f"partition: new leader {NODES[new]} after {t_elected:.2f}s; old leader {NODES[old]} dropped "
              f"its client after {t_dropped:.2f}s; majority writes done {t_writes:.2f}s after the cut")
    finally:
        # -- heal ---------------------------------------------------------------------------
        terms_before = [ens.raft_term(i) for i in range(3)]
        ens.heal(old)
    t_heal = time.monotonic()
    ip_after = ens.peers_ip(old)

    try:
        wait_until(lambda: ens.mode(old) == "follower", 45, "the old leader to rejoin as a follower")
    except AssertionError as e:
        raise AssertionError(f"{e} (peers IP before {ip_before}, after reconnect {ip_after}): "
                             f"srvr {ens.srvr(old)!r}") from None
    t_rejoined = time.monotonic() - t_heal
    leader_after = ens.wait_stable(30)
    wait_until(lambda: oc.state == KazooState.CONNECTED, 45, "the old leader's client to reconnect there")
    lost = any(s == KazooState.LOST for _, s in states)

    # The old leader serves again: reads after sync see the majority's writes, and it takes writes.
    oc.sync(base)
    got = oc.get(base)[0]
    assert got == b"majority", f"{base} reads {got!r} on the rejoined old leader after sync, not the majority's write"
    for p, data in acked.items():
        assert oc.get(p)[0] == data, f"{p} wrong on the rejoined old leader"
    p = f"{base}/after-heal-old"
    create_acked(oc, p, p.encode())
    acked[p] = p.encode()

    # No acknowledged write is lost: all of them on all three nodes.
    children = {p.rsplit("/", 1)[1] for p in acked if p != base}
    listings = []
    for i in range(3):
        c = clients([ens.hostports[i]], timeout=SESSION_TIMEOUT)
        c.sync(base)
        for path, data in acked.items():
            got = c.exists(path)
            assert got is not None, f"acknowledged {path} missing on {NODES[i]}"
            assert c.get(path)[0] == data, f"{path} has other data on {NODES[i]}"
        kids = set(c.get_children(base))
        assert children <= kids, f"{NODES[i]} lacks {sorted(children - kids)}"
        listings.append(sorted(kids))
    assert listings[0] == listings[1] == listings[2], f"nodes disagree on {base}'s children: {listings}"
    stray_applied = "through-old-leader" in listings[0]
    # The rejoin must not cost another election (the leader retries an unreachable peer every
    # heartbeat, so the returning member hears from it before its election timer fires).
    terms_after = [ens.raft_term(i) for i in range(3)]
    majority_term = max((terms_before[i] or 0) for i in maj)
    dropped_after_heal = sum(1 for t, s in mstates if t >= t_heal and s != KazooState.CONNECTED)
    print(f"heal: {NODES[old]} follower again {t_rejoined:.2f}s after reconnect (peers IP {ip_before} -> "
          f"{ip_after}); leader now {NODES[leader_after]}; Raft terms before heal {terms_before}, at the end "
          f"{terms_after} ({max(t or 0 for t in terms_after) - majority_term} election(s) after the heal); "
          f"the majority-side client was dropped {dropped_after_heal} "
          f"time(s) after the heal; "
          f"the old leader's client's session {'expired (LOST), new session' if lost else 'survived'}; "
          f"{len(acked)} acknowledged writes on all 3 nodes; unacknowledged stray create "
          f"{'applied' if stray_applied else 'discarded'}")
    assert max(t or 0 for t in terms_after) == majority_term, (
        f"the heal cost an election: terms {terms_before} -> {terms_after}")
    assert dropped_after_heal == 0, "the majority side's client was disconnected by the heal"
