//! The server side of SASL GSSAPI (RFC 4752) with Kerberos 5 through the system's MIT
//! GSS-API (`libgssapi`), as Java's `GssKrb5Server` runs it for ZooKeeper: context tokens
//! until the context is established (its last token carries mutual authentication), then one
//! wrapped round that settles the security layer (only "none": ZooKeeper's default quality of
//! protection, `auth`).

use libgssapi::context::SecurityContext;
use libgssapi::context::ServerCtx;
use libgssapi::credential::Cred;
use libgssapi::credential::CredUsage;
use libgssapi::name::Name;
use libgssapi::oid::OidSet;
use libgssapi::oid::GSS_MECH_KRB5;
use libgssapi::oid::GSS_NT_KRB5_PRINCIPAL;

use super::SaslError;

/// RFC 4752 security layer bit: no security layer.
const LAYER_NONE: u8 = 1;
/// The largest message the server takes, as Java's server announces it (65536).
const MAX_BUFFER: [u8; 3] = [0x01, 0x00, 0x00];

/// Acceptor credentials for `principal` from the keytab the process was pointed at
/// (`KRB5_KTNAME`, set before any thread starts).
pub fn acceptor(principal: &str) -> Result<Cred, String> {
    credentials(principal, CredUsage::Accept).map_err(|e| format!("no key for {principal} in the keytab: {e}"))
}

/// Kerberos credentials of `principal` for `usage`.
fn credentials(principal: &str, usage: CredUsage) -> Result<Cred, String> {
    let name = Name::new(principal.as_bytes(), Some(&GSS_NT_KRB5_PRINCIPAL))
        .map_err(|e| format!("principal {principal}: {e}"))?;
    let mut mechs = OidSet::new().map_err(|e| e.to_string())?;
    mechs.add(&GSS_MECH_KRB5).map_err(|e| e.to_string())?;
    Cred::acquire(Some(&name), None, usage, Some(&mechs)).map_err(|e| e.to_string())
}

enum State {
    Context,
    /// The context is established and the client has our last context token: it answers
    /// with an empty token, then we offer the security layers.
    Established,
    Offered,
    Done,
}

/// One connection's GSSAPI exchange.
pub struct Gssapi {
    ctx: ServerCtx,
    state: State,
}

impl Gssapi {
    pub fn new(cred: Cred) -> Gssapi {
        Gssapi { ctx: ServerCtx::new(Some(cred)), state: State::Context }
    }

    /// Takes the client's next token; done, the client's principal (e.g. `bob@EXAMPLE.COM`).
    pub fn step(&mut self, token: &[u8]) -> Result<GssStep, SaslError> {
        let failed = |what: &str, e: libgssapi::error::Error| SaslError::Failed(format!("{what}: {e}"));
        match std::mem::replace(&mut self.state, State::Done) {
            State::Context => {
                let out = self.ctx.step(token).map_err(|e| failed("GSSAPI context", e))?;
                if !self.ctx.is_complete() {
                    self.state = State::Context;
                    return Ok(GssStep::Continue(out.map(|b| b.to_vec()).unwrap_or_default()));
                }
                match out {
                    // Java's server and client: the context's last token (mutual
                    // authentication), answered with an empty token.
                    Some(b) if !b.is_empty() => {
                        self.state = State::Established;
                        Ok(GssStep::Continue(b.to_vec()))
                    }
                    _ => self.offer(),
                }
            }
            State::Established => {
                if !token.is_empty() {
                    return Err(SaslError::Protocol("expected an empty token after the context".into()));
                }
                self.offer()
            }
            State::Offered => {
                let plain = self.ctx.unwrap(token).map_err(|e| failed("unwrapping the layer choice", e))?;
                if plain.len() < 4 {
                    return Err(SaslError::Protocol("the security layer choice is shorter than 4 bytes".into()));
                }
                if plain[0] != LAYER_NONE {
                    return Err(SaslError::Protocol(format!(
                        "security layer {:#x} was not offered (only none)",
                        plain[0]
                    )));
                }
                let principal = self.ctx.source_name().map_err(|e| failed("the client's name", e))?.to_string();
                Ok(GssStep::Done(principal))
            }
            State::Done => Err(SaslError::Protocol("GSSAPI authentication is already complete".into())),
        }
    }

