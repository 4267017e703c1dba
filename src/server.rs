//! The composition root: builds the parts and wires them, in order (storage, the proposer's
//! queue, Raft, the dispatcher, the ports), starts the loops each part owns, and shuts them
//! down on SIGINT/SIGTERM. It owns no loop of its own. Nothing imports this module but `main`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::View;
use crate::config::Config;
use crate::dispatch::propose::Proposer;
use crate::dispatch::Dispatcher;
use crate::dispatch::DispatcherParts;
use crate::peer::Peers;
use crate::raft::layout::DataLayout;
use crate::raft::log_store::LogStore;
use crate::raft::state_machine::ApplyHook;
use crate::raft::state_machine::SharedTree;
use crate::raft::state_machine::StateMachine;
use crate::raft::wait::Waiters;
use crate::raft::Raft;
use crate::runtime::workers::Placement;
use crate::session::SessionTracker;
use crate::stats::ServerStats;
use crate::tree::Change;
use crate::watch::WatchManager;

/// How long shutdown waits for Raft to stop.
pub const RAFT_STOP_LIMIT: Duration = Duration::from_secs(10);

/// What applying a txn does on this server besides changing the tree: watch events for its
/// connections, and closing the connection of a session closed through the log.
struct LocalEffects {
    watches: Arc<WatchManager>,
    sessions: Arc<SessionTracker>,
}

impl ApplyHook for LocalEffects {
    fn applied(&self, zxid: i64, _session_id: i64, changes: &[Change]) {
        self.watches.trigger(zxid, changes);
    }

    fn session_closed(&self, session_id: i64) {
        self.sessions.remove(session_id);
    }

    /// A snapshot from the leader replaced the tree: the watches its changes trigger fire, and
    /// the connections of sessions it no longer holds (closed or expired meanwhile) close, so
    /// their clients learn they are expired when they reconnect.
    fn replaced(&self, old: &crate::tree::DataTree, new: &crate::tree::DataTree) {
        self.watches.tree_replaced(old, new);
        for (id, _) in old.sessions().filter(|(id, _)| new.session(**id).is_none()) {
            tracing::info!(session = format_args!("{id:#x}"), "session gone in the leader's snapshot: closing it here");
            self.sessions.remove(*id);
        }
    }
}

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

/// A listening socket on `addr` with `backlog` connections queued for accept at most, with
/// `SO_REUSEADDR` as `TcpListener::bind` sets it (whose backlog of 128 a burst of connects
/// overflowed).
fn listen(addr: SocketAddr, backlog: u32) -> Result<tokio::net::TcpListener, ServerError> {
    let bind = || {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(backlog)
    };
    bind().map_err(|source| ServerError::Listen { addr, source })
}

/// The Raft log, with the options the configuration and the member's role ask for.
fn open_log(
    config: &Config,
    layout: &DataLayout,
    options: &crate::raft::Options,
    proposer: &Proposer,
    placement: Option<&Arc<Placement>>,
) -> Result<LogStore, ServerError> {
    let log = LogStore::open(&layout.log_file())?
        .with_fsync_warning(config.fsync_warning_threshold_ms)
        .with_force_sync(config.force_sync)
        .with_filler(proposer.filler());
    if !config.force_sync {
        tracing::warn!(
            "forceSync=no: Raft log appends are written but not fsynced; an acknowledged write \
             survives a crash of this process, not of the machine or its power"
        );
    }
    let log = if options.standalone { log } else { log.with_vote_budget(options.vote_window_ms()) };
    // An ensemble member's own entries always go to the log's writer thread; a standalone
    // server's only while its workers are spread for many clients (see `LogStore::with_writer`).
    let offload: Option<crate::raft::log_store::Offload> = if !options.standalone {
        Some(Box::new(|| true))
    } else {
        placement.cloned().map(|p| -> crate::raft::log_store::Offload { Box::new(move || p.is_spread()) })
    };
    let Some(offload) = offload else { return Ok(log) };
    let woke = placement.cloned();
    log.with_writer(
        config.server_id,
        move || {
            if let Some(p) = &woke {
                p.woke_from_outside();
            }
        },
        offload,
    )
    .map_err(|e| ServerError::Raft(format!("cannot start the log writer thread: {e}")))
}

