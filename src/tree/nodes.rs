//! The node map: every znode by path, in a persistent ordered map whose order puts each
//! node's children next to each other, so the tree needs no child-name sets.
//!
//! A key is the path behind one character whose code point is the path's depth (`/` is 0,
//! `/a` is 1, `/a/b` is 2). Keys therefore sort by depth first and by path second, and the
//! children of `/a` are exactly the keys from `depth 2` + `/a/` up to the first key without
//! that prefix. Keys of up to 24 bytes live inline in the map (`CompactString`); nodes sit
//! behind an `Arc`, so the copy-on-write after a snapshot or a multi's scratch copy copies
//! pointers. A node keeps only its child count.
//!
//! The serialized form (snapshots, and snapshots sent to followers) is the one the tree had
//! with child-name sets: a map from path to node, each node with its children's names. So
//! snapshots written before this layout load, and servers of both layouts exchange them.

use std::ops::Bound;
use std::sync::Arc;

use compact_str::CompactString;
use imbl::OrdMap;
use jute::StatPersisted;
use serde::de::MapAccess;
use serde::de::SeqAccess;
use serde::de::Visitor;
use serde::ser::SerializeMap;
use serde::ser::SerializeSeq;
use serde::Deserialize;
use serde::Deserializer;
use serde::Serialize;
use serde::Serializer;

use super::Node;
use super::SharedAcl;

/// The depth of a path: its number of components (`/` has none).
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The key prefix for a depth: a character whose code point sorts as the depth does.
/// Code points skip the surrogate range; depths past the last code point (paths of megabytes)
/// share it, which [`NodeMap::children`] tolerates by checking names for slashes.
fn depth_char(d: usize) -> char {
    let cp = if d < 0xD800 { d } else { d + 0x800 };
    u32::try_from(cp).ok().and_then(char::from_u32).unwrap_or(char::MAX)
}

fn key_of(d: usize, parts: &[&str]) -> CompactString {
    let c = depth_char(d);
    let mut k = CompactString::with_capacity(c.len_utf8() + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(c);
    for p in parts {
        k.push_str(p);
    }
    k
}

/// The map key of a path.
fn key(path: &str) -> CompactString {
    key_of(depth(path), &[path])
}

/// The path inside a key.
fn path_of(key: &str) -> &str {
    let mut chars = key.chars();
    chars.next();
    chars.as_str()
}

/// The common start of the keys of `parent`'s descendants `levels` below it.
fn descendant_prefix(parent: &str, levels: usize) -> CompactString {
    let slash = if parent == "/" { "" } else { "/" };
    key_of(depth(parent) + levels, &[parent, slash])
}

/// Every znode by path.
#[derive(Debug, Clone, Default)]
pub struct NodeMap {
    map: OrdMap<CompactString, Arc<Node>>,
}

impl NodeMap {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.map.get(key(path).as_str()).map(|n| &**n)
    }

    /// A node to change, copied first if a snapshot or scratch copy still shares it.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.map.get_mut(key(path).as_str()).map(Arc::make_mut)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.map.contains_key(key(path).as_str())
    }

    /// Inserts a node without touching its parent's child count (the caller does).
    pub fn insert(&mut self, path: &str, node: Node) {
        self.map.insert(key(path), Arc::new(node));
    }

    pub fn remove(&mut self, path: &str) -> Option<Arc<Node>> {
        self.map.remove(key(path).as_str())
    }

    /// Every node with its path, by depth and then by path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.map.iter().map(|(k, n)| (path_of(k), &**n))
    }

    /// The keys (with nodes) of `parent`'s descendants `levels` below it, and the length of
    /// their common prefix.
    fn level(&self, parent: &str, levels: usize) -> (usize, impl Iterator<Item = (&CompactString, &Arc<Node>)>) {
        let prefix = descendant_prefix(parent, levels);
        let len = prefix.len();
        let iter = self
            .map
            .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix.as_str()));
        (len, iter)
    }

    /// The names of `parent`'s children, in byte order.
    pub fn children<'a>(&'a self, parent: &str) -> impl Iterator<Item = &'a str> + 'a {
        let (len, iter) = self.level(parent, 1);
        iter.map(move |(k, _)| &k[len..]).filter(|name| !name.contains('/'))
    }

    /// The number of `parent`'s descendants, one level of the map at a time.
    pub fn descendants(&self, parent: &str) -> usize {
        let mut total = 0;
        for levels in 1.. {
            let (_, iter) = self.level(parent, levels);
            let n = iter.count();
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    }
}

impl PartialEq for NodeMap {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

/// A node as serialized: the fields of [`Node`] with its children's names in place of the
/// count (`None` for a leaf), as the tree stored them before this layout.
#[derive(Serialize)]
struct NodeOut<'a> {
    #[serde(with = "serde_bytes")]
    data: &'a Option<Box<[u8]>>,
    acl: &'a SharedAcl,
    stat: &'a StatPersisted,
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
            let children =
                (node.num_children > 0).then_some(ChildNames { map: self, parent: path, count: node.num_children });
            map.serialize_entry(path, &NodeOut { data: &node.data, acl: &node.acl, stat: &node.stat, children })?;
        }
        map.end()
    }
}

/// A node as deserialized: the children's names are only counted.
#[derive(Deserialize)]
struct NodeIn {
    #[serde(with = "serde_bytes")]
    data: Option<Box<[u8]>>,
    #[serde(deserialize_with = "super::acl::deserialize_shared")]
    acl: SharedAcl,
    stat: StatPersisted,
    #[serde(deserialize_with = "count_names")]
    children: u32,
}

fn count_names<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct Count;
    impl<'de> Visitor<'de> for Count {
        type Value = u32;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a set of child names")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u32, A::Error> {
            let mut n = 0u32;
            while seq.next_element::<CompactString>()?.is_some() {
                n = n.saturating_add(1);
            }
            Ok(n)
        }
    }
    struct MaybeCount;
    impl<'de> Visitor<'de> for MaybeCount {
        type Value = u32;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an optional set of child names")
        }
        fn visit_none<E>(self) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
            d.deserialize_seq(Count)
        }
    }
    d.deserialize_option(MaybeCount)
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
                    let node = Node { data: n.data, acl: n.acl, stat: n.stat, num_children: n.children };
                    nodes.map.insert(key(&path), Arc::new(node));
                }
                Ok(nodes)
            }
        }
        d.deserialize_map(Nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_depth_then_path() {
        let mut keys: Vec<CompactString> =
            ["/a/b", "/", "/b", "/a", "/a/c", "/ab/x", "/a/b/c"].iter().map(|p| key(p)).collect();
        keys.sort();
        let paths: Vec<&str> = keys.iter().map(|k| path_of(k)).collect();
        assert_eq!(paths, ["/", "/a", "/b", "/a/b", "/a/c", "/ab/x", "/a/b/c"]);
    }

    #[test]
    fn depth_chars_keep_their_order_past_the_surrogates() {
        let around = [0, 1, 127, 128, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0x10_0000];
        for w in around.windows(2) {
            assert!(depth_char(w[0]) < depth_char(w[1]), "{} vs {}", w[0], w[1]);
        }
    }
}
