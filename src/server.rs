//! The composition root: opens storage, starts the one-member Raft group, the client port and
//! the background tasks (session expiry, container/TTL reaper), and shuts them down on
//! SIGINT/SIGTERM. Nothing imports this module but `main`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::raft::log_store::LogStore;
use crate::raft::network::PeerNetworkFactory;
use crate::raft::state_machine::SharedTree;
use crate::raft::state_machine::StateMachine;
use crate::raft::Raft;
use crate::session::SessionTracker;
use crate::tree::DataTree;
use crate::txn::Txn;
use crate::txn::TxnOp;
use crate::watch::WatchManager;

/// What applying a txn does on this server besides changing the tree: watch events for its
/// connections, and closing the connection of a session closed through the log.
struct LocalEffects {
    watches: Arc<WatchManager>,
    sessions: Arc<SessionTracker>,
}

impl crate::raft::state_machine::ApplyHook for LocalEffects {
    fn applied(&self, zxid: i64, _session_id: i64, changes: &[crate::tree::Change]) {
        self.watches.trigger(zxid, changes);
    }

    fn session_closed(&self, session_id: i64) {
        self.sessions.remove(session_id);
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
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Runs a server until a shutdown signal. `placement`, when the runtime was built with its
/// unpark hook, is steered by the load from here (see [`crate::placement`]).
pub async fn run(config: Config, placement: Option<Arc<crate::placement::Placement>>) -> Result<(), ServerError> {
    let config = Arc::new(config);
    let metrics_handle = if config.metrics_enable { crate::admin::metrics::install() } else { None };
    let layout = crate::raft::layout::DataLayout::new(&config.data_dir, &config.data_log_dir);
    layout.prepare().map_err(|source| ServerError::DataDir { path: config.data_dir.display().to_string(), source })?;
    // Raft timing: a heartbeat every tick/80 (25 ms at tickTime 2000); a follower campaigns
    // after the leader lease (`election_timeout_max`, 6 heartbeats) plus a random 3-6
    // heartbeats, i.e. 225-300 ms of silence, and only if a majority has lost the leader too
    // (pre-vote), or right after the lease when the leader's process is gone (see `failover`).
    // `raft.heartbeatMs`/`raft.electionTimeoutMs` override.
    let (heartbeat, election) = (config.heartbeat_ms(), config.election_timeout_ms());
    let standalone = config.servers.is_empty();
    // openraft waits `election_timeout_min` for a vote answer, and a voter answers only once
    // the vote is on disk. An ensemble's voters time their campaigns themselves
    // (`failover::campaign`, from `election`), so there openraft's minimum only sets that
    // wait, and it gets the most the leader lease allows: votes still complete on a disk
    // whose fsync takes up to about a lease (150 ms at the defaults), not half of one.
    let vote_window = if standalone { election } else { election * 2 - 1 };
    let log_store = LogStore::open(&layout.log_file())?
        .with_fsync_warning(config.fsync_warning_threshold_ms)
        .with_force_sync(config.force_sync);
    if !config.force_sync {
        tracing::warn!(
            "forceSync=no: Raft log appends are written but not fsynced; an acknowledged write \
             survives a crash of this process, not of the machine or its power"
        );
    }
    let log_store = if standalone { log_store } else { log_store.with_vote_budget(vote_window) };
    // An ensemble member's own entries always go to the log's writer thread; a standalone
    // server's only while its workers are spread for many clients (see `LogStore::with_writer`).
    let offload: Option<crate::raft::log_store::Offload> = if !standalone {
        Some(Box::new(|| true))
    } else {
        placement.clone().map(|p| -> crate::raft::log_store::Offload { Box::new(move || p.is_spread()) })
    };
    let log_store = match offload {
        None => log_store,
        Some(offload) => log_store
            .with_writer(
                config.server_id,
                {
                    let placement = placement.clone();
                    move || {
                        if let Some(p) = &placement {
                            p.woke_from_outside();
                        }
                    }
                },
                offload,
            )
            .map_err(|e| ServerError::Raft(format!("cannot start the log writer thread: {e}")))?,
    };
    let leader_contact = Arc::new(crate::failover::LeaderContact::new(log_store.last_log()));
    let (applied, _) = tokio::sync::watch::channel(0i64);
    let shared =
        Arc::new(SharedTree { tree: RwLock::new(DataTree::new()), applied, snapshot_zxid: Default::default() });
    let watches = Arc::new(WatchManager::default());
    let sessions = Arc::new(SessionTracker::new(config.server_id));
    let effects = Arc::new(LocalEffects { watches: watches.clone(), sessions: sessions.clone() });
    let sm = StateMachine::open(&layout.snap_dir, shared.clone(), effects).map_err(ServerError::StateMachine)?;

    let raft_config = openraft::Config {
        cluster_name: "warden".into(),
        heartbeat_interval: heartbeat,
        election_timeout_min: vote_window,
        election_timeout_max: election * 2,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snap_count),
        max_in_snapshot_log_to_keep: 1000,
        // An ensemble's voters campaign only after a pre-vote (`failover::campaign`).
        enable_elect: standalone,
        // Replication reads an entry as soon as the log store has it in memory, not only after
        // the leader's own fsync (see `LogStore::with_writer`).
        broadcast_submitted_on_append: Some(true),
        ..Default::default()
    }
    .validate()
    .map_err(|e| ServerError::Raft(e.to_string()))?;
    let id = config.server_id;
    let network = PeerNetworkFactory::new(Duration::from_millis(heartbeat));
    // openraft spawns its tasks (core, state-machine worker, replication) on this runtime, the
    // one that serves the connections. A write's chain of tasks then hands over from one task
    // to the next on the same workers, often on the same thread: each hand-off to a thread of
    // another runtime cost a wake-up, which on 2 shared vCPUs waited 20-50 µs for a CPU
    // (BENCHMARKS.md, fifteenth pass; until then openraft had a runtime of its own).
    let raft = Raft::new(id, Arc::new(raft_config), network, log_store, sm)
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    if !raft.is_initialized().await.map_err(|e| ServerError::Raft(e.to_string()))? {
        // Every member initialises with the same membership from the same zoo.cfg; openraft
        // makes that safe (identical first entries), so no member needs a manual step.
        let mut members = BTreeMap::new();
        if standalone {
            members.insert(id, openraft::BasicNode { addr: String::new() });
        } else {
            for (sid, s) in config.servers.iter().filter(|(_, s)| !s.observer) {
                members.insert(*sid, openraft::BasicNode { addr: s.peer_addr() });
            }
        }
        match raft.initialize(members).await {
            Ok(()) => tracing::info!(members = config.servers.len().max(1), "initialised a new Raft group"),
            Err(e) => tracing::info!(error = %e, "not initialising (another member already did)"),
        }
    }
    if standalone {
        raft.wait(Some(Duration::from_secs(30)))
            .current_leader(id, "standalone server becomes leader")
            .await
            .map_err(|e| ServerError::Raft(e.to_string()))?;
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (serving_tx, serving_rx) = tokio::sync::watch::channel(standalone);
    let stats = Arc::new(crate::client::stats::ServerStats::default());
    let dispatcher = Dispatcher {
        raft: raft.clone(),
        shared: shared.clone(),
        watches,
        sessions,
        config: config.clone(),
        stats,
        proposer: crate::dispatch::propose::Proposer::start(raft.clone(), id, shared.clone()),
        serving: serving_rx,
        leader_contact,
    };

    let mut tasks = Vec::new();
    if let Some(me) = config.servers.get(&id) {
        let addr: SocketAddr = tokio::net::lookup_host(me.peer_addr())
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ServerError::Raft(format!("cannot resolve peer address {}", me.peer_addr())))?;
        let bind = SocketAddr::new(if addr.ip().is_loopback() { addr.ip() } else { [0, 0, 0, 0].into() }, addr.port());
        let peer_listener = listen(bind, crate::config::DEFAULT_LISTEN_BACKLOG)
            .map_err(|source| ServerError::Listen { addr: bind, source })?;
        tracing::info!(%bind, "peer port listening");
        let (h, stop) = (Arc::new(dispatcher.clone()), stop_rx.clone());
        tasks.push(tokio::spawn(crate::peer::serve(peer_listener, h, stop)));
        tasks.push(tokio::spawn(send_touches(dispatcher.clone(), stop_rx.clone())));
        tasks.push(tokio::spawn(crate::failover::run(
            raft.clone(),
            id,
            dispatcher.leader_contact.clone(),
            stop_rx.clone(),
        )));
        let timing = crate::failover::CampaignTiming {
            election: Duration::from_millis(election),
            lease: Duration::from_millis(election * 2),
            vote_window: Duration::from_millis(vote_window),
        };
        tasks.push(tokio::spawn(crate::failover::campaign(
            raft.clone(),
            id,
            timing,
            dispatcher.leader_contact.clone(),
            stop_rx.clone(),
        )));
    }
    if let Some(p) = placement {
        let stats = dispatcher.stats.clone();
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
        tasks.push(tokio::spawn(crate::placement::adapt(p, take_window, stop_rx.clone())));
    }
    tasks.push(tokio::spawn(watch_quorum(dispatcher.clone(), serving_tx, stop_rx.clone())));
    tasks.push(tokio::spawn(snapshot_by_txns(dispatcher.clone(), stop_rx.clone())));
    if !standalone {
        tasks.push(tokio::spawn(tick_while_needed(raft.clone(), id, stop_rx.clone())));
    }

    let (client_ip, client_port) = match config.servers.get(&id).and_then(|s| s.client.clone()) {
        Some((host, port)) => (host.parse().unwrap_or(config.client_port_address), port),
        None => (config.client_port_address, config.client_port),
    };
    let addr = SocketAddr::new(client_ip, client_port);
    let listener = listen(addr, config.listen_backlog()).map_err(|source| ServerError::Listen { addr, source })?;
    tracing::info!(%addr, backlog = config.listen_backlog(), data_dir = %config.data_dir.display(), server_id = id, "serving clients");

    tasks.push(tokio::spawn(expire_sessions(dispatcher.clone(), stop_rx.clone())));
    tasks.push(tokio::spawn(reap_containers(dispatcher.clone(), stop_rx.clone())));
    if config.admin_enable {
        let addr = SocketAddr::new(config.admin_address, config.admin_port);
        tasks.push(tokio::spawn(crate::admin::http::serve(addr, dispatcher.clone(), stop_rx.clone())));
    }
    if let Some(h) = metrics_handle {
        let addr = SocketAddr::new(config.metrics_host, config.metrics_port);
        tasks.push(tokio::spawn(crate::admin::metrics::serve(addr, dispatcher.clone(), h, stop_rx.clone())));
    }
    let clients = tokio::spawn(crate::client::listen(listener, dispatcher, stop_rx));

    shutdown_signal().await;
    tracing::info!("shutting down: no new connections");
    let _ = stop_tx.send(true);
    let _ = clients.await;
    for task in tasks {
        let _ = task.await;
    }
    if !standalone && raft.metrics().borrow_watched().current_leader == Some(id) {
        // Warden does not use openraft's leadership transfer, and voters refuse any candidate until the
        // leader lease has passed since our last heartbeat. Stopping Raft with the peer port
        // already closed is the hand-over signal: the lowest-numbered live voter sees the
        // refusal and campaigns the moment the lease runs out (see `failover`).
        tracing::info!(
            lease_ms = raft.config().election_timeout_max,
            "handing leadership over: heartbeats stop and the peer port is closed"
        );
    }
    tracing::info!("stopping raft");
    // Raft stops after the state machine's current task, which may be a snapshot of a large
    // tree being written. Every acknowledged write is already in the log, and a snapshot
    // left unfinished is only a `.tmp` file the next start removes, so the wait is bounded.
    if tokio::time::timeout(RAFT_STOP_LIMIT, raft.shutdown()).await.is_err() {
        tracing::warn!(
            limit_s = RAFT_STOP_LIMIT.as_secs(),
            "raft did not stop in time (a snapshot still being written?): exiting without it"
        );
    }
    tracing::info!("stopped");
    Ok(())
}

/// How long shutdown waits for Raft to stop.
pub const RAFT_STOP_LIMIT: Duration = Duration::from_secs(10);

/// Whether this server may serve clients: it knows a leader and, if it is the leader, a quorum
/// acknowledged it recently, or else it heard from the leader recently. Flips `serving`, which
/// closes client connections when false.
///
/// "Recently" is two leader leases (2 × `election_timeout_max`, 300 ms at tickTime 2000), but
/// never less than one tick. A quorum's acknowledgement can wait on a follower's fsync, and on
/// a slow disk that took longer than 300 ms now and then: the leader then dropped every client
/// while its ensemble was whole (seen in the compat suite). ZooKeeper allows `syncLimit` ticks
/// for the same decision; one tick keeps a cut-off member's service short.
async fn watch_quorum(
    d: Dispatcher,
    serving: tokio::sync::watch::Sender<bool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if d.config.servers.is_empty() {
        // A standalone server is its own quorum. Keep the sender alive until shutdown: a
        // dropped sender would wake every connection's `serving.changed()` forever.
        let _ = stop.changed().await;
        drop(serving);
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let limit = (d.raft.config().election_timeout_max * 2).max(u64::from(d.config.tick_time_ms));
    let mut last_term = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let m = d.raft.metrics().borrow_watched().clone();
        if m.current_term > last_term {
            // Each new term is an election this server took part in or learned of.
            metrics::counter!("warden_raft_elections").increment(m.current_term - last_term);
            last_term = m.current_term;
        }
        if m.current_leader == Some(d.config.server_id) {
            // Observers (`:observer` in server.N) are Raft learners: they replicate and serve
            // reads but do not vote. The leader adds any that are missing.
            let membership = m.membership_config.membership().clone();
            for (sid, s) in d.config.servers.iter().filter(|(_, s)| s.observer) {
                if membership.get_node(sid).is_none() {
                    let node = openraft::BasicNode { addr: s.peer_addr() };
                    match d.raft.add_learner(*sid, node, false).await {
                        Ok(_) => tracing::info!(observer = sid, "observer added as a Raft learner"),
                        Err(e) => tracing::warn!(observer = sid, error = %e, "adding observer failed"),
                    }
                }
            }
        }
        let ok = match m.current_leader {
            None => false,
            // The sole voter of a one-member ensemble (a zoo.cfg with one server.N line) is
            // its own quorum: with no follower to acknowledge it, the last acknowledgement
            // ages while it idles, and its service was suspended two leases after its last
            // write, for good (no client could connect to write again).
            Some(l) if l == d.config.server_id => {
                m.membership_config.membership().voter_ids().eq([d.config.server_id])
                    || crate::raft::millis_since_quorum_ack(&m).is_some_and(|ms| ms < limit)
            }
            // A follower serves while its leader is heard from: it does not campaign (so never
            // forgets the leader) until a majority has lost the leader too.
            Some(l) => d
                .leader_contact
                .last()
                .is_some_and(|(from, at)| from == l && at.elapsed() < Duration::from_millis(limit)),
        };
        if *serving.borrow() != ok {
            tracing::info!(serving = ok, leader = ?m.current_leader, "client service {}", if ok { "resumed" } else { "suspended" });
            let _ = serving.send(ok);
        }
    }
}

/// Takes a snapshot once `snapCount` txns were applied since the last one, as ZooKeeper counts
/// them: one Raft entry carries a whole group-commit batch, so openraft's own entry-count
/// policy (kept as a backstop) would let the log, and a restart's replay, grow many times
/// longer. Each server snapshots on its own, as in ZooKeeper.
async fn snapshot_by_txns(d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    use std::sync::atomic::Ordering;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut pending: Option<(i64, tokio::time::Instant)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let taken = d.shared.snapshot_zxid.load(Ordering::Relaxed);
        if let Some((from, since)) = pending {
            // Wait for the one asked for (or give up after a while and ask again).
            if taken == from && since.elapsed() < Duration::from_secs(60) {
                continue;
            }
            pending = None;
        }
        let applied = *d.shared.applied.borrow();
        if applied - taken >= d.config.snap_count as i64 {
            tracing::info!(applied, since_last = applied - taken, "snapCount txns since the last snapshot: taking one");
            if d.raft.trigger().snapshot().await.is_err() {
                return;
            }
            pending = Some((taken, tokio::time::Instant::now()));
        }
    }
}

