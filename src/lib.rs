//! Warden: a ZooKeeper-wire-compatible coordination server.
//!
//! # Layout (the data path, then what serves it)
//! - `jute` (separate crate): frames and records.
//! - [`client`]: the client port; one task per connection, one ordered outbound stream.
//! - [`dispatch`]: ZooKeeper's request pipeline behind one handle: connect, prep, propose
//!   (group commit, forwarding), order, read, reply (the one place errors become ZooKeeper
//!   codes), what the peer port asks, container reaping.
//! - [`raft`]: openraft behind a facade: the log, the state machine (assigns zxids),
//!   snapshots, waiters keyed by log id, elections, whether a member may serve.
//! - [`tree`]: the DataTree and the txn language it applies, deterministically.
//! - [`watch`]: the watch manager (not replicated).
//! - [`session`]: session liveness, touches to the leader, leader-side expiry.
//! - [`peer`]: the peer port between members (Raft's transport, forwarded writes, touches).
//! - [`stats`]: server statistics, read by admin.
//! - [`admin`]: four-letter words, admin HTTP, Prometheus.
//! - [`tls`]: TLS on the client port: key and trust stores, rustls' configuration and its
//!   reload, a client certificate's subject DN for the `x509` scheme.
//! - [`sasl`]: SASL for clients: the JAAS file and the DIGEST-MD5 mechanism.
//! - [`zkdata`]: Apache ZooKeeper's data dir: its snapshot and log formats, import, export,
//!   dumps, its session passwords and tree digest.
//! - [`config`]: zoo.cfg and command-line flags into one validated `Config`.
//! - [`runtime`]: process tuning: the allocator, worker placement, huge pages.
//! - [`clock`]: the wall clock.
//! - [`server`]: the composition root.
//!
//! Dependencies point one way (checked by `tests/module_cycles.rs`): `config`, `clock` and
//! `tree` know nothing of the rest; `raft` knows the tree but not the peer port, dispatch or
//! clients; `client` sees only the dispatcher and the statistics.

pub mod admin;
pub mod audit;
pub mod client;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod failpoint;
pub mod peer;
pub mod raft;
pub mod runtime;
pub mod sasl;
pub mod server;
pub mod session;
pub mod stats;
pub mod tls;
pub mod tree;
pub mod watch;
pub mod zkdata;
