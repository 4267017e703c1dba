//! openraft behind a small facade: every openraft type and call is in this folder, so the
//! next alpha bump touches it alone. The rest of the server sees [`Raft`] (propose, read
//! index, leadership, status, serving RPCs), [`Status`], [`ProposeError`], and the message
//! types of [`network`] as opaque values it carries between members.
//!
//! Parts:
//! - [`batch`]: the log entry's payload (a batch of txns) and how a leader fills it at append;
//! - [`wait`]: the waiters of the txns this server proposed, keyed by log id (etcd's
//!   `pkg/wait`);
//! - [`log_store`], [`segment_log`]: the log (segment files, vote and metadata in redb);
//! - [`state_machine`]: applies entries to the tree and assigns each txn its zxid;
//! - [`snapshot`]: snapshot files, receiving one from the leader, and when to take one;
//! - [`network`]: the openraft network adapter over a [`network::Transport`] that the peer
//!   port provides;
//! - [`election`]: when an ensemble's voter campaigns (openraft's pre-vote, timed by us);
//! - [`serving`]: whether this member may serve clients (leader and quorum known);
//! - [`layout`]: where the files live.
//!
//! A standalone server is a one-member group started through exactly the same path as an
//! ensemble member: one write path. This module knows nothing of client connections; it
//! reports applied changes through a [`state_machine::ApplyHook`].

pub mod batch;
pub mod election;
pub mod layout;
pub mod log_store;
pub mod members;
pub mod network;
pub mod offline;
pub mod resync;
pub mod segment_log;
pub mod serving;
pub mod snapshot;
pub mod state_machine;
pub mod wait;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use crate::tree::txn::TxnResult;
use crate::tree::DataTree;
pub use batch::TxnBatch;

openraft::declare_raft_types!(
    /// Warden's Raft types: each log entry carries a [`TxnBatch`]; apply returns one
    /// [`TxnResult`] per txn.
    pub TypeConfig:
        D = TxnBatch,
        R = Vec<TxnResult>,
        NodeId = u64,
        Node = openraft::BasicNode,
);

/// openraft's handle, as this folder uses it.
type Inner = openraft::Raft<TypeConfig, state_machine::StateMachine>;

/// A leader's id (term and node), as votes and log ids carry it.
pub type LeaderId = openraft::alias::LeaderIdOf<TypeConfig>;
/// A log id: the committed leader id and the index.
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A vote.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// The membership as stored with a log id.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// A snapshot's meta.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot: its meta and the open file.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, tokio::fs::File>;

/// openraft's error types, specialised (openraft's `typ` convention).
pub mod typ {
    use super::TypeConfig;

    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<TypeConfig, E>;
    pub type ClientWriteError = openraft::error::ClientWriteError<TypeConfig>;
    pub type StorageError = openraft::StorageError<TypeConfig>;
    pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
}

/// Why a proposal (or a read-index check) did not produce a result. The client sees
/// ConnectionLoss: the outcome is in doubt.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("raft: {0}")]
    Raft(String),
}

/// The zxid of the next txn applied to `tree`: one more than the last. Computed here and
/// nowhere else. Every replica applies the same log in the same order, so every txn gets the
/// same zxid everywhere, strictly increasing in commit order and dense like ZooKeeper's
/// (batched log entries carry several txns; blank and membership entries carry none). A
/// reconfig's txn may skip ahead (see [`TxnOp::SetConfig`]), as ZooKeeper's zxids skip at a
/// new epoch.
///
/// [`TxnOp::SetConfig`]: crate::tree::txn::TxnOp::SetConfig
pub fn next_zxid(tree: &DataTree, txn: &crate::tree::txn::Txn) -> i64 {
    match &txn.op {
        crate::tree::txn::TxnOp::SetConfig { min_zxid, .. } => (tree.last_zxid() + 1).max(*min_zxid),
        _ => tree.last_zxid() + 1,
    }
}

/// This member's role, as openraft's server state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Candidate,
    Follower,
    Learner,
    Shutdown,
}

