//! The state machine's cost per setData: builds warden-bench's key layout for `set`
//! (16 clients x 1,000 keys of 100 bytes, `/bench/c<i>/k<j>`) in a DataTree, then applies
//! setData txns to random keys and prints nanoseconds per txn (best of 5 rounds).
//! Run: `cargo run --release --example apply_set -- [txns per round]`

use bytes::Bytes;
use warden::tree::acl::AclEntry;
use warden::tree::txn::CreateOp;
use warden::tree::txn::Txn;
use warden::tree::txn::TxnOp;
use warden::tree::DataTree;

#[global_allocator]
static GLOBAL: warden::runtime::alloc::Mimalloc = warden::runtime::alloc::Mimalloc;

fn txn(op: TxnOp) -> Txn {
    Txn { session_id: 0, time_ms: 1, auth: Default::default(), op }
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500_000);
    let value = Bytes::from(vec![b'x'; 100]);
    let create = |path: String, data: Bytes| {
        txn(TxnOp::Create(CreateOp { path, data: Some(data), acl: AclEntry::open(), flags: 0, ttl: -1 }))
    };
    let mut tree = DataTree::new();
    let mut zxid = 1;
    let _ = tree.apply(zxid, &create("/bench".into(), Bytes::new()));
    for c in 0..16 {
        zxid += 1;
        let _ = tree.apply(zxid, &create(format!("/bench/c{c}"), Bytes::new()));
        for k in 0..1000 {
            zxid += 1;
            let _ = tree.apply(zxid, &create(format!("/bench/c{c}/k{k}"), value.clone()));
        }
    }
    // The txns as the state machine gets them: decoded, paths owned.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let txns: Vec<Txn> = (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let (c, k) = (seed % 16, (seed >> 8) % 1000);
            txn(TxnOp::SetData { path: format!("/bench/c{c}/k{k}"), data: Some(value.clone()), version: -1 })
        })
        .collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = std::time::Instant::now();
        let mut ok = 0usize;
        for t in &txns {
            zxid += 1;
            ok += usize::from(tree.apply(zxid, t).0.is_ok());
        }
        let ns = start.elapsed().as_nanos() as f64 / txns.len() as f64;
        assert_eq!(ok, txns.len(), "every setData applies");
        best = best.min(ns);
    }
    println!("setData over {} znodes: {best:.0} ns per txn (best of 5 rounds of {n})", tree.node_count());
}
