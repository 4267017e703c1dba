//! `warden-bench`: a pipelined load generator for any ZooKeeper-compatible server, built on the
//! `jute` crate. Each client is one session on one TCP connection keeping `--inflight`
//! requests outstanding; only successful operations are counted, errors are tallied by code.
//!
//! Workloads: `create`, `set`, `get`, `mixed` (`--read-ratio`), `multi` (a create and a
//! setData per multi), `sessions` (open `--clients` sessions, ping them, report how many held;
//! `--local-addrs` spreads them over several loopback source addresses, since one address pair
//! has only ~28,000 ephemeral ports),
//! `watch` (`--clients` sessions watch one node; time from setData to the last event),
//! `probe` (time until a create succeeds on any server: run it right after killing a leader),
//! `expiry-storm` and `watch-storm` (see `storm`).
//!
//! With `--rate`, the load is offered at a fixed rate instead of as fast as replies come (and
//! a request's latency counts from when it was due, not from when the client got to send it,
//! so a server stall is not hidden by the client waiting on it), and `--cpu-pids` reports the
//! CPU time those processes spent in the measured window. `--samples-out` writes each
//! operation's completion time and latency.

mod storm;

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use clap::ValueEnum;
use futures::FutureExt;
use futures::SinkExt;
use futures::StreamExt;
use hdrhistogram::Histogram;
use jute::ClientCodec;
use jute::ClientOutgoing;
use jute::ConnectRequest;
use jute::Request;
use jute::ServerIncoming;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// A connection's byte stream: plain TCP, or TLS when `--tls-ca` is given.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Set once at start from `--tls-*`: every connection is TLS with this connector.
static TLS: std::sync::OnceLock<tokio_rustls::TlsConnector> = std::sync::OnceLock::new();

/// The TLS client configuration: the CA to trust, and the client's certificate and key.
fn tls_connector(ca: &str, cert: Option<&str>, key: Option<&str>) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{ca}: {e}"))? {
        roots.add(c.map_err(|e| format!("{ca}: {e}"))?).map_err(|e| format!("{ca}: {e}"))?;
    }
    // ring: the same provider as the server; rustls deprecates it only for lacking
    // post-quantum key exchange.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("{cert}: {e}"))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{cert}: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    Create,
    Set,
    Get,
    Mixed,
    Multi,
    Sessions,
    Watch,
    /// Every client takes and releases one shared lock with ZooKeeper's recipe (an
    /// ephemeral-sequential node; wait for the predecessor's deletion). One op is one
    /// acquisition, timed from the create to holding the lock.
    Lock,
    /// Failover probe: from start, retry one create on every server until one succeeds;
    /// prints the time to the first successful write.
    Probe,
    /// `--clients` sessions with one ephemeral each lose their connections at once; time
    /// from the first deletion to the last, and an unrelated client's latencies meanwhile.
    ExpiryStorm,
    /// `--nodes` nodes watched by `--watchers-per-node` of `--clients` sessions each, all set
    /// by one multi; time to the last event, and an unrelated client's latencies meanwhile.
    WatchStorm,
}

