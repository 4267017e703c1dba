//! Re-syncing a member whose tree diverged from its leader's (the Raft half; the digest
//! comparison that finds it is `dispatch::digests`). ZooKeeper 3.6+ compares each follower's
//! tree digest with the one its leader logged for the same zxid (`zookeeper.digest.enabled`)
//! and only logs a mismatch; here the member also stops serving clients and takes the
//! leader's snapshot.
//!
//! While diverged, the member refuses the leader's AppendEntries, so its committed index
//! stays where it was; the leader snapshots past that index (after an empty entry if it is
//! idle) and sends the file over the peer port; the member hands it to openraft's own
//! `install_full_snapshot` (which takes a snapshot only above its committed index: hence the
//! refusal), the state machine installs it as any snapshot from the leader (watches fire for
//! the difference), and the member serves again.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::Raft;
use super::Snapshot;
use super::SnapshotMeta;
use super::TxnBatch;
use super::Vote;

/// Largest snapshot sent in one peer frame for a re-sync (the frame limit is 256 MiB).
const LARGEST: u64 = 200 << 20;

/// This member's replica check: whether its tree diverged, and how often it did.
#[derive(Debug, Default)]
pub struct ReplicaCheck {
    diverged: AtomicBool,
    mismatches: AtomicU64,
}

impl Raft {
    /// Whether this member's tree was found to differ from its leader's and is not re-synced
    /// yet: it serves no clients and takes no entries meanwhile.
    pub fn diverged(&self) -> bool {
        self.replica.diverged.load(Ordering::Acquire)
    }

    /// Marks the tree as diverged (counting it) or re-synced.
    pub fn set_diverged(&self, diverged: bool) {
        if diverged {
            self.replica.mismatches.fetch_add(1, Ordering::Relaxed);
        }
        self.replica.diverged.store(diverged, Ordering::Release);
    }

    /// Digest mismatches found on this member since it started (`digest_mismatches_count`).
    pub fn digest_mismatches(&self) -> u64 {
        self.replica.mismatches.load(Ordering::Relaxed)
    }

    /// On the leader: its vote and a snapshot whose last log index is above `index`, taking
    /// one (after an empty entry, if nothing was applied past `index`) if the newest is not.
    pub async fn snapshot_above(
        &self,
        index: u64,
        patience: Duration,
    ) -> Result<(Vote, SnapshotMeta, Vec<u8>), String> {
        if !self.is_leader() {
            return Err("not the leader".into());
        }
        let deadline = tokio::time::Instant::now() + patience;
        if self.status().snapshot_index <= index {
            if self.status().applied_index <= index {
                self.propose(TxnBatch::new(Vec::new())).await.map_err(|e| e.to_string())?;
            }
            self.inner.trigger().snapshot().await.map_err(|e| e.to_string())?;
            while self.status().snapshot_index <= index {
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("no snapshot above index {index} in time"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let vote = self.inner.metrics().borrow_watched().vote;
        let dir = self.options.snapshot_dir.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let (meta, mut file) = super::snapshot::open_newest(&dir)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no snapshot file".to_owned())?;
            let len = file.metadata().map_err(|e| e.to_string())?.len();
            if len > LARGEST {
                return Err(format!("the snapshot is {len} bytes, more than a re-sync sends ({LARGEST})"));
            }
            let mut bytes = Vec::with_capacity(len as usize);
            file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
            Ok((vote, meta, bytes))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// On a diverged follower: installs the leader's snapshot through openraft, as one
    /// received from the leader is.
    pub async fn install_from_leader(&self, vote: Vote, meta: SnapshotMeta, bytes: Vec<u8>) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        let mut file = super::snapshot::begin_receiving(&self.options.snapshot_dir).map_err(|e| e.to_string())?;
        file.write_all(&bytes).await.map_err(|e| e.to_string())?;
        file.flush().await.map_err(|e| e.to_string())?;
        let index = meta.last_log_id.map_or(0, |l| l.index);
        self.inner.install_full_snapshot(vote, Snapshot { meta, snapshot: file }).await.map_err(|e| e.to_string())?;
        // openraft passes over a snapshot at or below the committed index without an error.
        if self.status().applied_index < index {
            return Err(format!("the snapshot at index {index} was not installed"));
        }
        Ok(())
    }
}
