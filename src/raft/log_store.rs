//! The Raft log: entries in append-only segment files ([`super::segment_log`]), vote and
//! metadata in redb.
//!
//! # On-disk format (`<dataLogDir>/version-2/`, see [`super::layout`])
//! - `raft-log-<seq>.seg`: the log entries, postcard-encoded `openraft::Entry<TypeConfig>`
//!   records keyed by log index (format: [`super::segment_log`]).
//! - `raft-log.redb`, table `meta`: `"vote"`, `"committed"`, `"last_purged"` -> postcard-encoded
//!   values, and `"format"` -> the format version ([`FORMAT_VERSION`]). Format 1 kept the
//!   entries in redb too (table `logs`); opening such a log moves them into segments once
//!   (see [`LogStore::open`]).
//!
//! # Writing and durability
//! `append` puts the entries in an in-memory tail (so they are readable at once, as openraft
//! requires), writes them to the active segment with one `pwrite` and one `fdatasync`, and
//! only then tells openraft they are flushed. A redb commit for the same entry cost two to
//! three times as much on this machine's disk (it flushes about seven scattered pages; see
//! the segment log's docs). Group commit happens above this: each entry carries a whole batch
//! of txns (see `crate::dispatch::propose`). Votes and the purge point are redb commits with
//! `Durability::Immediate`; the purge point is durable before any segment is deleted.
//!
//! Where a write runs:
//! - **On the calling task's thread**, by default: a standalone server's writes, and an
//!   ensemble follower's appends of its leader's entries. The follower answers only once its
//!   copy is durable, so a thread hand-off would only add two wake-ups to each write
//!   (measured in the ninth pass: ~250 µs of a ~900 µs write loop on 2 cores). The write
//!   blocks that tokio worker for its fsync, and the runtime's other workers go on meanwhile
//!   (connections, and the state-machine worker applying the batch before). Handing the
//!   worker's other tasks to another thread first (`block_in_place`, until the fifteenth
//!   pass) cost ~20 µs of a 1×1 write (docs/perf/pass-15.md).
//! - **On a writer thread** ([`LogStore::with_writer`]), for an ensemble leader's own
//!   entries, and a standalone server's while its workers are spread for many clients (see
//!   `crate::runtime::workers`; the core then goes on with one batch's commit, apply and answers
//!   while the next is fsynced): `append` returns before the fsync, and openraft 0.10
//!   replicates the entry while the leader's copy is being made durable. The leader's flush
//!   is then one vote of the commit quorum, as ZooKeeper's leader proposes and logs at once.
//!   Under openraft 0.9 the core awaited the leader's flush before it sent the entry to
//!   anyone, so a write paid the leader's fsync and then a follower's. While any job is
//!   queued there, every later write (a vote, a truncation, the next append whoever proposed
//!   it) queues behind it, so writes stay in openraft's order; consecutive queued appends
//!   share one fsync.
//!
//! The committed index is written at most once a second (it only shortens replay after a
//! restart).
//!
//! # Reading
//! The tail keeps the newest entries (at least the unflushed ones), so the apply path and
//! replication to up-to-date followers read them without touching the disk or decoding; older
//! entries are read from the segments.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;

use openraft::storage::IOFlushed;
use openraft::storage::LogState;
use openraft::storage::RaftLogStorage;
use openraft::OptionalSend;
use openraft::RaftLogReader;
use redb::ReadableDatabase;
use redb::ReadableTable;
use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::batch::Fill;
use super::segment_log::SegmentLog;
use super::typ::Entry;
use super::LogId;
use super::TypeConfig;
use super::Vote;

/// openraft 0.10's storage traits speak `std::io::Error`.
type StorageError = std::io::Error;

/// Format 1 kept the entries here; read only to move them into segments.
const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Prometheus names of this module's metrics.
pub mod names {
    /// Time to write and commit (fsync) one append.
    pub const FSYNC_SECONDS: &str = "warden_raft_fsync_seconds";
    /// Log entries per commit.
    pub const APPEND_ENTRIES: &str = "warden_raft_append_entries";
}

