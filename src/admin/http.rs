//! The admin HTTP server (`admin.enableServer`, `admin.serverAddress`, `admin.serverPort`):
//! ZooKeeper's `/commands/<name>` JSON endpoints for the four-letter words, plus
//! - `GET /sessions`: every session with its timeout, client address, serving server, time
//!   since last heard and ephemeral count;
//! - `POST /sessions/{id}/kill`: expires a session through the log (its ephemerals go, its
//!   watchers are told, its client sees Expired); needs `Authorization: Bearer <token>` when
//!   `admin.authToken` is set;
//! - `GET /ready` (200 once serving clients) and `GET /health` (200 while the process runs).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use axum::extract::Path;
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

use crate::admin::four_letter;
use crate::dispatch::Dispatcher;

fn pairs_json(pairs: Vec<(String, String)>, strip: &str) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(k, v)| {
            let key = k.strip_prefix(strip).unwrap_or(&k).replace('.', "_");
            let val = v.parse::<i64>().map(Value::from).unwrap_or(Value::String(v));
            (key, val)
        })
        .collect()
}

/// The JSON for one admin command (by ZooKeeper command name or four-letter alias).
pub fn command_json(d: &Dispatcher, name: &str) -> Option<Value> {
    let canonical = four_letter::WORDS
        .iter()
        .find(|(w, c)| *w == name || *c == name || (name == "conf" && *c == "configuration"))
        .map(|(_, c)| *c)
        .or(match name {
            "config" => Some("configuration"),
            "env" => Some("environment"),
            _ => None,
        })?;
    let mut body = match canonical {
        "ruok" => Map::new(),
        "monitor" => pairs_json(four_letter::monitor(d), "zk_"),
        "configuration" => pairs_json(four_letter::configuration(d), ""),
        "environment" => pairs_json(four_letter::environment(), ""),
        "server_stats" | "stats" => {
            let (min, avg, max) = d.stats.latency.get();
            let mut m = Map::new();
            m.insert("version".into(), json!(four_letter::VERSION));
            m.insert("server_state".into(), json!(four_letter::mode(d)));
            m.insert("min_latency".into(), json!(min));
            m.insert("avg_latency".into(), json!(avg));
            m.insert("max_latency".into(), json!(max));
            m.insert("packets_received".into(), json!(d.stats.received.load(Ordering::Relaxed)));
            m.insert("packets_sent".into(), json!(d.stats.sent.load(Ordering::Relaxed)));
            m.insert("num_alive_client_connections".into(), json!(d.stats.connection_count()));
            m.insert("outstanding_requests".into(), json!(d.stats.outstanding()));
            m.insert("last_processed_zxid".into(), json!(d.last_zxid()));
            m.insert("node_count".into(), json!(d.shared.read().node_count() + 1));
            if canonical == "stats" {
                m.insert("connections".into(), connections(d));
            }
            m
        }
        "connections" => {
            let mut m = Map::new();
            m.insert("connections".into(), connections(d));
            m
        }
        "connection_stat_reset"
        | "stat_reset"
        | "dump"
        | "watch_summary"
        | "watches"
        | "watches_by_path"
        | "is_read_only"
        | "dirs"
        | "get_trace_mask"
        | "set_trace_mask"
        | "hash" => {
            let word = four_letter::WORDS.iter().find(|(_, c)| *c == canonical).map_or("", |(w, _)| *w);
            let mut arr = [0u8; 4];
            arr.copy_from_slice(word.as_bytes());
            let mut m = Map::new();
            match canonical {
                "is_read_only" => {
                    m.insert("read_only".into(), json!(false));
                }
                "watches" => {
                    let w: Map<String, Value> = d
                        .watches
                        .by_session()
                        .into_iter()
                        .map(|(s, p)| (format!("{s:#x}"), json!(p.into_iter().collect::<Vec<_>>())))
                        .collect();
                    m.insert("session_id_to_watched_paths".into(), Value::Object(w));
                }
                "watches_by_path" => {
                    let w: Map<String, Value> = d
                        .watches
                        .by_path()
                        .into_iter()
                        .map(|(p, s)| (p, json!(s.into_iter().map(|x| format!("{x:#x}")).collect::<Vec<_>>())))
                        .collect();
                    m.insert("path_to_session_ids".into(), Value::Object(w));
                }
                "dirs" => {
                    m.insert("datadir_size".into(), json!(four_letter::dir_size(&d.config.data_dir)));
                    m.insert("logdir_size".into(), json!(four_letter::dir_size(&d.config.data_log_dir)));
                }
                _ => {
                    m.insert("output".into(), json!(four_letter::run(d, &arr)));
                }
            }
            m
        }
        _ => return None,
    };
    body.insert("command".into(), json!(canonical));
    body.insert("error".into(), Value::Null);
    Some(Value::Object(body))
}