/// How this member's Raft group is started, from the configuration.
fn raft_options(config: &Config, layout: &DataLayout) -> crate::raft::Options {
    let standalone = config.servers.is_empty();
    // Raft timing: a heartbeat every tick/80 (25 ms at tickTime 2000); a follower campaigns
    // after the leader lease (`election_timeout_max`, 6 heartbeats) plus a random 3-6
    // heartbeats, i.e. 225-300 ms of silence, and only if a majority has lost the leader too
    // (pre-vote), or right after the lease when the leader's process is gone (see
    // `raft::election`). `raft.heartbeatMs`/`raft.electionTimeoutMs` override.
    let (voters, observers): (BTreeMap<u64, String>, BTreeMap<u64, String>) = if standalone {
        ([(config.server_id, String::new())].into(), BTreeMap::new())
    } else {
        let peer = |(id, s): (&u64, &crate::config::ServerEntry)| (*id, s.peer_addr());
        (
            config.servers.iter().filter(|(_, s)| !s.observer).map(peer).collect(),
            config.servers.iter().filter(|(_, s)| s.observer).map(peer).collect(),
        )
    };
    crate::raft::Options {
        id: config.server_id,
        voters,
        observers,
        standalone,
        heartbeat_ms: config.heartbeat_ms(),
        election_ms: config.election_timeout_ms(),
        snap_count: config.snap_count,
        commit_log_count: config.commit_log_count,
        tick_ms: u64::from(config.tick_time_ms),
        snapshot_dir: layout.snap_dir.clone(),
    }
}

