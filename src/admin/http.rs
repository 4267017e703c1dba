//! The admin HTTP server (`admin.enableServer`, `admin.serverAddress`, `admin.serverPort`):
//! ZooKeeper's `/commands/<name>` JSON endpoints for the four-letter words, plus
//! - `GET /sessions`: every session with its timeout, client address, serving server, time
//!   since last heard and ephemeral count;
//! - `POST /sessions/{id}/kill`: expires a session through the log (its ephemerals go, its
//!   watchers are told, its client sees Expired); needs `Authorization: Bearer <token>` with
//!   the `admin.authToken`, and is off (403) when none is set;
//! - `GET /ready` (200 once serving clients) and `GET /health` (200 while the process runs).
//!
//! With `admin.forceHttps` it speaks TLS only, with `admin.portUnification` TLS and plaintext
//! on the one port, both with the `ssl.quorum.*` key store, as ZooKeeper's admin server does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use axum::Json;
use axum::Router;
use serde_json::json;
use serde_json::Map;
use serde_json::Value;

use super::View;
use crate::admin::four_letter;

/// The JSON for one admin command (by ZooKeeper command name or four-letter alias), shaped as
/// ZooKeeper 3.8's AdminServer answers it. `kwargs` are the query parameters (ZooKeeper's
/// `CommandServlet` passes them to the command: `set_trace_mask?traceMask=N`).
pub fn command_json(d: &View, name: &str, kwargs: &HashMap<String, String>) -> Option<Value> {
    let canonical =
        four_letter::WORDS.iter().chain(MORE_COMMANDS).find(|(w, c)| *w == name || *c == name).map(|(_, c)| *c).or(
            match name {
                "config" => Some("configuration"),
                "env" => Some("environment"),
                _ => None,
            },
        )?;
    let mut m = Map::new();
    match canonical {
        "ruok" => {}
        "monitor" => {
            for (k, v) in four_letter::monitor(d) {
                let key = k.strip_prefix("zk_").unwrap_or(&k).to_owned();
                let val = v
                    .parse::<i64>()
                    .map(Value::from)
                    .or_else(|_| v.parse::<f64>().map(Value::from))
                    .unwrap_or(Value::String(v));
                m.insert(key, val);
            }
        }
        "configuration" => {
            for (k, v) in four_letter::configuration(d) {
                m.insert(snake(&k), v.parse::<i64>().map(Value::from).unwrap_or(Value::String(v)));
            }
        }
        "environment" => {
            for (k, v) in four_letter::environment() {
                m.insert(k, Value::String(v));
            }
        }
        "server_stats" | "stats" => {
            let (min, avg, max) = d.stats.latency.get();
            m.insert("version".into(), json!(four_letter::full_version()));
            m.insert("read_only".into(), json!(four_letter::read_only(d)));
            m.insert(
                "server_stats".into(),
                json!({
                    "packets_sent": d.stats.sent.load(Ordering::Relaxed),
                    "packets_received": d.stats.received.load(Ordering::Relaxed),
                    "server_state": four_letter::mode(d),
                    "outstanding_requests": d.stats.outstanding(),
                    "num_alive_client_connections": d.stats.connection_count(),
                    "last_processed_zxid": d.tree.read().last_zxid(),
                    "min_latency": min,
                    "max_latency": max,
                    "avg_latency": avg,
                    "uptime": d.stats.started.elapsed().as_millis() as u64,
                    "data_dir_size": four_letter::dir_size(&four_letter::storage(d).snap_dir),
                    "log_dir_size": four_letter::dir_size(&four_letter::storage(d).log_dir),
                    "auth_failed_count": d.stats.auth_failed.load(Ordering::Relaxed),
                }),
            );
            m.insert(
                "client_response".into(),
                json!({
                    "last_buffer_size": d.stats.response_size.last(),
                    "min_buffer_size": d.stats.response_size.min(),
                    "max_buffer_size": d.stats.response_size.max(),
                }),
            );
            m.insert("node_count".into(), json!(d.tree.read().node_count() + 1));
            if canonical == "stats" {
                m.insert("connections".into(), connections(d));
                m.insert("secure_connections".into(), json!([]));
            }
        }
        "connections" => {
            m.insert("connections".into(), connections(d));
            m.insert("secure_connections".into(), json!([]));
        }
        "watch_summary" => {
            let by_session = d.watches.by_session();
            m.insert("num_connections".into(), json!(by_session.len()));
            m.insert("num_paths".into(), json!(d.watches.by_path().len()));
            m.insert("num_total_watches".into(), json!(by_session.values().map(|p| p.len()).sum::<usize>()));
        }
        "watches" => {
            let w: Map<String, Value> = d
                .watches
                .by_session()
                .into_iter()
                .map(|(s, p)| (s.to_string(), json!(p.into_iter().collect::<Vec<_>>())))
                .collect();
            m.insert("session_id_to_watched_paths".into(), Value::Object(w));
        }
        "watches_by_path" => {
            let w: Map<String, Value> =
                d.watches.by_path().into_iter().map(|(p, s)| (p, json!(s.into_iter().collect::<Vec<_>>()))).collect();
            m.insert("path_to_session_ids".into(), Value::Object(w));
        }
        "dump" => {
            // DumpCommand: the session expiry buckets (ZooKeeper keys them by its monotonic
            // clock; Warden by wall-clock ms) and each session's ephemerals.
            let now = crate::clock::now_ms();
            let tree = d.tree.read();
            let expiry: Map<String, Value> = four_letter::session_expiry(d, &tree, now)
                .into_iter()
                .map(|(at, ids)| (at.to_string(), json!(ids)))
                .collect();
            let eph: Map<String, Value> = tree
                .sessions()
                .filter(|(_, s)| !s.ephemerals.is_empty())
                .map(|(id, s)| (id.to_string(), json!(s.ephemerals.iter().cloned().collect::<Vec<_>>())))
                .collect();
            m.insert("expiry_time_to_session_ids".into(), Value::Object(expiry));
            m.insert("session_id_to_ephemeral_paths".into(), Value::Object(eph));
        }
        "is_read_only" => {
            m.insert("read_only".into(), json!(four_letter::read_only(d)));
        }
        "dirs" => {
            let dirs = four_letter::storage(d);
            m.insert("datadir_size".into(), json!(four_letter::dir_size(&dirs.snap_dir)));
            m.insert("logdir_size".into(), json!(four_letter::dir_size(&dirs.log_dir)));
        }
        "get_trace_mask" => {
            m.insert("tracemask".into(), json!(d.stats.trace_mask.load(Ordering::Relaxed)));
        }
        "set_trace_mask" => {
            // Commands.SetTraceMaskCommand: errors leave the mask alone and carry no tracemask.
            const NEEDS: &str = "setTraceMask requires long traceMask argument";
            match kwargs.get("traceMask").map(|v| (v, v.parse::<i64>())) {
                None => {
                    m.insert("error".into(), json!(NEEDS));
                }
                Some((v, Err(_))) => {
                    m.insert("error".into(), json!(format!("{NEEDS}, got {v}")));
                }
                Some((_, Ok(mask))) => {
                    d.stats.trace_mask.store(mask, Ordering::Relaxed);
                    m.insert("tracemask".into(), json!(mask));
                }
            }
        }
        "hash" => {
            // Commands.DigestCommand: the digest history, oldest first.
            let digests: Vec<Value> = d
                .tree
                .read()
                .digest_log()
                .map(|h| {
                    json!({
                        "zxid": h.zxid,
                        "digest": h.digest,
                        "digest_version": crate::tree::digest::DIGEST_VERSION,
                    })
                })
                .collect();
            m.insert("digests".into(), Value::Array(digests));
        }
        "connection_stat_reset" => {
            for c in d.stats.connections() {
                c.reset();
            }
        }
        "stat_reset" => d.stats.reset(),
        "leader" => {
            // Commands.LeaderCommand: only an ensemble member has a leader.
            if d.config.servers.is_empty() {
                m.insert("error".into(), json!("server is not initialized"));
            } else {
                let status = d.raft.status();
                m.insert("is_leader".into(), json!(d.raft.is_leader()));
                m.insert("leader_id".into(), json!(status.leader.map_or(-1, |l| l as i64)));
                m.insert("leader_ip".into(), json!(status.leader_addr().map(|(_, a)| a).unwrap_or_default()));
            }
        }
        "voting_view" => {
            // The voting members (observers are not), as zoo.cfg or the last reconfig names them.
            let view: Map<String, Value> = d
                .servers()
                .values()
                .filter(|s| !s.observer)
                .map(|s| {
                    // A member knows its own client address; another's only from its line.
                    let own = (s.id == d.config.server_id)
                        .then(|| format!("{}:{}", d.config.client_port_address, d.config.client_port));
                    let client = s.client.as_ref().map(|(h, p)| format!("{h}:{p}")).or(own).unwrap_or_default();
                    (
                        s.id.to_string(),
                        json!({
                            "server_addresses": [s.peer_addr()],
                            "election_addresses": [format!("{}:{}", s.host, s.election_port)],
                            "client_address": client,
                            "learner_type": "participant",
                        }),
                    )
                })
                .collect();
            m.insert("current_config".into(), Value::Object(view));
        }
        "zabstate" => {
            // Commands.ZabStateCommand. Warden has no ZAB: "broadcast" while it serves as a
            // member of a quorum, "election" without a leader, "synchronization" while it
            // has a leader and catches up.
            match d.servers().get(&d.config.server_id) {
                None => {
                    m.insert("voting".into(), json!(false));
                    m.insert("zabstate".into(), json!(""));
                }
                Some(me) => {
                    let status = d.raft.status();
                    let zxid = d.dispatcher.last_zxid();
                    let state = if *d.serving.borrow() {
                        "broadcast"
                    } else if status.leader.is_none() {
                        "election"
                    } else {
                        "synchronization"
                    };
                    m.insert("myid".into(), json!(d.config.server_id));
                    m.insert("is_leader".into(), json!(d.raft.is_leader()));
                    m.insert("quorum_address".into(), json!(me.peer_addr()));
                    m.insert("election_address".into(), json!(format!("{}:{}", me.host, me.election_port)));
                    m.insert(
                        "client_address".into(),
                        json!(me
                            .client
                            .as_ref()
                            .map(|(h, p)| format!("{h}:{p}"))
                            .unwrap_or_else(|| format!("{}:{}", d.config.client_port_address, d.config.client_port))),
                    );
                    m.insert("voting".into(), json!(!me.observer));
                    m.insert("last_zxid".into(), json!(format!("{zxid:#x}")));
                    m.insert("zab_epoch".into(), json!(zxid >> 32));
                    m.insert("zab_counter".into(), json!(zxid & 0xffff_ffff));
                    m.insert("zabstate".into(), json!(state));
                }
            }
        }
        "observers" => {
            // Commands.SyncedObserverConsCommand: on the leader, the observers it replicates to.
            let observers: Vec<Value> = if d.raft.is_leader() {
                let status = d.raft.status();
                d.servers()
                    .values()
                    .filter(|s| s.observer && status.members.contains_key(&s.id))
                    .map(|s| json!({ "qid": s.id, "remote_socket_address": s.peer_addr() }))
                    .collect()
            } else {
                Vec::new()
            };
            m.insert("synced_observers".into(), json!(observers.len()));
            m.insert("observers".into(), Value::Array(observers));
        }
        // Commands.ObserverCnxnStatResetCommand: Warden keeps no per-observer statistics.
        "observer_connection_stat_reset" => {}
        "initial_configuration" => {
            // The zoo.cfg the server started from, passwords masked.
            m.insert("initial_configuration".into(), json!(d.config.initial_config_masked()));
        }
        "last_snapshot" => {
            let (zxid, timestamp) = super::backup::last_snapshot(d);
            m.insert("zxid".into(), json!(zxid));
            m.insert("timestamp".into(), json!(timestamp));
        }
        "system_properties" => {
            // A JVM's system properties; Warden has no JVM: the process facts Java would give.
            for (k, v) in four_letter::system_properties() {
                m.insert(k, Value::String(v));
            }
        }
        _ => return None,
    }
    m.insert("command".into(), json!(canonical));
    m.entry("error").or_insert(Value::Null);
    Some(Value::Object(m))
}

