//! DataTree unit tests: Stat bookkeeping, sequential names, multi atomicity, sessions.

use super::*;

fn txn(session_id: i64, op: TxnOp) -> Txn {
    Txn { session_id, time_ms: 1000, auth: Default::default(), op }
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

/// A session's ephemerals set exists only while it holds a path, and is encoded as the plain
/// set always was, so snapshots written before still load and new ones read the same.
#[test]
fn ephemerals_are_kept_only_while_there_are_some_and_encode_as_a_set() {
    let mut e = Ephemerals::default();
    assert!(e.is_empty() && e.0.is_none());
    e.insert("/b".into());
    e.insert("/a".into());
    assert_eq!(e.iter().collect::<Vec<_>>(), ["/a", "/b"]);
    let set: OrdSet<String> = ["/a".to_string(), "/b".to_string()].into_iter().collect();
    assert_eq!(postcard::to_stdvec(&e).unwrap(), postcard::to_stdvec(&set).unwrap());
    let back: Ephemerals = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
    assert_eq!(back, e);
    e.remove("/a");
    e.remove("/b");
    assert!(e.0.is_none(), "the last path gone, the set goes");
    assert_eq!(postcard::to_stdvec(&e).unwrap(), postcard::to_stdvec(&OrdSet::<String>::new()).unwrap());
    let none: Ephemerals = postcard::from_bytes(&postcard::to_stdvec(&OrdSet::<String>::new()).unwrap()).unwrap();
    assert!(none.0.is_none(), "an empty set read back takes no node");
}

fn session(id: i64) -> TxnOp {
    TxnOp::CreateSession { session_id: id, timeout_ms: 4000, passwd: Bytes::from_static(&[0; 16]) }
}

fn set_data(path: &str, data: &'static [u8]) -> TxnOp {
    TxnOp::SetData { path: path.into(), data: Some(Bytes::from_static(data)), version: -1 }
}

/// A mix of every kind of txn, successful and failing, as (session, op).
fn mixed_ops() -> Vec<(i64, TxnOp)> {
    let read_only =
        vec![AclEntry { perms: jute::perms::READ, id: AuthId { scheme: "world".into(), id: "anyone".into() } }];
    vec![
        (0, session(7)),
        (0, create("/a", 0)),
        (0, create("/a/s-", 2)),
        (7, create("/a/e", 1)),
        (0, set_data("/a", b"hello")),
        (0, TxnOp::SetAcl { path: "/a/s-0000000000".into(), acl: read_only, version: -1 }),
        (0, TxnOp::Multi(vec![create("/m", 0), set_data("/m", b"m")])),
        (0, TxnOp::Multi(vec![create("/m2", 0), TxnOp::Check { path: "/nope".into(), version: 0 }])),
        (0, create("/a", 0)), // NodeExists: changes nothing
        (0, TxnOp::Delete { path: "/a/s-0000000000".into(), version: -1 }),
        (0, TxnOp::CloseSession { session_id: 7 }),
    ]
}

/// Every replica that applies the same txns at the same zxids has the same digest and history,
/// and the incrementally kept digest always equals one computed from scratch.
#[test]
fn digest_same_ops_same_digest() {
    let (mut a, mut b) = (DataTree::new(), DataTree::new());
    assert_eq!(a.digest(), b.digest());
    let mut zxid = 0;
    for (session_id, op) in mixed_ops() {
        zxid += 1;
        let before = a.digest();
        let _ = a.apply(zxid, &txn(session_id, op.clone()));
        let _ = b.apply(zxid, &txn(session_id, op));
        assert_eq!(a.digest(), a.full_digest(), "after zxid {zxid}");
        assert_eq!(a.digest(), b.digest(), "after zxid {zxid}");
        if zxid == 9 {
            assert_eq!(a.digest(), before, "a failed create changes nothing");
        }
    }
    assert!(a.digest_log().next().is_none(), "no history before zxid 128");
    for i in 0..300 {
        zxid += 1;
        let op = if i % 2 == 0 { create(&format!("/n{i}"), 0) } else { set_data("/a", b"again") };
        let _ = a.apply(zxid, &txn(0, op.clone()));
        let _ = b.apply(zxid, &txn(0, op));
    }
    assert_eq!(a.digest(), a.full_digest());
    let history: Vec<_> = a.digest_log().copied().collect();
    assert_eq!(history.iter().map(|h| h.zxid).collect::<Vec<_>>(), vec![128, 256]);
    assert_eq!(history, b.digest_log().copied().collect::<Vec<_>>());
    assert_ne!(history[0].digest, history[1].digest);
    assert!(history.iter().all(|h| h.digest <= i64::MAX as u64), "digests print as a non-negative long");
}

/// A replica whose one node differs (in data, or only in a stat field) has another digest.
#[test]
fn digest_detects_a_differing_node() {
    let (mut a, mut b, mut c) = (DataTree::new(), DataTree::new(), DataTree::new());
    for t in [&mut a, &mut b, &mut c] {
        let _ = t.apply(1, &txn(0, create("/x", 0)));
    }
    let _ = a.apply(2, &txn(0, set_data("/x", b"one")));
    let _ = b.apply(2, &txn(0, set_data("/x", b"two")));
    // Same data, but another mtime: only the Stat differs.
    let _ = c.apply(2, &Txn { time_ms: 2000, ..txn(0, set_data("/x", b"one")) });
    assert_ne!(a.digest(), b.digest());
    assert_ne!(a.digest(), c.digest());
    assert_eq!(a.digest(), a.full_digest());
    assert_eq!(b.digest(), b.full_digest());
}

/// Deleting a node takes exactly its contribution out again: afterwards the digest differs
/// from the one before its create only by the parent's new pzxid/cversion.
#[test]
fn digest_delete_restores() {
    let mut t = DataTree::new();
    let _ = t.apply(1, &txn(0, create("/p", 0)));
    let before = t.digest();
    let parent_before = {
        let n = t.node("/p").unwrap();
        digest::meta("/p", n.acl, &n.stat)
    };
    let _ = t.apply(2, &txn(0, create("/p/x", 0)));
    let _ = t.apply(3, &txn(0, set_data("/p/x", b"data")));
    assert_ne!(t.digest(), before);
    let _ = t.apply(4, &txn(0, TxnOp::Delete { path: "/p/x".into(), version: -1 }));
    let parent_after = {
        let n = t.node("/p").unwrap();
        digest::meta("/p", n.acl, &n.stat)
    };
    assert_eq!(t.digest(), t.full_digest());
    assert_eq!(digest::add(digest::sub(t.digest(), parent_after), parent_before), before);
}

/// A tree read back from a snapshot (which does not store the digest) has the same digest,
/// and keeps it up to date from the next apply on.
#[test]
fn digest_survives_a_snapshot_round_trip() {
    let mut t = DataTree::new();
    let mut zxid = 0;
    for (session_id, op) in mixed_ops() {
        zxid += 1;
        let _ = t.apply(zxid, &txn(session_id, op));
    }
    let bytes = postcard::to_stdvec(&t).unwrap();
    let mut restored: DataTree = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(restored.digest(), t.digest());
    let op = create("/after", 0);
    let _ = t.apply(zxid + 1, &txn(0, op.clone()));
    let _ = restored.apply(zxid + 1, &txn(0, op));
    assert_eq!(restored.digest(), t.digest());
    assert_eq!(restored.digest(), restored.full_digest());
}

/// Children come from the map's order: names that share a prefix with a sibling, or contain
/// one, are neither lost nor mixed into another node's children; counts follow deletes.
#[test]
fn children_and_descendants_from_the_map() {
    let mut t = DataTree::new();
    let mut zxid = 10;
    for p in ["/a", "/ab", "/a/b", "/a/b/c", "/a/c", "/ab/x", "/a/b/c/d", "/a/b2", "/b"] {
        zxid += 1;
        assert!(t.apply(zxid, &txn(0, create(p, 0))).0.is_ok(), "{p}");
    }
    let names = |t: &DataTree, p: &str| t.get_children(p, &[]).unwrap().0.to_vec();
    assert_eq!(names(&t, "/"), ["a", "ab", "b", "zookeeper"]);
    assert_eq!(names(&t, ""), ["a", "ab", "b", "zookeeper"]);
    assert_eq!(names(&t, "/a"), ["b", "b2", "c"]);
    assert_eq!(names(&t, "/a/b"), ["c"]);
    assert_eq!(names(&t, "/ab"), ["x"]);
    assert!(names(&t, "/b").is_empty());
    assert_eq!(t.exists("/a").unwrap().num_children, 3);
    assert_eq!(t.all_children_number("/a", &[]), Ok(5));
    assert_eq!(t.all_children_number("/ab", &[]), Ok(1));
    assert_eq!(t.all_children_number("/b", &[]), Ok(0));
    // Everything below the root: 9 created plus /zookeeper, /zookeeper/quota, /zookeeper/config.
    assert_eq!(t.all_children_number("/", &[]), Ok(12));
    assert_eq!(t.apply(30, &txn(0, TxnOp::Delete { path: "/a/c".into(), version: -1 })).0, Ok(TxnOutput::Deleted));
    assert_eq!(names(&t, "/a"), ["b", "b2"]);
    assert_eq!(t.exists("/a").unwrap().num_children, 2);
    assert_eq!(t.get_children("/nope", &[]), Err(TreeError::NoNode));
}

/// The snapshot form is the one written when nodes kept child-name sets: such a snapshot
/// loads with the right children, and a snapshot written now reads back as that form.
#[test]
fn snapshot_form_keeps_the_child_name_layout() {
    use std::collections::BTreeMap;
    use std::collections::BTreeSet;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct OldNode {
        data: Option<Bytes>,
        acl: Vec<AclEntry>,
        stat: StatPersisted,
        children: Option<BTreeSet<String>>,
    }
    let mut t = DataTree::new();
    for (z, p) in ["/a", "/a/x", "/a/y", "/a/y/z"].iter().enumerate() {
        assert!(t.apply(20 + z as i64, &txn(0, create(p, 0))).0.is_ok());
    }
    let bytes = postcard::to_stdvec(&t.nodes).unwrap();
    let old: BTreeMap<String, OldNode> = postcard::from_bytes(&bytes).unwrap();
    let set = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>());
    assert_eq!(old["/"].children, set(&["a", "zookeeper"]));
    assert_eq!(old["/a"].children, set(&["x", "y"]));
    assert_eq!(old["/a/y"].children, set(&["z"]));
    assert_eq!(old["/a/x"].children, None);
    assert_eq!(old["/a/x"].data.as_deref(), Some(&b"x"[..]));

    let back: NodeMap = postcard::from_bytes(&postcard::to_stdvec(&old).unwrap()).unwrap();
    assert_eq!(back, t.nodes);
    assert_eq!(back.children("/a").collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(back.get("/a").map(|n| n.stat.num_children), Some(2));
}

/// setData checks and changes the node in one lookup: a refused set (bad version, no write
/// permission, no node) leaves data, Stat and digest as they were; an accepted one bumps the
/// version and keeps the digest equal to a recomputation from scratch.
#[test]
fn refused_set_data_changes_nothing() {
    let mut t = DataTree::new();
    assert!(t.apply(5, &txn(0, create("/a", 0))).0.is_ok());
    let set = |version: i32| TxnOp::SetData { path: "/a".into(), data: Some(Bytes::from_static(b"new")), version };
    let before = (t.get_data("/a", &[]), t.digest(), t.data_size());
    assert_eq!(t.apply(6, &txn(0, set(3))).0, Err(TreeError::BadVersion));
    assert_eq!((t.get_data("/a", &[]), t.digest(), t.data_size()), before);
    let readonly = TxnOp::SetAcl { path: "/a".into(), acl: AclEntry::read_only(), version: -1 };
    assert!(t.apply(7, &txn(0, readonly)).0.is_ok());
    let before_acl = (t.get_data("/a", &[]), t.digest(), t.data_size());
    assert_eq!(t.apply(8, &txn(0, set(0))).0, Err(TreeError::NoAuth));
    assert_eq!((t.get_data("/a", &[]), t.digest(), t.data_size()), before_acl);
    assert_ne!(before.1, before_acl.1, "the ACL change moved the digest");
    let missing = TxnOp::SetData { path: "/nope".into(), data: None, version: -1 };
    assert_eq!(t.apply(9, &txn(0, missing)).0, Err(TreeError::NoNode));

    let mut t = DataTree::new();
    assert!(t.apply(5, &txn(0, create("/a", 0))).0.is_ok());
    let (r, changes) = t.apply(6, &txn(0, set(0)));
    let Ok(TxnOutput::Stat(stat)) = r else { panic!("set refused: {r:?}") };
    assert_eq!((stat.version, stat.mzxid, stat.data_length), (1, 6, 3));
    assert_eq!(changes.len(), 1);
    assert_eq!(t.get_data("/a", &[]).unwrap().0.as_deref(), Some(&b"new"[..]));
    let incremental = t.digest();
    t.compute_derived();
    assert_eq!(t.digest(), incremental);
}

/// create checks and changes the parent in one lookup, with the parent out of the map while
/// the checks run: `create /` still finds the root, and refused creates leave the parent's
/// Stat and the digest alone.
#[test]
fn refused_create_changes_nothing() {
    let mut t = DataTree::new();
    assert!(t.apply(5, &txn(0, create("/a", 0))).0.is_ok());
    let before = (t.exists("/"), t.exists("/a"), t.digest(), t.node_count());
    assert_eq!(t.apply(6, &txn(0, create("/", 0))).0, Err(TreeError::NodeExists));
    assert_eq!(t.apply(7, &txn(0, create("/a", 0))).0, Err(TreeError::NodeExists));
    assert_eq!(t.apply(8, &txn(0, create("/a/", 0))).0, Err(TreeError::BadArguments));
    assert_eq!(t.apply(9, &txn(0, create("/a/e", 1))).0, Err(TreeError::SessionExpired));
    assert_eq!((t.exists("/"), t.exists("/a"), t.digest(), t.node_count()), before);
    assert_eq!(t.exists("/").unwrap().num_children, 2, "/a and /zookeeper");
    let incremental = t.digest();
    t.compute_derived();
    assert_eq!(t.digest(), incremental);
}

/// A restore takes the snapshot's nodes and keeps the live sessions: a session only the
/// snapshot knows loses its ephemerals, a live one keeps those the snapshot gives it, a live
/// one the snapshot lacks stays; `/zookeeper/config` and the zxid are the current tree's.
#[test]
fn restore_keeps_live_sessions() {
    let session = |id| TxnOp::CreateSession { session_id: id, timeout_ms: 4000, passwd: Bytes::from_static(b"p") };
    let mut snap = DataTree::new();
    assert!(snap.apply(1, &txn(0, session(1))).0.is_ok());
    assert!(snap.apply(2, &txn(0, session(2))).0.is_ok());
    assert!(snap.apply(3, &txn(1, create("/e1", CreateMode::Ephemeral.code()))).0.is_ok());
    assert!(snap.apply(4, &txn(2, create("/e2", CreateMode::Ephemeral.code()))).0.is_ok());
    assert!(snap.apply(5, &txn(0, create("/p", 0))).0.is_ok());
    let mut current = DataTree::new();
    assert!(current.apply(10, &txn(0, session(2))).0.is_ok());
    assert!(current.apply(11, &txn(0, session(3))).0.is_ok());
    assert!(current.apply(12, &txn(0, create("/other", 0))).0.is_ok());
    current.set_config_node(b"server.1=a:1:2;3\nversion=0", 0);
    let restored = snap.restore_onto(&current, 20);
    assert_eq!(restored.exists("/e1"), Err(TreeError::NoNode), "session 1 is not live");
    assert_eq!(restored.exists("/e2").map(|s| s.ephemeral_owner), Ok(2));
    assert!(restored.exists("/p").is_ok() && restored.exists("/other").is_err());
    let mut ids: Vec<i64> = restored.sessions().map(|(id, _)| *id).collect();
    ids.sort();
    assert_eq!(ids, vec![2, 3]);
    assert_eq!(restored.ephemerals(2, "/"), vec!["/e2".to_owned()]);
    assert_eq!(restored.last_zxid(), 20);
    let config = restored.node(CONFIG_NODE).and_then(|n| n.data()).map(<[u8]>::to_vec);
    assert_eq!(config.as_deref(), Some(&b"server.1=a:1:2;3\nversion=0"[..]));
}
