//! ACLs: the stored form, the `world`, `auth`, `digest` and `ip` schemes, and the permission
//! check, as ZooKeeper's `ZooKeeperServer.checkACL`, `PrepRequestProcessor.fixupACL` and the
//! `DigestAuthenticationProvider`/`IPAuthenticationProvider` define them.
//!
//! Pure functions over the caller's identities; the identities travel inside each replicated
//! txn so every replica decides the same way.

use base64::Engine;
use serde::Deserialize;
use serde::Serialize;
use sha1::Digest;

/// An identity: `scheme` and `id` (`digest` / `user:base64(sha1(user:password))`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AuthId {
    pub scheme: String,
    pub id: String,
}

impl AuthId {
    /// The user this identity names, as its ZooKeeper authentication provider gives it
    /// (`getUserName`): a digest id's user part, an ip, sasl or x509 id as it is; `None` for
    /// a scheme with no provider (`super`), as `AuthUtil.getUser` answers null. whoAmI and
    /// the audit log both show it.
    pub fn user_name(&self) -> Option<&str> {
        match self.scheme.as_str() {
            "digest" => self.id.split(':').next(),
            "ip" | "sasl" | "x509" => Some(self.id.as_str()),
            _ => None,
        }
    }
}

/// A caller's identities, shared: every txn of a connection carries the same list, so a
/// write takes a reference to it instead of a copy of each scheme and id.
pub type AuthIds = std::sync::Arc<[AuthId]>;

/// One ACL entry as stored on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclEntry {
    pub perms: i32,
    pub id: AuthId,
}

impl AclEntry {
    /// `world:anyone` with every permission (ZooKeeper's `OPEN_ACL_UNSAFE`).
    pub fn open() -> Vec<AclEntry> {
        vec![AclEntry { perms: jute::perms::ALL, id: AuthId { scheme: "world".into(), id: "anyone".into() } }]
    }
    /// `world:anyone` with read only (`READ_ACL_UNSAFE`).
    pub fn read_only() -> Vec<AclEntry> {
        vec![AclEntry { perms: jute::perms::READ, id: AuthId { scheme: "world".into(), id: "anyone".into() } }]
    }
}

thread_local! {
    /// ACLs already decoded on this thread: see [`deserialize_shared`].
    static DECODED: std::cell::RefCell<std::collections::HashMap<Vec<AclEntry>, std::sync::Arc<Vec<AclEntry>>>> =
        Default::default();
}

/// Most ACLs distinct decoding remembers; past it, it starts over (sharing is an economy, not
/// a guarantee).
const DECODED_LIMIT: usize = 4096;

/// Decodes a node's ACL, sharing one allocation among equal ACLs as apply does (a node gets
/// its parent's). A snapshot stores every node's ACL in full, so without this each node of a
/// restarted server held its own copy: about 130 bytes a node.
pub fn deserialize_shared<'de, D>(d: D) -> Result<std::sync::Arc<Vec<AclEntry>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(share(Vec::<AclEntry>::deserialize(d)?))
}

/// One allocation for every equal ACL decoded on this thread (see [`deserialize_shared`]).
pub fn share(acl: Vec<AclEntry>) -> std::sync::Arc<Vec<AclEntry>> {
    DECODED.with(|decoded| {
        let mut decoded = decoded.borrow_mut();
        if let Some(shared) = decoded.get(&acl) {
            return shared.clone();
        }
        if decoded.len() >= DECODED_LIMIT {
            decoded.clear();
        }
        let shared = std::sync::Arc::new(acl.clone());
        decoded.insert(acl, shared.clone());
        shared
    })
}

/// Forgets the ACLs [`deserialize_shared`] remembered on this thread (after a snapshot is
/// decoded, so they live no longer than the nodes that use them).
pub fn forget_decoded() {
    DECODED.with(|decoded| decoded.borrow_mut().clear());
}

impl From<&jute::Acl> for AclEntry {
    fn from(a: &jute::Acl) -> Self {
        AclEntry { perms: a.perms, id: AuthId { scheme: a.id.scheme.clone(), id: a.id.id.clone().unwrap_or_default() } }
    }
}

impl From<&AclEntry> for jute::Acl {
    fn from(a: &AclEntry) -> Self {
        jute::Acl { perms: a.perms, id: jute::Id { scheme: a.id.scheme.clone(), id: Some(a.id.id.clone()) } }
    }
}

/// `user:base64(sha1("user:password"))`, ZooKeeper's `DigestAuthenticationProvider.generateDigest`.
pub fn digest(user_password: &str) -> String {
    let user = user_password.split(':').next().unwrap_or("");
    let hash = sha1::Sha1::digest(user_password.as_bytes());
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))
}

/// Parses `a.b.c.d[/bits]` or an IPv6 address with optional `/bits`.
fn parse_ip(id: &str) -> Option<(std::net::IpAddr, u32)> {
    let (addr, bits) = match id.split_once('/') {
        Some((a, b)) => (a, Some(b.parse::<u32>().ok()?)),
        None => (id, None),
    };
    let addr: std::net::IpAddr = addr.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some((addr, bits))
}