    /// The wrapped offer: layer "none", our max buffer (RFC 4752 3.1).
    fn offer(&mut self) -> Result<GssStep, SaslError> {
        let offer = [LAYER_NONE, MAX_BUFFER[0], MAX_BUFFER[1], MAX_BUFFER[2]];
        let wrapped = self
            .ctx
            .wrap(false, &offer)
            .map_err(|e| SaslError::Failed(format!("wrapping the security layer offer: {e}")))?;
        self.state = State::Offered;
        Ok(GssStep::Continue(wrapped.to_vec()))
    }
}

/// What [`Gssapi::step`] gives.
pub enum GssStep {
    Continue(Vec<u8>),
    Done(String),
}

/// Initiator credentials for `principal`: MIT Kerberos gets its ticket with the client keytab
/// the process was pointed at (`KRB5_CLIENT_KTNAME`, set before any thread starts), as
/// Java's `Krb5LoginModule` does with `useKeyTab=true` for a member's `QuorumLearner`.
pub fn initiator(principal: &str) -> Result<Cred, String> {
    credentials(principal, CredUsage::Initiate).map_err(|e| format!("no ticket for {principal} from its keytab: {e}"))
}

enum ClientState {
    Context,
    /// The context is up: the next challenge is the server's wrapped security-layer offer.
    Established,
    Done,
}

/// The client side of SASL GSSAPI (Java's `GssKrb5Client`), for a member authenticating to
/// another: context tokens with mutual authentication, then security layer "none".
pub struct GssClient {
    ctx: libgssapi::context::ClientCtx,
    state: ClientState,
}

impl GssClient {
    /// A client for the service `target` (e.g. `zkquorum/host1@EXAMPLE.COM`).
    pub fn new(cred: Cred, target: &str) -> Result<GssClient, SaslError> {
        let name = Name::new(target.as_bytes(), Some(&GSS_NT_KRB5_PRINCIPAL))
            .map_err(|e| SaslError::Failed(format!("service principal {target}: {e}")))?;
        let flags = libgssapi::context::CtxFlags::GSS_C_MUTUAL_FLAG;
        Ok(GssClient {
            ctx: libgssapi::context::ClientCtx::new(Some(cred), name, flags, Some(&GSS_MECH_KRB5)),
            state: ClientState::Context,
        })
    }

    /// The first token: the client's first context token.
    pub fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        let out = self.ctx.step(None, None).map_err(|e| SaslError::Failed(format!("GSSAPI context: {e}")))?;
        Ok(out.map(|b| b.to_vec()).unwrap_or_default())
    }

    /// Answers the server's next challenge.
    pub fn respond(&mut self, challenge: &[u8]) -> Result<Vec<u8>, SaslError> {
        match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::Context => {
                let out = self
                    .ctx
                    .step(Some(challenge), None)
                    .map_err(|e| SaslError::Failed(format!("GSSAPI context: {e}")))?;
                self.state = if self.ctx.is_complete() { ClientState::Established } else { ClientState::Context };
                // Once the context is up, an empty token asks for the layer offer.
                Ok(out.map(|b| b.to_vec()).unwrap_or_default())
            }
            ClientState::Established => {
                let offer = self
                    .ctx
                    .unwrap(challenge)
                    .map_err(|e| SaslError::Failed(format!("unwrapping the security layer offer: {e}")))?;
                if offer.len() < 4 || offer[0] & LAYER_NONE == 0 {
                    return Err(SaslError::Protocol("the server offers no security layer \"none\"".into()));
                }
                let choice = [LAYER_NONE, MAX_BUFFER[0], MAX_BUFFER[1], MAX_BUFFER[2]];
                let wrapped = self
                    .ctx
                    .wrap(false, &choice)
                    .map_err(|e| SaslError::Failed(format!("wrapping the security layer choice: {e}")))?;
                Ok(wrapped.to_vec())
            }
            ClientState::Done => Err(SaslError::Protocol("GSSAPI authentication is already complete".into())),
        }
    }
}
