//! Sessions as a connection sees them: the handshake (`ZooKeeperServer.processConnectRequest`:
//! refuse a client that has seen newer state, negotiate the timeout, create the session
//! through the log or resume it by id and password), attaching a connection to its session
//! (liveness and watch delivery), `addauth`, and the admin kill.

use std::net::SocketAddr;

use bytes::Bytes;
use futures::channel::mpsc::UnboundedSender;
use jute::ErrorCode;
use tokio::sync::oneshot;

use super::Caller;
use super::Dispatcher;
use super::Event;
use crate::raft::ProposeError;
use crate::tree::acl::AuthId;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;

/// How long a follower waits for the leader's revalidation of a resumed session, and then
/// to apply what the leader had.
const VALIDATE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A session a connection may serve.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: i64,
    pub passwd: Bytes,
    /// The negotiated timeout, ms.
    pub timeout: i32,
    /// Resumed from an earlier connection: it may hold watches already.
    pub resumed: bool,
    /// Served read-only (`readonlymode.enabled`, this member without a quorum): reads only,
    /// until the member serves again, when the connection is closed so the client comes
    /// back for a full session.
    pub read_only: bool,
}

/// Why a handshake is refused without an answer (the client tries another server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This server serves no clients now (no leader, or no quorum).
    NoQuorum,
    /// The client has seen a newer zxid than this server has applied.
    ClientAhead { client: i64, server: i64 },
    /// Creating the session through the log failed.
    NotCreated,
}

/// How a handshake ended.
pub enum Connected {
    /// Serve this session, on behalf of this caller.
    Established(Session, Caller),
    /// The session is unknown or its password is wrong: answer with an expired session.
    Expired,
    /// Close without an answer.
    Refused(Refusal),
}

impl Dispatcher {
    /// The handshake of a connection from `peer`.
    /// `certified`: the subject DN of the client's verified TLS certificate, if it sent one;
    /// the session's caller is then also `x509:<DN>` (and `super` when the DN is
    /// `zookeeper.X509AuthenticationProvider.superUser`), as ZooKeeper's
    /// `X509AuthenticationProvider` makes it on a TLS handshake.
    pub async fn connect(&self, req: &jute::ConnectRequest, peer: SocketAddr, certified: Option<&str>) -> Connected {
        if !*self.0.serving.borrow() || !self.0.raft.may_serve() {
            // ZooKeeper does not serve clients without a quorum, nor before a follower has
            // synced with its leader; they try the next server. With readonlymode.enabled a
            // client that allows it gets a read-only session.
            if self.0.config.readonly_mode && req.read_only == Some(true) && req.last_zxid_seen <= self.last_zxid() {
                return self.connect_read_only(req, peer, certified);
            }
            return Connected::Refused(Refusal::NoQuorum);
        }
        // ZooKeeperServer.processConnectRequest: never serve a client that has seen newer state.
        let server = self.last_zxid();
        if req.last_zxid_seen > server {
            return Connected::Refused(Refusal::ClientAhead { client: req.last_zxid_seen, server });
        }
        let timeout = self.0.config.negotiate_timeout(req.time_out);
        let ids = self.identities(peer, certified);
        if req.session_id == 0 {
            let id = self.0.sessions.next_id();
            // ZooKeeper's password for this id (`ZooKeeperServer.generatePasswd`), so the session
            // survives an export back to ZooKeeper, which recomputes passwords from ids.
            let passwd = Bytes::copy_from_slice(&crate::zkdata::password::session_password(id));
            let caller = Caller { session_id: id, auth: ids };
            if self.local_sessions() {
                // ZooKeeper's local session: this member only, no log entry (see `upgrade`).
                self.0.sessions.create_local(id, timeout, passwd.clone());
                metrics::counter!("warden_sessions_created").increment(1);
                return Connected::Established(
                    Session { id, passwd, timeout, resumed: false, read_only: false },
                    caller,
                );
            }
            let txn =
                self.txn(&caller, TxnOp::CreateSession { session_id: id, timeout_ms: timeout, passwd: passwd.clone() });
            return match self.propose(txn).await {
                Ok(r) if r.outcome.is_ok() => {
                    metrics::counter!("warden_sessions_created").increment(1);
                    Connected::Established(Session { id, passwd, timeout, resumed: false, read_only: false }, caller)
                }
                other => {
                    tracing::warn!(%peer, ?other, "session creation failed");
                    Connected::Refused(Refusal::NotCreated)
                }
            };
        }
        // A follower revalidates a resumed session with the leader first (ZooKeeper's
        // `Learner.validateSession`): it may not have applied yet the expiry (or, the other
        // way, the creation) of a session a client brings from another member. A local
        // session is this member's alone.
        let local = self.0.sessions.is_local(req.session_id);
        if !local && !self.0.raft.options().standalone && !self.0.raft.is_leader() {
            match self.validate_with_leader(req.session_id).await {
                Ok(true) => {}
                Ok(false) => return Connected::Expired,
                Err(why) => {
                    tracing::debug!(%peer, reason = %why, "session not revalidated with the leader; closing");
                    return Connected::Refused(Refusal::NoQuorum);
                }
            }
        }
        let resumed = self.resume(req, ids, timeout, false);
        if !local && matches!(resumed, Connected::Established(..)) && self.0.raft.is_leader() {
            // The session is this member's now (a follower's revalidation says the same).
            self.0.sessions.moved_to(req.session_id, self.0.raft.id());
        }
        resumed
    }

