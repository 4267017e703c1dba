//! The Raft log on redb, written by one thread of its own.
//!
//! # On-disk format (`<dataLogDir>/version-2/raft-log.redb`, see [`super::layout`])
//! - table `logs`: `u64` log index -> postcard-encoded `openraft::Entry<TypeConfig>`.
//! - table `meta`: `"vote"`, `"committed"`, `"last_purged"` -> postcard-encoded values, and
//!   `"format"` -> the format version ([`FORMAT_VERSION`]).
//!
//! # Writing and durability
//! `append` puts the entries in an in-memory tail (so they are readable at once, as openraft
//! requires) and hands them to the writer thread; it does not wait for the disk. The writer
//! takes every command queued since its last commit and writes them in **one** redb write
//! transaction committed with `Durability::Immediate` (one fsync): group commit across
//! appends, so Raft's task never blocks on an fsync and the next batch is appended while the
//! previous one is being made durable. openraft is told entries are flushed only after that
//! commit returns. Votes, truncation and purging go through the same queue, in order, and
//! their callers wait for the commit. The committed index rides along with a commit at most
//! once a second (it only shortens replay after a restart).
//!
//! # Reading
//! The tail keeps the newest entries (at least the unflushed ones), so the apply path and
//! replication to up-to-date followers read them without touching redb or decoding; older
//! entries are read from redb.

// openraft's StorageError is large by design; boxing it here would only move the cost.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::sync::Mutex;

use openraft::storage::LogFlushed;
use openraft::storage::LogState;
use openraft::storage::RaftLogStorage;
use openraft::AnyError;
use openraft::LogId;
use openraft::OptionalSend;
use openraft::RaftLogReader;
use openraft::StorageIOError;
use openraft::Vote;
use redb::ReadableDatabase;
use redb::ReadableTable;
use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::typ::Entry;
use super::typ::StorageError;
use super::TypeConfig;

const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Prometheus names of this module's metrics.
pub mod names {
    /// Time to write and commit (fsync) one group of queued log commands.
    pub const FSYNC_SECONDS: &str = "warden_raft_fsync_seconds";
    /// Log entries per commit.
    pub const APPEND_ENTRIES: &str = "warden_raft_append_entries";
}

/// redb page cache for the log. The log is appended and read back only by followers far
/// behind; 32 MiB of cache added ~35 MiB to RSS under a 1M-znode load with no write speed to
/// show for it (warden-bench create/set A/B within noise), so it is kept small. 1 MiB against
/// 4: 3 MiB less RSS after that load; a commit then reads back ~2 pages instead of ~1.4
/// (from the OS page cache), no cost seen in create or set 16×8.
const LOG_CACHE_BYTES: usize = 1 << 20;

/// Flushed entries the tail keeps for readers (the apply path, followers close behind).
const TAIL_KEEP: usize = 16;

/// How often the committed index is written (it rides along with a commit; writing it with
/// every one would add a table's pages to each fsync, about a tenth of its cost).
const COMMITTED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Commands the writer takes into one commit at most.
const MAX_COMMANDS_PER_COMMIT: usize = 4096;

