//! ZooKeeper's protocol enums, each from one table: opcodes, error codes, event types, keeper
//! states, create modes, watch modes, watcher types, permissions and the special xids.
//!
//! Each table gives the value ZooKeeper uses (`ZooDefs.OpCode`, `KeeperException.Code`,
//! `Watcher.Event`, `CreateMode`, `AddWatchMode`, `Watcher.WatcherType`) and a lower-case name
//! for logs and metric labels. `TryFrom<i32>` is the only way in from the wire and returns
//! [`UnknownValue`] for anything not in the table; `From<T> for i32` is the only way out.

use std::fmt;

/// An integer that is not a value of the named protocol enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value}")]
pub struct UnknownValue {
    /// The enum's name.
    pub what: &'static str,
    /// The value that was read.
    pub value: i32,
}

macro_rules! jute_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum $name {
            $( $(#[$vmeta])* #[doc = concat!("`", $label, "` = ", stringify!($value))] $variant = $value, )+
        }

        impl $name {
            /// Every value, in table order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The lower-case name used in logs and metric labels.
            pub const fn name(self) -> &'static str {
                match self { $($name::$variant => $label),+ }
            }

            /// The wire value.
            pub const fn code(self) -> i32 {
                self as i32
            }
        }

        impl TryFrom<i32> for $name {
            type Error = UnknownValue;
            fn try_from(value: i32) -> Result<Self, UnknownValue> {
                match value {
                    $( $value => Ok($name::$variant), )+
                    _ => Err(UnknownValue { what: $what, value }),
                }
            }
        }

        impl From<$name> for i32 {
            fn from(v: $name) -> i32 {
                v as i32
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        #[cfg(any(test, feature = "proptest"))]
        impl $crate::__proptest::arbitrary::Arbitrary for $name {
            type Parameters = ();
            type Strategy = $crate::__proptest::strategy::BoxedStrategy<Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                use $crate::__proptest::strategy::Strategy;
                $crate::__proptest::sample::select($name::ALL).boxed()
            }
        }
    };
}

jute_enum! {
    /// Request types (`ZooDefs.OpCode`).
    pub enum OpCode("opcode") {
        Notification = 0 => "notification",
        Create = 1 => "create",
        Delete = 2 => "delete",
        Exists = 3 => "exists",
        GetData = 4 => "get_data",
        SetData = 5 => "set_data",
        GetAcl = 6 => "get_acl",
        SetAcl = 7 => "set_acl",
        GetChildren = 8 => "get_children",
        Sync = 9 => "sync",
        Ping = 11 => "ping",
        GetChildren2 = 12 => "get_children2",
        Check = 13 => "check",
        Multi = 14 => "multi",
        Create2 = 15 => "create2",
        Reconfig = 16 => "reconfig",
        CheckWatches = 17 => "check_watches",
        RemoveWatches = 18 => "remove_watches",
        CreateContainer = 19 => "create_container",
        DeleteContainer = 20 => "delete_container",
        CreateTtl = 21 => "create_ttl",
        MultiRead = 22 => "multi_read",
        Auth = 100 => "auth",
        SetWatches = 101 => "set_watches",
        Sasl = 102 => "sasl",
        GetEphemerals = 103 => "get_ephemerals",
        GetAllChildrenNumber = 104 => "get_all_children_number",
        SetWatches2 = 105 => "set_watches2",
        AddWatch = 106 => "add_watch",
        WhoAmI = 107 => "who_am_i",
        CreateSession = -10 => "create_session",
        CloseSession = -11 => "close_session",
        Error = -1 => "error",
    }
}

jute_enum! {
    /// Result codes (`KeeperException.Code`). `Ok` is success; everything else is an error.
    pub enum ErrorCode("error code") {
        Ok = 0 => "ok",
        SystemError = -1 => "system_error",
        RuntimeInconsistency = -2 => "runtime_inconsistency",
        DataInconsistency = -3 => "data_inconsistency",
        ConnectionLoss = -4 => "connection_loss",
        MarshallingError = -5 => "marshalling_error",
        Unimplemented = -6 => "unimplemented",
        OperationTimeout = -7 => "operation_timeout",
        BadArguments = -8 => "bad_arguments",
        UnknownSession = -12 => "unknown_session",
        NewConfigNoQuorum = -13 => "new_config_no_quorum",
        ReconfigInProgress = -14 => "reconfig_in_progress",
        ApiError = -100 => "api_error",
        NoNode = -101 => "no_node",
        NoAuth = -102 => "no_auth",
        BadVersion = -103 => "bad_version",
        NoChildrenForEphemerals = -108 => "no_children_for_ephemerals",
        NodeExists = -110 => "node_exists",
        NotEmpty = -111 => "not_empty",
        SessionExpired = -112 => "session_expired",
        InvalidCallback = -113 => "invalid_callback",
        InvalidAcl = -114 => "invalid_acl",
        AuthFailed = -115 => "auth_failed",
        SessionMoved = -118 => "session_moved",
        NotReadOnly = -119 => "not_read_only",
        EphemeralOnLocalSession = -120 => "ephemeral_on_local_session",
        NoWatcher = -121 => "no_watcher",
        RequestTimeout = -122 => "request_timeout",
        ReconfigDisabled = -123 => "reconfig_disabled",
        SessionClosedRequireSaslAuth = -124 => "session_closed_require_sasl_auth",
        QuotaExceeded = -125 => "quota_exceeded",
        ThrottledOp = -127 => "throttled_op",
    }
}

