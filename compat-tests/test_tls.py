"""TLS on the client port, configured with ZooKeeper's own zoo.cfg keys, judged by real clients.

Certificates are made by the real `openssl` (tlscerts.py) in a temp dir: a CA, a server
certificate (SAN localhost/127.0.0.1), clients CN=client1 and CN=client2, a client signed by
an untrusted CA and an expired one. Servers get `secureClientPort` (or
`client.portUnification=true`) and the `ssl.*` keys; for ZooKeeper 3.8 they also need
`serverCnxnFactory=...NettyServerCnxnFactory` (TLS needs Netty) and
`authProvider.x509=...X509AuthenticationProvider` (without it ZooKeeper closes every TLS
client), which both servers get (Warden accepts them).

Clients: kazoo (`use_ssl=True`, client certificate, CA verification), zkCli.sh and Curator
(the Java client with `-Dzookeeper.client.secure=true` and PEM stores through
`-Dzookeeper.ssl.*`), and a raw ZooKeeper ConnectRequest over Python's `ssl` for exact
refusal checks. Covered: a TLS session works end to end (create/get/set/delete, watches);
untrusted, expired, missing certificates and plaintext on the TLS port get no session while
good clients keep being served; the `x509` scheme (DN in RFC 2253 form, the
`X509AuthenticationProvider.superUser` key); `ssl.clientAuth=want`; port unification;
PKCS12 and encrypted-PEM stores; secureClientPort alone opens no plaintext port. Warden only:
start-up errors naming the key (JKS, missing file, wrong password, no key store, unknown
ssl.* key) and certificate reload without dropping open sessions.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

import harness
import tlscerts
import zkcli
from tlscerts import dn

WARDEN = harness.default_kind() == "warden"
warden_only = pytest.mark.skipif(not WARDEN, reason="Warden-only")

HERE = Path(__file__).resolve().parent
CURATOR_BUILD = HERE / "curator" / "build.sh"
CURATOR_RUN = HERE / "curator" / "run.sh"

NETTY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
X509_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
SESSION_TIMEOUT_MS = 10000
# Debian's zookeeper.jar manifest lists netty-handler/-transport/-buffer/-common but not the
# jars they need (netty-codec has ByteToMessageDecoder, SslHandler's base class): without
# them ZooKeeper's Netty server and client fail with NoClassDefFoundError. Added to the
# ZooKeeper server's classpath and to zkCli's (a later -cp in CLIENT_JVMFLAGS wins over
# zkCli.sh's own); curator/run.sh adds them itself.
NETTY_EXTRA_JARS = [f"/usr/share/java/{j}.jar" for j in
                    ("netty-codec", "netty-resolver", "netty-transport-native-unix-common")]
ZKCLI_CLASSPATH = ":".join(["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar", *NETTY_EXTRA_JARS])


# -- certificates and servers ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return tlscerts.make_pki(tmp_path_factory.mktemp("pki"))


class TlsServer(harness.Server):
    """A harness.Server with a secure client port (or none: secure_port None).

    Readiness: the harness's four-letter word on the plaintext clientPort when there is one,
    then (when there is a secure port) a ZooKeeper session over TLS with client1's certificate.
    """

    def __init__(self, kind, name, extra_cfg, secure_port, ready_leaf, ca):
        self.secure_port = secure_port
        self.ready_leaf = ready_leaf
        self.ca = ca
        self.plaintext = extra_cfg.get("clientPort", "") is not None
        super().__init__(kind, name=name, extra_cfg=extra_cfg)

    def command(self) -> list[str]:
        cmd = super().command()
        if self.kind == "zookeeper":
            i = cmd.index("-cp") + 1
            cmd[i] = ":".join([cmd[i], *NETTY_EXTRA_JARS])
        return cmd

    @property
    def secure_hostport(self) -> str:
        return f"{harness.HOST}:{self.secure_port}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self.plaintext:
            super()._wait_ready(timeout)
        if self.secure_port is None:
            return
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise harness.ServerStartError(
                    f"{self.kind} exited with code {self.proc.returncode} before TLS was ready.\n"
                    f"{self.describe_log()}")
            try:
                tls_session(self.secure_port, self.ca, self.ready_leaf, timeout=3)
                return
            except (OSError, NoSession) as e:
                last = e
            time.sleep(0.2)
        self.kill()
        raise harness.ServerStartError(
            f"{self.kind}: no TLS session on {self.secure_hostport} after {timeout:.0f}s "
            f"(last: {last!r}).\n{self.describe_log()}")


def tls_cfg(pki, **over) -> dict:
    """zoo.cfg keys for TLS on both servers (PEM stores, clientAuth=need)."""
    cfg = {
        "secureClientPortAddress": harness.HOST,
        "serverCnxnFactory": NETTY,
        "authProvider.x509": X509_PROVIDER,
        "ssl.keyStore.location": str(pki.server.pem),
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": str(pki.ca),
        "ssl.trustStore.type": "PEM",
        "ssl.clientAuth": "need",
    }
    cfg.update(over)
    return {k: v for k, v in cfg.items()}


@pytest.fixture
def tls_factory(request, pki):
    """make(extra_cfg_overrides, secure=True, kind=None) -> a started TlsServer."""
    made = []

    def make(over: dict | None = None, secure: bool = True, kind: str | None = None) -> TlsServer:
        cfg = tls_cfg(pki, **(over or {}))
        port = harness.free_port() if secure else None
        if secure:
            cfg["secureClientPort"] = port
        else:
            cfg.pop("secureClientPortAddress", None)
        name = f"{request.node.name[:28]}-{len(made)}".replace("/", "_").replace("[", "_").replace("]", "")
        srv = TlsServer(kind, name, cfg, port, pki.client1, pki.ca)
        made.append(srv)
        srv.start()
        return srv

    yield make
    for srv in made:
        srv.close()


@pytest.fixture(scope="module")
def shared_tls(pki, tmp_path_factory):
    """One TLS server (clientAuth=need, PEM stores) shared by the module's tests."""
    cfg = tls_cfg(pki)
    port = harness.free_port()
    cfg["secureClientPort"] = port
    srv = TlsServer(None, "tls-shared", cfg, port, pki.client1, pki.ca)
    try:
        srv.start()
        yield srv
    finally:
        srv.close()