/// Turns openraft's tick on only while an ensemble member leads others: the tick fires every
/// 13/64 of a heartbeat interval (about 5 ms at the default 25 ms) and drives nothing but the
/// election timer, which an ensemble's voters leave off (they campaign through
/// [`crate::failover`]), and a leader's heartbeats to its followers and observers. Each tick
/// woke a worker thread: an idle 3-member ensemble used 0.08–0.10 cores with it on every
/// member, 0.045–0.063 with this (BENCHMARKS.md, twenty-first pass). A standalone server keeps its tick
/// (it elects itself with it at start; turned off after that, a lone reader's get 1×1 p50
/// rose from 0.030 to 0.064 ms on the benchmark machine, whose idle vCPUs halt at once).
async fn tick_while_needed(raft: Raft, me: u64, mut stop: tokio::sync::watch::Receiver<bool>) {
    use openraft::async_runtime::WatchReceiver;
    let mut server = raft.server_metrics();
    loop {
        let needed = {
            let m = server.borrow_watched();
            let leading = m.state == openraft::ServerState::Leader && m.current_leader == Some(me);
            leading && m.membership_config.membership().nodes().any(|(id, _)| *id != me)
        };
        raft.runtime_config().tick(needed);
        tokio::select! {
            changed = server.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// A follower tells the leader which sessions it heard from (pings are answered locally).
async fn send_touches(d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period = Duration::from_millis((u64::from(d.config.tick_time_ms) / 4).clamp(20, 500));
    let mut tick = tokio::time::interval(period);
    let mut clients: std::collections::HashMap<u64, crate::peer::PeerClient> = Default::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let m = d.raft.metrics().borrow_watched().clone();
        let Some(leader) = m.current_leader.filter(|l| *l != d.config.server_id) else { continue };
        let touched = d.sessions.take_touched();
        if touched.is_empty() {
            continue;
        }
        let addr = m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone()).unwrap_or_default();
        let client = clients.entry(leader).or_insert_with(|| crate::peer::PeerClient::new(addr)).clone();
        if let Err(e) = client.call(crate::peer::PeerRequest::Touch(touched), Duration::from_secs(2)).await {
            tracing::debug!(error = %e, "session touches not delivered");
            clients.remove(&leader);
        }
    }
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
    let mut was_leader = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let leader_now = d.raft.metrics().borrow_watched().current_leader == Some(d.config.server_id);
        if !leader_now {
            was_leader = false;
            continue;
        }
        if !was_leader {
            // Failover grace: a new leader cannot know when followers last heard from sessions.
            // Two ticks of slack, like the tick rounding of ZooKeeper's ExpiryQueue plus the
            // time a client needs to give up on a frozen server and try the next one.
            d.sessions.grace_all(Duration::from_millis(2 * u64::from(d.config.tick_time_ms)));
            was_leader = true;
        }
        let known: Vec<(i64, i32)> = d.shared.read().sessions().map(|(id, s)| (*id, s.timeout_ms)).collect();
        for session_id in d.sessions.expired(known.into_iter()) {
            let d2 = d.clone();
            tokio::spawn(async move {
                let txn = Txn {
                    session_id: 0,
                    time_ms: now_ms(),
                    auth: Default::default(),
                    op: TxnOp::CloseSession { session_id },
                };
                match d2.propose_as_leader(txn).await {
                    Ok(_) => {
                        metrics::counter!("warden_sessions_expired").increment(1);
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
        if d.raft.metrics().borrow_watched().current_leader != Some(d.config.server_id) {
            continue;
        }
        let now = now_ms();
        let candidates: Vec<String> = {
            let tree = d.shared.read();
            tree.reapable().filter(|p| tree.is_reapable(p, now)).take(10_000).cloned().collect()
        };
        for path in candidates {
            let txn =
                Txn { session_id: 0, time_ms: now, auth: Default::default(), op: TxnOp::DeleteContainer { path } };
            if let Err(e) = d.propose_as_leader(txn).await {
                tracing::warn!(error = %e, "container removal failed");
                break;
            }
        }
    }
}
