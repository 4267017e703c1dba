//! Replica digests (`zookeeper.digest.enabled`, on by default): a follower compares its tree
//! digest with its leader's at the same zxids. Every member records the digest each
//! `DIGEST_LOG_INTERVAL` zxids as it applies (the `hash` history); zxids are the same on
//! every member, so equal trees give equal entries. Once a second, a follower fetches the
//! leader's entries it has not compared yet and compares those it has too.
//!
//! A mismatch is a loud error, `digest_mismatches_count` (ZooKeeper's metric, also in
//! `mntr`), and `diverged` in the admin `digest` command; the member stops serving clients
//! and re-syncs from the leader's snapshot (`crate::raft::resync`), then serves again.
//! ZooKeeper only logs and counts a mismatch; a member that answers reads from a tree known
//! to be wrong is what this prevents.

use std::time::Duration;

use super::Dispatcher;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;

/// How often a follower compares.
const EVERY: Duration = Duration::from_secs(1);
/// How long the leader may take to answer a comparison; a snapshot for a re-sync.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
const SNAPSHOT_WITHIN: Duration = Duration::from_secs(90);

/// What one comparison found.
#[derive(Debug, PartialEq, Eq)]
enum Compared {
    /// Every shared zxid agreed; the highest compared.
    Agree(i64),
    /// At this zxid: this member's digest and the leader's.
    Differ { zxid: i64, mine: u64, leader: u64 },
}

/// Compares the leader's `(zxid, digest)` entries with this member's, oldest first;
/// entries only one side holds are passed over.
fn compare(mine: &[(i64, u64)], leader: &[(i64, u64)], after: i64) -> Compared {
    let mut highest = after;
    for (zxid, theirs) in leader {
        if let Ok(i) = mine.binary_search_by_key(zxid, |(z, _)| *z) {
            if mine[i].1 != *theirs {
                return Compared::Differ { zxid: *zxid, mine: mine[i].1, leader: *theirs };
            }
            highest = highest.max(*zxid);
        }
    }
    Compared::Agree(highest)
}

/// Runs the comparison on this member until `stop` fires.
pub async fn watch(d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut compared = 0i64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
        let raft = &d.0.raft;
        if raft.is_leader() {
            continue;
        }
        if raft.diverged() {
            resync(&d).await;
            compared = d.0.shared.read().last_zxid();
            continue;
        }
        let Some((leader, addr)) = raft.status().leader_addr() else { continue };
        let client = d.0.peers.client(leader, &addr);
        let Ok(PeerResponse::Digests(Ok(theirs))) = client.call(PeerRequest::Digests(compared), ANSWER_WITHIN).await
        else {
            continue;
        };
        let mine: Vec<(i64, u64)> = d.0.shared.read().digest_log().map(|e| (e.zxid, e.digest)).collect();
        match compare(&mine, &theirs, compared) {
            Compared::Agree(highest) => compared = highest,
            Compared::Differ { zxid, mine, leader: theirs } => {
                raft.set_diverged(true);
                tracing::error!(
                    zxid = format_args!("{zxid:#x}"),
                    mine,
                    leader = theirs,
                    "this member's tree differs from the leader's at the same zxid: it stops serving \
                     and re-syncs from the leader's snapshot"
                );
                resync(&d).await;
                compared = d.0.shared.read().last_zxid();
            }
        }
    }
}

/// Takes the leader's snapshot above this member's log (see `crate::raft::resync`).
async fn resync(d: &Dispatcher) {
    let raft = &d.0.raft;
    let Some((leader, addr)) = raft.status().leader_addr() else { return };
    let above = raft.status().last_log_index;
    let client = d.0.peers.client(leader, &addr);
    let answer = client.call(PeerRequest::SnapshotAbove(above), SNAPSHOT_WITHIN).await;
    let installed = match answer {
        Ok(PeerResponse::Snapshot(Ok((vote, meta, bytes)))) => raft.install_from_leader(vote, meta, bytes).await,
        Ok(PeerResponse::Snapshot(Err(e))) => Err(e),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    match installed {
        Ok(()) => {
            raft.set_diverged(false);
            tracing::warn!(leader, "re-synced from the leader's snapshot: serving again");
        }
        Err(e) => tracing::error!(leader, error = %e, "re-sync failed; trying again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared zxids are compared; entries only one side has are passed over.
    #[test]
    fn compares_shared_zxids_only() {
        let mine = [(128, 1), (256, 2), (384, 3)];
        assert_eq!(compare(&mine, &[(256, 2), (384, 3), (512, 9)], 128), Compared::Agree(384));
        assert_eq!(compare(&mine, &[(0, 7)], 0), Compared::Agree(0));
        assert_eq!(compare(&mine, &[(256, 2), (384, 4)], 0), Compared::Differ { zxid: 384, mine: 3, leader: 4 });
    }
}