def unique(prefix: str) -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:10]}"


# -- clients --------------------------------------------------------------------------------


class NoSession(Exception):
    """The server gave no ZooKeeper session (handshake refused, closed, or no reply)."""


def _tls_context(ca, leaf) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(str(ca))
    if leaf is not None:
        ctx.load_cert_chain(certfile=str(leaf.crt), keyfile=str(leaf.key))
    return ctx


def _connect_request(timeout_ms: int = SESSION_TIMEOUT_MS) -> bytes:
    # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
    body = struct.pack(">iqiqi", 0, 0, timeout_ms, 0, 16) + b"\0" * 16 + b"\0"
    return struct.pack(">i", len(body)) + body


def _session_from(sock) -> int:
    sock.sendall(_connect_request())
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise NoSession("connection closed before a ConnectResponse")
        head += chunk
    (n,) = struct.unpack(">i", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            raise NoSession("connection closed inside the ConnectResponse")
        body += chunk
    _proto, timeout, session_id = struct.unpack(">iiq", body[:16])
    if timeout <= 0 or session_id == 0:
        raise NoSession(f"ConnectResponse refused the session (timeout {timeout})")
    return session_id


def tls_session(port: int, ca, leaf, timeout: float = 5.0) -> int:
    """Open a ZooKeeper session over TLS (leaf's certificate, or none); its id, or NoSession."""
    ctx = _tls_context(ca, leaf)
    try:
        with socket.create_connection((harness.HOST, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw) as s:
                return _session_from(s)
    except (ssl.SSLError, ConnectionError, socket.timeout) as e:
        raise NoSession(repr(e)) from e


def plain_session(port: int, timeout: float = 5.0) -> int:
    """Open a plaintext ZooKeeper session; its id, or NoSession."""
    try:
        with socket.create_connection((harness.HOST, port), timeout=timeout) as s:
            return _session_from(s)
    except (ConnectionError, socket.timeout) as e:
        raise NoSession(repr(e)) from e


def assert_no_session(fn, *args, what: str) -> None:
    try:
        sid = fn(*args)
    except NoSession:
        return
    pytest.fail(f"{what}: got session 0x{sid:x}, expected none")


def kazoo_tls(port: int, ca, leaf, start_timeout: float = 15.0, **kw) -> KazooClient:
    kz = KazooClient(
        hosts=f"{harness.HOST}:{port}",
        use_ssl=True,
        ca=str(ca),
        certfile=str(leaf.crt) if leaf else None,
        keyfile=str(leaf.key) if leaf else None,
        verify_certs=True,
        timeout=SESSION_TIMEOUT_MS / 1000,
        **kw,
    )
    try:
        kz.start(timeout=start_timeout)
    except BaseException:
        _close(kz)
        raise
    return kz


def kazoo_plain(port: int, start_timeout: float = 15.0) -> KazooClient:
    kz = KazooClient(hosts=f"{harness.HOST}:{port}", timeout=SESSION_TIMEOUT_MS / 1000)
    try:
        kz.start(timeout=start_timeout)
    except BaseException:
        _close(kz)
        raise
    return kz


def _close(kz: KazooClient) -> None:
    try:
        kz.stop()
    except Exception:
        pass
    try:
        kz.close()
    except Exception:
        pass


def assert_kazoo_refused(port: int, ca, leaf, what: str, use_ssl: bool = True) -> None:
    """A kazoo client gets no session within a few seconds."""
    if use_ssl:
        kz = KazooClient(hosts=f"{harness.HOST}:{port}", use_ssl=True, ca=str(ca),
                         certfile=str(leaf.crt) if leaf else None, keyfile=str(leaf.key) if leaf else None,
                         verify_certs=True, timeout=SESSION_TIMEOUT_MS / 1000)
    else:
        kz = KazooClient(hosts=f"{harness.HOST}:{port}", timeout=SESSION_TIMEOUT_MS / 1000)
    try:
        try:
            kz.start(timeout=4)
        except Exception:
            return  # kazoo's start timed out: no session
        pytest.fail(f"{what}: kazoo got session 0x{kz.client_id[0]:x}, expected none")
    finally:
        _close(kz)


# -- 1. kazoo over TLS ----------------------------------------------------------------------


def test_kazoo_tls_crud_and_watches(shared_tls, pki):
    """kazoo over TLS with client1's certificate: create/get/set/delete, data and child watches."""
    kz = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client1)
    try:
        p = unique("tls-kz")
        assert kz.create(p, b"v0") == p
        data, stat = kz.get(p)
        assert data == b"v0" and stat.version == 0
        fired = []
        got = threading.Event()

        def watch(ev):
            fired.append((ev.type, ev.path))
            got.set()

        kz.get(p, watch=watch)
        # The change comes from another TLS session (client2), so the event crosses connections.
        other = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client2)
        try:
            other.set(p, b"v1")
            assert got.wait(10), "data watch did not fire"
            assert fired == [("CHANGED", p)]
            got.clear()
            fired.clear()
            kz.get_children(p, watch=watch)
            other.create(p + "/child", b"c")
            assert got.wait(10), "child watch did not fire"
            assert fired == [("CHILD", p)]
        finally:
            _close(other)
        data, stat = kz.get(p)
        assert data == b"v1" and stat.version == 1
        assert kz.get_children(p) == ["child"]
        kz.set(p, b"v2", version=1)
        got.clear()
        fired.clear()
        kz.exists(p + "/child", watch=watch)
        kz.delete(p, recursive=True)
        assert got.wait(10), "exists watch did not fire on delete"
        assert fired[0] == ("DELETED", p + "/child")
        assert kz.exists(p) is None
    finally:
        _close(kz)


