//! The records Apache ZooKeeper writes to its own data dir (`org.apache.zookeeper.txn` and
//! `org.apache.zookeeper.server.persistence`), for importing an existing ZooKeeper data dir.
//!
//! Warden's own log and snapshots do not use these; they exist so an importer can read
//! `log.<zxid>` and `snapshot.<zxid>` files record by record.

use bytes::Bytes;

use crate::jute_record;
use crate::proto::Acl;

jute_record! {
    /// `FileHeader`: starts a txn log (`ZKLG`) or a snapshot (`ZKSN`).
    pub struct FileHeader("FileHeader") {
        magic: i32,
        version: i32,
        dbid: i64,
    }

    /// `TxnDigest`: optional tree digest after a txn (3.6+).
    pub struct TxnDigest("TxnDigest") {
        version: i32,
        tree_digest: i64,
    }

    /// `TxnHeader`: precedes every logged txn; `txn_type` is an opcode.
    pub struct TxnHeader("TxnHeader") {
        client_id: i64,
        cxid: i32,
        zxid: i64,
        time: i64,
        txn_type: i32,
    }

    /// `CreateTxnV0`: create in logs written before `parentCVersion` existed.
    pub struct CreateTxnV0("CreateTxnV0") {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        ephemeral: bool,
    }

    /// `CreateTxn`.
    pub struct CreateTxn("CreateTxn") {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        ephemeral: bool,
        parent_c_version: i32,
    }

    /// `CreateTTLTxn`.
    pub struct CreateTtlTxn("CreateTTLTxn") {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        parent_c_version: i32,
        ttl: i64,
    }

    /// `CreateContainerTxn`.
    pub struct CreateContainerTxn("CreateContainerTxn") {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        parent_c_version: i32,
    }

    /// `DeleteTxn` (delete and deleteContainer).
    pub struct DeleteTxn("DeleteTxn") {
        path: String,
    }

    /// `SetDataTxn` (also reconfig, on `/zookeeper/config`).
    pub struct SetDataTxn("SetDataTxn") {
        path: String,
        data: Option<Bytes>,
        version: i32,
    }

    /// `CheckVersionTxn`.
    pub struct CheckVersionTxn("CheckVersionTxn") {
        path: String,
        version: i32,
    }

    /// `SetACLTxn`.
    pub struct SetAclTxn("SetACLTxn") {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    }

    /// `SetMaxChildrenTxn` (obsolete; still found in old logs).
    pub struct SetMaxChildrenTxn("SetMaxChildrenTxn") {
        path: String,
        max: i32,
    }

    /// `CreateSessionTxn`.
    pub struct CreateSessionTxn("CreateSessionTxn") {
        time_out: i32,
    }

    /// `CloseSessionTxn`: the ephemerals to delete (empty in old logs).
    pub struct CloseSessionTxn("CloseSessionTxn") {
        paths2_delete: Vec<String>,
    }

    /// `ErrorTxn`.
    pub struct ErrorTxn("ErrorTxn") {
        err: i32,
    }

    /// `Txn`: one op of a `MultiTxn`, its record serialized into `data`.
    pub struct Txn("Txn") {
        txn_type: i32,
        data: Bytes,
    }

    /// `MultiTxn`.
    pub struct MultiTxn("MultiTxn") {
        txns: Vec<Txn>,
    }
}

/// `FileHeader.magic` of a txn log: `"ZKLG"`.
pub const TXN_LOG_MAGIC: i32 = 0x5A4B_4C47;
/// `FileHeader.magic` of a snapshot: `"ZKSN"`.
pub const SNAPSHOT_MAGIC: i32 = 0x5A4B_534E;
