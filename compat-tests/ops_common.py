"""Helpers shared by the operations tests (test_ops_4lw.py, test_ops_admin.py, test_ops_prometheus.py).

- `deviation(reason)`: marks a test that asserts Apache ZooKeeper 3.8's behaviour
  which Warden does not match yet: xfail(strict=True) when COMPAT_SERVER=warden,
  a plain test when COMPAT_SERVER=zookeeper. When Warden is fixed the strict
  xfail turns into a failure ("XPASS(strict)"), so the marker must then go.
- `http(method, url, headers)`: one HTTP request, returning (status, headers, body)
  for any status code.
- `wait_http(url)`: poll until the URL answers at all.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

import harness

WARDEN = harness.default_kind() == "warden"


def deviation(reason: str):
    """xfail(strict) for Warden only: the test asserts what ZooKeeper 3.8 does."""
    return pytest.mark.xfail(WARDEN, reason=f"Warden deviates from ZooKeeper 3.8: {reason}", strict=True)


def http(method: str, url: str, headers: dict | None = None, timeout: float = 5.0):
    """(status, headers as a lower-cased dict, body text) for one request, whatever the status."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    if method == "POST":
        req.data = b""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Wait until an HTTP server answers url (any status)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            http("GET", url, timeout=2)
            return
        except OSError as e:  # connection refused while the listener starts
            last = e
            time.sleep(0.2)
    raise AssertionError(f"nothing answered {url} within {timeout:.0f}s (last: {last!r})")


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Poll predicate() until it returns a truthy value; return that value."""
    return harness.wait_until(predicate, timeout, what, interval)
