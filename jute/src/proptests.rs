//! Property tests: decode(encode(x)) == x for every record, enum, request and reply, and
//! decoding arbitrary bytes never panics.

use bytes::BytesMut;
use proptest::prelude::*;

use crate::consts::*;
use crate::proto::*;
use crate::record::strategy::FieldStrategy;
use crate::record::Record;
use crate::request::decode_request;
use crate::request::MultiOp;
use crate::request::Request;
use crate::response::MultiResult;
use crate::response::Response;
use crate::txn::*;

fn roundtrip<T: Record + PartialEq + std::fmt::Debug>(value: &T) -> Result<(), TestCaseError> {
    let bytes = value.to_bytes();
    prop_assert_eq!(bytes.len(), value.field_len());
    let back = T::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, value);
    Ok(())
}

macro_rules! record_roundtrips {
    ($($t:ident),+ $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            $(
                #[allow(non_snake_case)]
                #[test]
                fn $t(value in <$t as FieldStrategy>::strategy(), junk in proptest::collection::vec(any::<u8>(), 0..64)) {
                    roundtrip(&value)?;
                    // Hostile input: any bytes decode to a value or an error, never a panic.
                    let _ = <$t as Record>::decode(&junk);
                }
            )+
        }
    };
}

mod records {
    use super::*;
    record_roundtrips!(
        Id,
        Acl,
        Stat,
        StatPersisted,
        ClientInfo,
        ConnectRequest,
        ConnectResponse,
        SetWatches,
        SetWatches2,
        RequestHeader,
        MultiHeader,
        AuthPacket,
        ReplyHeader,
        GetDataRequest,
        SetDataRequest,
        ReconfigRequest,
        SetDataResponse,
        GetSaslRequest,
        SetSaslRequest,
        SetSaslResponse,
        CreateRequest,
        CreateTtlRequest,
        DeleteRequest,
        GetChildrenRequest,
        GetAllChildrenNumberRequest,
        GetChildren2Request,
        CheckVersionRequest,
        SyncRequest,
        SyncResponse,
        GetAclRequest,
        SetAclRequest,
        SetAclResponse,
        AddWatchRequest,
        WatcherEvent,
        ErrorResponse,
        CreateResponse,
        Create2Response,
        ExistsRequest,
        ExistsResponse,
        GetDataResponse,
        GetChildrenResponse,
        GetAllChildrenNumberResponse,
        GetChildren2Response,
        GetAclResponse,
        CheckWatchesRequest,
        RemoveWatchesRequest,
        GetEphemeralsRequest,
        GetEphemeralsResponse,
        WhoAmIResponse,
        FileHeader,
        TxnDigest,
        TxnHeader,
        CreateTxnV0,
        CreateTxn,
        CreateTtlTxn,
        CreateContainerTxn,
        DeleteTxn,
        SetDataTxn,
        CheckVersionTxn,
        SetAclTxn,
        SetMaxChildrenTxn,
        CreateSessionTxn,
        CloseSessionTxn,
        ErrorTxn,
        Txn,
        MultiTxn,
    );
}

macro_rules! enum_roundtrips {
    ($($t:ident),+) => {
        proptest! {
            $(
                #[allow(non_snake_case)]
                #[test]
                fn $t(v in any::<$t>(), raw in any::<i32>()) {
                    prop_assert_eq!($t::try_from(i32::from(v)), Ok(v));
                    if let Ok(parsed) = $t::try_from(raw) {
                        prop_assert_eq!(i32::from(parsed), raw);
                    }
                }
            )+
        }
    };
}

mod enums {
    use super::*;
    enum_roundtrips!(OpCode, ErrorCode, EventType, KeeperState, CreateMode, AddWatchMode, WatcherType, SpecialXid);
}

