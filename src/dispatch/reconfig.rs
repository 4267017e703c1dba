//! Reconfig (opcode 16; ZooKeeper's reconfig case of `PrepRequestProcessor` and the leader's
//! part of it): checked where it arrives (`reconfigEnabled`, WRITE on `/zookeeper/config`,
//! which only a super user has by default, answered in ZooKeeper's order after the version
//! and argument checks), run on the leader (forwarded from a follower):
//! the next configuration is computed from `/zookeeper/config` (incremental `-add`/`-remove`
//! or non-incremental `-members`), new members join as Raft learners and catch up, a quorum
//! of the new voters must be in step with the leader (else NewConfigNoQuorum), then one
//! openraft joint-consensus change moves the group and a `SetConfig` txn writes the new
//! `/zookeeper/config` (its version that txn's zxid). A leader that the change removes first
//! hands leadership to a member that stays. Every member then rewrites its dynamic
//! configuration file ([`Dispatcher::persist_reconfigs`]).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;

use jute::ErrorCode;

use super::Caller;
use super::Dispatcher;
use super::Reply;
use crate::config::ServerEntry;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;
use crate::peer::Reconfig;
use crate::peer::ReconfigError;
use crate::peer::Reconfigured;
use crate::raft::TxnBatch;
use crate::tree::acl;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;
use crate::tree::txn::TxnOutput;
use crate::tree::CONFIG_NODE;

/// How long a follower waits for the leader to run a forwarded reconfig.
const FORWARD_PATIENCE: Duration = Duration::from_secs(60);

/// A configuration: its members by id, and its version.
pub type Configuration = (BTreeMap<u64, ServerEntry>, i64);

/// The members and version in `/zookeeper/config`: all of them (`reconfigured_only` false),
/// or only what a reconfig wrote there (`None` while the members are still zoo.cfg's).
pub fn config_node(
    shared: &crate::raft::state_machine::SharedTree,
    reconfigured_only: bool,
) -> Option<Result<Configuration, crate::config::ConfigError>> {
    let text = {
        let tree = shared.read();
        let from_reconfig = tree.config_from_reconfig();
        tree.node(CONFIG_NODE)
            .filter(|_| from_reconfig || !reconfigured_only)
            .map(|n| n.data().map(<[u8]>::to_vec).unwrap_or_default())
    };
    text.map(|t| crate::config::parse_config_text(&String::from_utf8_lossy(&t)))
}

fn bad(why: impl Into<String>) -> ReconfigError {
    ReconfigError::BadArguments(why.into())
}

/// Parses `server.N=<spec>`.
fn parse_member(text: &str) -> Result<ServerEntry, ReconfigError> {
    let (key, value) = text.split_once('=').ok_or_else(|| bad("Wrong format of server string"))?;
    let key = key.trim();
    let id = key
        .rsplit_once('.')
        .map_or(key, |(_, id)| id)
        .parse::<u64>()
        .map_err(|_| bad(format!("{key}: not a server id")))?;
    crate::config::check_server_id(key, value, id).map_err(|e| bad(e.to_string()))?;
    crate::config::parse_server(key, id, value.trim()).map_err(|e| bad(e.to_string()))
}

