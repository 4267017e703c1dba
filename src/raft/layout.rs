//! Where Warden's files live: every path below `dataDir` and `dataLogDir` is decided here and
//! nowhere else. The layout is ZooKeeper's (`FileTxnSnapLog`): a `version-2` directory in each,
//! so `conf` reports the same directories ZooKeeper does and operators find the files where
//! they look for them.
//!
//! ```text
//! <dataDir>/myid                                  ensemble members only (read by `config`)
//! <dataDir>/version-2/snapshot-<term>-<index>.bin  state machine snapshots (`state_machine`)
//! <dataLogDir>/version-2/raft-log.redb            the Raft log's vote and metadata (`log_store`)
//! <dataLogDir>/version-2/raft-log-<seq>.seg        the Raft log's entries (`segment_log`)
//! <dataDir>/version-2/warden-joining              this member never initialises a group
//!                                                 (`peer::bootstrap`)
//! ```
//!
//! `dataLogDir` defaults to `dataDir`, and then both live in one `version-2`. Servers that
//! wrote the older layout (`<dataLogDir>/raft-log.redb`, `<dataDir>/snapshots/`) have their
//! files moved into place by [`DataLayout::prepare`] before anything opens them. The file
//! formats are not this module's business.

use std::path::Path;
use std::path::PathBuf;

/// The directory ZooKeeper (and Warden) keep their files in, below dataDir and dataLogDir
/// (`FileTxnSnapLog.version` + `VERSION`).
pub const VERSION_DIR: &str = "version-2";

/// The Raft log's file name in [`DataLayout::log_dir`].
const LOG_FILE: &str = "raft-log.redb";

/// The file in [`DataLayout::snap_dir`] recording that this ensemble member joins a group
/// whose first state another member brought (`crate::peer::bootstrap`).
const JOINING_FILE: &str = "warden-joining";

/// Where the files of a server with these `dataDir`/`dataLogDir` live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataLayout {
    /// `<dataDir>/version-2`: snapshots (`conf`'s dataDir).
    pub snap_dir: PathBuf,
    /// `<dataLogDir>/version-2`: the Raft log (`conf`'s dataLogDir).
    pub log_dir: PathBuf,
    data_dir: PathBuf,
    data_log_dir: PathBuf,
}

impl DataLayout {
    /// The layout below `data_dir` and `data_log_dir`.
    pub fn new(data_dir: &Path, data_log_dir: &Path) -> DataLayout {
        DataLayout {
            snap_dir: data_dir.join(VERSION_DIR),
            log_dir: data_log_dir.join(VERSION_DIR),
            data_dir: data_dir.to_owned(),
            data_log_dir: data_log_dir.to_owned(),
        }
    }

    /// The Raft log's redb file; its segment files live beside it.
    pub fn log_file(&self) -> PathBuf {
        self.log_dir.join(LOG_FILE)
    }

    /// The file recording that this member joined a group another member initialised: it
    /// never initialises one itself.
    pub fn joining_file(&self) -> PathBuf {
        self.snap_dir.join(JOINING_FILE)
    }

    /// Creates both directories and moves files of the older layout into them (each move a
    /// rename, never a copy; a file already at its new place is left alone, so a second run
    /// after a crash finishes the job).
    pub fn prepare(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.snap_dir)?;
        std::fs::create_dir_all(&self.log_dir)?;
        let mut moved = Vec::new();
        let old_log = self.data_log_dir.join(LOG_FILE);
        if old_log.is_file() && !self.log_file().exists() {
            std::fs::rename(&old_log, self.log_file())?;
            moved.push(old_log);
        }
        let old_snaps = self.data_dir.join("snapshots");
        if old_snaps.is_dir() {
            for entry in std::fs::read_dir(&old_snaps)? {
                let from = entry?.path();
                let Some(name) = from.file_name() else { continue };
                let to = self.snap_dir.join(name);
                if !to.exists() {
                    std::fs::rename(&from, &to)?;
                    moved.push(from);
                }
            }
            // Only succeeds once the directory is empty; anything left there stays visible.
            let _ = std::fs::remove_dir(&old_snaps);
        }
        if !moved.is_empty() {
            for dir in [&self.snap_dir, &self.log_dir] {
                std::fs::File::open(dir)?.sync_all()?;
            }
            tracing::info!(files = ?moved, snap_dir = %self.snap_dir.display(), log_dir = %self.log_dir.display(),
                "moved data files into the version-2 layout");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dataLogDir = dataDir puts the log and the snapshots in one `<dataDir>/version-2`.
    #[test]
    fn paths_are_zookeepers() {
        let l = DataLayout::new(Path::new("/d"), Path::new("/d"));
        assert_eq!(l.snap_dir, PathBuf::from("/d/version-2"));
        assert_eq!(l.log_dir, l.snap_dir);
        assert_eq!(l.log_file(), PathBuf::from("/d/version-2/raft-log.redb"));
        let l = DataLayout::new(Path::new("/d"), Path::new("/l"));
        assert_eq!(l.log_file(), PathBuf::from("/l/version-2/raft-log.redb"));
    }

    /// A data dir in the older layout is moved into version-2, and preparing again changes
    /// nothing.
    #[test]
    fn prepare_moves_the_older_layout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("raft-log.redb"), b"log").unwrap();
        std::fs::create_dir(dir.path().join("snapshots")).unwrap();
        std::fs::write(dir.path().join("snapshots/snapshot-1-2.bin"), b"snap").unwrap();
        std::fs::write(dir.path().join("myid"), b"1").unwrap();
        let l = DataLayout::new(dir.path(), dir.path());
        l.prepare().unwrap();
        assert_eq!(std::fs::read(l.log_file()).unwrap(), b"log");
        assert_eq!(std::fs::read(l.snap_dir.join("snapshot-1-2.bin")).unwrap(), b"snap");
        assert!(!dir.path().join("raft-log.redb").exists());
        assert!(!dir.path().join("snapshots").exists());
        assert!(dir.path().join("myid").exists(), "myid stays in dataDir");
        l.prepare().unwrap();
        assert_eq!(std::fs::read(l.log_file()).unwrap(), b"log");
    }
}
