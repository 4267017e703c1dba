//! The replicated command (openraft's app data) and its result.
//!
//! A [`Txn`] carries everything apply needs that is not a pure function of the tree: the
//! proposer's wall-clock time, the caller's identities (for ACL checks and `auth` expansion),
//! new session ids and passwords. Apply on every replica therefore computes the same result,
//! errors included. Encoded with serde (postcard) inside the Raft log; the enum is append-only
//! so old log entries stay readable.

use bytes::Bytes;
use serde::Deserialize;
use serde::Serialize;

use crate::tree::acl::AclEntry;
use crate::tree::acl::AuthId;
use crate::tree::TreeError;

/// One replicated change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// The session on whose behalf the change is made (0 for server-internal txns).
    pub session_id: i64,
    /// Proposer's wall-clock time in ms since the epoch (ctime/mtime, TTL checks).
    pub time_ms: i64,
    /// The caller's identities at proposal time.
    pub auth: Vec<AuthId>,
    /// What to do.
    pub op: TxnOp,
}

/// A create, as validated by prep (mode flags and TTL range already checked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOp {
    pub path: String,
    pub data: Option<Bytes>,
    pub acl: Vec<AclEntry>,
    /// `CreateMode` flags.
    pub flags: i32,
    /// TTL in ms for TTL modes, otherwise -1.
    pub ttl: i64,
}

/// The operations of the replicated log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    CreateSession {
        session_id: i64,
        timeout_ms: i32,
        passwd: Bytes,
    },
    CloseSession {
        session_id: i64,
    },
    Create(CreateOp),
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Option<Bytes>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<AclEntry>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    /// All or nothing; holds only Create/Delete/SetData/Check.
    Multi(Vec<TxnOp>),
    /// Removal of an empty container or an expired TTL node, re-checked at apply.
    DeleteContainer {
        path: String,
    },
    /// An op that prep already refused, kept in its multi so the multi reports it per op.
    Fail(TreeError),
}

/// The result of one op inside a multi.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    Created {
        path: String,
        stat: jute::Stat,
    },
    Deleted,
    SetData {
        stat: jute::Stat,
    },
    Checked,
    /// The op that failed, or (`RuntimeInconsistency`) one after it that was not attempted.
    Error(TreeError),
    /// An op before the failing one, undone: ZooKeeper reports it as an error result with 0.
    RolledBack,
}

/// What a successful txn produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOutput {
    SessionCreated,
    SessionClosed,
    Created {
        path: String,
        stat: jute::Stat,
    },
    Deleted,
    Stat(jute::Stat),
    Checked(jute::Stat),
    /// Per-op results; `failed` is set when the multi was rolled back.
    Multi {
        results: Vec<OpResult>,
        failed: bool,
    },
}

/// One Raft log entry: the txns the proposer batched together (group commit: one entry, one
/// fsync, many txns). Each txn still gets its own zxid at apply. Shared (`Arc`): the log
/// store's in-memory tail, replication and apply hold the same batch without copying it; the
/// encoding is that of a plain `Vec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnBatch {
    pub txns: std::sync::Arc<Vec<Txn>>,
    /// The proposer's hooks on this entry (not encoded; set only on the server that proposed
    /// it).
    #[serde(skip)]
    pub hooks: LocalHooks,
}

impl TxnBatch {
    /// A batch of these txns.
    pub fn new(txns: Vec<Txn>) -> TxnBatch {
        TxnBatch { txns: std::sync::Arc::new(txns), hooks: LocalHooks::default() }
    }
}

/// What the server that proposed a batch learns about it before openraft answers: that the
/// log store made it durable here, and (a copy of) its results as soon as the state machine
/// applied it.
/// (openraft 0.9 answers a write only when its core task is free, and that task waits for the
/// next entry's fsync first.) Not part of the replicated data: hooks never compare, encode or
/// travel to another server; an entry read back from disk has none.
#[derive(Clone, Default)]
pub struct LocalHooks(Option<std::sync::Arc<HooksInner>>);

struct HooksInner {
    durable: std::sync::Arc<tokio::sync::Notify>,
    applied: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Vec<TxnResult>>>>,
}

/// The proposer's ends of a batch's [`LocalHooks`].
pub struct HookWaits {
    /// Notified once the entry is durable in this server's log.
    pub durable: std::sync::Arc<tokio::sync::Notify>,
    /// The batch's results once applied here.
    pub applied: tokio::sync::oneshot::Receiver<Vec<TxnResult>>,
}

impl LocalHooks {
    /// Hooks, and the ends to wait on.
    pub fn new() -> (LocalHooks, HookWaits) {
        let durable = std::sync::Arc::new(tokio::sync::Notify::new());
        let (tx, applied) = tokio::sync::oneshot::channel();
        let inner = HooksInner { durable: durable.clone(), applied: std::sync::Mutex::new(Some(tx)) };
        (LocalHooks(Some(std::sync::Arc::new(inner))), HookWaits { durable, applied })
    }

    /// The log store made the entry durable.
    pub fn durable(&self) {
        if let Some(h) = &self.0 {
            h.durable.notify_one();
        }
    }

    /// The state machine applied the entry: hands a copy of the results to the proposer, if
    /// it waits through these hooks.
    pub fn applied(&self, results: &[TxnResult]) {
        let waiting = self.0.as_ref().and_then(|h| h.applied.lock().ok().and_then(|mut s| s.take()));
        if let Some(tx) = waiting {
            let _ = tx.send(results.to_vec());
        }
    }
}

impl PartialEq for LocalHooks {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LocalHooks {}

impl std::fmt::Debug for LocalHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "LocalHooks(set)" } else { "LocalHooks(none)" })
    }
}

/// The state machine's answer for one txn: its zxid and outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResult {
    pub zxid: i64,
    pub outcome: Result<TxnOutput, TreeError>,
}
