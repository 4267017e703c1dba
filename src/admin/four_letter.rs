//! Four-letter words on the client port (`FourLetterCommands`), gated by
//! `4lw.commands.whitelist`, with ZooKeeper 3.8's output formats so existing scripts and
//! monitoring agents parse them. The same data backs the admin HTTP `/commands` endpoints.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::View;
use crate::tree::DataTree;

/// The Warden version as `srvr`/`stat`/`mntr` print it (ZooKeeper-style, so version parsers
/// that expect `3.x.y` keep working).
pub const VERSION: &str = concat!("3.8.0-warden-", env!("CARGO_PKG_VERSION"));

/// The full version line `srvr`, `mntr` and `envi` print.
pub fn full_version() -> String {
    format!("{VERSION}, built on unknown")
}

/// A latency average as ZooKeeper prints it: rounded to 4 decimals, then Java's
/// `Double.toString` (`0.0`, `5.0`, `4.6667`).
pub fn java_double(v: f64) -> String {
    let r = (v * 10_000.0).round() / 10_000.0;
    if r.fract() == 0.0 {
        format!("{r:.1}")
    } else {
        let s = format!("{r:.4}");
        s.trim_end_matches('0').to_string()
    }
}

/// The four-letter words ZooKeeper knows, with the admin command name each maps to.
pub const WORDS: &[(&str, &str)] = &[
    ("ruok", "ruok"),
    ("stat", "stats"),
    ("srvr", "server_stats"),
    ("mntr", "monitor"),
    ("conf", "configuration"),
    ("cons", "connections"),
    ("crst", "connection_stat_reset"),
    ("envi", "environment"),
    ("wchs", "watch_summary"),
    ("wchc", "watches"),
    ("wchp", "watches_by_path"),
    ("dump", "dump"),
    ("isro", "is_read_only"),
    ("srst", "stat_reset"),
    ("dirs", "dirs"),
    ("gtmk", "get_trace_mask"),
    ("stmk", "set_trace_mask"),
    ("hash", "hash"),
];

/// How long a connection without a session may stay idle (`NIOServerCnxnFactory`'s
/// `zookeeper.nio.sessionlessCnxnTimeout`); also the bucket width of its connection expiry
/// queue, which `dump` prints.
const SESSIONLESS_CNXN_TIMEOUT_MS: i64 = 10_000;

/// Whether this member serves read-only sessions now (`readonlymode.enabled` and no
/// quorum): what `isro` and the admin API's `read_only` say.
pub fn read_only(d: &View) -> bool {
    d.config.readonly_mode && !*d.serving.borrow()
}

/// The server's mode as `srvr` and `mntr` report it.
pub fn mode(d: &View) -> &'static str {
    if d.config.servers.is_empty() {
        return "standalone";
    }
    if d.raft.is_leader() {
        "leader"
    } else if d.servers().get(&d.config.server_id).is_some_and(|s| s.observer) {
        "observer"
    } else {
        "follower"
    }
}

