//! The proposer: group commit, and forwarding to the leader.
//!
//! Txns from every connection (and batches forwarded by followers) queue in one bounded
//! [`Inbox`]; a single task turns it into batches. On the leader each batch becomes one Raft
//! log entry, proposed empty and filled from the inbox by the log store at the moment openraft
//! appends it ([`TxnBatch::fill`]), with no trip back through this task in between: the
//! entry takes every txn that arrived until openraft got to it. A standalone server writes
//! each entry before openraft appends the next, so one fsync carries as many txns as arrived
//! while the previous one was being written; an ensemble leader's log writer thread joins
//! the entries queued behind an fsync into the next one (see `LogStore::with_writer`). At
//! most [`MAX_IN_FLIGHT`] batches are in openraft at once. On a follower the batch
//! is forwarded to the leader over the peer port. A txn's answer is released once this
//! server has applied the entry itself, so its watch events are queued first; a txn queued
//! with [`Proposer::submit_committed`] is answered as soon as the leader reports it committed,
//! and its connection keeps the session's next reads waiting for the local apply instead
//! (see `crate::client`). Batches leave in inbox order, so a session's writes enter the log
//! in the order it sent them.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::oneshot;
use tokio::sync::Notify;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;

use super::ProposeError;
use crate::peer::PeerClient;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;
use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::txn::Txn;
use crate::txn::TxnBatch;
use crate::txn::TxnResult;

/// Txns per log entry at most.
pub const MAX_BATCH: usize = 1024;
/// Approximate data bytes per log entry at most.
pub const MAX_BATCH_BYTES: usize = 4 << 20;
/// Batches handed to openraft (or the leader) and not yet answered, at most. On the leader
/// only one of them waits to be filled at a time (see `run`): the next is proposed once the
/// previous has taken its txns, and openraft appends it after the previous one's fsync, so it
/// carries everything that arrived meanwhile, while the previous is applied and answered.
pub const MAX_IN_FLIGHT: usize = 4;
/// Txns waiting for a batch, at most (back-pressure on connections beyond that).
const INBOX: usize = 64 * 1024;
/// How long a forwarded batch may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

type Outcome = Result<TxnResult, ProposeError>;
type Waiter = oneshot::Sender<Outcome>;

/// A txn waiting for a batch: its waiter, and whether a follower may answer it on the
/// leader's word, before applying it here (see [`Proposer::submit_committed`]).
struct Queued {
    txn: Txn,
    waiter: Waiter,
    committed_is_enough: bool,
}

/// Txns waiting for a batch, in arrival order: pushed by connections, taken by the proposer
/// task (forwarding, failing) and by the log store as it appends a batch proposed empty.
pub struct Inbox {
    queue: Mutex<VecDeque<Queued>>,
    /// Notified when a txn is queued, or when the last [`Proposer`] handle goes.
    ready: Notify,
    /// Room left in the queue: connections wait for it (back-pressure).
    room: Semaphore,
    /// No [`Proposer`] handle is left to queue more.
    closed: AtomicBool,
    /// The proposer task has stopped: nothing more is taken. Set under the queue's lock.
    stopped: AtomicBool,
}

impl Inbox {
    fn new() -> Inbox {
        Inbox {
            queue: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            room: Semaphore::new(INBOX),
            closed: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn push(&self, item: Queued) -> Result<(), ProposeError> {
        let room = self.room.acquire().await.map_err(|_| ProposeError::Raft("proposer stopped".into()))?;
        room.forget();
        {
            let mut queue = self.queue();
            if self.stopped.load(Ordering::Acquire) {
                return Err(ProposeError::Raft("proposer stopped".into()));
            }
            queue.push_back(item);
        }
        self.ready.notify_one();
        Ok(())
    }

    /// The proposer task stops: fails what is queued and refuses what comes after.
    fn stop(&self) {
        let queued: Vec<_> = {
            let mut queue = self.queue();
            self.stopped.store(true, Ordering::Release);
            queue.drain(..).collect()
        };
        self.room.close();
        fail_all(queued.into_iter().map(|q| q.waiter).collect(), "proposer stopped");
    }

    /// Waits until a txn is queued; false once no handle can queue any more.
    async fn wait(&self) -> bool {
        loop {
            if !self.queue().is_empty() {
                return true;
            }
            if self.closed.load(Ordering::Acquire) {
                return false;
            }
            self.ready.notified().await;
        }
    }

    /// The oldest queued txns, as many as one batch may carry.
    fn take_batch(&self) -> Vec<Queued> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        {
            let mut queue = self.queue();
            while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
                let Some(item) = queue.pop_front() else { break };
                bytes += txn_bytes(&item.txn);
                batch.push(item);
            }
        }
        self.room.add_permits(batch.len());
        batch
    }

