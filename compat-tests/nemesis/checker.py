"""Linearizability of a ZooKeeper register history (Wing & Gong's search with Lowe's memoization,
as porcupine does it), checked one key at a time.

A register is one znode. Its state is (data, version), starting from the (data, version) the
history names. Operations, each with its invoke and complete times (time.monotonic() floats
on one machine) and an outcome:

  read            ok -> (data, version) it returned           (made linearizable with sync first)
  write(v)        setData(v, -1); ok -> the new version
  cas(v, ver)     setData(v, ver); ok -> ver + 1; "fail" -> BadVersion (nothing changed)

Outcome "ok" or "fail" is definite. "info" means the client cannot know (ConnectionLoss, a
timeout, the process died): the op may have taken effect at any moment after its invocation,
or never. An "info" read tells nothing and is dropped.

check(ops, initial) -> Result(ok, ...). On a violation the result carries the smallest window
of ops that no order explains: the op the search could not place and the ops overlapping it
in time, with the longest linearized prefix found, so a report shows what happened.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation on one register."""

    id: int
    process: object
    kind: str  # "read" | "write" | "cas"
    invoke: float
    complete: Optional[float]  # None for "info"
    outcome: str  # "ok" | "fail" | "info"
    value: Optional[bytes] = None  # written value (write, cas)
    expected_version: Optional[int] = None  # cas
    result: Optional[tuple] = None  # read: (data, version); write/cas ok: (new_version,)

    def describe(self) -> str:
        arg = ""
        if self.kind in ("write", "cas"):
            arg = repr(self.value) + (f", v{self.expected_version}" if self.kind == "cas" else "")
        res = "" if self.result is None else f" -> {self.result}"
        end = "?" if self.complete is None else f"{self.complete:.6f}"
        return f"#{self.id} p{self.process} {self.kind}({arg}) {self.outcome}{res} [{self.invoke:.6f}, {end}]"


@dataclasses.dataclass
class Result:
    ok: bool
    ops: int
    # On a violation: the op that could not be placed, the ops overlapping it, the longest
    # order found (op ids) and the state it ended in.
    stuck: Optional[Op] = None
    window: list = dataclasses.field(default_factory=list)
    longest: list = dataclasses.field(default_factory=list)
    state_at_longest: Optional[tuple] = None

    def report(self) -> str:
        if self.ok:
            return f"linearizable ({self.ops} ops)"
        lines = [f"NOT linearizable ({self.ops} ops): no order places {self.stuck.describe()}"]
        lines.append(f"  longest linearizable prefix: {len(self.longest)} ops, ending in state {self.state_at_longest}")
        lines.append("  ops overlapping it:")
        lines += [f"    {op.describe()}" for op in self.window]
        return "\n".join(lines)


def step(state: tuple, op: Op) -> Optional[tuple]:
    """The state after `op` at this point, or None if `op` cannot happen here."""
    data, version = state
    if op.kind == "read":
        return state if op.result == (data, version) else None
    if op.kind == "write":
        if op.outcome == "ok" and op.result is not None and op.result[0] != version + 1:
            return None
        return (op.value, version + 1)
    if op.kind == "cas":
        if op.outcome == "fail":
            return state if version != op.expected_version else None
        if version != op.expected_version:
            return None
        if op.outcome == "ok" and op.result is not None and op.result[0] != version + 1:
            return None
        return (op.value, version + 1)
    raise ValueError(f"unknown op kind {op.kind!r}")


class _Node:
    __slots__ = ("op", "is_call", "match", "prev", "next")

    def __init__(self, op, is_call):
        self.op, self.is_call = op, is_call
        self.match = self.prev = self.next = None


def _relevant(ops: Iterable[Op]) -> list[Op]:
    # Reads that failed or cannot know tell nothing; everything else takes part.
    return [op for op in ops if not (op.kind == "read" and op.outcome != "ok")]


def check(ops: Iterable[Op], initial: tuple) -> Result:
    ops = _relevant(ops)
    n = len(ops)
    if n == 0:
        return Result(True, 0)
    index = {op.id: i for i, op in enumerate(ops)}
    # Events in time order; at equal times calls come first (the ops overlap: fewer
    # constraints, never a false alarm).
    events = []
    for op in ops:
        events.append((op.invoke, 0, op.id, True))
        if op.outcome != "info":
            events.append((op.complete, 1, op.id, False))
    events.sort(key=lambda e: (e[0], e[1]))
    head = _Node(None, False)  # sentinel
    prev = head
    calls = {}
    for _, _, oid, is_call in events:
        node = _Node(ops[index[oid]], is_call)
        if is_call:
            calls[oid] = node
        else:
            calls[oid].match = node
            node.match = calls[oid]
        node.prev, prev.next = prev, node
        prev = node
    determinate_left = sum(1 for op in ops if op.outcome != "info")

    def lift(call):
        call.prev.next = call.next
        if call.next:
            call.next.prev = call.prev
        ret = call.match
        if ret is not None:
            ret.prev.next = ret.next
            if ret.next:
                ret.next.prev = ret.prev

    def unlift(call):
        ret = call.match
        if ret is not None:
            ret.prev.next = ret
            if ret.next:
                ret.next.prev = ret
        call.prev.next = call
        if call.next:
            call.next.prev = call

    state = initial
    linearized = 0
    cache = set()
    stack = []  # (call node, state before)
    entry = head.next
    best = ([], initial)
    stuck = None
    while True:
        if determinate_left == 0:
            return Result(True, n)
        if entry is None or not entry.is_call:
            # A return whose op is not yet placed (or the end while determinate ops remain):
            # undo the last choice and try the next candidate after it.
            if entry is not None and (stuck is None or len(stack) >= len(best[0])):
                stuck = entry.op
            if not stack:
                window = _overlapping(ops, stuck) if stuck else []
                return Result(False, n, stuck, window, [op.id for op in best[0]], best[1])
            call, state = stack.pop()
            linearized &= ~(1 << index[call.op.id])
            if call.op.outcome != "info":
                determinate_left += 1
            unlift(call)
            entry = call.next
            continue
        op = entry.op
        after = step(state, op)
        bit = 1 << index[op.id]
        if after is not None and (linearized | bit, after) not in cache:
            cache.add((linearized | bit, after))
            stack.append((entry, state))
            state = after
            linearized |= bit
            if op.outcome != "info":
                determinate_left -= 1
            lift(entry)
            if len(stack) > len(best[0]):
                best = ([c.op for c, _ in stack], state)
            entry = head.next
        else:
            entry = entry.next


def _overlapping(ops: list[Op], target: Op) -> list[Op]:
    end = target.complete if target.complete is not None else float("inf")
    out = []
    for op in ops:
        op_end = op.complete if op.complete is not None else float("inf")
        if op.invoke <= end and op_end >= target.invoke:
            out.append(op)
    return sorted(out, key=lambda o: o.invoke)


def check_keys(ops: Iterable[Op], key_of, initial_of) -> dict:
    """Checks each key's ops on their own (a history is linearizable iff each object's is)."""
    by_key: dict = {}
    for op in ops:
        by_key.setdefault(key_of(op), []).append(op)
    return {k: check(v, initial_of(k)) for k, v in by_key.items()}
