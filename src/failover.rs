//! Fast failover when a leader's process dies. openraft makes a follower wait out the voters'
//! leader lease (`election_timeout_max` since the leader was last heard) and then a random
//! election timeout before it campaigns. The lease is what stops a cut-off minority from
//! deposing a live leader; the random part only spreads candidates apart. When the leader's
//! peer port *refuses* connections its process is gone (a partition or a hung process times
//! out instead), so one survivor, the lowest-numbered voter whose own peer port still answers,
//! campaigns the moment the lease has run out. Every other case keeps openraft's timers.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::raft::Raft;

/// When this server last received an AppendEntries (entries or heartbeat), and from whom.
#[derive(Default)]
pub struct LeaderContact {
    last: Mutex<Option<(u64, Instant)>>,
}

impl LeaderContact {
    /// Records an AppendEntries from `leader`, now.
    pub fn heard(&self, leader: u64) {
        *self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((leader, Instant::now()));
    }

    /// The last leader heard from and when.
    pub fn last(&self) -> Option<(u64, Instant)> {
        *self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether a TCP connect to `addr` is refused (nobody listens: the process is gone). A
/// timeout or any other outcome is not proof of death.
async fn refused(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_millis(100), TcpStream::connect(addr)).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// Watches for a silent leader whose peer port refuses connections and, on the designated
/// survivor, starts an election as soon as the other voters will grant it.
pub async fn run(raft: Raft, me: u64, contact: Arc<LeaderContact>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let heartbeat = Duration::from_millis(raft.config().heartbeat_interval);
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    // Voters measure the lease from the heartbeat they received, which may be a little later
    // than ours.
    let margin = (heartbeat / 2).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval((heartbeat / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut handled: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        // Cheap checks first: this runs every half heartbeat.
        let Some((heard, at)) = contact.last() else { continue };
        if at.elapsed() < heartbeat * 2 || handled == Some(at) {
            continue;
        }
        let m = raft.metrics().borrow().clone();
        let Some(leader) = m.current_leader.filter(|l| *l != me) else { continue };
        if heard != leader {
            continue;
        }
        handled = Some(at);
        let membership = m.membership_config.membership().clone();
        let voters: Vec<u64> = membership.voter_ids().collect();
        if !voters.contains(&me) {
            continue;
        }
        let addr = |id: u64| membership.get_node(&id).map(|n| n.addr.clone()).unwrap_or_default();
        if !refused(&addr(leader)).await {
            continue;
        }
        let mut designated = false;
        for v in voters.iter().copied().filter(|v| *v != leader) {
            if v == me {
                designated = true;
                break;
            }
            if !refused(&addr(v)).await {
                break;
            }
        }
        if !designated {
            tracing::info!(leader, "leader's peer port refuses connections; a lower-numbered voter campaigns");
            continue;
        }
        let when = tokio::time::Instant::from_std(at + lease + margin);
        tokio::select! {
            _ = tokio::time::sleep_until(when) => {}
            _ = stop.changed() => return,
        }
        let still = raft.metrics().borrow().current_leader == Some(leader);
        if contact.last() != Some((heard, at)) || !still {
            continue;
        }
        tracing::info!(
            leader,
            silent_ms = at.elapsed().as_millis() as u64,
            "leader's peer port refuses connections: campaigning now that its lease has run out"
        );
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "could not start an election");
        }
    }
}