    /// Everything queued.
    fn take_all(&self) -> Vec<Queued> {
        let all: Vec<_> = self.queue().drain(..).collect();
        self.room.add_permits(all.len());
        all
    }
}

/// A batch proposed empty on the leader: the log store fills it from the inbox as openraft
/// appends it, and then the proposer may propose the next one (`slot`). Dropped unfilled,
/// openraft refused the write (this server is no longer the leader): that counts as a failed
/// batch (see `fail_queued`) before the slot is freed, so the txns queued behind a batch in
/// doubt are failed, not forwarded to the next leader.
struct Unfilled {
    inbox: Arc<Inbox>,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    failures: Arc<std::sync::atomic::AtomicU64>,
}

impl Unfilled {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl crate::txn::Fill for Unfilled {
    fn take(&self) -> (Vec<Txn>, Vec<Waiter>) {
        let mut slot = self.slot();
        // Filled once; a second call (openraft makes none) takes nothing.
        if slot.is_none() {
            return (Vec::new(), Vec::new());
        }
        let batch = self.inbox.take_batch();
        drop(slot.take());
        metrics::histogram!("warden_raft_batch_txns").record(batch.len() as f64);
        batch.into_iter().map(|q| (q.txn, q.waiter)).unzip()
    }
}

impl Drop for Unfilled {
    fn drop(&mut self) {
        let mut slot = self.slot();
        if slot.is_some() {
            self.failures.fetch_add(1, Ordering::Release);
            drop(slot.take());
        }
    }
}

/// Closes the inbox when the last [`Proposer`] handle is dropped.
struct Handle(Arc<Inbox>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.ready.notify_one();
    }
}

/// A handle to the proposer task.
#[derive(Clone)]
pub struct Proposer {
    inbox: Arc<Handle>,
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
    /// Starts the proposer task for server `me`.
    pub fn start(raft: Raft, me: u64, shared: Arc<SharedTree>) -> Proposer {
        let inbox = Arc::new(Inbox::new());
        tokio::spawn(run(raft, me, shared, inbox.clone()));
        Proposer { inbox: Arc::new(Handle(inbox)) }
    }

    /// Queues a txn; the receiver yields its result once applied on this server.
    pub async fn submit(&self, txn: Txn) -> Result<oneshot::Receiver<Outcome>, ProposeError> {
        self.queue(txn, false).await
    }

    /// Queues a txn; the receiver yields its result once it is committed, which on a follower
    /// may be before this server has applied it (the leader's answer comes first about three
    /// times in four, ~55 µs before the local apply on a 1×1 write). For a connection whose
    /// session can get no watch event from the txn, which must then hold its session's next
    /// reads until the local tree has the result's zxid.
    pub async fn submit_committed(&self, txn: Txn) -> Result<oneshot::Receiver<Outcome>, ProposeError> {
        self.queue(txn, true).await
    }

    async fn queue(&self, txn: Txn, committed_is_enough: bool) -> Result<oneshot::Receiver<Outcome>, ProposeError> {
        let (waiter, wait) = oneshot::channel();
        self.inbox.0.push(Queued { txn, waiter, committed_is_enough }).await?;
        Ok(wait)
    }

    /// Queues a txn and waits until it is applied on this server.
    pub async fn propose(&self, txn: Txn) -> Outcome {
        self.submit(txn).await?.await.map_err(|_| dropped())?
    }
}

/// The error for a txn whose waiter was dropped unanswered (a bug, or a task cut short by
/// shutdown): logged, since nothing else says why its client got ConnectionLoss.
pub(crate) fn dropped() -> ProposeError {
    tracing::warn!("a write was dropped unanswered; its client gets ConnectionLoss");
    ProposeError::Raft("proposal dropped".into())
}

