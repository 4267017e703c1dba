//! When a voter of an ensemble campaigns for leadership. Three rules, on top of openraft:
//!
//! - **Pre-vote.** openraft campaigns on its own timer by bumping its term, and a higher
//!   term deposes a live leader the moment the two next speak, even when the candidate could
//!   never win. A member rejoining after a partition, which hears from its old followers before
//!   the leader's next heartbeat reaches it, would do exactly that. So an ensemble turns
//!   openraft's timer off and [`campaign`] runs the same timer (the leader lease,
//!   `election_timeout_max` since the leader was last heard, plus a random election timeout),
//!   but first asks the other voters: only when a majority, counting itself, has not heard
//!   from a live leader within the lease either does it start a real election
//!   ([`grant_pre_vote`] is the receiving side; nothing changes on the receiver).
//! - **Fast failover when a leader's process dies** ([`run`]). When the leader's peer port
//!   *refuses* connections its process is gone (a partition or a hung process times out
//!   instead), so one survivor, the lowest-numbered voter whose own peer port still answers,
//!   campaigns the moment the lease has run out.
//!
//! - **Campaigns that do not cut each other off** ([`CampaignTiming`]). A voter answers a
//!   vote only once the vote is on disk, so on a slow disk the answers take a while: after a
//!   vote changes, nobody starts a new term until the candidate's whole vote window (openraft's
//!   `election_timeout_min`) has passed, and each campaign of this server's that elects
//!   nobody doubles the random part of its next wait (up to 8×).
//!
//! A standalone server keeps openraft's own timer: it has nobody to ask or to depose.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use rand::Rng;
use tokio::net::TcpStream;

use crate::peer::PeerClient;
use crate::peer::PeerRequest;
use crate::peer::PeerResponse;
use crate::raft::log_store::LastLog;
use crate::raft::LogId;
use crate::raft::Raft;

/// What a pre-vote weighs on this server: when it last received an AppendEntries (entries or
/// heartbeat) and from whom, and its last log id.
pub struct LeaderContact {
    last: Mutex<Option<(u64, Instant)>>,
    log: LastLog,
    /// When this server started: until it hears a leader, it refuses pre-votes for a lease
    /// from then, as openraft refuses votes after a restart.
    started: Instant,
}

impl LeaderContact {
    /// Contact tracking for the server whose log `log` reads.
    pub fn new(log: LastLog) -> LeaderContact {
        LeaderContact { last: Mutex::new(None), log, started: Instant::now() }
    }

    /// This server's last log id; `None` if it cannot be read.
    fn last_log(&self) -> Option<Option<LogId>> {
        match self.log.get() {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the last log id for a pre-vote");
                None
            }
        }
    }

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
        let m = raft.metrics().borrow_watched().clone();
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
        let still = raft.metrics().borrow_watched().current_leader == Some(leader);
        if contact.last() != Some((heard, at)) || !still {
            continue;
        }
        tracing::info!(
            leader,
            silent_ms = at.elapsed().as_millis() as u64,
            "leader's peer port refuses connections: campaigning now that its lease has run out"
        );
        if let Err(e) = raft.trigger().elect(false).await {
            tracing::warn!(error = %e, "could not start an election");
        }
    }
}

/// The receiving side of a pre-vote: whether this server has lost its leader as well and the
/// candidate's log is at least as up to date as ours (Raft's vote rule, so the member that can
/// win is the one that campaigns). A follower has lost its leader once the leader lease has
/// passed since it last heard from one; a leader, once it has gone a lease without a quorum's
/// acknowledgement.
pub fn grant_pre_vote(
    raft: &Raft,
    me: u64,
    contact: &LeaderContact,
    candidate: u64,
    candidate_log: Option<LogId>,
) -> bool {
    let lease_ms = raft.config().election_timeout_max;
    let (leading, quorum_ack_ms) = {
        let m = raft.metrics();
        let m = m.borrow_watched();
        (m.current_leader == Some(me), crate::raft::millis_since_quorum_ack(&m))
    };
    let lost = if leading {
        // No acknowledgement yet: a leader elected a moment ago.
        quorum_ack_ms.is_some_and(|ms| ms >= lease_ms)
    } else {
        contact.last().map_or(contact.started, |(_, at)| at).elapsed() >= Duration::from_millis(lease_ms)
    };
    // Only a server that has lost its leader reads its log (a redb read after a restart).
    let mine = if lost { contact.last_log() } else { None };
    let granted = mine.is_some_and(|mine| candidate_log >= mine);
    tracing::debug!(candidate, ?candidate_log, ?mine, lost, granted, "pre-vote asked");
    granted
}

