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
    #[error("importing the ZooKeeper data dir: {0}")]
    Import(String),
    #[error("TLS: {0}")]
    Tls(crate::tls::TlsError),
    #[error("audit.enable: cannot open the audit log {path} (set audit.logFile): {source}")]
    Audit { path: String, source: std::io::Error },
}

/// How long a stopping leader tries to hand leadership over before it stops anyway.
const HAND_OVER_LIMIT: Duration = Duration::from_secs(2);

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
        initialize: true,
        heartbeat_ms: config.heartbeat_ms(),
        election_ms: config.election_timeout_ms(),
        snap_count: config.snap_count,
        snapshot_compression: config.snapshot_compression,
        commit_log_count: config.commit_log_count,
        tick_ms: u64::from(config.tick_time_ms),
        snapshot_dir: layout.snap_dir.clone(),
    }
}

/// Imports Apache ZooKeeper's files from this member's data dir on its first start: a data
/// dir holding ZooKeeper's `snapshot.*`/`log.*` and nothing of Warden's becomes this group's
/// initial state (see [`crate::zkdata::import`]) before anything else opens it. A data dir
/// holding Warden state is never imported again; ZooKeeper's files are left as they are.
fn import_zookeeper_data(layout: &DataLayout, options: &crate::raft::Options) -> Result<(), ServerError> {
    let files = crate::zkdata::import::ZkFiles::find(&layout.snap_dir, &layout.log_dir).map_err(import_err)?;
    if files.is_empty() {
        return Ok(());
    }
    if holds_warden_state(layout)? {
        tracing::info!(dir = %layout.snap_dir.display(), "ZooKeeper files present beside Warden's own state: \
            not importing them (this data dir was imported or started before)");
        return Ok(());
    }
    tracing::info!(snapshots = files.snapshots.len(), logs = files.logs.len(), dir = %layout.snap_dir.display(),
        "first start on an Apache ZooKeeper data dir: importing it");
    import_into(layout, options, &layout.snap_dir, &layout.log_dir)?;
    Ok(())
}

fn import_err(e: impl std::fmt::Display) -> ServerError {
    ServerError::Import(e.to_string())
}

/// Writes an imported tree as the new group's first snapshot; returns its path.
fn write_imported(
    layout: &DataLayout,
    options: &crate::raft::Options,
    tree: crate::tree::DataTree,
) -> Result<std::path::PathBuf, ServerError> {
    crate::raft::snapshot::write_initial(
        &layout.snap_dir,
        options.id,
        &options.voters,
        tree,
        options.snapshot_compression,
    )
    .map_err(import_err)
}

/// Whether Warden has written anything to this data dir (a log or a snapshot of its own).
fn holds_warden_state(layout: &DataLayout) -> Result<bool, ServerError> {
    Ok(layout.log_file().exists() || crate::raft::snapshot::any_snapshot(&layout.snap_dir).map_err(import_err)?)
}

/// Imports the ZooKeeper files in `snap_src`/`log_src` (`version-2` directories) as the
/// initial state of the data dir at `layout`.
fn import_into(
    layout: &DataLayout,
    options: &crate::raft::Options,
    snap_src: &std::path::Path,
    log_src: &std::path::Path,
) -> Result<crate::zkdata::import::ImportReport, ServerError> {
    if !options.standalone {
        return Err(ServerError::Import(
            "`warden import` writes a standalone server's data dir; ensemble members import on their first \
             start, agreeing on whose ZooKeeper state is the newest (docs/migration.md)"
                .into(),
        ));
    }
    let imported = crate::zkdata::import::import(snap_src, log_src)
        .map_err(import_err)?
        .ok_or_else(|| ServerError::Import(format!("no ZooKeeper snapshot or txn log in {}", snap_src.display())))?;
    tracing::info!(report = %imported.report, "imported the ZooKeeper data dir");
    let report = imported.report;
    layout.prepare().map_err(|source| ServerError::DataDir { path: layout.snap_dir.display().to_string(), source })?;
    let path = write_imported(layout, options, imported.tree)?;
    tracing::info!(snapshot = %path.display(), "imported state written; ZooKeeper's files were not changed");
    Ok(report)
}

