//! SASL for clients (ZooKeeper's `sasl` request, opcode 102): the JAAS file that configures
//! the server ([`jaas`]), the DIGEST-MD5 mechanism ([`digest_md5`]) that checks its users, and
//! Kerberos GSSAPI (`gssapi`, with the `kerberos` feature) that checks tickets against its
//! keytab, as ZooKeeper's `ZooKeeperSaslServer` runs them, and how a Kerberos principal
//! becomes a `sasl` id (ZooKeeper's `kerberos.remove*FromPrincipal`). This module knows nothing of connections
//! or sessions: a connection holds a [`Conversation`] and feeds it the client's tokens; what
//! an authenticated client becomes (`sasl:<name>`, super) is the dispatcher's business.

pub mod digest_md5;
#[cfg(feature = "kerberos")]
pub mod gssapi;
pub mod jaas;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// ZooKeeper's DIGEST login module, whose `user_<name>="<password>"` options are the users.
pub const DIGEST_LOGIN_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";
/// Java's Kerberos login module: `keyTab` and `principal` are the server's identity.
pub const KRB5_LOGIN_MODULE: &str = "com.sun.security.auth.module.Krb5LoginModule";

/// How a Kerberos principal becomes a `sasl` id (ZooKeeper's
/// `SaslServerCallbackHandler` with its default name rule): a principal of the default realm
/// keeps its host part unless `kerberos.removeHostFromPrincipal` and its realm unless
/// `kerberos.removeRealmFromPrincipal`; a principal of another realm stays whole (ZooKeeper's
/// rule matches nothing there, so its realm can never be stripped into a local name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameRules {
    pub remove_host: bool,
    pub remove_realm: bool,
    /// The default realm of the krb5.conf the process uses.
    pub default_realm: Option<String>,
}

impl NameRules {
    pub fn sasl_id(&self, principal: &str) -> String {
        let (name, realm) = match principal.rsplit_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (principal, None),
        };
        if realm.is_some() && realm != self.default_realm.as_deref() {
            return principal.to_owned();
        }
        let (short, host) = match name.split_once('/') {
            Some((s, h)) => (s, Some(h)),
            None => (name, None),
        };
        let mut id = short.to_owned();
        if let (Some(h), false) = (host, self.remove_host) {
            id.push('/');
            id.push_str(h);
        }
        if let (Some(r), false) = (realm, self.remove_realm) {
            id.push('@');
            id.push_str(r);
        }
        id
    }
}

/// The default realm (`[libdefaults] default_realm`) of `krb5_conf`, or of the krb5.conf MIT
/// Kerberos reads (`KRB5_CONFIG`'s first file, or /etc/krb5.conf).
pub fn default_realm(krb5_conf: Option<&Path>) -> Option<String> {
    let path = match krb5_conf {
        Some(p) => p.to_path_buf(),
        None => std::path::PathBuf::from(
            std::env::var("KRB5_CONFIG")
                .ok()
                .and_then(|v| v.split(':').next().map(str::to_owned))
                .unwrap_or_else(|| "/etc/krb5.conf".to_owned()),
        ),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let mut in_libdefaults = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_libdefaults = line == "[libdefaults]";
        } else if in_libdefaults {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == "default_realm" {
                    return Some(v.trim().to_owned());
                }
            }
        }
    }
    None
}

/// The server's Kerberos identity from a `Krb5LoginModule` entry.
#[derive(Debug, Clone)]
pub struct Kerberos {
    pub keytab: std::path::PathBuf,
    pub principal: String,
    pub rules: NameRules,
}

/// A password from the JAAS file; never printed.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn new(s: String) -> Password {
        Password(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    /// Wrong credentials.
    #[error("authentication failed: {0}")]
    Failed(String),
    /// A token that does not follow the mechanism.
    #[error("protocol violation: {0}")]
    Protocol(String),
}

/// What the server answers a token with.
#[derive(Debug)]
pub enum Step {
    /// The exchange goes on: send this challenge.
    Continue(Vec<u8>),
    /// The client is authenticated as `authorized`; send `reply` (if any) as the last token.
    Done { reply: Option<Vec<u8>>, authorized: String },
}

/// The server side of SASL as a JAAS section configures it (`Server` by default): DIGEST-MD5
/// users, a Kerberos identity, or both (a client's first token says which it speaks: empty
/// for DIGEST-MD5, a Kerberos ticket for GSSAPI).
#[derive(Clone)]
pub struct SaslServer {
    users: Arc<BTreeMap<String, Password>>,
    kerberos: Option<Kerberos>,
    #[cfg(feature = "kerberos")]
    acceptor: Option<libgssapi::credential::Cred>,
}

