//! Tests of the node map: key order, the stored Stat, chunks, and the serialized form.

use super::entry::*;
use super::*;
use crate::tree::Node;
use crate::tree::NodeStat;
use crate::tree::SharedAcl;

#[test]
fn keys_sort_by_depth_then_path() {
    let mut keys: Vec<CompactString> =
        ["/a/b", "/", "/b", "/a", "/a/c", "/ab/x", "/a/b/c"].iter().map(|p| key(p)).collect();
    keys.sort();
    let paths: Vec<&str> = keys.iter().map(|k| path_of(k)).collect();
    assert_eq!(paths, ["/", "/a", "/b", "/a/b", "/a/c", "/ab/x", "/a/b/c"]);
}

/// A node created and never changed, with a 22-byte key (the memory benchmark's) and 100
/// bytes of data, fits the allocator's 160-byte class; one that stored its whole Stat,
/// its key in a `CompactString` and its length in the allocation took the 224-byte class
/// (about 60 MiB more per million znodes).
#[test]
fn an_unchanged_entry_with_100_bytes_fits_160() {
    assert_eq!(std::mem::size_of::<Entry>(), 16);
    let key = key("/warden-mem/b999/n999");
    assert_eq!(key.len(), 22);
    let e = Entry::new(&key, Node::new(Arc::default(), 1 << 32, 1_700_000_000_000, 0), Some(&[7; 100]));
    assert_eq!(e.bytes().len(), 2 + 1 + 22 + 16 + 100);
    let count_and_acl = std::mem::size_of::<usize>() + std::mem::size_of::<SharedAcl>();
    assert!(count_and_acl + e.bytes().len() <= 160);
}

fn stat_strategy() -> impl proptest::strategy::Strategy<Value = NodeStat> {
    use proptest::prelude::*;
    // Each field either its default or anything, so every combination of bits shows up.
    let wide = || prop_oneof![Just(None), any::<i64>().prop_map(Some)];
    let narrow = || prop_oneof![Just(0), any::<i32>()];
    (any::<i64>(), any::<i64>(), [wide(), wide(), wide(), wide()], [narrow(), narrow(), narrow(), narrow()]).prop_map(
        |(czxid, ctime, w, n)| NodeStat {
            czxid,
            ctime,
            mzxid: w[0].unwrap_or(czxid),
            pzxid: w[1].unwrap_or(czxid),
            mtime: w[2].unwrap_or(ctime),
            ephemeral_owner: w[3].unwrap_or(0),
            version: n[0],
            cversion: n[1],
            aversion: n[2],
            num_children: n[3] as u32,
        },
    )
}

proptest::proptest! {
    /// Every Stat reads back as it was stored, with and without data, and keeps doing so
    /// through in-place changes and changes that change its stored length.
    #[test]
    fn stats_read_back(
        a in stat_strategy(),
        b in stat_strategy(),
        path in "/[a-z0-9/]{0,300}",
        data in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1500)),
    ) {
        let enc = Encoded::new(&a);
        proptest::prop_assert_eq!(enc.len, stat_len(enc.bits));
        let k = key(&path);
        let mut e = Entry::new(&k, Node { acl: Arc::default(), stat: a }, data.as_deref());
        proptest::prop_assert_eq!(e.key(), k.as_str());
        proptest::prop_assert_eq!(e.stat(), a);
        proptest::prop_assert_eq!(e.data(), data.as_deref());
        let shared = e.clone();
        e.modify(|n| n.stat = b);
        proptest::prop_assert_eq!((e.stat(), e.data()), (b, data.as_deref()));
        proptest::prop_assert_eq!(shared.stat(), a);
        e.modify(|n| n.stat = a);
        proptest::prop_assert_eq!((e.stat(), e.data()), (a, data.as_deref()));
        e.replace(None, |n| n.stat = b);
        proptest::prop_assert_eq!((e.stat(), e.data()), (b, None));
        proptest::prop_assert_eq!((shared.stat(), shared.data()), (a, data.as_deref()));
        proptest::prop_assert_eq!((e.key(), shared.key()), (k.as_str(), k.as_str()));
    }
}

