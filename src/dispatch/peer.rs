//! What the peer port asks of this server (`crate::peer::PeerHandler`): a follower's forwarded
//! batch of writes (stamped with this leader's clock, queued in arrival order, answered once
//! committed), the leader's read
//! point for a follower's `sync`, and the sessions a follower heard from.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::propose;
use super::Dispatcher;
use crate::raft::Raft;
use crate::raft::TxnBatch;
use crate::tree::txn::TxnResult;

impl crate::peer::PeerHandler for Dispatcher {
    fn raft(&self) -> &Raft {
        &self.0.raft
    }

    #[allow(clippy::async_yields_async)] // the outer future queues, the inner one waits
    fn forward(
        &self,
        batch: TxnBatch,
        origin: Option<u64>,
    ) -> BoxFuture<'static, BoxFuture<'static, Result<Vec<TxnResult>, String>>> {
        let d = self.clone();
        Box::pin(async move {
            let proposer = d.0.proposer.clone();
            let mut waits = Vec::with_capacity(batch.txns.len());
            // The leader stamps every write with its own clock, as ZooKeeper's leader does in
            // its PrepRequestProcessor: ctime and mtime then come from one clock, the one the
            // leader's TTL checks compare them with, whatever the follower's clock says.
            let now = crate::clock::now_ms();
            for mut txn in Arc::unwrap_or_clone(batch.txns) {
                txn.time_ms = now;
                if let Some(refused) = origin.and_then(|o| d.moved_away(&txn, o)) {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = tx.send(Ok(refused));
                    waits.push(rx);
                    continue;
                }
                match proposer.submit(txn).await {
                    Ok(w) => waits.push(w),
                    Err(e) => {
                        let e = e.to_string();
                        return Box::pin(async move { Err(e) }) as BoxFuture<'static, _>;
                    }
                }
            }
            Box::pin(async move {
                let mut out = Vec::with_capacity(waits.len());
                for w in waits {
                    match w.await {
                        Ok(Ok(r)) => out.push(r),
                        Ok(Err(e)) => return Err(e.to_string()),
                        Err(_) => return Err(propose::dropped().to_string()),
                    }
                }
                Ok(out)
            }) as BoxFuture<'static, _>
        })
    }

    fn read_index(&self) -> BoxFuture<'static, Result<i64, String>> {
        let d = self.clone();
        Box::pin(async move { d.read_index().await.map_err(|e| e.to_string()) })
    }

    fn validate_session(&self, session: i64, origin: Option<u64>) -> Result<(bool, i64), String> {
        if !self.0.raft.is_leader() {
            return Err("not the leader".into());
        }
        let (alive, zxid) = {
            let tree = self.0.shared.read();
            (tree.session(session).is_some() && !self.0.sessions.is_closing(session), tree.last_zxid())
        };
        if let (true, Some(member)) = (alive, origin) {
            self.0.sessions.moved_to(session, member);
        }
        Ok((alive, zxid))
    }

    /// A member with a membership (an initialised group, or one received from its leader)
    /// is initialised; a member still waiting for its leader's snapshot is as new as it was.
    fn bootstrap(&self) -> crate::peer::bootstrap::BootstrapState {
        use crate::peer::bootstrap::BootstrapState;
        if self.0.raft.status().voters.is_empty() {
            BootstrapState::Fresh { zookeeper_zxid: self.0.zookeeper_zxid }
        } else {
            BootstrapState::Initialized
        }
    }

    fn reconfig(
        &self,
        req: crate::peer::Reconfig,
    ) -> BoxFuture<'static, Result<crate::peer::Reconfigured, crate::peer::ReconfigError>> {
        let d = self.clone();
        Box::pin(async move { d.run_reconfig(req).await })
    }

    fn digests(&self, after: i64) -> Result<Vec<(i64, u64)>, String> {
        if !self.0.raft.is_leader() {
            return Err("not the leader".into());
        }
        let tree = self.0.shared.read();
        Ok(tree.digest_log().filter(|d| d.zxid > after).map(|d| (d.zxid, d.digest)).collect())
    }

    fn snapshot_above(
        &self,
        index: u64,
    ) -> BoxFuture<'static, Result<(crate::raft::Vote, crate::raft::SnapshotMeta, Vec<u8>), String>> {
        let raft = self.0.raft.clone();
        Box::pin(async move { raft.snapshot_above(index, std::time::Duration::from_secs(60)).await })
    }

    fn touch(&self, sessions: &[i64]) {
        for s in sessions {
            self.0.sessions.touch(*s);
        }
    }
}
