//! Exporting a Warden tree as an Apache ZooKeeper snapshot: `snapshot.<last zxid hex>`, plain
//! (uncompressed) as ZooKeeper 3.8 writes by default, with the sessions table (their
//! passwords are ZooKeeper's, derived from the id, so clients keep their sessions after the
//! move back) and ZooKeeper's digest, which ZooKeeper checks when it loads the file.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use serde::Serialize;

use super::digest;
use super::snapshot::SnapshotDigest;
use super::snapshot::SnapshotWriter;
use super::FileError;
use crate::tree::acl::AclEntry;
use crate::tree::DataTree;

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub path: PathBuf,
    pub zxid: i64,
    pub znodes: usize,
    pub sessions: usize,
    pub digest: i64,
    pub bytes: u64,
}

/// The file name ZooKeeper gives a snapshot of state `zxid` (`Util.makeSnapshotName`).
pub fn snapshot_name(zxid: i64) -> String {
    format!("snapshot.{zxid:x}")
}

/// Writes `tree` as a ZooKeeper snapshot. `out` is a directory (the file gets ZooKeeper's
/// name for it there) or the path of the file to write. The file is written whole or not at
/// all (a temporary file, fsynced, renamed into place); an existing file is not replaced.
pub fn export(tree: &DataTree, out: &Path) -> Result<ExportReport, FileError> {
    let zxid = tree.last_zxid();
    let path = if out.is_dir() { out.join(snapshot_name(zxid)) } else { out.to_owned() };
    if path.exists() {
        return Err(FileError::format(&path, "already exists; not replacing it"));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("snapshot")));

    // The ACL cache: one key per distinct list, numbered from 1 as ZooKeeper's
    // `ReferenceCountedACLCache.convertAcls` numbers them.
    let mut keys: HashMap<&[AclEntry], i64> = HashMap::new();
    let mut acls = Vec::new();
    for (_, node) in tree.iter_nodes() {
        let list: &[AclEntry] = node.acl.as_slice();
        if !keys.contains_key(list) {
            let key = keys.len() as i64 + 1;
            keys.insert(list, key);
            acls.push((key, list.iter().map(jute::Acl::from).collect::<Vec<_>>()));
        }
    }
    let mut sessions: Vec<(i64, i32)> = tree.sessions().map(|(id, s)| (*id, s.timeout_ms)).collect();
    sessions.sort();

    let write = || -> std::io::Result<u64> {
        let file = std::fs::File::create(&tmp)?;
        let mut w = SnapshotWriter::start(std::io::BufWriter::with_capacity(1 << 20, file), 0, &sessions, &acls)?;
        for (path, node) in tree.iter_nodes() {
            let key = keys.get(node.acl.as_slice()).copied().unwrap_or(-1);
            // ZooKeeper's root is "" in a snapshot.
            let name = if path == "/" { "" } else { path };
            w.node(name, node.data(), key, &node.stat.persisted())?;
        }
        let digest = SnapshotDigest { zxid, version: digest::VERSION, digest: digest::tree(tree) };
        let mut buf = w.finish(digest)?;
        buf.flush()?;
        let file = buf.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(len)
    };
    let bytes = write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        FileError::io(&path, e)
    })?;
    Ok(ExportReport {
        path,
        zxid,
        znodes: tree.node_count(),
        sessions: sessions.len(),
        digest: digest::tree(tree),
        bytes,
    })
}