def test_kazoo_tls_large_values(shared_tls, pki):
    """Values large enough that the server writes them straight from the tree (64 KiB and up)
    come back intact over TLS, also with several gets in flight whose replies follow each
    other, and a small value read between them is not mixed into them."""
    kz = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client1)
    try:
        p = unique("tls-big")
        kz.create(p, b"")
        values = {f"{p}/v{i}": os.urandom(size) for i, size in enumerate([64 * 1024, 300_000, 1024 * 1024 - 4096])}
        values[f"{p}/small"] = b"s" * 100
        for path, value in values.items():
            kz.create(path, value)
        for _ in range(3):
            pending = [(path, kz.get_async(path)) for path in values]
            for path, async_result in pending:
                data, stat = async_result.get(timeout=20)
                assert data == values[path] and stat.dataLength == len(values[path]), path
    finally:
        _close(kz)


# -- 2. zkCli over TLS ----------------------------------------------------------------------


def java_tls_flags(pki, leaf) -> str:
    return " ".join([
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        "-Dzookeeper.client.secure=true",
        f"-Dzookeeper.ssl.keyStore.location={leaf.pem}",
        "-Dzookeeper.ssl.keyStore.type=PEM",
        f"-Dzookeeper.ssl.trustStore.location={pki.ca}",
        "-Dzookeeper.ssl.trustStore.type=PEM",
    ])


