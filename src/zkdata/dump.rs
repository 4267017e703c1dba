//! Printing snapshots and logs, as ZooKeeper's `zkSnapShotToolkit` and `zkTxnLogToolkit` do:
//! ZooKeeper's files and, through [`tree`], a Warden tree loaded by the caller. Text for
//! reading, or JSON Lines (one object per line, each with a `kind`) for tools; both stream,
//! so a million-node snapshot prints in constant memory.

use std::io::Write;
use std::path::Path;

use base64::Engine;
use jute::Acl;
use jute::StatPersisted;
use serde::Serialize;
use serde_json::json;

use super::snapshot::SnapshotReader;
use super::txnlog::LogEnd;
use super::txnlog::TxnLogReader;
use super::txnlog::ZkTxn;
use super::FileError;
use crate::tree::DataTree;

/// Text or JSON Lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Which kind of file `path` is, by its first bytes: a ZooKeeper snapshot or log, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    ZkSnapshot,
    ZkLog,
    Other,
}

pub fn kind_of(path: &Path) -> Result<FileKind, FileError> {
    use std::io::Read;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if super::snapshot::Compression::of(name) != super::snapshot::Compression::Plain {
        return Ok(FileKind::ZkSnapshot);
    }
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
    if f.read_exact(&mut magic).is_err() {
        return Ok(FileKind::Other);
    }
    Ok(match i32::from_be_bytes(magic) {
        super::snapshot::SNAPSHOT_MAGIC => FileKind::ZkSnapshot,
        super::txnlog::LOG_MAGIC => FileKind::ZkLog,
        _ => FileKind::Other,
    })
}

fn hex(v: i64) -> String {
    format!("{v:#x}")
}

/// Milliseconds since the epoch as an RFC 3339 UTC time.
fn time(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(ms) => {
            humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
        }
        Err(_) => ms.to_string(),
    }
}

/// Data as JSON: a string when it is UTF-8, else base64.
fn data_json(data: Option<&[u8]>) -> serde_json::Value {
    match data {
        None => serde_json::Value::Null,
        Some(d) => match std::str::from_utf8(d) {
            Ok(s) => json!({ "utf8": s }),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(d) }),
        },
    }
}

/// Data as text: printable UTF-8 as is (quoted), else hex, cut at 256 bytes.
fn data_text(data: Option<&[u8]>) -> String {
    match data {
        None => "null".into(),
        Some(d) => {
            let shown = &d[..d.len().min(256)];
            let more = if d.len() > 256 { format!("... ({} bytes)", d.len()) } else { String::new() };
            match std::str::from_utf8(shown) {
                Ok(s) if !s.chars().any(char::is_control) => format!("{s:?}{more}"),
                _ => format!("0x{}{more}", shown.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            }
        }
    }
}

fn acl_json(acl: &[Acl]) -> serde_json::Value {
    acl.iter().map(|a| json!({ "perms": a.perms, "scheme": a.id.scheme, "id": a.id.id })).collect()
}

fn acl_text(acl: &[Acl]) -> String {
    acl.iter()
        .map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id.as_deref().unwrap_or(""), jute::perms::letters(a.perms)))
        .collect::<Vec<_>>()
        .join(",")
}

#[derive(Serialize)]
struct StatJson {
    czxid: String,
    mzxid: String,
    pzxid: String,
    ctime: i64,
    mtime: i64,
    version: i32,
    cversion: i32,
    aversion: i32,
    ephemeral_owner: String,
}

fn stat_json(s: &StatPersisted) -> StatJson {
    StatJson {
        czxid: hex(s.czxid),
        mzxid: hex(s.mzxid),
        pzxid: hex(s.pzxid),
        ctime: s.ctime,
        mtime: s.mtime,
        version: s.version,
        cversion: s.cversion,
        aversion: s.aversion,
        ephemeral_owner: hex(s.ephemeral_owner),
    }
}

