//! Operations: four-letter words on the client port, the admin HTTP server (ZooKeeper's
//! `/commands`, plus session listing and killing and readiness probes), and the Prometheus
//! exporter. It reads the server's parts through a [`View`] the composition root hands it;
//! nothing below imports this module. Other modules declare their own metrics; this module
//! only exports them.

pub mod backup;
pub mod four_letter;
pub mod http;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::raft::layout::DataLayout;
use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::session::SessionTracker;
use crate::stats::ServerStats;
use crate::watch::WatchManager;

/// What operations read (and the one thing they change through the log: a session kill).
#[derive(Clone)]
pub struct View {
    pub config: Arc<Config>,
    pub layout: DataLayout,
    pub stats: Arc<ServerStats>,
    pub tree: Arc<SharedTree>,
    pub watches: Arc<WatchManager>,
    pub sessions: Arc<SessionTracker>,
    pub raft: Raft,
    pub dispatcher: Dispatcher,
    /// Whether this server serves clients now.
    pub serving: tokio::sync::watch::Receiver<bool>,
}

impl View {
    /// The ensemble's members now: those of the last reconfig (`/zookeeper/config`), else
    /// zoo.cfg's; empty standalone.
    pub fn servers(&self) -> std::collections::BTreeMap<u64, crate::config::ServerEntry> {
        match crate::dispatch::reconfig::config_node(&self.tree, true) {
            Some(Ok((servers, _))) => servers,
            _ => self.config.servers.clone(),
        }
    }
}

impl crate::client::FourLetterWords for View {
    fn answer(&self, word: &[u8; 4], arg: Option<[u8; 8]>) -> String {
        four_letter::run(self, word, arg)
    }
}

/// Serves an HTTP router on `addr` until `stop` fires; `what` names it in the log. A port that
/// cannot be bound is logged and the server is skipped (the rest of Warden runs on).
pub(crate) async fn serve_router(
    addr: SocketAddr,
    app: axum::Router,
    what: &str,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "{what} not started");
            return;
        }
    };
    tracing::info!(%addr, "{what} listening");
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
}

/// How long a connection to a TLS listener may take to finish its handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection to a TLS listener: TLS, or plaintext where the port takes both.
type MaybeTls =
    tokio_util::either::Either<tokio_rustls::server::TlsStream<tokio::net::TcpStream>, tokio::net::TcpStream>;

/// The connections of a TLS listener whose handshakes are done (each runs in its own task,
/// so a client that stalls its handshake holds up nobody else).
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(MaybeTls, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = MaybeTls;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (MaybeTls, SocketAddr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task is gone (the server is stopping): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// One accepted connection's handshake: TLS (or, with `plain_too`, plaintext when its first
/// byte is not a TLS handshake's 0x16).
async fn handshake(stream: tokio::net::TcpStream, tls: tokio_rustls::TlsAcceptor, plain_too: bool) -> Option<MaybeTls> {
    if plain_too {
        let mut first = [0u8; 1];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] != 0x16 => return Some(tokio_util::either::Either::Right(stream)),
            Ok(Ok(1)) => {}
            _ => return None,
        }
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => Some(tokio_util::either::Either::Left(s)),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// [`serve_router`] over TLS (`plain_too`: plaintext as well, on the same port).
pub(crate) async fn serve_router_tls(
    addr: SocketAddr,
    app: axum::Router,
    tls: tokio_rustls::TlsAcceptor,
    plain_too: bool,
    what: &str,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let tcp = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "{what} not started");
            return;
        }
    };
    let local = tcp.local_addr().unwrap_or(addr);
    let (tx, ready) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio::spawn(async move {
        loop {
            let (stream, peer) = match tcp.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait, then go on accepting.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (tx, tls) = (tx.clone(), tls.clone());
            tokio::spawn(async move {
                if let Some(io) = handshake(stream, tls, plain_too).await {
                    let _ = tx.send((io, peer)).await;
                }
            });
        }
    });
    tracing::info!(%addr, tls = if plain_too { "and plaintext" } else { "only" }, "{what} listening");
    let _ = axum::serve(TlsListener { ready, local }, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
    acceptor.abort();
}
