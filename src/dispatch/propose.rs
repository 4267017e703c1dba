//! The proposer: group commit, and forwarding to the leader.
//!
//! Txns from every connection (and batches forwarded by followers) queue in one bounded
//! [`Inbox`]; a single task turns it into batches. On the leader each batch becomes one Raft
//! log entry, proposed empty and filled from the inbox by the log store at the moment openraft
//! appends it ([`crate::raft::batch::Fill`]), with no trip back through this task in between:
//! the entry takes every txn that arrived until openraft got to it. The fill registers the
//! txns' waiters under the entry's log id ([`crate::raft::wait::Waiters`]), and the state
//! machine answers each as it applies it. A standalone server writes each entry before
//! openraft appends the next, so one fsync carries as many txns as arrived while the previous
//! one was being written; an ensemble leader's log writer thread joins the entries queued
//! behind an fsync into the next one (see `LogStore::with_writer`). At most [`MAX_IN_FLIGHT`]
//! batches are in openraft at once. On a follower the batch is forwarded to the leader over
//! the peer port. A txn's answer is released once this server has applied the entry itself,
//! so its watch events are queued first; a txn queued with [`Proposer::submit_committed`] is
//! answered as soon as the leader reports it committed, and its connection keeps the
//! session's next reads waiting for the local apply instead (see `crate::client`). Batches
//! leave in inbox order, so a session's writes enter the log in the order it sent them.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::sync::Notify;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;

use crate::peer::PeerRequest;
use crate::peer::PeerResponse;
use crate::peer::Peers;
use crate::raft::batch::Fill;
use crate::raft::state_machine::SharedTree;
use crate::raft::wait::fail as fail_all;
use crate::raft::wait::Outcome;
use crate::raft::wait::Waiter;
use crate::raft::wait::Waiters;
use crate::raft::LogId;
use crate::raft::ProposeError;
use crate::raft::Raft;
use crate::raft::Role;
use crate::raft::TxnBatch;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;
use crate::tree::txn::TxnResult;

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
/// How long a follower keeps retrying a batch whose forward never reached the leader (a
/// leader that died, or that it cannot reach), waiting for the leader to come back or for a
/// new one, before its clients get ConnectionLoss: a failover takes well under this.
const FORWARD_RETRY_FOR: Duration = Duration::from_secs(2);
/// The pause between such retries, unless the leader changes first.
const FORWARD_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A txn waiting for a batch: its waiter, and whether a follower may answer it on the
/// leader's word, before applying it here (see [`Proposer::submit_committed`]).
struct Queued {
    txn: Txn,
    waiter: Waiter,
    committed_is_enough: bool,
    /// Set once a forward of it failed before reaching the leader: retried until then.
    retry_until: Option<tokio::time::Instant>,
}

impl Queued {
    /// See [`abandoned`].
    fn abandoned(&self) -> bool {
        abandoned(&self.txn, &self.waiter)
    }
}

/// Whether a txn not yet sent to the leader is dropped because its client has gone: every
/// txn but a closeSession, which is the session's last word (nothing of the session can
/// follow it) and, dropped, would leave the session and its ephemerals to a timeout.
fn abandoned(txn: &Txn, waiter: &Waiter) -> bool {
    waiter.is_closed() && !matches!(txn.op, TxnOp::CloseSession { .. })
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
        fail_all(queued.into_iter().map(|q| q.waiter), "proposer stopped");
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

    /// Puts back, in front and in their order, txns taken for a forward that never reached
    /// the leader.
    fn requeue(&self, items: Vec<Queued>) {
        if items.is_empty() {
            return;
        }
        self.room.forget_permits(items.len());
        let mut queue = self.queue();
        if self.stopped.load(Ordering::Acquire) {
            drop(queue);
            fail_all(items.into_iter().map(|q| q.waiter), "proposer stopped");
            return;
        }
        for item in items.into_iter().rev() {
            queue.push_front(item);
        }
    }

    /// Everything queued.
    fn take_all(&self) -> Vec<Queued> {
        let all: Vec<_> = self.queue().drain(..).collect();
        self.room.add_permits(all.len());
        all
    }
}