#[test]
fn a_refused_set_data_changes_nothing() {
    let mut map = NodeMap::default();
    map.insert("/n", Node::new(Arc::default(), 1, 0, 0), Some(b"old"));
    let snapshot = map.clone();
    let refused: Option<Result<(), &str>> = map.set_data_checked(
        "/n",
        Some(b"new"),
        |n| Err(if n.data() == Some(b"old") { "no" } else { "?" }),
        |(), _| (),
    );
    assert_eq!(refused, Some(Err("no")));
    let missing: Option<Result<(), &str>> = map.set_data_checked("/m", Some(b"new"), |_| Ok(()), |(), _| ());
    assert_eq!(missing, None);
    for m in [&map, &snapshot] {
        assert_eq!(m.get("/n").map(|n| (n.data(), n.stat.version)), Some((Some(&b"old"[..]), 0)));
        assert_eq!(m.len(), 1);
    }
}

#[test]
fn data_null_empty_and_replaced() {
    let mut map = NodeMap::default();
    map.insert("/n", Node::new(Arc::default(), 1, 0, 0), None);
    map.insert("/e", Node::new(Arc::default(), 1, 0, 0), Some(b""));
    assert_eq!(map.get("/n").map(|n| n.data()), Some(None));
    assert_eq!(map.get("/e").map(|n| n.data()), Some(Some(&b""[..])));
    let snapshot = map.clone();
    let r: Option<Result<(), ()>> = map.set_data_checked("/n", Some(b"x"), |_| Ok(()), |(), n| n.stat.version = 1);
    assert_eq!(r, Some(Ok(())));
    map.update("/e", |n| n.stat.version = 2);
    assert_eq!(map.get("/n").map(|n| (n.data(), n.stat.version)), Some((Some(&b"x"[..]), 1)));
    assert_eq!(map.get("/e").map(|n| (n.data(), n.stat.version)), Some((Some(&b""[..]), 2)));
    assert_eq!(map.get("/n").map(|n| n.stat().data_length), Some(1));
    // The snapshot taken before still sees the old nodes.
    assert_eq!(snapshot.get("/n").map(|n| (n.data(), n.stat.version)), Some((None, 0)));
    assert_eq!(snapshot.get("/e").map(|n| (n.data(), n.stat.version)), Some((Some(&b""[..]), 0)));
}

fn node(zxid: i64) -> Node {
    Node::new(Arc::new(super::super::acl::AclEntry::open()), zxid, 0, 0)
}

/// The number a test node's data holds.
fn data_of(n: NodeRef<'_>) -> i64 {
    n.data().and_then(|d| d.try_into().ok()).map_or(-1, i64::from_be_bytes)
}

fn insert(map: &mut NodeMap, path: &str, zxid: i64) {
    map.insert(path, node(zxid), Some(&zxid.to_be_bytes()));
}

impl NodeMap {
    /// Checks the chunks against the layout's rules: keys in order within and across
    /// chunks, each key at or past its chunk's map key, the first map key empty, no chunk
    /// empty or over [`CHUNK`], and the count right.
    fn check_layout(&self) {
        let mut count = 0;
        let mut last: Option<&str> = None;
        let keys: Vec<&CompactString> = self.chunks.keys().collect();
        for (i, (chunk_key, chunk)) in self.chunks.iter().enumerate() {
            assert!(i > 0 || chunk_key.is_empty(), "first chunk keyed {chunk_key:?}");
            assert!(!chunk.0.is_empty() && chunk.0.len() <= CHUNK, "chunk of {}", chunk.0.len());
            for e in &chunk.0 {
                assert!(e.key() >= chunk_key.as_str());
                // Below the next chunk's key, so lookups are routed here.
                assert!(keys.get(i + 1).is_none_or(|next| e.key() < next.as_str()), "{} past its chunk", e.key());
                assert!(last.is_none_or(|l| l < e.key()), "{last:?} before {}", e.key());
                last = Some(e.key());
                count += 1;
            }
        }
        assert_eq!(count, self.len);
    }