/// How long an ensemble's voter stays silent before it runs a pre-vote, from the Raft timing
/// the server was started with.
#[derive(Clone, Copy, Debug)]
pub struct CampaignTiming {
    /// `raft.electionTimeoutMs`: the random part of a wait is drawn from `[election, 2 × election)`.
    pub election: Duration,
    /// The leader lease (openraft's `election_timeout_max`): how long a known leader's silence
    /// is tolerated before the random part starts.
    pub lease: Duration,
    /// How long a candidate waits for the answers to its vote requests (openraft's
    /// `election_timeout_min`). A voter answers only once the vote is on disk.
    pub vote_window: Duration,
}

/// Doublings of the random wait after campaigns that elected nobody: 1×, 2×, 4×, then 8× the
/// election timeout, as ZooKeeper's leader election doubles its notification timeout.
const MAX_BACKOFF_DOUBLINGS: u32 = 3;

impl CampaignTiming {
    /// The silence to wait before the next pre-vote, `random` in `[0, 1)` picking within the
    /// random part:
    /// - after a leader was known (`leader_known`): the lease, then one election timeout;
    /// - while a campaign is under way (`campaigning`: a vote for a candidate changed, this
    ///   server's or one it granted), the candidate's whole vote window first, so that a new
    ///   term never cuts off answers still being written to a slow disk;
    /// - `campaigns` counts the campaigns this server started since a leader was last known:
    ///   each after the first doubles the random part, so that candidates whose split votes
    ///   keep colliding draw further apart.
    pub fn wait(&self, leader_known: bool, campaigning: bool, campaigns: u32, random: f64) -> Duration {
        let random = self.election.mul_f64(1.0 + random.clamp(0.0, 1.0));
        if leader_known {
            return self.lease + random;
        }
        let backoff = random * (1u32 << campaigns.saturating_sub(1).min(MAX_BACKOFF_DOUBLINGS));
        if campaigning {
            self.vote_window + backoff
        } else {
            backoff
        }
    }
}

