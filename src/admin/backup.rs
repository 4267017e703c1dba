//! Backups over the admin API: ZooKeeper 3.9's `snapshot`, `restore` and `last_snapshot`
//! commands (`Commands.SnapshotCommand`, `RestoreCommand`, `LastSnapshotCommand`).
//!
//! `GET /commands/snapshot[?streaming=true]` streams a consistent snapshot of the tree, taken
//! from an O(1) copy while the server goes on serving, in ZooKeeper's own snapshot format
//! (`zkdata::export`): ZooKeeper's tools read it, a ZooKeeper 3.9 `restore` takes it, and a
//! snapshot streamed from ZooKeeper 3.9 restores here. `POST /commands/restore` with such a
//! file as the body replaces the tree on every member, through the log (see
//! `Dispatcher::restore`). Both want ZooKeeper's admin authentication: an `Authorization:
//! digest <user>:<password>` header whose identity has ALL on `/` (a super user has), else
//! 401 or 403; and both are rate limited to one per `admin.rateLimiterIntervalInMS`
//! (ZooKeeper's key, default 5 minutes; `admin.snapshot.intervalInMS` and
//! `admin.restore.intervalInMS` set one alone), else 429.

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::Json;
use bytes::Bytes;
use serde_json::json;

use super::View;
use crate::tree::acl::AuthId;

/// Largest restore body: below the peer port's frame limit, which the log entry carrying it
/// must pass.
pub const RESTORE_LIMIT: usize = 200 << 20;

/// When a rate-limited command last ran (ms since the epoch).
static LAST_SNAPSHOT_MS: AtomicI64 = AtomicI64::new(i64::MIN);
static LAST_RESTORE_MS: AtomicI64 = AtomicI64::new(i64::MIN);

fn error(command: &str, status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "command": command, "error": message }))).into_response()
}

/// `Commands.runCommand`'s authentication and authorization: the `Authorization` header is
/// `<scheme> <auth data>`; the identities the scheme grants need ALL on `/`.
/// A refusal: its status and ZooKeeper's message.
type Refused = (StatusCode, &'static str);

fn authorize(d: &View, headers: &HeaderMap) -> Result<(), Refused> {
    let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Err((StatusCode::UNAUTHORIZED, "Auth info is missing for the command"));
    };
    let mut parts = auth.split(' ');
    let (scheme, data) = (parts.next().unwrap_or(""), parts.next());
    let ids = match (scheme, data, parts.next()) {
        ("digest", Some(user_password), None) if user_password.contains(':') => {
            let digest = crate::tree::acl::digest(user_password);
            let mut ids = Vec::new();
            if d.config.super_digest.as_deref() == Some(digest.as_str()) {
                ids.push(AuthId { scheme: "super".into(), id: String::new() });
            }
            ids.push(AuthId { scheme: "digest".into(), id: digest });
            ids
        }
        _ => return Err((StatusCode::UNAUTHORIZED, "Not authenticated")),
    };
    let tree = d.tree.read();
    let allowed = tree.node("/").is_some_and(|root| crate::tree::acl::allowed(root.acl, jute::perms::ALL, &ids));
    drop(tree);
    if !allowed {
        return Err((StatusCode::FORBIDDEN, "Not authorized"));
    }
    Ok(())
}

/// `RateLimiter.allow`: one run per interval.
fn rate_limited(d: &View, last: &AtomicI64, command: &str) -> Result<(), Refused> {
    let now = crate::clock::now_ms();
    let before = last.load(Ordering::Relaxed);
    let own =
        if command == "snapshot" { d.config.admin_snapshot_interval_ms } else { d.config.admin_restore_interval_ms };
    let interval = own.unwrap_or(d.config.admin_rate_limit_ms) as i64;
    if now.saturating_sub(before) < interval
        || last.compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        metrics::counter!(format!("{command}_rate_limited_count")).increment(1);
        return Err((StatusCode::TOO_MANY_REQUESTS, "rate limited: try again later"));
    }
    Ok(())
}

