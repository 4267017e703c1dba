//! Which of a session's writes must wait for its earlier reads (the client port keeps one
//! [`WaitingReads`] per connection).
//!
//! A read sent behind a write of its own session waits for that write to be applied (see
//! `crate::client`); a write sent after the read is proposed at once. If the state machine then
//! applies that later write before the read has run, the read sees it: a `getData` with a
//! watch returns the new data and sets its watch after the change, so the event the client
//! expects for its own write never comes (ZooKeeper applies a session's requests in order, and
//! never answers so). Seen on a loaded follower in the compat suite.
//!
//! Holding every such write until the reads before it have run cost a 90/10 mixed load ~15% of
//! its throughput (paired, standalone 16x8), since a session's writes then no longer share a
//! commit. So a write waits only when it may change what a waiting read looks at: the read's
//! node ([`Scope::Node`], compared by a hash of its path; a collision only makes a write wait),
//! or anything at all for reads that look at more than one node ([`Scope::All`]).

use std::collections::VecDeque;
use std::future::Future;
use std::hash::Hash;
use std::hash::Hasher;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use jute::Request;
use tokio::sync::watch;

use super::Write;
use crate::tree::txn::TxnOp;

/// One connection's reads (and syncs) that had to wait for earlier writes, for the writes
/// sent after them.
pub struct WaitingReads {
    /// How many were registered.
    registered: u64,
    /// Those that may not have read yet: what each looks at, and whether it has read.
    pending: VecDeque<(Scope, Arc<AtomicBool>)>,
    /// How many have read. Notifies only while a write waits (as the parent module's
    /// `Written` does, for the same cost). Made at the first registration: most connections
    /// never have a read wait, and a watch channel is ~350 bytes of each one's memory.
    read: Option<Arc<watch::Sender<u64>>>,
}

/// A registered read's promise to report once it has read.
pub struct Ticket {
    ran: Arc<AtomicBool>,
    read: Arc<watch::Sender<u64>>,
}

impl Ticket {
    /// The read has run against the tree (its watch, if any, is set).
    pub fn ran(self) {
        self.ran.store(true, Ordering::Release);
        self.read.send_if_modified(|n| {
            *n += 1;
            self.read.receiver_count() > 0
        });
    }
}

impl Default for WaitingReads {
    fn default() -> Self {
        WaitingReads::new()
    }
}

impl WaitingReads {
    pub fn new() -> WaitingReads {
        WaitingReads { registered: 0, pending: VecDeque::new(), read: None }
    }

    fn forget_ran(&mut self) {
        while self.pending.front().is_some_and(|(_, ran)| ran.load(Ordering::Acquire)) {
            self.pending.pop_front();
        }
    }

    /// Registers a read of `scope` that waits for earlier writes.
    pub fn register(&mut self, scope: Scope) -> Ticket {
        self.forget_ran();
        self.registered += 1;
        let ran = Arc::new(AtomicBool::new(false));
        self.pending.push_back((scope, ran.clone()));
        let read = self.read.get_or_insert_with(|| Arc::new(watch::channel(0).0)).clone();
        Ticket { ran, read }
    }

    /// For a write sent now: `None` if it may be proposed at once, or else a future that
    /// resolves once every read registered before it has read.
    pub fn hold(&mut self, write: &Write) -> Option<impl Future<Output = ()> + Send + 'static> {
        let op = &write.txn.op;
        self.forget_ran();
        let conflict = self.pending.iter().any(|(scope, ran)| !ran.load(Ordering::Acquire) && may_change(op, *scope));
        // A pending read was registered, so the channel exists.
        let read = self.read.as_ref().filter(|_| conflict)?;
        let before = self.registered;
        let mut read = read.subscribe();
        Some(async move {
            let _ = read.wait_for(|n| *n >= before).await;
        })
    }
}

/// What a read looks at, for ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One node: its data, stat, ACL, children, or a watch on it.
    Node(u64),
    /// More than one node, or the session (subtree counts, ephemerals, recursive and resumed
    /// watches, multi reads, sync).
    All,
}

