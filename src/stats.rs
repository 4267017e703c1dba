//! Server statistics: what `cons`, `stat`, `srvr`, `mntr` and the metrics exporter report
//! (ZooKeeper's `ServerStats` and `ServerCnxn` counters), and this module's Prometheus metric
//! names. Server-level: the client port updates them, admin reads them, and nothing here
//! knows either.
//!
//! Counters are atomics updated by each connection task; the registry of live connections is
//! a std `Mutex<HashMap>` touched only when a connection opens or closes and when an operator
//! asks for `cons`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// Prometheus names of this module's metrics (ZooKeeper's names where it has one).
pub mod names {
    pub const PACKETS_RECEIVED: &str = "packets_received";
    pub const PACKETS_SENT: &str = "packets_sent";
    pub const REQUEST_LATENCY: &str = "warden_request_latency_seconds";
    pub const CONNECTIONS_REJECTED: &str = "connection_rejected";
    pub const CONNECTION_REQUESTS: &str = "connection_request_count";
    /// ZooKeeper's `QuotaMetricsUtils` names, each labelled `key=<top-level namespace>`.
    pub const QUOTA_EXCEEDED: &str = "quota_exceeded_error_per_namespace";
    pub const QUOTA_COUNT_LIMIT: &str = "quota_count_limit_per_namespace";
    pub const QUOTA_BYTES_LIMIT: &str = "quota_bytes_limit_per_namespace";
    pub const QUOTA_COUNT_USAGE: &str = "quota_count_usage_per_namespace";
    pub const QUOTA_BYTES_USAGE: &str = "quota_bytes_usage_per_namespace";
}

use crate::clock::now_ms;

/// ZooKeeper's default trace mask (`ZooTrace`), which `gtmk` reports until `stmk` sets another.
pub const DEFAULT_TRACE_MASK: i64 = 306;

/// ZooKeeper's short operation names as `cons` prints them (`FinalRequestProcessor` lastOp).
pub fn short_op(op: jute::OpCode) -> &'static str {
    use jute::OpCode as O;
    match op {
        O::Create | O::Create2 | O::CreateContainer | O::CreateTtl => "CREA",
        O::Delete | O::DeleteContainer => "DELE",
        O::Exists => "EXIS",
        O::GetData => "GETD",
        O::SetData => "SETD",
        O::GetAcl => "GETA",
        O::SetAcl => "SETA",
        O::GetChildren | O::GetChildren2 => "GETC",
        O::Sync => "SYNC",
        O::Ping => "PING",
        O::Check => "CHEC",
        O::Multi => "MULT",
        O::MultiRead => "MLTR",
        O::Reconfig => "RECO",
        O::CheckWatches => "CHKW",
        O::RemoveWatches => "REMW",
        O::Auth => "AUTH",
        O::SetWatches | O::SetWatches2 => "SETW",
        O::Sasl => "SASL",
        O::GetEphemerals => "GETE",
        O::GetAllChildrenNumber => "GETACN",
        O::AddWatch => "ADDW",
        O::WhoAmI => "HOMI",
        O::CloseSession => "CLOS",
        O::CreateSession => "SESS",
        O::Notification | O::Error => "NA",
    }
}

/// Min/avg/max latency in ms, resettable.
#[derive(Default)]
pub struct Latency {
    count: AtomicU64,
    total_ms: AtomicU64,
    min_ms: AtomicU64,
    max_ms: AtomicU64,
}

impl Latency {
    /// Records one request's latency.
    pub fn record(&self, ms: u64) {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ms.fetch_add(ms, Ordering::Relaxed);
        if n == 0 {
            self.min_ms.store(ms, Ordering::Relaxed);
        } else {
            self.min_ms.fetch_min(ms, Ordering::Relaxed);
        }
        self.max_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// (min, avg, max) in ms.
    pub fn get(&self) -> (u64, f64, u64) {
        let n = self.count.load(Ordering::Relaxed);
        if n == 0 {
            return (0, 0.0, 0);
        }
        let total = self.total_ms.load(Ordering::Relaxed);
        (self.min_ms.load(Ordering::Relaxed), total as f64 / n as f64, self.max_ms.load(Ordering::Relaxed))
    }

    /// Zeroes the counters.
    pub fn reset(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.total_ms.store(0, Ordering::Relaxed);
        self.min_ms.store(0, Ordering::Relaxed);
        self.max_ms.store(0, Ordering::Relaxed);
    }
}

/// One live connection's counters (`cons`).
pub struct ConnStats {
    pub id: u64,
    pub peer: SocketAddr,
    pub established_ms: i64,
    pub session_id: AtomicI64,
    pub timeout_ms: AtomicI64,
    pub received: AtomicU64,
    pub sent: AtomicU64,
    pub outstanding: AtomicI64,
    pub last_op: Mutex<&'static str>,
    pub last_cxid: AtomicI64,
    pub last_zxid: AtomicI64,
    pub last_response_ms: AtomicI64,
    pub last_latency_ms: AtomicU64,
    pub latency: Latency,
    /// The activity window (see [`ServerStats::take_window`]) in which this
    /// connection last sent a packet.
    active_window: AtomicU64,
}

impl ConnStats {
    /// Records a reply sent for an op (`op` is ZooKeeper's short name, see [`short_op`]).
    pub fn replied(&self, op: &'static str, xid: i32, zxid: i64, started: Instant) {
        let ms = started.elapsed().as_millis() as u64;
        self.sent.fetch_add(1, Ordering::Relaxed);
        *self.last_op.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = op;
        self.last_cxid.store(i64::from(xid), Ordering::Relaxed);
        self.last_zxid.store(zxid, Ordering::Relaxed);
        self.last_response_ms.store(now_ms(), Ordering::Relaxed);
        self.last_latency_ms.store(ms, Ordering::Relaxed);
        self.latency.record(ms);
    }

