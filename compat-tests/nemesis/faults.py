"""Seeded random fault schedules for the nemesis suite, and their executor.

Owns: which faults exist, how a schedule is drawn from a seed, and how it is applied to a
running `netns.NetEnsemble` (each member in its own network namespace). Faults, one at a
time, each lasting a random few seconds and followed by a quiet gap:

  kill       kill -9 a member (a random one, or the leader), restart it when the fault ends
  pause      SIGSTOP a member (random or the leader), SIGCONT when it ends
  isolate    a member (random or the leader) hears nobody and nobody hears it
  split      a minority (random, or one holding the leader) and the majority cannot talk
  bridge     one member sees both halves of the others, the halves do not see each other
  oneway     one member's packets (the leader's, or a random member's) are dropped on their
             way to one other member or to all others; the reverse direction still works
  crashpoint (Warden only: a build with the `failpoints` feature) a member is restarted with
             one of its crash points armed (FAILPOINTS: log append before/after the write,
             snapshot write and install before/after the rename, apply before/after), which
             aborts it there within moments; it is restarted clean when the fault ends. For
             the install points it first stays down for half the fault, so that it comes
             back far enough behind to be sent a snapshot
  slowdisk   every fsync of a member (random or the leader) takes 50-500 ms longer (the
             compat-tests/slowsync.c shim, preloaded into every member, reads its delay from a
             file the nemesis writes)
  fulldisk   a member's data dir (each member's is a small ext4 filesystem of its own, see
             `LoopDisks`) is filled to the last block; the filler goes when the fault ends. A
             member that exits meanwhile (as ZooKeeper's and Warden's do when their log
             cannot be written) is restarted then
  eio        every fsync of a member fails with EIO (the slowsync shim, after the real call);
             a member that exits meanwhile is restarted when the fault ends
  reconfig   a member (random or the leader) is removed from the ensemble with `reconfig`
             (the super user's, through the other members) and added back, with the same
             line, when the fault ends; it keeps running meanwhile (ZooKeeper serves on as a
             non-voting follower, Warden stops serving). A reconfig whose answer is lost is
             looked up in /zookeeper/config. Needs `use_dynamic_files` before the start
  clockjump  (Warden only) a member's wall clock (random or the leader's) steps forward or
             back by 1 s to 2 h (log-uniform, the direction drawn) and steps back to the real
             time when the fault ends (after 3 s at least, so that the member has read the
             step; `cons` on it shows it); its monotonic clock runs on, as with an NTP step or
             `date -s`. Every member runs with libfaketime preloaded (harness.clock_shim), which
             reads the offset from a file the nemesis writes (re-read within a second)
  clockstrobe (Warden only) a member's wall clock flips between the real time and an offset
             (as clockjump's) about every second while the fault lasts
  (ZooKeeper gets no clock faults: under libfaketime a JVM's timed waits break (its
  Object.wait(500) returned at once once the offset moved, and a leader two hours ahead
  stopped pinging its followers), which a real clock step does not do to a JVM; a time
  namespace cannot move CLOCK_REALTIME)
  (heal)     every partition ends when its fault ends; `heal_all()` at the end also resumes
             every frozen member and restarts every dead one

    plan = generate(seed, seconds=60, n=3, categories=("kill", "pause", "partition"))
    nem = Nemesis(ens, net)
    nem.run(plan, seconds=60)        # blocks; every action logged with its time
    nem.heal_all()

The plan is a pure function of (seed, seconds, n, categories): `describe_plan(plan)` prints
it, so a failing run is replayed by its seed. "The leader" is resolved when the fault starts
(`srvr` on every live member) and logged; with no single leader the pre-drawn random member
is used instead. Members that exit on their own (not killed by the nemesis) are recorded in
`crashes` with their log tail.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import threading
import time
from typing import Callable, Optional

import ensemble
import harness

CATEGORIES = {
    "kill": ("kill",),
    "pause": ("pause",),
    "partition": ("isolate", "split", "bridge", "oneway"),
    "disk": ("slowdisk",),
    "diskerror": ("fulldisk", "eio"),
    "membership": ("reconfig",),
    "failpoint": ("crashpoint",),
    "clock": ("clockjump", "clockstrobe"),
}

# Warden's crash points (src/failpoint.rs).
CRASH_POINTS = (
    "log-append-before", "log-append-after", "snapshot-write-before-rename", "snapshot-write-after-rename",
    "snapshot-install-before-rename", "snapshot-install-after-rename", "apply-before", "apply-after",
)


@dataclasses.dataclass
class Fault:
    index: int
    kind: str  # kill | pause | isolate | split | bridge | oneway
    target: str  # "random" | "leader"
    perm: list  # a random permutation of the member indices, drawn with the plan
    draw: float  # one more uniform [0, 1) draw: the minority's size, oneway's flavour
    at: float  # planned start, seconds after the schedule began
    duration: float
    gap: float  # quiet seconds after it

    def planned(self) -> str:
        return (f"#{self.index} at {self.at:6.2f}s {self.kind}({self.target}) for {self.duration:.2f}s, "
                f"then {self.gap:.2f}s quiet [perm {self.perm}, draw {self.draw:.3f}]")


def generate(seed: int, seconds: float, n: int, categories=("kill", "pause", "partition"),
             duration=(1.0, 6.0), gap=(0.5, 3.0), lead_in: float = 1.0) -> list[Fault]:
    """The schedule for `seed`: faults back to back (each then a quiet gap) until `seconds`."""
    for c in categories:
        if c not in CATEGORIES:
            raise ValueError(f"unknown fault category {c!r} (known: {', '.join(CATEGORIES)})")
    rng = random.Random(f"nemesis-{seed}-{n}")
    plan: list[Fault] = []
    t = lead_in
    while t < seconds:
        cat = rng.choice(list(categories))
        kind = rng.choice(CATEGORIES[cat])
        target = rng.choice(("random", "leader"))
        perm = list(range(n))
        rng.shuffle(perm)
        f = Fault(len(plan), kind, target, perm, rng.random(), round(t, 3),
                  round(rng.uniform(*duration), 3), round(rng.uniform(*gap), 3))
        plan.append(f)
        t += f.duration + f.gap
    return plan


def describe_plan(plan: list[Fault]) -> str:
    return "\n".join(f.planned() for f in plan)


def summarise(plan_or_events) -> dict:
    """{kind: count} of the faults actually started (from Nemesis.events) or planned."""
    out: dict = {}
    for e in plan_or_events:
        if isinstance(e, Fault):
            out[e.kind] = out.get(e.kind, 0) + 1
        elif e.get("action") == "start":
            out[e["kind"]] = out.get(e["kind"], 0) + 1
    return out


class Nemesis:
    """Applies a plan to `ens` (a netns.NetEnsemble) on `net` (its netns.Net)."""

    def __init__(self, ens, net, t0: Optional[float] = None, log: Callable[[str], None] = print):
        self.ens, self.net = ens, net
        self.t0 = time.monotonic() if t0 is None else t0
        self.log = log
        self.events: list[dict] = []  # {t, index, kind, action: start|end|skip|heal, members, what}
        self.crashes: list[dict] = []  # members that exited on their own
        self._paused: set = set()
        self._killed: set = set()
        self._crash_seen: set = set()
        self._removed: dict = {}  # member index -> its server line, while reconfig removed it
        # member index -> monotonic time its disk came back while it still ran (see check_crashes)
        self._disk_back: dict = {}

    # -- helpers -------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def _event(self, fault: Optional[Fault], action: str, what: str, members=(), kind: Optional[str] = None) -> None:
        e = {"t": round(self.now(), 3), "mono": time.monotonic(), "index": None if fault is None else fault.index,
             "kind": kind or (fault.kind if fault else "heal"), "target": fault.target if fault else None,
             "action": action, "members": [m + 1 for m in members], "what": what}
        self.events.append(e)
        idx = "" if fault is None else f" #{fault.index}"
        self.log(f"[{e['t']:7.2f}s] fault{idx} {action} {e['kind']}: {what}")

    def leader(self) -> Optional[int]:
        """The single member that says `Mode: leader` now (frozen/dead members not asked)."""
        leaders = []
        for i, m in enumerate(self.ens.members):
            if i in self._paused or not m.running:
                continue
            if ensemble.srvr_mode(m.hostport, timeout=1.0) == "leader":
                leaders.append(i)
        return leaders[0] if len(leaders) == 1 else None

    def check_crashes(self) -> None:
        for i, m in enumerate(self.ens.members):
            if i in self._killed or i in self._crash_seen or m.proc is None:
                continue
            if m.proc.poll() is not None:
                if self._exit_from_disk_fault(i, m):
                    continue
                self._crash_seen.add(i)
                self.crashes.append({"t": round(self.now(), 3), "member": i + 1, "code": m.proc.returncode,
                                     "log": m.describe_log(60)})
                self.log(f"[{self.now():7.2f}s] member {i + 1} EXITED BY ITSELF with code {m.proc.returncode}")

    def _clock(self, f: Fault, i: int, who: str) -> Callable[[], None]:
        """clockjump / clockstrobe on member i (see the module's doc)."""
        offset = clock_offset(f.draw)
        path = clock_file(self.ens.members[i])
        if f.kind == "clockjump":
            set_clock(path, offset)
            self._event(f, "start", f"step the wall clock of {who} {offset:+d}s for {f.duration:.2f}s", [i])
            probe = threading.Thread(target=self._probe_clock, args=(f, i, offset, max(f.duration, CLOCK_PICKUP)),
                                     daemon=True)
            probe.start()

            def end():
                probe.join()
                set_clock(path, 0)
                self._event(f, "end", f"member {i + 1}'s wall clock back to the real time", [i])
            return end
        stop = threading.Event()

        def strobe():
            on = False
            while not stop.wait(1.0):
                on = not on
                set_clock(path, offset if on else 0)
        t = threading.Thread(target=strobe, name=f"clockstrobe-{i + 1}", daemon=True)
        t.start()
        self._event(f, "start", f"flip the wall clock of {who} between the real time and {offset:+d}s "
                                f"every second for {f.duration:.2f}s", [i])

        def end():
            stop.set()
            t.join()
            set_clock(path, 0)
            self._event(f, "end", f"member {i + 1}'s wall clock back to the real time", [i])
        return end

    def _probe_clock(self, f: Fault, i: int, offset: int, within: float) -> None:
        """Shows that member i's clock moved, within `within` s; logged either way. The
        member's own wall clock shows in `cons`: each connection's `lresp` is when the member
        last answered it (the workloads' clients answer many times a second). A write's mtime
        would not do: the leader stamps every write."""
        deadline = time.monotonic() + within
        seen = None
        while time.monotonic() < deadline:
            try:
                out = harness.four_letter(self.ens.members[i].hostport, "cons", timeout=1.0)
                stamps = [int(v) for v in re.findall(r"lresp=(\d+)", out) if int(v) > 0]
                if stamps:
                    seen = max(stamps) / 1000.0 - time.time()
                    if abs(seen - offset) < 3:
                        break
            except OSError:
                pass  # not answering now: tried again
            time.sleep(0.2)
        what = ("not observed (no answer from `cons` in time)" if seen is None
                else f"its last answers (`cons` lresp) are {seen:+.1f}s from the real time")
        self._event(f, "observe", f"member {i + 1}'s clock: {what}", [i])

    def _exit_from_disk_fault(self, i: int, m) -> bool:
        """Whether member i's exit is the disk fault's doing (then it is restarted, as the
        fault's end would have done): a write that entered the kernel while the disk was full
        or failing can return its error (ext4 retries an allocation after a journal commit
        first) just after the disk came back, and the member exits on it a moment later, past
        the fault's end. Only within DISK_ERROR_GRACE of the end, and only when the member's
        log names a disk error; any other exit stays a crash."""
        back = self._disk_back.pop(i, None)
        if back is None or time.monotonic() - back > DISK_ERROR_GRACE:
            return False
        tail = m.describe_log(60)
        if not any(mark in tail for mark in DISK_ERROR_MARKS):
            return False
        code = m.proc.returncode
        self.ens.start(i, wait=False)
        self._event(None, "end", f"member {i + 1} exited (code {code}) {time.monotonic() - back:.2f}s after its "
                                 f"disk came back, on an error of the fault: restarted", [i], kind="diskerror-late")
        return True

    def _sleep_until(self, t_end: float, deadline: float) -> None:
        """Sleep until schedule time t_end (not past the absolute deadline), checking for crashes."""
        while True:
            left = min(t_end - self.now(), deadline - time.monotonic())
            if left <= 0:
                return
            time.sleep(min(left, 0.5))
            self.check_crashes()

    # -- faults --------------------------------------------------------------------------
    def _pick(self, f: Fault, leader: Optional[int]) -> tuple[list, str]:
        """f.perm with the leader moved to the front when the fault targets it."""
        perm = list(f.perm)
        if f.target == "leader" and leader is not None:
            perm.remove(leader)
            perm.insert(0, leader)
            return perm, f"member {leader + 1} (the leader)"
        note = " (no single leader: random)" if f.target == "leader" else ""
        return perm, f"member {perm[0] + 1}{note}"

    def start(self, f: Fault) -> Callable[[], None]:
        """Starts fault f; returns what ends it."""
        n = self.ens.n
        leader = self.leader()
        perm, who = self._pick(f, leader)
        i = perm[0]
        self._disk_back.pop(i, None)  # a fault of its own now: a later exit is judged by it
        if f.kind == "kill":
            self._killed.add(i)
            self.ens.kill(i)
            self._event(f, "start", f"kill -9 {who} for {f.duration:.2f}s", [i])

            def end():
                self.ens.start(i, wait=False)
                self._killed.discard(i)
                self._event(f, "end", f"restarted member {i + 1}", [i])
            return end
        if f.kind == "pause":
            if not self.ens.members[i].running:
                # It exited by itself (recorded as a crash, an anomaly): nothing to freeze.
                # A kill or a crash point restarts such a member; a pause leaves it down.
                self.check_crashes()
                self._event(f, "skip", f"SIGSTOP {who}: not running (it exited by itself)", [i])
                return lambda: None
            self.ens.sigstop(i)
            self._paused.add(i)
            self._event(f, "start", f"SIGSTOP {who} for {f.duration:.2f}s", [i])

            def end():
                self.ens.sigcont(i)
                self._paused.discard(i)
                self._event(f, "end", f"SIGCONT member {i + 1}", [i])
            return end
        if f.kind in ("clockjump", "clockstrobe"):
            return self._clock(f, i, who)
        if f.kind == "crashpoint":
            point = CRASH_POINTS[int(f.draw * len(CRASH_POINTS))]
            m = self.ens.members[i]
            self._killed.add(i)  # it is meant to die: not a crash of its own
            self.ens.kill(i)
            # A member restarted at once is too little behind to be sent a snapshot, so the
            # install points would never be passed: it stays down for half the fault first,
            # while the others write on and purge their logs past it (snapCount is small
            # whenever crash points run). An install passes its points once, so they fire on
            # the first pass; the others fire on one pass in ten.
            install = point.startswith("snapshot-install")
            share = "100%" if install else "10%"
            m.extra_env = {"FAILPOINTS": f"{point}={share}return"}
            down = f.duration / 2 if install else 0.0
            if down:
                time.sleep(down)
            self.ens.start(i, wait=False)
            self._event(f, "start", f"restart {who} with crash point {point} armed ({share} of passes) "
                                    f"for {f.duration - down:.2f}s" + (f", after {down:.2f}s down" if down else ""),
                        [i])

            def disarm():
                m.extra_env = {}
                died = not m.running
                if not died:
                    self.ens.kill(i)
                self.ens.start(i, wait=False)
                self._killed.discard(i)
                self._event(f, "end", f"member {i + 1} {'had crashed at' if died else 'never reached'} {point}; "
                                      f"restarted clean", [i])
            return disarm
        if f.kind in ("fulldisk", "eio"):
            m = self.ens.members[i]
            self._killed.add(i)  # it may exit on the error: not a crash of its own
            if f.kind == "fulldisk":
                fill(m.data_dir)
                self._event(f, "start", f"fill the data dir of {who} to the last block for {f.duration:.2f}s", [i])
            else:
                _write(m.base_dir / "slowsync_ms", "eio")
                self._event(f, "start", f"every fsync of {who} fails with EIO for {f.duration:.2f}s", [i])

            def recover():
                if f.kind == "fulldisk":
                    unfill(m.data_dir)
                else:
                    _write(m.base_dir / "slowsync_ms", "0")
                died = not m.running
                code = m.proc.returncode if died and m.proc is not None else None
                if died:
                    self.ens.start(i, wait=False)
                else:
                    self._disk_back[i] = time.monotonic()
                self._killed.discard(i)
                self._event(f, "end", f"member {i + 1}'s disk back; it "
                                      + (f"had exited (code {code}): restarted" if died else "kept running"), [i])
            return recover
        if f.kind == "reconfig":
            line = member_line(self.ens, i)
            done, why = self._reconfig(i, leaving=True)
            if not done:
                self._event(f, "start", f"reconfig could not remove {who}: {why}", [i])
                return lambda: self._event(f, "end", f"nothing to undo for member {i + 1}", [i])
            self._removed[i] = line
            self._event(f, "start", f"reconfig removed {who} for {f.duration:.2f}s", [i])

            def re_add():
                ok, why = self._reconfig(i, leaving=False)
                if ok:
                    self._removed.pop(i, None)
                self._event(f, "end", f"reconfig added member {i + 1} back" if ok
                            else f"reconfig could not add member {i + 1} back yet ({why}); the heal tries again", [i])
            return re_add
        if f.kind == "slowdisk":
            path = self.ens.members[i].base_dir / "slowsync_ms"
            ms = 50 + int(450 * f.draw)
            _write(path, str(ms))
            self._event(f, "start", f"every fsync of {who} {ms} ms slower for {f.duration:.2f}s", [i])

            def undo():
                _write(path, "0")
                self._event(f, "end", f"member {i + 1}'s disk back", [i])
            return undo
        if f.kind == "isolate":
            self.net.isolate(i)
            self._event(f, "start", f"isolate {who} for {f.duration:.2f}s", [i])
        elif f.kind == "split":
            k = 1 + int(f.draw * ((n - 1) // 2))
            minority, majority = perm[:k], perm[k:]
            self.net.split(minority, majority)
            self._event(f, "start", f"split minority {_m(minority)} | majority {_m(majority)} "
                                    f"(leader was {_m([leader]) if leader is not None else 'unknown'}) "
                                    f"for {f.duration:.2f}s", minority)
        elif f.kind == "bridge":
            rest = perm[1:]
            a, c = rest[:len(rest) // 2], rest[len(rest) // 2:]
            self.net.split(a, c)
            self._event(f, "start", f"bridge {who} between {_m(a)} and {_m(c)} (which cannot talk) "
                                    f"for {f.duration:.2f}s", [i])
        elif f.kind == "oneway":
            dsts = [perm[1]] if f.draw < 0.5 else perm[1:]
            for d in dsts:
                self.net.cut(i, d)
            self._event(f, "start", f"one-way: drop what {who} sends to {_m(dsts)} for {f.duration:.2f}s",
                        [i])
        else:
            raise ValueError(f.kind)

        def heal():
            self.net.heal()
            self._event(f, "end", "healed the network")
        return heal

    def run(self, plan: list[Fault], seconds: float) -> None:
        """Plays the plan until `seconds` after t0 (a fault still on then is ended early)."""
        deadline = self.t0 + seconds
        for f in plan:
            if time.monotonic() >= deadline:
                break
            self._sleep_until(f.at, deadline)
            if time.monotonic() >= deadline:
                break
            end = self.start(f)
            try:
                self._sleep_until(f.at + f.duration, deadline)
            finally:
                end()
            self.check_crashes()
        self._sleep_until(seconds, deadline)

    def _reconfig(self, i: int, leaving: bool, timeout: float = 30.0) -> tuple[bool, str]:
        """Removes member i (leaving) or adds it back with its line, through the other
        members, retrying while the ensemble is between leaders or a new member is still
        catching up; a lost answer is looked up in /zookeeper/config. (done, why not)."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError
        import harness
        others = [hp for j, hp in enumerate(self.ens.hostports) if j != i and j not in self._paused
                  and self.ens.members[j].running]
        line = self._removed.get(i) or member_line(self.ens, i)
        zk = KazooClient(hosts=",".join(others), timeout=10.0,
                         auth_data=[("digest", f"{harness.SUPER_USER}:{harness.SUPER_PASSWORD}")])
        why = "no answer"
        try:
            zk.start(timeout=15)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    if leaving:
                        zk.reconfig(None, str(i + 1), None)
                    else:
                        zk.reconfig(line, None, None)
                    return True, ""
                except (KazooException, KazooTimeoutError) as e:
                    why = f"{type(e).__name__} {e}".strip()
                try:
                    zk.sync("/zookeeper/config")
                    present = f"server.{i + 1}=" in zk.get("/zookeeper/config")[0].decode()
                    if present != leaving:
                        return True, ""  # the change happened; its answer was lost
                except (KazooException, KazooTimeoutError):
                    pass
                time.sleep(0.25)
            return False, why
        except (KazooException, KazooTimeoutError) as e:
            return False, f"{type(e).__name__} {e}".strip()
        finally:
            try:
                zk.stop()
                zk.close()
            except Exception:  # noqa: BLE001
                pass

    def heal_all(self) -> None:
        """Heals the network, resumes every frozen member, restarts every dead one, puts
        every disk back, and adds back every member a reconfig removed. A member that exited
        by itself since the last look is recorded first, as during the faults."""
        self.check_crashes()
        self.net.heal()
        for m in self.ens.members:
            if (m.base_dir / "slowsync_ms").exists():
                _write(m.base_dir / "slowsync_ms", "0")
            unfill(m.data_dir)
            if os.path.exists(clock_file(m)):
                set_clock(clock_file(m), 0)
        for i in sorted(self._paused):
            self.ens.sigcont(i)
        self._paused.clear()
        for i, m in enumerate(self.ens.members):
            if not m.running:
                self.ens.start(i, wait=False)
                self._crash_seen.discard(i)  # a new process: its own exit would be news
        self._killed.clear()
        self._disk_back.clear()
        for i in sorted(self._removed):
            ok, why = self._reconfig(i, leaving=False, timeout=60.0)
            if ok:
                self._removed.pop(i)
            else:
                self.log(f"[{self.now():7.2f}s] member {i + 1} could not be added back: {why}")
        self._event(None, "heal", "healed the network, resumed and restarted every member", kind="heal")


def member_line(ens, i: int) -> str:
    """Member i's line in ZooKeeper's dynamic format: server.N=host:peer:election:participant;host:client."""
    m = ens.members[i]
    return f"server.{i + 1}={m.host}:{ens.peer_ports[i]}:{ens.election_ports[i]}:participant;{m.hostport}"


def use_dynamic_files(ens) -> None:
    """Moves every member's membership from zoo.cfg into `zoo.cfg.dynamic.100000000` next to
    it, as ZooKeeper's reconfig documentation starts an ensemble (before the start)."""
    lines = [member_line(ens, i) for i in range(ens.n)]
    for m in ens.members:
        path = os.path.join(str(m.base_dir), "zoo.cfg.dynamic.100000000")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        for key in list(m.extra_cfg):
            if key.startswith("server."):
                m.extra_cfg[key] = None
        m.extra_cfg["dynamicConfigFile"] = path
        m._write_config()


def clock_offset(draw: float) -> int:
    """A clock fault's step from its draw: below 0.5 forward, else back; 1 s to 2 h,
    log-uniform over the half's range."""
    half = draw * 2 if draw < 0.5 else (draw - 0.5) * 2
    secs = int(round(7200 ** half))
    return max(1, secs) * (1 if draw < 0.5 else -1)


def clock_file(member) -> str:
    """The libfaketime control file of a member (in its own directory; see netns.Net)."""
    return str(member.base_dir / CLOCK_FILE)


CLOCK_FILE = "faketime"
# libfaketime re-reads its offset file at most once a second, and a connection must be
# answered after that: a step lasts at least this long (s), so that a short one shows.
CLOCK_PICKUP = 3.0


set_clock = harness.set_clock


def _write(path, value: str) -> None:
    """Replaces a control file whole (a reader never sees half of it)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(value + "\n")
    os.replace(tmp, path)


def _m(members) -> str:
    return "{" + ",".join(str(m + 1) for m in members) + "}"


FILLER = ".nemesis-filler"
# How long after a disk fault ends a member's exit on a disk error is still the fault's doing
# (see Nemesis._exit_from_disk_fault), and what in its log says it was a disk error.
DISK_ERROR_GRACE = 2.0
DISK_ERROR_MARKS = ("No space left on device", "os error 28", "Input/output error", "os error 5",
                    "SyncFailedException")


def fill(path) -> None:
    """Fills the filesystem holding `path` to the last block, with files named FILLER*."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    chunk = 1 << 20
    size = free - free % chunk
    with open(os.path.join(path, FILLER), "wb") as f:
        while size > 0:
            try:
                os.posix_fallocate(f.fileno(), 0, size)
                break
            except OSError:
                size -= chunk  # the extent tree needs a few blocks of its own
    # What fallocate left, a block at a time (bounded: at most the 1 MiB left above).
    with open(os.path.join(path, FILLER + "-tail"), "wb", buffering=0) as f:
        block = b"\0" * st.f_frsize
        for _ in range(2 * chunk // st.f_frsize + 16):
            try:
                f.write(block)
            except OSError:
                break


def unfill(path) -> None:
    for name in (FILLER, FILLER + "-tail"):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass


_LOOP_PROBE: list = []


def loop_disks_unavailable() -> Optional[str]:
    """Why `LoopDisks` cannot work here (None: it can): a small ext4 image is made, mounted
    on a loop device and unmounted once."""
    if not _LOOP_PROBE:
        _LOOP_PROBE.append(_probe_loop())
    return _LOOP_PROBE[0]


def _probe_loop() -> Optional[str]:
    import subprocess
    import tempfile
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 (e2fsprogs) is missing"
    d = tempfile.mkdtemp(prefix="nemesis-loop-probe-")
    img, mnt = os.path.join(d, "probe.img"), os.path.join(d, "mnt")
    try:
        os.makedirs(mnt)
        with open(img, "wb") as f:
            f.truncate(8 << 20)
        for cmd in (["mkfs.ext4", "-q", "-F", "-m", "0", img], ["mount", "-o", "loop", img, mnt], ["umount", mnt]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                return f"{' '.join(cmd[:2])} failed: {r.stderr.strip()}"
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)


class LoopDisks:
    """Puts each member's data dir on a small ext4 filesystem of its own (a sparse image on a
    loop device, no blocks reserved for root), so that `fulldisk` fills one member's disk
    and nobody else's. `unmount()` (the members stopped first) undoes it."""

    SIZE = 1 << 30  # sparse: only what is written takes space

    def __init__(self, ens, workdir: str):
        self.mounts: list[str] = []
        self.images: list[str] = []
        import subprocess
        for m in ens.members:
            img = os.path.join(workdir, f"member{m.myid}.img")
            with open(img, "wb") as f:
                f.truncate(self.SIZE)
            self.images.append(img)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", img], check=True, timeout=60,
                           stdout=subprocess.DEVNULL)
            # What the data dir holds already (ZooKeeper's myid) moves onto the new filesystem.
            kept = {}
            for name in os.listdir(m.data_dir):
                with open(os.path.join(m.data_dir, name), "rb") as f:
                    kept[name] = f.read()
            subprocess.run(["mount", "-o", "loop", img, m.data_dir], check=True, timeout=60)
            self.mounts.append(m.data_dir)
            shutil.rmtree(os.path.join(m.data_dir, "lost+found"), ignore_errors=True)
            for name, data in kept.items():
                with open(os.path.join(m.data_dir, name), "wb") as f:
                    f.write(data)

    def unmount(self) -> None:
        import subprocess
        for path in self.mounts:
            for _ in range(20):
                if subprocess.run(["umount", path], timeout=60, stderr=subprocess.DEVNULL).returncode == 0:
                    break
                time.sleep(0.25)  # a member's process still closing its files
        self.mounts.clear()
        keep = os.environ.get("NEMESIS_KEEP_DISKS")  # a directory: the images are moved there
        for img in self.images:
            if keep:
                os.makedirs(keep, exist_ok=True)
                where = os.path.basename(os.path.dirname(img))
                shutil.move(img, os.path.join(keep, f"{where}-{os.path.basename(img)}"))
                continue
            try:
                os.unlink(img)
            except FileNotFoundError:
                pass
        self.images.clear()