/// `clientPortListenBacklog` -> `client_port_listen_backlog` (ZooKeeper's JSON keys).
fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for ch in camel.chars() {
        if ch.is_ascii_uppercase() {
            out.push('_');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

fn connections(d: &View) -> Value {
    Value::Array(
        d.stats
            .connections()
            .iter()
            .map(|c| {
                let (min, avg, max) = c.latency.get();
                json!({
                    "remote_socket_address": c.peer.to_string(),
                    "interest_ops": 1,
                    "outstanding_requests": c.outstanding.load(Ordering::Relaxed).max(0),
                    "packets_received": c.received.load(Ordering::Relaxed),
                    "packets_sent": c.sent.load(Ordering::Relaxed),
                    "session_id": c.session_id.load(Ordering::Relaxed),
                    "last_operation": *c.last_op.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                    "session_timeout": c.timeout_ms.load(Ordering::Relaxed),
                    "last_cxid": c.last_cxid.load(Ordering::Relaxed),
                    "last_zxid": c.last_zxid.load(Ordering::Relaxed),
                    "last_response_time": c.last_response_ms.load(Ordering::Relaxed),
                    "last_latency": c.last_latency_ms.load(Ordering::Relaxed),
                    "min_latency": min,
                    "avg_latency": avg,
                    "max_latency": max,
                    "established": c.established_ms,
                })
            })
            .collect(),
    )
}

/// The admin commands beyond the four-letter words (ZooKeeper 3.8's), with their short names.
const MORE_COMMANDS: &[(&str, &str)] = &[
    ("icfg", "initial_configuration"),
    ("lead", "leader"),
    ("lsnp", "last_snapshot"),
    ("snap", "snapshot"),
    ("rest", "restore"),
    ("orst", "observer_connection_stat_reset"),
    ("obsr", "observers"),
    ("sysp", "system_properties"),
    ("voting_view", "voting_view"),
    ("zabstate", "zabstate"),
];

async fn commands() -> Json<Value> {
    let names: Vec<&str> = four_letter::WORDS.iter().chain(MORE_COMMANDS).map(|(_, c)| *c).collect();
    Json(json!({ "commands": names, "command": "commands", "error": null }))
}

async fn command(
    State(d): State<View>,
    Path(name): Path<String>,
    Query(kwargs): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    match name.as_str() {
        "snapshot" | "snap" => return super::backup::snapshot(d, headers, kwargs).await,
        // ZooKeeper's restore is a POST; a GET gets its 405.
        "restore" | "rest" => {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(json!({ "command": "restore", "error": "restore is a POST with the snapshot as its body" })),
            )
                .into_response()
        }
        _ => {}
    }
    match command_json(&d, &name, &kwargs) {
        Some(v) => Json(v).into_response(),
        // ZooKeeper answers an unknown command with 200 and an error message.
        None => Json(json!({ "command": name, "error": format!("Unknown command: {name}") })).into_response(),
    }
}

/// The POST commands: `restore` (ZooKeeper 3.9's `PostCommand`s).
async fn command_post(
    State(d): State<View>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    match name.as_str() {
        "restore" | "rest" => super::backup::restore(d, headers, body).await,
        _ => Json(json!({ "command": name, "error": format!("Unknown command: {name}") })).into_response(),
    }
}

/// Everything `GET /sessions` reports, one session.
pub fn sessions_json(d: &View) -> Value {
    let heard = d.sessions.last_heard_ms();
    let addresses: std::collections::HashMap<i64, String> =
        d.stats.connections().iter().map(|c| (c.session_id.load(Ordering::Relaxed), c.peer.to_string())).collect();
    let tree = d.tree.read();
    let mut list: Vec<Value> = tree
        .sessions()
        .map(|(id, s)| {
            json!({
                "id": format!("{id:#x}"),
                "timeout_ms": s.timeout_ms,
                "client_address": addresses.get(id),
                "connected_server": addresses.get(id).map(|_| d.config.server_id),
                "last_heard_ms_ago": heard.get(id),
                "ephemeral_count": s.ephemerals.len(),
                "local": false,
            })
        })
        .collect();
    drop(tree);
    // Local sessions (`localSessionsEnabled`): on this member only, never in the log.
    list.extend(d.sessions.local_sessions().into_iter().map(|(id, timeout_ms)| {
        json!({
            "id": format!("{id:#x}"),
            "timeout_ms": timeout_ms,
            "client_address": addresses.get(&id),
            "connected_server": addresses.get(&id).map(|_| d.config.server_id),
            "last_heard_ms_ago": heard.get(&id),
            "ephemeral_count": 0,
            "local": true,
        })
    }));
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Value::Array(list)
}

async fn sessions(State(d): State<View>) -> Json<Value> {
    Json(sessions_json(&d))
}

fn parse_session_id(s: &str) -> Option<i64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok().map(|v| v as i64),
        None => s.parse::<i64>().ok(),
    }
}