/// `warden import`: imports a ZooKeeper data dir (`zk_data_dir`, `zk_log_dir`: the dataDir and
/// dataLogDir, or their `version-2` directories) into the data dir `config` names, which
/// must hold no Warden state.
pub fn import_offline(
    config: &Config,
    zk_data_dir: &std::path::Path,
    zk_log_dir: &std::path::Path,
) -> Result<crate::zkdata::import::ImportReport, ServerError> {
    let layout = DataLayout::new(&config.data_dir, &config.data_log_dir);
    if holds_warden_state(&layout)? {
        return Err(ServerError::Import(format!(
            "{} already holds Warden state; import into an empty data dir",
            layout.snap_dir.display()
        )));
    }
    let version2 = |d: &std::path::Path| {
        let v = d.join(crate::raft::layout::VERSION_DIR);
        if v.is_dir() {
            v
        } else {
            d.to_owned()
        }
    };
    let options = raft_options(config, &layout);
    import_into(&layout, &options, &version2(zk_data_dir), &version2(zk_log_dir))
}

/// Binds this ensemble member's peer port.
async fn bind_peer_port(config: &Config) -> Result<tokio::net::TcpListener, ServerError> {
    let me = config
        .servers
        .get(&config.server_id)
        .ok_or_else(|| ServerError::Raft(format!("server.{} is not in the configuration", config.server_id)))?;
    let addr: SocketAddr = tokio::net::lookup_host(me.peer_addr())
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ServerError::Raft(format!("cannot resolve peer address {}", me.peer_addr())))?;
    let bind = SocketAddr::new(if addr.ip().is_loopback() { addr.ip() } else { [0, 0, 0, 0].into() }, addr.port());
    let listener = listen(bind, crate::config::DEFAULT_LISTEN_BACKLOG)?;
    tracing::info!(%bind, "peer port listening");
    Ok(listener)
}

/// An ensemble member's start: binds the peer port, and a member new to the group agrees
/// with the others on the group's first state (see [`crate::peer::bootstrap`]) before Raft
/// starts: the member with the newest ZooKeeper data imports it, the others join. Returns
/// the peer listener and the last zxid of this member's own ZooKeeper data, if it is new and
/// holds some.
async fn start_member(
    config: &Config,
    layout: &DataLayout,
    options: &mut crate::raft::Options,
    peers: &Peers,
) -> Result<(tokio::net::TcpListener, Option<i64>), ServerError> {
    use crate::peer::bootstrap;
    let listener = bind_peer_port(config).await?;
    let observer = !options.voters.contains_key(&options.id);
    if layout.joining_file().exists() || observer {
        // Joined a group another member initialised: never initialise one here. An observer
        // (a Raft learner) never initialises, nor brings state: acknowledged writes are on a
        // quorum of voters.
        options.initialize = false;
        return Ok((listener, None));
    }
    let files = crate::zkdata::import::ZkFiles::find(&layout.snap_dir, &layout.log_dir).map_err(import_err)?;
    if holds_warden_state(layout)? {
        if !files.is_empty() {
            tracing::info!(dir = %layout.snap_dir.display(), "ZooKeeper files present beside Warden's own state: \
                not importing them (this data dir was imported or started before)");
        }
        return Ok((listener, None));
    }
    let imported = if files.is_empty() {
        None
    } else {
        tracing::info!(snapshots = files.snapshots.len(), logs = files.logs.len(), dir = %layout.snap_dir.display(),
            "new ensemble member on an Apache ZooKeeper data dir: importing it");
        let imported = crate::zkdata::import::import(&layout.snap_dir, &layout.log_dir).map_err(import_err)?;
        if let Some(i) = &imported {
            tracing::info!(report = %i.report, "imported this member's ZooKeeper data; asking the other members whose \
                is the newest");
        }
        imported
    };
    let zxid = imported.as_ref().map(|i| i.report.last_zxid);
    let mine = bootstrap::BootstrapState::Fresh { zookeeper_zxid: zxid };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let answering = tokio::spawn(bootstrap::serve_fresh(listener, mine, peers.security(), stop_rx));
    let decision = bootstrap::decide(options.id, mine, &options.voters, peers).await;
    let _ = stop_tx.send(());
    let listener = answering.await.map_err(|e| ServerError::Raft(format!("bootstrap answers: {e}")))?;
    match (decision, imported) {
        (bootstrap::Decision::Import, Some(imported)) => {
            let path = write_imported(layout, options, imported.tree)?;
            tracing::info!(snapshot = %path.display(), "this member's ZooKeeper state is the newest: it is the \
                group's first state (ZooKeeper's files were not changed)");
        }
        (bootstrap::Decision::Import, None) => {
            return Err(ServerError::Import(
                "bootstrap chose this member's ZooKeeper state, which it does not hold".into(),
            ))
        }
        (bootstrap::Decision::Join, imported) => {
            if let Some(i) = imported {
                tracing::info!(
                    zxid = format_args!("{:#x}", i.report.last_zxid),
                    "another member brings the group's \
                    state: this member takes it from the leader (its own ZooKeeper files stay as they are)"
                );
            }
            write_joining(layout)?;
            options.initialize = false;
        }
        (bootstrap::Decision::Initialize, _) => {}
    }
    Ok((listener, zxid))
}

