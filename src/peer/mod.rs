//! The peer port: Raft RPCs, writes forwarded from followers, session touches and read-index
//! requests between ensemble members. Counterpart of ZooKeeper's quorum port (Learner/Leader
//! messages), over our own protocol. It is Raft's [`Transport`] ([`Peers`] for the Raft
//! network adapter in `crate::raft::network`), and one client per member ([`Peers`]) for
//! everything else.
//!
//! # Wire format
//! Length-delimited frames (4-byte big-endian length, tokio-util) each holding a postcard
//! [`Envelope`]: a protocol version, a request id, and a [`PeerRequest`] or [`PeerResponse`].
//! Requests on one connection may be answered out of order (matched by id), except forwarded
//! writes, which the receiver submits to Raft in the order they arrived so a session's writes
//! keep their order. A version other than [`PROTOCOL_VERSION`] closes the connection.
//!
//! # Security
//! With `sslQuorum` every connection a member opens is TLS with its own certificate, and the
//! peer port accepts only TLS connections whose certificate the quorum trust store vouches
//! for (and, with host name verification, that name the address they come from); with
//! `portUnification` the port takes plaintext ones too, told apart by their first byte (a TLS
//! record starts with 0x16; a frame's length never does, as [`MAX_FRAME`] is below 0x16 << 24).
//! See [`crate::tls::QuorumTls`].
//!
//! With `quorum.auth.enableSasl` a member opening a connection first authenticates with
//! DIGEST-MD5 as its `QuorumLearner` JAAS section names it, in [`PeerRequest::Sasl`] frames
//! the accepting member checks against its `QuorumServer` users ([`Gate`]); with
//! `quorum.auth.serverRequireSasl` a connection that has not done so is closed at its first
//! other request, and with `quorum.auth.learnerRequireSasl` a member drops a connection to a
//! member that does not take SASL.
//!
//! This module calls the Raft handle and a [`PeerHandler`]; it never touches the tree.

pub mod bootstrap;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::FutureExt;
use futures::SinkExt;
use futures::StreamExt;
use serde::Deserialize;
use serde::Serialize;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;
use tokio_util::codec::LengthDelimitedCodec;

use crate::raft::network::RaftRequest;
use crate::raft::network::RaftResponse;
use crate::raft::network::Transport;
use crate::raft::network::TransportError;
use crate::raft::Raft;
use crate::raft::TxnBatch;
use crate::sasl::QuorumSasl;
use crate::tls::QuorumTls;
use crate::tree::txn::TxnResult;

/// Bumped on any incompatible change to the messages (3: Raft's messages in one variant,
/// openraft's pre-vote instead of Warden's own, session revalidation).
pub const PROTOCOL_VERSION: u16 = 3;
/// Largest peer frame (snapshot chunks and batches are far smaller).
const MAX_FRAME: usize = 256 << 20;

/// A request from one member to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    /// A Raft RPC (AppendEntries, votes, snapshot chunks).
    Raft(RaftRequest),
    /// A follower's batch of client writes, for the leader to commit.
    Forward(TxnBatch),
    /// Asks the leader for a linearizable read point: its last applied zxid after confirming
    /// leadership with a quorum.
    ReadIndex,
    /// Sessions heard from at a follower since its last touch batch.
    Touch(Vec<i64>),
    /// A follower asks the leader whether a session a client resumes on it is alive
    /// (ZooKeeper's `Learner.validateSession`).
    ValidateSession(i64),
    /// A new member asks how this one starts (see [`bootstrap`]).
    Bootstrap,
    /// A SASL token of the connecting member (its first is empty); see [`Gate`].
    Sasl(Vec<u8>),
    /// A client's `reconfig`, already allowed where it arrived, for the leader to run.
    Reconfig(Reconfig),
    /// [`PeerRequest::Forward`] from member `.0`: writes of sessions another member now
    /// serves are refused with SessionMoved.
    ForwardFrom(u64, TxnBatch),
    /// [`PeerRequest::ValidateSession`] by member `.1`, which the session now belongs to.
    ValidateSessionFrom(i64, u64),
    /// A follower asks the leader for its tree digests (zxid, digest) after this zxid, to
    /// compare with its own (`dispatch::digests`).
    Digests(i64),
    /// A diverged follower asks the leader for a snapshot above this log index
    /// (`crate::raft::resync`).
    SnapshotAbove(u64),
}

/// A `reconfig` request (ZooKeeper's `ReconfigRequest`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reconfig {
    pub joining: Option<String>,
    pub leaving: Option<String>,
    pub new_members: Option<String>,
    /// The configuration version the change applies to; -1: any.
    pub from_config: i64,
    /// Whether the caller may write `/zookeeper/config` (checked where it arrived, answered
    /// by the leader after the checks ZooKeeper makes first).
    pub allowed: bool,
}

