#!/usr/bin/env python3
"""Start-up on an Apache ZooKeeper 3.8 data dir: ZooKeeper itself vs Warden's first start
(which imports it) vs `warden import` offline; time and peak RSS.

Per size (--znodes), a standalone ZooKeeper 3.8 is loaded once with that many znodes of
--size bytes spread over parents of --bucket children (/warden-mem/b<i/bucket>/n<i%bucket>,
bench/compare.py's pipelined loader) and stopped with SIGTERM; with snapCount=--snap-count its
data dir holds snapshots and a txn log tail after the newest. That data dir is never started
on again: every run gets a fresh copy of it (ZooKeeper writes a snapshot of its own at start,
Warden writes its state beside ZooKeeper's files), made before the clock starts. Per run, in
this order:

  zookeeper  `java ... QuorumPeerMain zoo.cfg` on the copy: spawn -> srvr answers with `Mode:`
  warden     `warden --config zoo.cfg` on a copy (its first start: imports, then serves):
             spawn -> `Mode:`; then SIGTERM and a second start on the same dir (`warden
             restart`: its own snapshot, no import) timed the same way
  import     `warden import --zookeeper-data-dir COPY --data-dir NEW --json`: spawn -> exit

Peak RSS: a server's VmHWM from /proc/<pid>/status read --settle seconds after it serves
(start-up's high-water mark; VmRSS at that moment too); `warden import`'s ru_maxrss from
wait4(2) (the same quantity, read at its exit). Both servers get the same zoo.cfg (tickTime
2000, snapCount, maxClientCnxns=0, 4lw whitelist, no AdminServer); ZooKeeper runs with
-Xmx--zk-heap and the JVM's default GC. The page cache is warm for every start (the copy was
just written). Medians over --runs; min-max beside them. Everything binds 127.0.0.1; every
process is killed by PID and every temp dir removed at the end.

  cargo build --release
  python3 bench/import.py --znodes 100000,1000000 --runs 3
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import compare  # noqa: E402  (process bookkeeping, 4lw, the pipelined znode loader)

sys.path.insert(0, str(REPO / "compat-tests"))
import zkfiles  # noqa: E402  (ZooKeeper's txn logs read independently of Warden)

log = compare.log


def data_dir_info(data_dir: Path) -> dict:
    v2 = data_dir / "version-2"
    snaps = sorted(v2.glob("snapshot.*"), key=lambda p: int(p.name.split(".", 1)[1], 16))
    logs = sorted(v2.glob("log.*"), key=lambda p: int(p.name.split(".", 1)[1], 16))
    last = max((zkfiles.txn_log_last_zxid(p)[0] for p in logs), default=-1)
    newest = int(snaps[-1].name.split(".", 1)[1], 16) if snaps else None
    return {
        "snapshots": len(snaps),
        "newest_snapshot": snaps[-1].name if snaps else None,
        "newest_snapshot_bytes": snaps[-1].stat().st_size if snaps else None,
        "logs": len(logs),
        "last_zxid": hex(last),
        "txns_after_newest_snapshot": (last - newest) if newest is not None and last >= 0 else None,
        "bytes": sum(p.stat().st_size for p in v2.iterdir()),
    }


def status_kib(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in ("VmHWM", "VmRSS"):
                    out[k] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def srvr(port: int) -> dict:
    try:
        reply = compare.four_letter(port, "srvr", timeout=5)
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in reply.splitlines()) if _}


class Proc:
    """One server process on `data_dir` with its own zoo.cfg and port in `base`."""

    def __init__(self, kind: str, opts, base: Path, data_dir: Path):
        self.kind, self.opts, self.base = kind, opts, base
        self.port = compare.free_port()
        self.cfg = base / f"zoo-{kind}.cfg"
        self.cfg.write_text("\n".join(cfg_lines(opts, data_dir, self.port)) + "\n")
        self.log_path = base / f"{kind}.log"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        if self.kind == "warden":
            return [self.opts.warden_bin_run, "--config", str(self.cfg)]
        return [compare.ZK_JAVA, f"-Xmx{self.opts.zk_heap}", *shlex.split(self.opts.zk_java_opts),
                "-Dzookeeper.4lw.commands.whitelist=*", "-Dzookeeper.admin.enableServer=false",
                "-cp", compare.ZK_CLASSPATH, compare.ZK_MAIN, str(self.cfg)]

    def start(self, timeout: float) -> dict:
        """Spawn, wait until srvr says Mode, wait --settle s; the sample."""
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n=== start {' '.join(self.command())}\n".encode())
            logf.flush()
            t0 = time.monotonic()
            self.proc = compare.spawn(self.command(), stdout=logf, stderr=subprocess.STDOUT, cwd=str(self.base))
        deadline = t0 + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if "Mode:" in compare.four_letter(self.port, "srvr", timeout=2):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} not serving after {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.01)
        took = time.monotonic() - t0
        cpu = compare.proc_cpu_s(self.proc.pid)
        at_ready = status_kib(self.proc.pid)
        time.sleep(self.opts.settle)
        later = status_kib(self.proc.pid)
        info = srvr(self.port)
        return {"seconds": took, "cpu_s_at_ready": cpu, "vmhwm_at_ready": at_ready.get("VmHWM"),
                "vmhwm": later.get("VmHWM"), "vmrss": later.get("VmRSS"),
                "node_count": int(info["Node count"]) if "Node count" in info else None,
                "zxid": info.get("Zxid")}

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after 60 s."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        compare.kill_proc(self.proc)

    def kill(self) -> None:
        compare.kill_proc(self.proc)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def cfg_lines(opts, data_dir: Path, port: int) -> list[str]:
    return [f"tickTime={compare.TICK_TIME_MS}", f"dataDir={data_dir}", f"clientPort={port}",
            f"clientPortAddress={compare.HOST}", "maxClientCnxns=0", "4lw.commands.whitelist=*",
            "admin.enableServer=false", f"snapCount={opts.snap_count}"]


def build_zk_data_dir(opts, n: int, base: Path) -> tuple[Path, dict]:
    """Load n znodes into a fresh standalone ZooKeeper, stop it with SIGTERM; its dataDir."""
    data = base / "zk-data"
    data.mkdir()
    zk = Proc("zookeeper", opts, base, data)
    log(f"loading {n:,} znodes of {opts.size} bytes into ZooKeeper (snapCount={opts.snap_count})")
    zk.start(120)
    try:
        loaded = compare.load_znodes(zk.port, n, opts.size, opts.loader_conns, opts.loader_window, opts.bucket)
        if loaded.get("ok", 0) != n:
            raise RuntimeError(f"the load failed: {loaded}")
        node_count = int(srvr(zk.port).get("Node count", -1))
        log(f"loaded in {loaded['seconds']:.1f}s ({loaded['ok'] / loaded['seconds']:,.0f}/s); "
            f"Node count {node_count:,}")
    finally:
        zk.stop()
    info = data_dir_info(data)
    info.update(load_seconds=loaded["seconds"], node_count=node_count)
    log(f"ZooKeeper data dir: {info['bytes'] / 2**20:,.0f} MiB, {info['snapshots']} snapshots (newest "
        f"{info['newest_snapshot']}), {info['logs']} logs to zxid {info['last_zxid']}, "
        f"{info['txns_after_newest_snapshot']:,} txns after the newest snapshot")
    return data, info


def fresh_copy(src: Path, base: Path, name: str) -> tuple[Path, Path]:
    run = base / name
    run.mkdir()
    dst = run / "data"
    shutil.copytree(src, dst)
    return run, dst


def parse_import_log(path: Path) -> dict:
    """From Warden's log: its own account of the import (the report line)."""
    for line in path.read_text(errors="replace").splitlines():
        if "imported the ZooKeeper data dir" in line:
            return {"report": line.split("report=", 1)[-1].strip()}
    return {}