/// Fails `waiters` with reason `e`: their clients get ConnectionLoss (the outcome is in doubt),
/// so the reason is logged here, where it is still known.
fn fail_all(waiters: Vec<Waiter>, e: &str) {
    if !waiters.is_empty() {
        tracing::warn!(txns = waiters.len(), reason = e, "writes failed; their clients get ConnectionLoss");
    }
    for w in waiters {
        let _ = w.send(Err(ProposeError::Raft(e.to_owned())));
    }
}

/// The current leader and its peer address, waiting up to `patience` for one to be known.
async fn leader(raft: &Raft, patience: Duration) -> Option<(u64, String)> {
    let mut rx = raft.metrics();
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        {
            let m = rx.borrow_watched();
            if let Some(l) = m.current_leader {
                let addr = m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()).unwrap_or_default();
                return Some((l, addr));
            }
        }
        // Timed out, or Raft stopped (its metrics sender is gone).
        if !matches!(tokio::time::timeout_at(deadline, rx.changed()).await, Ok(Ok(()))) {
            return None;
        }
    }
}

/// Resolves once Raft names a leader other than `leader_id` (never, if Raft stops).
///
/// It watches openraft's server metrics (leader, vote, state, membership), which change only
/// when one of those does. The full `RaftMetrics` is sent after every turn of openraft's core,
/// changed or not, and a forwarded batch waiting on it was woken three or more times per
/// write, each a task to schedule and, often, a thread to wake (BENCHMARKS.md, the
/// twenty-first pass).
async fn leader_other_than(
    metrics: &mut openraft::alias::WatchReceiverOf<
        crate::raft::TypeConfig,
        openraft::metrics::RaftServerMetrics<crate::raft::TypeConfig>,
    >,
    leader_id: u64,
) {
    loop {
        if matches!(metrics.borrow_and_update().current_leader, Some(l) if l != leader_id) {
            return;
        }
        if metrics.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Fails every txn queued right now. After this server's own batch fails as leader (it lost
/// the leadership, e.g. cut off by a partition), what queued behind it was sent to a leader
/// that is no more, and its clients have been or will be disconnected; forwarding it later to
/// the new leader could apply a session's write after writes it made since through another
/// server. ZooKeeper drops such requests too when its leader steps down.
fn fail_queued(inbox: &Inbox, e: &str) {
    let queued = inbox.take_all();
    fail_all(queued.into_iter().map(|q| q.waiter).collect(), e);
}

async fn run(raft: Raft, me: u64, shared: Arc<SharedTree>, inbox: Arc<Inbox>) {
    /// Whatever way this task ends, the txns queued and those still coming are failed.
    struct Stop(Arc<Inbox>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let _stop = Stop(inbox.clone());
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // The one batch not yet filled (on the leader) or being forwarded (on a follower): the
    // next is proposed when it is released, so at most one empty batch waits in openraft for
    // the previous one's fsync, and it takes everything that arrived meanwhile.
    let writing = Arc::new(Semaphore::new(1));
    let mut peers: HashMap<u64, PeerClient> = HashMap::new();
    // Bumped when a batch proposed here as leader fails; the loop then fails what is queued
    // (see `fail_queued`).
    let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut seen_failures = 0u64;
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        let Ok(slot) = writing.clone().acquire_owned().await else { return };
        let now_failed = failures.load(std::sync::atomic::Ordering::Acquire);
        if now_failed != seen_failures {
            seen_failures = now_failed;
            fail_queued(&inbox, "this server lost the leadership");
        }
        if !inbox.wait().await {
            return;
        }
        let Some((leader_id, leader_addr)) = leader(&raft, Duration::from_secs(3)).await else {
            fail_queued(&inbox, "no leader");
            continue;
        };
        if leader_id == me {
            let unfilled = Unfilled { inbox: inbox.clone(), slot: Mutex::new(Some(slot)), failures: failures.clone() };
            let (hooks, waits) = crate::txn::LocalHooks::filled_from(Box::new(unfilled));
            let (responder, mut response) = openraft::impls::ProgressResponder::complete_only();
            match raft.client_write_ff(TxnBatch::unfilled(hooks), Some(responder)).await {
                Ok(()) => {
                    let failures = failures.clone();
                    tokio::spawn(async move {
                        // The state machine answers each txn as it applies it (see
                        // `LocalHooks`); this task frees the proposer's slots, and answers
                        // from openraft's reply what the state machine did not.
                        let mut waits = waits;
                        let mut answered = false;
                        let answer = tokio::select! {
                            biased;
                            done = &mut waits.applied => match done {
                                Ok(()) => None,
                                // Applied without the hooks (read back from disk): openraft's
                                // answer carries the results.
                                Err(_) => {
                                    answered = true;
                                    Some((&mut response).await.map(|r| r.map(|r| r.data)))
                                }
                            },
                            answer = &mut response => {
                                answered = true;
                                Some(answer.map(|r| r.map(|r| r.data)))
                            }
                        };
                        // Waiters still here were not answered by the state machine (none are
                        // once it reported the batch applied).
                        let left = waits.take_answers().unwrap_or_default();
                        let failed = match answer {
                            None => false,
                            Some(Ok(Ok(results))) => {
                                for (w, r) in left.into_iter().zip(results) {
                                    let _ = w.send(Ok(r));
                                }
                                false
                            }
                            Some(Ok(Err(e))) => {
                                fail_all(left, &e.to_string());
                                true
                            }
                            Some(Err(e)) => {
                                fail_all(left, &e.to_string());
                                true
                            }
                        };
                        if failed {
                            failures.fetch_add(1, std::sync::atomic::Ordering::Release);
                        }
                        drop(permit);
                        // openraft logs a warning for every answer that finds its receiver
                        // gone, so take it even though the hook answered first.
                        if !answered {
                            let _ = response.await;
                        }
                    });
                }
                Err(fatal) => {
                    fail_all(waits.take_answers().unwrap_or_default(), &fatal.to_string());
                    tracing::error!(error = %fatal, "raft stopped; proposer exits");
                    return;
                }
            }
            continue;
        }
        // A follower: forward to the leader, in order; answer on its word what may be, the
        // rest once applied here.
        let mut txns = Vec::new();
        let mut waiters = Vec::new();
        for q in inbox.take_batch() {
            txns.push(q.txn);
            waiters.push((q.waiter, q.committed_is_enough));
        }
        metrics::histogram!("warden_raft_batch_txns").record(txns.len() as f64);
        let client = peers.entry(leader_id).or_insert_with(|| PeerClient::new(leader_addr)).clone();
        match client.start(PeerRequest::Forward(TxnBatch::new(txns)), FORWARD_TIMEOUT).await {
            Ok(answer) => {
                let shared = shared.clone();
                let mut metrics = raft.server_metrics();
                // A failed forward leaves what is queued here alone: it goes to the current
                // leader next (this server lost no leadership of its own).
                tokio::spawn(async move {
                    // A leader that stopped answering (frozen, cut off) is replaced within a
                    // second; waiting out FORWARD_TIMEOUT for it would hold up every write of
                    // this server's clients. Its clients get ConnectionLoss, as when
                    // ZooKeeper's follower loses its leader: the outcome is in doubt.
                    let answer = tokio::select! {
                        biased;
                        answer = answer => answer,
                        () = leader_other_than(&mut metrics, leader_id) => {
                            fail_all(waiters.into_iter().map(|(w, _)| w).collect(), "the leader changed while a forwarded batch was in flight");
                            drop(slot);
                            drop(permit);
                            return;
                        }
                    };
                    match answer {
                        Ok(PeerResponse::Forward(Ok(results))) => {
                            // Committed: those that may be answered now are; the rest once
                            // this server has applied the entry too.
                            let mut after_apply = Vec::new();
                            for ((w, committed_is_enough), r) in waiters.into_iter().zip(results) {
                                if committed_is_enough {
                                    let _ = w.send(Ok(r));
                                } else {
                                    after_apply.push((w, r));
                                }
                            }
                            if let Some(last) = after_apply.iter().map(|(_, r)| r.zxid).max() {
                                shared.wait_applied(last, FORWARD_TIMEOUT).await;
                            }
                            for (w, r) in after_apply {
                                let _ = w.send(Ok(r));
                            }
                        }
                        answer => {
                            let waiters = waiters.into_iter().map(|(w, _)| w).collect();
                            match answer {
                                Ok(PeerResponse::Forward(Err(e))) => fail_all(waiters, &e),
                                Ok(_) => fail_all(waiters, "unexpected answer to a forwarded batch"),
                                Err(e) => fail_all(waiters, &e.to_string()),
                            }
                        }
                    }
                    drop(slot);
                    drop(permit);
                });
            }
            Err(e) => {
                peers.remove(&leader_id);
                fail_all(waiters.into_iter().map(|(w, _)| w).collect(), &e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::Fill;
    use crate::txn::TxnOp;

    fn txn(session_id: i64) -> Txn {
        Txn { session_id, time_ms: 0, auth: Default::default(), op: TxnOp::CloseSession { session_id } }
    }

    async fn queued(inbox: &Inbox, sessions: &[i64]) -> Vec<oneshot::Receiver<Outcome>> {
        let mut waits = Vec::new();
        for &s in sessions {
            let (done, wait) = oneshot::channel();
            inbox.push(Queued { txn: txn(s), waiter: done, committed_is_enough: false }).await.expect("push");
            waits.push(wait);
        }
        waits
    }

    fn unfilled(inbox: &Arc<Inbox>, failures: &Arc<std::sync::atomic::AtomicU64>) -> (Unfilled, Arc<Semaphore>) {
        let writing = Arc::new(Semaphore::new(1));
        let slot = writing.clone().try_acquire_owned().expect("slot");
        (Unfilled { inbox: inbox.clone(), slot: Mutex::new(Some(slot)), failures: failures.clone() }, writing)
    }

    #[tokio::test]
    async fn a_batch_takes_the_queue_in_order_once_and_frees_the_slot() {
        let inbox = Arc::new(Inbox::new());
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let _waits = queued(&inbox, &[1, 2, 3]).await;
        let (batch, writing) = unfilled(&inbox, &failures);
        assert_eq!(writing.available_permits(), 0);
        let (txns, waiters) = batch.take();
        assert_eq!(txns.iter().map(|t| t.session_id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(waiters.len(), 3);
        assert_eq!(writing.available_permits(), 1, "filled: the next batch may be proposed");
        // Whatever arrives later belongs to the next batch, not to a second fill of this one.
        let _later = queued(&inbox, &[4]).await;
        assert!(batch.take().0.is_empty());
        drop(batch);
        assert_eq!(failures.load(Ordering::Acquire), 0, "a filled batch is no failure");
        assert_eq!(inbox.queue().len(), 1);
    }

    #[tokio::test]
    async fn a_batch_dropped_unfilled_counts_as_failed_before_freeing_the_slot() {
        let inbox = Arc::new(Inbox::new());
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let _waits = queued(&inbox, &[1, 2]).await;
        let (batch, writing) = unfilled(&inbox, &failures);
        drop(batch);
        assert_eq!(failures.load(Ordering::Acquire), 1);
        assert_eq!(writing.available_permits(), 1);
        assert_eq!(inbox.queue().len(), 2, "the txns stay queued for the proposer to fail");
    }

    #[tokio::test]
    async fn a_stopped_inbox_fails_what_is_queued_and_refuses_more() {
        let inbox = Inbox::new();
        let waits = queued(&inbox, &[1, 2]).await;
        inbox.stop();
        for w in waits {
            assert!(matches!(w.await, Ok(Err(ProposeError::Raft(_)))));
        }
        let (done, _wait) = oneshot::channel();
        assert!(inbox.push(Queued { txn: txn(3), waiter: done, committed_is_enough: false }).await.is_err());
        assert!(inbox.queue().is_empty());
    }

    #[tokio::test]
    async fn the_inbox_wait_ends_when_the_last_handle_goes() {
        let inbox = Arc::new(Inbox::new());
        let handle = Proposer { inbox: Arc::new(Handle(inbox.clone())) };
        let waiter = tokio::spawn({
            let inbox = inbox.clone();
            async move { inbox.wait().await }
        });
        drop(handle);
        assert!(!waiter.await.expect("join"));
    }
}
