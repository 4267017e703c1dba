//! The redb log store and the state machine pass openraft's storage conformance suite
//! (`openraft::testing::Suite`): log state, vote, append/truncate/purge, membership, snapshots.

use std::sync::Arc;
use std::sync::RwLock;

use openraft::testing::StoreBuilder;
use openraft::testing::Suite;
use openraft::StorageError;
use warden::raft::log_store::LogStore;
use warden::raft::state_machine::ApplyHook;
use warden::raft::state_machine::SharedTree;
use warden::raft::state_machine::StateMachine;
use warden::raft::TypeConfig;
use warden::tree::Change;
use warden::tree::DataTree;

struct NoHook;

impl ApplyHook for NoHook {
    fn applied(&self, _zxid: i64, _session_id: i64, _changes: &[Change]) {}
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(&dir.path().join("raft-log.redb")).expect("open log");
        let (applied, _) = tokio::sync::watch::channel(0);
        let shared =
            Arc::new(SharedTree { tree: RwLock::new(DataTree::new()), applied, snapshot_zxid: Default::default() });
        let sm = StateMachine::open(&dir.path().join("snapshots"), shared, Arc::new(NoHook)).expect("open sm");
        Ok((dir, log, sm))
    }
}

#[test]
fn log_store_and_state_machine_pass_openraft_suite() {
    Suite::test_all(Builder).expect("openraft storage suite");
}
