//! Apache ZooKeeper's txn log files, `<dataLogDir>/version-2/log.<first zxid hex>`
//! (`FileTxnLog`, `Util.readTxnBytes`, `SerializeUtils.deserializeTxn`).
//!
//! # Format
//! ```text
//! FileHeader  magic "ZKLG", version 2, dbid
//! entries     long Adler-32 of the bytes, buffer bytes, byte 'B'   (repeated)
//!             bytes = TxnHeader, the txn's record, then (3.6+) an optional TxnDigest
//! padding     zeros: files are preallocated, so a zero length marks the end
//! ```
//! Reading follows `FileTxnIterator.next`: a zero length, an entry cut short or one without
//! its `'B'` ends the file (the server died while writing it, or this is the padding), while
//! an entry whose checksum does not match, or that does not decode, is damage and an error.
//! An empty file is skipped (ZooKeeper creates the file before it writes the header).

use std::io::BufReader;
use std::path::Path;
use std::path::PathBuf;

use bytes::Bytes;
use jute::txn;
use jute::txn::TxnDigest;
use jute::txn::TxnHeader;
use jute::Acl;
use jute::DecodeError;
use jute::DecodeErrorKind;
use jute::OpCode;

use super::stream::Reader;
use super::stream::StreamError;
use super::FileError;

/// `FileTxnLog.TXNLOG_MAGIC`: "ZKLG".
pub const LOG_MAGIC: i32 = txn::TXN_LOG_MAGIC;

/// One txn as ZooKeeper logged it, decoded by its type (`SerializeUtils.deserializeTxn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkTxn {
    CreateSession {
        timeout: i32,
    },
    /// `paths` is `None` in logs written before `CloseSessionTxn` (3.6).
    CloseSession {
        paths: Option<Vec<String>>,
    },
    /// `create` and `create2` (`opcode` tells which: only `create` adjusts the parent when the
    /// node already exists). `parent_cversion` is -1 for the old `CreateTxnV0`.
    Create {
        opcode: OpCode,
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        ephemeral: bool,
        parent_cversion: i32,
    },
    CreateTtl {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        parent_cversion: i32,
        ttl: i64,
    },
    CreateContainer {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        parent_cversion: i32,
    },
    /// `delete` and `deleteContainer`.
    Delete {
        path: String,
    },
    /// `setData` and `reconfig` (which sets `/zookeeper/config`).
    SetData {
        path: String,
        data: Option<Bytes>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    Error {
        err: i32,
    },
    Multi(Vec<ZkTxn>),
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub header: TxnHeader,
    pub txn: ZkTxn,
    /// The tree digest after this txn, as the leader computed it (3.6+).
    pub digest: Option<TxnDigest>,
    /// Where the entry starts in its file.
    pub offset: u64,
}

/// How a log file's entries ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// At the end of the file, or at the preallocated zeros.
    Clean,
    /// An entry cut short (or missing its end marker) at this byte: the server died while
    /// writing it. ZooKeeper treats it as the end of the file; so does the import.
    Torn { offset: u64 },
}

/// Whether a decode failed for lack of bytes (Java's `EOFException`).
fn ran_out(e: &DecodeError) -> bool {
    matches!(e.kind, DecodeErrorKind::Truncated { .. } | DecodeErrorKind::LengthExceedsFrame { .. })
}

fn record<T: jute::JuteField>(bytes: &[u8]) -> Result<(&[u8], T), DecodeError> {
    jute::decode_prefix::<T>(bytes)
}