    /// A session the client brings back: this member's table must hold it, with the password
    /// the client gives.
    fn resume(
        &self,
        req: &jute::ConnectRequest,
        ids: std::sync::Arc<[AuthId]>,
        timeout: i32,
        read_only: bool,
    ) -> Connected {
        let known = self.0.shared.read().session(req.session_id).map(|s| s.passwd.clone());
        let known = known.or_else(|| self.0.sessions.local_session(req.session_id).map(|(_, pw)| pw));
        match known {
            Some(pw) if pw == req.passwd => {
                let caller = Caller { session_id: req.session_id, auth: ids };
                Connected::Established(
                    Session { id: req.session_id, passwd: pw, timeout, resumed: true, read_only },
                    caller,
                )
            }
            _ => Connected::Expired,
        }
    }

    /// A new connection's identities: `ip:<addr>`, and with a verified client certificate
    /// `x509:<DN>` (and `super` for the x509 super user).
    fn identities(&self, peer: SocketAddr, certified: Option<&str>) -> std::sync::Arc<[AuthId]> {
        let mut ids = vec![AuthId { scheme: "ip".into(), id: peer.ip().to_string() }];
        if let Some(dn) = certified {
            if self.0.config.tls.x509_super_user.as_deref() == Some(dn) {
                ids.push(AuthId { scheme: "super".into(), id: dn.to_owned() });
            }
            ids.push(AuthId { scheme: "x509".into(), id: dn.to_owned() });
        }
        ids.into()
    }

    /// A read-only session (ZooKeeper's `ReadOnlyZooKeeperServer`): a session this member's
    /// table holds (its password checked) goes on read-only; a new one lives on this member
    /// only, is never replicated, and ends with its connection.
    fn connect_read_only(&self, req: &jute::ConnectRequest, peer: SocketAddr, certified: Option<&str>) -> Connected {
        let timeout = self.0.config.negotiate_timeout(req.time_out);
        let ids = self.identities(peer, certified);
        if req.session_id == 0 {
            let id = self.0.sessions.next_id();
            let passwd = Bytes::copy_from_slice(&crate::zkdata::password::session_password(id));
            tracing::info!(%peer, session = format_args!("{id:#x}"), "read-only session (no quorum)");
            let caller = Caller { session_id: id, auth: ids };
            return Connected::Established(Session { id, passwd, timeout, resumed: false, read_only: true }, caller);
        }
        self.resume(req, ids, timeout, true)
    }

