//! Apache ZooKeeper's snapshot files, `<dataDir>/version-2/snapshot.<zxid hex>[.gz|.snappy]`
//! (`FileSnap`, `SnapStream`, `SerializeUtils.deserializeSnapshot`, `DataTree.deserialize`).
//!
//! # Format (3.4 to 3.9; all jute, big-endian)
//! ```text
//! FileHeader   magic "ZKSN", version 2, dbid
//! sessions     int count, then count x (long id, int timeout)
//! ACL cache    int count, then count x (long key, vector<ACL>); key -1 means OPEN_ACL_UNSAFE
//! nodes        (ustring path, buffer data, long acl key, StatPersisted) ... ustring "/"
//!              the root first, under the path "" and every parent before its children
//! seal         long Adler-32 of every byte so far, ustring "/"
//! digest       (3.6+, optional) long zxid, int version, long digest (a hex ustring if version < 2)
//! seal
//! last zxid    (3.9+, optional) long lastProcessedZxid
//! seal
//! ```
//! The Adler-32 is over the uncompressed bytes; `.gz` files are gzip streams, `.snappy` files
//! snappy-java's stream format (8-byte magic, two ints, then blocks of `int length` + raw
//! snappy). The zxid in the file name is the last zxid applied when the snapshot *began*:
//! snapshots are fuzzy, and the txn log from that zxid on brings the tree to a consistent
//! state.
//!
//! This module reads and writes the format; it knows nothing of Warden's tree.

use std::io::BufReader;
use std::io::Read;
use std::path::Path;

use jute::Acl;
use jute::StatPersisted;

use super::stream::Reader;
use super::stream::StreamError;
use super::stream::Writer;
use super::FileError;

/// `FileSnap.SNAP_MAGIC`: "ZKSN".
pub const SNAPSHOT_MAGIC: i32 = jute::txn::SNAPSHOT_MAGIC;
/// The only snapshot format version ZooKeeper has written.
pub const VERSION: i32 = 2;
/// `ReferenceCountedACLCache.OPEN_UNSAFE_ACL_ID`: the ACL key that means `world:anyone` with
/// every permission, never stored in the cache.
pub const OPEN_ACL_KEY: i64 = -1;
/// `SnappyCodec.MAGIC_HEADER`.
const SNAPPY_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// How a snapshot file is compressed, from its name (`SnapStream.getStreamMode`: the last
/// dot-separated part, `gz` or `snappy`; anything else is plain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Plain,
    Gzip,
    Snappy,
}

impl Compression {
    pub fn of(file_name: &str) -> Compression {
        match file_name.rsplit('.').next() {
            Some(ext) if file_name.contains('.') && ext.eq_ignore_ascii_case("gz") => Compression::Gzip,
            Some(ext) if file_name.contains('.') && ext.eq_ignore_ascii_case("snappy") => Compression::Snappy,
            _ => Compression::Plain,
        }
    }
}

/// The zxid in a `<prefix>.<zxid hex>[...]` file name (`Util.getZxidFromName`).
pub fn zxid_from_name(file_name: &str, prefix: &str) -> Option<i64> {
    let mut parts = file_name.split('.');
    if parts.next() != Some(prefix) {
        return None;
    }
    i64::from_str_radix(parts.next()?, 16).ok()
}

/// The digest a snapshot records (`DataTree.ZxidDigest`): the tree digest at `zxid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotDigest {
    pub zxid: i64,
    pub version: i32,
    pub digest: i64,
}

/// One node as a snapshot stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotNode {
    /// `""` for the root.
    pub path: String,
    pub data: Option<Vec<u8>>,
    /// A key of the ACL cache, or [`OPEN_ACL_KEY`].
    pub acl: i64,
    pub stat: StatPersisted,
}

/// What follows the nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailer {
    pub digest: Option<SnapshotDigest>,
    pub last_processed_zxid: Option<i64>,
}

/// snappy-java's `SnappyInputStream`: the header, then `int length` + raw snappy blocks.
struct SnappyStream<R> {
    inner: R,
    block: Vec<u8>,
    at: usize,
    decoder: snap::raw::Decoder,
}

