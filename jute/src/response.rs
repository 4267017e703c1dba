//! Typed reply bodies, the multi result framing, and notifications.
//!
//! A reply is `ReplyHeader{xid, zxid, err}` followed by a body whose type depends on the
//! request's opcode; on error ZooKeeper sends the header alone (except a failed `multi`, which
//! still carries its per-op results). [`Response`] is that body; [`Response::decode`] needs the
//! opcode of the request, which a client remembers by xid. Counterpart of ZooKeeper's
//! `FinalRequestProcessor` response records and `MultiResponse`.

use bytes::BytesMut;

use crate::consts::OpCode;
use crate::error::finish;
use crate::error::DecodeError;
use crate::error::DecodeErrorKind;
use crate::proto::*;
use crate::record::JuteField;
use crate::record::Record;

/// One result inside a `multi`/`multiRead` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// A `create` result (header type 1).
    Create(CreateResponse),
    /// A create with a `Stat` (`op` is the header type: create2, createTTL or createContainer).
    Create2 {
        /// The header type.
        op: OpCode,
        /// The result.
        response: Create2Response,
    },
    /// A `delete` result.
    Delete,
    /// A `setData` result.
    SetData(SetDataResponse),
    /// A `check` result.
    Check,
    /// A `getChildren` result inside `multiRead`.
    GetChildren(GetChildrenResponse),
    /// A `getData` result inside `multiRead`.
    GetData(GetDataResponse),
    /// A failed (or rolled back) op: header type -1 with the error code.
    Error(i32),
}

/// A reply body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// No body: errors, delete, setWatches, auth, ping, closeSession, check/removeWatches.
    Empty,
    /// The reply body of `Create`.
    Create(CreateResponse),
    /// The reply body of `Create2`.
    Create2(Create2Response),
    /// The reply body of `Exists`.
    Exists(ExistsResponse),
    /// The reply body of `GetData`.
    GetData(GetDataResponse),
    /// setData, and a standalone `check`.
    SetData(SetDataResponse),
    /// The reply body of `GetAcl`.
    GetAcl(GetAclResponse),
    /// The reply body of `SetAcl`.
    SetAcl(SetAclResponse),
    /// The reply body of `GetChildren`.
    GetChildren(GetChildrenResponse),
    /// The reply body of `GetChildren2`.
    GetChildren2(GetChildren2Response),
    /// The reply body of `Sync`.
    Sync(SyncResponse),
    /// The reply body of `Multi`.
    Multi(Vec<MultiResult>),
    /// The reply body of `Sasl`.
    Sasl(SetSaslResponse),
    /// The reply body of `GetEphemerals`.
    GetEphemerals(GetEphemeralsResponse),
    /// The reply body of `GetAllChildrenNumber`.
    GetAllChildrenNumber(GetAllChildrenNumberResponse),
    /// addWatch answers with an `ErrorResponse{0}`.
    AddWatch(ErrorResponse),
    /// The reply body of `WhoAmI`.
    WhoAmI(WhoAmIResponse),
    /// The body of a watch notification (xid -1).
    Notification(WatcherEvent),
}

fn decode_multi_results(mut input: &[u8]) -> Result<Vec<MultiResult>, DecodeError> {
    let mut out = Vec::new();
    loop {
        let (rest, header) = finish(MultiHeader::decode_field(input))?;
        input = rest;
        if header.done {
            if !input.is_empty() {
                return Err(DecodeError::new(DecodeErrorKind::TrailingBytes(input.len())).at("MultiResponse", ""));
            }
            return Ok(out);
        }
        macro_rules! next {
            ($t:ty) => {{
                let (rest, v) = finish(<$t>::decode_field(input))?;
                input = rest;
                v
            }};
        }
        let result = match OpCode::try_from(header.op_type) {
            Ok(OpCode::Create) => MultiResult::Create(next!(CreateResponse)),
            Ok(op @ (OpCode::Create2 | OpCode::CreateTtl | OpCode::CreateContainer)) => {
                MultiResult::Create2 { op, response: next!(Create2Response) }
            }
            Ok(OpCode::Delete) => MultiResult::Delete,
            Ok(OpCode::SetData) => MultiResult::SetData(next!(SetDataResponse)),
            Ok(OpCode::Check) => MultiResult::Check,
            Ok(OpCode::GetChildren) => MultiResult::GetChildren(next!(GetChildrenResponse)),
            Ok(OpCode::GetData) => MultiResult::GetData(next!(GetDataResponse)),
            Ok(OpCode::Error) => MultiResult::Error(next!(ErrorResponse).err),
            _ => {
                return Err(DecodeError::new(DecodeErrorKind::UnknownValue {
                    what: "multi result type",
                    value: header.op_type,
                })
                .at("MultiHeader", "type"))
            }
        };
        out.push(result);
    }
}

