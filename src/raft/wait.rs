//! The waiters of the txns this server proposed as leader, keyed by the log id of the entry
//! that carries them: etcd's `pkg/wait`, registered before the entry can commit and
//! triggered by id. The proposer registers a batch's waiters when the log store appends its
//! entry ([`super::batch::Fill`]); the state machine takes them when it applies that entry
//! and answers each txn the moment it is applied (after its watch events are queued); the
//! proposer fails them by term when openraft reports its batch failed. Whichever comes first
//! takes them, so each waiter is answered once, from this registry.
//!
//! An entry applied at an index where this server registered another log id (a different
//! term) replaced that one, which can never commit: its waiters are failed then.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::LogId;
use super::ProposeError;
use crate::tree::txn::TxnResult;

/// A txn's result as its proposer sees it.
pub type Outcome = Result<TxnResult, ProposeError>;
/// Where one txn's result goes: the connection (or forwarding follower) that sent it.
pub type Waiter = oneshot::Sender<Outcome>;

#[derive(Default)]
struct Inner {
    /// By log index: the entry's log id and one waiter per txn, in batch order.
    entries: BTreeMap<u64, (LogId, Vec<Waiter>)>,
    /// Set once nothing more will be applied here: registrations are failed at once.
    stopped: Option<String>,
}

/// The registry.
#[derive(Default)]
pub struct Waiters {
    /// std `Mutex`: held for a map operation only, never across an `.await`.
    inner: Mutex<Inner>,
}

/// Fails `waiters` with reason `why`: their clients get ConnectionLoss (the outcome is in
/// doubt), so the reason is logged here, where it is still known.
pub fn fail(waiters: impl IntoIterator<Item = Waiter>, why: &str) {
    let mut n = 0usize;
    for w in waiters {
        n += 1;
        let _ = w.send(Err(ProposeError::Raft(why.to_owned())));
    }
    if n > 0 {
        tracing::warn!(txns = n, reason = why, "writes failed; their clients get ConnectionLoss");
    }
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers the waiters of the entry appended as `log_id`, one per txn in order.
    pub fn register(&self, log_id: LogId, waiters: Vec<Waiter>) {
        if waiters.is_empty() {
            return;
        }
        let mut inner = self.lock();
        if let Some(why) = inner.stopped.clone() {
            drop(inner);
            fail(waiters, &why);
            return;
        }
        let replaced = inner.entries.insert(log_id.index, (log_id, waiters));
        drop(inner);
        // openraft truncated this server's entry at that index and appended another there.
        if let Some((_, old)) = replaced {
            fail(old, "the entry was overwritten before it committed");
        }
    }

    /// The state machine applies `log_id`: the waiters registered for it, if any. Waiters of
    /// any other entry at this index or below can no longer be answered by an apply and are
    /// failed.
    pub fn take_applied(&self, log_id: &LogId) -> Option<Vec<Waiter>> {
        let mut inner = self.lock();
        if inner.entries.is_empty() {
            return None;
        }
        let later = inner.entries.split_off(&(log_id.index + 1));
        let done = std::mem::replace(&mut inner.entries, later);
        drop(inner);
        let mut mine = None;
        let mut stale = Vec::new();
        for (_, (id, waiters)) in done {
            if id == *log_id {
                mine = Some(waiters);
            } else {
                stale.extend(waiters);
            }
        }
        fail(stale, "the entry was replaced by another leader's before it committed");
        mine
    }

    /// A batch proposed in some term failed: fails the waiters of every entry of term
    /// `through_term` or older (their commit is in doubt; a new leader may still commit them,
    /// and their clients learn the outcome by reading).
    pub fn fail_through_term(&self, through_term: u64, why: &str) {
        let failed: Vec<Waiter> = {
            let mut inner = self.lock();
            let doomed: Vec<u64> = inner
                .entries
                .iter()
                .filter(|(_, (id, _))| id.leader_id.term <= through_term)
                .map(|(index, _)| *index)
                .collect();
            doomed.into_iter().filter_map(|i| inner.entries.remove(&i)).flat_map(|(_, w)| w).collect()
        };
        fail(failed, why);
    }

    /// Nothing more will be applied here: fails every registered waiter and every later one.
    pub fn stop(&self, why: &str) {
        let failed: Vec<Waiter> = {
            let mut inner = self.lock();
            inner.stopped = Some(why.to_owned());
            std::mem::take(&mut inner.entries).into_values().flat_map(|(_, w)| w).collect()
        };
        fail(failed, why);
    }

    /// Registered entries (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::LeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 1 }, index)
    }

    fn waiters(n: usize) -> (Vec<Waiter>, Vec<oneshot::Receiver<Outcome>>) {
        (0..n).map(|_| oneshot::channel()).unzip()
    }

    fn failed(rx: &mut oneshot::Receiver<Outcome>) -> bool {
        matches!(rx.try_recv(), Ok(Err(_)))
    }

    /// The applied entry's waiters are handed out once; registrations at lower indexes (or the
    /// same index under another term) are failed, later ones stay.
    #[test]
    fn apply_takes_its_own_and_fails_what_it_replaced() {
        let w = Waiters::default();
        let (a, mut ra) = waiters(2);
        let (b, mut rb) = waiters(1);
        let (c, mut rc) = waiters(1);
        w.register(id(1, 5), a);
        w.register(id(1, 6), b);
        w.register(id(1, 8), c);
        // Index 6 was applied under term 2: entry (1, 6) was overwritten, and (1, 5) below it
        // was never applied here with its waiters (a leader change in between).
        assert!(w.take_applied(&id(2, 6)).is_none());
        assert!(ra.iter_mut().all(failed));
        assert!(rb.iter_mut().all(failed));
        assert!(rc[0].try_recv().is_err(), "index 8 still waits");
        let mine = w.take_applied(&id(1, 8)).expect("registered");
        assert_eq!(mine.len(), 1);
        assert!(w.take_applied(&id(1, 8)).is_none(), "taken once");
        assert!(w.is_empty());
    }

    #[test]
    fn a_failed_term_fails_its_entries_and_older_ones_only() {
        let w = Waiters::default();
        let (a, mut ra) = waiters(1);
        let (b, mut rb) = waiters(1);
        w.register(id(3, 10), a);
        w.register(id(4, 11), b);
        w.fail_through_term(3, "lost leadership");
        assert!(failed(&mut ra[0]));
        assert!(rb[0].try_recv().is_err(), "term 4 is not in doubt");
        w.stop("stopping");
        assert!(failed(&mut rb[0]));
        let (c, mut rc) = waiters(1);
        w.register(id(4, 12), c);
        assert!(failed(&mut rc[0]), "after stop, a registration fails at once");
    }

    #[test]
    fn an_overwritten_registration_is_failed() {
        let w = Waiters::default();
        let (a, mut ra) = waiters(1);
        let (b, _rb) = waiters(1);
        w.register(id(1, 4), a);
        w.register(id(2, 4), b);
        assert!(failed(&mut ra[0]));
        assert_eq!(w.len(), 1);
    }
}
