//! Session liveness: when each session was last heard from, which connection owns it, and
//! which sessions have outlived their timeout. Counterpart of ZooKeeper's `SessionTracker`
//! (`SessionTrackerImpl` on the leader, `LearnerSessionTracker` on a follower).
//!
//! The replicated session table (id, timeout, password, ephemerals) lives in the tree; this
//! module only tracks time, locally, and never changes the tree itself. Heartbeats are not
//! replicated: a follower sends the sessions it heard from to the leader ([`send_touches`]),
//! and the leader alone expires sessions ([`expire`]) by proposing `CloseSession` for what
//! [`SessionTracker::expired`] returns. A session found in the tree but never heard from here
//! (after a restart or failover) first gets a whole fresh timeout: the grace period.

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::peer::PeerRequest;
use crate::peer::Peers;
use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::raft::TxnBatch;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;

struct Local {
    timeout: Duration,
    deadline: Instant,
    /// The connection currently serving the session, and how to close it.
    owner: Option<(u64, oneshot::Sender<()>)>,
    closing: bool,
}

/// Local session liveness.
pub struct SessionTracker {
    /// std `Mutex`: short critical sections, never held across `.await`.
    sessions: Mutex<HashMap<i64, Local>>,
    /// Sessions heard from since the last touch batch went to the leader.
    touched: Mutex<std::collections::HashSet<i64>>,
    counter: AtomicI64,
    server_id: u64,
    /// On the leader: which member serves each session (ZooKeeper's session owner), set when
    /// a session is created or resumed there; a write from another member's connection is
    /// refused with SessionMoved. In memory only, as in ZooKeeper: a new leader learns each
    /// session's member from its next write or reconnect.
    members: Mutex<HashMap<i64, u64>>,
    /// Local sessions (`localSessionsEnabled`): on this member only, never in the log, with
    /// their timeout and password, until they end or become global ([`SessionTracker::make_global`]).
    local: Mutex<HashMap<i64, (i32, bytes::Bytes)>>,
}

