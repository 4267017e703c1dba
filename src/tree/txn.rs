//! The txn language: the replicated command and its result, as pure data the tree owns.
//!
//! A [`Txn`] carries everything apply needs that is not a pure function of the tree: the
//! proposer's wall-clock time, the caller's identities (for ACL checks and `auth` expansion),
//! new session ids and passwords. Apply on every replica therefore computes the same result,
//! errors included. Encoded with serde (postcard) inside the Raft log and the peer protocol;
//! the enum is append-only so old log entries stay readable. How txns are batched into log
//! entries and how a proposer learns their results is the Raft side's business
//! (`crate::raft::batch`), not this module's. ZooKeeper's counterpart: `TxnHeader` and the
//! `*Txn` records of `zookeeper.jute`.

use bytes::Bytes;
use serde::Deserialize;
use serde::Serialize;

use super::acl::AclEntry;
use super::TreeError;

/// One replicated change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// The session on whose behalf the change is made (0 for server-internal txns).
    pub session_id: i64,
    /// The leader's wall-clock time in ms since the epoch when it proposed the txn (ctime,
    /// mtime, TTL checks): a follower's forwarded txn is stamped again by the leader.
    pub time_ms: i64,
    /// The caller's identities at proposal time.
    /// (Serialized as the sequence a `Vec` would be: the log format does not change.)
    pub auth: super::acl::AuthIds,
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
    /// A reconfig's new configuration (`server.N=...` lines, each ending in a newline) for
    /// `/zookeeper/config`; apply appends `version=<zxid in hex>` (ZooKeeper's reconfig txn).
    /// Its zxid is at least `min_zxid`: one above the version it replaces, so that versions
    /// grow even from a file-named version (`.dynamic.100000000`) above the ensemble's zxids.
    SetConfig {
        servers: String,
        min_zxid: i64,
    },
    /// A create, setData or multi proposed with `zookeeper.enforceQuota` on: apply refuses
    /// any of its ops that would take a quota's usage past a hard limit (QuotaExceeded). The
    /// proposer's setting travels with the op, so every replica decides alike.
    QuotaEnforced(Box<TxnOp>),
    /// The admin `restore`: the bytes of a ZooKeeper snapshot file to replace the tree with,
    /// sessions kept (`DataTree::restore_onto`). The state machine parses and applies it
    /// (parsing is `zkdata`'s, above this module); [`DataTree::apply`](super::DataTree::apply)
    /// refuses it.
    Restore {
        snapshot: Bytes,
    },
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
    /// The tree was replaced by a snapshot's ([`TxnOp::Restore`]).
    Restored,
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
