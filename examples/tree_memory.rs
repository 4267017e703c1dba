//! Memory per znode of the DataTree alone: creates N znodes of 100 bytes laid out as the
//! benchmark's memory phase lays them out (`/warden-mem/b<i/1000>/n<i%1000>`, four loaders
//! interleaved) and prints the process's anonymous RSS before and after, then times getData
//! of every znode in a scattered order.
//! Run: `cargo run --release --example tree_memory -- 1000000`

use bytes::Bytes;
use warden::tree::acl::AclEntry;
use warden::tree::txn::CreateOp;
use warden::tree::txn::Txn;
use warden::tree::txn::TxnOp;
use warden::tree::DataTree;

// The server's allocator, so the size classes are the server's.
#[global_allocator]
static GLOBAL: warden::runtime::alloc::Mimalloc = warden::runtime::alloc::Mimalloc;

fn rss_anon_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("RssAnon")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let n: i64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(250_000);
    let create = |path: String| Txn {
        session_id: 0,
        time_ms: 1,
        auth: Default::default(),
        op: TxnOp::Create(CreateOp {
            path,
            data: Some(Bytes::from(vec![b'x'; 100])),
            acl: AclEntry::open(),
            flags: 0,
            ttl: -1,
        }),
    };
    let before = rss_anon_kb();
    let mut tree = DataTree::new();
    let mut zxid = 1;
    let mut apply = |tree: &mut DataTree, path: String| {
        zxid += 1;
        let _ = tree.apply(zxid, &create(path));
    };
    apply(&mut tree, "/warden-mem".into());
    for b in 0..(n + 999) / 1000 {
        apply(&mut tree, format!("/warden-mem/b{b}"));
    }
    // Four loaders, each over its quarter of the indices, their creates interleaved.
    let per = (n + 3) / 4;
    for k in 0..per {
        for l in 0..4 {
            let i = l * per + k;
            if i < n {
                apply(&mut tree, format!("/warden-mem/b{}/n{}", i / 1000, i % 1000));
            }
        }
    }
    let after = rss_anon_kb();
    println!(
        "znodes: {} anon RSS: {} kB -> {} kB ({} bytes per znode)",
        tree.node_count(),
        before,
        after,
        (after - before) * 1024 / n.max(1) as u64
    );
    // Every index once, scattered (a multiplier coprime with n walks all of them).
    let step = (7919..).find(|s: &i64| gcd(*s, n.max(1)) == 1).unwrap_or(1);
    let paths: Vec<String> =
        (0..n).map(|j| (j * step) % n.max(1)).map(|i| format!("/warden-mem/b{}/n{}", i / 1000, i % 1000)).collect();
    let start = std::time::Instant::now();
    let found = paths.iter().filter(|p| tree.get_data(p, &[]).is_ok()).count();
    let elapsed = start.elapsed();
    println!(
        "getData of {found} znodes in scattered order: {:.0} ns each",
        elapsed.as_nanos() as f64 / found.max(1) as f64
    );
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
