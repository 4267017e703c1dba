//! Prep (`PrepRequestProcessor`): the one read/write classification table. A write becomes a
//! [`Txn`] stamped with this member's wall-clock time (the leader stamps a forwarded one again
//! with its own, see `super::peer`) and the caller's identities, after the
//! checks ZooKeeper makes before its log (create mode flags, TTL support and range); every
//! other check happens in apply, so every replica computes the same answer.

use jute::CreateMode;
use jute::ErrorCode;
use jute::MultiOp;
use jute::OpCode;
use jute::Request;

use super::Caller;
use super::Dispatcher;
use crate::clock::now_ms;
use crate::tree::acl::AclEntry;
use crate::tree::txn::CreateOp;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;
use crate::tree::MAX_TTL_MS;

/// What prep decided.
pub enum Prepped {
    /// Answer now, from the local tree (after the session's earlier writes).
    Read,
    /// Replicate this write, then answer it ([`Dispatcher::write`]).
    Write(Write),
    /// Answer with this at once (a request refused before the log).
    Refuse(ErrorCode),
    /// Catch up with the leader ([`Dispatcher::sync`]), then answer as a read.
    Sync,
    /// Change the members ([`Dispatcher::reconfig`]), and whether the caller may.
    Reconfig(jute::ReconfigRequest, bool),
}

/// A write ready to be proposed: its txn and the opcode its reply is shaped for.
#[derive(Debug)]
pub struct Write {
    pub(super) txn: Txn,
    pub(super) op: OpCode,
    /// For a multi: which of its ops were `create` or `create2` (see
    /// [`Dispatcher::shape_multi`]).
    pub(super) path_only: Vec<bool>,
}

impl Write {
    /// `closeSession`: the connection closes after its reply.
    pub fn closes_session(&self) -> bool {
        self.op == OpCode::CloseSession
    }
}

fn acl_of(acl: &Option<Vec<jute::Acl>>) -> Vec<AclEntry> {
    acl.as_ref().map(|v| v.iter().map(AclEntry::from).collect()).unwrap_or_default()
}

impl Dispatcher {
    /// A txn on behalf of `caller`.
    pub(super) fn txn(&self, caller: &Caller, op: TxnOp) -> Txn {
        Txn { session_id: caller.session_id, time_ms: now_ms(), auth: caller.auth.clone(), op }
    }

    /// With `zookeeper.enforceQuota` on, a create, setData or multi asks apply to hold it to
    /// hard quotas (ZooKeeper checks them in `PrepRequestProcessor`, against the tree before
    /// the txn; apply checks against the tree the txn meets, so a multi's own creates count).
    fn quota(&self, op: TxnOp) -> TxnOp {
        match op {
            TxnOp::Create(_) | TxnOp::SetData { .. } | TxnOp::Multi(_) if self.0.config.enforce_quota => {
                TxnOp::QuotaEnforced(Box::new(op))
            }
            op => op,
        }
    }

    /// Validates a create as `PrepRequestProcessor.validateCreateRequest` does, into a txn op
    /// at `path` (the request's, moved or copied out of it by the caller).
    fn prep_create(&self, req: &jute::CreateRequest, path: String, ttl: i64, ttl_op: bool) -> Result<TxnOp, ErrorCode> {
        let mode = CreateMode::try_from(req.flags).map_err(|_| ErrorCode::BadArguments)?;
        if mode.is_ttl() && !self.0.config.extended_types_enabled {
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
            Ok(op) => Prepped::Write(Write { txn: self.txn(caller, self.quota(op)), op: code, path_only: Vec::new() }),
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
                    .map(|op| self.prep_multi_op(op).unwrap_or_else(|code| TxnOp::Fail(super::reply::tree_error(code))))
                    .collect();
                let path_only = ops.iter().map(|op| matches!(op, MultiOp::Create(_) | MultiOp::Create2(_))).collect();
                let op = self.quota(TxnOp::Multi(txn_ops));
                Prepped::Write(Write { txn: self.txn(caller, op), op: OpCode::Multi, path_only })
            }
            Request::CloseSession => {
                write(Ok(TxnOp::CloseSession { session_id: caller.session_id }), OpCode::CloseSession)
            }
            Request::Reconfig(r) => match self.reconfig_refusal() {
                Some(code) => Prepped::Refuse(code),
                None => Prepped::Reconfig(std::mem::take(r), self.may_reconfig(caller)),
            },
            Request::Sync(_) => Prepped::Sync,
            Request::DeleteContainer(_) => Prepped::Refuse(ErrorCode::Unimplemented),
            _ => Prepped::Read,
        }
    }
}
