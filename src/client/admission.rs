//! Overload protection on the client port, ZooKeeper's throttles by their own keys: the count
//! of requests in process server-wide and the rule that stops a busy connection reading past
//! `globalOutstandingLimit`; the request throttle (`request_throttle_*`) that holds a request
//! read until fewer are in process; the large-request budget (`largeRequest*`); and the token
//! bucket with BLUE random early drop that admits new sessions at a bounded rate
//! (`connection_throttle_*`). What each connection does with the answers is in
//! [`super::connection`].
//!
//! A connection that stops reading keeps its requests in process, so it is woken by its own
//! replies (as ZooKeeper's `NIOServerCnxn` re-enables reading when it sends a response): the
//! rule needs no notification between connections. Pings never wait here: a connection with
//! nothing in process always reads, and a ping is answered where it is read.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use crate::config::ThrottleConfig;

/// Metric names this module records.
pub mod names {
    /// Requests that waited in the request throttle (ZooKeeper's name).
    pub const REQUEST_THROTTLE_WAIT_COUNT: &str = "request_throttle_wait_count";
    /// Large requests refused for the large-request budget (ZooKeeper's name).
    pub const LARGE_REQUESTS_REJECTED: &str = "large_requests_rejected";
    /// Tokens the connection bucket lacks (ZooKeeper's name; a summary there, a gauge here).
    pub const CONNECTION_TOKEN_DEFICIT: &str = "connection_token_deficit";
    /// Times a connection stopped reading for `globalOutstandingLimit`.
    pub const THROTTLED_READS: &str = "warden_throttled_reads";
}

/// What kind of session a handshake asks for: its cost under weighted connection throttling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    Global,
    Local,
    Renew,
}

/// A large request that the large-request budget has no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

/// The server-wide overload state every connection of every client listener shares.
pub struct Admission {
    cfg: ThrottleConfig,
    in_process: AtomicUsize,
    /// Of those, requests the request throttle holds (not yet processed).
    held: AtomicUsize,
    large_bytes: AtomicU64,
    bucket: Mutex<Bucket>,
}

/// ZooKeeper's `BlueThrottle`: a token bucket, and a drop chance that rises while the bucket
/// stays empty and falls while it is mostly full.
struct Bucket {
    tokens: u64,
    last_fill: Instant,
    last_freeze: Instant,
    drop: f64,
}

impl Admission {
    pub fn new(cfg: ThrottleConfig) -> Admission {
        let now = Instant::now();
        Admission {
            bucket: Mutex::new(Bucket { tokens: cfg.conn_tokens, last_fill: now, last_freeze: now, drop: 0.0 }),
            cfg,
            in_process: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            large_bytes: AtomicU64::new(0),
        }
    }

    /// Requests read and not yet answered, server-wide.
    pub fn in_process(&self) -> usize {
        self.in_process.load(Ordering::Relaxed)
    }

    /// A request was read; `large` is its size when it counts against the large-request
    /// budget (see [`Admission::large`]).
    pub fn started(&self, large: u64) {
        self.in_process.fetch_add(1, Ordering::Relaxed);
        if large > 0 {
            self.large_bytes.fetch_add(large, Ordering::Relaxed);
        }
    }

    /// A request read was answered (or dropped with its connection).
    pub fn finished(&self, large: u64) {
        self.in_process.fetch_sub(1, Ordering::Relaxed);
        if large > 0 {
            self.large_bytes.fetch_sub(large, Ordering::Relaxed);
        }
    }

    /// A closed connection's `requests` still in process, `large` bytes of them large.
    pub fn abandon(&self, requests: usize, large: u64) {
        self.in_process.fetch_sub(requests, Ordering::Relaxed);
        self.large_bytes.fetch_sub(large, Ordering::Relaxed);
    }

    /// Whether a connection with `mine` requests in process must stop reading
    /// (ZooKeeper's `shouldThrottle`).
    pub fn should_throttle(&self, mine: usize) -> bool {
        mine > 0 && self.in_process() > self.cfg.global_outstanding_limit
    }