fn node_text(
    out: &mut dyn Write,
    path: &str,
    data: Option<&[u8]>,
    acl: &str,
    s: &StatPersisted,
) -> std::io::Result<()> {
    writeln!(out, "{}", if path.is_empty() { "/" } else { path })?;
    writeln!(out, "  cZxid = {}", hex(s.czxid))?;
    writeln!(out, "  ctime = {}", time(s.ctime))?;
    writeln!(out, "  mZxid = {}", hex(s.mzxid))?;
    writeln!(out, "  mtime = {}", time(s.mtime))?;
    writeln!(out, "  pZxid = {}", hex(s.pzxid))?;
    writeln!(out, "  cversion = {}", s.cversion)?;
    writeln!(out, "  dataVersion = {}", s.version)?;
    writeln!(out, "  aclVersion = {}", s.aversion)?;
    writeln!(out, "  ephemeralOwner = {}", hex(s.ephemeral_owner))?;
    writeln!(out, "  dataLength = {}", data.map_or(0, <[u8]>::len))?;
    writeln!(out, "  data = {}", data_text(data))?;
    writeln!(out, "  acl = {acl}")
}

fn line(out: &mut dyn Write, v: serde_json::Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, &v)?;
    writeln!(out)
}

/// Prints a ZooKeeper snapshot file.
pub fn zk_snapshot(path: &Path, format: Format, out: &mut dyn Write) -> Result<(), FileError> {
    let io = |e: std::io::Error| FileError::io(Path::new("(output)"), e);
    let mut r = SnapshotReader::open(path)?;
    let zxid = super::snapshot::zxid_from_name(path.file_name().and_then(|n| n.to_str()).unwrap_or(""), "snapshot");
    match format {
        Format::Json => {
            line(out, json!({ "kind": "header", "file": "zookeeper-snapshot", "dbid": r.dbid, "zxid": zxid.map(hex) }))
                .map_err(io)?;
            for (id, timeout) in &r.sessions {
                line(out, json!({ "kind": "session", "id": hex(*id), "timeout": timeout })).map_err(io)?;
            }
            for (key, acl) in &r.acls {
                line(out, json!({ "kind": "acl", "key": key, "acl": acl_json(acl) })).map_err(io)?;
            }
        }
        Format::Text => {
            writeln!(
                out,
                "ZooKeeper snapshot {} (dbid {}, zxid {})",
                path.display(),
                r.dbid,
                zxid.map_or("?".into(), hex)
            )
            .map_err(io)?;
            writeln!(out, "Sessions (id, timeout ms): {}", r.sessions.len()).map_err(io)?;
            for (id, timeout) in &r.sessions {
                writeln!(out, "  {}, {timeout}", hex(*id)).map_err(io)?;
            }
            writeln!(out, "ACLs (key: list): {}", r.acls.len()).map_err(io)?;
            for (key, acl) in &r.acls {
                writeln!(out, "  {key}: {}", acl_text(acl)).map_err(io)?;
            }
            writeln!(out, "Nodes:").map_err(io)?;
        }
    }
    let acls: std::collections::HashMap<i64, String> = r.acls.iter().map(|(k, a)| (*k, acl_text(a))).collect();
    let mut count = 0u64;
    while let Some(n) = r.next_node()? {
        count += 1;
        match format {
            Format::Json => line(
                out,
                json!({ "kind": "node", "path": if n.path.is_empty() { "/" } else { &n.path }, "data": data_json(n.data.as_deref()),
                        "acl": n.acl, "stat": stat_json(&n.stat) }),
            ),
            Format::Text => {
                let acl = if n.acl == super::snapshot::OPEN_ACL_KEY {
                    "world:anyone:cdrwa".to_owned()
                } else {
                    acls.get(&n.acl).cloned().unwrap_or_else(|| format!("(missing ACL {})", n.acl))
                };
                node_text(out, &n.path, n.data.as_deref(), &acl, &n.stat)
            }
        }
        .map_err(io)?;
    }
    let trailer = r.finish()?;
    let digest = trailer.digest.map(|d| json!({ "zxid": hex(d.zxid), "version": d.version, "digest": d.digest }));
    match format {
        Format::Json => line(
            out,
            json!({ "kind": "trailer", "nodes": count, "checksum": "ok", "digest": digest,
                    "last_processed_zxid": trailer.last_processed_zxid.map(hex) }),
        ),
        Format::Text => writeln!(
            out,
            "{count} nodes; checksum ok; digest {}; last processed zxid {}",
            trailer.digest.map_or("none".into(), |d| format!(
                "{} at {} (version {})",
                d.digest,
                hex(d.zxid),
                d.version
            )),
            trailer.last_processed_zxid.map_or("not recorded".into(), hex)
        ),
    }
    .map_err(io)
}

