//! Whether this member may serve clients: it knows a leader and, if it is the leader, a quorum
//! acknowledged it recently, or else it heard from the leader recently. ZooKeeper's
//! counterpart is a follower's `syncLimit` on its leader and a leader's on its quorum: a
//! member cut off from the majority stops serving, so its clients move to one that is not.
//! Also, on the leader, observers (`:observer` in `server.N`) are added as Raft learners.

use std::time::Duration;

use super::Raft;
use super::Role;

/// How long a follower may go without hearing from its leader and still serve: two leader
/// leases, but never less than one tick (see [`watch`]). A longer silence is also a return
/// after which the member catches up before serving.
pub fn limit(options: &super::Options) -> Duration {
    Duration::from_millis((options.election_ms * 2 * 2).max(options.tick_ms))
}

/// Whether this member may serve clients now, from `status`: it knows a leader and, if it
/// is the leader, a quorum acknowledged it within `limit`, or else it heard from the leader
/// within `limit` and has caught up since its last return.
pub fn may_serve(raft: &Raft, status: &super::Status, limit: Duration) -> bool {
    let me = raft.id();
    if raft.diverged() {
        // Its tree differs from the leader's: it serves again once re-synced (`resync`).
        return false;
    }
    if !status.members.is_empty() && !status.members.contains_key(&me) {
        // A reconfig removed this member: it serves no more (as in ZooKeeper).
        return false;
    }
    match status.leader {
        // No leader named: an election is under way, most often a hand-over (a stopping or
        // removed leader's transfer). A follower keeps serving while its last leader was heard
        // within `limit`, the same bound as below, so its clients are not dropped for the
        // few milliseconds the new leader takes; writes wait for the new leader meanwhile.
        // So does the candidate itself (the hand-over's target): its state is no older than
        // a follower's. It used to drop its clients here, and a client that had asked it for
        // a reconfig removing the old leader lost the answer (seen in CI).
        None => {
            matches!(status.role, Role::Follower | Role::Learner | Role::Candidate)
                && heard_recently(raft, status, limit)
        }
        // The sole voter of a one-member ensemble (a zoo.cfg with one server.N line) is
        // its own quorum: with no follower to acknowledge it, the last acknowledgement
        // ages while it idles, and its service was suspended two leases after its last
        // write, for good (no client could connect to write again).
        // A leader elected moments ago has no acknowledgement yet: until its first, it
        // serves as the follower it just was, on its last leader's contact.
        Some(l) if l == me => {
            status.voters == [me]
                || (status.role == Role::Leader
                    && match status.quorum_ack_ms {
                        Some(ms) => Duration::from_millis(ms) < limit,
                        None => heard_recently(raft, status, limit),
                    })
        }
        // A follower serves while its leader is heard from: it does not campaign (so never
        // forgets the leader) until a majority has lost the leader too. After a silence it
        // first applies what the leader had committed when it was heard again (see
        // `LeaderContact`): a member that missed writes, and maybe session expiries, must
        // not serve (nor accept a reconnecting session) from a state that old.
        Some(l) => {
            // The new leader of a hand-over is named before its first heartbeat arrives; until
            // then the last leader's contact counts, within the same `limit`.
            raft.contact
                .last()
                .is_some_and(|(from, at)| (from == l || at.elapsed() < limit / 4) && at.elapsed() < limit)
                && raft.contact.caught_up(status.applied_index)
        }
    }
}

/// Whether this member heard a leader within `limit` and has applied what it had to since
/// its last return: the bound a follower serves under.
fn heard_recently(raft: &Raft, status: &super::Status, limit: Duration) -> bool {
    raft.contact.last().is_some_and(|(_, at)| at.elapsed() < limit) && raft.contact.caught_up(status.applied_index)
}

/// Flips `serving` while this member runs, and counts elections
/// (`warden_raft_elections`). A standalone server is its own quorum and always serves.
///
/// "Recently" is two leader leases (2 × `election_timeout_max`, 300 ms at tickTime 2000),
/// but never less than one tick. A quorum's acknowledgement can wait on a follower's fsync,
/// and on a slow disk that took longer than 300 ms now and then: the leader then dropped every
/// client while its ensemble was whole (seen in the compat suite). ZooKeeper allows
/// `syncLimit` ticks for the same decision; one tick keeps a cut-off member's service short.
pub async fn watch(
    raft: Raft,
    serving: tokio::sync::watch::Sender<bool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let me = raft.id();
    if raft.options().standalone {
        let _ = serving.send(true);
        // Keep the sender alive until shutdown: a dropped sender would wake every
        // connection's `serving.changed()` forever.
        let _ = stop.changed().await;
        drop(serving);
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let limit = limit(raft.options());
    let mut last_term = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let status = raft.status();
        if status.term > last_term {
            // Each new term is an election this server took part in or learned of.
            metrics::counter!("warden_raft_elections").increment(status.term - last_term);
            last_term = status.term;
        }
        // Observers are Raft learners: they replicate and serve reads but do not vote. The
        // leader adds any of zoo.cfg's that are missing, until a reconfig decides the members.
        let reconfigured = || raft.members().nodes.values().any(|a| super::members::is_spec(a));
        if status.leader == Some(me) && !reconfigured() {
            for (sid, addr) in &raft.options().observers {
                if !status.members.contains_key(sid) {
                    match raft.add_learner(*sid, addr.clone()).await {
                        Ok(()) => tracing::info!(observer = sid, "observer added as a Raft learner"),
                        Err(e) => tracing::warn!(observer = sid, error = %e, "adding observer failed"),
                    }
                }
            }
        }
        let ok = may_serve(&raft, &status, limit);
        if *serving.borrow() != ok {
            tracing::info!(serving = ok, leader = ?status.leader, "client service {}", if ok { "resumed" } else { "suspended" });
            let _ = serving.send(ok);
        }
    }
}
