//! Reads (`FinalRequestProcessor` for reads): served from the local tree, with watches
//! registered under the same tree lock the read used, so no change can slip between a read
//! and its watch. A session's read waits until the tree has its last write
//! ([`Dispatcher::read_after`]). `sync` catches up with the leader's commit point.

use std::time::Duration;

use jute::AddWatchMode;
use jute::ErrorCode;
use jute::MultiOp;
use jute::MultiResult;
use jute::Request;
use jute::Response;

use super::reply::error_code;
use super::Caller;
use super::Dispatcher;
use super::Reply;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;
use crate::raft::ProposeError;
use crate::tree::DataTree;
use crate::tree::TreeError;
use crate::watch::Mode;
use crate::watch::Table;

/// How long a read-index check keeps trying rounds that miss their quorum (see
/// [`crate::raft::Raft::ensure_linearizable`]); a follower's `sync` waits 5 s for the
/// leader's answer.
const LINEARIZABLE_PATIENCE: Duration = Duration::from_secs(3);

/// How long a follower's `sync` waits for the leader's read point, and then to apply it.
const SYNC_PATIENCE: Duration = Duration::from_secs(5);

/// How long a session's read waits for this server to apply the session's last write (see
/// [`Dispatcher::read_after`]): as long as a forwarded write waits for its own apply.
const FENCE_PATIENCE: Duration = Duration::from_secs(10);

impl Dispatcher {
    /// The leader's linearizable read point: its last applied zxid once a quorum confirmed
    /// its leadership (openraft's read index) and the point is applied here.
    pub async fn read_index(&self) -> Result<i64, ProposeError> {
        self.0.raft.ensure_linearizable(LINEARIZABLE_PATIENCE).await?;
        Ok(self.last_zxid())
    }

    /// `sync`: catch up with the leader's commit point at the time of the call. The leader
    /// confirms its leadership with a quorum (openraft's read index); a follower asks the
    /// leader for that point over the peer port and waits until it has applied it.
    pub async fn sync(&self) -> Result<(), ProposeError> {
        let status = self.0.raft.status();
        let target = match status.leader_addr() {
            Some((l, _)) if l == self.0.raft.id() => {
                return self.0.raft.ensure_linearizable(LINEARIZABLE_PATIENCE).await
            }
            Some((l, addr)) => {
                let client = self.0.peers.client(l, &addr);
                match client.call(PeerRequest::ReadIndex, SYNC_PATIENCE).await {
                    Ok(PeerResponse::ReadIndex(Ok(z))) => z,
                    Ok(other) => return Err(ProposeError::Raft(format!("read index: {other:?}"))),
                    Err(e) => return Err(ProposeError::Raft(e.to_string())),
                }
            }
            None => return Err(ProposeError::Raft("no leader".into())),
        };
        self.0.shared.wait_applied(target, SYNC_PATIENCE).await;
        Ok(())
    }