    /// The most spare slots any chunk's array has.
    fn most_room(&self) -> usize {
        self.chunks.values().map(|c| c.0.capacity() - c.0.len()).max().unwrap_or(0)
    }

    /// Entries per chunk, on average.
    fn fill(&self) -> f64 {
        self.len as f64 / self.chunks.len().max(1) as f64
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    Remove(u16),
    Update(u16),
    Snapshot,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..600u16).prop_map(Op::Insert),
        3 => (0..600u16).prop_map(Op::Remove),
        2 => (0..600u16).prop_map(Op::Update),
        1 => Just(Op::Snapshot),
    ]
}

/// A path for a number: a few parents with many children, so chunks split and join, and
/// some grandchildren, so there is more than one depth below a parent.
fn path(n: u16) -> String {
    if n.is_multiple_of(7) {
        format!("/p{}/c{}/g{n}", n % 3, n % 5)
    } else {
        format!("/p{}/c{n}", n % 3)
    }
}

proptest::proptest! {
    /// The map against a `BTreeMap` under inserts, removes and updates, with snapshots
    /// taken along the way that must not change when the map does.
    #[test]
    fn chunks_agree_with_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
        let mut map = NodeMap::default();
        let mut model = std::collections::BTreeMap::new();
        let mut snapshots = Vec::new();
        for (zxid, op) in ops.into_iter().enumerate() {
            let zxid = zxid as i64 + 1;
            match op {
                Op::Insert(n) => {
                    insert(&mut map, &path(n), zxid);
                    model.insert(key(&path(n)), (zxid, zxid));
                }
                Op::Remove(n) => {
                    let removed = map.remove(&path(n)).map(|r| (r.stat.czxid, data_of(r.view())));
                    proptest::prop_assert_eq!(removed, model.remove(&key(&path(n))));
                }
                // Odd numbers change the node in place, even ones replace its data too.
                Op::Update(n) => {
                    let change = |_, node: &mut Node| node.stat.czxid = zxid;
                    let updated: Option<Result<(), ()>> = if n % 2 == 1 {
                        map.update_checked(&path(n), |_, _| Ok(()), change)
                    } else {
                        map.set_data_checked(&path(n), Some(&zxid.to_be_bytes()), |_| Ok(()), change)
                    };
                    let modelled = model.get_mut(&key(&path(n))).map(|(c, d)| {
                        *c = zxid;
                        if n % 2 == 0 {
                            *d = zxid;
                        }
                        Ok(())
                    });
                    proptest::prop_assert_eq!(updated, modelled);
                }
                Op::Snapshot => snapshots.push((map.clone(), model.clone())),
            }
            map.check_layout();
        }
        for (snap, snap_model) in std::iter::once((map, model)).chain(snapshots) {
            snap.check_layout();
            for (path, _) in snap.iter() {
                proptest::prop_assert!(snap.contains(path), "{} not found", path);
            }
            let got: Vec<(String, (i64, i64))> =
                snap.iter().map(|(p, n)| (p.to_owned(), (n.stat.czxid, data_of(n)))).collect();
            let want: Vec<(String, (i64, i64))> =
                snap_model.iter().map(|(k, z)| (path_of(k).to_owned(), *z)).collect();
            proptest::prop_assert_eq!(got, want);
            for parent in ["/p0", "/p1", "/p2"] {
                let names: Vec<&str> = snap.children(parent).collect();
                let want: Vec<&str> = snap_model
                    .keys()
                    .map(|k| path_of(k))
                    .filter_map(|p| p.strip_prefix(parent)?.strip_prefix('/'))
                    .filter(|name| !name.contains('/'))
                    .collect();
                let below = snap_model.keys().filter(|k| path_of(k).starts_with(&format!("{parent}/"))).count();
                // `descendants` walks level by level and, as in the tree, a level with no
                // nodes has none below it; the model's grandchildren may lack parents.
                if !want.is_empty() || below == 0 {
                    proptest::prop_assert_eq!(snap.descendants(parent), below);
                }
                let mut pushed = jute::NamesBuilder::default();
                snap.push_children(parent, &mut pushed);
                let pushed = pushed.finish();
                proptest::prop_assert_eq!(pushed.iter().collect::<Vec<_>>(), want.clone());
                proptest::prop_assert_eq!(names, want);
            }
        }
    }
}

