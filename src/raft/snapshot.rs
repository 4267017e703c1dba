//! Snapshots: their files, receiving one from the leader, and when to take one.
//!
//! # Files (`<dataDir>/version-2/snapshot-<term>-<index>.bin`, see [`super::layout`])
//! A [`SnapshotFile`]: the last applied log id, the membership and the whole tree. Written
//! parted (see [`PARTED_MAGIC`]): the head, then the nodes in batches of a few MB, each its own
//! zstd frame, so a restart decodes them on every core; or, when `snapshot.compression.method`
//! turns compression off, as one postcard encoding. Files of the earlier compressed form (one
//! zstd frame of one encoding, see [`COMPRESSED_MAGIC`]) still load. Built from an O(1) clone
//! of the persistent tree, so apply never waits for a snapshot to be written. The newest file
//! is loaded at start; older ones are removed after a new one is durable (fsynced and renamed
//! into place). Files are decoded streamed or a part at a time, never read whole into memory;
//! openraft's snapshot data is the open file itself (sent to followers from it, received from
//! a leader into `receiving-*.tmp` by [`Receiving`]), and its meta comes from the file's head.
//!
//! # When
//! [`by_txns`] asks for a snapshot once `snapCount` txns were applied since the last one, as
//! ZooKeeper counts them (`SyncRequestProcessor`): one Raft entry carries a whole group-commit
//! batch, so openraft's own entry-count policy (kept as a backstop) would let the log, and a
//! restart's replay, grow many times longer. Each member snapshots on its own, as in
//! ZooKeeper.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::RaftSnapshotBuilder;
use serde::Deserialize;
use serde::Serialize;

use super::network::RaftResponse;
use super::state_machine::SharedTree;
use super::LogId;
use super::Raft;
use super::Snapshot;
use super::SnapshotMeta;
use super::StoredMembership;
use super::TypeConfig;
use super::Vote;
use crate::tree::nodes::MapBuilder;
use crate::tree::nodes::NodeMap;
use crate::tree::DataTree;
use crate::tree::TreeHead;
use crate::tree::TreeHeadOut;

/// openraft 0.10's storage traits speak `std::io::Error`.
type StorageError = std::io::Error;

#[derive(Serialize, Deserialize, Clone)]
pub(super) struct SnapshotFile {
    pub(super) last_applied: Option<LogId>,
    pub(super) membership: StoredMembership,
    pub(super) tree: DataTree,
}

/// The fields of a [`SnapshotFile`] before the tree (postcard writes fields in order), so
/// openraft's snapshot meta is read without decoding the tree.
#[derive(Deserialize)]
struct SnapshotHeader {
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

/// The first bytes of a compressed snapshot file; the next 8 are the length of the postcard
/// encoding inside (little-endian), then one zstd frame of it. An uncompressed file starts
/// with postcard's tag of `last_applied`'s `Option` (0 or 1), so the two never mix up.
const COMPRESSED_MAGIC: &[u8; 8] = b"WRDNSNZ1";

/// zstd's level for snapshots: its fastest standard one. Higher levels shrink a tree's
/// snapshot only a little more and cost several times the CPU, taken from serving.
const ZSTD_LEVEL: i32 = 1;

/// Counts the bytes written through it.
#[cfg(test)]
struct Counting<W> {
    inner: W,
    written: u64,
}

#[cfg(test)]
impl<W: std::io::Write> std::io::Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The first bytes of a parted snapshot file, the form written when compression is on. Then
/// parts, each a 16-byte header (the part's compressed and decoded lengths, little-endian
/// u64s) and one zstd frame with a content checksum; two zero lengths end the file. The
/// first part is the head ([`PartedHeadOut`]), each other a batch of nodes in key order
/// (`NodeMap::encode_batches`), so the parts decode on several threads at once.
const PARTED_MAGIC: &[u8; 8] = b"WRDNSNP1";

/// Nodes a part holds at most, and the paths and data after which it is cut earlier: a few
/// MB decoded, hundreds of parts for millions of znodes, so every decoding thread stays busy
/// and a part's buffers stay small.
const PART_NODES: usize = 16_384;
const PART_BYTES: usize = 4 << 20;

/// The largest decoded part a file may claim (a single znode's data can make one large): a
/// corrupt length cannot ask for more.
const MAX_PART: u64 = 4 << 30;

/// A parted snapshot's first part: the log id and membership (the same leading fields as
/// [`SnapshotHeader`]), then the tree without its nodes.
#[derive(Serialize)]
struct PartedHeadOut<'a> {
    last_applied: &'a Option<LogId>,
    membership: &'a StoredMembership,
    tree: TreeHeadOut<'a>,
}