fn connections(d: &Dispatcher) -> Value {
    Value::Array(
        d.stats
            .connections()
            .iter()
            .map(|c| {
                json!({
                    "remote_socket_address": c.peer.to_string(),
                    "session_id": format!("{:#x}", c.session_id.load(Ordering::Relaxed)),
                    "packets_received": c.received.load(Ordering::Relaxed),
                    "packets_sent": c.sent.load(Ordering::Relaxed),
                    "outstanding_requests": c.outstanding.load(Ordering::Relaxed).max(0),
                    "established": c.established_ms,
                })
            })
            .collect(),
    )
}

async fn commands() -> Json<Value> {
    let names: Vec<&str> = four_letter::WORDS.iter().map(|(_, c)| *c).collect();
    Json(json!({ "commands": names, "command": "commands", "error": null }))
}

async fn command(State(d): State<Dispatcher>, Path(name): Path<String>) -> Response {
    match command_json(&d, &name) {
        Some(v) => Json(v).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({ "command": name, "error": "Unknown command" }))).into_response(),
    }
}

/// Everything `GET /sessions` reports, one session.
pub fn sessions_json(d: &Dispatcher) -> Value {
    let heard = d.sessions.last_heard_ms();
    let addresses: std::collections::HashMap<i64, String> =
        d.stats.connections().iter().map(|c| (c.session_id.load(Ordering::Relaxed), c.peer.to_string())).collect();
    let tree = d.shared.read();
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
            })
        })
        .collect();
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Value::Array(list)
}

async fn sessions(State(d): State<Dispatcher>) -> Json<Value> {
    Json(sessions_json(&d))
}

fn parse_session_id(s: &str) -> Option<i64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok().map(|v| v as i64),
        None => s.parse::<i64>().ok(),
    }
}

async fn kill(State(d): State<Dispatcher>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(token) = &d.config.admin_token {
        let given = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token.as_str()) {
            return (StatusCode::UNAUTHORIZED, Json(json!({ "error": "a valid bearer token is required" })))
                .into_response();
        }
    }
    let Some(session_id) = parse_session_id(&id) else {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": format!("bad session id {id:?}") }))).into_response();
    };
    match d.kill_session(session_id).await {
        Ok(true) => Json(json!({ "killed": format!("{session_id:#x}") })).into_response(),
        Ok(false) => {
            (StatusCode::NOT_FOUND, Json(json!({ "error": format!("no session {session_id:#x}") }))).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "error": e.to_string() }))).into_response(),
    }
}

/// Serves the admin endpoints until `stop` fires.
pub async fn serve(addr: SocketAddr, d: Dispatcher, mut stop: tokio::sync::watch::Receiver<bool>) {
    let app = Router::new()
        .route("/commands", get(commands))
        .route("/commands/{name}", get(command))
        .route("/sessions", get(sessions))
        .route("/sessions/{id}/kill", post(kill))
        .route("/ready", get(|| async { (StatusCode::OK, "ready\n") }))
        .route("/health", get(|| async { (StatusCode::OK, "ok\n") }))
        .with_state(d);
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "admin server not started");
            return;
        }
    };
    tracing::info!(%addr, "admin server listening");
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
}