/// What this member knows of the group, read from openraft's metrics at one instant.
#[derive(Debug, Clone)]
pub struct Status {
    pub id: u64,
    pub term: u64,
    pub leader: Option<u64>,
    pub role: Role,
    /// The vote this member holds: term, node and whether a quorum granted it.
    pub vote: (u64, u64, bool),
    pub last_log_index: u64,
    pub applied_index: u64,
    pub snapshot_index: u64,
    /// Voters, by id.
    pub voters: Vec<u64>,
    /// Every member (voters and learners) and its peer address.
    pub members: BTreeMap<u64, String>,
    /// On the leader: milliseconds since a quorum last acknowledged it.
    pub quorum_ack_ms: Option<u64>,
    /// On the leader: each follower's matched index, how far it trails the last log index.
    pub replication_lag: Vec<(u64, u64)>,
}

impl Status {
    fn of(m: &openraft::RaftMetrics<TypeConfig>) -> Status {
        use openraft::Instant;
        let membership = m.membership_config.membership();
        let last = m.last_log_index.unwrap_or(0);
        Status {
            id: m.id,
            term: m.current_term,
            leader: m.current_leader,
            role: match m.state {
                openraft::ServerState::Leader => Role::Leader,
                openraft::ServerState::Candidate => Role::Candidate,
                openraft::ServerState::Follower => Role::Follower,
                openraft::ServerState::Learner => Role::Learner,
                openraft::ServerState::Shutdown => Role::Shutdown,
            },
            vote: (m.vote.leader_id.term, m.vote.leader_id.node_id, m.vote.is_committed()),
            last_log_index: last,
            applied_index: m.last_applied.map_or(0, |l| l.index),
            snapshot_index: m.snapshot.map_or(0, |l| l.index),
            voters: membership.voter_ids().collect(),
            members: membership.nodes().map(|(id, n)| (*id, members::peer_addr(&n.addr))).collect(),
            quorum_ack_ms: m
                .last_quorum_acked
                .as_ref()
                .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
            replication_lag: m
                .replication
                .iter()
                .flatten()
                .map(|(f, matched)| (*f, last.saturating_sub(matched.map_or(0, |l| l.index))))
                .collect(),
        }
    }

    /// The leader and its peer address, if one is known.
    pub fn leader_addr(&self) -> Option<(u64, String)> {
        self.leader.map(|l| (l, self.members.get(&l).cloned().unwrap_or_default()))
    }
}

/// How a member is started.
#[derive(Debug, Clone)]
pub struct Options {
    pub id: u64,
    /// Voters (id -> peer address) of a new group; one entry with an empty address for a
    /// standalone server. Used only the first time a member starts.
    pub voters: BTreeMap<u64, String>,
    /// Observers (id -> peer address): Raft learners the leader adds.
    pub observers: BTreeMap<u64, String>,
    pub standalone: bool,
    /// Whether this member may initialise a new group (every member of a new ensemble does,
    /// unless it joins a group another member initialised with imported state: see
    /// `crate::peer::bootstrap`).
    pub initialize: bool,
    pub heartbeat_ms: u64,
    /// `raft.electionTimeoutMs`.
    pub election_ms: u64,
    /// ZooKeeper's `snapCount` (txns between snapshots).
    pub snap_count: u64,
    /// Snapshot files are zstd-compressed (`snapshot.compression.method`).
    pub snapshot_compression: bool,
    /// Log entries kept after a snapshot (`commitLogCount`).
    pub commit_log_count: u64,
    /// ZooKeeper's `tickTime`: a member serves clients while it heard from its leader within
    /// the larger of one tick and two leader leases.
    pub tick_ms: u64,
    /// Where snapshots live (and snapshots from the leader are received).
    pub snapshot_dir: std::path::PathBuf,
}

impl Options {
    /// How long a candidate waits for vote answers (openraft's `election_timeout_min`). A
    /// voter answers only once its vote is on disk. An ensemble's voters time their
    /// campaigns themselves ([`election`]), so there openraft's minimum only sets that wait,
    /// and it gets the most the leader lease allows: votes still complete on a disk whose
    /// fsync takes up to about a lease (150 ms at the defaults), not half of one.
    pub fn vote_window_ms(&self) -> u64 {
        if self.standalone {
            self.election_ms
        } else {
            self.election_ms * 2 - 1
        }
    }
}

