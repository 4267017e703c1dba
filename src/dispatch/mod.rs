//! ZooKeeper's request pipeline, by its own names, behind one handle ([`Dispatcher`]) that the
//! client port calls:
//! - **connect** ([`connect`], `ZooKeeperServer.processConnectRequest`): creates or resumes a
//!   session, attaches a connection to it, `addauth`;
//! - **prep** ([`prep`], `PrepRequestProcessor`): classifies each typed request as a local
//!   read or a replicated write (the one read/write table), checks what ZooKeeper checks
//!   before its log, and stamps time and the caller's identities into the txn;
//! - **propose** ([`propose`]): group commit through Raft on the leader, forwarding from a
//!   follower; a write returns once applied here (or committed, see [`Dispatcher::write`]);
//! - **order** ([`order`]): which of a session's writes wait for its earlier reads;
//! - **read** ([`read`], `FinalRequestProcessor` for reads): served from the local tree, with
//!   watches registered under the same tree lock; `sync`;
//! - **reply** ([`reply`]): the one place internal errors become ZooKeeper error codes;
//! - **peer** ([`peer`]): what the peer port asks of this server (forwarded writes, read
//!   index, touches);
//! - **reconfig** ([`reconfig`]): changing the members, run on the leader;
//! - **containers** ([`containers`], `ContainerManager`): the leader removes empty containers
//!   and expired TTL nodes.
//!
//! The client port sees only this handle: never the tree, the watch manager, the session
//! tracker or Raft.

pub mod connect;
pub mod containers;
pub mod digests;
pub mod order;
pub mod peer;
pub mod prep;
pub mod propose;
pub mod read;
pub mod reconfig;
pub mod reply;

use std::sync::Arc;

use crate::config::Config;
use crate::peer::Peers;
use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::session::SessionTracker;
use crate::tree::acl::AuthIds;
use crate::watch::WatchManager;

pub use connect::Connected;
pub use connect::Session;
pub use prep::Prepped;
pub use prep::Write;
pub use reply::Reply;

/// An event queued to a connection (a watch firing), with the zxid of the change.
pub use crate::watch::Event;

/// The caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub session_id: i64,
    /// Identities: `ip:<addr>` first, then those added by `addauth`.
    auth: AuthIds,
}

impl Caller {
    /// The identities of this caller, in order.
    pub fn identities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.auth.iter().map(|a| (a.scheme.as_str(), a.id.as_str()))
    }
}

/// The parts of the server the pipeline works with.
struct Parts {
    raft: Raft,
    shared: Arc<SharedTree>,
    watches: Arc<WatchManager>,
    sessions: Arc<SessionTracker>,
    config: Arc<Config>,
    proposer: propose::Proposer,
    peers: Peers,
    /// False while this server cannot serve clients (no leader, or a leader without a quorum):
    /// connections close and new ones are refused, so clients move to another server.
    serving: tokio::sync::watch::Receiver<bool>,
    /// The last zxid of the ZooKeeper data this member's data dir held when it started new,
    /// for the bootstrap of members still starting (`crate::peer::bootstrap`).
    zookeeper_zxid: Option<i64>,
    /// Shared `sync` rounds (see [`Dispatcher::sync_batched`]).
    sync_rounds: std::sync::Mutex<SyncRounds>,
    /// Held while this leader runs a reconfig (one at a time: ReconfigInProgress).
    reconfig_lock: tokio::sync::Mutex<()>,
    /// Held while a local session becomes global (`Dispatcher::upgrade`).
    upgrades: tokio::sync::Mutex<()>,
}

/// Callers waiting for the next shared `sync` round, and whether one runs.
#[derive(Default)]
struct SyncRounds {
    running: bool,
    next: Vec<tokio::sync::oneshot::Sender<Result<(), crate::raft::ProposeError>>>,
}

/// The pipeline handle shared by every connection. Cheap to clone: one reference count (each
/// request's job holds one; cloning field by field was 2% of a set-heavy server's CPU).
#[derive(Clone)]
pub struct Dispatcher(Arc<Parts>);

/// What [`Dispatcher::new`] is built from.
pub struct DispatcherParts {
    pub raft: Raft,
    pub shared: Arc<SharedTree>,
    pub watches: Arc<WatchManager>,
    pub sessions: Arc<SessionTracker>,
    pub config: Arc<Config>,
    pub proposer: propose::Proposer,
    pub peers: Peers,
    pub serving: tokio::sync::watch::Receiver<bool>,
    pub zookeeper_zxid: Option<i64>,
}

impl Dispatcher {
    /// The pipeline over these parts.
    pub fn new(p: DispatcherParts) -> Dispatcher {
        Dispatcher(Arc::new(Parts {
            raft: p.raft,
            shared: p.shared,
            watches: p.watches,
            sessions: p.sessions,
            config: p.config,
            proposer: p.proposer,
            peers: p.peers,
            serving: p.serving,
            zookeeper_zxid: p.zookeeper_zxid,
            sync_rounds: Default::default(),
            reconfig_lock: Default::default(),
            upgrades: Default::default(),
        }))
    }

    /// The server's configuration (read-only).
    pub fn config(&self) -> &Config {
        &self.0.config
    }

    /// Whether this server serves clients now, and a watch on it.
    pub fn serving(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.serving.clone()
    }

    /// The zxid of the last applied change (reads and pings reply with it).
    pub fn last_zxid(&self) -> i64 {
        self.0.shared.read().last_zxid()
    }
}
