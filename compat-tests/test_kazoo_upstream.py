"""kazoo's own upstream tests (shipped in the installed package as kazoo/tests/),
run against our external server.

kazoo's harness (kazoo.testing.harness.KazooTestHarness) normally starts its
own ZooKeeper cluster through get_global_cluster(). The module-scoped autouse
fixture below replaces that function, for this module only, with a stand-in
"cluster" made of our one `shared_server`; starting and terminating that
stand-in does nothing. A member's stop()/run() stop and restart our server on
the same port and data dir; anything else that manages members fails loudly. Each upstream test still gets its own chroot
(/kazootests<uuid>), so sharing one server between tests is what upstream
does too. The installed package is not edited: the upstream classes are
subclassed here, and excluded cases are removed from the subclasses.
"""

from __future__ import annotations

import pytest

import kazoo.testing.harness as kazoo_harness
from kazoo.tests import test_barrier as up_barrier
from kazoo.tests import test_cache as up_cache
from kazoo.tests import test_client as up_client
from kazoo.tests import test_connection as up_connection
from kazoo.tests import test_counter as up_counter
from kazoo.tests import test_election as up_election
from kazoo.tests import test_interrupt as up_interrupt
from kazoo.tests import test_lease as up_lease
from kazoo.tests import test_lock as up_lock
from kazoo.tests import test_partitioner as up_partitioner
from kazoo.tests import test_party as up_party
from kazoo.tests import test_queue as up_queue
from kazoo.tests import test_watchers as up_watchers


class _ExternalMember:
    """One 'cluster member' that is really our externally managed server."""

    def __init__(self, srv):
        self._srv = srv
        self.address = srv.hostport
        self.running = True

    def stop(self):
        """Upstream's member.stop(): stop our server (port and data dir are kept)."""
        self._srv.stop()
        self.running = False

    def run(self):
        """Upstream's member.run(): restart our server on the same port and data dir."""
        self._srv.start()
        self.running = True

    def _refuse(self, *a, **kw):
        raise NotImplementedError(
            "this upstream test manages cluster members itself; it must be "
            "listed in EXCLUDED in test_kazoo_upstream.py"
        )

    destroy = reset = _refuse


class _ExternalCluster(list):
    """What kazoo's harness expects from get_global_cluster(), backed by one server."""

    def __init__(self, srv):
        super().__init__([_ExternalMember(srv)])
        self._srv = srv

    def start(self):
        pass

    def stop(self):
        pass

    def terminate(self):
        pass  # KazooTestCase.tearDownClass calls this; our fixture owns the server

    def get_logs(self, num_lines=100):
        return [self._srv.describe_log(num_lines)]


@pytest.fixture(scope="module", autouse=True)
def _kazoo_harness_uses_our_server(shared_server):
    cluster = _ExternalCluster(shared_server)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kazoo_harness, "get_global_cluster", lambda: cluster)
        yield cluster


# Upstream test cases that are NOT run, and why. Everything else in the
# selected classes below runs unchanged.
EXCLUDED = {
    "TestClient": {
        # Grows the client's host list to three servers, stops the first and
        # expects the client to stay connected through another member: needs a
        # multi-server ensemble, and this suite runs one server.
        "test_update_host_list": "needs a 3-server ensemble (run by test_kazoo_upstream_ensemble.py)",
        # Both stop and restart the server and give the client 5 s to get back.
        # Flaky against ZooKeeper 3.8.0 itself: kazoo retries every 0.1 s, and a
        # reconnect that lands while the restarted ZooKeeper is still starting
        # is sometimes accepted but never answered, so kazoo sits in its 10 s
        # connect timeout (seen in about 1 run in 4 here). Session survival
        # across a restart is covered by test_kazoo_api.py instead.
        "test_request_queuing_session_recovered": "flaky vs ZooKeeper startup race",
        "test_request_queuing_session_expired": "flaky vs ZooKeeper startup race",
    },
}


def _teardown_leftover_clients(self):
    """Run upstream's tearDown, then stop any kazoo client it left running.

    Some upstream tearDowns (e.g. KazooLeaseTests) never call the harness's
    teardown_zookeeper(), which leaks every client of the test; those keep
    reconnecting for the rest of the session and crowd the server's restarts.
    """
    try:
        super(type(self), self).tearDown()
    finally:
        if getattr(self, "_clients", None):
            kazoo_harness.KazooTestHarness.teardown_zookeeper(self)


