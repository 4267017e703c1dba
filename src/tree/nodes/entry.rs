//! One znode's allocation ([`Entry`]): its ACL, key, Stat (stored without the fields that have
//! their usual values, see [`stored`]) and data, and the borrowed view readers get
//! ([`NodeRef`]).

use jute::Stat;
use triomphe::HeaderSlice;

use super::super::Node;
use super::super::NodeStat;
use super::super::SharedAcl;

/// Which of a node's Stat fields its entry stores, one bit each. A field left out has its
/// default: `mzxid` and `pzxid` the `czxid`, `mtime` the `ctime`, the others 0. So a node
/// created and never changed stores only `czxid` and `ctime`.
pub(super) mod stored {
    pub const MZXID: u16 = 1 << 0;
    pub const PZXID: u16 = 1 << 1;
    pub const MTIME: u16 = 1 << 2;
    pub const OWNER: u16 = 1 << 3;
    pub const VERSION: u16 = 1 << 4;
    pub const CVERSION: u16 = 1 << 5;
    pub const AVERSION: u16 = 1 << 6;
    pub const CHILDREN: u16 = 1 << 7;
    /// Not a field: the data is null (`None`), not empty.
    pub const NULL: u16 = 1 << 8;
    /// The 8-byte fields; the other field bits stand for 4 bytes.
    pub const WIDE: u16 = MZXID | PZXID | MTIME | OWNER;
    pub const NARROW: u16 = VERSION | CVERSION | AVERSION | CHILDREN;
}

/// The longest stored Stat: every field.
pub(super) const STAT_MAX: usize = 6 * 8 + 4 * 4;

/// The bytes of a Stat stored with these bits.
pub(super) fn stat_len(bits: u16) -> usize {
    16 + 8 * (bits & stored::WIDE).count_ones() as usize + 4 * (bits & stored::NARROW).count_ones() as usize
}

/// A Stat as an entry stores it: the bits of [`stored`], and the bytes: `czxid` and `ctime`,
/// then each stored field in bit order, little-endian.
pub(super) struct Encoded {
    pub(super) bits: u16,
    pub(super) len: usize,
    pub(super) bytes: [u8; STAT_MAX],
}

impl Encoded {
    pub(super) fn new(s: &NodeStat) -> Encoded {
        let mut e = Encoded { bits: 0, len: 0, bytes: [0; STAT_MAX] };
        e.put(&s.czxid.to_le_bytes());
        e.put(&s.ctime.to_le_bytes());
        for (bit, v, default) in [
            (stored::MZXID, s.mzxid, s.czxid),
            (stored::PZXID, s.pzxid, s.czxid),
            (stored::MTIME, s.mtime, s.ctime),
            (stored::OWNER, s.ephemeral_owner, 0),
        ] {
            if v != default {
                e.bits |= bit;
                e.put(&v.to_le_bytes());
            }
        }
        for (bit, v) in [
            (stored::VERSION, s.version),
            (stored::CVERSION, s.cversion),
            (stored::AVERSION, s.aversion),
            (stored::CHILDREN, s.num_children as i32),
        ] {
            if v != 0 {
                e.bits |= bit;
                e.put(&v.to_le_bytes());
            }
        }
        e
    }

    fn put(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Reads a stored Stat's fields in order.
pub(super) struct StatReader<'a> {
    bits: u16,
    bytes: &'a [u8],
}

impl StatReader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.bytes.split_at(N.min(self.bytes.len()));
        self.bytes = rest;
        head.try_into().unwrap_or([0; N])
    }

    fn wide(&mut self, bit: u16, default: i64) -> i64 {
        if self.bits & bit == 0 {
            default
        } else {
            i64::from_le_bytes(self.take())
        }
    }

    fn narrow(&mut self, bit: u16) -> i32 {
        if self.bits & bit == 0 {
            0
        } else {
            i32::from_le_bytes(self.take())
        }
    }
}

/// The Stat [`Encoded::new`] wrote with these bits.
pub(super) fn decode(bits: u16, bytes: &[u8]) -> NodeStat {
    let mut r = StatReader { bits, bytes };
    let czxid = i64::from_le_bytes(r.take());
    let ctime = i64::from_le_bytes(r.take());
    NodeStat {
        czxid,
        ctime,
        mzxid: r.wide(stored::MZXID, czxid),
        pzxid: r.wide(stored::PZXID, czxid),
        mtime: r.wide(stored::MTIME, ctime),
        ephemeral_owner: r.wide(stored::OWNER, 0),
        version: r.narrow(stored::VERSION),
        cversion: r.narrow(stored::CVERSION),
        aversion: r.narrow(stored::AVERSION),
        num_children: r.narrow(stored::CHILDREN) as u32,
    }
}

