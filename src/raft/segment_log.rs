//! The Raft log's entries on disk: append-only segment files, one fdatasync per append.
//!
//! This module owns the bytes of log entries and nothing else: it stores `(index, record)`
//! pairs with consecutive indexes and knows nothing of openraft's types, votes or the
//! committed index (those stay in redb, see [`super::log_store`]). Its counterpart in
//! ZooKeeper is `FileTxnLog` (preallocated `log.<zxid>` files), in etcd the `wal` package.
//!
//! # Why not redb
//! A redb commit rewrites a header and about seven copy-on-write pages at scattered offsets,
//! and this machine's fdatasync costs per separate extent: `cargo bench --bench log_commit`
//! measured 180 µs (200 B) to 333 µs (5,000 B) for a redb commit of one entry against 86–105 µs for an overwrite of
//! preallocated space (docs/perf/pass-12.md). An append here is one `pwrite` of the
//! encoded entries into space written with zeros beforehand, then one `fdatasync`: the file's
//! size and extents do not change, so only the data pages are flushed.
//!
//! # Format
//! Files `raft-log-<seq>.seg` (`seq` as 16 hex digits, increasing) in the log directory. Each
//! starts with a [`HEADER`]-byte header: magic `WRDNSEG1`, a random 64-bit salt, and the XXH3
//! of those 16 bytes. Records follow back to back:
//!
//! ```text
//! len: u32 LE (payload bytes, > 0) | check: u64 LE | index: u64 LE | payload
//! check = XXH3-64(index LE ++ payload, seed = the previous record's check,
//!                 or the segment's salt for its first record)
//! ```
//!
//! The rest of a segment is zeros. A segment is written with zeros to its full size and
//! fsynced as `raft-log.spare` before it is renamed into place (and the directory fsynced),
//! so a visible segment always has a valid header and zeros after its last record.
//!
//! # Recovery
//! Opening scans every segment from the start. A segment's records end at the first zero
//! length, short record or bad check. In the newest segment that is where an append a crash
//! interrupted begins, and it was never acknowledged (the append reports success only after
//! its fdatasync); its pages may have reached the disk in any order, so records after the bad
//! one can still look whole. The newest segment is fsynced at open (a killed process may
//! have written records it never fsynced, readable from the page cache). Whatever lies past
//! its last record (the rest of a torn append, or of a truncation a crash cut short) is
//! logged, and zeroed and fsynced before the first append. Damage to an acknowledged record
//! of the newest segment cannot be told from a torn append and ends the log there too; the
//! log store then refuses to start if the log no longer reaches the committed index it
//! recorded (see `LogStore::open`).
//! In an older segment every append was durable before the log rolled past it, so unreadable
//! bytes after its last record are damage and stop the open with an error, as does an index
//! that does not follow. Even where
//! such bytes survived, they could not pass for records behind a new one: each check chains
//! to its predecessor's, and a client cannot forge one without the salt it never sees. A
//! truncation zero-fills what it cuts before it returns. Segments must follow each other
//! without a gap; older segments wholly at or below the purge point are deleted, and an older
//! segment with no readable record is reported as damaged.
//!
//! # Lifecycle
//! Appends go to the newest segment; when a batch would pass [`SEGMENT_BYTES`] the log rolls to
//! a new one (the spare, prepared on a thread of its own once the active segment is half
//! full). Purging deletes whole segments at or below the purge point; truncation deletes
//! newer segments (newest first) and zero-fills the cut part of the one it ends in.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;

use xxhash_rust::xxh3::xxh3_64_with_seed;
use xxhash_rust::xxh3::Xxh3;

/// Bytes a segment is preallocated to (a batch larger than that gets a segment of its own
/// that grows past it).
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// Segment header: magic, salt, check.
pub const HEADER: u64 = 24;
/// Record header: length, check, index.
const RECORD_HEADER: usize = 20;
const MAGIC: &[u8; 8] = b"WRDNSEG1";
const SPARE: &str = "raft-log.spare";
/// Zeros written at a time when preparing a segment or zero-filling a cut.
const ZERO_CHUNK: usize = 1 << 20;

/// The check of one record, chained to the one before it: `prev` is the previous record's
/// check in the same segment, or the segment's salt for its first record.
fn check(prev: u64, index: u64, payload: &[u8]) -> u64 {
    let mut h = Xxh3::with_seed(prev);
    h.update(&index.to_le_bytes());
    h.update(payload);
    h.digest()
}