/// A txn as JSON (`op` plus its fields).
fn txn_json(t: &ZkTxn) -> serde_json::Value {
    match t {
        ZkTxn::CreateSession { timeout } => json!({ "op": "createSession", "timeout": timeout }),
        ZkTxn::CloseSession { paths } => json!({ "op": "closeSession", "paths": paths }),
        ZkTxn::Create { opcode, path, data, acl, ephemeral, parent_cversion } => json!({
            "op": opcode.name(), "path": path, "data": data_json(data.as_deref()), "acl": acl_json(acl),
            "ephemeral": ephemeral, "parent_cversion": parent_cversion }),
        ZkTxn::CreateTtl { path, data, acl, parent_cversion, ttl } => json!({
            "op": "createTTL", "path": path, "data": data_json(data.as_deref()), "acl": acl_json(acl),
            "parent_cversion": parent_cversion, "ttl": ttl }),
        ZkTxn::CreateContainer { path, data, acl, parent_cversion } => json!({
            "op": "createContainer", "path": path, "data": data_json(data.as_deref()), "acl": acl_json(acl),
            "parent_cversion": parent_cversion }),
        ZkTxn::Delete { path } => json!({ "op": "delete", "path": path }),
        ZkTxn::SetData { path, data, version } => {
            json!({ "op": "setData", "path": path, "data": data_json(data.as_deref()), "version": version })
        }
        ZkTxn::SetAcl { path, acl, version } => {
            json!({ "op": "setACL", "path": path, "acl": acl_json(acl), "version": version })
        }
        ZkTxn::Check { path, version } => json!({ "op": "check", "path": path, "version": version }),
        ZkTxn::Error { err } => json!({ "op": "error", "err": err }),
        ZkTxn::Multi(ops) => json!({ "op": "multi", "ops": ops.iter().map(txn_json).collect::<Vec<_>>() }),
    }
}

/// A txn as one line of text.
fn txn_text(t: &ZkTxn) -> String {
    match t {
        ZkTxn::CreateSession { timeout } => format!("createSession timeout={timeout}"),
        ZkTxn::CloseSession { paths } => format!("closeSession paths={paths:?}"),
        ZkTxn::Create { opcode, path, data, acl, ephemeral, parent_cversion } => format!(
            "{} {path} data={} acl={} ephemeral={ephemeral} parentCVersion={parent_cversion}",
            opcode.name(),
            data_text(data.as_deref()),
            acl_text(acl)
        ),
        ZkTxn::CreateTtl { path, data, acl, parent_cversion, ttl } => format!(
            "createTTL {path} data={} acl={} parentCVersion={parent_cversion} ttl={ttl}",
            data_text(data.as_deref()),
            acl_text(acl)
        ),
        ZkTxn::CreateContainer { path, data, acl, parent_cversion } => format!(
            "createContainer {path} data={} acl={} parentCVersion={parent_cversion}",
            data_text(data.as_deref()),
            acl_text(acl)
        ),
        ZkTxn::Delete { path } => format!("delete {path}"),
        ZkTxn::SetData { path, data, version } => {
            format!("setData {path} data={} version={version}", data_text(data.as_deref()))
        }
        ZkTxn::SetAcl { path, acl, version } => format!("setACL {path} acl={} version={version}", acl_text(acl)),
        ZkTxn::Check { path, version } => format!("check {path} version={version}"),
        ZkTxn::Error { err } => format!("error {err}"),
        ZkTxn::Multi(ops) => format!("multi [{}]", ops.iter().map(txn_text).collect::<Vec<_>>().join("; ")),
    }
}

