//! The Raft state machine: applies committed entries to the DataTree in log order, assigns
//! each its zxid, and hands the resulting changes to the [`ApplyHook`] (the watch manager)
//! while still holding the tree's write lock, so no read can observe a change before its
//! watch events are queued. The waiters of the txns this server proposed are taken from the
//! registry ([`super::wait`]) by the entry's log id and answered one by one, as each txn is
//! applied. Snapshot files are [`super::snapshot`]'s. ZooKeeper's counterpart:
//! `FinalRequestProcessor` applying to the `ZKDatabase`.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::RwLock;

use futures::StreamExt;
use openraft::storage::EntryResponder;
use openraft::storage::RaftStateMachine;
use openraft::EntryPayload;
use openraft::OptionalSend;

use super::next_zxid;
use super::snapshot::decode_snapshot;
use super::snapshot::install_snapshot_file;
use super::snapshot::newest_snapshot;
use super::snapshot::receiving_path;
use super::snapshot::remove_where;
use super::snapshot::snap_err;
use super::snapshot::write_snapshot_with;
use super::snapshot::SnapshotBuilder;
use super::snapshot::SnapshotFile;
use super::snapshot::RECEIVING_PREFIX;
use super::wait::Waiters;
use super::LogId;
use super::Snapshot;
use super::SnapshotMeta;
use super::StoredMembership;
use super::TypeConfig;
use crate::tree::txn::TxnOp;
use crate::tree::txn::TxnResult;
use crate::tree::Change;
use crate::tree::DataTree;

/// Called for every applied entry with its zxid and changes, under the tree's write lock.
pub trait ApplyHook: Send + Sync + 'static {
    fn applied(&self, zxid: i64, session_id: i64, changes: &[Change]);
    /// A session was closed or expired through the log: the server holding its connection
    /// closes it (ZooKeeper closes the connection of a closed session on every server).
    fn session_closed(&self, _session_id: i64) {}
    /// The whole tree was replaced (a snapshot installed from the leader), under the tree's
    /// write lock: what `applied` and `session_closed` would have reported for the txns in
    /// between is told here, before any read sees `new`. Every way the tree is replaced while
    /// clients are connected must come through here (today: a snapshot install; a restore
    /// from a backup must too); a restart or a first-start import happens before the client
    /// port opens, and a log truncation never touches the tree (only committed entries are
    /// applied).
    fn replaced(&self, _old: &DataTree, _new: &DataTree) {}
}

/// The tree shared between the state machine (writer) and client reads.
pub struct SharedTree {
    /// std `RwLock`: held only for the synchronous apply of one batch or one read, never
    /// across an `.await`. Lock order: tree, then the watch manager inside the hook.
    pub tree: RwLock<DataTree>,
    /// Last applied zxid, for waiters (a client's read after its own write, sync).
    pub applied: tokio::sync::watch::Sender<i64>,
    /// The zxid of the newest snapshot taken or loaded: snapCount counts txns from here, as
    /// ZooKeeper's does (a log entry may carry a whole batch of them).
    pub snapshot_zxid: std::sync::atomic::AtomicI64,
    /// The log index of the last applied entry (blank and membership entries included): a
    /// follower's reads wait for entries it holds but has not applied (see
    /// `Dispatcher::unapplied`).
    pub applied_index: tokio::sync::watch::Sender<u64>,
}

/// A lock on the shared tree, read or write; dereferences to the tree.
pub struct TreeGuard<G> {
    guard: G,
    _held: Held,
}

impl<G: std::ops::Deref<Target = DataTree>> std::ops::Deref for TreeGuard<G> {
    type Target = DataTree;
    fn deref(&self) -> &DataTree {
        &self.guard
    }
}

impl<G: std::ops::DerefMut<Target = DataTree>> std::ops::DerefMut for TreeGuard<G> {
    fn deref_mut(&mut self) -> &mut DataTree {
        &mut self.guard
    }
}

/// Marks that this thread holds the tree lock (debug builds; free in release ones).
struct Held;