/// The Raft handle: openraft's, and this member's contact with its leader.
#[derive(Clone)]
pub struct Raft {
    inner: Inner,
    id: u64,
    contact: Arc<election::LeaderContact>,
    options: Arc<Options>,
    /// The highest log index a leader's AppendEntries brought this member.
    received: Arc<std::sync::atomic::AtomicU64>,
    /// Whether this member's tree diverged from its leader's (see [`resync`]).
    replica: Arc<resync::ReplicaCheck>,
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Raft {
    /// Starts a member on `log` and `sm`, reaching the others through `transport`. A new
    /// group is initialised with the voters of `options` (every member initialises with the
    /// same membership from the same zoo.cfg; openraft makes that safe, so no member needs a
    /// manual step); a standalone server waits until it leads.
    pub async fn start<T: network::Transport>(
        options: Options,
        log: log_store::LogStore,
        sm: state_machine::StateMachine,
        transport: Arc<T>,
    ) -> Result<Raft, String> {
        let (heartbeat, election) = (options.heartbeat_ms, options.election_ms);
        let config = openraft::Config {
            cluster_name: "warden".into(),
            heartbeat_interval: heartbeat,
            election_timeout_min: options.vote_window_ms(),
            election_timeout_max: election * 2,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(options.snap_count),
            max_in_snapshot_log_to_keep: options.commit_log_count,
            // An ensemble's voters campaign through `election::campaign`, with openraft's
            // pre-vote first.
            enable_elect: options.standalone,
            enable_pre_vote: Some(true),
            // Replication reads an entry as soon as the log store has it in memory, not only
            // after the leader's own fsync (see `LogStore::with_writer`).
            broadcast_submitted_on_append: Some(true),
            // A member of an ensemble that led before a restart is a follower after it, and
            // leads again only by winning a new term. Restored in its old term (openraft's
            // default), it went on numbering entries from its own log's end, but what it had
            // sent out before it stopped could be longer than what it kept: entries go to the
            // followers before the leader's own write (above), and a write that fails is
            // zeroed. Its new entries then took log ids a follower already held with other
            // contents, and the trees diverged (seen in the nemesis suite with a disk whose
            // fsync failed on the leader). A standalone server has nobody to diverge from.
            enable_leader_restore: Some(options.standalone),
            ..Default::default()
        }
        .validate()
        .map_err(text)?;
        let network = network::Network::new(transport, Duration::from_millis(heartbeat));
        // openraft spawns its tasks (core, state-machine worker, replication) on the current
        // runtime, the one that serves the connections. A write's chain of tasks then hands
        // over from one task to the next on the same workers, often on the same thread: each
        // hand-off to a thread of another runtime cost a wake-up, which on 2 shared vCPUs
        // waited 20-50 µs for a CPU (docs/perf/pass-15.md).
        let inner = Inner::new(options.id, Arc::new(config), network, log, sm).await.map_err(text)?;
        let raft = Raft {
            inner,
            id: options.id,
            contact: Arc::new(election::LeaderContact::new(
                serving::limit(&options),
                // What the leader sends after a member wakes arrives within a heartbeat or two.
                Duration::from_millis(options.heartbeat_ms * 3).max(Duration::from_millis(50)),
            )),
            options: Arc::new(options),
            received: Default::default(),
            replica: Default::default(),
        };
        if raft.options.initialize && !raft.inner.is_initialized().await.map_err(text)? {
            let members: BTreeMap<u64, openraft::BasicNode> = raft
                .options
                .voters
                .iter()
                .map(|(id, addr)| (*id, openraft::BasicNode { addr: addr.clone() }))
                .collect();
            let n = members.len();
            match raft.inner.initialize(members).await {
                Ok(()) => tracing::info!(members = n, "initialised a new Raft group"),
                Err(e) => tracing::info!(error = %e, "not initialising (another member already did)"),
            }
        }
        if raft.options.standalone {
            raft.inner
                .wait(Some(Duration::from_secs(30)))
                .current_leader(raft.id, "standalone server becomes leader")
                .await
                .map_err(text)?;
        }
        Ok(raft)
    }

    /// The highest log index a leader's AppendEntries brought this member (0 on a leader
    /// that never followed).
    pub fn received_index(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This member's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The options this member was started with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The leader lease: openraft's `election_timeout_max`.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.inner.config().election_timeout_max)
    }

