"""kazoo's own upstream tests that need a 3-member ensemble, which test_kazoo_upstream.py (one
server) leaves out: `TestReconfig` (reconfig as kazoo's super user: adding and removing an
observer, BadVersion for a future config version, NoAuth without super, BadArguments for a bad
server string) and `TestClient.test_update_host_list` (a client whose host list grows to three
members stays connected while the first one is down).

As in test_kazoo_upstream.py, kazoo's harness is pointed at our servers by replacing its
`get_global_cluster()` for this module: here with a 3-member ensemble (reconfigEnabled, and
kazoo's super user `super:test`, as kazoo's own cluster runs). The installed package is not
edited; the upstream classes are subclassed.
"""

from __future__ import annotations

import pytest

import kazoo.testing.harness as kazoo_harness
from kazoo.tests import test_client as up_client

from ensemble import Ensemble

# kazoo's harness starts ZooKeeper with this super user (`super:test`).
KAZOO_SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


class _Member:
    """One member of the ensemble, as kazoo's harness drives a cluster member."""

    def __init__(self, ens: Ensemble, i: int):
        self._ens = ens
        self._i = i
        self.address = ens.hostports[i]
        self.running = True

    def stop(self):
        self._ens.stop(self._i)
        self.running = False

    def run(self):
        self._ens.start(self._i)
        self.running = True

    def _refuse(self, *a, **kw):
        raise NotImplementedError("this upstream test manages cluster members in a way this module does not offer")

    destroy = reset = _refuse


class _Cluster(list):
    def __init__(self, ens: Ensemble):
        super().__init__([_Member(ens, i) for i in range(ens.n)])
        self._ens = ens

    def start(self):
        pass

    def stop(self):
        pass

    def terminate(self):
        pass  # the fixture owns the ensemble

    def get_logs(self, num_lines=100):
        return [m.describe_log(num_lines) for m in self._ens.members]


def kazoo_cluster(name: str, extra_cfg: dict[str, object]):
    """A 3-member ensemble with `extra_cfg`, as kazoo's harness's global cluster for as long
    as the generator runs (a module fixture's body: yield from it)."""
    ens = Ensemble(3, name=name, extra_cfg=extra_cfg).start()
    try:
        cluster = _Cluster(ens)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kazoo_harness, "get_global_cluster", lambda: cluster)
            yield cluster
    finally:
        ens.close()


@pytest.fixture(scope="module", autouse=True)
def _kazoo_harness_uses_our_ensemble():
    yield from kazoo_cluster("kazoo-up", {
        "reconfigEnabled": "true",
        "DigestAuthenticationProvider.superDigest": KAZOO_SUPER_DIGEST,
    })


def _only(upstream_cls, keep: set[str], doc: str):
    """Subclass an upstream TestCase keeping only the `keep` test methods."""
    attrs = {"__doc__": doc, "__module__": __name__}
    for name in dir(upstream_cls):
        if name.startswith("test") and name not in keep:
            attrs[name] = None  # not callable -> unittest's loader skips it
    for name in keep:
        if not callable(getattr(upstream_cls, name, None)):
            raise AssertionError(f"{upstream_cls.__name__} has no {name}")
    return type("Upstream" + upstream_cls.__name__, (upstream_cls,), attrs)


UpstreamReconfig = _only(
    up_client.TestReconfig,
    {"test_no_super_auth", "test_add_remove_observer", "test_bad_input"},
    "kazoo reconfig: observers added and removed, BadVersion, NoAuth, BadArguments",
)
UpstreamUpdateHostList = _only(
    up_client.TestClient,
    {"test_update_host_list"},
    "kazoo set_hosts: a client whose host list grows survives its first member's stop",
)
