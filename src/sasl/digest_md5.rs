//! The server side of SASL DIGEST-MD5 (RFC 2831) as ZooKeeper runs it through Java's
//! `DigestMD5Server`: realm `zk-sasl-md5`, digest-uri `zookeeper/zk-sasl-md5`, quality of
//! protection `auth` only (no integrity or confidentiality layer), one challenge, one
//! response, then `rspauth`.

use std::collections::BTreeMap;
use std::sync::Arc;

use md5::Digest;
use md5::Md5;

use super::Password;
use super::SaslError;
use super::Step;

/// The realm and host part of the digest-uri ZooKeeper's server and clients use for
/// DIGEST-MD5 (`SaslServerCallbackHandler`, `ZooKeeperSaslClient`).
pub const REALM: &str = "zk-sasl-md5";
/// The digest-uri a ZooKeeper client sends.
pub const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";

/// One connection's DIGEST-MD5 exchange.
pub struct DigestMd5 {
    users: Arc<BTreeMap<String, Password>>,
    state: State,
}

enum State {
    Start,
    Challenged { nonce: String },
    Done,
}

impl DigestMd5 {
    pub fn new(users: Arc<BTreeMap<String, Password>>) -> DigestMd5 {
        DigestMd5 { users, state: State::Start }
    }

    /// Takes the client's next token.
    pub fn step(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start => {
                if !token.is_empty() {
                    return Err(SaslError::Protocol("DIGEST-MD5 takes no initial response".into()));
                }
                let nonce = new_nonce();
                let challenge =
                    format!("realm=\"{REALM}\",nonce=\"{nonce}\",qop=\"auth\",charset=utf-8,algorithm=md5-sess");
                self.state = State::Challenged { nonce };
                Ok(Step::Continue(challenge.into_bytes()))
            }
            State::Challenged { nonce } => {
                let (user, rspauth) = verify(&self.users, &nonce, token)?;
                Ok(Step::Done { reply: Some(format!("rspauth={rspauth}").into_bytes()), authorized: user })
            }
            State::Done => Err(SaslError::Protocol("DIGEST-MD5 authentication is already complete".into())),
        }
    }
}

/// The client side of an exchange (a member authenticating to another, as ZooKeeper's
/// `QuorumLearner` does): answers the server's challenge, then checks its `rspauth`.
pub struct DigestClient {
    user: String,
    password: Password,
    expected_rspauth: Option<String>,
}

impl DigestClient {
    pub fn new(user: String, password: Password) -> DigestClient {
        DigestClient { user, password, expected_rspauth: None }
    }

    /// The digest-response to the server's challenge.
    pub fn respond(&mut self, challenge: &[u8]) -> Result<Vec<u8>, SaslError> {
        let d = directives(&String::from_utf8_lossy(challenge))?;
        let nonce = d.get("nonce").ok_or_else(|| SaslError::Protocol("the challenge has no nonce".into()))?;
        if !d.get("qop").is_none_or(|q| q.split(',').any(|q| q.trim() == "auth")) {
            return Err(SaslError::Protocol("the server offers no qop auth".into()));
        }
        let realm = d.get("realm").map(String::as_str).unwrap_or(REALM);
        let cnonce = new_nonce();
        let nc = "00000001";
        let password = self.password.expose();
        let response =
            response_value(&self.user, realm, password, nonce, &cnonce, None, nc, DIGEST_URI, "AUTHENTICATE");
        self.expected_rspauth =
            Some(response_value(&self.user, realm, password, nonce, &cnonce, None, nc, DIGEST_URI, ""));
        let quote = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
        Ok(format!(
            "charset=utf-8,username=\"{}\",realm=\"{}\",nonce=\"{}\",nc={nc},cnonce=\"{cnonce}\",digest-uri=\"{DIGEST_URI}\",maxbuf=65536,response={response},qop=auth",
            quote(&self.user),
            quote(realm),
            quote(nonce),
        )
        .into_bytes())
    }

    /// Checks the server's last token (`rspauth=...`): it knew the password too.
    pub fn verify(&self, last: &[u8]) -> Result<(), SaslError> {
        let d = directives(&String::from_utf8_lossy(last))?;
        match (d.get("rspauth"), &self.expected_rspauth) {
            (Some(got), Some(want)) if got.eq_ignore_ascii_case(want) => Ok(()),
            _ => Err(SaslError::Failed("the server's rspauth does not match: it does not know the password".into())),
        }
    }
}