impl<R: Read> SnappyStream<R> {
    fn new(mut inner: R) -> std::io::Result<SnappyStream<R>> {
        let mut header = [0u8; 16];
        inner.read_exact(&mut header)?;
        if header[..8] != SNAPPY_MAGIC {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a snappy-java stream (bad magic)"));
        }
        Ok(SnappyStream { inner, block: Vec::new(), at: 0, decoder: snap::raw::Decoder::new() })
    }

    /// The next block; false at a clean end of the stream.
    fn next_block(&mut self) -> std::io::Result<bool> {
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.inner.read(&mut len[got..])? {
                0 if got == 0 => return Ok(false),
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => got += n,
            }
        }
        let len = i32::from_be_bytes(len);
        let len = u64::try_from(len)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "negative snappy block length"))?;
        let mut compressed = Vec::new();
        (&mut self.inner).take(len).read_to_end(&mut compressed)?;
        if (compressed.len() as u64) < len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.block = self
            .decoder
            .decompress_vec(&compressed)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("snappy block: {e}")))?;
        self.at = 0;
        Ok(true)
    }
}

impl<R: Read> Read for SnappyStream<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Opens a snapshot file for reading, decompressing as its name says.
fn open(path: &Path) -> Result<Box<dyn Read>, FileError> {
    let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
    let file = BufReader::with_capacity(1 << 20, file);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    Ok(match Compression::of(name) {
        Compression::Plain => Box::new(file),
        Compression::Gzip => Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(file))),
        Compression::Snappy => Box::new(SnappyStream::new(file).map_err(|e| FileError::io(path, e))?),
    })
}

/// A snapshot being read: the header, sessions and ACL cache are read at open; the nodes are
/// streamed by [`SnapshotReader::next_node`]; [`SnapshotReader::finish`] checks the seals.
pub struct SnapshotReader {
    path: std::path::PathBuf,
    reader: Reader<Box<dyn Read>>,
    pub dbid: i64,
    pub sessions: Vec<(i64, i32)>,
    pub acls: Vec<(i64, Vec<Acl>)>,
    done: bool,
}

impl SnapshotReader {
    pub fn open(path: &Path) -> Result<SnapshotReader, FileError> {
        SnapshotReader::new(path, open(path)?)
    }

    /// Reads a snapshot from `input` (uncompressed bytes); `path` names it in errors.
    pub fn new(path: &Path, input: Box<dyn Read>) -> Result<SnapshotReader, FileError> {
        let mut reader = Reader::new(input);
        let err = |e: StreamError| FileError::stream(path, e);
        let magic = reader.int("the file header").map_err(err)?;
        if magic != SNAPSHOT_MAGIC {
            return Err(FileError::format(
                path,
                format!("not a ZooKeeper snapshot: magic {magic:#010x}, expected {SNAPSHOT_MAGIC:#010x} (\"ZKSN\")"),
            ));
        }
        let version = reader.int("the file header").map_err(err)?;
        if version != VERSION {
            return Err(FileError::format(path, format!("unknown snapshot version {version}")));
        }
        let dbid = reader.long("the file header").map_err(err)?;
        let count = reader.int("the session count").map_err(err)?;
        let mut sessions = Vec::new();
        for _ in 0..count.max(0) {
            let id = reader.long("a session").map_err(err)?;
            let timeout = reader.int("a session").map_err(err)?;
            sessions.push((id, timeout));
        }
        let count = reader.int("the ACL cache").map_err(err)?;
        let mut acls = Vec::new();
        for _ in 0..count.max(0) {
            let key = reader.long("an ACL cache entry").map_err(err)?;
            // ReferenceCountedACLCache.deserialize: a null list is a broken file.
            let acl = reader
                .acl_vector("an ACL cache entry")
                .map_err(err)?
                .ok_or_else(|| FileError::format(path, format!("ACL cache entry {key} has no ACL list")))?;
            acls.push((key, acl));
        }
        Ok(SnapshotReader { path: path.to_owned(), reader, dbid, sessions, acls, done: false })
    }