/// Version of the on-disk format written in `meta["format"]`.
pub const FORMAT_VERSION: u32 = 1;

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StorageError> {
    postcard::to_stdvec(v).map_err(write_err)
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, StorageError> {
    postcard::from_bytes(b).map_err(read_err)
}

/// What the writer thread does, in queue order.
enum Command {
    /// Write these entries; call back once durable.
    Append(Vec<Entry>, LogFlushed<TypeConfig>),
    /// Record the committed log id (no fsync of its own).
    Committed(Option<LogId<u64>>),
    /// Store the vote durably.
    Vote(Vec<u8>, tokio::sync::oneshot::Sender<Result<(), String>>),
    /// Delete entries from this index on, durably.
    Truncate(u64, tokio::sync::oneshot::Sender<Result<(), String>>),
    /// Delete entries up to and including this log id, and record it as purged.
    Purge(LogId<u64>, Vec<u8>, tokio::sync::oneshot::Sender<Result<(), String>>),
}

/// Entries appended and not yet purged from memory: every unflushed entry, plus up to
/// [`TAIL_KEEP`] flushed ones.
#[derive(Default)]
struct Tail {
    entries: BTreeMap<u64, Entry>,
    /// Highest index known durable in redb.
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

/// The log store. Cheap to clone: clones share the database, the tail and the writer.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<redb::Database>,
    tail: Arc<Mutex<Tail>>,
    writer: mpsc::Sender<Command>,
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
/// logs. Holds no writer: the writer thread still stops when the last [`LogStore`] goes.
#[derive(Clone)]
pub struct LastLog {
    db: Arc<redb::Database>,
    tail: Arc<Mutex<Tail>>,
}

impl LastLog {
    /// The id of the newest entry in the log; `None` when it holds none.
    fn newest(&self) -> Result<Option<LogId<u64>>, StorageError> {
        if let Some(l) = lock(&self.tail).entries.last_key_value().map(|(_, e)| e.log_id) {
            return Ok(Some(l));
        }
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let newest = match table.last().map_err(read_err)? {
            Some((_, v)) => Some(decode::<Entry>(v.value())?.log_id),
            None => None,
        };
        Ok(newest)
    }

    /// The last log id (the last purged one when the log is empty), as openraft sees it.
    pub fn get(&self) -> Result<Option<LogId<u64>>, StorageError> {
        match self.newest()? {
            Some(l) => Ok(Some(l)),
            None => read_meta(&self.db, "last_purged"),
        }
    }
}

/// Why the log database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("opening {path}: {source}")]
    Open { path: String, source: redb::DatabaseError },
    #[error("initialising {path}: {source}")]
    Init { path: String, source: redb::Error },
    #[error("{path} has log format {found}, this Warden reads {FORMAT_VERSION}")]
    Format { path: String, found: u32 },
    #[error("starting the log writer thread: {0}")]
    Thread(std::io::Error),
}

fn lock(tail: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    // The tail holds no invariant a panicking holder could break halfway.
    tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LogStore {
    /// Opens (or creates) the log at `path` and starts its writer thread.
    pub fn open(path: &Path) -> Result<LogStore, OpenError> {
        let p = path.display().to_string();
        // redb caches up to 1 GiB of pages by default; the log is written once and read back
        // only by lagging followers, so a small cache keeps RSS down without costing writes.
        let db = redb::Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(|source| OpenError::Open { path: p.clone(), source })?;
        let init = || -> Result<Option<u32>, redb::Error> {
            let txn = db.begin_write()?;
            let found = {
                let _ = txn.open_table(LOGS)?;
                let mut meta = txn.open_table(META)?;
                let found = meta.get("format")?.map(|v| {
                    let b = v.value();
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
                });
                if found.is_none() {
                    meta.insert("format", FORMAT_VERSION.to_be_bytes().as_slice())?;
                }
                found
            };
            txn.commit()?;
            Ok(found)
        };
        match init().map_err(|source| OpenError::Init { path: p.clone(), source })? {
            Some(found) if found != FORMAT_VERSION => return Err(OpenError::Format { path: p, found }),
            _ => {}
        }
        let db = Arc::new(db);
        let tail = Arc::new(Mutex::new(Tail::default()));
        let (tx, rx) = mpsc::channel();
        let (wdb, wtail) = (db.clone(), tail.clone());
        std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || writer(&wdb, &wtail, &rx))
            .map_err(OpenError::Thread)?;
        Ok(LogStore { db, tail, writer: tx })
    }

    /// A handle that reads the last appended log id, for pre-votes (see [`crate::failover`]).
    pub fn last_log(&self) -> LastLog {
        LastLog { db: self.db.clone(), tail: self.tail.clone() }
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        read_meta(&self.db, key)
    }

    fn send(&self, cmd: Command) -> Result<(), StorageError> {
        self.writer.send(cmd).map_err(|_| write_err(std::io::Error::other("the log writer thread has stopped")))
    }

    /// Queues a command that must be durable before its caller goes on, and waits for it.
    async fn durable(
        &self,
        cmd: impl FnOnce(tokio::sync::oneshot::Sender<Result<(), String>>) -> Command,
    ) -> Result<(), StorageError> {
        let (done, wait) = tokio::sync::oneshot::channel();
        self.send(cmd(done))?;
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(write_err(std::io::Error::other(e))),
            Err(_) => Err(write_err(std::io::Error::other("the log writer thread has stopped"))),
        }
    }
}

