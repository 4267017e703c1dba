//! What one durable log write costs on this machine's disk: Warden's segment log append (what
//! its Raft log does per group commit since log format 2, `warden::raft::segment_log`), a redb
//! write transaction committed with `Durability::Immediate` (what it did before), and the
//! plain file writes an append-only log would do (ZooKeeper's transaction log: append, or
//! overwrite of preallocated space, then fdatasync).
//!
//! It also measures what one fdatasync costs by the number of 4 KiB pages it flushes and
//! where they lie: a redb commit rewrites a header and about seven pages at scattered offsets
//! (copy-on-write B-tree paths and its freed-page table), and this disk's fdatasync cost grows
//! with each separate extent, not with the bytes.
//!
//! `cargo bench --bench log_commit` (optionally `-- DIR` to measure another file system;
//! default: a temp dir under `target/`). Prints microseconds per durable write, median of
//! every write in the run.

use std::io::Seek;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use redb::TableDefinition;

const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const WRITES: usize = 1000;

fn median_us(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn time(mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let mut samples = Vec::with_capacity(WRITES);
    for i in 0..WRITES {
        let t = Instant::now();
        f(i)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median_us(samples))
}

fn main() -> Result<()> {
    let base = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let dir = tempfile::tempdir_in(&base)?;
    println!("log_commit: {WRITES} durable writes each, median microseconds per write, in {}", base.display());

    for size in [200usize, 5000] {
        let value = vec![7u8; size];
        let db = redb::Database::create(dir.path().join(format!("log-{size}.redb")))?;
        let redb_us = time(|i| {
            let txn = db.begin_write()?;
            {
                let mut t = txn.open_table(LOGS)?;
                t.insert(i as u64, value.as_slice())?;
            }
            Ok(txn.commit()?)
        })?;
        let redb_meta_us = time(|i| {
            let txn = db.begin_write()?;
            {
                let mut t = txn.open_table(LOGS)?;
                t.insert((WRITES + i) as u64, value.as_slice())?;
                let mut m = txn.open_table(META)?;
                m.insert("committed", (i as u64).to_le_bytes().as_slice())?;
            }
            Ok(txn.commit()?)
        })?;
        let path = dir.path().join(format!("log-{size}.bin"));
        let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
        let append_us = time(|_| {
            f.write_all(&value)?;
            Ok(f.sync_data()?)
        })?;
        f.rewind()?;
        let overwrite_us = time(|_| {
            f.write_all(&value)?;
            Ok(f.sync_data()?)
        })?;
        let seg_dir = dir.path().join(format!("segments-{size}"));
        let mut segments = warden::raft::segment_log::SegmentLog::open(&seg_dir, None)?;
        let segment_us = time(|i| Ok(segments.append(&[(i as u64 + 1, value.clone())])?))?;
        drop(segments);
        println!(
            "  {size:>5} B entry: segment log append {segment_us:.0} | redb commit {redb_us:.0} | \
             redb commit + meta row {redb_meta_us:.0} | file append + fdatasync {append_us:.0} | \
             preallocated overwrite + fdatasync {overwrite_us:.0}"
        );
    }
    pages(dir.path())
}

/// fdatasync after rewriting 4 KiB pages of a preallocated 8 MiB file: one page, eight
/// adjacent pages, eight pages at scattered offsets.
fn pages(dir: &std::path::Path) -> Result<()> {
    const PAGE: u64 = 4096;
    const SPAN: u64 = 2048;
    let f =
        std::fs::OpenOptions::new().create(true).read(true).write(true).truncate(true).open(dir.join("pages.bin"))?;
    let zeros = vec![0u8; (SPAN * PAGE) as usize];
    f.write_all_at(&zeros, 0)?;
    f.sync_all()?;
    let page = vec![7u8; PAGE as usize];
    // xorshift: the same scattered offsets on every run, without a dependency.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut scattered = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % SPAN) * PAGE
    };
    let flush = |offsets: &[u64]| -> Result<()> {
        for &o in offsets {
            f.write_all_at(&page, o)?;
        }
        Ok(f.sync_data()?)
    };
    let one = time(|i| flush(&[(i as u64 % SPAN) * PAGE]))?;
    let adjacent = time(|i| {
        let start = (i as u64 * 8) % (SPAN - 8);
        flush(&(start..start + 8).map(|p| p * PAGE).collect::<Vec<_>>())
    })?;
    let apart = time(|_| flush(&(0..8).map(|_| scattered()).collect::<Vec<_>>()))?;
    println!(
        "  fdatasync after rewriting 4 KiB pages: 1 page {one:.0} | 8 adjacent pages {adjacent:.0} | \
         8 scattered pages {apart:.0}"
    );
    Ok(())
}
