//! One struct per class of `zookeeper.jute` that the client protocol uses
//! (`org.apache.zookeeper.data` and `org.apache.zookeeper.proto`), same field order.
//!
//! Rust names follow Rust casing (`Acl` for `ACL`, `CreateTtlRequest` for `CreateTTLRequest`);
//! each struct's doc and its [`Record::NAME`](crate::Record::NAME) give the jute class name.
//! These are plain data: semantic validation (path syntax, ACL rules) is the server's job.

use bytes::Bytes;

use crate::jute_record;

jute_record! {
    /// `Id` (data): an authentication scheme and identity, e.g. `digest` / `user:hash`.
    /// `id` may be null: kazoo sends `auth:` with a null id.
    pub struct Id("Id") {
        scheme: String,
        id: Option<String>,
    }

    /// `ACL` (data): permission bits (see [`crate::perms`]) granted to an [`Id`].
    pub struct Acl("ACL") {
        perms: i32,
        id: Id,
    }

    /// `Stat` (data): the metadata of a znode as clients see it.
    pub struct Stat("Stat") {
        czxid: i64,
        mzxid: i64,
        ctime: i64,
        mtime: i64,
        version: i32,
        cversion: i32,
        aversion: i32,
        ephemeral_owner: i64,
        data_length: i32,
        num_children: i32,
        pzxid: i64,
    }

    /// `StatPersisted` (data): `Stat` without the derived `dataLength`/`numChildren`.
    pub struct StatPersisted("StatPersisted") {
        czxid: i64,
        mzxid: i64,
        ctime: i64,
        mtime: i64,
        version: i32,
        cversion: i32,
        aversion: i32,
        ephemeral_owner: i64,
        pzxid: i64,
    }

    /// `ClientInfo` (data): one authenticated identity, as `whoAmI` reports it.
    pub struct ClientInfo("ClientInfo") {
        auth_scheme: String,
        user: String,
    }

    /// `ConnectRequest`: the first frame of a connection, with no `RequestHeader`.
    /// `read_only` is present iff the client sent it (clients older than 3.4 do not).
    pub struct ConnectRequest("ConnectRequest") {
        protocol_version: i32,
        last_zxid_seen: i64,
        time_out: i32,
        session_id: i64,
        passwd: Bytes,
        read_only: Option<bool>,
    }

    /// `ConnectResponse`: the server's answer to `ConnectRequest`, with no `ReplyHeader`.
    /// `read_only` is written iff the client's request carried it.
    pub struct ConnectResponse("ConnectResponse") {
        protocol_version: i32,
        time_out: i32,
        session_id: i64,
        passwd: Bytes,
        read_only: Option<bool>,
    }

    /// `SetWatches`: re-registers watches after a reconnect (xid -8, opcode 101).
    pub struct SetWatches("SetWatches") {
        relative_zxid: i64,
        data_watches: Vec<String>,
        exist_watches: Vec<String>,
        child_watches: Vec<String>,
    }

    /// `SetWatches2`: `SetWatches` plus persistent and recursive watches (opcode 105).
    pub struct SetWatches2("SetWatches2") {
        relative_zxid: i64,
        data_watches: Vec<String>,
        exist_watches: Vec<String>,
        child_watches: Vec<String>,
        persistent_watches: Vec<String>,
        persistent_recursive_watches: Vec<String>,
    }

    /// `RequestHeader`: precedes every request after the handshake.
    pub struct RequestHeader("RequestHeader") {
        xid: i32,
        op_type: i32,
    }

    /// `MultiHeader`: precedes each op of a multi request or result, and ends the list.
    pub struct MultiHeader("MultiHeader") {
        op_type: i32,
        done: bool,
        err: i32,
    }

    /// `AuthPacket`: `addauth` (xid -4, opcode 100).
    pub struct AuthPacket("AuthPacket") {
        auth_type: i32,
        scheme: String,
        auth: Bytes,
    }

    /// `ReplyHeader`: precedes every reply and notification.
    pub struct ReplyHeader("ReplyHeader") {
        xid: i32,
        zxid: i64,
        err: i32,
    }

    /// `GetDataRequest`.
    pub struct GetDataRequest("GetDataRequest") {
        path: String,
        watch: bool,
    }

    /// `SetDataRequest`; `version` -1 matches any version.
    pub struct SetDataRequest("SetDataRequest") {
        path: String,
        data: Option<Bytes>,
        version: i32,
    }

    /// `ReconfigRequest`; any of the strings may be null.
    pub struct ReconfigRequest("ReconfigRequest") {
        joining_servers: Option<String>,
        leaving_servers: Option<String>,
        new_members: Option<String>,
        cur_config_id: i64,
    }

    /// `SetDataResponse` (also the answer to a standalone `check`).
    pub struct SetDataResponse("SetDataResponse") {
        stat: Stat,
    }

    /// `GetSASLRequest`.
    pub struct GetSaslRequest("GetSASLRequest") {
        token: Option<Bytes>,
    }

    /// `SetSASLRequest`.
    pub struct SetSaslRequest("SetSASLRequest") {
        token: Option<Bytes>,
    }

    /// `SetSASLResponse`.
    pub struct SetSaslResponse("SetSASLResponse") {
        token: Option<Bytes>,
    }

    /// `CreateRequest` (create, create2, createContainer); `flags` is a [`crate::CreateMode`].
    pub struct CreateRequest("CreateRequest") {
        path: String,
        data: Option<Bytes>,
        acl: Option<Vec<Acl>>,
        flags: i32,
    }

    /// `CreateTTLRequest` (createTTL); `ttl` in milliseconds.
    pub struct CreateTtlRequest("CreateTTLRequest") {
        path: String,
        data: Option<Bytes>,
        acl: Option<Vec<Acl>>,
        flags: i32,
        ttl: i64,
    }

    /// `DeleteRequest`; `version` -1 matches any version.
    pub struct DeleteRequest("DeleteRequest") {
        path: String,
        version: i32,
    }

    /// `GetChildrenRequest`.
    pub struct GetChildrenRequest("GetChildrenRequest") {
        path: String,
        watch: bool,
    }

    /// `GetAllChildrenNumberRequest`.
    pub struct GetAllChildrenNumberRequest("GetAllChildrenNumberRequest") {
        path: String,
    }

    /// `GetChildren2Request`.
    pub struct GetChildren2Request("GetChildren2Request") {
        path: String,
        watch: bool,
    }

    /// `CheckVersionRequest`.
    pub struct CheckVersionRequest("CheckVersionRequest") {
        path: String,
        version: i32,
    }

    /// `SyncRequest`.
    pub struct SyncRequest("SyncRequest") {
        path: String,
    }

    /// `SyncResponse`.
    pub struct SyncResponse("SyncResponse") {
        path: String,
    }

    /// `GetACLRequest`.
    pub struct GetAclRequest("GetACLRequest") {
        path: String,
    }

    /// `SetACLRequest`; `version` is compared with the node's `aversion`.
    pub struct SetAclRequest("SetACLRequest") {
        path: String,
        acl: Option<Vec<Acl>>,
        version: i32,
    }

    /// `SetACLResponse`.
    pub struct SetAclResponse("SetACLResponse") {
        stat: Stat,
    }

    /// `AddWatchRequest`; `mode` is an [`crate::AddWatchMode`].
    pub struct AddWatchRequest("AddWatchRequest") {
        path: String,
        mode: i32,
    }

    /// `WatcherEvent`: the body of a notification (xid -1).
    pub struct WatcherEvent("WatcherEvent") {
        event_type: i32,
        state: i32,
        path: String,
    }

    /// `ErrorResponse`: an error result inside a multi, and the body of an `addWatch` reply.
    pub struct ErrorResponse("ErrorResponse") {
        err: i32,
    }

    /// `CreateResponse`: the created path (with its sequential suffix, if any).
    pub struct CreateResponse("CreateResponse") {
        path: String,
    }

    /// `Create2Response`: the created path and its `Stat`.
    pub struct Create2Response("Create2Response") {
        path: String,
        stat: Stat,
    }

    /// `ExistsRequest`.
    pub struct ExistsRequest("ExistsRequest") {
        path: String,
        watch: bool,
    }

    /// `ExistsResponse`.
    pub struct ExistsResponse("ExistsResponse") {
        stat: Stat,
    }

    /// `GetDataResponse` (also the answer to `reconfig`); null data stays null.
    pub struct GetDataResponse("GetDataResponse") {
        data: Option<Bytes>,
        stat: Stat,
    }

    /// `GetChildrenResponse`.
    pub struct GetChildrenResponse("GetChildrenResponse") {
        children: crate::names::Names,
    }

    /// `GetAllChildrenNumberResponse`.
    pub struct GetAllChildrenNumberResponse("GetAllChildrenNumberResponse") {
        total_number: i32,
    }

    /// `GetChildren2Response`.
    pub struct GetChildren2Response("GetChildren2Response") {
        children: crate::names::Names,
        stat: Stat,
    }

    /// `GetACLResponse`.
    pub struct GetAclResponse("GetACLResponse") {
        acl: Vec<Acl>,
        stat: Stat,
    }

    /// `CheckWatchesRequest`; `watcher_type` is a [`crate::WatcherType`].
    pub struct CheckWatchesRequest("CheckWatchesRequest") {
        path: String,
        watcher_type: i32,
    }

    /// `RemoveWatchesRequest`; `watcher_type` is a [`crate::WatcherType`].
    pub struct RemoveWatchesRequest("RemoveWatchesRequest") {
        path: String,
        watcher_type: i32,
    }

    /// `GetEphemeralsRequest`.
    pub struct GetEphemeralsRequest("GetEphemeralsRequest") {
        prefix_path: String,
    }

    /// `GetEphemeralsResponse`.
    pub struct GetEphemeralsResponse("GetEphemeralsResponse") {
        ephemerals: Vec<String>,
    }

    /// `WhoAmIResponse`.
    pub struct WhoAmIResponse("WhoAmIResponse") {
        client_info: Vec<ClientInfo>,
    }
}