    /// Asks the leader whether `session` is alive; if it is, waits until this member has
    /// applied what the leader had when it answered, so the local session table has it.
    async fn validate_with_leader(&self, session: i64) -> Result<bool, String> {
        use crate::peer::PeerRequest;
        use crate::peer::PeerResponse;
        let (leader, addr) = self.0.raft.status().leader_addr().ok_or("no leader")?;
        let client = self.0.peers.client(leader, &addr);
        let answer = client.call(PeerRequest::ValidateSessionFrom(session, self.0.raft.id()), VALIDATE_PATIENCE).await;
        match answer.map_err(|e| e.to_string())? {
            PeerResponse::ValidateSession(Ok((false, _))) => Ok(false),
            PeerResponse::ValidateSession(Ok((true, zxid))) => {
                if self.0.shared.wait_applied(zxid, VALIDATE_PATIENCE).await {
                    Ok(true)
                } else {
                    Err(format!("did not apply the leader's zxid {zxid:#x} in time"))
                }
            }
            PeerResponse::ValidateSession(Err(e)) => Err(e),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }

    /// Attaches connection `conn` to the caller's session: the session's liveness is tracked
    /// here, `close` fires when the connection must close (a newer connection took the
    /// session over, or it was closed through the log), and watch events go to `events`.
    pub fn attach(
        &self,
        caller: &Caller,
        timeout: i32,
        conn: u64,
        close: oneshot::Sender<()>,
        events: UnboundedSender<Event>,
    ) {
        self.0.sessions.attach(caller.session_id, timeout, conn, close);
        self.0.watches.connect(caller.session_id, events, caller.auth.clone());
    }

    /// The connection went away: its watches go (if `events` is still the session's), and the
    /// session keeps ticking towards expiry.
    pub fn detach(&self, session_id: i64, conn: u64, events: &UnboundedSender<Event>) {
        self.0.watches.disconnect(session_id, events);
        self.0.sessions.detach(session_id, conn);
    }

    /// Any packet from the session's client.
    pub fn touch(&self, session_id: i64) {
        self.0.sessions.touch(session_id);
    }

    /// `addauth`: adds the identities the scheme grants to the caller, or refuses with
    /// `AuthFailed` (`DigestAuthenticationProvider.handleAuthentication`).
    pub fn add_auth(&self, caller: &mut Caller, scheme: &str, auth: &Bytes) -> Result<(), ErrorCode> {
        let ids = match scheme {
            "digest" => {
                let text = std::str::from_utf8(auth).map_err(|_| ErrorCode::AuthFailed)?;
                let digest = crate::tree::acl::digest(text);
                let mut ids = Vec::new();
                if self.0.config.super_digest.as_deref() == Some(digest.as_str()) {
                    ids.push(AuthId { scheme: "super".into(), id: String::new() });
                }
                ids.push(AuthId { scheme: "digest".into(), id: digest });
                ids
            }
            _ => return Err(ErrorCode::AuthFailed),
        };
        self.grant(caller, ids);
        Ok(())
    }

    /// Adds identities to the caller (and to its watches' view of it).
    fn grant(&self, caller: &mut Caller, ids: Vec<AuthId>) {
        let mut all = caller.auth.to_vec();
        for id in ids {
            if !all.contains(&id) {
                all.push(id);
            }
        }
        caller.auth = all.into();
        self.0.watches.set_auth(caller.session_id, caller.auth.clone());
    }

    /// One `sasl` request (ZooKeeper's `processSasl`): the next step of the connection's
    /// exchange (begun here at its first token). Done, the caller is also `sasl:<name>`, and
    /// `super` when the name is a `zookeeper.superUser`. `Ok` carries the token to answer
    /// with; `Err` the code to answer with before closing the connection (a failed exchange,
    /// unless `allowSaslFailedClients` keeps an unenforced connection open, unauthenticated).
    pub fn sasl(
        &self,
        caller: &mut Caller,
        exchange: &mut Option<crate::sasl::Conversation>,
        token: &[u8],
    ) -> Result<Option<Bytes>, ErrorCode> {
        let config = &self.0.config;
        let Some(server) = &config.sasl else {
            tracing::debug!(session = format_args!("0x{:x}", caller.session_id), "sasl request and no SASL configured");
            return Err(ErrorCode::AuthFailed);
        };
        let step = exchange.get_or_insert_with(|| server.conversation()).step(token);
        match step {
            Ok(crate::sasl::Step::Continue(challenge)) => Ok(Some(Bytes::from(challenge))),
            Ok(crate::sasl::Step::Done { reply, authorized }) => {
                tracing::info!(
                    session = format_args!("0x{:x}", caller.session_id),
                    id = authorized.as_str(),
                    "SASL authenticated"
                );
                let mut ids = Vec::new();
                if config.sasl_super_users.contains(&authorized) {
                    ids.push(AuthId { scheme: "super".into(), id: String::new() });
                }
                ids.push(AuthId { scheme: "sasl".into(), id: authorized });
                self.grant(caller, ids);
                Ok(reply.map(Bytes::from))
            }
            Err(e) => {
                *exchange = None;
                tracing::warn!(session = format_args!("0x{:x}", caller.session_id), error = %e, "SASL authentication failed");
                let required = config.enforce_auth_schemes.iter().any(|s| s == "sasl");
                if config.allow_sasl_failed_clients && !required {
                    return Ok(None);
                }
                Err(if required { ErrorCode::SessionClosedRequireSaslAuth } else { ErrorCode::AuthFailed })
            }
        }
    }

    /// Whether the caller may send requests other than `auth` and `sasl`: with
    /// `enforce.auth.enabled` it must have authenticated with one of the enforced schemes
    /// (ZooKeeper's `AuthenticationHelper.enforceAuthentication`).
    pub fn authenticated_enough(&self, caller: &Caller) -> bool {
        let schemes = &self.0.config.enforce_auth_schemes;
        schemes.is_empty() || caller.auth.iter().any(|i| schemes.contains(&i.scheme))
    }

    /// Whether new sessions start local (`localSessionsEnabled`, on an ensemble member: a
    /// standalone ZooKeeper has no local sessions).
    pub fn local_sessions(&self) -> bool {
        self.0.config.local_sessions && !self.0.raft.options().standalone
    }

    /// Makes the local `session` global before a write that needs it (an ephemeral's owner
    /// must be in the replicated table): its `CreateSession` through the log, as ZooKeeper's
    /// `checkUpgradeSession` does. One at a time; a session already upgraded passes.
    pub(super) async fn upgrade(&self, session: i64) -> Result<(), ErrorCode> {
        let _one = self.0.upgrades.lock().await;
        let Some((timeout_ms, passwd)) = self.0.sessions.local_session(session) else { return Ok(()) };
        let txn = Txn {
            session_id: session,
            time_ms: crate::clock::now_ms(),
            auth: Default::default(),
            op: TxnOp::CreateSession { session_id: session, timeout_ms, passwd },
        };
        match self.propose(txn).await {
            Ok(r) if r.outcome.is_ok() => {
                self.0.sessions.make_global(session);
                tracing::debug!(session = format_args!("{session:#x}"), "local session upgraded to global");
                Ok(())
            }
            other => {
                tracing::warn!(session = format_args!("{session:#x}"), ?other, "local session upgrade failed");
                Err(ErrorCode::ConnectionLoss)
            }
        }
    }

    /// The admin `restore`: checks that `snapshot` (a ZooKeeper snapshot file's bytes) reads
    /// whole, then replaces the tree with it on every replica through the log, sessions kept
    /// (see `DataTree::restore_onto`). The zxid it was applied at.
    pub async fn restore(&self, snapshot: Bytes) -> Result<i64, RestoreError> {
        let check = snapshot.clone();
        let checked = tokio::task::spawn_blocking(move || {
            crate::zkdata::import::snapshot_tree(&check, std::path::Path::new("the uploaded snapshot"))
                .map(|t| (t.node_count(), t.last_zxid()))
        })
        .await
        .map_err(|e| RestoreError::Unreadable(e.to_string()))?
        .map_err(|e| RestoreError::Unreadable(e.to_string()))?;
        let txn = Txn {
            session_id: 0,
            time_ms: crate::clock::now_ms(),
            auth: Default::default(),
            op: TxnOp::Restore { snapshot },
        };
        let result = self.propose(txn).await.map_err(RestoreError::Propose)?;
        match result.outcome {
            Ok(_) => {
                tracing::warn!(
                    znodes = checked.0,
                    snapshot_zxid = checked.1,
                    zxid = result.zxid,
                    "restored a snapshot through the admin API"
                );
                Ok(result.zxid)
            }
            Err(e) => Err(RestoreError::Unreadable(format!("refused when applied: {e}"))),
        }
    }

    /// Expires a session through the log (admin kill): its ephemerals are deleted on every
    /// replica, watchers are told, and its connection is closed so the client learns it is
    /// expired when it reconnects. `Ok(false)` if there is no such session.
    pub async fn kill_session(&self, session_id: i64) -> Result<bool, ProposeError> {
        if self.0.shared.read().session(session_id).is_none() {
            return Ok(false);
        }
        let txn = Txn {
            session_id: 0,
            time_ms: crate::clock::now_ms(),
            auth: Default::default(),
            op: TxnOp::CloseSession { session_id },
        };
        let result = self.propose(txn).await?;
        self.0.sessions.remove(session_id);
        tracing::info!(session = format_args!("{session_id:#x}"), "session killed by the admin API");
        Ok(result.outcome.is_ok())
    }
}

/// Why an admin `restore` did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("not a usable ZooKeeper snapshot: {0}")]
    Unreadable(String),
    #[error("not replicated: {0}")]
    Propose(ProposeError),
}
