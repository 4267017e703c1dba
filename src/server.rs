//! The composition root: opens storage, starts the one-member Raft group, the client port and
//! the background tasks (session expiry, container/TTL reaper), and shuts them down on
//! SIGINT/SIGTERM. Nothing imports this module but `main`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;

use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::raft::log_store::LogStore;
use crate::raft::network::NoPeersFactory;
use crate::raft::state_machine::SharedTree;
use crate::raft::state_machine::StateMachine;
use crate::raft::Raft;
use crate::session::SessionTracker;
use crate::tree::DataTree;
use crate::txn::Txn;
use crate::txn::TxnOp;
use crate::watch::WatchManager;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error("raft log: {0}")]
    Log(#[from] crate::raft::log_store::OpenError),
    #[error("state machine: {0}")]
    StateMachine(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Runs a standalone server until a shutdown signal.
pub async fn run(config: Config) -> Result<(), ServerError> {
    let config = Arc::new(config);
    let metrics_handle = if config.metrics_enable { crate::admin::metrics::install() } else { None };
    for dir in [&config.data_dir, &config.data_log_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|source| ServerError::DataDir { path: dir.display().to_string(), source })?;
    }
    let log_store = LogStore::open(&config.data_log_dir.join("raft-log.redb"))?;
    let (applied, _) = tokio::sync::watch::channel(0i64);
    let shared = Arc::new(SharedTree { tree: RwLock::new(DataTree::new()), applied });
    let watches = Arc::new(WatchManager::default());
    let sm = StateMachine::open(&config.data_dir.join("snapshots"), shared.clone(), watches.clone())
        .map_err(ServerError::StateMachine)?;

    let raft_config = openraft::Config {
        cluster_name: "warden".into(),
        heartbeat_interval: 100,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snap_count),
        max_in_snapshot_log_to_keep: 1000,
        ..Default::default()
    }
    .validate()
    .map_err(|e| ServerError::Raft(e.to_string()))?;
    let id = config.server_id;
    let raft = Raft::new(id, Arc::new(raft_config), NoPeersFactory, log_store, sm)
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    if !raft.is_initialized().await.map_err(|e| ServerError::Raft(e.to_string()))? {
        let mut members = BTreeMap::new();
        members.insert(id, openraft::BasicNode { addr: String::new() });
        raft.initialize(members).await.map_err(|e| ServerError::Raft(e.to_string()))?;
        tracing::info!("initialised a new one-member Raft group");
    }
    raft.wait(Some(Duration::from_secs(30)))
        .current_leader(id, "standalone server becomes leader")
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;

    let sessions = Arc::new(SessionTracker::new(id));
    let stats = Arc::new(crate::client::stats::ServerStats::default());
    let dispatcher = Dispatcher {
        raft: raft.clone(),
        shared: shared.clone(),
        watches,
        sessions,
        config: config.clone(),
        stats,
        proposer: crate::dispatch::propose::Proposer::start(raft.clone()),
    };

    let addr = SocketAddr::new(config.client_port_address, config.client_port);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServerError::Listen { addr, source })?;
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "serving clients");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let expiry = tokio::spawn(expire_sessions(dispatcher.clone(), stop_rx.clone()));
    let reaper = tokio::spawn(reap_containers(dispatcher.clone(), stop_rx.clone()));
    let admin = config.admin_enable.then(|| {
        let addr = SocketAddr::new(config.admin_address, config.admin_port);
        tokio::spawn(crate::admin::http::serve(addr, dispatcher.clone(), stop_rx.clone()))
    });
    let exporter = metrics_handle.map(|h| {
        let addr = SocketAddr::new(config.metrics_host, config.metrics_port);
        tokio::spawn(crate::admin::metrics::serve(addr, dispatcher.clone(), h, stop_rx.clone()))
    });
    let clients = tokio::spawn(crate::client::listen(listener, dispatcher, stop_rx));

    shutdown_signal().await;
    tracing::info!("shutting down: no new connections");
    let _ = stop_tx.send(true);
    let _ = clients.await;
    let _ = expiry.await;
    let _ = reaper.await;
    for task in [admin, exporter].into_iter().flatten() {
        let _ = task.await;
    }
    tracing::info!("stopping raft");
    let _ = raft.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::signal;
        use tokio::signal::unix::SignalKind;
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The leader's expirer: proposes CloseSession for sessions past their timeout.
async fn expire_sessions(d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period = Duration::from_millis((u64::from(d.config.tick_time_ms) / 4).clamp(20, 500));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let known: Vec<(i64, i32)> = d.shared.read().sessions().map(|(id, s)| (*id, s.timeout_ms)).collect();
        for session_id in d.sessions.expired(known.into_iter()) {
            let d2 = d.clone();
            tokio::spawn(async move {
                let txn =
                    Txn { session_id: 0, time_ms: now_ms(), auth: vec![], op: TxnOp::CloseSession { session_id } };
                match d2.propose(txn).await {
                    Ok(_) => {
                        tracing::info!(session = format_args!("{session_id:#x}"), "session expired");
                        d2.sessions.remove(session_id);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "closing an expired session failed; will retry");
                        d2.sessions.retry_close(session_id);
                    }
                }
            });
        }
    }
}

/// Removes empty containers and expired TTL nodes (ZooKeeper's `ContainerManager`, faster).
async fn reap_containers(d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(d.config.container_check_interval_ms.max(10)));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = now_ms();
        let candidates: Vec<String> = {
            let tree = d.shared.read();
            tree.reapable().filter(|p| tree.is_reapable(p, now)).take(10_000).cloned().collect()
        };
        for path in candidates {
            let txn = Txn { session_id: 0, time_ms: now, auth: vec![], op: TxnOp::DeleteContainer { path } };
            if let Err(e) = d.propose(txn).await {
                tracing::warn!(error = %e, "container removal failed");
                break;
            }
        }
    }
}
