//! The leader removes empty containers and expired TTL nodes (ZooKeeper's
//! `ContainerManager`), checking every `znode.container.checkIntervalMs`. Each removal is a
//! `DeleteContainer` txn that apply checks again, so a container that gained a child after it
//! was picked stays.

use std::sync::Arc;
use std::time::Duration;

use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::raft::TxnBatch;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;

/// Candidates proposed per check at most.
const PER_CHECK: usize = 10_000;

/// Runs until `stop` fires.
pub async fn reap(raft: Raft, tree: Arc<SharedTree>, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !raft.is_leader() {
            continue;
        }
        let now = crate::clock::now_ms();
        let candidates: Vec<String> = {
            let tree = tree.read();
            tree.reapable().filter(|p| tree.is_reapable(p, now)).take(PER_CHECK).cloned().collect()
        };
        for path in candidates {
            let txn =
                Txn { session_id: 0, time_ms: now, auth: Default::default(), op: TxnOp::DeleteContainer { path } };
            if let Err(e) = raft.propose(TxnBatch::new(vec![txn])).await {
                tracing::warn!(error = %e, "container removal failed");
                break;
            }
        }
    }
}
