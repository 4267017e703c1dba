//! How txns ride the Raft log: one log entry carries a [`TxnBatch`] (group commit: one entry,
//! one fsync, many txns; each txn still gets its own zxid at apply), and a leader may propose
//! a batch empty and have the log store fill it from the proposer's queue at the moment
//! openraft appends it ([`Fill`]). Nothing here knows who proposed a txn or how its client is
//! answered: that is [`super::wait`]'s registry, keyed by log id.

use std::sync::Arc;

use serde::Deserialize;
use serde::Serialize;

use super::LogId;
use crate::tree::txn::Txn;

/// One Raft log entry's txns. Shared (`Arc`): the log store's in-memory tail, replication and
/// apply hold the same batch without copying it. Encoded as the plain sequence of txns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnBatch {
    pub txns: Arc<Vec<Txn>>,
    /// Proposed empty, to take its txns from the [`Fill`] source when the log store appends
    /// it. Never encoded: the log store fills such a batch before it is stored or sent, and
    /// a batch read back from disk or received from a leader is always filled.
    #[serde(skip)]
    unfilled: bool,
}

impl std::fmt::Display for TxnBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} txns", self.txns.len())
    }
}

impl TxnBatch {
    /// A batch of these txns.
    pub fn new(txns: Vec<Txn>) -> TxnBatch {
        TxnBatch { txns: Arc::new(txns), unfilled: false }
    }

    /// A batch of txns the caller keeps a handle on (to take them back if the batch is never
    /// sent).
    pub fn shared(txns: Arc<Vec<Txn>>) -> TxnBatch {
        TxnBatch { txns, unfilled: false }
    }

    /// A batch proposed empty, to be filled by the log store as openraft appends it: the entry
    /// takes every txn that arrived until that moment, rather than those that had arrived
    /// when the proposer last ran.
    pub fn unfilled() -> TxnBatch {
        TxnBatch { txns: Arc::new(Vec::new()), unfilled: true }
    }

    /// Takes the txns from `source` if this batch was proposed unfilled; called by the log
    /// store once, as it appends the entry `log_id`, before the entry is stored or sent.
    pub(super) fn fill(&mut self, log_id: LogId, source: Option<&dyn Fill>) {
        if !std::mem::take(&mut self.unfilled) {
            return;
        }
        if let Some(source) = source {
            self.txns = Arc::new(source.fill(log_id));
        }
    }
}

/// Where a batch proposed empty takes its txns from (the proposer's queue).
pub trait Fill: Send + Sync {
    /// The txns of the entry being appended as `log_id`, in order. Before returning, the
    /// source registers their waiters under `log_id` (see [`super::wait::Waiters`]), so the
    /// state machine finds them when it applies the entry.
    fn fill(&self, log_id: LogId) -> Vec<Txn>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::txn::TxnOp;

    /// A batch encodes as the plain sequence of its txns, whether or not it was proposed
    /// unfilled: the log format is that of a `Vec<Txn>`.
    #[test]
    fn a_batch_encodes_as_its_txns() {
        let txns = vec![Txn {
            session_id: 7,
            time_ms: 1,
            auth: Default::default(),
            op: TxnOp::CloseSession { session_id: 7 },
        }];
        let plain = postcard::to_stdvec(&txns).expect("encode");
        assert_eq!(postcard::to_stdvec(&TxnBatch::new(txns.clone())).expect("encode"), plain);
        let mut filled = TxnBatch::unfilled();
        struct Source(Vec<Txn>);
        impl Fill for Source {
            fn fill(&self, _: LogId) -> Vec<Txn> {
                self.0.clone()
            }
        }
        let log_id = LogId::new(super::super::LeaderId { term: 1, node_id: 1 }, 3);
        filled.fill(log_id, Some(&Source(txns.clone())));
        assert_eq!(postcard::to_stdvec(&filled).expect("encode"), plain);
        // Filled once: a second append of the same entry takes nothing more.
        filled.fill(log_id, Some(&Source(Vec::new())));
        assert_eq!(filled.txns.len(), 1);
        let back: TxnBatch = postcard::from_bytes(&plain).expect("decode");
        assert_eq!(back, TxnBatch::new(txns));
    }
}
