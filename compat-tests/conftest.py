"""pytest fixtures for the black-box compatibility suite.

The fixture API below is shared with the Curator and differential tests
(test_curator.py, test_differential.py); keep names and shapes stable:

  server          function scope: a fresh server of kind COMPAT_SERVER
  shared_server   module scope: one server shared by a whole test module
  reference_zk    function scope: always a real Apache ZooKeeper 3.8
  shared_reference_zk  module scope variant of reference_zk
  server_factory  function scope: make(kind=None, extra_cfg={zoo.cfg key: value})
                  starts a server with extra/replaced zoo.cfg keys

Each yields a harness.Server with host, port, hostport ("127.0.0.1:PORT"),
data_dir, kind ("warden"|"zookeeper"), log_path, and stop() / kill() /
start() (restart on the same port and data dir). The process is killed by
PID and its temp dir removed at teardown, whether the test passed or not.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
# Ensemble fixtures (3/5 members): ensemble3, shared_ensemble3, ensemble5 -- see ensemble.py.
from ensemble import clients, ensemble3, ensemble5, shared_ensemble3  # noqa: E402,F401


def _teardown(srv: harness.Server, name: str) -> None:
    if os.environ.get("COMPAT_KEEP_LOGS"):
        # Keep the log for a post-mortem; the process still dies.
        srv.kill()
        keep = os.environ["COMPAT_KEEP_LOGS"]
        os.makedirs(keep, exist_ok=True)
        shutil.copy(srv.log_path, os.path.join(keep, f"{name}-{srv.port}.log"))
    srv.close()


def _serve(kind: str | None, name: str):
    srv = harness.started(kind, name=name)
    try:
        yield srv
    finally:
        _teardown(srv, name)


@pytest.fixture
def server(request):
    """A fresh server under test (COMPAT_SERVER) for one test."""
    yield from _serve(None, request.node.name[:40].replace("/", "_"))


@pytest.fixture(scope="module")
def shared_server(request):
    """One server under test for a whole module; tests must use distinct paths."""
    yield from _serve(None, request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture
def reference_zk(request):
    """A real Apache ZooKeeper 3.8, whatever COMPAT_SERVER says."""
    yield from _serve("zookeeper", "ref-" + request.node.name[:36].replace("/", "_"))


@pytest.fixture(scope="module")
def shared_reference_zk(request):
    """A real Apache ZooKeeper 3.8 shared by a whole module."""
    yield from _serve("zookeeper", "ref-" + request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture
def server_factory(request):
    """Start servers with extra zoo.cfg keys: make(kind=None, extra_cfg={...}) -> harness.Server.

    kind None means COMPAT_SERVER. Every server started is killed and its dir
    removed at the end of the test.
    """
    started = []

    def make(kind: str | None = None, extra_cfg: dict | None = None, name: str | None = None):
        label = name or f"{request.node.name[:30]}-{len(started)}".replace("/", "_")
        srv = harness.started(kind, name=label, extra_cfg=extra_cfg)
        started.append((srv, label))
        return srv

    try:
        yield make
    finally:
        for srv, label in started:
            _teardown(srv, label)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    harness.CLOSED_LOG_TAILS.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the log tails of the servers it may have used.

    Those are the servers still open (this test's, and shared ones of its module) and the
    ones closed since it began (an ensemble in a `with` block is gone before the report).
    Their temp dirs, logs included, are removed at teardown, so without this a flake seen
    only in CI could not be diagnosed.
    """
    outcome = yield
    rep = outcome.get_result()
    if rep.when not in ("setup", "call") or not rep.failed:
        return
    for label, tail in harness.CLOSED_LOG_TAILS:
        rep.sections.append((f"log of {label} (closed during the test)", tail))
    for srv in list(harness.OPEN_SERVERS.values()):
        if srv.proc is not None:
            rep.sections.append((f"log of {srv.label()}", srv.describe_log(harness.LOG_TAIL_LINES)))


def pytest_report_header(config):
    kind = harness.default_kind()
    extra = f" WARDEN_BIN={harness.warden_bin()}" if kind == "warden" else ""
    return f"compat-tests: COMPAT_SERVER={kind}{extra}"
