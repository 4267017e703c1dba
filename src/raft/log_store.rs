//! The Raft log on redb.
//!
//! # On-disk format (`<dataLogDir>/version-2/raft-log.redb`, see [`super::layout`])
//! - table `logs`: `u64` log index -> postcard-encoded `openraft::Entry<TypeConfig>`.
//! - table `meta`: `"vote"`, `"committed"`, `"last_purged"` -> postcard-encoded values, and
//!   `"format"` -> the format version ([`FORMAT_VERSION`]).
//!
//! # Durability
//! Every `append` batch is one redb write transaction committed with `Durability::Immediate`
//! (one fsync), and openraft is told the entries are flushed only after that commit returns.
//! Votes are committed the same way before `save_vote` returns. `purge` and the committed
//! index are written likewise; losing them would only cost replay time.

// openraft's StorageError is large by design; boxing it here would only move the cost.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

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
    /// Time to commit (fsync) one appended batch of log entries.
    pub const FSYNC_SECONDS: &str = "warden_raft_fsync_seconds";
    /// Log entries per appended batch.
    pub const APPEND_ENTRIES: &str = "warden_raft_append_entries";
}

/// redb page cache for the log.
const LOG_CACHE_BYTES: usize = 32 << 20;

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

/// The log store. Cheap to clone: readers share the database.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<redb::Database>,
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
}

impl LogStore {
    /// Opens (or creates) the log at `path`.
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
            Some(found) if found != FORMAT_VERSION => Err(OpenError::Format { path: p, found }),
            _ => Ok(LogStore { db: Arc::new(db) }),
        }
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(META).map_err(read_err)?;
        match table.get(key).map_err(read_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(&self, key: &str, value: &T) -> Result<(), StorageError> {
        self.put_meta_with(key, value, redb::Durability::Immediate)
    }

    fn put_meta_with<T: Serialize>(&self, key: &str, value: &T, d: redb::Durability) -> Result<(), StorageError> {
        let bytes = encode(value)?;
        let mut txn = self.db.begin_write().map_err(write_err)?;
        txn.set_durability(d).map_err(write_err)?;
        {
            let mut table = txn.open_table(META).map_err(write_err)?;
            table.insert(key, bytes.as_slice()).map_err(write_err)?;
        }
        txn.commit().map_err(write_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let mut out = Vec::new();
        for item in table.range(range).map_err(read_err)? {
            let (_, v) = item.map_err(read_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId<u64>> = self.get_meta("last_purged")?;
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let last = match table.last().map_err(read_err)? {
            Some((_, v)) => Some(decode::<Entry>(v.value())?.log_id),
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.put_meta("vote", vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get_meta("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        // Not durable on its own (no fsync): the committed index only shortens replay after a
        // restart, and the next durable append or vote commit makes it durable anyway.
        self.put_meta_with("committed", &committed, redb::Durability::None)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        Ok(self.get_meta::<Option<LogId<u64>>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // One write transaction, one fsync, for the whole batch (group commit).
        let started = std::time::Instant::now();
        let mut count = 0u64;
        let txn = self.db.begin_write().map_err(write_err)?;
        {
            let mut table = txn.open_table(LOGS).map_err(write_err)?;
            for entry in entries {
                count += 1;
                let bytes = encode(&entry)?;
                table.insert(entry.log_id.index, bytes.as_slice()).map_err(write_err)?;
            }
        }
        let result = txn.commit();
        metrics::histogram!(names::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::histogram!(names::APPEND_ENTRIES).record(count as f64);
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                callback.log_io_completed(Err(std::io::Error::other(msg)));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(write_err)?;
        {
            let mut table = txn.open_table(LOGS).map_err(write_err)?;
            table.retain_in(log_id.index.., |_, _| false).map_err(write_err)?;
        }
        txn.commit().map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let bytes = encode(&log_id)?;
        let txn = self.db.begin_write().map_err(write_err)?;
        {
            let mut meta = txn.open_table(META).map_err(write_err)?;
            meta.insert("last_purged", bytes.as_slice()).map_err(write_err)?;
            let mut table = txn.open_table(LOGS).map_err(write_err)?;
            table.retain_in(..=log_id.index, |_, _| false).map_err(write_err)?;
        }
        txn.commit().map_err(write_err)
    }
}
