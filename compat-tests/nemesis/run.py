#!/usr/bin/env python3
"""The nemesis runner: seeded random fault schedules against a real ensemble, histories
recorded and checked.

Owns: one schedule end to end (namespaces and an ensemble of Warden or ZooKeeper 3.8
members, each in its own network namespace; the workloads' clients; the faults; the heal;
the final reads; the checks; the clean-up, also on failure) and the summaries.

    python3 compat-tests/nemesis/run.py --server warden|zookeeper --members 3 --schedules N \\
        --seconds S --seed SEED [--faults kill,pause,partition[,disk,diskerror,membership,failpoint,clock]] [--workloads registers,set,locks] \\
        [--clients registers=5,set=3,locks=4] [--cfg snapCount=100 ...] --json OUT

Schedule i uses seed SEED+i (replay one with --seed SEED+i --schedules 1). For each schedule
and in total it prints the faults injected by kind, ops by outcome per workload, the share of
indeterminate ops, the longest window with no successful write (and the faults during it),
and every anomaly with its minimal evidence. --json OUT gets the summaries (with every fault
event); each schedule's history goes next to it as OUT-stem.seed<N>.history.jsonl, and when a
schedule finds an anomaly its members' logs are copied to OUT-stem.seed<N>.logs/. Exit status:
0 clean, 1 an anomaly, 2 a harness error (a client thread died, a final read failed).
Needs root (network namespaces). WARDEN_BIN as for the rest of compat-tests (default
target/debug/warden).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import ensemble  # noqa: E402
import faults  # noqa: E402
import harness  # noqa: E402
import netns  # noqa: E402
import workloads  # noqa: E402
from history import History  # noqa: E402

DEFAULT_CLIENTS = {"registers": 5, "set": 3, "locks": 4, "sessions": 4, "watches": 4}
RECOVERY_TIMEOUT = 45.0  # seconds after the heal for every workload to write again


_SHIM: list[str] = []
# Loop-mounted data dirs still mounted (unmounted at exit if a schedule could not).
_DISKS: list = []


def _unmount_all() -> None:
    for d in list(_DISKS):
        d.unmount()


import atexit  # noqa: E402
atexit.register(_unmount_all)


def slowsync_shim() -> str:
    """compat-tests/slowsync.c built once per run (the disk faults)."""
    if not _SHIM:
        import subprocess
        import tempfile
        import atexit
        d = tempfile.mkdtemp(prefix="nemesis-shim-")
        atexit.register(shutil.rmtree, d, True)
        out = os.path.join(d, "slowsync.so")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", out,
                        os.path.join(os.path.dirname(HERE), "slowsync.c"), "-ldl"], check=True, timeout=60)
        _SHIM.append(out)
    return _SHIM[0]


def _outage(times: list[float], start: float, end: float) -> tuple[float, float, float]:
    points = [start] + sorted(t for t in times if start <= t <= end) + [end]
    best = max(zip(points, points[1:]), key=lambda p: p[1] - p[0])
    return best[1] - best[0], best[0], best[1]


def _fault_intervals(events: list[dict], t_end: float) -> list[dict]:
    """[{index, kind, what, from, to}] (schedule times) of the faults started."""
    out: dict = {}
    for e in events:
        if e["index"] is None:
            continue
        if e["action"] == "start":
            out[e["index"]] = {"index": e["index"], "kind": e["kind"], "what": e["what"], "from": e["t"], "to": t_end}
        elif e["action"] == "end" and e["index"] in out:
            out[e["index"]]["to"] = e["t"]
    return list(out.values())


def run_schedule(kind: str, members: int, seconds: float, seed: int, categories, names, clients=None,
                 cfg=None, out_stem: str | None = None, log=print) -> dict:
    """One schedule; returns its summary (see format_schedule). Always cleans up."""
    clients = {**DEFAULT_CLIENTS, **(clients or {})}
    plan = faults.generate(seed, seconds, members, categories)
    log(f"=== schedule seed {seed}: {kind} x{members}, {seconds:.0f}s, faults {','.join(categories)}, "
        f"workloads {','.join(names)}")
    log(faults.describe_plan(plan))
    res: dict = {"seed": seed, "server": kind, "members": members, "seconds": seconds,
                 "categories": list(categories), "workloads": list(names), "plan": [f.planned() for f in plan],
                 "anomalies": [], "errors": []}
    net = netns.Net(members)
    if "disk" in categories or "diskerror" in categories:
        net.slowsync_shim = slowsync_shim()
    if "clock" in categories:
        net.faketime_file = faults.CLOCK_FILE
    ens = None
    disks = None
    wls: list = []
    admin = None
    nem = None
    t_wall = time.monotonic()
    try:
        ens = netns.NetEnsemble(net, members, kind=kind, name=f"nem{seed % 100000}", extra_cfg=cfg or {})
        if "membership" in categories:
            faults.use_dynamic_files(ens)
        if "clock" in categories:
            for m in ens.members:
                faults.set_clock(faults.clock_file(m), 0)
        if "diskerror" in categories:
            import tempfile
            disks = faults.LoopDisks(ens, tempfile.mkdtemp(prefix="nemesis-disks-"))
            _DISKS.append(disks)
        ens.start()
        leader = ens.leader()
        admin = workloads.make_client(ens.hostports[leader])
        base = f"/nemesis-{seed}-{uuid.uuid4().hex[:6]}"
        admin.create(base, b"", makepath=True)
        import random
        rng = random.Random(seed)
        history = History()
        for k, name in enumerate(names):
            kw = {}
            if name == "registers":
                # Warden's sync is a quorum-confirmed read index, so sync+get must be
                # linearizable there (ZooKeeper's is not: see workloads.Registers); with
                # readMode=linearizable, so must plain reads.
                kw = {"horizon": seconds + 200, "strict_sync": kind == "warden",
                      "strict_plain": kind == "warden" and (cfg or {}).get("readMode") == "linearizable"}
            if name == "sessions":
                kw = {"strict_expiry": kind == "warden"}
            w = workloads.WORKLOADS[name](ens.hostports, history, base, rng, clients[name], **kw)
            w.offset = k
            w.setup(admin)
            wls.append(w)
        workloads.close_client(admin)
        admin = None
        t0 = time.monotonic()
        history.t0 = t0
        for w in wls:
            w.start()
        nem = faults.Nemesis(ens, net, t0=t0, log=log)
        try:
            nem.run(plan, seconds)
        finally:
            nem.heal_all()
        t_heal = time.monotonic()
        try:
            ens.wait_stable(90)
        except harness.ServerStartError as e:
            res["anomalies"].append(workloads.anomaly("nemesis", "not-stable",
                                                      "the ensemble did not settle within 90 s of the heal",
                                                      str(e).splitlines()[:40]))
        log(f"[{time.monotonic() - t0:7.2f}s] stable: modes {ens.modes()}")
        # Recovery: every workload writes successfully again after the heal.
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            behind = [w.name for w in wls if not any(
                op.final_outcome == "ok" and op.complete > t_heal for op in history.ops() if op.type in w.write_types)]
            if not behind:
                break
            time.sleep(0.2)
        else:
            res["anomalies"].append(workloads.anomaly(
                "nemesis", "no-recovery", f"no successful write by {behind} within {RECOVERY_TIMEOUT:.0f}s of the "
                f"heal", [f"modes {ens.modes()}"] + [ln for w in wls if w.name in behind
                                                       for ln in w.diagnose() + w.stacks()]))
        time.sleep(1.0)
        t_stop = time.monotonic()
        for w in wls:
            w.stop()
        log(f"[{time.monotonic() - t0:7.2f}s] clients stopped; final reads and checks")
        # Through every member still running: one that could not start again is already an
        # anomaly (member-crash, not-stable), and must not leave the others' reads undone.
        up = [hp if ens.members[i].running else None for i, hp in enumerate(ens.hostports)]
        if None in up:
            log(f"[{time.monotonic() - t0:7.2f}s] final reads skip members not running: "
                f"{[i + 1 for i, hp in enumerate(up) if hp is None]}")
        for w in wls:
            try:
                w.final(up)
            except Exception as e:  # noqa: BLE001
                w.errors.append(f"{w.name} final: {workloads.err(e)}\n{traceback.format_exc()}")
        nem.check_crashes()  # a member that exited after the heal (settling, final reads)
        for w in wls:
            w.close()  # (no client threads left when the checker forks)
        for w in wls:
            try:
                res["anomalies"] += w.check()
            except Exception as e:  # noqa: BLE001
                w.errors.append(f"{w.name} check: {workloads.err(e)}\n{traceback.format_exc()}")
            res["errors"] += w.errors
        for c in nem.crashes:
            res["anomalies"].append(workloads.anomaly("nemesis", "member-crash",
                                                      f"member {c['member']} exited by itself with code {c['code']} "
                                                      f"at {c['t']}s", c["log"].splitlines()[-30:]))
        # -- the summary ----------------------------------------------------------------
        res["faults"] = faults.summarise(nem.events)
        res["fault_events"] = [{k: v for k, v in e.items() if k != "mono"} for e in nem.events]
        res["ops"] = {w.name: w.counts() for w in wls}
        res["indeterminate"] = {w.name: _share(w.counts()) for w in wls}
        allc = {o: sum(c[o] for c in res["ops"].values()) for o in ("ok", "fail", "info")}
        res["indeterminate"]["total"] = _share(allc)
        writes = [op.complete for w in wls for op in history.ops()
                  if op.type in w.write_types and op.final_outcome == "ok"]
        length, a, b = _outage(writes, t0, t_stop)
        intervals = _fault_intervals(nem.events, round(t_heal - t0, 3))
        during = [f"#{f['index']} {f['kind']}: {f['what']}" for f in intervals
                  if f["from"] < b - t0 and f["to"] > a - t0]
        res["longest_write_outage"] = {"seconds": round(length, 3), "from": round(a - t0, 3),
                                       "to": round(b - t0, 3), "faults": during}
        per = {}
        for w in wls:
            wt = [op.complete for op in history.ops() if op.type in w.write_types and op.final_outcome == "ok"]
            per[w.name] = round(_outage(wt, t0, t_stop)[0], 3)
        res["longest_write_outage"]["per_workload"] = per
        res["extra"] = {w.name: {k: v for k, v in w.final_info.items() if k != "views"} for w in wls}
        if out_stem:
            history.to_jsonl(f"{out_stem}.seed{seed}.history.jsonl",
                             extra={k: v for k, v in res.items() if k not in ("anomalies",)})
        if (res["anomalies"] or res["errors"]) and ens is not None:
            res["logs"] = _keep_logs(ens, out_stem, seed)
    except Exception as e:  # noqa: BLE001 - a harness failure is reported, never hidden
        res["errors"].append(f"schedule aborted: {workloads.err(e)}\n{traceback.format_exc()}")
        if ens is not None:
            res["logs"] = _keep_logs(ens, out_stem, seed)
    finally:
        for w in wls:
            w.halt.set()
        for w in wls:
            w.close()
        if admin is not None:
            workloads.close_client(admin)
        if ens is not None:
            if disks is not None:
                for m in ens.members:
                    m.kill()
                disks.unmount()
                _DISKS.remove(disks)
            ens.close()
        net.close()
    res["wall_seconds"] = round(time.monotonic() - t_wall, 1)
    log(format_schedule(res))
    return res


def _keep_logs(ens, out_stem: str | None, seed: int) -> str:
    d = f"{out_stem}.seed{seed}.logs" if out_stem else f"/tmp/nemesis-seed{seed}.logs"
    os.makedirs(d, exist_ok=True)
    for i, m in enumerate(ens.members):
        try:
            shutil.copy(m.log_path, os.path.join(d, f"member-{i + 1}.log"))
        except OSError:
            pass
    return d


def _share(c: dict) -> float:
    total = sum(c.values())
    return round(c["info"] / total, 4) if total else 0.0


def format_schedule(res: dict) -> str:
    lines = [f"--- seed {res['seed']} ({res['server']} x{res['members']}, {res['seconds']:.0f}s, "
             f"{res.get('wall_seconds', '?')}s wall)"]
    if "faults" in res:
        lines.append("  faults: " + (", ".join(f"{k} {v}" for k, v in sorted(res["faults"].items())) or "none"))
        for name, c in res["ops"].items():
            lines.append(f"  {name:9s} ok {c['ok']:6d}  fail {c['fail']:5d}  info {c['info']:4d}  "
                         f"(indeterminate {100 * res['indeterminate'][name]:.2f}%)")
        lo = res["longest_write_outage"]
        lines.append(f"  indeterminate overall {100 * res['indeterminate']['total']:.2f}%; longest window with no "
                     f"successful write {lo['seconds']:.2f}s [{lo['from']:.2f}s .. {lo['to']:.2f}s]"
                     + (f" during {'; '.join(lo['faults'])}" if lo["faults"] else ""))
        extra = json.loads(json.dumps(res.get("extra") or {}))
        stale = (extra.get("registers") or {}).pop("stale_synced_reads", [])
        lines.append(f"  per workload: {lo['per_workload']}; extra: {extra}")
        if stale:
            lines.append(f"  note: {len(stale)} keys had a sync+get read no order explains (sync is not a "
                         f"quorum read; not counted as an anomaly), e.g.:")
            lines += [f"    {x}" for x in stale[:3]]
    lines.append(f"  anomalies: {len(res['anomalies'])}" + ("" if res["anomalies"] else " (none)"))
    for a in res["anomalies"]:
        lines.append(f"    [{a['workload']}/{a['kind']}] {a['message']}")
        lines += [f"      {ln}" for ln in a["evidence"][:40]]
    if res["errors"]:
        lines.append(f"  HARNESS ERRORS: {len(res['errors'])}")
        lines += [f"    {e[:2000]}" for e in res["errors"][:10]]
    if res.get("logs"):
        lines.append(f"  member logs kept in {res['logs']}")
    return "\n".join(lines)


def total_summary(results: list[dict]) -> dict:
    tot: dict = {"schedules": len(results), "faults": {}, "ops": {}, "anomalies": 0, "errors": 0,
                 "longest_write_outage": 0.0}
    for r in results:
        for k, v in r.get("faults", {}).items():
            tot["faults"][k] = tot["faults"].get(k, 0) + v
        for name, c in r.get("ops", {}).items():
            t = tot["ops"].setdefault(name, {"ok": 0, "fail": 0, "info": 0})
            for o in t:
                t[o] += c[o]
        tot["anomalies"] += len(r["anomalies"])
        tot["errors"] += len(r["errors"])
        if "longest_write_outage" in r:
            tot["longest_write_outage"] = max(tot["longest_write_outage"], r["longest_write_outage"]["seconds"])
    tot["indeterminate"] = {name: _share(c) for name, c in tot["ops"].items()}
    allc = {o: sum(c[o] for c in tot["ops"].values()) for o in ("ok", "fail", "info")}
    tot["indeterminate"]["total"] = _share(allc)
    tot["failed_seeds"] = [r["seed"] for r in results if r["anomalies"] or r["errors"]]
    tot["stale_synced_read_keys"] = sum(len(((r.get("extra") or {}).get("registers") or {}).get(
        "stale_synced_reads", [])) for r in results)
    return tot


def format_total(tot: dict) -> str:
    lines = [f"=== total over {tot['schedules']} schedules",
             "  faults: " + ", ".join(f"{k} {v}" for k, v in sorted(tot["faults"].items()))]
    for name, c in tot["ops"].items():
        lines.append(f"  {name:9s} ok {c['ok']:6d}  fail {c['fail']:5d}  info {c['info']:4d}  "
                     f"(indeterminate {100 * tot['indeterminate'][name]:.2f}%)")
    lines.append(f"  indeterminate overall {100 * tot['indeterminate']['total']:.2f}%; longest window with no "
                 f"successful write {tot['longest_write_outage']:.2f}s")
    lines.append(f"  keys with a stale sync+get read (noted, not failed): {tot['stale_synced_read_keys']}")
    lines.append(f"  anomalies {tot['anomalies']}, harness errors {tot['errors']}"
                 + (f"; failing seeds {tot['failed_seeds']}" if tot["failed_seeds"] else ""))
    return "\n".join(lines)


def run(kind: str, members: int, schedules: int, seconds: float, seed: int, categories, names, clients=None,
        cfg=None, json_out: str | None = None, log=print) -> dict:
    """Runs `schedules` schedules (seeds seed, seed+1, ...); returns {"total":..., "schedules": [...]}."""
    why = netns.available()
    if why is not None:
        raise RuntimeError(f"the nemesis needs network namespaces: {why}")
    if "failpoint" in categories and kind != "warden":
        raise RuntimeError("crash points are Warden's (a build with the `failpoints` feature)")
    if "clock" in categories and kind != "warden":
        raise RuntimeError("clock faults are Warden's: under libfaketime a JVM's timed waits break "
                           "(see faults.py), which a real clock step does not do")
    if "clock" in categories and not os.path.exists(harness.FAKETIME_LIB):
        raise RuntimeError(f"the clock faults need libfaketime ({harness.FAKETIME_LIB}; compat-tests/install.sh)")
    if "failpoint" in categories:
        # Snapshots often, and a short log kept after them, so the snapshot write and install
        # points are passed too (a restarted member far enough behind gets a snapshot).
        cfg = {"snapCount": "1000", "commitLogCount": "50", **(cfg or {})}
    if "membership" in categories:
        cfg = {"reconfigEnabled": "true", **(cfg or {})}
    if "diskerror" in categories and faults.loop_disks_unavailable() is not None:
        raise RuntimeError("the diskerror faults need a loop-mounted filesystem per member: "
                           f"{faults.loop_disks_unavailable()}")
    if ("disk" in categories or "diskerror" in categories) and shutil.which("gcc") is None:
        raise RuntimeError("the disk faults need gcc to build compat-tests/slowsync.c")
    os.environ["COMPAT_SERVER"] = kind
    out_stem = None
    if json_out:
        out_stem = json_out[:-5] if json_out.endswith(".json") else json_out
        os.makedirs(os.path.dirname(os.path.abspath(json_out)), exist_ok=True)
    results = []
    for i in range(schedules):
        results.append(run_schedule(kind, members, seconds, seed + i, categories, names, clients, cfg, out_stem, log))
        if json_out:
            _write_json(json_out, results)
    tot = total_summary(results)
    log(format_total(tot))
    out = {"total": tot, "schedules": results}
    if json_out:
        _write_json(json_out, results)
    return out


def _write_json(path: str, results: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"total": total_summary(results), "schedules": results}, f, indent=1, default=str)


def _kv(s: str) -> dict:
    out = {}
    for part in filter(None, s.split(",")):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", choices=("warden", "zookeeper"), default=harness.default_kind())
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--schedules", type=int, default=1)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--faults", default="kill,pause,partition")
    p.add_argument("--workloads", default="registers,set,locks")
    p.add_argument("--clients", default="", help="per workload, e.g. registers=5,set=3,locks=4")
    p.add_argument("--cfg", action="append", default=[], help="extra zoo.cfg KEY=VALUE for every member")
    p.add_argument("--warden-bin", default=None, help="default: $WARDEN_BIN or target/debug/warden")
    p.add_argument("--json", default=None, help="write the summaries here (histories and logs next to it)")
    a = p.parse_args(argv)
    if a.warden_bin:
        os.environ["WARDEN_BIN"] = a.warden_bin
    if a.server == "warden" and not os.access(harness.warden_bin(), os.X_OK):
        print(f"run.py: WARDEN_BIN={harness.warden_bin()} is not an executable", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(3), "big")
    categories = [c for c in a.faults.split(",") if c]
    names = [n for n in a.workloads.split(",") if n]
    for n in names:
        if n not in workloads.WORKLOADS:
            p.error(f"unknown workload {n!r} (known: {', '.join(workloads.WORKLOADS)})")
    clients = {k: int(v) for k, v in _kv(a.clients).items()}
    cfg = {}
    for kv in a.cfg:
        k, _, v = kv.partition("=")
        cfg[k] = v
    print(f"run.py: seed {seed}" + (f", WARDEN_BIN={harness.warden_bin()}" if a.server == "warden" else ""),
          flush=True)
    out = run(a.server, a.members, a.schedules, a.seconds, seed, categories, names, clients, cfg, a.json,
              log=lambda s: print(s, flush=True))
    tot = out["total"]
    if tot["anomalies"]:
        return 1
    return 2 if tot["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