def run_import(opts, src: Path, run: Path) -> dict:
    out = run / "import.json"
    cmd = [opts.warden_bin_run, "import", "--zookeeper-data-dir", str(src), "--data-dir", str(run / "warden"), "--json"]
    with open(out, "wb") as f, open(run / "import.log", "wb") as errf:
        t0 = time.monotonic()
        p = compare.spawn(cmd, stdout=f, stderr=errf)
        _, status, ru = os.wait4(p.pid, 0)
        took = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    compare._LIVE.pop(p.pid, None)
    if p.returncode != 0:
        raise RuntimeError(f"warden import exited {p.returncode}: {(run / 'import.log').read_text()[-2000:]}")
    report = json.loads(out.read_text())
    return {"seconds": took, "maxrss": ru.ru_maxrss * 1024, "cpu_s": ru.ru_utime + ru.ru_stime,
            "report": {k: v for k, v in report.items() if not isinstance(v, (list, dict))}}


def one_size(opts, n: int) -> dict:
    base = compare.make_temp_dir(f"import-bench-{n}-")
    try:
        pristine, info = build_zk_data_dir(opts, n, base)
        runs: dict[str, list[dict]] = {"zookeeper": [], "warden": [], "warden_restart": [], "import": []}
        for r in range(opts.runs):
            run, data = fresh_copy(pristine, base, f"zk-{r}")
            zk = Proc("zookeeper", opts, run, data)
            try:
                s = zk.start(opts.start_timeout)
            finally:
                zk.kill()
            runs["zookeeper"].append(s)
            log(f"{n:,} run {r + 1}: ZooKeeper served after {s['seconds']:.2f}s, VmHWM {s['vmhwm'] / 2**20:,.0f} MiB, "
                f"Node count {s['node_count']:,}")
            shutil.rmtree(run)

            run, data = fresh_copy(pristine, base, f"warden-{r}")
            wd = Proc("warden", opts, run, data)
            try:
                s = wd.start(opts.start_timeout)
                s.update(parse_import_log(wd.log_path))
                wd.stop()
                again = wd.start(opts.start_timeout)
            finally:
                wd.kill()
            runs["warden"].append(s)
            runs["warden_restart"].append(again)
            log(f"{n:,} run {r + 1}: Warden (import) served after {s['seconds']:.2f}s, VmHWM "
                f"{s['vmhwm'] / 2**20:,.0f} MiB, Node count {s['node_count']:,}; restarted in {again['seconds']:.2f}s")
            shutil.rmtree(run)

            run, data = fresh_copy(pristine, base, f"import-{r}")
            s = run_import(opts, data, run)
            runs["import"].append(s)
            log(f"{n:,} run {r + 1}: warden import took {s['seconds']:.2f}s, max RSS {s['maxrss'] / 2**20:,.0f} MiB")
            shutil.rmtree(run)
        counts = {k: {x["node_count"] for x in v if x.get("node_count") is not None} for k, v in runs.items()}
        return {"znodes": n, "zookeeper_data_dir": info, "runs": runs,
                "node_counts": {k: sorted(v) for k, v in counts.items()}}
    finally:
        compare.remove_temp_dir(base)