def test_zkcli_tls_create_and_get(shared_tls, pki, monkeypatch):
    """zkCli.sh (Java client, Netty, PEM stores) over TLS: create and get a node; read an x509
    node made for its certificate's DN, whose getAcl shows the DN."""
    p = unique("tls-cli")
    kz = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client1)
    try:
        kz.create(p + "-x", b"x509-data", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        monkeypatch.setenv("CLIENT_JVMFLAGS", f"-cp {ZKCLI_CLASSPATH} " + java_tls_flags(pki, pki.client1))
        run = zkcli.run(shared_tls.secure_hostport, [
            f"create {p} hello-tls",
            f"get {p}",
            f"get {p}-x",
            f"getAcl {p}-x",
            "whoami",
        ])
        assert run.out(0) == [f"Created {p}"], run
        assert run.out(1) == ["hello-tls"], run
        assert run.out(2) == ["x509-data"], run
        # zkCli's getAcl prints the id URL-encoded (',' as %2C).
        assert run.out(3) == [f"'x509,'{dn('client1').replace(',', '%2C')}", ": cdrwa"], run
        # whoami (3.7+) lists the session's identities, as ZooKeeper 3.8 orders them.
        assert run.out(4) == ["Auth scheme: User", "ip: 127.0.0.1", f"x509: {dn('client1')}"], run
        assert kz.get(p)[0] == b"hello-tls"
        kz.delete(p)
        kz.delete(p + "-x")
    finally:
        _close(kz)


# -- 3. Curator over TLS --------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_curator_tls_mutex(shared_tls, pki):
    """Curator 5.4's InterProcessMutex (8 sessions x 10 acquisitions) over TLS."""
    b = subprocess.run([str(CURATOR_BUILD)], capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stdout + b.stderr
    env = dict(os.environ, CURATOR_JVMFLAGS=java_tls_flags(pki, pki.client1))
    r = subprocess.run([str(CURATOR_RUN), shared_tls.secure_hostport, "mutex"], capture_output=True,
                       text=True, timeout=240, env=env)
    out = r.stdout + "\n--- stderr ---\n" + r.stderr
    assert r.returncode == 0 and "PASS mutex:" in r.stdout, out


# -- 4. refusals ----------------------------------------------------------------------------


def test_refusals_then_good_clients_still_served(shared_tls, pki):
    """No session for: plaintext on the TLS port, an untrusted certificate, an expired one, none
    under clientAuth=need. A good client is served before, between and after."""
    port = shared_tls.secure_port
    assert tls_session(port, pki.ca, pki.client1)
    assert_no_session(plain_session, port, what="plaintext ConnectRequest on the TLS port")
    assert tls_session(port, pki.ca, pki.client2)
    assert_no_session(tls_session, port, pki.ca, pki.intruder, what="certificate from an untrusted CA")
    assert_no_session(tls_session, port, pki.ca, pki.expired, what="expired certificate")
    # Control: the same `openssl ca` issuance with current dates is accepted.
    assert tls_session(port, pki.ca, pki.ca_issued)
    assert_no_session(tls_session, port, pki.ca, None, what="no certificate, clientAuth=need")
    # The same through kazoo.
    assert_kazoo_refused(port, pki.ca, None, "kazoo plaintext on the TLS port", use_ssl=False)
    assert_kazoo_refused(port, pki.ca, pki.intruder, "kazoo, untrusted certificate")
    assert_kazoo_refused(port, pki.ca, pki.expired, "kazoo, expired certificate")
    assert_kazoo_refused(port, pki.ca, None, "kazoo, no certificate")
    assert tls_session(port, pki.ca, pki.client1)
    kz = kazoo_tls(port, pki.ca, pki.client2)
    try:
        p = unique("tls-after-refusals")
        kz.create(p, b"ok")
        assert kz.get(p)[0] == b"ok"
        kz.delete(p)
    finally:
        _close(kz)


# -- 5. x509 ACLs ---------------------------------------------------------------------------


def test_x509_acl(shared_tls, pki):
    """A node with x509:<client1's DN>: client1 reads it, client2 and plaintext get NoAuth,
    getACL shows the DN."""
    p = unique("tls-x509")
    c1 = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client1)
    c2 = kazoo_tls(shared_tls.secure_port, pki.ca, pki.client2)
    plain = kazoo_plain(shared_tls.port)
    try:
        c1.create(p, b"secret", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        assert c1.get(p)[0] == b"secret"
        acls, _ = c1.get_acls(p)
        assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [(Permissions.ALL, "x509", dn("client1"))]
        with pytest.raises(NoAuthError):
            c2.get(p)
        with pytest.raises(NoAuthError):
            plain.get(p)
        with pytest.raises(NoAuthError):
            c2.set(p, b"stolen")
        c1.set(p, b"secret2")
        assert c1.get(p)[0] == b"secret2"
        c1.delete(p)
    finally:
        for c in (c1, c2, plain):
            _close(c)


def test_x509_super_user(tls_factory, pki):
    """X509AuthenticationProvider.superUser = client2's DN: client2 reads client1's x509 node;
    a plaintext client still cannot."""
    srv = tls_factory({"X509AuthenticationProvider.superUser": dn("client2")})
    p = unique("tls-super")
    c1 = kazoo_tls(srv.secure_port, pki.ca, pki.client1)
    c2 = kazoo_tls(srv.secure_port, pki.ca, pki.client2)
    plain = kazoo_plain(srv.port)
    try:
        c1.create(p, b"for-super", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        assert c2.get(p)[0] == b"for-super"
        c2.set(p, b"set-by-super")
        assert c1.get(p)[0] == b"set-by-super"
        with pytest.raises(NoAuthError):
            plain.get(p)
    finally:
        for c in (c1, c2, plain):
            _close(c)


def test_x509_super_user_prefixed_zoo_cfg_key_grants_nothing(tls_factory, pki):
    """`zookeeper.X509AuthenticationProvider.superUser` written in zoo.cfg is not the super-user
    key: ZooKeeper 3.8 turns an unknown zoo.cfg key K into the system property `zookeeper.K`
    (here zookeeper.zookeeper.X509...), which nothing reads, so client2 stays an ordinary
    identity. (The JVM property -Dzookeeper.X509AuthenticationProvider.superUser and the
    zoo.cfg key X509AuthenticationProvider.superUser are the spellings that work.) Warden
    refuses to start on it, naming the key and the spelling that works, rather than grant
    super where ZooKeeper would not, or ignore it silently."""
    key = "zookeeper.X509AuthenticationProvider.superUser"
    if WARDEN:
        rc, out = _start_fails({key: dn("client2")})
        assert rc == 2 and key in out and "write X509AuthenticationProvider.superUser" in out, (rc, out[-1500:])
        return
    srv = tls_factory({key: dn("client2")})
    p = unique("tls-super-prefixed")
    c1 = kazoo_tls(srv.secure_port, pki.ca, pki.client1)
    c2 = kazoo_tls(srv.secure_port, pki.ca, pki.client2)
    try:
        c1.create(p, b"not-for-client2", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        with pytest.raises(NoAuthError):
            c2.get(p)
    finally:
        _close(c1)
        _close(c2)


# -- 6. clientAuth=want ---------------------------------------------------------------------


def test_client_auth_want(tls_factory, pki):
    """ssl.clientAuth=want: a client without a certificate gets a session and no x509 identity;
    one with a certificate gets its identity."""
    srv = tls_factory({"ssl.clientAuth": "want"})
    p = unique("tls-want")
    c1 = kazoo_tls(srv.secure_port, pki.ca, pki.client1)
    try:
        c1.create(p, b"mine", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        assert c1.get(p)[0] == b"mine"
        assert tls_session(srv.secure_port, pki.ca, None)
        anon = kazoo_tls(srv.secure_port, pki.ca, None)
        try:
            assert anon.exists("/") is not None
            with pytest.raises(NoAuthError):
                anon.get(p)
        finally:
            _close(anon)
        # An untrusted certificate is still refused under want.
        assert_no_session(tls_session, srv.secure_port, pki.ca, pki.intruder, what="untrusted certificate, want")
    finally:
        _close(c1)


# -- 7. port unification --------------------------------------------------------------------


def test_port_unification(tls_factory, pki):
    """client.portUnification=true: one port serves a plaintext and a TLS kazoo client."""
    srv = tls_factory({"client.portUnification": "true"}, secure=False)
    p = unique("tls-unified")
    plain = kazoo_plain(srv.port)
    tls = kazoo_tls(srv.port, pki.ca, pki.client1)
    try:
        plain.create(p, b"from-plain")
        assert tls.get(p)[0] == b"from-plain"
        tls.create(p + "/x", b"x509-only", acl=[ACL(Permissions.ALL, Id("x509", dn("client1")))])
        assert tls.get(p + "/x")[0] == b"x509-only"
        with pytest.raises(NoAuthError):
            plain.get(p + "/x")
        assert harness.four_letter(srv.hostport, "ruok").strip() == "imok"
    finally:
        _close(plain)
        _close(tls)


# -- 8. key and trust stores ----------------------------------------------------------------


def _roundtrip(srv, pki, leaf) -> None:
    kz = kazoo_tls(srv.secure_port, pki.ca, leaf)
    try:
        p = unique("tls-store")
        kz.create(p, b"x", acl=[ACL(Permissions.ALL, Id("x509", dn(leaf.name)))])
        assert kz.get(p)[0] == b"x"
    finally:
        _close(kz)


def test_pkcs12_stores(tls_factory, pki):
    """PKCS12 key and trust stores with passwords."""
    srv = tls_factory({
        "ssl.keyStore.location": str(pki.server_p12), "ssl.keyStore.type": "PKCS12",
        "ssl.keyStore.password": tlscerts.STORE_PW,
        "ssl.trustStore.location": str(pki.trust_p12), "ssl.trustStore.type": "PKCS12",
        "ssl.trustStore.password": tlscerts.STORE_PW,
    })
    _roundtrip(srv, pki, pki.client1)
    assert_no_session(tls_session, srv.secure_port, pki.ca, pki.intruder, what="untrusted certificate, PKCS12 trust")


@pytest.mark.skipif(not WARDEN, reason="ZooKeeper 3.8's PemReader cannot decrypt a PBES2 (aes-256-cbc) key on "
                    "Java 17: 'NoSuchAlgorithmException: PBES2 SecretKeyFactory not available' at the first TLS "
                    "connection")
def test_encrypted_pem_key_store(tls_factory, pki):
    """A PEM key store whose key is an encrypted PKCS#8 (`openssl pkcs8 -topk8 -v2 aes-256-cbc`),
    with ssl.keyStore.password."""
    srv = tls_factory({"ssl.keyStore.location": str(pki.server_enc_pem), "ssl.keyStore.password": tlscerts.STORE_PW})
    _roundtrip(srv, pki, pki.client2)


def test_encrypted_pem_key_store_pbes1(tls_factory, pki):
    """A PEM key store whose key is an encrypted PKCS#8 v1 (`openssl pkcs8 -topk8 -v1
    PBE-SHA1-3DES`), with ssl.keyStore.password: the encrypted-PEM form ZooKeeper 3.8 reads, so
    the one a zoo.cfg moved over from ZooKeeper may name."""
    srv = tls_factory({"ssl.keyStore.location": str(pki.server_pbes1_pem), "ssl.keyStore.password": tlscerts.STORE_PW})
    _roundtrip(srv, pki, pki.client2)


def _start_fails(cfg: dict) -> tuple[int, str]:
    srv = harness.Server(kind="warden", name="tls-bad", extra_cfg=cfg)
    try:
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30, cwd=str(srv.base_dir))
        return r.returncode, r.stdout + r.stderr
    finally:
        srv.close()


@warden_only
@pytest.mark.parametrize("case", ["jks", "missing", "wrong_p12_password", "no_key_store", "unknown_ssl_key"])
def test_bad_store_stops_start_up(pki, case, tmp_path):
    """A store Warden cannot use stops start-up (non-zero exit) naming the zoo.cfg key.
    (Warden only: these are Warden's start-up checks and messages.)"""
    cfg = tls_cfg(pki, secureClientPort=harness.free_port())
    if case == "jks":
        cfg.update({"ssl.keyStore.location": str(pki.server_jks), "ssl.keyStore.password": tlscerts.STORE_PW})
        cfg.pop("ssl.keyStore.type")
        key, extra = "ssl.keyStore.location", "keytool"
    elif case == "missing":
        cfg["ssl.keyStore.location"] = str(tmp_path / "no-such-store.pem")
        key, extra = "ssl.keyStore.location", "no-such-store.pem"
    elif case == "wrong_p12_password":
        cfg.update({"ssl.keyStore.location": str(pki.server_p12), "ssl.keyStore.type": "PKCS12",
                    "ssl.keyStore.password": "not-the-password"})
        key, extra = "ssl.keyStore.password", "server.p12"
    elif case == "no_key_store":
        cfg.pop("ssl.keyStore.location")
        cfg.pop("ssl.keyStore.type")
        key, extra = "ssl.keyStore.location", "no key store"
    else:
        cfg["ssl.foo"] = "bar"
        key, extra = "ssl.foo", "ssl.foo"
    rc, out = _start_fails(cfg)
    assert rc != 0, out[-3000:]
    assert key in out and extra in out, out[-3000:]


# -- 9. secureClientPort alone --------------------------------------------------------------


def _listening_ports(pid: int) -> set[int]:
    """TCP ports the process `pid` listens on (its socket inodes in its own /proc/PID/net)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A = LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def test_secure_port_only_opens_no_plaintext_port(tls_factory, pki):
    """secureClientPort and no clientPort: the process listens on the secure port alone, and a
    plaintext ConnectRequest there gets no session."""
    srv = tls_factory({"clientPort": None, "clientPortAddress": None})
    assert tls_session(srv.secure_port, pki.ca, pki.client1)
    assert_no_session(plain_session, srv.secure_port, what="plaintext on the secure port")
    ports = _listening_ports(srv.pid)
    assert ports == {srv.secure_port}, (ports, srv.describe_log())
    if WARDEN:
        log = Path(srv.log_path).read_text(errors="replace")
        assert "serving TLS clients" in log, srv.describe_log()
        assert "serving clients" not in log, srv.describe_log()
    kz = kazoo_tls(srv.secure_port, pki.ca, pki.client1)
    try:
        assert kz.exists("/") is not None
    finally:
        _close(kz)


# -- 10. certificate reload -----------------------------------------------------------------


def _peer_subject(port: int, ca, leaf) -> dict:
    ctx = _tls_context(ca, leaf)
    with socket.create_connection((harness.HOST, port), timeout=5) as raw:
        with ctx.wrap_socket(raw) as s:
            cert = s.getpeercert()
    return {k: v for rdn in cert["subject"] for (k, v) in rdn}


@warden_only
def test_certificate_reload_keeps_open_sessions(tls_factory, pki, tmp_path):
    """Replacing the key store file: new TLS connections get the new certificate within ~3 s,
    an open kazoo session keeps working without reconnecting. (Warden only: ZooKeeper 3.8 has
    no store reload; 3.9's FileChangeWatcher does.)"""
    store = tmp_path / "store.pem"
    shutil.copy(pki.server.pem, store)
    srv = tls_factory({"ssl.keyStore.location": str(store)})
    assert _peer_subject(srv.secure_port, pki.ca, pki.client1)["commonName"] == "localhost"
    states = []
    kz = kazoo_tls(srv.secure_port, pki.ca, pki.client1)
    kz.add_listener(lambda s: states.append(s))
    try:
        p = unique("tls-reload")
        kz.create(p, b"before")
        session = kz.client_id
        tmp = tmp_path / "store.pem.new"
        shutil.copy(pki.server2.pem, tmp)
        os.replace(tmp, store)
        t0 = time.monotonic()
        harness.wait_until(
            lambda: _peer_subject(srv.secure_port, pki.ca, pki.client1)["commonName"] == "localhost-reloaded",
            timeout=8, what="a new TLS connection to see the reloaded certificate")
        took = time.monotonic() - t0
        assert took < 5, took
        assert kz.get(p)[0] == b"before"
        kz.set(p, b"after")
        assert kz.get(p)[0] == b"after"
        assert kz.client_id == session and states == [], (states, kz.client_id, session)
        # A new kazoo session over the reloaded certificate works too.
        kz2 = kazoo_tls(srv.secure_port, pki.ca, pki.client2)
        try:
            assert kz2.get(p)[0] == b"after"
        finally:
            _close(kz2)
    finally:
        _close(kz)


# -- the admin server over HTTPS ---------------------------------------------------------------

def _admin_get(url: str, ca=None, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET url (https: verified against `ca`, host name not checked: the server certificate
    names 127.0.0.1 by IP); (status, body)."""
    import urllib.request

    ctx = None
    if url.startswith("https:"):
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.check_hostname = False
    with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
        return r.status, r.read()


def _wait_admin(url: str, ca=None, seconds: float = 30.0) -> tuple[int, bytes]:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return _admin_get(url, ca)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("mode", ["admin.forceHttps", "admin.portUnification"])
def test_admin_server_over_https_with_the_quorum_key_store(pki, mode):
    """ZooKeeper's admin server speaks HTTPS with the ssl.quorum.* key store: only TLS with
    admin.forceHttps, TLS and plaintext on one port with admin.portUnification."""
    port = harness.free_port()
    srv = harness.Server(name="admin-https", extra_cfg={
        "admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port,
        mode: "true",
        "ssl.quorum.keyStore.location": str(pki.server.pem),
        "ssl.quorum.trustStore.location": str(pki.ca),
    })
    srv.start()
    try:
        status, body = _wait_admin(f"https://127.0.0.1:{port}/commands/ruok", pki.ca)
        assert status == 200 and b'"command"' in body and b"ruok" in body, body
        # A client that does not trust the server's CA gets no answer.
        with pytest.raises(OSError):
            _admin_get(f"https://127.0.0.1:{port}/commands/ruok", pki.rogue_ca)
        if mode == "admin.forceHttps":
            # Plain HTTP gets no HTTP answer: a closed connection or a TLS alert's bytes.
            import http.client

            with pytest.raises((OSError, http.client.HTTPException)):
                _admin_get(f"http://127.0.0.1:{port}/commands/ruok")
        else:
            status, body = _admin_get(f"http://127.0.0.1:{port}/commands/ruok")
            assert status == 200 and b"ruok" in body, body
    finally:
        srv.stop()
        srv.close()


@pytest.mark.skipif(harness.default_kind() != "warden", reason="Warden-only: start-up errors")
def test_admin_https_without_a_usable_key_store_stops_start_up(pki, tmp_path):
    for extra, key in [
        ({}, "ssl.quorum.keyStore.location"),
        ({"ssl.quorum.keyStore.location": str(tmp_path / "missing.pem")}, "ssl.quorum.keyStore.location"),
    ]:
        srv = harness.Server(name="admin-https-bad", extra_cfg={
            "admin.enableServer": "true", "admin.serverPort": harness.free_port(), "admin.forceHttps": "true", **extra})
        try:
            proc = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30)
            err = proc.stdout + proc.stderr
            assert proc.returncode == 2 and key in err, err
        finally:
            srv.close()