/// Why a reconfig failed (mapped to ZooKeeper's codes in `dispatch::reply`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReconfigError {
    /// A standalone server has no members to change.
    Standalone,
    /// The caller may not write `/zookeeper/config`.
    NoAuth,
    /// A change is under way.
    InProgress,
    /// `from_config` is not the current version.
    BadVersion,
    /// The request does not make a valid configuration (the text says why).
    BadArguments(String),
    /// Too few of the new configuration's voters are in step with the leader.
    NoQuorum,
    /// Raft could not do it (no leader, lost leadership, stopped).
    Failed(String),
}

/// A reconfig's result: the new `/zookeeper/config` and its stat, and the zxid it took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reconfigured {
    pub data: Vec<u8>,
    pub stat: jute::Stat,
    pub zxid: i64,
}

/// The answer to a [`PeerRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Raft(RaftResponse),
    Forward(Result<Vec<TxnResult>, String>),
    ReadIndex(Result<i64, String>),
    Touch,
    /// Whether the session is alive, and the leader's last applied zxid when it looked.
    ValidateSession(Result<(bool, i64), String>),
    Bootstrap(bootstrap::BootstrapState),
    /// The next SASL token, or why the exchange failed (or is not taken here).
    Sasl(Result<SaslAnswer, String>),
    Reconfig(Result<Reconfigured, ReconfigError>),
    Digests(Result<Vec<(i64, u64)>, String>),
    /// The leader's vote, and a snapshot's meta and file.
    Snapshot(Result<(crate::raft::Vote, crate::raft::SnapshotMeta, Vec<u8>), String>),
}

/// The accepting member's SASL token.
#[derive(Debug, Serialize, Deserialize)]
pub enum SaslAnswer {
    Challenge(Vec<u8>),
    /// Authenticated; the last token (DIGEST-MD5's `rspauth`).
    Done(Vec<u8>),
}

/// What an accepting member answers a SASL request with when it does not take SASL.
const SASL_NOT_TAKEN: &str = "SASL between members is not enabled here";

/// How a member's peer connections are secured: TLS ([`QuorumTls`]) and SASL
/// (`quorum.auth.*`).
pub struct PeerSecurity {
    pub tls: Arc<QuorumTls>,
    pub sasl: Option<QuorumSasl>,
}

impl PeerSecurity {
    pub fn plain() -> PeerSecurity {
        PeerSecurity { tls: Arc::new(QuorumTls::plain()), sasl: None }
    }
}

/// One accepted connection's SASL state: what it may do before and after authenticating.
pub(crate) struct Gate<'a> {
    sasl: Option<&'a QuorumSasl>,
    exchange: Option<crate::sasl::Conversation>,
    authenticated: Option<String>,
}

/// What a [`Gate`] says about one request.
pub(crate) enum Verdict {
    /// Serve it.
    Serve,
    /// A SASL step: answer with this.
    Answer(PeerResponse),
    /// Answer with this, then close the connection (why).
    Refuse(Option<PeerResponse>, String),
}

