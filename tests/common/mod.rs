//! Real Warden processes for the integration tests: a standalone server or an ensemble on
//! 127.0.0.1, each member the `warden` binary started with its own zoo.cfg and data dir, and
//! killed (SIGKILL, by PID) when dropped. Clients are `zookeeper-client`, a published Rust
//! client that knows nothing of Warden.

#![allow(dead_code)] // each test file uses part of this

use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

pub use zookeeper_client as zk;

/// How long a member may take to start serving.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// `n` TCP ports free on 127.0.0.1 right now (held open together, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port")).collect();
    held.iter().map(|l| l.local_addr().expect("local address").port()).collect()
}

/// A four-letter word's answer, or `None` if the port does not answer.
pub fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The `Mode:` of `srvr`: `standalone`, `leader`, `follower`, or `None` while not serving.
pub fn mode(port: u16) -> Option<String> {
    let text = four_letter(port, "srvr")?;
    text.lines().find_map(|l| l.strip_prefix("Mode: ")).map(str::to_owned)
}

/// One Warden process: its client port, data dir and log.
pub struct Member {
    pub client_port: u16,
    pub dir: PathBuf,
    cfg: PathBuf,
    child: Option<Child>,
}

impl Member {
    fn new(dir: PathBuf, client_port: u16, lines: &[String]) -> Member {
        std::fs::create_dir_all(&dir).expect("member dir");
        let cfg = dir.join("zoo.cfg");
        let mut text = format!(
            "tickTime=2000\ndataDir={}\nclientPort={client_port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\n",
            dir.join("data").display()
        );
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&cfg, text).expect("write zoo.cfg");
        Member { client_port, dir, cfg, child: None }
    }

    /// Starts the process (its log goes to `<dir>/warden.log`).
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("warden.log"))
            .expect("open the log");
        let child = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("--config")
            .arg(&self.cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start warden");
        self.child = Some(child);
    }

    /// Kills the process with SIGKILL and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `host:port` for clients.
    pub fn hostport(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("warden.log")).unwrap_or_default()
    }

    /// Waits until `srvr` reports one of `modes`.
    pub fn wait_mode(&self, modes: &[&str]) {
        let deadline = Instant::now() + START_PATIENCE;
        while Instant::now() < deadline {
            if mode(self.client_port).is_some_and(|m| modes.contains(&m.as_str())) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("member on {} never reached {modes:?}; log:\n{}", self.client_port, self.log());
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A temp dir removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!("warden-it-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A standalone server.
pub struct Standalone {
    pub member: Member,
    _dir: TempDir,
}

impl Standalone {
    /// Starts a standalone server and waits until it serves.
    pub fn start(name: &str) -> Standalone {
        Standalone::start_with(name, &[])
    }

    /// The same, with extra zoo.cfg lines.
    pub fn start_with(name: &str, extra: &[&str]) -> Standalone {
        let dir = TempDir::new(name);
        let port = free_ports(1)[0];
        let lines: Vec<String> = extra.iter().map(|l| l.to_string()).collect();
        let mut member = Member::new(dir.0.join("s"), port, &lines);
        member.start();
        member.wait_mode(&["standalone"]);
        Standalone { member, _dir: dir }
    }

    pub fn hostport(&self) -> String {
        self.member.hostport()
    }
}

/// An ensemble of `n` members on 127.0.0.1.
pub struct Ensemble {
    pub members: Vec<Member>,
    _dir: TempDir,
}

impl Ensemble {
    /// Starts `n` members and waits until one leads and every one serves.
    pub fn start(name: &str, n: usize) -> Ensemble {
        let dir = TempDir::new(name);
        let ports = free_ports(3 * n);
        let servers: Vec<String> =
            (0..n).map(|i| format!("server.{}=127.0.0.1:{}:{}", i + 1, ports[n + i], ports[2 * n + i])).collect();
        let mut members: Vec<Member> = (0..n)
            .map(|i| {
                let mdir = dir.0.join(format!("m{}", i + 1));
                std::fs::create_dir_all(mdir.join("data")).expect("data dir");
                std::fs::write(mdir.join("data").join("myid"), format!("{}\n", i + 1)).expect("myid");
                Member::new(mdir, ports[i], &servers)
            })
            .collect();
        for m in &mut members {
            m.start();
        }
        let ens = Ensemble { members, _dir: dir };
        ens.wait_stable();
        ens
    }

    /// Waits until exactly one running member leads and every running member serves.
    pub fn wait_stable(&self) {
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let modes: Vec<Option<String>> =
                self.members.iter().filter(|m| m.child.is_some()).map(|m| mode(m.client_port)).collect();
            let leaders = modes.iter().filter(|m| m.as_deref() == Some("leader")).count();
            if leaders == 1 && modes.iter().all(|m| matches!(m.as_deref(), Some("leader" | "follower"))) {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self.members.iter().map(|m| m.log()).collect();
                panic!("ensemble not stable: {modes:?}\n{}", logs.join("\n-----\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the leader.
    pub fn leader(&self) -> usize {
        self.wait_stable();
        self.members.iter().position(|m| mode(m.client_port).as_deref() == Some("leader")).expect("a leader")
    }

    /// Every member's `host:port`, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members.iter().map(Member::hostport).collect::<Vec<_>>().join(",")
    }
}

/// A client of `hosts` with a short session timeout.
pub async fn client(hosts: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(6))
        .connect(hosts)
        .await
        .unwrap_or_else(|e| panic!("connect to {hosts}: {e}"))
}

/// Options for a plain persistent node open to all.
pub fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// Options for an ephemeral node open to all.
pub fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}