fn encode_multi_results(results: &[MultiResult], buf: &mut BytesMut) {
    for r in results {
        let (op_type, err) = match r {
            MultiResult::Create(_) => (OpCode::Create.code(), 0),
            MultiResult::Create2 { op, .. } => (op.code(), 0),
            MultiResult::Delete => (OpCode::Delete.code(), 0),
            MultiResult::SetData(_) => (OpCode::SetData.code(), 0),
            MultiResult::Check => (OpCode::Check.code(), 0),
            MultiResult::GetChildren(_) => (OpCode::GetChildren.code(), 0),
            MultiResult::GetData(_) => (OpCode::GetData.code(), 0),
            MultiResult::Error(err) => (OpCode::Error.code(), *err),
        };
        MultiHeader { op_type, done: false, err }.encode_field(buf);
        match r {
            MultiResult::Create(b) => b.encode_field(buf),
            MultiResult::Create2 { response, .. } => response.encode_field(buf),
            MultiResult::SetData(b) => b.encode_field(buf),
            MultiResult::GetChildren(b) => b.encode_field(buf),
            MultiResult::GetData(b) => b.encode_field(buf),
            MultiResult::Error(err) => ErrorResponse { err: *err }.encode_field(buf),
            MultiResult::Delete | MultiResult::Check => {}
        }
    }
    MultiHeader { op_type: -1, done: true, err: -1 }.encode_field(buf);
}