/// Records, durably, that this member joins a group it must never initialise.
fn write_joining(layout: &DataLayout) -> Result<(), ServerError> {
    let write = || -> std::io::Result<()> {
        let f = std::fs::File::create(layout.joining_file())?;
        f.sync_all()?;
        std::fs::File::open(&layout.snap_dir)?.sync_all()
    };
    write().map_err(|source| ServerError::DataDir { path: layout.joining_file().display().to_string(), source })
}

/// Runs a server until a shutdown signal. `placement`, when the runtime was built with its
/// hooks, is steered by the load from here (see [`crate::runtime::workers`]).
pub async fn run(config: Config, placement: Option<Arc<Placement>>) -> Result<(), ServerError> {
    let config = Arc::new(config);
    // The key material first: a bad store stops start-up before anything else happens.
    let acceptor = if config.tls.enabled() {
        Some(crate::tls::Acceptor::new(&config.tls).map_err(ServerError::Tls)?)
    } else {
        None
    };
    let metrics_handle = if config.metrics_enable { crate::admin::metrics::install() } else { None };
    let layout = DataLayout::new(&config.data_dir, &config.data_log_dir);
    layout.prepare().map_err(|source| ServerError::DataDir { path: config.data_dir.display().to_string(), source })?;
    if let Some(path) = &config.audit_log {
        crate::audit::start(path).map_err(|source| ServerError::Audit { path: path.display().to_string(), source })?;
        tracing::info!(file = %path.display(), "audit log on");
    }
    let mut options = raft_options(&config, &layout);
    let standalone = options.standalone;
    let peers = if config.servers.is_empty() {
        Peers::default()
    } else {
        Peers::new(Arc::new(crate::peer::PeerSecurity {
            tls: Arc::new(crate::tls::QuorumTls::new(&config.quorum_tls).map_err(ServerError::Tls)?),
            sasl: config.quorum_sasl.clone(),
        }))
    };
    let quorum_tls = peers.security().tls.clone();
    let (peer_listener, zookeeper_zxid) = if standalone {
        import_zookeeper_data(&layout, &options)?;
        (None, None)
    } else {
        let (listener, zxid) = start_member(&config, &layout, &mut options, &peers).await?;
        (Some(listener), zxid)
    };

    // Storage and the parts apply reports to; the proposer's queue before Raft, since the
    // log store fills the leader's batches from it.
    let waiters = Arc::new(Waiters::default());
    let proposer = Proposer::new(waiters.clone());
    let log = open_log(&config, &layout, &options, &proposer, placement.as_ref())?;
    let shared = Arc::new(SharedTree::new());
    let watches = Arc::new(WatchManager::default());
    let sessions = Arc::new(SessionTracker::new(config.server_id));
    let effects = Arc::new(LocalEffects { watches: watches.clone(), sessions: sessions.clone() });
    let sm = StateMachine::open(&layout.snap_dir, shared.clone(), effects, waiters)
        .map_err(ServerError::StateMachine)?
        .with_config_node(bytes::Bytes::from(config.config_node_text()), config.config_version)
        .with_snapshot_compression(config.snapshot_compression);
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
        zookeeper_zxid,
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
    if let Some(peer_listener) = peer_listener {
        tasks.push(tokio::spawn(crate::peer::serve(
            peer_listener,
            Arc::new(dispatcher.clone()),
            peers.security(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(crate::session::send_touches(
            raft.clone(),
            peers,
            sessions.clone(),
            config.tick_time_ms,
            stop_rx.clone(),
        )));
        if config.local_sessions {
            tasks.push(tokio::spawn(crate::session::expire_local(
                sessions.clone(),
                config.tick_time_ms,
                stop_rx.clone(),
            )));
        }
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
    if !standalone {
        tasks.push(tokio::spawn(dispatcher.clone().persist_reconfigs(stop_rx.clone())));
        if config.digest_enabled {
            tasks.push(tokio::spawn(crate::dispatch::digests::watch(dispatcher.clone(), stop_rx.clone())));
        }
    }
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
    if let Some(a) = &acceptor {
        tasks.push(tokio::spawn(a.clone().reload(stop_rx.clone())));
    }
    if quorum_tls.reloads() {
        tasks.push(tokio::spawn(quorum_tls.reload(stop_rx.clone())));
    }
    let mut listeners = Vec::new();
    if config.plaintext_client_port {
        let addr = SocketAddr::new(client_ip, client_port);
        let security = match (&acceptor, config.tls.port_unification) {
            (Some(a), true) => crate::client::Security::Unified(a.clone()),
            _ => crate::client::Security::Plain,
        };
        let what =
            if matches!(security, crate::client::Security::Unified(_)) { "plaintext and TLS" } else { "plaintext" };
        listeners.push((listen(addr, config.listen_backlog())?, security));
        tracing::info!(%addr, serves = what, backlog = config.listen_backlog(), data_dir = %config.data_dir.display(), server_id = config.server_id, "serving clients");
    }
    if let (Some(a), Some(secure_port)) = (&acceptor, config.tls.secure_client_port) {
        let addr = SocketAddr::new(config.tls.secure_client_port_address.unwrap_or(client_ip), secure_port);
        listeners.push((listen(addr, config.listen_backlog())?, crate::client::Security::Tls(a.clone())));
        let auth = format!("{:?}", config.tls.client_auth).to_lowercase();
        tracing::info!(%addr, client_auth = auth.as_str(), data_dir = %config.data_dir.display(), server_id = config.server_id, "serving TLS clients");
    }
    if let (Some(sasl), Some(jaas)) = (&config.sasl, &config.jaas_path) {
        tracing::info!(jaas = %jaas.display(), mechanisms = ?sasl.mechanisms(), "SASL for clients");
    }
    if !config.enforce_auth_schemes.is_empty() {
        tracing::info!(schemes = ?config.enforce_auth_schemes, "clients must authenticate before any other request");
    }

    if config.admin_enable {
        let addr = SocketAddr::new(config.admin_address, config.admin_port);
        tasks.push(tokio::spawn(crate::admin::http::serve(addr, view.clone(), stop_rx.clone())));
    }
    if let Some(h) = metrics_handle {
        let addr = SocketAddr::new(config.metrics_host, config.metrics_port);
        tasks.push(tokio::spawn(crate::admin::metrics::serve(addr, view.clone(), h, stop_rx.clone())));
    }
    let admission = Arc::new(crate::client::admission::Admission::new(config.throttle.clone()));
    let port = crate::client::Port { dispatcher, stats, words: Arc::new(view), admission };
    let clients: Vec<_> = listeners
        .into_iter()
        .map(|(listener, security)| {
            tokio::spawn(crate::client::listen(listener, security, port.clone(), stop_rx.clone()))
        })
        .collect();

    // A Raft core stopped by a failed disk write (a full or failing disk) cannot take or
    // follow another write: the server exits, as ZooKeeper's does when its transaction log
    // cannot be written, so that its supervisor restarts it from what is on disk rather
    // than leave it answering ConnectionLoss to every write (and reads from a tree that no
    // longer moves) for good.
    let fault = tokio::select! {
        () = shutdown_signal() => None,
        why = raft.stopped_by_fault() => Some(why),
    };
    if let Some(why) = fault {
        // No drain: connections still open would go on answering reads from a tree that no
        // longer moves (it took 5 s in the nemesis suite). Leaving the runtime closes them.
        tracing::error!(error = %why, "raft stopped on a storage error: this server exits");
        crate::audit::stop();
        return Err(ServerError::Raft(format!("stopped on a storage error: {why}")));
    }
    if !standalone && raft.is_leader() {
        // While the peer port still answers: the most caught-up voter campaigns at once
        // instead of after the leader lease (openraft's transfer-leader).
        let t0 = std::time::Instant::now();
        if raft.hand_over(HAND_OVER_LIMIT).await {
            tracing::info!(took_ms = t0.elapsed().as_millis() as u64, "leadership handed over");
        } else {
            tracing::warn!("leadership not handed over in time; the others elect after the lease");
        }
    }
    tracing::info!("shutting down: no new connections");
    let _ = stop_tx.send(true);
    for c in clients {
        let _ = c.await;
    }
    for task in tasks {
        let _ = task.await;
    }
    if !standalone && raft.is_leader() {
        // The transfer did not happen. Voters refuse any candidate until the leader lease
        // has passed since our last heartbeat; stopping Raft with the peer port already
        // closed is the signal: the lowest-numbered live voter sees the refusal and
        // campaigns the moment the lease runs out (see `raft::election`).
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
    crate::audit::stop();
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
