//! When a voter of an ensemble campaigns for leadership: openraft's pre-vote and elections,
//! timed by this module. Two things openraft 0.10 lacks are kept here:
//!
//! - **A campaign timer that never cuts off a slow vote** ([`campaign`], [`CampaignTiming`]).
//!   openraft's own timer uses one figure, `election_timeout_min`, both as the shortest
//!   silence before a campaign and as how long a candidate waits for its vote answers. A
//!   voter answers only once its vote is on disk, so on a slow disk (an fsync of ~100 ms) a
//!   short minimum means no election ever completes, and a long one leaves no room for the
//!   randomness that keeps candidates apart. So an ensemble turns openraft's timer off and
//!   gives the candidate the whole lease to collect answers (`election_timeout_min` = 2 ×
//!   `raft.electionTimeoutMs` − 1), and this timer starts a round after the leader lease plus
//!   a random election timeout of silence; after a vote changes nobody starts a new term
//!   until the candidate's vote window has passed, and each campaign of this server's that
//!   elects nobody doubles the random part of its next wait (up to 8×, as ZooKeeper's leader
//!   election doubles its notification timeout). Each round is openraft's pre-vote
//!   (`trigger().elect(true)`): a real election, and a new term, only once a majority has
//!   lost the leader too (openraft's lease rule) and finds this member's log at least as
//!   up to date as theirs. A member rejoining after a partition therefore cannot depose a
//!   live leader.
//! - **Fast failover when a leader's process dies** ([`fast_failover`]). When the leader's
//!   peer port *refuses* connections its process is gone (a partition or a hung process
//!   times out instead), so one survivor, the lowest-numbered voter whose own peer port
//!   still answers, starts a real election (no pre-vote round) the moment the lease has run
//!   out.
//!
//! A standalone server keeps openraft's own timer: it has nobody to ask or to depose.

use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rand::Rng;
use tokio::net::TcpStream;

use super::Raft;
use super::Role;

/// When this server last received an AppendEntries (entries or heartbeat) from a leader at
/// least as new as the one it knows, from whom, and the leader's commit index then. The
/// campaign timer, fast failover and client service ([`super::serving`]) read it.
///
/// A contact after a silence longer than `gap` (or the first since start) marks a return:
/// the leader's commit index at that moment is what this member must apply before it serves
/// clients again, as a ZooKeeper follower syncs with its leader before it serves.
pub struct LeaderContact {
    state: Mutex<Contact>,
    gap: Duration,
    settle: Duration,
}

#[derive(Default)]
struct Contact {
    last: Option<(u64, Instant)>,
    catch_up: Option<CatchUp>,
}

/// What a returning member must apply before it serves again.
struct CatchUp {
    /// When the return was noticed.
    since: Instant,
    /// The highest commit index the leader reported within the settle time after `since`
    /// (`None` while none did: a return may start with a snapshot chunk, which carries none).
    target: Option<u64>,
}