/// The election timer of an ensemble's voter (openraft's own is off): after the leader lease
/// plus a random election timeout without hearing from a leader (a random election timeout
/// alone while there is no known leader), run a pre-vote and campaign only if a majority of
/// the voters grants it. See [`CampaignTiming::wait`] for the waits after a campaign.
pub async fn campaign(
    raft: Raft,
    me: u64,
    timing: CampaignTiming,
    contact: Arc<LeaderContact>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let heartbeat = Duration::from_millis(raft.config().heartbeat_interval);
    let ask_timeout = timing.lease;
    // Campaigns this server started since a leader was last known.
    let mut campaigns = 0u32;
    let next_wait = |leader_known: bool, campaigning: bool, campaigns: u32| {
        timing.wait(leader_known, campaigning, campaigns, rand::rng().random::<f64>())
    };
    let mut tick = tokio::time::interval((heartbeat / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut peers: std::collections::HashMap<u64, PeerClient> = Default::default();
    // The silence being timed starts at the last vote change, leader contact or attempt.
    let mut since = Instant::now();
    let mut wait = next_wait(false, false, 0);
    let mut vote = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let (state, current_vote, membership) = {
            let m = raft.metrics();
            let m = m.borrow_watched();
            (m.state, m.vote, m.membership_config.membership().clone())
        };
        if vote != Some(current_vote) {
            // The first look at the vote (at start) is no campaign under way.
            let campaigning = vote.is_some() && !current_vote.is_committed();
            vote = Some(current_vote);
            if current_vote.is_committed() {
                campaigns = 0;
            }
            since = Instant::now();
            wait = next_wait(current_vote.is_committed(), campaigning, campaigns);
        }
        if let Some((_, at)) = contact.last().filter(|(_, at)| *at > since) {
            campaigns = 0;
            since = at;
            wait = next_wait(true, false, 0);
        }
        let voters: Vec<u64> = membership.voter_ids().collect();
        if state == ServerState::Leader || !voters.contains(&me) {
            campaigns = 0;
            since = Instant::now();
            continue;
        }
        if since.elapsed() < wait {
            continue;
        }
        let Some(last_log) = contact.last_log() else {
            since = Instant::now();
            continue;
        };
        let mut asks: FuturesUnordered<_> = voters
            .iter()
            .copied()
            .filter(|v| *v != me)
            .map(|v| {
                let addr = membership.get_node(&v).map(|n| n.addr.clone()).unwrap_or_default();
                let client = peers.entry(v).or_insert_with(|| PeerClient::new(addr)).clone();
                async move {
                    matches!(
                        client.call(PeerRequest::PreVote { candidate: me, last_log }, ask_timeout).await,
                        Ok(PeerResponse::PreVote(true))
                    )
                }
            })
            .collect();
        // Stop at a majority: a voter that does not answer (frozen, cut off) must not hold
        // the campaign up, or let the answers go stale.
        let mut granted = 1;
        while granted * 2 <= voters.len() {
            let answer = tokio::select! {
                a = asks.next() => a,
                _ = stop.changed() => return,
            };
            match answer {
                Some(true) => granted += 1,
                Some(false) => {}
                None => break,
            }
        }
        drop(asks);
        let silent_ms = since.elapsed().as_millis() as u64;
        let asked_since = since;
        since = Instant::now();
        wait = next_wait(false, false, campaigns);
        if *stop.borrow() {
            return;
        }
        if granted * 2 <= voters.len() {
            tracing::debug!(granted, voters = voters.len(), silent_ms, "pre-vote lost: not campaigning");
            continue;
        }
        // While the answers came in, a leader may have been elected or heard from.
        if raft.metrics().borrow_watched().vote != current_vote
            || contact.last().is_some_and(|(_, at)| at > asked_since)
        {
            tracing::debug!(granted, "pre-vote won, but a leader showed up meanwhile: not campaigning");
            continue;
        }
        tracing::info!(
            granted,
            voters = voters.len(),
            silent_ms,
            earlier_campaigns = campaigns,
            "no leader heard; pre-vote won: campaigning"
        );
        campaigns = campaigns.saturating_add(1);
        if let Err(e) = raft.trigger().elect(false).await {
            // Fatal: Raft has stopped, and there is nothing left to elect.
            tracing::warn!(error = %e, "could not start an election; Raft has stopped");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> CampaignTiming {
        CampaignTiming {
            election: Duration::from_millis(75),
            lease: Duration::from_millis(150),
            vote_window: Duration::from_millis(149),
        }
    }

    #[test]
    fn a_known_leader_is_waited_for_a_lease_then_an_election_timeout() {
        let t = timing();
        assert_eq!(t.wait(true, false, 0, 0.0), Duration::from_millis(225));
        assert_eq!(t.wait(true, false, 0, 1.0), Duration::from_millis(300));
        // Campaigns before the leader was heard do not stretch the wait.
        assert_eq!(t.wait(true, false, 5, 0.5), t.wait(true, false, 0, 0.5));
    }

    #[test]
    fn no_new_term_while_a_candidate_may_still_get_its_answers() {
        let t = timing();
        // At start, nobody campaigning: one random election timeout.
        assert_eq!(t.wait(false, false, 0, 0.0), Duration::from_millis(75));
        // A campaign under way: its whole vote window first.
        assert_eq!(t.wait(false, true, 1, 0.0), Duration::from_millis(149 + 75));
        assert!(t.wait(false, true, 1, 0.99) > t.vote_window);
    }

    #[test]
    fn campaigns_that_elect_nobody_draw_further_apart() {
        let t = timing();
        let waits: Vec<u128> = (1..=6).map(|n| t.wait(false, true, n, 0.0).as_millis()).collect();
        assert_eq!(waits, [224, 299, 449, 749, 749, 749]);
        // Out-of-range randomness is clamped, and a huge count does not overflow.
        assert_eq!(t.wait(false, false, u32::MAX, 7.0), Duration::from_millis(150 * 8));
    }
}
