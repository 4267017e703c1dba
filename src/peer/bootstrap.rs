//! How the members of a new ensemble agree on its first state, when some start on Apache
//! ZooKeeper data dirs: before Raft starts, each new member tells the others the last zxid of
//! the ZooKeeper data it imported (or that it has none), and each decides, from the same
//! answers, the same thing (see [`decide`]):
//!
//! - if any member already runs an initialised group, the new one joins it (and gets the
//!   group's state from its leader; its own ZooKeeper files, if any, are not used);
//! - once every member has answered, the member holding the newest ZooKeeper state (highest
//!   zxid, then highest id) makes it the group's first snapshot and the others join; this
//!   is ZooKeeper's own rule (`FastLeaderElection` picks the highest zxid), taken over every
//!   member, so it never loses a write that a quorum of the old ensemble acknowledged;
//! - if a majority has answered and none of them holds ZooKeeper data, the ensemble is new
//!   and every member initialises the group as usual.
//!
//! Only the importing member may initialise: a member that joins must never initialise a
//! group of its own (a group of one with an empty tree could win an election over the
//! imported state). It records that it joins in [`super::super::raft::layout`]'s bootstrap
//! file before Raft starts, so a restart keeps to the decision.
//!
//! Before Raft starts, [`serve_fresh`] answers the other members' questions on the peer
//! port; after, the peer handler does (`PeerHandler::bootstrap`).

use std::collections::BTreeMap;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use serde::Deserialize;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

use super::codec;
use super::Envelope;
use super::PeerRequest;
use super::PeerResponse;
use super::Peers;
use super::PROTOCOL_VERSION;

/// What a member answers about its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BootstrapState {
    /// It runs an initialised group (or holds the state of one).
    Initialized,
    /// It has no group state yet; this is the last zxid of the ZooKeeper data in its data
    /// dir, if any.
    Fresh { zookeeper_zxid: Option<i64> },
}

/// What a new member does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Initialise the group as a new, empty one (every member does the same).
    Initialize,
    /// Make this member's imported ZooKeeper state the group's first snapshot.
    Import,
    /// Never initialise; take the group's state from its leader.
    Join,
}

/// How often the members are asked again while the answers do not decide yet.
const ASK_EVERY: Duration = Duration::from_millis(200);
/// How long one member's answer is waited for.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// How often the wait is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The decision, given every answer heard so far (`answers`, this member's own included) out
/// of `members` voters. `None` while it cannot be made yet.
pub fn decision(me: u64, members: usize, answers: &BTreeMap<u64, BootstrapState>) -> Option<Decision> {
    if answers.values().any(|a| *a == BootstrapState::Initialized) {
        return Some(Decision::Join);
    }
    let zxids: Vec<(i64, u64)> = answers
        .iter()
        .filter_map(|(id, a)| match a {
            BootstrapState::Fresh { zookeeper_zxid: Some(z) } => Some((*z, *id)),
            _ => None,
        })
        .collect();
    if answers.len() >= members {
        return Some(match zxids.iter().max() {
            None => Decision::Initialize,
            Some((_, winner)) if *winner == me => Decision::Import,
            Some(_) => Decision::Join,
        });
    }
    if zxids.is_empty() && answers.len() > members / 2 {
        return Some(Decision::Initialize);
    }
    None
}