    /// The heartbeat interval.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.inner.config().heartbeat_interval)
    }

    /// What this member knows now.
    pub fn status(&self) -> Status {
        Status::of(&self.inner.metrics().borrow_watched())
    }

    /// The current leader, if one is known.
    pub fn leader(&self) -> Option<u64> {
        self.inner.metrics().borrow_watched().current_leader
    }

    /// Whether this member may serve clients at this instant (the `serving` flag follows it
    /// every 50 ms; a handshake asks here, so that a member thawed after a pause cannot take
    /// a session in the moment before the flag catches up with it).
    pub fn may_serve(&self) -> bool {
        self.options.standalone || serving::may_serve(self, &self.status(), serving::limit(&self.options))
    }

    /// Whether this member is the leader now.
    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.id)
    }

    /// The current leader and its peer address, waiting up to `patience` for one to be known.
    pub async fn wait_for_leader(&self, patience: Duration) -> Option<(u64, String)> {
        let mut rx = self.inner.metrics();
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            {
                let m = rx.borrow_watched();
                if let Some(l) = m.current_leader {
                    let addr = m
                        .membership_config
                        .membership()
                        .get_node(&l)
                        .map(|n| members::peer_addr(&n.addr))
                        .unwrap_or_default();
                    return Some((l, addr));
                }
            }
            // Timed out, or Raft stopped (its metrics sender is gone).
            if !matches!(tokio::time::timeout_at(deadline, rx.changed()).await, Ok(Ok(()))) {
                return None;
            }
        }
    }

    /// A watch on the leader, for a task that must notice a change of leader.
    pub fn leader_watch(&self) -> LeaderWatch {
        LeaderWatch(self.inner.server_metrics())
    }

    /// Replicates `batch` and returns each txn's result once the entry is applied here.
    /// Refused unless this member leads: for decisions only the leader may make (session
    /// expiry, container removal). A leader that was frozen and does not yet know it was
    /// replaced cannot commit this, where forwarding would let its stale view win.
    pub async fn propose(&self, batch: TxnBatch) -> Result<Vec<TxnResult>, ProposeError> {
        match self.inner.client_write(batch).await {
            Ok(resp) => Ok(resp.data),
            Err(e) => Err(ProposeError::Raft(e.to_string())),
        }
    }

    /// Proposes an empty batch that the log store fills as it appends it (see
    /// [`batch::Fill`]). Returns once openraft took the proposal, with a future that
    /// resolves when openraft answers it: `Ok` once applied, or the reason it failed.
    pub async fn propose_unfilled(
        &self,
    ) -> Result<impl Future<Output = Result<(), ProposeError>> + Send + 'static, ProposeError> {
        let (responder, response) = openraft::impls::ProgressResponder::complete_only();
        self.inner
            .client_write_ff(TxnBatch::unfilled(), Some(responder))
            .await
            .map_err(|e| ProposeError::Raft(e.to_string()))?;
        Ok(async move {
            match response.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(ProposeError::Raft(e.to_string())),
                Err(e) => Err(ProposeError::Raft(e.to_string())),
            }
        })
    }

    /// Confirms this member's leadership with a quorum (openraft's read index) and returns
    /// once the read point is applied here. One round that misses its quorum is not the
    /// answer: a heartbeat round gives each follower only one heartbeat interval to reply, and
    /// a follower busy with an fsync on a slow disk misses it. Rounds are repeated until one
    /// succeeds, this member is no longer the leader, or `patience` has passed.
    pub async fn ensure_linearizable(&self, patience: Duration) -> Result<(), ProposeError> {
        use openraft::error::LinearizableReadError;
        use openraft::error::RaftError;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.inner.ensure_linearizable(openraft::raft::ReadPolicy::ReadIndex).await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(e)))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, "read index round missed its quorum; trying again");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(ProposeError::Raft(e.to_string())),
            }
        }
    }

    /// Asks openraft to take a snapshot now.
    pub async fn trigger_snapshot(&self) -> Result<(), ProposeError> {
        self.inner.trigger().snapshot().await.map_err(|e| ProposeError::Raft(e.to_string()))
    }

    /// Adds an observer as a Raft learner (on the leader).
    pub async fn add_learner(&self, id: u64, addr: String) -> Result<(), ProposeError> {
        self.inner
            .add_learner(id, openraft::BasicNode { addr }, false)
            .await
            .map(|_| ())
            .map_err(|e| ProposeError::Raft(e.to_string()))
    }

    /// Turns openraft's tick on or off.
    fn set_tick(&self, on: bool) {
        self.inner.runtime_config().tick(on);
    }

    /// Answers a Raft RPC from another member (not a snapshot chunk: see
    /// [`snapshot::Receiving`]). An AppendEntries from a leader whose term is at least ours
    /// counts as contact with the leader.
    pub async fn answer(&self, req: network::RaftRequest) -> network::RaftResponse {
        use network::RaftRequest as Q;
        use network::RaftResponse as A;
        match req {
            // A diverged member takes no entries until it has the leader's snapshot: its
            // committed index must stay below the snapshot's (see `resync`).
            Q::AppendEntries(_) if self.diverged() => {
                A::AppendEntries(Err(openraft::error::RaftError::Fatal(openraft::error::Fatal::Stopped)))
            }
            Q::AppendEntries(rpc) => {
                self.heard_from(&rpc.vote, rpc.leader_commit.map(|l| l.index));
                if let Some(last) = rpc.entries.last() {
                    self.received.fetch_max(last.log_id.index, std::sync::atomic::Ordering::Relaxed);
                }
                A::AppendEntries(self.inner.append_entries(rpc).await)
            }
            Q::Vote(rpc) => A::Vote(self.inner.vote(rpc).await),
            Q::PreVote(rpc) => A::PreVote(self.inner.pre_vote(rpc).await),
            Q::SnapshotChunk { .. } => A::SnapshotChunk(Err("a snapshot chunk outside a transfer".into())),
            Q::TransferLeader(rpc) => {
                A::TransferLeader(self.inner.handle_transfer_leader(rpc).await.map_err(|e| e.to_string()))
            }
        }
    }

    /// Records contact from a leader whose vote is at least ours: a deposed leader that has
    /// not yet learnt of its successor does not count.
    fn heard_from(&self, vote: &Vote, leader_commit: Option<u64>) {
        // Terms, not votes: `Vote`'s comparison panics on two committed votes of one term.
        let current = self.inner.metrics().borrow_watched().current_term;
        if vote.leader_id.term >= current {
            self.contact.heard(vote.leader_id.node_id, leader_commit);
        }
    }

    /// Starts the background tasks a member needs beside openraft's own: the election timer
    /// and fast failover of an ensemble's voters, observers added as learners, the tick while
    /// leading, client service by quorum, and snapshots by `snapCount`. `serving` is flipped
    /// as client service starts and stops; `applied` is the state machine's last applied zxid
    /// and `snapshot_zxid` the zxid of the newest snapshot.
    pub fn spawn_tasks(
        &self,
        shared: Arc<state_machine::SharedTree>,
        serving: tokio::sync::watch::Sender<bool>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if !self.options.standalone {
            tasks.push(tokio::spawn(election::fast_failover(self.clone(), stop.clone())));
            tasks.push(tokio::spawn(election::campaign(self.clone(), stop.clone())));
            tasks.push(tokio::spawn(tick_while_needed(self.clone(), stop.clone())));
        }
        tasks.push(tokio::spawn(serving::watch(self.clone(), serving, stop.clone())));
        tasks.push(tokio::spawn(snapshot::by_txns(self.clone(), shared, stop)));
        tasks
    }

    /// A leader about to stop hands leadership to the voter whose log matches its own
    /// (openraft's transfer-leader), once one does, waiting at most `limit` in all; whether
    /// another member leads now. Proposals stop from the moment the transfer starts.
    pub async fn hand_over(&self, limit: Duration) -> bool {
        self.hand_over_among(&|_| true, limit).await
    }

    /// [`Raft::hand_over`] to one of the voters `allowed` accepts (a reconfig that removes
    /// this leader hands over to a member that stays).
    pub async fn hand_over_among(&self, allowed: &(dyn Fn(u64) -> bool + Sync), limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let me = self.id();
        let target = loop {
            let m = self.inner.metrics().borrow_watched().clone();
            if m.current_leader != Some(me) {
                return m.current_leader.is_some();
            }
            let last = m.last_log_index;
            let voters: Vec<u64> =
                m.membership_config.membership().voter_ids().filter(|v| *v != me && allowed(*v)).collect();
            // The most caught-up voter, once one has all of this leader's log.
            let best = m.replication.as_ref().and_then(|r| {
                voters.iter().filter_map(|v| r.get(v).map(|matched| (matched.as_ref().map(|l| l.index), *v))).max()
            });
            match best {
                Some((matched, v)) if matched >= last => break v,
                _ if tokio::time::Instant::now() >= deadline => return false,
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        };
        tracing::info!(to = target, "handing leadership over");
        if self.inner.trigger().transfer_leader(target).await.is_err() {
            return false;
        }
        let mut leader = self.leader_watch();
        tokio::time::timeout_at(deadline, leader.other_than(me)).await.is_ok()
    }

    /// Resolves, with openraft's error, once Raft's core has stopped on its own: a write to
    /// the log or the state machine failed (a full or failing disk). Never while it runs, nor
    /// after [`Raft::shutdown`]. It polls (openraft's full metrics change after every turn
    /// of its core, and a waiter woken for each would cost every write a wake-up).
    pub async fn stopped_by_fault(&self) -> String {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match &self.inner.metrics().borrow_watched().running_state {
                Ok(()) | Err(openraft::error::Fatal::Stopped) => {}
                Err(e) => return e.to_string(),
            }
        }
    }

    /// Stops Raft, waiting at most `limit`; whether it stopped in time.
    pub async fn shutdown(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.inner.shutdown()).await.is_ok()
    }
}

