//! `warden`: command line -> configuration -> `server::run`. No logic here.

use std::path::PathBuf;

use clap::Parser;
use warden::config::Config;

// The write path allocates per request (frames, txns, tree nodes); glibc's malloc spent
// about a sixth of the server's CPU in a set-heavy profile. See `warden::alloc` for why not
// the `mimalloc` crate's own `GlobalAlloc`.
#[global_allocator]
static GLOBAL: warden::alloc::Mimalloc = warden::alloc::Mimalloc;

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

/// Turns transparent huge pages off for this process. mimalloc asks for them, and the kernel
/// then zeroes a whole 2 MiB page on the first touch of each: restarting with 1,000,000
/// znodes spent 45% of its time in `clear_page_erms` and took 5.7-6.9 s instead of 2.8-3.0 s
/// (and more RSS).
fn disable_transparent_huge_pages() {
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("warden: PR_SET_THP_DISABLE failed ({e}); continuing with transparent huge pages");
    }
}

fn main() -> std::process::ExitCode {
    warden::alloc::configure();
    disable_transparent_huge_pages();
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log_level));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

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
    if let Some(d) = args.data_dir {
        if config.data_log_dir == config.data_dir {
            config.data_log_dir = d.clone();
        }
        config.data_dir = d;
    }
    if let Some(p) = args.client_port {
        config.client_port = p;
    }
    if let Some(a) = args.client_port_address {
        config.client_port_address = a;
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // Each worker applies the placement itself when it wakes (see `warden::placement`); the
    // server's controller changes it with the load.
    let placement = warden::placement::Placement::new(config.spread_workers);
    if let Some(p) = placement.clone() {
        let held = p.clone();
        builder.on_thread_unpark(move || p.on_unpark());
        builder.on_thread_park(move || held.on_park());
    }
    let runtime = match builder.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("warden: cannot start the runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = runtime.block_on(warden::server::run(config, placement));
    // A snapshot still being written on a blocking thread would otherwise hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warden: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
