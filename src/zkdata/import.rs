//! Importing an Apache ZooKeeper data dir: the newest valid snapshot, then the txn logs after
//! it, as `FileTxnSnapLog.restore` loads them when ZooKeeper restarts, into a Warden tree.
//!
//! Differences from ZooKeeper, each on the side of refusing rather than guessing: a gap in
//! the zxids between the snapshot and the logs (a log file missing after an older snapshot
//! had to be used) is an error where ZooKeeper would load what it found, and a data dir with
//! logs but no snapshot is imported only when the logs start at the very first zxid.
//! ZooKeeper's files are only read, never changed.

use std::path::Path;
use std::path::PathBuf;

use serde::Serialize;

use super::digest;
use super::replay;
use super::replay::Acls;
use super::replay::ReplayStats;
use super::snapshot::zxid_from_name;
use super::snapshot::SnapshotReader;
use super::snapshot::OPEN_ACL_KEY;
use super::txnlog::LogEnd;
use super::txnlog::TxnLogReader;
use super::FileError;
use crate::tree::acl::AclEntry;
use crate::tree::DataTree;
use crate::tree::NodeStat;
use crate::tree::SharedAcl;

/// ZooKeeper tries this many snapshots, newest first (`FileSnap.deserialize`).
const SNAPSHOTS_TRIED: usize = 100;

/// Why a data dir could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    File(#[from] FileError),
    #[error("listing {path}: {source}")]
    List { path: PathBuf, source: std::io::Error },
    #[error("no valid ZooKeeper snapshot in {dir}: {reasons}")]
    NoValidSnapshot { dir: PathBuf, reasons: String },
    #[error(
        "{dir} holds txn logs but no snapshot, and its first log {first} does not start at the first zxid: \
         the history before it is missing"
    )]
    NoSnapshot { dir: PathBuf, first: PathBuf },
    #[error(
        "the txn logs do not continue snapshot {snapshot}: after zxid {after:#x} the next txn found is {next:#x} \
         in {file} (a log file is missing)"
    )]
    Gap { snapshot: String, after: i64, next: i64, file: PathBuf },
}

/// ZooKeeper's files in a data dir: snapshots newest first, logs oldest first.
#[derive(Debug, Default, Clone)]
pub struct ZkFiles {
    pub snapshots: Vec<(i64, PathBuf)>,
    pub logs: Vec<(i64, PathBuf)>,
}

impl ZkFiles {
    /// The `snapshot.*` files in `snap_dir` and `log.*` files in `log_dir` (each a
    /// `version-2` directory); missing directories hold none.
    pub fn find(snap_dir: &Path, log_dir: &Path) -> Result<ZkFiles, ImportError> {
        let list = |dir: &Path, prefix: &str| -> Result<Vec<(i64, PathBuf)>, ImportError> {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(source) => return Err(ImportError::List { path: dir.to_owned(), source }),
            };
            let mut out = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| ImportError::List { path: dir.to_owned(), source })?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if let Some(zxid) = zxid_from_name(name, prefix) {
                    out.push((zxid, entry.path()));
                }
            }
            out.sort();
            Ok(out)
        };
        let mut snapshots = list(snap_dir, "snapshot")?;
        snapshots.reverse();
        Ok(ZkFiles { snapshots, logs: list(log_dir, "log")? })
    }

    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty() && self.logs.is_empty()
    }

    /// The logs that can hold txns after `zxid` (`FileTxnLog.getLogFiles`): the last one
    /// starting at or before it, and every later one.
    fn logs_after(&self, zxid: i64) -> &[(i64, PathBuf)] {
        let first = self.logs.iter().rposition(|(start, _)| *start <= zxid).unwrap_or(0);
        &self.logs[first..]
    }
}

/// How the imported digest compared with the one ZooKeeper recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DigestCheck {
    pub zxid: i64,
    pub recorded: i64,
    pub computed: i64,
}