/// What the proposer task, the log store's fills and the handles share: the inbox, the
/// waiters' registry, and the one batch proposed unfilled.
struct Shared {
    inbox: Inbox,
    waiters: Arc<Waiters>,
    /// The batch proposed empty and not yet filled, by sequence number, with the permit that
    /// lets the proposer propose the next one: at most one empty batch waits in openraft for
    /// the previous one's fsync, and it takes everything that arrived meanwhile.
    unfilled: Mutex<Option<(u64, OwnedSemaphorePermit)>>,
    /// Bumped when a batch proposed here as leader fails; the task then fails what is queued
    /// (see `fail_queued`).
    failures: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn unfilled(&self) -> std::sync::MutexGuard<'_, Option<(u64, OwnedSemaphorePermit)>> {
        self.unfilled.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The batch `seq` failed: if it was never filled, its permit is freed.
    fn forget_unfilled(&self, seq: u64) {
        let mut unfilled = self.unfilled();
        if unfilled.as_ref().is_some_and(|(s, _)| *s == seq) {
            *unfilled = None;
        }
    }
}

impl Fill for Shared {
    fn fill(&self, log_id: LogId) -> Vec<Txn> {
        let mut unfilled = self.unfilled();
        // Filled once; a batch appended with nothing pending (openraft makes none) takes nothing.
        if unfilled.is_none() {
            return Vec::new();
        }
        let batch = self.inbox.take_batch();
        *unfilled = None;
        drop(unfilled);
        metrics::histogram!("warden_raft_batch_txns").record(batch.len() as f64);
        let (txns, waiters): (Vec<Txn>, Vec<Waiter>) = batch.into_iter().map(|q| (q.txn, q.waiter)).unzip();
        self.waiters.register(log_id, waiters);
        txns
    }
}

/// Closes the inbox when the last [`Proposer`] handle is dropped.
struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.inbox.closed.store(true, Ordering::Release);
        self.0.inbox.ready.notify_one();
    }
}

/// A handle to the proposer.
#[derive(Clone)]
pub struct Proposer {
    handle: Arc<Handle>,
}

/// For a quota-enforced txn, the top-level namespace of each op's path (ZooKeeper's
/// `PathUtils.getTopNamespace`), to count refusals by; empty for any other txn.
fn quota_namespaces(txn: &Txn) -> Vec<String> {
    use crate::tree::txn::TxnOp;
    fn namespace(op: &TxnOp) -> String {
        let path = match op {
            TxnOp::Create(c) => c.path.as_str(),
            TxnOp::SetData { path, .. } | TxnOp::Delete { path, .. } | TxnOp::Check { path, .. } => path.as_str(),
            _ => "",
        };
        path.split('/').nth(1).unwrap_or_default().to_owned()
    }
    match &txn.op {
        TxnOp::QuotaEnforced(op) => match &**op {
            TxnOp::Multi(ops) => ops.iter().map(namespace).collect(),
            op => vec![namespace(op)],
        },
        _ => Vec::new(),
    }
}

/// Counts a QuotaExceeded answer under its namespace (`quota_exceeded_error_per_namespace`).
fn count_quota_refusals(namespaces: &[String], result: &Result<TxnResult, ProposeError>) {
    use crate::tree::txn::OpResult;
    use crate::tree::txn::TxnOutput;
    use crate::tree::TreeError;
    let count = |ns: &String| metrics::counter!(crate::stats::names::QUOTA_EXCEEDED, "key" => ns.clone()).increment(1);
    match result.as_ref().map(|r| &r.outcome) {
        Ok(Err(TreeError::QuotaExceeded)) => namespaces.iter().take(1).for_each(count),
        Ok(Ok(TxnOutput::Multi { results, failed: true })) => results
            .iter()
            .zip(namespaces)
            .filter(|(r, _)| matches!(r, OpResult::Error(TreeError::QuotaExceeded)))
            .for_each(|(_, ns)| count(ns)),
        _ => {}
    }
}

fn txn_bytes(txn: &Txn) -> usize {
    use crate::tree::txn::TxnOp;
    fn op_bytes(op: &TxnOp) -> usize {
        match op {
            TxnOp::Create(c) => c.path.len() + c.data.as_ref().map_or(0, |d| d.len()),
            TxnOp::SetData { path, data, .. } => path.len() + data.as_ref().map_or(0, |d| d.len()),
            TxnOp::Multi(ops) => ops.iter().map(op_bytes).sum(),
            TxnOp::QuotaEnforced(op) => op_bytes(op),
            _ => 64,
        }
    }
    op_bytes(&txn.op)
}