/// Sum of file sizes below a directory (`dirs`).
pub fn dir_size(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn server_stats(d: &View, with_clients: bool) -> String {
    let mut s = format!("Zookeeper version: {}\n", full_version());
    if with_clients {
        s.push_str("Clients:\n");
        for c in d.stats.connections() {
            let _ = writeln!(
                s,
                " /{}[{}](queued={},recved={},sent={})",
                c.peer,
                u8::from(c.session_id.load(Ordering::Relaxed) != 0),
                c.outstanding.load(Ordering::Relaxed).max(0),
                c.received.load(Ordering::Relaxed),
                c.sent.load(Ordering::Relaxed)
            );
        }
        s.push('\n');
    }
    let (min, avg, max) = d.stats.latency.get();
    // One read of the tree, taken and released here: a guard living in `write!`'s arguments
    // while `node_count` took a second one deadlocked behind a queued apply.
    let (zxid, nodes) = {
        let tree = d.tree.read();
        // ZooKeeper counts the root twice in `Node count` (stored under "" and "/").
        (tree.last_zxid(), tree.node_count() + 1)
    };
    let _ = write!(
        s,
        "Latency min/avg/max: {min}/{}/{max}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: {:#x}\nMode: {}\nNode count: {}\n",
        java_double(avg),
        d.stats.received.load(Ordering::Relaxed),
        d.stats.sent.load(Ordering::Relaxed),
        d.stats.connection_count(),
        d.stats.outstanding(),
        zxid,
        mode(d),
        nodes,
    );
    s
}

/// `mntr` as key/value pairs, in ZooKeeper's order where ZooKeeper has the key.
pub fn monitor(d: &View) -> Vec<(String, String)> {
    let (min, avg, max) = d.stats.latency.get();
    let (znodes, ephemerals, data_size, sessions) = {
        let tree = d.tree.read();
        (tree.node_count() + 1, tree.ephemeral_count(), tree.data_size(), tree.sessions().count())
    };
    let m = d.raft.status();
    let mut v: Vec<(String, String)> = vec![
        ("zk_version".into(), full_version()),
        ("zk_server_state".into(), mode(d).into()),
        ("zk_avg_latency".into(), java_double(avg)),
        ("zk_max_latency".into(), max.to_string()),
        ("zk_min_latency".into(), min.to_string()),
        ("zk_packets_received".into(), d.stats.received.load(Ordering::Relaxed).to_string()),
        ("zk_packets_sent".into(), d.stats.sent.load(Ordering::Relaxed).to_string()),
        ("zk_num_alive_connections".into(), d.stats.connection_count().to_string()),
        ("zk_outstanding_requests".into(), d.stats.outstanding().to_string()),
        ("zk_znode_count".into(), znodes.to_string()),
        ("zk_watch_count".into(), d.watches.count().to_string()),
        ("zk_ephemerals_count".into(), ephemerals.to_string()),
        ("zk_approximate_data_size".into(), data_size.to_string()),
        ("zk_open_file_descriptor_count".into(), open_fds().to_string()),
        ("zk_max_file_descriptor_count".into(), max_fds().to_string()),
        ("zk_last_client_response_size".into(), d.stats.response_size.last().to_string()),
        ("zk_max_client_response_size".into(), d.stats.response_size.max().to_string()),
        ("zk_min_client_response_size".into(), d.stats.response_size.min().to_string()),
        ("zk_global_sessions".into(), sessions.to_string()),
        ("zk_local_sessions".into(), d.sessions.local_sessions().len().to_string()),
        ("zk_connection_drop_probability".into(), "0.0".into()),
        ("zk_outstanding_tls_handshake".into(), "0".into()),
        ("zk_auth_failed_count".into(), d.stats.auth_failed.load(Ordering::Relaxed).to_string()),
        ("zk_non_mtls_remote_conn_count".into(), "0".into()),
        ("zk_non_mtls_local_conn_count".into(), "0".into()),
        ("zk_uptime".into(), d.stats.started.elapsed().as_millis().to_string()),
        ("zk_quorum_size".into(), m.voters.len().to_string()),
        ("zk_raft_term".into(), m.term.to_string()),
        ("zk_raft_leader_id".into(), m.leader.map_or(-1, |l| l as i64).to_string()),
        ("zk_raft_last_log_index".into(), m.last_log_index.to_string()),
        ("zk_raft_applied_index".into(), m.applied_index.to_string()),
        // ZooKeeper's ServerMetrics counter; `zk_digest_diverged` is Warden's: 1 while this
        // member's tree differs from its leader's and is being re-synced.
        ("zk_digest_mismatches_count".into(), d.raft.digest_mismatches().to_string()),
        ("zk_digest_diverged".into(), u8::from(d.raft.diverged()).to_string()),
    ];
    v.retain(|(_, val)| !val.is_empty());
    v
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

fn max_fds() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Where this server's snapshots and log live (`<dataDir>/version-2`, `<dataLogDir>/version-2`),
/// which `conf` reports as dataDir/dataLogDir and `dirs` measures, as ZooKeeper does.
pub fn storage(d: &View) -> &crate::raft::layout::DataLayout {
    &d.layout
}

/// `conf` as key/value pairs.
pub fn configuration(d: &View) -> Vec<(String, String)> {
    let c = &d.config;
    let dirs = storage(d);
    vec![
        ("clientPort".into(), c.client_port.to_string()),
        ("secureClientPort".into(), c.tls.secure_client_port.map_or(-1, i32::from).to_string()),
        ("dataDir".into(), dirs.snap_dir.display().to_string()),
        ("dataDirSize".into(), dir_size(&dirs.snap_dir).to_string()),
        ("dataLogDir".into(), dirs.log_dir.display().to_string()),
        ("dataLogSize".into(), dir_size(&dirs.log_dir).to_string()),
        ("tickTime".into(), c.tick_time_ms.to_string()),
        ("maxClientCnxns".into(), c.max_client_cnxns.to_string()),
        ("minSessionTimeout".into(), c.min_session_timeout_ms.to_string()),
        ("maxSessionTimeout".into(), c.max_session_timeout_ms.to_string()),
        ("clientPortListenBacklog".into(), c.client_port_listen_backlog.to_string()),
        ("serverId".into(), c.server_id.to_string()),
    ]
}

/// `envi` as key/value pairs.
/// `system_properties`: what a JVM would report of this process (Warden has no JVM).
pub fn system_properties() -> Vec<(String, String)> {
    let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
    vec![
        ("file.separator".into(), "/".into()),
        ("line.separator".into(), "\n".into()),
        ("os.arch".into(), std::env::consts::ARCH.into()),
        ("os.name".into(), "Linux".into()),
        ("path.separator".into(), ":".into()),
        ("user.dir".into(), cwd),
        ("user.home".into(), std::env::var("HOME").unwrap_or_default()),
        ("user.name".into(), std::env::var("USER").unwrap_or_default()),
    ]
}

pub fn environment() -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_owned()).unwrap_or_default();
    let host = Some(read("/proc/sys/kernel/hostname")).filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".into());
    let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
    // The names a JVM reports, so tools that parse envi see familiar values.
    let os_name = match std::env::consts::OS {
        "linux" => "Linux".to_owned(),
        "macos" => "Mac OS X".to_owned(),
        other => other.to_owned(),
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64".to_owned(),
        other => other.to_owned(),
    };
    let uid = read("/proc/self/status")
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default();
    let passwd = read("/etc/passwd");
    let (user, home) = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[2] == uid)
        .map(|f| (f[0].to_owned(), f[5].to_owned()))
        .unwrap_or_else(|| (std::env::var("USER").unwrap_or_default(), std::env::var("HOME").unwrap_or_default()));
    vec![
        ("zookeeper.version".into(), full_version()),
        ("host.name".into(), host),
        ("os.name".into(), os_name),
        ("os.arch".into(), arch),
        ("os.version".into(), read("/proc/sys/kernel/osrelease")),
        ("user.name".into(), user),
        ("user.home".into(), home),
        ("user.dir".into(), cwd),
        ("process.id".into(), std::process::id().to_string()),
    ]
}

