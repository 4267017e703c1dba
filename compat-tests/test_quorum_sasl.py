"""Members authenticating each other with SASL DIGEST-MD5, configured with ZooKeeper's keys
(`quorum.auth.enableSasl`, `quorum.auth.learnerRequireSasl`, `quorum.auth.serverRequireSasl`)
and JAAS sections (`QuorumServer` with `user_<name>` entries, `QuorumLearner` with the name
and password a member presents), on real 3-member ensembles. The same tests run against
ZooKeeper 3.8 (`COMPAT_SERVER=zookeeper`).

Covered: an ensemble whose members must authenticate forms, replicates and fails over; a
member that does not authenticate (no SASL, or a wrong password) gets nowhere while the
others serve, and joins once given the right credentials; ZooKeeper's rolling change from
no SASL to required SASL (enableSasl everywhere, then learnerRequireSasl, then
serverRequireSasl, a restart per member each time) loses no write. Warden only: bad quorum
SASL configurations stop start-up naming the key.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

import ensemble
import harness
from test_quorum_tls import (
    assert_synced,
    create,
    reconfigure,
    restart_with,
    start_two_of_three,
    wait_modes,
    write_and_check_everywhere,
)

WARDEN = harness.default_kind() == "warden"
warden_only = pytest.mark.skipif(not WARDEN, reason="Warden-only")


def jaas(path, learner_password: str = "member-secret") -> str:
    path.write_text(
        "QuorumServer {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  user_member="member-secret";\n};\n'
        "QuorumLearner {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="member"\n  password="{learner_password}";\n}};\n'
    )
    return str(path)


def sasl_cfg(jaas_path: str, enable=True, learner_require=True, server_require=True) -> dict:
    return {
        "java.security.auth.login.config": jaas_path,
        "quorum.auth.enableSasl": "true" if enable else None,
        "quorum.auth.learnerRequireSasl": "true" if learner_require else None,
        "quorum.auth.serverRequireSasl": "true" if server_require else None,
    }


NO_SASL = {"java.security.auth.login.config": None, "quorum.auth.enableSasl": None,
           "quorum.auth.learnerRequireSasl": None, "quorum.auth.serverRequireSasl": None}


def test_ensemble_with_required_quorum_sasl_serves_and_fails_over(tmp_path):
    with ensemble.Ensemble(3, name="qsasl", extra_cfg=sasl_cfg(jaas(tmp_path / "jaas.conf"))) as ens:
        write_and_check_everywhere(ens, f"/qsasl-{uuid.uuid4().hex[:8]}", b"authenticated")
        old_leader = ens.leader()
        ens.kill(old_leader)
        assert ens.wait_stable(60) != old_leader
        write_and_check_everywhere(ens, f"/qsasl-failover-{uuid.uuid4().hex[:8]}", b"failed over")
        ens.start(old_leader)
        ens.wait_stable(60)
        write_and_check_everywhere(ens, f"/qsasl-back-{uuid.uuid4().hex[:8]}", b"all three")


@pytest.mark.parametrize("how", ["no-sasl", "wrong-password"])
def test_a_member_that_does_not_authenticate_gets_nowhere(tmp_path, how):
    good = jaas(tmp_path / "jaas.conf")
    ens = ensemble.Ensemble(3, name="qsasl-out", extra_cfg=sasl_cfg(good))
    try:
        # Member 3: the highest id, which in ZooKeeper opens the connections to the others.
        if how == "no-sasl":
            reconfigure(ens, 2, NO_SASL)
        else:
            reconfigure(ens, 2, {"java.security.auth.login.config": jaas(tmp_path / "wrong.conf", "guessed")})
        start_two_of_three(ens)
        path = f"/qsasl-out-{uuid.uuid4().hex[:8]}"
        create(ens.hostports[0], path, b"members only")
        if how == "no-sasl":
            # It never serves while the others do: nobody talks to it, it talks to nobody.
            modes = wait_modes(ens, lambda md: md[2] in ("leader", "follower"), 10)
            assert modes[2] not in ("leader", "follower"), f"a member without SASL joined: {modes}"
        else:
            # Its own connections to the others are refused. On ZooKeeper, where only the
            # higher id connects, it never joins; Warden's members also connect to it and
            # authenticate themselves, so it may receive (it proves nothing, and nothing it
            # sends is taken). Either way it never leads.
            modes = wait_modes(ens, lambda md: md[2] == "leader", 10)
            assert modes[2] != "leader", modes
        restart_with(ens, 2, sasl_cfg(good))
        assert_synced(ens.hostports[2], path, b"members only")
    finally:
        ens.close()


def test_rolling_change_to_required_quorum_sasl_loses_nothing(tmp_path):
    """ZooKeeper's documented procedure: enableSasl=true on every member (rolling restart),
    then learnerRequireSasl=true on each, then serverRequireSasl=true on each."""
    j = jaas(tmp_path / "jaas.conf")
    written = []
    with ensemble.Ensemble(3, name="qsasl-roll") as ens:
        def step(label: str) -> None:
            path = f"/qsasl-roll/{label}-{uuid.uuid4().hex[:6]}"
            write_and_check_everywhere(ens, path, label.encode())
            written.append((path, label.encode()))

        step("plain")
        for phase, cfg in [
            ("enable", sasl_cfg(j, learner_require=False, server_require=False)),
            ("learner", {"quorum.auth.learnerRequireSasl": "true"}),
            ("server", {"quorum.auth.serverRequireSasl": "true"}),
        ]:
            for i in range(3):
                restart_with(ens, i, cfg)
                step(f"{phase}-{i + 1}")
        for i in range(3):
            for path, value in written:
                assert_synced(ens.hostports[i], path, value)


@warden_only
@pytest.mark.parametrize("case", ["require-without-enable", "no-jaas", "no-learner-section", "canonicalize"])
def test_bad_quorum_sasl_configuration_stops_start_up(tmp_path, case):
    j = tmp_path / "jaas.conf"
    j.write_text('QuorumServer { org.apache.zookeeper.server.auth.DigestLoginModule required user_m="p"; };')
    cfg, key = {
        "require-without-enable": ({"quorum.auth.serverRequireSasl": "true"}, "quorum.auth.serverRequireSasl"),
        "no-jaas": ({"quorum.auth.enableSasl": "true"}, "quorum.auth.enableSasl"),
        "no-learner-section": ({"quorum.auth.enableSasl": "true", "java.security.auth.login.config": str(j)},
                               "QuorumLearner"),
        # Warden looks no host names up: canonicalizing the service principal's host is refused.
        "canonicalize": ({"quorum.auth.kerberos.servicePrincipal.canonicalize": "true"},
                         "quorum.auth.kerberos.servicePrincipal.canonicalize"),
    }[case]
    ens = ensemble.Ensemble(3, name="qsasl-bad", extra_cfg=cfg)
    try:
        m = ens.members[0]
        proc = subprocess.run(m.command(), capture_output=True, text=True, timeout=30)
        err = proc.stdout + proc.stderr
        assert proc.returncode == 2 and key in err, err
    finally:
        ens.close()
