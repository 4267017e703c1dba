//! zoo.cfg and command-line flags into one validated [`Config`]; every default lives here.
//!
//! Keys are spelled as ZooKeeper spells them. Keys ZooKeeper takes as `zookeeper.*` system
//! properties (`4lw.commands.whitelist`, `extendedTypesEnabled`,
//! `DigestAuthenticationProvider.superDigest`, ...) are accepted with or without the
//! `zookeeper.` prefix. Unknown keys are logged and ignored, as ZooKeeper does, except keys
//! asking for what Warden does not provide and would otherwise quietly run without (TLS, SASL,
//! hierarchical quorums): those stop start-up. A bad value stops start-up with an error naming
//! the key and the value. A `dynamicConfigFile` is read for the members.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::path::PathBuf;

/// How often containers and TTL nodes are checked for removal: ZooKeeper's
/// `znode.container.checkIntervalMs` default. A shorter interval turned Curator's
/// create-the-parent-then-the-lock race (the parent container reaped in between, NoNode) from
/// rare into common.
pub const DEFAULT_CONTAINER_CHECK_INTERVAL_MS: u64 = 60_000;

/// Raft log entries kept after a snapshot (`commitLogCount`).
pub const DEFAULT_COMMIT_LOG_COUNT: u64 = 1000;

/// ZooKeeper's `fsync.warningthresholdms` default: 1 s.
pub const DEFAULT_FSYNC_WARNING_MS: u64 = 1000;

/// `runtime.spreadWorkers` (Warden's own key): where the runtime's worker threads run (see
/// `crate::runtime::workers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpreadWorkers {
    /// Spread while several clients send at once, free otherwise, and on a standalone
    /// server all workers but one held while a lone client writes (the default).
    Auto,
    /// Always one worker to a CPU.
    Always,
    /// Never pinned: the kernel places the workers.
    Never,
}

/// A configuration error: which key, which value, why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}: expected key=value, found {text:?}")]
    Syntax { path: String, line: usize, text: String },
    #[error("invalid value for {key}: {value:?} ({why})")]
    Value { key: String, value: String, why: String },
}

/// One `server.N=host:peerPort:electionPort[:participant|:observer][;[clientAddr:]clientPort]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    pub id: u64,
    pub host: String,
    /// Raft RPCs, forwarded writes, session touches and read-index requests.
    pub peer_port: u16,
    /// Accepted for compatibility and unused (Raft elects over the peer port).
    pub election_port: u16,
    pub observer: bool,
    /// The client address, if the line names one.
    pub client: Option<(String, u16)>,
}

impl ServerEntry {
    /// `host:peerPort`.
    pub fn peer_addr(&self) -> String {
        format!("{}:{}", self.host, self.peer_port)
    }

    /// The `server.N` value as ZooKeeper writes it in `/zookeeper/config` and its dynamic
    /// files (`QuorumServer.toString`): `host:peerPort:electionPort:role[;clientHost:port]`.
    pub fn spec(&self) -> String {
        let role = if self.observer { "observer" } else { "participant" };
        let mut out = format!("{}:{}:{}:{role}", self.host, self.peer_port, self.election_port);
        if let Some((host, port)) = &self.client {
            let host = if host.is_empty() { "0.0.0.0" } else { host.as_str() };
            out.push_str(&format!(";{host}:{port}"));
        }
        out
    }
}

/// `server.N=<spec>` lines, each ending in a newline: `/zookeeper/config` without its version.
pub fn server_lines(servers: &BTreeMap<u64, ServerEntry>) -> String {
    servers.values().map(|s| format!("server.{}={}\n", s.id, s.spec())).collect()
}

/// Parses the text of `/zookeeper/config` (`server.N=` lines and `version=<hex>`): the
/// servers and the version (0 without one).
pub fn parse_config_text(text: &str) -> Result<(BTreeMap<u64, ServerEntry>, i64), ConfigError> {
    let mut servers = BTreeMap::new();
    let mut version = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line.split_once('=').ok_or_else(|| bad(line, "", "expected key=value"))?;
        let (key, value) = (key.trim(), value.trim());
        if key == "version" {
            version = i64::from_str_radix(value, 16).map_err(|_| bad(key, value, "not a hex version"))?;
        } else if let Some(id) = key.strip_prefix("server.") {
            let id = parse::<u64>(key, id)?;
            check_server_id(key, value, id)?;
            servers.insert(id, parse_server(key, id, value)?);
        } else {
            return Err(bad(key, value, "not a member line"));
        }
    }
    Ok((servers, version))
}

/// Writes `path` through a temporary file beside it, fsynced, then renamed over it.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// After a reconfig, as ZooKeeper's `QuorumPeer.setQuorumVerifier` does: writes the new
/// members to `<zoo.cfg>.dynamic.<version in hex>` (sorted `server.N` lines, no version) and
/// points zoo.cfg's `dynamicConfigFile` at it, dropping its `server.N`, `group`, `weight` and
/// `peerType` lines. Other lines, comments included, stay as they were (ZooKeeper rewrites
/// them from its properties; it also drops `clientPort` when the member's line names a client
/// address, which Warden keeps: the line wins either way). Returns the dynamic file's path.
pub fn write_reconfigured(
    config_file: &Path,
    servers: &BTreeMap<u64, ServerEntry>,
    version: i64,
) -> std::io::Result<PathBuf> {
    let dynamic = PathBuf::from(format!("{}.dynamic.{version:x}", config_file.display()));
    let mut lines: Vec<String> = servers.values().map(|s| format!("server.{}={}", s.id, s.spec())).collect();
    lines.sort();
    write_atomically(&dynamic, &lines.join("\n"))?;
    let dynamic = dynamic.canonicalize()?;
    let old = std::fs::read_to_string(config_file)?;
    let mut out = String::new();
    for line in old.lines() {
        let key = line.trim_start().split(['=', ':', ' ', '\t']).next().unwrap_or_default().trim();
        let dropped = !line.trim_start().starts_with(['#', '!'])
            && (key.starts_with("server.")
                || key.starts_with("group")
                || key.starts_with("weight")
                || key.starts_with("dynamicConfigFile")
                || key.starts_with("peerType"));
        if !dropped {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!("dynamicConfigFile={}\n", dynamic.display()));
    write_atomically(config_file, &out)?;
    Ok(dynamic)
}

/// A `server.N` id: any positive number, as ZooKeeper takes (a member's own `myid` must also
/// fit the top byte of its session ids: see [`Config::from_properties`]).
pub fn check_server_id(key: &str, value: &str, id: u64) -> Result<(), ConfigError> {
    if id == 0 || id > i64::MAX as u64 {
        return Err(bad(key, value, "server ids must be positive"));
    }
    Ok(())
}

/// Parses a `server.N` value as ZooKeeper's `QuorumPeer.QuorumServer` does.
pub fn parse_server(key: &str, id: u64, value: &str) -> Result<ServerEntry, ConfigError> {
    let (addrs, client) = match value.split_once(';') {
        Some((a, c)) => (a, Some(c)),
        None => (value, None),
    };
    let parts: Vec<&str> = addrs.trim().split(':').collect();
    if parts.len() < 3 || parts.len() > 4 {
        return Err(bad(
            key,
            value,
            "expected host:peerPort:electionPort[:participant|:observer][;[clientAddr:]clientPort]",
        ));
    }
    let peer_port = parse::<u16>(key, parts[1])?;
    let election_port = parse::<u16>(key, parts[2])?;
    let observer = match parts.get(3).map(|r| r.trim()) {
        None | Some("participant") => false,
        Some("observer") => true,
        Some(other) => return Err(bad(key, value, format!("unknown role {other:?}"))),
    };
    let client = match client.map(str::trim).filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => Some(match c.rsplit_once(':') {
            Some((addr, port)) => (addr.to_owned(), parse::<u16>(key, port)?),
            None => ("0.0.0.0".to_owned(), parse::<u16>(key, c)?),
        }),
    };
    if parts[0].trim().is_empty() {
        return Err(bad(key, value, "empty host"));
    }
    Ok(ServerEntry { id, host: parts[0].trim().to_owned(), peer_port, election_port, observer, client })
}

/// A password from zoo.cfg (or the file `*.passwordPath` names): never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Secret {
        Secret(s)
    }

    /// The password itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

/// A key or trust store (`ssl.keyStore.*`, `ssl.trustStore.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub location: PathBuf,
    pub password: Option<Secret>,
    /// `PEM`, `PKCS12` (or `JKS`, refused with a conversion hint); `None`: from the extension.
    pub store_type: Option<String>,
}

/// `ssl.clientAuth`: whether the server asks TLS clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    None,
    Want,
    /// ZooKeeper's default.
    #[default]
    Need,
}

/// TLS on the client port, as ZooKeeper's `secureClientPort` and `ssl.*` keys set it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    pub secure_client_port: Option<u16>,
    pub secure_client_port_address: Option<IpAddr>,
    /// `client.portUnification`: the plaintext client port also takes TLS connections.
    pub port_unification: bool,
    pub key_store: Option<StoreConfig>,
    pub trust_store: Option<StoreConfig>,
    pub client_auth: ClientAuth,
    /// `ssl.protocol`; `None` offers TLS 1.2 and 1.3.
    pub protocol: Option<String>,
    pub enabled_protocols: Option<Vec<String>>,
    /// `ssl.ciphersuites`, Java's (IANA) names; `None` offers rustls' defaults.
    pub ciphersuites: Option<Vec<String>>,
    /// `zookeeper.X509AuthenticationProvider.superUser`: a client whose certificate subject
    /// is this DN is also `super`.
    pub x509_super_user: Option<String>,
    /// These are the quorum's settings (`ssl.quorum.*`): only the keys errors name differ.
    pub quorum: bool,
}

impl TlsConfig {
    /// Whether any client connection can be TLS.
    pub fn enabled(&self) -> bool {
        self.secure_client_port.is_some() || self.port_unification
    }

    /// The zoo.cfg key of one of these settings (`keyStore.location` -> `ssl.keyStore.location`,
    /// or `ssl.quorum.keyStore.location` for the quorum's).
    pub fn key(&self, suffix: &str) -> String {
        let prefix = if self.quorum { "ssl.quorum." } else { "ssl." };
        format!("{prefix}{suffix}")
    }
}