impl Proposer {
    /// A proposer whose txns' waiters the state machine finds in `waiters`. Made before Raft:
    /// the log store fills batches from [`Proposer::filler`]; [`Proposer::start`] starts the
    /// task once Raft runs.
    pub fn new(waiters: Arc<Waiters>) -> Proposer {
        let shared = Arc::new(Shared {
            inbox: Inbox::new(),
            waiters,
            unfilled: Mutex::new(None),
            failures: std::sync::atomic::AtomicU64::new(0),
        });
        Proposer { handle: Arc::new(Handle(shared)) }
    }

    /// Where the log store fills the batches this proposer proposes empty.
    pub fn filler(&self) -> Arc<dyn Fill> {
        self.handle.0.clone()
    }

    /// Starts the proposer task, forwarding to the leader through `peers` when this server
    /// does not lead.
    pub fn start(&self, raft: Raft, peers: Peers, tree: Arc<SharedTree>) {
        tokio::spawn(run(raft, peers, tree, self.handle.0.clone()));
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
        self.handle.0.inbox.push(Queued { txn, waiter, committed_is_enough, retry_until: None }).await?;
        Ok(wait)
    }

    /// Queues a txn and waits until it is applied on this server.
    pub async fn propose(&self, txn: Txn) -> Outcome {
        self.submit(txn).await?.await.map_err(|_| dropped())?
    }
}

impl super::Dispatcher {
    /// Replicates `txn` and waits until it is applied here.
    pub(super) async fn propose(&self, txn: Txn) -> Outcome {
        self.0.proposer.propose(txn).await
    }

    /// A client's write: replicated, and answered once applied here, or, with
    /// `committed_is_enough`, once committed: on a follower the result may then come before
    /// this server has applied it (before its watch events are queued here), for a session
    /// that holds no watches, whose next reads wait for the reply's zxid
    /// ([`super::Dispatcher::read_after`]).
    pub async fn write(&self, write: super::Write, committed_is_enough: bool) -> super::Reply {
        let super::Write { txn, op, path_only } = write;
        if self.0.config.local_sessions && self.0.sessions.is_local(txn.session_id) {
            if let Some(reply) = self.local_session_write(&txn).await {
                return reply;
            }
        }
        let quota_paths = quota_namespaces(&txn);
        let audit = if crate::audit::enabled() {
            let ip = txn.auth.iter().find(|a| a.scheme == "ip").map(|a| a.id.clone());
            crate::audit::Write::of(&txn, ip.as_deref())
        } else {
            None
        };
        let me = self.0.raft.id();
        let moved = if self.0.raft.is_leader() { self.moved_away(&txn, me) } else { None };
        let result = if let Some(refused) = moved {
            Ok(refused)
        } else if committed_is_enough {
            match self.0.proposer.submit_committed(txn).await {
                Ok(wait) => wait.await.unwrap_or_else(|_| Err(dropped())),
                Err(e) => Err(e),
            }
        } else {
            self.propose(txn).await
        };
        if !quota_paths.is_empty() {
            count_quota_refusals(&quota_paths, &result);
        }
        if let Some(audit) = audit {
            audit.done(result.as_ref().ok().map(|r| &r.outcome));
        }
        let mut reply = self.write_reply(op, result);
        super::Dispatcher::shape_multi(&path_only, &mut reply);
        reply
    }
}

impl super::Dispatcher {
    /// A write of a local session, before it is proposed: its close ends it here (no log
    /// entry); an ephemeral create (alone or in a multi) first makes it global, or with
    /// upgrading off a lone one fails with EphemeralOnLocalSession (ZooKeeper's
    /// `checkUpgradeSession` and `FinalRequestProcessor`). `None` to go on.
    async fn local_session_write(&self, txn: &Txn) -> Option<super::Reply> {
        fn ephemeral(op: &TxnOp) -> bool {
            match op {
                TxnOp::Create(c) => jute::CreateMode::try_from(c.flags).is_ok_and(|m| m.is_ephemeral()),
                TxnOp::Multi(ops) => ops.iter().any(ephemeral),
                TxnOp::QuotaEnforced(op) => ephemeral(op),
                _ => false,
            }
        }
        if let TxnOp::CloseSession { session_id } = txn.op {
            self.0.sessions.close_local(session_id);
            return Some(super::Reply::ok(self.last_zxid()));
        }
        if !ephemeral(&txn.op) {
            return None;
        }
        if !self.0.config.local_sessions_upgrading {
            // ZooKeeper answers a create so; a multi goes on, and its ephemeral create fails
            // in apply with SessionExpired (the session is in no replicated table), as there.
            let mut op = &txn.op;
            if let TxnOp::QuotaEnforced(inner) = op {
                op = inner;
            }
            if matches!(op, TxnOp::Multi(_)) {
                return None;
            }
            return Some(super::Reply::error(self.last_zxid(), jute::ErrorCode::EphemeralOnLocalSession));
        }
        match self.upgrade(txn.session_id).await {
            Ok(()) => None,
            Err(code) => Some(super::Reply::error(self.last_zxid(), code)),
        }
    }

