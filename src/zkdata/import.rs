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
use std::sync::Arc;

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

/// A snapshot node whose ACL key the snapshot's ACL table does not hold.
struct DanglingAcl {
    path: String,
    key: i64,
}

/// One loaded snapshot: the tree, the digest it recorded, and its dangling ACL references.
struct LoadedSnapshot {
    tree: DataTree,
    digest: Option<(i64, i64)>,
    dangling: Vec<DanglingAcl>,
}

/// Loads one snapshot file into a fresh tree. ZooKeeper writes a snapshot while txns go on
/// (a fuzzy snapshot) and its ACL table before its nodes, so a node created or given a new
/// ACL list meanwhile can name an ACL key the table does not hold; ZooKeeper loads such a
/// node and the txn replayed after the snapshot gives it its ACL. Such nodes hold
/// `placeholder` until then and are listed, for [`check_dangling`] after the replay.
fn load_snapshot(path: &Path, acls: &mut Acls, placeholder: &SharedAcl) -> Result<LoadedSnapshot, FileError> {
    load_snapshot_from(SnapshotReader::open(path)?, path, acls, placeholder)
}

/// [`load_snapshot`] from an open reader.
fn load_snapshot_from(
    mut reader: SnapshotReader,
    path: &Path,
    acls: &mut Acls,
    placeholder: &SharedAcl,
) -> Result<LoadedSnapshot, FileError> {
    let mut tree = DataTree::import_start();
    for (id, timeout) in reader.sessions.drain(..) {
        tree.import_session(id, timeout, replay::password(id));
    }
    let mut by_key: std::collections::HashMap<i64, SharedAcl> =
        reader.acls.drain(..).map(|(key, acl)| (key, acls.get(&acl))).collect();
    by_key.insert(OPEN_ACL_KEY, acls.intern(AclEntry::open()));
    let mut dangling = Vec::new();
    while let Some(node) = reader.next_node()? {
        let acl = match by_key.get(&node.acl) {
            Some(acl) => acl.clone(),
            None => {
                dangling.push(DanglingAcl { path: node.path.clone(), key: node.acl });
                placeholder.clone()
            }
        };
        tree.import_node(&node.path, node.data.as_deref(), acl, NodeStat::from_persisted(&node.stat, 0))
            .map_err(|e| FileError::format(path, e))?;
    }
    let trailer = reader.finish()?;
    let digest = trailer.digest.filter(|d| d.version == digest::VERSION && d.zxid > 0).map(|d| (d.zxid, d.digest));
    Ok(LoadedSnapshot { tree, digest, dangling })
}

/// The tree of one ZooKeeper snapshot file's bytes (plain, as ZooKeeper writes and streams
/// one), whole and checked: checksums and ACL references (ZooKeeper's digest, if the file
/// has one, is compared and a difference logged). Its last zxid is the one the file records (3.9's last processed zxid, else
/// its digest's), else the highest a node holds. For the admin `restore`; `name` names the
/// bytes in errors.
pub fn snapshot_tree(bytes: &[u8], name: &Path) -> Result<DataTree, FileError> {
    let mut acls = Acls::default();
    let placeholder: SharedAcl = Arc::new(Vec::new());
    let input: Box<dyn std::io::Read> = Box::new(std::io::Cursor::new(bytes.to_vec()));
    let loaded = load_snapshot_from(SnapshotReader::new(name, input)?, name, &mut acls, &placeholder)?;
    check_dangling(&loaded.tree, name, &loaded.dangling, &placeholder)?;
    let mut tree = loaded.tree;
    let highest = tree.iter_nodes().map(|(_, n)| n.stat.mzxid.max(n.stat.czxid).max(n.stat.pzxid)).max().unwrap_or(0);
    let last = loaded.digest.map_or(highest, |(zxid, _)| zxid.max(highest));
    tree.import_finish(last).map_err(|e| FileError::format(name, e))?;
    if let Some((zxid, recorded)) = loaded.digest.filter(|(zxid, _)| *zxid == last) {
        let computed = digest::tree(&tree);
        // A snapshot ZooKeeper took while serving is fuzzy: its digest may belong to a state
        // the nodes moved past, so a difference is told, not refused (the checksums are).
        if computed != recorded {
            tracing::warn!(
                zxid = format_args!("{zxid:#x}"),
                recorded,
                computed,
                "the restored snapshot's ZooKeeper digest differs"
            );
        }
    }
    Ok(tree)
}