/// TLS between members, as ZooKeeper's `sslQuorum`, `portUnification` and `ssl.quorum.*` keys
/// set it: the peer port then takes only connections whose certificate the quorum trust store
/// vouches for, and members connect to each other with their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumTlsConfig {
    /// `sslQuorum`: this member connects to the others over TLS and, without
    /// [`QuorumTlsConfig::port_unification`], accepts only TLS.
    pub ssl_quorum: bool,
    /// `portUnification`: the peer port takes TLS and plaintext connections alike, the middle
    /// step of a rolling change between the two.
    pub port_unification: bool,
    /// The `ssl.quorum.*` stores and settings (client authentication `need` by default).
    pub tls: TlsConfig,
    /// `ssl.quorum.hostnameVerification` (default true): a member's certificate must name the
    /// host it is reached at.
    pub hostname_verification: bool,
    /// `ssl.quorum.clientHostnameVerification` (default: as `hostnameVerification`): a
    /// connecting member's certificate must name the address it connects from.
    pub client_hostname_verification: Option<bool>,
    /// `sslQuorumReloadCertFiles`: a change to the quorum's store files is picked up without
    /// a restart (new connections use it; open ones keep theirs).
    pub reload_cert_files: bool,
}

impl Default for QuorumTlsConfig {
    fn default() -> Self {
        QuorumTlsConfig {
            ssl_quorum: false,
            port_unification: false,
            tls: TlsConfig { quorum: true, ..TlsConfig::default() },
            hostname_verification: true,
            client_hostname_verification: None,
            reload_cert_files: false,
        }
    }
}

impl QuorumTlsConfig {
    /// Whether any peer connection can be TLS.
    pub fn enabled(&self) -> bool {
        self.ssl_quorum || self.port_unification
    }

    /// Whether the peer port checks a connecting member's certificate against its address.
    pub fn verify_client_hostname(&self) -> bool {
        self.client_hostname_verification.unwrap_or(self.hostname_verification)
    }
}

/// The server's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub tick_time_ms: u32,
    pub data_dir: PathBuf,
    pub data_log_dir: PathBuf,
    pub client_port: u16,
    pub client_port_address: IpAddr,
    /// Whether the plaintext `clientPort` is served: not when zoo.cfg sets only
    /// `secureClientPort` (ZooKeeper then serves TLS alone).
    pub plaintext_client_port: bool,
    /// TLS on the client port (`secureClientPort`, `client.portUnification`, `ssl.*`).
    pub tls: TlsConfig,
    /// TLS between members (`sslQuorum`, `portUnification`, `ssl.quorum.*`).
    pub quorum_tls: QuorumTlsConfig,
    /// Max concurrent connections per client IP; 0 = unlimited.
    pub max_client_cnxns: usize,
    /// Overload protection: ZooKeeper's request and connection throttles.
    pub throttle: ThrottleConfig,
    /// `clientPortListenBacklog` as written (-1 when unset, as ZooKeeper reports it); see
    /// [`Config::listen_backlog`].
    pub client_port_listen_backlog: i32,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub snap_count: u64,
    /// `snapshot.compression.method` (ZooKeeper's `zookeeper.snapshot.compression.method`):
    /// whether Warden's snapshot files are zstd-compressed. On unless the key says `none`
    /// (or ZooKeeper's `checked` or empty value, its uncompressed form); ZooKeeper's `gz` and
    /// `snappy` ask for compression and get Warden's (zstd). Either kind of file is read.
    pub snapshot_compression: bool,
    /// `commitLogCount` (ZooKeeper's `zookeeper.commitLogCount`): how many Raft log entries
    /// are kept after a snapshot, so a follower that lags by fewer catches up from the log
    /// instead of a whole snapshot. ZooKeeper counts committed txns kept in memory (500);
    /// Warden counts log entries, each a batch of txns.
    pub commit_log_count: u64,
    pub autopurge_snap_retain_count: u32,
    pub autopurge_purge_interval_h: u32,
    /// `None` = every word ("*").
    pub four_letter_whitelist: Option<Vec<String>>,
    pub admin_enable: bool,
    pub admin_address: IpAddr,
    pub admin_port: u16,
    /// Bearer token that mutating admin endpoints require (`admin.authToken`, Warden's own key).
    pub admin_token: Option<String>,
    /// `admin.forceHttps`: the admin server speaks TLS only, with the `ssl.quorum.*` key
    /// store (ZooKeeper's `JettyAdminServer`); `admin.portUnification`: TLS and plaintext.
    pub admin_force_https: bool,
    pub admin_port_unification: bool,
    pub metrics_enable: bool,
    pub metrics_host: IpAddr,
    pub metrics_port: u16,
    pub extended_types_enabled: bool,
    /// `zookeeper.enforceQuota` (zoo.cfg, or `-D` in `SERVER_JVMFLAGS`/`JVMFLAGS`): creates
    /// and setData past a hard quota fail with QuotaExceeded. Set it alike on every member:
    /// the member that takes the request decides.
    pub enforce_quota: bool,
    /// `audit.enable` (ZooKeeper's `zookeeper.audit.enable`: zoo.cfg, or `-D` in
    /// `SERVER_JVMFLAGS`/`JVMFLAGS`): where the audit log goes, if on. The file is
    /// `audit.logFile`, else `zookeeper_audit.log` in `ZOO_LOG_DIR` (where ZooKeeper's
    /// scripts put it), else in `dataDir`.
    pub audit_log: Option<PathBuf>,
    /// `admin.rateLimiterIntervalInMS`: the admin `snapshot` and `restore` run at most once
    /// each in this many ms; `admin.snapshot.intervalInMS` and `admin.restore.intervalInMS`
    /// set one of them alone.
    pub admin_rate_limit_ms: u64,
    pub admin_snapshot_interval_ms: Option<u64>,
    pub admin_restore_interval_ms: Option<u64>,
    /// `digest.enabled` (ZooKeeper's `zookeeper.digest.enabled`, default true): followers
    /// compare their tree digests with the leader's (`dispatch::digests`).
    pub digest_enabled: bool,
    /// `localSessionsEnabled`: on an ensemble member, a new session lives on that member only,
    /// with no log entry, until it creates an ephemeral (ZooKeeper's local sessions).
    pub local_sessions: bool,
    /// `localSessionsUpgradingEnabled`: a local session that creates an ephemeral becomes a
    /// global one first; without it the create fails with EphemeralOnLocalSession.
    pub local_sessions_upgrading: bool,
    pub max_buffer: usize,
    /// `super:<base64 sha1>`.
    pub super_digest: Option<String>,
    /// How often containers and TTL nodes are checked (ZooKeeper: 60 s).
    pub container_check_interval_ms: u64,
    /// This server's id: `myid` in an ensemble, 0 standalone.
    pub server_id: u64,
    /// The ensemble (`server.N` lines); empty when standalone.
    pub servers: std::collections::BTreeMap<u64, ServerEntry>,
    pub init_limit: u32,
    pub sync_limit: u32,
    /// `raft.heartbeatMs` (Warden's own key); default tickTime / 80.
    pub raft_heartbeat_ms: Option<u64>,
    /// `raft.electionTimeoutMs` (Warden's own key); default 3 heartbeats.
    pub raft_election_timeout_ms: Option<u64>,
    /// `runtime.spreadWorkers` (Warden's own key): `auto` (default), `true` or `false`; see
    /// `crate::runtime::workers`.
    pub spread_workers: SpreadWorkers,
    /// `fsync.warningthresholdms`: a Raft log append whose write and fsync take longer is
    /// logged (at most once a minute). ZooKeeper's key and default, 1000.
    pub fsync_warning_threshold_ms: u64,
    /// `forceSync`: Raft log appends are fsynced before a write is acknowledged. As in
    /// ZooKeeper, only the value `no` turns it off.
    pub force_sync: bool,
    /// `readMode=linearizable` (Warden's own key): every read is served after a read-index
    /// round (shared by the reads that wait for it), as if the client sent `sync` first.
    /// Default `zookeeper`: ZooKeeper's own promise (a member's reads may lag the leader).
    pub linearizable_reads: bool,
    /// The version of the ensemble's configuration: the hex suffix of the
    /// `dynamicConfigFile` name (`zoo.cfg.dynamic.100000000`), 0 for `server.N` lines in
    /// zoo.cfg (as ZooKeeper numbers them).
    pub config_version: i64,
    /// `reconfigEnabled`: clients may change the members (`reconfig`); default off, as in
    /// ZooKeeper 3.5.3+.
    pub reconfig_enabled: bool,
    /// The zoo.cfg this server was started with (a reconfig rewrites its
    /// `dynamicConfigFile` line); `None` without one.
    pub config_file: Option<PathBuf>,
    /// SASL for clients: the JAAS file's server section (`java.security.auth.login.config`
    /// in zoo.cfg, or `-Djava.security.auth.login.config=` in `SERVER_JVMFLAGS`/`JVMFLAGS`,
    /// as ZooKeeper's start scripts pass it; section `zookeeper.sasl.serverconfig`, default
    /// `Server`). `None`: no SASL.
    pub sasl: Option<crate::sasl::SaslServer>,
    /// Where the JAAS file came from (for logs and `conf`).
    pub jaas_path: Option<PathBuf>,
    /// `java.security.krb5.conf` (zoo.cfg, or `-D...` in `SERVER_JVMFLAGS`/`JVMFLAGS`): the
    /// Kerberos configuration (realms, KDCs) the server's GSSAPI uses; else `KRB5_CONFIG` or
    /// /etc/krb5.conf, as MIT Kerberos finds it.
    pub krb5_conf: Option<PathBuf>,
    /// `zookeeper.superUser` (and `zookeeper.superUser.*`): SASL identities that are super.
    pub sasl_super_users: Vec<String>,
    /// `enforce.auth.enabled` + `enforce.auth.schemes` (or `sessionRequireClientSASLAuth`):
    /// the schemes one of which a connection must have authenticated with before any request
    /// other than `auth` and `sasl`; empty = not enforced.
    pub enforce_auth_schemes: Vec<String>,
    /// `zookeeper.allowSaslFailedClients`: a failed SASL exchange leaves the connection open
    /// (unauthenticated) instead of closing it, unless SASL is enforced.
    pub allow_sasl_failed_clients: bool,
    /// Members authenticate each other with SASL (`quorum.auth.enableSasl` and the JAAS
    /// file's `QuorumServer`/`QuorumLearner` sections); `None` when off.
    pub quorum_sasl: Option<crate::sasl::QuorumSasl>,
    /// `readonlymode.enabled` (ZooKeeper's JVM property, read from zoo.cfg here): a member
    /// without a quorum serves reads to clients that ask for read-only sessions.
    pub readonly_mode: bool,
    /// The zoo.cfg text the server started from (`initial_configuration`); empty without one.
    pub initial_config: String,
}

