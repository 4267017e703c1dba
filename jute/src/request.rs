//! Typed requests: a `RequestHeader` plus the body its opcode calls for, including the
//! `MultiHeader` framing of `multi` and `multiRead`.
//!
//! [`decode_request`] is the one place raw opcodes become a [`Request`]; the server matches on
//! the enum and never sees bytes. [`Request::encode`] is the inverse, for clients, the load tool
//! and tests. Counterpart of ZooKeeper's `ZooKeeperServer.processPacket` body dispatch and
//! `MultiOperationRecord`.

use bytes::BufMut;
use bytes::BytesMut;

use crate::consts::OpCode;
use crate::error::finish;
use crate::error::DecodeError;
use crate::error::DecodeErrorKind;
use crate::proto::*;
use crate::record::JuteField;
use crate::record::Record;

/// One operation inside a `multi` (writes) or `multiRead` (reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// `Create` (inside a multi).
    Create(CreateRequest),
    /// `Create2` (inside a multi).
    Create2(CreateRequest),
    /// `CreateContainer` (inside a multi).
    CreateContainer(CreateRequest),
    /// `CreateTtl` (inside a multi).
    CreateTtl(CreateTtlRequest),
    /// `Delete` (inside a multi).
    Delete(DeleteRequest),
    /// `SetData` (inside a multi).
    SetData(SetDataRequest),
    /// `Check` (inside a multi).
    Check(CheckVersionRequest),
    /// `GetChildren` (inside a multi).
    GetChildren(GetChildrenRequest),
    /// `GetData` (inside a multi).
    GetData(GetDataRequest),
}

impl MultiOp {
    /// The opcode written in this op's `MultiHeader`.
    pub fn opcode(&self) -> OpCode {
        match self {
            MultiOp::Create(_) => OpCode::Create,
            MultiOp::Create2(_) => OpCode::Create2,
            MultiOp::CreateContainer(_) => OpCode::CreateContainer,
            MultiOp::CreateTtl(_) => OpCode::CreateTtl,
            MultiOp::Delete(_) => OpCode::Delete,
            MultiOp::SetData(_) => OpCode::SetData,
            MultiOp::Check(_) => OpCode::Check,
            MultiOp::GetChildren(_) => OpCode::GetChildren,
            MultiOp::GetData(_) => OpCode::GetData,
        }
    }

    /// True for the ops `multiRead` may carry.
    pub fn is_read(&self) -> bool {
        matches!(self, MultiOp::GetChildren(_) | MultiOp::GetData(_))
    }

    fn encode_body(&self, buf: &mut BytesMut) {
        match self {
            MultiOp::Create(r) | MultiOp::Create2(r) | MultiOp::CreateContainer(r) => r.encode_field(buf),
            MultiOp::CreateTtl(r) => r.encode_field(buf),
            MultiOp::Delete(r) => r.encode_field(buf),
            MultiOp::SetData(r) => r.encode_field(buf),
            MultiOp::Check(r) => r.encode_field(buf),
            MultiOp::GetChildren(r) => r.encode_field(buf),
            MultiOp::GetData(r) => r.encode_field(buf),
        }
    }
}

/// A client request body, by opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `Create` (opcode create).
    Create(CreateRequest),
    /// `Delete` (opcode delete).
    Delete(DeleteRequest),
    /// `Exists` (opcode exists).
    Exists(ExistsRequest),
    /// `GetData` (opcode get_data).
    GetData(GetDataRequest),
    /// `SetData` (opcode set_data).
    SetData(SetDataRequest),
    /// `GetAcl` (opcode get_acl).
    GetAcl(GetAclRequest),
    /// `SetAcl` (opcode set_acl).
    SetAcl(SetAclRequest),
    /// `GetChildren` (opcode get_children).
    GetChildren(GetChildrenRequest),
    /// `Sync` (opcode sync).
    Sync(SyncRequest),
    /// `Ping` (opcode ping).
    Ping,
    /// `GetChildren2` (opcode get_children2).
    GetChildren2(GetChildren2Request),
    /// `Check` (opcode check).
    Check(CheckVersionRequest),
    /// `Multi` (opcode multi).
    Multi(Vec<MultiOp>),
    /// `Create2` (opcode create2).
    Create2(CreateRequest),
    /// `Reconfig` (opcode reconfig).
    Reconfig(ReconfigRequest),
    /// `CheckWatches` (opcode check_watches).
    CheckWatches(CheckWatchesRequest),
    /// `RemoveWatches` (opcode remove_watches).
    RemoveWatches(RemoveWatchesRequest),
    /// `CreateContainer` (opcode create_container).
    CreateContainer(CreateRequest),
    /// `DeleteContainer` (opcode delete_container).
    DeleteContainer(DeleteRequest),
    /// `CreateTtl` (opcode create_ttl).
    CreateTtl(CreateTtlRequest),
    /// `MultiRead` (opcode multi_read).
    MultiRead(Vec<MultiOp>),
    /// `Auth` (opcode auth).
    Auth(AuthPacket),
    /// `SetWatches` (opcode set_watches).
    SetWatches(SetWatches),
    /// `Sasl` (opcode sasl).
    Sasl(GetSaslRequest),
    /// `GetEphemerals` (opcode get_ephemerals).
    GetEphemerals(GetEphemeralsRequest),
    /// `GetAllChildrenNumber` (opcode get_all_children_number).
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    /// `SetWatches2` (opcode set_watches2).
    SetWatches2(SetWatches2),
    /// `AddWatch` (opcode add_watch).
    AddWatch(AddWatchRequest),
    /// `WhoAmI` (opcode who_am_i).
    WhoAmI,
    /// `CloseSession` (opcode close_session).
    CloseSession,
}

