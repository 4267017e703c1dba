//! The client port: the accept loop with per-address connection limits, and one task per
//! connection running the handshake, the request loop and one ordered outbound stream.
//! Counterpart of ZooKeeper's `NIOServerCnxnFactory`/`NIOServerCnxn`.
//!
//! Ordering rules kept here:
//! - replies leave in request order (a `FuturesOrdered` of per-request jobs);
//! - a read waits for the same session's earlier writes to be applied, and a later write that
//!   may change what it looks at waits for it to have read ([`order`]);
//! - before a reply is written, every queued watch event with a zxid at or below the reply's
//!   is written, so a client sees a watch event before any reply that reflects its change;
//! - a write is answered once applied here, or, while the session holds no watch (it asked
//!   for none on this connection and did not resume from another), once committed: with no
//!   watch there is no event to come first, and the rule above keeps its reads behind it.
//!   On a follower the leader's word comes ~55 µs before the local apply (BENCHMARKS.md).
//!   A reply is never given a zxid below that of a write the session was answered for.
//!
//! This module sees only the [`Dispatcher`], never the tree or Raft.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::FutureExt;
use futures::SinkExt;
use futures::StreamExt;
use jute::ClientMessage;
use jute::ConnectResponse;
use jute::ErrorCode;
use jute::ReplyHeader;
use jute::Request;
use jute::Response;
use jute::ServerCodec;
use jute::ServerMessage;
use rand::RngCore;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

use crate::dispatch::Caller;
use crate::dispatch::Dispatcher;
use crate::dispatch::Prepped;
use crate::dispatch::Reply;
use crate::tree::acl::AuthId;
use crate::txn::TxnOp;
use crate::watch::Event;

/// A connection's writes answered so far, and the highest zxid among them: the session's
/// reads wait for both (a write may be answered before this server applied it).
///
/// Kept in a watch channel whose receivers are only the reads waiting for it. A write's
/// answer updates it under the channel's lock and notifies only if a receiver exists then
/// (notifying none still took eight locks: 2% of a set-heavy server's CPU). A read that
/// subscribes later checks the value first (`Receiver::wait_for`), under the same lock, so it
/// sees the update; one that subscribed earlier is counted, and notified.
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    count: u64,
    zxid: i64,
}

/// A connection's [`Written`] channel, made at its first use: an idle connection never needs
/// one, and a watch channel is ~350 bytes of its memory. Made later, it starts from nothing
/// written, which is right: every write of the connection updates it.
fn written_tx(
    slot: &mut Option<Arc<tokio::sync::watch::Sender<Written>>>,
) -> &Arc<tokio::sync::watch::Sender<Written>> {
    slot.get_or_insert_with(|| Arc::new(tokio::sync::watch::channel(Written::default()).0))
}

/// How long shutdown waits for connections to finish their in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a fresh connection may take to send its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per client address (`maxClientCnxns`).
#[derive(Default)]
struct PerAddress {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

struct Slot<'a> {
    owner: &'a PerAddress,
    addr: IpAddr,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut m = self.owner.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = m.get_mut(&self.addr) {
            *c -= 1;
            if *c == 0 {
                m.remove(&self.addr);
            }
        }
    }
}

impl PerAddress {
    fn take(&self, addr: IpAddr, max: usize) -> Option<Slot<'_>> {
        let mut m = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = m.entry(addr).or_insert(0);
        if max != 0 && *c >= max {
            return None;
        }
        *c += 1;
        Some(Slot { owner: self, addr })
    }
}