impl std::fmt::Debug for SaslServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslServer")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("kerberos", &self.kerberos)
            .finish()
    }
}

impl SaslServer {
    /// Reads section `section` of the JAAS file at `path`. The error says what is wrong
    /// (the caller names the key that pointed here).
    pub fn from_jaas_file(path: &Path, section: &str, rules: NameRules) -> Result<SaslServer, String> {
        Self::from_jaas(path, &jaas::read(path)?, section, rules)
    }

    /// Section `section` of `jaas`, read from `path` (named in errors).
    fn from_jaas(path: &Path, jaas: &jaas::Jaas, section: &str, rules: NameRules) -> Result<SaslServer, String> {
        let modules =
            jaas.section(section).ok_or_else(|| format!("{} has no section named {section}", path.display()))?;
        let mut users = BTreeMap::new();
        let mut kerberos = None;
        for m in modules {
            match m.class.as_str() {
                DIGEST_LOGIN_MODULE => {
                    for (k, v) in &m.options {
                        if let Some(name) = k.strip_prefix("user_") {
                            users.insert(name.to_owned(), Password::new(v.clone()));
                        }
                    }
                }
                KRB5_LOGIN_MODULE => {
                    if !cfg!(feature = "kerberos") {
                        return Err(format!(
                            "{}: section {section} uses Kerberos (Krb5LoginModule) and this Warden was built \
                             without it (cargo build --features kerberos); refusing to start rather than run without it",
                            path.display()
                        ));
                    }
                    let opt = |k: &str| m.options.iter().find(|(o, _)| o == k).map(|(_, v)| v.clone());
                    let need = |k: &str| {
                        opt(k)
                            .filter(|v| !v.is_empty())
                            .ok_or_else(|| format!("{}: section {section}: Krb5LoginModule needs {k}", path.display()))
                    };
                    if opt("useKeyTab").is_some_and(|v| !v.eq_ignore_ascii_case("true")) {
                        return Err(format!(
                            "{}: section {section}: a server's Krb5LoginModule must use a keytab (useKeyTab=true)",
                            path.display()
                        ));
                    }
                    kerberos = Some(Kerberos {
                        keytab: std::path::PathBuf::from(need("keyTab")?),
                        principal: need("principal")?,
                        rules: rules.clone(),
                    });
                }
                other => {
                    return Err(format!("{}: section {section}: login module {other} is not supported", path.display()))
                }
            }
        }
        if users.is_empty() && kerberos.is_none() {
            return Err(format!(
                "{}: section {section} names no user (DigestLoginModule's user_<name>=\"<password>\" options) \
                 and no Kerberos identity",
                path.display()
            ));
        }
        Ok(SaslServer {
            users: Arc::new(users),
            kerberos,
            #[cfg(feature = "kerberos")]
            acceptor: None,
        })
    }

    /// The Kerberos identity, if the section has one.
    pub fn kerberos(&self) -> Option<&Kerberos> {
        self.kerberos.as_ref()
    }

    /// Loads the Kerberos acceptor credentials from the keytab (which the process must already
    /// be pointed at: `KRB5_KTNAME`). The error says why they cannot be used.
    #[cfg(feature = "kerberos")]
    pub fn load_kerberos(&mut self) -> Result<(), String> {
        if let Some(k) = &self.kerberos {
            if let Err(e) = std::fs::File::open(&k.keytab) {
                return Err(format!("keyTab {}: {e}", k.keytab.display()));
            }
            self.acceptor = Some(gssapi::acceptor(&k.principal)?);
        }
        Ok(())
    }

    /// The mechanisms offered.
    pub fn mechanisms(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if !self.users.is_empty() {
            m.push("DIGEST-MD5");
        }
        if self.kerberos.is_some() {
            m.push("GSSAPI");
        }
        m
    }

    /// A new exchange, for one connection.
    pub fn conversation(&self) -> Conversation {
        Conversation { server: self.clone(), mech: Mech::Unchosen }
    }
}

/// Whether the JAAS file at `path` can be read and has section `name`.
pub fn has_section(path: &Path, name: &str) -> bool {
    jaas::read(path).is_ok_and(|j| j.section(name).is_some())
}

