//! The openraft network adapter, over a [`Transport`] the peer port provides: the Raft RPC
//! messages ([`RaftRequest`], [`RaftResponse`]) are defined here and carried as opaque values
//! by the transport, so openraft's types stay in this folder and the peer port depends on Raft
//! rather than the other way round. Transport failures map to openraft's error classes in one
//! function: cannot connect -> `Unreachable` (openraft backs off), lost or timed out ->
//! `Network`. A peer's own Raft error (only ever fatal: its core stopped) is reported as
//! `Network` too: openraft 0.10's network answers carry no remote error. Snapshots go as a
//! sequence of chunks read from the snapshot file.
//!
//! It also owns the log of whether each peer answers ([`PeerHealth`]): one warning when a
//! peer stops answering, one a minute while it stays silent, one line when it is back.
//! openraft's own per-heartbeat and per-retry warnings (about 40 a second per silent peer)
//! are filtered out by the default log filter (`main.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::RaftError;
use openraft::error::ReplicationClosed;
use openraft::error::StreamingError;
use openraft::error::Unreachable;
use openraft::network::RPCOption;
use openraft::network::RaftNetworkFactory;
use openraft::network::RaftNetworkV2;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::SnapshotResponse;
use openraft::raft::TransferLeaderRequest;
use openraft::raft::TransferLeaderResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::BasicNode;
use serde::Deserialize;
use serde::Serialize;

use super::Snapshot;
use super::SnapshotMeta;
use super::TypeConfig;
use super::Vote;

/// A Raft RPC from one member to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    /// openraft's pre-vote: would the receiver grant this vote? Nothing changes on it.
    PreVote(VoteRequest<TypeConfig>),
    /// A piece of the leader's snapshot file, in order from offset 0; `done` marks the last.
    SnapshotChunk {
        vote: Vote,
        meta: SnapshotMeta,
        offset: u64,
        data: serde_bytes::ByteBuf,
        done: bool,
    },
    /// The leader hands leadership to a member (openraft's transfer-leader: sent to every
    /// voter; the named one campaigns at once, the others stop honouring the old lease).
    TransferLeader(TransferLeaderRequest<TypeConfig>),
}

impl RaftRequest {
    /// A heartbeat: an AppendEntries that carries no entries.
    pub fn is_heartbeat(&self) -> bool {
        matches!(self, RaftRequest::AppendEntries(rpc) if rpc.entries.is_empty())
    }

    /// An AppendEntries that carries entries.
    pub fn carries_entries(&self) -> bool {
        matches!(self, RaftRequest::AppendEntries(rpc) if !rpc.entries.is_empty())
    }

    /// A piece of a snapshot (answered by [`super::snapshot::Receiving`]).
    pub fn is_snapshot_chunk(&self) -> bool {
        matches!(self, RaftRequest::SnapshotChunk { .. })
    }
}

/// The answer to a [`RaftRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftResponse {
    AppendEntries(Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>),
    Vote(Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>),
    PreVote(Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>),
    /// `None` after a chunk, the installing server's answer after the last one.
    SnapshotChunk(Result<Option<SnapshotResponse<TypeConfig>>, String>),
    TransferLeader(Result<TransferLeaderResponse<TypeConfig>, String>),
}

/// Why a transport call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// Nobody could be reached at the address (openraft backs off).
    #[error("cannot connect to {0}: {1}")]
    Unreachable(String, String),
    /// Sent, or being sent, and no answer came (lost, timed out, garbled).
    #[error("{0}")]
    Failed(String),
}

/// How Raft RPCs reach another member: the peer port.
pub trait Transport: Send + Sync + 'static {
    type Client: TransportClient;
    /// A client to member `target` at `addr`, with a connection of its own (openraft runs a
    /// heartbeat and a replication stream per member; neither may wait behind the other).
    fn connect(&self, target: u64, addr: &str) -> Self::Client;
}

/// One stream's client to one member.
pub trait TransportClient: Send + Sync + 'static {
    /// Sends `req` and waits at most `timeout` for its answer.
    fn call(
        &self,
        req: RaftRequest,
        timeout: Duration,
    ) -> impl Future<Output = Result<RaftResponse, TransportError>> + Send;
}

/// Bytes of snapshot per peer message.
const SNAPSHOT_CHUNK: usize = 4 << 20;

