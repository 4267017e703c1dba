//! The redb log store and the state machine pass openraft's storage conformance suite
//! (`openraft::testing::Suite`): log state, vote, append/truncate/purge, membership, snapshots.

use std::sync::Arc;

use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::StorageError;
use warden::raft::log_store::LogStore;
use warden::raft::state_machine::ApplyHook;
use warden::raft::state_machine::SharedTree;
use warden::raft::state_machine::StateMachine;
use warden::raft::TypeConfig;
use warden::tree::Change;

struct NoHook;

impl ApplyHook for NoHook {
    fn applied(&self, _zxid: i64, _session_id: i64, _changes: &[Change]) {}
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(&dir.path().join("raft-log.redb")).expect("open log");
        let shared = Arc::new(SharedTree::new());
        let waiters = Arc::new(warden::raft::wait::Waiters::default());
        let sm = StateMachine::open(&dir.path().join("snapshots"), shared, Arc::new(NoHook), waiters).expect("open sm");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_store_and_state_machine_pass_openraft_suite() {
    Suite::test_all(Builder).await.expect("openraft storage suite");
}

fn log_id(term: u64, index: u64) -> warden::raft::LogId {
    openraft::LogId::new(warden::raft::LeaderId { term, node_id: 0 }, index)
}

/// Opens the log at `path` again (every earlier handle has been dropped).
fn reopen(path: &std::path::Path) -> LogStore {
    LogStore::open(path).expect("reopen log")
}

/// The handle pre-votes read the last log id through agrees with the log store: after
/// appends (from the in-memory tail), after a restart (from redb) and after purging
/// everything (the last purged id).
#[tokio::test]
async fn last_log_handle_follows_appends_restart_and_purge() {
    use openraft::storage::RaftLogStorage;
    use openraft::storage::RaftLogStorageExt;

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft-log.redb");
    let mut log = LogStore::open(&path).expect("open log");
    assert_eq!(log.last_log().get().expect("read"), None);
    let entries: Vec<warden::raft::typ::Entry> =
        (1..=3).map(|i| openraft::Entry { log_id: log_id(2, i), payload: openraft::EntryPayload::Blank }).collect();
    log.blocking_append(entries).await.expect("append");
    assert_eq!(log.last_log().get().expect("read"), Some(log_id(2, 3)));
    drop(log);

    let mut log = reopen(&path);
    let last = log.last_log();
    assert_eq!(last.get().expect("read"), Some(log_id(2, 3)));
    assert_eq!(log.get_log_state().await.expect("state").last_log_id, Some(log_id(2, 3)));
    log.purge(log_id(2, 3)).await.expect("purge");
    drop(log);
    drop(last);

    let log = reopen(&path);
    assert_eq!(log.last_log().get().expect("read"), Some(log_id(2, 3)));
}

/// A log written by a Warden that kept its entries in redb (format 1) opens with every
/// entry, its vote and its purge point intact, moved into segment files, and opens again as
/// format 2 with the same contents.
#[tokio::test]
async fn a_format_1_log_is_moved_into_segments() {
    use openraft::storage::RaftLogStorage;
    use openraft::RaftLogReader;

    const LOGS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("logs");
    const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft-log.redb");
    let entries: Vec<warden::raft::typ::Entry> =
        (6..=40).map(|i| openraft::Entry { log_id: log_id(3, i), payload: openraft::EntryPayload::Blank }).collect();
    let vote = warden::raft::Vote::new_committed(3, 1);
    {
        let db = redb::Database::create(&path).expect("create redb");
        let txn = db.begin_write().expect("write");
        {
            let mut logs = txn.open_table(LOGS).expect("logs");
            for e in &entries {
                logs.insert(e.log_id.index, postcard::to_stdvec(e).expect("encode").as_slice()).expect("insert");
            }
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert("format", 1u32.to_be_bytes().as_slice()).expect("format");
            meta.insert("vote", postcard::to_stdvec(&vote).expect("vote").as_slice()).expect("vote");
            meta.insert("last_purged", postcard::to_stdvec(&log_id(3, 5)).expect("p").as_slice()).expect("p");
        }
        txn.commit().expect("commit");
    }
    for round in 0..2 {
        let mut log = reopen(&path);
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(log_id(3, 40)), "round {round}");
        assert_eq!(state.last_purged_log_id, Some(log_id(3, 5)), "round {round}");
        assert_eq!(log.get_log_reader().await.read_vote().await.expect("vote"), Some(vote), "round {round}");
        let read = log.try_get_log_entries(6..=40).await.expect("entries");
        assert_eq!(
            read.iter().map(|e| e.log_id).collect::<Vec<_>>(),
            entries.iter().map(|e| e.log_id).collect::<Vec<_>>()
        );
        drop(log);
        let db = redb::Database::open(&path).expect("open redb");
        let txn = redb::ReadableDatabase::begin_read(&db).expect("read");
        let logs = txn.open_table(LOGS).expect("logs");
        assert_eq!(redb::ReadableTableMetadata::len(&logs).expect("len"), 0, "redb no longer holds entries");
        let meta = txn.open_table(META).expect("meta");
        let format = meta.get("format").expect("get").expect("format").value().to_vec();
        assert_eq!(format, 2u32.to_be_bytes().to_vec());
    }
    assert!(std::fs::read_dir(dir.path()).expect("dir").any(|e| e
        .expect("entry")
        .file_name()
        .to_string_lossy()
        .ends_with(".seg")));
}

/// A log cut short below the index it recorded as committed (damage in the newest segment,
/// which reads like a torn append) is refused at open instead of losing committed entries.
#[tokio::test]
async fn a_log_that_lost_committed_entries_is_refused() {
    use openraft::storage::RaftLogStorage;
    use openraft::storage::RaftLogStorageExt;

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("raft-log.redb");
    let mut log = LogStore::open(&path).expect("open log");
    let entries: Vec<warden::raft::typ::Entry> =
        (1..=10).map(|i| openraft::Entry { log_id: log_id(2, i), payload: openraft::EntryPayload::Blank }).collect();
    log.blocking_append(entries).await.expect("append");
    // The committed index is written at most once a second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    log.save_committed(Some(log_id(2, 10))).await.expect("committed");
    drop(log);
    // Intact, it opens.
    drop(reopen(&path));
    let seg = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "seg"))
        .expect("a segment");
    // Damage the first record's header: the log now reads as ending before index 1.
    let f = std::fs::OpenOptions::new().write(true).open(&seg).expect("segment");
    std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 20], 24).expect("damage");
    drop(f);
    let err = LogStore::open(&path).err().expect("refused");
    assert!(err.to_string().contains("was committed"), "{err}");
}
