//! The audit log (`audit.enable`): one line per client write, in ZooKeeper's format, in its
//! own file. Counterpart of ZooKeeper's `ZKAuditProvider`, `AuditHelper`, `AuditEvent` and
//! `Slf4jAuditLogger`, with the line pattern of the audit appender in ZooKeeper's
//! `logback.xml` (`%d{ISO8601} %p %c{2}: %m%n`; the fields are split by tabs):
//!
//! ```text
//! 2026-12-06 01:23:45,678 INFO audit.Slf4jAuditLogger: session=0x100000a3c0001 user=127.0.0.1,alice ip=127.0.0.1 operation=create znode=/app/a znode_type=persistent result=success
//! ```
//!
//! Which writes are logged, and with what, follows `AuditHelper` (see [`Write`]); the member
//! holding the client's connection logs them once the write's result is known, and every
//! member logs the ephemerals a closed session loses (`DataTree.deleteNodes`). Lines go
//! through a bounded queue to a writer thread: a write never waits for the audit file, and
//! when the queue is full a line is dropped and counted (`audit_lines_dropped`).
//!
//! Owns nothing else; knows the tree's txn language only to describe it.

use std::fs::OpenOptions;
use std::io::BufWriter;
use std::io::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;
use std::sync::OnceLock;

use crate::tree::acl::AclEntry;
use crate::tree::acl::AuthId;
use crate::tree::txn::OpResult;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;
use crate::tree::txn::TxnOutput;
use crate::tree::TreeError;

/// Lines queued for the writer before new ones are dropped.
const QUEUE: usize = 64 * 1024;

/// The logger name as `%c{2}` abbreviates ZooKeeper's `org.apache.zookeeper.audit.Slf4jAuditLogger`.
const LOGGER: &str = "audit.Slf4jAuditLogger";

struct Sink {
    queue: mpsc::SyncSender<Message>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

enum Message {
    Line(String),
    Stop,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Whether audit lines are being written.
pub fn enabled() -> bool {
    SINK.get().is_some()
}

/// Opens (appending) the audit file and starts its writer thread; logs `serverStart`.
pub fn start(path: &Path) -> std::io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let (queue, lines) = mpsc::sync_channel::<Message>(QUEUE);
    let writer = std::thread::Builder::new().name("audit-log".into()).spawn(move || {
        let mut out = BufWriter::new(file);
        while let Ok(message) = lines.recv() {
            let mut stop = false;
            let mut next = Some(message);
            // Write what is queued, then flush once: a burst costs one write(2).
            while let Some(m) = next.take() {
                match m {
                    Message::Line(line) => {
                        if let Err(e) = out.write_all(line.as_bytes()) {
                            tracing::warn!(error = %e, "audit log write failed");
                        }
                    }
                    Message::Stop => stop = true,
                }
                next = lines.try_recv().ok();
            }
            if let Err(e) = out.flush() {
                tracing::warn!(error = %e, "audit log flush failed");
            }
            if stop {
                break;
            }
        }
    })?;
    let _ = SINK.set(Sink { queue, writer: Mutex::new(Some(writer)) });
    server_event("serverStart", Outcome::Success);
    Ok(())
}

/// Logs `serverStop` (result `invoked`, as ZooKeeper's shutdown hook does) and waits for the
/// writer to flush.
pub fn stop() {
    let Some(sink) = SINK.get() else { return };
    server_event("serverStop", Outcome::Invoked);
    let _ = sink.queue.send(Message::Stop);
    let handle = sink.writer.lock().ok().and_then(|mut w| w.take());
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// `AuditEvent.Result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    Invoked,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Invoked => "invoked",
        }
    }

    /// `Slf4jAuditLogger`: failures at ERROR, the rest at INFO.
    fn level(self) -> &'static str {
        if self == Outcome::Failure {
            "ERROR"
        } else {
            "INFO"
        }
    }
}

/// One `AuditEvent`: its fields in ZooKeeper's order; a `None` field is left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    pub session: Option<String>,
    pub user: Option<String>,
    pub ip: Option<String>,
    pub operation: &'static str,
    pub znode: Option<String>,
    pub znode_type: Option<&'static str>,
    pub acl: Option<String>,
}