/// An error as the text the writer hands back to its waiters.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The writer thread: takes every queued command, writes them in one transaction, commits
/// once, then answers them in order. Exits when every [`LogStore`] clone is gone.
fn writer(db: &redb::Database, tail: &Mutex<Tail>, rx: &mpsc::Receiver<Command>) {
    // The committed index is written at most every COMMITTED_EVERY; the newest one not yet
    // written waits here.
    let mut committed: Option<Option<LogId<u64>>> = None;
    let mut committed_written = std::time::Instant::now();
    while let Ok(first) = rx.recv() {
        let mut cmds = vec![first];
        while cmds.len() < MAX_COMMANDS_PER_COMMIT {
            match rx.try_recv() {
                Ok(c) => cmds.push(c),
                Err(_) => break,
            }
        }
        cmds.retain(|c| match c {
            Command::Committed(c) => {
                committed = Some(*c);
                false
            }
            _ => true,
        });
        if committed_written.elapsed() >= COMMITTED_EVERY {
            if let Some(c) = committed.take() {
                cmds.push(Command::Committed(c));
                committed_written = std::time::Instant::now();
            }
        }
        if cmds.is_empty() {
            continue;
        }
        let started = std::time::Instant::now();
        let mut appended = 0u64;
        let result = (|| -> Result<(), String> {
            let mut txn = db.begin_write().map_err(text)?;
            let only_committed = cmds.iter().all(|c| matches!(c, Command::Committed(_)));
            if only_committed {
                txn.set_durability(redb::Durability::None).map_err(text)?;
            }
            {
                let mut logs = txn.open_table(LOGS).map_err(text)?;
                let mut meta = txn.open_table(META).map_err(text)?;
                for cmd in &cmds {
                    match cmd {
                        Command::Append(entries, _) => {
                            for entry in entries {
                                let bytes = postcard::to_stdvec(entry).map_err(text)?;
                                logs.insert(entry.log_id.index, bytes.as_slice()).map_err(text)?;
                                appended += 1;
                            }
                        }
                        Command::Committed(c) => {
                            let bytes = postcard::to_stdvec(c).map_err(text)?;
                            meta.insert("committed", bytes.as_slice()).map_err(text)?;
                        }
                        Command::Vote(bytes, _) => {
                            meta.insert("vote", bytes.as_slice()).map_err(text)?;
                        }
                        Command::Truncate(index, _) => {
                            logs.retain_in(*index.., |_, _| false).map_err(text)?;
                        }
                        Command::Purge(log_id, bytes, _) => {
                            meta.insert("last_purged", bytes.as_slice()).map_err(text)?;
                            logs.retain_in(..=log_id.index, |_, _| false).map_err(text)?;
                        }
                    }
                }
            }
            txn.commit().map_err(text)
        })();
        if appended > 0 {
            metrics::histogram!(names::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
            metrics::histogram!(names::APPEND_ENTRIES).record(appended as f64);
        }
        if result.is_ok() {
            // What is durable now, in command order: appends extend it, a truncation cuts it.
            let mut t = lock(tail);
            for cmd in &cmds {
                match cmd {
                    Command::Append(entries, _) => {
                        if let Some(last) = entries.last() {
                            t.flushed = Some(t.flushed.map_or(last.log_id.index, |f| f.max(last.log_id.index)));
                        }
                    }
                    Command::Truncate(index, _) if t.flushed.is_some_and(|f| f >= *index) => {
                        t.flushed = index.checked_sub(1);
                    }
                    _ => {}
                }
            }
            t.trim();
        }
        for cmd in cmds {
            let r = result.clone();
            match cmd {
                Command::Append(es, callback) => {
                    let ok = r.is_ok();
                    callback.log_io_completed(r.map_err(std::io::Error::other));
                    for e in &es {
                        if let (true, openraft::EntryPayload::Normal(batch)) = (ok, &e.payload) {
                            batch.hooks.durable();
                        }
                    }
                }
                Command::Committed(_) => {}
                Command::Vote(_, done) | Command::Truncate(_, done) | Command::Purge(_, _, done) => {
                    let _ = done.send(r);
                }
            }
        }
        if let Err(e) = result {
            tracing::error!(error = %e, "writing the raft log failed");
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        // The tail first, then redb: an entry that leaves the tail was committed before it
        // left, so a read transaction begun after this look sees it.
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
        let tail_start = from_tail.first().map(|e| e.log_id.index);
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let mut out = Vec::new();
        for item in table.range(range).map_err(read_err)? {
            let (k, v) = item.map_err(read_err)?;
            if tail_start.is_some_and(|t| k.value() >= t) {
                break;
            }
            out.push(decode(v.value())?);
        }
        out.extend(from_tail);
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId<u64>> = self.get_meta("last_purged")?;
        let last = self.last_log().newest()?.or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let bytes = encode(vote)?;
        self.durable(|done| Command::Vote(bytes, done)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get_meta("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        // Not waited for and not fsynced on its own: the committed index only shortens replay
        // after a restart; the writer stores it with a later commit, at most once a second.
        self.send(Command::Committed(committed))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        Ok(self.get_meta::<Option<LogId<u64>>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        {
            let mut t = lock(&self.tail);
            for e in &entries {
                t.entries.insert(e.log_id.index, e.clone());
            }
        }
        self.send(Command::Append(entries, callback))
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        {
            // Readers must not see them from now on; the writer lowers `flushed` after its
            // commit (an append of these entries may still be ahead of this in its queue).
            let _ = lock(&self.tail).entries.split_off(&log_id.index);
        }
        self.durable(|done| Command::Truncate(log_id.index, done)).await
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let bytes = encode(&log_id)?;
        self.durable(|done| Command::Purge(log_id, bytes, done)).await?;
        let mut t = lock(&self.tail);
        let keep = t.entries.split_off(&(log_id.index + 1));
        t.entries = keep;
        Ok(())
    }
}