fn kv_lines(pairs: &[(String, String)], sep: char) -> String {
    pairs.iter().map(|(k, v)| format!("{k}{sep}{v}\n")).collect()
}

use crate::clock::now_ms;

/// `ExpiryQueue.roundToNextInterval`: expiry times are bucketed up to the next multiple of the
/// queue's interval.
fn round_to_next_interval(time: i64, interval: i64) -> i64 {
    (time.div_euclid(interval.max(1)) + 1) * interval.max(1)
}

/// Every session by the wall-clock time (ms) it expires unless heard from again, bucketed by
/// tick as ZooKeeper's session `ExpiryQueue` is. Sessions this server has not heard from yet
/// get a whole timeout from now, as [`crate::session::SessionTracker`] gives them.
pub fn session_expiry(d: &View, tree: &DataTree, now_ms: i64) -> BTreeMap<i64, Vec<i64>> {
    let heard = d.sessions.last_heard_ms();
    let tick = i64::from(d.config.tick_time_ms);
    let mut buckets: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (id, s) in tree.sessions() {
        let ago = heard.get(id).map_or(0, |ms| *ms as i64);
        buckets.entry(round_to_next_interval(now_ms - ago + i64::from(s.timeout_ms), tick)).or_default().push(*id);
    }
    buckets
}