fn path_hash(path: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish()
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// What `request`, a read, looks at.
pub fn read_scope(request: &Request) -> Scope {
    let path = match request {
        Request::Exists(r) => &r.path,
        Request::GetData(r) => &r.path,
        Request::GetChildren(r) => &r.path,
        Request::GetChildren2(r) => &r.path,
        Request::GetAcl(r) => &r.path,
        _ => return Scope::All,
    };
    // A write anywhere below a quota'd path changes its stats node.
    if path.starts_with(crate::tree::quota::QUOTA_ROOT) {
        return Scope::All;
    }
    Scope::Node(path_hash(path))
}

/// Whether `op` may change what a read of `scope` looks at. A create or delete changes its
/// node and its parent (children, `cversion`, `pzxid`); a sequential create's node is named
/// only when applied, so it may change anything.
fn may_change(op: &TxnOp, scope: Scope) -> bool {
    let Scope::Node(read) = scope else { return !matches!(op, TxnOp::Check { .. } | TxnOp::Fail(_)) };
    let node_or_parent = |path: &str| path_hash(path) == read || path_hash(parent(path)) == read;
    match op {
        TxnOp::Create(c) if jute::CreateMode::try_from(c.flags).map_or(true, |m| m.is_sequential()) => true,
        TxnOp::Create(c) => node_or_parent(&c.path),
        TxnOp::Delete { path, .. } | TxnOp::DeleteContainer { path } => node_or_parent(path),
        TxnOp::SetData { path, .. } | TxnOp::SetAcl { path, .. } => path_hash(path) == read,
        TxnOp::Check { .. } | TxnOp::Fail(_) => false,
        TxnOp::Multi(ops) => ops.iter().any(|op| may_change(op, scope)),
        TxnOp::CreateSession { .. } | TxnOp::CloseSession { .. } => true,
        TxnOp::SetConfig { .. } => path_hash(crate::tree::CONFIG_NODE) == read,
        TxnOp::QuotaEnforced(op) => may_change(op, scope),
        TxnOp::Restore { .. } => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::txn::CreateOp;

    fn create(path: &str, flags: i32) -> TxnOp {
        TxnOp::Create(CreateOp { path: path.into(), data: None, acl: Vec::new(), flags, ttl: -1 })
    }

    fn get(path: &str) -> Scope {
        read_scope(&Request::GetData(jute::GetDataRequest { path: path.into(), watch: true }))
    }

    #[test]
    fn a_write_conflicts_with_reads_of_its_node_and_parent_only() {
        let set = TxnOp::SetData { path: "/a/b".into(), data: None, version: -1 };
        assert!(may_change(&set, get("/a/b")));
        assert!(!may_change(&set, get("/a")), "setData leaves the parent's stat alone");
        assert!(!may_change(&set, get("/a/c")));
        assert!(may_change(&create("/a/b", 0), get("/a")), "a create changes its parent's children");
        assert!(may_change(&create("/a", 0), get("/")));
        let delete = TxnOp::Delete { path: "/a/b".into(), version: -1 };
        assert!(may_change(&delete, get("/a/b")) && may_change(&delete, get("/a")));
        assert!(!may_change(&delete, get("/x")));
    }

    #[tokio::test]
    async fn a_conflicting_write_is_held_until_the_reads_before_it_ran() {
        use futures::FutureExt;
        let mut reads = WaitingReads::new();
        let write = |op| Write {
            txn: crate::tree::txn::Txn { session_id: 1, time_ms: 0, auth: Default::default(), op },
            op: jute::OpCode::SetData,
            path_only: Vec::new(),
        };
        let set_b = write(TxnOp::SetData { path: "/b".into(), data: None, version: -1 });
        let set_a = write(TxnOp::SetData { path: "/a".into(), data: None, version: -1 });
        let first = reads.register(get("/a"));
        let second = reads.register(get("/c"));
        assert!(reads.hold(&set_b).is_none(), "no waiting read looks at /b");
        let mut held = Box::pin(reads.hold(&set_a).expect("a read of /a waits"));
        first.ran();
        assert!((&mut held).now_or_never().is_none(), "the read of /c, registered before, has not run");
        second.ran();
        assert!(held.now_or_never().is_some());
        assert!(reads.hold(&set_a).is_none(), "every read has run");
    }

    #[test]
    fn sequential_creates_sessions_and_wide_reads_conflict_with_everything() {
        assert!(may_change(&create("/q/n-", 2), get("/elsewhere")), "its name is not known yet");
        assert!(may_change(&create("/q/n-", 3), get("/q/n-0000000001")));
        assert!(may_change(&create("/q/n-", 6), get("/elsewhere")));
        assert!(!may_change(&create("/q/t", 5), get("/elsewhere")), "a TTL node's name is known");
        assert!(may_change(&TxnOp::CloseSession { session_id: 1 }, get("/e")), "ephemerals go");
        let set = TxnOp::SetData { path: "/a".into(), data: None, version: -1 };
        assert!(may_change(&set, Scope::All));
        assert!(!may_change(&TxnOp::Check { path: "/a".into(), version: 1 }, Scope::All));
        assert_eq!(read_scope(&Request::WhoAmI), Scope::All);
        let multi = TxnOp::Multi(vec![TxnOp::Check { path: "/a".into(), version: 1 }, set]);
        assert!(may_change(&multi, get("/a")) && !may_change(&multi, get("/b")));
    }
}
