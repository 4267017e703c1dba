"""Operation records and a thread-safe history of them, for the nemesis suite.

Owns: what one client operation looks like once recorded (`OpRecord`: process, op type, key,
args, invoke/complete times from time.monotonic(), outcome, result, and a little context:
the member the client is pinned to, its session id, the error) and `History`, which many
client threads append to at once and which serialises to JSON lines. Knows nothing about
servers, faults or checks.

    h = History()
    rec = h.invoke("reg-0", "write", "/k0", {"value": "w-0-1"})   # stamps the invoke time
    ...
    h.complete(rec, "ok", {"version": 3, "mzxid": 4294967301})   # stamps the complete time
    h.complete(rec, "info", error="ConnectionLoss()")               # the client cannot know
    h.to_jsonl(path)

Outcomes: "ok" (took effect, result known), "fail" (certainly did not take effect), "info"
(indeterminate: it may take effect at any moment after invoke, or never). A record that
never completed (its thread was still waiting when the run ended) serialises as "info".
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, Iterable, Optional

OUTCOMES = ("ok", "fail", "info")


@dataclasses.dataclass
class OpRecord:
    id: int
    process: str
    type: str
    key: Optional[str]
    args: dict
    invoke: float
    complete: Optional[float] = None
    outcome: Optional[str] = None  # None while in flight
    result: Any = None
    member: Optional[int] = None  # 0-based index of the member the client is pinned to
    session: Optional[int] = None  # the session id the op certainly ran in, if known
    error: Optional[str] = None
    returned: Optional[float] = None  # when the client got its answer (also for "info")

    @property
    def final_outcome(self) -> str:
        return self.outcome or "info"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["outcome"] = self.final_outcome
        return d

    def describe(self) -> str:
        end = "?" if self.complete is None else f"{self.complete:.3f}"
        res = "" if self.result is None else f" -> {self.result}"
        err = f" ({self.error})" if self.error else ""
        mem = "" if self.member is None else f" @m{self.member + 1}"
        return (f"#{self.id} {self.process}{mem} {self.type} {self.key or ''} {self.args or ''} "
                f"{self.final_outcome}{res}{err} [{self.invoke:.3f}, {end}]")


class History:
    """Records from many threads; ids are assigned in invoke order."""

    def __init__(self, t0: Optional[float] = None):
        self._lock = threading.Lock()
        self._ops: list[OpRecord] = []
        self.t0 = time.monotonic() if t0 is None else t0

    def invoke(self, process: str, type: str, key: Optional[str] = None, args: Optional[dict] = None,
               member: Optional[int] = None) -> OpRecord:
        with self._lock:
            rec = OpRecord(len(self._ops), process, type, key, dict(args or {}), time.monotonic(), member=member)
            self._ops.append(rec)
            return rec

    def complete(self, rec: OpRecord, outcome: str, result: Any = None, error: Optional[str] = None,
                 session: Optional[int] = None) -> OpRecord:
        assert outcome in OUTCOMES, outcome
        now = time.monotonic()
        with self._lock:
            if rec.outcome is not None:
                raise ValueError(f"op #{rec.id} completed twice")
            rec.complete = None if outcome == "info" else now
            rec.returned = now
            rec.outcome, rec.result, rec.error, rec.session = outcome, result, error, session
        return rec

    def ops(self, type: Optional[str] = None, key: Optional[str] = None) -> list[OpRecord]:
        with self._lock:
            return [op for op in self._ops if (type is None or op.type == type) and (key is None or op.key == key)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def counts(self, types: Optional[Iterable[str]] = None) -> dict:
        """{"ok": n, "fail": n, "info": n} over the ops of the given types (all by default)."""
        types = None if types is None else set(types)
        out = {o: 0 for o in OUTCOMES}
        for op in self.ops():
            if types is None or op.type in types:
                out[op.final_outcome] += 1
        return out

    def to_jsonl(self, path: str, extra: Optional[dict] = None) -> None:
        """One JSON object per line; times relative to t0 as well (`t_invoke`, `t_complete`).
        `extra` (if given) is written first, as a line with "header": true."""
        with open(path, "w") as f:
            if extra is not None:
                f.write(json.dumps({"header": True, **extra}, default=_jsonable) + "\n")
            for op in self.ops():
                d = op.to_dict()
                d["t_invoke"] = round(op.invoke - self.t0, 6)
                d["t_complete"] = None if op.complete is None else round(op.complete - self.t0, 6)
                f.write(json.dumps(d, default=_jsonable) + "\n")

    @staticmethod
    def from_jsonl(path: str) -> "History":
        h = History(t0=0.0)
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                if d.pop("header", False):
                    continue
                d.pop("t_invoke", None)
                d.pop("t_complete", None)
                h._ops.append(OpRecord(**d))
        return h


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (set, tuple)):
        return list(v)
    return repr(v)