#[derive(Deserialize)]
struct PartedHead {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    tree: TreeHead,
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

/// How long a serving server's snapshot writer rests after each part, in multiples of the time
/// the part took: 3 keeps it to about a quarter of a core. On a small machine a snapshot
/// written flat out takes a whole core from the server for its length, and the writes
/// acknowledged meanwhile are the slow ones. Snapshots of 1,000,000 znodes under setData at
/// half of capacity, 2 vCPUs, 6 rounds flat out against 3 paced: write p99 during snapshots
/// 19.5 ms (12.0-45.6) vs 11.2 (11.2-12.4), p99.9 28.7 vs 18.4, the snapshot 0.7 s vs 2.8 s
/// (docs/perf/pass-34.md, run AD). Imports, restores and tests write flat out (a pace of 0).
const BUILD_PACE: f64 = 3.0;

/// Writes `file` into `w` (at its start): parted and compressed, resting `pace` times as long
/// as each part took after it (see [`BUILD_PACE`]), or uncompressed in the original
/// single-encoding form.
pub(super) fn encode_snapshot(
    file: &SnapshotFile,
    w: &mut std::io::BufWriter<std::fs::File>,
    compress: bool,
    pace: f64,
) -> std::io::Result<()> {
    if !compress {
        return postcard::to_io(file, w).map(|_| ()).map_err(std::io::Error::other);
    }
    encode_parted(file, w, PART_NODES, PART_BYTES, pace)
}

pub(super) fn encode_parted(
    file: &SnapshotFile,
    w: &mut std::io::BufWriter<std::fs::File>,
    part_nodes: usize,
    part_bytes: usize,
    pace: f64,
) -> std::io::Result<()> {
    use std::io::Write;
    w.write_all(PARTED_MAGIC)?;
    let mut zstd = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
    // A checksum over each part: a flipped bit is refused at load, not decoded into a tree.
    zstd.include_checksum(true)?;
    let mut since = std::time::Instant::now();
    let mut write_part = |raw: &[u8]| -> std::io::Result<()> {
        let frame = zstd.compress(raw)?;
        w.write_all(&(frame.len() as u64).to_le_bytes())?;
        w.write_all(&(raw.len() as u64).to_le_bytes())?;
        w.write_all(&frame)?;
        if pace > 0.0 {
            std::thread::sleep(since.elapsed().mul_f64(pace));
            since = std::time::Instant::now();
        }
        Ok(())
    };
    let head = PartedHeadOut { last_applied: &file.last_applied, membership: &file.membership, tree: file.tree.head() };
    write_part(&postcard::to_stdvec(&head).map_err(std::io::Error::other)?)?;
    file.tree.nodes_for_snapshot().encode_batches(part_nodes, part_bytes, &mut write_part)?;
    w.write_all(&[0; 16])
}

/// Where a part of a parted snapshot is: its frame's offset and length, and its decoded length.
struct Part {
    at: u64,
    compressed: u64,
    decoded: u64,
}

/// The header of the part at `at`, or `None` at the end mark.
fn part_at(file: &std::fs::File, at: u64, file_len: u64) -> std::io::Result<Option<Part>> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 16];
    file.read_exact_at(&mut head, at).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => invalid("the snapshot is cut short"),
        _ => e,
    })?;
    let [compressed, decoded] = [&head[..8], &head[8..]].map(|b| {
        let mut n = [0u8; 8];
        n.copy_from_slice(b);
        u64::from_le_bytes(n)
    });
    if compressed == 0 && decoded == 0 {
        return Ok(None);
    }
    let at = at + 16;
    if compressed > file_len.saturating_sub(at) || decoded > MAX_PART {
        return Err(invalid(format!("a part at byte {at} claims {compressed} bytes ({decoded} decoded)")));
    }
    Ok(Some(Part { at, compressed, decoded }))
}

