//! One connection's requests, each turned into a job whose reply the connection writes in
//! request order: `addauth`, `sasl` and refusals at once, reads now or once the session's earlier
//! writes are applied here, `sync` after a read-index round, writes once replicated.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;
use jute::ErrorCode;
use jute::Request;

use crate::dispatch::order;
use crate::dispatch::order::WaitingReads;
use crate::dispatch::Caller;
use crate::dispatch::Dispatcher;
use crate::dispatch::Prepped;
use crate::dispatch::Reply;
use crate::stats::ServerStats;

/// A request's reply, once ready, with what the statistics need.
pub(super) struct Done {
    pub xid: i32,
    pub reply: Reply,
    pub close: bool,
    /// Metric label.
    pub op: &'static str,
    /// ZooKeeper's short name for `cons`.
    pub short: &'static str,
    pub started: Instant,
}

pub(super) type Job = BoxFuture<'static, Done>;

/// A job that is ready now.
pub(super) fn ready(xid: i32, reply: Reply, close: bool, op: (&'static str, &'static str), started: Instant) -> Job {
    futures::future::ready(Done { xid, reply, close, op: op.0, short: op.1, started }).boxed()
}

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

/// One connection's requests: the caller, and what orders its reads after its writes.
pub(super) struct Requests {
    d: Dispatcher,
    stats: Arc<ServerStats>,
    pub caller: Caller,
    /// The session may hold a watch: it asked for one on this connection, or it resumed from
    /// another. Until then a write may be answered once committed (see the parent module).
    watching: bool,
    /// Made at first use: an idle connection never needs one, and a watch channel is ~350
    /// bytes of its memory. Made later, it starts from nothing written, which is right: every
    /// write of the connection updates it.
    written: Option<Arc<tokio::sync::watch::Sender<Written>>>,
    /// Writes sent so far.
    submitted: u64,
    /// Reads that wait for earlier writes, for the writes after them (see `order`).
    waiting_reads: WaitingReads,
    /// The connection's SASL exchange while one is under way.
    sasl: Option<crate::sasl::Conversation>,
    /// A read-only session (no quorum): writes and `sync` get NotReadOnly.
    read_only: bool,
}

impl Requests {
    pub fn new(d: Dispatcher, stats: Arc<ServerStats>, caller: Caller, watching: bool, read_only: bool) -> Requests {
        Requests {
            d,
            stats,
            caller,
            watching,
            written: None,
            submitted: 0,
            waiting_reads: WaitingReads::new(),
            sasl: None,
            read_only,
        }
    }

    /// What a read-only session gets instead of a write (ZooKeeper's
    /// `ReadOnlyRequestProcessor`): NotReadOnly for writes and `sync`; `closeSession` is
    /// answered and the connection closed (the session is not closed through the log: there
    /// is no quorum to close it).
    fn read_only_refusal(
        &self,
        xid: i32,
        request: &Request,
        op: (&'static str, &'static str),
        started: Instant,
    ) -> Option<(Job, bool)> {
        let zxid = self.d.last_zxid();
        match request {
            Request::CloseSession => Some((ready(xid, Reply::ok(zxid), true, op, started), true)),
            Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::DeleteContainer(_)
            | Request::SetData(_)
            | Request::SetAcl(_)
            | Request::Check(_)
            | Request::Multi(_)
            | Request::Reconfig(_)
            | Request::Sync(_) => {
                Some((ready(xid, Reply::error(zxid, ErrorCode::NotReadOnly), false, op, started), false))
            }
            _ => None,
        }
    }

    fn written(&mut self) -> &Arc<tokio::sync::watch::Sender<Written>> {
        self.written.get_or_insert_with(|| Arc::new(tokio::sync::watch::channel(Written::default()).0))
    }

