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
use crate::tree::TreeError;

/// One replicated change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// The session on whose behalf the change is made (0 for server-internal txns).
    pub session_id: i64,
    /// Proposer's wall-clock time in ms since the epoch (ctime/mtime, TTL checks).
    pub time_ms: i64,
    /// The caller's identities at proposal time.
    /// (Serialized as the sequence a `Vec` would be: the log format does not change.)
    pub auth: crate::tree::acl::AuthIds,
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

impl std::fmt::Display for TxnBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} txns", self.txns.len())
    }
}

impl TxnBatch {
    /// A batch of these txns.
    pub fn new(txns: Vec<Txn>) -> TxnBatch {
        TxnBatch { txns: std::sync::Arc::new(txns), hooks: LocalHooks::default() }
    }

    /// A batch proposed empty, its txns taken when the log store appends it from the source
    /// given to [`LocalHooks::filled_from`]. The leader proposes its batches this way: the
    /// entry takes every txn that arrived until the moment openraft appends it, rather than
    /// those that had arrived when the proposer last ran.
    pub fn unfilled(hooks: LocalHooks) -> TxnBatch {
        TxnBatch { txns: std::sync::Arc::new(Vec::new()), hooks }
    }

    /// Takes the txns (and hands their waiters to the hooks) if this batch was proposed
    /// unfilled; called by the log store once, as openraft appends the entry, before it is
    /// stored or sent anywhere.
    pub fn fill(&mut self) {
        if let Some(txns) = self.hooks.fill() {
            self.txns = std::sync::Arc::new(txns);
        }
    }
}

/// Where a batch proposed empty takes its txns from (the proposer's inbox).
pub trait Fill: Send + Sync {
    /// The txns of one batch, in order, with one waiter each.
    fn take(&self) -> (Vec<Txn>, Vec<Answer>);
}

/// Where one txn's result goes on the server that proposed it: the waiter of the connection
/// that sent it.
pub type Answer = tokio::sync::oneshot::Sender<Result<TxnResult, crate::dispatch::ProposeError>>;

/// What the server that proposed a batch learns about it before openraft answers: each txn's
/// result the moment the state machine has applied that txn. The state machine answers each
/// txn's waiter itself, as ZooKeeper's final processor answers each request once applied, so
/// a client's reply goes out while the rest of its batch is still being applied rather than
/// after the whole batch.
/// Not part of the replicated data: hooks never compare, encode or
/// travel to another server; an entry read back from disk has none.
#[derive(Clone, Default)]
pub struct LocalHooks(Option<std::sync::Arc<HooksInner>>);

/// The txns' waiters in batch order, until the state machine takes them to answer, or the
/// proposer takes them back to answer from openraft's reply or to fail them.
struct Answers(std::sync::Mutex<Option<Vec<Answer>>>);

impl Answers {
    fn take(&self) -> Option<Vec<Answer>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

struct HooksInner {
    answers: std::sync::Arc<Answers>,
    /// Dropped with the entry's last copy if the entry is applied without its hooks.
    applied: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Where an unfilled batch takes its txns from, until it does (see [`TxnBatch::fill`]).
    source: std::sync::Mutex<Option<Box<dyn Fill>>>,
}

/// The proposer's ends of a batch's [`LocalHooks`].
pub struct HookWaits {
    /// Resolves once the state machine applied the entry here and answered every waiter it
    /// took; dropped unresolved if the entry is applied without its hooks.
    pub applied: tokio::sync::oneshot::Receiver<()>,
    answers: std::sync::Arc<Answers>,
}

impl HookWaits {
    /// The waiters, unless the state machine took them: answered then, or being answered.
    pub fn take_answers(&self) -> Option<Vec<Answer>> {
        self.answers.take()
    }
}

impl LocalHooks {
    /// Hooks answering `answers` (one per txn of the batch, in order), and the ends to wait on.
    pub fn new(answers: Vec<Answer>) -> (LocalHooks, HookWaits) {
        LocalHooks::with(answers, None)
    }

    /// Hooks of a batch proposed unfilled ([`TxnBatch::unfilled`]): its txns and their waiters
    /// come from `source` when the batch is filled.
    pub fn filled_from(source: Box<dyn Fill>) -> (LocalHooks, HookWaits) {
        LocalHooks::with(Vec::new(), Some(source))
    }

    fn with(answers: Vec<Answer>, source: Option<Box<dyn Fill>>) -> (LocalHooks, HookWaits) {
        let (tx, applied) = tokio::sync::oneshot::channel();
        let answers = std::sync::Arc::new(Answers(std::sync::Mutex::new(Some(answers))));
        let inner = HooksInner {
            answers: answers.clone(),
            applied: std::sync::Mutex::new(Some(tx)),
            source: std::sync::Mutex::new(source),
        };
        (LocalHooks(Some(std::sync::Arc::new(inner))), HookWaits { applied, answers })
    }

    /// Takes the txns from the source, once, keeping their waiters to answer.
    fn fill(&self) -> Option<Vec<Txn>> {
        let h = self.0.as_ref()?;
        let source = h.source.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()?;
        let (txns, answers) = source.take();
        *h.answers.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(answers);
        Some(txns)
    }

    /// The state machine starts applying the entry: the waiters to answer, one per txn in
    /// order, if this server proposed it and nobody answered them yet.
    pub fn take_answers(&self) -> Option<Vec<Answer>> {
        self.0.as_ref().and_then(|h| h.answers.take())
    }

    /// The state machine applied the whole entry (and answered the waiters it took).
    pub fn applied(&self) {
        let waiting =
            self.0.as_ref().and_then(|h| h.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if let Some(tx) = waiting {
            let _ = tx.send(());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::acl::AuthId;

    /// The log and peer format of a txn's identities is a postcard sequence, as it was when
    /// they were a `Vec`: entries written before they became shared still decode.
    #[test]
    fn shared_identities_encode_as_the_vec_did() {
        #[derive(Serialize)]
        struct Before {
            session_id: i64,
            time_ms: i64,
            auth: Vec<AuthId>,
            op: TxnOp,
        }
        let ids = vec![
            AuthId { scheme: "ip".into(), id: "127.0.0.1".into() },
            AuthId { scheme: "digest".into(), id: "u:x".into() },
        ];
        let op = TxnOp::CloseSession { session_id: 7 };
        let before = postcard::to_stdvec(&Before { session_id: 7, time_ms: 9, auth: ids.clone(), op: op.clone() })
            .expect("encode");
        let now = Txn { session_id: 7, time_ms: 9, auth: ids.clone().into(), op };
        assert_eq!(postcard::to_stdvec(&now).expect("encode"), before);
        let back: Txn = postcard::from_bytes(&before).expect("decode");
        assert_eq!(&back.auth[..], &ids[..]);
    }
}