#[cfg(debug_assertions)]
thread_local! {
    static HOLDS_TREE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Held {
    fn take() -> Held {
        #[cfg(debug_assertions)]
        HOLDS_TREE.with(|h| {
            assert!(!h.replace(true), "the tree lock taken by a thread that holds it: this deadlocks behind a writer")
        });
        Held
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        HOLDS_TREE.with(|h| h.set(false));
    }
}

impl Default for SharedTree {
    fn default() -> Self {
        SharedTree::new()
    }
}

impl SharedTree {
    /// A shared empty tree.
    pub fn new() -> SharedTree {
        SharedTree {
            tree: RwLock::new(DataTree::new()),
            applied: tokio::sync::watch::channel(0).0,
            snapshot_zxid: Default::default(),
            applied_index: tokio::sync::watch::channel(0).0,
        }
    }

    /// Reads the tree. A poisoned lock means an apply panicked: the process state is suspect,
    /// and continuing with the data is still better than refusing every read.
    ///
    /// One guard per thread at a time: std's `RwLock` queues a second read behind a waiting
    /// writer, so a nested read deadlocks as soon as an apply arrives between the two (debug
    /// builds panic on the nested lock instead).
    pub fn read(&self) -> TreeGuard<std::sync::RwLockReadGuard<'_, DataTree>> {
        let held = Held::take();
        TreeGuard { guard: self.tree.read().unwrap_or_else(std::sync::PoisonError::into_inner), _held: held }
    }

    fn write(&self) -> TreeGuard<std::sync::RwLockWriteGuard<'_, DataTree>> {
        let held = Held::take();
        TreeGuard { guard: self.tree.write().unwrap_or_else(std::sync::PoisonError::into_inner), _held: held }
    }

    /// Waits until `zxid` is applied here, at most `patience`; whether it was.
    pub async fn wait_applied(&self, zxid: i64, patience: std::time::Duration) -> bool {
        let mut applied = self.applied.subscribe();
        let reached = matches!(tokio::time::timeout(patience, applied.wait_for(|z| *z >= zxid)).await, Ok(Ok(_)));
        reached
    }
}

/// openraft 0.10's storage traits speak `std::io::Error`.
type StorageError = std::io::Error;

fn sm_err(e: impl std::fmt::Display) -> StorageError {
    std::io::Error::other(format!("applying to the state machine: {e}"))
}

/// The state machine.
pub struct StateMachine {
    shared: Arc<SharedTree>,
    hook: Arc<dyn ApplyHook>,
    waiters: Arc<Waiters>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    dir: PathBuf,
    /// See [`StateMachine::with_config_node`].
    config_node: Option<(bytes::Bytes, i64)>,
    /// Whether snapshots are written compressed ([`StateMachine::with_snapshot_compression`]).
    compress: bool,
}

