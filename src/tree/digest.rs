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

use xxhash_rust::xxh3::xxh3_64;
use xxhash_rust::xxh3::Xxh3;

use super::acl::AclEntry;
use super::NodeStat;

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

/// Bytes gathered on the stack this far are hashed in one XXH3 call; a longer input is
/// streamed. Both give the XXH3 of the whole sequence, so the digests do not depend on which
/// path a node took, and the one-shot call saves the streaming state's setup and buffering
/// (most nodes fit: a setData hashes four such inputs).
const GATHER: usize = 320;

/// Where a digest's bytes go: [`Hasher`], or (in tests) a streaming `Xxh3` to check that the
/// two agree.
trait Feed {
    fn update(&mut self, bytes: &[u8]);
}

/// The input of one XXH3-64 hash.
struct Hasher {
    buf: [u8; GATHER],
    len: usize,
    stream: Option<Box<Xxh3>>,
}

impl Hasher {
    fn new() -> Hasher {
        Hasher { buf: [0; GATHER], len: 0, stream: None }
    }

    /// Moves to streaming: what was gathered, then `bytes`.
    #[cold]
    fn overflow(&mut self, bytes: &[u8]) {
        let mut s = Box::new(Xxh3::new());
        s.update(&self.buf[..self.len]);
        s.update(bytes);
        self.stream = Some(s);
    }

    fn finish(self) -> u64 {
        let digest = match self.stream {
            Some(s) => s.digest(),
            None => xxh3_64(&self.buf[..self.len]),
        };
        digest & MASK
    }
}

impl Feed for Hasher {
    #[inline(always)]
    fn update(&mut self, bytes: &[u8]) {
        if let Some(s) = &mut self.stream {
            s.update(bytes);
            return;
        }
        let end = self.len + bytes.len();
        if let Some(room) = self.buf.get_mut(self.len..end) {
            room.copy_from_slice(bytes);
            self.len = end;
            return;
        }
        self.overflow(bytes);
    }
}

#[inline(always)]
fn put_str(h: &mut impl Feed, s: &str) {
    h.update(&(s.len() as u64).to_be_bytes());
    h.update(s.as_bytes());
}

#[inline(always)]
fn feed_content(h: &mut impl Feed, path: &str, data: Option<&[u8]>) {
    h.update(b"warden-digest-content\0");
    put_str(h, path);
    match data {
        None => h.update(&[0u8]),
        Some(d) => {
            h.update(&[1u8]);
            h.update(&(d.len() as u64).to_be_bytes());
            h.update(d);
        }
    }
}

#[inline(always)]
fn feed_meta(h: &mut impl Feed, path: &str, acl: &[AclEntry], s: &NodeStat) {
    h.update(b"warden-digest-meta\0");
    put_str(h, path);
    for v in [s.czxid, s.mzxid, s.pzxid, s.ctime, s.mtime, s.ephemeral_owner] {
        h.update(&v.to_be_bytes());
    }
    for v in [s.version, s.cversion, s.aversion] {
        h.update(&v.to_be_bytes());
    }
    h.update(&(acl.len() as u64).to_be_bytes());
    for AclEntry { perms, id } in acl {
        h.update(&perms.to_be_bytes());
        put_str(h, &id.scheme);
        put_str(h, &id.id);
    }
}

/// `/zookeeper/config` counts for nothing: every member writes it from its own zoo.cfg at
/// start, and members whose files say the same thing in other words must not differ (ZooKeeper's
/// `DigestCalculator` leaves out all of `/zookeeper/`).
fn counted(path: &str) -> bool {
    path != super::CONFIG_NODE
}

/// The content part of a node's digest: its path and data.
pub fn content(path: &str, data: Option<&[u8]>) -> u64 {
    if !counted(path) {
        return 0;
    }
    let mut h = Hasher::new();
    feed_content(&mut h, path, data);
    h.finish()
}

/// The meta part of a node's digest: its path, stat and ACL.
pub fn meta(path: &str, acl: &[AclEntry], stat: &NodeStat) -> u64 {
    if !counted(path) {
        return 0;
    }
    let mut h = Hasher::new();
    feed_meta(&mut h, path, acl, stat);
    h.finish()
}

/// A node's whole digest.
pub fn node(path: &str, acl: &[AclEntry], stat: &NodeStat, data: Option<&[u8]>) -> u64 {
    add(content(path, data), meta(path, acl, stat))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::tree::acl::AuthId;
    use crate::tree::Node;

    impl Feed for Xxh3 {
        fn update(&mut self, bytes: &[u8]) {
            Xxh3::update(self, bytes);
        }
    }

    fn streamed(feed: impl FnOnce(&mut Xxh3)) -> u64 {
        let mut h = Xxh3::new();
        feed(&mut h);
        h.digest() & MASK
    }

    fn sample_node() -> Node {
        Node {
            acl: Arc::new(vec![AclEntry { perms: 31, id: AuthId { scheme: "world".into(), id: "anyone".into() } }]),
            stat: NodeStat {
                czxid: 1,
                mzxid: 2,
                pzxid: 3,
                ctime: 4,
                mtime: 5,
                ephemeral_owner: 6,
                version: 7,
                cversion: 8,
                aversion: 9,
                num_children: 10,
            },
        }
    }

    /// Digests are compared between servers (`DIGEST_VERSION` 1): these values must not
    /// change unless that version does.
    #[test]
    fn digests_are_stable() {
        assert_eq!(content("/a", Some(b"x")), 8988791582653384243);
        assert_eq!(content("/a", None), 2921834929037488877);
        assert_eq!(content("/big", Some(&[7u8; 1000])), 8776616752920096894);
        let n = sample_node();
        assert_eq!(meta("/a", &n.acl, &n.stat), 793715313892644835);
    }

    fn node_strategy() -> impl Strategy<Value = Node> {
        let ids = prop::collection::vec((any::<i32>(), "[a-z]{0,12}", "[ -~]{0,80}"), 0..6);
        (any::<[i64; 6]>(), any::<[i32; 3]>(), any::<u32>(), ids).prop_map(|(l, v, n, ids)| Node {
            acl: Arc::new(
                ids.into_iter().map(|(perms, scheme, id)| AclEntry { perms, id: AuthId { scheme, id } }).collect(),
            ),
            stat: NodeStat {
                czxid: l[0],
                mzxid: l[1],
                pzxid: l[2],
                ctime: l[3],
                mtime: l[4],
                ephemeral_owner: l[5],
                version: v[0],
                cversion: v[1],
                aversion: v[2],
                num_children: n,
            },
        })
    }

    proptest! {
        /// Gathered or streamed, every input hashes as a streaming XXH3 fed the same fields
        /// does, on both sides of the gathering buffer's size.
        #[test]
        fn digests_match_the_streamed_definition(
            path in "/[ -~]{0,400}",
            data in prop::option::of(prop::collection::vec(any::<u8>(), 0..(3 * GATHER))),
            node in node_strategy(),
        ) {
            prop_assert_eq!(content(&path, data.as_deref()), streamed(|h| feed_content(h, &path, data.as_deref())));
            prop_assert_eq!(meta(&path, &node.acl, &node.stat), streamed(|h| feed_meta(h, &path, &node.acl, &node.stat)));
        }
    }
}