/// Decodes one txn record of type `op` from the front of `bytes`; returns the bytes after it.
/// `in_multi` refuses the types a multi cannot hold (`DataTree.processTxn`, multi case).
fn decode_txn(op: OpCode, bytes: &[u8], in_multi: bool) -> Result<(&[u8], ZkTxn), String> {
    let text = |e: DecodeError| e.to_string();
    Ok(match op {
        OpCode::CreateSession if !in_multi => {
            let (rest, t) = record::<txn::CreateSessionTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::CreateSession { timeout: t.time_out })
        }
        // Logs written before CloseSessionTxn hold nothing here.
        OpCode::CloseSession if !in_multi => match record::<txn::CloseSessionTxn>(bytes) {
            Ok((rest, t)) => (rest, ZkTxn::CloseSession { paths: Some(t.paths2_delete) }),
            Err(e) if ran_out(&e) => (bytes, ZkTxn::CloseSession { paths: None }),
            Err(e) => return Err(e.to_string()),
        },
        OpCode::Create | OpCode::Create2 => {
            let (rest, t) = match record::<txn::CreateTxn>(bytes) {
                Ok(ok) => ok,
                // A CreateTxnV0 (before parentCVersion): -1 makes the replay work it out.
                Err(e) if ran_out(&e) && op == OpCode::Create && !in_multi => {
                    let (rest, t) = record::<txn::CreateTxnV0>(bytes).map_err(text)?;
                    let t = txn::CreateTxn {
                        path: t.path,
                        data: t.data,
                        acl: t.acl,
                        ephemeral: t.ephemeral,
                        parent_c_version: -1,
                    };
                    (rest, t)
                }
                Err(e) => return Err(e.to_string()),
            };
            let create = ZkTxn::Create {
                opcode: op,
                path: t.path,
                data: t.data,
                acl: t.acl,
                ephemeral: t.ephemeral,
                parent_cversion: t.parent_c_version,
            };
            (rest, create)
        }
        OpCode::CreateTtl => {
            let (rest, t) = record::<txn::CreateTtlTxn>(bytes).map_err(text)?;
            (
                rest,
                ZkTxn::CreateTtl {
                    path: t.path,
                    data: t.data,
                    acl: t.acl,
                    parent_cversion: t.parent_c_version,
                    ttl: t.ttl,
                },
            )
        }
        OpCode::CreateContainer => {
            let (rest, t) = record::<txn::CreateContainerTxn>(bytes).map_err(text)?;
            (
                rest,
                ZkTxn::CreateContainer { path: t.path, data: t.data, acl: t.acl, parent_cversion: t.parent_c_version },
            )
        }
        OpCode::Delete | OpCode::DeleteContainer => {
            let (rest, t) = record::<txn::DeleteTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::Delete { path: t.path })
        }
        OpCode::SetData => {
            let (rest, t) = record::<txn::SetDataTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::SetData { path: t.path, data: t.data, version: t.version })
        }
        OpCode::Reconfig if !in_multi => {
            let (rest, t) = record::<txn::SetDataTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::SetData { path: t.path, data: t.data, version: t.version })
        }
        OpCode::SetAcl if !in_multi => {
            let (rest, t) = record::<txn::SetAclTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::SetAcl { path: t.path, acl: t.acl, version: t.version })
        }
        OpCode::Check if in_multi => {
            let (rest, t) = record::<txn::CheckVersionTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::Check { path: t.path, version: t.version })
        }
        OpCode::Error => {
            let (rest, t) = record::<txn::ErrorTxn>(bytes).map_err(text)?;
            (rest, ZkTxn::Error { err: t.err })
        }
        OpCode::Multi if !in_multi => {
            let (rest, t) = record::<txn::MultiTxn>(bytes).map_err(text)?;
            let mut ops = Vec::with_capacity(t.txns.len());
            for sub in t.txns {
                let sub_op = OpCode::try_from(sub.txn_type)
                    .map_err(|_| format!("a multi holds a txn of unknown type {}", sub.txn_type))?;
                // Each sub-record fills its own buffer (trailing bytes are ignored, as Java does).
                let (_, sub_txn) = decode_txn(sub_op, &sub.data, true)?;
                ops.push(sub_txn);
            }
            (rest, ZkTxn::Multi(ops))
        }
        other => return Err(format!("a txn of type {other} ({}) cannot be in a log", other.code())),
    })
}

/// Decodes a whole entry's bytes: header, txn and the optional digest.
pub fn decode_entry(bytes: &[u8]) -> Result<(TxnHeader, ZkTxn, Option<TxnDigest>), String> {
    let (rest, header) = record::<TxnHeader>(bytes).map_err(|e| e.to_string())?;
    let op = OpCode::try_from(header.txn_type).map_err(|_| format!("unsupported txn type {}", header.txn_type))?;
    let (rest, txn) = decode_txn(op, rest, false)?;
    // SerializeUtils.deserializeTxn: a digest that is not there (or cut short) is no digest.
    let digest = record::<TxnDigest>(rest).ok().map(|(_, d)| d);
    Ok((header, txn, digest))
}

/// A log file being read entry by entry.
pub struct TxnLogReader {
    path: PathBuf,
    reader: Option<Reader<Box<dyn std::io::Read>>>,
    pub dbid: i64,
    end: Option<LogEnd>,
}

impl TxnLogReader {
    /// Opens a log file and checks its header. An empty file has no entries.
    pub fn open(path: &Path) -> Result<TxnLogReader, FileError> {
        let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
        let empty = file.metadata().map_err(|e| FileError::io(path, e))?.len() == 0;
        if empty {
            return Ok(TxnLogReader { path: path.to_owned(), reader: None, dbid: 0, end: Some(LogEnd::Clean) });
        }
        TxnLogReader::new(path, Box::new(BufReader::with_capacity(1 << 20, file)))
    }