impl Event {
    /// `AuditEvent.toString`: `key=value` pairs split by tabs, `result` last.
    pub fn message(&self, outcome: Outcome) -> String {
        let fields = [
            ("session", self.session.as_deref()),
            ("user", self.user.as_deref()),
            ("ip", self.ip.as_deref()),
            ("operation", Some(self.operation)),
            ("znode", self.znode.as_deref()),
            ("znode_type", self.znode_type),
            ("acl", self.acl.as_deref()),
        ];
        let mut out = String::with_capacity(128);
        for (key, value) in fields {
            if let Some(v) = value {
                out.push_str(key);
                out.push('=');
                out.push_str(v);
                out.push('\t');
            }
        }
        out.push_str("result=");
        out.push_str(outcome.name());
        out
    }
}

/// Queues one line; never blocks.
fn emit(event: &Event, outcome: Outcome) {
    let Some(sink) = SINK.get() else { return };
    let line = format!("{} {} {LOGGER}: {}\n", timestamp(), outcome.level(), event.message(outcome));
    if sink.queue.try_send(Message::Line(line)).is_err() {
        metrics::counter!("audit_lines_dropped").increment(1);
    }
}

/// logback's `%d{ISO8601}` (`yyyy-MM-dd HH:mm:ss,SSS`), in UTC.
fn timestamp() -> String {
    let rfc = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    rfc.trim_end_matches('Z').replacen('T', " ", 1).replacen('.', ",", 1)
}

/// The user the server runs as (`Login.SYSTEM_USER`, the JVM's `user.name`).
fn server_user() -> Option<String> {
    static USER: OnceLock<Option<String>> = OnceLock::new();
    USER.get_or_init(|| {
        std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
    })
    .clone()
}

fn server_event(operation: &'static str, outcome: Outcome) {
    emit(&Event { user: server_user(), operation, ..Event::default() }, outcome);
}

/// `ServerCnxn.getSessionIdHex`.
fn session_hex(id: i64) -> String {
    format!("0x{:x}", id as u64)
}

/// `AuthUtil.getUsers`: each identity's user name as its provider gives it (a digest id's user
/// part; ip, sasl and x509 ids as they are; other schemes none), comma-separated.
pub fn users(auth: &[AuthId]) -> Option<String> {
    let names: Vec<&str> = auth.iter().filter_map(AuthId::user_name).filter(|n| !n.trim().is_empty()).collect();
    (!names.is_empty()).then(|| names.join(","))
}

/// `ZKUtil.aclToString`: `scheme:id:perms` per entry, with no separator between entries
/// (ZooKeeper's own rendering).
fn acl_string(acl: &[AclEntry]) -> String {
    acl.iter().map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id, jute::perms::letters(a.perms))).collect()
}

/// `CreateMode.toString().toLowerCase()`.
fn create_mode(flags: i32) -> Option<&'static str> {
    use jute::CreateMode as M;
    Some(match M::try_from(flags).ok()? {
        M::Persistent => "persistent",
        M::PersistentSequential => "persistent_sequential",
        M::Ephemeral => "ephemeral",
        M::EphemeralSequential => "ephemeral_sequential",
        M::Container => "container",
        M::PersistentWithTtl => "persistent_with_ttl",
        M::PersistentSequentialWithTtl => "persistent_sequential_with_ttl",
    })
}

/// A client write to be logged once its result is known: what `AuditHelper.addAuditLog`
/// reads from the request, taken from the txn before it is proposed.
pub struct Write {
    base: Event,
    op: Op,
}

enum Op {
    /// create, delete, setData, setAcl or reconfig: its operation, the request's path, and a
    /// create's mode.
    One { operation: &'static str, path: String, mode: Option<&'static str> },
    /// A multi: the same for each of its ops (`None` for those not logged, as `check`).
    Multi(Vec<Option<(&'static str, String, Option<&'static str>)>>),
}

impl Write {
    /// The audit record of `txn`, if ZooKeeper audits its kind (not sessions, not `check`);
    /// `ip` is the client's address.
    pub fn of(txn: &Txn, ip: Option<&str>) -> Option<Write> {
        let mut op = &txn.op;
        if let TxnOp::QuotaEnforced(inner) = op {
            op = inner;
        }
        fn one(op: &TxnOp) -> Option<(&'static str, String, Option<&'static str>)> {
            Some(match op {
                TxnOp::Create(c) => ("create", c.path.clone(), create_mode(c.flags)),
                TxnOp::Delete { path, .. } => ("delete", path.clone(), None),
                TxnOp::SetData { path, .. } => ("setData", path.clone(), None),
                TxnOp::SetAcl { path, .. } => ("setAcl", path.clone(), None),
                TxnOp::SetConfig { .. } => ("reconfig", crate::tree::CONFIG_NODE.to_owned(), None),
                _ => return None,
            })
        }
        let acl = match op {
            TxnOp::SetAcl { acl, .. } => Some(acl_string(acl)),
            _ => None,
        };
        let op = match op {
            TxnOp::Multi(ops) => Op::Multi(ops.iter().map(one).collect()),
            op => {
                let (operation, path, mode) = one(op)?;
                Op::One { operation, path, mode }
            }
        };
        let base = Event {
            session: Some(session_hex(txn.session_id)),
            user: users(&txn.auth),
            ip: ip.map(str::to_owned),
            acl,
            ..Event::default()
        };
        Some(Write { base, op })
    }