impl DigestCheck {
    pub fn matches(&self) -> bool {
        self.recorded == self.computed
    }
}

/// What an import read and built.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    pub snapshot: Option<PathBuf>,
    pub snapshot_zxid: i64,
    /// Newer snapshots passed over, each with why.
    pub invalid_snapshots: Vec<(PathBuf, String)>,
    pub logs: Vec<PathBuf>,
    /// Log files whose last entry was cut short (the server died writing it), and where.
    pub torn_logs: Vec<(PathBuf, u64)>,
    pub replay: ReplayStats,
    pub last_zxid: i64,
    pub znodes: usize,
    pub sessions: usize,
    pub ephemerals: usize,
    pub orphan_ephemerals: Vec<String>,
    pub digest: Option<DigestCheck>,
    pub millis: u64,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "zxid {:#x}: {} znodes, {} sessions ({} ephemerals) from {} and {} txns in {} log file(s), in {} ms",
            self.last_zxid,
            self.znodes,
            self.sessions,
            self.ephemerals,
            self.snapshot.as_ref().map_or("no snapshot".to_owned(), |p| p.display().to_string()),
            self.replay.txns,
            self.logs.len(),
            self.millis
        )
    }
}

/// An imported tree.
pub struct Imported {
    pub tree: DataTree,
    pub report: ImportReport,
}

/// Loads one snapshot file into a fresh tree; returns the tree and the digest it recorded.
fn load_snapshot(path: &Path, acls: &mut Acls) -> Result<(DataTree, Option<(i64, i64)>), FileError> {
    let mut reader = SnapshotReader::open(path)?;
    let mut tree = DataTree::import_start();
    for (id, timeout) in reader.sessions.drain(..) {
        tree.import_session(id, timeout, replay::password(id));
    }
    let mut by_key: std::collections::HashMap<i64, SharedAcl> =
        reader.acls.drain(..).map(|(key, acl)| (key, acls.get(&acl))).collect();
    by_key.insert(OPEN_ACL_KEY, acls.intern(AclEntry::open()));
    while let Some(node) = reader.next_node()? {
        let acl = by_key.get(&node.acl).cloned().ok_or_else(|| {
            FileError::format(
                path,
                format!("node {:?} refers to ACL {} that the file does not hold", node.path, node.acl),
            )
        })?;
        tree.import_node(&node.path, node.data.as_deref(), acl, NodeStat::from_persisted(&node.stat, 0))
            .map_err(|e| FileError::format(path, e))?;
    }
    let trailer = reader.finish()?;
    Ok((tree, trailer.digest.filter(|d| d.version == digest::VERSION && d.zxid > 0).map(|d| (d.zxid, d.digest))))
}

/// Whether `next` may follow `last` in ZooKeeper's zxid order: the next counter in the same
/// epoch, or the first of a later epoch (a new leader starts its epoch at counter 1).
fn continues(last: i64, next: i64) -> bool {
    next == last + 1 || ((next >> 32) > (last >> 32) && next & 0xffff_ffff == 1)
}

