//! The serialized form of the node map (snapshots, and snapshots sent to followers): a map
//! from path to node, each node with its children's names, as the tree had with child-name
//! sets. So snapshots written before the current layout load, and servers of both layouts
//! exchange them.

use serde::de::MapAccess;
use serde::de::SeqAccess;
use serde::de::Visitor;
use serde::ser::SerializeMap;
use serde::ser::SerializeSeq;
use serde::Deserialize;
use serde::Deserializer;
use serde::Serialize;
use serde::Serializer;

use compact_str::CompactString;
use jute::StatPersisted;

use super::super::Node;
use super::super::NodeStat;
use super::super::SharedAcl;
use super::NodeMap;

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
