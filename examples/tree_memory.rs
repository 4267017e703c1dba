//! Memory per znode of the DataTree alone: creates N znodes of 100 bytes under one parent and
//! prints the process's anonymous RSS before and after.
//! Run: `cargo run --release --example tree_memory -- 1000000`

use bytes::Bytes;
use warden::tree::acl::AclEntry;
use warden::tree::DataTree;
use warden::txn::CreateOp;
use warden::txn::Txn;
use warden::txn::TxnOp;

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
        auth: vec![],
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
    let _ = tree.apply(1, &create("/b".into()));
    for i in 0..n {
        let _ = tree.apply(i + 2, &create(format!("/b/n{i:07}")));
    }
    let after = rss_anon_kb();
    println!(
        "znodes: {} anon RSS: {} kB -> {} kB ({} bytes per znode)",
        tree.node_count(),
        before,
        after,
        (after - before) * 1024 / n.max(1) as u64
    );
}
