//! A 3-member ensemble of real Warden processes, driven by a real third-party client: writes
//! through any member are read back from any member after `sync`, a session moves between
//! members with its ephemerals, a watch set on a follower fires for a write through another
//! member, and acknowledged writes survive `kill -9` of the leader.

mod common;

use std::time::Duration;

use common::zk;

/// A write through one follower is visible on the other after `sync`, and the session that
/// wrote it reads its own write at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_any_member_are_read_everywhere() {
    let ens = common::Ensemble::start("ens-rw", 3);
    let leader = ens.leader();
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let a = common::client(&ens.members[followers[0]].hostport()).await;
    let b = common::client(&ens.members[followers[1]].hostport()).await;
    let (stat, _) = a.create("/x", b"1", &common::persistent()).await.expect("create via a follower");
    let (data, own) = a.get_data("/x").await.expect("read own write");
    assert_eq!((data.as_slice(), own.czxid), (&b"1"[..], stat.czxid));
    b.sync("/x").await.expect("sync");
    let (data, other) = b.get_data("/x").await.expect("read on the other follower");
    assert_eq!(data, b"1");
    assert_eq!(other, own, "every member has the same Stat");
}

/// A watch set through a follower fires for a write made through the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_on_a_follower_fires_for_a_write_elsewhere() {
    let ens = common::Ensemble::start("ens-watch", 3);
    let leader = ens.leader();
    let follower = (0..3).find(|i| *i != leader).expect("a follower");
    let writer = common::client(&ens.members[leader].hostport()).await;
    let watcher = common::client(&ens.members[follower].hostport()).await;
    writer.create("/w", b"0", &common::persistent()).await.expect("create");
    watcher.sync("/w").await.expect("sync");
    let (_, _, watch) = watcher.get_and_watch_data("/w").await.expect("watch");
    writer.set_data("/w", b"1", None).await.expect("set");
    let event = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await.expect("event in time");
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeDataChanged, "/w"));
}

/// A session opened on one member resumes on another with its ephemerals (sessions are
/// replicated state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_between_members() {
    let ens = common::Ensemble::start("ens-move", 3);
    let first = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_detached()
        .connect(&ens.members[0].hostport())
        .await
        .expect("connect to member 1");
    first.create("/e", b"", &common::ephemeral()).await.expect("create ephemeral");
    let session = first.session().clone();
    let id = first.session_id();
    drop(first);
    let moved = zk::Client::connector()
        .with_session(session)
        .connect(&ens.members[2].hostport())
        .await
        .expect("resume on member 3");
    assert_eq!(moved.session_id(), id);
    moved.sync("/e").await.expect("sync");
    let stat = moved.check_stat("/e").await.expect("exists").expect("the ephemeral is there");
    assert_eq!(stat.ephemeral_owner, id.0);
}

/// Writes acknowledged before `kill -9` of the leader are all there after a new leader is
/// elected, and the client (which knows every member) goes on writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_leader_kill_9() {
    let mut ens = common::Ensemble::start("ens-kill", 3);
    let leader = ens.leader();
    let follower = (0..3).find(|i| *i != leader).expect("a follower");
    let hosts = ens.members[follower].hostport();
    let c =
        zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(&hosts).await.expect("connect");
    c.create("/k", b"", &common::persistent()).await.expect("create");
    for i in 0..50 {
        c.create(&format!("/k/n{i}"), b"", &common::persistent()).await.expect("create before the kill");
    }
    ens.members[leader].kill();
    ens.wait_stable();
    let mut more = 0;
    for i in 50..60 {
        // A write in flight during the election may fail with ConnectionLoss; it is retried.
        for _ in 0..50 {
            match c.create(&format!("/k/n{i}"), b"", &common::persistent()).await {
                Ok(_) | Err(zk::Error::NodeExists) => {
                    more += 1;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    assert_eq!(more, 10, "writes go on after the failover");
    c.sync("/k").await.expect("sync");
    let children = c.list_children("/k").await.expect("children");
    assert_eq!(children.len(), 60, "every acknowledged write survived: {children:?}");
}