    /// The next node, or `None` after the last.
    pub fn next_node(&mut self) -> Result<Option<SnapshotNode>, FileError> {
        if self.done {
            return Ok(None);
        }
        let path = &self.path;
        let err = |e: StreamError| FileError::stream(path, e);
        let node_path = self.reader.path("a node's path").map_err(err)?;
        if node_path == "/" {
            self.done = true;
            return Ok(None);
        }
        let data = self.reader.buffer("a node's data").map_err(err)?;
        let acl = self.reader.long("a node's ACL key").map_err(err)?;
        let stat = self.reader.stat_persisted().map_err(err)?;
        Ok(Some(SnapshotNode { path: node_path, data, acl, stat }))
    }

    /// Reads past any nodes left, checks the seal and reads the optional trailers
    /// (`FileSnap.deserialize`): an end of file where a trailer would start means an older
    /// format; a trailer that is there must be sealed.
    pub fn finish(mut self) -> Result<Trailer, FileError> {
        while self.next_node()?.is_some() {}
        let path = self.path.clone();
        let err = |e: StreamError| FileError::stream(&path, e);
        self.reader.seal("the snapshot's checksum").map_err(err)?;
        let mut trailer = Trailer::default();
        // DataTree.deserializeZxidDigest: an EOFException anywhere in it means "no digest".
        match self.read_digest() {
            Ok(d) => {
                trailer.digest = Some(d);
                self.reader.seal("the digest's checksum").map_err(err)?;
            }
            Err(StreamError::Eof { .. }) => return Ok(trailer),
            Err(e) => return Err(err(e)),
        }
        // DataTree.deserializeLastProcessedZxid (3.9): likewise.
        match self.reader.long("the last processed zxid") {
            Ok(z) => {
                trailer.last_processed_zxid = Some(z);
                self.reader.seal("the last zxid's checksum").map_err(err)?;
            }
            Err(StreamError::Eof { .. }) => {}
            Err(e) => return Err(err(e)),
        }
        Ok(trailer)
    }

    fn read_digest(&mut self) -> Result<SnapshotDigest, StreamError> {
        let zxid = self.reader.long("the digest")?;
        let version = self.reader.int("the digest")?;
        let digest = if version < 2 {
            let hex = self.reader.string("the digest")?;
            match hex {
                Some(h) => i64::from_str_radix(&h, 16).map_err(|_| self.reader.invalid(format!("bad digest {h:?}")))?,
                None => 0,
            }
        } else {
            self.reader.long("the digest")?
        };
        Ok(SnapshotDigest { zxid, version, digest })
    }
}

/// Writes a plain (uncompressed) snapshot, as ZooKeeper 3.8 writes one with
/// `snapshot.compression.method` unset: header, sessions, ACL cache, nodes (root as `""`
/// first, parents before children), seal, digest, seal.
pub struct SnapshotWriter<W: std::io::Write> {
    writer: Writer<W>,
}

impl<W: std::io::Write> SnapshotWriter<W> {
    pub fn start(
        out: W,
        dbid: i64,
        sessions: &[(i64, i32)],
        acls: &[(i64, Vec<Acl>)],
    ) -> std::io::Result<SnapshotWriter<W>> {
        let mut writer = Writer::new(out);
        writer.int(SNAPSHOT_MAGIC)?;
        writer.int(VERSION)?;
        writer.long(dbid)?;
        writer.int(i32::try_from(sessions.len()).map_err(|_| std::io::Error::other("too many sessions"))?)?;
        for (id, timeout) in sessions {
            writer.long(*id)?;
            writer.int(*timeout)?;
        }
        writer.int(i32::try_from(acls.len()).map_err(|_| std::io::Error::other("too many ACLs"))?)?;
        for (key, acl) in acls {
            writer.long(*key)?;
            writer.acl_vector(acl)?;
        }
        Ok(SnapshotWriter { writer })
    }

    pub fn node(&mut self, path: &str, data: Option<&[u8]>, acl: i64, stat: &StatPersisted) -> std::io::Result<()> {
        self.writer.string(Some(path))?;
        self.writer.buffer(data)?;
        self.writer.long(acl)?;
        self.writer.stat_persisted(stat)
    }

