//! The storm workloads (issue 43): many sessions expiring at once, and many watches fired by
//! one multi. Each reports how long the server took to finish the storm and the latencies an
//! unrelated client saw meanwhile, beside the same client's latencies just before the storm.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use jute::ClientOutgoing;
use jute::Request;
use jute::Response;
use jute::ServerIncoming;

use super::call;
use super::call_full;
use super::connect;
use super::create_req;
use super::open_acl;
use super::Args;
use super::BenchError;
use super::Conn;

/// How many sessions open (handshake and setup) at the same time.
pub(crate) const OPEN_AT_ONCE: usize = 256;

/// One request of the unrelated client: when it completed, how long it took, a write or not.
struct Sample {
    at: Instant,
    micros: u64,
    write: bool,
}

/// The unrelated client: a getData then a setData of its own node, one request at a time,
/// until `stop` is set.
async fn probe(addr: String, timeout: i32, node: String, stop: Arc<AtomicBool>) -> Result<Vec<Sample>, BenchError> {
    let (mut conn, _) = connect(&addr, timeout).await?;
    let mut xid = 0;
    let mut out = Vec::with_capacity(1 << 16);
    let mut write = false;
    while !stop.load(Ordering::Relaxed) {
        let request = if write {
            Request::SetData(jute::SetDataRequest {
                path: node.clone(),
                data: Some(Bytes::from_static(b"p")),
                version: -1,
            })
        } else {
            Request::GetData(jute::GetDataRequest { path: node.clone(), watch: false })
        };
        let t0 = Instant::now();
        let err = call(&mut conn, &mut xid, request).await?;
        if err != 0 {
            return Err(BenchError::Protocol(format!("probe request failed with {err}")));
        }
        out.push(Sample { at: Instant::now(), micros: t0.elapsed().as_micros().max(1) as u64, write });
        write = !write;
    }
    Ok(out)
}

/// p50 / p99 / max (ms) and count of the probe's reads and writes that were outstanding at
/// some time in `[from, to]` (a request stalled across the whole window counts, with its
/// whole latency).
fn window(samples: &[Sample], from: Instant, to: Instant) -> serde_json::Value {
    let pick = |write: bool| {
        let mut v: Vec<u64> = samples
            .iter()
            .filter(|s| s.write == write && s.at >= from && s.at - Duration::from_micros(s.micros) <= to)
            .map(|s| s.micros)
            .collect();
        v.sort_unstable();
        let q = |p: f64| {
            if v.is_empty() {
                serde_json::Value::Null
            } else {
                let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
                serde_json::json!(v[i] as f64 / 1000.0)
            }
        };
        serde_json::json!({ "n": v.len(), "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": q(1.0) })
    };
    serde_json::json!({ "read": pick(false), "write": pick(true), "seconds": (to - from).as_secs_f64() })
}

async fn num_children(conn: &mut Conn, xid: &mut i32, path: &str) -> Result<i32, BenchError> {
    match call_full(
        conn,
        xid,
        Request::Exists(jute::ExistsRequest { path: path.into(), watch: false }),
        &mut Vec::new(),
    )
    .await?
    {
        (0, Response::Exists(r)) => Ok(r.stat.num_children),
        (err, _) => Err(BenchError::Protocol(format!("exists {path}: error {err}"))),
    }
}

/// Pipelined creates of `paths` (persistent, `value`), 256 in flight.
async fn create_all(conn: &mut Conn, xid: &mut i32, paths: &[String], value: &Bytes) -> Result<(), BenchError> {
    for chunk in paths.chunks(256) {
        for p in chunk {
            *xid += 1;
            conn.feed(ClientOutgoing::Request { xid: *xid, request: create_req(p.clone(), value.clone()) }).await?;
        }
        conn.flush().await?;
        replies_ok(conn, chunk.len(), "setup create").await?;
    }
    Ok(())
}