    /// On the leader: the SessionMoved answer for a write that came from `member`'s
    /// connection of a session another member now serves (ZooKeeper's
    /// `SessionTracker.checkSession` with the request's owner); `None` to go on. A session
    /// created or first heard of here becomes `member`'s.
    pub(super) fn moved_away(&self, txn: &Txn, member: u64) -> Option<TxnResult> {
        let session = match &txn.op {
            TxnOp::CreateSession { session_id, .. } => *session_id,
            _ => txn.session_id,
        };
        if session == 0 || self.0.sessions.claim(session, member) {
            return None;
        }
        tracing::debug!(
            session = format_args!("{session:#x}"),
            member,
            "a write from a session's old member: SessionMoved"
        );
        Some(TxnResult { zxid: self.last_zxid(), outcome: Err(crate::tree::TreeError::SessionMoved) })
    }
}

/// The error for a txn whose waiter was dropped unanswered (a bug, or a task cut short by
/// shutdown): logged, since nothing else says why its client got ConnectionLoss.
pub(crate) fn dropped() -> ProposeError {
    tracing::warn!("a write was dropped unanswered; its client gets ConnectionLoss");
    ProposeError::Raft("proposal dropped".into())
}

/// Fails every txn queued right now. After this server's own batch fails as leader (it lost
/// the leadership, e.g. cut off by a partition), what queued behind it was sent to a leader
/// that is no more, and its clients have been or will be disconnected; forwarding it later to
/// the new leader could apply a session's write after writes it made since through another
/// server. ZooKeeper drops such requests too when its leader steps down.
fn fail_queued(inbox: &Inbox, e: &str) {
    let queued = inbox.take_all();
    fail_all(queued.into_iter().map(|q| q.waiter), e);
}

