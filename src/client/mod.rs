//! The client port: the accept loop with per-address connection limits, and one task per
//! connection running the handshake ([`handshake`]), the request loop ([`connection`]) and one
//! ordered outbound stream. Counterpart of ZooKeeper's `NIOServerCnxnFactory`/`NIOServerCnxn`.
//!
//! Ordering rules kept here:
//! - replies leave in request order (a `FuturesOrdered` of per-request jobs);
//! - a read waits for the same session's earlier writes to be applied, and a later write that
//!   may change what it looks at waits for it to have read (`crate::dispatch::order`);
//! - before a reply is written, every queued watch event with a zxid at or below the reply's
//!   is written, so a client sees a watch event before any reply that reflects its change;
//! - a write is answered once applied here, or, while the session holds no watch (it asked
//!   for none on this connection and did not resume from another), once committed: with no
//!   watch there is no event to come first, and the rule above keeps its reads behind it.
//!   On a follower the leader's word comes ~55 µs before the local apply (docs/perf/pass-22.md).
//!   A reply is never given a zxid below that of a write the session was answered for.
//!
//! This module sees only the [`Dispatcher`], the server statistics it updates, and the
//! [`FourLetterWords`] it answers on a connection's first frame; never the tree or Raft.

pub mod admission;
mod connection;
mod handshake;
mod request;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::dispatch::Dispatcher;
use crate::stats;
use crate::stats::ServerStats;

/// What answers a four-letter word sent as a connection's first frame (the admin module).
pub trait FourLetterWords: Send + Sync + 'static {
    /// ZooKeeper's text for `word` (and `stmk`'s 8-byte argument); the connection closes
    /// after it.
    fn answer(&self, word: &[u8; 4], arg: Option<[u8; 8]>) -> String;
}

/// What every connection task shares.
#[derive(Clone)]
pub struct Port {
    pub dispatcher: Dispatcher,
    pub stats: Arc<ServerStats>,
    pub words: Arc<dyn FourLetterWords>,
    /// Overload protection, shared by every client listener.
    pub admission: Arc<admission::Admission>,
}

/// How long shutdown waits for connections to finish their in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a fresh connection may take to send its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per client address (`maxClientCnxns`).
#[derive(Default)]
struct PerAddress {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

struct Slot<'a> {
    owner: &'a PerAddress,
    addr: IpAddr,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut m = self.owner.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = m.get_mut(&self.addr) {
            *c -= 1;
            if *c == 0 {
                m.remove(&self.addr);
            }
        }
    }
}

impl PerAddress {
    fn take(&self, addr: IpAddr, max: usize) -> Option<Slot<'_>> {
        let mut m = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = m.entry(addr).or_insert(0);
        if max != 0 && *c >= max {
            return None;
        }
        *c += 1;
        Some(Slot { owner: self, addr })
    }
}

/// What a listener's connections speak.
#[derive(Clone)]
pub enum Security {
    /// ZooKeeper's plaintext protocol.
    Plain,
    /// TLS only (`secureClientPort`).
    Tls(Arc<crate::tls::Acceptor>),
    /// Either, told apart by the first byte (`client.portUnification`): a TLS record starts
    /// with 0x16 (handshake), a ZooKeeper frame with a length's high byte or a four-letter
    /// word's first letter.
    Unified(Arc<crate::tls::Acceptor>),
}

/// The first byte of a TLS connection (a handshake record).
const TLS_HANDSHAKE: u8 = 0x16;

/// Runs one connection on `stream` as `security` says.
async fn serve(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    security: &Security,
    port: &Port,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = match security {
        Security::Plain => return connection::serve(stream, peer, port, conn_id, cs, stop).await,
        Security::Tls(a) => a,
        Security::Unified(a) => {
            let mut first = [0u8; 1];
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => a,
                Ok(Ok(1)) => return connection::serve(stream, peer, port, conn_id, cs, stop).await,
                _ => return,
            }
        }
    };
    // Boxed: the TLS handshake's and connection's futures are several KiB, and held inline
    // they sized every connection's task, plain ones too (5.5 KB per idle session, heaptrack).
    Box::pin(serve_tls(stream, acceptor, peer, port, conn_id, cs, stop)).await;
}

/// Runs one TLS connection: the handshake, then the connection with the client
/// certificate's subject, if any.
async fn serve_tls(
    stream: tokio::net::TcpStream,
    acceptor: &crate::tls::Acceptor,
    peer: std::net::SocketAddr,
    port: &Port,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.current().accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            // An untrusted, expired or missing certificate, or not TLS at all.
            let text = e.to_string();
            let hint = if text.contains("UnsupportedCertVersion") {
                " (an X.509 v1 certificate: only v3 certificates are accepted; issue it with any extension, e.g. openssl's -extfile)"
            } else {
                ""
            };
            tracing::info!(%peer, error = %text, "TLS handshake failed; closing{hint}");
            port.stats.auth_failed.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "tls_handshake").increment(1);
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "no TLS handshake within {HANDSHAKE_TIMEOUT:?}; closing");
            return;
        }
    };
    let certified = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| crate::tls::subject_dn(leaf));
    if let Some(dn) = &certified {
        tracing::debug!(%peer, subject = dn.as_str(), "TLS client authenticated");
    }
    connection::serve_tls(tls, peer, certified, port, conn_id, cs, stop).await;
}

/// Accepts client connections until `shutdown` fires.
/// On shutdown, stops accepting, lets every connection finish the requests it already read
/// (waiting at most [`DRAIN_TIMEOUT`]), then returns.
pub async fn listen(
    listener: TcpListener,
    security: Security,
    port: Port,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let limits = Arc::new(PerAddress::default());
    let next_conn = Arc::new(AtomicU64::new(1));
    let tracker = tokio_util::task::TaskTracker::new();
    let max = port.dispatcher.config().max_client_cnxns;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => {
                drop(listener);
                tracker.close();
                tracing::info!(connections = tracker.len(), "client port closed; finishing in-flight requests");
                if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
                    tracing::warn!(connections = tracker.len(), "connections still busy after the drain timeout");
                } else {
                    tracing::info!("all client connections drained");
                }
                return;
            }
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let port = port.clone();
        let limits = limits.clone();
        let conn_id = next_conn.fetch_add(1, Ordering::Relaxed);
        let stop = shutdown.clone();
        let security = security.clone();
        tracker.spawn(async move {
            metrics::counter!(stats::names::CONNECTION_REQUESTS).increment(1);
            let Some(_slot) = limits.take(peer.ip(), max) else {
                tracing::warn!(%peer, max, "too many connections from this address");
                metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "max_client_cnxns").increment(1);
                return;
            };
            let _ = stream.set_nodelay(true);
            let cs = port.stats.open(conn_id, peer);
            serve(stream, peer, &security, &port, conn_id, &cs, stop).await;
            port.stats.close(conn_id);
        });
    }
}