impl Config {
    /// [`Config::initial_config`] with every password value replaced by `***`.
    pub fn initial_config_masked(&self) -> String {
        self.initial_config
            .lines()
            .map(|line| match line.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("password") || k.contains("superDigest") => {
                    format!("{k}=***")
                }
                _ => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether the admin server takes TLS (`admin.forceHttps` or `admin.portUnification`).
    pub fn admin_https(&self) -> bool {
        self.admin_force_https || self.admin_port_unification
    }

    /// The admin server's TLS settings: the quorum's key store, no client certificates
    /// (ZooKeeper 3.8's `JettyAdminServer` asks for none).
    pub fn admin_tls(&self) -> TlsConfig {
        TlsConfig { client_auth: ClientAuth::None, ..self.quorum_tls.tls.clone() }
    }

    /// Applies the command line's overrides: `--data-dir` (and `dataLogDir` with it, unless
    /// zoo.cfg set that apart), `--client-port`, `--client-port-address`.
    pub fn override_with(&mut self, data_dir: Option<PathBuf>, client_port: Option<u16>, address: Option<IpAddr>) {
        if let Some(d) = data_dir {
            if self.data_log_dir == self.data_dir {
                self.data_log_dir = d.clone();
            }
            self.data_dir = d;
        }
        if let Some(p) = client_port {
            self.client_port = p;
        }
        if let Some(a) = address {
            self.client_port_address = a;
        }
    }
}

/// Overload protection, with ZooKeeper's keys and defaults. Each is read from zoo.cfg (with or
/// without the `zookeeper.` prefix, as ZooKeeper turns unknown zoo.cfg keys into
/// `zookeeper.<key>` JVM properties) or from `-Dzookeeper.<key>=` in
/// `SERVER_JVMFLAGS`/`JVMFLAGS`.
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleConfig {
    /// `globalOutstandingLimit`: past this many requests in process server-wide, a connection
    /// with a request of its own in process reads no more until the count drops.
    pub global_outstanding_limit: usize,
    /// `request_throttle_max_requests` (0: off): past this many requests in process, a request
    /// read waits (`request_throttle_stall_time` ms between looks) before it is processed.
    pub max_requests: usize,
    pub stall_time_ms: u64,
    /// `request_throttle_drop_stale`: a waiting request whose connection closed is dropped.
    /// Always so here (the request dies with its connection); the key is read and checked.
    pub drop_stale: bool,
    /// `largeRequestThreshold` (-1: off) and `largeRequestMaxBytes`: a request above the
    /// threshold that would take the large requests in process past the maximum closes its
    /// connection, as in ZooKeeper.
    pub large_request_threshold: i64,
    pub large_request_max_bytes: u64,
    /// `connection_throttle_tokens` (0: off), `_fill_time` (ms), `_fill_count`: a token bucket
    /// new sessions draw from; with no token left the connection is closed.
    pub conn_tokens: u64,
    pub conn_fill_time_ms: u64,
    pub conn_fill_count: u64,
    /// `connection_throttle_freeze_time` (-1: off), `_drop_increase`, `_drop_decrease`,
    /// `_decrease_ratio`: ZooKeeper's BLUE random early drop on top of the bucket.
    pub conn_freeze_time_ms: i64,
    pub conn_drop_increase: f64,
    pub conn_drop_decrease: f64,
    pub conn_decrease_ratio: f64,
    /// `connection_throttle_weight_enabled` and the weights of a new global, new local and
    /// renewed session (`connection_throttle_{global,local,renew}_session_weight`).
    pub conn_weight_enabled: bool,
    pub conn_weight_global: u64,
    pub conn_weight_local: u64,
    pub conn_weight_renew: u64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            global_outstanding_limit: 1000,
            max_requests: 0,
            stall_time_ms: 100,
            drop_stale: true,
            large_request_threshold: -1,
            large_request_max_bytes: 100 * 1024 * 1024,
            conn_tokens: 0,
            conn_fill_time_ms: 1,
            conn_fill_count: 1,
            conn_freeze_time_ms: -1,
            conn_drop_increase: 0.02,
            conn_drop_decrease: 0.002,
            conn_decrease_ratio: 0.0,
            conn_weight_enabled: false,
            conn_weight_global: 3,
            conn_weight_local: 1,
            conn_weight_renew: 2,
        }
    }
}

/// The throttle keys, as zoo.cfg spells them without the `zookeeper.` prefix.
const THROTTLE_KEYS: &[&str] = &[
    "globalOutstandingLimit",
    "request_throttle_max_requests",
    "request_throttle_stall_time",
    "request_throttle_drop_stale",
    "largeRequestThreshold",
    "largeRequestMaxBytes",
    "connection_throttle_tokens",
    "connection_throttle_fill_time",
    "connection_throttle_fill_count",
    "connection_throttle_freeze_time",
    "connection_throttle_drop_increase",
    "connection_throttle_drop_decrease",
    "connection_throttle_decrease_ratio",
    "connection_throttle_weight_enabled",
    "connection_throttle_global_session_weight",
    "connection_throttle_local_session_weight",
    "connection_throttle_renew_session_weight",
];

impl ThrottleConfig {
    /// Reads the throttle keys found in zoo.cfg (`found`: key without prefix -> (key as
    /// written, value)), the others from the JVM flags in the environment.
    fn read(found: &BTreeMap<&'static str, (String, String)>) -> Result<ThrottleConfig, ConfigError> {
        let mut t = ThrottleConfig::default();
        for key in THROTTLE_KEYS {
            let (raw, value) = match found.get(key) {
                Some((raw, value)) => (raw.clone(), value.clone()),
                None => match jvm_property_from_env(&format!("zookeeper.{key}")) {
                    Some(x) => x,
                    None => continue,
                },
            };
            let (raw, value) = (raw.as_str(), value.as_str());
            let positive = |v: u64| if v == 0 { Err(bad(raw, value, "must be positive")) } else { Ok(v) };
            let ratio = |v: f64| {
                if (0.0..=1.0).contains(&v) {
                    Ok(v)
                } else {
                    Err(bad(raw, value, "must be between 0 and 1"))
                }
            };
            match *key {
                "globalOutstandingLimit" => {
                    // ZooKeeper reads it as an int; a value below 1 would stop every busy
                    // connection for good.
                    let v: i64 = parse(raw, value)?;
                    t.global_outstanding_limit = usize::try_from(v)
                        .ok()
                        .filter(|v| *v > 0)
                        .ok_or_else(|| bad(raw, value, "must be positive"))?;
                }
                "request_throttle_max_requests" => t.max_requests = parse(raw, value)?,
                "request_throttle_stall_time" => t.stall_time_ms = positive(parse(raw, value)?)?,
                "request_throttle_drop_stale" => {
                    t.drop_stale = parse_bool(raw, value)?;
                    if !t.drop_stale {
                        tracing::warn!(key = raw, "a waiting request whose connection closed is dropped all the same: Warden answers no request on a closed connection");
                    }
                }
                "largeRequestThreshold" => {
                    let v: i64 = parse(raw, value)?;
                    // ZooKeeper: 0 or below turns it off.
                    t.large_request_threshold = if v <= 0 { -1 } else { v };
                }
                "largeRequestMaxBytes" => t.large_request_max_bytes = positive(parse(raw, value)?)?,
                "connection_throttle_tokens" => t.conn_tokens = parse(raw, value)?,
                "connection_throttle_fill_time" => t.conn_fill_time_ms = positive(parse(raw, value)?)?,
                "connection_throttle_fill_count" => t.conn_fill_count = positive(parse(raw, value)?)?,
                "connection_throttle_freeze_time" => {
                    let v: i64 = parse(raw, value)?;
                    if v < -1 {
                        return Err(bad(raw, value, "must be -1 (off) or a time in ms"));
                    }
                    t.conn_freeze_time_ms = v;
                }
                "connection_throttle_drop_increase" => t.conn_drop_increase = ratio(parse(raw, value)?)?,
                "connection_throttle_drop_decrease" => t.conn_drop_decrease = ratio(parse(raw, value)?)?,
                "connection_throttle_decrease_ratio" => t.conn_decrease_ratio = ratio(parse(raw, value)?)?,
                "connection_throttle_weight_enabled" => t.conn_weight_enabled = parse_bool(raw, value)?,
                "connection_throttle_global_session_weight" => t.conn_weight_global = positive(parse(raw, value)?)?,
                "connection_throttle_local_session_weight" => t.conn_weight_local = positive(parse(raw, value)?)?,
                "connection_throttle_renew_session_weight" => t.conn_weight_renew = positive(parse(raw, value)?)?,
                _ => {}
            }
        }
        // ZooKeeper's rules between the weights: a global or renewed session never costs
        // less than a local one.
        t.conn_weight_global = t.conn_weight_global.max(t.conn_weight_local);
        t.conn_weight_renew = t.conn_weight_renew.max(t.conn_weight_local);
        if t.conn_weight_enabled {
            // The configured tokens are counted in global sessions.
            t.conn_tokens *= t.conn_weight_global;
            t.conn_fill_count *= t.conn_weight_global;
        }
        Ok(t)
    }
}

impl Default for Config {
    fn default() -> Self {
        let tick = 3000;
        Config {
            tick_time_ms: tick,
            data_dir: PathBuf::from("warden-data"),
            data_log_dir: PathBuf::from("warden-data"),
            client_port: 2181,
            client_port_address: IpAddr::from([127, 0, 0, 1]),
            plaintext_client_port: true,
            tls: TlsConfig::default(),
            quorum_tls: QuorumTlsConfig::default(),
            max_client_cnxns: 60,
            throttle: ThrottleConfig::default(),
            client_port_listen_backlog: -1,
            min_session_timeout_ms: 2 * tick as i32,
            max_session_timeout_ms: 20 * tick as i32,
            snap_count: 100_000,
            snapshot_compression: true,
            commit_log_count: DEFAULT_COMMIT_LOG_COUNT,
            autopurge_snap_retain_count: 3,
            autopurge_purge_interval_h: 0,
            four_letter_whitelist: Some(vec!["srvr".into()]),
            admin_enable: true,
            admin_address: IpAddr::from([127, 0, 0, 1]),
            admin_port: 8080,
            admin_token: None,
            admin_force_https: false,
            admin_port_unification: false,
            metrics_enable: true,
            metrics_host: IpAddr::from([127, 0, 0, 1]),
            metrics_port: 7000,
            extended_types_enabled: false,
            enforce_quota: false,
            audit_log: None,
            admin_rate_limit_ms: 300_000,
            admin_snapshot_interval_ms: None,
            admin_restore_interval_ms: None,
            digest_enabled: true,
            local_sessions: false,
            local_sessions_upgrading: false,
            max_buffer: jute::DEFAULT_MAX_FRAME,
            super_digest: None,
            container_check_interval_ms: DEFAULT_CONTAINER_CHECK_INTERVAL_MS,
            server_id: 0,
            servers: std::collections::BTreeMap::new(),
            init_limit: 10,
            sync_limit: 5,
            raft_heartbeat_ms: None,
            raft_election_timeout_ms: None,
            spread_workers: SpreadWorkers::Auto,
            fsync_warning_threshold_ms: DEFAULT_FSYNC_WARNING_MS,
            force_sync: true,
            linearizable_reads: false,
            config_version: 0,
            reconfig_enabled: false,
            config_file: None,
            sasl: None,
            jaas_path: None,
            krb5_conf: None,
            sasl_super_users: Vec::new(),
            enforce_auth_schemes: Vec::new(),
            allow_sasl_failed_clients: false,
            quorum_sasl: None,
            readonly_mode: false,
            initial_config: String::new(),
        }
    }
}

