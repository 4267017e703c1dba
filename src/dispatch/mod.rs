//! ZooKeeper's request pipeline, by its own names:
//! - **prep** ([`Dispatcher::prep`], `PrepRequestProcessor`): classifies each typed request as
//!   a local read or a replicated write (the one read/write table), checks what ZooKeeper checks
//!   before its log (create mode flags, TTL support and range), and stamps time and the
//!   caller's identities into the [`Txn`].
//! - **propose** ([`Dispatcher::propose`]): `client_write` through Raft; returns once the entry
//!   is applied here ([`Dispatcher::propose_committed`]: once committed, for a session that
//!   holds no watch).
//! - **reads** ([`Dispatcher::read`], `FinalRequestProcessor` for reads): served from the local
//!   tree; watches are registered under the same tree lock the read used. A session's read
//!   waits until the tree has its last write ([`Dispatcher::read_after`]).
//! - **reply** ([`error_code`], [`Dispatcher::write_reply`]): the one place internal errors
//!   become ZooKeeper error codes.
//!
//! The client module sees only this handle, never the tree or the Raft handle.

pub mod propose;

use std::sync::Arc;

use bytes::Bytes;
use jute::AddWatchMode;
use jute::CreateMode;
use jute::ErrorCode;
use jute::MultiOp;
use jute::MultiResult;
use jute::OpCode;
use jute::Request;
use jute::Response;
use openraft::async_runtime::WatchReceiver;

use crate::config::Config;
use crate::raft::state_machine::SharedTree;
use crate::raft::Raft;
use crate::session::SessionTracker;
use crate::tree::acl::AclEntry;
use crate::tree::acl::AuthId;
use crate::tree::TreeError;
use crate::tree::MAX_TTL_MS;
use crate::txn::CreateOp;
use crate::txn::OpResult;
use crate::txn::Txn;
use crate::txn::TxnOp;
use crate::txn::TxnOutput;
use crate::txn::TxnResult;
use crate::watch::Mode;
use crate::watch::Table;
use crate::watch::WatchManager;

/// How long a read-index check keeps trying rounds that miss their quorum (see
/// [`Dispatcher::ensure_linearizable`]); a follower's `sync` waits 5 s for the leader's answer.
const LINEARIZABLE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a session's read waits for this server to apply the session's last write (see
/// [`Dispatcher::read_after`]): as long as a forwarded write waits for its own apply.
const FENCE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A reply ready to be framed: zxid, error code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub zxid: i64,
    pub err: ErrorCode,
    pub response: Response,
}

impl Reply {
    fn error(zxid: i64, err: ErrorCode) -> Reply {
        Reply { zxid, err, response: Response::Empty }
    }
}

/// The caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub session_id: i64,
    /// Identities: `ip:<addr>` first, then those added by `addauth`.
    pub auth: crate::tree::acl::AuthIds,
}

/// What prep decided.
pub enum Prepped {
    /// Answer now, from the local tree (after the session's earlier writes).
    Read,
    /// Replicate this txn, then answer with [`Dispatcher::write_reply`] for `op`.
    Write(Txn, OpCode),
    /// Answer with this at once (a request refused before the log).
    Refuse(ErrorCode),
    /// Catch up with the leader ([`Dispatcher::sync`]), then answer as a read.
    Sync,
}

/// Why a proposal did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("raft: {0}")]
    Raft(String),
}

/// The one mapping from internal errors to ZooKeeper error codes.
pub fn error_code(e: TreeError) -> ErrorCode {
    match e {
        TreeError::NoNode => ErrorCode::NoNode,
        TreeError::NodeExists => ErrorCode::NodeExists,
        TreeError::BadVersion => ErrorCode::BadVersion,
        TreeError::NotEmpty => ErrorCode::NotEmpty,
        TreeError::NoAuth => ErrorCode::NoAuth,
        TreeError::InvalidAcl => ErrorCode::InvalidAcl,
        TreeError::BadArguments => ErrorCode::BadArguments,
        TreeError::NoChildrenForEphemerals => ErrorCode::NoChildrenForEphemerals,
        TreeError::SessionExpired => ErrorCode::SessionExpired,
        TreeError::RuntimeInconsistency => ErrorCode::RuntimeInconsistency,
        TreeError::Unimplemented => ErrorCode::Unimplemented,
    }
}

