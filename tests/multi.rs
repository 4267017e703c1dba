//! Multi-operation transactions, driven by a real third-party client against a real
//! standalone Warden: all or nothing, per-op results, and ZooKeeper's error reporting.

mod common;

use common::zk;

/// A multi whose check fails changes nothing and reports the failing op's index; the ops
/// before it are not applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_multi_changes_nothing() {
    let server = common::Standalone::start("multi-fail");
    let c = common::client(&server.hostport()).await;
    c.create("/m", b"v0", &common::persistent()).await.expect("create");
    let mut w = c.new_multi_writer();
    w.add_create("/m/new", b"", &common::persistent()).expect("add create");
    w.add_set_data("/m", b"v1", None).expect("add set");
    w.add_check_version("/m", 7).expect("add check");
    match w.commit().await {
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            assert_eq!(index, 2);
            assert_eq!(source, zk::Error::BadVersion);
        }
        other => panic!("expected the check to fail: {other:?}"),
    }
    assert_eq!(c.check_stat("/m/new").await.expect("exists"), None, "the create was rolled back");
    let (data, stat) = c.get_data("/m").await.expect("read");
    assert_eq!((data.as_slice(), stat.version), (&b"v0"[..], 0), "the set was rolled back");
}

/// A multi that succeeds applies every op at one zxid range and answers each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_applies_every_op_and_answers_each() {
    let server = common::Standalone::start("multi-ok");
    let c = common::client(&server.hostport()).await;
    c.create("/t", b"", &common::persistent()).await.expect("create");
    c.create("/t/old", b"", &common::persistent()).await.expect("create old");
    let seq = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
    let mut w = c.new_multi_writer();
    w.add_create("/t/q-", b"a", &seq).expect("add seq 1");
    w.add_create("/t/q-", b"b", &seq).expect("add seq 2");
    w.add_set_data("/t", b"parent", Some(0)).expect("add set");
    w.add_delete("/t/old", None).expect("add delete");
    w.add_check_version("/t", 1).expect("add check");
    let results = w.commit().await.expect("commit");
    assert_eq!(results.len(), 5);
    match (&results[0], &results[1]) {
        (zk::MultiWriteResult::Create { path: a, .. }, zk::MultiWriteResult::Create { path: b, .. }) => {
            // The parent's cversion counts creates and deletes: /t/old was the first child.
            assert_eq!(a, "/t/q-0000000001");
            assert_eq!(b, "/t/q-0000000002");
        }
        other => panic!("creates: {other:?}"),
    }
    assert!(matches!(results[2], zk::MultiWriteResult::SetData { ref stat } if stat.version == 1));
    assert_eq!(results[3], zk::MultiWriteResult::Delete);
    assert_eq!(results[4], zk::MultiWriteResult::Check);
    let mut children = c.list_children("/t").await.expect("children");
    children.sort();
    assert_eq!(children, ["q-0000000001", "q-0000000002"]);
}

/// A multi read returns each op's result, errors in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_read_answers_each_op() {
    let server = common::Standalone::start("multi-read");
    let c = common::client(&server.hostport()).await;
    c.create("/r", b"data", &common::persistent()).await.expect("create");
    c.create("/r/kid", b"", &common::persistent()).await.expect("create kid");
    let mut r = c.new_multi_reader();
    r.add_get_data("/r").expect("add get data");
    r.add_get_children("/r").expect("add get children");
    r.add_get_data("/missing").expect("add missing");
    let results = r.commit().await.expect("commit");
    match &results[..] {
        [zk::MultiReadResult::Data { data, .. }, zk::MultiReadResult::Children { children }, zk::MultiReadResult::Error { err }] =>
        {
            assert_eq!(data, b"data");
            assert_eq!(children, &["kid".to_owned()]);
            assert_eq!(*err, zk::Error::NoNode);
        }
        other => panic!("{other:?}"),
    }
}