/// Keys created in order fill their chunks; keys created out of order leave them at
/// least half full.
#[test]
fn chunks_fill() {
    let mut in_order = NodeMap::default();
    for i in 0..10_000 {
        insert(&mut in_order, &format!("/q/n{i:010}"), i);
    }
    in_order.check_layout();
    assert!(in_order.fill() > CHUNK as f64 * 0.95, "in order: {}", in_order.fill());
    let mut scattered = NodeMap::default();
    for i in 0..10_000i64 {
        insert(&mut scattered, &format!("/q/n{}", (i * 7919) % 10_000), i);
    }
    scattered.check_layout();
    assert!(scattered.fill() > CHUNK as f64 * 0.5, "scattered: {}", scattered.fill());
    // However they were cut, arrays grown only by inserts waste less than a step.
    assert!(in_order.most_room() < CHUNK_STEP && scattered.most_room() < CHUNK_STEP);
    for i in 0..10_000i64 {
        assert!(scattered.remove(&format!("/q/n{i}")).is_some());
        if i % 1000 == 0 {
            scattered.check_layout();
        }
    }
    assert!(scattered.is_empty() && scattered.chunks.is_empty());
    // Descending, into an empty map and after a full chunk (as after loading a snapshot).
    let mut descending = NodeMap::default();
    for i in (0..10_000).rev() {
        insert(&mut descending, &format!("/q/n{i:010}"), i);
    }
    descending.check_layout();
    assert!(descending.fill() > CHUNK as f64 * 0.45, "descending: {}", descending.fill());
    assert!(descending.most_room() < CHUNK_STEP, "descending: {} spare", descending.most_room());
    let mut after_full = NodeMap::default();
    for i in 0..CHUNK as i64 {
        insert(&mut after_full, &format!("/q/n{i:010}"), i);
    }
    for i in (CHUNK as i64..10_000).rev() {
        insert(&mut after_full, &format!("/q/n{i:010}"), i);
    }
    after_full.check_layout();
    assert!(after_full.fill() > CHUNK as f64 * 0.45, "descending after a full chunk: {}", after_full.fill());
}

#[test]
fn depth_chars_keep_their_order_past_the_surrogates() {
    let around = [0, 1, 127, 128, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0x10_0000];
    for w in around.windows(2) {
        assert!(depth_char(w[0]) < depth_char(w[1]), "{} vs {}", w[0], w[1]);
    }
}

/// Encodes `map` in batches of `per_batch` nodes and builds a map from them again.
fn rebuilt(map: &NodeMap, per_batch: usize, max_bytes: usize) -> (NodeMap, usize) {
    let mut batches = Vec::new();
    map.encode_batches(per_batch, max_bytes, |b| {
        batches.push(b.to_vec());
        Ok(())
    })
    .expect("encode");
    let mut builder = MapBuilder::default();
    for b in &batches {
        builder.push(NodeMap::decode_batch(b).expect("decode")).expect("in order");
    }
    (builder.finish(), batches.len())
}

