//! Connection and server statistics: what `cons`, `stat`, `srvr`, `mntr` and the metrics
//! exporter report (ZooKeeper's `ServerStats` and `ServerCnxn` counters), and this module's
//! Prometheus metric names.
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
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
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
}

impl ConnStats {
    /// Records a reply sent for an op.
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

    /// ZooKeeper's `cons` line for this connection.
    pub fn cons_line(&self) -> String {
        let (min, avg, max) = self.latency.get();
        let op = *self.last_op.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        format!(
            " /{}[1](queued={},recved={},sent={},sid={:#x},lop={},est={},to={},lcxid={:#x},lzxid={:#x},lresp={},llat={},minlat={},avglat={:.0},maxlat={})",
            self.peer,
            self.outstanding.load(Ordering::Relaxed).max(0),
            self.received.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
            self.session_id.load(Ordering::Relaxed),
            op,
            self.established_ms,
            self.timeout_ms.load(Ordering::Relaxed),
            self.last_cxid.load(Ordering::Relaxed),
            self.last_zxid.load(Ordering::Relaxed),
            self.last_response_ms.load(Ordering::Relaxed),
            self.last_latency_ms.load(Ordering::Relaxed),
            min,
            avg,
            max,
        )
    }

    /// `crst` for one connection.
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.latency.reset();
    }
}

/// Server-wide counters and the registry of live connections.
pub struct ServerStats {
    pub started: Instant,
    pub received: AtomicU64,
    pub sent: AtomicU64,
    pub latency: Latency,
    conns: Mutex<HashMap<u64, Arc<ConnStats>>>,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            started: Instant::now(),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            latency: Latency::default(),
            conns: Mutex::new(HashMap::new()),
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
        conn.received.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::PACKETS_RECEIVED).increment(1);
    }

    /// Records a reply or notification sent, with the request's latency for replies.
    pub fn packet_sent(&self, op: Option<(&'static str, std::time::Duration)>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::PACKETS_SENT).increment(1);
        if let Some((op, took)) = op {
            self.latency.record(took.as_millis() as u64);
            metrics::histogram!(names::REQUEST_LATENCY, "op" => op).record(took.as_secs_f64());
        }
    }

    /// `srst`: zeroes the server counters.
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.latency.reset();
    }
}