    /// Whether a request read (and counted as started) must wait before it is processed, and
    /// for how long before looking again: the request throttle, counting the requests being
    /// processed, not those read and waiting (`held`: whether this one waits already).
    pub fn must_wait(&self, held: bool) -> Option<Duration> {
        let max = self.cfg.max_requests;
        if max == 0 {
            return None;
        }
        let waiting = self.held.load(Ordering::Relaxed);
        // Without this one, which was counted when read.
        let processing = self.in_process().saturating_sub(waiting + usize::from(!held));
        (processing >= max).then(|| Duration::from_millis(self.cfg.stall_time_ms))
    }

    /// A request read starts or stops waiting in the request throttle.
    pub fn hold(&self, on: bool) {
        if on {
            self.held.fetch_add(1, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The size a frame of `len` bytes counts against the large-request budget: 0 when it is
    /// not large. `Err` when it would take the budget past its maximum: ZooKeeper closes the
    /// connection then.
    pub fn large(&self, len: usize) -> Result<u64, OverBudget> {
        let threshold = self.cfg.large_request_threshold;
        let len = len as u64;
        if threshold < 0 || len <= threshold as u64 {
            return Ok(0);
        }
        if self.large_bytes.load(Ordering::Relaxed) + len <= self.cfg.large_request_max_bytes {
            Ok(len)
        } else {
            metrics::counter!(names::LARGE_REQUESTS_REJECTED).increment(1);
            Err(OverBudget)
        }
    }

    /// Whether a new session of `kind` may be served now (ZooKeeper's `checkLimit`); takes
    /// its tokens if so.
    pub fn admit(&self, kind: SessionKind) -> bool {
        let c = &self.cfg;
        if c.conn_tokens == 0 {
            return true;
        }
        let need = if c.conn_weight_enabled {
            match kind {
                SessionKind::Global => c.conn_weight_global,
                SessionKind::Local => c.conn_weight_local,
                SessionKind::Renew => c.conn_weight_renew,
            }
        } else {
            1
        };
        let now = Instant::now();
        let mut b = self.bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = now.duration_since(b.last_fill).as_millis() as u64;
        if since > c.conn_fill_time_ms {
            let refill = since.saturating_mul(c.conn_fill_count) / c.conn_fill_time_ms;
            b.tokens = b.tokens.saturating_add(refill).min(c.conn_tokens);
            b.last_fill = now;
        }
        if c.conn_freeze_time_ms >= 0 && !b.blue(now, c) {
            return false;
        }
        let ok = b.tokens >= need;
        if ok {
            b.tokens -= need;
        }
        metrics::gauge!(names::CONNECTION_TOKEN_DEFICIT).set((c.conn_tokens - b.tokens) as f64);
        ok
    }
}

impl Bucket {
    /// ZooKeeper's `checkBlue`: once per freeze time, raise the drop chance if the bucket is
    /// empty, lower it if no more than the decrease ratio of it is spent; then drop at random.
    fn blue(&mut self, now: Instant, c: &ThrottleConfig) -> bool {
        let spent = c.conn_tokens - self.tokens;
        let threshold = (c.conn_tokens as f64 * c.conn_decrease_ratio).round() as u64;
        if now.duration_since(self.last_freeze).as_millis() as u64 > c.conn_freeze_time_ms as u64 {
            if spent == c.conn_tokens && self.drop < 1.0 {
                self.drop = (self.drop + c.conn_drop_increase).min(1.0);
            } else if spent <= threshold && self.drop > 0.0 {
                self.drop = (self.drop - c.conn_drop_decrease).max(0.0);
            }
            self.last_freeze = now;
        }
        rand::random::<f64>() >= self.drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(f: impl FnOnce(&mut ThrottleConfig)) -> ThrottleConfig {
        let mut c = ThrottleConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn a_busy_connection_stops_reading_past_the_global_limit() {
        let a = Admission::new(cfg(|c| c.global_outstanding_limit = 2));
        for _ in 0..3 {
            a.started(0);
        }
        assert!(a.should_throttle(1), "3 in process > 2");
        assert!(!a.should_throttle(0), "a connection with nothing in process still reads (its pings)");
        a.finished(0);
        assert!(!a.should_throttle(1), "2 in process is within the limit");
    }

    #[test]
    fn the_request_throttle_holds_requests_at_its_maximum() {
        let a = Admission::new(cfg(|c| {
            c.max_requests = 2;
            c.stall_time_ms = 7;
        }));
        // Two requests processed, then a third read: it waits, and goes on once one is done.
        a.started(0);
        a.started(0);
        a.started(0);
        assert_eq!(a.must_wait(false), Some(Duration::from_millis(7)));
        a.hold(true);
        assert_eq!(a.must_wait(true), Some(Duration::from_millis(7)), "held, it still waits");
        a.finished(0);
        assert_eq!(a.must_wait(true), None);
        a.hold(false);
        // Waiting requests do not count as processed: two held, one processed.
        let b = Admission::new(cfg(|c| c.max_requests = 2));
        for _ in 0..3 {
            b.started(0);
        }
        b.hold(true);
        b.hold(true);
        assert_eq!(b.must_wait(true), None);
        assert_eq!(Admission::new(ThrottleConfig::default()).must_wait(false), None, "off by default");
    }

    #[test]
    fn large_requests_share_a_budget() {
        let a = Admission::new(cfg(|c| {
            c.large_request_threshold = 100;
            c.large_request_max_bytes = 250;
        }));
        assert_eq!(a.large(100), Ok(0), "at the threshold is not large");
        assert_eq!(a.large(200), Ok(200));
        a.started(200);
        assert_eq!(a.large(120), Err(OverBudget), "200 + 120 > 250");
        assert_eq!(a.large(50), Ok(0), "small requests never count");
        a.finished(200);
        assert_eq!(a.large(250), Ok(250));
    }

    #[test]
    fn the_token_bucket_admits_its_tokens_then_refills() {
        let a = Admission::new(cfg(|c| {
            c.conn_tokens = 3;
            c.conn_fill_time_ms = 60_000;
            c.conn_fill_count = 1;
        }));
        assert!((0..3).all(|_| a.admit(SessionKind::Global)));
        assert!(!a.admit(SessionKind::Global), "the bucket is empty");
        {
            let mut b = a.bucket.lock().expect("lock");
            b.last_fill -= Duration::from_secs(120);
        }
        assert!(a.admit(SessionKind::Renew) && a.admit(SessionKind::Renew), "two minutes refill two tokens");
        assert!(!a.admit(SessionKind::Renew));
    }

    #[test]
    fn weights_make_global_sessions_cost_more() {
        // conn_tokens as read from zoo.cfg: 1 global session's worth times its weight.
        let a = Admission::new(cfg(|c| {
            c.conn_weight_enabled = true;
            c.conn_tokens = 3;
            c.conn_fill_time_ms = 60_000;
        }));
        assert!(a.admit(SessionKind::Local) && a.admit(SessionKind::Renew));
        assert!(!a.admit(SessionKind::Global), "3 - 1 - 2 = 0 tokens left, a global session needs 3");
    }

    #[test]
    fn blue_drops_everything_once_the_bucket_stays_empty() {
        let a = Admission::new(cfg(|c| {
            c.conn_tokens = 1;
            c.conn_fill_time_ms = 600_000;
            c.conn_freeze_time_ms = 0;
            c.conn_drop_increase = 1.0;
        }));
        assert!(a.admit(SessionKind::Global));
        std::thread::sleep(Duration::from_millis(2));
        // Empty past the freeze time: the drop chance goes to 1.
        assert!(!a.admit(SessionKind::Global));
        assert_eq!(a.bucket.lock().expect("lock").drop, 1.0);
    }
}
