//! openraft glue: the type configuration, the log store (entries in segment files, vote and
//! metadata in redb), the state machine (where zxids are assigned), the network adapter,
//! where their files live on disk ([`layout`]), and the runtime openraft's tasks run on
//! ([`runtime`]).
//!
//! A standalone server is a one-member group built through exactly the same path as an
//! ensemble member, so there is one write path. This module knows nothing of client
//! connections; it reports applied changes through an [`state_machine::ApplyHook`].

pub mod layout;
pub mod log_store;
pub mod network;
pub mod runtime;
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
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;

/// openraft's error types, specialised (openraft's `typ` convention).
pub mod typ {
    use super::TypeConfig;

    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<u64, E>;
    pub type ClientWriteError = openraft::error::ClientWriteError<u64, openraft::BasicNode>;
    pub type StorageError = openraft::StorageError<u64>;
    pub type Entry = openraft::Entry<TypeConfig>;
}

/// The zxid of the next txn applied to `tree`: one more than the last. Computed here and
/// nowhere else. Every replica applies the same log in the same order, so every txn gets the
/// same zxid everywhere, strictly increasing in commit order and dense like ZooKeeper's
/// (batched log entries carry several txns; blank and membership entries carry none).
pub fn next_zxid(tree: &DataTree) -> i64 {
    tree.last_zxid() + 1
}
