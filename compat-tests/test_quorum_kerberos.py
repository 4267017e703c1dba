"""Members authenticating each other with Kerberos (SASL GSSAPI), configured as ZooKeeper's docs
show: `quorum.auth.enableSasl`, `quorum.auth.learnerRequireSasl`, `quorum.auth.serverRequireSasl`,
`quorum.auth.kerberos.servicePrincipal=zkquorum/_HOST`, and JAAS `QuorumServer` and
`QuorumLearner` sections with Krb5LoginModule keytabs, against a real MIT KDC (krb5kdc.py).

Covered: a 3-member ensemble whose members must present Kerberos tickets forms, replicates and
fails over; a member whose keytab holds keys the KDC never issued (another realm's KDC made
them) is kept out while the others serve, and joins once given the right keytab. The same
tests run against ZooKeeper 3.8 (`COMPAT_SERVER=zookeeper`).
"""

from __future__ import annotations

import uuid

import pytest

import ensemble
import harness
import krb5kdc
from test_quorum_tls import assert_synced, create, reconfigure, restart_with, start_two_of_three, wait_modes
from test_quorum_tls import write_and_check_everywhere
from test_sasl import needs_kerberos

pytestmark = needs_kerberos

# Each member's principal names its host as the server.N lines do (127.0.0.1): ZooKeeper and
# Warden let a member in only as <service>/<a member's host>@REALM. `_HOST` in the service
# principal becomes the host of the member dialled.
SERVICE = "zkquorum/127.0.0.1"


def jaas(path, keytab, realm: str) -> str:
    section = (
        "  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
        f'  keyTab="{keytab}"\n  storeKey=true\n  useTicketCache=false\n'
        f'  principal="{SERVICE}@{realm}";\n'
    )
    path.write_text(f"QuorumServer {{\n{section}}};\nQuorumLearner {{\n{section}}};\n")
    return str(path)


def cfg(jaas_path: str, krb5_conf) -> dict:
    return {
        "java.security.auth.login.config": jaas_path,
        "java.security.krb5.conf": str(krb5_conf),
        "quorum.auth.enableSasl": "true",
        "quorum.auth.learnerRequireSasl": "true",
        "quorum.auth.serverRequireSasl": "true",
        "quorum.auth.kerberos.servicePrincipal": "zkquorum/_HOST",
    }


@pytest.fixture
def kdc(tmp_path, monkeypatch):
    (tmp_path / "kdc").mkdir()
    k = krb5kdc.Kdc(tmp_path / "kdc").start()
    k.add_principal(SERVICE)
    # Replay caches of every member in the test's dir (MIT and Java both read it).
    monkeypatch.setenv("KRB5RCACHEDIR", str(tmp_path))
    yield k
    k.stop()


def test_kerberos_members_serve_and_fail_over(kdc, tmp_path):
    keytab = kdc.keytab(tmp_path / "zkquorum.keytab", SERVICE)
    with ensemble.Ensemble(3, name="qkrb", extra_cfg=cfg(jaas(tmp_path / "jaas.conf", keytab, kdc.realm),
                                                          kdc.krb5_conf)) as ens:
        write_and_check_everywhere(ens, f"/qkrb-{uuid.uuid4().hex[:8]}", b"kerberos")
        old = ens.leader()
        ens.kill(old)
        assert ens.wait_stable(60) != old
        write_and_check_everywhere(ens, f"/qkrb-fo-{uuid.uuid4().hex[:8]}", b"failed over")
        ens.start(old)
        ens.wait_stable(60)
        write_and_check_everywhere(ens, f"/qkrb-back-{uuid.uuid4().hex[:8]}", b"all three")


def test_a_member_with_a_foreign_keytab_is_kept_out(kdc, tmp_path):
    good = jaas(tmp_path / "jaas.conf", kdc.keytab(tmp_path / "zkquorum.keytab", SERVICE), kdc.realm)
    # Another KDC of the same realm name: the same principal with keys this KDC never issued.
    (tmp_path / "rogue").mkdir()
    with krb5kdc.Kdc(tmp_path / "rogue", realm=kdc.realm).start() as rogue:
        rogue.add_principal(SERVICE)
        bad_keytab = rogue.keytab(tmp_path / "rogue.keytab", SERVICE)
    bad = jaas(tmp_path / "bad.conf", bad_keytab, kdc.realm)
    ens = ensemble.Ensemble(3, name="qkrb-out", extra_cfg=cfg(good, kdc.krb5_conf))
    try:
        reconfigure(ens, 2, {"java.security.auth.login.config": bad})
        start_two_of_three(ens)
        path = f"/qkrb-out-{uuid.uuid4().hex[:8]}"
        create(ens.hostports[0], path, b"members only")
        modes = wait_modes(ens, lambda md: md[2] == "leader", 10)
        assert modes[2] != "leader", modes
        restart_with(ens, 2, {"java.security.auth.login.config": good})
        assert_synced(ens.hostports[2], path, b"members only")
    finally:
        ens.close()


@pytest.mark.skipif(harness.default_kind() != "warden",
                    reason="ZooKeeper 3.8 lets a two-part principal (user@REALM) join the quorum")
def test_a_realm_user_is_not_a_member(kdc, tmp_path):
    """A member whose QuorumLearner is a plain user of the realm (bob@REALM, a valid ticket) is
    refused: only <service>/<member host>@REALM joins."""
    keytab = kdc.keytab(tmp_path / "zkquorum.keytab", SERVICE)
    good = jaas(tmp_path / "jaas.conf", keytab, kdc.realm)
    kdc.add_principal("bob", "bob-pw")
    both = kdc.keytab(tmp_path / "both.keytab", SERVICE, "bob")
    section = lambda principal: (  # noqa: E731
        "  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
        f'  keyTab="{both}"\n  storeKey=true\n  principal="{principal}@{kdc.realm}";\n')
    (tmp_path / "bob.conf").write_text(
        f"QuorumServer {{\n{section(SERVICE)}}};\nQuorumLearner {{\n{section('bob')}}};\n")
    ens = ensemble.Ensemble(3, name="qkrb-user", extra_cfg=cfg(good, kdc.krb5_conf))
    try:
        reconfigure(ens, 2, {"java.security.auth.login.config": str(tmp_path / "bob.conf")})
        start_two_of_three(ens)
        create(ens.hostports[0], f"/qkrb-user-{uuid.uuid4().hex[:8]}", b"members only")
        harness.wait_until(
            lambda: any("bob@" in open(m.log_path, errors="replace").read() and "not authorized" in
                        open(m.log_path, errors="replace").read() for m in ens.members[:2]),
            20, "a member to refuse bob")
        modes = wait_modes(ens, lambda md: md[2] == "leader", 5)
        assert modes[2] != "leader", modes
    finally:
        ens.close()
