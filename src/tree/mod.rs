//! The DataTree: znodes, their Stat, children, ephemerals by session, the replicated session
//! table, containers and TTL nodes. Counterpart of ZooKeeper's `DataTree` plus the checks of
//! `PrepRequestProcessor` (which ZooKeeper does before the log, and we do in apply so every
//! replica computes the same answer).
//!
//! Synchronous and deterministic: [`DataTree::apply`] is a pure function of (tree, zxid, txn)
//! returning the result and the [`Change`]s that watches fire on. No I/O, no clock, no
//! randomness, no knowledge of watches or connections. The maps are persistent (`imbl`), so
//! cloning the whole tree for a snapshot or a multi's scratch copy is O(1). Apply also keeps
//! the tree digest and its history ([`digest`], ZooKeeper's `hash`) up to date.

pub mod acl;
pub mod digest;
pub mod import;
pub mod nodes;
pub mod path;
pub mod quota;
pub mod txn;

use bytes::Bytes;
use std::sync::Arc;

use imbl::OrdMap as HashMap;
use imbl::OrdSet;
use jute::CreateMode;
use jute::EventType;
use jute::Stat;
use jute::StatPersisted;
use serde::Deserialize;
use serde::Serialize;

use self::acl::AclEntry;
use self::acl::AuthId;
use self::digest::ZxidDigest;
use self::nodes::NodeMap;
pub use self::nodes::NodeRef;
use self::txn::CreateOp;
use self::txn::OpResult;
use self::txn::Txn;
use self::txn::TxnOp;
use self::txn::TxnOutput;

/// `ephemeralOwner` of a container (`EphemeralType.CONTAINER_EPHEMERAL_OWNER`).
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// High byte of `ephemeralOwner` marking a TTL node (`EphemeralType.TTL`).
const TTL_MASK: i64 = 0xFF00_0000_0000_0000_u64 as i64;
/// Largest TTL ZooKeeper accepts (`EphemeralType.MAX_EXTENDED_SERVER_ID` encoding: 40 bits).
pub const MAX_TTL_MS: i64 = 0x0000_00FF_FFFF_FFFF;

/// Why a tree operation failed; `dispatch::reply` maps each to a ZooKeeper error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum TreeError {
    #[error("no node")]
    NoNode,
    #[error("node exists")]
    NodeExists,
    #[error("bad version")]
    BadVersion,
    #[error("not empty")]
    NotEmpty,
    #[error("not authorized")]
    NoAuth,
    #[error("invalid ACL")]
    InvalidAcl,
    #[error("bad arguments")]
    BadArguments,
    #[error("ephemerals cannot have children")]
    NoChildrenForEphemerals,
    #[error("session expired")]
    SessionExpired,
    #[error("runtime inconsistency")]
    RuntimeInconsistency,
    #[error("unimplemented")]
    Unimplemented,
    /// The session now belongs to another member (ZooKeeper's SessionMovedException): a
    /// write that arrived on its old connection, refused by the leader before the log.
    #[error("session moved")]
    SessionMoved,
    /// A create or setData over a hard quota with `zookeeper.enforceQuota` on.
    #[error("quota exceeded")]
    QuotaExceeded,
}

/// What kind of node this is, from `ephemeralOwner` (`EphemeralType.get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Normal,
    Ephemeral(i64),
    Container,
    Ttl(i64),
}

/// The `ephemeralOwner` a new node gets.
fn owner_for(mode: CreateMode, session_id: i64, ttl: i64) -> i64 {
    match mode {
        CreateMode::Ephemeral | CreateMode::EphemeralSequential => session_id,
        CreateMode::Container => CONTAINER_OWNER,
        CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl => TTL_MASK | ttl,
        CreateMode::Persistent | CreateMode::PersistentSequential => 0,
    }
}

/// The `ephemeralOwner` of a TTL node (`EphemeralType.TTL.toEphemeralOwner`).
pub fn ttl_owner(ttl: i64) -> i64 {
    TTL_MASK | (ttl & MAX_TTL_MS)
}

fn kind_of(owner: i64) -> NodeKind {
    if owner == 0 {
        NodeKind::Normal
    } else if owner == CONTAINER_OWNER {
        NodeKind::Container
    } else if owner & TTL_MASK == TTL_MASK {
        NodeKind::Ttl(owner & MAX_TTL_MS)
    } else {
        NodeKind::Ephemeral(owner)
    }
}

/// A node's ACL, shared: most nodes have their parent's ACL, so they share one allocation.
pub type SharedAcl = Arc<Vec<AclEntry>>;

/// A node's persisted Stat (ZooKeeper's `StatPersisted`, which is what snapshots store) and
/// its child count. The node map stores it compactly and hands out copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub pzxid: i64,
    pub num_children: u32,
}