proptest::proptest! {
    /// A map built from its batches (as a parted snapshot is read) equals the map, follows
    /// the chunk layout, and keeps both through later changes.
    #[test]
    fn batches_rebuild_the_map(
        ops in proptest::collection::vec(op(), 1..800),
        per_batch in 1usize..200,
        later in proptest::collection::vec(op(), 0..300),
    ) {
        let mut map = NodeMap::default();
        let apply = |map: &mut NodeMap, op: &Op, zxid: i64| match op {
            Op::Insert(n) => insert(map, &path(*n), zxid),
            Op::Remove(n) => {
                map.remove(&path(*n));
            }
            Op::Update(n) => {
                map.update(&path(*n), |node| node.stat.version += 1);
            }
            Op::Snapshot => {}
        };
        for (zxid, op) in ops.iter().enumerate() {
            apply(&mut map, op, zxid as i64 + 1);
        }
        let (mut back, batches) = rebuilt(&map, per_batch, 1 << 20);
        back.check_layout();
        proptest::prop_assert_eq!(batches, map.len().div_ceil(per_batch));
        proptest::prop_assert!(back == map);
        for (zxid, op) in later.iter().enumerate() {
            apply(&mut map, op, 10_000 + zxid as i64);
            apply(&mut back, op, 10_000 + zxid as i64);
            back.check_layout();
        }
        proptest::prop_assert!(back == map);
    }
}

/// Batches cut by bytes, and nodes or batches out of key order refused.
#[test]
fn batches_by_bytes_and_out_of_order() {
    let mut map = NodeMap::default();
    for i in 0..100 {
        map.insert(&format!("/n{i:03}"), node(i), Some(&[b'x'; 100]));
    }
    let (back, batches) = rebuilt(&map, 1000, 1000);
    assert!(back == map);
    // Paths and data of 105 bytes a node: a batch is cut at the tenth, past 1,000 bytes.
    assert_eq!(batches, 10);
    let mut parts = Vec::new();
    map.encode_batches(50, 1 << 20, |b| {
        parts.push(b.to_vec());
        Ok(())
    })
    .expect("encode");
    let mut builder = MapBuilder::default();
    builder.push(NodeMap::decode_batch(&parts[1]).expect("decode")).expect("first");
    assert!(builder.push(NodeMap::decode_batch(&parts[0]).expect("decode")).is_err());
    assert!(NodeMap::decode_batch(&parts[0][..parts[0].len() - 1]).is_err());
    let mut longer = parts[0].clone();
    longer.push(0);
    assert!(NodeMap::decode_batch(&longer).is_err());
}

/// `push_children` lists what `children` does for parents whose children span many chunks,
/// start anywhere in a chunk, or are none, beside siblings that have children of their own.
#[test]
fn push_children_lists_every_child_across_chunks() {
    let mut map = NodeMap::default();
    insert(&mut map, "/", 1);
    let mut zxid = 2;
    for (parent, n) in [("/p0", 3), ("/p1", 1000), ("/p10", 0), ("/p2", 65), ("/p3", 64)] {
        insert(&mut map, parent, zxid);
        zxid += 1;
        for i in 0..n {
            insert(&mut map, &format!("{parent}/c{i:04}"), zxid);
            zxid += 1;
        }
    }
    insert(&mut map, "/p1/c0001/grandchild", zxid);
    for parent in ["/", "/p0", "/p1", "/p10", "/p2", "/p3", "/p4", "/p1/c0001"] {
        let mut pushed = jute::NamesBuilder::default();
        map.push_children(parent, &mut pushed);
        let pushed = pushed.finish();
        let want: Vec<&str> = map.children(parent).collect();
        assert_eq!(pushed.iter().collect::<Vec<_>>(), want, "{parent}");
    }
    let mut p1 = jute::NamesBuilder::default();
    map.push_children("/p1", &mut p1);
    assert_eq!(p1.finish().len(), 1000);
}
