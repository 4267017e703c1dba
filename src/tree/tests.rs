//! DataTree unit tests: Stat bookkeeping, sequential names, multi atomicity, sessions.

use super::*;

fn txn(session_id: i64, op: TxnOp) -> Txn {
    Txn { session_id, time_ms: 1000, auth: vec![], op }
}

fn create(path: &str, flags: i32) -> TxnOp {
    TxnOp::Create(CreateOp {
        path: path.into(),
        data: Some(Bytes::from_static(b"x")),
        acl: AclEntry::open(),
        flags,
        ttl: -1,
    })
}

/// Sequential names come from the parent's cversion before the increment, 10 digits.
#[test]
fn sequential_names_and_parent_stat() {
    let mut t = DataTree::new();
    let (r, changes) = t.apply(5, &txn(0, create("/a", 0)));
    assert!(matches!(r, Ok(TxnOutput::Created { ref path, .. }) if path == "/a"));
    assert_eq!(changes.len(), 2);
    let (r, _) = t.apply(6, &txn(0, create("/a/s-", 2)));
    assert!(matches!(r, Ok(TxnOutput::Created { ref path, .. }) if path == "/a/s-0000000000"));
    let (r, _) = t.apply(7, &txn(0, create("/a/s-", 2)));
    assert!(matches!(r, Ok(TxnOutput::Created { ref path, .. }) if path == "/a/s-0000000001"));
    let stat = t.exists("/a").unwrap();
    assert_eq!((stat.cversion, stat.num_children, stat.pzxid), (2, 2, 7)); // 2 creates, 0 deletes
    assert_eq!(t.apply(8, &txn(0, create("/a", 0))).0, Err(TreeError::NodeExists));
    assert_eq!(t.apply(9, &txn(0, create("/x/y", 0))).0, Err(TreeError::NoNode));
    assert_eq!(t.apply(10, &txn(0, TxnOp::Delete { path: "/a".into(), version: -1 })).0, Err(TreeError::NotEmpty));
}

/// A failed multi changes nothing and reports RolledBack / the error / RuntimeInconsistency.
#[test]
fn multi_is_all_or_nothing() {
    let mut t = DataTree::new();
    let ops = vec![create("/m1", 0), TxnOp::Check { path: "/nope".into(), version: 0 }, create("/m2", 0)];
    let (r, changes) = t.apply(3, &txn(0, TxnOp::Multi(ops)));
    assert!(changes.is_empty());
    assert_eq!(
        r,
        Ok(TxnOutput::Multi {
            results: vec![
                OpResult::RolledBack,
                OpResult::Error(TreeError::NoNode),
                OpResult::Error(TreeError::RuntimeInconsistency)
            ],
            failed: true
        })
    );
    assert_eq!(t.exists("/m1"), Err(TreeError::NoNode));
}

/// Closing a session deletes its ephemerals; ephemerals cannot have children.
#[test]
fn session_close_removes_ephemerals() {
    let mut t = DataTree::new();
    let _ = t.apply(
        1,
        &txn(0, TxnOp::CreateSession { session_id: 7, timeout_ms: 4000, passwd: Bytes::from_static(&[0; 16]) }),
    );
    let _ = t.apply(2, &txn(7, create("/e", 1)));
    assert_eq!(t.exists("/e").unwrap().ephemeral_owner, 7);
    assert_eq!(t.apply(3, &txn(7, create("/e/c", 0))).0, Err(TreeError::NoChildrenForEphemerals));
    assert_eq!(t.ephemerals(7, "/"), vec!["/e".to_string()]);
    let (_, changes) = t.apply(4, &txn(0, TxnOp::CloseSession { session_id: 7 }));
    assert_eq!(
        changes[0],
        Change { event: EventType::NodeDeleted, path: "/e".into(), acl: Arc::new(AclEntry::open()) }
    );
    assert_eq!(t.exists("/e"), Err(TreeError::NoNode));
}