/// A pipelined load generator for ZooKeeper-compatible servers.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
struct Args {
    /// Comma-separated host:port list; clients are spread over them round-robin.
    #[arg(long, default_value = "127.0.0.1:2181")]
    servers: String,
    /// The workload.
    #[arg(long, value_enum, default_value = "get")]
    workload: Workload,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Requests outstanding per session.
    #[arg(long, default_value_t = 8)]
    inflight: usize,
    /// Seconds of measured load (after setup).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Fraction of reads in `mixed`.
    #[arg(long, default_value_t = 0.9)]
    read_ratio: f64,
    /// Keys per client for get/set/mixed.
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    /// Session timeout to request, ms.
    #[arg(long, default_value_t = 30000)]
    session_timeout: i32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Connect with TLS, trusting this CA (PEM).
    #[arg(long)]
    tls_ca: Option<String>,
    /// The client certificate (PEM) to present over TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<String>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<String>,
    /// Offer this many requests per second over all clients, on a fixed schedule (each
    /// client still keeps at most `--inflight` outstanding); 0 = as fast as replies come.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Comma-separated PIDs (the servers) whose CPU time (user + system, from /proc) over
    /// the measured window is reported, in total and per 1,000 successful operations.
    #[arg(long, value_delimiter = ',')]
    cpu_pids: Vec<u32>,
    /// `watch-storm`: nodes set by the one multi.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// `watch-storm`: sessions watching each node.
    #[arg(long, default_value_t = 10)]
    watchers_per_node: usize,
    /// `sessions`: comma-separated local IP addresses the sessions' sockets bind to,
    /// round-robin (e.g. 127.0.0.1,127.0.0.2): each source address has its own ephemeral
    /// ports, so more sessions than one address's port range fit.
    #[arg(long, value_delimiter = ',')]
    local_addrs: Vec<std::net::IpAddr>,
    /// Also write every successful operation of the measured window to this file, one line
    /// each: completion time and latency, in microseconds since the window started (so that
    /// percentiles can be taken over any part of the run, e.g. while a server snapshots).
    #[arg(long)]
    samples_out: Option<std::path::PathBuf>,
}

type Conn = Framed<Box<dyn Io>, ClientCodec>;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Codec(#[from] jute::CodecError),
    #[error("{0}")]
    Protocol(String),
}

async fn connect(addr: &str, timeout: i32) -> Result<(Conn, i64), BenchError> {
    connect_from(addr, None, timeout).await
}

/// `connect`, with the socket bound to `local` (port chosen by the kernel) first if given.
async fn connect_from(addr: &str, local: Option<std::net::IpAddr>, timeout: i32) -> Result<(Conn, i64), BenchError> {
    let stream = match local {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let remote = tokio::net::lookup_host(addr)
                .await?
                .find(|a| a.is_ipv4() == ip.is_ipv4())
                .ok_or_else(|| BenchError::Protocol(format!("{addr}: no address of {ip}'s family")))?;
            let socket = if ip.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
            socket.bind(std::net::SocketAddr::new(ip, 0))?;
            socket.connect(remote).await?
        }
    };
    stream.set_nodelay(true)?;
    let stream: Box<dyn Io> = match TLS.get() {
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let name = rustls_pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| BenchError::Protocol(format!("TLS server name {host}: {e}")))?;
            Box::new(tls.connect(name, stream).await?)
        }
        None => Box::new(stream),
    };
    let mut conn = Framed::new(stream, ClientCodec::new(64 << 20));
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        time_out: timeout,
        session_id: 0,
        passwd: Bytes::from_static(&[0; 16]),
        read_only: Some(false),
    };
    conn.send(ClientOutgoing::Connect(req)).await?;
    match conn.next().await {
        Some(Ok(ServerIncoming::Connect(r))) if r.session_id != 0 => Ok((conn, r.session_id)),
        other => Err(BenchError::Protocol(format!("handshake failed: {other:?}"))),
    }
}

/// Sends one request and waits for its reply (setup only).
async fn call(conn: &mut Conn, xid: &mut i32, request: Request) -> Result<i32, BenchError> {
    Ok(call_full(conn, xid, request, &mut Vec::new()).await?.0)
}

/// Sends one request and waits for its reply; notifications that arrive meanwhile go to
/// `events`.
async fn call_full(
    conn: &mut Conn,
    xid: &mut i32,
    request: Request,
    events: &mut Vec<jute::WatcherEvent>,
) -> Result<(i32, jute::Response), BenchError> {
    *xid += 1;
    conn.send(ClientOutgoing::Request { xid: *xid, request }).await?;
    loop {
        match conn.next().await {
            Some(Ok(ServerIncoming::Reply { header, response })) if header.xid == *xid => {
                return Ok((header.err, response))
            }
            Some(Ok(ServerIncoming::Reply { response: jute::Response::Notification(e), .. })) => events.push(e),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(BenchError::Protocol("connection closed".into())),
        }
    }
}