impl NodeStat {
    /// From a snapshot's `StatPersisted` and the node's child count.
    pub fn from_persisted(s: &StatPersisted, num_children: u32) -> NodeStat {
        NodeStat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            pzxid: s.pzxid,
            num_children,
        }
    }

    /// The client-visible `Stat`, for data of `data_len` bytes.
    pub fn client(&self, data_len: usize) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            // DataNode.copyStat: the stored cversion counts creates; clients see creates plus
            // deletes, i.e. 2 * creates - children (so a fresh /zookeeper shows -2).
            cversion: self.cversion.wrapping_mul(2).wrapping_sub(self.num_children as i32),
            aversion: self.aversion,
            // DataNode.getClientEphemeralOwner: containers and TTL nodes show 0 to clients.
            ephemeral_owner: match kind_of(self.ephemeral_owner) {
                NodeKind::Ephemeral(owner) => owner,
                _ => 0,
            },
            data_length: data_len as i32,
            num_children: self.num_children as i32,
            pzxid: self.pzxid,
        }
    }

    /// What kind of node this is.
    pub fn kind(&self) -> NodeKind {
        kind_of(self.ephemeral_owner)
    }

    /// The `StatPersisted` a snapshot stores.
    pub fn persisted(&self) -> StatPersisted {
        StatPersisted {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self.cversion,
            aversion: self.aversion,
            ephemeral_owner: self.ephemeral_owner,
            pzxid: self.pzxid,
        }
    }
}

/// One znode's ACL and Stat (its path is its key in [`nodes::NodeMap`], its children are found
/// there too, and its data sits beside it in the map's allocation: see [`NodeRef`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub acl: SharedAcl,
    pub stat: NodeStat,
}

impl Node {
    fn new(acl: SharedAcl, zxid: i64, time: i64, owner: i64) -> Node {
        Node {
            acl,
            stat: NodeStat {
                czxid: zxid,
                mzxid: zxid,
                ctime: time,
                mtime: time,
                version: 0,
                cversion: 0,
                aversion: 0,
                ephemeral_owner: owner,
                pzxid: zxid,
                num_children: 0,
            },
        }
    }

    /// The client-visible `Stat`, for data of `data_len` bytes.
    pub fn client_stat(&self, data_len: usize) -> Stat {
        self.stat.client(data_len)
    }

    /// What kind of node this is.
    pub fn kind(&self) -> NodeKind {
        self.stat.kind()
    }
}

/// A session as replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    pub timeout_ms: i32,
    pub passwd: Bytes,
    pub ephemerals: Ephemerals,
}

/// A session's ephemeral paths. Most sessions own none, and an empty imbl set is not free: it
/// holds a B-tree node of about 2.6 KiB, a fifth of an idle session's memory (heaptrack, 10,000
/// sessions). So the set exists only while it holds a path. It is serialized exactly as the
/// set (a sequence of paths), so snapshots are unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ephemerals(Option<OrdSet<String>>);

impl Ephemerals {
    /// The paths, in order.
    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.0.iter().flat_map(OrdSet::iter)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, OrdSet::len)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn insert(&mut self, path: String) {
        self.0.get_or_insert_with(OrdSet::new).insert(path);
    }

    fn remove(&mut self, path: &str) {
        if let Some(set) = &mut self.0 {
            set.remove(path);
            if set.is_empty() {
                self.0 = None;
            }
        }
    }
}

impl Serialize for Ephemerals {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        // With its length first, as postcard needs (the chained iterator gives no exact hint).
        let mut seq = ser.serialize_seq(Some(self.len()))?;
        for path in self.iter() {
            seq.serialize_element(path)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Ephemerals {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let set = OrdSet::<String>::deserialize(de)?;
        Ok(Ephemerals((!set.is_empty()).then_some(set)))
    }
}

/// A change that watches fire on: the event type, the path it is reported for, and the ACL
/// a watcher needs READ on to be told (the node's, or the parent's for NodeChildrenChanged),
/// as ZooKeeper 3.8's `WatchManager.triggerWatch` checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub event: EventType,
    pub path: String,
    pub acl: SharedAcl,
}

/// `checkAndIncVersion`: `-1` matches anything; the increment wraps past `i32::MAX` to 0
/// instead of to `-1`, which would mean "any" (ZOOKEEPER-4743).
fn check_version(current: i32, expected: i32) -> Result<i32, TreeError> {
    if expected != -1 && expected != current {
        return Err(TreeError::BadVersion);
    }
    Ok(if current == i32::MAX { 0 } else { current + 1 })
}

/// The node holding the ensemble's configuration.
pub const CONFIG_NODE: &str = "/zookeeper/config";

/// The special paths that cannot be deleted (`DataTree.isSpecialPath`).
fn is_special(path: &str) -> bool {
    matches!(path, "/" | "/zookeeper" | "/zookeeper/quota" | "/zookeeper/config")
}