    /// ZooKeeper's `cons` line for this connection (`ServerCnxn.dumpConnectionInfo`): a
    /// connection without a session shows only its queue and packet counts, and `lcxid` is
    /// left out until the session has sent a request.
    pub fn cons_line(&self) -> String {
        let sid = self.session_id.load(Ordering::Relaxed);
        let head = format!(
            " /{}[{}](queued={},recved={},sent={}",
            self.peer,
            u8::from(sid != 0),
            self.outstanding.load(Ordering::Relaxed).max(0),
            self.received.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
        );
        if sid == 0 {
            return head + ")";
        }
        let (min, avg, max) = self.latency.get();
        let op = *self.last_op.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let lcxid = self.last_cxid.load(Ordering::Relaxed);
        let lcxid = if op == "NA" { String::new() } else { format!("lcxid={lcxid:#x},") };
        format!(
            "{head},sid={sid:#x},lop={op},est={},to={},{lcxid}lzxid={:#x},lresp={},llat={},minlat={},avglat={:.0},maxlat={})",
            self.established_ms,
            self.timeout_ms.load(Ordering::Relaxed),
            self.last_zxid.load(Ordering::Relaxed),
            self.last_response_ms.load(Ordering::Relaxed),
            self.last_latency_ms.load(Ordering::Relaxed),
            min,
            avg,
            max,
        )
    }

    /// `crst` for one connection (`ServerCnxn.resetStats`).
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.latency.reset();
        *self.last_op.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = "NA";
        self.last_cxid.store(-1, Ordering::Relaxed);
        self.last_zxid.store(-1, Ordering::Relaxed);
        self.last_response_ms.store(0, Ordering::Relaxed);
        self.last_latency_ms.store(0, Ordering::Relaxed);
    }
}

/// Last/min/max of a size (`zk_*_client_response_size`); -1 until the first sample.
pub struct SizeStats {
    last: AtomicI64,
    min: AtomicI64,
    max: AtomicI64,
}

impl Default for SizeStats {
    fn default() -> Self {
        SizeStats { last: AtomicI64::new(-1), min: AtomicI64::new(-1), max: AtomicI64::new(-1) }
    }
}

impl SizeStats {
    /// Records one size.
    pub fn record(&self, size: i64) {
        self.last.store(size, Ordering::Relaxed);
        let _ = self.min.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| (m < 0 || size < m).then_some(size));
        self.max.fetch_max(size, Ordering::Relaxed);
    }
    /// The last size.
    pub fn last(&self) -> i64 {
        self.last.load(Ordering::Relaxed)
    }
    /// The smallest size.
    pub fn min(&self) -> i64 {
        self.min.load(Ordering::Relaxed)
    }
    /// The largest size.
    pub fn max(&self) -> i64 {
        self.max.load(Ordering::Relaxed)
    }
}

/// Server-wide counters and the registry of live connections.
pub struct ServerStats {
    pub started: Instant,
    pub received: AtomicU64,
    pub sent: AtomicU64,
    pub latency: Latency,
    pub response_size: SizeStats,
    pub auth_failed: AtomicU64,
    /// Packets received and sent since start, never reset (`srst` resets the two above);
    /// exported as Prometheus counters.
    received_total: AtomicU64,
    sent_total: AtomicU64,
    /// The trace mask `gtmk` reports and `stmk` sets (ZooKeeper's `ZooTrace` text trace
    /// level). Reported only; Warden's logging is configured with `RUST_LOG`.
    pub trace_mask: AtomicI64,
    conns: Mutex<HashMap<u64, Arc<ConnStats>>>,
    /// The current activity window, and how many connections have sent a packet in it: how
    /// many clients the server is serving at once (the worker placement follows it, see
    /// `crate::runtime::workers`). Counting costs a connection one shared load per packet and one
    /// shared increment per window, not a walk over every connection.
    window: AtomicU64,
    active_in_window: AtomicU64,
    /// `received_total` at the last [`ServerStats::take_window`].
    received_at_window: AtomicU64,
}

