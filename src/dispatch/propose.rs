//! The proposer: group commit. Txns from every connection queue in one bounded inbox; a single
//! task drains it into batches and hands each batch to openraft as one log entry, so one redb
//! commit (one fsync) carries as many txns as arrived while the previous batch was being
//! written. At most [`MAX_IN_FLIGHT`] batches are in openraft at once: while one is being made
//! durable the next fills up. Batches are submitted in inbox order, so a session's writes
//! enter the log in the order it sent them.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio::sync::Semaphore;

use super::ProposeError;
use crate::raft::Raft;
use crate::txn::Txn;
use crate::txn::TxnBatch;
use crate::txn::TxnResult;

/// Txns per log entry at most.
pub const MAX_BATCH: usize = 1024;
/// Approximate data bytes per log entry at most.
pub const MAX_BATCH_BYTES: usize = 4 << 20;
/// Batches handed to openraft and not yet applied, at most.
pub const MAX_IN_FLIGHT: usize = 2;
/// Txns waiting for a batch, at most (back-pressure on connections beyond that).
const INBOX: usize = 64 * 1024;

type Waiter = oneshot::Sender<Result<TxnResult, ProposeError>>;

/// A handle to the proposer task.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<(Txn, Waiter)>,
}

fn txn_bytes(txn: &Txn) -> usize {
    use crate::txn::TxnOp;
    fn op_bytes(op: &TxnOp) -> usize {
        match op {
            TxnOp::Create(c) => c.path.len() + c.data.as_ref().map_or(0, |d| d.len()),
            TxnOp::SetData { path, data, .. } => path.len() + data.as_ref().map_or(0, |d| d.len()),
            TxnOp::Multi(ops) => ops.iter().map(op_bytes).sum(),
            _ => 64,
        }
    }
    op_bytes(&txn.op)
}

impl Proposer {
    /// Starts the proposer task for `raft`.
    pub fn start(raft: Raft) -> Proposer {
        let (tx, rx) = mpsc::channel(INBOX);
        tokio::spawn(run(raft, rx));
        Proposer { tx }
    }

    /// Queues a txn and waits until it is applied on this server.
    pub async fn propose(&self, txn: Txn) -> Result<TxnResult, ProposeError> {
        let (done, wait) = oneshot::channel();
        self.tx.send((txn, done)).await.map_err(|_| ProposeError::Raft("proposer stopped".into()))?;
        wait.await.map_err(|_| ProposeError::Raft("proposal dropped".into()))?
    }
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<(Txn, Waiter)>) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let Some(first) = rx.recv().await else { return };
        let mut bytes = txn_bytes(&first.0);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    bytes += txn_bytes(&item.0);
                    batch.push(item);
                }
                Err(_) => break,
            }
        }
        let (txns, waiters): (Vec<Txn>, Vec<Waiter>) = batch.into_iter().unzip();
        metrics::histogram!("warden_raft_batch_txns").record(txns.len() as f64);
        match raft.client_write_ff(TxnBatch { txns }).await {
            Ok(response) => {
                tokio::spawn(async move {
                    let outcome = match response.await {
                        Ok(Ok(r)) => Ok(r.data),
                        Ok(Err(e)) => Err(ProposeError::Raft(e.to_string())),
                        Err(e) => Err(ProposeError::Raft(e.to_string())),
                    };
                    match outcome {
                        Ok(results) => {
                            for (w, r) in waiters.into_iter().zip(results) {
                                let _ = w.send(Ok(r));
                            }
                        }
                        Err(e) => {
                            for w in waiters {
                                let _ = w.send(Err(ProposeError::Raft(e.to_string())));
                            }
                        }
                    }
                    drop(permit);
                });
            }
            Err(fatal) => {
                for w in waiters {
                    let _ = w.send(Err(ProposeError::Raft(fatal.to_string())));
                }
                tracing::error!(error = %fatal, "raft stopped; proposer exits");
                return;
            }
        }
    }
}