/// The tree and the replicated session table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataTree {
    nodes: NodeMap,
    sessions: HashMap<i64, SessionEntry>,
    /// Paths of containers and TTL nodes, for the reaper.
    reapable: OrdSet<String>,
    /// The zxid of the last applied txn.
    last_zxid: i64,
    /// Sum of path and data lengths (`approximate_data_size`).
    data_size: i64,
    /// Sum of every node's [`digest::node`], kept up to date by apply. `None` right after
    /// deserialising: snapshots do not store it (their format predates it), and
    /// [`DataTree::compute_derived`] (or else the next apply) recomputes it from the nodes.
    #[serde(skip)]
    digest: Option<u64>,
    /// The digest every [`digest::DIGEST_LOG_INTERVAL`] zxids, oldest first, at most
    /// [`digest::DIGEST_LOG_LIMIT`] entries. In memory only, as ZooKeeper's `digestLog`.
    #[serde(skip)]
    digest_log: imbl::Vector<ZxidDigest>,
    /// The paths with a quota (ZooKeeper's `pTrie`); `None` until built from the tree's
    /// limits nodes (see [`quota`]), as after reading a snapshot.
    #[serde(skip)]
    quotas: Option<OrdSet<String>>,
}

/// A tree without its nodes, as a parted snapshot stores it ahead of them (see
/// [`DataTree::head`]): with the node count and the digest the nodes must add up to.
#[derive(Serialize)]
pub struct TreeHeadOut<'a> {
    sessions: &'a HashMap<i64, SessionEntry>,
    reapable: &'a OrdSet<String>,
    last_zxid: i64,
    data_size: i64,
    nodes: u64,
    digest: Option<u64>,
}

/// What [`TreeHeadOut`] wrote.
#[derive(Deserialize)]
pub struct TreeHead {
    sessions: HashMap<i64, SessionEntry>,
    reapable: OrdSet<String>,
    last_zxid: i64,
    data_size: i64,
    nodes: u64,
    digest: Option<u64>,
}

impl Default for DataTree {
    fn default() -> Self {
        DataTree::new()
    }
}

impl DataTree {
    /// A tree holding `/`, `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`, as a fresh
    /// ZooKeeper has.
    pub fn new() -> DataTree {
        let mut t = DataTree {
            nodes: NodeMap::default(),
            sessions: HashMap::new(),
            reapable: OrdSet::new(),
            last_zxid: 0,
            // ZooKeeper's approximate data size counts the root's "/" alias (1 byte).
            data_size: 1,
            digest: None,
            digest_log: imbl::Vector::new(),
            quotas: Some(OrdSet::new()),
        };
        t.nodes.insert("/", Node::new(Arc::new(AclEntry::open()), 0, 0, 0), Some(&[]));
        for (path, acl) in [
            ("/zookeeper", AclEntry::open()),
            ("/zookeeper/quota", AclEntry::open()),
            ("/zookeeper/config", AclEntry::read_only()),
        ] {
            let parent = path::parent(path).expect("special paths have parents").to_owned();
            t.nodes.insert(path, Node::new(Arc::new(acl), 0, 0, 0), Some(&[]));
            t.nodes.update(&parent, |p| p.stat.num_children += 1);
            t.data_size += path.len() as i64;
        }
        // ZooKeeper keeps /zookeeper/config at version -1 until a reconfig writes it.
        t.nodes.update("/zookeeper/config", |config| config.stat.version = -1);
        t.digest = Some(t.full_digest());
        t
    }

    /// Writes the ensemble's configuration into `/zookeeper/config` as ZooKeeper does at start
    /// (`ZKDatabase.initConfigInZKDatabase`): not through the log, on every member alike; the
    /// node keeps version -1 and gets `version_zxid` (the configuration's version) as its
    /// mzxid. Its mtime stays 0 (ZooKeeper writes the wall clock there) so that every member's
    /// tree digest stays the same. A configuration a reconfig wrote through the log (see
    /// [`DataTree::config_from_reconfig`]) is kept: it is newer than any zoo.cfg. Whether it
    /// changed anything.
    pub fn set_config_node(&mut self, data: &[u8], version_zxid: i64) -> bool {
        let unchanged = self.config_from_reconfig()
            || self
                .nodes
                .get(CONFIG_NODE)
                .is_some_and(|n| n.data().unwrap_or_default() == data && n.stat.mzxid == version_zxid);
        if unchanged {
            return false;
        }
        self.replace_data(CONFIG_NODE, data, |node| {
            node.stat.mzxid = version_zxid;
            node.stat.mtime = 0;
        })
    }

    /// Changes `path`'s data behind the log's back on this member only (the digest follows):
    /// for the test failpoint that checks replica digests catch a diverged tree.
    #[cfg(debug_assertions)]
    pub fn corrupt_for_test(&mut self, path: &str) {
        self.replace_data(path, b"corrupted by a test failpoint", |_| {});
    }

    /// Replaces a node's data as the server itself does (no ACL, no version, no watch);
    /// `edit` may change its Stat. Keeps the digest and data size. Whether the node exists.
    fn replace_data(&mut self, path: &str, data: &[u8], edit: impl FnOnce(&mut Node)) -> bool {
        let changed = self.nodes.set_data_checked(
            path,
            Some(data),
            |node| {
                let old_len = node.data().map_or(0, <[u8]>::len) as i64;
                Ok::<_, ()>((old_len, digest::node(path, node.acl, &node.stat, node.data())))
            },
            |(old_len, old_digest), node| {
                edit(node);
                (old_len, old_digest, digest::node(path, &node.acl, &node.stat, Some(data)))
            },
        );
        match changed {
            Some(Ok((old_len, old_digest, new_digest))) => {
                self.digest_swap(old_digest, new_digest);
                self.data_size += data.len() as i64 - old_len;
                true
            }
            _ => false,
        }
    }