fn header_bytes(salt: u64) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&salt.to_le_bytes());
    let c = xxh3_64_with_seed(&h[..16], 0);
    h[16..24].copy_from_slice(&c.to_le_bytes());
    h
}

fn corrupt(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The record whose header starts at `at`, if a whole one with a non-zero length fits:
/// (length, stored check, index, payload).
fn record_at(bytes: &[u8], at: usize) -> Option<(usize, u64, u64, &[u8])> {
    let head = bytes.get(at..at.checked_add(RECORD_HEADER)?)?;
    let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(head[4..12].try_into().ok()?);
    let index = u64::from_le_bytes(head[12..20].try_into().ok()?);
    if len == 0 {
        return None;
    }
    let start = at + RECORD_HEADER;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    Some((len, sum, index, payload))
}

fn segment_name(seq: u64) -> String {
    format!("raft-log-{seq:016x}.seg")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("raft-log-")?.strip_suffix(".seg")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes zeros to `file` over `[from, to)`.
fn zero_fill(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZERO_CHUNK as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Writes a complete spare segment of `bytes` bytes at `dir/raft-log.spare`: header, zeros,
/// fsynced.
fn prepare_spare(dir: &Path, bytes: u64) -> io::Result<()> {
    let path = dir.join(SPARE);
    let file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
    file.write_all_at(&header_bytes(rand::random()), 0)?;
    zero_fill(&file, HEADER, bytes.max(HEADER))?;
    file.sync_all()
}

/// One segment file and where its records are.
struct Segment {
    seq: u64,
    path: PathBuf,
    file: File,
    salt: u64,
    /// Index of the first record (meaningless while `offsets` is empty).
    first: u64,
    /// File offset of each record; record `i` has index `first + i`.
    offsets: Vec<u64>,
    /// Check of each record (each one seeds the next one's).
    checks: Vec<u64>,
    /// Offset just past the last record.
    end: u64,
    /// Found at open: bytes other than zeros past `end`, up to this offset (a torn append,
    /// or a truncation a crash cut short).
    dirty_to: Option<u64>,
}

impl Segment {
    fn last(&self) -> Option<u64> {
        (!self.offsets.is_empty()).then(|| self.first + self.offsets.len() as u64 - 1)
    }

    /// Opens the segment at `path` as one with no records: a spare just renamed into place,
    /// whose header is all that needs reading.
    fn fresh(seq: u64, path: PathBuf) -> io::Result<Segment> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path)?;
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                corrupt(format!("{}: shorter than a segment header", path.display()))
            } else {
                e
            }
        })?;
        let salt = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        if &h[..8] != MAGIC || header_bytes(salt) != h {
            return Err(corrupt(format!("{}: not a Warden log segment (bad header)", path.display())));
        }
        Ok(Segment {
            seq,
            path,
            file,
            salt,
            first: 0,
            offsets: Vec::new(),
            checks: Vec::new(),
            end: HEADER,
            dirty_to: None,
        })
    }

    /// The seed of the next record's check.
    fn chain(&self) -> u64 {
        self.checks.last().copied().unwrap_or(self.salt)
    }

    /// Opens `path` and finds its records (see the module docs, Recovery).
    fn open(seq: u64, path: PathBuf) -> io::Result<Segment> {
        let bytes = std::fs::read(&path)?;
        let mut seg = Segment::fresh(seq, path)?;
        let mut at = HEADER as usize;
        while let Some((len, sum, index, payload)) = record_at(&bytes, at) {
            if check(seg.chain(), index, payload) != sum {
                // Where the log ends. In the newest segment that is a torn append (its pages
                // may persist in any order, so records after the bad one can still look
                // whole); in an older one it is damage, refused by `SegmentLog::settle`.
                break;
            }
            match seg.last() {
                None => seg.first = index,
                Some(last) if index == last + 1 => {}
                Some(last) => {
                    return Err(corrupt(format!(
                        "{}: record at offset {at} has index {index} after {last}",
                        seg.path.display()
                    )))
                }
            }
            seg.offsets.push(at as u64);
            seg.checks.push(sum);
            at += RECORD_HEADER + len;
            seg.end = at as u64;
        }
        let end = seg.end as usize;
        seg.dirty_to = bytes.iter().rposition(|&b| b != 0).filter(|&i| i >= end).map(|i| i as u64 + 1);
        Ok(seg)
    }

    /// The records with local positions `[from, to)`, read in one `pread`.
    fn read(&self, from: usize, to: usize) -> io::Result<Vec<(u64, Vec<u8>)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let start = self.offsets[from];
        let stop = self.offsets.get(to).copied().unwrap_or(self.end);
        let mut buf = vec![0u8; (stop - start) as usize];
        self.file.read_exact_at(&mut buf, start)?;
        let mut out = Vec::with_capacity(to - from);
        let mut at = 0usize;
        for pos in from..to {
            let prev = if pos == 0 { self.salt } else { self.checks[pos - 1] };
            let bad =
                || corrupt(format!("{}: record {} changed on disk", self.path.display(), self.first + pos as u64));
            let (len, sum, index, payload) = record_at(&buf, at).ok_or_else(bad)?;
            if index != self.first + pos as u64 || sum != self.checks[pos] || check(prev, index, payload) != sum {
                return Err(bad());
            }
            out.push((index, payload.to_vec()));
            at += RECORD_HEADER + len;
        }
        Ok(out)
    }
}

