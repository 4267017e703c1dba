"""A fenced lock client, run as its own process by test_ensemble.py.

Usage: python3 ensemble_worker.py CONFIG_JSON

CONFIG_JSON keys: hosts (kazoo connect string; tried in the given order),
id, lock (lock path), fence (guarded znode), acks (parent for ack nodes),
stop (a file: the worker ends when it exists), writes_per_hold, hold_s,
pause_after_read_s (sleep between reading the fence and writing it, to give
the test a moment to SIGSTOP the holder), max_holds (0 = unlimited),
session_timeout.

While holding the kazoo Lock, the worker appends [token, id, n] to the JSON
list stored in the fence znode with setData(version = the version it read)
(a check-and-set), where token is its lock node's sequence number. A
connection error leaves the outcome unknown, so the same CAS is retried
with the same version; BadVersion is then resolved by reading the fence: if
our entry is in it, the write was applied, otherwise it was rejected. The
worker also creates one ack node per round. Every outcome is printed as one
JSON line on stdout:
  {"ev":"session","sid":...}    {"ev":"state","state":"LOST"|"SUSPENDED"|"CONNECTED"}
  {"ev":"acquired","token":T}   {"ev":"read","token":T,"version":V}
  {"ev":"ack","entry":[T,id,n],"version":V}   (fence write acknowledged)
  {"ev":"rejected","entry":[...],"version":V,"fence_last":[...]} (CAS refused: someone wrote since)
  {"ev":"fenced","token":T,"fence_last":[...]} (a newer token is already in the fence: we stop)
  {"ev":"created","path":P}     (ack node acknowledged)
  {"ev":"released","token":T}   {"ev":"error","where":...,"error":...}   {"ev":"done"}
"""

from __future__ import annotations

import json
import os
import sys
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.retry import RetryFailedError

TRANSIENT = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError)


def out(**kw) -> None:
    kw["t"] = time.time()
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    wid = cfg["id"]
    zk = KazooClient(
        cfg["hosts"],
        timeout=cfg.get("session_timeout", 4.0),
        randomize_hosts=False,
        connection_retry=dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5),
    )
    closing = []
    # (kazoo reports LOST on its own clean close too: stop reporting before that.)
    zk.add_listener(lambda state: None if closing else out(ev="state", state=str(state)))
    zk.start(timeout=20)
    out(ev="session", sid=zk.client_id[0])

    def stopping() -> bool:
        return os.path.exists(cfg["stop"])

    def retry(fn, *args, deadline_s=60.0, **kw):
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                return fn(*args, **kw)
            except TRANSIENT:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def cas(entry, hist, version):
        """Append entry to hist with setData(version); returns ("ack", v) or ("rejected", last)."""
        data = json.dumps(hist + [entry]).encode()
        deadline = time.monotonic() + 60
        while True:
            try:
                stat = zk.set(cfg["fence"], data, version=version)
                return "ack", stat.version
            except BadVersionError:
                now, stat = retry(zk.get, cfg["fence"])
                cur = json.loads(now)
                if entry in cur:
                    # An earlier attempt whose reply was lost did apply.
                    return "ack", version + 1
                return "rejected", cur[-1] if cur else None
            except TRANSIENT:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    n = 0
    holds = 0
    while not stopping():
        if cfg.get("max_holds") and holds >= cfg["max_holds"]:
            break
        lock = zk.Lock(cfg["lock"], f"w{wid}")
        try:
            if not lock.acquire(timeout=10):
                continue
        except (LockTimeout, RetryFailedError, *TRANSIENT) as e:
            out(ev="error", where="acquire", error=repr(e))
            time.sleep(0.1)
            continue
        holds += 1
        token = int(lock.node[-10:])
        out(ev="acquired", token=token, sid=zk.client_id[0])
        try:
            for _ in range(cfg.get("writes_per_hold", 2)):
                n += 1
                entry = [token, wid, n]
                raw, stat = retry(zk.get, cfg["fence"])
                hist = json.loads(raw)
                if hist and hist[-1][0] > token:
                    out(ev="fenced", token=token, fence_last=hist[-1])
                    break
                out(ev="read", token=token, version=stat.version)
                if cfg.get("pause_after_read_s"):
                    time.sleep(cfg["pause_after_read_s"])
                result, detail = cas(entry, hist, stat.version)
                if result == "ack":
                    out(ev="ack", entry=entry, version=detail)
                else:
                    out(ev="rejected", entry=entry, version=stat.version, fence_last=detail)
                    break
                path = f"{cfg['acks']}/w{wid}-{n}"
                try:
                    retry(zk.create, path, json.dumps(entry).encode())
                except NodeExistsError:
                    pass  # an attempt whose reply was lost did create it
                out(ev="created", path=path)
                time.sleep(cfg.get("hold_s", 0.02))
        except Exception as e:  # noqa: BLE001 - report and carry on contending
            out(ev="error", where="hold", error=repr(e))
        finally:
            try:
                retry(lock.release, deadline_s=20)
            except Exception as e:  # noqa: BLE001
                out(ev="error", where="release", error=repr(e))
            out(ev="released", token=token)
    closing.append(True)
    zk.stop()
    zk.close()
    out(ev="done")


if __name__ == "__main__":
    main()