    /// Whether `/zookeeper/config` was written by a reconfig (through the log, with the
    /// txn's time as its mtime) rather than from a zoo.cfg at start (mtime 0). Versions cannot
    /// tell: a configuration's version from a file name (`.dynamic.100000000`) may be above
    /// the zxids of an ensemble that started new.
    pub fn config_from_reconfig(&self) -> bool {
        self.nodes.get(CONFIG_NODE).is_some_and(|n| n.stat.mtime != 0)
    }

    /// The zxid of the last applied txn.
    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    /// Number of znodes (`znode_count`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// `approximate_data_size`.
    pub fn data_size(&self) -> i64 {
        self.data_size
    }

    /// The tree digest: the sum of every node's digest (see [`digest`]).
    pub fn digest(&self) -> u64 {
        self.digest.unwrap_or_else(|| self.full_digest())
    }

    /// The digest history (`hash`), oldest first.
    pub fn digest_log(&self) -> impl Iterator<Item = &ZxidDigest> {
        self.digest_log.iter()
    }

    /// Computes what a tree read from a snapshot does not store, its digest (O(n)) and its
    /// quota index, now instead of in its first apply; lets the caller do it before taking
    /// the tree's lock.
    pub fn compute_derived(&mut self) {
        if self.digest.is_none() {
            self.digest = Some(self.full_digest());
        }
        self.index_quotas();
    }