fn bad(key: &str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Value { key: key.into(), value: value.into(), why: why.into() }
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse::<T>().map_err(|e| bad(key, value, e.to_string()))
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(bad(key, value, "expected true or false")),
    }
}

/// Reads `key=value` lines (`#` comments, blank lines) as ZooKeeper's Properties loader does.
pub fn read_properties(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: p.clone(), source })?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((k, v)) = line.split_once('=').or_else(|| line.split_once(':')) else {
            return Err(ConfigError::Syntax { path: p, line: i + 1, text: line.into() });
        };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}

/// What a security key asks for that Warden does not provide, if it does: such a config must
/// stop start-up, never run in the clear or unauthenticated.
fn unsupported_security(key: &str, value: &str) -> Option<&'static str> {
    let builtin = |v: &str| {
        matches!(
            v.trim(),
            "org.apache.zookeeper.server.auth.DigestAuthenticationProvider"
                | "org.apache.zookeeper.server.auth.IPAuthenticationProvider"
                | "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
                | "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
        )
    };
    match key {
        k if k.starts_with("authProvider.") && !builtin(value) => Some("this authentication provider"),
        "requireClientAuthScheme" => Some("a required client authentication scheme"),
        _ => None,
    }
}

/// `snapshot.compression.method`: whether snapshots are compressed (see
/// [`Config::snapshot_compression`]). A value neither Warden nor ZooKeeper knows stops start-up
/// (ZooKeeper would write uncompressed snapshots for it; a typo of `zstd` should not).
fn parse_compression(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "zstd" => Ok(true),
        "gz" | "snappy" => {
            tracing::info!(key, value, "Warden compresses its snapshots with zstd");
            Ok(true)
        }
        "" | "none" | "checked" => Ok(false),
        _ => Err(bad(key, value, "must be zstd (Warden's default), none, or ZooKeeper's gz, snappy or checked")),
    }
}

/// The JVM property `property` as `-D<property>=` in `SERVER_JVMFLAGS` or `JVMFLAGS`
/// (ZooKeeper's start scripts pass both to the server's JVM; the later wins there, and
/// here), with the variable it came from.
fn jvm_property_from_env(property: &str) -> Option<(String, String)> {
    let prefix = format!("-D{property}=");
    let mut found = None;
    for var in ["SERVER_JVMFLAGS", "JVMFLAGS"] {
        if let Ok(flags) = std::env::var(var) {
            for word in flags.split_whitespace() {
                if let Some(value) = word.strip_prefix(&prefix) {
                    found = Some((format!("-D{property} in {var}"), value.trim_matches('"').to_owned()));
                }
            }
        }
    }
    found
}

/// A password key's value (or the file its `passwordPath` twin names, as ZooKeeper 3.8 reads
/// it: the whole file, a trailing newline dropped).
fn password(key: &str, value: &str, from_file: bool) -> Result<Secret, ConfigError> {
    if !from_file {
        return Ok(Secret::new(value.to_owned()));
    }
    let text = std::fs::read_to_string(value.trim()).map_err(|e| bad(key, value, e.to_string()))?;
    Ok(Secret::new(text.strip_suffix('\n').unwrap_or(&text).to_owned()))
}

