//! What finding a znode costs in the node map ([`warden::tree::nodes::NodeMap`]): the lookup
//! every read and every setData's apply does first. warden-bench's get/set/mixed workloads
//! keep 16 sessions × 1,000 keys under `/warden-bench-<pid>-<nanos>/c<i>/k<j>` (paths of ~40
//! bytes); the same count under short paths (`/b/c<i>/k<j>`) is measured beside them.
//!
//! `cargo bench --bench tree_lookup`. Prints nanoseconds per operation, the median of 9
//! passes of 200,000 random lookups (get) and as many setData changes.

use std::sync::Arc;
use std::time::Instant;

use warden::tree::nodes::NodeMap;
use warden::tree::Node;
use warden::tree::NodeStat;

const PARENTS: usize = 16;
const KEYS: usize = 1000;
const OPS: usize = 200_000;
const PASSES: usize = 9;

fn node() -> Node {
    Node {
        acl: Arc::new(Vec::new()),
        stat: NodeStat {
            czxid: 1,
            mzxid: 1,
            ctime: 1,
            mtime: 1,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            pzxid: 1,
            num_children: 0,
        },
    }
}

/// xorshift: the same random keys on every run, without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(label: &str, root: &str) {
    let mut map = NodeMap::default();
    let value = vec![b'x'; 100];
    map.insert("/", node(), Some(&[]));
    map.insert(root, node(), Some(&[]));
    let mut paths = Vec::with_capacity(PARENTS * KEYS);
    for c in 0..PARENTS {
        let parent = format!("{root}/c{c}");
        map.insert(&parent, node(), Some(&[]));
        for k in 0..KEYS {
            let p = format!("{parent}/k{k}");
            map.insert(&p, node(), Some(&value));
            paths.push(p);
        }
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let picks: Vec<&str> = (0..OPS).map(|_| paths[rng.below(paths.len())].as_str()).collect();
    let mut get_ns = Vec::new();
    let mut set_ns = Vec::new();
    for _ in 0..PASSES {
        let t = Instant::now();
        let mut found = 0usize;
        for p in &picks {
            found += usize::from(map.get(p).is_some());
        }
        get_ns.push(t.elapsed().as_nanos() as f64 / OPS as f64);
        assert_eq!(found, OPS, "every key is there");
        let t = Instant::now();
        for p in &picks {
            let r = map.set_data_checked(p, Some(&value), |_| Ok::<(), ()>(()), |(), n| n.stat.version += 1);
            assert!(matches!(r, Some(Ok(()))), "set {p}");
        }
        set_ns.push(t.elapsed().as_nanos() as f64 / OPS as f64);
    }
    println!("  {label:<42} get {:>6.0} ns | setData {:>6.0} ns", median(get_ns), median(set_ns));
}

fn main() {
    println!("tree_lookup: {} znodes, {OPS} random keys per pass, median of {PASSES} passes", PARENTS * KEYS);
    measure("long paths (/warden-bench-<pid>-<ns>/c/k)", "/warden-bench-123456-1733030000123456789");
    measure("short paths (/b/c/k)", "/b");
}
