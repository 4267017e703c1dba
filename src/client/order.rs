//! Which of a session's writes must wait for its earlier reads.
//!
//! A read sent behind a write of its own session waits for that write to be applied (see the
//! parent module); a write sent after the read is proposed at once. If the state machine then
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

use std::hash::Hash;
use std::hash::Hasher;

use jute::Request;

use crate::txn::TxnOp;

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
    Scope::Node(path_hash(path))
}

/// Whether `op` may change what a read of `scope` looks at. A create or delete changes its
/// node and its parent (children, `cversion`, `pzxid`); a sequential create's node is named
/// only when applied, so it may change anything.
pub fn may_change(op: &TxnOp, scope: Scope) -> bool {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::CreateOp;

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