impl<'a> Gate<'a> {
    pub(crate) fn new(security: &'a PeerSecurity) -> Gate<'a> {
        Gate { sasl: security.sasl.as_ref(), exchange: None, authenticated: None }
    }

    pub(crate) fn check(&mut self, request: &PeerRequest) -> Verdict {
        let Some(sasl) = self.sasl else {
            return match request {
                PeerRequest::Sasl(_) => Verdict::Answer(PeerResponse::Sasl(Err(SASL_NOT_TAKEN.into()))),
                _ => Verdict::Serve,
            };
        };
        match request {
            PeerRequest::Sasl(token) => {
                let step = self.exchange.get_or_insert_with(|| sasl.server.conversation()).step(token);
                match step {
                    Ok(crate::sasl::Step::Continue(c)) => {
                        Verdict::Answer(PeerResponse::Sasl(Ok(SaslAnswer::Challenge(c))))
                    }
                    Ok(crate::sasl::Step::Done { reply, authorized }) => {
                        let gssapi = self.exchange.as_ref().is_some_and(|e| e.is_gssapi());
                        if gssapi && !sasl.member_principal(&authorized) {
                            let why = format!(
                                "{authorized} is not authorized to connect: not <service>/<member host>@REALM \
                                 for a host of the server.N lines"
                            );
                            return Verdict::Refuse(Some(PeerResponse::Sasl(Err(why.clone()))), format!("SASL: {why}"));
                        }
                        tracing::debug!(member = authorized.as_str(), "peer authenticated (SASL)");
                        self.authenticated = Some(authorized);
                        Verdict::Answer(PeerResponse::Sasl(Ok(SaslAnswer::Done(reply.unwrap_or_default()))))
                    }
                    Err(e) => Verdict::Refuse(Some(PeerResponse::Sasl(Err(e.to_string()))), format!("SASL: {e}")),
                }
            }
            _ if self.authenticated.is_none() && sasl.server_require => {
                Verdict::Refuse(None, "it did not authenticate with SASL (quorum.auth.serverRequireSasl)".into())
            }
            _ => Verdict::Serve,
        }
    }
}

/// The connecting member's side of the SASL exchange, on a fresh connection before any
/// other request. `Ok` when authenticated, or when the other member does not take SASL and
/// `quorum.auth.learnerRequireSasl` is off.
async fn authenticate(
    addr: &str,
    r: BoxRead,
    w: BoxWrite,
    sasl: &QuorumSasl,
    limit: Duration,
) -> Result<(BoxRead, BoxWrite), PeerError> {
    let failed = |why: String| PeerError::Connect(addr.to_owned(), why);
    let mut reader = FramedRead::new(r, codec());
    let mut writer: Writer = FramedWrite::new(w, codec());
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let mut client = sasl.learner(host).map_err(|e| failed(format!("SASL: {e}")))?;
    let exchange = async {
        let mut token = client.first().map_err(|e| failed(format!("SASL: {e}")))?;
        loop {
            let frame =
                postcard::to_stdvec(&Envelope { version: PROTOCOL_VERSION, id: 0, body: PeerRequest::Sasl(token) })
                    .map_err(|e| failed(e.to_string()))?;
            writer.send(Bytes::from(frame)).await.map_err(|e| failed(format!("SASL: {e}")))?;
            let frame = reader
                .next()
                .await
                .ok_or_else(|| failed("closed during SASL".into()))?
                .map_err(|e| failed(format!("SASL: {e}")))?;
            let env: Envelope<PeerResponse> = postcard::from_bytes(&frame).map_err(|e| failed(e.to_string()))?;
            match env.body {
                PeerResponse::Sasl(Ok(SaslAnswer::Challenge(c))) => {
                    token = client.respond(&c).map_err(|e| failed(format!("SASL: {e}")))?;
                }
                PeerResponse::Sasl(Ok(SaslAnswer::Done(last))) => {
                    return client.verify(&last).map_err(|e| failed(format!("SASL: {e}")));
                }
                PeerResponse::Sasl(Err(why)) if why == SASL_NOT_TAKEN && !sasl.learner_require => {
                    tracing::debug!(%addr, "peer does not take SASL; going on without (quorum.auth.learnerRequireSasl=false)");
                    return Ok(());
                }
                PeerResponse::Sasl(Err(why)) => return Err(failed(format!("SASL: {why}"))),
                other => return Err(failed(format!("SASL: unexpected answer {other:?}"))),
            }
        }
    };
    tokio::time::timeout(limit, exchange).await.map_err(|_| failed("the SASL exchange timed out".into()))??;
    Ok((reader.into_inner(), writer.into_inner()))
}

#[derive(Debug, Serialize, Deserialize)]
struct Envelope<T> {
    version: u16,
    id: u64,
    body: T,
}

/// Why a peer call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("cannot connect to {0}: {1}")]
    Connect(String, String),
    #[error("connection to {0} lost")]
    Lost(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("bad message: {0}")]
    Codec(String),
}

/// How long data sent on a peer connection may stay unacknowledged by the other side's
/// kernel before the connection is dropped (`TCP_USER_TIMEOUT`). Without it, a connection
/// that lived through a partition keeps retransmitting with a backoff that reaches seconds,
/// and stays silent that long after the network heals: a returning follower heard no
/// heartbeat, and could forward no write, for 5 s after the heal (bench/catchup.py). A peer
/// that is alive but slow (a long fsync, a paused process) still acknowledges at the TCP
/// level, so this never cuts it off.
const UNACKED_LIMIT: Duration = Duration::from_secs(1);

/// Sets the socket options every peer connection gets, both ends: no Nagle delay, and
/// [`UNACKED_LIMIT`].
fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_user_timeout(Some(UNACKED_LIMIT)) {
        tracing::debug!(error = %e, "TCP_USER_TIMEOUT not set on a peer connection");
    }
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec()
}

type Pending = oneshot::Sender<Result<PeerResponse, PeerError>>;

/// Requests in flight on one connection, and when it last got an answer.
struct Inflight {
    /// By id: where the answer goes, when the request was sent, and when it is overdue.
    requests: HashMap<u64, (Pending, Instant, Instant)>,
    last_answer: Instant,
}

impl Inflight {
    fn new() -> Inflight {
        Inflight { requests: HashMap::new(), last_answer: Instant::now() }
    }

