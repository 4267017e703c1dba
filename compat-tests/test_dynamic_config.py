"""Configuration an operator already has must never make a server quietly do something else.

- A ZooKeeper 3.5+ setup whose members live in a `dynamicConfigFile`
  (`zoo.cfg.dynamic.100000000`, written the way ZooKeeper 3.8's documentation shows) starts one
  three-member ensemble, never three standalone servers (on ZooKeeper too).
- Warden only: a zoo.cfg asking for TLS or SASL, which this build does not provide, stops
  start-up with an error naming the key instead of serving plaintext or unauthenticated.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from kazoo.client import KazooClient

import harness
from ensemble import Ensemble


def dynamic(ens: Ensemble) -> None:
    """Moves every member's server.N lines from zoo.cfg into zoo.cfg.dynamic.100000000."""
    for m in ens.members:
        servers = sorted(k for k in m.extra_cfg if k.startswith("server."))
        path = os.path.join(str(m.base_dir), "zoo.cfg.dynamic.100000000")
        with open(path, "w") as f:
            for key in servers:
                i = int(key.split(".", 1)[1])
                client = ens.members[i - 1].port
                f.write(f"{key}={m.extra_cfg[key]}:participant;{harness.HOST}:{client}\n")
        for key in servers:
            m.extra_cfg[key] = None
        m.extra_cfg["dynamicConfigFile"] = path
        m._write_config()


def test_dynamic_config_file_starts_one_ensemble():
    """zoo.cfg + zoo.cfg.dynamic.100000000: one leader, two followers, one shared tree."""
    ens = Ensemble(3, name="dyn")
    try:
        dynamic(ens)
        for m in ens.members:
            assert "server." not in open(m.conf_path).read()
        ens.start()
        assert sorted(ens.modes()) == ["follower", "follower", "leader"]
        a = KazooClient(hosts=ens.hostports[0])
        a.start(timeout=15)
        # /zookeeper/config holds the members as ZooKeeper writes them, and the file's
        # version, on every member (zkCli's `config`).
        lines = open(os.path.join(str(ens.members[0].base_dir), "zoo.cfg.dynamic.100000000")).read().split()
        want = "\n".join(sorted(lines)) + "\nversion=100000000"
        for hp in ens.hostports:
            c = KazooClient(hosts=hp)
            c.start(timeout=15)
            data, st = c.get("/zookeeper/config")
            assert data.decode() == want, (hp, data)
            assert (st.version, st.mzxid) == (-1, 0x100000000), (hp, st)
            c.stop()
            c.close()
        a.create("/dyn", b"one")
        for hp in ens.hostports[1:]:
            b = KazooClient(hosts=hp)
            b.start(timeout=15)
            b.sync("/dyn")
            assert b.get("/dyn")[0] == b"one", f"{hp} does not see the write: not one ensemble"
            b.stop()
            b.close()
        a.stop()
        a.close()
    finally:
        ens.close()


@pytest.mark.skipif(harness.default_kind() != "warden", reason="Warden's refusal of keys it does not support")
@pytest.mark.parametrize(
    "cfg,named,phrase",
    [
        ({"secureClientPort": "2281"}, "ssl.keyStore.location", "no key store"),
        ({"secureClientPort": "2281", "ssl.keyStore.location": "/nonexistent/keystore.pem"},
         "ssl.keyStore.location", "No such file"),
        ({"sslQuorum": "true"}, "ssl.quorum.keyStore.location", "this store is not set"),
        ({"authProvider.1": "com.example.CustomAuthenticationProvider"}, "authProvider.1", "not supported"),
        ({"enforce.auth.enabled": "true"}, "enforce.auth.schemes", "no scheme is named"),
        ({"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"}, "enforce.auth.schemes", "no JAAS"),
        ({"requireClientAuthScheme": "sasl"}, "requireClientAuthScheme", "not supported"),
    ],
)
def test_security_config_is_refused_not_ignored(cfg, named, phrase):
    """A security key Warden cannot honour, or TLS without usable key material, stops start-up
    (exit status 2) naming the key, instead of serving plaintext or unauthenticated."""
    srv = harness.Server(kind="warden", name="sec", extra_cfg=cfg)
    try:
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30, cwd=str(srv.base_dir))
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert named in r.stderr and phrase in r.stderr, r.stderr[-2000:]
    finally:
        srv.close()