/// Imports the ZooKeeper data dir whose `version-2` directories are `snap_dir` and `log_dir`.
/// `None` if they hold no ZooKeeper file.
pub fn import(snap_dir: &Path, log_dir: &Path) -> Result<Option<Imported>, ImportError> {
    let started = std::time::Instant::now();
    let files = ZkFiles::find(snap_dir, log_dir)?;
    if files.is_empty() {
        return Ok(None);
    }
    let mut report = ImportReport::default();
    let mut acls = Acls::default();

    // The newest snapshot that reads whole, checksums included.
    let mut loaded = None;
    for (zxid, path) in files.snapshots.iter().take(SNAPSHOTS_TRIED) {
        match load_snapshot(path, &mut acls) {
            Ok((tree, digest)) => {
                loaded = Some((*zxid, path.clone(), tree, digest));
                break;
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "ZooKeeper snapshot not usable; trying an older one");
                report.invalid_snapshots.push((path.clone(), e.to_string()));
            }
        }
    }
    let (snap_zxid, mut tree, mut recorded) = match loaded {
        Some((zxid, path, tree, digest)) => {
            report.snapshot = Some(path);
            (zxid, tree, digest)
        }
        None if !files.snapshots.is_empty() => {
            let reasons = report
                .invalid_snapshots
                .iter()
                .map(|(p, e)| format!("{}: {e}", p.display()))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ImportError::NoValidSnapshot { dir: snap_dir.to_owned(), reasons });
        }
        // Logs alone: a fresh ZooKeeper's empty tree, then every txn.
        None => (0, DataTree::new(), None),
    };
    report.snapshot_zxid = snap_zxid;

    let mut last = snap_zxid;
    let mut stats = ReplayStats::default();
    for (_, path) in files.logs_after(snap_zxid) {
        let mut log = TxnLogReader::open(path)?;
        let mut used = false;
        while let Some(entry) = log.next()? {
            let zxid = entry.header.zxid;
            if zxid <= last {
                continue;
            }
            if !continues(last, zxid) {
                if last == 0 && report.snapshot.is_none() {
                    return Err(ImportError::NoSnapshot { dir: snap_dir.to_owned(), first: path.clone() });
                }
                return Err(ImportError::Gap {
                    snapshot: report.snapshot.as_ref().map_or("(none)".into(), |p| p.display().to_string()),
                    after: last,
                    next: zxid,
                    file: path.clone(),
                });
            }
            replay::apply(&mut tree, &mut acls, &entry.header, &entry.txn, &mut stats);
            if let Some(d) = entry.digest.filter(|d| d.version == digest::VERSION) {
                recorded = Some((zxid, d.tree_digest));
            }
            last = zxid;
            used = true;
        }
        if let Some(LogEnd::Torn { offset }) = log.end() {
            tracing::warn!(file = %path.display(), offset, "ZooKeeper txn log ends in a cut-short entry (the server \
                died writing it); importing the entries before it, as ZooKeeper does");
            report.torn_logs.push((path.clone(), offset));
        }
        if used {
            report.logs.push(path.clone());
        }
    }
    report.replay = stats;

    let fixups =
        tree.import_finish(last).map_err(|e| FileError::format(report.snapshot.as_deref().unwrap_or(snap_dir), e))?;
    if !fixups.orphan_ephemerals.is_empty() {
        tracing::info!(
            count = fixups.orphan_ephemerals.len(),
            "deleted ephemerals of sessions that had ended, as \
            ZooKeeper does at start"
        );
    }
    report.orphan_ephemerals = fixups.orphan_ephemerals;
    // ZooKeeper compares digests only where the recorded one belongs to the final state.
    if let Some((zxid, value)) = recorded.filter(|(zxid, _)| *zxid == last) {
        let check = DigestCheck { zxid, recorded: value, computed: digest::tree(&tree) };
        if !check.matches() {
            tracing::warn!(
                zxid = format_args!("{zxid:#x}"),
                recorded = value,
                computed = check.computed,
                "the imported tree's ZooKeeper digest differs from the one ZooKeeper recorded"
            );
        }
        report.digest = Some(check);
    }
    report.last_zxid = last;
    report.znodes = tree.node_count();
    report.sessions = tree.sessions().count();
    report.ephemerals = tree.ephemeral_count();
    report.millis = started.elapsed().as_millis() as u64;
    drop(acls);
    Ok(Some(Imported { tree, report }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zxid_continuity() {
        assert!(continues(0x1_0000_0005, 0x1_0000_0006));
        assert!(continues(0x1_0000_0005, 0x3_0000_0001));
        assert!(!continues(0x1_0000_0005, 0x1_0000_0007));
        assert!(!continues(0x1_0000_0005, 0x2_0000_0002));
        assert!(continues(0, 1));
        assert!(continues(0, 0x1_0000_0001));
    }
}
