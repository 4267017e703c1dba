//! The serialized forms of the node map. The map form, in snapshots written before parted
//! snapshots and in uncompressed ones: a map from path to node, each node with its children's
//! names, as the tree had with child-name sets. The batch form, in parted snapshots: nodes in
//! key order cut into batches that decode independently (on as many threads as there are
//! cores) and join the map without a search per node.

use serde::de::MapAccess;
use serde::de::SeqAccess;
use serde::de::Visitor;
use serde::ser::SerializeMap;
use serde::ser::SerializeSeq;
use serde::Deserialize;
use serde::Deserializer;
use serde::Serialize;
use serde::Serializer;

use std::collections::HashMap;
use std::sync::Arc;

use compact_str::CompactString;
use jute::StatPersisted;

use super::super::acl;
use super::super::acl::AclEntry;
use super::super::digest;
use super::super::Node;
use super::super::NodeStat;
use super::super::SharedAcl;
use super::entry::Encoded;
use super::entry::Entry;
use super::keys::depth;
use super::keys::depth_char;
use super::keys::path_of;
use super::Chunk;
use super::NodeMap;
use super::CHUNK;

/// A node as serialized: the fields of [`Node`] with its children's names in place of the
/// count (`None` for a leaf), as the tree stored them before this layout.
#[derive(Serialize)]
struct NodeOut<'a> {
    #[serde(with = "serde_bytes")]
    data: Option<&'a [u8]>,
    acl: &'a SharedAcl,
    stat: StatPersisted,
    children: Option<ChildNames<'a>>,
}

struct ChildNames<'a> {
    map: &'a NodeMap,
    parent: &'a str,
    count: u32,
}

impl Serialize for ChildNames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.count as usize))?;
        let mut written = 0u32;
        for name in self.map.children(self.parent) {
            seq.serialize_element(name)?;
            written += 1;
        }
        if written != self.count {
            return Err(serde::ser::Error::custom(format!(
                "{} has {written} children in the map but counts {}",
                self.parent, self.count
            )));
        }
        seq.end()
    }
}

impl Serialize for NodeMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (path, node) in self.iter() {
            let children = (node.stat.num_children > 0).then_some(ChildNames {
                map: self,
                parent: path,
                count: node.stat.num_children,
            });
            map.serialize_entry(
                path,
                &NodeOut { data: node.data(), acl: node.acl, stat: node.stat.persisted(), children },
            )?;
        }
        map.end()
    }
}

/// A node as deserialized: the children's names are only counted.
#[derive(Deserialize)]
struct NodeIn {
    #[serde(with = "serde_bytes")]
    data: Option<Box<[u8]>>,
    #[serde(deserialize_with = "super::super::acl::deserialize_shared")]
    acl: SharedAcl,
    stat: StatPersisted,
    #[serde(deserialize_with = "count_names")]
    children: u32,
}

/// The number of names in a serialized child-name set.
struct NameCount(u32);

impl<'de> Deserialize<'de> for NameCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NameCount, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = NameCount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a set of child names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NameCount, A::Error> {
                let mut n = 0u32;
                while seq.next_element::<CompactString>()?.is_some() {
                    n = n.saturating_add(1);
                }
                Ok(NameCount(n))
            }
        }
        d.deserialize_seq(Count)
    }
}

/// A node's children as serialized (`None` for a leaf), counted.
fn count_names<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<NameCount>::deserialize(d)?.map_or(0, |c| c.0))
}

impl<'de> Deserialize<'de> for NodeMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NodeMap, D::Error> {
        struct Nodes;
        impl<'de> Visitor<'de> for Nodes {
            type Value = NodeMap;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map from path to znode")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<NodeMap, A::Error> {
                let mut nodes = NodeMap::default();
                while let Some((path, n)) = access.next_entry::<CompactString, NodeIn>()? {
                    let node = Node { acl: n.acl, stat: NodeStat::from_persisted(&n.stat, n.children) };
                    nodes.insert(&path, node, n.data.as_deref());
                }
                Ok(nodes)
            }
        }
        d.deserialize_map(Nodes)
    }
}

// Parted snapshots: the map as batches of nodes in key order, each decodable on its own (so
// a restart decodes them on every core), with each distinct ACL written once per batch.

/// A node as a batch stores it: its path, data, the index of its ACL in the batch's table, its
/// persisted Stat and its child count.
#[derive(Serialize)]
struct BatchNodeOut<'a> {
    path: &'a str,
    #[serde(with = "serde_bytes")]
    data: Option<&'a [u8]>,
    acl: u32,
    stat: StatPersisted,
    children: u32,
}

#[derive(Deserialize)]
struct BatchNodeIn<'a> {
    #[serde(borrow)]
    path: &'a str,
    #[serde(borrow, with = "serde_bytes")]
    data: Option<&'a [u8]>,
    acl: u32,
    stat: StatPersisted,
    children: u32,
}

#[derive(Serialize)]
struct BatchOut<'s, 'a> {
    acls: &'s [&'a [AclEntry]],
    nodes: &'s [BatchNodeOut<'a>],
}

#[derive(Deserialize)]
struct BatchIn<'a> {
    acls: Vec<Vec<AclEntry>>,
    #[serde(borrow)]
    nodes: Vec<BatchNodeIn<'a>>,
}