/// An entry of a chunk: a pointer (with the length beside it) to one allocation holding the
/// reference count, the ACL, and bytes laid out as [`Layout`] reads them: which Stat fields
/// are stored (the bits of [`stored`], 2 bytes), the key's length (LEB128) and the key, the
/// stored Stat, and the data.
///
/// The length travels in the pointer rather than in the allocation, and the key sits in the
/// bytes rather than in a fixed 24-byte `CompactString` (which also put keys past 24 bytes
/// in an allocation of their own): a znode with a 22-byte key and 100 bytes of data, created
/// and never changed, takes 157 bytes, inside the allocator's 160-byte class.
#[derive(Clone)]
pub(super) struct Entry(triomphe::Arc<HeaderSlice<SharedAcl, [u8]>>);

/// Where an entry's parts are in its bytes.
pub(super) struct Layout {
    pub(super) bits: u16,
    pub(super) key_start: usize,
    pub(super) stat_start: usize,
    pub(super) data_start: usize,
}

impl Layout {
    fn of(bytes: &[u8]) -> Layout {
        let bits = u16::from_le_bytes([bytes.first().copied().unwrap_or(0), bytes.get(1).copied().unwrap_or(0)]);
        let mut key_len = 0usize;
        let mut at = 2;
        for shift in (0..usize::BITS).step_by(7) {
            let Some(&b) = bytes.get(at) else { break };
            at += 1;
            key_len |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        let end = bytes.len();
        let stat_start = (at + key_len).min(end);
        Layout { bits, key_start: at.min(end), stat_start, data_start: (stat_start + stat_len(bits)).min(end) }
    }
}

/// Entries up to this many bytes are put together on the stack and copied in one go.
pub(super) const JOIN_ON_STACK: usize = 1024;

impl Entry {
    pub(super) fn new(key: &str, node: Node, data: Option<&[u8]>) -> Entry {
        Entry::build(key, node.acl, &Encoded::new(&node.stat), data)
    }

    pub(super) fn build(key: &str, acl: SharedAcl, stat: &Encoded, data: Option<&[u8]>) -> Entry {
        let bits = stat.bits | if data.is_none() { stored::NULL } else { 0 };
        let mut prefix = [0u8; 2 + 10];
        prefix[..2].copy_from_slice(&bits.to_le_bytes());
        let mut n = 2;
        let mut len = key.len();
        loop {
            let more = len >= 0x80;
            prefix[n] = (len & 0x7f) as u8 | if more { 0x80 } else { 0 };
            n += 1;
            len >>= 7;
            if !more {
                break;
            }
        }
        let parts = [&prefix[..n], key.as_bytes(), stat.as_bytes(), data.unwrap_or_default()];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total <= JOIN_ON_STACK {
            let mut buf = [0u8; JOIN_ON_STACK];
            let mut at = 0;
            for p in parts {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            Entry(triomphe::Arc::from_header_and_slice(acl, &buf[..total]))
        } else {
            Entry(triomphe::Arc::from_header_and_slice(acl, &parts.concat()))
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.0.slice
    }

    /// The first byte of the entry's bytes: reading it brings the entry's first cache line
    /// in (see `NodeMap::push_children`).
    pub(super) fn first_byte(&self) -> u8 {
        self.bytes().first().copied().unwrap_or(0)
    }

    pub(super) fn layout(&self) -> Layout {
        Layout::of(self.bytes())
    }

    pub(super) fn acl(&self) -> &SharedAcl {
        &self.0.header
    }

    /// The key's bytes, which sort as the key does.
    pub(super) fn key_bytes(&self) -> &[u8] {
        let l = self.layout();
        &self.bytes()[l.key_start..l.stat_start]
    }

    /// The key. Entries are built from `&str` keys only, so it is always UTF-8.
    pub(super) fn key(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).unwrap_or_default()
    }

    pub(super) fn stat(&self) -> NodeStat {
        self.stat_at(&self.layout())
    }

    pub(super) fn data(&self) -> Option<&[u8]> {
        self.data_at(&self.layout())
    }

    pub(super) fn stat_at(&self, l: &Layout) -> NodeStat {
        decode(l.bits, &self.bytes()[l.stat_start..l.data_start])
    }

    pub(super) fn data_at(&self, l: &Layout) -> Option<&[u8]> {
        (l.bits & stored::NULL == 0).then(|| &self.bytes()[l.data_start..])
    }

    /// The Stat, ACL and data, from one reading of the layout (every read goes through here).
    pub(super) fn view(&self) -> NodeRef<'_> {
        let l = self.layout();
        NodeRef { stat: self.stat_at(&l), acl: self.acl(), data: self.data_at(&l), entry: self }
    }