/// Members authenticating each other (ZooKeeper's `quorum.auth.*`) with DIGEST-MD5 or
/// Kerberos: what a member accepts (JAAS `QuorumServer` section: `user_<name>` options, or a
/// Krb5LoginModule keytab and principal) and what it presents (`QuorumLearner` section:
/// `username` and `password`, or a keytab and principal).
#[derive(Debug, Clone)]
pub struct QuorumSasl {
    pub server: SaslServer,
    /// How this member presents itself to another (`QuorumLearner`).
    pub learner: LearnerIdentity,
    /// `quorum.auth.kerberos.servicePrincipal` (default `zkquorum/localhost`): the principal a
    /// Kerberos learner asks a ticket for; `_HOST` becomes the other member's host.
    pub service_principal: String,
    /// `quorum.auth.serverRequireSasl`: a member that does not authenticate is refused.
    pub server_require: bool,
    /// `quorum.auth.learnerRequireSasl`: never talk to a member that does not take SASL.
    pub learner_require: bool,
    /// The hosts of the `server.N` lines: a member authenticating with Kerberos must be
    /// `<service>/<one of them>@REALM` (ZooKeeper's `SaslQuorumServerCallbackHandler`).
    pub member_hosts: std::collections::BTreeSet<String>,
}

impl QuorumSasl {
    /// Whether a member that authenticated with Kerberos as `principal` is one of the
    /// ensemble's. ZooKeeper checks the host of a three-part principal against the members'
    /// hosts and lets a two-part one (`user@REALM`) through, so any user of the realm could
    /// join; Warden takes only three-part principals with a member's host.
    pub fn member_principal(&self, principal: &str) -> bool {
        let parts: Vec<&str> = principal.split(['/', '@']).collect();
        parts.len() == 3 && self.member_hosts.contains(parts[1])
    }
}

/// A member's `QuorumLearner` identity.
#[derive(Clone)]
pub enum LearnerIdentity {
    /// DigestLoginModule's `username` and `password`.
    Digest { user: String, password: Password },
    /// Krb5LoginModule's `principal` and `keyTab`; the initiator credentials once loaded.
    Kerberos {
        principal: String,
        keytab: std::path::PathBuf,
        #[cfg(feature = "kerberos")]
        cred: Option<libgssapi::credential::Cred>,
    },
}

impl std::fmt::Debug for LearnerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LearnerIdentity::Digest { user, .. } => write!(f, "Digest({user})"),
            LearnerIdentity::Kerberos { principal, .. } => write!(f, "Kerberos({principal})"),
        }
    }
}

impl QuorumSasl {
    /// Reads the two sections of the JAAS file at `path`; the error says what is wrong.
    pub fn from_jaas_file(
        path: &Path,
        server_section: &str,
        learner_section: &str,
        server_require: bool,
        learner_require: bool,
    ) -> Result<QuorumSasl, String> {
        let jaas = jaas::read(path)?;
        let server = SaslServer::from_jaas(path, &jaas, server_section, NameRules::default())?;
        let modules = jaas
            .section(learner_section)
            .ok_or_else(|| format!("{} has no section named {learner_section}", path.display()))?;
        let module =
            modules.first().ok_or_else(|| format!("{}: section {learner_section} is empty", path.display()))?;
        let opt =
            |k: &str| module.options.iter().find(|(o, _)| o == k).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
        let need = |k: &str| {
            opt(k).ok_or_else(|| format!("{}: section {learner_section}: {} needs {k}", path.display(), module.class))
        };
        let learner = match module.class.as_str() {
            DIGEST_LOGIN_MODULE => {
                LearnerIdentity::Digest { user: need("username")?, password: Password::new(need("password")?) }
            }
            KRB5_LOGIN_MODULE if cfg!(feature = "kerberos") => {
                if opt("useKeyTab").is_some_and(|v| !v.eq_ignore_ascii_case("true")) {
                    return Err(format!(
                        "{}: section {learner_section}: a member's Krb5LoginModule must use a keytab (useKeyTab=true)",
                        path.display()
                    ));
                }
                LearnerIdentity::Kerberos {
                    principal: need("principal")?,
                    keytab: std::path::PathBuf::from(need("keyTab")?),
                    #[cfg(feature = "kerberos")]
                    cred: None,
                }
            }
            KRB5_LOGIN_MODULE => {
                return Err(format!(
                "{}: section {learner_section} uses Kerberos (Krb5LoginModule) and this Warden was built without it \
                     (cargo build --features kerberos); refusing to start rather than run without it",
                path.display()
            ))
            }
            other => {
                return Err(format!(
                    "{}: section {learner_section}: login module {other} is not supported",
                    path.display()
                ))
            }
        };
        Ok(QuorumSasl {
            server,
            learner,
            service_principal: "zkquorum/localhost".to_owned(),
            server_require,
            learner_require,
            member_hosts: Default::default(),
        })
    }