def med(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs)) if xs else None


def table(res: dict) -> str:
    n, runs, info = res["znodes"], res["runs"], res["zookeeper_data_dir"]
    rows = [("Apache ZooKeeper 3.8: start on its data dir", runs["zookeeper"], "vmhwm", "spawn -> srvr Mode"),
            ("Warden: first start (imports ZooKeeper's data dir)", runs["warden"], "vmhwm", "spawn -> srvr Mode"),
            ("Warden: restart on its own state", runs["warden_restart"], "vmhwm", "spawn -> srvr Mode"),
            ("`warden import` (offline)", runs["import"], "maxrss", "spawn -> exit")]
    out = [f"### {n:,} znodes of 100 bytes ({info['node_count']:,} with parents and ZooKeeper's own); "
           f"ZooKeeper data dir {info['bytes'] / 2**20:,.0f} MiB: {info['snapshots']} snapshots, newest "
           f"{info['newest_snapshot']} ({info['newest_snapshot_bytes'] / 2**20:,.0f} MiB), "
           f"{info['txns_after_newest_snapshot']:,} txns after it",
           "",
           "| | time (median, min-max) | peak RSS (median, min-max) | RSS serving | what is timed |",
           "|---|---|---|---|---|"]
    for name, xs, peak, what in rows:
        t = med([x["seconds"] for x in xs])
        p = med([x.get(peak) for x in xs])
        rss = med([x.get("vmrss") for x in xs])
        out.append(f"| {name} | {t[0]:.2f} s ({t[1]:.2f}-{t[2]:.2f}) | {p[0] / 2**20:,.0f} MiB "
                   f"({p[1] / 2**20:,.0f}-{p[2] / 2**20:,.0f}) | "
                   f"{'%s MiB' % format(rss[0] / 2**20, ',.0f') if rss else '-'} | {what} |")
    zt = med([x["seconds"] for x in runs["zookeeper"]])[0]
    zp = med([x["vmhwm"] for x in runs["zookeeper"]])[0]
    wt = med([x["seconds"] for x in runs["warden"]])[0]
    wp = med([x["vmhwm"] for x in runs["warden"]])[0]
    out.append(f"| **Warden first start / ZooKeeper start** | **{wt / zt:.2f}x** | **{wp / zp:.2f}x** | | |")
    nc = res["node_counts"]
    same = nc["zookeeper"] == nc["warden"] == nc["warden_restart"]
    out.append("")
    out.append(f"srvr Node count: ZooKeeper {nc['zookeeper']}, Warden {nc['warden']}, Warden restart "
               f"{nc['warden_restart']}{'' if same else '  ** DIFFERENT **'}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--znodes", default="1000000", help="comma-separated tree sizes (100000 for a quick run)")
    ap.add_argument("--runs", type=int, default=3, help="starts of each kind per size (medians)")
    ap.add_argument("--warden-bin", default=str(REPO / "target" / "release" / "warden"))
    ap.add_argument("--snap-count", type=int, default=100000, help="ZooKeeper's snapCount (its default)")
    ap.add_argument("--size", type=int, default=100, help="bytes per znode")
    ap.add_argument("--bucket", type=int, default=1000, help="znodes per parent")
    ap.add_argument("--loader-conns", type=int, default=4)
    ap.add_argument("--loader-window", type=int, default=500)
    ap.add_argument("--zk-heap", default="2g")
    ap.add_argument("--zk-java-opts", default="")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after serving before VmHWM is read")
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / f"import-{datetime.date.today()}.json"))
    opts = ap.parse_args(argv)
    if not os.access(opts.warden_bin, os.X_OK):
        print(f"import.py: no Warden binary at {opts.warden_bin} (cargo build --release, or --warden-bin)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, compare._on_signal)
    signal.signal(signal.SIGHUP, compare._on_signal)
    atexit.register(compare.cleanup_all)
    bindir = compare.make_temp_dir("import-bench-bin-")
    opts.warden_bin_run = str(bindir / "warden")
    shutil.copy2(opts.warden_bin, opts.warden_bin_run)  # a concurrent cargo build cannot swap it mid-run
    t_all = time.monotonic()
    results = {"command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
               "date": datetime.datetime.now().isoformat(timespec="seconds"),
               "warden_bin": opts.warden_bin,
               "warden_version": subprocess.run([opts.warden_bin_run, "--version"], capture_output=True,
                                                text=True, timeout=30).stdout.strip(),
               "options": {k: v for k, v in vars(opts).items() if k != "warden_bin_run"},
               "machine": compare.machine_info(), "sizes": []}
    try:
        for n in [int(x) for x in opts.znodes.split(",")]:
            res = one_size(opts, n)
            results["sizes"].append(res)
            print(table(res) + "\n", flush=True)
    except (KeyboardInterrupt, compare.BenchAbort) as e:
        log(f"interrupted: {e!r}")
        return 1
    finally:
        results["machine"]["loadavg_at_end"] = os.getloadavg()
        results["wall_seconds"] = time.monotonic() - t_all
        if results["sizes"]:
            Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
            Path(opts.json).write_text(json.dumps(results, indent=1) + "\n")
            log(f"wrote {opts.json} ({results['wall_seconds']:.0f} s in all)")
        compare.cleanup_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
