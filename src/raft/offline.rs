//! Warden's own data dir read without running a server, for `warden export` and
//! `warden dump`: the state its newest snapshot and the log after it hold, a snapshot file's
//! contents, a log's entries.
//!
//! The state is the snapshot plus every entry in the log after it, committed or not as far
//! as this member knows (the committed index on disk lags by up to a second): what a
//! standalone server replays at start, and for an ensemble member the most it may hold
//! (see `docs/migration.md` on exporting from an ensemble). The log is opened through
//! [`LogStore`], whose redb file refuses a second opener: a running server's data dir is
//! refused, never read half-written.

use std::path::Path;
use std::path::PathBuf;

use openraft::storage::RaftLogStorage;
use openraft::EntryPayload;
use openraft::RaftLogReader;

use super::layout::DataLayout;
use super::log_store::LogStore;
use super::snapshot;
use super::LogId;
use crate::tree::txn::Txn;
use crate::tree::DataTree;

/// The state a data dir holds.
pub struct Loaded {
    pub tree: DataTree,
    /// The snapshot it started from, and that snapshot's last log id.
    pub snapshot: Option<(PathBuf, Option<LogId>)>,
    /// Log entries applied after the snapshot, and the last one's id.
    pub entries: u64,
    pub last_log: Option<LogId>,
}

/// A log id as text: `term-node-index`.
pub fn log_id_text(id: &Option<LogId>) -> String {
    id.map_or("none".into(), |l| format!("{}-{}-{}", l.leader_id.term, l.leader_id.node_id, l.index))
}

/// A Warden snapshot file: its last log id, its membership (as text) and its tree.
pub fn read_snapshot(path: &Path) -> Result<(Option<LogId>, String, DataTree), String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f = snapshot::decode_snapshot(&mut file).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((f.last_applied, format!("{}", f.membership.membership()), f.tree))
}

fn open_log(path: &Path) -> Result<LogStore, String> {
    if !path.exists() {
        return Err(format!("{}: no Warden log here", path.display()));
    }
    LogStore::open(path).map_err(|e| {
        let text = e.to_string();
        if text.contains("already open") || text.contains("lock") {
            format!("{text} (is a server running on this data dir? stop it first)")
        } else {
            text
        }
    })
}

/// Every entry of the log whose redb file is `path`, oldest first, as (log id, what it holds:
/// `None` for a blank or membership entry, with its description).
pub async fn log_entries(path: &Path) -> Result<Vec<(LogId, Result<Vec<Txn>, String>)>, String> {
    let mut log = open_log(path)?;
    let state = log.get_log_state().await.map_err(|e| e.to_string())?;
    let first = state.last_purged_log_id.map_or(0, |l| l.index + 1);
    let Some(last) = state.last_log_id else { return Ok(Vec::new()) };
    let entries = log.try_get_log_entries(first..=last.index).await.map_err(|e| e.to_string())?;
    Ok(entries
        .into_iter()
        .map(|e| {
            let what = match e.payload {
                EntryPayload::Blank => Err("blank".to_owned()),
                EntryPayload::Membership(m) => Err(format!("membership {m}")),
                EntryPayload::Normal(batch) => Ok(batch.txns.to_vec()),
            };
            (e.log_id, what)
        })
        .collect())
}

/// The state the data dir at `layout` holds.
pub async fn load(layout: &DataLayout) -> Result<Loaded, String> {
    let mut loaded = Loaded { tree: DataTree::new(), snapshot: None, entries: 0, last_log: None };
    let mut applied: Option<LogId> = None;
    let newest = match snapshot::newest_snapshot(&layout.snap_dir) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", layout.snap_dir.display())),
    };
    if let Some(path) = newest {
        let (last, _, tree) = read_snapshot(&path)?;
        loaded.tree = tree;
        loaded.snapshot = Some((path, last));
        applied = last;
    }
    if layout.log_file().exists() {
        let mut log = open_log(&layout.log_file())?;
        let state = log.get_log_state().await.map_err(|e| e.to_string())?;
        let from = applied.map_or(0, |l| l.index + 1);
        if let Some(last) = state.last_log_id.filter(|l| l.index >= from) {
            let entries = log.try_get_log_entries(from..=last.index).await.map_err(|e| e.to_string())?;
            if entries.first().is_some_and(|e| e.log_id.index != from) {
                return Err(format!(
                    "the log does not continue the snapshot: it has index {} next, the snapshot ends at {}",
                    entries[0].log_id.index,
                    from.saturating_sub(1)
                ));
            }
            for e in entries {
                if let EntryPayload::Normal(batch) = &e.payload {
                    for txn in batch.txns.iter() {
                        let zxid = super::next_zxid(&loaded.tree, txn);
                        let _ = loaded.tree.apply(zxid, txn);
                    }
                }
                loaded.entries += 1;
                loaded.last_log = Some(e.log_id);
            }
        }
    }
    if loaded.snapshot.is_none() && loaded.last_log.is_none() {
        return Err(format!("{} holds no Warden state", layout.snap_dir.display()));
    }
    Ok(loaded)
}