fn multi_op() -> impl Strategy<Value = MultiOp> {
    prop_oneof![
        CreateRequest::strategy().prop_map(MultiOp::Create),
        CreateRequest::strategy().prop_map(MultiOp::Create2),
        CreateRequest::strategy().prop_map(MultiOp::CreateContainer),
        CreateTtlRequest::strategy().prop_map(MultiOp::CreateTtl),
        DeleteRequest::strategy().prop_map(MultiOp::Delete),
        SetDataRequest::strategy().prop_map(MultiOp::SetData),
        CheckVersionRequest::strategy().prop_map(MultiOp::Check),
        GetChildrenRequest::strategy().prop_map(MultiOp::GetChildren),
        GetDataRequest::strategy().prop_map(MultiOp::GetData),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let ops = || proptest::collection::vec(multi_op(), 0..4);
    prop_oneof![
        CreateRequest::strategy().prop_map(Request::Create),
        DeleteRequest::strategy().prop_map(Request::Delete),
        ExistsRequest::strategy().prop_map(Request::Exists),
        GetDataRequest::strategy().prop_map(Request::GetData),
        SetDataRequest::strategy().prop_map(Request::SetData),
        GetAclRequest::strategy().prop_map(Request::GetAcl),
        SetAclRequest::strategy().prop_map(Request::SetAcl),
        GetChildrenRequest::strategy().prop_map(Request::GetChildren),
        SyncRequest::strategy().prop_map(Request::Sync),
        Just(Request::Ping),
        GetChildren2Request::strategy().prop_map(Request::GetChildren2),
        CheckVersionRequest::strategy().prop_map(Request::Check),
        ops().prop_map(Request::Multi),
        CreateRequest::strategy().prop_map(Request::Create2),
        ReconfigRequest::strategy().prop_map(Request::Reconfig),
        CheckWatchesRequest::strategy().prop_map(Request::CheckWatches),
        RemoveWatchesRequest::strategy().prop_map(Request::RemoveWatches),
        CreateRequest::strategy().prop_map(Request::CreateContainer),
        DeleteRequest::strategy().prop_map(Request::DeleteContainer),
        CreateTtlRequest::strategy().prop_map(Request::CreateTtl),
        ops().prop_map(Request::MultiRead),
        AuthPacket::strategy().prop_map(Request::Auth),
        SetWatches::strategy().prop_map(Request::SetWatches),
        GetSaslRequest::strategy().prop_map(Request::Sasl),
        GetEphemeralsRequest::strategy().prop_map(Request::GetEphemerals),
        GetAllChildrenNumberRequest::strategy().prop_map(Request::GetAllChildrenNumber),
        SetWatches2::strategy().prop_map(Request::SetWatches2),
        AddWatchRequest::strategy().prop_map(Request::AddWatch),
        Just(Request::WhoAmI),
        Just(Request::CloseSession),
    ]
}

fn multi_result() -> impl Strategy<Value = MultiResult> {
    prop_oneof![
        CreateResponse::strategy().prop_map(MultiResult::Create),
        (
            prop::sample::select(vec![OpCode::Create2, OpCode::CreateTtl, OpCode::CreateContainer]),
            Create2Response::strategy()
        )
            .prop_map(|(op, response)| MultiResult::Create2 { op, response }),
        Just(MultiResult::Delete),
        SetDataResponse::strategy().prop_map(MultiResult::SetData),
        Just(MultiResult::Check),
        GetChildrenResponse::strategy().prop_map(MultiResult::GetChildren),
        GetDataResponse::strategy().prop_map(MultiResult::GetData),
        any::<i32>().prop_map(MultiResult::Error),
    ]
}

/// A reply body together with an opcode it can answer.
fn response() -> impl Strategy<Value = (OpCode, Response)> {
    prop_oneof![
        Just((OpCode::Delete, Response::Empty)),
        CreateResponse::strategy().prop_map(|r| (OpCode::Create, Response::Create(r))),
        Create2Response::strategy().prop_map(|r| (OpCode::Create2, Response::Create2(r))),
        ExistsResponse::strategy().prop_map(|r| (OpCode::Exists, Response::Exists(r))),
        GetDataResponse::strategy().prop_map(|r| (OpCode::GetData, Response::GetData(r))),
        SetDataResponse::strategy().prop_map(|r| (OpCode::SetData, Response::SetData(r))),
        GetAclResponse::strategy().prop_map(|r| (OpCode::GetAcl, Response::GetAcl(r))),
        SetAclResponse::strategy().prop_map(|r| (OpCode::SetAcl, Response::SetAcl(r))),
        GetChildrenResponse::strategy().prop_map(|r| (OpCode::GetChildren, Response::GetChildren(r))),
        GetChildren2Response::strategy().prop_map(|r| (OpCode::GetChildren2, Response::GetChildren2(r))),
        SyncResponse::strategy().prop_map(|r| (OpCode::Sync, Response::Sync(r))),
        proptest::collection::vec(multi_result(), 0..4).prop_map(|r| (OpCode::Multi, Response::Multi(r))),
        SetSaslResponse::strategy().prop_map(|r| (OpCode::Sasl, Response::Sasl(r))),
        GetEphemeralsResponse::strategy().prop_map(|r| (OpCode::GetEphemerals, Response::GetEphemerals(r))),
        GetAllChildrenNumberResponse::strategy()
            .prop_map(|r| (OpCode::GetAllChildrenNumber, Response::GetAllChildrenNumber(r))),
        ErrorResponse::strategy().prop_map(|r| (OpCode::AddWatch, Response::AddWatch(r))),
        WhoAmIResponse::strategy().prop_map(|r| (OpCode::WhoAmI, Response::WhoAmI(r))),
        WatcherEvent::strategy().prop_map(|r| (OpCode::Notification, Response::Notification(r))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn requests_round_trip(xid in any::<i32>(), req in request()) {
        let mut buf = BytesMut::new();
        req.encode(xid, &mut buf);
        let (header, back) = decode_request(&buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(header.xid, xid);
        prop_assert_eq!(header.op_type, req.opcode().code());
        prop_assert_eq!(back, req);
    }

    #[test]
    fn responses_round_trip((op, resp) in response()) {
        let mut buf = BytesMut::new();
        resp.encode_body(&mut buf);
        prop_assert_eq!(buf.len(), resp.encoded_len());
        let back = Response::decode(op, &buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // A body that encodes to nothing (an empty multi never does: it has its end header).
        prop_assert_eq!(back, resp);
    }

    #[test]
    fn arbitrary_request_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes);
    }

    #[test]
    fn arbitrary_reply_bodies_never_panic(op in any::<OpCode>(), bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Response::decode(op, &bytes);
    }
}