/// Prints a ZooKeeper txn log file.
pub fn zk_log(path: &Path, format: Format, out: &mut dyn Write) -> Result<(), FileError> {
    let io = |e: std::io::Error| FileError::io(Path::new("(output)"), e);
    let mut r = TxnLogReader::open(path)?;
    match format {
        Format::Json => line(out, json!({ "kind": "header", "file": "zookeeper-log", "dbid": r.dbid })),
        Format::Text => writeln!(out, "ZooKeeper txn log {} (dbid {})", path.display(), r.dbid),
    }
    .map_err(io)?;
    let mut count = 0u64;
    while let Some(e) = r.next()? {
        count += 1;
        let h = &e.header;
        match format {
            Format::Json => line(
                out,
                json!({ "kind": "txn", "offset": e.offset, "zxid": hex(h.zxid), "time": h.time, "session": hex(h.client_id),
                        "cxid": h.cxid, "txn": txn_json(&e.txn),
                        "digest": e.digest.map(|d| json!({ "version": d.version, "digest": d.tree_digest })) }),
            ),
            Format::Text => writeln!(
                out,
                "{} zxid {} session {} cxid {} {}{}",
                time(h.time),
                hex(h.zxid),
                hex(h.client_id),
                h.cxid,
                txn_text(&e.txn),
                e.digest.map_or(String::new(), |d| format!(" [digest {} v{}]", d.tree_digest, d.version))
            ),
        }
        .map_err(io)?;
    }
    let end = match r.end() {
        Some(LogEnd::Torn { offset }) => format!("cut short at byte {offset}"),
        _ => "clean".to_owned(),
    };
    match format {
        Format::Json => line(out, json!({ "kind": "end", "txns": count, "end": end })),
        Format::Text => writeln!(out, "{count} txns; end: {end}"),
    }
    .map_err(io)
}

/// Prints a Warden tree (a loaded Warden snapshot) in the same shape as a ZooKeeper snapshot;
/// `header` describes where it came from.
pub fn tree(tree: &DataTree, header: serde_json::Value, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    let mut sessions: Vec<_> = tree.sessions().map(|(id, s)| (*id, s.timeout_ms, s.ephemerals.len())).collect();
    sessions.sort();
    match format {
        Format::Json => {
            line(out, header)?;
            for (id, timeout, ephemerals) in &sessions {
                line(out, json!({ "kind": "session", "id": hex(*id), "timeout": timeout, "ephemerals": ephemerals }))?;
            }
            for (path, n) in tree.iter_nodes() {
                let acl: Vec<Acl> = n.acl.iter().map(Acl::from).collect();
                line(
                    out,
                    json!({ "kind": "node", "path": path, "data": data_json(n.data()), "acl": acl_json(&acl),
                            "stat": stat_json(&n.stat.persisted()) }),
                )?;
            }
            line(out, json!({ "kind": "end", "nodes": tree.node_count(), "last_zxid": hex(tree.last_zxid()) }))
        }
        Format::Text => {
            writeln!(out, "{header}")?;
            writeln!(out, "Sessions (id, timeout ms, ephemerals): {}", sessions.len())?;
            for (id, timeout, ephemerals) in &sessions {
                writeln!(out, "  {}, {timeout}, {ephemerals}", hex(*id))?;
            }
            writeln!(out, "Nodes:")?;
            for (path, n) in tree.iter_nodes() {
                let acl: Vec<Acl> = n.acl.iter().map(Acl::from).collect();
                node_text(out, path, n.data(), &acl_text(&acl), &n.stat.persisted())?;
            }
            writeln!(out, "{} nodes; last zxid {}", tree.node_count(), hex(tree.last_zxid()))
        }
    }
}