/// Builds a [`PeerNetwork`] per target; `BasicNode.addr` is the target's `host:peerPort` (or
/// its ZooKeeper server spec after a reconfig: see [`super::members::peer_addr`]).
pub struct Network<T> {
    transport: Arc<T>,
    /// How long replication waits after an unreachable peer before retrying.
    retry: Duration,
    /// One per target, shared by the target's heartbeat and replication clients.
    health: HashMap<u64, Arc<PeerHealth>>,
}

impl<T: Transport> Network<T> {
    /// A factory whose clients retry an unreachable peer every `retry`.
    pub fn new(transport: Arc<T>, retry: Duration) -> Network<T> {
        Network { transport, retry, health: HashMap::new() }
    }
}

/// Raft RPCs to one peer.
pub struct PeerNetwork<T: Transport> {
    client: T::Client,
    retry: Duration,
    health: Arc<PeerHealth>,
}

impl<T: Transport> RaftNetworkFactory<TypeConfig> for Network<T> {
    type Network = PeerNetwork<T>;
    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerNetwork<T> {
        let addr = super::members::peer_addr(&node.addr);
        let health = self
            .health
            .entry(target)
            .and_modify(|h| {
                if h.addr != addr {
                    *h = Arc::new(PeerHealth::new(target, addr.clone()));
                }
            })
            .or_insert_with(|| Arc::new(PeerHealth::new(target, addr.clone())))
            .clone();
        PeerNetwork { client: self.transport.connect(target, &addr), retry: self.retry, health }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a peer must go unanswering before it is logged: a heartbeat or two lost on a
/// busy machine is not news.
const SILENT_AFTER: Duration = Duration::from_secs(1);

/// How often a peer that stays silent is logged again.
const STILL_SILENT_EVERY: Duration = Duration::from_secs(60);

/// Whether one peer answers this server's RPCs, and when that was last logged.
struct PeerHealth {
    target: u64,
    addr: String,
    silent: Mutex<Option<Silence>>,
}

struct Silence {
    /// The first failure since the last answer.
    since: Instant,
    /// The last warning about it, if any yet.
    logged: Option<Instant>,
}

impl PeerHealth {
    fn new(target: u64, addr: String) -> PeerHealth {
        PeerHealth { target, addr, silent: Mutex::new(None) }
    }

    fn answered(&self) {
        let was = lock(&self.silent).take();
        if let Some(Silence { since, logged: Some(_) }) = was {
            tracing::info!(
                peer = self.target,
                addr = %self.addr,
                silent_s = since.elapsed().as_secs(),
                "peer answers again"
            );
        }
    }

    fn failed(&self, error: &dyn std::fmt::Display) {
        self.failed_at(Instant::now(), error);
    }

    fn failed_at(&self, now: Instant, error: &dyn std::fmt::Display) {
        let mut silent = lock(&self.silent);
        let Some(silence) = silent.as_mut() else {
            *silent = Some(Silence { since: now, logged: None });
            return;
        };
        let silent_s = now.duration_since(silence.since).as_secs();
        match silence.logged {
            None if now.duration_since(silence.since) >= SILENT_AFTER => {
                silence.logged = Some(now);
                tracing::warn!(
                    peer = self.target,
                    addr = %self.addr,
                    %error,
                    silent_s,
                    "peer does not answer; retrying every heartbeat, logged again once a minute while it stays silent"
                );
            }
            Some(logged) if now.duration_since(logged) >= STILL_SILENT_EVERY => {
                silence.logged = Some(now);
                tracing::warn!(peer = self.target, addr = %self.addr, %error, silent_s, "peer still does not answer");
            }
            _ => {}
        }
    }
}

/// Reports an RPC's outcome to its peer's [`PeerHealth`]. openraft drops a heartbeat that
/// outlives its interval instead of letting it time out here, so a drop after the RPC's
/// whole allowance counts as no answer; an earlier drop (a cancelled replication stream)
/// says nothing about the peer.
struct Outcome<'a> {
    health: &'a PeerHealth,
    started: Instant,
    allowance: Duration,
    reported: bool,
}

impl<'a> Outcome<'a> {
    fn new(health: &'a PeerHealth, option: &RPCOption) -> Outcome<'a> {
        Outcome { health, started: Instant::now(), allowance: option.hard_ttl(), reported: false }
    }

    fn report<T, E: std::fmt::Display>(mut self, result: &Result<T, E>) {
        self.reported = true;
        match result {
            Ok(_) => self.health.answered(),
            Err(e) => self.health.failed(e),
        }
    }
}

impl Drop for Outcome<'_> {
    fn drop(&mut self) {
        if !self.reported && self.started.elapsed() >= self.allowance.saturating_sub(Duration::from_millis(1)) {
            self.health.failed(&format_args!("no answer within {:?}", self.allowance));
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unexpected answer from peer")]
struct WrongAnswer;

fn transport(e: TransportError) -> RPCError<TypeConfig> {
    match e {
        TransportError::Unreachable(..) => RPCError::Unreachable(Unreachable::new(&e)),
        TransportError::Failed(_) => RPCError::Network(NetworkError::new(&e)),
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

impl<T: Transport> PeerNetwork<T> {
    async fn call(&self, req: RaftRequest, timeout: Duration) -> Result<RaftResponse, TransportError> {
        self.client.call(req, timeout).await
    }

    /// A vote or a pre-vote, and its answer.
    async fn ask_vote(
        &self,
        req: RaftRequest,
        option: &RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let outcome = Outcome::new(&self.health, option);
        let answer = self.call(req, timeout(option)).await;
        outcome.report(&answer);
        match answer.map_err(transport)? {
            RaftResponse::Vote(r) | RaftResponse::PreVote(r) => r.map_err(remote),
            _ => Err(wrong()),
        }
    }

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
            let req = RaftRequest::SnapshotChunk {
                vote,
                meta: snapshot.meta.clone(),
                offset,
                data: serde_bytes::ByteBuf::from(data),
                done,
            };
            offset += filled as u64;
            match self.call(req, chunk_timeout).await.map_err(transport)? {
                RaftResponse::SnapshotChunk(Ok(None)) if !done => {}
                RaftResponse::SnapshotChunk(Ok(Some(resp))) => return Ok(resp),
                RaftResponse::SnapshotChunk(Err(e)) => return Err(remote(e)),
                _ => return Err(wrong()),
            }
        }
    }
}

impl<T: Transport> RaftNetworkV2<TypeConfig> for PeerNetwork<T> {
    type SnapshotData = tokio::fs::File;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = append_timeout(&rpc, &option);
        let outcome = Outcome::new(&self.health, &option);
        let answer = self.call(RaftRequest::AppendEntries(rpc), timeout).await;
        outcome.report(&answer);
        match answer.map_err(transport)? {
            RaftResponse::AppendEntries(r) => r.map_err(remote),
            _ => Err(wrong()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.ask_vote(RaftRequest::Vote(rpc), &option).await
    }

    /// openraft's pre-vote. Its default grants every pre-vote without asking, which would
    /// make every round a real election: the receiver decides here (its leader lease and the
    /// candidate's log), and a member that does not answer grants nothing. A member cut off
    /// from the others runs a round every 75-150 ms, and openraft logs a warning for every
    /// failed request of each; so a peer that cannot be reached is reported to openraft as a
    /// refusal (a vote lower than any it holds, no log: it changes nothing there), and to
    /// the peer's health log, which says it once a minute.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.ask_vote(RaftRequest::PreVote(rpc), &option).await {
            Err(RPCError::Unreachable(_) | RPCError::Network(_) | RPCError::Timeout(_)) => {
                Ok(VoteResponse::new(Vote::new(0, 0), None, false))
            }
            answer => answer,
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let answer = self.call(RaftRequest::TransferLeader(req), timeout(&option)).await;
        match answer.map_err(transport)? {
            RaftResponse::TransferLeader(r) => r.map_err(remote),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(h: &PeerHealth) -> Option<Instant> {
        lock(&h.silent).as_ref().and_then(|s| s.logged)
    }

    #[test]
    fn a_silent_peer_is_logged_after_a_second_then_once_a_minute() {
        let h = PeerHealth::new(2, "127.0.0.1:1".into());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        h.failed_at(at(0), &"refused");
        h.failed_at(at(500), &"refused");
        assert_eq!(logged(&h), None, "a short silence is not logged");
        h.failed_at(at(1_000), &"refused");
        assert_eq!(logged(&h), Some(at(1_000)));
        h.failed_at(at(30_000), &"refused");
        assert_eq!(logged(&h), Some(at(1_000)), "not again within the minute");
        h.failed_at(at(61_000), &"refused");
        assert_eq!(logged(&h), Some(at(61_000)));
        h.answered();
        assert!(lock(&h.silent).is_none());
        // A fresh silence starts the count again.
        h.failed_at(at(62_000), &"refused");
        h.failed_at(at(62_100), &"refused");
        assert_eq!(logged(&h), None);
    }
}
