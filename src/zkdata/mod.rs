//! Apache ZooKeeper's own data dir, read and written: its snapshot and txn log formats
//! ([`snapshot`], [`txnlog`], over [`stream`]), replaying its log as its restart does
//! ([`replay`]), importing a data dir into a Warden tree ([`import`]), exporting a tree as a
//! snapshot ZooKeeper loads ([`export`]), printing any of these files ([`dump`]), and the
//! two things ZooKeeper computes that must match bit for bit: session passwords
//! ([`password`]) and its tree digest ([`digest`]).
//!
//! This module reads ZooKeeper's files and never modifies or deletes them. It knows the tree
//! (through `tree`'s import API) and jute's txn records; it knows nothing of Raft, the
//! network or Warden's own files, which the caller hands it as a loaded tree.

pub mod digest;
pub mod dump;
pub mod export;
pub mod import;
pub mod password;
pub mod replay;
pub mod snapshot;
pub mod stream;
pub mod txnlog;

use std::path::Path;
use std::path::PathBuf;

/// A ZooKeeper file that could not be read, with the file's path in every message.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },
}

impl FileError {
    pub fn io(path: &Path, source: std::io::Error) -> FileError {
        FileError::Io { path: path.to_owned(), source }
    }

    pub fn format(path: &Path, reason: impl Into<String>) -> FileError {
        FileError::Format { path: path.to_owned(), reason: reason.into() }
    }

    pub fn stream(path: &Path, e: stream::StreamError) -> FileError {
        match e {
            stream::StreamError::Io(source) => FileError::io(path, source),
            other => FileError::format(path, other.to_string()),
        }
    }
}

/// Entry points for fuzzing and property tests: each reads arbitrary bytes the way an import
/// does (a snapshot into a tree, a log replayed onto a tree) and must return, never panic.
#[doc(hidden)]
pub mod fuzzing {
    use std::path::Path;

    use super::replay;
    use super::snapshot::SnapshotReader;
    use super::txnlog::TxnLogReader;
    use crate::tree::DataTree;
    use crate::tree::NodeStat;

    /// Reads `bytes` as an uncompressed snapshot into a tree; the number of nodes read.
    pub fn snapshot(bytes: &[u8]) -> Result<usize, String> {
        let name = Path::new("fuzz-snapshot");
        let mut r =
            SnapshotReader::new(name, Box::new(std::io::Cursor::new(bytes.to_vec()))).map_err(|e| e.to_string())?;
        let mut acls = replay::Acls::default();
        let by_key: std::collections::HashMap<i64, _> = r.acls.drain(..).map(|(k, a)| (k, acls.get(&a))).collect();
        let mut tree = DataTree::import_start();
        let mut n = 0;
        while let Some(node) = r.next_node().map_err(|e| e.to_string())? {
            let acl = by_key.get(&node.acl).cloned().unwrap_or_default();
            tree.import_node(&node.path, node.data.as_deref(), acl, NodeStat::from_persisted(&node.stat, 0))?;
            n += 1;
        }
        r.finish().map_err(|e| e.to_string())?;
        tree.import_finish(0)?;
        Ok(n)
    }

    /// Reads `bytes` as a txn log and replays it onto a fresh tree; the number of txns.
    pub fn log(bytes: &[u8]) -> Result<u64, String> {
        let name = Path::new("fuzz-log");
        let mut r =
            TxnLogReader::new(name, Box::new(std::io::Cursor::new(bytes.to_vec()))).map_err(|e| e.to_string())?;
        let mut tree = DataTree::new();
        let mut acls = replay::Acls::default();
        let mut stats = replay::ReplayStats::default();
        while let Some(e) = r.next().map_err(|e| e.to_string())? {
            replay::apply(&mut tree, &mut acls, &e.header, &e.txn, &mut stats);
        }
        let last = tree.last_zxid();
        tree.import_finish(last)?;
        Ok(stats.txns)
    }
}

#[cfg(test)]
mod tests;
