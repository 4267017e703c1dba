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
/// With no arguments it serves on 127.0.0.1:2181 with its data in ./warden-data.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
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
    config.override_with(args.data_dir, args.client_port, args.client_port_address);
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
