"""SASL for clients with ZooKeeper's own JAAS files: DIGEST-MD5, the `sasl:` ACL scheme, the
`zookeeper.superUser` key, and enforced authentication (`enforce.auth.enabled`,
`sessionRequireClientSASLAuth`). The same tests run against ZooKeeper 3.8
(`COMPAT_SERVER=zookeeper`), which reads the JAAS file from the JVM property
`java.security.auth.login.config` (the harness passes zoo.cfg's `java.*` keys as that).

Kerberos (GSSAPI) runs against a real MIT KDC (krb5kdc.py) with keytabs made by kadmin.local;
the server's JAAS section is ZooKeeper's `Krb5LoginModule` one. Warden's GSSAPI needs the
`kerberos` feature (run-tests.sh builds with it); without it those tests are skipped.

Covered: kazoo (pure-sasl) and zkCli (the JAAS `Client` section) authenticate with DIGEST-MD5
and make `sasl:` nodes that anonymous, digest and other SASL identities cannot read while
the super user can; a wrong password or an unknown user fails with AuthFailed and the
session never reads anything; with enforcement an unauthenticated session's first request
gets SessionClosedRequireSaslAuth while an authenticated one is served. Warden only: the
JAAS file named in `SERVER_JVMFLAGS` (as ZooKeeper's start scripts pass it), and JAAS
problems (missing file, missing section, no users, a Kerberos section this build does not
provide, enforcement without SASL) stop start-up naming the key.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, SessionClosedRequireSaslError
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.security import make_acl, make_digest_acl

import harness
import krb5kdc
import zkcli

WARDEN = harness.default_kind() == "warden"
warden_only = pytest.mark.skipif(not WARDEN, reason="Warden-only")

SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
USERS = {"bob": "bob-secret", "alice": "alice-secret", "admin": "admin-secret"}


def server_jaas(path, users=USERS) -> str:
    lines = "\n".join(f'  user_{u}="{p}"' for u, p in users.items())
    path.write_text("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n" + lines + ";\n};\n")
    return str(path)


def client_jaas(path, user: str, password: str) -> str:
    path.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{user}"\n  password="{password}";\n}};\n'
    )
    return str(path)


def sasl_cfg(jaas: str, **extra) -> dict:
    cfg = {"java.security.auth.login.config": jaas, "authProvider.1": SASL_PROVIDER, "superUser": "admin"}
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def jaas_file(tmp_path_factory):
    return server_jaas(tmp_path_factory.mktemp("sasl") / "server-jaas.conf")


@pytest.fixture(scope="module")
def sasl_server(jaas_file):
    srv = harness.Server(name="sasl", extra_cfg=sasl_cfg(jaas_file))
    srv.start()
    yield srv
    srv.stop()
    srv.close()  # and its temp dir


def unique(prefix: str) -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:8]}"


def sasl_client(hostport: str, user: str, password: str | None = None) -> KazooClient:
    zk = KazooClient(
        hosts=hostport,
        timeout=10,
        sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": password or USERS[user]},
        connection_retry={"max_tries": 0},
    )
    zk.start(timeout=15)
    return zk


def plain_client(hostport: str, **kw) -> KazooClient:
    zk = KazooClient(hosts=hostport, timeout=10, **kw)
    zk.start(timeout=15)
    return zk


def close(*clients: KazooClient) -> None:
    for zk in clients:
        try:
            zk.stop()
            zk.close()
        except Exception:
            pass


def test_digest_md5_sasl_acl_allows_its_user_and_super_only(sasl_server):
    p = unique("sasl")
    bob = sasl_client(sasl_server.hostport, "bob")
    alice = sasl_client(sasl_server.hostport, "alice")
    admin = sasl_client(sasl_server.hostport, "admin")
    anon = plain_client(sasl_server.hostport)
    dig = plain_client(sasl_server.hostport, auth_data=[("digest", "bob:bob-secret")])
    try:
        bob.create(p, b"bob's", acl=[make_acl("sasl", "bob", all=True)])
        assert bob.get(p)[0] == b"bob's"
        acl, _ = bob.get_acls(p)
        assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("sasl", "bob", 31)]
        # Another SASL user, an anonymous session and a digest identity named like him: refused.
        for other in (alice, anon, dig):
            with pytest.raises(NoAuthError):
                other.get(p)
            with pytest.raises(NoAuthError):
                other.set(p, b"x")
        # The super user (zookeeper.superUser=admin) passes every ACL.
        assert admin.get(p)[0] == b"bob's"
        admin.set(p, b"by admin")
        # The `auth` scheme expands to the SASL identity.
        bob.create(p + "-auth", b"", acl=[make_acl("auth", "", all=True)])
        acl, _ = bob.get_acls(p + "-auth")
        assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", "bob")]
        with pytest.raises(NoAuthError):
            alice.get(p + "-auth")
        bob.delete(p + "-auth")
        bob.delete(p)
    finally:
        close(bob, alice, admin, anon, dig)


@pytest.mark.parametrize("user,password", [
    ("bob", "wrong"),
    ("mallory", "mallory-secret"),
    # ZooKeeper 3.8 lets this one in: its DIGEST-MD5 callback handler keeps the name of the
    # last user it found, and checks an unknown user's answer against that user's password.
    pytest.param("mallory", "bob-secret", marks=warden_only),
])
def test_wrong_password_or_unknown_user_fails_with_auth_failed(sasl_server, user, password):
    p = unique("sasl-guarded")
    bob = sasl_client(sasl_server.hostport, "bob")
    states: list[str] = []
    zk = KazooClient(
        hosts=sasl_server.hostport,
        timeout=10,
        sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": password},
        connection_retry={"max_tries": 0},
    )
    failed = threading.Event()

    def watch_state(_state):
        states.append(zk.client_state)
        if zk.client_state == KeeperState.AUTH_FAILED:
            failed.set()

    zk.add_listener(watch_state)
    try:
        bob.create(p, b"secret", acl=[make_acl("sasl", "bob", all=True)])
        try:
            zk.start(timeout=10)
        except Exception:
            pass
        # kazoo turns the server's AuthFailed answer into the AUTH_FAILED keeper state (and
        # then closes).
        assert failed.wait(15), states
        with pytest.raises(Exception) as e:
            zk.get(p)
        assert not isinstance(e.value, AssertionError)
        bob.delete(p)
    finally:
        close(zk, bob)


def test_zkcli_with_a_jaas_client_section(sasl_server, tmp_path, monkeypatch):
    p = unique("sasl-cli")
    bob = sasl_client(sasl_server.hostport, "bob")
    try:
        bob.create(p, b"for-bob", acl=[make_acl("sasl", "bob", all=True)])
        monkeypatch.setenv("CLIENT_JVMFLAGS",
                           f"-Djava.security.auth.login.config={client_jaas(tmp_path / 'bob.conf', 'bob', 'bob-secret')}")
        run = zkcli.run(sasl_server.hostport, [f"get {p}", f"create {p}-cli made-by-cli sasl:bob:cdrwa", "whoami"])
        assert run.out(0) == ["for-bob"], run
        assert run.out(1) == [f"Created {p}-cli"], run
        # whoami's identities, in no particular order (ZooKeeper keeps them in a hash set).
        assert run.out(2)[0] == "Auth scheme: User", run
        assert sorted(run.out(2)[1:]) == ["ip: 127.0.0.1", "sasl: bob"], run
        monkeypatch.setenv("CLIENT_JVMFLAGS",
                           f"-Djava.security.auth.login.config={client_jaas(tmp_path / 'al.conf', 'alice', 'alice-secret')}")
        run = zkcli.run(sasl_server.hostport, [f"get {p}", f"get {p}-cli"])
        assert run.out(0) == [f"Insufficient permission : {p}"], run
        assert run.out(1) == [f"Insufficient permission : {p}-cli"], run
        assert bob.get(p + "-cli")[0] == b"made-by-cli"
        bob.delete(p + "-cli")
        bob.delete(p)
    finally:
        close(bob)


@pytest.mark.parametrize("keys", [
    {"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"},
    {"sessionRequireClientSASLAuth": "true"},
], ids=["enforce.auth", "sessionRequireClientSASLAuth"])
def test_enforced_authentication_refuses_unauthenticated_sessions(jaas_file, keys):
    srv = harness.Server(name="sasl-enforced", extra_cfg=sasl_cfg(jaas_file, **keys))
    srv.start()
    try:
        bob = sasl_client(srv.hostport, "bob")
        try:
            bob.create("/enforced", b"ok")
            assert bob.get("/enforced")[0] == b"ok"
        finally:
            close(bob)
        # No authentication at all, and a digest identity (not the enforced scheme): refused.
        for auth in ([], [("digest", "bob:bob-secret")]):
            zk = KazooClient(hosts=srv.hostport, timeout=10, auth_data=auth,
                             connection_retry={"max_tries": 0}, command_retry={"max_tries": 0})
            try:
                zk.start(timeout=15)
                with pytest.raises(SessionClosedRequireSaslError):
                    zk.get("/enforced")
            finally:
                close(zk)
    finally:
        srv.stop()
        srv.close()  # and its temp dir


@warden_only
def test_jaas_file_from_server_jvmflags(jaas_file, monkeypatch):
    """ZooKeeper's start scripts carry the JAAS file in SERVER_JVMFLAGS/JVMFLAGS; Warden reads it there."""
    monkeypatch.setenv("SERVER_JVMFLAGS", f"-Xmx512m -Djava.security.auth.login.config={jaas_file}")
    srv = harness.Server(name="sasl-env", extra_cfg={"authProvider.1": SASL_PROVIDER})
    srv.start()
    try:
        bob = sasl_client(srv.hostport, "bob")
        try:
            bob.create("/from-env", b"", acl=[make_acl("sasl", "bob", all=True)])
            assert bob.get("/from-env")[0] == b""
        finally:
            close(bob)
    finally:
        srv.stop()
        srv.close()  # and its temp dir


