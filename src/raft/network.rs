//! The Raft network adapter over the peer port ([`crate::peer`]). Transport failures map to
//! openraft's error classes in one function: cannot connect -> `Unreachable` (openraft backs
//! off), lost or timed out -> `Network`, the peer's own Raft error -> `RemoteError`.

use std::time::Duration;

use openraft::error::InstallSnapshotError;
use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::RaftError;
use openraft::error::RemoteError;
use openraft::error::Unreachable;
use openraft::network::RPCOption;
use openraft::network::RaftNetwork;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::InstallSnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::BasicNode;

use super::TypeConfig;
use crate::peer::PeerClient;
use crate::peer::PeerError;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;

/// Builds a [`PeerNetwork`] per target; `BasicNode.addr` is the target's `host:peerPort`.
pub struct PeerNetworkFactory {
    /// How long replication waits after an unreachable peer before retrying.
    pub retry: Duration,
}

/// Raft RPCs to one peer.
pub struct PeerNetwork {
    target: u64,
    client: PeerClient,
    retry: Duration,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;
    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerNetwork {
        PeerNetwork { target, client: PeerClient::new(node.addr.clone()), retry: self.retry }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unexpected answer from peer")]
struct WrongAnswer;

fn transport<E: std::error::Error>(e: PeerError) -> RPCError<u64, BasicNode, E> {
    match e {
        PeerError::Connect(..) => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

fn timeout(option: &RPCOption) -> Duration {
    option.hard_ttl().max(Duration::from_millis(50))
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    /// openraft waits 500 ms after an unreachable peer by default: longer than a follower's
    /// election timeout, so a member rejoining after a partition would campaign (and depose
    /// the leader) before the leader retried. Retry every heartbeat instead.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(self.retry))
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.client.call(PeerRequest::AppendEntries(rpc), timeout(&option)).await.map_err(transport)? {
            PeerResponse::AppendEntries(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongAnswer))),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        match self.client.call(PeerRequest::InstallSnapshot(rpc), timeout(&option)).await.map_err(transport)? {
            PeerResponse::InstallSnapshot(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongAnswer))),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.client.call(PeerRequest::Vote(rpc), timeout(&option)).await.map_err(transport)? {
            PeerResponse::Vote(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongAnswer))),
        }
    }
}