    /// The keytab a Kerberos learner takes its ticket with, if it is one.
    pub fn learner_keytab(&self) -> Option<&Path> {
        match &self.learner {
            LearnerIdentity::Kerberos { keytab, .. } => Some(keytab),
            LearnerIdentity::Digest { .. } => None,
        }
    }

    /// Loads both Kerberos identities (the acceptor's keys, the learner's ticket), so that a
    /// keytab that does not work stops start-up. The process must already be pointed at
    /// the keytabs (`KRB5_KTNAME`, `KRB5_CLIENT_KTNAME`).
    #[cfg(feature = "kerberos")]
    pub fn load_kerberos(&mut self) -> Result<(), String> {
        self.server.load_kerberos()?;
        if let LearnerIdentity::Kerberos { principal, keytab, cred } = &mut self.learner {
            if let Err(e) = std::fs::File::open(&*keytab) {
                return Err(format!("keyTab {}: {e}", keytab.display()));
            }
            *cred = Some(gssapi::initiator(principal)?);
        }
        Ok(())
    }

    /// A client exchange, as this member presents itself to the member at `host`.
    pub fn learner(&self, host: &str) -> Result<LearnerClient, SaslError> {
        match &self.learner {
            LearnerIdentity::Digest { user, password } => {
                Ok(LearnerClient::Digest(digest_md5::DigestClient::new(user.clone(), password.clone())))
            }
            #[cfg(feature = "kerberos")]
            LearnerIdentity::Kerberos { cred, principal, .. } => {
                let cred = match cred {
                    Some(c) => c.clone(),
                    None => gssapi::initiator(principal).map_err(SaslError::Failed)?,
                };
                let target = self.service_principal.replace("_HOST", host);
                Ok(LearnerClient::Gssapi(Box::new(gssapi::GssClient::new(cred, &target)?)))
            }
            #[cfg(not(feature = "kerberos"))]
            LearnerIdentity::Kerberos { .. } => {
                let _ = host;
                Err(SaslError::Failed("this Warden was built without Kerberos".into()))
            }
        }
    }
}

/// A member's side of an exchange with another member.
pub enum LearnerClient {
    Digest(digest_md5::DigestClient),
    #[cfg(feature = "kerberos")]
    Gssapi(Box<gssapi::GssClient>),
}

impl LearnerClient {
    /// The first token (empty for DIGEST-MD5, the first context token for GSSAPI).
    pub fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        match self {
            LearnerClient::Digest(_) => Ok(Vec::new()),
            #[cfg(feature = "kerberos")]
            LearnerClient::Gssapi(g) => g.first(),
        }
    }

    /// Answers the other member's challenge.
    pub fn respond(&mut self, challenge: &[u8]) -> Result<Vec<u8>, SaslError> {
        match self {
            LearnerClient::Digest(d) => d.respond(challenge),
            #[cfg(feature = "kerberos")]
            LearnerClient::Gssapi(g) => g.respond(challenge),
        }
    }

    /// Checks the other member's last token (DIGEST-MD5's `rspauth`; GSSAPI's mutual
    /// authentication was in the context).
    pub fn verify(&self, last: &[u8]) -> Result<(), SaslError> {
        match self {
            LearnerClient::Digest(d) => d.verify(last),
            #[cfg(feature = "kerberos")]
            LearnerClient::Gssapi(_) => Ok(()),
        }
    }
}

enum Mech {
    Unchosen,
    Digest(digest_md5::DigestMd5),
    #[cfg(feature = "kerberos")]
    Gssapi(Box<gssapi::Gssapi>),
}

/// One connection's SASL exchange.
pub struct Conversation {
    server: SaslServer,
    mech: Mech,
}

impl Conversation {
    /// Takes the client's next token.
    pub fn step(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        if let Mech::Unchosen = self.mech {
            // DIGEST-MD5 starts with an empty token; GSSAPI with the client's first context token.
            self.mech = if token.is_empty() && !self.server.users.is_empty() {
                Mech::Digest(digest_md5::DigestMd5::new(self.server.users.clone()))
            } else {
                self.gssapi()?
            };
        }
        match &mut self.mech {
            Mech::Unchosen => Err(SaslError::Protocol("no mechanism".into())),
            Mech::Digest(d) => d.step(token),
            #[cfg(feature = "kerberos")]
            Mech::Gssapi(g) => match g.step(token)? {
                gssapi::GssStep::Continue(t) => Ok(Step::Continue(t)),
                gssapi::GssStep::Done(principal) => {
                    let rules = self.server.kerberos.as_ref().map(|k| k.rules.clone()).unwrap_or_default();
                    Ok(Step::Done { reply: None, authorized: rules.sasl_id(&principal) })
                }
            },
        }
    }

