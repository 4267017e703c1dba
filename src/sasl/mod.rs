//! SASL for clients (ZooKeeper's `sasl` request, opcode 102): the JAAS file that names the
//! server's users ([`jaas`]) and the DIGEST-MD5 mechanism ([`digest_md5`]) that checks them,
//! as ZooKeeper's `ZooKeeperSaslServer` runs them. This module knows nothing of connections
//! or sessions: a connection holds a [`Conversation`] and feeds it the client's tokens; what
//! an authenticated client becomes (`sasl:<name>`, super) is the dispatcher's business.

pub mod digest_md5;
pub mod jaas;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// ZooKeeper's DIGEST login module, whose `user_<name>="<password>"` options are the users.
pub const DIGEST_LOGIN_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";

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

/// The server side of SASL as a JAAS section configures it (`Server` by default).
#[derive(Debug, Clone)]
pub struct SaslServer {
    users: Arc<BTreeMap<String, Password>>,
}

impl SaslServer {
    /// Reads section `section` of the JAAS file at `path`. The error says what is wrong
    /// (the caller names the key that pointed here).
    pub fn from_jaas_file(path: &Path, section: &str) -> Result<SaslServer, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let jaas = jaas::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let modules =
            jaas.section(section).ok_or_else(|| format!("{} has no section named {section}", path.display()))?;
        let mut users = BTreeMap::new();
        for m in modules {
            match m.class.as_str() {
                DIGEST_LOGIN_MODULE => {
                    for (k, v) in &m.options {
                        if let Some(name) = k.strip_prefix("user_") {
                            users.insert(name.to_owned(), Password::new(v.clone()));
                        }
                    }
                }
                "com.sun.security.auth.module.Krb5LoginModule" => {
                    return Err(format!(
                        "{}: section {section} uses Kerberos (Krb5LoginModule), which this build of Warden \
                         does not provide yet; refusing to start rather than run without it",
                        path.display()
                    ))
                }
                other => {
                    return Err(format!("{}: section {section}: login module {other} is not supported", path.display()))
                }
            }
        }
        if users.is_empty() {
            return Err(format!(
                "{}: section {section} names no user (DigestLoginModule's user_<name>=\"<password>\" options)",
                path.display()
            ));
        }
        Ok(SaslServer { users: Arc::new(users) })
    }

    /// The mechanisms offered.
    pub fn mechanisms(&self) -> &'static [&'static str] {
        &["DIGEST-MD5"]
    }

    /// A new exchange, for one connection.
    pub fn conversation(&self) -> Conversation {
        Conversation { mech: digest_md5::DigestMd5::new(self.users.clone()) }
    }
}

/// One connection's SASL exchange.
pub struct Conversation {
    mech: digest_md5::DigestMd5,
}

impl Conversation {
    /// Takes the client's next token.
    pub fn step(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        self.mech.step(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = SaslServer::from_jaas_file(&ok, "Server").unwrap();
        assert_eq!(s.users.get("bob").map(|p| p.expose()), Some("pw"));
        assert!(!format!("{s:?}").contains("pw\""));
        let e = SaslServer::from_jaas_file(&ok, "Other").unwrap_err();
        assert!(e.contains("no section named Other"), "{e}");
        let krb = write(
            "krb.conf",
            "Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab=\"/k\" principal=\"zookeeper/h@R\"; };",
        );
        assert!(SaslServer::from_jaas_file(&krb, "Server").unwrap_err().contains("Kerberos"));
        let none = write("none.conf", "Server { org.apache.zookeeper.server.auth.DigestLoginModule required; };");
        assert!(SaslServer::from_jaas_file(&none, "Server").unwrap_err().contains("names no user"));
        assert!(SaslServer::from_jaas_file(&dir.join("missing"), "Server").unwrap_err().contains("cannot read"));
        let bad = write("bad.conf", "Server {");
        assert!(SaslServer::from_jaas_file(&bad, "Server").unwrap_err().contains("bad.conf: line 1"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