/// A request frame whose header was readable but whose body was not: the server can still
/// answer the xid with an error code, as ZooKeeper answers `MarshallingError`/`Unimplemented`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request xid {} opcode {}: {error}", header.xid, header.op_type)]
pub struct MalformedRequest {
    /// The header as read.
    pub header: RequestHeader,
    /// Why the body (or the opcode) was refused.
    pub error: DecodeError,
}

/// Why a request frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The frame is too short to hold a `RequestHeader`: nothing can be answered.
    #[error("unreadable request header: {0}")]
    Header(DecodeError),
    /// The header was read; the body or opcode was not acceptable.
    #[error(transparent)]
    Body(MalformedRequest),
}

/// Decodes a request body. Bytes after the record are ignored, as ZooKeeper's server ignores
/// them (it deserializes the record from the front of the buffer and never checks the rest).
fn body<T: Record>(input: &[u8]) -> Result<T, DecodeError> {
    finish(T::decode_field(input)).map(|(_, v)| v)
}

/// Requests without a body: anything after the header is ignored, as in ZooKeeper.
fn empty(_input: &[u8], _record: &'static str) -> Result<(), DecodeError> {
    Ok(())
}

fn decode_multi(mut input: &[u8]) -> Result<Vec<MultiOp>, DecodeError> {
    let mut ops = Vec::new();
    loop {
        let (rest, header) = finish(MultiHeader::decode_field(input))?;
        input = rest;
        if header.done {
            empty(input, "MultiOperationRecord")?;
            return Ok(ops);
        }
        let op = OpCode::try_from(header.op_type).map_err(|e| {
            DecodeError::new(DecodeErrorKind::UnknownValue { what: "multi op type", value: e.value })
                .at("MultiHeader", "type")
        })?;
        macro_rules! next {
            ($t:ty) => {{
                let (rest, v) = finish(<$t>::decode_field(input))?;
                input = rest;
                v
            }};
        }
        let op = match op {
            OpCode::Create => MultiOp::Create(next!(CreateRequest)),
            OpCode::Create2 => MultiOp::Create2(next!(CreateRequest)),
            OpCode::CreateContainer => MultiOp::CreateContainer(next!(CreateRequest)),
            OpCode::CreateTtl => MultiOp::CreateTtl(next!(CreateTtlRequest)),
            OpCode::Delete => MultiOp::Delete(next!(DeleteRequest)),
            OpCode::SetData => MultiOp::SetData(next!(SetDataRequest)),
            OpCode::Check => MultiOp::Check(next!(CheckVersionRequest)),
            OpCode::GetChildren => MultiOp::GetChildren(next!(GetChildrenRequest)),
            OpCode::GetData => MultiOp::GetData(next!(GetDataRequest)),
            _ => {
                return Err(
                    DecodeError::new(DecodeErrorKind::Invalid("invalid type of op in multi")).at("MultiHeader", "type")
                )
            }
        };
        ops.push(op);
    }
}

fn encode_multi(ops: &[MultiOp], buf: &mut BytesMut) {
    for op in ops {
        MultiHeader { op_type: op.opcode().code(), done: false, err: -1 }.encode_field(buf);
        op.encode_body(buf);
    }
    MultiHeader { op_type: -1, done: true, err: -1 }.encode_field(buf);
}