async fn kill(State(d): State<View>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    // A mutating endpoint answers only an authenticated caller: without a token configured
    // it is off.
    let Some(token) = &d.config.admin_token else {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({ "error": "killing sessions is off: set admin.authToken to turn it on" })),
        )
            .into_response();
    };
    let given = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if given != Some(token.as_str()) {
        return (StatusCode::UNAUTHORIZED, Json(json!({ "error": "a valid bearer token is required" })))
            .into_response();
    }
    let Some(session_id) = parse_session_id(&id) else {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": format!("bad session id {id:?}") }))).into_response();
    };
    match d.dispatcher.kill_session(session_id).await {
        Ok(true) => Json(json!({ "killed": format!("{session_id:#x}") })).into_response(),
        Ok(false) => {
            (StatusCode::NOT_FOUND, Json(json!({ "error": format!("no session {session_id:#x}") }))).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "error": e.to_string() }))).into_response(),
    }
}

/// 200 while this server serves clients; 503 while it does not (no leader or quorum, or a
/// member still catching up with its leader), so a load balancer or an orchestrator's
/// readiness probe sends clients elsewhere.
async fn ready(State(d): State<View>) -> Response {
    if *d.serving.borrow() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not serving\n").into_response()
    }
}

/// Serves the admin endpoints until `stop` fires.
pub async fn serve(addr: SocketAddr, d: View, stop: tokio::sync::watch::Receiver<bool>) {
    let app = Router::new()
        .route("/commands", get(commands))
        .route("/commands/{name}", get(command).post(command_post))
        .layer(axum::extract::DefaultBodyLimit::max(super::backup::RESTORE_LIMIT))
        .route("/sessions", get(sessions))
        .route("/sessions/{id}/kill", post(kill))
        .route("/ready", get(ready))
        .route("/health", get(|| async { (StatusCode::OK, "ok\n") }))
        .with_state(d.clone());
    if !d.config.admin_https() {
        super::serve_router(addr, app, "admin server", stop).await;
        return;
    }
    // Checked at start-up (main), so this only fails if the files changed since.
    let tls = match crate::tls::server_config(&d.config.admin_tls()) {
        Ok(c) => tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(c)),
        Err(e) => {
            tracing::error!(%addr, error = %e, "admin server not started");
            return;
        }
    };
    super::serve_router_tls(addr, app, tls, !d.config.admin_force_https, "admin server", stop).await;
}
