//! The Apache ZooKeeper client wire protocol, byte for byte, and nothing else.
//!
//! # Framing
//! Every packet in either direction is a 4-byte big-endian length followed by that many bytes.
//! The first frame a client sends is a [`ConnectRequest`] with no header, answered by a
//! [`ConnectResponse`] with no header. Every later request starts with a [`RequestHeader`]
//! `{xid, type}` and every reply or notification with a [`ReplyHeader`] `{xid, zxid, err}`.
//! Special xids ([`SpecialXid`]): -1 notification, -2 ping, -4 auth, -8 setWatches. A fresh
//! connection may instead start with a four-letter word such as `ruok`.
//!
//! # Layout
//! - [`primitives`]: jute `int`, `long`, `boolean`, `buffer`, `ustring`, `vector` (nom parsers
//!   over a complete frame, `BufMut` writers; `-1` lengths are null).
//! - [`names`]: [`Names`], a `vector<ustring>` of child names kept as its encoded bytes.
//! - [`record`]: the [`Record`] trait and the macro generating decode and encode from one field
//!   list.
//! - [`proto`]: every `zookeeper.jute` class the client protocol uses; [`txn`]: the classes of
//!   ZooKeeper's own data dir.
//! - [`consts`]: opcodes, error codes, event types, states, create modes, each from one table.
//! - [`request`] / [`response`]: typed request and reply bodies by opcode, multi framing.
//! - [`codec`]: tokio-util codecs for the server and the client side.
//!
//! This crate knows nothing of sessions, trees or replication. It never panics on input: any
//! byte string decodes to a value or a [`DecodeError`] naming the record and field, and no
//! length read from the wire allocates more than the frame holds.

#![warn(missing_docs)]

pub mod codec;
pub mod consts;
pub mod error;
pub mod names;
pub mod primitives;
pub mod proto;
pub mod record;
pub mod request;
pub mod response;
pub mod txn;

#[doc(hidden)]
pub use bytes as __bytes;
#[cfg(any(test, feature = "proptest"))]
#[doc(hidden)]
pub use proptest as __proptest;

pub use codec::ClientCodec;
pub use codec::ClientMessage;
pub use codec::ClientOutgoing;
pub use codec::CodecError;
pub use codec::ServerCodec;
pub use codec::ServerIncoming;
pub use codec::ServerMessage;
pub use codec::DEFAULT_MAX_FRAME;
pub use consts::perms;
pub use consts::AddWatchMode;
pub use consts::CreateMode;
pub use consts::ErrorCode;
pub use consts::EventType;
pub use consts::KeeperState;
pub use consts::OpCode;
pub use consts::SpecialXid;
pub use consts::UnknownValue;
pub use consts::WatcherType;
pub use error::DecodeError;
pub use error::DecodeErrorKind;
pub use names::Names;
pub use names::NamesBuilder;
pub use proto::*;
pub use record::decode_prefix;
pub use record::JuteField;
pub use record::Record;
pub use request::decode_request;
pub use request::MalformedRequest;
pub use request::MultiOp;
pub use request::Request;
pub use request::RequestError;
pub use response::decode_reply;
pub use response::MultiResult;
pub use response::Response;

#[cfg(test)]
mod proptests;