/// The inverse of [`error_code`] for the codes prep refuses with before the log.
fn tree_error(code: ErrorCode) -> TreeError {
    match code {
        ErrorCode::Unimplemented => TreeError::Unimplemented,
        ErrorCode::InvalidAcl => TreeError::InvalidAcl,
        _ => TreeError::BadArguments,
    }
}

/// A proposal failure as the client sees it: the connection is in doubt.
pub fn propose_error_code(_e: &ProposeError) -> ErrorCode {
    ErrorCode::ConnectionLoss
}

fn acl_of(acl: &Option<Vec<jute::Acl>>) -> Vec<AclEntry> {
    acl.as_ref().map(|v| v.iter().map(AclEntry::from).collect()).unwrap_or_default()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The pipeline handle shared by every connection.
#[derive(Clone)]
pub struct Dispatcher {
    pub raft: Raft,
    pub shared: Arc<SharedTree>,
    pub watches: Arc<WatchManager>,
    pub sessions: Arc<SessionTracker>,
    pub config: Arc<Config>,
    pub stats: Arc<crate::client::stats::ServerStats>,
    pub proposer: propose::Proposer,
    /// False while this server cannot serve clients (no leader, or a leader without a quorum):
    /// connections close and new ones are refused, so clients move to another server.
    pub serving: tokio::sync::watch::Receiver<bool>,
    /// The last AppendEntries received (see [`crate::failover`]).
    pub leader_contact: Arc<crate::failover::LeaderContact>,
}

impl Dispatcher {
    /// The zxid of the last applied change (reads and pings reply with it).
    pub fn last_zxid(&self) -> i64 {
        self.shared.read().last_zxid()
    }

    /// A txn on behalf of `caller`.
    pub fn txn(&self, caller: &Caller, op: TxnOp) -> Txn {
        Txn { session_id: caller.session_id, time_ms: now_ms(), auth: caller.auth.clone(), op }
    }

    /// Validates a create as `PrepRequestProcessor.validateCreateRequest` does, into a txn op
    /// at `path` (the request's, moved or copied out of it by the caller).
    fn prep_create(&self, req: &jute::CreateRequest, path: String, ttl: i64, ttl_op: bool) -> Result<TxnOp, ErrorCode> {
        let mode = CreateMode::try_from(req.flags).map_err(|_| ErrorCode::BadArguments)?;
        if mode.is_ttl() && !self.config.extended_types_enabled {
            return Err(ErrorCode::Unimplemented);
        }
        // EphemeralType.validateTTL.
        if mode.is_ttl() {
            if ttl <= 0 || ttl > MAX_TTL_MS {
                return Err(ErrorCode::BadArguments);
            }
        } else if ttl_op && ttl >= 0 {
            return Err(ErrorCode::BadArguments);
        }
        Ok(TxnOp::Create(CreateOp {
            path,
            data: req.data.clone(),
            acl: acl_of(&req.acl),
            flags: req.flags,
            ttl: if mode.is_ttl() { ttl } else { -1 },
        }))
    }

    fn prep_multi_op(&self, op: &MultiOp) -> Result<TxnOp, ErrorCode> {
        Ok(match op {
            MultiOp::Create(r) | MultiOp::Create2(r) => self.prep_create(r, r.path.clone(), -1, false)?,
            MultiOp::CreateContainer(r) => {
                let mut r = r.clone();
                r.flags = CreateMode::Container.code();
                let path = std::mem::take(&mut r.path);
                self.prep_create(&r, path, -1, false)?
            }
            MultiOp::CreateTtl(r) => {
                let c = jute::CreateRequest {
                    path: String::new(),
                    data: r.data.clone(),
                    acl: r.acl.clone(),
                    flags: r.flags,
                };
                self.prep_create(&c, r.path.clone(), r.ttl, true)?
            }
            MultiOp::Delete(r) => TxnOp::Delete { path: r.path.clone(), version: r.version },
            MultiOp::SetData(r) => TxnOp::SetData { path: r.path.clone(), data: r.data.clone(), version: r.version },
            MultiOp::Check(r) => TxnOp::Check { path: r.path.clone(), version: r.version },
            MultiOp::GetChildren(_) | MultiOp::GetData(_) => return Err(ErrorCode::BadArguments),
        })
    }

    /// Prep: the one read/write classification table. A single write's path moves from the
    /// request into its txn (the request is kept only to shape a multi's reply); a read's
    /// request is left as it is.
    pub fn prep(&self, caller: &Caller, request: &mut Request) -> Prepped {
        let write = |op: Result<TxnOp, ErrorCode>, code: OpCode| match op {
            Ok(op) => Prepped::Write(self.txn(caller, op), code),
            Err(e) => Prepped::Refuse(e),
        };
        match request {
            Request::Create(r) => {
                let path = std::mem::take(&mut r.path);
                write(self.prep_create(r, path, -1, false), OpCode::Create)
            }
            Request::Create2(r) => {
                let path = std::mem::take(&mut r.path);
                write(self.prep_create(r, path, -1, false), OpCode::Create2)
            }
            Request::CreateContainer(r) => {
                if r.flags != CreateMode::Container.code() {
                    return Prepped::Refuse(ErrorCode::BadArguments);
                }
                let path = std::mem::take(&mut r.path);
                write(self.prep_create(r, path, -1, false), OpCode::CreateContainer)
            }
            Request::CreateTtl(r) => {
                let c = jute::CreateRequest {
                    path: String::new(),
                    data: r.data.clone(),
                    acl: std::mem::take(&mut r.acl),
                    flags: r.flags,
                };
                write(self.prep_create(&c, std::mem::take(&mut r.path), r.ttl, true), OpCode::CreateTtl)
            }
            Request::Delete(r) => {
                write(Ok(TxnOp::Delete { path: std::mem::take(&mut r.path), version: r.version }), OpCode::Delete)
            }
            Request::SetData(r) => write(
                Ok(TxnOp::SetData { path: std::mem::take(&mut r.path), data: r.data.take(), version: r.version }),
                OpCode::SetData,
            ),
            Request::SetAcl(r) => write(
                Ok(TxnOp::SetAcl { path: std::mem::take(&mut r.path), acl: acl_of(&r.acl), version: r.version }),
                OpCode::SetAcl,
            ),
            Request::Check(r) => {
                write(Ok(TxnOp::Check { path: std::mem::take(&mut r.path), version: r.version }), OpCode::Check)
            }
            Request::Multi(ops) => {
                // Prep failures inside a multi are reported per op, like apply failures, and the
                // multi still takes a zxid (ZooKeeper logs it as an error txn).
                let txn_ops = ops
                    .iter()
                    .map(|op| self.prep_multi_op(op).unwrap_or_else(|code| TxnOp::Fail(tree_error(code))))
                    .collect();
                Prepped::Write(self.txn(caller, TxnOp::Multi(txn_ops)), OpCode::Multi)
            }
            Request::CloseSession => {
                write(Ok(TxnOp::CloseSession { session_id: caller.session_id }), OpCode::CloseSession)
            }
            Request::Reconfig(_) => Prepped::Refuse(ErrorCode::ReconfigDisabled),
            Request::Sync(_) => Prepped::Sync,
            Request::DeleteContainer(_) => Prepped::Refuse(ErrorCode::Unimplemented),
            _ => Prepped::Read,
        }
    }

    /// Proposes `txn` only if this server is the leader, never forwarding it: for decisions
    /// only the leader may make (session expiry). A leader that was frozen and does not yet
    /// know it was replaced cannot commit this, where forwarding would let its stale view win.
    pub async fn propose_as_leader(&self, txn: Txn) -> Result<TxnResult, ProposeError> {
        let batch = crate::txn::TxnBatch::new(vec![txn]);
        match self.raft.client_write(batch).await {
            Ok(resp) => resp.data.into_iter().next().ok_or_else(|| ProposeError::Raft("empty result".into())),
            Err(e) => Err(ProposeError::Raft(e.to_string())),
        }
    }

    /// Propose: replicate `txn` and wait until it is applied here.
    pub async fn propose(&self, txn: Txn) -> Result<TxnResult, ProposeError> {
        self.proposer.propose(txn).await
    }

    /// Propose: replicate `txn` and wait until it is committed. On a follower the result may
    /// come before this server has applied it (before its watch events are queued here): for
    /// a session that holds no watches, whose next reads then wait for the result's zxid
    /// ([`Dispatcher::read_after`]).
    pub async fn propose_committed(&self, txn: Txn) -> Result<TxnResult, ProposeError> {
        self.proposer.submit_committed(txn).await?.await.map_err(|_| propose::dropped())?
    }

    /// Confirms this server's leadership with a quorum (openraft's read index). One round that
    /// misses its quorum is not the answer: a heartbeat round gives each follower only one
    /// heartbeat interval to reply, and a follower busy with an fsync on a slow disk misses
    /// it. Rounds are repeated until one succeeds, this server is no longer the leader, or
    /// [`LINEARIZABLE_PATIENCE`] has passed.
    pub async fn ensure_linearizable(&self) -> Result<(), ProposeError> {
        use openraft::error::LinearizableReadError;
        use openraft::error::RaftError;
        let deadline = tokio::time::Instant::now() + LINEARIZABLE_PATIENCE;
        loop {
            match self.raft.ensure_linearizable(openraft::raft::ReadPolicy::ReadIndex).await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(e)))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, "read index round missed its quorum; trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => return Err(ProposeError::Raft(e.to_string())),
            }
        }
    }

    /// `sync`: catch up with the leader's commit point at the time of the call. The leader
    /// confirms its leadership with a quorum (openraft's read index); a follower asks the
    /// leader for that point over the peer port and waits until it has applied it.
    pub async fn sync(&self) -> Result<(), ProposeError> {
        let leader = self.raft.metrics().borrow_watched().current_leader;
        let target = match leader {
            Some(l) if l == self.config.server_id => return self.ensure_linearizable().await,
            Some(l) => {
                let addr = self
                    .raft
                    .metrics()
                    .borrow_watched()
                    .membership_config
                    .membership()
                    .get_node(&l)
                    .map(|n| n.addr.clone())
                    .unwrap_or_default();
                let client = crate::peer::PeerClient::new(addr);
                match client.call(crate::peer::PeerRequest::ReadIndex, std::time::Duration::from_secs(5)).await {
                    Ok(crate::peer::PeerResponse::ReadIndex(Ok(z))) => z,
                    Ok(other) => return Err(ProposeError::Raft(format!("read index: {other:?}"))),
                    Err(e) => return Err(ProposeError::Raft(e.to_string())),
                }
            }
            None => return Err(ProposeError::Raft("no leader".into())),
        };
        self.shared.wait_applied(target, std::time::Duration::from_secs(5)).await;
        Ok(())
    }

    /// Expires a session through the log (admin kill): its ephemerals are deleted on every
    /// replica, watchers are told, and its connection is closed so the client learns it is
    /// expired when it reconnects. `Ok(false)` if there is no such session.
    pub async fn kill_session(&self, session_id: i64) -> Result<bool, ProposeError> {
        if self.shared.read().session(session_id).is_none() {
            return Ok(false);
        }
        let txn =
            Txn { session_id: 0, time_ms: now_ms(), auth: Default::default(), op: TxnOp::CloseSession { session_id } };
        let result = self.propose(txn).await?;
        self.sessions.remove(session_id);
        tracing::info!(session = format_args!("{session_id:#x}"), "session killed by the admin API");
        Ok(result.outcome.is_ok())
    }

    /// Reply for a replicated write of opcode `op`.
    pub fn write_reply(&self, op: OpCode, result: Result<TxnResult, ProposeError>) -> Reply {
        let result = match result {
            Ok(r) => r,
            Err(e) => return Reply::error(self.last_zxid(), propose_error_code(&e)),
        };
        let zxid = result.zxid;
        let out = match result.outcome {
            Ok(out) => out,
            Err(e) => return Reply::error(zxid, error_code(e)),
        };
        let response = match (op, out) {
            (OpCode::Create, TxnOutput::Created { path, .. }) => Response::Create(jute::CreateResponse { path }),
            (OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl, TxnOutput::Created { path, stat }) => {
                Response::Create2(jute::Create2Response { path, stat })
            }
            (OpCode::SetData, TxnOutput::Stat(stat)) => Response::SetData(jute::SetDataResponse { stat }),
            (OpCode::SetAcl, TxnOutput::Stat(stat)) => Response::SetAcl(jute::SetAclResponse { stat }),
            (OpCode::Check, TxnOutput::Checked(stat)) => Response::SetData(jute::SetDataResponse { stat }),
            (OpCode::Multi, TxnOutput::Multi { results, .. }) => Response::Multi(
                results
                    .into_iter()
                    .map(|r| match r {
                        OpResult::Created { path, stat } => {
                            MultiResult::Create2 { op: OpCode::Create2, response: jute::Create2Response { path, stat } }
                        }
                        OpResult::Deleted => MultiResult::Delete,
                        OpResult::SetData { stat } => MultiResult::SetData(jute::SetDataResponse { stat }),
                        OpResult::Checked => MultiResult::Check,
                        OpResult::RolledBack => MultiResult::Error(0),
                        OpResult::Error(e) => MultiResult::Error(error_code(e).code()),
                    })
                    .collect(),
            ),
            _ => Response::Empty,
        };
        Reply { zxid, err: ErrorCode::Ok, response }
    }

    /// Fixes the multi reply shape: ZooKeeper 3.8 answers `create` and `create2` ops inside a
    /// multi with a path-only result (type 1), and createTTL/createContainer with type 15.
    pub fn shape_multi(&self, request: &Request, reply: &mut Reply) {
        if let (Request::Multi(ops), Response::Multi(results)) = (request, &mut reply.response) {
            for (op, r) in ops.iter().zip(results.iter_mut()) {
                if let (MultiOp::Create(_) | MultiOp::Create2(_), MultiResult::Create2 { response, .. }) = (op, &*r) {
                    *r = MultiResult::Create(jute::CreateResponse { path: response.path.clone() });
                }
            }
        }
    }

    /// Serves a read from the local tree; watches are registered under the same lock.
    pub fn read(&self, caller: &Caller, request: &Request) -> Reply {
        self.read_in(&self.shared.read(), caller, request)
    }

    /// Serves a read if the local tree has applied `fence` (the zxid of the session's last
    /// write; see [`Dispatcher::propose_committed`]), checked under the read's own lock.
    pub fn read_applied(&self, caller: &Caller, request: &Request, fence: i64) -> Option<Reply> {
        let tree = self.shared.read();
        (tree.last_zxid() >= fence).then(|| self.read_in(&tree, caller, request))
    }

    /// Serves a read once the local tree has applied `fence`. A server that does not get
    /// there within [`FENCE_PATIENCE`] (cut off from its leader) serves it from what it has,
    /// as it answers a write it could not apply in that time.
    pub async fn read_after(&self, caller: &Caller, request: &Request, fence: i64) -> Reply {
        if let Some(reply) = self.read_applied(caller, request, fence) {
            return reply;
        }
        self.shared.wait_applied(fence, FENCE_PATIENCE).await;
        self.read(caller, request)
    }

    /// Whether `request` may leave a watch for its session: a connection whose session holds
    /// none gets no watch event from its own writes, and may have them answered before they
    /// are applied here.
    pub fn may_watch(request: &Request) -> bool {
        match request {
            Request::Exists(r) => r.watch,
            Request::GetData(r) => r.watch,
            Request::GetChildren(r) => r.watch,
            Request::GetChildren2(r) => r.watch,
            Request::AddWatch(_) | Request::SetWatches(_) | Request::SetWatches2(_) => true,
            _ => false,
        }
    }

    fn read_in(&self, tree: &crate::tree::DataTree, caller: &Caller, request: &Request) -> Reply {
        let zxid = tree.last_zxid();
        let sid = caller.session_id;
        let ids = &caller.auth;
        let reply = |r: Result<Response, TreeError>| match r {
            Ok(response) => Reply { zxid, err: ErrorCode::Ok, response },
            Err(e) => Reply::error(zxid, error_code(e)),
        };
        match request {
            Request::Ping => Reply { zxid, err: ErrorCode::Ok, response: Response::Empty },
            Request::Exists(r) => {
                if r.path.contains('\0') {
                    return Reply::error(zxid, ErrorCode::BadArguments);
                }
                let res = tree.exists(&r.path);
                if r.watch {
                    // An exists watch is left even when the node is missing.
                    self.watches.add(Table::Data, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|stat| Response::Exists(jute::ExistsResponse { stat })))
            }
            Request::GetData(r) => {
                let res = tree.get_data(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.watches.add(Table::Data, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|(data, stat)| Response::GetData(jute::GetDataResponse { data, stat })))
            }
            Request::GetChildren(r) => {
                let res = tree.get_children(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.watches.add(Table::Child, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|(children, _)| Response::GetChildren(jute::GetChildrenResponse { children })))
            }
            Request::GetChildren2(r) => {
                let res = tree.get_children(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.watches.add(Table::Child, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|(children, stat)| Response::GetChildren2(jute::GetChildren2Response { children, stat })))
            }
            Request::GetAcl(r) => reply(tree.get_acl(&r.path, ids).map(|(acl, stat)| {
                Response::GetAcl(jute::GetAclResponse { acl: acl.iter().map(jute::Acl::from).collect(), stat })
            })),
            Request::GetAllChildrenNumber(r) => reply(tree.all_children_number(&r.path, ids).map(|total_number| {
                Response::GetAllChildrenNumber(jute::GetAllChildrenNumberResponse { total_number })
            })),
            Request::GetEphemerals(r) => reply(Ok(Response::GetEphemerals(jute::GetEphemeralsResponse {
                ephemerals: tree.ephemerals(sid, &r.prefix_path),
            }))),
            Request::Sync(r) => reply(Ok(Response::Sync(jute::SyncResponse { path: r.path.clone() }))),
            Request::MultiRead(ops) => {
                let results = ops
                    .iter()
                    .map(|op| match op {
                        MultiOp::GetData(g) => match tree.get_data(&g.path, ids) {
                            Ok((data, stat)) => MultiResult::GetData(jute::GetDataResponse { data, stat }),
                            Err(e) => MultiResult::Error(error_code(e).code()),
                        },
                        MultiOp::GetChildren(g) => match tree.get_children(&g.path, ids) {
                            Ok((children, _)) => MultiResult::GetChildren(jute::GetChildrenResponse { children }),
                            Err(e) => MultiResult::Error(error_code(e).code()),
                        },
                        _ => MultiResult::Error(ErrorCode::BadArguments.code()),
                    })
                    .collect();
                reply(Ok(Response::Multi(results)))
            }
            Request::AddWatch(r) => match AddWatchMode::try_from(r.mode) {
                Ok(mode) => {
                    self.watches.add_persistent(&r.path, sid, mode == AddWatchMode::PersistentRecursive);
                    reply(Ok(Response::AddWatch(jute::ErrorResponse { err: 0 })))
                }
                Err(_) => Reply::error(zxid, ErrorCode::BadArguments),
            },
            Request::CheckWatches(r) => self.remove_watches(zxid, sid, &r.path, r.watcher_type, true),
            Request::RemoveWatches(r) => self.remove_watches(zxid, sid, &r.path, r.watcher_type, false),
            Request::SetWatches(w) => {
                self.watches.set_watches(
                    tree,
                    sid,
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &[],
                    &[],
                );
                reply(Ok(Response::Empty))
            }
            Request::SetWatches2(w) => {
                self.watches.set_watches(
                    tree,
                    sid,
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &w.persistent_watches,
                    &w.persistent_recursive_watches,
                );
                reply(Ok(Response::Empty))
            }
            Request::WhoAmI => reply(Ok(Response::WhoAmI(jute::WhoAmIResponse {
                client_info: ids
                    .iter()
                    .map(|i| jute::ClientInfo {
                        auth_scheme: i.scheme.clone(),
                        // DigestAuthenticationProvider.getUserName: the user part only.
                        user: match i.scheme.as_str() {
                            "digest" => i.id.split(':').next().unwrap_or("").to_owned(),
                            _ => i.id.clone(),
                        },
                    })
                    .collect(),
            }))),
            Request::Sasl(_) => Reply::error(zxid, ErrorCode::AuthFailed),
            // Writes never reach here; auth is handled by the connection.
            _ => Reply::error(zxid, ErrorCode::Unimplemented),
        }
    }

    fn remove_watches(&self, zxid: i64, sid: i64, path: &str, watcher_type: i32, dry_run: bool) -> Reply {
        match jute::WatcherType::try_from(watcher_type) {
            Ok(t) if self.watches.remove(sid, path, t, dry_run) => {
                Reply { zxid, err: ErrorCode::Ok, response: Response::Empty }
            }
            Ok(_) => Reply::error(zxid, ErrorCode::NoWatcher),
            Err(_) => Reply::error(zxid, ErrorCode::BadArguments),
        }
    }

    /// `addauth`: returns the identities to add, or `AuthFailed`
    /// (`DigestAuthenticationProvider.handleAuthentication`).
    pub fn authenticate(&self, scheme: &str, auth: &Bytes) -> Result<Vec<AuthId>, ErrorCode> {
        match scheme {
            "digest" => {
                let text = std::str::from_utf8(auth).map_err(|_| ErrorCode::AuthFailed)?;
                let digest = crate::tree::acl::digest(text);
                let mut ids = Vec::new();
                if self.config.super_digest.as_deref() == Some(digest.as_str()) {
                    ids.push(AuthId { scheme: "super".into(), id: String::new() });
                }
                ids.push(AuthId { scheme: "digest".into(), id: digest });
                Ok(ids)
            }
            _ => Err(ErrorCode::AuthFailed),
        }
    }
}

