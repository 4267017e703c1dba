//! Operations: four-letter words on the client port, the admin HTTP server (ZooKeeper's
//! `/commands`, plus session listing and killing and readiness probes), and the Prometheus
//! exporter. It reads the server's parts through a [`View`] the composition root hands it;
//! nothing below imports this module. Other modules declare their own metrics; this module
//! only exports them.

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
