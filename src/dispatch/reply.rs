//! Reply (`FinalRequestProcessor`'s answers): the one place internal errors become ZooKeeper
//! error codes ([`error_code`], [`propose_error_code`]), and the shape of a write's reply.

use jute::ErrorCode;
use jute::MultiResult;
use jute::OpCode;
use jute::Response;

use super::Dispatcher;
use crate::raft::ProposeError;
use crate::tree::txn::OpResult;
use crate::tree::txn::TxnOutput;
use crate::tree::txn::TxnResult;
use crate::tree::TreeError;

/// A reply ready to be framed: zxid, error code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub zxid: i64,
    pub err: ErrorCode,
    pub response: Response,
}

impl Reply {
    /// An error reply.
    pub fn error(zxid: i64, err: ErrorCode) -> Reply {
        Reply { zxid, err, response: Response::Empty }
    }

    /// A success with no body.
    pub fn ok(zxid: i64) -> Reply {
        Reply { zxid, err: ErrorCode::Ok, response: Response::Empty }
    }
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
        TreeError::SessionMoved => ErrorCode::SessionMoved,
        TreeError::QuotaExceeded => ErrorCode::QuotaExceeded,
    }
}

/// A failed reconfig's code (ZooKeeper's `PrepRequestProcessor` and `Leader` answers).
pub fn reconfig_error_code(e: &crate::peer::ReconfigError) -> ErrorCode {
    use crate::peer::ReconfigError as R;
    match e {
        R::Standalone => ErrorCode::Unimplemented,
        R::NoAuth => ErrorCode::NoAuth,
        R::InProgress => ErrorCode::ReconfigInProgress,
        R::BadVersion => ErrorCode::BadVersion,
        R::BadArguments(why) => {
            tracing::info!(why = why.as_str(), "reconfig refused");
            ErrorCode::BadArguments
        }
        R::NoQuorum => ErrorCode::NewConfigNoQuorum,
        R::Failed(why) => {
            tracing::warn!(why = why.as_str(), "reconfig failed");
            ErrorCode::ConnectionLoss
        }
    }
}

/// The inverse of [`error_code`] for the codes prep refuses with before the log.
pub(super) fn tree_error(code: ErrorCode) -> TreeError {
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

impl Dispatcher {
    /// Reply for a replicated write of opcode `op`.
    pub(super) fn write_reply(&self, op: OpCode, result: Result<TxnResult, ProposeError>) -> Reply {
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
    /// `path_only` marks the ops of the request that were `create` or `create2`.
    pub(super) fn shape_multi(path_only: &[bool], reply: &mut Reply) {
        if let Response::Multi(results) = &mut reply.response {
            for (path_only, r) in path_only.iter().zip(results.iter_mut()) {
                if let (true, MultiResult::Create2 { response, .. }) = (path_only, &*r) {
                    *r = MultiResult::Create(jute::CreateResponse { path: response.path.clone() });
                }
            }
        }
    }
}