    /// `sync`, with the callers that ask while a round runs sharing the next round: one
    /// read-index round (and on a follower one request to the leader) per batch. A round
    /// serves only callers that asked before it started, so each one's read point is taken
    /// after its call, as a read index must be.
    pub async fn sync_batched(&self) -> Result<(), ProposeError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut rounds = self.0.sync_rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rounds.next.push(tx);
            !std::mem::replace(&mut rounds.running, true)
        };
        if start {
            let d = self.clone();
            tokio::spawn(async move { d.run_sync_rounds().await });
        }
        rx.await.unwrap_or_else(|_| Err(ProposeError::Raft("the sync round was dropped".into())))
    }

    async fn run_sync_rounds(&self) {
        loop {
            let batch = {
                let mut rounds = self.0.sync_rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if rounds.next.is_empty() {
                    rounds.running = false;
                    return;
                }
                std::mem::take(&mut rounds.next)
            };
            let result = self.sync().await;
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }

    /// Whether `request` is a read that `readMode=linearizable` serves after a read-index
    /// round (every read of the tree; not pings or watch bookkeeping).
    pub fn needs_read_index(&self, request: &Request) -> bool {
        self.0.config.linearizable_reads
            && matches!(
                request,
                Request::Exists(_)
                    | Request::GetData(_)
                    | Request::GetAcl(_)
                    | Request::GetChildren(_)
                    | Request::GetChildren2(_)
                    | Request::GetAllChildrenNumber(_)
                    | Request::GetEphemerals(_)
                    | Request::MultiRead(_)
            )
    }

    /// Serves a read from the local tree; watches are registered under the same lock.
    pub fn read(&self, caller: &Caller, request: &Request) -> Reply {
        self.read_in(&self.0.shared.read(), caller, request)
    }

    /// Serves a read if the local tree has applied `fence` (the zxid of the session's last
    /// write; see [`Dispatcher::propose_committed`]), checked under the read's own lock.
    pub fn read_applied(&self, caller: &Caller, request: &Request, fence: i64) -> Option<Reply> {
        let tree = self.0.shared.read();
        (tree.last_zxid() >= fence).then(|| self.read_in(&tree, caller, request))
    }

    /// On a follower or observer: the log index of entries the leader already sent here that
    /// are not applied yet, if any. A write another client saw acknowledged is most likely
    /// among them (the leader sends its entry to every member before it commits), and a
    /// follower applies it only after its own fsync and one more round trip with the leader;
    /// a read that waits for them ([`Dispatcher::read_after_unapplied`]) sees it, as a
    /// ZooKeeper follower, which applies a commit as soon as it hears of it, usually does.
    pub fn unapplied(&self) -> Option<u64> {
        let received = self.0.raft.received_index();
        (received > *self.0.shared.applied_index.borrow() && !self.0.raft.is_leader()).then_some(received)
    }

    /// Waits (at most a heartbeat interval) until entries up to `index` are applied here, then
    /// serves the read after `fence` as [`Dispatcher::read_after`] does.
    pub async fn read_after_unapplied(&self, caller: &Caller, request: &Request, index: u64, fence: i64) -> Reply {
        let mut applied = self.0.shared.applied_index.subscribe();
        let _ = tokio::time::timeout(self.0.raft.heartbeat(), applied.wait_for(|i| *i >= index)).await;
        self.read_after(caller, request, fence).await
    }

    /// Serves a read once the local tree has applied `fence`. A server that does not get
    /// there within [`FENCE_PATIENCE`] (cut off from its leader) serves it from what it has,
    /// as it answers a write it could not apply in that time.
    pub async fn read_after(&self, caller: &Caller, request: &Request, fence: i64) -> Reply {
        if let Some(reply) = self.read_applied(caller, request, fence) {
            return reply;
        }
        self.0.shared.wait_applied(fence, FENCE_PATIENCE).await;
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

    fn read_in(&self, tree: &DataTree, caller: &Caller, request: &Request) -> Reply {
        let zxid = tree.last_zxid();
        let sid = caller.session_id;
        let ids = &caller.auth;
        let reply = |r: Result<Response, TreeError>| match r {
            Ok(response) => Reply { zxid, err: ErrorCode::Ok, response },
            Err(e) => Reply::error(zxid, error_code(e)),
        };
        match request {
            Request::Ping => Reply::ok(zxid),
            Request::Exists(r) => {
                if r.path.contains('\0') {
                    return Reply::error(zxid, ErrorCode::BadArguments);
                }
                let res = tree.exists(&r.path);
                if r.watch {
                    // An exists watch is left even when the node is missing.
                    self.0.watches.add(Table::Data, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|stat| Response::Exists(jute::ExistsResponse { stat })))
            }
            Request::GetData(r) => {
                let res = tree.get_data(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.0.watches.add(Table::Data, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|(data, stat)| Response::GetData(jute::GetDataResponse { data, stat })))
            }
            Request::GetChildren(r) => {
                let res = tree.get_children(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.0.watches.add(Table::Child, &r.path, sid, Mode::Standard);
                }
                reply(res.map(|(children, _)| Response::GetChildren(jute::GetChildrenResponse { children })))
            }
            Request::GetChildren2(r) => {
                let res = tree.get_children(&r.path, ids);
                if r.watch && res.is_ok() {
                    self.0.watches.add(Table::Child, &r.path, sid, Mode::Standard);
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
                    self.0.watches.add_persistent(&r.path, sid, mode == AddWatchMode::PersistentRecursive);
                    reply(Ok(Response::AddWatch(jute::ErrorResponse { err: 0 })))
                }
                Err(_) => Reply::error(zxid, ErrorCode::BadArguments),
            },
            Request::CheckWatches(r) => self.remove_watches(zxid, sid, &r.path, r.watcher_type, true),
            Request::RemoveWatches(r) => self.remove_watches(zxid, sid, &r.path, r.watcher_type, false),
            Request::SetWatches(w) => {
                let watches = (&w.data_watches[..], &w.exist_watches[..], &w.child_watches[..], &[][..], &[][..]);
                self.0.watches.set_watches(tree, sid, w.relative_zxid, watches);
                reply(Ok(Response::Empty))
            }
            Request::SetWatches2(w) => {
                let watches = (
                    &w.data_watches[..],
                    &w.exist_watches[..],
                    &w.child_watches[..],
                    &w.persistent_watches[..],
                    &w.persistent_recursive_watches[..],
                );
                self.0.watches.set_watches(tree, sid, w.relative_zxid, watches);
                reply(Ok(Response::Empty))
            }
            Request::WhoAmI => reply(Ok(Response::WhoAmI(jute::WhoAmIResponse {
                client_info: ids
                    .iter()
                    .map(|i| jute::ClientInfo {
                        auth_scheme: i.scheme.clone(),
                        // AuthUtil.getClientInfos: no provider, no user.
                        user: i.user_name().unwrap_or("").to_owned(),
                    })
                    .collect(),
            }))),
            // The connection answers sasl itself (`Dispatcher::sasl`); never here.
            Request::Sasl(_) => Reply::error(zxid, ErrorCode::AuthFailed),
            // Writes never reach here; auth is handled by the connection.
            _ => Reply::error(zxid, ErrorCode::Unimplemented),
        }
    }

    fn remove_watches(&self, zxid: i64, sid: i64, path: &str, watcher_type: i32, dry_run: bool) -> Reply {
        match jute::WatcherType::try_from(watcher_type) {
            Ok(t) if self.0.watches.remove(sid, path, t, dry_run) => Reply::ok(zxid),
            Ok(_) => Reply::error(zxid, ErrorCode::NoWatcher),
            Err(_) => Reply::error(zxid, ErrorCode::BadArguments),
        }
    }
}
