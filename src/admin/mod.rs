//! Operations: four-letter words on the client port, the admin HTTP server (ZooKeeper's
//! `/commands`, plus session listing and killing and readiness probes), and the Prometheus
//! exporter. Other modules declare their own metrics; this module only exports them.

pub mod four_letter;
pub mod http;
pub mod metrics;

use std::net::SocketAddr;

use crate::dispatch::Dispatcher;

/// Answers a four-letter word (and `stmk`'s 8-byte argument) with ZooKeeper's text (the
/// connection closes afterwards).
pub fn four_letter(d: &Dispatcher, word: &[u8; 4], arg: Option<[u8; 8]>) -> String {
    four_letter::run(d, word, arg)
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