thread_local! {
    /// This thread's handles of the per-opcode latency histograms: a registry lookup (hash of
    /// name and label) per request was a few per cent of the server's CPU under read load.
    static LATENCY: std::cell::RefCell<HashMap<&'static str, metrics::Histogram>> =
        std::cell::RefCell::new(HashMap::new());
}

fn record_latency(op: &'static str, seconds: f64) {
    LATENCY.with(|cache| {
        cache
            .borrow_mut()
            .entry(op)
            .or_insert_with(|| metrics::histogram!(names::REQUEST_LATENCY, "op" => op))
            .record(seconds);
    });
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            started: Instant::now(),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            latency: Latency::default(),
            response_size: SizeStats::default(),
            auth_failed: AtomicU64::new(0),
            received_total: AtomicU64::new(0),
            sent_total: AtomicU64::new(0),
            trace_mask: AtomicI64::new(DEFAULT_TRACE_MASK),
            conns: Mutex::new(HashMap::new()),
            window: AtomicU64::new(0),
            active_in_window: AtomicU64::new(0),
            received_at_window: AtomicU64::new(0),
        }
    }
}

impl ServerStats {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnStats>>> {
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a new connection.
    pub fn open(&self, id: u64, peer: SocketAddr) -> Arc<ConnStats> {
        let c = Arc::new(ConnStats {
            id,
            peer,
            established_ms: now_ms(),
            session_id: AtomicI64::new(0),
            timeout_ms: AtomicI64::new(0),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            outstanding: AtomicI64::new(0),
            last_op: Mutex::new("NA"),
            last_cxid: AtomicI64::new(0),
            last_zxid: AtomicI64::new(0),
            last_response_ms: AtomicI64::new(0),
            last_latency_ms: AtomicU64::new(0),
            latency: Latency::default(),
            active_window: AtomicU64::new(u64::MAX),
        });
        self.conns().insert(id, c.clone());
        c
    }

    /// Forgets a closed connection.
    pub fn close(&self, id: u64) {
        self.conns().remove(&id);
    }

    /// Live connections.
    pub fn connections(&self) -> Vec<Arc<ConnStats>> {
        let mut v: Vec<_> = self.conns().values().cloned().collect();
        v.sort_by_key(|c| c.id);
        v
    }

    /// Number of live connections.
    pub fn connection_count(&self) -> usize {
        self.conns().len()
    }

    /// Requests queued or in flight across all connections.
    pub fn outstanding(&self) -> i64 {
        self.conns().values().map(|c| c.outstanding.load(Ordering::Relaxed).max(0)).sum()
    }

    /// Records a packet received.
    pub fn packet_received(&self, conn: &ConnStats) {
        self.received.fetch_add(1, Ordering::Relaxed);
        self.received_total.fetch_add(1, Ordering::Relaxed);
        conn.received.fetch_add(1, Ordering::Relaxed);
        let window = self.window.load(Ordering::Relaxed);
        if conn.active_window.load(Ordering::Relaxed) != window
            && conn.active_window.swap(window, Ordering::Relaxed) != window
        {
            self.active_in_window.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes the current activity window: the number of connections that sent a packet
    /// since the previous call, and how many packets came in since then.
    pub fn take_window(&self) -> crate::runtime::workers::Window {
        self.window.fetch_add(1, Ordering::Relaxed);
        let active = self.active_in_window.swap(0, Ordering::Relaxed);
        let received = self.received_total.load(Ordering::Relaxed);
        let before = self.received_at_window.swap(received, Ordering::Relaxed);
        crate::runtime::workers::Window {
            active_connections: active,
            requests: received.saturating_sub(before),
            txns_applied: 0,
        }
    }

    /// Records a reply or notification sent, with the request's latency for replies.
    pub fn packet_sent(&self, op: Option<(&'static str, std::time::Duration)>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_total.fetch_add(1, Ordering::Relaxed);
        if let Some((op, took)) = op {
            self.latency.record(took.as_millis() as u64);
            record_latency(op, took.as_secs_f64());
        }
    }

    /// Sets the Prometheus packet counters from the totals (at scrape time: counting each
    /// packet in the registry cost a hash lookup per request).
    pub fn export_packet_counters(&self) {
        metrics::counter!(names::PACKETS_RECEIVED).absolute(self.received_total.load(Ordering::Relaxed));
        metrics::counter!(names::PACKETS_SENT).absolute(self.sent_total.load(Ordering::Relaxed));
    }

    /// `srst`: zeroes the server counters.
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.latency.reset();
    }
}
