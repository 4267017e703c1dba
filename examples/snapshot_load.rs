//! Time to read a snapshot of a big tree, the bulk of a restart: builds N znodes shaped as
//! the benchmark's memory phase with `--varied` (`/warden-mem/b<i/1000>/n<i%1000>-<hex>`,
//! 60-byte paths, 50-byte JSON-like values), writes the snapshot a server would, and reads it
//! back three times, printing each read's time, the file's size and the tree it held.
//! Run: `cargo run --release --example snapshot_load -- 5000000 [none]` (`none`: uncompressed)

use bytes::Bytes;
use warden::tree::acl::AclEntry;
use warden::tree::txn::CreateOp;
use warden::tree::txn::Txn;
use warden::tree::txn::TxnOp;
use warden::tree::DataTree;

#[global_allocator]
static GLOBAL: warden::runtime::alloc::Mimalloc = warden::runtime::alloc::Mimalloc;

fn mix(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn path(i: u64) -> String {
    let p = format!("/warden-mem/b{}/n{}", i / 1000, i % 1000);
    let pad = 60usize.saturating_sub(p.len() + 1);
    let h = format!("{:016x}{:016x}", mix(i), mix(i + 1)).repeat(2);
    format!("{p}-{}", &h[..pad.min(h.len())])
}

fn value(i: u64) -> Vec<u8> {
    let m = mix(i);
    let mut v = format!(
        r#"{{"host":"10.{}.{}.{}","port":{},"id":{i},"epoch":{},"state":"{}"}}"#,
        (m >> 8) & 255,
        (m >> 16) & 255,
        (m >> 24) & 255,
        1024 + m % 60000,
        (m >> 32) % 100_000,
        ["ready", "leader", "follower"][(m % 3) as usize]
    )
    .into_bytes();
    v.resize(50, b' ');
    v
}

fn main() -> Result<(), String> {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let compress = std::env::args().nth(2).as_deref() != Some("none");
    let mut tree = DataTree::new();
    let mut zxid = 0;
    let mut create = |tree: &mut DataTree, path: String, data: Vec<u8>| {
        zxid += 1;
        let op =
            TxnOp::Create(CreateOp { path, data: Some(Bytes::from(data)), acl: AclEntry::open(), flags: 0, ttl: -1 });
        let _ = tree.apply(zxid, &Txn { session_id: 0, time_ms: 1, auth: Default::default(), op });
    };
    let started = std::time::Instant::now();
    create(&mut tree, "/warden-mem".into(), Vec::new());
    for b in 0..n.div_ceil(1000) {
        create(&mut tree, format!("/warden-mem/b{b}"), Vec::new());
    }
    for i in 0..n {
        create(&mut tree, path(i), value(i));
    }
    eprintln!("built {} znodes in {:.1} s", tree.node_count(), started.elapsed().as_secs_f64());
    let dir = std::env::temp_dir().join(format!("warden-snapshot-load-{}", std::process::id()));
    let voters = [(1u64, "127.0.0.1:2888".to_string())].into_iter().collect();
    let started = std::time::Instant::now();
    let file = warden::raft::snapshot::write_initial(&dir, 1, &voters, tree, compress).map_err(|e| e.to_string())?;
    let size = std::fs::metadata(&file).map_err(|e| e.to_string())?.len();
    println!("write {:.2} s, {:.1} MB ({})", started.elapsed().as_secs_f64(), size as f64 / 1e6, file.display());
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let (_, _, tree) = warden::raft::offline::read_snapshot(&file)?;
        let secs = started.elapsed().as_secs_f64();
        println!("read {secs:.2} s: {} znodes, digest {:016x}", tree.node_count(), tree.digest());
        drop(tree);
    }
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(())
}