    /// A request is overdue and nothing at all was answered since it was sent: the TCP
    /// connection is stuck, typically one that lived through a partition, whose
    /// retransmissions back off to seconds apart, so it stays silent for seconds after the
    /// network heals (seen: a returning follower heard no heartbeat for 5 s). A fresh
    /// connection gets through at once.
    fn stalled(&self, now: Instant) -> bool {
        self.requests.values().any(|(_, sent, overdue)| now > *overdue && self.last_answer <= *sent)
    }
}

/// The least time a request may go unanswered before its connection counts as stuck (see
/// [`Inflight::stalled`]); a request with a longer timeout gets that.
const STALL_AFTER: Duration = Duration::from_millis(500);

/// Requests in flight on one connection; `None` once the connection is lost.
type PendingMap = Arc<Mutex<Option<Inflight>>>;
type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;
type Writer = FramedWrite<BoxWrite, LengthDelimitedCodec>;

/// A plaintext connection's two halves.
fn plain_halves(stream: TcpStream) -> (BoxRead, BoxWrite) {
    let (r, w) = stream.into_split();
    (Box::new(r), Box::new(w))
}

/// A TLS connection's two halves.
fn tls_halves<S: AsyncRead + AsyncWrite + Send + 'static>(stream: S) -> (BoxRead, BoxWrite) {
    let (r, w) = tokio::io::split(stream);
    (Box::new(r), Box::new(w))
}

/// How long a TLS handshake on a peer connection may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// The name a member's certificate must hold: the host of its `host:port` address.
fn server_name(addr: &str) -> Result<rustls_pki_types::ServerName<'static>, PeerError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    rustls_pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| PeerError::Connect(addr.to_owned(), format!("not a TLS server name: {e}")))
}

/// Locks `m`, poisoned or not (nothing held under these locks is left half-changed).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Fails every request in flight on a connection, and marks it lost.
fn fail_pending(pending: &PendingMap, addr: &str) {
    let taken = lock(pending).take();
    for (_, (done, _, _)) in taken.into_iter().flat_map(|i| i.requests) {
        let _ = done.send(Err(PeerError::Lost(addr.to_owned())));
    }
}

/// While a connect waits for its answer, another is started this often (at most
/// [`CONNECT_TRIES`] in all), and the first to succeed is used. A SYN dropped by a partition
/// is only sent again by the kernel after a second, then three: a connect begun just before
/// the network heals would hold the member's heartbeats back that long after it (a returning
/// follower heard its leader 750 ms after the heal in `bench/catchup.py`). A slow link still
/// connects: no attempt is abandoned before the overall limit.
const CONNECT_RETRY: Duration = Duration::from_millis(100);
const CONNECT_TRIES: usize = 10;

/// Connects to `addr` within `limit`, staggering attempts (see [`CONNECT_RETRY`]). A refusal
/// ends it at once unless another attempt is still waiting.
async fn connect(addr: &str, limit: Duration) -> Result<TcpStream, PeerError> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut attempts = FuturesUnordered::new();
    let mut started = 0;
    let mut next = tokio::time::Instant::now();
    loop {
        if started < CONNECT_TRIES && tokio::time::Instant::now() >= next {
            attempts.push(TcpStream::connect(addr.to_owned()));
            started += 1;
            next += CONNECT_RETRY;
        }
        tokio::select! {
            Some(result) = attempts.next() => match result {
                Ok(stream) => return Ok(stream),
                Err(e) if attempts.is_empty() => return Err(PeerError::Connect(addr.to_owned(), e.to_string())),
                Err(_) => {}
            },
            _ = tokio::time::sleep_until(next), if started < CONNECT_TRIES => {}
            _ = tokio::time::sleep_until(deadline) => {
                return Err(PeerError::Connect(addr.to_owned(), "timed out".into()));
            }
        }
    }
}

