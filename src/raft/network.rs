//! The Raft network adapter over the peer port ([`crate::peer`]). Transport failures map to
//! openraft's error classes in one function: cannot connect -> `Unreachable` (openraft backs
//! off), lost or timed out -> `Network`. A peer's own Raft error (only ever fatal: its core
//! stopped) is reported as `Network` too: openraft 0.10's network answers carry no remote
//! error. Snapshots go as a sequence of chunks read from the snapshot file.

use std::future::Future;
use std::time::Duration;

use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::ReplicationClosed;
use openraft::error::StreamingError;
use openraft::error::Unreachable;
use openraft::network::RPCOption;
use openraft::network::RaftNetworkFactory;
use openraft::network::RaftNetworkV2;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::SnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::BasicNode;

use super::Snapshot;
use super::TypeConfig;
use super::Vote;
use crate::peer::PeerClient;
use crate::peer::PeerError;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;

/// Bytes of snapshot per peer message.
const SNAPSHOT_CHUNK: usize = 4 << 20;

/// Builds a [`PeerNetwork`] per target; `BasicNode.addr` is the target's `host:peerPort`.
pub struct PeerNetworkFactory {
    /// How long replication waits after an unreachable peer before retrying.
    pub retry: Duration,
}

/// Raft RPCs to one peer.
pub struct PeerNetwork {
    client: PeerClient,
    retry: Duration,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;
    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> PeerNetwork {
        PeerNetwork { client: PeerClient::new(node.addr.clone()), retry: self.retry }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unexpected answer from peer")]
struct WrongAnswer;

fn transport(e: PeerError) -> RPCError<TypeConfig> {
    match e {
        PeerError::Connect(..) => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

fn remote(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(format!("the peer's raft failed: {e}")))
}

fn wrong() -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&WrongAnswer))
}

fn timeout(option: &RPCOption) -> Duration {
    option.hard_ttl().max(Duration::from_millis(50))
}

/// How long an append that carries entries may wait for its answer. openraft allows one
/// heartbeat interval, but the follower answers only after its fsync, which on a busy disk
/// takes hundreds of milliseconds: giving up then makes the leader log a warning and send the
/// same entries again while the follower is still writing them. A peer that went away is still
/// found at once by its closed connection; a silent one costs this much per try, and its
/// heartbeats (which keep the short timeout) tell the leader about it meanwhile.
const APPEND_TIMEOUT: Duration = Duration::from_secs(1);

fn append_timeout(rpc: &AppendEntriesRequest<TypeConfig>, option: &RPCOption) -> Duration {
    if rpc.entries.is_empty() {
        timeout(option)
    } else {
        timeout(option).max(APPEND_TIMEOUT)
    }
}

impl PeerNetwork {
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        option: &RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, RPCError<TypeConfig>> {
        use tokio::io::AsyncReadExt;
        use tokio::io::AsyncSeekExt;
        let mut file = snapshot.snapshot;
        file.seek(std::io::SeekFrom::Start(0)).await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut offset = 0u64;
        // Each chunk may take a while to write on the other side; far more than a heartbeat.
        let chunk_timeout = timeout(option).max(Duration::from_secs(10));
        loop {
            let mut data = vec![0u8; SNAPSHOT_CHUNK];
            let mut filled = 0;
            while filled < data.len() {
                let n = file.read(&mut data[filled..]).await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            data.truncate(filled);
            let done = filled < SNAPSHOT_CHUNK;
            let req = PeerRequest::SnapshotChunk {
                vote,
                meta: snapshot.meta.clone(),
                offset,
                data: serde_bytes::ByteBuf::from(data),
                done,
            };
            offset += filled as u64;
            match self.client.call(req, chunk_timeout).await.map_err(transport)? {
                PeerResponse::SnapshotChunk(Ok(None)) if !done => {}
                PeerResponse::SnapshotChunk(Ok(Some(resp))) => return Ok(resp),
                PeerResponse::SnapshotChunk(Err(e)) => return Err(remote(e)),
                _ => return Err(wrong()),
            }
        }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerNetwork {
    type SnapshotData = tokio::fs::File;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = append_timeout(&rpc, &option);
        match self.client.call(PeerRequest::AppendEntries(rpc), timeout).await.map_err(transport)? {
            PeerResponse::AppendEntries(r) => r.map_err(remote),
            _ => Err(wrong()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.client.call(PeerRequest::Vote(rpc), timeout(&option)).await.map_err(transport)? {
            PeerResponse::Vote(r) => r.map_err(remote),
            _ => Err(wrong()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            r = self.send_snapshot(vote, snapshot, &option) => r.map_err(StreamingError::from),
        }
    }

    /// openraft waits 500 ms after an unreachable peer by default: longer than a follower's
    /// election timeout, so a member rejoining after a partition would campaign (and depose
    /// the leader) before the leader retried. Retry every heartbeat instead.
    fn backoff(&self) -> Option<openraft::network::Backoff> {
        Some(openraft::network::Backoff::new(std::iter::repeat(self.retry)))
    }
}