impl StateMachine {
    /// Opens the state machine from the newest snapshot in `dir`, if any. `waiters` holds the
    /// waiters of the txns this server proposes.
    pub fn open(
        dir: &Path,
        shared: Arc<SharedTree>,
        hook: Arc<dyn ApplyHook>,
        waiters: Arc<Waiters>,
    ) -> Result<StateMachine, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut sm = StateMachine {
            shared,
            hook,
            waiters,
            last_applied: None,
            membership: StoredMembership::default(),
            dir: dir.to_owned(),
            config_node: None,
            compress: true,
        };
        // Partial transfers from a leader, and snapshots being built, that a crash interrupted.
        remove_where(dir, |name| {
            name.starts_with(RECEIVING_PREFIX) || (name.starts_with("snapshot-") && name.ends_with(".tmp"))
        })
        .map_err(|e| format!("listing {}: {e}", dir.display()))?;
        if let Some(path) = newest_snapshot(dir).map_err(|e| format!("listing {}: {e}", dir.display()))? {
            let started = std::time::Instant::now();
            let mut file = std::fs::File::open(&path)
                .and_then(|mut f| decode_snapshot(&mut f))
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            file.tree.compute_derived();
            tracing::info!(
                path = %path.display(),
                znodes = file.tree.node_count(),
                zxid = file.tree.last_zxid(),
                ms = started.elapsed().as_millis() as u64,
                "snapshot loaded"
            );
            sm.last_applied = file.last_applied;
            sm.membership = file.membership.clone();
            let last_zxid = file.tree.last_zxid();
            *sm.shared.write() = file.tree;
            sm.shared.applied.send_replace(last_zxid);
            sm.shared.applied_index.send_replace(file.last_applied.map_or(0, |l| l.index));
            sm.shared.snapshot_zxid.store(last_zxid, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(sm)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = tokio::fs::File;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), StorageError>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>> + Unpin + OptionalSend,
    {
        // Drained first: the tree's std lock is never held across an await.
        let mut batch = Vec::new();
        while let Some(item) = entries.next().await {
            batch.push(item?);
        }
        let (entries, responders): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        crate::crash_point!("apply-before");
        let results = self.apply_entries(entries);
        crate::crash_point!("apply-after");
        // openraft's `client_write` waits for the responder of each entry proposed here.
        for (responder, r) in responders.into_iter().zip(results) {
            if let Some(responder) = responder {
                responder.send(r);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let tree = self.shared.read().clone();
        self.shared.snapshot_zxid.store(tree.last_zxid(), std::sync::atomic::Ordering::Relaxed);
        SnapshotBuilder {
            file: SnapshotFile { last_applied: self.last_applied, membership: self.membership.clone(), tree },
            dir: self.dir.clone(),
            compress: self.compress,
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: tokio::fs::File) -> Result<(), StorageError> {
        self.install_snapshot_file(meta, snapshot).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        // Only the header is decoded: openraft asks for this at start for the meta alone.
        let newest = super::snapshot::open_newest(&self.dir).map_err(snap_err)?;
        Ok(newest.map(|(meta, file)| Snapshot { meta, snapshot: tokio::fs::File::from_std(file) }))
    }
}

/// A test-only failpoint, in debug builds only: with `WARDEN_TEST_CORRUPT_CREATED=<path>` in
/// its environment, this member alone changes the data of `<path>` right after applying its
/// create, as a bug or a flipped bit in memory would; the replica digests must catch it
/// (`compat-tests/test_digests.py`).
#[cfg(debug_assertions)]
fn corrupt_for_test(tree: &mut DataTree, changes: &[crate::tree::Change]) {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var("WARDEN_TEST_CORRUPT_CREATED").ok()) else { return };
    if changes.iter().any(|c| c.event == jute::EventType::NodeCreated && c.path == *path) {
        tracing::warn!(path, "test failpoint: corrupting this member's copy of the node");
        tree.corrupt_for_test(path);
    }
}

impl StateMachine {
    /// Applies committed entries in order; returns each entry's txn results (none for blank
    /// and membership entries).
    pub fn apply_entries(&mut self, entries: Vec<crate::raft::typ::Entry>) -> Vec<Vec<TxnResult>> {
        let mut out = Vec::new();
        let last_zxid = {
            let mut tree = self.shared.write();
            for entry in entries {
                self.last_applied = Some(entry.log_id);
                // Every entry, blank ones too: applying index i fails whatever this server
                // registered at i or below under another log id (see `Waiters`).
                let mut answers = self.waiters.take_applied(&entry.log_id).map(Vec::into_iter);
                match entry.payload {
                    EntryPayload::Blank => out.push(Vec::new()),
                    EntryPayload::Normal(batch) => {
                        // Proposed here: each txn's waiter is answered as soon as that txn is
                        // applied (after its watch events are queued), while the rest of the
                        // batch is still being applied.
                        let mut results = Vec::with_capacity(batch.txns.len());
                        for txn in batch.txns.iter() {
                            let zxid = next_zxid(&tree, txn);
                            if let TxnOp::Restore { snapshot } = &txn.op {
                                let outcome = self.restore(&mut tree, zxid, snapshot);
                                let result = TxnResult { zxid, outcome };
                                if let Some(answer) = answers.as_mut().and_then(Iterator::next) {
                                    let _ = answer.send(Ok(result.clone()));
                                }
                                results.push(result);
                                continue;
                            }
                            let (outcome, changes) = tree.apply(zxid, txn);
                            #[cfg(debug_assertions)]
                            corrupt_for_test(&mut tree, &changes);
                            self.hook.applied(zxid, txn.session_id, &changes);
                            if let (TxnOp::CloseSession { session_id }, Ok(_)) = (&txn.op, &outcome) {
                                self.hook.session_closed(*session_id);
                                if crate::audit::enabled() {
                                    changes
                                        .iter()
                                        .filter(|c| c.event == jute::EventType::NodeDeleted)
                                        .for_each(|c| crate::audit::ephemeral_deleted(*session_id, &c.path));
                                }
                            }
                            let result = TxnResult { zxid, outcome };
                            if let Some(answer) = answers.as_mut().and_then(Iterator::next) {
                                let _ = answer.send(Ok(result.clone()));
                            }
                            results.push(result);
                        }
                        out.push(results);
                    }
                    EntryPayload::Membership(m) => {
                        self.membership = StoredMembership::new(Some(entry.log_id), m);
                        out.push(Vec::new());
                    }
                }
            }
            tree.last_zxid()
        };
        self.shared.applied.send_replace(last_zxid);
        self.shared.applied_index.send_replace(self.last_applied.map_or(0, |l| l.index));
        out
    }

    /// Writes snapshots zstd-compressed or not (`snapshot.compression.method`; compressed by
    /// default). Either kind is read.
    pub fn with_snapshot_compression(mut self, compress: bool) -> StateMachine {
        self.compress = compress;
        self
    }

    /// What `/zookeeper/config` holds on this member (ZooKeeper's text of the ensemble's
    /// configuration, and its version): written into the tree now and into every snapshot
    /// installed from the leader, never through the log (ZooKeeper's
    /// `initConfigInZKDatabase`).
    pub fn with_config_node(mut self, text: bytes::Bytes, version: i64) -> StateMachine {
        self.shared.write().set_config_node(&text, version);
        self.config_node = Some((text, version));
        self
    }

    /// Applies an admin `restore` at `zxid`: the snapshot's tree, with the sessions of the
    /// tree it replaces, told to the hook as a snapshot install is. The same bytes give the
    /// same tree on every replica; bytes that do not parse (the proposer checked them
    /// first) leave the tree as it was, everywhere.
    fn restore(
        &self,
        tree: &mut DataTree,
        zxid: i64,
        snapshot: &[u8],
    ) -> Result<crate::tree::txn::TxnOutput, crate::tree::TreeError> {
        let name = std::path::Path::new("restored snapshot");
        let restored = match crate::zkdata::import::snapshot_tree(snapshot, name) {
            Ok(t) => t.restore_onto(tree, zxid),
            Err(e) => {
                tracing::error!(error = %e, "restore refused: the snapshot does not read");
                return Err(crate::tree::TreeError::BadArguments);
            }
        };
        let old = std::mem::replace(tree, restored);
        self.hook.replaced(&old, tree);
        tracing::warn!(
            zxid,
            znodes = tree.node_count(),
            sessions = tree.sessions().count(),
            "tree restored from a snapshot (admin restore)"
        );
        Ok(crate::tree::txn::TxnOutput::Restored)
    }

    /// The directory snapshots live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn install_snapshot_file(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: tokio::fs::File,
    ) -> Result<(), StorageError> {
        use tokio::io::AsyncWriteExt;
        snapshot.flush().await.map_err(snap_err)?;
        let mut received = snapshot.into_std().await;
        let mut file = decode_snapshot(&mut received).map_err(sm_err)?;
        if let Some((text, version)) = &self.config_node {
            file.tree.set_config_node(text, *version);
        }
        file.tree.compute_derived(); // before the write lock: O(n)
        let bytes = match receiving_path(&self.dir, &received).map_err(snap_err)? {
            // The file this server received into: made durable where it lies and renamed
            // into place, not written a second time.
            Some(path) => {
                received.sync_all().map_err(snap_err)?;
                drop(received);
                install_snapshot_file(&self.dir, &path, &meta.last_log_id).map_err(snap_err)?
            }
            // A file from elsewhere (openraft's storage suite hands over the leader's own).
            None => {
                use std::io::Seek;
                received.seek(std::io::SeekFrom::Start(0)).map_err(snap_err)?;
                let (bytes, _) =
                    write_snapshot_with(&self.dir, &meta.last_log_id, |w| std::io::copy(&mut received, w).map(|_| ()))
                        .map_err(snap_err)?;
                drop(received);
                bytes
            }
        };
        remove_where(&self.dir, |name| name.starts_with(RECEIVING_PREFIX)).map_err(snap_err)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let last_zxid = file.tree.last_zxid();
        let old = {
            let mut tree = self.shared.write();
            let old = std::mem::replace(&mut *tree, file.tree);
            self.hook.replaced(&old, &tree);
            old
        };
        self.shared.applied.send_replace(last_zxid);
        self.shared.applied_index.send_replace(meta.last_log_id.map_or(0, |l| l.index));
        // The old tree is freed outside the lock: a large one takes a while.
        drop(old);
        tracing::info!(
            index = meta.last_log_id.map_or(0, |l| l.index),
            bytes,
            zxid = last_zxid,
            "snapshot installed from the leader"
        );
        self.shared.snapshot_zxid.store(last_zxid, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::snapshot::begin_receiving;
    use crate::raft::snapshot::encode_snapshot;
    use crate::raft::snapshot::open_snapshot;
    use crate::raft::snapshot::snapshot_path;
    use crate::raft::typ::Entry;
    use crate::raft::TxnBatch;
    use crate::tree::acl::AclEntry;
    use crate::tree::txn::CreateOp;
    use crate::tree::txn::Txn;
    use openraft::RaftSnapshotBuilder;

    /// A thread that reads the tree while it holds a read guard deadlocks once a writer
    /// queues between the two (the `srvr` hang seen in a nemesis run): debug builds refuse
    /// the nested lock at once, and a released guard lets the next one through.
    #[test]
    #[cfg(debug_assertions)]
    fn nested_tree_lock_is_refused() {
        let shared = SharedTree::new();
        drop(shared.read());
        let outer = shared.read();
        let nested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.read().last_zxid()));
        assert!(nested.is_err(), "a nested read must panic in debug builds");
        drop(outer);
        assert_eq!(shared.read().last_zxid(), 0);
        let _w = shared.write();
    }

    fn create(tree: &mut DataTree, path: &str, data: Vec<u8>) {
        let op = TxnOp::Create(CreateOp {
            path: path.into(),
            data: Some(bytes::Bytes::from(data)),
            acl: AclEntry::open(),
            flags: 0,
            ttl: -1,
        });
        let txn = Txn { session_id: 0, time_ms: 1, auth: Default::default(), op };
        let zxid = next_zxid(tree, &txn);
        let (r, _) = tree.apply(zxid, &txn);
        assert!(r.is_ok(), "{path}: {r:?}");
    }

    /// A snapshot written to its file, compressed or not, reads back whole, streamed (with a
    /// data field larger than postcard's minimum scratch, and than the compressed file), its
    /// header alone gives openraft's meta, and equal ACLs come back as one shared allocation.
    #[test]
    fn snapshot_file_round_trip() {
        for compress in [false, true] {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut tree = DataTree::new();
            create(&mut tree, "/a", vec![7u8; 300 << 10]);
            create(&mut tree, "/a/b", b"x".to_vec());
            create(&mut tree, "/c", Vec::new());
            let last = Some(LogId::new(crate::raft::LeaderId { term: 3, node_id: 0 }, 42));
            let file = SnapshotFile { last_applied: last, membership: StoredMembership::default(), tree: tree.clone() };
            let (size, _) =
                write_snapshot_with(dir.path(), &last, |w| encode_snapshot(&file, w, compress, 0.0)).expect("write");
            assert_eq!(size < 100 << 10, compress, "compressed: {compress}, {size} bytes");
            let path = newest_snapshot(dir.path()).expect("list").expect("a snapshot");
            assert_eq!(path, snapshot_path(dir.path(), &last));

            let (meta, _) = open_snapshot(&path).expect("header");
            assert_eq!(meta.last_log_id, last);

            let back = decode_snapshot(&mut std::fs::File::open(&path).expect("open")).expect("decode");
            assert_eq!(back.last_applied, last);
            assert_eq!(back.tree.node_count(), tree.node_count());
            assert_eq!(back.tree.last_zxid(), tree.last_zxid());
            assert_eq!(back.tree.digest(), tree.digest());
            let (a, b, c) = (back.tree.node("/a"), back.tree.node("/a/b"), back.tree.node("/c"));
            let (a, b, c) = (a.expect("/a"), b.expect("/a/b"), c.expect("/c"));
            assert_eq!(a.data().map(<[u8]>::len), Some(300 << 10));
            assert!(Arc::ptr_eq(a.acl, b.acl) && Arc::ptr_eq(a.acl, c.acl), "equal ACLs are shared");
        }
    }

    /// A tree of many small parts (so several threads decode them) reads back node for node,
    /// with its sessions, digest and shared ACLs, paced or not; so does the compressed form
    /// written before parted snapshots.
    #[test]
    fn parted_snapshot_round_trip() {
        use crate::raft::snapshot::encode_parted;
        use crate::raft::snapshot::encode_single_compressed;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = DataTree::new();
        for i in 0..60 {
            create(&mut tree, &format!("/p{i:02}"), format!("parent {i}").into_bytes());
            for j in 0..(i % 7) {
                let data = if j == 3 { vec![b'x'; 5000] } else { format!("{i}/{j}").into_bytes() };
                create(&mut tree, &format!("/p{i:02}/c{j}"), data);
            }
        }
        let last = Some(LogId::new(crate::raft::LeaderId { term: 2, node_id: 1 }, 99));
        let file = SnapshotFile { last_applied: last, membership: StoredMembership::default(), tree: tree.clone() };
        type Writer<'a> = Box<dyn Fn(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()> + 'a>;
        let writers: [(&str, Writer<'_>); 4] = [
            ("parted", Box::new(|w| encode_parted(&file, w, 7, 1 << 20, 0.0))),
            ("parted and paced", Box::new(|w| encode_parted(&file, w, 7, 1 << 20, 0.5))),
            ("parted by bytes", Box::new(|w| encode_parted(&file, w, 1000, 4096, 0.0))),
            ("single compressed", Box::new(|w| encode_single_compressed(&file, w))),
        ];
        for (name, write) in writers {
            let (_, _) = write_snapshot_with(dir.path(), &last, write).expect("write");
            let path = snapshot_path(dir.path(), &last);
            let (meta, _) = open_snapshot(&path).expect("header");
            assert_eq!(meta.last_log_id, last, "{name}");
            let back = decode_snapshot(&mut std::fs::File::open(&path).expect("open")).expect("decode");
            assert_eq!(back.last_applied, last, "{name}");
            assert_eq!(back.tree.node_count(), tree.node_count(), "{name}");
            assert_eq!(back.tree.digest(), tree.digest(), "{name}");
            assert_eq!(back.tree.last_zxid(), tree.last_zxid(), "{name}");
            assert!(back.tree.iter_nodes().eq(tree.iter_nodes()), "{name}: the nodes differ");
            let (a, b) = (back.tree.node("/p01").expect("/p01"), back.tree.node("/p55/c5").expect("/p55/c5"));
            assert!(Arc::ptr_eq(a.acl, b.acl) || name.starts_with("parted"), "{name}: equal ACLs are shared");
            assert_eq!(back.tree.get_children("/p13", &[]).expect("/p13").0.len(), 6, "{name}");
        }
    }

    /// A compressed snapshot cut short, or with a byte of its zstd frame changed, is refused:
    /// an error, never a partial or different tree.
    #[test]
    fn damaged_compressed_snapshot_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = DataTree::new();
        for i in 0..200 {
            create(&mut tree, &format!("/n{i}"), format!("value {i}").into_bytes());
        }
        let file = SnapshotFile { last_applied: None, membership: StoredMembership::default(), tree };
        // One part of nodes, and a part for every 16 (decoded on several threads).
        for part_nodes in [100_000, 16] {
            write_snapshot_with(dir.path(), &None, |w| {
                crate::raft::snapshot::encode_parted(&file, w, part_nodes, 1 << 20, 0.0)
            })
            .expect("write");
            let path = newest_snapshot(dir.path()).expect("list").expect("a snapshot");
            let good = std::fs::read(&path).expect("read");
            assert!(decode_snapshot(&mut std::fs::File::open(&path).expect("open")).is_ok());
            let damaged = dir.path().join("damaged.bin");
            let mut cases = vec![good[..good.len() / 2].to_vec(), good[..good.len() - 1].to_vec()];
            let mut longer = good.clone();
            longer.push(0);
            cases.push(longer);
            // zstd's frame magic, a compressed block, the end mark.
            for at in [17, good.len() / 2, good.len() - 2] {
                let mut flipped = good.clone();
                flipped[at] ^= 0x10;
                cases.push(flipped);
            }
            for (i, bytes) in cases.iter().enumerate() {
                std::fs::write(&damaged, bytes).expect("write");
                let decoded = decode_snapshot(&mut std::fs::File::open(&damaged).expect("open"));
                assert!(decoded.is_err(), "{part_nodes} nodes a part: case {i} decoded");
            }
        }
    }

    struct NoHook;
    impl ApplyHook for NoHook {
        fn applied(&self, _zxid: i64, _session_id: i64, _changes: &[Change]) {}
    }

    fn state_machine(dir: &Path, tree: DataTree) -> StateMachine {
        state_machine_with(dir, tree, Arc::new(Waiters::default()))
    }

    fn state_machine_with(dir: &Path, tree: DataTree, waiters: Arc<Waiters>) -> StateMachine {
        let shared = SharedTree::new();
        *shared.write() = tree;
        StateMachine::open(dir, Arc::new(shared), Arc::new(NoHook), waiters).expect("open state machine")
    }

    /// The hook of a test that sees, at each txn's apply, which of the batch's answers have
    /// already arrived.
    struct AnsweredSoFar {
        rx: std::sync::Mutex<Vec<tokio::sync::oneshot::Receiver<Result<TxnResult, crate::raft::ProposeError>>>>,
        got: std::sync::Mutex<Vec<(i64, TxnResult)>>,
        seen: std::sync::Mutex<Vec<usize>>,
    }
    impl ApplyHook for AnsweredSoFar {
        fn applied(&self, _zxid: i64, _session_id: i64, _changes: &[Change]) {
            let mut rx = self.rx.lock().expect("rx");
            let mut got = self.got.lock().expect("got");
            for (i, r) in rx.iter_mut().enumerate() {
                if let Ok(Ok(result)) = r.try_recv() {
                    got.push((i as i64, result));
                }
            }
            self.seen.lock().expect("seen").push(got.len());
        }
    }

    /// The server that proposed a batch answers each txn the moment it is applied, before the
    /// batch's next txn is applied, with the result openraft gets too, and nothing is left
    /// registered.
    #[tokio::test]
    async fn each_txn_is_answered_as_soon_as_it_is_applied() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| tokio::sync::oneshot::channel()).unzip();
        let hook = Arc::new(AnsweredSoFar {
            rx: std::sync::Mutex::new(rxs),
            got: Default::default(),
            seen: Default::default(),
        });
        let waiters = Arc::new(Waiters::default());
        let mut sm = StateMachine::open(dir.path(), Arc::new(SharedTree::new()), hook.clone(), waiters.clone())
            .expect("open state machine");

        let txn = |op| Txn { session_id: 0, time_ms: 1, auth: Default::default(), op };
        let create = || {
            TxnOp::Create(CreateOp {
                path: "/a".into(),
                data: Some(bytes::Bytes::from_static(b"x")),
                acl: AclEntry::open(),
                flags: 0,
                ttl: -1,
            })
        };
        let set = TxnOp::SetData { path: "/a".into(), data: Some(bytes::Bytes::from_static(b"y")), version: -1 };
        let log_id = LogId::new(crate::raft::LeaderId { term: 1, node_id: 0 }, 1);
        waiters.register(log_id, txs);
        let batch = TxnBatch::new(vec![txn(create()), txn(set), txn(create())]);
        let entry = Entry { log_id, payload: EntryPayload::Normal(batch) };
        let out = sm.apply_entries(vec![entry]);

        // At the second txn's apply the first was answered, at the third the first two.
        assert_eq!(*hook.seen.lock().expect("seen"), vec![0, 1, 2]);
        hook.applied(0, 0, &[]);
        let got = hook.got.lock().expect("got").clone();
        assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1, 2]);
        let answers: Vec<TxnResult> = got.into_iter().map(|(_, r)| r).collect();
        assert_eq!(out, vec![answers.clone()], "the answers are openraft's results");
        assert!(answers[0].outcome.is_ok() && answers[1].outcome.is_ok());
        assert!(answers[2].outcome.is_err(), "the second create of /a fails: {:?}", answers[2]);
        assert!(answers.windows(2).all(|w| w[0].zxid < w[1].zxid));
        assert!(waiters.is_empty(), "nothing left for the proposer to answer");
    }

    /// One apply call with several entries: each registered entry's waiters get that entry's
    /// results, whatever entries come between (a blank one, one proposed elsewhere); a
    /// registration the applied log replaced is failed.
    #[tokio::test]
    async fn answers_line_up_with_their_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        let waiters = Arc::new(Waiters::default());
        let mut sm = state_machine_with(dir.path(), DataTree::new(), waiters.clone());
        let create = |path: &str| Txn {
            session_id: 0,
            time_ms: 1,
            auth: Default::default(),
            op: TxnOp::Create(CreateOp { path: path.into(), data: None, acl: AclEntry::open(), flags: 0, ttl: -1 }),
        };
        let id = |term, index| LogId::new(crate::raft::LeaderId { term, node_id: 0 }, index);
        let registered = |log_id, paths: &[&str]| {
            let (txs, rxs): (Vec<_>, Vec<_>) = paths.iter().map(|_| tokio::sync::oneshot::channel()).unzip();
            waiters.register(log_id, txs);
            (TxnBatch::new(paths.iter().map(|p| create(p)).collect()), rxs)
        };
        let (b1, r1) = registered(id(1, 1), &["/a", "/a"]);
        let (b4, r4) = registered(id(1, 4), &["/c"]);
        // Registered at index 3 under term 1, but the log has term 2's entry there.
        let (_, mut replaced) = registered(id(1, 3), &["/x"]);
        let entry = |log_id, payload| Entry { log_id, payload };
        let entries = vec![
            entry(id(1, 1), EntryPayload::Normal(b1)),
            entry(id(1, 2), EntryPayload::Blank),
            entry(id(2, 3), EntryPayload::Normal(TxnBatch::new(vec![create("/b")]))),
            entry(id(1, 4), EntryPayload::Normal(b4)),
        ];
        let out = sm.apply_entries(entries);
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 0, 1, 1]);
        let got = |rxs: Vec<tokio::sync::oneshot::Receiver<_>>| -> Vec<TxnResult> {
            rxs.into_iter()
                .map(|mut r| match r.try_recv() {
                    Ok(Ok(result)) => result,
                    other => panic!("not answered: {other:?}"),
                })
                .collect()
        };
        assert_eq!(got(r1), out[0]);
        assert_eq!(got(r4), out[3]);
        assert!(out[0][1].outcome.is_err(), "the second create of /a fails");
        assert!(matches!(replaced[0].try_recv(), Ok(Err(_))), "the replaced entry's waiter is failed");
        assert!(waiters.is_empty());
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A snapshot received from the leader is renamed into place, not copied: the follower
    /// ends with exactly the leader's bytes under the snapshot name, no receiving file, the
    /// tree installed, and a restart loads it.
    #[tokio::test]
    async fn a_received_snapshot_is_renamed_into_place() {
        use tokio::io::AsyncWriteExt;
        let (leader_dir, follower_dir) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let mut tree = DataTree::new();
        create(&mut tree, "/a", vec![7u8; 100 << 10]);
        create(&mut tree, "/a/b", b"x".to_vec());
        let (count, zxid) = (tree.node_count(), tree.last_zxid());
        let mut leader = state_machine(leader_dir.path(), tree);
        let built = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
        let leader_file = newest_snapshot(leader_dir.path()).expect("list").expect("leader's snapshot");
        let bytes = std::fs::read(&leader_file).expect("read");

        let mut follower = state_machine(follower_dir.path(), DataTree::new());
        // An abandoned transfer's file goes too.
        drop(begin_receiving(follower_dir.path()).expect("begin"));
        let mut receiving = begin_receiving(follower_dir.path()).expect("begin");
        receiving.write_all(&bytes).await.expect("write");
        let received_inode = std::os::unix::fs::MetadataExt::ino(&receiving.metadata().await.expect("metadata"));
        follower.install_snapshot(&built.meta, receiving).await.expect("install");

        let name = snapshot_path(follower_dir.path(), &built.meta.last_log_id);
        let file_name = name.file_name().expect("name").to_string_lossy().into_owned();
        assert_eq!(names(follower_dir.path()), [file_name]);
        assert_eq!(std::fs::read(&name).expect("read"), bytes);
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&name).expect("metadata"));
        assert_eq!(inode, received_inode, "renamed, not copied");
        assert_eq!(follower.shared.read().node_count(), count);
        assert_eq!(follower.shared.read().last_zxid(), zxid);
        drop(follower);
        let reopened = state_machine(follower_dir.path(), DataTree::new());
        assert_eq!(reopened.shared.read().node_count(), count);
        assert_eq!(reopened.last_applied, built.meta.last_log_id);
    }

    /// A new snapshot removes only older ones: a newer one (installed from the leader while
    /// an older build ran) and a build still writing its `.tmp` stay. A restart removes the
    /// `.tmp` of a build a crash interrupted and loads the newest snapshot.
    #[test]
    fn older_snapshots_go_newer_ones_and_builds_in_progress_stay() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = DataTree::new();
        create(&mut tree, "/a", b"x".to_vec());
        let id = |i| Some(LogId::new(crate::raft::LeaderId { term: 1, node_id: 0 }, i));
        let write = |last: Option<LogId>| {
            let file = SnapshotFile { last_applied: last, membership: StoredMembership::default(), tree: tree.clone() };
            write_snapshot_with(dir.path(), &last, |w| {
                postcard::to_io(&file, w).map(|_| ()).map_err(std::io::Error::other)
            })
            .expect("write");
        };
        let name = |last, ext| {
            snapshot_path(dir.path(), &last)
                .with_extension(ext)
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        };
        write(id(10));
        write(id(30));
        assert_eq!(names(dir.path()), [name(id(30), "bin")]);
        std::fs::write(snapshot_path(dir.path(), &id(40)).with_extension("tmp"), b"partial").expect("tmp");
        write(id(20));
        assert_eq!(names(dir.path()), [name(id(20), "bin"), name(id(30), "bin"), name(id(40), "tmp")]);

        let reopened = state_machine(dir.path(), DataTree::new());
        assert_eq!(reopened.last_applied, id(30));
        assert_eq!(names(dir.path()), [name(id(20), "bin"), name(id(30), "bin")]);
    }

    /// The file a snapshot build hands to openraft stays readable when a newer snapshot (one
    /// installed from the leader meanwhile) removes it by name: the build no longer reopens it
    /// by name, which failed with ENOENT and stopped Raft (a randomized catch-up run).
    #[test]
    fn a_built_snapshot_stays_readable_when_a_newer_one_removes_it() {
        use std::io::Read;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = DataTree::new();
        create(&mut tree, "/a", vec![3u8; 5000]);
        let write = |index| {
            let last = Some(LogId::new(crate::raft::LeaderId { term: 1, node_id: 0 }, index));
            let file = SnapshotFile { last_applied: last, membership: StoredMembership::default(), tree: tree.clone() };
            write_snapshot_with(dir.path(), &last, |w| {
                postcard::to_io(&file, w).map(|_| ()).map_err(std::io::Error::other)
            })
            .expect("write")
        };
        let (size, mut older) = write(10);
        let _ = write(20);
        assert_eq!(names(dir.path()).len(), 1, "the newer snapshot removed the older by name");
        let mut bytes = Vec::new();
        older.read_to_end(&mut bytes).expect("read the removed snapshot through its handle");
        assert_eq!(bytes.len() as u64, size);
        let back: SnapshotFile = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back.tree.node_count(), tree.node_count());
        let newest = crate::raft::snapshot::open_newest(dir.path()).expect("open").expect("a snapshot");
        assert_eq!(newest.0.last_log_id.map(|l| l.index), Some(20));
    }

    /// A truncated file is an error, not a panic or a partial tree.
    #[test]
    fn truncated_snapshot_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = DataTree::new();
        create(&mut tree, "/a", vec![1u8; 1000]);
        let file = SnapshotFile { last_applied: None, membership: StoredMembership::default(), tree };
        let bytes = postcard::to_stdvec(&file).expect("encode");
        let path = dir.path().join("cut.bin");
        std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
        assert!(decode_snapshot(&mut std::fs::File::open(&path).expect("open")).is_err());
    }
}
