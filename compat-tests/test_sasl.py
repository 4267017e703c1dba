"""SASL for clients with ZooKeeper's own JAAS files: DIGEST-MD5, the `sasl:` ACL scheme, the
`zookeeper.superUser` key, and enforced authentication (`enforce.auth.enabled`,
`sessionRequireClientSASLAuth`). The same tests run against ZooKeeper 3.8
(`COMPAT_SERVER=zookeeper`), which reads the JAAS file from the JVM property
`java.security.auth.login.config` (the harness passes zoo.cfg's `java.*` keys as that).

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
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, SessionClosedRequireSaslError
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.security import make_acl, make_digest_acl

import harness
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
        "kerberos": "Kerberos",
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