impl Response {
    /// Decodes a reply body for a request of opcode `op`. An empty body is [`Response::Empty`]
    /// whatever the opcode (error replies carry no body).
    pub fn decode(op: OpCode, input: &[u8]) -> Result<Response, DecodeError> {
        if input.is_empty() {
            return Ok(Response::Empty);
        }
        Ok(match op {
            OpCode::Create => Response::Create(CreateResponse::decode(input)?),
            OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
                Response::Create2(Create2Response::decode(input)?)
            }
            OpCode::Exists => Response::Exists(ExistsResponse::decode(input)?),
            OpCode::GetData | OpCode::Reconfig => Response::GetData(GetDataResponse::decode(input)?),
            OpCode::SetData | OpCode::Check => Response::SetData(SetDataResponse::decode(input)?),
            OpCode::GetAcl => Response::GetAcl(GetAclResponse::decode(input)?),
            OpCode::SetAcl => Response::SetAcl(SetAclResponse::decode(input)?),
            OpCode::GetChildren => Response::GetChildren(GetChildrenResponse::decode(input)?),
            OpCode::GetChildren2 => Response::GetChildren2(GetChildren2Response::decode(input)?),
            OpCode::Sync => Response::Sync(SyncResponse::decode(input)?),
            OpCode::Multi | OpCode::MultiRead => Response::Multi(decode_multi_results(input)?),
            OpCode::Sasl => Response::Sasl(SetSaslResponse::decode(input)?),
            OpCode::GetEphemerals => Response::GetEphemerals(GetEphemeralsResponse::decode(input)?),
            OpCode::GetAllChildrenNumber => {
                Response::GetAllChildrenNumber(GetAllChildrenNumberResponse::decode(input)?)
            }
            OpCode::AddWatch => Response::AddWatch(ErrorResponse::decode(input)?),
            OpCode::WhoAmI => Response::WhoAmI(WhoAmIResponse::decode(input)?),
            OpCode::Notification => Response::Notification(WatcherEvent::decode(input)?),
            OpCode::Delete
            | OpCode::Ping
            | OpCode::CheckWatches
            | OpCode::RemoveWatches
            | OpCode::DeleteContainer
            | OpCode::Auth
            | OpCode::SetWatches
            | OpCode::SetWatches2
            | OpCode::CreateSession
            | OpCode::CloseSession
            | OpCode::Error => {
                return Err(DecodeError::new(DecodeErrorKind::TrailingBytes(input.len())).at("reply", op.name()))
            }
        })
    }

    /// Appends the body (without header).
    pub fn encode_body(&self, buf: &mut BytesMut) {
        match self {
            Response::Empty => {}
            Response::Create(b) => b.encode_field(buf),
            Response::Create2(b) => b.encode_field(buf),
            Response::Exists(b) => b.encode_field(buf),
            Response::GetData(b) => b.encode_field(buf),
            Response::SetData(b) => b.encode_field(buf),
            Response::GetAcl(b) => b.encode_field(buf),
            Response::SetAcl(b) => b.encode_field(buf),
            Response::GetChildren(b) => b.encode_field(buf),
            Response::GetChildren2(b) => b.encode_field(buf),
            Response::Sync(b) => b.encode_field(buf),
            Response::Multi(results) => encode_multi_results(results, buf),
            Response::Sasl(b) => b.encode_field(buf),
            Response::GetEphemerals(b) => b.encode_field(buf),
            Response::GetAllChildrenNumber(b) => b.encode_field(buf),
            Response::AddWatch(b) => b.encode_field(buf),
            Response::WhoAmI(b) => b.encode_field(buf),
            Response::Notification(b) => b.encode_field(buf),
        }
    }

    /// The body's exact encoded length, to size a frame before writing it.
    pub fn encoded_len(&self) -> usize {
        // Multi results are rare enough that measuring by encoding is fine.
        if let Response::Multi(_) = self {
            let mut b = BytesMut::new();
            self.encode_body(&mut b);
            return b.len();
        }
        match self {
            Response::Empty | Response::Multi(_) => 0,
            Response::Create(b) => b.field_len(),
            Response::Create2(b) => b.field_len(),
            Response::Exists(b) => b.field_len(),
            Response::GetData(b) => b.field_len(),
            Response::SetData(b) => b.field_len(),
            Response::GetAcl(b) => b.field_len(),
            Response::SetAcl(b) => b.field_len(),
            Response::GetChildren(b) => b.field_len(),
            Response::GetChildren2(b) => b.field_len(),
            Response::Sync(b) => b.field_len(),
            Response::Sasl(b) => b.field_len(),
            Response::GetEphemerals(b) => b.field_len(),
            Response::GetAllChildrenNumber(b) => b.field_len(),
            Response::AddWatch(b) => b.field_len(),
            Response::WhoAmI(b) => b.field_len(),
            Response::Notification(b) => b.field_len(),
        }
    }
}

/// Decodes a whole reply frame body (after the length prefix) given a way to find the opcode
/// of the request an xid answers. Notifications (xid -1) need no lookup.
pub fn decode_reply(
    frame: &[u8],
    opcode_of: impl FnOnce(i32) -> Option<OpCode>,
) -> Result<(ReplyHeader, Response), DecodeError> {
    let (rest, header) = finish(ReplyHeader::decode_field(frame))?;
    let op = if header.xid == -1 {
        OpCode::Notification
    } else {
        opcode_of(header.xid).ok_or_else(|| {
            DecodeError::new(DecodeErrorKind::UnknownValue { what: "reply xid", value: header.xid })
                .at("ReplyHeader", "xid")
        })?
    };
    let response = Response::decode(op, rest)?;
    Ok((header, response))
}