/// Applies one `ssl.*` (client side) key; `Ok(false)` if it is not one.
fn tls_key(tls: &mut TlsConfig, raw_key: &str, key: &str, value: &str) -> Result<bool, ConfigError> {
    fn store(s: &mut Option<StoreConfig>) -> &mut StoreConfig {
        s.get_or_insert_with(|| StoreConfig { location: PathBuf::new(), password: None, store_type: None })
    }
    let list =
        |v: &str| -> Vec<String> { v.split(',').map(|x| x.trim().to_owned()).filter(|x| !x.is_empty()).collect() };
    match key {
        "ssl.keyStore.location" => store(&mut tls.key_store).location = PathBuf::from(value.trim()),
        "ssl.keyStore.password" => store(&mut tls.key_store).password = Some(password(raw_key, value, false)?),
        "ssl.keyStore.passwordPath" => store(&mut tls.key_store).password = Some(password(raw_key, value, true)?),
        "ssl.keyStore.type" => store(&mut tls.key_store).store_type = Some(value.trim().to_owned()),
        "ssl.trustStore.location" => store(&mut tls.trust_store).location = PathBuf::from(value.trim()),
        "ssl.trustStore.password" => store(&mut tls.trust_store).password = Some(password(raw_key, value, false)?),
        "ssl.trustStore.passwordPath" => store(&mut tls.trust_store).password = Some(password(raw_key, value, true)?),
        "ssl.trustStore.type" => store(&mut tls.trust_store).store_type = Some(value.trim().to_owned()),
        "ssl.clientAuth" => {
            tls.client_auth = match value.trim().to_ascii_lowercase().as_str() {
                "" | "need" => ClientAuth::Need,
                "want" => ClientAuth::Want,
                "none" => ClientAuth::None,
                _ => return Err(bad(raw_key, value, "expected none, want or need")),
            }
        }
        "ssl.protocol" => tls.protocol = Some(value.trim().to_owned()),
        "ssl.enabledProtocols" => tls.enabled_protocols = Some(list(value)),
        "ssl.ciphersuites" => tls.ciphersuites = Some(list(value)),
        // The server does not check a client's host name on the client port in ZooKeeper
        // either (`ClientX509Util.shouldVerifyClientHostname` is false); accepted.
        "ssl.hostnameVerification" | "ssl.clientHostnameVerification" => {
            parse_bool(raw_key, value)?;
        }
        "ssl.authProvider" => {
            if value.trim() != "x509" {
                return Err(bad(raw_key, value, "only the x509 provider is built in"));
            }
        }
        "ssl.crl" | "ssl.ocsp" => {
            if parse_bool(raw_key, value)? {
                return Err(bad(raw_key, value, "certificate revocation checks are not supported by this build"));
            }
        }
        // Java's engine choice and Netty's handshake timer: nothing to choose here.
        "ssl.sslProvider" | "ssl.handshakeDetectionTimeoutMillis" => {}
        k if k.starts_with("ssl.") && !k.starts_with("ssl.quorum.") => {
            return Err(bad(raw_key, value, "unknown TLS key; refusing to start rather than ignore it"));
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The members of a ZooKeeper 3.5+ `dynamicConfigFile` (`zoo.cfg.dynamic.<version>`): its
/// `server.N` lines. As in ZooKeeper, the file names its version and may not hold one.
pub fn read_dynamic_config(path: &Path) -> Result<BTreeMap<u64, ServerEntry>, ConfigError> {
    let props = read_properties(path)?;
    let mut servers = BTreeMap::new();
    for (key, value) in &props {
        if let Some(id) = key.strip_prefix("server.") {
            let id = parse::<u64>(key, id)?;
            check_server_id(key, value, id)?;
            servers.insert(id, parse_server(key, id, value)?);
        } else if key == "version" {
            return Err(bad(key, value, "a dynamic config file must not hold its version (its name does)"));
        } else if key.starts_with("group.") || key.starts_with("weight.") {
            return Err(bad(key, value, "hierarchical quorums (group/weight) are not supported"));
        } else {
            return Err(bad(key, value, format!("not a member line (in {})", path.display())));
        }
    }
    if servers.is_empty() {
        return Err(bad("dynamicConfigFile", &path.display().to_string(), "holds no server.N line"));
    }
    Ok(servers)
}

/// The client port's listen backlog when `clientPortListenBacklog` is unset or not positive.
/// ZooKeeper then takes the JVM's 50; a reconnect storm (every client of a failed server at
/// once) overflows that, and each connection dropped there waits a second for its SYN to be
/// sent again. The kernel caps it at `net.core.somaxconn`.
pub const DEFAULT_LISTEN_BACKLOG: u32 = 1024;

impl Config {
    /// The Raft heartbeat interval: `raft.heartbeatMs`, or tickTime / 80 within 10-500 ms
    /// (25 ms at tickTime 2000).
    pub fn heartbeat_ms(&self) -> u64 {
        self.raft_heartbeat_ms.unwrap_or((u64::from(self.tick_time_ms) / 80).clamp(10, 500))
    }

    /// The election timeout: `raft.electionTimeoutMs`, or three heartbeats.
    pub fn election_timeout_ms(&self) -> u64 {
        self.raft_election_timeout_ms.unwrap_or(self.heartbeat_ms() * 3)
    }

    /// The client port's listen backlog: `clientPortListenBacklog` when positive, else
    /// [`DEFAULT_LISTEN_BACKLOG`].
    pub fn listen_backlog(&self) -> u32 {
        u32::try_from(self.client_port_listen_backlog).ok().filter(|&b| b > 0).unwrap_or(DEFAULT_LISTEN_BACKLOG)
    }

    /// Applies zoo.cfg properties over the defaults.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        // With a zoo.cfg, metrics are served when it names the Prometheus provider, as in ZooKeeper.
        let mut c = Config { metrics_enable: false, ..Config::default() };
        let mut min_set = None;
        let mut max_set = None;
        let mut data_log_set = false;
        let mut dynamic_file = None;
        let mut jaas_file: Option<(String, String)> = None;
        let mut sasl_section = "Server".to_owned();
        let mut enforce = false;
        let mut enforce_schemes: Option<(String, Vec<String>)> = None;
        let mut require_sasl = false;
        let mut remove_host_from_principal = false;
        let mut quorum_sasl = false;
        let mut learner_require = false;
        let mut server_require = false;
        let mut learner_section = "QuorumLearner".to_owned();
        let mut server_section = "QuorumServer".to_owned();
        let mut remove_realm_from_principal = false;
        let mut enforce_quota = None;
        let mut throttle_keys = BTreeMap::new();
        let mut service_principal: Option<String> = None;
        let mut audit_enable = None;
        let mut audit_file = None;
        let mut snapshot_compression = None;
        for (raw_key, value) in props {
            // ZooKeeper makes a zoo.cfg key K it does not parse the Java property
            // `zookeeper.K`; these two, written with the prefix in zoo.cfg, become
            // `zookeeper.zookeeper.…`, which nothing reads: they grant nothing there, and
            // granting super here would differ in the one direction that matters.
            if let Some(k) =
                ["zookeeper.X509AuthenticationProvider.superUser", "zookeeper.DigestAuthenticationProvider.superDigest"]
                    .into_iter()
                    .find(|k| raw_key == k)
            {
                return Err(bad(
                    raw_key,
                    "(not shown)",
                    format!(
                        "in zoo.cfg ZooKeeper ignores this spelling (it reads it as the Java property zookeeper.{k}) \
                         and grants no super user; write {} to mean it",
                        &k["zookeeper.".len()..]
                    ),
                ));
            }
            let key = raw_key.strip_prefix("zookeeper.").unwrap_or(raw_key);
            match key {
                "tickTime" => {
                    c.tick_time_ms = parse(raw_key, value)?;
                    if c.tick_time_ms == 0 {
                        return Err(bad(raw_key, value, "must be positive"));
                    }
                }
                "dataDir" => c.data_dir = PathBuf::from(value),
                "dataLogDir" => {
                    c.data_log_dir = PathBuf::from(value);
                    data_log_set = true;
                }
                "clientPort" => c.client_port = parse(raw_key, value)?,
                "clientPortAddress" => c.client_port_address = parse(raw_key, value)?,
                "maxClientCnxns" => c.max_client_cnxns = parse(raw_key, value)?,
                k if THROTTLE_KEYS.contains(&k) => {
                    if let Some(known) = THROTTLE_KEYS.iter().find(|t| **t == k) {
                        throttle_keys.insert(*known, (raw_key.clone(), value.clone()));
                    }
                }
                "clientPortListenBacklog" => c.client_port_listen_backlog = parse(raw_key, value)?,
                "minSessionTimeout" => min_set = Some(parse::<i32>(raw_key, value)?),
                "maxSessionTimeout" => max_set = Some(parse::<i32>(raw_key, value)?),
                "snapCount" => {
                    c.snap_count = parse(raw_key, value)?;
                    if c.snap_count < 2 {
                        return Err(bad(raw_key, value, "must be at least 2"));
                    }
                }
                "snapshot.compression.method" => snapshot_compression = Some(parse_compression(raw_key, value)?),
                "autopurge.snapRetainCount" => c.autopurge_snap_retain_count = parse(raw_key, value)?,
                "autopurge.purgeInterval" => c.autopurge_purge_interval_h = parse(raw_key, value)?,
                "4lw.commands.whitelist" => {
                    let words: Vec<String> =
                        value.split(',').map(|w| w.trim().to_owned()).filter(|w| !w.is_empty()).collect();
                    c.four_letter_whitelist = if words.iter().any(|w| w == "*") { None } else { Some(words) };
                }
                "admin.enableServer" => c.admin_enable = parse_bool(raw_key, value)?,
                "admin.serverAddress" => c.admin_address = parse(raw_key, value)?,
                "admin.serverPort" => c.admin_port = parse(raw_key, value)?,
                "admin.authToken" => c.admin_token = Some(value.clone()).filter(|t| !t.is_empty()),
                "admin.forceHttps" => c.admin_force_https = parse_bool(raw_key, value)?,
                "admin.portUnification" => c.admin_port_unification = parse_bool(raw_key, value)?,
                "metricsProvider.className" => {
                    c.metrics_enable = value.contains("PrometheusMetricsProvider");
                }
                "metricsProvider.httpHost" => c.metrics_host = parse(raw_key, value)?,
                "metricsProvider.httpPort" => c.metrics_port = parse(raw_key, value)?,
                "extendedTypesEnabled" => c.extended_types_enabled = parse_bool(raw_key, value)?,
                "enforceQuota" => enforce_quota = Some(parse_bool(raw_key, value)?),
                "audit.enable" => audit_enable = Some(parse_bool(raw_key, value)?),
                "audit.logFile" => audit_file = Some(PathBuf::from(value.trim())),
                "admin.rateLimiterIntervalInMS" => c.admin_rate_limit_ms = parse(raw_key, value)?,
                "admin.snapshot.intervalInMS" => c.admin_snapshot_interval_ms = Some(parse(raw_key, value)?),
                "admin.restore.intervalInMS" => c.admin_restore_interval_ms = Some(parse(raw_key, value)?),
                "digest.enabled" => c.digest_enabled = parse_bool(raw_key, value)?,
                "localSessionsEnabled" => c.local_sessions = parse_bool(raw_key, value)?,
                "localSessionsUpgradingEnabled" => c.local_sessions_upgrading = parse_bool(raw_key, value)?,
                "jute.maxbuffer" => {
                    c.max_buffer = parse(raw_key, value)?;
                    if c.max_buffer < 1024 {
                        return Err(bad(raw_key, value, "must be at least 1024"));
                    }
                }
                "DigestAuthenticationProvider.superDigest" => {
                    if !value.contains(':') {
                        return Err(bad(raw_key, value, "expected user:base64(sha1(user:password))"));
                    }
                    c.super_digest = Some(value.clone());
                }
                "znode.container.checkIntervalMs" => c.container_check_interval_ms = parse(raw_key, value)?,
                "initLimit" => c.init_limit = parse(raw_key, value)?,
                "syncLimit" => c.sync_limit = parse(raw_key, value)?,
                "raft.heartbeatMs" => c.raft_heartbeat_ms = Some(parse(raw_key, value)?),
                "raft.electionTimeoutMs" => c.raft_election_timeout_ms = Some(parse(raw_key, value)?),
                "fsync.warningthresholdms" => c.fsync_warning_threshold_ms = parse(raw_key, value)?,
                "commitLogCount" => {
                    c.commit_log_count = parse(raw_key, value)?;
                    if c.commit_log_count == 0 {
                        return Err(bad(raw_key, value, "must be at least 1"));
                    }
                }
                "forceSync" => {
                    // ZooKeeper turns fsync off for exactly `no` and keeps it for anything else.
                    let v = value.trim();
                    c.force_sync = v != "no";
                    if c.force_sync && v != "yes" {
                        tracing::warn!(
                            key = raw_key.as_str(),
                            value = v,
                            "only 'no' turns fsync off, as in ZooKeeper: fsync stays on"
                        );
                    }
                }
                "readMode" => {
                    c.linearizable_reads = match value.trim() {
                        "zookeeper" => false,
                        "linearizable" => true,
                        _ => return Err(bad(raw_key, value, "expected zookeeper or linearizable")),
                    }
                }
                "runtime.spreadWorkers" => {
                    c.spread_workers = if value.trim().eq_ignore_ascii_case("auto") {
                        SpreadWorkers::Auto
                    } else if parse_bool(raw_key, value)
                        .map_err(|_| bad(raw_key, value, "expected auto, true or false"))?
                    {
                        SpreadWorkers::Always
                    } else {
                        SpreadWorkers::Never
                    };
                }
                "secureClientPort" => c.tls.secure_client_port = Some(parse(raw_key, value)?),
                "secureClientPortAddress" => c.tls.secure_client_port_address = Some(parse(raw_key, value)?),
                "client.portUnification" => c.tls.port_unification = parse_bool(raw_key, value)?,
                "X509AuthenticationProvider.superUser" => {
                    c.tls.x509_super_user = Some(value.trim().to_owned()).filter(|v| !v.is_empty())
                }
                k if k.starts_with("ssl.") && !k.starts_with("ssl.quorum.") => {
                    tls_key(&mut c.tls, raw_key, k, value)?;
                }
                "sslQuorum" => c.quorum_tls.ssl_quorum = parse_bool(raw_key, value)?,
                "portUnification" => c.quorum_tls.port_unification = parse_bool(raw_key, value)?,
                "sslQuorumReloadCertFiles" => c.quorum_tls.reload_cert_files = parse_bool(raw_key, value)?,
                "ssl.quorum.hostnameVerification" => c.quorum_tls.hostname_verification = parse_bool(raw_key, value)?,
                "ssl.quorum.clientHostnameVerification" => {
                    c.quorum_tls.client_hostname_verification = Some(parse_bool(raw_key, value)?)
                }
                k if k.starts_with("ssl.quorum.") => {
                    // The same settings as the client port's, under their own prefix.
                    let as_client = format!("ssl.{}", &k["ssl.quorum.".len()..]);
                    if as_client == "ssl.authProvider" || !tls_key(&mut c.quorum_tls.tls, raw_key, &as_client, value)? {
                        return Err(bad(raw_key, value, "unknown TLS key; refusing to start rather than ignore it"));
                    }
                }
                // ZooKeeper 3.5+: the members live in their own file
                // (`QuorumPeerConfig.parse`), and then only there.
                "dynamicConfigFile" => dynamic_file = Some(value.clone()),
                k if k.starts_with("server.") && props.contains_key("dynamicConfigFile") => {
                    return Err(bad(
                        raw_key,
                        value,
                        "must be in the dynamicConfigFile, not in zoo.cfg (as in ZooKeeper)",
                    ));
                }
                k if k.starts_with("group.") || k.starts_with("weight.") => {
                    return Err(bad(raw_key, value, "hierarchical quorums (group/weight) are not supported"));
                }
                k if unsupported_security(k, value).is_some() => {
                    let what = unsupported_security(k, value).unwrap_or_default();
                    return Err(bad(
                        raw_key,
                        value,
                        format!("{what} is not supported by this build; refusing to start rather than run without it"),
                    ));
                }
                "java.security.auth.login.config" => jaas_file = Some((raw_key.clone(), value.trim().to_owned())),
                "sasl.serverconfig" => sasl_section = value.trim().to_owned(),
                "java.security.krb5.conf" => c.krb5_conf = Some(PathBuf::from(value.trim())),
                k if k == "superUser" || k.starts_with("superUser.") => {
                    c.sasl_super_users.push(value.trim().to_owned())
                }
                "enforce.auth.enabled" => enforce = parse_bool(raw_key, value)?,
                "enforce.auth.schemes" => {
                    let schemes: Vec<String> =
                        value.split(',').map(|w| w.trim().to_owned()).filter(|w| !w.is_empty()).collect();
                    enforce_schemes = Some((raw_key.clone(), schemes));
                }
                "sessionRequireClientSASLAuth" => require_sasl = parse_bool(raw_key, value)?,
                "allowSaslFailedClients" => c.allow_sasl_failed_clients = parse_bool(raw_key, value)?,
                "quorum.auth.enableSasl" => quorum_sasl = parse_bool(raw_key, value)?,
                "quorum.auth.learnerRequireSasl" => learner_require = parse_bool(raw_key, value)?,
                "quorum.auth.serverRequireSasl" => server_require = parse_bool(raw_key, value)?,
                "quorum.auth.learner.saslLoginContext" => learner_section = value.trim().to_owned(),
                "quorum.auth.server.saslLoginContext" => server_section = value.trim().to_owned(),
                "quorum.auth.kerberos.servicePrincipal" => service_principal = Some(value.trim().to_owned()),
                "quorum.auth.kerberos.servicePrincipal.canonicalize" => {
                    if parse_bool(raw_key, value)? {
                        return Err(bad(
                            raw_key,
                            value,
                            "Warden does not look host names up; write the host in \
                             quorum.auth.kerberos.servicePrincipal (or _HOST, the server.N host)",
                        ));
                    }
                }
                "readonlymode.enabled" => c.readonly_mode = parse_bool(raw_key, value)?,
                "quorum.cnxn.threads.size" => {
                    tracing::debug!(key = raw_key.as_str(), "accepted and not used by Warden");
                }
                "kerberos.removeHostFromPrincipal" => remove_host_from_principal = parse_bool(raw_key, value)?,
                "kerberos.removeRealmFromPrincipal" => remove_realm_from_principal = parse_bool(raw_key, value)?,
                // The built-in providers (digest, ip, x509, sasl) are always on in Warden.
                k if k.starts_with("authProvider.") => {
                    tracing::debug!(key = raw_key.as_str(), "a built-in authentication provider: always on");
                }
                k if k.starts_with("server.") => {
                    let id = parse::<u64>(raw_key, &k["server.".len()..])?;
                    check_server_id(raw_key, value, id)?;
                    c.servers.insert(id, parse_server(raw_key, id, value)?);
                }
                "reconfigEnabled" => c.reconfig_enabled = parse_bool(raw_key, value)?,
                "electionAlg"
                | "standaloneEnabled"
                | "admin.idleTimeout"
                | "admin.commandURL"
                | "metricsProvider.exportJvmInfo"
                | "preAllocSize"
                | "serverCnxnFactory" => {
                    tracing::debug!(key = raw_key.as_str(), "accepted and not used by Warden");
                }
                _ => {
                    tracing::warn!(key = raw_key.as_str(), value = value.as_str(), "unknown configuration key ignored")
                }
            }
        }
        if c.tls.secure_client_port.is_some() && !props.contains_key("clientPort") {
            // ZooKeeper serves TLS alone then; never plaintext on a default port.
            c.plaintext_client_port = false;
        }
        if c.tls.enabled() {
            match &c.tls.key_store {
                Some(s) if !s.location.as_os_str().is_empty() => {}
                _ => {
                    return Err(bad(
                        "ssl.keyStore.location",
                        "",
                        "TLS is on (secureClientPort or client.portUnification) and no key store is set",
                    ))
                }
            }
            if c.tls.trust_store.as_ref().is_some_and(|s| s.location.as_os_str().is_empty()) {
                return Err(bad(
                    "ssl.trustStore.location",
                    "",
                    "a trust store password or type is set, and no location",
                ));
            }
        } else if c.tls.key_store.is_some() || c.tls.trust_store.is_some() {
            tracing::warn!("ssl.* keys are set but neither secureClientPort nor client.portUnification: no client connection is TLS");
        }
        let q = &c.quorum_tls;
        if q.enabled() {
            // Both stores, always: a member proves who it is and checks who it talks to.
            for (store, what) in [(&q.tls.key_store, "keyStore"), (&q.tls.trust_store, "trustStore")] {
                if store.as_ref().is_none_or(|s| s.location.as_os_str().is_empty()) {
                    return Err(bad(
                        &format!("ssl.quorum.{what}.location"),
                        "",
                        "TLS between members is on (sslQuorum or portUnification) and this store is not set",
                    ));
                }
            }
        } else if q.tls.key_store.is_some() || q.tls.trust_store.is_some() {
            tracing::warn!(
                "ssl.quorum.* keys are set but neither sslQuorum nor portUnification: members talk in the clear"
            );
        }
        c.snapshot_compression = match snapshot_compression {
            Some(on) => on,
            None => match jvm_property_from_env("zookeeper.snapshot.compression.method") {
                Some((key, value)) => parse_compression(&key, &value)?,
                None => true,
            },
        };
        let audit_enable = match audit_enable {
            Some(on) => on,
            None => match jvm_property_from_env("zookeeper.audit.enable") {
                Some((key, value)) => parse_bool(&key, &value)?,
                None => false,
            },
        };
        if audit_enable {
            let dir = std::env::var_os("ZOO_LOG_DIR").map(PathBuf::from).unwrap_or_else(|| c.data_dir.clone());
            c.audit_log = Some(audit_file.unwrap_or_else(|| dir.join("zookeeper_audit.log")));
        }
        c.throttle = ThrottleConfig::read(&throttle_keys)?;
        c.enforce_quota = match enforce_quota {
            Some(on) => on,
            None => match jvm_property_from_env("zookeeper.enforceQuota") {
                Some((key, value)) => parse_bool(&key, &value)?,
                None => false,
            },
        };
        let jaas_file = jaas_file.or_else(|| jvm_property_from_env("java.security.auth.login.config"));
        if c.krb5_conf.is_none() {
            c.krb5_conf = jvm_property_from_env("java.security.krb5.conf").map(|(_, p)| PathBuf::from(p));
        }
        if let Some((key, path)) = jaas_file {
            let rules = crate::sasl::NameRules {
                remove_host: remove_host_from_principal,
                remove_realm: remove_realm_from_principal,
                default_realm: crate::sasl::default_realm(c.krb5_conf.as_deref()),
            };
            // A file that only configures members (quorum.auth.enableSasl) leaves clients
            // without SASL, as in ZooKeeper; otherwise a missing client section is an error.
            let members_only = quorum_sasl && !crate::sasl::has_section(Path::new(&path), &sasl_section);
            if !members_only {
                let server = crate::sasl::SaslServer::from_jaas_file(Path::new(&path), &sasl_section, rules)
                    .map_err(|why| bad(&key, &path, why))?;
                c.sasl = Some(server);
            }
            c.jaas_path = Some(PathBuf::from(path));
        }
        // QuorumPeerConfig: requiring SASL on either side needs it enabled.
        for (on, key) in
            [(learner_require, "quorum.auth.learnerRequireSasl"), (server_require, "quorum.auth.serverRequireSasl")]
        {
            if on && !quorum_sasl {
                return Err(bad(key, "true", "quorum.auth.enableSasl is false, so SASL cannot be required"));
            }
        }
        if quorum_sasl {
            let Some(jaas) = &c.jaas_path else {
                return Err(bad(
                    "quorum.auth.enableSasl",
                    "true",
                    "needs a JAAS file with QuorumServer and QuorumLearner sections (java.security.auth.login.config)",
                ));
            };
            let q = crate::sasl::QuorumSasl::from_jaas_file(
                jaas,
                &server_section,
                &learner_section,
                server_require,
                learner_require,
            )
            .map_err(|why| bad("quorum.auth.enableSasl", "true", why))?;
            let mut q = q;
            if let Some(p) = service_principal {
                q.service_principal = p;
            }
            // One process reads one acceptor keytab (KRB5_KTNAME).
            if let (Some(a), Some(b)) = (c.sasl.as_ref().and_then(|s| s.kerberos()), q.server.kerberos()) {
                if a.keytab != b.keytab {
                    return Err(bad(
                        "quorum.auth.enableSasl",
                        "true",
                        format!(
                            "the Server and QuorumServer sections name two keytabs ({} and {}); put both principals' \
                             keys in one keytab",
                            a.keytab.display(),
                            b.keytab.display()
                        ),
                    ));
                }
            }
            c.quorum_sasl = Some(q);
        }
        // AuthenticationHelper: sessionRequireClientSASLAuth wins and means "sasl"; otherwise
        // enforce.auth.enabled needs enforce.auth.schemes, each a scheme this server provides.
        if require_sasl {
            c.enforce_auth_schemes = vec!["sasl".to_owned()];
        } else if enforce {
            let (key, schemes) = enforce_schemes.unwrap_or_else(|| ("enforce.auth.schemes".to_owned(), Vec::new()));
            if schemes.is_empty() {
                return Err(bad(&key, "", "enforce.auth.enabled is true and no scheme is named"));
            }
            c.enforce_auth_schemes = schemes;
        }
        for scheme in &c.enforce_auth_schemes {
            let key = if require_sasl { "sessionRequireClientSASLAuth" } else { "enforce.auth.schemes" };
            match scheme.as_str() {
                "digest" | "ip" => {}
                "x509" if c.tls.enabled() => {}
                "sasl" if c.sasl.is_some() => {}
                "sasl" => {
                    return Err(bad(
                        key,
                        scheme,
                        "SASL is required and no JAAS server section is configured \
                         (java.security.auth.login.config)",
                    ))
                }
                "x509" => return Err(bad(key, scheme, "x509 needs TLS on the client port (secureClientPort)")),
                other => return Err(bad(key, other, "no such authentication scheme")),
            }
        }
        if c.admin_https() && c.quorum_tls.tls.key_store.as_ref().is_none_or(|s| s.location.as_os_str().is_empty()) {
            let key = if c.admin_force_https { "admin.forceHttps" } else { "admin.portUnification" };
            return Err(bad(
                "ssl.quorum.keyStore.location",
                "",
                format!("{key} serves the admin API over TLS with the ssl.quorum.* key store, and none is set"),
            ));
        }
        if let Some(file) = dynamic_file {
            c.servers = read_dynamic_config(Path::new(&file))?;
            // ZooKeeper takes the version from the file's name (`.dynamic.<hex>`), 0 without.
            c.config_version =
                file.rsplit_once(".dynamic.").and_then(|(_, v)| i64::from_str_radix(v, 16).ok()).unwrap_or(0);
        }
        if let Some(q) = c.quorum_sasl.as_mut() {
            q.member_hosts = c.servers.values().map(|s| s.host.clone()).collect();
        }
        if !data_log_set {
            c.data_log_dir = c.data_dir.clone();
        }
        let tick = c.tick_time_ms as i32;
        c.min_session_timeout_ms = match min_set {
            Some(v) if v > 0 => v,
            _ => 2 * tick,
        };
        c.max_session_timeout_ms = match max_set {
            Some(v) if v > 0 => v,
            _ => 20 * tick,
        };
        if !c.servers.is_empty() {
            let myid_path = c.data_dir.join("myid");
            let text = std::fs::read_to_string(&myid_path).map_err(|e| {
                bad("myid", &myid_path.display().to_string(), format!("an ensemble member needs dataDir/myid: {e}"))
            })?;
            let id = parse::<u64>("myid", text.trim())?;
            if !(1..=254).contains(&id) {
                // The top byte of this member's session ids (ZooKeeper's rule too).
                return Err(bad("myid", text.trim(), "a member's id must be 1..=254"));
            }
            if !c.servers.contains_key(&id) {
                return Err(bad("myid", text.trim(), "no server.N line in zoo.cfg has this id"));
            }
            c.server_id = id;
        }
        if c.min_session_timeout_ms > c.max_session_timeout_ms {
            return Err(bad(
                "minSessionTimeout",
                &c.min_session_timeout_ms.to_string(),
                format!("must not exceed maxSessionTimeout ({})", c.max_session_timeout_ms),
            ));
        }
        if c.raft_heartbeat_ms == Some(0) {
            return Err(bad("raft.heartbeatMs", "0", "must be at least 1 (ms)"));
        }
        let (heartbeat, election) = (c.heartbeat_ms(), c.election_timeout_ms());
        if election <= heartbeat {
            // Name the key that was set (the election timeout when both were).
            let (key, value) = match c.raft_election_timeout_ms {
                Some(_) => ("raft.electionTimeoutMs", election),
                None => ("raft.heartbeatMs", heartbeat),
            };
            return Err(bad(
                key,
                &value.to_string(),
                format!("the election timeout ({election} ms) must exceed the heartbeat interval ({heartbeat} ms)"),
            ));
        }
        Ok(c)
    }

    /// `/zookeeper/config` as ZooKeeper writes it (`QuorumVerifier.toString`): a
    /// `server.N=host:peerPort:electionPort:participant|observer[;clientHost:clientPort]`
    /// line per member, then `version=<hex>`. Empty for a standalone server, as in ZooKeeper.
    pub fn config_node_text(&self) -> String {
        if self.servers.is_empty() {
            return String::new();
        }
        let mut out = server_lines(&self.servers);
        out.push_str(&format!("version={:x}", self.config_version));
        out
    }

    /// The negotiated session timeout for a requested one.
    pub fn negotiate_timeout(&self, requested: i32) -> i32 {
        requested.clamp(self.min_session_timeout_ms, self.max_session_timeout_ms)
    }

    /// Whether a four-letter word may run.
    pub fn four_letter_allowed(&self, word: &str) -> bool {
        // `srvr` is always allowed: zkServer.sh status depends on it.
        word == "srvr" || self.four_letter_whitelist.as_ref().is_none_or(|w| w.iter().any(|x| x == word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// A ZooKeeper 3.5+ dynamicConfigFile gives the members; server lines may not also be in
    /// zoo.cfg, and the file may not hold its version.
    #[test]
    fn dynamic_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("myid"), "2").unwrap();
        let dynamic = dir.path().join("zoo.cfg.dynamic.100000000");
        std::fs::write(
            &dynamic,
            "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
             server.2=127.0.0.1:2889:3889:participant;127.0.0.1:2182\n\
             server.3=127.0.0.1:2890:3890:observer;2183\n",
        )
        .unwrap();
        let data = dir.path().display().to_string();
        let d = dynamic.display().to_string();
        let c = Config::from_properties(&props(&[("dataDir", &data), ("dynamicConfigFile", &d)])).unwrap();
        assert_eq!(c.servers.len(), 3);
        assert_eq!(c.server_id, 2);
        assert!(c.servers[&3].observer);
        assert_eq!(c.servers[&2].client, Some(("127.0.0.1".into(), 2182)));

        let both = props(&[("dataDir", &data), ("dynamicConfigFile", &d), ("server.1", "127.0.0.1:2888:3888")]);
        assert!(Config::from_properties(&both).unwrap_err().to_string().contains("server.1"));
        std::fs::write(&dynamic, "server.1=127.0.0.1:2888:3888\nversion=100000000\n").unwrap();
        let e = Config::from_properties(&props(&[("dataDir", &data), ("dynamicConfigFile", &d)])).unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
        let missing = props(&[("dataDir", &data), ("dynamicConfigFile", "/nonexistent/zoo.cfg.dynamic")]);
        assert!(Config::from_properties(&missing).unwrap_err().to_string().contains("/nonexistent"));
    }

    /// The throttle keys are read as ZooKeeper reads them from zoo.cfg (with or without the
    /// `zookeeper.` prefix); a bad value names its key; the weights scale the bucket.
    #[test]
    fn throttle_keys() {
        let c = Config::from_properties(&props(&[
            ("globalOutstandingLimit", "50"),
            ("zookeeper.request_throttle_max_requests", "7"),
            ("largeRequestThreshold", "0"),
            ("connection_throttle_tokens", "4"),
            ("connection_throttle_weight_enabled", "true"),
        ]))
        .expect("valid");
        assert_eq!(c.throttle.global_outstanding_limit, 50);
        assert_eq!(c.throttle.max_requests, 7);
        assert_eq!(c.throttle.large_request_threshold, -1, "0 turns it off, as in ZooKeeper");
        assert_eq!(c.throttle.conn_tokens, 12, "4 global sessions of weight 3");
        assert_eq!(Config::default().throttle.global_outstanding_limit, 1000);
        for (key, value) in [
            ("globalOutstandingLimit", "0"),
            ("connection_throttle_fill_time", "0"),
            ("connection_throttle_drop_increase", "1.5"),
            ("request_throttle_drop_stale", "maybe"),
            ("connection_throttle_freeze_time", "-5"),
        ] {
            let e = Config::from_properties(&props(&[(key, value)])).expect_err(key).to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    /// `enforceQuota` is read with or without ZooKeeper's `zookeeper.` prefix; a value that is
    /// not a boolean stops start-up naming the key.
    #[test]
    fn enforce_quota() {
        assert!(!Config::from_properties(&props(&[])).expect("defaults").enforce_quota);
        assert!(Config::from_properties(&props(&[("enforceQuota", "true")])).expect("valid").enforce_quota);
        assert!(Config::from_properties(&props(&[("zookeeper.enforceQuota", "true")])).expect("valid").enforce_quota);
        let e = Config::from_properties(&props(&[("enforceQuota", "maybe")])).expect_err("not a boolean").to_string();
        assert!(e.contains("enforceQuota"), "{e}");
    }

    /// The JAAS file gives SASL its users; enforcement needs schemes this server provides.
    #[test]
    fn sasl_and_enforced_authentication() {
        let dir = std::env::temp_dir().join(format!("warden-cfg-sasl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jaas = dir.join("jaas.conf");
        std::fs::write(
            &jaas,
            "Server { org.apache.zookeeper.server.auth.DigestLoginModule required user_bob=\"s3cret\"; };\n\
             Other { org.apache.zookeeper.server.auth.DigestLoginModule required user_al=\"x\"; };",
        )
        .unwrap();
        let j = jaas.to_str().unwrap();
        let c = Config::from_properties(&props(&[
            ("java.security.auth.login.config", j),
            ("authProvider.1", "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"),
            ("zookeeper.superUser", "bob"),
            ("enforce.auth.enabled", "true"),
            ("enforce.auth.schemes", "sasl, digest"),
        ]))
        .unwrap();
        assert!(c.sasl.is_some());
        assert_eq!(c.sasl_super_users, vec!["bob".to_owned()]);
        assert_eq!(c.enforce_auth_schemes, vec!["sasl".to_owned(), "digest".to_owned()]);
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = Config::from_properties(&props(&[
            ("java.security.auth.login.config", j),
            ("sessionRequireClientSASLAuth", "true"),
        ]))
        .unwrap();
        assert_eq!(c.enforce_auth_schemes, vec!["sasl".to_owned()]);
        // Section names, missing files, unknown schemes: each names its key.
        let e = Config::from_properties(&props(&[
            ("java.security.auth.login.config", j),
            ("zookeeper.sasl.serverconfig", "Nope"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("java.security.auth.login.config") && e.contains("no section named Nope"), "{e}");
        assert!(Config::from_properties(&props(&[
            ("java.security.auth.login.config", j),
            ("sasl.serverconfig", "Other")
        ]))
        .is_ok());
        let e = Config::from_properties(&props(&[("java.security.auth.login.config", "/nonexistent/jaas.conf")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("java.security.auth.login.config") && e.contains("/nonexistent/jaas.conf"), "{e}");
        for (schemes, want) in
            [("kerberos", "no such authentication scheme"), ("x509", "needs TLS"), ("sasl", "no JAAS")]
        {
            let e =
                Config::from_properties(&props(&[("enforce.auth.enabled", "true"), ("enforce.auth.schemes", schemes)]))
                    .unwrap_err()
                    .to_string();
            assert!(e.contains("enforce.auth.schemes") && e.contains(want), "{schemes}: {e}");
        }
        assert!(Config::from_properties(&props(&[
            ("enforce.auth.enabled", "false"),
            ("enforce.auth.schemes", "sasl")
        ]))
        .unwrap()
        .enforce_auth_schemes
        .is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// TLS, SASL and x509 keys stop start-up, naming the key, instead of serving without them;
    /// the built-in providers and switched-off flags are fine.
    #[test]
    fn security_keys_are_refused_not_ignored() {
        for (k, v) in [
            ("sslQuorumReloadCertFiles", "maybe"),
            ("ssl.quorum.foo", "bar"),
            ("ssl.quorum.clientAuth", "maybe"),
            ("quorum.auth.enableSasl", "true"),
            ("authProvider.1", "com.example.CustomAuthenticationProvider"),
            ("enforce.auth.enabled", "true"),
            ("sessionRequireClientSASLAuth", "true"),
            ("requireClientAuthScheme", "sasl"),
            ("group.1", "1:2:3"),
            ("ssl.crl", "true"),
            ("ssl.foo", "bar"),
            ("ssl.clientAuth", "maybe"),
        ] {
            let e = Config::from_properties(&props(&[(k, v)])).unwrap_err().to_string();
            assert!(e.contains(k), "{k}: {e}");
        }
        // TLS asked for without key material names the key that is missing.
        for (k, v) in [("secureClientPort", "2281"), ("client.portUnification", "true")] {
            let e = Config::from_properties(&props(&[(k, v)])).unwrap_err().to_string();
            assert!(e.contains("ssl.keyStore.location"), "{k}: {e}");
        }
        for (k, v) in [("sslQuorum", "true"), ("portUnification", "true")] {
            let e = Config::from_properties(&props(&[(k, v)])).unwrap_err().to_string();
            assert!(e.contains("ssl.quorum.keyStore.location"), "{k}: {e}");
            let e = Config::from_properties(&props(&[(k, v), ("ssl.quorum.keyStore.location", "/k.pem")]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("ssl.quorum.trustStore.location"), "{k}: {e}");
        }
        let both = [
            ("sslQuorum", "true"),
            ("ssl.quorum.keyStore.location", "/k.pem"),
            ("zookeeper.ssl.quorum.trustStore.location", "/t.pem"),
            ("ssl.quorum.hostnameVerification", "false"),
        ];
        let q = Config::from_properties(&props(&both)).unwrap().quorum_tls;
        assert!(q.ssl_quorum && !q.port_unification && !q.hostname_verification && !q.verify_client_hostname());
        assert_eq!(q.tls.trust_store.map(|s| s.location), Some(PathBuf::from("/t.pem")));
        assert_eq!(q.tls.client_auth, ClientAuth::Need);
        for (k, v) in [
            ("sslQuorum", "false"),
            ("authProvider.1", "org.apache.zookeeper.server.auth.DigestAuthenticationProvider"),
            ("authProvider.x509", "org.apache.zookeeper.server.auth.X509AuthenticationProvider"),
            ("serverCnxnFactory", "org.apache.zookeeper.server.NettyServerCnxnFactory"),
            ("zookeeper.ssl.quorum.trustStore.location", "/t.pem"),
            ("ssl.keyStore.location", "/k.pem"),
        ] {
            assert!(Config::from_properties(&props(&[(k, v)])).is_ok(), "{k}");
        }
    }

    /// `/zookeeper/config` as ZooKeeper 3.8 writes it for the same lines (checked against a
    /// real ensemble: compat-tests/test_dynamic_config.py).
    #[test]
    fn config_node_text() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("myid"), "1").unwrap();
        let data_dir = dir.path().to_str().unwrap();
        let c = Config::from_properties(&props(&[
            ("dataDir", data_dir),
            ("server.1", "127.0.0.1:2888:3888"),
            ("server.2", "10.0.0.2:2888:3888:observer;2181"),
            ("server.3", "10.0.0.3:2888:3888:participant;10.0.0.3:2182"),
        ]))
        .unwrap();
        assert_eq!(
            c.config_node_text(),
            "server.1=127.0.0.1:2888:3888:participant\n\
             server.2=10.0.0.2:2888:3888:observer;0.0.0.0:2181\n\
             server.3=10.0.0.3:2888:3888:participant;10.0.0.3:2182\n\
             version=0"
        );
        assert_eq!(Config::default().config_node_text(), "", "standalone: empty, as in ZooKeeper");
    }

    /// ZooKeeper's TLS keys, with or without the `zookeeper.` prefix; passwords never print.
    #[test]
    fn tls_keys() {
        let c = Config::from_properties(&props(&[
            ("secureClientPort", "2281"),
            ("zookeeper.ssl.keyStore.location", "/k.p12"),
            ("ssl.keyStore.password", "hunter2"),
            ("ssl.trustStore.location", "/t.pem"),
            ("ssl.trustStore.type", "PEM"),
            ("ssl.clientAuth", "want"),
            ("ssl.enabledProtocols", "TLSv1.3, TLSv1.2"),
            ("ssl.ciphersuites", "TLS_AES_128_GCM_SHA256"),
            ("ssl.hostnameVerification", "false"),
            ("X509AuthenticationProvider.superUser", "CN=admin"),
        ]))
        .unwrap();
        let t = &c.tls;
        assert_eq!(t.secure_client_port, Some(2281));
        assert!(!c.plaintext_client_port, "secureClientPort without clientPort serves TLS alone");
        let ks = t.key_store.as_ref().unwrap();
        assert_eq!(ks.location, PathBuf::from("/k.p12"));
        assert_eq!(ks.password.as_ref().unwrap().expose(), "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(t.trust_store.as_ref().unwrap().store_type.as_deref(), Some("PEM"));
        assert_eq!(t.client_auth, ClientAuth::Want);
        assert_eq!(t.enabled_protocols.as_deref(), Some(&["TLSv1.3".to_string(), "TLSv1.2".to_string()][..]));
        assert_eq!(t.x509_super_user.as_deref(), Some("CN=admin"));
        let both = Config::from_properties(&props(&[
            ("clientPort", "2181"),
            ("secureClientPort", "2281"),
            ("ssl.keyStore.location", "/k.pem"),
        ]))
        .unwrap();
        assert!(both.plaintext_client_port);
        // A password that is wrong to parse is never echoed back.
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let c = Config::from_properties(&props(&[("ssl.keyStore.passwordPath", pw.to_str().unwrap())])).unwrap();
        assert_eq!(c.tls.key_store.unwrap().password.unwrap().expose(), "s3cret");
    }

    #[test]
    fn defaults_follow_tick_time() {
        let c = Config::from_properties(&props(&[("tickTime", "2000"), ("dataDir", "/tmp/x")])).unwrap();
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (4000, 40000));
        assert_eq!(c.data_log_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.negotiate_timeout(100), 4000);
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = Config::from_properties(&props(&[("clientPort", "abc")])).unwrap_err().to_string();
        assert!(err.contains("clientPort") && err.contains("abc"), "{err}");
        let err = Config::from_properties(&props(&[("zookeeper.extendedTypesEnabled", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("extendedTypesEnabled"));
    }

    #[test]
    fn listen_backlog() {
        let backlog = |v: Option<&str>| {
            let p = v.map_or_else(BTreeMap::new, |v| props(&[("clientPortListenBacklog", v)]));
            let c = Config::from_properties(&p).unwrap();
            (c.client_port_listen_backlog, c.listen_backlog())
        };
        assert_eq!(backlog(None), (-1, DEFAULT_LISTEN_BACKLOG));
        assert_eq!(backlog(Some("-1")), (-1, DEFAULT_LISTEN_BACKLOG));
        assert_eq!(backlog(Some("0")), (0, DEFAULT_LISTEN_BACKLOG));
        assert_eq!(backlog(Some("50")), (50, 50));
        let err = Config::from_properties(&props(&[("clientPortListenBacklog", "lots")])).unwrap_err();
        assert!(err.to_string().contains("clientPortListenBacklog"), "{err}");
    }

    #[test]
    fn fsync_warning_threshold() {
        let c = Config::from_properties(&props(&[])).unwrap();
        assert_eq!(c.fsync_warning_threshold_ms, 1000);
        // ZooKeeper's name, with or without its system-property prefix.
        for key in ["fsync.warningthresholdms", "zookeeper.fsync.warningthresholdms"] {
            let c = Config::from_properties(&props(&[(key, "250")])).unwrap();
            assert_eq!(c.fsync_warning_threshold_ms, 250);
        }
        let err = Config::from_properties(&props(&[("fsync.warningthresholdms", "-5")])).unwrap_err().to_string();
        assert!(err.contains("fsync.warningthresholdms"), "{err}");
    }

    /// `commitLogCount` as ZooKeeper's system property or plain; 0 and junk name the key.
    #[test]
    fn commit_log_count_is_read_and_checked() {
        assert_eq!(Config::default().commit_log_count, DEFAULT_COMMIT_LOG_COUNT);
        for key in ["commitLogCount", "zookeeper.commitLogCount"] {
            let c = Config::from_properties(&props(&[(key, "20")])).unwrap();
            assert_eq!(c.commit_log_count, 20);
        }
        for bad in ["0", "-1", "many"] {
            let err = Config::from_properties(&props(&[("commitLogCount", bad)])).unwrap_err().to_string();
            assert!(err.contains("commitLogCount"), "{err}");
        }
    }

    #[test]
    fn raft_timing_defaults_and_bad_values_name_the_key() {
        let c = Config::from_properties(&props(&[("tickTime", "2000")])).unwrap();
        assert_eq!((c.heartbeat_ms(), c.election_timeout_ms()), (25, 75));
        let c = Config::from_properties(&props(&[("raft.heartbeatMs", "40")])).unwrap();
        assert_eq!((c.heartbeat_ms(), c.election_timeout_ms()), (40, 120));
        let err = |p: &[(&str, &str)]| Config::from_properties(&props(p)).unwrap_err().to_string();
        let e = err(&[("raft.electionTimeoutMs", "5"), ("raft.heartbeatMs", "20")]);
        assert!(e.contains("raft.electionTimeoutMs") && e.contains("(20 ms)"), "{e}");
        let e = err(&[("raft.electionTimeoutMs", "25")]);
        assert!(e.contains("raft.electionTimeoutMs"), "{e}");
        let e = err(&[("raft.heartbeatMs", "0")]);
        assert!(e.contains("raft.heartbeatMs"), "{e}");
    }

    #[test]
    fn force_sync_is_off_only_for_no() {
        let sync = |v: Option<&str>| {
            let p = v.map_or_else(BTreeMap::new, |v| props(&[("forceSync", v)]));
            Config::from_properties(&p).unwrap().force_sync
        };
        assert!(sync(None));
        assert!(sync(Some("yes")));
        assert!(!sync(Some("no")));
        assert!(!sync(Some(" no ")));
        // ZooKeeper compares with "no" exactly: anything else keeps fsync on.
        assert!(sync(Some("false")));
        assert!(sync(Some("No")));
        assert!(!Config::from_properties(&props(&[("zookeeper.forceSync", "no")])).unwrap().force_sync);
    }

    #[test]
    fn snapshot_compression_keys() {
        let compress = |v: &str| Config::from_properties(&props(&[("snapshot.compression.method", v)]));
        assert!(Config::from_properties(&props(&[])).expect("valid").snapshot_compression, "on by default");
        for on in ["zstd", "gz", "snappy"] {
            assert!(compress(on).expect("valid").snapshot_compression, "{on}");
        }
        for off in ["none", "checked", ""] {
            assert!(!compress(off).expect("valid").snapshot_compression, "{off:?}");
        }
        let prefixed = Config::from_properties(&props(&[("zookeeper.snapshot.compression.method", "none")]));
        assert!(!prefixed.expect("valid").snapshot_compression);
        let err = compress("lz4").unwrap_err().to_string();
        assert!(err.contains("snapshot.compression.method") && err.contains("lz4"), "{err}");
    }

    #[test]
    fn spread_workers() {
        use super::SpreadWorkers as Mode;
        let mode = |v: &str| Config::from_properties(&props(&[("runtime.spreadWorkers", v)])).map(|c| c.spread_workers);
        assert_eq!(Config::default().spread_workers, Mode::Auto);
        assert_eq!(mode("auto").unwrap(), Mode::Auto);
        assert_eq!(mode("AUTO").unwrap(), Mode::Auto);
        assert_eq!(mode("true").unwrap(), Mode::Always);
        assert_eq!(mode("false").unwrap(), Mode::Never);
        let err = mode("sometimes").unwrap_err().to_string();
        assert!(err.contains("runtime.spreadWorkers") && err.contains("auto, true or false"), "{err}");
    }

    #[test]
    fn whitelist() {
        let c = Config::from_properties(&props(&[("4lw.commands.whitelist", "ruok, mntr")])).unwrap();
        assert!(c.four_letter_allowed("ruok") && c.four_letter_allowed("srvr") && !c.four_letter_allowed("dump"));
        let c = Config::from_properties(&props(&[("4lw.commands.whitelist", "*")])).unwrap();
        assert!(c.four_letter_allowed("dump"));
    }
}