@warden_only
@pytest.mark.parametrize("case", ["missing-file", "missing-section", "no-users", "kerberos", "enforced-without-jaas"])
def test_sasl_config_errors_stop_start_up_naming_the_key(tmp_path, case):
    jaas = tmp_path / "jaas.conf"
    if case == "missing-section":
        jaas.write_text("Client { org.apache.zookeeper.server.auth.DigestLoginModule required username=a password=b; };")
    elif case == "no-users":
        jaas.write_text("Server { org.apache.zookeeper.server.auth.DigestLoginModule required; };")
    elif case == "kerberos":
        jaas.write_text('Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
                        'keyTab="/etc/zk.keytab" principal="zookeeper/localhost@EXAMPLE.COM"; };')
    cfg = {"java.security.auth.login.config": str(jaas)}
    key, why = "java.security.auth.login.config", {
        "missing-file": "cannot read",
        "missing-section": "no section named Server",
        "no-users": "names no user",
        # A Kerberos build names the keytab it cannot read; a build without it says so.
        "kerberos": "keyTab /etc/zk.keytab" if warden_has_kerberos() else "built without it",
    }.get(case, "")
    if case == "enforced-without-jaas":
        cfg = {"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"}
        key, why = "enforce.auth.schemes", "no JAAS"
    srv = harness.Server(name="sasl-bad", extra_cfg=cfg)
    try:
        proc = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0, proc.stdout + proc.stderr
        err = proc.stdout + proc.stderr
        assert key in err and why in err, err
        # Never a password in the error.
        assert "secret" not in err
    finally:
        srv.close()