/// The sequence number ZooKeeper appends to a sequential node's name.
fn sequence_of(name: &str) -> i64 {
    name.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(i64::MAX)
}

/// One lock client until `deadline`: acquire, release, repeat.
async fn lock_loop(
    conn: &mut Conn,
    xid: &mut i32,
    dir: &str,
    deadline: Instant,
    hist: &mut Histogram<u64>,
    errors: &mut BTreeMap<i32, u64>,
) -> Result<u64, BenchError> {
    let mut ok = 0;
    let mut events = Vec::new();
    while Instant::now() < deadline {
        let t0 = Instant::now();
        let create = Request::Create(jute::CreateRequest {
            path: format!("{dir}/lock-"),
            data: Some(Bytes::new()),
            acl: open_acl(),
            flags: 3, // ephemeral | sequential
        });
        let mine = match call_full(conn, xid, create, &mut events).await? {
            (0, jute::Response::Create(r)) => r.path.rsplit('/').next().unwrap_or_default().to_owned(),
            (err, _) => {
                *errors.entry(err).or_default() += 1;
                continue;
            }
        };
        loop {
            let list = Request::GetChildren(jute::GetChildrenRequest { path: dir.to_owned(), watch: false });
            let mut names = match call_full(conn, xid, list, &mut events).await? {
                (0, jute::Response::GetChildren(r)) => r.children.to_vec(),
                (err, _) => return Err(BenchError::Protocol(format!("getChildren of the lock dir: error {err}"))),
            };
            names.sort_by_key(|n| sequence_of(n));
            let Some(pos) = names.iter().position(|n| *n == mine) else {
                return Err(BenchError::Protocol(format!("lock node {mine} vanished")));
            };
            if pos == 0 {
                break;
            }
            let pred = format!("{dir}/{}", names[pos - 1]);
            events.clear();
            let exists = Request::Exists(jute::ExistsRequest { path: pred.clone(), watch: true });
            if call_full(conn, xid, exists, &mut events).await?.0 != 0 {
                continue; // gone already
            }
            // Wait for the predecessor's deletion (or any event on it).
            while !events.iter().any(|e| e.path == pred) {
                match tokio::time::timeout(Duration::from_secs(30), conn.next()).await {
                    Ok(Some(Ok(ServerIncoming::Reply { response: jute::Response::Notification(e), .. }))) => {
                        events.push(e)
                    }
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err(e))) => return Err(e.into()),
                    Ok(None) => return Err(BenchError::Protocol("connection closed".into())),
                    Err(_) => return Err(BenchError::Protocol("no lock event in 30 s".into())),
                }
            }
        }
        let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
        ok += 1;
        let release = Request::Delete(jute::DeleteRequest { path: format!("{dir}/{mine}"), version: -1 });
        let (err, _) = call_full(conn, xid, release, &mut events).await?;
        if err != 0 {
            *errors.entry(err).or_default() += 1;
        }
    }
    Ok(ok)
}

fn open_acl() -> Option<Vec<jute::Acl>> {
    Some(vec![jute::Acl {
        perms: jute::perms::ALL,
        id: jute::Id { scheme: "world".into(), id: Some("anyone".into()) },
    }])
}

fn create_req(path: String, data: Bytes) -> Request {
    Request::Create(jute::CreateRequest { path, data: Some(data), acl: open_acl(), flags: 0 })
}

#[derive(Default)]
struct Totals {
    ok: u64,
    errors: BTreeMap<i32, u64>,
    hist: Option<Histogram<u64>>,
    /// `--samples-out`: (completion, latency) in µs since the window started, every client's.
    samples: Vec<(u64, u64)>,
}

/// Per-client accounting of replies in the measured window.
struct Tally {
    ok: u64,
    errors: BTreeMap<i32, u64>,
    hist: Histogram<u64>,
    /// The window's start, and the samples kept if `--samples-out` asked for them.
    start: Instant,
    samples: Option<Vec<(u64, u64)>>,
}

