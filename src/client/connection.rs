//! One client connection after its handshake: the request loop and the one ordered outbound
//! stream of replies and watch events (see the parent module for the ordering rules).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use std::time::Instant;

use futures::stream::FuturesOrdered;
use futures::FutureExt;
use futures::SinkExt;
use futures::StreamExt;
use jute::ClientMessage;
use jute::ConnectResponse;
use jute::ReplyHeader;
use jute::Response;
use jute::ServerCodec;
use jute::ServerMessage;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

use super::admission;
use super::handshake::handshake;
use super::handshake::Handshake;
use super::request::Done;
use super::request::Job;
use super::request::Requests;
use super::Port;
use crate::dispatch::Event;
use crate::stats;

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

/// Frees a connection's empty buffer. An idle client only pings, so right after the
/// handshake, and once a ping is answered with nothing else pending, both buffers go (2.5 KiB
/// of an idle session's ~8): the next frame is read into a buffer that starts at a few bytes
/// and grows to the frame's length (one or two more reads for the ping after), and a request
/// other than a ping gets [`READ_BUFFER`] back at once, so a busy connection keeps its
/// buffers.
fn release(buf: &mut bytes::BytesMut) {
    if buf.is_empty() && buf.capacity() > 0 {
        *buf = bytes::BytesMut::new();
    }
}
/// Most queued watch events written out with one flush.
const EVENTS_PER_WRITE: usize = 1024;

/// Queued replies past which the writer flushes before taking more: tokio-util's default,
/// which `with_capacity` would otherwise lower to [`WRITE_BUFFER`].
const WRITE_BACKPRESSURE: usize = 8 * 1024;

/// A getData reply whose value is at least this long is written from the value's own buffer
/// (see [`feed_reply`]). Below it, copying the value into the write buffer costs less than
/// the extra flush: a 64 KiB copy takes a few microseconds, as a write syscall does.
const SEND_VALUE_DIRECT_AT: usize = 64 * 1024;

/// Feeds one reply to the writer, as `writer.feed` does, but a getData reply with a large
/// value (see [`SEND_VALUE_DIRECT_AT`]) leaves without its value being copied into the write
/// buffer: what the buffer holds goes out first (the reply's header included), then the value
/// straight from the `Bytes` the tree lent, then the rest of the reply is fed as usual. Gets
/// of 512 KiB values spent a fifth of the server's CPU in that copy. False as `within` is.
async fn feed_reply<W>(writer: &mut FramedWrite<W, ServerCodec>, stall: Duration, msg: ServerMessage) -> bool
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    if let ServerMessage::Reply { header, response } = &msg {
        if let Some(parts) = jute::codec::split_reply(header, response, SEND_VALUE_DIRECT_AT) {
            return within(stall, writer.feed(ServerMessage::Raw(parts.head))).await
                && within(stall, writer.flush()).await
                && within(stall, writer.get_mut().write_all(&parts.data)).await
                && within(stall, writer.feed(ServerMessage::Raw(parts.tail))).await;
        }
    }
    within(stall, writer.feed(msg)).await
}

/// Runs a write to the client, giving up after `limit` if the client reads nothing meanwhile
/// (its socket buffer stays full): a client that sends and never reads holds no more than one
/// session timeout's worth of the server. The common case, a write that is done at once,
/// costs no timer.
async fn within<F, E>(limit: Duration, f: F) -> bool
where
    F: std::future::Future<Output = Result<(), E>>,
{
    let mut f = std::pin::pin!(f);
    if let Some(r) = f.as_mut().now_or_never() {
        return r.is_ok();
    }
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            tracing::info!(?limit, "the client read no reply for its session timeout; closing the connection");
            false
        }
    }
}

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
    read_only: bool,
) -> Control {
    loop {
        tokio::select! {
            Ok(()) = stop.changed(), if watch_stop => return Control::Stop,
            Ok(()) = serving.changed() => {
                // A full session ends when the member stops serving; a read-only one when it
                // serves again (its client comes back for a full session, as ZooKeeper's
                // read-only server closes them all when the quorum is back).
                if *serving.borrow() == read_only {
                    return Control::Unserved;
                }
            }
            else => std::future::pending::<()>().await,
        }
    }
}

/// One client connection, plaintext: its socket's two halves need no lock between them.
pub(super) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    port: &Port,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let (rd, wr) = stream.into_split();
    serve_halves(rd, wr, peer, None, port, conn_id, cs, stop).await;
}

/// One client connection over TLS; `certified` is the subject DN of the client's verified
/// certificate, if it sent one.
pub(super) async fn serve_tls(
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    peer: SocketAddr,
    certified: Option<String>,
    port: &Port,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let (rd, wr) = tokio::io::split(stream);
    serve_halves(rd, wr, peer, certified.as_deref(), port, conn_id, cs, stop).await;
}