/// The segment files of one log directory. Not thread-safe by itself: the log store keeps it
/// behind a mutex and is its only writer.
pub struct SegmentLog {
    dir: PathBuf,
    segment_bytes: u64,
    /// Oldest first; never empty. The last one takes appends.
    segments: Vec<Segment>,
    /// Records at or below this index are purged: never read, and their segments deleted.
    purged: Option<u64>,
    /// A spare being prepared on its own thread.
    preparing: Option<std::thread::JoinHandle<io::Result<()>>>,
    /// A complete spare is in place.
    spare_ready: bool,
    /// Appends are fsynced before they return (`forceSync`, on unless set to `no`).
    sync: bool,
}

impl SegmentLog {
    /// Opens the log in `dir` (creating its first segment if it has none), with records at or
    /// below `purged` treated as gone.
    pub fn open(dir: &Path, purged: Option<u64>) -> io::Result<SegmentLog> {
        SegmentLog::open_with(dir, purged, SEGMENT_BYTES)
    }

    /// [`SegmentLog::open`] with segments of `segment_bytes` (tests use small ones).
    pub fn open_with(dir: &Path, purged: Option<u64>, segment_bytes: u64) -> io::Result<SegmentLog> {
        std::fs::create_dir_all(dir)?;
        // A spare may be half written (a crash while preparing it): it is made again.
        match std::fs::remove_file(dir.join(SPARE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut seqs = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_name) {
                seqs.push(seq);
            }
        }
        seqs.sort_unstable();
        let mut segments = Vec::with_capacity(seqs.len());
        for seq in seqs {
            segments.push(Segment::open(seq, dir.join(segment_name(seq)))?);
        }
        let mut log = SegmentLog {
            dir: dir.to_owned(),
            segment_bytes,
            segments,
            purged,
            preparing: None,
            spare_ready: false,
            sync: true,
        };
        log.settle()?;
        if log.segments.is_empty() {
            log.roll()?;
        }
        Ok(log)
    }