/// `ExpiryQueue.dump` after its `"<prefix> "`: `Sets (<buckets>)/(<elements>):`, then each
/// bucket as `<n> expire at <date>:` and one tab-indented line per element.
fn dump_expiry_queue(s: &mut String, buckets: &BTreeMap<i64, Vec<String>>) {
    let _ = writeln!(s, "Sets ({})/({}):", buckets.len(), buckets.values().map(Vec::len).sum::<usize>());
    for (at, elems) in buckets {
        let _ = writeln!(s, "{} expire at {}:", elems.len(), java_date(*at));
        for e in elems {
            let _ = writeln!(s, "\t{e}");
        }
    }
}

/// `dump` (`DumpCommand`): the session tracker, each session's ephemerals, the connections.
///
/// The session part is the tracker's own dump, which differs by role in ZooKeeper: standalone
/// and the leader (`SessionTrackerImpl.dumpSessions`) list sessions by expiry bucket; a
/// follower or observer (`LearnerSessionTracker.dumpSessions`) lists `Global Sessions(N):`
/// with each session's timeout, as it does not expire sessions itself.
pub fn dump(d: &View) -> String {
    let now = now_ms();
    let role = mode(d);
    let mut s = String::from("SessionTracker dump:\n");
    {
        let tree = d.tree.read();
        if matches!(role, "follower" | "observer") {
            let _ = writeln!(s, "Global Sessions({}):", tree.sessions().count());
            for (id, e) in tree.sessions() {
                let _ = writeln!(s, "{:#x}\t{}ms", id, e.timeout_ms);
            }
        } else {
            let buckets = session_expiry(d, &tree, now)
                .into_iter()
                .map(|(at, ids)| (at, ids.into_iter().map(|id| format!("{id:#x}")).collect()))
                .collect();
            s.push_str("Session ");
            dump_expiry_queue(&mut s, &buckets);
        }
        // DataTree.dumpEphemerals.
        s.push_str("ephemeral nodes dump:\n");
        let with: Vec<_> = tree.sessions().filter(|(_, e)| !e.ephemerals.is_empty()).collect();
        let _ = writeln!(s, "Sessions with Ephemerals ({}):", with.len());
        for (id, e) in with {
            let _ = writeln!(s, "{id:#x}:");
            for p in e.ephemerals.iter() {
                let _ = writeln!(s, "\t{p}");
            }
        }
    }
    // NIOServerCnxnFactory.dumpConnections: each connection expires a timeout after it was
    // last heard from (its session's timeout, or the sessionless one).
    s.push_str("Connections dump:\n");
    let mut buckets: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for c in d.stats.connections() {
        let sid = c.session_id.load(Ordering::Relaxed);
        let timeout = match c.timeout_ms.load(Ordering::Relaxed) {
            t if sid != 0 && t > 0 => t,
            _ => SESSIONLESS_CNXN_TIMEOUT_MS,
        };
        let last = c.established_ms.max(c.last_response_ms.load(Ordering::Relaxed));
        let at = round_to_next_interval(last + timeout, SESSIONLESS_CNXN_TIMEOUT_MS);
        buckets.entry(at).or_default().push(format!("ip: /{} sessionId: {sid:#x}", c.peer));
    }
    s.push_str("Connections ");
    dump_expiry_queue(&mut s, &buckets);
    s
}

/// A wall-clock time as Java's `Date.toString` prints it, in UTC:
/// `Thu Jan 01 00:00:00 UTC 1970` (`Time.elapsedTimeToDate` in ZooKeeper's `dump`).
pub fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day number.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {} {day:02} {:02}:{:02}:{:02} UTC {year}",
        DAYS[(days + 4).rem_euclid(7) as usize], // 1970-01-01 was a Thursday
        MONTHS[(month - 1) as usize],
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
    )
}