impl NodeMap {
    /// Encodes the map as batches in key order, each of `per_batch` nodes or cut earlier once
    /// its paths and data reach `max_bytes` (the last may hold fewer), and hands each batch's
    /// bytes to `emit`.
    pub fn encode_batches(
        &self,
        per_batch: usize,
        max_bytes: usize,
        mut emit: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut acls: Vec<&[AclEntry]> = Vec::new();
        let mut index: HashMap<*const Vec<AclEntry>, u32> = HashMap::new();
        let mut nodes = Vec::with_capacity(per_batch.min(1 << 16));
        let mut bytes = 0;
        // Each batch is encoded into the one buffer, and the node and ACL lists keep their room.
        let mut flush = |acls: &mut Vec<&[AclEntry]>, nodes: &mut Vec<BatchNodeOut<'_>>| {
            buf.clear();
            buf = postcard::to_extend(&BatchOut { acls, nodes }, std::mem::take(&mut buf))
                .map_err(std::io::Error::other)?;
            acls.clear();
            nodes.clear();
            emit(&buf)
        };
        for chunk in self.chunks.values() {
            for e in &chunk.0 {
                let l = e.layout();
                let acl = e.acl();
                let i = match index.get(&Arc::as_ptr(acl)) {
                    Some(&i) => i,
                    None => {
                        let i = u32::try_from(acls.len()).map_err(std::io::Error::other)?;
                        acls.push(acl.as_slice());
                        index.insert(Arc::as_ptr(acl), i);
                        i
                    }
                };
                let stat = e.stat_at(&l);
                let (path, data) = (path_of(e.key()), e.data_at(&l));
                bytes += path.len() + data.map_or(0, <[u8]>::len);
                nodes.push(BatchNodeOut { path, data, acl: i, stat: stat.persisted(), children: stat.num_children });
                if nodes.len() >= per_batch || bytes >= max_bytes {
                    flush(&mut acls, &mut nodes)?;
                    index.clear();
                    bytes = 0;
                }
            }
        }
        if !nodes.is_empty() {
            flush(&mut acls, &mut nodes)?;
        }
        Ok(())
    }

    /// Decodes one batch [`NodeMap::encode_batches`] wrote. Its nodes must come in key order.
    pub fn decode_batch(bytes: &[u8]) -> Result<DecodedBatch, String> {
        let (batch, rest): (BatchIn<'_>, _) = postcard::take_from_bytes(bytes).map_err(|e| e.to_string())?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after a batch of nodes", rest.len()));
        }
        let acls: Vec<SharedAcl> = batch.acls.into_iter().map(acl::share).collect();
        let mut entries: Vec<Entry> = Vec::with_capacity(batch.nodes.len());
        let mut digest = 0;
        let mut key = String::new();
        for n in batch.nodes {
            let acl = acls.get(n.acl as usize).ok_or_else(|| format!("{}: no ACL {} in its batch", n.path, n.acl))?;
            if !n.path.starts_with('/') {
                return Err(format!("{:?} is not a path", n.path));
            }
            key.clear();
            key.push(depth_char(depth(n.path)));
            key.push_str(n.path);
            if entries.last().is_some_and(|prev| prev.key_bytes() >= key.as_bytes()) {
                return Err(format!("{} is out of order", n.path));
            }
            let stat = NodeStat::from_persisted(&n.stat, n.children);
            digest = digest::add(digest, digest::node(n.path, acl, &stat, n.data));
            entries.push(Entry::build(&key, acl.clone(), &Encoded::new(&stat), n.data));
        }
        Ok(DecodedBatch { entries, digest })
    }
}

/// A batch of nodes decoded (see [`NodeMap::decode_batch`]), ready to join a [`MapBuilder`].
pub struct DecodedBatch {
    entries: Vec<Entry>,
    digest: u64,
}

impl DecodedBatch {
    /// The sum of its nodes' digests (see [`digest::node`]).
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

/// Builds a map from batches given in key order: full chunks one after another, with no
/// search or copy per node.
#[derive(Default)]
pub struct MapBuilder {
    map: NodeMap,
    chunk: Vec<Entry>,
    last: Option<Entry>,
}

impl MapBuilder {
    pub fn push(&mut self, batch: DecodedBatch) -> Result<(), String> {
        if let (Some(last), Some(first)) = (&self.last, batch.entries.first()) {
            if last.key_bytes() >= first.key_bytes() {
                return Err(format!("{} is out of order", path_of(first.key())));
            }
        }
        if let Some(last) = batch.entries.last() {
            self.last = Some(last.clone());
        }
        for e in batch.entries {
            if self.chunk.len() == CHUNK {
                self.close_chunk();
            }
            if self.chunk.capacity() == 0 {
                self.chunk.reserve_exact(CHUNK);
            }
            self.chunk.push(e);
        }
        Ok(())
    }

    /// Puts the chunk being filled into the map: the first under the empty key, as
    /// [`NodeMap`] keys its first chunk, each other under its first key.
    fn close_chunk(&mut self) {
        let entries = std::mem::take(&mut self.chunk);
        let Some(first) = entries.first() else { return };
        let key = if self.map.chunks.is_empty() { CompactString::default() } else { first.key().into() };
        self.map.len += entries.len();
        self.map.chunks.insert(key, Arc::new(Chunk(entries)));
    }

    pub fn finish(mut self) -> NodeMap {
        self.close_chunk();
        self.map
    }
}
