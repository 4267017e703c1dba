"""pytest fixtures for the black-box compatibility suite.

The fixture API below is shared with the Curator and differential tests
(test_curator.py, test_differential.py); keep names and shapes stable:

  server          function scope: a fresh server of kind COMPAT_SERVER
  shared_server   module scope: one server shared by a whole test module
  reference_zk    function scope: always a real Apache ZooKeeper 3.8
  shared_reference_zk  module scope variant of reference_zk

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


def _serve(kind: str | None, name: str):
    srv = harness.started(kind, name=name)
    try:
        yield srv
    finally:
        if os.environ.get("COMPAT_KEEP_LOGS"):
            # Keep the log for a post-mortem; the process still dies.
            srv.kill()
            keep = os.environ["COMPAT_KEEP_LOGS"]
            os.makedirs(keep, exist_ok=True)
            shutil.copy(srv.log_path, os.path.join(keep, f"{name}-{srv.port}.log"))
        srv.close()


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


def pytest_report_header(config):
    kind = harness.default_kind()
    extra = f" WARDEN_BIN={harness.warden_bin()}" if kind == "warden" else ""
    return f"compat-tests: COMPAT_SERVER={kind}{extra}"