/// Every part of a parted snapshot, checking that the end mark ends the file.
fn parts_of(file: &std::fs::File) -> std::io::Result<Vec<Part>> {
    let len = file.metadata()?.len();
    let mut at = PARTED_MAGIC.len() as u64;
    let mut parts = Vec::new();
    while let Some(part) = part_at(file, at, len)? {
        at = part.at + part.compressed;
        parts.push(part);
    }
    if at + 16 != len {
        return Err(invalid("bytes after the snapshot's end"));
    }
    Ok(parts)
}

/// A part read and decompressed (its checksum checked).
fn read_part(file: &std::fs::File, part: &Part) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut frame = vec![0u8; usize::try_from(part.compressed).map_err(invalid)?];
    file.read_exact_at(&mut frame, part.at)?;
    let raw = zstd::bulk::decompress(&frame, usize::try_from(part.decoded).map_err(invalid)?)?;
    if raw.len() as u64 != part.decoded {
        return Err(invalid(format!(
            "a part at byte {} decoded to {} bytes, not {}",
            part.at,
            raw.len(),
            part.decoded
        )));
    }
    Ok(raw)
}

/// A parted snapshot's head.
fn parted_head<T: serde::de::DeserializeOwned>(file: &std::fs::File) -> std::io::Result<T> {
    let len = file.metadata()?.len();
    let first = part_at(file, PARTED_MAGIC.len() as u64, len)?.ok_or_else(|| invalid("a snapshot without a head"))?;
    let (head, _) = postcard::take_from_bytes(&read_part(file, &first)?).map_err(invalid)?;
    Ok(head)
}

/// Decodes a whole parted snapshot: the node batches on up to four threads (each part is
/// decompressed and decoded where it is read), joined into the map in file order here.
fn decode_parted(file: &std::fs::File) -> std::io::Result<SnapshotFile> {
    let parts = parts_of(file)?;
    let (first, batches) = parts.split_first().ok_or_else(|| invalid("a snapshot without a head"))?;
    let head_bytes = read_part(file, first)?;
    let (head, rest): (PartedHead, _) = postcard::take_from_bytes(&head_bytes).map_err(invalid)?;
    if !rest.is_empty() {
        return Err(invalid("bytes after the snapshot's head"));
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 4).min(batches.len().max(1));
    let mut builder = MapBuilder::default();
    let mut digest = 0;
    std::thread::scope(|scope| -> std::io::Result<()> {
        let mut results = Vec::with_capacity(threads);
        for first in 0..threads {
            let (tx, rx) = std::sync::mpsc::sync_channel(2);
            results.push(rx);
            std::thread::Builder::new().name("snapshot-read".into()).spawn_scoped(scope, move || {
                for part in batches.iter().skip(first).step_by(threads) {
                    let batch = read_part(file, part).and_then(|raw| NodeMap::decode_batch(&raw).map_err(invalid));
                    let failed = batch.is_err();
                    // A send fails once the joining side gave up (an error elsewhere).
                    if tx.send(batch).is_err() || failed {
                        return;
                    }
                }
            })?;
        }
        for i in 0..batches.len() {
            let batch = results[i % threads].recv().map_err(|_| invalid("a snapshot-read thread stopped"))??;
            digest = crate::tree::digest::add(digest, batch.digest());
            builder.push(batch).map_err(invalid)?;
        }
        Ok(())
    })?;
    let tree = DataTree::from_parts(head.tree, builder.finish(), digest).map_err(invalid)?;
    Ok(SnapshotFile { last_applied: head.last_applied, membership: head.membership, tree })
}