/// Accepts client connections until `shutdown` fires.
/// On shutdown, stops accepting, lets every connection finish the requests it already read
/// (waiting at most [`DRAIN_TIMEOUT`]), then returns.
pub async fn listen(listener: TcpListener, dispatcher: Dispatcher, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let limits = Arc::new(PerAddress::default());
    let next_conn = Arc::new(AtomicU64::new(1));
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => {
                drop(listener);
                tracker.close();
                tracing::info!(connections = tracker.len(), "client port closed; finishing in-flight requests");
                if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
                    tracing::warn!(connections = tracker.len(), "connections still busy after the drain timeout");
                } else {
                    tracing::info!("all client connections drained");
                }
                return;
            }
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let d = dispatcher.clone();
        let limits = limits.clone();
        let conn_id = next_conn.fetch_add(1, Ordering::Relaxed);
        let stop = shutdown.clone();
        tracker.spawn(async move {
            metrics::counter!(stats::names::CONNECTION_REQUESTS).increment(1);

            let Some(_slot) = limits.take(peer.ip(), d.config.max_client_cnxns) else {
                tracing::warn!(%peer, max = d.config.max_client_cnxns, "too many connections from this address");
                metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "max_client_cnxns").increment(1);
                return;
            };
            let _ = stream.set_nodelay(true);
            let cs = d.stats.open(conn_id, peer);
            serve(stream, peer, d.clone(), conn_id, &cs, stop).await;
            d.stats.close(conn_id);
        });
    }
}

mod order;
pub mod stats;

/// A request's reply, once ready, with what the statistics need.
struct Done {
    xid: i32,
    reply: Reply,
    close: bool,
    /// Metric label.
    op: &'static str,
    /// ZooKeeper's short name for `cons`.
    short: &'static str,
    started: Instant,
}

type Job = BoxFuture<'static, Done>;

fn ready(xid: i32, reply: Reply, close: bool, op: (&'static str, &'static str), started: Instant) -> Job {
    futures::future::ready(Done { xid, reply, close, op: op.0, short: op.1, started }).boxed()
}

fn expired_response(read_only: Option<bool>) -> ServerMessage {
    ServerMessage::Connect(ConnectResponse {
        protocol_version: 0,
        time_out: 0,
        session_id: 0,
        passwd: Bytes::from_static(&[0; 16]),
        read_only: read_only.map(|_| false),
    })
}

fn notification(e: Event) -> ServerMessage {
    ServerMessage::Reply {
        header: ReplyHeader { xid: -1, zxid: e.zxid, err: 0 },
        response: Response::Notification(e.event),
    }
}

/// A connection's first read buffer. Both buffers grow as a connection's traffic needs;
/// tokio-util's 8 KiB each made an idle session cost 19.3 KiB of RSS, these 13.6 KiB
/// (10,000 sessions of `warden-bench --workload sessions`; 6.9 KiB since the task, the event
/// channel, two watch channels and the session's ephemerals set were trimmed, of which this
/// buffer is now the largest part). A read buffer of 512 bytes cost 16×8 gets 7-10%: the decoded frames share
/// the buffer, so a small one is replaced often.
const READ_BUFFER: usize = 2048;
/// A connection's first write buffer (see [`READ_BUFFER`]).
const WRITE_BUFFER: usize = 512;
/// Queued replies past which the writer flushes before taking more: tokio-util's default,
/// which `with_capacity` would otherwise lower to [`WRITE_BUFFER`].
const WRITE_BACKPRESSURE: usize = 8 * 1024;

/// Why a connection must stop reading, or close.
enum Control {
    /// The server is shutting down.
    Stop,
    /// The server lost its quorum (or its leader).
    Unserved,
}

/// Resolves on shutdown (while `watch_stop`) or once the server stops serving.
async fn control(
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut serving: tokio::sync::watch::Receiver<bool>,
    watch_stop: bool,
) -> Control {
    loop {
        tokio::select! {
            Ok(()) = stop.changed(), if watch_stop => return Control::Stop,
            Ok(()) = serving.changed() => {
                if !*serving.borrow() {
                    return Control::Unserved;
                }
            }
            else => std::future::pending::<()>().await,
        }
    }
}

/// What a handshake settled: the session (new or resumed) and what the connection needs of
/// the client's request.
struct Session {
    id: i64,
    passwd: Bytes,
    timeout: i32,
    /// The session may hold watches already (it resumed).
    watching: bool,
    ip: AuthId,
    read_only: Option<bool>,
}