/// A fresh server nonce: 30 random bytes in base64 (as Java's server makes one).
fn new_nonce() -> String {
    use base64::Engine;
    let bytes: [u8; 30] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The directives of a digest-response (`key=value` or `key="quoted value"`, comma-separated).
fn directives(text: &str) -> Result<BTreeMap<String, String>, SaslError> {
    let bad = |why: &str| SaslError::Protocol(format!("malformed digest-response: {why}"));
    let mut out = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(bad("a directive without `=`"));
        }
        let key = key.trim().to_ascii_lowercase();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(bad("an unclosed quoted value")),
                    Some('"') => break,
                    Some('\\') => value.push(chars.next().ok_or_else(|| bad("an unclosed quoted value"))?),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_owned();
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(bad(&format!("{key} appears twice")));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2831 2.1.2.1: with `charset=utf-8`, a string whose characters all fit ISO 8859-1 is
/// hashed in ISO 8859-1, any other in UTF-8.
fn rfc_bytes(s: &str) -> Vec<u8> {
    if s.chars().all(|c| (c as u32) < 0x100) {
        s.chars().map(|c| c as u8).collect()
    } else {
        s.as_bytes().to_vec()
    }
}

/// The `response` value (and, with `a2_prefix` empty, `rspauth`) of RFC 2831 2.1.2.1.
#[allow(clippy::too_many_arguments)]
fn response_value(
    user: &str,
    realm: &str,
    password: &str,
    nonce: &str,
    cnonce: &str,
    authzid: Option<&str>,
    nc: &str,
    digest_uri: &str,
    a2_prefix: &str,
) -> String {
    let mut inner = Md5::new();
    inner.update(rfc_bytes(user));
    inner.update(b":");
    inner.update(rfc_bytes(realm));
    inner.update(b":");
    inner.update(rfc_bytes(password));
    let mut a1 = inner.finalize().to_vec();
    a1.extend_from_slice(format!(":{nonce}:{cnonce}").as_bytes());
    if let Some(z) = authzid {
        a1.push(b':');
        a1.extend_from_slice(z.as_bytes());
    }
    let ha1 = hex(&Md5::digest(&a1));
    let ha2 = hex(&Md5::digest(format!("{a2_prefix}:{digest_uri}").as_bytes()));
    hex(&Md5::digest(format!("{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}").as_bytes()))
}

/// Checks a digest-response against the nonce sent; the authenticated user and `rspauth`.
fn verify(users: &BTreeMap<String, Password>, nonce: &str, token: &[u8]) -> Result<(String, String), SaslError> {
    let d = directives(&String::from_utf8_lossy(token))?;
    let utf8 = d.get("charset").is_some_and(|c| c.eq_ignore_ascii_case("utf-8"));
    // Without charset=utf-8 the strings are ISO 8859-1; the lossy decoding above already
    // maps their ASCII, and a user name outside it is refused below (no such user).
    let get = |k: &str| d.get(k).map(String::as_str);
    let need = |k: &str| get(k).ok_or_else(|| SaslError::Protocol(format!("the digest-response has no {k}")));
    let user = need("username")?;
    if need("nonce")? != nonce {
        return Err(SaslError::Protocol("the digest-response answers another nonce".into()));
    }
    let cnonce = need("cnonce")?;
    let nc = need("nc")?;
    if nc != "00000001" {
        return Err(SaslError::Protocol(format!("nonce-count {nc}: this server issues one nonce per exchange")));
    }
    let qop = get("qop").unwrap_or("auth");
    if qop != "auth" {
        return Err(SaslError::Protocol(format!("qop {qop} was not offered (only auth)")));
    }
    let uri = need("digest-uri")?;
    if uri != DIGEST_URI {
        return Err(SaslError::Protocol(format!("digest-uri {uri} is not {DIGEST_URI}")));
    }
    let realm = get("realm").unwrap_or("");
    if !realm.is_empty() && realm != REALM {
        return Err(SaslError::Protocol(format!("realm {realm} was not offered")));
    }
    if !utf8 && !user.is_ascii() {
        return Err(SaslError::Failed(format!("no user {user}")));
    }
    let password = users.get(user).ok_or_else(|| SaslError::Failed(format!("no user {user}")))?;
    let authzid = get("authzid");
    let want = response_value(user, realm, password.expose(), nonce, cnonce, authzid, nc, uri, "AUTHENTICATE");
    let got = need("response")?.to_ascii_lowercase();
    let same = want.len() == got.len() && want.bytes().zip(got.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if !same {
        return Err(SaslError::Failed(format!("wrong password for {user}")));
    }
    let rspauth = response_value(user, realm, password.expose(), nonce, cnonce, authzid, nc, uri, "");
    Ok((user.to_owned(), rspauth))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2831 section 4's example exchange.
    #[test]
    fn rfc_2831_example() {
        let example = |a2_prefix| {
            response_value(
                "chris",
                "elwood.innosoft.com",
                "secret",
                "OA6MG9tEQGm2hh",
                "OA6MHXh6VqTrRk",
                None,
                "00000001",
                "imap/elwood.innosoft.com",
                a2_prefix,
            )
        };
        assert_eq!(example("AUTHENTICATE"), "d388dad90d4bbd760a152321f2143af7");
        assert_eq!(example(""), "ea40f60335c427b5527b84dbabcdfffd");
    }

    fn users() -> Arc<BTreeMap<String, Password>> {
        Arc::new([("bob".to_owned(), Password::new("bobsecret".into()))].into_iter().collect())
    }

    /// What a client computes from the challenge, as a ZooKeeper client sends it.
    fn answer(challenge: &[u8], user: &str, password: &str) -> String {
        let d = directives(std::str::from_utf8(challenge).unwrap()).unwrap();
        let nonce = &d["nonce"];
        let cnonce = "c1i2e3n4t";
        let resp = response_value(user, REALM, password, nonce, cnonce, None, "00000001", DIGEST_URI, "AUTHENTICATE");
        format!(
            "charset=utf-8,username=\"{user}\",realm=\"{REALM}\",nonce=\"{nonce}\",nc=00000001,cnonce=\"{cnonce}\",digest-uri=\"{DIGEST_URI}\",maxbuf=65536,response={resp},qop=auth"
        )
    }

    #[test]
    fn our_client_and_server_agree_and_catch_a_wrong_password() {
        let mut server = DigestMd5::new(users());
        let Ok(Step::Continue(challenge)) = server.step(b"") else { panic!() };
        let mut client = DigestClient::new("bob".into(), Password::new("bobsecret".into()));
        let response = client.respond(&challenge).unwrap();
        match server.step(&response) {
            Ok(Step::Done { reply: Some(rspauth), authorized }) => {
                assert_eq!(authorized, "bob");
                client.verify(&rspauth).unwrap();
                assert!(client.verify(b"rspauth=00000000000000000000000000000000").is_err());
            }
            other => panic!("{other:?}"),
        }
        let mut server = DigestMd5::new(users());
        let Ok(Step::Continue(challenge)) = server.step(b"") else { panic!() };
        let mut client = DigestClient::new("bob".into(), Password::new("guess".into()));
        assert!(matches!(server.step(&client.respond(&challenge).unwrap()), Err(SaslError::Failed(_))));
    }

    #[test]
    fn a_whole_exchange_and_its_failures() {
        let mut s = DigestMd5::new(users());
        let Ok(Step::Continue(ch)) = s.step(b"") else { panic!("no challenge") };
        let text = String::from_utf8(ch.clone()).unwrap();
        assert!(text.starts_with("realm=\"zk-sasl-md5\",nonce=\""), "{text}");
        match s.step(answer(&ch, "bob", "bobsecret").as_bytes()) {
            Ok(Step::Done { reply: Some(r), authorized }) => {
                assert_eq!(authorized, "bob");
                assert!(r.starts_with(b"rspauth="));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(s.step(b""), Err(SaslError::Protocol(_))));

        let mut s = DigestMd5::new(users());
        let Ok(Step::Continue(ch)) = s.step(b"") else { panic!() };
        assert!(matches!(s.step(answer(&ch, "bob", "wrong").as_bytes()), Err(SaslError::Failed(_))));
        let mut s = DigestMd5::new(users());
        let Ok(Step::Continue(ch)) = s.step(b"") else { panic!() };
        assert!(matches!(s.step(answer(&ch, "eve", "bobsecret").as_bytes()), Err(SaslError::Failed(_))));
        // A response to another exchange's nonce.
        let mut s1 = DigestMd5::new(users());
        let Ok(Step::Continue(ch1)) = s1.step(b"") else { panic!() };
        let mut s2 = DigestMd5::new(users());
        let Ok(Step::Continue(_)) = s2.step(b"") else { panic!() };
        assert!(matches!(s2.step(answer(&ch1, "bob", "bobsecret").as_bytes()), Err(SaslError::Protocol(_))));
        // An initial response, garbage.
        assert!(DigestMd5::new(users()).step(b"x").is_err());
        let mut s = DigestMd5::new(users());
        s.step(b"").unwrap();
        assert!(s.step(b"username=\"bob").is_err());
        let mut s = DigestMd5::new(users());
        s.step(b"").unwrap();
        assert!(s.step(&[0xff, 0xfe, 0x00]).is_err());
    }
}
