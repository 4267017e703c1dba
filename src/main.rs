//! `warden`: command line -> configuration -> `server::run` on the tuned runtime. No logic
//! here.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Parser;
use warden::config::Config;

// The write path allocates per request (frames, txns, tree nodes); glibc's malloc spent
// about a sixth of the server's CPU in a set-heavy profile. See `warden::runtime::alloc`
// for why not the `mimalloc` crate's own `GlobalAlloc`.
#[global_allocator]
static GLOBAL: warden::runtime::alloc::Mimalloc = warden::runtime::alloc::Mimalloc;

/// A ZooKeeper-wire-compatible coordination server.
///
/// With no arguments it serves on 127.0.0.1:2181 with its data in ./warden-data. Started on
/// an Apache ZooKeeper data dir, it imports it first (docs/migration.md).
/// `--version`, with the optional features this build has.
#[cfg(feature = "kerberos")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (features: kerberos)");
#[cfg(not(feature = "kerberos"))]
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Parser, Debug)]
#[command(version = VERSION, about)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// A ZooKeeper zoo.cfg to read (tickTime, dataDir, clientPort, ...).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Overrides dataDir (and dataLogDir unless that is set).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Overrides clientPort.
    #[arg(long)]
    client_port: Option<u16>,
    /// Overrides clientPortAddress.
    #[arg(long)]
    client_port_address: Option<std::net::IpAddr>,
    /// Log filter (tracing env-filter syntax); RUST_LOG wins when set.
    #[arg(long, default_value = DEFAULT_LOG_FILTER)]
    log_level: String,
}

/// Tools for data dirs; with none, `warden` serves.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Imports an Apache ZooKeeper data dir (3.4 to 3.9) into an empty Warden data dir,
    /// offline. ZooKeeper's files are only read.
    Import {
        /// ZooKeeper's dataDir (or its version-2 directory).
        #[arg(long)]
        zookeeper_data_dir: PathBuf,
        /// ZooKeeper's dataLogDir, if not its dataDir.
        #[arg(long)]
        zookeeper_data_log_dir: Option<PathBuf>,
        /// The Warden data dir to create.
        #[arg(long)]
        data_dir: PathBuf,
        /// The zoo.cfg the server will run with (its server id and membership).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the import report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Writes the state of a stopped Warden data dir as an Apache ZooKeeper snapshot
    /// (`snapshot.<zxid>`, loadable by ZooKeeper 3.8), sessions included.
    Export {
        /// The Warden data dir (dataDir).
        #[arg(long)]
        data_dir: PathBuf,
        /// Its dataLogDir, if not its dataDir.
        #[arg(long)]
        data_log_dir: Option<PathBuf>,
        /// A directory (the file gets ZooKeeper's name there) or the file to write.
        #[arg(long)]
        zookeeper_snapshot: PathBuf,
    },
    /// Saves a backup of a running server: a consistent snapshot of its tree, in Apache
    /// ZooKeeper's snapshot format, from its admin API (`/commands/snapshot`), written whole
    /// or not at all and checked before it counts. For cron.
    Backup {
        /// The server's admin API, host:port (admin.serverAddress:admin.serverPort).
        #[arg(long)]
        server: String,
        /// The file to write (not replaced if it exists).
        #[arg(long)]
        out: PathBuf,
        /// `digest <user>:<password>` of a user with ALL on `/` (a super user); else the
        /// environment variable WARDEN_ADMIN_AUTH.
        #[arg(long)]
        auth: Option<String>,
    },
    /// Restores a backup (or any ZooKeeper snapshot file) into a running server or ensemble,
    /// through its admin API (`/commands/restore`): every member replaces its tree with the
    /// snapshot's; connected sessions are kept.
    Restore {
        /// The server's admin API, host:port.
        #[arg(long)]
        server: String,
        /// The snapshot file to restore.
        #[arg(long = "in")]
        input: PathBuf,
        /// As for `backup`.
        #[arg(long)]
        auth: Option<String>,
    },
    /// Prints a snapshot or log file: Apache ZooKeeper's (`snapshot.*`, `log.*`) or Warden's
    /// (`snapshot-*.bin`, `raft-log.redb`).
    Dump {
        #[command(subcommand)]
        what: DumpWhat,
    },
}

