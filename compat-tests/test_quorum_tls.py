"""TLS between ensemble members, configured with ZooKeeper's own keys (`sslQuorum`,
`portUnification`, `ssl.quorum.*`), on real 3-member ensembles with real openssl certificates
(tlscerts.py). The same tests run against ZooKeeper 3.8 (`COMPAT_SERVER=zookeeper`).

Covered: an ensemble whose members talk TLS forms, replicates, serves and fails over; its peer port (the
leader's: ZooKeeper's followers do not listen on theirs) drops plaintext and every TLS
connection without a certificate the quorum trust store vouches for and that names the address
it comes from, and keeps a member's own; a member configured for plaintext is kept out until
it is given TLS; the rolling change ZooKeeper documents (portUnification on every member, then
sslQuorum on each, then portUnification off) keeps the ensemble serving and loses no write; a
member certificate that names no address it is reached at keeps the ensemble from forming
unless ssl.quorum.hostnameVerification=false; with sslQuorumReloadCertFiles a member whose key
store file is replaced presents the new certificate without a restart. Warden only: a quorum
store that cannot be used stops start-up naming the key.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import ensemble
import harness
import tlscerts

WARDEN = harness.default_kind() == "warden"
warden_only = pytest.mark.skipif(not WARDEN, reason="Warden-only")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return tlscerts.make_pki(tmp_path_factory.mktemp("quorum-pki"))


def tls_cfg(pki, *, ssl_quorum: bool = True, unification: bool = False, leaf=None, **extra) -> dict:
    """The quorum TLS keys every member of a test gets (all members share the server leaf:
    its SAN names 127.0.0.1, where they all listen)."""
    cfg: dict[str, object] = {
        "sslQuorum": "true" if ssl_quorum else "false",
        "portUnification": "true" if unification else None,
        "ssl.quorum.keyStore.location": str((leaf or pki.server).pem),
        "ssl.quorum.trustStore.location": str(pki.ca),
    }
    cfg.update(extra)
    return cfg


def reconfigure(ens: ensemble.Ensemble, i: int, cfg: dict) -> None:
    """Member i's zoo.cfg gets `cfg`'s keys (None removes one); takes effect at its next start."""
    m = ens.members[i]
    for k, v in cfg.items():
        m.extra_cfg[k] = None if v is None else str(v)
    m._write_config()


def client(hostport: str) -> KazooClient:
    zk = KazooClient(hosts=hostport, timeout=10)
    zk.start(timeout=30)
    return zk


def write_and_check_everywhere(ens: ensemble.Ensemble, path: str, value: bytes) -> None:
    """Writes through one serving member, then reads it back (after sync) from every running one."""
    live = [i for i in range(ens.n) if ens.members[i].running]
    zk = client(ens.hostports[live[0]])
    try:
        zk.create(path, value, makepath=True)
    finally:
        zk.stop()
        zk.close()
    for i in live:
        zk = client(ens.hostports[i])
        try:
            zk.sync(path)
            assert zk.get(path)[0] == value, f"member {i + 1}"
        finally:
            zk.stop()
            zk.close()


def create(hostport: str, path: str, value: bytes) -> None:
    zk = client(hostport)
    try:
        zk.create(path, value)
    finally:
        zk.stop()
        zk.close()


def assert_synced(hostport: str, path: str, value: bytes) -> None:
    """After sync, the member at `hostport` has `path` = `value`."""
    zk = client(hostport)
    try:
        zk.sync(path)
        assert zk.get(path)[0] == value, hostport
    finally:
        zk.stop()
        zk.close()


def restart_with(ens: ensemble.Ensemble, i: int, cfg: dict) -> None:
    """Restarts member i with `cfg`'s keys and waits until the ensemble is stable."""
    ens.stop(i)
    reconfigure(ens, i, cfg)
    ens.start(i)
    ens.wait_stable(60)


def start_two_of_three(ens: ensemble.Ensemble) -> None:
    """Starts every member; waits until members 1 and 2 serve (one leads)."""
    for m in ens.members:
        m.start(wait=False)
    modes = wait_modes(ens, lambda md: sorted(md[:2]) == ["follower", "leader"], 60)
    assert sorted(modes[:2]) == ["follower", "leader"], modes


def probe_plain(port: int) -> bytes | None:
    """Sends a plaintext frame to a peer port. Returns what came back before the server closed
    the connection (a TLS server sends at most an alert), or None if it was still open 5 s later."""
    s = socket.create_connection((harness.HOST, port), timeout=5)
    data = b""
    try:
        s.sendall(struct.pack(">I", 8) + b"\x00" * 8)
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk
    except socket.timeout:
        return None
    except (ConnectionResetError, BrokenPipeError):
        return data
    finally:
        s.close()