impl LeaderContact {
    /// Contact tracking where a silence longer than `gap` makes a return, and what the leader
    /// reports within `settle` of a return sets the commit index to catch up to.
    ///
    /// Why a settle time: a member frozen (SIGSTOP, a VM pause) finds, when it wakes, the
    /// heartbeats the leader sent while it slept queued in its sockets, each with the commit
    /// index of its own moment. The first of them can name a commit this member had already
    /// applied, and it then served at once from a state that missed the newer writes, session
    /// expiries included (seen in the randomized catch-up test: a session the leader had
    /// expired was accepted for 10 ms). What the leader reports a couple of heartbeats after
    /// the wake was sent after it.
    pub fn new(gap: Duration, settle: Duration) -> LeaderContact {
        LeaderContact { state: Mutex::new(Contact::default()), gap, settle }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Contact> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records an AppendEntries (or snapshot chunk) from `leader`, now, with the commit index
    /// it reported, if it reported one.
    pub fn heard(&self, leader: u64, leader_commit: Option<u64>) {
        let now = Instant::now();
        let mut c = self.lock();
        let returning = c.last.is_none_or(|(_, at)| now.duration_since(at) > self.gap);
        if returning {
            if c.catch_up.is_none() {
                tracing::info!(
                    leader,
                    commit = ?leader_commit,
                    "leader heard after a silence: catching up to its commit point before serving clients"
                );
            }
            c.catch_up = Some(CatchUp { since: now, target: leader_commit });
        } else if let Some(cu) = c.catch_up.as_mut() {
            if now.duration_since(cu.since) <= self.settle || cu.target.is_none() {
                cu.target = cu.target.max(leader_commit);
            }
        }
        c.last = Some((leader, now));
    }

    /// The last leader heard from and when.
    pub fn last(&self) -> Option<(u64, Instant)> {
        self.lock().last
    }

    /// Whether this member, having applied up to `applied`, has caught up since its last
    /// return (always, if it had none to catch up with).
    pub fn caught_up(&self, applied: u64) -> bool {
        let mut c = self.lock();
        let Some(cu) = c.catch_up.as_ref() else { return true };
        if cu.since.elapsed() <= self.settle {
            return false;
        }
        match cu.target {
            Some(target) if applied >= target => {
                c.catch_up = None;
                true
            }
            _ => false,
        }
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
pub async fn fast_failover(raft: Raft, mut stop: tokio::sync::watch::Receiver<bool>) {
    let me = raft.id();
    let heartbeat = raft.heartbeat();
    let lease = raft.lease();
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
        let Some((heard, at)) = raft.contact.last() else { continue };
        if at.elapsed() < heartbeat * 2 || handled == Some(at) {
            continue;
        }
        let status = raft.status();
        let Some(leader) = status.leader.filter(|l| *l != me) else { continue };
        if heard != leader {
            continue;
        }
        handled = Some(at);
        if !status.voters.contains(&me) {
            continue;
        }
        let addr = |id: u64| status.members.get(&id).cloned().unwrap_or_default();
        if !refused(&addr(leader)).await {
            continue;
        }
        let mut designated = false;
        for v in status.voters.iter().copied().filter(|v| *v != leader) {
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
        if raft.contact.last() != Some((heard, at)) || raft.leader() != Some(leader) {
            continue;
        }
        tracing::info!(
            leader,
            silent_ms = at.elapsed().as_millis() as u64,
            "leader's peer port refuses connections: campaigning now that its lease has run out"
        );
        if let Err(e) = raft.inner.trigger().elect(false).await {
            tracing::warn!(error = %e, "could not start an election");
        }
    }
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
/// alone while there is no known leader), start a round of openraft's pre-vote, which turns
/// into a real election only if a majority of the voters would grant it. See
/// [`CampaignTiming::wait`] for the waits after a campaign.
pub async fn campaign(raft: Raft, mut stop: tokio::sync::watch::Receiver<bool>) {
    let me = raft.id();
    let heartbeat = raft.heartbeat();
    let election = Duration::from_millis(raft.options().election_ms);
    let timing = CampaignTiming {
        election,
        lease: raft.lease(),
        vote_window: Duration::from_millis(raft.options().vote_window_ms()),
    };
    // Campaigns this server started since a leader was last known, and pre-vote rounds.
    let mut campaigns = 0u32;
    let mut rounds = 0u32;
    let next_wait = |leader_known: bool, campaigning: bool, campaigns: u32| {
        timing.wait(leader_known, campaigning, campaigns, rand::rng().random::<f64>())
    };
    let mut tick = tokio::time::interval((heartbeat / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The silence being timed starts at the last vote change, leader contact or round.
    let mut since = Instant::now();
    let mut wait = next_wait(false, false, 0);
    let mut vote = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let status = raft.status();
        let current_vote = status.vote;
        if vote != Some(current_vote) {
            let (_, candidate, committed) = current_vote;
            // The first look at the vote (at start) is no campaign under way.
            let campaigning = vote.is_some() && !committed;
            if campaigning && candidate == me {
                campaigns = campaigns.saturating_add(1);
            }
            vote = Some(current_vote);
            if committed {
                campaigns = 0;
            }
            since = Instant::now();
            wait = next_wait(committed, campaigning, campaigns);
        }
        if let Some((_, at)) = raft.contact.last().filter(|(_, at)| *at > since) {
            campaigns = 0;
            rounds = 0;
            since = at;
            wait = next_wait(true, false, 0);
        }
        if status.role == Role::Leader || !status.voters.contains(&me) {
            campaigns = 0;
            rounds = 0;
            since = Instant::now();
            continue;
        }
        if since.elapsed() < wait {
            continue;
        }
        // Said once per silence: a member cut off from the others asks every 75-150 ms.
        if rounds == 0 {
            tracing::info!(
                voters = status.voters.len(),
                silent_ms = since.elapsed().as_millis() as u64,
                "no leader heard: asking the other voters (pre-vote), again until one is"
            );
        } else {
            tracing::debug!(rounds, earlier_campaigns = campaigns, "no leader heard: pre-vote again");
        }
        rounds = rounds.saturating_add(1);
        since = Instant::now();
        wait = next_wait(false, false, campaigns);
        if let Err(e) = raft.inner.trigger().elect(true).await {
            // Fatal: Raft has stopped, and there is nothing left to elect.
            tracing::warn!(error = %e, "could not start a pre-vote; Raft has stopped");
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

    /// A first contact, or one after a silence longer than the gap, is a return: the member
    /// may serve again only after the settle time, once it has applied the highest commit the
    /// leader reported within it (a woken member's first heartbeats are stale ones queued while
    /// it slept). Contacts without a gap need no catching up.
    #[test]
    fn a_return_waits_out_the_settle_time_and_the_highest_commit_reported_in_it() {
        let settle = Duration::from_millis(30);
        let c = LeaderContact::new(Duration::from_millis(200), settle);
        assert!(c.caught_up(0), "nothing heard yet: nothing to catch up with");
        c.heard(2, Some(10));
        assert!(!c.caught_up(100), "within the settle time");
        c.heard(2, Some(25));
        std::thread::sleep(settle + Duration::from_millis(10));
        c.heard(2, Some(90)); // after the settle time: not part of the target
        assert!(!c.caught_up(24));
        assert!(c.caught_up(25));
        assert!(c.caught_up(0), "caught up: no target left");
        c.heard(2, Some(200));
        assert!(c.caught_up(0), "no gap, no return");
        std::thread::sleep(Duration::from_millis(210));
        c.heard(2, None); // a snapshot chunk: a return with no commit index yet
        std::thread::sleep(settle + Duration::from_millis(10));
        assert!(!c.caught_up(1_000), "a return waits for a reported commit index");
        c.heard(2, Some(300));
        assert!(c.caught_up(300));
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