/// `GET /commands/snapshot`.
pub async fn snapshot(d: View, headers: HeaderMap, kwargs: HashMap<String, String>) -> Response {
    const COMMAND: &str = "snapshot";
    if let Err((status, message)) = authorize(&d, &headers).and_then(|()| rate_limited(&d, &LAST_SNAPSHOT_MS, COMMAND))
    {
        return error(COMMAND, status, message);
    }
    let streaming = kwargs.get("streaming").is_none_or(|v| v.eq_ignore_ascii_case("true"));
    let tree = d.tree.read().clone();
    let dir = d.config.data_dir.clone();
    let written = tokio::task::spawn_blocking(move || -> Result<(i64, u64, std::fs::File), String> {
        let zxid = tree.last_zxid();
        let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
        let path = dir.join(format!("admin-snapshot.{zxid:x}.{unique}"));
        let report = crate::zkdata::export::export(&tree, &path).map_err(|e| e.to_string())?;
        let file = std::fs::File::open(&path).map_err(|e| e.to_string());
        // Streamed from the open file; the name goes at once.
        let _ = std::fs::remove_file(&path);
        Ok((zxid, report.bytes, file?))
    })
    .await;
    let (zxid, size, file) = match written {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => {
            metrics::counter!("snapshot_error_count").increment(1);
            return error(COMMAND, StatusCode::INTERNAL_SERVER_ERROR, &e);
        }
        Err(e) => {
            metrics::counter!("snapshot_error_count").increment(1);
            return error(COMMAND, StatusCode::INTERNAL_SERVER_ERROR, &e.to_string());
        }
    };
    let mut response = if streaming {
        let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
        let mut r = Body::from_stream(stream).into_response();
        r.headers_mut().insert("content-type", HeaderValue::from_static("application/octet-stream"));
        r
    } else {
        Json(json!({ "command": COMMAND, "error": null })).into_response()
    };
    // ZooKeeper's headers: `0x` and `ZxidUtils.zxidToString`, and the size in bytes.
    if let Ok(v) = HeaderValue::from_str(&format!("0x{zxid:x}")) {
        response.headers_mut().insert("last_zxid", v);
    }
    response.headers_mut().insert("snapshot_size", HeaderValue::from(size));
    tracing::info!(zxid = format_args!("{zxid:#x}"), bytes = size, streaming, "snapshot taken for the admin API");
    response
}

/// `POST /commands/restore`.
pub async fn restore(d: View, headers: HeaderMap, body: Bytes) -> Response {
    const COMMAND: &str = "restore";
    if let Err((status, message)) = authorize(&d, &headers) {
        return error(COMMAND, status, message);
    }
    if body.is_empty() {
        return error(COMMAND, StatusCode::BAD_REQUEST, "the request body must be a ZooKeeper snapshot file");
    }
    if let Err((status, message)) = rate_limited(&d, &LAST_RESTORE_MS, COMMAND) {
        return error(COMMAND, status, message);
    }
    match d.dispatcher.restore(body).await {
        Ok(zxid) => Json(json!({ "command": COMMAND, "last_zxid": zxid, "error": null })).into_response(),
        Err(e @ crate::dispatch::connect::RestoreError::Unreadable(_)) => {
            metrics::counter!("restore_error_count").increment(1);
            error(COMMAND, StatusCode::BAD_REQUEST, &e.to_string())
        }
        Err(e) => {
            metrics::counter!("restore_error_count").increment(1);
            error(COMMAND, StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
    }
}

/// `last_snapshot`'s fields: the zxid of the newest snapshot this server took or loaded, in
/// hex (`ffffffffffffffff` for none, as ZooKeeper's -1), and its file's time in seconds.
pub fn last_snapshot(d: &View) -> (String, i64) {
    let newest = std::fs::read_dir(&d.layout.snap_dir)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("snapshot-") && n.ends_with(".bin")))
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max();
    match newest {
        Some(time) => {
            let zxid = d.tree.snapshot_zxid.load(Ordering::Relaxed);
            let secs = time.duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_secs() as i64);
            (format!("{:x}", zxid as u64), secs)
        }
        None => (format!("{:x}", -1i64 as u64), -1),
    }
}