/// After the replay, a node that still holds the placeholder had no ACL in the snapshot and
/// none from a txn after it: the files are damaged (ZooKeeper would fail serving that node).
fn check_dangling(
    tree: &DataTree,
    snapshot: &Path,
    dangling: &[DanglingAcl],
    placeholder: &SharedAcl,
) -> Result<(), FileError> {
    for d in dangling {
        if tree.import_acl_of(&d.path).is_some_and(|acl| Arc::ptr_eq(&acl, placeholder)) {
            return Err(FileError::format(
                snapshot,
                format!(
                    "node {:?} refers to ACL {} that neither the snapshot nor a txn logged after it holds",
                    d.path, d.key
                ),
            ));
        }
    }
    Ok(())
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
    // Never interned: a node holds this very allocation only while its ACL is unknown.
    let placeholder: SharedAcl = Arc::new(Vec::new());

    // The newest snapshot that reads whole, checksums included.
    let mut loaded = None;
    for (zxid, path) in files.snapshots.iter().take(SNAPSHOTS_TRIED) {
        match load_snapshot(path, &mut acls, &placeholder) {
            Ok(snap) => {
                loaded = Some((*zxid, path.clone(), snap));
                break;
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "ZooKeeper snapshot not usable; trying an older one");
                report.invalid_snapshots.push((path.clone(), e.to_string()));
            }
        }
    }
    let (snap_zxid, mut tree, mut recorded, dangling) = match loaded {
        Some((zxid, path, snap)) => {
            report.snapshot = Some(path);
            (zxid, snap.tree, snap.digest, snap.dangling)
        }
        None if !files.snapshots.is_empty() => {
            let reasons = report
                .invalid_snapshots
                .iter()
                .map(|(_, e)| e.as_str()) // each names its file
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ImportError::NoValidSnapshot { dir: snap_dir.to_owned(), reasons });
        }
        // Logs alone: a fresh ZooKeeper's empty tree, then every txn.
        None => (0, DataTree::new(), None, Vec::new()),
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
    if let Some(snapshot) = &report.snapshot {
        check_dangling(&tree, snapshot, &dangling, &placeholder)?;
    }

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

    /// A fuzzy snapshot: `/a` names ACL key 3, which the snapshot's ACL table (written before
    /// `/a` was created) does not hold. `log` holds `/a`'s create with that ACL, or not.
    fn fuzzy_acl_dir(with_create: bool) -> tempfile::TempDir {
        use jute::txn::{CreateTxn, TxnHeader};
        use jute::{Acl, Id, OpCode, Record, StatPersisted};
        let dir = tempfile::tempdir().unwrap();
        let read_only = vec![Acl { perms: 1, id: Id { scheme: "world".into(), id: Some("anyone".into()) } }];
        let mut w = super::super::snapshot::SnapshotWriter::start(Vec::new(), 0, &[], &[]).unwrap();
        w.node("", None, OPEN_ACL_KEY, &StatPersisted { pzxid: 6, cversion: 1, ..Default::default() }).unwrap();
        let a = StatPersisted { czxid: 6, mzxid: 6, pzxid: 6, ..Default::default() };
        w.node("/a", Some(b"x"), 3, &a).unwrap();
        let bytes = w
            .finish(super::super::snapshot::SnapshotDigest {
                zxid: 5,
                version: super::super::digest::VERSION,
                digest: 0,
            })
            .unwrap();
        std::fs::write(dir.path().join("snapshot.5"), bytes).unwrap();
        let create = CreateTxn {
            path: "/a".into(),
            data: Some(b"x".to_vec().into()),
            acl: read_only,
            ephemeral: false,
            parent_c_version: 1,
        };
        let mut entries = vec![(
            TxnHeader { client_id: 1, cxid: 1, zxid: 6, time: 0, txn_type: OpCode::Create.code() },
            create.to_bytes().to_vec(),
        )];
        if !with_create {
            entries.clear();
        }
        std::fs::write(dir.path().join("log.6"), super::super::txnlog::tests::log_bytes(&entries)).unwrap();
        dir
    }

    #[test]
    fn fuzzy_snapshot_acl_comes_from_the_replayed_create() {
        let dir = fuzzy_acl_dir(true);
        let imported = import(dir.path(), dir.path()).unwrap().unwrap();
        let acl = imported.tree.import_acl_of("/a").unwrap();
        assert_eq!(acl.len(), 1);
        assert_eq!(acl[0].perms, 1);
        assert_eq!(imported.report.last_zxid, 6);
    }

    #[test]
    fn dangling_acl_that_no_txn_fills_is_an_error() {
        let dir = fuzzy_acl_dir(false);
        let err = import(dir.path(), dir.path()).err().unwrap().to_string();
        assert!(err.contains("refers to ACL 3 that neither the snapshot nor a txn"), "{err}");
        assert!(err.contains("snapshot.5"), "{err}");
    }
}