    /// Everything but the nodes, for a parted snapshot; the nodes follow from
    /// [`NodeMap::encode_batches`] on [`DataTree::nodes_for_snapshot`].
    pub fn head(&self) -> TreeHeadOut<'_> {
        TreeHeadOut {
            sessions: &self.sessions,
            reapable: &self.reapable,
            last_zxid: self.last_zxid,
            data_size: self.data_size,
            nodes: self.nodes.len() as u64,
            digest: self.digest,
        }
    }

    /// The nodes, for a parted snapshot.
    pub fn nodes_for_snapshot(&self) -> &NodeMap {
        &self.nodes
    }

    /// A tree from a parted snapshot's head and its nodes, whose digests summed to `digest`.
    /// Refused if the nodes are not as many as the head counted. A digest other than the
    /// head's is logged, as ZooKeeper logs one that differs from its snapshot's, and the tree
    /// keeps the one its nodes add up to.
    pub fn from_parts(head: TreeHead, nodes: NodeMap, digest: u64) -> Result<DataTree, String> {
        if nodes.len() as u64 != head.nodes {
            return Err(format!("{} znodes where the snapshot counts {}", nodes.len(), head.nodes));
        }
        if head.digest.is_some_and(|d| d != digest) {
            tracing::error!(
                stored = head.digest.unwrap_or_default(),
                computed = digest,
                zxid = head.last_zxid,
                "the snapshot's tree digest differs from its nodes'"
            );
        }
        Ok(DataTree {
            nodes,
            sessions: head.sessions,
            reapable: head.reapable,
            last_zxid: head.last_zxid,
            data_size: head.data_size,
            digest: Some(digest),
            digest_log: imbl::Vector::new(),
            quotas: None,
        })
    }

    /// The digest computed from scratch, O(n).
    fn full_digest(&self) -> u64 {
        self.nodes
            .iter()
            .fold(0, |sum, (path, node)| digest::add(sum, digest::node(path, node.acl, &node.stat, node.data())))
    }

    /// Replaces one node digest (or part of one) by another in the tree digest.
    fn digest_swap(&mut self, removed: u64, added: u64) {
        if let Some(d) = self.digest.as_mut() {
            *d = digest::add(digest::sub(*d, removed), added);
        }
    }

    /// A node, if present.
    pub fn node(&self, path: &str) -> Option<NodeRef<'_>> {
        self.nodes.get(path)
    }

    /// Every node with its path, each parent before its children (by depth, then by path).
    pub fn iter_nodes(&self) -> impl Iterator<Item = (&str, NodeRef<'_>)> {
        self.nodes.iter()
    }

    /// A session, if present.
    pub fn session(&self, id: i64) -> Option<&SessionEntry> {
        self.sessions.get(&id)
    }

    /// All sessions.
    pub fn sessions(&self) -> impl Iterator<Item = (&i64, &SessionEntry)> {
        self.sessions.iter()
    }

    /// Total ephemeral nodes (`ephemerals_count`).
    pub fn ephemeral_count(&self) -> usize {
        self.sessions.values().map(|s| s.ephemerals.len()).sum()
    }

    /// Containers and TTL nodes, for the reaper.
    pub fn reapable(&self) -> impl Iterator<Item = &String> {
        self.reapable.iter()
    }

    /// True if the container or TTL node at `path` should be removed at `now_ms`
    /// (`ContainerManager.getCandidates`).
    pub fn is_reapable(&self, path: &str, now_ms: i64) -> bool {
        let Some(node) = self.nodes.get(path) else { return false };
        if node.stat.num_children > 0 {
            return false;
        }
        match node.kind() {
            NodeKind::Container => node.stat.cversion > 0,
            NodeKind::Ttl(ttl) => now_ms - node.stat.mtime > ttl,
            _ => false,
        }
    }

    /// ZooKeeper also stores the root under the key `""`, so reads of `""` see the root.
    fn read_key(path: &str) -> &str {
        if path.is_empty() {
            "/"
        } else {
            path
        }
    }

    fn read_node(&self, path: &str, perm: i32, ids: &[AuthId]) -> Result<NodeRef<'_>, TreeError> {
        let node = self.node(Self::read_key(path)).ok_or(TreeError::NoNode)?;
        if !acl::allowed(node.acl, perm, ids) {
            return Err(TreeError::NoAuth);
        }
        Ok(node)
    }

    /// `exists`: the node's Stat (no ACL check, as in ZooKeeper).
    pub fn exists(&self, path: &str) -> Result<Stat, TreeError> {
        self.node(Self::read_key(path)).map(|n| n.stat()).ok_or(TreeError::NoNode)
    }

    /// `getData`.
    pub fn get_data(&self, path: &str, ids: &[AuthId]) -> Result<(Option<Bytes>, Stat), TreeError> {
        let node = self.read_node(path, jute::perms::READ, ids)?;
        Ok((node.data_bytes(), node.stat()))
    }

    /// `getChildren`/`getChildren2`: children in name order, and the parent's Stat.
    pub fn get_children(&self, path: &str, ids: &[AuthId]) -> Result<(jute::Names, Stat), TreeError> {
        let node = self.read_node(path, jute::perms::READ, ids)?;
        // Room for names of up to 12 bytes with their 4-byte lengths; the buffer grows past it.
        let room = (node.stat.num_children as usize).saturating_mul(16).min(16 << 20);
        let mut names = jute::NamesBuilder::with_capacity(room);
        self.nodes.push_children(Self::read_key(path), &mut names);
        Ok((names.finish(), node.stat()))
    }

    /// `getACL`: needs READ or ADMIN; without ADMIN, digest ids are shown as `user:x`
    /// (ZooKeeper 3.8's `FinalRequestProcessor`, getACL case).
    pub fn get_acl(&self, path: &str, ids: &[AuthId]) -> Result<(Vec<AclEntry>, Stat), TreeError> {
        let node = self.read_node(path, jute::perms::READ | jute::perms::ADMIN, ids)?;
        let mut acl = (**node.acl).clone();
        if !acl::allowed(node.acl, jute::perms::ADMIN, ids) {
            for a in acl.iter_mut().filter(|a| a.id.scheme == "digest") {
                let user = a.id.id.split(':').next().unwrap_or("").to_owned();
                a.id.id = format!("{user}:x");
            }
        }
        Ok((acl, node.stat()))
    }

    /// `getAllChildrenNumber`: every descendant of `path`.
    pub fn all_children_number(&self, path: &str, ids: &[AuthId]) -> Result<i32, TreeError> {
        self.read_node(path, jute::perms::READ, ids)?;
        let count = self.nodes.descendants(Self::read_key(path));
        Ok(i32::try_from(count).unwrap_or(i32::MAX))
    }

    /// Every path below `path` (not `path` itself), each parent before its children.
    pub fn subtree(&self, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![path.to_owned()];
        while let Some(parent) = todo.pop() {
            let slash = if parent == "/" { "" } else { "/" };
            let start = todo.len();
            for name in self.nodes.children(&parent) {
                let child = format!("{parent}{slash}{name}");
                out.push(child.clone());
                todo.push(child);
            }
            // Visit in name order: the stack pops the last pushed first.
            todo[start..].reverse();
        }
        out
    }

    /// `getEphemerals`: the session's ephemerals at or below `prefix` ("" or "/" for all).
    pub fn ephemerals(&self, session_id: i64, prefix: &str) -> Vec<String> {
        let Some(s) = self.sessions.get(&session_id) else { return Vec::new() };
        s.ephemerals.iter().filter(|p| prefix.is_empty() || prefix == "/" || p.starts_with(prefix)).cloned().collect()
    }

    /// Applies one replicated txn at `zxid`. Every precondition is checked here, so the result
    /// (including errors) is the same on every replica.
    pub fn apply(&mut self, zxid: i64, txn: &Txn) -> (Result<TxnOutput, TreeError>, Vec<Change>) {
        self.compute_derived();
        self.last_zxid = self.last_zxid.max(zxid);
        let mut changes = Vec::new();
        let (op, enforce) = match &txn.op {
            TxnOp::QuotaEnforced(op) => (&**op, true),
            op => (op, false),
        };
        let result = match op {
            TxnOp::Multi(ops) => Ok(self.apply_multi(zxid, txn, ops, enforce, &mut changes)),
            op => self.apply_one(zxid, txn, op, enforce, &mut changes),
        };
        // DataTree.logZxidDigest: after every txn, failed ones included.
        if zxid % digest::DIGEST_LOG_INTERVAL == 0 {
            self.digest_log.push_back(ZxidDigest { zxid, digest: self.digest() });
            if self.digest_log.len() > digest::DIGEST_LOG_LIMIT {
                self.digest_log.pop_front();
            }
        }
        (result, changes)
    }

    fn apply_multi(
        &mut self,
        zxid: i64,
        txn: &Txn,
        ops: &[TxnOp],
        enforce: bool,
        changes: &mut Vec<Change>,
    ) -> TxnOutput {
        // Work on an O(1) copy; keep it only if every op succeeds.
        let mut scratch = self.clone();
        let mut scratch_changes = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        let mut failed_at = None;
        for (i, op) in ops.iter().enumerate() {
            match scratch.apply_one(zxid, txn, op, enforce, &mut scratch_changes) {
                Ok(out) => results.push(match out {
                    TxnOutput::Created { path, stat } => OpResult::Created { path, stat },
                    TxnOutput::Deleted => OpResult::Deleted,
                    TxnOutput::Stat(stat) => OpResult::SetData { stat },
                    _ => OpResult::Checked,
                }),
                Err(e) => {
                    failed_at = Some((i, e));
                    break;
                }
            }
        }
        match failed_at {
            None => {
                *self = scratch;
                changes.extend(scratch_changes);
                TxnOutput::Multi { results, failed: false }
            }
            Some((i, e)) => {
                let results = (0..ops.len())
                    .map(|j| match j.cmp(&i) {
                        std::cmp::Ordering::Less => OpResult::RolledBack,
                        std::cmp::Ordering::Equal => OpResult::Error(e),
                        std::cmp::Ordering::Greater => OpResult::Error(TreeError::RuntimeInconsistency),
                    })
                    .collect();
                TxnOutput::Multi { results, failed: true }
            }
        }
    }

    /// `setData` on `path`; `system` for the system's own write of `/zookeeper/config` (no
    /// ACL check, version kept); `enforce` refuses a change past a hard quota.
    #[allow(clippy::too_many_arguments)]
    fn set_data(
        &mut self,
        zxid: i64,
        txn: &Txn,
        path: &str,
        data: &Option<Bytes>,
        version: i32,
        system: bool,
        enforce: bool,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOutput, TreeError> {
        path::validate(path).map_err(|_| TreeError::BadArguments)?;
        let new_len = data.as_ref().map_or(0, Bytes::len) as i64;
        // The quota check comes after NoNode and NoAuth and before BadVersion
        // (PrepRequestProcessor.pRequest2Txn, setData); only paths under a quota pay for it.
        if let Some(quotas) = self.quotas.as_ref().filter(|q| !q.is_empty()) {
            if let Some(node) = self.nodes.get(path) {
                if system || acl::allowed(node.acl, jute::perms::WRITE, &txn.auth) {
                    let diff = new_len - node.data().map_or(0, <[u8]>::len) as i64;
                    quota::check(quotas, &self.nodes, path, 0, diff, enforce, txn.time_ms)?;
                }
            }
        }
        // One lookup for the checks and the change: this is the hottest write.
        let (stat, acl, old_len, old_digest, new_digest) = self
            .nodes
            .set_data_checked(
                path,
                data.as_deref(),
                |node| {
                    if !system && !acl::allowed(node.acl, jute::perms::WRITE, &txn.auth) {
                        return Err(TreeError::NoAuth);
                    }
                    // The system's own write keeps the version (-1 on /zookeeper/config, as
                    // ZooKeeper's `processReconfig` leaves it).
                    let new_version =
                        if system { node.stat.version } else { check_version(node.stat.version, version)? };
                    let old_len = node.data().map_or(0, <[u8]>::len) as i64;
                    Ok((new_version, old_len, digest::node(path, node.acl, &node.stat, node.data())))
                },
                |(new_version, old_len, old_digest), node| {
                    node.stat.version = new_version;
                    node.stat.mzxid = zxid;
                    node.stat.mtime = txn.time_ms;
                    let new_digest = digest::node(path, &node.acl, &node.stat, data.as_deref());
                    let stat = node.client_stat(data.as_ref().map_or(0, Bytes::len));
                    (stat, node.acl.clone(), old_len, old_digest, new_digest)
                },
            )
            .ok_or(TreeError::NoNode)??;
        self.digest_swap(old_digest, new_digest);
        self.data_size += new_len - old_len;
        self.add_usage(path, 0, new_len - old_len);
        changes.push(Change { event: EventType::NodeDataChanged, path: path.to_owned(), acl });
        Ok(TxnOutput::Stat(stat))
    }

    fn apply_one(
        &mut self,
        zxid: i64,
        txn: &Txn,
        op: &TxnOp,
        enforce: bool,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOutput, TreeError> {
        match op {
            TxnOp::CreateSession { session_id, timeout_ms, passwd } => {
                // An id already in the table keeps its ephemerals (ZooKeeper files them by
                // owner, not under the session): dropping them here would leave nodes no
                // close ever deletes.
                let entry = self.sessions.entry(*session_id).or_insert_with(|| SessionEntry {
                    timeout_ms: *timeout_ms,
                    passwd: passwd.clone(),
                    ephemerals: Ephemerals::default(),
                });
                entry.timeout_ms = *timeout_ms;
                entry.passwd = passwd.clone();
                Ok(TxnOutput::SessionCreated)
            }
            TxnOp::CloseSession { session_id } => {
                let Some(session) = self.sessions.remove(session_id) else {
                    return Err(TreeError::SessionExpired);
                };
                for path in session.ephemerals.iter() {
                    self.remove_node(path, zxid, changes);
                }
                Ok(TxnOutput::SessionClosed)
            }
            TxnOp::Create(create) => self.create(zxid, txn, create, enforce, changes),
            TxnOp::Delete { path, version } => self.delete(zxid, txn, path, *version, changes),
            TxnOp::SetData { path, data, version } => {
                self.set_data(zxid, txn, path, data, *version, false, enforce, changes)
            }
            TxnOp::SetConfig { servers, .. } => {
                // ZooKeeper's `DataTree.processReconfig`: the new configuration's text, its
                // version the reconfig's zxid, written as a setData by the system (no ACL).
                let data = Some(Bytes::from(format!("{servers}version={zxid:x}")));
                self.set_data(zxid, txn, CONFIG_NODE, &data, -1, true, false, changes)
            }
            TxnOp::SetAcl { path, acl: requested, version } => {
                path::validate(path).map_err(|_| TreeError::BadArguments)?;
                let fixed = acl::fixup(requested, &txn.auth).ok_or(TreeError::InvalidAcl)?;
                let node = self.node(path).ok_or(TreeError::NoNode)?;
                if !acl::allowed(node.acl, jute::perms::ADMIN, &txn.auth) {
                    return Err(TreeError::NoAuth);
                }
                let new_version = check_version(node.stat.aversion, *version)?;
                let old_meta = digest::meta(path, node.acl, &node.stat);
                let data_len = node.data().map_or(0, <[u8]>::len);
                let (stat, new_meta) = self
                    .nodes
                    .update(path, |node| {
                        node.acl = Arc::new(fixed);
                        node.stat.aversion = new_version;
                        (node.client_stat(data_len), digest::meta(path, &node.acl, &node.stat))
                    })
                    .ok_or(TreeError::NoNode)?;
                self.digest_swap(old_meta, new_meta);
                Ok(TxnOutput::Stat(stat))
            }
            TxnOp::Check { path, version } => {
                path::validate(path).map_err(|_| TreeError::BadArguments)?;
                let node = self.node(path).ok_or(TreeError::NoNode)?;
                if !acl::allowed(node.acl, jute::perms::READ, &txn.auth) {
                    return Err(TreeError::NoAuth);
                }
                check_version(node.stat.version, *version)?;
                Ok(TxnOutput::Checked(node.stat()))
            }
            TxnOp::Multi(_) => Err(TreeError::BadArguments),
            TxnOp::QuotaEnforced(op) => self.apply_one(zxid, txn, op, true, changes),
            TxnOp::Restore { .. } => Err(TreeError::BadArguments),
            TxnOp::Fail(e) => Err(*e),
            TxnOp::DeleteContainer { path } => {
                if !self.is_reapable(path, txn.time_ms) {
                    return Err(TreeError::NotEmpty);
                }
                self.remove_node(path, zxid, changes);
                Ok(TxnOutput::Deleted)
            }
        }
    }

    fn create(
        &mut self,
        zxid: i64,
        txn: &Txn,
        op: &CreateOp,
        enforce: bool,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOutput, TreeError> {
        let mode = CreateMode::try_from(op.flags).map_err(|_| TreeError::BadArguments)?;
        // PrepRequestProcessor.validatePathForCreate: a slash and no NUL, then the parent.
        let last_slash = op.path.rfind('/').ok_or(TreeError::BadArguments)?;
        if op.path.contains('\0') {
            return Err(TreeError::BadArguments);
        }
        let parent_path = if last_slash == 0 { "/" } else { &op.path[..last_slash] };
        let fixed_acl = acl::fixup(&op.acl, &txn.auth).ok_or(TreeError::InvalidAcl)?;
        let owner = owner_for(mode, txn.session_id, op.ttl);
        let data_len = op.data.as_ref().map_or(0, Bytes::len) as i64;
        let sessions = &self.sessions;
        let quotas = self.quotas.as_ref();
        // One lookup of the parent for the checks and its Stat change.
        let (path, shared_acl, parent_meta, parent_acl, new_parent_meta) = self
            .nodes
            .update_checked(
                parent_path,
                |parent, nodes| {
                    if !acl::allowed(parent.acl, jute::perms::CREATE, &txn.auth) {
                        return Err(TreeError::NoAuth);
                    }
                    let path = if mode.is_sequential() {
                        format!("{}{:010}", op.path, parent.stat.cversion)
                    } else {
                        op.path.clone()
                    };
                    path::validate(&path).map_err(|_| TreeError::BadArguments)?;
                    if nodes.contains(&path) {
                        return Err(TreeError::NodeExists);
                    }
                    if let NodeKind::Ephemeral(_) = parent.kind() {
                        return Err(TreeError::NoChildrenForEphemerals);
                    }
                    if mode.is_ephemeral() && !sessions.contains_key(&txn.session_id) {
                        return Err(TreeError::SessionExpired);
                    }
                    // Last, as in PrepRequestProcessor.pRequest2TxnCreate.
                    if let Some(quotas) = quotas {
                        quota::check(quotas, nodes, &path, 1, data_len, enforce, txn.time_ms)?;
                    }
                    // Share the parent's ACL allocation when it is the same list (the common case).
                    let shared_acl = if **parent.acl == fixed_acl { parent.acl.clone() } else { Arc::new(fixed_acl) };
                    Ok((path, shared_acl))
                },
                |(path, shared_acl), parent| {
                    let before = digest::meta(parent_path, &parent.acl, &parent.stat);
                    parent.stat.num_children += 1;
                    parent.stat.cversion = parent.stat.cversion.wrapping_add(1);
                    parent.stat.pzxid = zxid;
                    (path, shared_acl, before, parent.acl.clone(), digest::meta(parent_path, &parent.acl, &parent.stat))
                },
            )
            .ok_or(TreeError::NoNode)??;
        let node = Node::new(shared_acl, zxid, txn.time_ms, owner);
        let stat = node.client_stat(op.data.as_ref().map_or(0, Bytes::len));
        let node_acl = node.acl.clone();
        let node_digest = digest::node(&path, &node.acl, &node.stat, op.data.as_deref());
        self.digest_swap(parent_meta, new_parent_meta);
        self.digest_swap(0, node_digest);
        self.data_size += path.len() as i64 + op.data.as_ref().map_or(0, Bytes::len) as i64;
        self.nodes.insert(&path, node, op.data.as_deref());
        match kind_of(owner) {
            NodeKind::Ephemeral(session) => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.ephemerals.insert(path.clone());
                }
            }
            NodeKind::Container | NodeKind::Ttl(_) => {
                self.reapable.insert(path.clone());
            }
            NodeKind::Normal => {}
        }
        self.quota_created(&path, data_len);
        changes.push(Change { event: EventType::NodeCreated, path: path.clone(), acl: node_acl });
        changes.push(Change { event: EventType::NodeChildrenChanged, path: parent_path.to_owned(), acl: parent_acl });
        Ok(TxnOutput::Created { path, stat })
    }

    fn delete(
        &mut self,
        zxid: i64,
        txn: &Txn,
        path: &str,
        version: i32,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOutput, TreeError> {
        // PrepRequestProcessor.getParentPathAndValidate.
        let last_slash = path.rfind('/').ok_or(TreeError::BadArguments)?;
        if path.contains('\0') || is_special(path) {
            return Err(TreeError::BadArguments);
        }
        let parent_path = if last_slash == 0 { "/" } else { &path[..last_slash] };
        let parent = self.nodes.get(parent_path).ok_or(TreeError::NoNode)?;
        if !acl::allowed(parent.acl, jute::perms::DELETE, &txn.auth) {
            return Err(TreeError::NoAuth);
        }
        let node = self.node(path).ok_or(TreeError::NoNode)?;
        check_version(node.stat.version, version)?;
        if node.stat.num_children > 0 {
            return Err(TreeError::NotEmpty);
        }
        self.remove_node(path, zxid, changes);
        Ok(TxnOutput::Deleted)
    }

    /// Removes a childless node and updates its parent, session and indexes
    /// Takes a node of `kind` off its session's list or the reapable set.
    fn unfile_kind(&mut self, path: &str, kind: NodeKind) {
        match kind {
            NodeKind::Ephemeral(session) => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.ephemerals.remove(path);
                }
            }
            NodeKind::Container | NodeKind::Ttl(_) => {
                self.reapable.remove(path);
            }
            NodeKind::Normal => {}
        }
    }

    /// (`DataTree.deleteNode`: the parent's pzxid moves, its cversion does not).
    fn remove_node(&mut self, path: &str, zxid: i64, changes: &mut Vec<Change>) {
        let Some(node) = self.nodes.remove(path) else { return };
        let data = node.view().data();
        let data_len = data.map_or(0, <[u8]>::len) as i64;
        self.digest_swap(digest::node(path, &node.acl, &node.stat, data), 0);
        self.data_size -= path.len() as i64 + data_len;
        self.unfile_kind(path, node.kind());
        self.quota_removed(path, data_len);
        let parent_path = path::parent(path).unwrap_or("/").to_owned();
        let mut parent_acl = SharedAcl::default();
        let parent = self.nodes.update(&parent_path, |parent| {
            let before = digest::meta(&parent_path, &parent.acl, &parent.stat);
            parent.stat.num_children = parent.stat.num_children.saturating_sub(1);
            if zxid > parent.stat.pzxid {
                parent.stat.pzxid = zxid;
            }
            (before, parent.acl.clone(), digest::meta(&parent_path, &parent.acl, &parent.stat))
        });
        if let Some((old_meta, acl, new_meta)) = parent {
            parent_acl = acl;
            self.digest_swap(old_meta, new_meta);
        }
        changes.push(Change { event: EventType::NodeDeleted, path: path.to_owned(), acl: node.acl.clone() });
        changes.push(Change { event: EventType::NodeChildrenChanged, path: parent_path, acl: parent_acl });
    }
}

#[cfg(test)]
mod tests;
