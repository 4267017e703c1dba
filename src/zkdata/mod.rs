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