async fn run(raft: Raft, peers: Peers, tree: Arc<SharedTree>, shared: Arc<Shared>) {
    /// Whatever way this task ends, the txns queued and those still coming are failed, and
    /// so are the waiters of entries not yet applied.
    struct Stop(Arc<Shared>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.inbox.stop();
            self.0.waiters.stop("proposer stopped");
        }
    }
    let _stop = Stop(shared.clone());
    let me = raft.id();
    let inbox = &shared.inbox;
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // The one batch not yet filled (on the leader) or being forwarded (on a follower): the
    // next is proposed when it is released.
    let writing = Arc::new(Semaphore::new(1));
    let mut seen_failures = 0u64;
    let mut seq = 0u64;
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        let Ok(slot) = writing.clone().acquire_owned().await else { return };
        let now_failed = shared.failures.load(Ordering::Acquire);
        if now_failed != seen_failures {
            seen_failures = now_failed;
            fail_queued(inbox, "this server lost the leadership");
        }
        if !inbox.wait().await {
            return;
        }
        let Some((leader_id, leader_addr)) = raft.wait_for_leader(Duration::from_secs(3)).await else {
            fail_queued(inbox, "no leader");
            continue;
        };
        if leader_id == me {
            seq += 1;
            *shared.unfilled() = Some((seq, slot));
            match raft.propose_unfilled().await {
                Ok(done) => {
                    let (raft, shared, this) = (raft.clone(), shared.clone(), seq);
                    tokio::spawn(async move {
                        // The state machine answers each txn as it applies it (see
                        // `Waiters`); this task frees the proposer's slot, and on a failure
                        // fails the waiters whose commit is now in doubt.
                        if let Err(e) = done.await {
                            shared.forget_unfilled(this);
                            let status = raft.status();
                            // Every entry this server proposed in an earlier term, or in this
                            // one if it no longer leads, is in doubt.
                            let through =
                                if status.role == Role::Leader { status.term.saturating_sub(1) } else { status.term };
                            shared.waiters.fail_through_term(through, &e.to_string());
                            shared.failures.fetch_add(1, Ordering::Release);
                        }
                        drop(permit);
                    });
                }
                Err(fatal) => {
                    shared.forget_unfilled(seq);
                    fail_queued(inbox, &fatal.to_string());
                    tracing::error!(error = %fatal, "raft stopped; proposer exits");
                    return;
                }
            }
            continue;
        }
        // A follower: forward to the leader, in order; answer on its word what may be, the
        // rest once applied here.
        let mut batch = inbox.take_batch();
        // A txn retried after a failed forward whose connection has closed since is dropped:
        // its client got ConnectionLoss, and may now write through another member, so sending
        // it later could apply it after the session's newer writes.
        batch.retain(|q| q.retry_until.is_none() || !q.abandoned());
        if batch.is_empty() {
            continue;
        }
        // The connection first, then what to send. Opening one can take up to two seconds
        // (a leader behind a partition answers no SYN), and a client whose connection closed
        // meanwhile got ConnectionLoss and may have written again through another
        // connection: its txn, sent once the network healed, could land after that newer
        // write (the likely path of a lock contender left behind for good in the nemesis
        // suite, seed 7101). So when a connection had to be opened, a txn whose client has
        // gone is not sent (a closeSession still is: see `abandoned`). On a live connection
        // nothing is dropped.
        let client = peers.client(leader_id, &leader_addr);
        let connected = client.ready(FORWARD_TIMEOUT).await;
        if matches!(connected, Ok(true)) {
            let before = batch.len();
            batch.retain(|q| !q.abandoned());
            if batch.len() < before {
                tracing::debug!(dropped = before - batch.len(), "txns whose clients left while the leader was reached");
            }
            if batch.is_empty() {
                continue;
            }
        }
        let mut txns = Vec::with_capacity(batch.len());
        let mut waiters = Vec::with_capacity(batch.len());
        let mut retry_until = Vec::with_capacity(batch.len());
        for q in batch {
            txns.push(q.txn);
            waiters.push((q.waiter, q.committed_is_enough));
            retry_until.push(q.retry_until);
        }
        metrics::histogram!("warden_raft_batch_txns").record(txns.len() as f64);
        let txns = Arc::new(txns);
        let started = match connected {
            Ok(_) => client.start(PeerRequest::ForwardFrom(me, TxnBatch::shared(txns.clone())), FORWARD_TIMEOUT).await,
            Err(e) => Err(e),
        };
        match started {
            Ok(answer) => {
                let tree = tree.clone();
                let mut leader = raft.leader_watch();
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
                        () = leader.other_than(leader_id) => {
                            fail_all(waiters.into_iter().map(|(w, _)| w), "the leader changed while a forwarded batch was in flight");
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
                                tree.wait_applied(last, FORWARD_TIMEOUT).await;
                            }
                            for (w, r) in after_apply {
                                let _ = w.send(Ok(r));
                            }
                        }
                        answer => {
                            let waiters = waiters.into_iter().map(|(w, _)| w);
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
                // The batch never reached the leader (see `PeerClient::start`): nothing of it
                // can have happened, so it is retried, first in line, until a leader takes it
                // or `FORWARD_RETRY_FOR` has passed; only then do its clients get
                // ConnectionLoss. (A batch that reached a leader which then failed stays in
                // doubt: see above.)
                let now = tokio::time::Instant::now();
                let txns = Arc::try_unwrap(txns).unwrap_or_else(|shared| (*shared).clone());
                let mut retry = Vec::new();
                let mut give_up = Vec::new();
                for ((txn, (waiter, committed_is_enough)), until) in txns.into_iter().zip(waiters).zip(retry_until) {
                    let until = until.unwrap_or(now + FORWARD_RETRY_FOR);
                    if now < until && !abandoned(&txn, &waiter) {
                        retry.push(Queued { txn, waiter, committed_is_enough, retry_until: Some(until) });
                    } else {
                        give_up.push(waiter);
                    }
                }
                if !give_up.is_empty() {
                    fail_all(give_up, &e.to_string());
                }
                if !retry.is_empty() {
                    tracing::debug!(error = %e, txns = retry.len(), "a forward did not reach the leader; retrying");
                    metrics::counter!("warden_forward_retries").increment(1);
                    inbox.requeue(retry);
                    drop(slot);
                    drop(permit);
                    let mut leader = raft.leader_watch();
                    let _ = tokio::time::timeout(FORWARD_RETRY_PAUSE, leader.other_than(leader_id)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::LeaderId;

    fn txn(session_id: i64) -> Txn {
        Txn { session_id, time_ms: 0, auth: Default::default(), op: TxnOp::CloseSession { session_id } }
    }

    async fn queued(inbox: &Inbox, sessions: &[i64]) -> Vec<oneshot::Receiver<Outcome>> {
        let mut waits = Vec::new();
        for &s in sessions {
            let (done, wait) = oneshot::channel();
            inbox
                .push(Queued { txn: txn(s), waiter: done, committed_is_enough: false, retry_until: None })
                .await
                .expect("push");
            waits.push(wait);
        }
        waits
    }

    fn log_id(index: u64) -> LogId {
        LogId::new(LeaderId { term: 1, node_id: 1 }, index)
    }

    /// A batch proposed empty takes the queue in order once, frees the next batch's slot, and
    /// registers its waiters under the entry's log id for the state machine.
    #[tokio::test]
    async fn a_fill_takes_the_queue_in_order_once_and_registers_the_waiters() {
        let proposer = Proposer::new(Arc::new(Waiters::default()));
        let shared = proposer.handle.0.clone();
        let _waits = queued(&shared.inbox, &[1, 2, 3]).await;
        let writing = Arc::new(Semaphore::new(1));
        *shared.unfilled() = Some((1, writing.clone().try_acquire_owned().expect("slot")));
        assert_eq!(writing.available_permits(), 0);
        let txns = proposer.filler().fill(log_id(7));
        assert_eq!(txns.iter().map(|t| t.session_id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(writing.available_permits(), 1, "filled: the next batch may be proposed");
        assert_eq!(shared.waiters.take_applied(&log_id(7)).map(|w| w.len()), Some(3));
        // Whatever arrives later belongs to the next batch, not to a second fill of this one.
        let _later = queued(&shared.inbox, &[4]).await;
        assert!(proposer.filler().fill(log_id(8)).is_empty());
        assert_eq!(shared.inbox.queue().len(), 1);
    }

    /// Txns of a forward that never reached the leader go back in front of what queued
    /// meanwhile, in their order, and keep their room in the queue counted.
    #[tokio::test]
    async fn a_requeued_batch_goes_back_in_front_in_order() {
        let inbox = Inbox::new();
        let _waits = queued(&inbox, &[1, 2, 3]).await;
        let taken = inbox.take_batch();
        let _later = queued(&inbox, &[4, 5]).await;
        let room = inbox.room.available_permits();
        inbox.requeue(taken);
        assert_eq!(inbox.room.available_permits(), room - 3);
        let order: Vec<i64> = inbox.take_all().iter().map(|q| q.txn.session_id).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5]);
    }

    /// A batch that failed before it was filled frees its slot, and only its own.
    #[tokio::test]
    async fn a_failed_unfilled_batch_frees_only_its_own_slot() {
        let proposer = Proposer::new(Arc::new(Waiters::default()));
        let shared = proposer.handle.0.clone();
        let writing = Arc::new(Semaphore::new(1));
        *shared.unfilled() = Some((5, writing.clone().try_acquire_owned().expect("slot")));
        shared.forget_unfilled(4);
        assert_eq!(writing.available_permits(), 0, "another batch's failure leaves it");
        shared.forget_unfilled(5);
        assert_eq!(writing.available_permits(), 1);
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
        assert!(inbox
            .push(Queued { txn: txn(3), waiter: done, committed_is_enough: false, retry_until: None })
            .await
            .is_err());
        assert!(inbox.queue().is_empty());
    }

    #[tokio::test]
    async fn the_inbox_wait_ends_when_the_last_handle_goes() {
        let proposer = Proposer::new(Arc::new(Waiters::default()));
        let shared = proposer.handle.0.clone();
        let waiter = tokio::spawn({
            let shared = shared.clone();
            async move { shared.inbox.wait().await }
        });
        drop(proposer);
        assert!(!waiter.await.expect("join"));
    }

    /// A txn whose client has gone is not sent, except a closeSession: the session's last
    /// word, which would otherwise leave its ephemerals to a timeout.
    #[test]
    fn only_a_close_session_outlives_its_client() {
        let set = Txn {
            session_id: 7,
            time_ms: 0,
            auth: Default::default(),
            op: TxnOp::SetData { path: "/a".into(), data: None, version: -1 },
        };
        let (done, wait) = oneshot::channel();
        assert!(!abandoned(&set, &done));
        assert!(!abandoned(&txn(7), &done));
        drop(wait);
        assert!(abandoned(&set, &done));
        assert!(!abandoned(&txn(7), &done));
    }
}