/// Reads the first frame and answers it: a four-letter word, or a session to create or resume.
/// `None` when the connection is to close (answered already where an answer is due).
async fn handshake(
    reader: &mut FramedRead<tokio::net::tcp::OwnedReadHalf, ServerCodec>,
    writer: &mut FramedWrite<tokio::net::tcp::OwnedWriteHalf, ServerCodec>,
    d: &Dispatcher,
    peer: SocketAddr,
    cs: &stats::ConnStats,
) -> Option<Session> {
    let first = match tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await {
        Ok(Some(Ok(m))) => m,
        Ok(Some(Err(e))) => {
            tracing::debug!(%peer, error = %e, "bad first frame; closing");
            return None;
        }
        Ok(None) => {
            tracing::debug!(%peer, "closed before its handshake");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "no handshake within {HANDSHAKE_TIMEOUT:?}; closing");
            return None;
        }
    };
    let req = match first {
        ClientMessage::FourLetterWord { word, arg } => {
            d.stats.packet_received(cs);
            let text = crate::admin::four_letter(d, &word, arg);
            let _ = writer.send(ServerMessage::Raw(Bytes::from(text))).await;
            return None;
        }
        ClientMessage::Connect(req) => req,
        _ => {
            tracing::debug!(%peer, "first frame is not a handshake; closing");
            return None;
        }
    };
    d.stats.packet_received(cs);

    if !*d.serving.borrow() {
        // ZooKeeper does not serve clients without a quorum; they try the next server.
        metrics::counter!(stats::names::CONNECTIONS_REJECTED, "reason" => "no_quorum").increment(1);
        tracing::debug!(%peer, "not serving (no quorum); closing");
        return None;
    }
    // ZooKeeperServer.processConnectRequest: never serve a client that has seen newer state.
    let last_zxid = d.last_zxid();
    if req.last_zxid_seen > last_zxid {
        tracing::info!(%peer, client = req.last_zxid_seen, server = last_zxid, "client is ahead of this server; closing");
        return None;
    }
    let timeout = d.config.negotiate_timeout(req.time_out);
    let ip = AuthId { scheme: "ip".into(), id: peer.ip().to_string() };
    // A resumed session may hold watches set through its earlier connection.
    let watching = req.session_id != 0;
    let (session_id, passwd) = if req.session_id == 0 {
        let id = d.sessions.next_id();
        let mut pw = [0u8; 16];
        rand::rng().fill_bytes(&mut pw);
        let passwd = Bytes::copy_from_slice(&pw);
        let caller = Caller { session_id: id, auth: std::sync::Arc::from([ip.clone()]) };
        let txn = d.txn(&caller, TxnOp::CreateSession { session_id: id, timeout_ms: timeout, passwd: passwd.clone() });
        match d.propose(txn).await {
            Ok(r) if r.outcome.is_ok() => {
                metrics::counter!("warden_sessions_created").increment(1);
                (id, passwd)
            }
            other => {
                tracing::warn!(%peer, ?other, "session creation failed");
                return None;
            }
        }
    } else {
        let known = d.shared.read().session(req.session_id).map(|s| s.passwd.clone());
        match known {
            Some(pw) if pw == req.passwd => (req.session_id, pw),
            _ => {
                let _ = writer.send(expired_response(req.read_only)).await;
                return None;
            }
        }
    };
    Some(Session { id: session_id, passwd, timeout, watching, ip, read_only: req.read_only })
}

