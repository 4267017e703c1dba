//! Changing who is in the group (ZooKeeper's `reconfig`) through openraft's own membership
//! change: new members first join as learners and catch up, then one joint-consensus change
//! sets the voters, adds or drops observers (learners) and records each member's ZooKeeper
//! server spec (`host:peerPort:electionPort:role;clientAddr:clientPort`) as its node address.
//! A group formed from zoo.cfg holds bare `host:peerPort` addresses until its first reconfig;
//! [`peer_addr`] reads both.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::ProposeError;
use super::Raft;

/// The `host:peerPort` of a node address: a bare `host:peerPort`, or a ZooKeeper server spec
/// (`host:peerPort:electionPort[:role][;client]`, `[v6]:port:...` too).
pub fn peer_addr(node_addr: &str) -> String {
    let addrs = node_addr.split_once(';').map_or(node_addr, |(a, _)| a).trim();
    let (host, ports) = match addrs.strip_prefix('[') {
        Some(rest) => match rest.split_once("]:") {
            Some((h, p)) => (format!("[{h}]"), p),
            None => return addrs.to_owned(),
        },
        None => match addrs.split_once(':') {
            Some((h, p)) => (h.to_owned(), p),
            None => return addrs.to_owned(),
        },
    };
    let port = ports.split(':').next().unwrap_or_default();
    format!("{host}:{port}")
}

/// Whether a node address is a ZooKeeper server spec (written by a reconfig), not a bare
/// `host:peerPort`.
pub fn is_spec(node_addr: &str) -> bool {
    peer_addr(node_addr) != node_addr.trim()
}

/// The group's membership as the leader sees it.
#[derive(Debug, Clone, Default)]
pub struct Members {
    /// One voter set, or two while a change is in its joint phase.
    pub configs: Vec<BTreeSet<u64>>,
    /// Every node (voters and learners) and its address as stored.
    pub nodes: BTreeMap<u64, String>,
}

impl Members {
    /// Whether a membership change is under way (a joint configuration).
    pub fn in_change(&self) -> bool {
        self.configs.len() > 1
    }
}

fn raft_err(e: impl std::fmt::Display) -> ProposeError {
    ProposeError::Raft(e.to_string())
}

impl Raft {
    /// The membership this member knows.
    pub fn members(&self) -> Members {
        let m = self.inner.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        Members {
            configs: membership.get_joint_config().clone(),
            nodes: membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
        }
    }

    /// On the leader: the members that are in step with it now (itself, and each node that
    /// acknowledged a heartbeat within `recent` and holds all but the last few entries).
    /// ZooKeeper's "connected and synced" for a reconfig's quorum check.
    pub fn synced(&self, recent: Duration) -> BTreeSet<u64> {
        let m = self.inner.metrics().borrow_watched().clone();
        let mut out = BTreeSet::from([self.id]);
        let last = m.last_log_index.unwrap_or(0);
        let acked: BTreeMap<u64, bool> = m
            .heartbeat
            .iter()
            .flatten()
            .map(|(id, at)| {
                use openraft::Instant;
                (*id, at.as_ref().is_some_and(|t| t.elapsed() < recent))
            })
            .collect();
        for (id, matched) in m.replication.iter().flatten() {
            let caught_up = last.saturating_sub(matched.map_or(0, |l| l.index)) <= 64;
            if caught_up && acked.get(id).copied().unwrap_or(false) {
                out.insert(*id);
            }
        }
        out
    }

    /// On the leader: adds `nodes` as learners; waits up to `patience` for those in `voters`
    /// to catch up with the log (an observer need not: it never counts toward a quorum) and
    /// returns those that did. Nodes already in the group are skipped.
    pub async fn add_learners(
        &self,
        nodes: &BTreeMap<u64, String>,
        voters: &BTreeSet<u64>,
        patience: Duration,
    ) -> BTreeSet<u64> {
        let present = self.members().nodes;
        let mut caught_up = BTreeSet::new();
        let deadline = tokio::time::Instant::now() + patience;
        for (id, addr) in nodes.iter().filter(|(id, _)| !present.contains_key(id)) {
            let wait = voters.contains(id);
            let add = self.inner.add_learner(*id, openraft::BasicNode { addr: addr.clone() }, wait);
            match tokio::time::timeout_at(deadline, add).await {
                Ok(Ok(_)) if wait => {
                    caught_up.insert(*id);
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(node = id, error = %e, "adding a new member as a learner failed"),
                Err(_) => tracing::info!(node = id, "a new member did not catch up in time"),
            }
        }
        caught_up
    }

    /// On the leader: removes learners `ids` that a failed reconfig added.
    pub async fn remove_learners(&self, ids: BTreeSet<u64>) -> Result<(), ProposeError> {
        if ids.is_empty() {
            return Ok(());
        }
        let change = openraft::ChangeMembers::RemoveNodes(ids);
        self.inner.change_membership(change, false).await.map(|_| ()).map_err(raft_err)
    }

    /// On the leader: makes the group exactly `nodes` (id -> server spec) with `voters` voting
    /// (the rest are learners: ZooKeeper's observers), in one joint-consensus change.
    pub async fn change_members(
        &self,
        nodes: BTreeMap<u64, String>,
        voters: BTreeSet<u64>,
    ) -> Result<(), ProposeError> {
        let before = self.members();
        let old_learners: BTreeSet<u64> = before
            .nodes
            .keys()
            .filter(|id| !before.configs.iter().any(|c| c.contains(id)) && !nodes.contains_key(id))
            .copied()
            .collect();
        let mut steps = vec![
            openraft::ChangeMembers::SetNodes(
                nodes.into_iter().map(|(id, addr)| (id, openraft::BasicNode { addr })).collect(),
            ),
            openraft::ChangeMembers::ReplaceAllVoters(voters),
        ];
        if !old_learners.is_empty() {
            steps.push(openraft::ChangeMembers::RemoveNodes(old_learners));
        }
        self.inner.change_membership(openraft::ChangeMembers::Batch(steps), false).await.map(|_| ()).map_err(raft_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addr_of_bare_and_spec_addresses() {
        assert_eq!(peer_addr("127.0.0.1:2888"), "127.0.0.1:2888");
        assert_eq!(peer_addr("127.0.0.1:2888:3888:participant;127.0.0.1:2181"), "127.0.0.1:2888");
        assert_eq!(peer_addr("zk1:2888:3888;2181"), "zk1:2888");
        assert_eq!(peer_addr("[::1]:2888:3888:observer;[::1]:2181"), "[::1]:2888");
        assert_eq!(peer_addr(""), "");
    }
}