/// Whether a snapshot file is parted (else it is one postcard encoding, zstd-compressed or
/// not).
fn is_parted(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let mut magic = [0u8; 8];
    match file.read_exact_at(&mut magic, 0) {
        Ok(()) => Ok(&magic == PARTED_MAGIC),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `file` as one zstd-compressed postcard encoding, the compressed form before parted
/// snapshots (kept to test that such files still load).
#[cfg(test)]
pub(super) fn encode_single_compressed(
    file: &SnapshotFile,
    w: &mut std::io::BufWriter<std::fs::File>,
) -> std::io::Result<()> {
    use std::io::Seek;
    use std::io::Write;
    w.write_all(COMPRESSED_MAGIC)?;
    w.write_all(&[0; 8])?;
    let mut encoder = zstd::stream::write::Encoder::new(&mut *w, ZSTD_LEVEL)?;
    // A checksum over the content: a flipped bit is refused at load, not decoded into a tree.
    encoder.include_checksum(true)?;
    // postcard writes field by field: a buffer in front of the encoder hands it large runs.
    let written = {
        let mut counted = std::io::BufWriter::with_capacity(1 << 17, Counting { inner: &mut encoder, written: 0 });
        postcard::to_io(file, &mut counted).map_err(std::io::Error::other)?;
        counted.flush()?;
        counted.into_inner().map_err(|e| e.into_error())?.written
    };
    encoder.finish()?;
    w.seek(std::io::SeekFrom::Start(COMPRESSED_MAGIC.len() as u64))?;
    w.write_all(&written.to_le_bytes())?;
    w.seek(std::io::SeekFrom::End(0))?;
    Ok(())
}

/// The most scratch space a compressed snapshot's decoding reserves (see [`decode_from`]): no
/// single field comes near it, and a corrupt length in the header cannot ask for more.
const MAX_SCRATCH: u64 = 1 << 30;

/// Decodes a snapshot (`whole`) or only its header straight from the file, compressed or not,
/// without reading the whole file into memory first. postcard's reader needs scratch space as
/// large as the largest single string or byte field; the encoding's length bounds that (the
/// file's length, or the one a compressed file's header gives; 64 KiB for a header), and the
/// zeroed buffer costs only the pages a field actually touches.
fn decode_from<T: serde::de::DeserializeOwned>(file: &mut std::fs::File, whole: bool) -> std::io::Result<T> {
    use std::io::Read;
    use std::io::Seek;
    let max_scratch = if whole { u64::MAX } else { 64 << 10 };
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut head = [0u8; 16];
    let compressed = match file.read_exact(&mut head) {
        Ok(()) => head.starts_with(COMPRESSED_MAGIC),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
        Err(e) => return Err(e),
    };
    if !compressed {
        file.seek(std::io::SeekFrom::Start(0))?;
        let len = file.metadata()?.len().min(max_scratch);
        let mut scratch = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX).max(64 << 10)];
        let reader = std::io::BufReader::with_capacity(1 << 20, &mut *file);
        let (value, _) = postcard::from_io((reader, scratch.as_mut_slice())).map_err(std::io::Error::other)?;
        return Ok(value);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[COMPRESSED_MAGIC.len()..]);
    let len = u64::from_le_bytes(len).min(max_scratch).min(MAX_SCRATCH);
    let mut scratch = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX).max(64 << 10)];
    let decoder = zstd::stream::read::Decoder::new(&mut *file)?;
    let reader = std::io::BufReader::with_capacity(1 << 20, decoder);
    let (value, (mut rest, _)) = postcard::from_io((reader, scratch.as_mut_slice())).map_err(std::io::Error::other)?;
    if !whole {
        return Ok(value);
    }
    // zstd checks the frame's checksum once its end is read: nothing may follow the value.
    let mut more = [0u8; 1];
    if rest.read(&mut more)? != 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "bytes after the snapshot's end"));
    }
    Ok(value)
}

/// Decodes a whole snapshot file.
pub(super) fn decode_snapshot(file: &mut std::fs::File) -> std::io::Result<SnapshotFile> {
    let decoded = if is_parted(file)? { decode_parted(file) } else { decode_from(file, true) };
    crate::tree::acl::forget_decoded();
    decoded
}

/// Opens a snapshot file and reads openraft's meta from its header; the returned file is
/// positioned at its start, ready to be streamed to a follower.
pub(super) fn open_snapshot(path: &Path) -> std::io::Result<(SnapshotMeta, std::fs::File)> {
    use std::io::Seek;
    let mut file = std::fs::File::open(path)?;
    let header: SnapshotHeader = if is_parted(&file)? { parted_head(&file)? } else { decode_from(&mut file, false)? };
    file.seek(std::io::SeekFrom::Start(0))?;
    Ok((meta_of(header.last_applied, header.membership), file))
}

