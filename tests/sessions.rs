//! Sessions, driven over the wire by a real third-party client (`zookeeper-client`) against a
//! real standalone Warden process: ephemerals live and die with their session, a session
//! resumes by id and password and survives a `kill -9` of the server, an unknown session is
//! told it expired, and a client that goes silent loses its session after the timeout.

mod common;

use std::time::Duration;

use common::zk;

/// An ephemeral node is deleted when its session closes, and a watcher on another session is
/// told (NodeDeleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_deletes_its_ephemerals() {
    let server = common::Standalone::start("close-session");
    let owner = common::client(&server.hostport()).await;
    let watcher = common::client(&server.hostport()).await;
    owner.create("/lease", b"held", &common::ephemeral()).await.expect("create ephemeral");
    let (stat, watch) = watcher.check_and_watch_stat("/lease").await.expect("watch");
    let stat = stat.expect("the ephemeral exists");
    assert_eq!(stat.ephemeral_owner, owner.session_id().0, "owned by the creating session");
    drop(owner);
    let event = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await.expect("event in time");
    assert_eq!(event.event_type, zk::EventType::NodeDeleted);
    assert_eq!(event.path, "/lease");
    assert_eq!(watcher.check_stat("/lease").await.expect("exists"), None);
}

/// A session resumed on a new connection (id and password) keeps its ephemerals; a session
/// id the server does not know, or a wrong password, is answered as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_by_id_and_password_and_a_stranger_is_expired() {
    let server = common::Standalone::start("resume");
    let first = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_detached()
        .connect(&server.hostport())
        .await
        .expect("connect");
    first.create("/mine", b"", &common::ephemeral()).await.expect("create");
    let session = first.session().clone();
    let id = first.session_id();
    drop(first); // detached: the session stays open
    let resumed =
        zk::Client::connector().with_session(session).connect(&server.hostport()).await.expect("resume the session");
    assert_eq!(resumed.session_id(), id);
    let stat = resumed.check_stat("/mine").await.expect("exists").expect("the ephemeral is still there");
    assert_eq!(stat.ephemeral_owner, id.0);

    // The same session after it was closed is gone for good.
    let closed = resumed.session().clone();
    drop(resumed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = zk::Client::connector().with_session(closed).connect(&server.hostport()).await;
    assert!(matches!(again, Err(zk::Error::SessionExpired)), "{again:?}");
}

/// A client that stops talking (its process frozen, say) loses its session after the
/// negotiated timeout: its ephemerals go and a watcher is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_session_expires_after_its_timeout() {
    let server = common::Standalone::start_with("expire", &["minSessionTimeout=2000"]);
    let silent = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(2))
        .with_detached()
        .connect(&server.hostport())
        .await
        .expect("connect");
    assert_eq!(silent.session_timeout(), Duration::from_secs(2), "the server granted the asked timeout");
    silent.create("/silent", b"", &common::ephemeral()).await.expect("create");
    let watcher = common::client(&server.hostport()).await;
    let (_, watch) = watcher.check_and_watch_stat("/silent").await.expect("watch");
    let started = std::time::Instant::now();
    drop(silent); // detached and dropped: no more pings, no closeSession
    let event = tokio::time::timeout(Duration::from_secs(15), watch.changed()).await.expect("expired in time");
    assert_eq!(event.event_type, zk::EventType::NodeDeleted);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1500), "expired after {waited:?}, before its 2 s timeout");
}

/// An acknowledged write and an open session survive `kill -9` of a standalone server: after
/// a restart on the same data dir the client reconnects with the same session, its ephemeral
/// and its data are there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_and_its_writes_survive_a_kill_9() {
    let mut server = common::Standalone::start("kill9");
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&server.hostport())
        .await
        .expect("connect");
    client.create("/durable", b"before", &common::persistent()).await.expect("create");
    client.create("/durable/eph", b"", &common::ephemeral()).await.expect("create ephemeral");
    let id = client.session_id();
    server.member.kill();
    server.member.start();
    server.member.wait_mode(&["standalone"]);
    let (data, _) = tokio::time::timeout(Duration::from_secs(20), client.get_data("/durable"))
        .await
        .expect("answered after the restart")
        .expect("read after the restart");
    assert_eq!(data, b"before");
    assert_eq!(client.session_id(), id, "the same session");
    let eph = client.check_stat("/durable/eph").await.expect("exists").expect("the ephemeral survived");
    assert_eq!(eph.ephemeral_owner, id.0);
}

/// A connection that has only pinged a while (its buffers freed once each ping is answered)
/// serves what comes next as before: a 300 KiB value written and read back, and many small
/// requests in flight at once, answered in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_serves_large_and_pipelined_requests_after_pings() {
    let server = common::Standalone::start("idle-buffers");
    // A 1.2 s timeout: the client pings about every 400 ms.
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_millis(1200))
        .connect(&server.hostport())
        .await
        .expect("connect");
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let big: Vec<u8> = (0..300 << 10).map(|i: u32| (i * 7 + round) as u8).collect();
        let path = format!("/big{round}");
        client.create(&path, &big, &common::persistent()).await.expect("create a large node");
        let (data, _) = client.get_data(&path).await.expect("get");
        assert!(data == big, "round {round}: the large value came back changed");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let sets: Vec<_> = (0..64)
            .map(|i| {
                let client = client.clone();
                let path = path.clone();
                async move { client.set_data(&path, format!("{i}").as_bytes(), None).await }
            })
            .collect();
        let stats = futures::future::join_all(sets).await;
        let mut versions: Vec<i32> = stats.into_iter().map(|r| r.expect("set").version).collect();
        versions.sort_unstable();
        assert_eq!(versions, (1..=64).collect::<Vec<_>>(), "round {round}");
    }
}