def _select(upstream_cls, doc):
    """Subclass an upstream TestCase, dropping the EXCLUDED cases."""
    excluded = EXCLUDED.get(upstream_cls.__name__, {})
    attrs = {"__doc__": doc, "__module__": __name__, "tearDown": _teardown_leftover_clients}
    for name in excluded:
        if not hasattr(upstream_cls, name):
            raise AssertionError(f"EXCLUDED names {upstream_cls.__name__}.{name}, which upstream lacks")
        attrs[name] = None  # not callable -> unittest's loader skips it
    return type("Upstream" + upstream_cls.__name__, (upstream_cls,), attrs)


# Recipes
UpstreamLock = _select(up_lock.KazooLockTests, "kazoo Lock, ReadLock and WriteLock recipes")
UpstreamSemaphore = _select(up_lock.TestSemaphore, "kazoo Semaphore recipe")
UpstreamElection = _select(up_election.KazooElectionTests, "kazoo Election recipe")
UpstreamBarrier = _select(up_barrier.KazooBarrierTests, "kazoo Barrier recipe")
UpstreamDoubleBarrier = _select(up_barrier.KazooDoubleBarrierTests, "kazoo DoubleBarrier recipe")
UpstreamCounter = _select(up_counter.KazooCounterTests, "kazoo Counter recipe")
UpstreamQueue = _select(up_queue.KazooQueueTests, "kazoo Queue recipe")
UpstreamLockingQueue = _select(up_queue.KazooLockingQueueTests, "kazoo LockingQueue recipe")
UpstreamParty = _select(up_party.KazooPartyTests, "kazoo Party recipe")
UpstreamShallowParty = _select(up_party.KazooShallowPartyTests, "kazoo ShallowParty recipe")
UpstreamDataWatch = _select(up_watchers.KazooDataWatcherTests, "kazoo DataWatch recipe")
UpstreamChildrenWatch = _select(up_watchers.KazooChildrenWatcherTests, "kazoo ChildrenWatch recipe")
UpstreamPatientChildrenWatch = _select(
    up_watchers.KazooPatientChildrenWatcherTests, "kazoo PatientChildrenWatch recipe"
)
UpstreamTreeCache = _select(up_cache.KazooTreeCacheTests, "kazoo TreeCache recipe")
UpstreamPartitioner = _select(up_partitioner.KazooPartitionerTests, "kazoo SetPartitioner recipe")
UpstreamNonBlockingLease = _select(up_lease.NonBlockingLeaseTests, "kazoo NonBlockingLease recipe")
UpstreamMultiNonBlockingLease = _select(up_lease.MultiNonBlockingLeaseTest, "kazoo MultiNonBlockingLease recipe")

# Core client API
UpstreamClientTransitions = _select(up_client.TestClientTransitions, "kazoo connection state transitions")
UpstreamAuthentication = _select(up_client.TestAuthentication, "kazoo digest auth and ACLs")
UpstreamConnection = _select(up_client.TestConnection, "kazoo connection handling")
UpstreamClient = _select(up_client.TestClient, "kazoo core client API")
UpstreamTransactions = _select(up_client.TestClientTransactions, "kazoo transactions (multi)")
UpstreamCallbacks = _select(up_client.TestCallbacks, "kazoo async callbacks")
UpstreamNonChrootClient = _select(up_client.TestNonChrootClient, "kazoo client without chroot")
UpstreamConnectionHandler = _select(up_connection.TestConnectionHandler, "kazoo connection handler against a live server")
UpstreamConnectionDrop = _select(up_connection.TestConnectionDrop, "kazoo request retry across a dropped connection")
UpstreamUnorderedXids = _select(up_connection.TestUnorderedXids, "kazoo handling of out-of-order replies")
UpstreamInterrupt = _select(up_interrupt.KazooInterruptTests, "kazoo connection interrupt")

# Upstream modules/classes deliberately not selected:
# - test_connection.TestReadOnlyMode: needs a 3-server ensemble with
#   readonlymode.enabled and stops two members (cluster[1], cluster[2]); run by
#   test_kazoo_upstream_readonly.py.
# - test_client.TestReconfig: dynamic reconfiguration of a 3-server ensemble
#   (run by test_kazoo_upstream_ensemble.py, with TestClient.test_update_host_list).
# - test_client.TestSSLClient: needs a TLS client port and kazoo's generated certificates.
# - test_sasl: needs a server with a JAAS/SASL (DIGEST-MD5 or Kerberos) login configured.
# - test_eventlet_handler, test_gevent_handler: exercise kazoo's alternative
#   async handlers (eventlet/gevent are not installed); no server behaviour beyond the above.
# - test_client.TestClientConstructor, TestSessionCallbacks; test_threading_handler,
#   test_selectors_select, test_retry, test_security, test_paths, test_hosts,
#   test_utils, test_exceptions, test_build: pure client unit tests that never talk to a server.