def probe_tls(port: int, pki, leaf) -> str:
    """'open' if a TLS connection presenting `leaf` (None: no certificate) completes and stays
    open 2 s (the server waits for the member to speak); otherwise why it did not."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(pki.ca))
    ctx.check_hostname = False
    if leaf is not None:
        ctx.load_cert_chain(str(leaf.crt), str(leaf.key))
    raw = socket.create_connection((harness.HOST, port), timeout=5)
    try:
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.settimeout(2.0)
        try:
            data = s.recv(1)
        except socket.timeout:
            return "open"
        return f"sent {data!r}" if data else "closed"
    except (ssl.SSLError, OSError) as e:
        return f"refused: {e}"
    finally:
        raw.close()


def wait_modes(ens: ensemble.Ensemble, want, seconds: float) -> list[str]:
    """Polls the members' modes until `want(modes)` or `seconds` pass; the last modes."""
    deadline = time.monotonic() + seconds
    modes = ens.modes()
    while not want(modes) and time.monotonic() < deadline:
        time.sleep(0.2)
        modes = ens.modes()
    return modes


def test_ensemble_over_tls_serves_fails_over_and_its_peer_port_takes_only_members(pki):
    with ensemble.Ensemble(3, name="qtls", extra_cfg=tls_cfg(pki)) as ens:
        write_and_check_everywhere(ens, f"/qtls-{uuid.uuid4().hex[:8]}", b"over tls")
        port = ens.peer_ports[ens.leader()]
        plain = probe_plain(port)
        assert plain is not None and (plain == b"" or plain[:1] == b"\x15"), \
            f"plaintext on a TLS peer port must be dropped, got {plain!r}"
        assert probe_tls(port, pki, pki.server) == "open", "a member's own certificate is taken"
        for name, leaf in [("no certificate", None), ("untrusted CA", pki.intruder), ("expired", pki.expired),
                           ("names another host", pki.wrongname)]:
            got = probe_tls(port, pki, leaf)
            assert got != "open", f"{name}: the peer port kept the connection"
        # Still serving after the strangers, and failing over over TLS.
        write_and_check_everywhere(ens, f"/qtls-after-{uuid.uuid4().hex[:8]}", b"still")
        old_leader = ens.leader()
        ens.kill(old_leader)
        new_leader = ens.wait_stable(60)
        assert new_leader != old_leader
        write_and_check_everywhere(ens, f"/qtls-failover-{uuid.uuid4().hex[:8]}", b"failed over")
        ens.start(old_leader)
        ens.wait_stable(60)
        write_and_check_everywhere(ens, f"/qtls-back-{uuid.uuid4().hex[:8]}", b"all three")


def test_a_plaintext_member_is_kept_out_until_it_speaks_tls(pki):
    ens = ensemble.Ensemble(3, name="qtls-mixed", extra_cfg=tls_cfg(pki))
    try:
        reconfigure(ens, 2, {"sslQuorum": "false", "ssl.quorum.keyStore.location": None,
                             "ssl.quorum.trustStore.location": None})
        start_two_of_three(ens)
        path = f"/qtls-mixed-{uuid.uuid4().hex[:8]}"
        create(ens.hostports[0], path, b"tls only")
        # Member 3 (plaintext) gets nowhere: it never serves while the others do.
        modes = wait_modes(ens, lambda md: md[2] in ("leader", "follower"), 10)
        assert modes[2] not in ("leader", "follower"), f"a plaintext member joined a TLS quorum: {modes}"
        restart_with(ens, 2, tls_cfg(pki))
        assert_synced(ens.hostports[2], path, b"tls only")
    finally:
        ens.close()


def test_rolling_change_from_plaintext_to_tls_loses_nothing(pki):
    """ZooKeeper's documented procedure: portUnification=true with the stores on every member
    (rolling restart), then sslQuorum=true on each, then portUnification removed from each.
    The ensemble keeps serving at every step and every write is on every member at the end."""
    written = []
    with ensemble.Ensemble(3, name="qtls-roll", extra_cfg=tls_cfg(pki, ssl_quorum=False, unification=True)) as ens:
        def step(label: str) -> None:
            path = f"/qtls-roll/{label}-{uuid.uuid4().hex[:6]}"
            write_and_check_everywhere(ens, path, label.encode())
            written.append((path, label.encode()))

        step("start")
        for phase, cfg in [("tls", {"sslQuorum": "true"}), ("tls-only", {"portUnification": None})]:
            for i in range(3):
                restart_with(ens, i, cfg)
                step(f"{phase}-{i + 1}")
        port = ens.peer_ports[ens.leader()]
        plain = probe_plain(port)
        assert plain is not None and (plain == b"" or plain[:1] == b"\x15"), plain
        for i in range(3):
            for path, value in written:
                assert_synced(ens.hostports[i], path, value)


