//! Watches, driven by a real third-party client against a real standalone Warden: one-shot
//! data, exist and child watches fire once with ZooKeeper's event types, an event comes
//! before the reply that shows its change, and a persistent recursive watch sees a subtree's
//! changes in order.

mod common;

use std::time::Duration;

use common::zk;

async fn next(watch: zk::OneshotWatcher) -> zk::WatchedEvent {
    tokio::time::timeout(Duration::from_secs(10), watch.changed()).await.expect("event in time")
}

/// A data watch fires NodeDataChanged once; the second change after it fires nothing on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_watch_fires_once() {
    let server = common::Standalone::start("data-watch");
    let c = common::client(&server.hostport()).await;
    let other = common::client(&server.hostport()).await;
    c.create("/d", b"0", &common::persistent()).await.expect("create");
    let (data, stat, watch) = c.get_and_watch_data("/d").await.expect("watch");
    assert_eq!((data.as_slice(), stat.version), (&b"0"[..], 0));
    other.set_data("/d", b"1", None).await.expect("set 1");
    let event = next(watch).await;
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeDataChanged, "/d"));
    let (data, stat) = c.get_data("/d").await.expect("read");
    assert_eq!((data.as_slice(), stat.version), (&b"1"[..], 1));
    assert!(event.zxid <= stat.mzxid, "the event carries the zxid of the change it reports");
}

/// The client that set a watch sees the event before any reply that reflects the change, also
/// when the change is its own write: ZooKeeper's ordering promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_comes_before_the_reply_that_shows_its_change() {
    let server = common::Standalone::start("event-order");
    let c = common::client(&server.hostport()).await;
    c.create("/o", b"0", &common::persistent()).await.expect("create");
    for round in 1..=50 {
        let (_, _, watch) = c.get_and_watch_data("/o").await.expect("watch");
        let value = round.to_string();
        let stat = c.set_data("/o", value.as_bytes(), None).await.expect("set");
        // The reply to the write has been read, so the event was queued before it.
        let event = tokio::time::timeout(Duration::from_millis(500), watch.changed())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the event did not precede the reply"));
        assert_eq!(event.event_type, zk::EventType::NodeDataChanged);
        assert_eq!(stat.version, round);
    }
}

/// An exist watch on a missing node fires NodeCreated; a child watch fires
/// NodeChildrenChanged on its parent; deleting a watched node fires NodeDeleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exist_child_and_delete_watches() {
    let server = common::Standalone::start("exist-child");
    let c = common::client(&server.hostport()).await;
    let other = common::client(&server.hostport()).await;
    let (stat, exists) = c.check_and_watch_stat("/p").await.expect("exists watch");
    assert!(stat.is_none());
    other.create("/p", b"", &common::persistent()).await.expect("create /p");
    let event = next(exists).await;
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeCreated, "/p"));

    let (children, _, child_watch) = c.get_and_watch_children("/p").await.expect("child watch");
    assert!(children.is_empty());
    other.create("/p/c", b"", &common::persistent()).await.expect("create /p/c");
    let event = next(child_watch).await;
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeChildrenChanged, "/p"));

    let (_, _, data_watch) = c.get_and_watch_data("/p/c").await.expect("data watch");
    other.delete("/p/c", None).await.expect("delete");
    let event = next(data_watch).await;
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeDeleted, "/p/c"));
}

/// A persistent recursive watch reports every change below its path, in the order they were
/// made, and keeps firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_watch_sees_a_subtree_in_order() {
    let server = common::Standalone::start("recursive");
    let c = common::client(&server.hostport()).await;
    let other = common::client(&server.hostport()).await;
    c.create("/r", b"", &common::persistent()).await.expect("create /r");
    let mut watch = c.watch("/r", zk::AddWatchMode::PersistentRecursive).await.expect("addWatch");
    other.create("/r/a", b"", &common::persistent()).await.expect("create /r/a");
    other.create("/r/a/b", b"", &common::persistent()).await.expect("create /r/a/b");
    other.set_data("/r/a", b"x", None).await.expect("set /r/a");
    other.delete("/r/a/b", None).await.expect("delete /r/a/b");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let e = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await.expect("event in time");
        seen.push((e.event_type, e.path));
    }
    use zk::EventType::*;
    assert_eq!(
        seen,
        vec![
            (NodeCreated, "/r/a".to_owned()),
            (NodeCreated, "/r/a/b".to_owned()),
            (NodeDataChanged, "/r/a".to_owned()),
            (NodeDeleted, "/r/a/b".to_owned()),
        ]
    );
}
