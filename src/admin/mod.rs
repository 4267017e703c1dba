//! Four-letter words on the client port (`FourLetterCommands`), gated by
//! `4lw.commands.whitelist`. The admin HTTP server and the Prometheus exporter come with the
//! operations issue; this module only answers the words that exist so far.

use crate::dispatch::Dispatcher;

/// The Warden version as `srvr`/`stat`/`mntr` print it.
pub const VERSION: &str = concat!("3.8.0-warden-", env!("CARGO_PKG_VERSION"));

/// Answers a four-letter word with ZooKeeper's text (the connection closes afterwards).
pub fn four_letter(d: &Dispatcher, word: &[u8; 4]) -> String {
    let w = String::from_utf8_lossy(word).to_string();
    if word == b"\xff\xf4\xff\xfd" {
        return String::new();
    }
    if !d.config.four_letter_allowed(&w) {
        return format!("{w} is not executed because it is not in the whitelist.\n");
    }
    let tree = d.shared.read();
    let zxid = tree.last_zxid();
    let nodes = tree.node_count();
    let connections = d.sessions.connected();
    match word {
        b"ruok" => "imok".to_string(),
        b"isro" => "rw".to_string(),
        b"srvr" | b"stat" => {
            let mut s = format!("Zookeeper version: {VERSION}, built on unknown\n");
            if word == b"stat" {
                s.push_str("Clients:\n\n");
            }
            s.push_str(&format!(
                "Latency min/avg/max: 0/0.0/0\nReceived: 0\nSent: 0\nConnections: {connections}\nOutstanding: 0\nZxid: {zxid:#x}\nMode: standalone\nNode count: {nodes}\n"
            ));
            s
        }
        b"mntr" => format!(
            "zk_version\t{VERSION}\nzk_server_state\tstandalone\nzk_avg_latency\t0\nzk_max_latency\t0\nzk_min_latency\t0\nzk_packets_received\t0\nzk_packets_sent\t0\nzk_outstanding_requests\t0\nzk_znode_count\t{nodes}\nzk_watch_count\t{}\nzk_ephemerals_count\t{}\nzk_approximate_data_size\t{}\nzk_num_alive_connections\t{connections}\nzk_global_sessions\t{}\n",
            d.watches.count(),
            tree.ephemeral_count(),
            tree.data_size(),
            tree.sessions().count(),
        ),
        b"envi" => {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
            let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
            format!(
                "Environment:\nzookeeper.version={VERSION}, built on unknown\nhost.name={host}\nos.name={}\nos.arch={}\nuser.dir={cwd}\n",
                std::env::consts::OS,
                std::env::consts::ARCH,
            )
        }
        b"conf" => {
            let c = &d.config;
            format!(
                "clientPort={}\nsecureClientPort=-1\ndataDir={}\ndataLogDir={}\ntickTime={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\nclientPortListenBacklog=-1\nserverId={}\n",
                c.client_port,
                c.data_dir.display(),
                c.data_log_dir.display(),
                c.tick_time_ms,
                c.max_client_cnxns,
                c.min_session_timeout_ms,
                c.max_session_timeout_ms,
                c.server_id,
            )
        }
        _ => format!("{w} is not executed because it is not implemented by this server yet.\n"),
    }
}