    /// Deletes every segment file (and a spare) in `dir`, durably.
    pub fn remove_all(dir: &Path) -> io::Result<()> {
        let mut removed = false;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n == SPARE || parse_segment_name(n).is_some()) {
                std::fs::remove_file(entry.path())?;
                removed = true;
            }
        }
        if removed {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// After recovery: clears what an interrupted write left past the newest segment's last
    /// record, deletes older segments holding only purged records (an older one with no
    /// record at all is damaged), and checks that the rest follow each other.
    fn settle(&mut self) -> io::Result<()> {
        let n = self.segments.len();
        let mut keep = Vec::with_capacity(n);
        let mut removed = false;
        for (i, seg) in std::mem::take(&mut self.segments).into_iter().enumerate() {
            let newest = i + 1 == n;
            if newest {
                // Records a killed process wrote but did not fsync are readable from the page
                // cache; they must be durable before this log reports them as its own.
                seg.file.sync_data()?;
                if let Some(to) = seg.dirty_to {
                    // Cleared before the first append (see `clear_dirty_tail`), so that no new
                    // record can end up followed by it; kept until then for the caller's checks.
                    tracing::warn!(segment = %seg.path.display(), from = seg.end, to,
                        "log segment: the remains of an interrupted write follow its last record");
                }
                keep.push(seg);
                continue;
            }
            match seg.last() {
                // Only the newest segment can legitimately hold no record (rolled to, then a
                // crash): an older one without a readable first record is damaged.
                None => {
                    return Err(corrupt(format!(
                        "{}: no readable record in a segment that newer ones follow",
                        seg.path.display()
                    )))
                }
                Some(last) if self.purged.is_some_and(|p| last <= p) => {
                    std::fs::remove_file(&seg.path)?;
                    removed = true;
                }
                Some(_) => {
                    // Every append to an older segment was durable before the log rolled past
                    // it, and truncation leaves zeros: anything past its last record is damage.
                    if let Some(to) = seg.dirty_to {
                        return Err(corrupt(format!(
                            "{}: unreadable data at offsets {}..{to} after record {}, in a segment \
                             that newer ones follow",
                            seg.path.display(),
                            seg.end,
                            seg.last().map_or(0, |l| l)
                        )));
                    }
                    keep.push(seg);
                }
            }
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        self.segments = keep;
        for pair in self.segments.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if let (Some(last), Some(_)) = (a.last(), b.last()) {
                if b.first != last + 1 {
                    return Err(corrupt(format!(
                        "{}: the log jumps from index {last} to {} in {}",
                        a.path.display(),
                        b.first,
                        b.path.display()
                    )));
                }
            }
        }
        Ok(())
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a segment log always has a segment")
    }

    /// Index of the newest record (purged or not).
    pub fn last_index(&self) -> Option<u64> {
        self.segments.iter().rev().find_map(Segment::last)
    }

    /// The newest record, unless it is purged.
    pub fn last_record(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        let Some(last) = self.last_index() else { return Ok(None) };
        if self.purged.is_some_and(|p| last <= p) {
            return Ok(None);
        }
        Ok(self.read(last, last + 1)?.pop())
    }

    /// Everything left is purged: the next append may start at any index.
    fn logically_empty(&self) -> bool {
        match self.last_index() {
            None => true,
            Some(last) => self.purged.is_some_and(|p| last <= p),
        }
    }

    /// Whether appends are fsynced before they return (ZooKeeper's `forceSync`). Without,
    /// an append survives a crash of the process (the page cache keeps it, and the next open
    /// fsyncs what it finds) but not of the machine.
    pub fn set_sync(&mut self, sync: bool) {
        self.sync = sync;
    }

    /// Appends `records` (consecutive indexes following the last record, or any start
    /// once everything is purged) and returns after they are durable (written, without
    /// [`SegmentLog::set_sync`]).
    pub fn append(&mut self, records: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let Some(&(first, _)) = records.first() else { return Ok(()) };
        self.clear_dirty_tail()?;
        for pair in records.windows(2) {
            if pair[1].0 != pair[0].0 + 1 {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "appended indexes are not consecutive"));
            }
        }
        let follows = self.last_index().is_some_and(|l| first == l + 1);
        if !follows {
            if !self.logically_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("append at {first} does not follow the last index {:?}", self.last_index()),
                ));
            }
            if self.active().last().is_some() {
                // The active segment's records are all purged and the new ones do not follow
                // them: start afresh; every older segment goes.
                self.roll()?;
                self.drop_older_than_active()?;
            }
        }
        let bytes: usize = records.iter().map(|(_, p)| RECORD_HEADER + p.len()).sum();
        if self.active().last().is_some() && self.active().end + bytes as u64 > self.segment_bytes {
            self.roll()?;
        }
        let mut buf = Vec::with_capacity(bytes);
        let mut offsets = Vec::with_capacity(records.len());
        let mut checks = Vec::with_capacity(records.len());
        let base = self.active().end;
        let mut prev = self.active().chain();
        for (index, payload) in records {
            let len = u32::try_from(payload.len())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "log record over 4 GiB"))?;
            let sum = check(prev, *index, payload);
            offsets.push(base + buf.len() as u64);
            checks.push(sum);
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&sum.to_le_bytes());
            buf.extend_from_slice(&index.to_le_bytes());
            buf.extend_from_slice(payload);
            prev = sum;
        }
        let sync = self.sync;
        let seg = self.segments.last_mut().expect("a segment log always has a segment");
        if let Err(e) =
            seg.file.write_all_at(&buf, base).and_then(|()| if sync { seg.file.sync_data() } else { Ok(()) })
        {
            // Best effort: what reached the file must not stay behind as valid records past the
            // end (the caller stops on this error; the next open clears what is left anyway).
            let _ = zero_fill(&seg.file, base, base + buf.len() as u64);
            return Err(e);
        }
        if seg.offsets.is_empty() {
            seg.first = first;
        }
        seg.offsets.extend(offsets);
        seg.checks.extend(checks);
        seg.end = base + buf.len() as u64;
        if !self.spare_ready && self.preparing.is_none() && seg.end > self.segment_bytes / 2 {
            let dir = self.dir.clone();
            let bytes = self.segment_bytes;
            // The records are durable: a spare that cannot be prepared now is prepared at the
            // roll instead.
            match std::thread::Builder::new().name("warden-log-spare".into()).spawn(move || prepare_spare(&dir, bytes))
            {
                Ok(handle) => self.preparing = Some(handle),
                Err(e) => tracing::warn!(error = %e, "could not start preparing the next log segment"),
            }
        }
        Ok(())
    }

    /// Zeroes (durably) what an interrupted write left past the newest segment's last record.
    fn clear_dirty_tail(&mut self) -> io::Result<()> {
        let seg = self.segments.last_mut().expect("a segment log always has a segment");
        if let Some(to) = seg.dirty_to {
            zero_fill(&seg.file, seg.end, to)?;
            seg.file.sync_data()?;
            seg.dirty_to = None;
        }
        Ok(())
    }

    /// Records with indexes in `[from, to)` that are not purged, in order.
    pub fn read(&self, from: u64, to: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let from = match self.purged {
            Some(p) => from.max(p + 1),
            None => from,
        };
        let mut out = Vec::new();
        for seg in &self.segments {
            let Some(last) = seg.last() else { continue };
            if last < from || seg.first >= to {
                continue;
            }
            let lo = from.saturating_sub(seg.first) as usize;
            let hi = (to.min(last + 1) - seg.first) as usize;
            out.extend(seg.read(lo, hi)?);
        }
        Ok(out)
    }

    /// Removes every record at or after `from`, durably.
    pub fn truncate(&mut self, from: u64) -> io::Result<()> {
        // Newest first, each unlink durable before the next, so that a crash midway leaves a
        // prefix of the log.
        while self.segments.len() > 1 && self.active().last().is_none_or(|_| self.active().first >= from) {
            std::fs::remove_file(&self.active().path)?;
            sync_dir(&self.dir)?;
            self.segments.pop();
        }
        let seg = self.segments.last_mut().expect("a segment log always has a segment");
        if let Some(last) = seg.last() {
            if from <= last {
                let pos = from.saturating_sub(seg.first) as usize;
                let cut = seg.offsets[pos];
                zero_fill(&seg.file, cut, seg.end)?;
                seg.file.sync_data()?;
                seg.offsets.truncate(pos);
                seg.checks.truncate(pos);
                seg.end = cut;
            }
        }
        Ok(())
    }

    /// Treats every record at or below `upto` as gone and deletes the segments that hold
    /// only such records (the active one stays, for appends). The caller records `upto`
    /// durably first: segments a crash leaves behind are deleted on the next open.
    pub fn purge(&mut self, upto: u64) -> io::Result<()> {
        self.purged = Some(self.purged.map_or(upto, |p| p.max(upto)));
        let mut removed = false;
        while self.segments.len() > 1 && self.segments[0].last().is_none_or(|l| l <= upto) {
            std::fs::remove_file(&self.segments[0].path)?;
            self.segments.remove(0);
            removed = true;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Deletes every segment but the active one (all their records are purged).
    fn drop_older_than_active(&mut self) -> io::Result<()> {
        if self.segments.len() < 2 {
            return Ok(());
        }
        while self.segments.len() > 1 {
            std::fs::remove_file(&self.segments[0].path)?;
            self.segments.remove(0);
        }
        sync_dir(&self.dir)
    }

    /// Puts a new, empty segment in place as the active one: the spare if one is ready,
    /// otherwise one prepared now.
    fn roll(&mut self) -> io::Result<()> {
        if let Some(handle) = self.preparing.take() {
            match handle.join() {
                Ok(Ok(())) => self.spare_ready = true,
                Ok(Err(e)) => tracing::warn!(error = %e, "preparing a log segment failed; preparing it again"),
                Err(_) => tracing::warn!("the thread preparing a log segment panicked; preparing it again"),
            }
        }
        if !self.spare_ready {
            prepare_spare(&self.dir, self.segment_bytes)?;
        }
        self.spare_ready = false;
        let seq = self.segments.last().map_or(1, |s| s.seq + 1);
        let path = self.dir.join(segment_name(seq));
        std::fs::rename(self.dir.join(SPARE), &path)?;
        sync_dir(&self.dir)?;
        let seg = Segment::fresh(seq, path)?;
        self.segments.push(seg);
        Ok(())
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        // A spare half written is removed on the next open; waiting here lets a test's temp
        // dir go cleanly.
        if let Some(handle) = self.preparing.take() {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> (u64, Vec<u8>) {
        (i, format!("entry {i}").into_bytes().repeat((i % 7 + 1) as usize))
    }

    fn recs(range: std::ops::Range<u64>) -> Vec<(u64, Vec<u8>)> {
        range.map(rec).collect()
    }

    /// A log of 4 KiB segments holding records 1..=n, appended one by one.
    fn small_log(dir: &Path, n: u64) -> SegmentLog {
        let mut log = SegmentLog::open_with(dir, None, 4096).expect("open");
        for i in 1..=n {
            log.append(&[rec(i)]).expect("append");
        }
        log
    }

    /// Writes each `(from, to)` run of records (`to` excluded) as one append to a fresh log
    /// in `dir`, closes it, and returns its (single) segment's path, record offsets and end.
    fn closed_log(dir: &Path, appends: &[(u64, u64)]) -> (PathBuf, Vec<u64>, u64) {
        let mut log = SegmentLog::open(dir, None).expect("open");
        for &(from, to) in appends {
            log.append(&recs(from..to)).expect("append");
        }
        let seg = log.active();
        (seg.path.clone(), seg.offsets.clone(), seg.end)
    }

    /// Writes `bytes` into the file at `path` at offset `at`, as damage or a crash would.
    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        let f = std::fs::OpenOptions::new().write(true).open(path).expect("open the segment");
        f.write_all_at(bytes, at).expect("overwrite");
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(|e| e.ok()?.file_name().to_str().map(str::to_owned))
            .filter(|n| parse_segment_name(n).is_some())
            .collect();
        v.sort();
        v
    }

    /// Appends survive a reopen, across several segments, and read back byte for byte.
    #[test]
    fn appends_roll_over_segments_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = small_log(dir.path(), 200);
        log.append(&recs(201..260)).expect("batch");
        assert!(segment_files(dir.path()).len() > 3, "small segments roll");
        assert_eq!(log.read(1, 260).expect("read"), recs(1..260));
        drop(log);
        let log = SegmentLog::open_with(dir.path(), None, 4096).expect("reopen");
        assert_eq!(log.last_index(), Some(259));
        assert_eq!(log.read(1, 260).expect("read"), recs(1..260));
        assert_eq!(log.read(100, 103).expect("read"), recs(100..103));
        assert_eq!(log.last_record().expect("last"), Some(rec(259)));
    }

    /// Without fsync (`forceSync=no`) appends still reach the file: a reopen, as after the
    /// process was killed, reads them all.
    #[test]
    fn appends_without_fsync_survive_the_process() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = small_log(dir.path(), 10);
        log.set_sync(false);
        log.append(&recs(11..80)).expect("unsynced batch");
        drop(log);
        let log = SegmentLog::open_with(dir.path(), None, 4096).expect("reopen");
        assert_eq!(log.read(1, 80).expect("read"), recs(1..80));
    }

    /// A torn append (the record cut short, or garbage after the last record) is where the
    /// log ends after a crash; the records before it stay, and appends go on from there.
    #[test]
    fn a_torn_append_ends_the_log_where_it_began() {
        let dir = tempfile::tempdir().expect("dir");
        let (path, _, end) = closed_log(dir.path(), &[(1, 11)]);
        // Half of a record: a valid header's length, then too few bytes.
        let mut torn = Vec::new();
        torn.extend_from_slice(&100u32.to_le_bytes());
        torn.extend_from_slice(&[0xAB; 30]);
        overwrite(&path, end, &torn);
        let mut log = SegmentLog::open(dir.path(), None).expect("reopen");
        assert_eq!(log.last_index(), Some(10));
        log.append(&[rec(11)]).expect("append after tear");
        drop(log);
        let log = SegmentLog::open(dir.path(), None).expect("reopen");
        assert_eq!(log.read(1, 100).expect("read"), recs(1..12));
    }

    /// A record with the right shape but a check made without the segment's salt (what a
    /// client could plant inside a value) is not taken for a record.
    #[test]
    fn a_record_without_the_salt_is_not_a_record() {
        let dir = tempfile::tempdir().expect("dir");
        let (path, _, end) = closed_log(dir.path(), &[(1, 3)]);
        let (index, payload) = rec(3);
        let mut fake = Vec::new();
        fake.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        fake.extend_from_slice(&check(0, index, &payload).to_le_bytes());
        fake.extend_from_slice(&index.to_le_bytes());
        fake.extend_from_slice(&payload);
        overwrite(&path, end, &fake);
        let log = SegmentLog::open(dir.path(), None).expect("reopen");
        assert_eq!(log.last_index(), Some(2));
    }

    /// Records of an interrupted write that lie past the recovered end (a torn multi-record
    /// append whose first record was lost, or a truncation cut short) never come back behind
    /// a new record: open clears them, and where they are put back anyway, the chained check
    /// ties each to its old predecessor, so the log ends before them.
    #[test]
    fn stale_records_never_follow_a_new_one() {
        let dir = tempfile::tempdir().expect("dir");
        // 11..=20 in one append.
        let (path, offsets, end) = closed_log(dir.path(), &[(1, 11), (11, 21)]);
        let at11 = offsets[10];
        let image = std::fs::read(&path).expect("read");
        let stale = image[at11 as usize..end as usize].to_vec();
        // The write of 11..=20 reached the disk without record 11's header.
        overwrite(&path, at11, &[0u8; RECORD_HEADER]);
        let mut log = SegmentLog::open(dir.path(), None).expect("reopen");
        assert_eq!(log.last_index(), Some(10));
        // A new record 11 of the same length as the lost one: the remains after it are gone.
        let (_, old11) = rec(11);
        log.append(&[(11, vec![b'n'; old11.len()])]).expect("new 11");
        let len11 = RECORD_HEADER + old11.len();
        let image = std::fs::read(&path).expect("read");
        assert!(image[at11 as usize + len11..].iter().all(|&b| b == 0), "the first append cleared the remains");
        drop(log);
        // The old 12..=20 put back where they were, as if they had not been cleared.
        overwrite(&path, at11 + len11 as u64, &stale[len11..]);
        let log = SegmentLog::open(dir.path(), None).expect("reopen");
        assert_eq!(log.last_index(), Some(11), "the old 12..=20 do not chain to the new 11");
        assert_eq!(log.read(11, 12).expect("read"), vec![(11, vec![b'n'; old11.len()])]);
    }

    /// An append torn by a power loss with its later pages on disk and an earlier one lost
    /// (records after the bad one look whole) ends the log before it; the server starts.
    #[test]
    fn a_torn_append_with_later_pages_persisted_opens() {
        let dir = tempfile::tempdir().expect("dir");
        // 6..=15 in one append.
        let (path, offsets, _) = closed_log(dir.path(), &[(1, 6), (6, 16)]);
        let at7 = offsets[6];
        overwrite(&path, at7 + RECORD_HEADER as u64 + 1, b"#");
        let log = SegmentLog::open(dir.path(), None).expect("a torn append is no damage");
        assert_eq!(log.last_index(), Some(6));
    }

    /// Unreadable bytes in a segment that newer ones follow stop the open with an error:
    /// every append there was durable, so this is damage, not a torn write.
    #[test]
    fn damage_in_an_older_segment_is_an_error() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_log(dir.path(), 200);
        let seg = &log.segments[0];
        let (path, at) = (seg.path.clone(), seg.offsets[seg.offsets.len() / 2]);
        drop(log);
        overwrite(&path, at + RECORD_HEADER as u64 + 1, b"#");
        let err = SegmentLog::open_with(dir.path(), None, 4096).err().expect("error");
        assert!(err.to_string().contains("unreadable data"), "{err}");
    }

    /// Truncated records are gone for good: not read, not back after a reopen, even where
    /// new records of the same length were written over the start of the cut.
    #[test]
    fn truncation_is_durable_and_spans_segments() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = small_log(dir.path(), 120);
        let before = segment_files(dir.path()).len();
        log.truncate(30).expect("truncate");
        assert!(segment_files(dir.path()).len() < before, "newer segments are deleted");
        assert_eq!(log.last_index(), Some(29));
        log.append(&[rec(30)]).expect("append over the cut");
        assert_eq!(log.read(1, 200).expect("read"), recs(1..31));
        drop(log);
        let mut log = SegmentLog::open_with(dir.path(), None, 4096).expect("reopen");
        assert_eq!(log.read(1, 200).expect("read"), recs(1..31));
        // Truncating everything leaves an empty log that takes any first index.
        log.truncate(1).expect("truncate all");
        assert_eq!(log.last_index(), None);
        log.append(&recs(1..4)).expect("append");
        drop(log);
        let log = SegmentLog::open_with(dir.path(), None, 4096).expect("reopen");
        assert_eq!(log.read(0, 100).expect("read"), recs(1..4));
    }

    /// Purging deletes the segments it empties, hides what it covers, and a log purged past
    /// its end (a snapshot installed on a follower) takes appends from the new index.
    #[test]
    fn purge_deletes_segments_and_allows_a_jump_past_the_end() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = small_log(dir.path(), 120);
        let before = segment_files(dir.path()).len();
        log.purge(100).expect("purge");
        assert!(segment_files(dir.path()).len() < before);
        assert_eq!(log.read(1, 200).expect("read"), recs(101..121));
        assert!(log.append(&[rec(500)]).is_err(), "a gap is refused while records remain");
        log.purge(300).expect("purge past the end");
        assert_eq!(log.last_record().expect("last"), None);
        log.append(&recs(301..305)).expect("append after the jump");
        assert_eq!(segment_files(dir.path()).len(), 1);
        drop(log);
        let log = SegmentLog::open_with(dir.path(), Some(300), 4096).expect("reopen");
        assert_eq!(log.read(0, 1000).expect("read"), recs(301..305));
    }

    /// Segments a crash left after a purge was recorded are deleted at open; a real gap in
    /// the log is refused with an error naming the files.
    #[test]
    fn open_deletes_purged_leftovers_and_refuses_a_gap() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_log(dir.path(), 300);
        drop(log);
        let files = segment_files(dir.path());
        let log = SegmentLog::open_with(dir.path(), Some(150), 4096).expect("reopen purged");
        assert!(segment_files(dir.path()).len() < files.len());
        assert_eq!(log.read(0, 1000).expect("read"), recs(151..301));
        drop(log);
        // Remove a middle segment: the log now jumps.
        let files = segment_files(dir.path());
        assert!(files.len() >= 3);
        std::fs::remove_file(dir.path().join(&files[1])).expect("remove");
        let err = SegmentLog::open_with(dir.path(), Some(150), 4096).err().expect("a gap is an error");
        assert!(err.to_string().contains("jumps"), "{err}");
    }

    /// An older segment whose first record cannot be read is reported, not deleted as if it
    /// were empty.
    #[test]
    fn an_unreadable_older_segment_is_an_error() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_log(dir.path(), 200);
        let first = log.segments[0].path.clone();
        assert!(log.segments.len() >= 3);
        drop(log);
        overwrite(&first, HEADER, &[0u8; RECORD_HEADER]);
        let err = SegmentLog::open_with(dir.path(), None, 4096).err().expect("error");
        assert!(err.to_string().contains("no readable record"), "{err}");
        assert!(first.exists(), "the damaged segment is kept for the operator");
    }

    /// A segment whose header is damaged stops the open with an error naming it.
    #[test]
    fn a_damaged_header_is_an_error() {
        let dir = tempfile::tempdir().expect("dir");
        let (path, _, _) = closed_log(dir.path(), &[(1, 3)]);
        overwrite(&path, 3, b"X");
        let err = SegmentLog::open(dir.path(), None).err().expect("error");
        assert!(err.to_string().contains("bad header"), "{err}");
    }
}
