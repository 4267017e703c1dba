//! The node map: every znode by path, in a persistent ordered map whose order puts each
//! node's children next to each other, so the tree needs no child-name sets.
//!
//! A key is the path behind one character whose code point is the path's depth (`/` is 0,
//! `/a` is 1, `/a/b` is 2). Keys therefore sort by depth first and by path second, and the
//! children of `/a` are exactly the keys from `depth 2` + `/a/` up to the first key without
//! that prefix. The map is a persistent ordered set of pointers, each to one allocation
//! holding the key (inline up to 24 bytes, `CompactString`) and the node: the copy-on-write
//! after a snapshot or a multi's scratch copy copies pointers, and a leaf of the set holds 8
//! bytes an entry. A node keeps only its child count. A change to a node takes its entry out
//! and puts it back ([`NodeMap::update`]), so the node is copied only while a snapshot or a
//! scratch copy shares it.
//!
//! The serialized form (snapshots, and snapshots sent to followers) is the one the tree had
//! with child-name sets: a map from path to node, each node with its children's names. So
//! snapshots written before this layout load, and servers of both layouts exchange them.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;
use std::ops::Deref;
use std::sync::Arc;

use compact_str::CompactString;
use imbl::OrdSet;
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
use super::NodeStat;
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

/// A key and its node, in one allocation.
#[derive(Debug, Clone)]
struct Keyed {
    key: CompactString,
    node: Node,
}

/// An entry of the set: ordered, compared and looked up by its key alone.
#[derive(Debug, Clone)]
struct Entry(Arc<Keyed>);

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.as_str().cmp(other.0.key.as_str())
    }
}

/// A node taken out of the map.
pub struct Removed(Arc<Keyed>);

impl Deref for Removed {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.0.node
    }
}

/// Every znode by path.
#[derive(Debug, Clone, Default)]
pub struct NodeMap {
    set: OrdSet<Entry>,
}

impl NodeMap {
    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.set.get(key(path).as_str()).map(|e| &e.0.node)
    }

    /// Changes a node: takes it out, lets `f` change it (copying it first if a snapshot or
    /// scratch copy still shares it) and puts it back. `None` if there is no such node.
    pub fn update<R>(&mut self, path: &str, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        match self.update_checked(path, |_, _| Ok::<(), std::convert::Infallible>(()), |(), node| f(node))? {
            Ok(r) => Some(r),
            Err(never) => match never {},
        }
    }

    /// [`NodeMap::update`] with a check first, in one lookup: `check` sees the node (and the
    /// rest of the map) and either refuses (the node goes back unchanged) or hands `change`
    /// what it worked out.
    pub fn update_checked<C, R, E>(
        &mut self,
        path: &str,
        check: impl FnOnce(&Node, &NodeMap) -> Result<C, E>,
        change: impl FnOnce(C, &mut Node) -> R,
    ) -> Option<Result<R, E>> {
        let mut entry = self.set.remove(key(path).as_str())?;
        let checked = check(&entry.0.node, self);
        let result = checked.map(|c| change(c, &mut Arc::make_mut(&mut entry.0).node));
        self.set.insert(entry);
        Some(result)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.set.contains(key(path).as_str())
    }

    /// Inserts a node without touching its parent's child count (the caller does).
    pub fn insert(&mut self, path: &str, node: Node) {
        self.set.insert(Entry(Arc::new(Keyed { key: key(path), node })));
    }

    pub fn remove(&mut self, path: &str) -> Option<Removed> {
        self.set.remove(key(path).as_str()).map(|e| Removed(e.0))
    }

    /// Every node with its path, by depth and then by path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.set.iter().map(|e| (path_of(&e.0.key), &e.0.node))
    }

    /// The keys of `parent`'s descendants `levels` below it, and the length of their common
    /// prefix.
    fn level(&self, parent: &str, levels: usize) -> (usize, impl Iterator<Item = &str>) {
        let prefix = descendant_prefix(parent, levels);
        let len = prefix.len();
        let iter = self
            .set
            .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .map(|e| e.0.key.as_str())
            .take_while(move |k| k.starts_with(prefix.as_str()));
        (len, iter)
    }

    /// The names of `parent`'s children, in byte order.
    pub fn children<'a>(&'a self, parent: &str) -> impl Iterator<Item = &'a str> + 'a {
        let (len, iter) = self.level(parent, 1);
        iter.map(move |k| &k[len..]).filter(|name| !name.contains('/'))
    }

    /// The number of `parent`'s descendants, one level of the map at a time.
    pub fn descendants(&self, parent: &str) -> usize {
        let depth = depth(parent);
        let mut total = 0;
        for levels in 1.. {
            let (_, iter) = self.level(parent, levels);
            let n = iter.count();
            total += n;
            // The last depth character stands for every depth from there down.
            if n == 0 || depth_char(depth + levels) == char::MAX {
                break;
            }
        }
        total
    }
}

impl PartialEq for NodeMap {
    /// Same paths with equal nodes.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// A node as serialized: the fields of [`Node`] with its children's names in place of the
/// count (`None` for a leaf), as the tree stored them before this layout.
#[derive(Serialize)]
struct NodeOut<'a> {
    #[serde(with = "serde_bytes")]
    data: &'a Option<Box<[u8]>>,
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
                &NodeOut { data: &node.data, acl: &node.acl, stat: node.stat.persisted(), children },
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
    #[serde(deserialize_with = "super::acl::deserialize_shared")]
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
                    let node = Node { data: n.data, acl: n.acl, stat: NodeStat::from_persisted(&n.stat, n.children) };
                    nodes.insert(&path, node);
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

    /// A node with its key and `Arc` counts fits the allocator's 128-byte class; one field
    /// more moves every znode to the 160-byte class (about 30 MiB per million znodes).
    #[test]
    fn an_entry_fits_128_bytes() {
        assert_eq!(std::mem::size_of::<NodeStat>(), 64);
        assert!(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Keyed>() <= 128);
        assert_eq!(std::mem::size_of::<Entry>(), 8);
    }

    #[test]
    fn depth_chars_keep_their_order_past_the_surrogates() {
        let around = [0, 1, 127, 128, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0x10_0000];
        for w in around.windows(2) {
            assert!(depth_char(w[0]) < depth_char(w[1]), "{} vs {}", w[0], w[1]);
        }
    }
}