    pub(super) fn node(&self) -> Node {
        Node { acl: self.acl().clone(), stat: self.stat() }
    }

    /// Changes the node: in place when nothing else shares it and its stored Stat keeps its
    /// length, else in a new allocation with the same key and data.
    pub(super) fn modify<R>(&mut self, f: impl FnOnce(&mut Node) -> R) -> R {
        let mut node = self.node();
        let r = f(&mut node);
        let stat = Encoded::new(&node.stat);
        let l = self.layout();
        let null = l.bits & stored::NULL;
        let in_place = match triomphe::Arc::get_mut(&mut self.0) {
            Some(inner) if l.data_start - l.stat_start == stat.len => {
                inner.slice[..2].copy_from_slice(&(stat.bits | null).to_le_bytes());
                inner.slice[l.stat_start..l.data_start].copy_from_slice(stat.as_bytes());
                inner.header = node.acl;
                Ok(())
            }
            _ => Err(node.acl),
        };
        if let Err(acl) = in_place {
            let old = self.clone();
            *self = Entry::build(old.key(), acl, &stat, old.data());
        }
        r
    }

    /// Changes the node and replaces its data: a new allocation.
    pub(super) fn replace<R>(&mut self, data: Option<&[u8]>, f: impl FnOnce(&mut Node) -> R) -> R {
        let mut node = self.node();
        let r = f(&mut node);
        let old = self.clone();
        *self = Entry::build(old.key(), node.acl, &Encoded::new(&node.stat), data);
        r
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key())
            .field("acl", self.acl())
            .field("stat", &self.stat())
            .field("data", &self.data())
            .finish()
    }
}

/// A node in the map: its Stat (decoded from the entry), its ACL and its data.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    pub stat: NodeStat,
    pub acl: &'a SharedAcl,
    data: Option<&'a [u8]>,
    /// The entry the view reads, so the data can be lent out without a copy.
    entry: &'a Entry,
}

impl PartialEq for NodeRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.stat, self.acl, self.data) == (other.stat, other.acl, other.data)
    }
}

impl Eq for NodeRef<'_> {}

/// Data at least this long is lent out of the tree by [`NodeRef::data_bytes`] rather than
/// copied: a 512 KiB getData then costs a reference count, not a copy of the value (and from
/// 64 KiB on the connection writes it to the socket from there, see `client::connection`).
/// Below it a copy is as cheap as the shared handle `Bytes::from_owner` allocates, and leaves
/// the node free to be changed in place.
const LEND_AT: usize = 4096;

/// A node's data held by a clone of its entry: keeps the whole entry alive (and, while it
/// lives, makes a change to the node copy it rather than change it in place).
struct LentData {
    entry: Entry,
    start: usize,
}

impl AsRef<[u8]> for LentData {
    fn as_ref(&self) -> &[u8] {
        self.entry.bytes().get(self.start..).unwrap_or_default()
    }
}

impl<'a> NodeRef<'a> {
    /// The data (`None` when null).
    pub fn data(&self) -> Option<&'a [u8]> {
        self.data
    }

    /// The data as `Bytes` for a reply: lent out of the tree when it is large (see
    /// [`LEND_AT`]), copied when it is small.
    pub fn data_bytes(&self) -> Option<bytes::Bytes> {
        let data = self.data?;
        if data.len() < LEND_AT {
            return Some(bytes::Bytes::copy_from_slice(data));
        }
        let start = self.entry.bytes().len() - data.len();
        Some(bytes::Bytes::from_owner(LentData { entry: self.entry.clone(), start }))
    }

    /// The client-visible `Stat`.
    pub fn stat(&self) -> Stat {
        self.stat.client(self.data.map_or(0, <[u8]>::len))
    }

    /// What kind of node this is.
    pub fn kind(&self) -> super::super::NodeKind {
        self.stat.kind()
    }
}