/// The configuration `r` asks for, from `current` (ZooKeeper's rules: `new_members` replaces
/// everything; else `leaving` ids are removed and `joining` specs added or replaced, each with
/// a client port).
pub fn next_config(
    current: &BTreeMap<u64, ServerEntry>,
    r: &Reconfig,
) -> Result<BTreeMap<u64, ServerEntry>, ReconfigError> {
    let list = |s: &Option<String>| -> Vec<String> {
        s.as_deref()
            .unwrap_or_default()
            .split([',', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let next = if r.new_members.is_some() {
        let mut next = BTreeMap::new();
        for m in list(&r.new_members) {
            // A non-incremental list may carry its own version line; ZooKeeper ignores it.
            if m.starts_with("version") {
                continue;
            }
            let s = parse_member(&m)?;
            next.insert(s.id, s);
        }
        next
    } else {
        let mut next = current.clone();
        for id in list(&r.leaving) {
            let id = id.parse::<u64>().map_err(|_| bad(format!("{id}: not a server id")))?;
            next.remove(&id);
        }
        for m in list(&r.joining) {
            let s = parse_member(&m)?;
            if s.client.is_none() {
                return Err(bad("Wrong format of server string - each server should have 3 ports specified"));
            }
            next.insert(s.id, s);
        }
        next
    };
    // No two members on one address (`QuorumServer.checkAddressDuplicate`).
    let mut seen = BTreeMap::new();
    for s in next.values() {
        for addr in [format!("{}:{}", s.host, s.peer_port), format!("{}:{}", s.host, s.election_port)] {
            if let Some(other) = seen.insert(addr.clone(), s.id).filter(|o| *o != s.id) {
                return Err(bad(format!("{addr} is used by server.{other} and server.{}", s.id)));
            }
        }
    }
    let voters = next.values().filter(|s| !s.observer).count();
    if voters < 2 {
        return Err(bad("Reconfig failed - new configuration must include at least 2 followers"));
    }
    Ok(next)
}

impl Dispatcher {
    /// What prep refuses a reconfig with where it arrives: not enabled, or a standalone
    /// server.
    pub(super) fn reconfig_refusal(&self) -> Option<ErrorCode> {
        if !self.0.config.reconfig_enabled {
            return Some(ErrorCode::ReconfigDisabled);
        }
        self.0.raft.options().standalone.then_some(ErrorCode::Unimplemented)
    }

    /// Whether `caller` may reconfig: WRITE on `/zookeeper/config` (a super user has it).
    /// ZooKeeper answers NoAuth only after its other checks, so the leader does.
    pub(super) fn may_reconfig(&self, caller: &Caller) -> bool {
        let tree = self.0.shared.read();
        tree.node(CONFIG_NODE).is_some_and(|n| acl::allowed(n.acl, jute::perms::WRITE, &caller.auth))
    }

    /// Runs a client's reconfig (on the leader, or forwarded to it) and answers it with the
    /// new configuration, as ZooKeeper's `GetDataResponse`.
    pub async fn reconfig(&self, req: jute::ReconfigRequest, allowed: bool) -> Reply {
        let r = Reconfig {
            joining: req.joining_servers,
            leaving: req.leaving_servers,
            new_members: req.new_members,
            from_config: req.cur_config_id,
            allowed,
        };
        let done = match self.run_or_forward(r).await {
            Ok(done) => done,
            Err(e) => return Reply::error(self.last_zxid(), super::reply::reconfig_error_code(&e)),
        };
        // The caller reads its own change here next, unless the change removed this member
        // (which applies no more of the log).
        let me = format!("server.{}=", self.0.raft.id());
        if String::from_utf8_lossy(&done.data).lines().any(|l| l.starts_with(&me)) {
            self.0.shared.wait_applied(done.zxid, FORWARD_PATIENCE).await;
        }
        Reply {
            zxid: done.zxid,
            err: ErrorCode::Ok,
            response: jute::Response::GetData(jute::GetDataResponse {
                data: Some(bytes::Bytes::from(done.data)),
                stat: done.stat,
            }),
        }
    }

    async fn run_or_forward(&self, r: Reconfig) -> Result<Reconfigured, ReconfigError> {
        if self.0.raft.is_leader() {
            return self.run_reconfig(r).await;
        }
        self.forward_reconfig(r).await
    }

    async fn forward_reconfig(&self, r: Reconfig) -> Result<Reconfigured, ReconfigError> {
        let patience = self.sync_limit();
        let deadline = tokio::time::Instant::now() + patience;
        // A leader that just handed over may still name itself for a moment.
        let (leader, addr) = loop {
            match self.0.raft.wait_for_leader(patience).await {
                Some((l, _)) if l == self.0.raft.id() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Some(found) => break found,
                None => return Err(ReconfigError::Failed("no leader".into())),
            }
        };
        let client = self.0.peers.client(leader, &addr);
        match client.call(PeerRequest::Reconfig(r), FORWARD_PATIENCE).await {
            Ok(PeerResponse::Reconfig(result)) => result,
            Ok(other) => Err(ReconfigError::Failed(format!("unexpected answer to a reconfig: {other:?}"))),
            Err(e) => Err(ReconfigError::Failed(e.to_string())),
        }
    }

    /// ZooKeeper's `syncLimit` ticks: how long a reconfig waits for a leader, and for new
    /// members to catch up.
    fn sync_limit(&self) -> Duration {
        Duration::from_millis(u64::from(self.0.config.tick_time_ms) * u64::from(self.0.config.sync_limit))
    }

    /// On the leader: one reconfig at a time.
    pub(super) async fn run_reconfig(&self, r: Reconfig) -> Result<Reconfigured, ReconfigError> {
        let Ok(_one_at_a_time) = self.0.reconfig_lock.try_lock() else {
            return Err(ReconfigError::InProgress);
        };
        let raft = &self.0.raft;
        if !raft.is_leader() {
            return Err(ReconfigError::Failed("this member no longer leads".into()));
        }
        if raft.members().in_change() {
            return Err(ReconfigError::InProgress);
        }
        let (current, version) = config_node(&self.0.shared, false)
            .unwrap_or_else(|| Ok(Default::default()))
            .map_err(|e| ReconfigError::Failed(format!("/zookeeper/config: {e}")))?;
        if current.is_empty() {
            return Err(ReconfigError::Standalone);
        }
        if r.from_config != -1 && r.from_config != version {
            return Err(ReconfigError::BadVersion);
        }
        let next = next_config(&current, &r)?;
        if !r.allowed {
            return Err(ReconfigError::NoAuth);
        }
        let voters: BTreeSet<u64> = next.values().filter(|s| !s.observer).map(|s| s.id).collect();
        let me = raft.id();
        let recent = crate::raft::serving::limit(raft.options());
        if !voters.contains(&me) {
            // ZooKeeper's leader designates a successor from the new configuration; here it
            // hands leadership over first and the successor runs the change.
            let synced = raft.synced(recent);
            if !voters.iter().any(|v| synced.contains(v)) {
                return Err(ReconfigError::NoQuorum);
            }
            tracing::info!("handing leadership over for a reconfig that removes this member");
            if !raft.hand_over_among(&|v| voters.contains(&v), FORWARD_PATIENCE / 4).await {
                return Err(ReconfigError::Failed("could not hand leadership to a member that stays".into()));
            }
            drop(_one_at_a_time);
            return self.forward_reconfig(r).await;
        }
        // New members join as learners and catch up (a snapshot for a large tree) first.
        let present = raft.members().nodes;
        let joining: BTreeMap<u64, String> =
            next.values().filter(|s| !present.contains_key(&s.id)).map(|s| (s.id, s.spec())).collect();
        let patience = self.sync_limit();
        let deadline = tokio::time::Instant::now() + patience;
        // ZooKeeper counts the new voters that are connected and in step with the leader; a
        // new member here is connected once it answers on its peer port (it was started to
        // join), and can be in step once added. Too few even then: refused at once.
        let reachable = self.reachable(joining.keys().filter(|id| voters.contains(id)), &joining).await;
        let staying = voters.iter().filter(|v| present.contains_key(v)).count();
        if (staying + reachable.len()) * 2 <= voters.len() {
            tracing::warn!(
                staying,
                reachable = reachable.len(),
                voters = voters.len(),
                "reconfig refused: too few of the new voters are up"
            );
            return Err(ReconfigError::NoQuorum);
        }
        // New voters are waited for (up to `syncLimit`) only if the quorum needs them.
        let synced = raft.synced(recent);
        let synced_now = voters.iter().filter(|v| synced.contains(v)).count();
        let wait_for = if synced_now * 2 > voters.len() { BTreeSet::new() } else { reachable };
        let caught_up = raft.add_learners(&joining, &wait_for, patience).await;
        // A leader elected moments ago (one that a removed leader handed over to) hears
        // from its followers within a heartbeat or two: give them until `syncLimit`.
        let in_step = loop {
            let synced: BTreeSet<u64> = raft.synced(recent).union(&caught_up).copied().collect();
            let in_step = voters.iter().filter(|v| synced.contains(v)).count();
            if in_step * 2 > voters.len() || tokio::time::Instant::now() >= deadline {
                break in_step;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if in_step * 2 <= voters.len() {
            tracing::warn!(in_step, voters = voters.len(), "reconfig refused: too few of the new voters are in step");
            let added: BTreeSet<u64> =
                raft.members().nodes.keys().filter(|id| joining.contains_key(id)).copied().collect();
            if let Err(e) = raft.remove_learners(added).await {
                tracing::warn!(error = %e, "removing the learners of a refused reconfig failed");
            }
            return Err(ReconfigError::NoQuorum);
        }
        let specs: BTreeMap<u64, String> = next.values().map(|s| (s.id, s.spec())).collect();
        tracing::info!(from = format_args!("{version:x}"), voters = ?voters, members = specs.len(), "reconfig");
        raft.change_members(specs, voters).await.map_err(|e| ReconfigError::Failed(e.to_string()))?;
        let txn = Txn {
            session_id: 0,
            time_ms: crate::clock::now_ms(),
            auth: Default::default(),
            op: TxnOp::SetConfig { servers: crate::config::server_lines(&next), min_zxid: version + 1 },
        };
        let results = raft.propose(TxnBatch::new(vec![txn])).await.map_err(|e| ReconfigError::Failed(e.to_string()))?;
        let result = results.into_iter().next().ok_or_else(|| ReconfigError::Failed("no result".into()))?;
        let Ok(TxnOutput::Stat(stat)) = result.outcome else {
            return Err(ReconfigError::Failed(format!("writing /zookeeper/config: {:?}", result.outcome)));
        };
        let data = {
            let tree = self.0.shared.read();
            tree.node(CONFIG_NODE).and_then(|n| n.data()).map(<[u8]>::to_vec).unwrap_or_default()
        };
        tracing::info!(version = format_args!("{:x}", result.zxid), "reconfig committed");
        Ok(Reconfigured { data, stat, zxid: result.zxid })
    }

    /// Which of `ids` (new members, at their `specs`) answer on their peer port within a
    /// second: started and reachable, as ZooKeeper's joining servers are connected.
    async fn reachable(&self, ids: impl Iterator<Item = &u64>, specs: &BTreeMap<u64, String>) -> BTreeSet<u64> {
        let probes = ids.map(|id| {
            let addr = crate::raft::members::peer_addr(specs.get(id).map_or("", String::as_str));
            let client = self.0.peers.client(*id, &addr);
            let id = *id;
            async move {
                let answer = client.call(PeerRequest::Bootstrap, Duration::from_secs(1)).await;
                matches!(answer, Ok(PeerResponse::Bootstrap(_))).then_some(id)
            }
        });
        futures::future::join_all(probes).await.into_iter().flatten().collect()
    }

    /// On every member: after a reconfig is applied here, writes the new members to
    /// `<zoo.cfg>.dynamic.<version>` and points zoo.cfg at it (as ZooKeeper does), so that a
    /// restart starts with them. Runs until `stop`.
    pub async fn persist_reconfigs(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(config_file) = self.0.config.config_file.clone() else {
            return;
        };
        // The version this member's files hold; a reconfig's configuration with another one
        // is written out.
        let mut written = self.0.config.config_version;
        let mut applied = self.0.shared.applied.subscribe();
        loop {
            match config_node(&self.0.shared, true) {
                Some(Ok((servers, version))) if version != written && !servers.is_empty() => {
                    match crate::config::write_reconfigured(&config_file, &servers, version) {
                        Ok(path) => tracing::info!(file = %path.display(), "new configuration written"),
                        Err(e) => tracing::error!(file = %config_file.display(), error = %e,
                            "writing the new configuration failed: a restart would start with the old one"),
                    }
                    written = version;
                }
                Some(Err(e)) => tracing::error!(error = %e, "/zookeeper/config does not parse"),
                _ => {}
            }
            tokio::select! {
                changed = applied.changed() => if changed.is_err() { return },
                _ = stop.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lines: &[&str]) -> BTreeMap<u64, ServerEntry> {
        lines.iter().map(|l| parse_member(l).unwrap()).map(|s| (s.id, s)).collect()
    }

    fn req(joining: Option<&str>, leaving: Option<&str>, members: Option<&str>) -> Reconfig {
        Reconfig {
            joining: joining.map(str::to_owned),
            leaving: leaving.map(str::to_owned),
            new_members: members.map(str::to_owned),
            from_config: -1,
            allowed: true,
        }
    }

    #[test]
    fn incremental_and_non_incremental_changes() {
        let current = config(&[
            "server.1=127.0.0.1:2001:3001:participant;127.0.0.1:4001",
            "server.2=127.0.0.1:2002:3002:participant;127.0.0.1:4002",
            "server.3=127.0.0.1:2003:3003:participant;127.0.0.1:4003",
        ]);
        let add = req(Some("server.4=127.0.0.1:2004:3004:participant;127.0.0.1:4004"), None, None);
        assert_eq!(next_config(&current, &add).unwrap().keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
        let remove = req(None, Some("3,2"), None);
        let e = next_config(&current, &remove).unwrap_err();
        assert!(matches!(e, ReconfigError::BadArguments(_)), "one voter left: {e:?}");
        let both = req(Some("server.5=127.0.0.1:2005:3005:observer;4005"), Some("3"), None);
        let next = next_config(&current, &both).unwrap();
        assert_eq!(next.keys().copied().collect::<Vec<_>>(), [1, 2, 5]);
        assert!(next[&5].observer);
        let members = req(
            None,
            None,
            Some("server.1=127.0.0.1:2001:3001:participant;4001,server.2=127.0.0.1:2002:3002;4002\nversion=1"),
        );
        assert_eq!(next_config(&current, &members).unwrap().keys().copied().collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn bad_specs_are_refused() {
        let current = config(&[
            "server.1=127.0.0.1:2001:3001;4001",
            "server.2=127.0.0.1:2002:3002;4002",
            "server.3=127.0.0.1:2003:3003;4003",
        ]);
        for joining in [
            "server.4=127.0.0.1:2004:3004",      // no client port
            "server.4=127.0.0.1:2004",           // two ports
            "server.x=127.0.0.1:2004:3004;1",    // no id
            "server.4=127.0.0.1:2001:3004;4004", // server.1's peer port
            "nonsense",
        ] {
            let e = next_config(&current, &req(Some(joining), None, None)).unwrap_err();
            assert!(matches!(e, ReconfigError::BadArguments(_)), "{joining}: {e:?}");
        }
        let e = next_config(&current, &req(None, Some("two"), None)).unwrap_err();
        assert!(matches!(e, ReconfigError::BadArguments(_)));
    }
}