pub(super) fn snap_err(e: impl std::fmt::Display) -> StorageError {
    std::io::Error::other(format!("snapshot: {e}"))
}

pub(super) fn snapshot_path(dir: &Path, log_id: &Option<LogId>) -> PathBuf {
    let (term, index) = log_id.map_or((0, 0), |l| (l.leader_id.term, l.index));
    dir.join(format!("snapshot-{term:020}-{index:020}.bin"))
}

pub(super) fn newest_snapshot(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut best: Option<PathBuf> = None;
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("snapshot-") && name.ends_with(".bin") && best.as_ref().is_none_or(|b| p > *b) {
            best = Some(p);
        }
    }
    Ok(best)
}

pub(super) fn meta_of(last_applied: Option<LogId>, membership: StoredMembership) -> SnapshotMeta {
    SnapshotMeta { last_log_id: last_applied, last_membership: membership }
}

/// Prefix of the files a snapshot from the leader is received into.
pub(super) const RECEIVING_PREFIX: &str = "receiving-";

/// Removes the files in `dir` whose names `doomed` picks (best effort: one that cannot be
/// removed stays). A file still open elsewhere keeps its data for whoever holds it (a
/// snapshot being sent, or one still being received).
pub(super) fn remove_where(dir: &Path, doomed: impl Fn(&str) -> bool) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if doomed(p.file_name().and_then(|n| n.to_str()).unwrap_or("")) {
            let _ = std::fs::remove_file(&p);
        }
    }
    Ok(())
}

/// Removes the snapshots older than `newest` (their names sort as their log ids do). Newer
/// ones and `.tmp` files stay: openraft builds a snapshot in a task of its own, which may
/// still be writing its `.tmp`, or finish after a newer snapshot was installed from the leader.
fn remove_older_snapshots(dir: &Path, newest: &Path) -> std::io::Result<()> {
    let newest = newest.file_name().and_then(|n| n.to_str()).unwrap_or("");
    remove_where(dir, |name| name.starts_with("snapshot-") && name.ends_with(".bin") && name < newest)
}

/// Writes a snapshot file durably through `fill` (temp file, fsync, rename, fsync the
/// directory), removes older ones, and returns the file's size.
///
/// Returns the size and the file open for reading from its start. The handle is opened
/// before the rename: a newer snapshot installed from the leader meanwhile removes this one
/// by name as soon as it is in place (it is older), and a reopen by name then failed with
/// ENOENT, which openraft takes as a fatal storage error (seen once in a randomized catch-up
/// run). The open handle keeps the data for whoever reads it.
pub(super) fn write_snapshot_with(
    dir: &Path,
    last: &Option<LogId>,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<(u64, std::fs::File)> {
    use std::io::Write;
    let path = snapshot_path(dir, last);
    let tmp = path.with_extension("tmp");
    let size = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        fill(&mut w)?;
        w.flush()?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        f.metadata()?.len()
    };
    let reader = std::fs::File::open(&tmp)?;
    crate::crash_point!("snapshot-write-before-rename");
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    crate::crash_point!("snapshot-write-after-rename");
    remove_older_snapshots(dir, &path)?;
    Ok((size, reader))
}

/// Writes the first snapshot of a new group whose state came from elsewhere (an imported
/// ZooKeeper data dir): `tree` at the log id `Raft::initialize` gives a new group's first
/// entry (term 0, `leader`, index 0), with `voters` as the membership. openraft starting on it
/// finds the group initialised and its (empty) log purged up to that entry; the zxids of new
/// txns continue from the tree's last. Returns the file's path.
pub fn write_initial(
    dir: &Path,
    leader: u64,
    voters: &std::collections::BTreeMap<u64, String>,
    tree: DataTree,
    compress: bool,
) -> std::io::Result<PathBuf> {
    let log_id = LogId::new(super::LeaderId { term: 0, node_id: leader }, 0);
    let ids: std::collections::BTreeSet<u64> = voters.keys().copied().collect();
    let nodes: std::collections::BTreeMap<u64, openraft::BasicNode> =
        voters.iter().map(|(id, addr)| (*id, openraft::BasicNode { addr: addr.clone() })).collect();
    let membership = openraft::Membership::new(vec![ids], nodes).map_err(std::io::Error::other)?;
    let file =
        SnapshotFile { last_applied: Some(log_id), membership: StoredMembership::new(Some(log_id), membership), tree };
    std::fs::create_dir_all(dir)?;
    write_snapshot_with(dir, &file.last_applied, |w| encode_snapshot(&file, w, compress, 0.0))?;
    Ok(snapshot_path(dir, &file.last_applied))
}