# -- Kerberos (GSSAPI) ----------------------------------------------------------------------

def warden_has_kerberos() -> bool:
    if not WARDEN:
        return True
    try:
        out = subprocess.run([harness.warden_bin(), "--version"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return False
    return "kerberos" in out


needs_kerberos = pytest.mark.skipif(not warden_has_kerberos(), reason="Warden built without the kerberos feature")

# A kazoo client in its own process, so its Kerberos environment (krb5.conf, ticket cache)
# is its own: argv = hostport, path, then "get" or "create:<acl id>".
KAZOO_GSSAPI = r"""
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl
from kazoo.protocol.states import KeeperState
hostport, path, action = sys.argv[1:4]
zk = KazooClient(hosts=hostport, timeout=10, connection_retry={"max_tries": 0},
                 sasl_options={"mechanism": "GSSAPI", "service": "zookeeper"})
states = []
zk.add_listener(lambda s: states.append(zk.client_state))
try:
    zk.start(timeout=15)
    import time
    time.sleep(0.3)
    if KeeperState.AUTH_FAILED in states or zk.client_state == KeeperState.AUTH_FAILED:
        print("authfailed"); sys.exit(0)
    if action == "get":
        print("ok", zk.get(path)[0].decode())
    else:
        zk.create(path, b"krb", acl=[make_acl("sasl", action.split(":", 1)[1], all=True)])
        print("ok created")
except NoAuthError:
    print("noauth")
except Exception as e:
    print("authfailed" if KeeperState.AUTH_FAILED in states else f"error {type(e).__name__} {e} {states}")
finally:
    try:
        zk.stop(); zk.close()
    except Exception:
        pass
"""


class Realm:
    """A KDC with the server's principal and two users, their keytabs and ticket caches."""

    def __init__(self, base):
        self.base = base
        self.kdc = krb5kdc.Kdc(base).start()
        self.kdc.add_principal("zookeeper/localhost")
        for user in ("bob", "alice"):
            self.kdc.add_principal(user, f"{user}-pw")
        self.server_keytab = self.kdc.keytab(base / "zk.keytab", "zookeeper/localhost")
        self.keytabs = {u: self.kdc.keytab(base / f"{u}.keytab", u) for u in ("bob", "alice")}
        self.caches = {}
        for u in ("bob", "alice"):
            self.caches[u] = base / f"{u}.cc"
            self.kdc.kinit(u, self.caches[u], keytab=self.keytabs[u])

    def server_jaas(self) -> str:
        path = self.base / "server-krb.conf"
        path.write_text(
            "Server {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
            f'  keyTab="{self.server_keytab}"\n  storeKey=true\n  useTicketCache=false\n'
            f'  principal="zookeeper/localhost@{self.kdc.realm}";\n}};\n'
        )
        return str(path)

    def client_jaas(self, user: str) -> str:
        path = self.base / f"client-{user}.conf"
        path.write_text(
            "Client {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
            f'  keyTab="{self.keytabs[user]}"\n  storeKey=true\n  useTicketCache=false\n'
            f'  principal="{user}@{self.kdc.realm}";\n}};\n'
        )
        return str(path)

    def kazoo(self, hostport: str, path: str, action: str, user: str | None, krb5_conf=None) -> str:
        cache = self.caches[user] if user else self.base / "empty.cc"
        env = self.kdc.env(KRB5CCNAME=f"FILE:{cache}")
        if krb5_conf is not None:
            env["KRB5_CONFIG"] = str(krb5_conf)
        r = subprocess.run([sys.executable, "-c", KAZOO_GSSAPI,
                            hostport, path, action], env=env, capture_output=True, text=True, timeout=60)
        return (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1]

    def close(self):
        self.kdc.stop()


@pytest.fixture(scope="module")
def realm(tmp_path_factory):
    r = Realm(tmp_path_factory.mktemp("krb"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def krb_server(realm):
    srv = harness.Server(name="sasl-krb", extra_cfg={
        "java.security.auth.login.config": realm.server_jaas(),
        "java.security.krb5.conf": str(realm.kdc.krb5_conf),
        "authProvider.1": SASL_PROVIDER,
    })
    old = os.environ.get("KRB5RCACHEDIR")
    os.environ["KRB5RCACHEDIR"] = str(realm.base)  # the server's replay cache stays in the test's dir
    try:
        srv.start()
    finally:
        if old is None:
            os.environ.pop("KRB5RCACHEDIR", None)
        else:
            os.environ["KRB5RCACHEDIR"] = old
    yield srv
    srv.stop()
    srv.close()  # and its temp dir


def localhost(hostport: str) -> str:
    """The address by name: a Kerberos client asks for a ticket to zookeeper/<the host it dials>."""
    return "localhost:" + hostport.rsplit(":", 1)[1]


@needs_kerberos
def test_gssapi_kazoo_and_zkcli_with_tickets_from_a_real_kdc(realm, krb_server, monkeypatch):
    p = unique("krb")
    who = f"bob@{realm.kdc.realm}"
    host = localhost(krb_server.hostport)
    assert realm.kazoo(host, p, f"create:{who}", "bob") == "ok created"
    assert realm.kazoo(host, p, "get", "bob") == "ok krb"
    # Another principal, and a session without SASL: refused by the ACL.
    assert realm.kazoo(host, p, "get", "alice") == "noauth"
    anon = plain_client(krb_server.hostport)
    su = plain_client(krb_server.hostport, auth_data=[("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")])
    try:
        with pytest.raises(NoAuthError):
            anon.get(p)
        acl, _ = su.get_acls(p)
        assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", who)]
    finally:
        close(anon, su)
    # zkCli logs in from bob's keytab (JAAS Client section) and gets a ticket for
    # zookeeper/localhost: it names 127.0.0.1's host canonically.
    monkeypatch.setenv("CLIENT_JVMFLAGS", f"-Djava.security.auth.login.config={realm.client_jaas('bob')} "
                                          f"-Djava.security.krb5.conf={realm.kdc.krb5_conf}")
    run = zkcli.run(krb_server.hostport, [f"get {p}", "whoami"])
    assert run.out(0) == ["krb"], run
    assert run.out(1)[0] == "Auth scheme: User", run
    assert sorted(run.out(1)[1:]) == ["ip: 127.0.0.1", f"sasl: {who}"], run
    monkeypatch.setenv("CLIENT_JVMFLAGS", f"-Djava.security.auth.login.config={realm.client_jaas('alice')} "
                                          f"-Djava.security.krb5.conf={realm.kdc.krb5_conf}")
    run = zkcli.run(krb_server.hostport, [f"get {p}"])
    assert run.out(0) == [f"Insufficient permission : {p}"], run


@needs_kerberos
def test_gssapi_ticket_from_another_kdc_fails_with_auth_failed(realm, krb_server, tmp_path):
    """A ticket for zookeeper/localhost that the server's keytab cannot open (issued by another
    KDC of the same realm name, as a forger would make one) fails with AuthFailed."""
    with krb5kdc.Kdc(tmp_path, realm=realm.kdc.realm).start() as rogue:
        rogue.add_principal("zookeeper/localhost")
        rogue.add_principal("bob", "bob-pw")
        cache = tmp_path / "rogue-bob.cc"
        rogue.kinit("bob", cache, password="bob-pw")
        env = rogue.env(KRB5CCNAME=f"FILE:{cache}")
        r = subprocess.run([sys.executable, "-c", KAZOO_GSSAPI, localhost(krb_server.hostport), "/", "get"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.stdout.strip().splitlines()[-1:] == ["authfailed"], r.stdout + r.stderr


@warden_only
@needs_kerberos
def test_gssapi_keytab_without_the_principal_stops_start_up(realm, tmp_path):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text('Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
                    f'keyTab="{realm.keytabs["bob"]}" principal="zookeeper/localhost@{realm.kdc.realm}"; }};')
    srv = harness.Server(name="sasl-krb-bad", extra_cfg={"java.security.auth.login.config": str(jaas),
                                                         "java.security.krb5.conf": str(realm.kdc.krb5_conf)})
    try:
        proc = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30)
        err = proc.stdout + proc.stderr
        assert proc.returncode == 2, err
        assert "java.security.auth.login.config" in err and "zookeeper/localhost" in err, err
    finally:
        srv.close()