/// Runs a four-letter word and returns ZooKeeper's text for it. `arg` is `stmk`'s argument.
pub fn run(d: &View, word: &[u8; 4], arg: Option<[u8; 8]>) -> String {
    if word == b"\xff\xf4\xff\xfd" {
        return String::new();
    }
    let w = String::from_utf8_lossy(word).to_string();
    if !WORDS.iter().any(|(x, _)| *x == w) {
        return String::new();
    }
    if !d.config.four_letter_allowed(&w) {
        return format!("{w} is not executed because it is not in the whitelist.\n");
    }
    if !*d.serving.borrow() && !matches!(word, b"ruok" | b"conf" | b"envi" | b"isro" | b"dirs" | b"gtmk" | b"stmk") {
        // FourLetterCommands: a server that is not serving says so instead of its stats.
        return "This ZooKeeper instance is not currently serving requests\n".into();
    }
    match word {
        b"ruok" => "imok".into(),
        // ZooKeeper's isro: "ro" while a member without a quorum serves read-only sessions.
        b"isro" if read_only(d) => "ro".into(),
        b"isro" => "rw".into(),
        b"srvr" => server_stats(d, false),
        b"stat" => server_stats(d, true),
        b"mntr" => kv_lines(&monitor(d), '\t'),
        b"conf" => kv_lines(&configuration(d), '='),
        b"envi" => format!("Environment:\n{}", kv_lines(&environment(), '=')),
        b"cons" => {
            let mut s: String = d.stats.connections().iter().map(|c| c.cons_line() + "\n").collect();
            s.push('\n');
            s
        }
        b"crst" => {
            for c in d.stats.connections() {
                c.reset();
            }
            "Connection stats reset.\n".into()
        }
        b"srst" => {
            d.stats.reset();
            "Server stats reset.\n".into()
        }
        b"wchs" => {
            let by_session = d.watches.by_session();
            let paths = d.watches.by_path().len();
            format!(
                "{} connections watching {} paths\nTotal watches:{}\n",
                by_session.len(),
                paths,
                by_session.values().map(|p| p.len()).sum::<usize>()
            )
        }
        b"wchc" => {
            let mut s = String::new();
            for (sid, paths) in d.watches.by_session() {
                let _ = writeln!(s, "{sid:#x}");
                for p in paths {
                    let _ = writeln!(s, "\t{p}");
                }
            }
            s.push('\n');
            s
        }
        b"wchp" => {
            let mut s = String::new();
            for (path, sids) in d.watches.by_path() {
                let _ = writeln!(s, "{path}");
                for sid in sids {
                    let _ = writeln!(s, "\t{sid:#x}");
                }
            }
            s.push('\n');
            s
        }
        b"dump" => dump(d),
        b"dirs" => {
            let dirs = storage(d);
            format!("datadir_size: {}\nlogdir_size: {}\n", dir_size(&dirs.snap_dir), dir_size(&dirs.log_dir))
        }
        b"gtmk" => d.stats.trace_mask.load(Ordering::Relaxed).to_string(),
        b"stmk" => {
            // NIOServerCnxn.checkFourLetterWord reads the 8 bytes after `stmk` as a big-endian
            // long and sets it; SetTraceMaskCommand answers it, without a newline.
            if let Some(arg) = arg {
                d.stats.trace_mask.store(i64::from_be_bytes(arg), Ordering::Relaxed);
            }
            d.stats.trace_mask.load(Ordering::Relaxed).to_string()
        }
        // DigestCommand: one `<zxid hex>: <digest>` line per history entry, oldest first.
        b"hash" => d.tree.read().digest_log().map(|h| format!("{:x}: {}\n", h.zxid, h.digest)).collect(),
        _ => format!("{w} is not supported by this server.\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dates print as Java's `Date.toString` in UTC, across the epoch, a leap day and today's era.
    #[test]
    fn java_date_matches_java() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
        assert_eq!(java_date(1_700_000_000_123), "Tue Nov 14 22:13:20 UTC 2023");
        assert_eq!(java_date(-1000), "Wed Dec 31 23:59:59 UTC 1969");
    }

    /// Expiry buckets round up to the next interval, an exact multiple included (ExpiryQueue).
    #[test]
    fn expiry_rounds_to_next_interval() {
        assert_eq!(round_to_next_interval(3999, 2000), 4000);
        assert_eq!(round_to_next_interval(4000, 2000), 6000);
    }
}