/// One live connection to a peer. Callers write their own requests to the socket: a writer
/// task would cost each request a task hand-off, which on a busy 2-worker runtime is a thread
/// wake-up (docs/perf/pass-21.md). One task reads the answers.
struct Connection {
    /// tokio's `Mutex` queues waiters in order, so requests leave in the order they asked.
    writer: tokio::sync::Mutex<Writer>,
    pending: PendingMap,
    next_id: std::sync::atomic::AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Connection {
    /// Fails what is in flight and stops reading; the connection is not used again.
    fn lose(&self, addr: &str) {
        fail_pending(&self.pending, addr);
        self.reader.abort();
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A multiplexed client to one peer; reconnects on demand.
#[derive(Clone)]
pub struct PeerClient {
    addr: String,
    security: Arc<PeerSecurity>,
    /// The live connection; std `Mutex`, held only to swap it.
    conn: Arc<Mutex<Option<Arc<Connection>>>>,
}

impl PeerClient {
    /// A client for the peer at `addr` (`host:peerPort`), secured as `security` says.
    pub fn new(addr: String, security: Arc<PeerSecurity>) -> PeerClient {
        PeerClient { addr, security, conn: Arc::new(Mutex::new(None)) }
    }

    /// The live connection, or a new one; and whether it is new (none was live, or the
    /// live one was stuck).
    async fn connection(&self, connect_timeout: Duration) -> Result<(Arc<Connection>, bool), PeerError> {
        let current = lock(&self.conn).clone();
        if let Some(c) = current {
            let stalled = lock(&c.pending).as_ref().map(|i| i.stalled(Instant::now()));
            match stalled {
                Some(false) => return Ok((c, false)),
                Some(true) => {
                    tracing::debug!(addr = %self.addr, "peer connection stuck: opening another");
                    c.lose(&self.addr);
                }
                None => {}
            }
        }
        let stream = connect(&self.addr, connect_timeout).await?;
        tune(&stream);
        let (r, w) = match self.security.tls.connector() {
            None => plain_halves(stream),
            Some(connector) => {
                let lost = |why: String| PeerError::Connect(self.addr.clone(), why);
                let handshake = connector.connect(server_name(&self.addr)?, stream);
                let stream = tokio::time::timeout(connect_timeout.max(Duration::from_secs(1)), handshake)
                    .await
                    .map_err(|_| lost("the TLS handshake timed out".into()))?
                    .map_err(|e| lost(format!("TLS handshake: {e}")))?;
                tls_halves(stream)
            }
        };
        let (r, w) = match &self.security.sasl {
            Some(sasl) => authenticate(&self.addr, r, w, sasl, connect_timeout.max(Duration::from_secs(1))).await?,
            None => (r, w),
        };
        let pending: PendingMap = Arc::new(Mutex::new(Some(Inflight::new())));
        let reader = tokio::spawn(read_answers(self.addr.clone(), r, pending.clone()));
        let conn = Arc::new(Connection {
            writer: tokio::sync::Mutex::new(FramedWrite::new(w, codec())),
            pending,
            next_id: std::sync::atomic::AtomicU64::new(1),
            reader,
        });
        *lock(&self.conn) = Some(conn.clone());
        Ok((conn, true))
    }

    /// Sends a request on the connection (requests leave in the order `start` is called) and
    /// returns a future for its answer. An `Err` here means the request never reached the
    /// peer whole: no connection, or its frame not completely written (a peer decodes only
    /// whole frames, and a connection whose write failed is given up).
    pub async fn start(
        &self,
        req: PeerRequest,
        timeout: Duration,
    ) -> Result<impl std::future::Future<Output = Result<PeerResponse, PeerError>> + Send + 'static, PeerError> {
        // A connect never outlives the request: a stuck SYN (a peer behind a partition) must
        // not hold up the Raft RPCs queued behind it once the network heals.
        let (conn, _) = self.connection(timeout.min(Duration::from_secs(2))).await?;
        let id = conn.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let frame = postcard::to_stdvec(&Envelope { version: PROTOCOL_VERSION, id, body: req })
            .map_err(|e| PeerError::Codec(e.to_string()))?;
        let (done, wait) = oneshot::channel();
        let now = Instant::now();
        match lock(&conn.pending).as_mut() {
            Some(inflight) => inflight.requests.insert(id, (done, now, now + timeout.max(STALL_AFTER))),
            None => return Err(PeerError::Lost(self.addr.clone())),
        };
        // A write that cannot finish in time (a peer that stopped reading) leaves the frame
        // half sent: the connection is given up, and the next request opens another.
        let sent =
            tokio::time::timeout(timeout, async { conn.writer.lock().await.send(Bytes::from(frame)).await }).await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                conn.lose(&self.addr);
                return Err(PeerError::Lost(self.addr.clone()));
            }
            Err(_) => {
                conn.lose(&self.addr);
                return Err(PeerError::Timeout(timeout));
            }
        }
        let addr = self.addr.clone();
        Ok(async move {
            match tokio::time::timeout(timeout, wait).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(PeerError::Lost(addr)),
                Err(_) => {
                    if let Some(inflight) = lock(&conn.pending).as_mut() {
                        inflight.requests.remove(&id);
                    }
                    Err(PeerError::Timeout(timeout))
                }
            }
        })
    }

    /// Makes sure a connection is open (opening one within `timeout` if none is live, or the
    /// live one is stuck), without sending anything; whether one had to be opened. A caller
    /// that decides what to send only once the peer is reachable (see `dispatch::propose`)
    /// calls this first.
    pub async fn ready(&self, timeout: Duration) -> Result<bool, PeerError> {
        self.connection(timeout.min(Duration::from_secs(2))).await.map(|(_, opened)| opened)
    }

    /// Sends a request and waits for its answer.
    pub async fn call(&self, req: PeerRequest, timeout: Duration) -> Result<PeerResponse, PeerError> {
        self.start(req, timeout).await?.await
    }
}