/// A watch on who leads.
pub struct LeaderWatch(openraft::alias::WatchReceiverOf<TypeConfig, openraft::metrics::RaftServerMetrics<TypeConfig>>);

impl LeaderWatch {
    /// Resolves once Raft names a leader other than `leader_id` (never, if Raft stops).
    ///
    /// It watches openraft's server metrics (leader, vote, state, membership), which change
    /// only when one of those does. The full metrics are sent after every turn of openraft's
    /// core, changed or not, and a forwarded batch waiting on them was woken three or more
    /// times per write (docs/perf/pass-21.md).
    pub async fn other_than(&mut self, leader_id: u64) {
        loop {
            if matches!(self.0.borrow_and_update().current_leader, Some(l) if l != leader_id) {
                return;
            }
            if self.0.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Turns openraft's tick on only while an ensemble member leads others: the tick fires every
/// 13/64 of a heartbeat interval (about 5 ms at the default 25 ms) and drives nothing but the
/// election timer, which an ensemble's voters leave off (they campaign through [`election`]),
/// and a leader's heartbeats to its followers and observers. Each tick woke a worker thread:
/// an idle 3-member ensemble used 0.08–0.10 cores with it on every member, 0.045–0.063 with
/// this (docs/perf/pass-21.md). A standalone server keeps its tick (it elects itself with it
/// at start; turned off after that, a lone reader's get 1×1 p50 rose from 0.030 to 0.064 ms
/// on the benchmark machine, whose idle vCPUs halt at once).
async fn tick_while_needed(raft: Raft, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut server = raft.inner.server_metrics();
    loop {
        let needed = {
            let m = server.borrow_watched();
            let leading = m.state == openraft::ServerState::Leader && m.current_leader == Some(raft.id);
            leading && m.membership_config.membership().nodes().any(|(id, _)| *id != raft.id)
        };
        raft.set_tick(needed);
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