def test_a_member_certificate_must_name_its_host_unless_told_otherwise(pki):
    ens = ensemble.Ensemble(3, name="qtls-name", extra_cfg=tls_cfg(pki, leaf=pki.wrongname))
    try:
        for m in ens.members:
            m.start(wait=False)
        modes = wait_modes(ens, lambda md: "leader" in md, 15)
        assert "leader" not in modes and "follower" not in modes, \
            f"members whose certificates name wrongname.invalid formed a quorum at 127.0.0.1: {modes}"
    finally:
        ens.close()
    cfg = tls_cfg(pki, leaf=pki.wrongname, **{"ssl.quorum.hostnameVerification": "false"})
    with ensemble.Ensemble(3, name="qtls-noname", extra_cfg=cfg) as ens:
        write_and_check_everywhere(ens, f"/qtls-noname-{uuid.uuid4().hex[:8]}", b"names unchecked")


@warden_only
@pytest.mark.parametrize("case", ["no_trust_store", "missing_key_store", "trust_store_without_ca", "reload"])
def test_a_quorum_store_that_cannot_be_used_stops_start_up(pki, case, tmp_path):
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    cfg, key = {
        "no_trust_store": ({"ssl.quorum.trustStore.location": None}, "ssl.quorum.trustStore.location"),
        "missing_key_store": ({"ssl.quorum.keyStore.location": str(tmp_path / "nope.pem")},
                              "ssl.quorum.keyStore.location"),
        "trust_store_without_ca": ({"ssl.quorum.trustStore.location": str(empty)}, "ssl.quorum.trustStore.location"),
        "reload": ({"sslQuorumReloadCertFiles": "maybe"}, "sslQuorumReloadCertFiles"),
    }[case]
    ens = ensemble.Ensemble(3, name="qtls-bad", extra_cfg={**tls_cfg(pki), **cfg})
    try:
        m = ens.members[0]
        r = subprocess.run(m.command(), capture_output=True, text=True, timeout=30, cwd=str(m.base_dir))
        out = r.stdout + r.stderr
        assert r.returncode == 2, f"exit {r.returncode}: {out}"
        assert key in out, out
    finally:
        ens.close()


def presented_certificate(port: int, pki) -> bytes:
    """The DER certificate a peer port presents to a member (client certificate: server)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(pki.ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(pki.server.crt), str(pki.server.key))
    with socket.create_connection((harness.HOST, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def der(leaf) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(leaf.crt).read_text())


def test_quorum_certificates_reload_without_a_restart(pki, tmp_path):
    """sslQuorumReloadCertFiles=true: a member whose key store file is replaced presents the
    new certificate on new peer connections, with no restart, and the ensemble serves on."""
    ens = ensemble.Ensemble(3, name="qtls-reload", extra_cfg=tls_cfg(pki, sslQuorumReloadCertFiles="true"))
    try:
        stores = []
        for i in range(3):
            store = tmp_path / f"member{i + 1}.pem"
            store.write_bytes(Path(pki.server.pem).read_bytes())
            stores.append(store)
            reconfigure(ens, i, {"ssl.quorum.keyStore.location": str(store)})
        ens.start()
        write_and_check_everywhere(ens, f"/qtls-reload-{uuid.uuid4().hex[:8]}", b"before")
        leader = ens.leader()
        port = ens.peer_ports[leader]
        assert presented_certificate(port, pki) == der(pki.server)
        # Replaced in place (as a deploy tool rewrites it); the new leaf has the same CA and names.
        stores[leader].write_bytes(Path(pki.server2.pem).read_bytes())
        deadline = time.monotonic() + 20
        while presented_certificate(port, pki) != der(pki.server2):
            assert time.monotonic() < deadline, "the leader still presents its old certificate after 20 s"
            time.sleep(0.5)
        assert ens.leader() == leader, "the reload cost the leader its leadership"
        write_and_check_everywhere(ens, f"/qtls-reload-after-{uuid.uuid4().hex[:8]}", b"after")
    finally:
        ens.close()