/// Reads a connection's answers and hands each to its request, until the connection ends.
async fn read_answers(addr: String, r: BoxRead, pending: PendingMap) {
    let mut reader = FramedRead::new(r, codec());
    while let Some(Ok(frame)) = reader.next().await {
        match postcard::from_bytes::<Envelope<PeerResponse>>(&frame) {
            Ok(env) if env.version == PROTOCOL_VERSION => {
                let done = lock(&pending).as_mut().and_then(|i| {
                    i.last_answer = Instant::now();
                    i.requests.remove(&env.id)
                });
                if let Some((done, _, _)) = done {
                    let _ = done.send(Ok(env.body));
                }
            }
            Ok(env) => {
                tracing::warn!(%addr, version = env.version, "peer speaks another protocol version");
                break;
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "undecodable peer response");
                break;
            }
        }
    }
    fail_pending(&pending, &addr);
}

/// What the peer server needs to answer requests beside Raft's.
pub trait PeerHandler: Send + Sync + 'static {
    /// Raft RPCs.
    fn raft(&self) -> &Raft;
    /// Queues a forwarded batch for proposal (the outer future: returns once queued, so
    /// batches keep their arrival order) and returns a future for the results.
    #[allow(clippy::type_complexity)]
    fn forward(
        &self,
        batch: TxnBatch,
        origin: Option<u64>,
    ) -> futures::future::BoxFuture<'static, futures::future::BoxFuture<'static, Result<Vec<TxnResult>, String>>>;
    /// The leader's linearizable read point.
    fn read_index(&self) -> futures::future::BoxFuture<'static, Result<i64, String>>;
    /// Sessions heard from at a follower.
    fn touch(&self, sessions: &[i64]);
    /// On the leader: whether `session` is alive (not closed, not being expired), and the
    /// last applied zxid.
    /// `origin`: the member the session is resumed on.
    fn validate_session(&self, session: i64, origin: Option<u64>) -> Result<(bool, i64), String>;
    /// How this member started, for a new member's [`bootstrap`].
    fn bootstrap(&self) -> bootstrap::BootstrapState;
    /// On the leader: runs a reconfig a follower's client asked for.
    fn reconfig(&self, req: Reconfig) -> futures::future::BoxFuture<'static, Result<Reconfigured, ReconfigError>>;
    /// On the leader: its tree digests after `zxid`.
    fn digests(&self, after: i64) -> Result<Vec<(i64, u64)>, String>;
    /// On the leader: a snapshot above log index `index` for a diverged follower.
    #[allow(clippy::type_complexity)]
    fn snapshot_above(
        &self,
        index: u64,
    ) -> futures::future::BoxFuture<'static, Result<(crate::raft::Vote, crate::raft::SnapshotMeta, Vec<u8>), String>>;
}

/// Accepts peer connections until `stop` fires.
pub async fn serve<H: PeerHandler>(
    listener: TcpListener,
    handler: Arc<H>,
    security: Arc<PeerSecurity>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tune(&stream);
        let (h, security) = (handler.clone(), security.clone());
        tokio::spawn(async move {
            let halves = match accept_secure(stream, peer, &security.tls).await {
                Ok(halves) => halves,
                Err(why) => return refused(peer, &why),
            };
            if let Err(e) = server_connection(halves, h, Gate::new(&security), peer).await {
                tracing::debug!(%peer, error = %e, "peer connection ended");
            }
        });
    }
}

/// Whether an accepted connection may speak, and its halves: plaintext ones only where the
/// port takes them, TLS ones after the handshake and the checks on the member's certificate.
pub(crate) async fn accept_secure(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    tls: &QuorumTls,
) -> Result<(BoxRead, BoxWrite), String> {
    let Some(acceptor) = tls.acceptor() else { return Ok(plain_halves(stream)) };
    if tls.accept_plain {
        let mut first = [0u8; 1];
        let peeked = tokio::time::timeout(HANDSHAKE_LIMIT, stream.peek(&mut first))
            .await
            .map_err(|_| "sent nothing".to_string())?
            .map_err(|e| e.to_string())?;
        if peeked == 0 || first[0] != TLS_HANDSHAKE {
            return Ok(plain_halves(stream));
        }
    }
    let stream = tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream))
        .await
        .map_err(|_| "the TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    if tls.verify_peer_address {
        let leaf = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
        if let Some(leaf) = leaf {
            if !crate::tls::names_address(&leaf, peer.ip()).await {
                return Err(format!(
                    "its certificate names neither {} nor a host at that address (ssl.quorum.hostnameVerification)",
                    peer.ip()
                ));
            }
        }
    }
    Ok(tls_halves(stream))
}

