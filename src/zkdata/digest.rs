//! ZooKeeper's tree digest (`DigestCalculator`, `NodeHashMapImpl`, `AdHash`, digest version
//! 2): the wrapping sum of one CRC-32 per node over its path, data and `StatPersisted`, with
//! the root under `""` and everything below `/zookeeper/` left out. Warden's own digest
//! (`tree::digest`) hashes differently; this one exists to check an import against the
//! digests ZooKeeper wrote into its snapshots and txn log, and to write one into an exported
//! snapshot that ZooKeeper then checks.

use jute::StatPersisted;

use crate::tree::DataTree;

/// `DigestCalculator.DIGEST_VERSION`.
pub const VERSION: i32 = 2;

/// `DigestCalculator.calculateDigest` of one node (`path` as Warden names it: `/` is the root).
pub fn node(path: &str, data: Option<&[u8]>, stat: &StatPersisted) -> i64 {
    if path.starts_with("/zookeeper/") {
        return 0;
    }
    let path = if path == "/" { "" } else { path };
    let mut crc = crc32fast::Hasher::new();
    crc.update(path.as_bytes());
    if let Some(d) = data {
        crc.update(d);
    }
    let mut b = [0u8; 60];
    let fields: [&[u8]; 9] = [
        &stat.czxid.to_be_bytes(),
        &stat.mzxid.to_be_bytes(),
        &stat.pzxid.to_be_bytes(),
        &stat.ctime.to_be_bytes(),
        &stat.mtime.to_be_bytes(),
        &stat.version.to_be_bytes(),
        &stat.cversion.to_be_bytes(),
        &stat.aversion.to_be_bytes(),
        &stat.ephemeral_owner.to_be_bytes(),
    ];
    let mut at = 0;
    for f in fields {
        b[at..at + f.len()].copy_from_slice(f);
        at += f.len();
    }
    crc.update(&b);
    i64::from(crc.finalize())
}

/// The digest of a whole tree.
pub fn tree(tree: &DataTree) -> i64 {
    tree.iter_nodes().fold(0i64, |sum, (path, n)| sum.wrapping_add(node(path, n.data(), &n.stat.persisted())))
}