/// Runs a server until a shutdown signal. `placement`, when the runtime was built with its
/// hooks, is steered by the load from here (see [`crate::runtime::workers`]).
pub async fn run(config: Config, placement: Option<Arc<Placement>>) -> Result<(), ServerError> {
    let config = Arc::new(config);
    let metrics_handle = if config.metrics_enable { crate::admin::metrics::install() } else { None };
    let layout = DataLayout::new(&config.data_dir, &config.data_log_dir);
    layout.prepare().map_err(|source| ServerError::DataDir { path: config.data_dir.display().to_string(), source })?;
    let options = raft_options(&config, &layout);
    let standalone = options.standalone;

    // Storage and the parts apply reports to; the proposer's queue before Raft, since the
    // log store fills the leader's batches from it.
    let waiters = Arc::new(Waiters::default());
    let proposer = Proposer::new(waiters.clone());
    let log = open_log(&config, &layout, &options, &proposer, placement.as_ref())?;
    let shared = Arc::new(SharedTree::new());
    let watches = Arc::new(WatchManager::default());
    let sessions = Arc::new(SessionTracker::new(config.server_id));
    let effects = Arc::new(LocalEffects { watches: watches.clone(), sessions: sessions.clone() });
    let sm =
        StateMachine::open(&layout.snap_dir, shared.clone(), effects, waiters).map_err(ServerError::StateMachine)?;
    let peers = Peers::default();
    let raft = Raft::start(options, log, sm, Arc::new(peers.clone())).await.map_err(ServerError::Raft)?;
    proposer.start(raft.clone(), peers.clone(), shared.clone());

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (serving_tx, serving_rx) = tokio::sync::watch::channel(standalone);
    let stats = Arc::new(ServerStats::default());
    let dispatcher = Dispatcher::new(DispatcherParts {
        raft: raft.clone(),
        shared: shared.clone(),
        watches: watches.clone(),
        sessions: sessions.clone(),
        config: config.clone(),
        proposer,
        peers: peers.clone(),
        serving: serving_rx.clone(),
    });
    let view = View {
        config: config.clone(),
        layout: layout.clone(),
        stats: stats.clone(),
        tree: shared.clone(),
        watches,
        sessions: sessions.clone(),
        raft: raft.clone(),
        dispatcher: dispatcher.clone(),
        serving: serving_rx,
    };

    let mut tasks = raft.spawn_tasks(shared.clone(), serving_tx, stop_rx.clone());
    if let Some(me) = config.servers.get(&config.server_id) {
        let addr: SocketAddr = tokio::net::lookup_host(me.peer_addr())
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ServerError::Raft(format!("cannot resolve peer address {}", me.peer_addr())))?;
        let bind = SocketAddr::new(if addr.ip().is_loopback() { addr.ip() } else { [0, 0, 0, 0].into() }, addr.port());
        let peer_listener = listen(bind, crate::config::DEFAULT_LISTEN_BACKLOG)?;
        tracing::info!(%bind, "peer port listening");
        tasks.push(tokio::spawn(crate::peer::serve(peer_listener, Arc::new(dispatcher.clone()), stop_rx.clone())));
        tasks.push(tokio::spawn(crate::session::send_touches(
            raft.clone(),
            peers,
            sessions.clone(),
            config.tick_time_ms,
            stop_rx.clone(),
        )));
    }
    if let Some(p) = placement {
        let stats = stats.clone();
        let applied = shared.applied.subscribe();
        let mut last_zxid = *applied.borrow();
        let take_window = move || {
            let mut w = stats.take_window();
            let zxid = *applied.borrow();
            // One txn per zxid within an epoch; a new epoch counts as busy for one window.
            w.txns_applied = u64::try_from(zxid.wrapping_sub(last_zxid)).unwrap_or(u64::MAX);
            last_zxid = zxid;
            w
        };
        tasks.push(tokio::spawn(crate::runtime::workers::adapt(p, take_window, stop_rx.clone())));
    }
    tasks.push(tokio::spawn(crate::session::expire(
        raft.clone(),
        shared.clone(),
        sessions,
        config.tick_time_ms,
        stop_rx.clone(),
    )));
    tasks.push(tokio::spawn(crate::dispatch::containers::reap(
        raft.clone(),
        shared,
        Duration::from_millis(config.container_check_interval_ms),
        stop_rx.clone(),
    )));

    let (client_ip, client_port) = match config.servers.get(&config.server_id).and_then(|s| s.client.clone()) {
        Some((host, port)) => (host.parse().unwrap_or(config.client_port_address), port),
        None => (config.client_port_address, config.client_port),
    };
    let addr = SocketAddr::new(client_ip, client_port);
    let listener = listen(addr, config.listen_backlog())?;
    tracing::info!(%addr, backlog = config.listen_backlog(), data_dir = %config.data_dir.display(), server_id = config.server_id, "serving clients");

    if config.admin_enable {
        let addr = SocketAddr::new(config.admin_address, config.admin_port);
        tasks.push(tokio::spawn(crate::admin::http::serve(addr, view.clone(), stop_rx.clone())));
    }
    if let Some(h) = metrics_handle {
        let addr = SocketAddr::new(config.metrics_host, config.metrics_port);
        tasks.push(tokio::spawn(crate::admin::metrics::serve(addr, view.clone(), h, stop_rx.clone())));
    }
    let port = crate::client::Port { dispatcher, stats, words: Arc::new(view) };
    let clients = tokio::spawn(crate::client::listen(listener, port, stop_rx));

    shutdown_signal().await;
    tracing::info!("shutting down: no new connections");
    let _ = stop_tx.send(true);
    let _ = clients.await;
    for task in tasks {
        let _ = task.await;
    }
    if !standalone && raft.is_leader() {
        // Voters refuse any candidate until the leader lease has passed since our last
        // heartbeat. Stopping Raft with the peer port already closed is the hand-over signal:
        // the lowest-numbered live voter sees the refusal and campaigns the moment the lease
        // runs out (see `raft::election`).
        tracing::info!(
            lease_ms = raft.lease().as_millis() as u64,
            "handing leadership over: heartbeats stop and the peer port is closed"
        );
    }
    tracing::info!("stopping raft");
    // Raft stops after the state machine's current task, which may be a snapshot of a large
    // tree being written. Every acknowledged write is already in the log, and a snapshot
    // left unfinished is only a `.tmp` file the next start removes, so the wait is bounded.
    if !raft.shutdown(RAFT_STOP_LIMIT).await {
        tracing::warn!(
            limit_s = RAFT_STOP_LIMIT.as_secs(),
            "raft did not stop in time (a snapshot still being written?): exiting without it"
        );
    }
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
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