/// Logs a refused peer connection: a warning at most every [`REFUSED_LOG_EVERY`] (a
/// misconfigured member retries many times a second), a debug line otherwise.
pub(crate) fn refused(peer: std::net::SocketAddr, why: &str) {
    static LAST_WARNED_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    metrics::counter!("warden_peer_connections_refused").increment(1);
    let now = crate::clock::now_ms();
    let last = LAST_WARNED_MS.load(std::sync::atomic::Ordering::Relaxed);
    if now - last >= REFUSED_LOG_EVERY.as_millis() as i64
        && LAST_WARNED_MS
            .compare_exchange(last, now, std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(%peer, why, "peer connection refused");
    } else {
        tracing::debug!(%peer, why, "peer connection refused");
    }
}

/// How often a refused peer connection is logged as a warning.
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(10);

/// Writes one answer. A response that cannot be encoded is logged and skipped (its request
/// times out); only a failed write ends the connection.
async fn answer(writer: &mut Writer, id: u64, body: PeerResponse) -> Result<(), PeerError> {
    let frame = match postcard::to_stdvec(&Envelope { version: PROTOCOL_VERSION, id, body }) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "peer response not encodable");
            return Ok(());
        }
    };
    writer.send(Bytes::from(frame)).await.map_err(|e| PeerError::Codec(e.to_string()))
}

/// One peer connection, served on one task: requests are read and answered here, and those
/// whose answer takes a while (forwarded writes, read index, votes) wait in `waiting`, polled
/// by the same task, so no answer is handed to another task on its way out.
async fn server_connection<H: PeerHandler>(
    halves: (BoxRead, BoxWrite),
    h: Arc<H>,
    mut gate: Gate<'_>,
    peer: std::net::SocketAddr,
) -> Result<(), PeerError> {
    let (r, w) = halves;
    let mut reader = FramedRead::new(r, codec());
    let mut writer: Writer = FramedWrite::new(w, codec());
    let mut waiting: FuturesUnordered<BoxFuture<'static, (u64, PeerResponse)>> = FuturesUnordered::new();
    // The snapshot being received on this connection, if any.
    let mut receiving = crate::raft::snapshot::Receiving::new(h.raft().options().snapshot_dir.clone());
    loop {
        let frame = tokio::select! {
            biased;
            Some((id, body)) = waiting.next() => {
                answer(&mut writer, id, body).await?;
                continue;
            }
            frame = reader.next() => frame,
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| PeerError::Codec(e.to_string()))?;
        let env: Envelope<PeerRequest> = postcard::from_bytes(&frame).map_err(|e| PeerError::Codec(e.to_string()))?;
        if env.version != PROTOCOL_VERSION {
            return Err(PeerError::Codec(format!("protocol version {}", env.version)));
        }
        let id = env.id;
        match gate.check(&env.body) {
            Verdict::Serve => {}
            Verdict::Answer(body) => {
                answer(&mut writer, id, body).await?;
                continue;
            }
            Verdict::Refuse(body, why) => {
                if let Some(body) = body {
                    answer(&mut writer, id, body).await?;
                }
                refused(peer, &why);
                return Ok(());
            }
        }
        match env.body {
            // Submitted here, in arrival order; only the wait is concurrent.
            PeerRequest::Forward(batch) => {
                let fut = h.forward(batch, None).await;
                waiting.push(async move { (id, PeerResponse::Forward(fut.await)) }.boxed());
            }
            PeerRequest::ForwardFrom(origin, batch) => {
                let fut = h.forward(batch, Some(origin)).await;
                waiting.push(async move { (id, PeerResponse::Forward(fut.await)) }.boxed());
            }
            PeerRequest::ValidateSessionFrom(session, origin) => {
                let alive = h.validate_session(session, Some(origin));
                answer(&mut writer, id, PeerResponse::ValidateSession(alive)).await?;
            }
            PeerRequest::Touch(sessions) => {
                h.touch(&sessions);
                answer(&mut writer, id, PeerResponse::Touch).await?;
            }
            PeerRequest::ValidateSession(session) => {
                let alive = h.validate_session(session, None);
                answer(&mut writer, id, PeerResponse::ValidateSession(alive)).await?;
            }
            // The gate answered it above.
            PeerRequest::Sasl(_) => {}
            PeerRequest::Bootstrap => {
                answer(&mut writer, id, PeerResponse::Bootstrap(h.bootstrap())).await?;
            }
            PeerRequest::ReadIndex => {
                let fut = h.read_index();
                waiting.push(async move { (id, PeerResponse::ReadIndex(fut.await)) }.boxed());
            }
            PeerRequest::Digests(after) => {
                answer(&mut writer, id, PeerResponse::Digests(h.digests(after))).await?;
            }
            PeerRequest::SnapshotAbove(index) => {
                let fut = h.snapshot_above(index);
                waiting.push(async move { (id, PeerResponse::Snapshot(fut.await)) }.boxed());
            }
            PeerRequest::Reconfig(req) => {
                let fut = h.reconfig(req);
                waiting.push(async move { (id, PeerResponse::Reconfig(fut.await)) }.boxed());
            }
            // A heartbeat (no entries), a vote or a pre-vote waits for its answer in `waiting`:
            // this task must go on reading the leader's next heartbeats, each of which is
            // contact from the leader, while Raft is busy. A follower's core writes the entries
            // it appends, fsync included, on its own task; with a slow disk that took longer
            // than the election timeout, and a heartbeat awaited here held the next ones
            // unread: the follower thought its live leader silent, the other follower (on the
            // same slow disk) agreed, and they deposed it (seen in the compat suite under load).
            PeerRequest::Raft(req) if !req.carries_entries() && !req.is_snapshot_chunk() => {
                let raft = h.raft().clone();
                waiting.push(async move { (id, PeerResponse::Raft(raft.answer(req).await)) }.boxed());
            }
            // Entries are awaited here: openraft's replication stream sends the next request
            // only after this one's answer, so a task per request would only add a hop. Each
            // hop wakes the runtime's other worker once tokio's LIFO slot is spent, and that
            // wake-up costs a follower more than the hop. Snapshot chunks too, in order: the
            // chunks of one snapshot arrive on one connection.
            PeerRequest::Raft(req) => {
                let resp = receiving.answer(h.raft(), req).await;
                answer(&mut writer, id, PeerResponse::Raft(resp)).await?;
            }
        }
    }
    // The peer sent all it will: what is still being answered goes out before the close.
    while let Some((id, body)) = waiting.next().await {
        answer(&mut writer, id, body).await?;
    }
    Ok(())
}