    /// Logs the write's line(s) for its result (`None`: its fate is unknown, logged as a
    /// failure).
    pub fn done(self, outcome: Option<&Result<TxnOutput, TreeError>>) {
        let Write { base, op } = self;
        match op {
            Op::One { operation, path, mode } => {
                let (znode, result) = match outcome {
                    Some(Ok(TxnOutput::Created { path: created, .. })) => (created.clone(), Outcome::Success),
                    Some(Ok(_)) => (path, Outcome::Success),
                    _ => (path, Outcome::Failure),
                };
                emit(&Event { operation, znode: Some(znode), znode_type: mode, ..base }, result);
            }
            Op::Multi(ops) => match outcome {
                // `AuditHelper.logMultiOperation`: a line per create, delete and setData, with
                // a create's path as created.
                Some(Ok(TxnOutput::Multi { results, failed: false })) => {
                    for (result, op) in results.iter().zip(ops) {
                        let Some((operation, path, mode)) = op else { continue };
                        let znode = match result {
                            OpResult::Created { path, .. } => path.clone(),
                            _ => path,
                        };
                        emit(
                            &Event { operation, znode: Some(znode), znode_type: mode, ..base.clone() },
                            Outcome::Success,
                        );
                    }
                }
                _ => emit(&Event { operation: "multiOperation", ..base }, Outcome::Failure),
            },
        }
    }
}

/// A session's ephemeral removed when the session closed or expired
/// (`ephemeralZNodeDeletionOnSessionCloseOrExpire`, logged on every member as
/// `DataTree.deleteNodes` does).
pub fn ephemeral_deleted(session_id: i64, path: &str) {
    if !enabled() {
        return;
    }
    let event = Event {
        session: Some(session_hex(session_id)),
        user: server_user(),
        operation: "ephemeralZNodeDeletionOnSessionCloseOrExpire",
        znode: Some(path.to_owned()),
        ..Event::default()
    };
    emit(&event, Outcome::Success);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(scheme: &str, id: &str) -> AuthId {
        AuthId { scheme: scheme.into(), id: id.into() }
    }

    /// `AuditEvent.toString`: fields in ZooKeeper's order, absent ones left out, tabs between,
    /// result last.
    #[test]
    fn message_has_zookeeper_field_order() {
        let e = Event {
            session: Some(session_hex(0x1000_0a3c_0001)),
            user: users(&[id("ip", "10.0.0.1"), id("digest", "alice:hash="), id("super", "")]),
            ip: Some("10.0.0.1".into()),
            operation: "create",
            znode: Some("/a".into()),
            znode_type: create_mode(jute::CreateMode::EphemeralSequential.code()),
            acl: None,
        };
        assert_eq!(
            e.message(Outcome::Success),
            "session=0x10000a3c0001\tuser=10.0.0.1,alice\tip=10.0.0.1\toperation=create\tznode=/a\tznode_type=ephemeral_sequential\tresult=success"
        );
        let start = Event { user: Some("root".into()), operation: "serverStart", ..Event::default() };
        assert_eq!(start.message(Outcome::Failure), "user=root\toperation=serverStart\tresult=failure");
        assert_eq!(users(&[id("world", "anyone")]), None);
    }

    /// `ZKUtil.aclToString` joins entries with nothing between them.
    #[test]
    fn acl_string_is_zookeepers() {
        let acl = vec![
            AclEntry { perms: jute::perms::ALL, id: id("world", "anyone") },
            AclEntry { perms: jute::perms::READ | jute::perms::ADMIN, id: id("ip", "10.0.0.0/8") },
        ];
        assert_eq!(acl_string(&acl), "world:anyone:cdrwaip:10.0.0.0/8:ra");
    }

    #[test]
    fn timestamp_is_logbacks_iso8601() {
        let t = timestamp();
        assert_eq!(t.len(), "2026-12-06 01:23:45,678".len(), "{t}");
        assert_eq!((&t[10..11], &t[19..20]), (" ", ","), "{t}");
    }
}