/// Waits for `n` replies to pipelined requests, all of which must have succeeded.
async fn replies_ok(conn: &mut Conn, n: usize, what: &str) -> Result<(), BenchError> {
    let mut left = n;
    while left > 0 {
        match conn.next().await {
            Some(Ok(ServerIncoming::Reply { header, .. })) if header.xid > 0 => {
                if header.err != 0 {
                    return Err(BenchError::Protocol(format!("{what} failed with {}", header.err)));
                }
                left -= 1;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => return Err(BenchError::Protocol(format!("connection closed waiting for {what}"))),
        }
    }
    Ok(())
}

/// What both storms start from: the server list, an admin session, the storm's directory
/// `{root}/{sub}` and the probe's node `{root}/probe`, both created.
struct Setup {
    servers: Vec<String>,
    admin: Conn,
    xid: i32,
    dir: String,
    probe_node: String,
}

async fn setup(args: &Args, root: &str, sub: &str) -> Result<Setup, BenchError> {
    let servers: Vec<String> = args.servers.split(',').map(str::to_owned).collect();
    let (mut admin, _) = connect(&servers[0], 30_000).await?;
    let mut xid = 0;
    let dir = format!("{root}/{sub}");
    let probe_node = format!("{root}/probe");
    create_all(&mut admin, &mut xid, &[dir.clone(), probe_node.clone()], &Bytes::new()).await?;
    Ok(Setup { servers, admin, xid, dir, probe_node })
}

/// `expiry-storm`: `--clients` sessions (timeout `--session-timeout`) each create one
/// ephemeral, are pinged until all exist, then each is touched once more and its connection
/// dropped, all at once.
/// The storm runs from the first ephemeral's deletion to the last one's, as an observer
/// polling the parent's child count every 5 ms sees it.
pub async fn expiry(args: Arc<Args>, root: String) -> Result<serde_json::Value, BenchError> {
    let Setup { servers, mut admin, mut xid, dir, probe_node } = setup(&args, &root, "eph").await?;

    let open = Arc::new(tokio::sync::Semaphore::new(OPEN_AT_ONCE));
    // A watch channel, not a Notify: a task busy with a ping when the signal comes still
    // sees it at its next await.
    let (drop_tx, drop_rx) = tokio::sync::watch::channel(false);
    let closed = Arc::new(AtomicUsize::new(0));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<bool>(args.clients.max(1));
    for i in 0..args.clients {
        let addr = servers[i % servers.len()].clone();
        let path = format!("{dir}/e{i}");
        let (open, mut drop_rx, ready_tx, closed) = (open.clone(), drop_rx.clone(), ready_tx.clone(), closed.clone());
        let timeout = args.session_timeout;
        tokio::spawn(async move {
            let setup = async {
                let _permit = open.acquire().await.map_err(|e| BenchError::Protocol(e.to_string()))?;
                let (mut conn, _) = connect(&addr, timeout).await?;
                let mut xid = 0;
                let req =
                    Request::Create(jute::CreateRequest { path, data: Some(Bytes::new()), acl: open_acl(), flags: 1 });
                match call(&mut conn, &mut xid, req).await? {
                    0 => Ok(conn),
                    err => Err(BenchError::Protocol(format!("ephemeral create failed with {err}"))),
                }
            };
            let mut conn = match setup.await {
                Ok(c) => c,
                Err(_) => {
                    let _ = ready_tx.send(false).await;
                    return;
                }
            };
            let _ = ready_tx.send(true).await;
            drop(ready_tx);
            // Keep the session alive until told to drop the connection (without closing the
            // session: it must expire). Every session is pinged once more right before its
            // connection drops, so all of them were last heard within a few milliseconds and
            // expire together: the storm then measures the server, not the ping schedule.
            let every = Duration::from_millis((timeout / 3).max(100) as u64);
            loop {
                tokio::select! {
                    _ = drop_rx.changed() => {
                        // A request with an xid of its own (a ping's reply comes back as xid -2).
                        let mut xid = 1_000_000;
                        let touch = Request::Exists(jute::ExistsRequest { path: "/".into(), watch: false });
                        let last = tokio::time::timeout(Duration::from_secs(5), call(&mut conn, &mut xid, touch));
                        let _ = last.await;
                        break;
                    }
                    _ = tokio::time::sleep(every) => {
                        if conn.send(ClientOutgoing::Request { xid: -2, request: Request::Ping }).await.is_err() {
                            break;
                        }
                    }
                    m = conn.next() => if !matches!(m, Some(Ok(_))) { break },
                }
            }
            drop(conn);
            closed.fetch_add(1, Ordering::Relaxed);
        });
    }
    drop(ready_tx);
    let (mut ready, mut failed) = (0usize, 0usize);
    while let Some(ok) = ready_rx.recv().await {
        if ok {
            ready += 1
        } else {
            failed += 1
        }
    }
    let present = num_children(&mut admin, &mut xid, &dir).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let probe_task = tokio::spawn(probe(servers[0].clone(), 30_000, probe_node, stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t_signal = Instant::now();
    let _ = drop_tx.send(true);
    // The last ping of every session, then its connection dropped; `t_close` is when the last
    // one was dropped.
    while closed.load(Ordering::Relaxed) < ready && t_signal.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t_close = Instant::now();

    let limit = t_close + Duration::from_millis(args.session_timeout as u64 * 3) + Duration::from_secs(60);
    let mut first_gone = None;
    let mut all_gone = None;
    while Instant::now() < limit {
        let n = num_children(&mut admin, &mut xid, &dir).await?;
        let now = Instant::now();
        if n < present && first_gone.is_none() {
            first_gone = Some(now);
        }
        if n == 0 {
            all_gone = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = probe_task.await.map_err(|e| BenchError::Protocol(e.to_string()))??;
    let ms = |t: Option<Instant>| t.map(|t| (t - t_close).as_secs_f64() * 1000.0);
    let storm = match (first_gone, all_gone) {
        (Some(a), Some(b)) => window(&samples, a, b),
        _ => serde_json::Value::Null,
    };
    Ok(serde_json::json!({
        "workload": "expiry-storm", "sessions": ready, "failed_sessions": failed, "ephemerals": present,
        "session_timeout_ms": args.session_timeout,
        "close_ms": (t_close - t_signal).as_secs_f64() * 1000.0,
        "first_gone_ms": ms(first_gone), "all_gone_ms": ms(all_gone),
        "storm_ms": first_gone.zip(all_gone).map(|(a, b)| (b - a).as_secs_f64() * 1000.0),
        "probe_before": window(&samples, t_close - Duration::from_millis(1500), t_close),
        "probe_storm": storm,
    }))
}

/// `watch-storm`: `--nodes` nodes, each watched (getData) by `--watchers-per-node` of the
/// `--clients` sessions; one multi sets them all. Time from sending the multi to its reply
/// and to the last of the `nodes × watchers-per-node` events.
pub async fn watches(args: Arc<Args>, root: String) -> Result<serde_json::Value, BenchError> {
    let Setup { servers, mut admin, mut xid, dir, probe_node } = setup(&args, &root, "w").await?;
    let nodes: Vec<String> = (0..args.nodes).map(|j| format!("{dir}/n{j}")).collect();
    create_all(&mut admin, &mut xid, &nodes, &Bytes::from_static(b"x")).await?;

    let clients = args.clients.max(1);
    let per_node = args.watchers_per_node.min(clients);
    let mut watched: Vec<Vec<String>> = vec![Vec::new(); clients];
    for (j, n) in nodes.iter().enumerate() {
        for r in 0..per_node {
            watched[(j * per_node + r) % clients].push(n.clone());
        }
    }
    let open = Arc::new(tokio::sync::Semaphore::new(OPEN_AT_ONCE));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<usize>(clients);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<(usize, Instant)>(clients);
    let failed = Arc::new(AtomicUsize::new(0));
    for (i, paths) in watched.into_iter().enumerate() {
        let addr = servers[i % servers.len()].clone();
        let (open, ready_tx, done_tx, failed) = (open.clone(), ready_tx.clone(), done_tx.clone(), failed.clone());
        let timeout = args.session_timeout;
        tokio::spawn(async move {
            let setup = async {
                let _permit = open.acquire().await.map_err(|e| BenchError::Protocol(e.to_string()))?;
                let (mut conn, _) = connect(&addr, timeout).await?;
                for (xid, p) in (1..).zip(&paths) {
                    let request = Request::GetData(jute::GetDataRequest { path: p.clone(), watch: true });
                    conn.feed(ClientOutgoing::Request { xid, request }).await?;
                }
                conn.flush().await?;
                replies_ok(&mut conn, paths.len(), "watching getData").await?;
                Ok::<_, BenchError>(conn)
            };
            let Ok(mut conn) = setup.await else {
                failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let _ = ready_tx.send(paths.len()).await;
            drop(ready_tx);
            let mut events = 0;
            let mut last = None;
            while events < paths.len() {
                match conn.next().await {
                    Some(Ok(ServerIncoming::Reply { header, .. })) if header.xid == -1 => {
                        events += 1;
                        last = Some(Instant::now());
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            if let Some(t) = last {
                let _ = done_tx.send((events, t)).await;
            }
        });
    }
    drop(ready_tx);
    drop(done_tx);
    let mut watches = 0;
    while let Some(n) = ready_rx.recv().await {
        watches += n;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let probe_task = tokio::spawn(probe(servers[0].clone(), 30_000, probe_node, stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ops = nodes
        .iter()
        .map(|p| {
            jute::MultiOp::SetData(jute::SetDataRequest {
                path: p.clone(),
                data: Some(Bytes::from_static(b"y")),
                version: -1,
            })
        })
        .collect();
    let t0 = Instant::now();
    let (err, _) = call_full(&mut admin, &mut xid, Request::Multi(ops), &mut Vec::new()).await?;
    let multi_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if err != 0 {
        stop.store(true, Ordering::Relaxed);
        return Err(BenchError::Protocol(format!("the firing multi failed with {err}")));
    }
    let mut events = 0;
    let mut last = t0;
    while let Ok(Some((n, t))) = tokio::time::timeout(Duration::from_secs(120), done_rx.recv()).await {
        events += n;
        last = last.max(t);
        if events >= watches {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = probe_task.await.map_err(|e| BenchError::Protocol(e.to_string()))??;
    Ok(serde_json::json!({
        "workload": "watch-storm", "nodes": nodes.len(), "watcher_sessions": clients,
        "failed_sessions": failed.load(Ordering::Relaxed), "watches": watches, "events": events,
        "multi_ms": multi_ms, "last_event_ms": (last - t0).as_secs_f64() * 1000.0,
        "probe_before": window(&samples, t0 - Duration::from_millis(1500), t0),
        "probe_storm": window(&samples, t0, last),
    }))
}