    #[cfg(feature = "kerberos")]
    fn gssapi(&self) -> Result<Mech, SaslError> {
        match &self.server.acceptor {
            Some(cred) => Ok(Mech::Gssapi(Box::new(gssapi::Gssapi::new(cred.clone())))),
            None => Err(SaslError::Protocol("this server has no Kerberos identity (GSSAPI)".into())),
        }
    }

    /// Whether the exchange is Kerberos (GSSAPI).
    pub fn is_gssapi(&self) -> bool {
        #[cfg(feature = "kerberos")]
        if let Mech::Gssapi(_) = self.mech {
            return true;
        }
        false
    }

    #[cfg(not(feature = "kerberos"))]
    fn gssapi(&self) -> Result<Mech, SaslError> {
        Err(SaslError::Protocol("this server has no Kerberos identity (GSSAPI)".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_become_sasl_ids_as_zookeeper_names_them() {
        let rules = |host, realm| NameRules {
            remove_host: host,
            remove_realm: realm,
            default_realm: Some("EXAMPLE.COM".into()),
        };
        assert_eq!(rules(false, false).sasl_id("bob@EXAMPLE.COM"), "bob@EXAMPLE.COM");
        assert_eq!(rules(false, true).sasl_id("bob@EXAMPLE.COM"), "bob");
        assert_eq!(rules(false, false).sasl_id("svc/host1@EXAMPLE.COM"), "svc/host1@EXAMPLE.COM");
        assert_eq!(rules(true, false).sasl_id("svc/host1@EXAMPLE.COM"), "svc@EXAMPLE.COM");
        assert_eq!(rules(true, true).sasl_id("svc/host1@EXAMPLE.COM"), "svc");
        // Another realm is never stripped into a local name.
        assert_eq!(rules(true, true).sasl_id("bob@EVIL.ORG"), "bob@EVIL.ORG");
        assert_eq!(NameRules::default().sasl_id("bob@EXAMPLE.COM"), "bob@EXAMPLE.COM");
        assert_eq!(rules(true, true).sasl_id("bob"), "bob");
    }

    #[test]
    fn jaas_sections_become_users_or_clear_errors() {
        let dir = std::env::temp_dir().join(format!("warden-sasl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let ok = write(
            "ok.conf",
            "Server { org.apache.zookeeper.server.auth.DigestLoginModule required user_bob=\"pw\"; };",
        );
        let s = SaslServer::from_jaas_file(&ok, "Server", NameRules::default()).unwrap();
        assert_eq!(s.users.get("bob").map(|p| p.expose()), Some("pw"));
        assert!(!format!("{s:?}").contains("pw\""));
        let e = SaslServer::from_jaas_file(&ok, "Other", NameRules::default()).unwrap_err();
        assert!(e.contains("no section named Other"), "{e}");
        let krb = write(
            "krb.conf",
            "Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab=\"/k\" principal=\"zookeeper/h@R\"; };",
        );
        match SaslServer::from_jaas_file(&krb, "Server", NameRules::default()) {
            Ok(s) if cfg!(feature = "kerberos") => {
                assert_eq!(s.kerberos().map(|k| k.principal.as_str()), Some("zookeeper/h@R"));
                assert_eq!(s.mechanisms(), vec!["GSSAPI"]);
            }
            Err(e) if !cfg!(feature = "kerberos") => assert!(e.contains("--features kerberos"), "{e}"),
            other => panic!("{other:?}"),
        }
        if cfg!(feature = "kerberos") {
            let no_keytab = write(
                "nokt.conf",
                "Server { com.sun.security.auth.module.Krb5LoginModule required principal=\"p@R\"; };",
            );
            assert!(SaslServer::from_jaas_file(&no_keytab, "Server", NameRules::default())
                .unwrap_err()
                .contains("needs keyTab"));
        }
        let none = write("none.conf", "Server { org.apache.zookeeper.server.auth.DigestLoginModule required; };");
        assert!(SaslServer::from_jaas_file(&none, "Server", NameRules::default())
            .unwrap_err()
            .contains("names no user"));
        assert!(SaslServer::from_jaas_file(&dir.join("missing"), "Server", NameRules::default())
            .unwrap_err()
            .contains("cannot read"));
        let bad = write("bad.conf", "Server {");
        assert!(SaslServer::from_jaas_file(&bad, "Server", NameRules::default())
            .unwrap_err()
            .contains("bad.conf: line 1"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