#[allow(clippy::too_many_arguments)]
async fn serve_halves<R, W>(
    rd: R,
    wr: W,
    peer: SocketAddr,
    certified: Option<&str>,
    port: &Port,
    conn_id: u64,
    cs: &stats::ConnStats,
    stop: tokio::sync::watch::Receiver<bool>,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let d = &port.dispatcher;
    let max = d.config().max_buffer;
    let mut reader = FramedRead::with_capacity(rd, ServerCodec::new(max), READ_BUFFER);
    let mut writer = FramedWrite::with_capacity(wr, ServerCodec::new(max), WRITE_BUFFER);
    writer.set_backpressure_boundary(WRITE_BACKPRESSURE);

    // The handshake runs boxed: its futures (a session's creation goes through the log) are
    // larger than the request loop's, and would otherwise size every connection's task for
    // its whole life (`serve`'s future: 2,704 bytes before, 1,568 with the handshake boxed).
    let Some(Handshake { session, caller, read_only }) =
        Box::pin(handshake(&mut reader, &mut writer, port, peer, certified, cs)).await
    else {
        return;
    };
    let session_id = session.id;
    let (close_tx, mut close_rx) = oneshot::channel();
    // futures' channel, not tokio's: tokio's allocates a block of 32 events up front, 1.8 KiB
    // of every idle connection (heaptrack, 10,000 sessions); this one allocates per event.
    let (ev_tx, mut ev_rx) = futures::channel::mpsc::unbounded();
    d.attach(&caller, session.timeout, conn_id, close_tx, ev_tx.clone());
    let resp = ConnectResponse {
        protocol_version: 0,
        time_out: session.timeout,
        session_id,
        passwd: session.passwd,
        read_only: read_only.map(|_| session.read_only),
    };
    port.stats.packet_sent(None);
    cs.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if writer.send(ServerMessage::Connect(resp)).await.is_err() {
        d.detach(session_id, conn_id, &ev_tx);
        return;
    }
    tracing::debug!(%peer, session = format_args!("{session_id:#x}"), timeout = session.timeout, "session established");
    cs.session_id.store(session_id, std::sync::atomic::Ordering::Relaxed);
    cs.timeout_ms.store(i64::from(session.timeout), std::sync::atomic::Ordering::Relaxed);
    // A resumed session may hold watches set through its earlier connection.
    let mut requests = Requests::new(d.clone(), port.stats.clone(), caller, session.resumed, session.read_only);

    // Shutdown and loss of quorum, watched by one future kept across the loop's turns (made
    // anew on each turn, the two watches' wait registrations cost 2% of the server's CPU
    // under many small requests).
    let read_only = session.read_only;
    let mut control = Box::pin(control(stop.clone(), d.serving(), true, read_only));
    let mut jobs: FuturesOrdered<Job> = FuturesOrdered::new();
    // The highest zxid a reply on this connection has carried.
    let mut sent_zxid = 0i64;
    let mut events: VecDeque<Event> = VecDeque::new();
    let mut reading = true;
    // A write to the client may wait this long for it to read (see `within`).
    let stall = Duration::from_millis(session.timeout.max(1) as u64);
    // Overload protection (`admission`): this connection's requests in process, the sizes of
    // its large ones by their sequence number, and a request read that the request throttle
    // holds, with when to look again.
    let admission = &port.admission;
    let mut mine = 0usize;
    let mut read_seq = 0u64;
    let mut done_seq = 0u64;
    let mut large: VecDeque<(u64, u64)> = VecDeque::new();
    let mut held: Option<(jute::RequestHeader, jute::Request, Instant)> = None;
    // Made only while a request is held: an idle connection carries no timer.
    let mut recheck: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    // Replies fed to the writer and not flushed yet: they go out in one write once no
    // request already read is left to answer.
    let mut unflushed = false;
    // Nothing but pings read since the last buffer release (the handshake counts as one): once
    // they are answered, the buffers go (see `release`).
    let mut pinged = true;

    loop {
        if unflushed && !(reading && jute::codec::holds_frame(reader.read_buffer())) {
            if !within(stall, writer.flush()).await {
                break;
            }
            unflushed = false;
        }
        if pinged && !unflushed && jobs.is_empty() && events.is_empty() {
            release(reader.read_buffer_mut());
            release(writer.write_buffer_mut());
            pinged = false;
        }
        let throttled = admission.should_throttle(mine);
        if throttled && reading && held.is_none() {
            metrics::counter!(admission::names::THROTTLED_READS).increment(1);
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
                    mine -= 1;
                    done_seq += 1;
                    let size = match large.front() {
                        Some(&(seq, size)) if seq == done_seq => {
                            large.pop_front();
                            size
                        }
                        _ => 0,
                    };
                    admission.finished(size);
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
                        port.stats.packet_sent(None);
                        if !within(stall, writer.feed(notification(e))).await {
                            break;
                        }
                    }
                    cs.replied(short, xid, reply.zxid, started);
                    port.stats.response_size.record(16 + reply.response.encoded_len() as i64);
                    port.stats.packet_sent(Some((op, started.elapsed())));
                    let msg = ServerMessage::Reply {
                        header: ReplyHeader { xid, zxid: reply.zxid, err: reply.err.code() },
                        response: reply.response,
                    };
                    if !feed_reply(&mut writer, stall, msg).await || close || (!reading && jobs.is_empty()) {
                        end = true;
                        break;
                    }
                    next = jobs.next().now_or_never().flatten();
                }
                if end {
                    let _ = within(stall, writer.flush()).await;
                    break;
                }
                unflushed = true;
            }
            Some(e) = ev_rx.next() => {
                events.push_back(e);
                // Every event already queued goes out in this one write (a watch storm queues
                // hundreds per connection at once; a write each would cost a syscall each).
                // They are of applied changes, so sending them ahead of a later reply keeps
                // ZooKeeper's order.
                while events.len() < EVENTS_PER_WRITE {
                    let Ok(e) = ev_rx.try_recv() else { break };
                    events.push_back(e);
                }
                let mut failed = false;
                while let Some(e) = events.pop_front() {
                    port.stats.packet_sent(None);
                    if !within(stall, writer.feed(notification(e))).await {
                        failed = true;
                        break;
                    }
                }
                if failed || !within(stall, writer.flush()).await {
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
                    control = Box::pin(self::control(stop.clone(), d.serving(), false, read_only));
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
            // The request throttle held the last request read: look again.
            () = async { match recheck.as_mut() { Some(sleep) => sleep.await, None => std::future::pending().await } }, if held.is_some() => {
                if let Some(wait) = admission.must_wait(true) {
                    if let Some(sleep) = recheck.as_mut() {
                        sleep.as_mut().reset(tokio::time::Instant::now() + wait);
                    }
                    continue;
                }
                recheck = None;
                let Some((header, request, read_at)) = held.take() else { continue };
                admission.hold(false);
                let (job, last) = requests.job(header.xid, request, read_at);
                jobs.push_back(job);
                reading &= !last;
            }
            frame = reader.next(), if reading && held.is_none() && !throttled => {
                let (header, request) = match frame {
                    Some(Ok(ClientMessage::Request { header, request })) => (header, request),
                    Some(Ok(ClientMessage::Malformed(m))) => {
                        tracing::debug!(%peer, error = %m, "malformed request");
                        port.stats.packet_received(cs);
                        cs.outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        mine += 1;
                        read_seq += 1;
                        admission.started(0);
                        let (job, last) = requests.malformed(&m);
                        jobs.push_back(job);
                        reading &= !last;
                        continue;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "closing connection");
                        break;
                    }
                    _ => break,
                };
                d.touch(session_id);
                port.stats.packet_received(cs);
                pinged = matches!(request, jute::Request::Ping);
                if !pinged && reader.read_buffer().capacity() < READ_BUFFER {
                    reader.read_buffer_mut().reserve(READ_BUFFER);
                }
                let Ok(size) = admission.large(reader.decoder().last_frame_len()) else {
                    tracing::warn!(%peer, bytes = reader.decoder().last_frame_len(), "rejecting a large request: the large-request budget is spent; closing");
                    break;
                };
                cs.outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                mine += 1;
                read_seq += 1;
                admission.started(size);
                if size > 0 {
                    large.push_back((read_seq, size));
                }
                let now = Instant::now();
                if !matches!(request, jute::Request::Ping) {
                    if let Some(wait) = admission.must_wait(false) {
                        metrics::counter!(admission::names::REQUEST_THROTTLE_WAIT_COUNT).increment(1);
                        admission.hold(true);
                        held = Some((header, request, now));
                        recheck = Some(Box::pin(tokio::time::sleep(wait)));
                        continue;
                    }
                }
                let (job, last) = requests.job(header.xid, request, now);
                jobs.push_back(job);
                reading &= !last;
            }
            else => break,
        }
    }
    if unflushed {
        // Answers to requests read before a bad frame or a close still go out.
        let _ = within(stall, writer.flush()).await;
    }
    // Requests still in process die with the connection (a held one too: ZooKeeper's
    // `request_throttle_drop_stale`); they leave the server-wide count.
    if held.is_some() {
        admission.hold(false);
    }
    admission.abandon(mine, large.iter().map(|&(_, size)| size).sum());
    d.detach(session_id, conn_id, &ev_tx);
}