    /// The job answering `request`, and whether the connection reads no more requests after
    /// it (`closeSession`, a failed `addauth`).
    pub fn job(&mut self, xid: i32, mut request: Request, started: Instant) -> (Job, bool) {
        let d = &self.d;
        let op = request.opcode().name();
        let short = crate::stats::short_op(request.opcode());
        if let Request::Auth(a) = &request {
            return match d.add_auth(&mut self.caller, &a.scheme, &a.auth) {
                Ok(()) => (ready(xid, Reply::ok(d.last_zxid()), false, (op, short), started), false),
                Err(code) => {
                    // ZooKeeper answers AuthFailed and closes the connection.
                    self.stats.auth_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (ready(xid, Reply::error(d.last_zxid(), code), true, (op, short), started), true)
                }
            };
        }
        if let Request::Sasl(s) = &request {
            let token = s.token.as_deref().unwrap_or_default();
            // ZooKeeper answers a sasl request at once, with zxid 0.
            return match d.sasl(&mut self.caller, &mut self.sasl, token) {
                Ok(token) => {
                    let reply = Reply {
                        zxid: 0,
                        err: ErrorCode::Ok,
                        response: jute::Response::Sasl(jute::SetSaslResponse { token }),
                    };
                    (ready(xid, reply, false, (op, short), started), false)
                }
                Err(code) => {
                    self.stats.auth_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (ready(xid, Reply::error(0, code), true, (op, short), started), true)
                }
            };
        }
        if !d.authenticated_enough(&self.caller) {
            // enforce.auth.enabled: ZooKeeper answers SessionClosedRequireSaslAuth and closes
            // the connection.
            tracing::warn!(
                session = format_args!("0x{:x}", self.caller.session_id),
                "request before authenticating with an enforced scheme: closing the connection"
            );
            self.stats.auth_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let reply = Reply::error(0, ErrorCode::SessionClosedRequireSaslAuth);
            return (ready(xid, reply, true, (op, short), started), true);
        }
        if self.read_only {
            if let Some(job) = self.read_only_refusal(xid, &request, (op, short), started) {
                return job;
            }
        }
        match d.prep(&self.caller, &mut request) {
            Prepped::Refuse(code) => {
                (ready(xid, Reply::error(d.last_zxid(), code), false, (op, short), started), false)
            }
            Prepped::Read if d.needs_read_index(&request) => {
                // readMode=linearizable: as if the client had sent sync first (shared rounds).
                self.watching |= Dispatcher::may_watch(&request);
                let scope = order::read_scope(&request);
                (self.after_sync(xid, request, scope, (op, short), started), false)
            }
            Prepped::Read => {
                self.watching |= Dispatcher::may_watch(&request);
                let written = self.written.as_ref().map_or_else(Written::default, |t| *t.borrow());
                let unapplied = d.unapplied();
                let now = if written.count >= self.submitted && unapplied.is_none() {
                    d.read_applied(&self.caller, &request, written.zxid)
                } else {
                    None
                };
                if let Some(reply) = now {
                    return (ready(xid, reply, false, (op, short), started), false);
                }
                let target = self.submitted;
                let mut rx = self.written().subscribe();
                let (d, caller) = (self.d.clone(), self.caller.clone());
                let ticket = self.waiting_reads.register(order::read_scope(&request));
                let job = async move {
                    let fence = rx.wait_for(|v| v.count >= target).await.map_or(0, |v| v.zxid);
                    let reply = match unapplied {
                        Some(index) => d.read_after_unapplied(&caller, &request, index, fence).await,
                        None => d.read_after(&caller, &request, fence).await,
                    };
                    ticket.ran();
                    Done { xid, reply, close: false, op, short, started }
                };
                (job.boxed(), false)
            }
            Prepped::Sync => (self.after_sync(xid, request, order::Scope::All, (op, short), started), false),
            Prepped::Reconfig(reconfig, allowed) => {
                // After the session's earlier writes, like a read.
                let target = self.submitted;
                let mut rx = self.written().subscribe();
                let d = self.d.clone();
                let job = async move {
                    let _ = rx.wait_for(|v| v.count >= target).await;
                    let reply = d.reconfig(reconfig, allowed).await;
                    Done { xid, reply, close: false, op, short, started }
                };
                (job.boxed(), false)
            }
            Prepped::Write(write) => {
                self.submitted += 1;
                let close = write.closes_session();
                let committed_is_enough = !self.watching && !close;
                let done = self.written().clone();
                // Proposed after the session's earlier reads still waiting, if it may change
                // what one of them looks at (see `order`).
                let hold = self.waiting_reads.hold(&write);
                let d = self.d.clone();
                let job = async move {
                    if let Some(hold) = hold {
                        hold.await;
                    }
                    let reply = d.write(write, committed_is_enough).await;
                    // ZooKeeper tears down a connection whose session moved to another member.
                    let close = close || reply.err == ErrorCode::SessionMoved;
                    // Only a read waiting for it is told (see `Written`).
                    done.send_if_modified(|v| {
                        v.count += 1;
                        v.zxid = v.zxid.max(reply.zxid);
                        done.receiver_count() > 0
                    });
                    Done { xid, reply, close, op, short, started }
                };
                (job.boxed(), close)
            }
        }
    }

    /// A job that waits for the session's earlier writes, then a shared `sync` round, then
    /// answers `request` from the local tree (`sync` itself, or a read under
    /// readMode=linearizable); later writes in `scope` wait for it (see `order`).
    fn after_sync(
        &mut self,
        xid: i32,
        request: Request,
        scope: order::Scope,
        (op, short): (&'static str, &'static str),
        started: Instant,
    ) -> Job {
        let target = self.submitted;
        let mut rx = self.written().subscribe();
        let (d, caller) = (self.d.clone(), self.caller.clone());
        let ticket = self.waiting_reads.register(scope);
        let job = async move {
            let fence = rx.wait_for(|v| v.count >= target).await.map_or(0, |v| v.zxid);
            let reply = match d.sync_batched().await {
                Ok(()) => d.read_after(&caller, &request, fence).await,
                Err(e) => Reply::error(d.last_zxid(), crate::dispatch::reply::propose_error_code(&e)),
            };
            ticket.ran();
            Done { xid, reply, close: false, op, short, started }
        };
        job.boxed()
    }

    /// The job answering a frame that could not be decoded, and whether the connection reads
    /// no more after it: an unknown opcode is answered as ZooKeeper's
    /// `UnimplementedRequestProcessor` does (err -6 with zxid -1, then close); anything else
    /// gets MarshallingError and the connection goes on.
    pub fn malformed(&self, m: &jute::MalformedRequest) -> (Job, bool) {
        let unknown_op = matches!(m.error.kind, jute::DecodeErrorKind::UnknownValue { .. }) && m.error.field == "type";
        if unknown_op {
            let reply = Reply::error(-1, ErrorCode::Unimplemented);
            (ready(m.header.xid, reply, true, ("unknown", "NA"), Instant::now()), true)
        } else {
            let reply = Reply::error(self.d.last_zxid(), ErrorCode::MarshallingError);
            (ready(m.header.xid, reply, false, ("unknown", "NA"), Instant::now()), false)
        }
    }
}