/// One [`PeerClient`] per member, by id, for the requests that are not Raft's own (forwarded
/// writes, session touches, read-index requests): the membership -> address -> client cache
/// every sender shares. A member whose address changed gets a new client. Raft's replication
/// and heartbeat streams each get a connection of their own ([`Transport::connect`]), so a
/// follower's fsync never holds up the heartbeats behind it.
#[derive(Clone)]
pub struct Peers {
    /// std `Mutex`: held only to look up or swap a client.
    clients: Arc<Mutex<HashMap<u64, PeerClient>>>,
    security: Arc<PeerSecurity>,
}

impl Default for Peers {
    fn default() -> Self {
        Peers::new(Arc::new(PeerSecurity::plain()))
    }
}

impl Peers {
    /// The clients of the other members, connecting as `security` says.
    pub fn new(security: Arc<PeerSecurity>) -> Peers {
        Peers { clients: Default::default(), security }
    }

    /// How this member's peer connections are secured.
    pub fn security(&self) -> Arc<PeerSecurity> {
        self.security.clone()
    }

    /// The client of member `id` at `addr`.
    pub fn client(&self, id: u64, addr: &str) -> PeerClient {
        let mut clients = lock(&self.clients);
        match clients.get(&id) {
            Some(c) if c.addr == addr => c.clone(),
            _ => {
                let c = PeerClient::new(addr.to_owned(), self.security.clone());
                clients.insert(id, c.clone());
                c
            }
        }
    }
}

fn transport_error(e: PeerError) -> TransportError {
    match e {
        PeerError::Connect(addr, why) => TransportError::Unreachable(addr, why),
        other => TransportError::Failed(other.to_string()),
    }
}

/// A Raft stream's own connection to one member.
pub struct RaftClient(PeerClient);

impl crate::raft::network::TransportClient for RaftClient {
    async fn call(&self, req: RaftRequest, timeout: Duration) -> Result<RaftResponse, TransportError> {
        match self.0.call(PeerRequest::Raft(req), timeout).await.map_err(transport_error)? {
            PeerResponse::Raft(r) => Ok(r),
            other => Err(TransportError::Failed(format!("unexpected answer to a Raft request: {other:?}"))),
        }
    }
}

impl Transport for Peers {
    type Client = RaftClient;

    fn connect(&self, _target: u64, addr: &str) -> RaftClient {
        RaftClient(PeerClient::new(addr.to_owned(), self.security.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection is stuck when a request is overdue and nothing was answered since it was
    /// sent; an overdue request followed by an answer (a slow one among fast ones) is not.
    #[test]
    fn a_connection_is_stuck_only_when_nothing_answers_past_a_deadline() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut i = Inflight::new();
        i.last_answer = t0;
        assert!(!i.stalled(at(10_000)), "nothing in flight");
        let (done, _wait) = oneshot::channel();
        i.requests.insert(1, (done, at(100), at(600)));
        assert!(!i.stalled(at(599)), "not overdue yet");
        assert!(i.stalled(at(601)), "overdue, and no answer since it was sent");
        i.last_answer = at(300);
        assert!(!i.stalled(at(601)), "the connection answered something after it was sent");
    }
}
