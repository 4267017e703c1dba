//! The tree digest: one number summarising every znode, kept up to date on each applied txn,
//! plus a history of it every [`DIGEST_LOG_INTERVAL`] zxids, which `hash` prints so operators
//! can compare ensemble members and spot a diverged replica. Counterpart of ZooKeeper's
//! `DigestCalculator` and `DataTree.digestLog` (3.6+).
//!
//! The digest is the sum, modulo 2^63, of one digest per node, so a change costs O(1) in tree
//! size: subtract the node's old digest, add its new one. A node's digest is itself the sum of
//! two parts, so that the frequent stat-only changes of a parent (a child created or deleted)
//! never rehash the parent's data:
//! - content: path and data;
//! - meta: path, every `StatPersisted` field and the ACL.
//!
//! Everything hashed is replicated state computed in apply (the zxids, the proposer's time,
//! versions, owners), so every replica that applied the same txns has the same digest.
//! ZooKeeper also sums per-node CRC32s; Warden hashes with XXH3-64 (a fixed, published algorithm, so
//! equal across builds and machines) instead, so
//! the numbers differ from ZooKeeper's while the format is the same. Only this module knows
//! the encoding; this module owns no state and never touches the tree.

use xxhash_rust::xxh3::Xxh3;

use super::acl::AclEntry;
use super::Node;

/// A history entry is recorded when the zxid is a multiple of this
/// (`DataTree.DIGEST_LOG_INTERVAL`: 0x80, so the hex zxids line up across servers).
pub const DIGEST_LOG_INTERVAL: i64 = 128;

/// History entries kept, oldest dropped first (`DataTree.DIGEST_LOG_LIMIT`).
pub const DIGEST_LOG_LIMIT: usize = 1024;

/// Version of Warden's digest algorithm, reported as `digest_version` by the admin `hash`
/// command. Digests are comparable only between servers reporting the same version; bump it
/// whenever the encoding below changes. (ZooKeeper's CRC32 digest reports 2.)
pub const DIGEST_VERSION: i32 = 1;

/// Digests stay below 2^63, so they print as the non-negative `long` ZooKeeper shows.
const MASK: u64 = i64::MAX as u64;

/// The tree digest after one txn: `hash` prints `<zxid hex>: <digest>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZxidDigest {
    pub zxid: i64,
    pub digest: u64,
}

/// `a + b` in the digest group (integers modulo 2^63).
pub fn add(a: u64, b: u64) -> u64 {
    a.wrapping_add(b) & MASK
}

/// `a - b` in the digest group.
pub fn sub(a: u64, b: u64) -> u64 {
    a.wrapping_sub(b) & MASK
}

fn finish(h: Xxh3) -> u64 {
    h.digest() & MASK
}

fn put_str(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_be_bytes());
    h.update(s.as_bytes());
}

/// The content part of a node's digest: its path and data.
pub fn content(path: &str, data: Option<&[u8]>) -> u64 {
    let mut h = Xxh3::new();
    h.update(b"warden-digest-content\0");
    put_str(&mut h, path);
    match data {
        None => h.update(&[0u8]),
        Some(d) => {
            h.update(&[1u8]);
            h.update(&(d.len() as u64).to_be_bytes());
            h.update(d);
        }
    }
    finish(h)
}

/// The meta part of a node's digest: its path, stat and ACL.
pub fn meta(path: &str, node: &Node) -> u64 {
    let s = &node.stat;
    let mut h = Xxh3::new();
    h.update(b"warden-digest-meta\0");
    put_str(&mut h, path);
    for v in [s.czxid, s.mzxid, s.pzxid, s.ctime, s.mtime, s.ephemeral_owner] {
        h.update(&v.to_be_bytes());
    }
    for v in [s.version, s.cversion, s.aversion] {
        h.update(&v.to_be_bytes());
    }
    h.update(&(node.acl.len() as u64).to_be_bytes());
    for AclEntry { perms, id } in node.acl.iter() {
        h.update(&perms.to_be_bytes());
        put_str(&mut h, &id.scheme);
        put_str(&mut h, &id.id);
    }
    finish(h)
}

/// A node's whole digest.
pub fn node(path: &str, node: &Node, data: Option<&[u8]>) -> u64 {
    add(content(path, data), meta(path, node))
}