type Boxed<T> = futures::future::BoxFuture<'static, T>;

impl crate::peer::PeerHandler for Dispatcher {
    fn raft(&self) -> &Raft {
        &self.raft
    }

    fn snapshot_dir(&self) -> std::path::PathBuf {
        crate::raft::layout::DataLayout::new(&self.config.data_dir, &self.config.data_log_dir).snap_dir
    }

    fn heard_from_leader(&self, leader: u64) {
        self.leader_contact.heard(leader);
    }

    fn pre_vote(&self, candidate: u64, last_log: Option<crate::raft::LogId>) -> bool {
        crate::failover::grant_pre_vote(&self.raft, self.config.server_id, &self.leader_contact, candidate, last_log)
    }

    #[allow(clippy::async_yields_async)] // the outer future queues, the inner one waits
    fn forward(&self, batch: crate::txn::TxnBatch) -> Boxed<Boxed<Result<Vec<TxnResult>, String>>> {
        let proposer = self.proposer.clone();
        Box::pin(async move {
            let mut waits = Vec::with_capacity(batch.txns.len());
            for txn in std::sync::Arc::unwrap_or_clone(batch.txns) {
                match proposer.submit(txn).await {
                    Ok(w) => waits.push(w),
                    Err(e) => {
                        let e = e.to_string();
                        return Box::pin(async move { Err(e) }) as Boxed<_>;
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
            }) as Boxed<_>
        })
    }

    fn read_index(&self) -> Boxed<Result<i64, String>> {
        let d = self.clone();
        Box::pin(async move {
            d.ensure_linearizable().await.map_err(|e| e.to_string())?;
            Ok(d.last_zxid())
        })
    }

    fn touch(&self, sessions: &[i64]) {
        for s in sessions {
            self.sessions.touch(*s);
        }
    }
}