/// Asks the other `members` (voters: id -> peer address) until [`decision`] decides.
pub async fn decide(me: u64, mine: BootstrapState, members: &BTreeMap<u64, String>, peers: &Peers) -> Decision {
    let mut answers: BTreeMap<u64, BootstrapState> = BTreeMap::from([(me, mine)]);
    let mut logged = Instant::now();
    // Why each member that has not answered did not, for the waiting line (a TLS or address
    // mistake shows there).
    let mut why: BTreeMap<u64, String> = BTreeMap::new();
    loop {
        let asks = members.iter().filter(|(id, _)| **id != me && !answers.contains_key(id)).map(|(id, addr)| {
            let client = peers.client(*id, addr);
            async move { (*id, client.call(PeerRequest::Bootstrap, ANSWER_WITHIN).await) }
        });
        for (id, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(PeerResponse::Bootstrap(state)) => {
                    tracing::info!(member = id, ?state, "bootstrap: a member answered");
                    answers.insert(id, state);
                    why.remove(&id);
                }
                Ok(other) => {
                    why.insert(id, format!("unexpected answer {other:?}"));
                }
                Err(e) => {
                    why.insert(id, e.to_string());
                }
            }
        }
        if let Some(d) = decision(me, members.len(), &answers) {
            let newest = answers
                .iter()
                .filter_map(|(id, a)| match a {
                    BootstrapState::Fresh { zookeeper_zxid: Some(z) } => Some((*z, *id)),
                    _ => None,
                })
                .max();
            tracing::info!(decision = ?d, newest_zookeeper_state = ?newest.map(|(z, id)| (format!("{z:#x}"), id)),
                "bootstrap: decided how this member starts");
            return d;
        }
        if logged.elapsed() >= LOG_EVERY {
            let missing: Vec<u64> = members.keys().filter(|id| !answers.contains_key(id)).copied().collect();
            tracing::info!(
                ?missing,
                ?why,
                "bootstrap: waiting for every member to say what ZooKeeper data it holds \
                (a new ensemble with ZooKeeper data starts once all have)"
            );
            logged = Instant::now();
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// Answers bootstrap questions on `listener` with `state` until `stop` fires, then hands the
/// listener back (the peer port proper serves it next). Any other request closes its
/// connection: the asker retries once this member's Raft is up.
pub async fn serve_fresh(
    listener: TcpListener,
    state: BootstrapState,
    security: std::sync::Arc<super::PeerSecurity>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> TcpListener {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut stop => break,
        };
        let Ok((stream, peer)) = accepted else { continue };
        let security = security.clone();
        conns.spawn(async move {
            // The same checks as the peer port's once Raft runs (sslQuorum, SASL and the rest).
            let (r, w) = match super::accept_secure(stream, peer, &security.tls).await {
                Ok(halves) => halves,
                Err(why) => return super::refused(peer, &why),
            };
            let mut reader = FramedRead::new(r, codec());
            let mut writer = FramedWrite::new(w, codec());
            let mut gate = super::Gate::new(&security);
            while let Some(Ok(frame)) = reader.next().await {
                let Ok(env) = postcard::from_bytes::<Envelope<PeerRequest>>(&frame) else { return };
                if env.version != PROTOCOL_VERSION {
                    return;
                }
                let (body, last) = match gate.check(&env.body) {
                    super::Verdict::Serve if matches!(env.body, PeerRequest::Bootstrap) => {
                        (PeerResponse::Bootstrap(state), false)
                    }
                    super::Verdict::Serve => return,
                    super::Verdict::Answer(body) => (body, false),
                    super::Verdict::Refuse(body, why) => {
                        super::refused(peer, &why);
                        match body {
                            Some(body) => (body, true),
                            None => return,
                        }
                    }
                };
                let answer = Envelope { version: PROTOCOL_VERSION, id: env.id, body };
                let Ok(bytes) = postcard::to_stdvec(&answer) else { return };
                if writer.send(Bytes::from(bytes)).await.is_err() || last {
                    return;
                }
            }
        });
    }
    conns.abort_all();
    listener
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(z: Option<i64>) -> BootstrapState {
        BootstrapState::Fresh { zookeeper_zxid: z }
    }

    /// The member with the newest ZooKeeper state imports once all have answered; the others
    /// join; ties go to the higher id.
    #[test]
    fn newest_state_wins_once_all_answered() {
        let answers = BTreeMap::from([(1, fresh(Some(10))), (2, fresh(Some(12))), (3, fresh(None))]);
        assert_eq!(decision(2, 3, &answers), Some(Decision::Import));
        assert_eq!(decision(1, 3, &answers), Some(Decision::Join));
        assert_eq!(decision(3, 3, &answers), Some(Decision::Join));
        let tie = BTreeMap::from([(1, fresh(Some(12))), (2, fresh(Some(12))), (3, fresh(Some(5)))]);
        assert_eq!(decision(2, 3, &tie), Some(Decision::Import));
        assert_eq!(decision(1, 3, &tie), Some(Decision::Join));
    }

    /// With ZooKeeper data somewhere, a majority is not enough: a missing member may hold
    /// the newest state.
    #[test]
    fn with_data_every_member_must_answer() {
        let answers = BTreeMap::from([(1, fresh(Some(10))), (2, fresh(None))]);
        assert_eq!(decision(1, 3, &answers), None);
    }

    /// A new ensemble without ZooKeeper data starts with a majority, as it always did.
    #[test]
    fn no_data_majority_initialises() {
        assert_eq!(decision(1, 3, &BTreeMap::from([(1, fresh(None))])), None);
        assert_eq!(decision(1, 3, &BTreeMap::from([(1, fresh(None)), (3, fresh(None))])), Some(Decision::Initialize));
    }

    /// A running group is joined, whatever this member holds.
    #[test]
    fn a_running_group_is_joined() {
        let answers = BTreeMap::from([(1, fresh(Some(99))), (2, BootstrapState::Initialized)]);
        assert_eq!(decision(1, 3, &answers), Some(Decision::Join));
    }
}