#[derive(clap::Subcommand, Debug)]
enum DumpWhat {
    /// A snapshot file.
    Snapshot {
        file: PathBuf,
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A txn log file (ZooKeeper's `log.*`, or Warden's `raft-log.redb` or its directory).
    Log {
        file: PathBuf,
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Info, and openraft's warnings, except its warning per failed heartbeat and per replication
/// retry: about 40 a second for each peer that is down or cut off, for as long as it is.
/// Warden logs a silent peer itself, once and then once a minute (`raft::network`).
/// `openraft::replication::stream_state` keeps its warnings (a log read that broke openraft's
/// contract).
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::core::heartbeat=error,openraft::replication=error,\
                                  openraft::replication::stream_state=warn,\
                                  openraft::engine::handler::replication_handler=error";

fn main() -> std::process::ExitCode {
    warden::runtime::prepare();
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log_level));
    // Colour only on a terminal: a log file or pipe gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();

    #[cfg(feature = "failpoints")]
    let _failpoints = warden::failpoint::setup();

    if let Some(command) = args.command {
        return match tools::run(command) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("warden: {e}");
                std::process::ExitCode::from(1)
            }
        };
    }
    let mut config = match &args.config {
        Some(path) => match warden::config::read_properties(path).and_then(|p| Config::from_properties(&p)) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("warden: configuration error: {e}");
                return std::process::ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(path) = &args.config {
        config.config_file = Some(path.canonicalize().unwrap_or_else(|_| path.clone()));
        config.initial_config = std::fs::read_to_string(path).unwrap_or_default();
    }
    config.override_with(args.data_dir, args.client_port, args.client_port_address);
    // TLS key material is configuration too: a store that cannot be used stops start-up here.
    if config.tls.enabled() {
        if let Err(e) = warden::tls::server_config(&config.tls) {
            eprintln!("warden: configuration error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    #[cfg(feature = "kerberos")]
    if let Some(krb5_conf) = &config.krb5_conf {
        // java.security.krb5.conf: MIT Kerberos reads KRB5_CONFIG (one thread still).
        std::env::set_var("KRB5_CONFIG", krb5_conf);
    }
    #[cfg(feature = "kerberos")]
    if let Some(sasl) = config.sasl.as_mut() {
        if let Some(k) = sasl.kerberos() {
            // MIT Kerberos finds the acceptor's keys through KRB5_KTNAME; set here, while the
            // process has one thread.
            std::env::set_var("KRB5_KTNAME", format!("FILE:{}", k.keytab.display()));
        }
        if let Err(e) = sasl.load_kerberos() {
            eprintln!("warden: configuration error: java.security.auth.login.config: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    #[cfg(feature = "kerberos")]
    if let Some(q) = config.quorum_sasl.as_mut() {
        // Members' Kerberos: the QuorumServer keytab as the acceptor's (unless the Server
        // section set it: config checks they are one), the QuorumLearner keytab as the client
        // keytab MIT Kerberos takes tickets with, kept in memory; set while one thread runs.
        if let (Some(k), None) = (q.server.kerberos(), std::env::var_os("KRB5_KTNAME")) {
            std::env::set_var("KRB5_KTNAME", format!("FILE:{}", k.keytab.display()));
        }
        if let Some(kt) = q.learner_keytab() {
            std::env::set_var("KRB5_CLIENT_KTNAME", format!("FILE:{}", kt.display()));
            std::env::set_var("KRB5CCNAME", "MEMORY:warden-quorum");
        }
        if let Err(e) = q.load_kerberos() {
            eprintln!("warden: configuration error: quorum.auth.enableSasl: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    if config.admin_enable && config.admin_https() {
        if let Err(e) = warden::tls::server_config(&config.admin_tls()) {
            eprintln!("warden: configuration error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    if !config.servers.is_empty() {
        if let Err(e) = warden::tls::QuorumTls::new(&config.quorum_tls) {
            eprintln!("warden: configuration error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let mode = config.spread_workers;
    match warden::runtime::run(mode, |placement| warden::server::run(config, placement)) {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("warden: {e}");
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("warden: cannot start the runtime: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// The data-dir tools: import, export, dump.
mod tools {
    use std::io::Write;
    use std::path::Path;

    use warden::config::Config;
    use warden::zkdata::dump;

    use super::Command;
    use super::DumpWhat;

    fn read_config(path: Option<&Path>) -> Result<Config, String> {
        match path {
            Some(p) => warden::config::read_properties(p)
                .and_then(|props| Config::from_properties(&props))
                .map_err(|e| format!("configuration error: {e}")),
            None => Ok(Config::default()),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        Ok(rt.block_on(f))
    }

    pub fn run(command: Command) -> Result<(), String> {
        match command {
            Command::Import { zookeeper_data_dir, zookeeper_data_log_dir, data_dir, config, json } => {
                let mut config = read_config(config.as_deref())?;
                config.override_with(Some(data_dir), None, None);
                let log_dir = zookeeper_data_log_dir.unwrap_or_else(|| zookeeper_data_dir.clone());
                let report = warden::server::import_offline(&config, &zookeeper_data_dir, &log_dir)
                    .map_err(|e| e.to_string())?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
                } else {
                    println!("imported {report}");
                    for (path, offset) in &report.torn_logs {
                        println!(
                            "  {} ends in an entry cut short at byte {offset} (ignored, as ZooKeeper does)",
                            path.display()
                        );
                    }
                    for (_, why) in &report.invalid_snapshots {
                        println!("  passed over {why}"); // names the file
                    }
                    if let Some(d) = report.digest {
                        let verdict = if d.matches() { "matches" } else { "DIFFERS FROM" };
                        println!(
                            "  ZooKeeper digest at {:#x}: computed {} {verdict} recorded {}",
                            d.zxid, d.computed, d.recorded
                        );
                    }
                }
                Ok(())
            }
            Command::Export { data_dir, data_log_dir, zookeeper_snapshot } => {
                let layout =
                    warden::raft::layout::DataLayout::new(&data_dir, data_log_dir.as_deref().unwrap_or(&data_dir));
                let loaded = block_on(warden::raft::offline::load(&layout))??;
                let report =
                    warden::zkdata::export::export(&loaded.tree, &zookeeper_snapshot).map_err(|e| e.to_string())?;
                println!(
                    "wrote {}: zxid {:#x}, {} znodes, {} sessions ({} bytes; from {} and {} log entries after it)",
                    report.path.display(),
                    report.zxid,
                    report.znodes,
                    report.sessions,
                    report.bytes,
                    loaded.snapshot.as_ref().map_or("no snapshot".into(), |(p, _)| p.display().to_string()),
                    loaded.entries
                );
                Ok(())
            }
            Command::Backup { server, out, auth } => backup(&server, &out, auth),
            Command::Restore { server, input, auth } => restore(&server, &input, auth),
            Command::Dump { what } => {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let result = dump_file(what, &mut out);
                out.flush().map_err(|e| e.to_string())?;
                result
            }
        }
    }

    fn auth_header(auth: Option<String>) -> Result<String, String> {
        auth.or_else(|| std::env::var("WARDEN_ADMIN_AUTH").ok()).filter(|a| !a.is_empty()).ok_or_else(|| {
            "give --auth 'digest <user>:<password>' (or WARDEN_ADMIN_AUTH) for a user with ALL on /".to_owned()
        })
    }

    /// The admin API's JSON error, or the status, for a refused command.
    fn refusal(e: ureq::Error) -> String {
        match e {
            ureq::Error::StatusCode(code) => format!("the server answered HTTP {code}"),
            e => e.to_string(),
        }
    }

    fn backup(server: &str, out: &Path, auth: Option<String>) -> Result<(), String> {
        if out.exists() {
            return Err(format!("{} exists; not replacing it", out.display()));
        }
        let auth = auth_header(auth)?;
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut response = agent
            .get(format!("http://{server}/commands/snapshot?streaming=true"))
            .header("Authorization", &auth)
            .call()
            .map_err(refusal)?;
        if !response.status().is_success() {
            let body = response.body_mut().read_to_string().unwrap_or_default();
            return Err(format!("the server refused the snapshot (HTTP {}): {body}", response.status()));
        }
        let zxid = response.headers().get("last_zxid").and_then(|v| v.to_str().ok()).unwrap_or("?").to_owned();
        let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{}.tmp", out.file_name().and_then(|n| n.to_str()).unwrap_or("backup")));
        let result = (|| -> Result<(u64, usize), String> {
            let mut file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
            let bytes = std::io::copy(&mut response.body_mut().with_config().limit(u64::MAX).reader(), &mut file)
                .map_err(|e| format!("reading the snapshot from {server}: {e}"))?;
            file.sync_all().map_err(|e| e.to_string())?;
            // A backup that would not restore is no backup: read it back whole.
            let data = std::fs::read(&tmp).map_err(|e| e.to_string())?;
            let tree = warden::zkdata::import::snapshot_tree(&data, &tmp).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))?;
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| e.to_string())?;
            Ok((bytes, tree.node_count()))
        })();
        let (bytes, znodes) = result.inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        println!("wrote {}: zxid {zxid}, {znodes} znodes, {bytes} bytes", out.display());
        Ok(())
    }

    fn restore(server: &str, input: &Path, auth: Option<String>) -> Result<(), String> {
        let auth = auth_header(auth)?;
        let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
        // Refuse a damaged file here rather than after the upload.
        let tree = warden::zkdata::import::snapshot_tree(&data, input).map_err(|e| e.to_string())?;
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut response = agent
            .post(format!("http://{server}/commands/restore"))
            .header("Authorization", &auth)
            .header("Content-Type", "application/octet-stream")
            .send(&data[..])
            .map_err(refusal)?;
        let body = response.body_mut().read_to_string().unwrap_or_default();
        if !response.status().is_success() {
            return Err(format!("the server refused the restore (HTTP {}): {body}", response.status()));
        }
        let zxid = serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["last_zxid"].as_i64());
        println!(
            "restored {} ({} znodes) into {server} at zxid {}",
            input.display(),
            tree.node_count(),
            zxid.map_or("?".into(), |z| format!("{z:#x}"))
        );
        Ok(())
    }

    fn dump_file(what: DumpWhat, out: &mut dyn Write) -> Result<(), String> {
        let format = |json| if json { dump::Format::Json } else { dump::Format::Text };
        match what {
            DumpWhat::Snapshot { file, json } => match dump::kind_of(&file).map_err(|e| e.to_string())? {
                dump::FileKind::ZkSnapshot => dump::zk_snapshot(&file, format(json), out).map_err(|e| e.to_string()),
                dump::FileKind::ZkLog => {
                    Err(format!("{} is a ZooKeeper txn log: use `warden dump log`", file.display()))
                }
                dump::FileKind::Other => {
                    let (last, membership, tree) = warden::raft::offline::read_snapshot(&file)?;
                    let header = serde_json::json!({ "kind": "header", "file": "warden-snapshot",
                        "last_log_id": warden::raft::offline::log_id_text(&last), "membership": membership });
                    let header = if json {
                        header
                    } else {
                        serde_json::Value::String(format!(
                            "Warden snapshot {} (last log id {}, membership {membership})",
                            file.display(),
                            warden::raft::offline::log_id_text(&last)
                        ))
                    };
                    dump::tree(&tree, header, format(json), out).map_err(|e| e.to_string())
                }
            },
            DumpWhat::Log { file, json } => {
                if file.is_file() && dump::kind_of(&file).map_err(|e| e.to_string())? == dump::FileKind::ZkLog {
                    return dump::zk_log(&file, format(json), out).map_err(|e| e.to_string());
                }
                if file.is_file() && dump::kind_of(&file).map_err(|e| e.to_string())? == dump::FileKind::ZkSnapshot {
                    return Err(format!("{} is a ZooKeeper snapshot: use `warden dump snapshot`", file.display()));
                }
                // Warden's log: the redb file, one of its segments, or their directory.
                let redb = if file.is_dir() {
                    let v = file.join(warden::raft::layout::VERSION_DIR).join("raft-log.redb");
                    if v.exists() {
                        v
                    } else {
                        file.join("raft-log.redb")
                    }
                } else if file.extension().is_some_and(|e| e == "seg") {
                    file.with_file_name("raft-log.redb")
                } else {
                    file.clone()
                };
                let entries = block_on(warden::raft::offline::log_entries(&redb))??;
                let io = |e: std::io::Error| e.to_string();
                for (id, what) in &entries {
                    let id_text = warden::raft::offline::log_id_text(&Some(*id));
                    if json {
                        let v = match what {
                            Ok(txns) => serde_json::json!({ "kind": "entry", "log_id": id_text, "txns": txns }),
                            Err(d) => serde_json::json!({ "kind": "entry", "log_id": id_text, "other": d }),
                        };
                        writeln!(out, "{v}").map_err(io)?;
                    } else {
                        match what {
                            Ok(txns) => {
                                writeln!(out, "{id_text}: {} txn(s)", txns.len()).map_err(io)?;
                                for t in txns {
                                    writeln!(out, "  session {:#x} time {} {:?}", t.session_id, t.time_ms, t.op)
                                        .map_err(io)?;
                                }
                            }
                            Err(d) => writeln!(out, "{id_text}: {d}").map_err(io)?,
                        }
                    }
                }
                if !json {
                    writeln!(out, "{} entries", entries.len()).map_err(io)?;
                }
                Ok(())
            }
        }
    }
}