fn ip_matches(pattern: &str, client: &str) -> bool {
    let (Some((net, bits)), Ok(addr)) = (parse_ip(pattern), client.parse::<std::net::IpAddr>()) else {
        return false;
    };
    match (net, addr) {
        (std::net::IpAddr::V4(n), std::net::IpAddr::V4(a)) => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            u32::from(n) & mask == u32::from(a) & mask
        }
        (std::net::IpAddr::V6(n), std::net::IpAddr::V6(a)) => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// `ZooKeeperServer.checkACL`: true if `ids` may do `perm` on a node with `acl`.
/// An empty ACL allows everything; a `super` identity bypasses every check.
pub fn allowed(acl: &[AclEntry], perm: i32, ids: &[AuthId]) -> bool {
    if acl.is_empty() || ids.iter().any(|i| i.scheme == "super") {
        return true;
    }
    acl.iter().filter(|a| a.perms & perm != 0).any(|a| {
        (a.id.scheme == "world" && a.id.id == "anyone")
            || ids.iter().any(|i| {
                i.scheme == a.id.scheme
                    && match a.id.scheme.as_str() {
                        "ip" => ip_matches(&a.id.id, &i.id),
                        _ => i.id == a.id.id,
                    }
            })
    })
}

/// `PrepRequestProcessor.fixupACL`: validates a requested ACL and expands `auth` entries into
/// the caller's authenticated identities. `None` means ZooKeeper's `InvalidACL`.
pub fn fixup(requested: &[AclEntry], ids: &[AuthId]) -> Option<Vec<AclEntry>> {
    if requested.is_empty() {
        return None;
    }
    let mut out: Vec<AclEntry> = Vec::with_capacity(requested.len());
    for a in requested {
        match a.id.scheme.as_str() {
            "world" if a.id.id == "anyone" => out.push(a.clone()),
            "auth" => {
                // Only identities from authenticating schemes count (not the implicit `ip`).
                let mut any = false;
                for i in ids.iter().filter(|i| i.scheme != "ip" && i.scheme != "super") {
                    out.push(AclEntry { perms: a.perms, id: i.clone() });
                    any = true;
                }
                if !any {
                    return None;
                }
            }
            "digest" if a.id.id.split(':').count() == 2 => out.push(a.clone()),
            "ip" if parse_ip(&a.id.id).is_some() => out.push(a.clone()),
            "super" | "sasl" | "x509" if !a.id.id.is_empty() => out.push(a.clone()),
            _ => return None,
        }
    }
    let mut dedup: Vec<AclEntry> = Vec::with_capacity(out.len());
    for a in out {
        if !dedup.contains(&a) {
            dedup.push(a);
        }
    }
    Some(dedup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(scheme: &str, id: &str) -> AuthId {
        AuthId { scheme: scheme.into(), id: id.into() }
    }

    #[test]
    fn digest_matches_zookeeper() {
        // zkCli: `addauth digest user:password` -> ACL id computed by ZooKeeper's generateDigest.
        assert_eq!(digest("user:password"), "user:tpUq/4Pn5A64fVZyQ0gOJ8ZWqkY=");
    }

    #[test]
    fn checks_and_super() {
        let acl = vec![AclEntry { perms: jute::perms::READ, id: id("digest", "u:x") }];
        assert!(!allowed(&acl, jute::perms::READ, &[id("ip", "127.0.0.1")]));
        assert!(allowed(&acl, jute::perms::READ, &[id("digest", "u:x")]));
        assert!(!allowed(&acl, jute::perms::WRITE, &[id("digest", "u:x")]));
        assert!(allowed(&acl, jute::perms::WRITE, &[id("super", "")]));
        let ip = vec![AclEntry { perms: 31, id: id("ip", "10.0.0.0/8") }];
        assert!(allowed(&ip, 1, &[id("ip", "10.1.2.3")]));
        assert!(!allowed(&ip, 1, &[id("ip", "11.1.2.3")]));
    }

    #[test]
    fn fixup_expands_auth_and_rejects_bad() {
        let auth = vec![AclEntry { perms: 31, id: id("auth", "") }];
        assert_eq!(fixup(&auth, &[id("ip", "127.0.0.1")]), None);
        let got = fixup(&auth, &[id("ip", "127.0.0.1"), id("digest", "u:x")]).unwrap();
        assert_eq!(got, vec![AclEntry { perms: 31, id: id("digest", "u:x") }]);
        assert_eq!(fixup(&[], &[]), None);
        assert_eq!(fixup(&[AclEntry { perms: 31, id: id("world", "nobody") }], &[]), None);
        assert_eq!(fixup(&[AclEntry { perms: 31, id: id("bogus", "x") }], &[]), None);
    }
}