/// One client connection.
async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    d: Dispatcher,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    // Each request's job holds the dispatcher: one reference count to bump, not one per
    // field (cloning it field by field was 2% of a set-heavy server's CPU).
    let d = Arc::new(d);
    let max = d.config.max_buffer;
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::with_capacity(rd, ServerCodec::new(max), READ_BUFFER);
    let mut writer = FramedWrite::with_capacity(wr, ServerCodec::new(max), WRITE_BUFFER);
    writer.set_backpressure_boundary(WRITE_BACKPRESSURE);

    // The handshake runs boxed: its futures (a session's creation goes through the log) are
    // larger than the request loop's, and would otherwise size every connection's task for
    // its whole life (`serve`'s future: 2,704 bytes before, 1,568 with the handshake boxed).
    let Some(Session { id: session_id, passwd, timeout, mut watching, ip, read_only }) =
        Box::pin(handshake(&mut reader, &mut writer, &d, peer, cs)).await
    else {
        return;
    };
    let (close_tx, mut close_rx) = oneshot::channel();
    d.sessions.attach(session_id, timeout, conn_id, close_tx);
    // futures' channel, not tokio's: tokio's allocates a block of 32 events up front, 1.8 KiB
    // of every idle connection (heaptrack, 10,000 sessions); this one allocates per event.
    let (ev_tx, mut ev_rx) = futures::channel::mpsc::unbounded();
    let mut caller = Caller { session_id, auth: std::sync::Arc::from([ip]) };
    d.watches.connect(session_id, ev_tx.clone(), caller.auth.clone());
    let resp = ConnectResponse {
        protocol_version: 0,
        time_out: timeout,
        session_id,
        passwd,
        read_only: read_only.map(|_| false),
    };
    d.stats.packet_sent(None);
    cs.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if writer.send(ServerMessage::Connect(resp)).await.is_err() {
        d.watches.disconnect(session_id, &ev_tx);
        d.sessions.detach(session_id, conn_id);
        return;
    }
    tracing::debug!(%peer, session = format_args!("{session_id:#x}"), timeout, "session established");
    cs.session_id.store(session_id, std::sync::atomic::Ordering::Relaxed);
    cs.timeout_ms.store(i64::from(timeout), std::sync::atomic::Ordering::Relaxed);

    // Shutdown and loss of quorum, watched by one future kept across the loop's turns (made
    // anew on each turn, the two watches' wait registrations cost 2% of the server's CPU
    // under many small requests).
    let mut control = Box::pin(control(stop.clone(), d.serving.clone(), true));
    let mut jobs: FuturesOrdered<Job> = FuturesOrdered::new();
    // Made at first use (see `written_tx`).
    let mut done_tx: Option<Arc<tokio::sync::watch::Sender<Written>>> = None;
    let mut submitted = 0u64;
    // Reads that wait for earlier writes, for the writes after them (see `order`).
    let mut waiting_reads = order::WaitingReads::new();
    // The highest zxid a reply on this connection has carried.
    let mut sent_zxid = 0i64;
    let mut events: VecDeque<Event> = VecDeque::new();
    let mut reading = true;
    // Replies fed to the writer and not flushed yet: they go out in one write once no
    // request already read is left to answer.
    let mut unflushed = false;

    loop {
        if unflushed && !(reading && jute::codec::holds_frame(reader.read_buffer())) {
            if writer.flush().await.is_err() {
                break;
            }
            unflushed = false;
        }
        tokio::select! {
            biased;
            Some(done) = jobs.next() => {
                // Every reply that is ready goes out in one write, with those of requests
                // already read (see `unflushed`): a client with several requests in flight
                // (pipelined reads, or writes one batch commits together) costs one syscall.
                let mut next = Some(done);
                let mut end = false;
                while let Some(Done { xid, mut reply, close, op, short, started }) = next.take() {
                    cs.outstanding.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    // Reply zxids never go down on a connection, as ZooKeeper's (which answers
                    // in log order) never do. A reply made when its request was read (a refusal,
                    // an auth answer) or a failed write's may carry this server's applied zxid,
                    // behind a write of the session answered before it (possibly before that
                    // write was applied here); replies leave in request order, so it is raised.
                    if reply.zxid >= 0 {
                        reply.zxid = reply.zxid.max(sent_zxid);
                        sent_zxid = reply.zxid;
                    }
                    while let Ok(e) = ev_rx.try_recv() {
                        events.push_back(e);
                    }
                    while events.front().is_some_and(|e| e.zxid <= reply.zxid) {
                        let Some(e) = events.pop_front() else { break };
                        d.stats.packet_sent(None);
                        if writer.feed(notification(e)).await.is_err() {
                            break;
                        }
                    }
                    cs.replied(short, xid, reply.zxid, started);
                    d.stats.response_size.record(16 + reply.response.encoded_len() as i64);
                    d.stats.packet_sent(Some((op, started.elapsed())));
                    let msg = ServerMessage::Reply {
                        header: ReplyHeader { xid, zxid: reply.zxid, err: reply.err.code() },
                        response: reply.response,
                    };
                    if writer.feed(msg).await.is_err() || close || (!reading && jobs.is_empty()) {
                        end = true;
                        break;
                    }
                    next = jobs.next().now_or_never().flatten();
                }
                if end {
                    let _ = writer.flush().await;
                    break;
                }
                unflushed = true;
            }
            Some(e) = ev_rx.next() => {
                events.push_back(e);
                while let Some(e) = events.pop_front() {
                    d.stats.packet_sent(None);
                    if writer.feed(notification(e)).await.is_err() {
                        break;
                    }
                }
                if writer.flush().await.is_err() {
                    break;
                }
            }
            // Closed from elsewhere: a newer connection took the session over, or the session
            // was closed or expired through the log. Not while answering this connection's own
            // closeSession (reading is off then), whose reply must still go out.
            _ = &mut close_rx, if reading => break,
            c = &mut control => match c {
                Control::Stop => {
                    // Shutdown: read no more requests; answer those already read, then close.
                    // (While closing its session the connection reads no more anyway.)
                    control = Box::pin(self::control(stop.clone(), d.serving.clone(), false));
                    if reading {
                        reading = false;
                        if jobs.is_empty() {
                            break;
                        }
                    }
                }
                Control::Unserved => {
                    tracing::info!(%peer, "no quorum: closing the connection so the client moves on");
                    break;
                }
            },
            frame = reader.next(), if reading => {
                let (header, mut request) = match frame {
                    Some(Ok(ClientMessage::Request { header, request })) => (header, request),
                    Some(Ok(ClientMessage::Malformed(m))) => {
                        tracing::debug!(%peer, error = %m, "malformed request");
                        d.stats.packet_received(cs);
                        cs.outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let unknown_op = matches!(m.error.kind, jute::DecodeErrorKind::UnknownValue { .. })
                            && m.error.field == "type";
                        if unknown_op {
                            // UnimplementedRequestProcessor: err -6 with zxid -1, then the
                            // connection is closed.
                            let reply = Reply { zxid: -1, err: ErrorCode::Unimplemented, response: Response::Empty };
                            jobs.push_back(ready(m.header.xid, reply, true, ("unknown", "NA"), Instant::now()));
                            reading = false;
                        } else {
                            let reply =
                                Reply { zxid: d.last_zxid(), err: ErrorCode::MarshallingError, response: Response::Empty };
                            jobs.push_back(ready(m.header.xid, reply, false, ("unknown", "NA"), Instant::now()));
                        }
                        continue;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "closing connection");
                        break;
                    }
                    _ => break,
                };
                d.sessions.touch(session_id);
                d.stats.packet_received(cs);
                cs.outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let started = Instant::now();
                let op = request.opcode().name();
                let short = stats::short_op(request.opcode());
                let xid = header.xid;
                if let Request::Auth(a) = &request {
                    match d.authenticate(&a.scheme, &a.auth) {
                        Ok(ids) => {
                            let mut all = caller.auth.to_vec();
                            for id in ids {
                                if !all.contains(&id) {
                                    all.push(id);
                                }
                            }
                            caller.auth = all.into();
                            d.watches.set_auth(session_id, caller.auth.clone());
                            let reply = Reply { zxid: d.last_zxid(), err: ErrorCode::Ok, response: Response::Empty };
                            jobs.push_back(ready(xid, reply, false, (op, short), started));
                        }
                        Err(code) => {
                            // ZooKeeper answers AuthFailed and closes the connection.
                            d.stats.auth_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let reply = Reply { zxid: d.last_zxid(), err: code, response: Response::Empty };
                            jobs.push_back(ready(xid, reply, true, (op, short), started));
                            reading = false;
                        }
                    }
                    continue;
                }
                match d.prep(&caller, &mut request) {
                    Prepped::Refuse(code) => {
                        let reply = Reply { zxid: d.last_zxid(), err: code, response: Response::Empty };
                        jobs.push_back(ready(xid, reply, false, (op, short), started));
                    }
                    Prepped::Read => {
                        watching |= Dispatcher::may_watch(&request);
                        let written = done_tx.as_ref().map_or_else(Written::default, |t| *t.borrow());
                        let now = if written.count >= submitted {
                            d.read_applied(&caller, &request, written.zxid)
                        } else {
                            None
                        };
                        if let Some(reply) = now {
                            jobs.push_back(ready(xid, reply, false, (op, short), started));
                        } else {
                            let target = submitted;
                            let mut rx = written_tx(&mut done_tx).subscribe();
                            let d2 = d.clone();
                            let c2 = caller.clone();
                            let ticket = waiting_reads.register(order::read_scope(&request));
                            jobs.push_back(
                                async move {
                                    let fence = rx.wait_for(|v| v.count >= target).await.map_or(0, |v| v.zxid);
                                    let reply = d2.read_after(&c2, &request, fence).await;
                                    ticket.ran();
                                    Done { xid, reply, close: false, op, short, started }
                                }
                                .boxed(),
                            );
                        }
                    }
                    Prepped::Sync => {
                        let target = submitted;
                        let mut rx = written_tx(&mut done_tx).subscribe();
                        let d2 = d.clone();
                        let c2 = caller.clone();
                        let ticket = waiting_reads.register(order::Scope::All);
                        jobs.push_back(
                            async move {
                                let fence = rx.wait_for(|v| v.count >= target).await.map_or(0, |v| v.zxid);
                                let reply = match d2.sync().await {
                                    Ok(()) => d2.read_after(&c2, &request, fence).await,
                                    Err(e) => Reply {
                                        zxid: d2.last_zxid(),
                                        err: crate::dispatch::propose_error_code(&e),
                                        response: Response::Empty,
                                    },
                                };
                                ticket.ran();
                                Done { xid, reply, close: false, op, short, started }
                            }
                            .boxed(),
                        );
                    }
                    Prepped::Write(txn, write_op) => {
                        submitted += 1;
                        let close = write_op == jute::OpCode::CloseSession;
                        if close {
                            reading = false;
                        }
                        let committed_is_enough = !watching && !close;
                        let d2 = d.clone();
                        let done = written_tx(&mut done_tx).clone();
                        // Proposed after the session's earlier reads still waiting, if it may
                        // change what one of them looks at (see `order`).
                        let hold = waiting_reads.hold(&txn.op);
                        jobs.push_back(
                            async move {
                                if let Some(hold) = hold {
                                    hold.await;
                                }
                                let result = if committed_is_enough {
                                    d2.propose_committed(txn).await
                                } else {
                                    d2.propose(txn).await
                                };
                                let zxid = result.as_ref().map_or(0, |r| r.zxid);
                                // Only a read waiting for it is told (see `Written`).
                                done.send_if_modified(|v| {
                                    v.count += 1;
                                    v.zxid = v.zxid.max(zxid);
                                    done.receiver_count() > 0
                                });
                                let mut reply = d2.write_reply(write_op, result);
                                d2.shape_multi(&request, &mut reply);
                                Done { xid, reply, close, op, short, started }
                            }
                            .boxed(),
                        );
                    }
                }
            }
            else => break,
        }
    }
    if unflushed {
        // Answers to requests read before a bad frame or a close still go out.
        let _ = writer.flush().await;
    }
    d.watches.disconnect(session_id, &ev_tx);
    d.sessions.detach(session_id, conn_id);
}