    /// Reads a (non-empty) log from `input`; `path` names it in errors.
    pub fn new(path: &Path, input: Box<dyn std::io::Read>) -> Result<TxnLogReader, FileError> {
        let mut reader = Reader::new(input);
        let err = |e: StreamError| FileError::stream(path, e);
        let magic = reader.int("the file header").map_err(err)?;
        if magic != LOG_MAGIC {
            return Err(FileError::format(
                path,
                format!("not a ZooKeeper txn log: magic {magic:#010x}, expected {LOG_MAGIC:#010x} (\"ZKLG\")"),
            ));
        }
        let version = reader.int("the file header").map_err(err)?;
        if version != 2 {
            return Err(FileError::format(path, format!("unknown txn log version {version}")));
        }
        let dbid = reader.long("the file header").map_err(err)?;
        Ok(TxnLogReader { path: path.to_owned(), reader: Some(reader), dbid, end: None })
    }

    /// How the file ended, once [`TxnLogReader::next`] returned `None`.
    pub fn end(&self) -> Option<LogEnd> {
        self.end
    }

    fn stop(&mut self, end: LogEnd) -> Result<Option<LogEntry>, FileError> {
        self.end = Some(end);
        self.reader = None;
        Ok(None)
    }

    /// The next entry; `None` at the end of the file (see [`TxnLogReader::end`]).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<LogEntry>, FileError> {
        let Some(reader) = self.reader.as_mut() else { return Ok(None) };
        let offset = reader.offset();
        let crc = match reader.long("an entry's checksum") {
            Ok(c) => c,
            Err(StreamError::Eof { offset: at, .. }) if at == offset => return self.stop(LogEnd::Clean),
            Err(StreamError::Eof { .. }) => return self.stop(LogEnd::Torn { offset }),
            Err(e) => return Err(FileError::stream(&self.path, e)),
        };
        let bytes = match reader.buffer("an entry") {
            Ok(Some(b)) if !b.is_empty() => b,
            // The preallocated zeros: a zero checksum and length.
            Ok(_) if crc == 0 => return self.stop(LogEnd::Clean),
            Ok(_) | Err(StreamError::Eof { .. }) => return self.stop(LogEnd::Torn { offset }),
            // A negative length other than -1: ZooKeeper's checkLength refuses it as damage.
            Err(StreamError::Invalid { reason, .. }) => {
                return Err(FileError::format(&self.path, format!("entry at byte {offset}: {reason}")))
            }
            Err(e) => return Err(FileError::stream(&self.path, e)),
        };
        match reader.byte("an entry's end marker") {
            Ok(b'B') => {}
            Ok(_) | Err(StreamError::Eof { .. }) => return self.stop(LogEnd::Torn { offset }),
            Err(e) => return Err(FileError::stream(&self.path, e)),
        }
        let mut adler = adler2::Adler32::new();
        adler.write_slice(&bytes);
        if i64::from(adler.checksum()) != crc {
            return Err(FileError::format(
                &self.path,
                format!(
                    "entry at byte {offset} fails its checksum (stored {crc:#x}, computed {:#x}): the file is damaged",
                    adler.checksum()
                ),
            ));
        }
        let (header, txn, digest) =
            decode_entry(&bytes).map_err(|e| FileError::format(&self.path, format!("entry at byte {offset}: {e}")))?;
        Ok(Some(LogEntry { header, txn, digest, offset }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jute::Record;

    /// Bytes of a log file holding `entries`, each `(header, record bytes)`.
    pub(crate) fn log_bytes(entries: &[(TxnHeader, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&LOG_MAGIC.to_be_bytes());
        out.extend_from_slice(&2i32.to_be_bytes());
        out.extend_from_slice(&7i64.to_be_bytes());
        for (h, body) in entries {
            let mut bytes = h.to_bytes().to_vec();
            bytes.extend_from_slice(body);
            let mut adler = adler2::Adler32::new();
            adler.write_slice(&bytes);
            out.extend_from_slice(&i64::from(adler.checksum()).to_be_bytes());
            out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
            out.extend_from_slice(&bytes);
            out.push(b'B');
        }
        out
    }

    fn header(zxid: i64, op: OpCode) -> TxnHeader {
        TxnHeader { client_id: 5, cxid: 1, zxid, time: 1000, txn_type: op.code() }
    }

    fn create(path: &str) -> Vec<u8> {
        txn::CreateTxn { path: path.into(), data: None, acl: vec![], ephemeral: false, parent_c_version: 1 }
            .to_bytes()
            .to_vec()
    }

    fn read_all(bytes: &[u8]) -> (Result<Vec<LogEntry>, FileError>, Option<LogEnd>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.1");
        std::fs::write(&path, bytes).unwrap();
        let mut r = match TxnLogReader::open(&path) {
            Ok(r) => r,
            Err(e) => return (Err(e), None),
        };
        let mut out = Vec::new();
        loop {
            match r.next() {
                Ok(Some(e)) => out.push(e),
                Ok(None) => return (Ok(out), r.end()),
                Err(e) => return (Err(e), r.end()),
            }
        }
    }

    /// Entries read back; the preallocated zeros end the file cleanly.
    #[test]
    fn entries_then_padding() {
        let mut bytes =
            log_bytes(&[(header(1, OpCode::Create), create("/a")), (header(2, OpCode::Create), create("/b"))]);
        bytes.extend_from_slice(&[0; 100]);
        let (entries, end) = read_all(&bytes);
        let entries = entries.unwrap();
        assert_eq!(entries.len(), 2);
        assert!(matches!(&entries[1].txn, ZkTxn::Create { path, .. } if path == "/b"));
        assert_eq!(end, Some(LogEnd::Clean));
    }

    /// A last entry cut anywhere is a torn tail, not an error: the entries before it stay.
    #[test]
    fn a_cut_last_entry_is_a_torn_tail() {
        let bytes = log_bytes(&[(header(1, OpCode::Create), create("/a")), (header(2, OpCode::Create), create("/b"))]);
        let one = log_bytes(&[(header(1, OpCode::Create), create("/a"))]).len();
        for cut in one + 1..bytes.len() {
            let (entries, end) = read_all(&bytes[..cut]);
            assert_eq!(entries.unwrap().len(), 1, "cut at {cut}");
            assert_eq!(end, Some(LogEnd::Torn { offset: one as u64 }), "cut at {cut}");
        }
    }

    /// A flipped byte inside an entry fails its checksum: an error naming the file.
    #[test]
    fn a_flipped_byte_is_damage() {
        let mut bytes = log_bytes(&[(header(1, OpCode::Create), create("/a"))]);
        let n = bytes.len();
        bytes[n - 3] ^= 0x10;
        let (entries, _) = read_all(&bytes);
        let e = entries.unwrap_err().to_string();
        assert!(e.contains("log.1") && e.contains("checksum"), "{e}");
    }

    /// A file that is not a txn log is refused by its magic.
    #[test]
    fn wrong_magic() {
        let mut bytes = log_bytes(&[]);
        bytes[0] = b'X';
        let (entries, _) = read_all(&bytes);
        assert!(entries.unwrap_err().to_string().contains("not a ZooKeeper txn log"));
    }

    /// An old create without parentCVersion reads as -1; an old closeSession as no paths.
    #[test]
    fn old_formats() {
        let v0 = txn::CreateTxnV0 { path: "/a".into(), data: None, acl: vec![], ephemeral: true }.to_bytes().to_vec();
        let bytes = log_bytes(&[(header(1, OpCode::Create), v0), (header(2, OpCode::CloseSession), vec![])]);
        let entries = read_all(&bytes).0.unwrap();
        assert!(matches!(&entries[0].txn, ZkTxn::Create { parent_cversion: -1, ephemeral: true, .. }));
        assert_eq!(entries[1].txn, ZkTxn::CloseSession { paths: None });
    }

    /// A digest after the record is read; a multi's ops decode by their own types.
    #[test]
    fn digest_and_multi() {
        let mut body = create("/a");
        body.extend_from_slice(&TxnDigest { version: 2, tree_digest: 99 }.to_bytes());
        let multi = txn::MultiTxn {
            txns: vec![
                txn::Txn { txn_type: OpCode::Create.code(), data: create("/m").into() },
                txn::Txn {
                    txn_type: OpCode::Check.code(),
                    data: txn::CheckVersionTxn { path: "/m".into(), version: 0 }.to_bytes().freeze(),
                },
            ],
        }
        .to_bytes()
        .to_vec();
        let bytes = log_bytes(&[(header(1, OpCode::Create), body), (header(2, OpCode::Multi), multi)]);
        let entries = read_all(&bytes).0.unwrap();
        assert_eq!(entries[0].digest, Some(TxnDigest { version: 2, tree_digest: 99 }));
        assert!(matches!(&entries[1].txn, ZkTxn::Multi(ops) if ops.len() == 2));
    }
}