impl Tally {
    /// Counts one reply to a request sent (or, with `--rate`, due) at `t0`: its latency if it
    /// succeeded, its error code if not.
    fn reply(&mut self, err: i32, t0: Instant) {
        if err != 0 {
            *self.errors.entry(err).or_default() += 1;
            return;
        }
        self.ok += 1;
        let now = Instant::now();
        let micros = now.saturating_duration_since(t0).as_micros().max(1) as u64;
        let _ = self.hist.record(micros);
        if let Some(s) = &mut self.samples {
            s.push((now.saturating_duration_since(self.start).as_micros() as u64, micros));
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One client: setup, then pipelined load until the deadline.
async fn client(
    args: Arc<Args>,
    id: usize,
    root: String,
    start: Instant,
    deadline: Instant,
    totals: Arc<Mutex<Totals>>,
) -> Result<(), BenchError> {
    let servers: Vec<&str> = args.servers.split(',').collect();
    let addr = servers[id % servers.len()];
    let (mut conn, _) = connect(addr, args.session_timeout).await?;
    let mut xid = 0;
    let base = format!("{root}/c{id}");
    let value = Bytes::from(vec![b'x'; args.size]);
    call(&mut conn, &mut xid, create_req(base.clone(), Bytes::new())).await?;
    if matches!(args.workload, Workload::Get | Workload::Set | Workload::Mixed) {
        // Pipelined setup of the key space.
        for chunk in (0..args.keys).collect::<Vec<_>>().chunks(256) {
            for k in chunk {
                xid += 1;
                conn.feed(ClientOutgoing::Request { xid, request: create_req(format!("{base}/k{k}"), value.clone()) })
                    .await?;
            }
            conn.flush().await?;
            for _ in chunk {
                match conn.next().await {
                    Some(Ok(_)) => {}
                    _ => return Err(BenchError::Protocol("setup failed".into())),
                }
            }
        }
    }
    // Wait for everyone's setup to finish before measuring.
    tokio::time::sleep_until(start.into()).await;

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id as u64 + 1));
    let mut tally = Tally {
        ok: 0,
        errors: BTreeMap::new(),
        hist: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| BenchError::Protocol(e.to_string()))?,
        start,
        samples: args.samples_out.is_some().then(Vec::new),
    };
    let mut sent: VecDeque<Instant> = VecDeque::new();
    if args.workload == Workload::Lock {
        tally.ok =
            lock_loop(&mut conn, &mut xid, &format!("{root}/lock"), deadline, &mut tally.hist, &mut tally.errors)
                .await?;
    }
    let mut seq = 0u64;
    let mut next_request = |rng: &mut Rng| -> Request {
        seq += 1;
        let key = format!("{base}/k{}", rng.below(args.keys));
        match args.workload {
            Workload::Create => create_req(format!("{base}/n{seq}"), value.clone()),
            Workload::Set => {
                Request::SetData(jute::SetDataRequest { path: key, data: Some(value.clone()), version: -1 })
            }
            Workload::Get => Request::GetData(jute::GetDataRequest { path: key, watch: false }),
            Workload::Mixed => {
                if (rng.next() % 10_000) as f64 / 10_000.0 < args.read_ratio {
                    Request::GetData(jute::GetDataRequest { path: key, watch: false })
                } else {
                    Request::SetData(jute::SetDataRequest { path: key, data: Some(value.clone()), version: -1 })
                }
            }
            Workload::Multi => Request::Multi(vec![
                jute::MultiOp::Create(jute::CreateRequest {
                    path: format!("{base}/m{seq}"),
                    data: Some(value.clone()),
                    acl: open_acl(),
                    flags: 0,
                }),
                jute::MultiOp::SetData(jute::SetDataRequest {
                    path: base.clone(),
                    data: Some(value.clone()),
                    version: -1,
                }),
            ]),
            Workload::Sessions
            | Workload::Watch
            | Workload::Probe
            | Workload::Lock
            | Workload::ExpiryStorm
            | Workload::WatchStorm => Request::Ping,
        }
    };
    if args.rate > 0.0 && args.workload != Workload::Lock {
        // Fixed offered load: this client's share of `--rate`, its phase staggered so the
        // clients do not send in step.
        let every = Duration::from_secs_f64(args.clients as f64 / args.rate);
        let mut due = start + every.mul_f64(id as f64 / args.clients.max(1) as f64);
        loop {
            let now = Instant::now();
            if now >= deadline && sent.is_empty() {
                break;
            }
            let can_send = now < deadline && sent.len() < args.inflight.max(1);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()), if can_send => {
                    xid += 1;
                    conn.send(ClientOutgoing::Request { xid, request: next_request(&mut rng) }).await?;
                    // Latency from when it was due: a stalled server delays the sends too.
                    sent.push_back(due);
                    due += every;
                }
                frame = conn.next() => {
                    let header = match frame {
                        Some(Ok(ServerIncoming::Reply { header, .. })) => header,
                        Some(Ok(ServerIncoming::Connect(_))) => continue,
                        Some(Err(e)) => return Err(e.into()),
                        None => return Err(BenchError::Protocol("connection closed".into())),
                    };
                    if header.xid < 0 {
                        continue;
                    }
                    let Some(t0) = sent.pop_front() else { break };
                    tally.reply(header.err, t0);
                }
            }
        }
    }
    let pipelined = if args.workload == Workload::Lock || args.rate > 0.0 { 0 } else { args.inflight };
    for _ in 0..pipelined {
        xid += 1;
        conn.feed(ClientOutgoing::Request { xid, request: next_request(&mut rng) }).await?;
        sent.push_back(Instant::now());
    }
    conn.flush().await?;
    loop {
        // Every reply already here is answered before one flush: one write for several
        // requests, as a pipelining client does.
        let frame = if pipelined == 0 {
            None
        } else {
            match conn.next().now_or_never() {
                Some(frame) => frame,
                None => {
                    conn.flush().await?;
                    conn.next().await
                }
            }
        };
        let Some(frame) = frame else { break };
        let (header, _) = match frame? {
            ServerIncoming::Reply { header, response } => (header, response),
            ServerIncoming::Connect(_) => continue,
        };
        if header.xid < 0 {
            continue;
        }
        let Some(t0) = sent.pop_front() else { break };
        tally.reply(header.err, t0);
        if Instant::now() >= deadline {
            if sent.is_empty() {
                break;
            }
            continue;
        }
        xid += 1;
        conn.feed(ClientOutgoing::Request { xid, request: next_request(&mut rng) }).await?;
        sent.push_back(Instant::now());
    }
    let mut t = totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    t.ok += tally.ok;
    for (k, v) in tally.errors {
        *t.errors.entry(k).or_default() += v;
    }
    match &mut t.hist {
        Some(h) => {
            let _ = h.add(&tally.hist);
        }
        None => t.hist = Some(tally.hist),
    }
    if let Some(s) = tally.samples {
        t.samples.extend(s);
    }
    Ok(())
}