impl SessionTracker {
    /// A tracker for a server with id `server_id`.
    pub fn new(server_id: u64) -> SessionTracker {
        let millis = crate::clock::now_ms();
        // SessionTrackerImpl.initializeNextSessionId: time in the middle bits, server id on top.
        let base = ((millis << 24) as u64 >> 8) as i64 | ((server_id as i64) << 56);
        SessionTracker {
            sessions: Mutex::new(HashMap::new()),
            touched: Mutex::new(std::collections::HashSet::new()),
            counter: AtomicI64::new(base),
            server_id,
            members: Mutex::new(HashMap::new()),
            local: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Local>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh session id (never 0, never `i64::MIN`).
    pub fn next_id(&self) -> i64 {
        loop {
            let id = self.counter.fetch_add(1, Ordering::Relaxed);
            if id != 0 && id != i64::MIN {
                return id;
            }
        }
    }

    /// This server's id.
    pub fn server_id(&self) -> u64 {
        self.server_id
    }

    /// Attaches `session` to connection `conn`; an older connection of the same session is
    /// told to close (ZooKeeper closes it with reason CLIENT_RECONNECT).
    pub fn attach(&self, session: i64, timeout_ms: i32, conn: u64, close: oneshot::Sender<()>) {
        let timeout = Duration::from_millis(timeout_ms.max(1) as u64);
        let mut map = self.lock();
        let entry = map.entry(session).or_insert(Local {
            timeout,
            deadline: Instant::now() + timeout,
            owner: None,
            closing: false,
        });
        entry.timeout = timeout;
        entry.deadline = Instant::now() + timeout;
        if let Some((_, old)) = entry.owner.replace((conn, close)) {
            let _ = old.send(());
        }
    }

    /// The connection `conn` went away; the session keeps ticking towards expiry.
    pub fn detach(&self, session: i64, conn: u64) {
        if let Some(l) = self.lock().get_mut(&session) {
            if l.owner.as_ref().is_some_and(|(c, _)| *c == conn) {
                l.owner = None;
            }
        }
    }

    /// Any packet from the session's client (or a follower's touch batch).
    pub fn touch(&self, session: i64) {
        if let Some(l) = self.lock().get_mut(&session) {
            l.deadline = Instant::now() + l.timeout;
        }
        self.touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(session);
    }

    /// Sessions heard from (any packet, pings included) since the last call. A follower sends
    /// these to the leader, which alone expires sessions; a connected but silent client is not
    /// in the list, so its session expires as in ZooKeeper.
    pub fn take_touched(&self) -> Vec<i64> {
        let touched = std::mem::take(&mut *self.touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let local = self.local();
        // Local sessions are this member's business alone.
        touched.into_iter().filter(|id| !local.contains_key(id)).collect()
    }

    /// A new leader gives every session a fresh timeout plus `slack` before expiring any (the
    /// failover grace period), since it cannot know when followers last heard from them and
    /// their clients need time to notice the old leader is gone and reconnect elsewhere.
    pub fn grace_all(&self, slack: Duration) {
        let now = Instant::now();
        for l in self.lock().values_mut() {
            l.deadline = now + l.timeout + slack;
            l.closing = false;
        }
    }

    fn local(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (i32, bytes::Bytes)>> {
        self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a local session (ZooKeeper's `LocalSessionTracker`).
    pub fn create_local(&self, session: i64, timeout_ms: i32, passwd: bytes::Bytes) {
        self.local().insert(session, (timeout_ms, passwd));
    }

    /// A local session's timeout and password.
    pub fn local_session(&self, session: i64) -> Option<(i32, bytes::Bytes)> {
        self.local().get(&session).cloned()
    }

    pub fn is_local(&self, session: i64) -> bool {
        self.local().contains_key(&session)
    }

    /// The local session is global now (its `CreateSession` was applied).
    pub fn make_global(&self, session: i64) {
        self.local().remove(&session);
    }

    /// Ends a local session (its client closed it); whether it was one.
    pub fn close_local(&self, session: i64) -> bool {
        let was = self.local().remove(&session).is_some();
        if was {
            self.lock().remove(&session);
        }
        was
    }

    /// The local sessions' ids and timeouts.
    pub fn local_sessions(&self) -> Vec<(i64, i32)> {
        self.local().iter().map(|(id, (t, _))| (*id, *t)).collect()
    }

    /// Local sessions past their timeout: forgotten here (they hold no ephemerals), their
    /// connections told to close. Each member expires its own (`LocalSessionTracker`).
    pub fn expire_local(&self) -> Vec<i64> {
        let now = Instant::now();
        // Lock order: the sessions, then the local table (as `expired`).
        let mut map = self.lock();
        let mut local = self.local();
        let gone: Vec<i64> = local
            .iter()
            .filter(|(id, (timeout_ms, _))| match map.get(*id) {
                Some(l) => l.deadline <= now,
                // Never attached (a handshake that did not finish): a fresh timeout from now.
                None => {
                    let timeout = Duration::from_millis((*timeout_ms).max(1) as u64);
                    map.insert(**id, Local { timeout, deadline: now + timeout, owner: None, closing: false });
                    false
                }
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &gone {
            local.remove(id);
            if let Some(Local { owner: Some((_, close)), .. }) = map.remove(id) {
                let _ = close.send(());
            }
        }
        gone
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<i64, u64>> {
        self.members.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// On the leader: whether a write of `session` from `member`'s connection may go on: the
    /// session is that member's (or not known yet, and now is).
    pub fn claim(&self, session: i64, member: u64) -> bool {
        *self.members().entry(session).or_insert(member) == member
    }

    /// On the leader: `session` was resumed on `member`. Writes from its connections anywhere
    /// else are refused from now on, and a connection of it on this member, if another, is
    /// closed (ZooKeeper's leader does the same).
    pub fn moved_to(&self, session: i64, member: u64) {
        let before = self.members().insert(session, member);
        if member != self.server_id && before != Some(member) {
            if let Some(l) = self.lock().get_mut(&session) {
                if let Some((_, close)) = l.owner.take() {
                    let _ = close.send(());
                }
            }
        }
    }

    /// The session is gone from the tree; forget it.
    pub fn remove(&self, session: i64) {
        self.members().remove(&session);
        if let Some(l) = self.lock().remove(&session) {
            if let Some((_, close)) = l.owner {
                let _ = close.send(());
            }
        }
    }

    /// Sessions (from the replicated table `known`) past their deadline, each reported once.
    /// Sessions seen for the first time get a full timeout from now.
    pub fn expired(&self, known: impl Iterator<Item = (i64, i32)>) -> Vec<i64> {
        let now = Instant::now();
        let mut map = self.lock();
        let mut out = Vec::new();
        let mut present = std::collections::HashSet::new();
        for (id, timeout_ms) in known {
            present.insert(id);
            let timeout = Duration::from_millis(timeout_ms.max(1) as u64);
            let l = map.entry(id).or_insert(Local { timeout, deadline: now + timeout, owner: None, closing: false });
            if !l.closing && l.deadline <= now {
                l.closing = true;
                out.push(id);
            }
        }
        let local = self.local();
        map.retain(|id, l| present.contains(id) || l.owner.is_some() || local.contains_key(id));
        out
    }

    /// Whether the leader's expirer is closing this session (its CloseSession proposed, not
    /// yet applied): it is as good as expired (ZooKeeper's `SessionTrackerImpl` answers
    /// a revalidation of a closing session with false).
    pub fn is_closing(&self, session: i64) -> bool {
        self.lock().get(&session).is_some_and(|l| l.closing)
    }

    /// A close that failed to commit may be retried.
    pub fn retry_close(&self, session: i64) {
        if let Some(l) = self.lock().get_mut(&session) {
            l.closing = false;
        }
    }

    /// How long ago each known session was last heard from, in ms.
    pub fn last_heard_ms(&self) -> HashMap<i64, u64> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(id, l)| {
                let heard = l.deadline.checked_sub(l.timeout).unwrap_or(now);
                (*id, now.saturating_duration_since(heard).as_millis() as u64)
            })
            .collect()
    }

    /// Number of sessions with a live connection here.
    pub fn connected(&self) -> usize {
        self.lock().values().filter(|l| l.owner.is_some()).count()
    }
}

/// Most CloseSession txns the expirer puts in one Raft entry.
const CLOSE_BATCH: usize = 256;

/// How often the expirer looks and a follower sends its touches: a quarter tick, within
/// 20-500 ms.
pub fn period(tick_ms: u32) -> Duration {
    Duration::from_millis((u64::from(tick_ms) / 4).clamp(20, 500))
}

/// The leader's expirer: proposes `CloseSession` for sessions past their timeout. A new
/// leader first gives every session a fresh timeout plus two ticks of slack (the failover
/// grace, like the tick rounding of ZooKeeper's `ExpiryQueue` plus the time a client needs to
/// give up on a frozen server and try the next one).
pub async fn expire(
    raft: Raft,
    tree: Arc<SharedTree>,
    tracker: Arc<SessionTracker>,
    tick_ms: u32,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(period(tick_ms));
    let mut was_leader = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !raft.is_leader() {
            was_leader = false;
            continue;
        }
        if !was_leader {
            tracker.grace_all(Duration::from_millis(2 * u64::from(tick_ms)));
            was_leader = true;
        }
        let known: Vec<(i64, i32)> = tree.read().sessions().map(|(id, s)| (*id, s.timeout_ms)).collect();
        let expired = tracker.expired(known.into_iter());
        // Sessions that expire together are closed together: up to CLOSE_BATCH CloseSession
        // txns per Raft entry (one append, one fsync), each still its own txn and zxid. An
        // expiry storm of thousands of sessions is then a few entries, not thousands.
        for chunk in expired.chunks(CLOSE_BATCH) {
            let (raft, tracker, sessions) = (raft.clone(), tracker.clone(), chunk.to_vec());
            tokio::spawn(async move {
                let time_ms = crate::clock::now_ms();
                let txns = sessions
                    .iter()
                    .map(|&session_id| Txn {
                        session_id: 0,
                        time_ms,
                        auth: Default::default(),
                        op: TxnOp::CloseSession { session_id },
                    })
                    .collect();
                // Only as leader, never forwarded: a leader that was frozen and does not yet
                // know it was replaced cannot commit this.
                match raft.propose(TxnBatch::new(txns)).await {
                    Ok(_) => {
                        metrics::counter!("warden_sessions_expired").increment(sessions.len() as u64);
                        for &session_id in &sessions {
                            tracing::info!(session = format_args!("{session_id:#x}"), "session expired");
                            tracker.remove(session_id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, sessions = sessions.len(), "closing expired sessions failed; will retry");
                        for &session_id in &sessions {
                            tracker.retry_close(session_id);
                        }
                    }
                }
            });
        }
    }
}

/// Expires this member's local sessions (`localSessionsEnabled`); every member runs it.
pub async fn expire_local(tracker: Arc<SessionTracker>, tick_ms: u32, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(period(tick_ms));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        for id in tracker.expire_local() {
            metrics::counter!("warden_sessions_expired").increment(1);
            tracing::info!(session = format_args!("{id:#x}"), "local session expired");
        }
    }
}

/// A follower tells the leader which sessions it heard from (pings are answered locally).
pub async fn send_touches(
    raft: Raft,
    peers: Peers,
    tracker: Arc<SessionTracker>,
    tick_ms: u32,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(period(tick_ms));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Some((leader, addr)) = raft.status().leader_addr().filter(|(l, _)| *l != raft.id()) else { continue };
        let touched = tracker.take_touched();
        if touched.is_empty() {
            continue;
        }
        if let Err(e) = peers.client(leader, &addr).call(PeerRequest::Touch(touched), Duration::from_secs(2)).await {
            tracing::debug!(error = %e, "session touches not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local session lives in its member's table alone: its touches are not sent to the
    /// leader, the leader's expirer keeps it while disconnected, and it expires here after
    /// its timeout, its connection told to close.
    #[test]
    fn local_sessions_expire_here() {
        let t = SessionTracker::new(1);
        let (local, global) = (t.next_id(), t.next_id());
        t.create_local(local, 20, bytes::Bytes::from_static(b"pw"));
        let (close, closed) = oneshot::channel();
        t.attach(local, 20, 7, close);
        t.touch(local);
        t.touch(global);
        assert_eq!(t.take_touched(), vec![global]);
        t.detach(local, 7);
        assert!(t.expired(std::iter::empty()).is_empty());
        assert!(t.expire_local().is_empty(), "not yet");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(t.expire_local(), vec![local]);
        assert!(!t.is_local(local));
        drop(closed);
        // A local session that becomes global leaves the local table.
        let up = t.next_id();
        t.create_local(up, 1000, bytes::Bytes::new());
        t.make_global(up);
        assert!(t.local_sessions().is_empty());
    }
}
