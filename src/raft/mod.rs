//! openraft glue: the type configuration, the log store (entries in segment files, vote and
//! metadata in redb), the state machine (where zxids are assigned), the network adapter,
//! and where their files live on disk ([`layout`]).
//!
//! A standalone server is a one-member group built through exactly the same path as an
//! ensemble member, so there is one write path. This module knows nothing of client
//! connections; it reports applied changes through an [`state_machine::ApplyHook`].

pub mod layout;
pub mod log_store;
pub mod network;
pub mod segment_log;
pub mod state_machine;

use crate::tree::DataTree;
use crate::txn::TxnBatch;
use crate::txn::TxnResult;

openraft::declare_raft_types!(
    /// Warden's Raft types: each log entry carries a [`TxnBatch`]; apply returns one
    /// [`TxnResult`] per txn.
    pub TypeConfig:
        D = TxnBatch,
        R = Vec<TxnResult>,
        NodeId = u64,
        Node = openraft::BasicNode,
);

/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig, state_machine::StateMachine>;

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

/// Milliseconds since a quorum last acknowledged this leader (`None` if it is no leader, or
/// one no quorum has acknowledged yet).
pub fn millis_since_quorum_ack(m: &openraft::RaftMetrics<TypeConfig>) -> Option<u64> {
    use openraft::Instant;
    m.last_quorum_acked.as_ref().map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX))
}

/// The zxid of the next txn applied to `tree`: one more than the last. Computed here and
/// nowhere else. Every replica applies the same log in the same order, so every txn gets the
/// same zxid everywhere, strictly increasing in commit order and dense like ZooKeeper's
/// (batched log entries carry several txns; blank and membership entries carry none).
pub fn next_zxid(tree: &DataTree) -> i64 {
    tree.last_zxid() + 1
}
