"""kazoo's upstream `TestReadOnlyMode` (issue 40) against a 3-member ensemble with
`readonlymode.enabled`: with two members stopped, a `read_only=True` client of the third gets
CONNECTED_RO, reads, and NotReadOnlyCallError for a write.

Warden only: Debian's ZooKeeper 3.8.0 starts its read-only server but gives kazoo a connect
answer kazoo cannot parse (see test_read_only.py), so this upstream test fails there.
"""

from __future__ import annotations

import pytest

import harness
from kazoo.tests import test_connection as up_connection

from test_kazoo_upstream_ensemble import _only, kazoo_cluster

pytestmark = pytest.mark.skipif(
    harness.default_kind() != "warden", reason="ZooKeeper 3.8.0's read-only server does not answer kazoo"
)


@pytest.fixture(scope="module", autouse=True)
def _kazoo_harness_uses_our_ensemble():
    yield from kazoo_cluster("kazoo-ro", {"readonlymode.enabled": "true"})


UpstreamReadOnlyMode = _only(
    up_connection.TestReadOnlyMode,
    {"test_read_only"},
    "kazoo read-only mode: CONNECTED_RO on a member cut off from the quorum, reads, NotReadOnly",
)