jute_enum! {
    /// Watch event types (`Watcher.Event.EventType`).
    pub enum EventType("event type") {
        None = -1 => "none",
        NodeCreated = 1 => "node_created",
        NodeDeleted = 2 => "node_deleted",
        NodeDataChanged = 3 => "node_data_changed",
        NodeChildrenChanged = 4 => "node_children_changed",
        DataWatchRemoved = 5 => "data_watch_removed",
        ChildWatchRemoved = 6 => "child_watch_removed",
        PersistentWatchRemoved = 7 => "persistent_watch_removed",
    }
}

jute_enum! {
    /// Client connection states carried in watch events (`Watcher.Event.KeeperState`).
    pub enum KeeperState("keeper state") {
        Unknown = -1 => "unknown",
        Disconnected = 0 => "disconnected",
        NoSyncConnected = 1 => "no_sync_connected",
        SyncConnected = 3 => "sync_connected",
        AuthFailed = 4 => "auth_failed",
        ConnectedReadOnly = 5 => "connected_read_only",
        SaslAuthenticated = 6 => "sasl_authenticated",
        Expired = -112 => "expired",
        Closed = 7 => "closed",
    }
}

jute_enum! {
    /// Node creation modes, by their `flags` value in `CreateRequest` (`CreateMode`).
    pub enum CreateMode("create mode") {
        Persistent = 0 => "persistent",
        Ephemeral = 1 => "ephemeral",
        PersistentSequential = 2 => "persistent_sequential",
        EphemeralSequential = 3 => "ephemeral_sequential",
        Container = 4 => "container",
        PersistentWithTtl = 5 => "persistent_with_ttl",
        PersistentSequentialWithTtl = 6 => "persistent_sequential_with_ttl",
    }
}

impl CreateMode {
    /// Ephemeral nodes vanish with their session.
    pub const fn is_ephemeral(self) -> bool {
        matches!(self, CreateMode::Ephemeral | CreateMode::EphemeralSequential)
    }
    /// Sequential nodes get a 10-digit suffix from the parent's counter.
    pub const fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }
    /// Containers are removed once their last child goes.
    pub const fn is_container(self) -> bool {
        matches!(self, CreateMode::Container)
    }
    /// TTL nodes are removed after their TTL without change or children.
    pub const fn is_ttl(self) -> bool {
        matches!(self, CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl)
    }
}

jute_enum! {
    /// Modes of `addWatch` (`AddWatchMode`).
    pub enum AddWatchMode("add watch mode") {
        Persistent = 0 => "persistent",
        PersistentRecursive = 1 => "persistent_recursive",
    }
}

jute_enum! {
    /// Watch kinds of `checkWatches`/`removeWatches` (`Watcher.WatcherType`).
    pub enum WatcherType("watcher type") {
        Children = 1 => "children",
        Data = 2 => "data",
        Any = 3 => "any",
        Persistent = 4 => "persistent",
        PersistentRecursive = 5 => "persistent_recursive",
    }
}

jute_enum! {
    /// xids with a fixed meaning (`ClientCnxn`): everything else is a client's request counter.
    pub enum SpecialXid("special xid") {
        Notification = -1 => "notification",
        Ping = -2 => "ping",
        Auth = -4 => "auth",
        SetWatches = -8 => "set_watches",
    }
}

/// Permission bits of an ACL entry (`ZooDefs.Perms`).
pub mod perms {
    /// May read data and list children.
    pub const READ: i32 = 1;
    /// May set data.
    pub const WRITE: i32 = 2;
    /// May create children.
    pub const CREATE: i32 = 4;
    /// May delete children.
    pub const DELETE: i32 = 8;
    /// May set the ACL.
    pub const ADMIN: i32 = 16;
    /// Every permission.
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;

    /// The bits as ZooKeeper writes them (`ZKUtil.getPermString`, zkCli's `cdrwa`).
    pub fn letters(perms: i32) -> String {
        [(CREATE, 'c'), (DELETE, 'd'), (READ, 'r'), (WRITE, 'w'), (ADMIN, 'a')]
            .iter()
            .filter(|(bit, _)| perms & bit != 0)
            .map(|(_, c)| *c)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_round_trips_and_rejects_unknowns() {
        for op in OpCode::ALL {
            assert_eq!(OpCode::try_from(i32::from(*op)), Ok(*op));
        }
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::try_from(code.code()), Ok(*code));
        }
        assert_eq!(OpCode::try_from(10), Err(UnknownValue { what: "opcode", value: 10 }));
        assert!(ErrorCode::try_from(-9).is_err());
        assert!(CreateMode::try_from(7).is_err());
        assert!(EventType::try_from(0).is_err());
    }

    #[test]
    fn create_mode_flags() {
        assert!(CreateMode::EphemeralSequential.is_ephemeral());
        assert!(CreateMode::EphemeralSequential.is_sequential());
        assert!(CreateMode::PersistentSequentialWithTtl.is_ttl());
        assert!(!CreateMode::Container.is_sequential());
    }
}
