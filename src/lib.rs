//! Warden: a ZooKeeper-wire-compatible coordination server.
//!
//! # Layout (the data path)
//! - `jute` (separate crate): frames and records.
//! - [`client`]: the client port; one task per connection, one ordered outbound stream.
//! - [`dispatch`]: ZooKeeper's request pipeline: prep (read/write classification, stamping),
//!   propose (through Raft), reads, and reply (the one place errors become ZooKeeper codes).
//! - [`raft`]: openraft glue: redb log store, state machine (assigns zxids), snapshots.
//! - [`tree`]: the DataTree, deterministic apply.
//! - [`txn`]: the replicated command.
//! - [`watch`]: the watch manager (not replicated).
//! - [`session`]: session liveness and expiry (the expirer proposes CloseSession).
//! - [`admin`]: four-letter words.
//! - [`config`]: zoo.cfg and command-line flags into one validated `Config`.
//! - [`placement`]: which CPUs the runtime's worker threads run on, following the load.
//! - [`server`]: the composition root.

pub mod admin;
pub mod alloc;
pub mod client;
pub mod config;
pub mod dispatch;
pub mod failover;
pub mod peer;
pub mod placement;
pub mod raft;
pub mod server;
pub mod session;
pub mod tree;
pub mod txn;
pub mod watch;