/// redb page cache. redb keeps only the vote and metadata now; it is written at votes, purges
/// and once a second for the committed index, so a small cache is plenty.
const LOG_CACHE_BYTES: usize = 1 << 20;

/// Flushed entries the tail keeps for readers (the apply path, followers close behind).
const TAIL_KEEP: usize = 16;

/// How often the committed index is written (writing it with every append would add a redb
/// commit to each write).
const COMMITTED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Version of the on-disk format written in `meta["format"]`: 1 = entries in redb's `logs`
/// table, 2 = entries in segment files.
pub const FORMAT_VERSION: u32 = 2;

/// Entries moved from a format-1 log per segment append.
const MIGRATE_CHUNK: usize = 1024;

fn read_err(e: impl std::fmt::Display) -> StorageError {
    std::io::Error::other(format!("reading the raft log: {e}"))
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    std::io::Error::other(format!("writing the raft log: {e}"))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StorageError> {
    postcard::to_stdvec(v).map_err(write_err)
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, StorageError> {
    postcard::from_bytes(b).map_err(read_err)
}

/// What one write does, in order.
enum Command {
    /// Write these entries.
    Append(Vec<Entry>),
    /// Record the committed log id.
    Committed(Option<LogId>),
    /// Store the vote.
    Vote(Vec<u8>),
    /// Delete entries from this index on.
    Truncate(u64),
    /// Delete entries up to and including this log id, and record it as purged.
    Purge(LogId, Vec<u8>),
}

/// The newest committed log id not yet written, and when one was last written.
struct Committed {
    pending: Option<Option<LogId>>,
    written: std::time::Instant,
}

/// Entries appended and not yet purged from memory: every unflushed entry, plus up to
/// [`TAIL_KEEP`] flushed ones.
#[derive(Default)]
struct Tail {
    entries: BTreeMap<u64, Entry>,
    /// Highest index known durable on disk.
    flushed: Option<u64>,
}

impl Tail {
    fn trim(&mut self) {
        let Some(flushed) = self.flushed else { return };
        while self.entries.len() > TAIL_KEEP {
            match self.entries.first_key_value() {
                Some((&i, _)) if i <= flushed => {
                    self.entries.pop_first();
                }
                _ => break,
            }
        }
    }
}

/// The log store. Cheap to clone: clones share the files and the tail.
#[derive(Clone)]
pub struct LogStore {
    /// Vote and metadata.
    db: Arc<redb::Database>,
    /// The entries. One writer (openraft's core, through this store); readers take the lock
    /// for a read, and wait out an append's fsync when they meet one.
    segments: Arc<Mutex<SegmentLog>>,
    tail: Arc<Mutex<Tail>>,
    committed: Arc<Mutex<Committed>>,
    /// The member's id and its writer thread (see [`LogStore::with_writer`]).
    writer: Option<(u64, Arc<Writer>)>,
    /// See [`LogStore::with_vote_budget`].
    vote_budget: Option<Arc<VoteBudget>>,
    /// See [`LogStore::with_fsync_warning`].
    slow: Arc<SlowAppends>,
    /// Where a batch proposed empty takes its txns from (see [`LogStore::with_filler`]).
    filler: Option<Arc<dyn Fill>>,
}

use crate::config::DEFAULT_FSYNC_WARNING_MS;

/// How often a warning about the disk may be repeated while the condition lasts.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A warning given at most once per [`WARN_EVERY`], counting the occurrences in between.
#[derive(Default)]
struct Throttle(Mutex<ThrottleState>);

#[derive(Default)]
struct ThrottleState {
    warned: Option<std::time::Instant>,
    since: u64,
}

impl Throttle {
    /// Notes one occurrence. `Some(n)` when the warning is due now, `n` being the occurrences
    /// since the last one (this one included); `None` when one went out less than a minute ago.
    fn due(&self) -> Option<u64> {
        let mut st = lock(&self.0);
        st.since += 1;
        if st.warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return None;
        }
        st.warned = Some(std::time::Instant::now());
        Some(std::mem::take(&mut st.since))
    }
}

/// Appends whose write and fsync took longer than a threshold, told to the operator at most
/// once a minute (ZooKeeper warns at every such fsync, which on a disk that stays slow fills
/// the log).
struct SlowAppends {
    threshold_ms: std::sync::atomic::AtomicU64,
    throttle: Throttle,
}

impl SlowAppends {
    fn new(threshold_ms: u64) -> SlowAppends {
        SlowAppends { threshold_ms: threshold_ms.into(), throttle: Throttle::default() }
    }

    /// Notes an append of `entries` (`bytes()` bytes) that took `took`; warns if it was slow
    /// and no warning went out in the last minute.
    fn check(&self, took: std::time::Duration, entries: usize, bytes: impl FnOnce() -> usize) {
        let threshold_ms = self.threshold_ms.load(std::sync::atomic::Ordering::Relaxed);
        if took < std::time::Duration::from_millis(threshold_ms) {
            return;
        }
        let Some(slow) = self.throttle.due() else { return };
        tracing::warn!(
            took_ms = took.as_millis() as u64,
            threshold_ms,
            entries,
            bytes = bytes(),
            slow_appends_since_last_warning = slow,
            "writing and fsyncing the Raft log took longer than fsync.warningthresholdms: \
             every write waits for it; the disk is slow or busy (warden_raft_fsync_seconds \
             has the distribution)"
        );
    }
}

/// How long saving a vote may take before the operator is told the disk is too slow for the
/// election.
struct VoteBudget {
    budget: std::time::Duration,
    vote_window_ms: u64,
    throttle: Throttle,
}

impl VoteBudget {
    /// Warns (at most once a minute) when saving a vote took `took`, over the budget.
    fn check(&self, took: std::time::Duration) {
        if took < self.budget || self.throttle.due().is_none() {
            return;
        }
        tracing::warn!(
            took_ms = took.as_millis() as u64,
            vote_window_ms = self.vote_window_ms,
            "saving the Raft vote took over half the time a candidate waits for vote answers \
             (twice raft.electionTimeoutMs): answers later than that are dropped, so this \
             ensemble may fail to elect a leader on this disk; raise raft.electionTimeoutMs \
             to several times this figure"
        );
    }
}

/// Whether the appends of a member's own term go to the writer thread now.
pub type Offload = Box<dyn Fn() -> bool + Send + Sync>;

/// What waits for a job of the writer thread.
enum Done {
    /// openraft's flush callback (an append).
    Flushed(IOFlushed<TypeConfig>),
    /// A caller waiting for its write to be durable (a vote, a truncation, a purge).
    Waiter(std::sync::mpsc::SyncSender<Result<(), String>>),
    /// Nobody (the committed index).
    Nobody,
}

/// The writer thread's queue. Every write goes through it while any job is queued, so the
/// log's writes stay in the order openraft issued them.
struct Writer {
    tx: Mutex<std::sync::mpsc::Sender<(Vec<Command>, Done)>>,
    /// See [`LogStore::with_writer`].
    offload: Offload,
    /// Jobs sent and not yet done.
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl Writer {
    fn busy(&self) -> bool {
        self.queued.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    fn send(&self, cmds: Vec<Command>, done: Done) -> Result<(), StorageError> {
        self.queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if lock(&self.tx).send((cmds, done)).is_err() {
            self.queued.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return Err(write_err("the log's writer thread is gone"));
        }
        Ok(())
    }
}

/// The writer thread: carries out queued jobs in order, consecutive appends with one fsync,
/// then tells each job's waiter.
fn run_writer(
    db: Arc<redb::Database>,
    segments: Arc<Mutex<SegmentLog>>,
    tail: Arc<Mutex<Tail>>,
    slow: &SlowAppends,
    rx: std::sync::mpsc::Receiver<(Vec<Command>, Done)>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    woke: impl Fn(),
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while let Ok(job) = rx.try_recv() {
            jobs.push(job);
        }
        let mut cmds: Vec<Command> = Vec::new();
        let mut dones = Vec::with_capacity(jobs.len());
        for (job_cmds, done) in jobs {
            for cmd in job_cmds {
                match (cmds.last_mut(), cmd) {
                    (Some(Command::Append(prev)), Command::Append(next)) => prev.extend(next),
                    (_, cmd) => cmds.push(cmd),
                }
            }
            dones.push(done);
        }
        let result = commit(&db, &segments, &tail, slow, cmds);
        if let Err(e) = &result {
            tracing::error!(error = %e, "writing the raft log failed");
        }
        let n = dones.len();
        for done in dones {
            match done {
                Done::Flushed(cb) => cb.io_completed(result.clone().map_err(write_err)),
                Done::Waiter(tx) => {
                    let _ = tx.send(result.clone());
                }
                Done::Nobody => {}
            }
        }
        queued.fetch_sub(n, std::sync::atomic::Ordering::SeqCst);
        woke();
    }
}

/// A value of the `meta` table.
fn read_meta<T: DeserializeOwned>(db: &redb::Database, key: &str) -> Result<Option<T>, StorageError> {
    let txn = db.begin_read().map_err(read_err)?;
    let table = txn.open_table(META).map_err(read_err)?;
    match table.get(key).map_err(read_err)? {
        Some(v) => Ok(Some(decode(v.value())?)),
        None => Ok(None),
    }
}

/// Reads the id of the last appended log entry (durable or not), as openraft's vote compares
/// logs.
#[derive(Clone)]
pub struct LastLog {
    db: Arc<redb::Database>,
    segments: Arc<Mutex<SegmentLog>>,
    tail: Arc<Mutex<Tail>>,
}

impl LastLog {
    /// The id of the newest entry in the log; `None` when it holds none.
    fn newest(&self) -> Result<Option<LogId>, StorageError> {
        if let Some(l) = lock(&self.tail).entries.last_key_value().map(|(_, e)| e.log_id) {
            return Ok(Some(l));
        }
        let last = lock(&self.segments).last_record().map_err(read_err)?;
        match last {
            Some((_, bytes)) => Ok(Some(decode::<Entry>(&bytes)?.log_id)),
            None => Ok(None),
        }
    }

    /// The last log id (the last purged one when the log is empty), as openraft sees it.
    pub fn get(&self) -> Result<Option<LogId>, StorageError> {
        match self.newest()? {
            Some(l) => Ok(Some(l)),
            None => read_meta(&self.db, "last_purged"),
        }
    }
}

/// Why the log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("opening {path}: {source}")]
    Open { path: String, source: redb::DatabaseError },
    #[error("initialising {path}: {source}")]
    Init { path: String, source: redb::Error },
    #[error("{path} has log format {found}, this Warden reads {FORMAT_VERSION} (and 1)")]
    Format { path: String, found: u32 },
    #[error("reading {path}: {reason}")]
    Meta { path: String, reason: String },
    #[error("log segments in {path}: {source}")]
    Segments { path: String, source: std::io::Error },
    #[error("moving the log of {path} into segments: {reason}")]
    Migrate { path: String, reason: String },
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Neither the tail nor the segment log holds an invariant a panicking holder could break
    // halfway: the segment log changes its in-memory state only after its I/O succeeded.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes one meta row durably.
fn put_meta(db: &redb::Database, key: &str, value: &[u8]) -> Result<(), String> {
    let txn = db.begin_write().map_err(text)?;
    {
        let mut meta = txn.open_table(META).map_err(text)?;
        meta.insert(key, value).map_err(text)?;
    }
    txn.commit().map_err(text)
}

impl LogStore {
    /// Opens (or creates) the log whose redb file is `path`; its segments live beside it.
    /// A format-1 log has its entries moved into segments first: they are written and
    /// fsynced, then one redb commit empties the `logs` table and records format 2 (a crash
    /// before that commit starts the move again from scratch).
    pub fn open(path: &Path) -> Result<LogStore, OpenError> {
        let p = path.display().to_string();
        let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
        let db = redb::Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(|source| OpenError::Open { path: p.clone(), source })?;
        let init = || -> Result<Option<u32>, redb::Error> {
            let txn = db.begin_write()?;
            let found = {
                let _ = txn.open_table(LOGS)?;
                let mut meta = txn.open_table(META)?;
                // A value of the wrong length reads as format 0, which is refused below.
                let found = meta.get("format")?.map(|v| v.value().try_into().map_or(0, u32::from_be_bytes));
                if found.is_none() {
                    meta.insert("format", FORMAT_VERSION.to_be_bytes().as_slice())?;
                }
                found
            };
            txn.commit()?;
            Ok(found)
        };
        let found = init().map_err(|source| OpenError::Init { path: p.clone(), source })?;
        match found {
            None | Some(FORMAT_VERSION) | Some(1) => {}
            Some(found) => return Err(OpenError::Format { path: p, found }),
        }
        let purged: Option<LogId> =
            read_meta(&db, "last_purged").map_err(|e| OpenError::Meta { path: p.clone(), reason: e.to_string() })?;
        let seg_err = |source| OpenError::Segments { path: dir.display().to_string(), source };
        if found == Some(1) {
            // Segments left by a move a crash cut short are written again from scratch.
            SegmentLog::remove_all(&dir).map_err(seg_err)?;
        }
        let mut segments = SegmentLog::open(&dir, purged.map(|l| l.index)).map_err(seg_err)?;
        if found == Some(1) {
            migrate(&db, &mut segments).map_err(|reason| OpenError::Migrate { path: p.clone(), reason })?;
            tracing::info!(log = %p, "moved the raft log's entries from redb into segment files (format 2)");
        }
        // A log cut short below what it recorded as committed has lost acknowledged entries
        // (damage, not a torn append): refuse, before the first append clears the evidence.
        let committed: Option<Option<LogId>> =
            read_meta(&db, "committed").map_err(|e| OpenError::Meta { path: p.clone(), reason: e.to_string() })?;
        if let Some(c) = committed.flatten() {
            let reaches = segments.last_index().max(purged.map(|l| l.index));
            if reaches.is_none_or(|r| r < c.index) {
                return Err(OpenError::Segments {
                    path: dir.display().to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the log ends at index {reaches:?} but index {} was committed: it is damaged", c.index),
                    ),
                });
            }
        }
        let committed = Committed { pending: None, written: std::time::Instant::now() };
        Ok(LogStore {
            db: Arc::new(db),
            segments: Arc::new(Mutex::new(segments)),
            tail: Arc::new(Mutex::new(Tail::default())),
            committed: Arc::new(Mutex::new(committed)),
            writer: None,
            vote_budget: None,
            slow: Arc::new(SlowAppends::new(DEFAULT_FSYNC_WARNING_MS)),
            filler: None,
        })
    }

    /// This store, warning when saving a vote takes over half of `vote_window_ms`, the time a
    /// candidate waits for vote answers. An ensemble member answers a vote only once the vote
    /// is durable, and the candidate drops later answers: with a disk whose fsync takes about
    /// that long no election ever completes (seen with every fsync 100 ms slower and the vote
    /// window at 75 ms), and this warning names the key that fixes it.
    pub fn with_vote_budget(mut self, vote_window_ms: u64) -> LogStore {
        self.vote_budget = Some(Arc::new(VoteBudget {
            budget: std::time::Duration::from_millis(vote_window_ms / 2),
            vote_window_ms,
            throttle: Throttle::default(),
        }));
        self
    }

    /// This store with appends fsynced (`sync`, the default) or only written (ZooKeeper's
    /// `forceSync=no`: they survive a crash of the process, not of the machine). Votes and
    /// the rest of redb's metadata stay durable either way.
    pub fn with_force_sync(self, sync: bool) -> LogStore {
        lock(&self.segments).set_sync(sync);
        self
    }

    /// This store, warning (at most once a minute) when writing and fsyncing an append takes
    /// longer than `threshold_ms` (ZooKeeper's `fsync.warningthresholdms`; 1 s by default).
    pub fn with_fsync_warning(self, threshold_ms: u64) -> LogStore {
        self.slow.threshold_ms.store(threshold_ms, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// This store, for ensemble member `id`, with a writer thread for the appends of this
    /// member's own term: as leader it returns from `append` before the fsync, so openraft
    /// 0.10 replicates the entry while the leader's own copy is being made durable (the
    /// leader's flush then counts as one vote of the commit quorum, as ZooKeeper's leader
    /// logs and proposes at once). Entries from another leader are still written on the
    /// calling thread when nothing is queued: a follower answers only once its copy is
    /// durable, and a thread hand-off would only add to that.
    /// `woke` runs on the writer thread after each batch of jobs has told its waiters (see
    /// `crate::runtime::workers::Placement::woke_from_outside`).
    ///
    /// `offload` says, at each append, whether the member's own entries go to the writer:
    /// always on an ensemble member, and on a standalone server while it serves many clients
    /// at once (its workers spread, see `crate::runtime::workers`). There the core goes on with the
    /// commit, apply and answers of one batch while the next is fsynced, instead of blocking
    /// a worker in fdatasync: set 16×8 ×1.028 (paired) at a thread hand-off per
    /// fsync, which a lone client would pay in latency (docs/perf/pass-24.md).
    pub fn with_writer(
        mut self,
        id: u64,
        woke: impl Fn() + Send + 'static,
        offload: Offload,
    ) -> std::io::Result<LogStore> {
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (db, segments, tail, q) = (self.db.clone(), self.segments.clone(), self.tail.clone(), queued.clone());
        let slow = self.slow.clone();
        std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run_writer(db, segments, tail, &slow, rx, q, woke))?;
        self.writer = Some((id, Arc::new(Writer { tx: Mutex::new(tx), offload, queued })));
        Ok(self)
    }

    /// This store, filling the batches a leader proposes empty from `filler` as it appends
    /// them (see [`super::batch::Fill`]).
    pub fn with_filler(mut self, filler: Arc<dyn Fill>) -> LogStore {
        self.filler = Some(filler);
        self
    }

    /// A handle that reads the last appended log id.
    pub fn last_log(&self) -> LastLog {
        LastLog { db: self.db.clone(), segments: self.segments.clone(), tail: self.tail.clone() }
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        read_meta(&self.db, key)
    }

    /// Carries out `cmds` (and writes the committed index, when it is due), on this thread
    /// (see the module docs).
    fn write(&self, mut cmds: Vec<Command>) -> Result<(), StorageError> {
        let only_committed = cmds.is_empty();
        {
            let mut c = lock(&self.committed);
            if c.written.elapsed() >= COMMITTED_EVERY {
                if let Some(p) = c.pending.take() {
                    cmds.push(Command::Committed(p));
                    c.written = std::time::Instant::now();
                }
            }
        }
        if cmds.is_empty() {
            return Ok(());
        }
        if let Some((_, w)) = self.writer.as_ref().filter(|(_, w)| w.busy()) {
            // Behind the queued writes, in order.
            if only_committed {
                return w.send(cmds, Done::Nobody);
            }
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            w.send(cmds, Done::Waiter(tx))?;
            let waited = rx.recv();
            return waited.map_err(|_| write_err("the log's writer thread is gone"))?.map_err(write_err);
        }
        commit(&self.db, &self.segments, &self.tail, &self.slow, cmds).map_err(|e| {
            tracing::error!(error = %e, "writing the raft log failed");
            write_err(e)
        })
    }
}

/// Moves a format-1 log's entries from redb's `logs` table into `segments` (opened empty),
/// then empties the table and records format 2.
fn migrate(db: &redb::Database, segments: &mut SegmentLog) -> Result<(), String> {
    {
        let txn = db.begin_read().map_err(text)?;
        let table = txn.open_table(LOGS).map_err(text)?;
        let mut chunk: Vec<(u64, Vec<u8>)> = Vec::with_capacity(MIGRATE_CHUNK);
        for item in table.iter().map_err(text)? {
            let (k, v) = item.map_err(text)?;
            chunk.push((k.value(), v.value().to_vec()));
            if chunk.len() == MIGRATE_CHUNK {
                segments.append(&chunk).map_err(text)?;
                chunk.clear();
            }
        }
        segments.append(&chunk).map_err(text)?;
    }
    let txn = db.begin_write().map_err(text)?;
    {
        let mut logs = txn.open_table(LOGS).map_err(text)?;
        logs.retain(|_, _| false).map_err(text)?;
        let mut meta = txn.open_table(META).map_err(text)?;
        meta.insert("format", FORMAT_VERSION.to_be_bytes().as_slice()).map_err(text)?;
    }
    txn.commit().map_err(text)
}

/// An error as text.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Carries out `cmds` in order, each durable before the next, then marks what is durable in
/// the tail.
fn commit(
    db: &redb::Database,
    segments: &Mutex<SegmentLog>,
    tail: &Mutex<Tail>,
    slow: &SlowAppends,
    cmds: Vec<Command>,
) -> Result<(), String> {
    for cmd in &cmds {
        match cmd {
            Command::Append(entries) => {
                let started = std::time::Instant::now();
                let records = entries
                    .iter()
                    .map(|e| postcard::to_stdvec(e).map(|b| (e.log_id.index, b)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(text)?;
                crate::crash_point!("log-append-before");
                lock(segments).append(&records).map_err(text)?;
                crate::crash_point!("log-append-after");
                let took = started.elapsed();
                metrics::histogram!(names::FSYNC_SECONDS).record(took.as_secs_f64());
                slow.check(took, entries.len(), || records.iter().map(|(_, b)| b.len()).sum());
                metrics::histogram!(names::APPEND_ENTRIES).record(entries.len() as f64);
            }
            Command::Committed(c) => {
                let bytes = postcard::to_stdvec(c).map_err(text)?;
                put_meta(db, "committed", &bytes)?;
            }
            Command::Vote(bytes) => put_meta(db, "vote", bytes)?,
            Command::Truncate(index) => lock(segments).truncate(*index).map_err(text)?,
            Command::Purge(log_id, bytes) => {
                // The purge point first: segments a crash leaves behind are deleted on open.
                put_meta(db, "last_purged", bytes)?;
                lock(segments).purge(log_id.index).map_err(text)?;
            }
        }
    }
    // What is durable now, in command order: appends extend it, a truncation cuts it.
    let mut t = lock(tail);
    for cmd in &cmds {
        match cmd {
            Command::Append(entries) => {
                if let Some(last) = entries.last() {
                    t.flushed = Some(t.flushed.map_or(last.log_id.index, |f| f.max(last.log_id.index)));
                }
            }
            Command::Truncate(index) if t.flushed.is_some_and(|f| f >= *index) => {
                t.flushed = index.checked_sub(1);
            }
            _ => {}
        }
    }
    t.trim();
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        // The tail first, then the segments: an entry leaves the tail only once it is durable
        // there, so a read begun after this look finds it.
        let from_tail: Vec<Entry> = lock(&self.tail).entries.range(range.clone()).map(|(_, e)| e.clone()).collect();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        if from_tail.first().is_some_and(|e| e.log_id.index == start) {
            // Contiguous from the start: the tail has the whole rest of the range.
            return Ok(from_tail);
        }
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        // What the tail does not have, up to where its part begins.
        let end = from_tail.first().map_or(end, |e| e.log_id.index.min(end));
        // Read under the lock, decode after it (an append waits on it).
        let records = lock(&self.segments).read(start, end).map_err(read_err)?;
        let mut out = Vec::with_capacity(records.len() + from_tail.len());
        for (_, bytes) in records {
            out.push(decode(&bytes)?);
        }
        out.extend(from_tail);
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.get_meta("vote")
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId> = self.get_meta("last_purged")?;
        let last = self.last_log().newest()?.or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(vote)?;
        let started = std::time::Instant::now();
        let written = self.write(vec![Command::Vote(bytes)]);
        if let Some(b) = &self.vote_budget {
            b.check(started.elapsed());
        }
        written
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // The committed index only shortens replay after a restart: it is written (one redb
        // commit) at most once a second, with whichever write comes when it is due.
        self.committed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pending = Some(committed);
        self.write(Vec::new())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut entries: Vec<Entry> = entries.into_iter().collect();
        // A batch the proposer left to be filled takes its txns now, before it is stored,
        // encoded or replicated (see `TxnBatch::fill`).
        for e in &mut entries {
            if let openraft::EntryPayload::Normal(batch) = &mut e.payload {
                batch.fill(e.log_id, self.filler.as_deref());
            }
        }
        {
            let mut t = lock(&self.tail);
            for e in &entries {
                t.entries.insert(e.log_id.index, e.clone());
            }
        }
        if let Some((id, w)) = &self.writer {
            let own = entries.last().is_some_and(|e| e.log_id.leader_id.node_id == *id);
            if (own && (w.offload)()) || w.busy() {
                return w.send(vec![Command::Append(entries)], Done::Flushed(callback));
            }
        }
        let result = self.write(vec![Command::Append(entries)]);
        callback.io_completed(result);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), StorageError> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        {
            // Readers must not see them from now on; `flushed` is lowered after the commit.
            let _ = lock(&self.tail).entries.split_off(&from);
        }
        self.write(vec![Command::Truncate(from)])
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = encode(&log_id)?;
        self.write(vec![Command::Purge(log_id, bytes)])?;
        let mut t = lock(&self.tail);
        let keep = t.entries.split_off(&(log_id.index + 1));
        t.entries = keep;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn slow_appends_are_told_once_a_minute_and_counted() {
        let slow = SlowAppends::new(50);
        let state = |s: &SlowAppends| {
            let st = lock(&s.throttle.0);
            (st.warned, st.since)
        };
        slow.check(Duration::from_millis(49), 1, || 10);
        assert_eq!(state(&slow), (None, 0), "under the threshold: nothing to say");
        slow.check(Duration::from_millis(50), 1, || 10);
        let (first, since) = state(&slow);
        assert!(first.is_some());
        assert_eq!(since, 0, "the warning reported the slow append");
        slow.check(Duration::from_millis(900), 3, || 30);
        slow.check(Duration::from_millis(70), 3, || 30);
        assert_eq!(state(&slow), (first, 2), "no second warning within the minute; the next counts these");
    }

    #[test]
    fn a_throttle_reports_what_it_held_back() {
        let t = Throttle::default();
        assert_eq!(t.due(), Some(1));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        lock(&t.0).warned = Some(std::time::Instant::now() - WARN_EVERY);
        assert_eq!(t.due(), Some(3), "the two held back and this one");
    }

    #[test]
    fn the_threshold_can_be_set_after_the_writer_shares_it() {
        let slow = Arc::new(SlowAppends::new(DEFAULT_FSYNC_WARNING_MS));
        let shared = slow.clone();
        slow.threshold_ms.store(5, std::sync::atomic::Ordering::Relaxed);
        shared.check(Duration::from_millis(6), 1, || 1);
        assert!(lock(&slow.throttle.0).warned.is_some());
    }
}