    pub fn finish(mut self, digest: SnapshotDigest) -> std::io::Result<W> {
        self.writer.string(Some("/"))?;
        self.writer.seal()?;
        self.writer.long(digest.zxid)?;
        self.writer.int(digest.version)?;
        self.writer.long(digest.digest)?;
        self.writer.seal()?;
        Ok(self.writer.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat() -> StatPersisted {
        StatPersisted {
            czxid: 0,
            mzxid: 0,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            pzxid: 0,
        }
    }

    /// A snapshot's body (root and one child), sealed, as every ZooKeeper version writes it.
    fn body() -> Writer<Vec<u8>> {
        let mut w = SnapshotWriter::start(Vec::new(), 3, &[(0x42, 30_000)], &[(1, vec![])]).unwrap();
        w.node("", None, OPEN_ACL_KEY, &stat()).unwrap();
        w.node("/a", Some(b"x"), 1, &stat()).unwrap();
        let mut w = w.writer;
        w.string(Some("/")).unwrap();
        w.seal().unwrap();
        w
    }

    /// The node count and trailer of a snapshot's bytes.
    fn read(bytes: Vec<u8>) -> Result<(usize, Trailer), FileError> {
        let mut r = SnapshotReader::new(Path::new("snapshot.1"), Box::new(std::io::Cursor::new(bytes)))?;
        assert_eq!(r.sessions, vec![(0x42, 30_000)]);
        let mut n = 0;
        while r.next_node()?.is_some() {
            n += 1;
        }
        Ok((n, r.finish()?))
    }

    fn minimal() -> Vec<u8> {
        body().into_inner()
    }

    /// 3.4/3.5 (no digest), 3.6-3.8 (digest, its version 2 as a long or 1 as hex text) and
    /// 3.9 (digest and last processed zxid) trailers all read; a trailer cut in its seal is
    /// damage.
    #[test]
    fn trailers_of_every_version() {
        let (n, t) = read(minimal()).unwrap();
        assert_eq!((n, t), (2, Trailer::default()));

        let mut w = body();
        w.long(0x99).unwrap();
        w.int(2).unwrap();
        w.long(12345).unwrap();
        w.seal().unwrap();
        let with_digest = w.into_inner();
        let (_, t) = read(with_digest.clone()).unwrap();
        assert_eq!(t.digest, Some(SnapshotDigest { zxid: 0x99, version: 2, digest: 12345 }));

        let mut w = body();
        w.long(0x99).unwrap();
        w.int(1).unwrap();
        w.string(Some("3039")).unwrap();
        w.seal().unwrap();
        let (_, t) = read(w.into_inner()).unwrap();
        assert_eq!(t.digest.map(|d| d.digest), Some(0x3039));

        let mut w = body();
        w.long(0x99).unwrap();
        w.int(2).unwrap();
        w.long(12345).unwrap();
        w.seal().unwrap();
        w.long(0x9a).unwrap();
        w.seal().unwrap();
        let (_, t) = read(w.into_inner()).unwrap();
        assert_eq!(t.last_processed_zxid, Some(0x9a));

        let cut = with_digest[..with_digest.len() - 3].to_vec();
        assert!(read(cut).is_err(), "a digest without its whole seal is damage");
    }

    #[test]
    fn names() {
        assert_eq!(zxid_from_name("snapshot.1a", "snapshot"), Some(0x1a));
        assert_eq!(zxid_from_name("snapshot.1a.gz", "snapshot"), Some(0x1a));
        assert_eq!(zxid_from_name("snapshot-1-2.bin", "snapshot"), None);
        assert_eq!(zxid_from_name("log.100000001", "log"), Some(0x1_0000_0001));
        assert_eq!(zxid_from_name("raft-log.redb", "log"), None);
        assert_eq!(Compression::of("snapshot.1a.gz"), Compression::Gzip);
        assert_eq!(Compression::of("snapshot.1a.snappy"), Compression::Snappy);
        assert_eq!(Compression::of("snapshot.1a"), Compression::Plain);
    }
}