/// `sessions`: open N sessions (at most `storm::OPEN_AT_ONCE` handshakes at a time), pinging
/// each every third of its timeout from its handshake on; once every session is open (or
/// failed to open), hold them all together for `--duration` seconds more; count the survivors.
/// A session the server expires or closes counts as lost.
async fn sessions(args: Arc<Args>) -> Result<serde_json::Value, BenchError> {
    let servers: Vec<String> = args.servers.split(',').map(str::to_owned).collect();
    let mut tasks = Vec::new();
    let open = Arc::new(tokio::sync::Semaphore::new(storm::OPEN_AT_ONCE));
    // Every task reports once it is open or has failed; the hold's end is sent once all have.
    let (settled_tx, mut settled_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (end_tx, end_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);
    let t0 = Instant::now();
    for i in 0..args.clients {
        let addr = servers[i % servers.len()].clone();
        let local = (!args.local_addrs.is_empty()).then(|| args.local_addrs[i % args.local_addrs.len()]);
        let timeout = args.session_timeout;
        let open = open.clone();
        let settled = settled_tx.clone();
        let mut end_rx = end_rx.clone();
        tasks.push(tokio::spawn(async move {
            let opened = async {
                let _permit = open.acquire_owned().await.map_err(|e| BenchError::Protocol(e.to_string()))?;
                connect_from(&addr, local, timeout).await.map_err(|e| BenchError::Protocol(format!("connect: {e}")))
            }
            .await;
            let _ = settled.send(());
            let (mut conn, _) = opened?;
            let every = Duration::from_millis((timeout / 3).max(100) as u64);
            loop {
                let end = *end_rx.borrow_and_update();
                let now = Instant::now();
                if end.is_some_and(|end| now >= end) {
                    return Ok::<(), BenchError>(());
                }
                let wake = end.map_or(now + every, |end| end.min(now + every));
                tokio::select! {
                    _ = tokio::time::sleep_until(wake.into()) => {}
                    // The end became known: recompute when to wake.
                    _ = end_rx.changed(), if end.is_none() => continue,
                }
                if end.is_some_and(|end| Instant::now() >= end) {
                    return Ok(());
                }
                conn.send(ClientOutgoing::Request { xid: -2, request: Request::Ping }).await?;
                loop {
                    match conn.next().await {
                        Some(Ok(ServerIncoming::Reply { header, .. })) if header.xid == -2 => break,
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(BenchError::Protocol(format!("session lost: {e}"))),
                        None => return Err(BenchError::Protocol("session lost: closed by the server".into())),
                    }
                }
            }
        }));
    }
    drop(settled_tx);
    for _ in 0..args.clients {
        if settled_rx.recv().await.is_none() {
            break;
        }
    }
    let all_open_after = t0.elapsed();
    let _ = end_tx.send(Some(Instant::now() + Duration::from_secs_f64(args.duration)));
    let mut held = 0;
    let mut errors: std::collections::BTreeMap<String, u64> = Default::default();
    for t in tasks {
        match t.await {
            Ok(Ok(())) => held += 1,
            Ok(Err(e)) => *errors.entry(e.to_string()).or_default() += 1,
            Err(e) => *errors.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    Ok(serde_json::json!({
        "workload": "sessions", "opened": args.clients, "held": held, "seconds": args.duration, "errors": errors,
        "all_open_after_s": all_open_after.as_secs_f64(), "local_addrs": args.local_addrs.len(),
    }))
}

/// `watch`: N sessions watch one node; one setData; time until the last event arrives.
async fn watch(args: Arc<Args>, root: String) -> Result<serde_json::Value, BenchError> {
    let servers: Vec<String> = args.servers.split(',').map(str::to_owned).collect();
    let (mut admin, _) = connect(&servers[0], args.session_timeout).await?;
    let mut xid = 0;
    let node = format!("{root}/watched");
    call(&mut admin, &mut xid, create_req(node.clone(), Bytes::new())).await?;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(args.clients.max(1));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<Instant>(args.clients.max(1));
    // Sessions that could not connect or set their watch (a server's per-client connection
    // limit, say), reported rather than silently left out of `watchers`.
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..args.clients {
        let addr = servers[i % servers.len()].clone();
        let node = node.clone();
        let (ready_tx, done_tx, failed) = (ready_tx.clone(), done_tx.clone(), failed.clone());
        let timeout = args.session_timeout;
        tokio::spawn(async move {
            let fail = || failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Ok((mut conn, _)) = connect(&addr, timeout).await else {
                fail();
                return;
            };
            let mut xid = 0;
            if call(&mut conn, &mut xid, Request::GetData(jute::GetDataRequest { path: node, watch: true }))
                .await
                .is_err()
            {
                fail();
                return;
            }
            let _ = ready_tx.send(()).await;
            // Let the coordinator see "all ready" without waiting for this task's event.
            drop(ready_tx);
            while let Some(Ok(m)) = conn.next().await {
                if let ServerIncoming::Reply { header, .. } = m {
                    if header.xid == -1 {
                        let _ = done_tx.send(Instant::now()).await;
                        break;
                    }
                }
            }
        });
    }
    drop(ready_tx);
    drop(done_tx);
    let mut watchers = 0;
    while ready_rx.recv().await.is_some() {
        watchers += 1;
    }
    let t0 = Instant::now();
    call(
        &mut admin,
        &mut xid,
        Request::SetData(jute::SetDataRequest { path: node, data: Some(Bytes::from_static(b"x")), version: -1 }),
    )
    .await?;
    let mut last = t0;
    let mut events = 0;
    while let Ok(Some(t)) = tokio::time::timeout(Duration::from_secs(60), done_rx.recv()).await {
        events += 1;
        last = last.max(t);
        if events == watchers {
            break;
        }
    }
    let failed = failed.load(std::sync::atomic::Ordering::Relaxed);
    if failed > 0 {
        eprintln!("warden-bench: {failed} of {} watcher sessions could not connect or set their watch", args.clients);
    }
    Ok(serde_json::json!({
        "workload": "watch", "watchers": watchers, "failed_watchers": failed, "events": events,
        "last_event_ms": (last - t0).as_secs_f64() * 1000.0,
    }))
}

fn main() -> std::process::ExitCode {
    let args = Arc::new(Args::parse());
    if let Some(ca) = &args.tls_ca {
        match tls_connector(ca, args.tls_cert.as_deref(), args.tls_key.as_deref()) {
            Ok(c) => {
                let _ = TLS.set(c);
            }
            Err(e) => {
                eprintln!("warden-bench: TLS: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("warden-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args.clone())) {
        Ok(v) => {
            if args.json {
                println!("{v}");
            } else {
                match v.as_object() {
                    Some(m) => {
                        for (k, x) in m {
                            println!("{k}: {x}");
                        }
                    }
                    None => println!("{v}"),
                }
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("warden-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Tries a create on each server in turn until one succeeds (or `--duration` passes).
async fn probe(args: Arc<Args>) -> Result<serde_json::Value, BenchError> {
    // A new attempt (connect, open a session, create a node) starts every 10 ms, round-robin
    // over the servers, without cancelling earlier ones: an attempt that waits on an election
    // is not penalised and the first success is timed to within about 10 ms.
    let servers: Vec<String> = args.servers.split(',').map(str::to_owned).collect();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(args.duration);
    let mut attempts = 0u64;
    let mut running = futures::stream::FuturesUnordered::new();
    let mut next = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < deadline {
        tokio::select! {
            _ = next.tick() => {
                let addr = servers[attempts as usize % servers.len()].clone();
                attempts += 1;
                let timeout = args.session_timeout;
                let n = attempts;
                running.push(async move {
                    let attempt = async {
                        let (mut c, _) = connect(&addr, timeout).await?;
                        let mut xid = 0;
                        let path = format!("/warden-probe-{}-{n}", std::process::id());
                        call(&mut c, &mut xid, create_req(path, Bytes::new())).await
                    };
                    let ok = matches!(tokio::time::timeout(Duration::from_secs(3), attempt).await, Ok(Ok(0)));
                    (ok, addr, Instant::now())
                });
            }
            Some((ok, addr, at)) = futures::StreamExt::next(&mut running) => {
                if ok {
                    return Ok(serde_json::json!({
                        "workload": "probe", "server": addr, "attempts": attempts,
                        "first_write_ms": (at - t0).as_secs_f64() * 1000.0,
                    }));
                }
            }
        }
    }
    Err(BenchError::Protocol(format!("no write succeeded within {} s", args.duration)))
}

async fn run(args: Arc<Args>) -> Result<serde_json::Value, BenchError> {
    if args.workload == Workload::Probe {
        return probe(args).await;
    }
    let servers: Vec<String> = args.servers.split(',').map(str::to_owned).collect();
    let root = format!("/warden-bench-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    {
        let (mut c, _) = connect(&servers[0], args.session_timeout).await?;
        let mut xid = 0;
        call(&mut c, &mut xid, create_req(root.clone(), Bytes::new())).await?;
        if args.workload == Workload::Lock {
            call(&mut c, &mut xid, create_req(format!("{root}/lock"), Bytes::new())).await?;
        }
    }
    match args.workload {
        Workload::Sessions => return sessions(args).await,
        Workload::Watch => return watch(args, root).await,
        Workload::ExpiryStorm => return storm::expiry(args, root).await,
        Workload::WatchStorm => return storm::watches(args, root).await,
        _ => {}
    }
    // Setup time: scale with keys so every client is ready before `start`.
    let setup = Duration::from_secs_f64(1.0 + (args.keys * args.clients) as f64 / 20_000.0);
    let start = Instant::now() + setup;
    let deadline = start + Duration::from_secs_f64(args.duration);
    let totals = Arc::new(Mutex::new(Totals::default()));
    let cpu_pids = args.cpu_pids.clone();
    let cpu_window = tokio::spawn(async move {
        tokio::time::sleep_until(start.into()).await;
        let before = cpu_seconds(&cpu_pids);
        tokio::time::sleep_until(deadline.into()).await;
        let after = cpu_seconds(&cpu_pids);
        before.zip(after).map(|(b, a)| a - b)
    });
    let mut tasks = Vec::new();
    for id in 0..args.clients {
        tasks.push(tokio::spawn(client(args.clone(), id, root.clone(), start, deadline, totals.clone())));
    }
    let mut failures = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let server_cpu_s = if args.cpu_pids.is_empty() { None } else { cpu_window.await.ok().flatten() };
    // The window's start on the wall clock, to line `--samples-out` up with other clocks.
    let start_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |now| now.as_secs_f64() - start.elapsed().as_secs_f64());
    let elapsed = start.elapsed().as_secs_f64().max(args.duration);
    let mut t = totals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = &args.samples_out {
        write_samples(path, &mut t.samples).map_err(|e| BenchError::Protocol(format!("{}: {e}", path.display())))?;
    }
    let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    let (p50, p90, p99, p999, max) = match &t.hist {
        Some(h) => (q(h, 0.5), q(h, 0.9), q(h, 0.99), q(h, 0.999), h.max() as f64 / 1000.0),
        None => (0.0, 0.0, 0.0, 0.0, 0.0),
    };
    Ok(serde_json::json!({
        "workload": format!("{:?}", args.workload).to_lowercase(),
        "clients": args.clients,
        "inflight": args.inflight,
        "size": args.size,
        "seconds": elapsed,
        "ok": t.ok,
        "ops_per_sec": t.ok as f64 / elapsed,
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "p999_ms": p999, "max_ms": max,
        "errors": t.errors.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
        "client_failures": failures,
        "offered_rate": args.rate,
        "start_unix_s": start_unix_s,
        "server_cpu_s": server_cpu_s,
        // Successful ops in the measured window only would need per-op timestamps; the few
        // replies drained after the deadline (at most clients × inflight) are counted too.
        "cpu_s_per_1000_ops": server_cpu_s.map(|c| if t.ok > 0 { c * 1000.0 / t.ok as f64 } else { 0.0 }),
    }))
}

/// Writes `--samples-out`: "completion_us latency_us" per line, in completion order.
fn write_samples(path: &std::path::Path, samples: &mut [(u64, u64)]) -> std::io::Result<()> {
    use std::io::Write;
    samples.sort_unstable();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (at, micros) in samples.iter() {
        writeln!(out, "{at} {micros}")?;
    }
    out.flush()
}

/// User plus system CPU time of `pids` (whole processes, all threads), from
/// `/proc/<pid>/stat` (fields 14 and 15, in clock ticks of 1/100 s, Linux's USER_HZ); `None`
/// if one cannot be read.
fn cpu_seconds(pids: &[u32]) -> Option<f64> {
    let mut total = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces: fields are counted after its closing parenthesis.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        // `rest` starts at field 3 (state): utime is field 14, stime field 15.
        total += fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    }
    Some(total as f64 / 100.0)
}