impl Request {
    /// Decodes the body of a request of opcode `op` (the bytes after the `RequestHeader`).
    pub fn decode(op: OpCode, input: &[u8]) -> Result<Request, DecodeError> {
        Ok(match op {
            OpCode::Create => Request::Create(body(input)?),
            OpCode::Delete => Request::Delete(body(input)?),
            OpCode::Exists => Request::Exists(body(input)?),
            OpCode::GetData => Request::GetData(body(input)?),
            OpCode::SetData => Request::SetData(body(input)?),
            OpCode::GetAcl => Request::GetAcl(body(input)?),
            OpCode::SetAcl => Request::SetAcl(body(input)?),
            OpCode::GetChildren => Request::GetChildren(body(input)?),
            OpCode::Sync => Request::Sync(body(input)?),
            OpCode::Ping => {
                empty(input, "ping")?;
                Request::Ping
            }
            OpCode::GetChildren2 => Request::GetChildren2(body(input)?),
            OpCode::Check => Request::Check(body(input)?),
            OpCode::Multi => Request::Multi(decode_multi(input)?),
            OpCode::Create2 => Request::Create2(body(input)?),
            OpCode::Reconfig => Request::Reconfig(body(input)?),
            OpCode::CheckWatches => Request::CheckWatches(body(input)?),
            OpCode::RemoveWatches => Request::RemoveWatches(body(input)?),
            OpCode::CreateContainer => Request::CreateContainer(body(input)?),
            OpCode::DeleteContainer => Request::DeleteContainer(body(input)?),
            OpCode::CreateTtl => Request::CreateTtl(body(input)?),
            OpCode::MultiRead => Request::MultiRead(decode_multi(input)?),
            OpCode::Auth => Request::Auth(body(input)?),
            OpCode::SetWatches => Request::SetWatches(body(input)?),
            OpCode::Sasl => Request::Sasl(body(input)?),
            OpCode::GetEphemerals => Request::GetEphemerals(body(input)?),
            OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber(body(input)?),
            OpCode::SetWatches2 => Request::SetWatches2(body(input)?),
            OpCode::AddWatch => Request::AddWatch(body(input)?),
            OpCode::WhoAmI => {
                empty(input, "whoAmI")?;
                Request::WhoAmI
            }
            OpCode::CloseSession => {
                empty(input, "closeSession")?;
                Request::CloseSession
            }
            OpCode::Notification | OpCode::CreateSession | OpCode::Error => {
                return Err(DecodeError::new(DecodeErrorKind::UnknownValue { what: "client opcode", value: op.code() })
                    .at("RequestHeader", "type"))
            }
        })
    }

    /// The opcode this request is sent with.
    pub fn opcode(&self) -> OpCode {
        match self {
            Request::Create(_) => OpCode::Create,
            Request::Delete(_) => OpCode::Delete,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl(_) => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::Sync(_) => OpCode::Sync,
            Request::Ping => OpCode::Ping,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::Create2(_) => OpCode::Create2,
            Request::Reconfig(_) => OpCode::Reconfig,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::CreateContainer(_) => OpCode::CreateContainer,
            Request::DeleteContainer(_) => OpCode::DeleteContainer,
            Request::CreateTtl(_) => OpCode::CreateTtl,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Auth(_) => OpCode::Auth,
            Request::SetWatches(_) => OpCode::SetWatches,
            Request::Sasl(_) => OpCode::Sasl,
            Request::GetEphemerals(_) => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Request::SetWatches2(_) => OpCode::SetWatches2,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::CloseSession => OpCode::CloseSession,
        }
    }

    /// Appends the body (without header).
    pub fn encode_body(&self, buf: &mut BytesMut) {
        match self {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => r.encode_field(buf),
            Request::Delete(r) | Request::DeleteContainer(r) => r.encode_field(buf),
            Request::Exists(r) => r.encode_field(buf),
            Request::GetData(r) => r.encode_field(buf),
            Request::SetData(r) => r.encode_field(buf),
            Request::GetAcl(r) => r.encode_field(buf),
            Request::SetAcl(r) => r.encode_field(buf),
            Request::GetChildren(r) => r.encode_field(buf),
            Request::Sync(r) => r.encode_field(buf),
            Request::GetChildren2(r) => r.encode_field(buf),
            Request::Check(r) => r.encode_field(buf),
            Request::Multi(ops) | Request::MultiRead(ops) => encode_multi(ops, buf),
            Request::Reconfig(r) => r.encode_field(buf),
            Request::CheckWatches(r) => r.encode_field(buf),
            Request::RemoveWatches(r) => r.encode_field(buf),
            Request::CreateTtl(r) => r.encode_field(buf),
            Request::Auth(r) => r.encode_field(buf),
            Request::SetWatches(r) => r.encode_field(buf),
            Request::Sasl(r) => r.encode_field(buf),
            Request::GetEphemerals(r) => r.encode_field(buf),
            Request::GetAllChildrenNumber(r) => r.encode_field(buf),
            Request::SetWatches2(r) => r.encode_field(buf),
            Request::AddWatch(r) => r.encode_field(buf),
            Request::Ping | Request::WhoAmI | Request::CloseSession => {}
        }
    }

    /// Appends header and body (the frame's contents, without the length prefix).
    pub fn encode(&self, xid: i32, buf: &mut BytesMut) {
        buf.put_i32(xid);
        buf.put_i32(self.opcode().code());
        self.encode_body(buf);
    }
}

/// Decodes a whole request frame body (after the length prefix): header, then body.
pub fn decode_request(frame: &[u8]) -> Result<(RequestHeader, Request), RequestError> {
    let (rest, header) = finish(RequestHeader::decode_field(frame)).map_err(RequestError::Header)?;
    let malformed = |error: DecodeError| RequestError::Body(MalformedRequest { header: header.clone(), error });
    let op = OpCode::try_from(header.op_type).map_err(|e| {
        malformed(
            DecodeError::new(DecodeErrorKind::UnknownValue { what: "opcode", value: e.value })
                .at("RequestHeader", "type"),
        )
    })?;
    let request = Request::decode(op, rest).map_err(malformed)?;
    Ok((header, request))
}
