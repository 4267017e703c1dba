//! jute over a byte stream, with the running Adler-32 ZooKeeper's snapshots are sealed with:
//! `BinaryInputArchive`/`BinaryOutputArchive` over a `CheckedInputStream`/`CheckedOutputStream`.
//!
//! The `jute` crate parses whole frames; a snapshot is one stream of any size, read once from
//! front to back, so this reads it field by field. A length read from the file never
//! allocates more than the file then delivers: buffers are read through `Read::take`.
//! The end of the stream is its own error ([`StreamError::Eof`]), because ZooKeeper tells
//! "the file ends here" (an older format, a torn write) apart from "the file is damaged".

use std::io::Read;
use std::io::Write;

use jute::Acl;
use jute::Id;
use jute::StatPersisted;

/// Why a field could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The stream ended inside or before the field.
    #[error("the file ends at byte {offset} in the middle of {what}")]
    Eof { offset: u64, what: &'static str },
    #[error("at byte {offset}: {reason}")]
    Invalid { offset: u64, reason: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A jute reader over `R` that keeps the Adler-32 of every byte it consumed.
pub struct Reader<R> {
    inner: R,
    adler: adler2::Adler32,
    offset: u64,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader { inner, adler: adler2::Adler32::new(), offset: 0 }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The Adler-32 of everything consumed so far (`CheckedInputStream.getChecksum`).
    pub fn checksum(&self) -> u32 {
        self.adler.checksum()
    }

    pub fn invalid(&self, reason: impl Into<String>) -> StreamError {
        StreamError::Invalid { offset: self.offset, reason: reason.into() }
    }

    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), StreamError> {
        let mut read = 0;
        while read < buf.len() {
            match self.inner.read(&mut buf[read..]) {
                Ok(0) => return Err(StreamError::Eof { offset: self.offset + read as u64, what }),
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(StreamError::Eof { offset: self.offset + read as u64, what })
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.adler.write_slice(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    pub fn int(&mut self, what: &'static str) -> Result<i32, StreamError> {
        let mut b = [0; 4];
        self.fill(&mut b, what)?;
        Ok(i32::from_be_bytes(b))
    }

    pub fn long(&mut self, what: &'static str) -> Result<i64, StreamError> {
        let mut b = [0; 8];
        self.fill(&mut b, what)?;
        Ok(i64::from_be_bytes(b))
    }

    pub fn byte(&mut self, what: &'static str) -> Result<u8, StreamError> {
        let mut b = [0; 1];
        self.fill(&mut b, what)?;
        Ok(b[0])
    }

    /// jute `buffer`: `None` for the null length `-1`.
    pub fn buffer(&mut self, what: &'static str) -> Result<Option<Vec<u8>>, StreamError> {
        let len = self.int(what)?;
        if len == -1 {
            return Ok(None);
        }
        let len = u64::try_from(len).map_err(|_| self.invalid(format!("negative length {len} of {what}")))?;
        let mut out = Vec::new();
        let got = (&mut self.inner).take(len).read_to_end(&mut out)?;
        if (got as u64) < len {
            return Err(StreamError::Eof { offset: self.offset + got as u64, what });
        }
        self.adler.write_slice(&out);
        self.offset += len;
        Ok(Some(out))
    }

    /// jute `ustring`: `None` for null. Invalid UTF-8 becomes U+FFFD, as Java's
    /// `new String(bytes, UTF_8)` in `BinaryInputArchive.readString` makes it.
    pub fn string(&mut self, what: &'static str) -> Result<Option<String>, StreamError> {
        Ok(self.buffer(what)?.map(|b| match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }))
    }

    /// A jute `ustring` that must not be null.
    pub fn path(&mut self, what: &'static str) -> Result<String, StreamError> {
        self.string(what)?.ok_or_else(|| self.invalid(format!("null {what}")))
    }

    /// A vector of `ACL` records (`None` for null).
    pub fn acl_vector(&mut self, what: &'static str) -> Result<Option<Vec<Acl>>, StreamError> {
        let count = self.int(what)?;
        if count == -1 {
            return Ok(None);
        }
        // BinaryInputArchive.startVector: any other negative count is an empty vector.
        let mut out = Vec::new();
        for _ in 0..count.max(0) {
            let perms = self.int("an ACL's perms")?;
            let scheme = self.path("an ACL's scheme")?;
            let id = self.string("an ACL's id")?;
            out.push(Acl { perms, id: Id { scheme, id } });
        }
        Ok(Some(out))
    }

    pub fn stat_persisted(&mut self) -> Result<StatPersisted, StreamError> {
        Ok(StatPersisted {
            czxid: self.long("czxid")?,
            mzxid: self.long("mzxid")?,
            ctime: self.long("ctime")?,
            mtime: self.long("mtime")?,
            version: self.int("version")?,
            cversion: self.int("cversion")?,
            aversion: self.int("aversion")?,
            ephemeral_owner: self.long("ephemeralOwner")?,
            pzxid: self.long("pzxid")?,
        })
    }

    /// Checks a seal (`SnapStream.checkSealIntegrity`): the checksum of everything before it,
    /// as a `long`, then the string `"/"`. The checksum runs on across the seal, so a later
    /// seal covers this one too.
    pub fn seal(&mut self, what: &'static str) -> Result<(), StreamError> {
        let expected = self.checksum();
        let found = self.long(what)?;
        self.string(what)?;
        if found != i64::from(expected) {
            return Err(self.invalid(format!(
                "{what}: checksum {found:#x} in the file, {expected:#x} computed (the file is damaged)"
            )));
        }
        Ok(())
    }

    /// True if the stream has no byte left (consumes nothing otherwise only for readers that
    /// can peek; here the probe byte is kept and reported).
    pub fn at_end(&mut self) -> Result<Option<u8>, StreamError> {
        let mut b = [0; 1];
        loop {
            match self.inner.read(&mut b) {
                Ok(0) => return Ok(None),
                Ok(_) => {
                    self.adler.write_slice(&b);
                    self.offset += 1;
                    return Ok(Some(b[0]));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A jute writer over `W` that keeps the Adler-32 of every byte it wrote.
pub struct Writer<W> {
    inner: W,
    adler: adler2::Adler32,
}

impl<W: Write> Writer<W> {
    pub fn new(inner: W) -> Writer<W> {
        Writer { inner, adler: adler2::Adler32::new() }
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.adler.write_slice(bytes);
        self.inner.write_all(bytes)
    }

    pub fn int(&mut self, v: i32) -> std::io::Result<()> {
        self.put(&v.to_be_bytes())
    }

    pub fn long(&mut self, v: i64) -> std::io::Result<()> {
        self.put(&v.to_be_bytes())
    }

    pub fn buffer(&mut self, v: Option<&[u8]>) -> std::io::Result<()> {
        match v {
            None => self.int(-1),
            Some(b) => {
                let len = i32::try_from(b.len())
                    .map_err(|_| std::io::Error::other(format!("a buffer of {} bytes does not fit jute", b.len())))?;
                self.int(len)?;
                self.put(b)
            }
        }
    }

    pub fn string(&mut self, v: Option<&str>) -> std::io::Result<()> {
        self.buffer(v.map(str::as_bytes))
    }

    pub fn acl_vector(&mut self, acl: &[Acl]) -> std::io::Result<()> {
        let len = i32::try_from(acl.len()).map_err(|_| std::io::Error::other("ACL list too long"))?;
        self.int(len)?;
        for a in acl {
            self.int(a.perms)?;
            self.string(Some(&a.id.scheme))?;
            self.string(a.id.id.as_deref())?;
        }
        Ok(())
    }

    pub fn stat_persisted(&mut self, s: &StatPersisted) -> std::io::Result<()> {
        self.long(s.czxid)?;
        self.long(s.mzxid)?;
        self.long(s.ctime)?;
        self.long(s.mtime)?;
        self.int(s.version)?;
        self.int(s.cversion)?;
        self.int(s.aversion)?;
        self.long(s.ephemeral_owner)?;
        self.long(s.pzxid)
    }

    /// Writes a seal (`SnapStream.sealStream`): the checksum so far, then `"/"`.
    pub fn seal(&mut self) -> std::io::Result<()> {
        let sum = self.adler.checksum();
        self.long(i64::from(sum))?;
        self.string(Some("/"))
    }

    pub fn into_inner(self) -> W {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the writer writes, the reader reads back, seals included.
    #[test]
    fn round_trip_with_seal() {
        let mut w = Writer::new(Vec::new());
        w.int(-7).unwrap();
        w.long(1 << 40).unwrap();
        w.buffer(None).unwrap();
        w.string(Some("/a/b")).unwrap();
        w.acl_vector(&[Acl { perms: 31, id: Id { scheme: "world".into(), id: Some("anyone".into()) } }]).unwrap();
        w.seal().unwrap();
        w.long(5).unwrap();
        w.seal().unwrap();
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes[..]);
        assert_eq!(r.int("a").unwrap(), -7);
        assert_eq!(r.long("b").unwrap(), 1 << 40);
        assert_eq!(r.buffer("c").unwrap(), None);
        assert_eq!(r.string("d").unwrap().as_deref(), Some("/a/b"));
        assert_eq!(r.acl_vector("e").unwrap().unwrap()[0].id.scheme, "world");
        r.seal("first seal").unwrap();
        assert_eq!(r.long("f").unwrap(), 5);
        r.seal("second seal").unwrap();
        assert!(r.at_end().unwrap().is_none());
    }

    /// A flipped byte fails the seal; a cut stream is an end of file, not a damaged one.
    #[test]
    fn damage_and_truncation_are_told_apart() {
        let mut w = Writer::new(Vec::new());
        w.string(Some("hello")).unwrap();
        w.seal().unwrap();
        let mut bytes = w.into_inner();
        bytes[5] ^= 1;
        let mut r = Reader::new(&bytes[..]);
        r.string("s").unwrap();
        assert!(matches!(r.seal("seal"), Err(StreamError::Invalid { .. })));
        let mut r = Reader::new(&bytes[..6]);
        assert!(matches!(r.string("s"), Err(StreamError::Eof { .. })));
    }

    /// A hostile length allocates nothing it cannot read.
    #[test]
    fn a_huge_length_is_an_end_of_file() {
        let bytes = [0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        let mut r = Reader::new(&bytes[..]);
        assert!(matches!(r.buffer("data"), Err(StreamError::Eof { offset: 7, .. })));
    }
}