/// Whether `dir` holds a snapshot of Warden's own.
pub fn any_snapshot(dir: &Path) -> std::io::Result<bool> {
    match newest_snapshot(dir) {
        Ok(found) => Ok(found.is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The newest snapshot in `dir` with its meta, open at its start. A snapshot listed and then
/// removed before it is opened (a newer one was just put in place) is looked for again.
pub(super) fn open_newest(dir: &Path) -> std::io::Result<Option<(SnapshotMeta, std::fs::File)>> {
    let mut tries = 0;
    loop {
        let Some(path) = newest_snapshot(dir)? else { return Ok(None) };
        match open_snapshot(&path) {
            Ok(opened) => return Ok(Some(opened)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 10 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The path of `file` if it is one of the files `begin_receiving_snapshot` made in `dir`
/// (matched by device and inode, not by name).
pub(super) fn receiving_path(dir: &Path, file: &std::fs::File) -> std::io::Result<Option<PathBuf>> {
    use std::os::unix::fs::MetadataExt;
    let want = file.metadata()?;
    for entry in std::fs::read_dir(dir)? {
        // An entry that vanished or cannot be read is not the open file looked for.
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(RECEIVING_PREFIX)) {
            continue;
        }
        let Ok(m) = entry.metadata() else { continue };
        if m.dev() == want.dev() && m.ino() == want.ino() {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

/// Moves a received (already fsynced) snapshot file into place: rename, fsync the
/// directory, remove older snapshots. Returns its size.
pub(super) fn install_snapshot_file(dir: &Path, received: &Path, last: &Option<LogId>) -> std::io::Result<u64> {
    let path = snapshot_path(dir, last);
    let size = std::fs::metadata(received)?.len();
    crate::crash_point!("snapshot-install-before-rename");
    std::fs::rename(received, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    crate::crash_point!("snapshot-install-after-rename");
    remove_older_snapshots(dir, &path)?;
    Ok(size)
}

/// Builds snapshots from an O(1) clone of the tree.
pub struct SnapshotBuilder {
    pub(super) file: SnapshotFile,
    pub(super) dir: PathBuf,
    /// zstd-compress the file (`snapshot.compression.method`).
    pub(super) compress: bool,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = tokio::fs::File;

    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let started = std::time::Instant::now();
        // Streamed to the file on a blocking thread: no second copy of the whole tree in
        // memory, and the runtime's workers keep serving meanwhile. openraft keeps only the
        // returned meta; followers get the data from the file (`get_current_snapshot`).
        let (file, dir, compress) = (self.file.clone(), self.dir.clone(), self.compress);
        let (size, written) = tokio::task::spawn_blocking(move || {
            write_snapshot_with(&dir, &file.last_applied, |w| encode_snapshot(&file, w, compress, BUILD_PACE))
        })
        .await
        .map_err(snap_err)?
        .map_err(snap_err)?;
        metrics::gauge!("warden_raft_snapshot_build_seconds").set(started.elapsed().as_secs_f64());
        metrics::gauge!("warden_raft_snapshot_bytes").set(size as f64);
        metrics::counter!("warden_raft_snapshots_built").increment(1);
        tracing::info!(
            index = self.file.last_applied.map_or(0, |l| l.index),
            bytes = size,
            ms = started.elapsed().as_millis() as u64,
            "snapshot written"
        );
        Ok(Snapshot {
            meta: meta_of(self.file.last_applied, self.file.membership.clone()),
            snapshot: tokio::fs::File::from_std(written),
        })
    }
}

/// A file to receive a snapshot from the leader into: chunks go straight to it, so a large
/// snapshot never sits whole in memory.
pub(super) fn begin_receiving(dir: &Path) -> Result<tokio::fs::File, StorageError> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = dir.join(format!("{RECEIVING_PREFIX}{nanos}.tmp"));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(snap_err)?;
    Ok(tokio::fs::File::from_std(file))
}

/// A snapshot being received from the leader on one peer connection: chunks arrive in order
/// from offset 0, each written to the receiving file; after the last one the whole snapshot
/// is handed to openraft to install.
pub struct Receiving {
    dir: PathBuf,
    /// The file and the next expected offset.
    file: Option<(tokio::fs::File, u64)>,
}

impl Receiving {
    /// Receives into `<dir>` (the snapshot directory).
    pub fn new(dir: PathBuf) -> Receiving {
        Receiving { dir, file: None }
    }

    /// Takes one chunk: `Ok(None)` after a chunk, openraft's answer after the last one.
    pub async fn chunk(
        &mut self,
        raft: &Raft,
        vote: Vote,
        meta: SnapshotMeta,
        offset: u64,
        data: &[u8],
        done: bool,
    ) -> Result<Option<openraft::raft::SnapshotResponse<TypeConfig>>, String> {
        use tokio::io::AsyncWriteExt;
        raft.heard_from(&vote, None);
        if offset == 0 {
            self.file = Some((begin_receiving(&self.dir).map_err(|e| e.to_string())?, 0));
        }
        let expected = self.file.as_ref().map(|(_, next)| *next);
        if expected != Some(offset) {
            self.file = None;
            return Err(format!("snapshot chunk at offset {offset}, expected {expected:?}"));
        }
        let Some((file, next)) = self.file.as_mut() else {
            return Err(format!("snapshot chunk at offset {offset} without its start"));
        };
        file.write_all(data).await.map_err(|e| e.to_string())?;
        *next += data.len() as u64;
        if !done {
            return Ok(None);
        }
        let Some((mut file, _)) = self.file.take() else { return Err("no snapshot being received".into()) };
        file.flush().await.map_err(|e| e.to_string())?;
        let snapshot = Snapshot { meta, snapshot: file };
        raft.inner.install_full_snapshot(vote, snapshot).await.map(Some).map_err(|e| e.to_string())
    }

    /// Answers a [`super::network::RaftRequest::SnapshotChunk`]; any other request is
    /// answered by [`Raft::answer`].
    pub async fn answer(&mut self, raft: &Raft, req: super::network::RaftRequest) -> RaftResponse {
        match req {
            super::network::RaftRequest::SnapshotChunk { vote, meta, offset, data, done } => {
                RaftResponse::SnapshotChunk(self.chunk(raft, vote, meta, offset, &data, done).await)
            }
            other => raft.answer(other).await,
        }
    }
}

/// Takes a snapshot once `snapCount` txns were applied since the last one (see the module
/// docs).
///
/// The request is made again on every tick until a build starts (a build moves
/// `snapshot_zxid` to the tree it copies): openraft drops a request that arrives while it is
/// still writing the previous snapshot, and a big tree's snapshot takes seconds to write.
/// (Waiting for the dropped request instead left a bulk load of 4 million creates without a
/// snapshot for a minute, all of it replayed from the log at the next start.)
pub async fn by_txns(raft: Raft, shared: Arc<SharedTree>, mut stop: tokio::sync::watch::Receiver<bool>) {
    use std::sync::atomic::Ordering;
    let snap_count = i64::try_from(raft.options().snap_count).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    // The last snapshot's zxid when a snapshot was last asked for: logged once per snapshot.
    let mut asked_after: Option<i64> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let taken = shared.snapshot_zxid.load(Ordering::Relaxed);
        let applied = *shared.applied.borrow();
        if applied - taken < snap_count {
            continue;
        }
        if asked_after != Some(taken) {
            tracing::info!(applied, since_last = applied - taken, "snapCount txns since the last snapshot: taking one");
            asked_after = Some(taken);
        }
        if raft.trigger_snapshot().await.is_err() {
            return;
        }
    }
}
