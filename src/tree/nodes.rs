//! The node map: every znode by path, in a persistent ordered map whose order puts each
//! node's children next to each other, so the tree needs no child-name sets.
//!
//! A key is the path behind one character whose code point is the path's depth (`/` is 0,
//! `/a` is 1, `/a/b` is 2). Keys therefore sort by depth first and by path second, and the
//! children of `/a` are exactly the keys from `depth 2` + `/a/` up to the first key without
//! that prefix. The map holds pointers, each to one allocation holding the node's ACL, key,
//! Stat and data (see [`Entry`]), in key order, cut into chunks of up to 64 pointers kept in
//! a persistent ordered map ([`NodeMap`]): a snapshot or a multi's scratch copy shares
//! everything, and a change afterwards copies one chunk's pointers and the node it changes. A
//! node keeps only its child count. A change to a node happens in place
//! ([`NodeMap::update`]) when nothing else shares it.
//!
//! The Stat is stored without the fields that have their usual values (see [`stored`]): a
//! node created and never changed keeps 16 bytes of it instead of 64. With its key stored at
//! its own length, such a znode with 100 bytes of data and a 22-byte key fits the
//! allocator's 160-byte class (it took the 224-byte one with a whole Stat and a fixed key).
//! Readers get the Stat decoded, in a [`NodeRef`].
//!
//! The serialized form (snapshots, and snapshots sent to followers) is the one the tree had
//! with child-name sets: a map from path to node, each node with its children's names. So
//! snapshots written before this layout load, and servers of both layouts exchange them.

use std::ops::Bound;
use std::ops::Deref;
use std::sync::Arc;

use compact_str::CompactString;
use jute::Stat;
use jute::StatPersisted;
use serde::de::MapAccess;
use serde::de::SeqAccess;
use serde::de::Visitor;
use serde::ser::SerializeMap;
use serde::ser::SerializeSeq;
use serde::Deserialize;
use serde::Deserializer;
use serde::Serialize;
use serde::Serializer;
use triomphe::HeaderSlice;

use super::Node;
use super::NodeStat;
use super::SharedAcl;

/// The depth of a path: its number of components (`/` has none).
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The key prefix for a depth: a character whose code point sorts as the depth does.
/// Code points skip the surrogate range; depths past the last code point (paths of megabytes)
/// share it, which [`NodeMap::children`] tolerates by checking names for slashes.
fn depth_char(d: usize) -> char {
    let cp = if d < 0xD800 { d } else { d + 0x800 };
    u32::try_from(cp).ok().and_then(char::from_u32).unwrap_or(char::MAX)
}

fn key_of(d: usize, parts: &[&str]) -> CompactString {
    let c = depth_char(d);
    let mut k = CompactString::with_capacity(c.len_utf8() + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(c);
    for p in parts {
        k.push_str(p);
    }
    k
}

/// The map key of a path.
fn key(path: &str) -> CompactString {
    key_of(depth(path), &[path])
}

/// The path inside a key.
fn path_of(key: &str) -> &str {
    let mut chars = key.chars();
    chars.next();
    chars.as_str()
}

/// The common start of the keys of `parent`'s descendants `levels` below it.
fn descendant_prefix(parent: &str, levels: usize) -> CompactString {
    let slash = if parent == "/" { "" } else { "/" };
    key_of(depth(parent) + levels, &[parent, slash])
}

/// Which of a node's Stat fields its entry stores, one bit each. A field left out has its
/// default: `mzxid` and `pzxid` the `czxid`, `mtime` the `ctime`, the others 0. So a node
/// created and never changed stores only `czxid` and `ctime`.
mod stored {
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
const STAT_MAX: usize = 6 * 8 + 4 * 4;

/// The bytes of a Stat stored with these bits.
fn stat_len(bits: u16) -> usize {
    16 + 8 * (bits & stored::WIDE).count_ones() as usize + 4 * (bits & stored::NARROW).count_ones() as usize
}

/// A Stat as an entry stores it: the bits of [`stored`], and the bytes: `czxid` and `ctime`,
/// then each stored field in bit order, little-endian.
struct Encoded {
    bits: u16,
    len: usize,
    bytes: [u8; STAT_MAX],
}

impl Encoded {
    fn new(s: &NodeStat) -> Encoded {
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
struct StatReader<'a> {
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
fn decode(bits: u16, bytes: &[u8]) -> NodeStat {
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
struct Entry(triomphe::Arc<HeaderSlice<SharedAcl, [u8]>>);

/// Where an entry's parts are in its bytes.
struct Layout {
    bits: u16,
    key_start: usize,
    stat_start: usize,
    data_start: usize,
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
const JOIN_ON_STACK: usize = 1024;

impl Entry {
    fn new(key: &str, node: Node, data: Option<&[u8]>) -> Entry {
        Entry::build(key, node.acl, &Encoded::new(&node.stat), data)
    }

    fn build(key: &str, acl: SharedAcl, stat: &Encoded, data: Option<&[u8]>) -> Entry {
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

    fn bytes(&self) -> &[u8] {
        &self.0.slice
    }

    fn layout(&self) -> Layout {
        Layout::of(self.bytes())
    }

    fn acl(&self) -> &SharedAcl {
        &self.0.header
    }

    /// The key's bytes, which sort as the key does.
    fn key_bytes(&self) -> &[u8] {
        let l = self.layout();
        &self.bytes()[l.key_start..l.stat_start]
    }

    /// The key. Entries are built from `&str` keys only, so it is always UTF-8.
    fn key(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).unwrap_or_default()
    }

    fn stat(&self) -> NodeStat {
        self.stat_at(&self.layout())
    }

    fn data(&self) -> Option<&[u8]> {
        self.data_at(&self.layout())
    }

    fn stat_at(&self, l: &Layout) -> NodeStat {
        decode(l.bits, &self.bytes()[l.stat_start..l.data_start])
    }

    fn data_at(&self, l: &Layout) -> Option<&[u8]> {
        (l.bits & stored::NULL == 0).then(|| &self.bytes()[l.data_start..])
    }

    /// The Stat, ACL and data, from one reading of the layout (every read goes through here).
    fn view(&self) -> NodeRef<'_> {
        let l = self.layout();
        NodeRef { stat: self.stat_at(&l), acl: self.acl(), data: self.data_at(&l) }
    }

    fn node(&self) -> Node {
        Node { acl: self.acl().clone(), stat: self.stat() }
    }

    /// Changes the node: in place when nothing else shares it and its stored Stat keeps its
    /// length, else in a new allocation with the same key and data.
    fn modify<R>(&mut self, f: impl FnOnce(&mut Node) -> R) -> R {
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
    fn replace<R>(&mut self, data: Option<&[u8]>, f: impl FnOnce(&mut Node) -> R) -> R {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRef<'a> {
    pub stat: NodeStat,
    pub acl: &'a SharedAcl,
    data: Option<&'a [u8]>,
}

impl<'a> NodeRef<'a> {
    /// The data (`None` when null).
    pub fn data(&self) -> Option<&'a [u8]> {
        self.data
    }

    /// The client-visible `Stat`.
    pub fn stat(&self) -> Stat {
        self.stat.client(self.data.map_or(0, <[u8]>::len))
    }

    /// What kind of node this is.
    pub fn kind(&self) -> super::NodeKind {
        self.stat.kind()
    }
}

/// Entries a chunk holds at most.
const CHUNK: usize = 64;
/// A chunk left with fewer entries than this joins a neighbour when the two fit in one.
const CHUNK_LOW: usize = CHUNK / 4;

/// Slots a chunk's array grows by. Sixteen-byte entries make every step an allocator size
/// class (128, 256, ... 1024 bytes), so a chunk wastes less than a step; an array with room for
/// all [`CHUNK`] from the start cost the memory benchmark's load 8 bytes a znode more.
const CHUNK_STEP: usize = 8;

/// The array size for `len` entries and room to grow to the next step.
fn chunk_room(len: usize) -> usize {
    len.div_ceil(CHUNK_STEP).max(1) * CHUNK_STEP
}

/// Inserts into a chunk's array, growing it by one step (not doubling) when it is full.
fn insert_at(v: &mut Vec<Entry>, at: usize, entry: Entry) {
    if v.len() == v.capacity() {
        v.reserve_exact(CHUNK_STEP);
    }
    v.insert(at, entry);
}

/// Neighbouring entries in key order, at most [`CHUNK`], in an array that grows by
/// [`CHUNK_STEP`].
#[derive(Debug)]
struct Chunk(Vec<Entry>);

impl Chunk {
    fn with(entries: impl IntoIterator<Item = Entry>) -> Chunk {
        let entries = entries.into_iter();
        let mut v = Vec::with_capacity(chunk_room(entries.size_hint().0));
        for e in entries {
            let at = v.len();
            insert_at(&mut v, at, e);
        }
        Chunk(v)
    }

    /// A binary search with a branch on each compare. Each compare dereferences an entry in
    /// its own allocation, most often a cache miss. The standard library's search is
    /// branchless: each step's address waits for the previous compare, so the misses come one
    /// after another. With a branch the CPU guesses the way and starts the next step's load
    /// before the compare resolves, so the misses overlap when it guesses right
    /// (`cargo bench --bench tree_lookup`: get 519-529 -> 396-401 ns on 16,000 znodes).
    fn search(&self, key: &str) -> Result<usize, usize> {
        let v = &self.0;
        let key = key.as_bytes();
        let (mut lo, mut hi) = (0, v.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match v[mid].key_bytes().cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
}

impl Clone for Chunk {
    /// A copy keeps room to grow to the next step, so a chunk copied after a snapshot seldom
    /// reallocates on its next insert.
    fn clone(&self) -> Chunk {
        Chunk::with(self.0.iter().cloned())
    }
}

/// Moves a chunk's entries to the end of `to`, copying pointers only if a snapshot shares
/// the chunk.
fn append(to: &mut Vec<Entry>, chunk: Arc<Chunk>) {
    let room = chunk_room(to.len() + chunk.0.len());
    to.reserve_exact(room - to.len());
    match Arc::try_unwrap(chunk) {
        Ok(c) => to.extend(c.0),
        Err(shared) => to.extend(shared.0.iter().cloned()),
    }
}

/// A node taken out of the map.
pub struct Removed {
    entry: Entry,
    node: Node,
}

impl Removed {
    fn new(entry: Entry) -> Removed {
        Removed { node: entry.node(), entry }
    }

    pub fn view(&self) -> NodeRef<'_> {
        self.entry.view()
    }
}

impl Deref for Removed {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

/// Every znode by path: the entries in key order, cut into chunks of up to [`CHUNK`], each
/// chunk in a persistent ordered map under a lower bound of its keys.
///
/// A chunk holds the keys from its own map key up to the next chunk's map key; the first
/// chunk's map key is the empty string, so every key has exactly one chunk it belongs in.
/// A full chunk that gets a key past its last one leaves that key to a new chunk, so keys
/// created in order at the end of a chunk (a snapshot being loaded) fill chunks; any other
/// insert into a full chunk cuts it where the key goes, within its middle third. The map's
/// own nodes are a few per thousand znodes, and a chunk's array grows a step at a time, so a
/// znode costs the set its 16-byte pointer plus about 4 bytes of spare room, `Arc` and map
/// nodes: 20 bytes a znode over its entry after the memory benchmark's load (`examples/tree_memory`),
/// against about 56 in a persistent set of the entries themselves (half-full 64-slot nodes
/// that also carry 65 child pointers each).
#[derive(Debug, Clone, Default)]
pub struct NodeMap {
    chunks: imbl::OrdMap<CompactString, Arc<Chunk>>,
    len: usize,
}

impl NodeMap {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry under `key`.
    fn entry(&self, key: &str) -> Option<&Entry> {
        let (_, chunk) = self.chunks.get_prev(key)?;
        chunk.search(key).ok().map(|i| &chunk.0[i])
    }

    pub fn get(&self, path: &str) -> Option<NodeRef<'_>> {
        self.entry(key(path).as_str()).map(Entry::view)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.entry(key(path).as_str()).is_some()
    }

    /// Changes a node in place, copying it (and its chunk) first if a snapshot or scratch copy
    /// still shares it. `None` if there is no such node.
    pub fn update<R>(&mut self, path: &str, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        match self.update_checked(path, |_, _| Ok::<(), std::convert::Infallible>(()), |(), node| f(node))? {
            Ok(r) => Some(r),
            Err(never) => match never {},
        }
    }

    /// [`NodeMap::update`] with a check first: `check` sees the node (and the rest of the
    /// map) and either refuses (nothing is copied or changed) or hands `change` what it
    /// worked out.
    pub fn update_checked<C, R, E>(
        &mut self,
        path: &str,
        check: impl FnOnce(NodeRef<'_>, &NodeMap) -> Result<C, E>,
        change: impl FnOnce(C, &mut Node) -> R,
    ) -> Option<Result<R, E>> {
        self.change_checked(path, check, |c, entry| entry.modify(|node| change(c, node)))
    }

    /// Checks a node and, if the check passes, changes it and replaces its data: one lookup
    /// (the hottest write). Unlike [`NodeMap::update_checked`], `check` sees only the node.
    /// A refused check copies nothing but the persistent map's path to the chunk, and only
    /// if a snapshot or scratch copy shares it.
    pub fn set_data_checked<C, R, E>(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        check: impl FnOnce(NodeRef<'_>) -> Result<C, E>,
        change: impl FnOnce(C, &mut Node) -> R,
    ) -> Option<Result<R, E>> {
        let key = key(path);
        let (_, chunk) = self.chunks.get_prev_mut(key.as_str())?;
        let i = chunk.search(&key).ok()?;
        let checked = match check(chunk.0[i].view()) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let entry = Arc::make_mut(chunk).0.get_mut(i)?;
        Some(Ok(entry.replace(data, |node| change(checked, node))))
    }

    /// Finds the entry, checks it, and changes it if the check passed: one lookup to read,
    /// one to write (which copies the chunk if a snapshot or scratch copy shares it).
    fn change_checked<C, R, E>(
        &mut self,
        path: &str,
        check: impl FnOnce(NodeRef<'_>, &NodeMap) -> Result<C, E>,
        change: impl FnOnce(C, &mut Entry) -> R,
    ) -> Option<Result<R, E>> {
        let key = key(path);
        let (_, chunk) = self.chunks.get_prev(key.as_str())?;
        let i = chunk.search(&key).ok()?;
        let checked = match check(chunk.0[i].view(), self) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let (_, chunk) = self.chunks.get_prev_mut(key.as_str())?;
        let entry = Arc::make_mut(chunk).0.get_mut(i)?;
        debug_assert_eq!(entry.key(), key.as_str(), "nothing moved between the check and the change");
        Some(Ok(change(checked, entry)))
    }

    /// Inserts a node (replacing one at the same path) without touching its parent's child
    /// count (the caller does).
    pub fn insert(&mut self, path: &str, node: Node, data: Option<&[u8]>) {
        let entry = Entry::new(&key(path), node, data);
        let Some((_, chunk)) = self.chunks.get_prev_mut(entry.key()) else {
            self.chunks.insert(CompactString::default(), Arc::new(Chunk::with([entry])));
            self.len += 1;
            return;
        };
        let chunk = &mut Arc::make_mut(chunk).0;
        let at = match chunk.binary_search_by(|e| e.key_bytes().cmp(entry.key_bytes())) {
            Ok(i) => {
                chunk[i] = entry;
                return;
            }
            Err(at) => at,
        };
        self.len += 1;
        if chunk.len() < CHUNK {
            insert_at(chunk, at, entry);
            return;
        }
        if at == chunk.len() {
            return self.insert_past_full(entry);
        }
        // The key goes inside a full chunk. If the next chunk has room, it takes this one's last
        // entry, so chunks fill up before any is cut.
        let next_has_room = self.next_chunk(entry.key()).is_some_and(|(_, c)| c.0.len() < CHUNK);
        let Some((_, chunk)) = self.chunks.get_prev_mut(entry.key()) else { return };
        let chunk = &mut Arc::make_mut(chunk).0;
        if next_has_room {
            // Popped first, so the array stays at its size.
            let last = chunk.pop();
            insert_at(chunk, at, entry);
            if let Some(last) = last {
                self.insert_past_full(last);
            }
            return;
        }
        // Cut where the key goes, so a run of keys created in order inside the map
        // (sequential children of a parent that is not the last) fills the lower half; but
        // no closer to an end than a third, so scattered keys leave no small chunks.
        let cut = at.clamp(CHUNK / 3, CHUNK - CHUNK / 3);
        let mut upper = Chunk::with(chunk.drain(cut..));
        // The lower half moves to an array of its size: the allocator keeps a block that
        // shrinks by less than half where it is, so `shrink_to` would free nothing.
        *chunk = Chunk::with(chunk.drain(..)).0;
        if at <= cut {
            insert_at(chunk, at, entry);
        } else {
            insert_at(&mut upper.0, at - cut, entry);
        }
        // A new chunk is never empty.
        if let Some(first) = upper.0.first() {
            self.chunks.insert(first.key().into(), Arc::new(upper));
        }
    }

    /// The chunk after the one `key` belongs in.
    fn next_chunk(&self, key: &str) -> Option<(&CompactString, &Arc<Chunk>)> {
        self.chunks.range::<_, str>((Bound::Excluded(key), Bound::Unbounded)).next()
    }

    /// Inserts a key that sorts past the end of its full chunk: at the front of the next chunk
    /// if that has room (keys created in descending order then fill it), else into a new
    /// chunk of its own (keys created in ascending order then fill that one).
    fn insert_past_full(&mut self, entry: Entry) {
        let next = self.next_chunk(entry.key()).filter(|(_, c)| c.0.len() < CHUNK).map(|(k, _)| k.clone());
        let chunk = match next.and_then(|k| self.chunks.remove(&k)) {
            Some(next) => {
                let mut chunk = Arc::unwrap_or_clone(next);
                insert_at(&mut chunk.0, 0, entry);
                chunk
            }
            None => Chunk::with([entry]),
        };
        // Keyed by its new first key, which sorts past the full chunk's last.
        if let Some(first) = chunk.0.first() {
            self.chunks.insert(first.key().into(), Arc::new(chunk));
        }
    }

    pub fn remove(&mut self, path: &str) -> Option<Removed> {
        let key = key(path);
        let (chunk_key, chunk) = self.chunks.get_prev_mut(key.as_str())?;
        let i = chunk.search(&key).ok()?;
        let chunk_key = chunk_key.clone();
        let chunk = &mut Arc::make_mut(chunk).0;
        let removed = chunk.remove(i);
        let left = chunk.len();
        self.len -= 1;
        if left < CHUNK_LOW {
            self.join(&chunk_key, left);
        }
        Some(Removed::new(removed))
    }

    /// Joins the chunk under `chunk_key`, left with `len` entries, to a neighbour it fits in
    /// with, or drops it if it is empty and the last one.
    fn join(&mut self, chunk_key: &CompactString, len: usize) {
        let next = self
            .chunks
            .range::<_, str>((Bound::Excluded(chunk_key.as_str()), Bound::Unbounded))
            .next()
            .map(|(k, c)| (k.clone(), c.0.len()));
        if let Some((next_key, _)) = next.filter(|(_, n)| len + n <= CHUNK) {
            if let Some(next) = self.chunks.remove(&next_key) {
                if let Some(chunk) = self.chunks.get_mut(chunk_key) {
                    append(&mut Arc::make_mut(chunk).0, next);
                }
            }
            return;
        }
        let prev = self
            .chunks
            .range::<_, str>((Bound::Unbounded, Bound::Excluded(chunk_key.as_str())))
            .next_back()
            .map(|(k, c)| (k.clone(), c.0.len()));
        if let Some((prev_key, _)) = prev.filter(|(_, p)| len + p <= CHUNK) {
            if let Some(chunk) = self.chunks.remove(chunk_key) {
                if let Some(prev) = self.chunks.get_mut(&prev_key) {
                    append(&mut Arc::make_mut(prev).0, chunk);
                }
            }
        } else if len == 0 {
            // An empty chunk fits with any neighbour, so it has none: the map is empty.
            self.chunks = imbl::OrdMap::new();
        }
    }

    /// Every entry from `from` on, in key order.
    fn entries_from<'a>(&'a self, from: &str) -> impl Iterator<Item = &'a Entry> + 'a {
        let (first, rest): (&[Entry], _) = match self.chunks.get_prev(from) {
            Some((k, c)) => {
                (&c.0[c.0.partition_point(|e| e.key_bytes() < from.as_bytes())..], Bound::Excluded(k.as_str()))
            }
            None => (&[], Bound::Unbounded),
        };
        first.iter().chain(self.chunks.range::<_, str>((rest, Bound::Unbounded)).flat_map(|(_, c)| c.0.iter()))
    }

    /// Every node with its path, by depth and then by path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, NodeRef<'_>)> {
        self.chunks.values().flat_map(|c| c.0.iter()).map(|e| (path_of(e.key()), e.view()))
    }

    /// The keys of `parent`'s descendants `levels` below it, and the length of their common
    /// prefix.
    fn level(&self, parent: &str, levels: usize) -> (usize, impl Iterator<Item = &str>) {
        let prefix = descendant_prefix(parent, levels);
        let len = prefix.len();
        let iter = self.entries_from(&prefix).map(Entry::key).take_while(move |k| k.starts_with(prefix.as_str()));
        (len, iter)
    }

    /// The names of `parent`'s children, in byte order.
    pub fn children<'a>(&'a self, parent: &str) -> impl Iterator<Item = &'a str> + 'a {
        let (len, iter) = self.level(parent, 1);
        iter.map(move |k| &k[len..]).filter(|name| !name.contains('/'))
    }

    /// The number of `parent`'s descendants, one level of the map at a time.
    pub fn descendants(&self, parent: &str) -> usize {
        let depth = depth(parent);
        let mut total = 0;
        for levels in 1.. {
            let (_, iter) = self.level(parent, levels);
            let n = iter.count();
            total += n;
            // The last depth character stands for every depth from there down.
            if n == 0 || depth_char(depth + levels) == char::MAX {
                break;
            }
        }
        total
    }
}

impl PartialEq for NodeMap {
    /// Same paths with equal nodes.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// A node as serialized: the fields of [`Node`] with its children's names in place of the
/// count (`None` for a leaf), as the tree stored them before this layout.
#[derive(Serialize)]
struct NodeOut<'a> {
    #[serde(with = "serde_bytes")]
    data: Option<&'a [u8]>,
    acl: &'a SharedAcl,
    stat: StatPersisted,
    children: Option<ChildNames<'a>>,
}

struct ChildNames<'a> {
    map: &'a NodeMap,
    parent: &'a str,
    count: u32,
}

impl Serialize for ChildNames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.count as usize))?;
        let mut written = 0u32;
        for name in self.map.children(self.parent) {
            seq.serialize_element(name)?;
            written += 1;
        }
        if written != self.count {
            return Err(serde::ser::Error::custom(format!(
                "{} has {written} children in the map but counts {}",
                self.parent, self.count
            )));
        }
        seq.end()
    }
}

impl Serialize for NodeMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (path, node) in self.iter() {
            let children = (node.stat.num_children > 0).then_some(ChildNames {
                map: self,
                parent: path,
                count: node.stat.num_children,
            });
            map.serialize_entry(
                path,
                &NodeOut { data: node.data(), acl: node.acl, stat: node.stat.persisted(), children },
            )?;
        }
        map.end()
    }
}

/// A node as deserialized: the children's names are only counted.
#[derive(Deserialize)]
struct NodeIn {
    #[serde(with = "serde_bytes")]
    data: Option<Box<[u8]>>,
    #[serde(deserialize_with = "super::acl::deserialize_shared")]
    acl: SharedAcl,
    stat: StatPersisted,
    #[serde(deserialize_with = "count_names")]
    children: u32,
}

/// The number of names in a serialized child-name set.
struct NameCount(u32);

impl<'de> Deserialize<'de> for NameCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NameCount, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = NameCount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a set of child names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NameCount, A::Error> {
                let mut n = 0u32;
                while seq.next_element::<CompactString>()?.is_some() {
                    n = n.saturating_add(1);
                }
                Ok(NameCount(n))
            }
        }
        d.deserialize_seq(Count)
    }
}

/// A node's children as serialized (`None` for a leaf), counted.
fn count_names<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<NameCount>::deserialize(d)?.map_or(0, |c| c.0))
}

impl<'de> Deserialize<'de> for NodeMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NodeMap, D::Error> {
        struct Nodes;
        impl<'de> Visitor<'de> for Nodes {
            type Value = NodeMap;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map from path to znode")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<NodeMap, A::Error> {
                let mut nodes = NodeMap::default();
                while let Some((path, n)) = access.next_entry::<CompactString, NodeIn>()? {
                    let node = Node { acl: n.acl, stat: NodeStat::from_persisted(&n.stat, n.children) };
                    nodes.insert(&path, node, n.data.as_deref());
                }
                Ok(nodes)
            }
        }
        d.deserialize_map(Nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_depth_then_path() {
        let mut keys: Vec<CompactString> =
            ["/a/b", "/", "/b", "/a", "/a/c", "/ab/x", "/a/b/c"].iter().map(|p| key(p)).collect();
        keys.sort();
        let paths: Vec<&str> = keys.iter().map(|k| path_of(k)).collect();
        assert_eq!(paths, ["/", "/a", "/b", "/a/b", "/a/c", "/ab/x", "/a/b/c"]);
    }

    /// A node created and never changed, with a 22-byte key (the memory benchmark's) and 100
    /// bytes of data, fits the allocator's 160-byte class; one that stored its whole Stat,
    /// its key in a `CompactString` and its length in the allocation took the 224-byte class
    /// (about 60 MiB more per million znodes).
    #[test]
    fn an_unchanged_entry_with_100_bytes_fits_160() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        let key = key("/warden-mem/b999/n999");
        assert_eq!(key.len(), 22);
        let e = Entry::new(&key, Node::new(Arc::default(), 1 << 32, 1_700_000_000_000, 0), Some(&[7; 100]));
        assert_eq!(e.bytes().len(), 2 + 1 + 22 + 16 + 100);
        let count_and_acl = std::mem::size_of::<usize>() + std::mem::size_of::<SharedAcl>();
        assert!(count_and_acl + e.bytes().len() <= 160);
    }

    fn stat_strategy() -> impl proptest::strategy::Strategy<Value = NodeStat> {
        use proptest::prelude::*;
        // Each field either its default or anything, so every combination of bits shows up.
        let wide = || prop_oneof![Just(None), any::<i64>().prop_map(Some)];
        let narrow = || prop_oneof![Just(0), any::<i32>()];
        (any::<i64>(), any::<i64>(), [wide(), wide(), wide(), wide()], [narrow(), narrow(), narrow(), narrow()])
            .prop_map(|(czxid, ctime, w, n)| NodeStat {
                czxid,
                ctime,
                mzxid: w[0].unwrap_or(czxid),
                pzxid: w[1].unwrap_or(czxid),
                mtime: w[2].unwrap_or(ctime),
                ephemeral_owner: w[3].unwrap_or(0),
                version: n[0],
                cversion: n[1],
                aversion: n[2],
                num_children: n[3] as u32,
            })
    }

    proptest::proptest! {
        /// Every Stat reads back as it was stored, with and without data, and keeps doing so
        /// through in-place changes and changes that change its stored length.
        #[test]
        fn stats_read_back(
            a in stat_strategy(),
            b in stat_strategy(),
            path in "/[a-z0-9/]{0,300}",
            data in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1500)),
        ) {
            let enc = Encoded::new(&a);
            proptest::prop_assert_eq!(enc.len, stat_len(enc.bits));
            let k = key(&path);
            let mut e = Entry::new(&k, Node { acl: Arc::default(), stat: a }, data.as_deref());
            proptest::prop_assert_eq!(e.key(), k.as_str());
            proptest::prop_assert_eq!(e.stat(), a);
            proptest::prop_assert_eq!(e.data(), data.as_deref());
            let shared = e.clone();
            e.modify(|n| n.stat = b);
            proptest::prop_assert_eq!((e.stat(), e.data()), (b, data.as_deref()));
            proptest::prop_assert_eq!(shared.stat(), a);
            e.modify(|n| n.stat = a);
            proptest::prop_assert_eq!((e.stat(), e.data()), (a, data.as_deref()));
            e.replace(None, |n| n.stat = b);
            proptest::prop_assert_eq!((e.stat(), e.data()), (b, None));
            proptest::prop_assert_eq!((shared.stat(), shared.data()), (a, data.as_deref()));
            proptest::prop_assert_eq!((e.key(), shared.key()), (k.as_str(), k.as_str()));
        }
    }

    #[test]
    fn a_refused_set_data_changes_nothing() {
        let mut map = NodeMap::default();
        map.insert("/n", Node::new(Arc::default(), 1, 0, 0), Some(b"old"));
        let snapshot = map.clone();
        let refused: Option<Result<(), &str>> = map.set_data_checked(
            "/n",
            Some(b"new"),
            |n| Err(if n.data() == Some(b"old") { "no" } else { "?" }),
            |(), _| (),
        );
        assert_eq!(refused, Some(Err("no")));
        let missing: Option<Result<(), &str>> = map.set_data_checked("/m", Some(b"new"), |_| Ok(()), |(), _| ());
        assert_eq!(missing, None);
        for m in [&map, &snapshot] {
            assert_eq!(m.get("/n").map(|n| (n.data(), n.stat.version)), Some((Some(&b"old"[..]), 0)));
            assert_eq!(m.len(), 1);
        }
    }

    #[test]
    fn data_null_empty_and_replaced() {
        let mut map = NodeMap::default();
        map.insert("/n", Node::new(Arc::default(), 1, 0, 0), None);
        map.insert("/e", Node::new(Arc::default(), 1, 0, 0), Some(b""));
        assert_eq!(map.get("/n").map(|n| n.data()), Some(None));
        assert_eq!(map.get("/e").map(|n| n.data()), Some(Some(&b""[..])));
        let snapshot = map.clone();
        let r: Option<Result<(), ()>> = map.set_data_checked("/n", Some(b"x"), |_| Ok(()), |(), n| n.stat.version = 1);
        assert_eq!(r, Some(Ok(())));
        map.update("/e", |n| n.stat.version = 2);
        assert_eq!(map.get("/n").map(|n| (n.data(), n.stat.version)), Some((Some(&b"x"[..]), 1)));
        assert_eq!(map.get("/e").map(|n| (n.data(), n.stat.version)), Some((Some(&b""[..]), 2)));
        assert_eq!(map.get("/n").map(|n| n.stat().data_length), Some(1));
        // The snapshot taken before still sees the old nodes.
        assert_eq!(snapshot.get("/n").map(|n| (n.data(), n.stat.version)), Some((None, 0)));
        assert_eq!(snapshot.get("/e").map(|n| (n.data(), n.stat.version)), Some((Some(&b""[..]), 0)));
    }

    fn node(zxid: i64) -> Node {
        Node::new(Arc::new(super::super::acl::AclEntry::open()), zxid, 0, 0)
    }

    /// The number a test node's data holds.
    fn data_of(n: NodeRef<'_>) -> i64 {
        n.data().and_then(|d| d.try_into().ok()).map_or(-1, i64::from_be_bytes)
    }

    fn insert(map: &mut NodeMap, path: &str, zxid: i64) {
        map.insert(path, node(zxid), Some(&zxid.to_be_bytes()));
    }

    impl NodeMap {
        /// Checks the chunks against the layout's rules: keys in order within and across
        /// chunks, each key at or past its chunk's map key, the first map key empty, no chunk
        /// empty or over [`CHUNK`], and the count right.
        fn check_layout(&self) {
            let mut count = 0;
            let mut last: Option<&str> = None;
            let keys: Vec<&CompactString> = self.chunks.keys().collect();
            for (i, (chunk_key, chunk)) in self.chunks.iter().enumerate() {
                assert!(i > 0 || chunk_key.is_empty(), "first chunk keyed {chunk_key:?}");
                assert!(!chunk.0.is_empty() && chunk.0.len() <= CHUNK, "chunk of {}", chunk.0.len());
                for e in &chunk.0 {
                    assert!(e.key() >= chunk_key.as_str());
                    // Below the next chunk's key, so lookups are routed here.
                    assert!(keys.get(i + 1).is_none_or(|next| e.key() < next.as_str()), "{} past its chunk", e.key());
                    assert!(last.is_none_or(|l| l < e.key()), "{last:?} before {}", e.key());
                    last = Some(e.key());
                    count += 1;
                }
            }
            assert_eq!(count, self.len);
        }

        /// The most spare slots any chunk's array has.
        fn most_room(&self) -> usize {
            self.chunks.values().map(|c| c.0.capacity() - c.0.len()).max().unwrap_or(0)
        }

        /// Entries per chunk, on average.
        fn fill(&self) -> f64 {
            self.len as f64 / self.chunks.len().max(1) as f64
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Update(u16),
        Snapshot,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..600u16).prop_map(Op::Insert),
            3 => (0..600u16).prop_map(Op::Remove),
            2 => (0..600u16).prop_map(Op::Update),
            1 => Just(Op::Snapshot),
        ]
    }

    /// A path for a number: a few parents with many children, so chunks split and join, and
    /// some grandchildren, so there is more than one depth below a parent.
    fn path(n: u16) -> String {
        if n.is_multiple_of(7) {
            format!("/p{}/c{}/g{n}", n % 3, n % 5)
        } else {
            format!("/p{}/c{n}", n % 3)
        }
    }

    proptest::proptest! {
        /// The map against a `BTreeMap` under inserts, removes and updates, with snapshots
        /// taken along the way that must not change when the map does.
        #[test]
        fn chunks_agree_with_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
            let mut map = NodeMap::default();
            let mut model = std::collections::BTreeMap::new();
            let mut snapshots = Vec::new();
            for (zxid, op) in ops.into_iter().enumerate() {
                let zxid = zxid as i64 + 1;
                match op {
                    Op::Insert(n) => {
                        insert(&mut map, &path(n), zxid);
                        model.insert(key(&path(n)), (zxid, zxid));
                    }
                    Op::Remove(n) => {
                        let removed = map.remove(&path(n)).map(|r| (r.stat.czxid, data_of(r.view())));
                        proptest::prop_assert_eq!(removed, model.remove(&key(&path(n))));
                    }
                    // Odd numbers change the node in place, even ones replace its data too.
                    Op::Update(n) => {
                        let change = |_, node: &mut Node| node.stat.czxid = zxid;
                        let updated: Option<Result<(), ()>> = if n % 2 == 1 {
                            map.update_checked(&path(n), |_, _| Ok(()), change)
                        } else {
                            map.set_data_checked(&path(n), Some(&zxid.to_be_bytes()), |_| Ok(()), change)
                        };
                        let modelled = model.get_mut(&key(&path(n))).map(|(c, d)| {
                            *c = zxid;
                            if n % 2 == 0 {
                                *d = zxid;
                            }
                            Ok(())
                        });
                        proptest::prop_assert_eq!(updated, modelled);
                    }
                    Op::Snapshot => snapshots.push((map.clone(), model.clone())),
                }
                map.check_layout();
            }
            for (snap, snap_model) in std::iter::once((map, model)).chain(snapshots) {
                snap.check_layout();
                for (path, _) in snap.iter() {
                    proptest::prop_assert!(snap.contains(path), "{} not found", path);
                }
                let got: Vec<(String, (i64, i64))> =
                    snap.iter().map(|(p, n)| (p.to_owned(), (n.stat.czxid, data_of(n)))).collect();
                let want: Vec<(String, (i64, i64))> =
                    snap_model.iter().map(|(k, z)| (path_of(k).to_owned(), *z)).collect();
                proptest::prop_assert_eq!(got, want);
                for parent in ["/p0", "/p1", "/p2"] {
                    let names: Vec<&str> = snap.children(parent).collect();
                    let want: Vec<&str> = snap_model
                        .keys()
                        .map(|k| path_of(k))
                        .filter_map(|p| p.strip_prefix(parent)?.strip_prefix('/'))
                        .filter(|name| !name.contains('/'))
                        .collect();
                    let below = snap_model.keys().filter(|k| path_of(k).starts_with(&format!("{parent}/"))).count();
                    // `descendants` walks level by level and, as in the tree, a level with no
                    // nodes has none below it; the model's grandchildren may lack parents.
                    if !want.is_empty() || below == 0 {
                        proptest::prop_assert_eq!(snap.descendants(parent), below);
                    }
                    proptest::prop_assert_eq!(names, want);
                }
            }
        }
    }

    /// Keys created in order fill their chunks; keys created out of order leave them at
    /// least half full.
    #[test]
    fn chunks_fill() {
        let mut in_order = NodeMap::default();
        for i in 0..10_000 {
            insert(&mut in_order, &format!("/q/n{i:010}"), i);
        }
        in_order.check_layout();
        assert!(in_order.fill() > CHUNK as f64 * 0.95, "in order: {}", in_order.fill());
        let mut scattered = NodeMap::default();
        for i in 0..10_000i64 {
            insert(&mut scattered, &format!("/q/n{}", (i * 7919) % 10_000), i);
        }
        scattered.check_layout();
        assert!(scattered.fill() > CHUNK as f64 * 0.5, "scattered: {}", scattered.fill());
        // However they were cut, arrays grown only by inserts waste less than a step.
        assert!(in_order.most_room() < CHUNK_STEP && scattered.most_room() < CHUNK_STEP);
        for i in 0..10_000i64 {
            assert!(scattered.remove(&format!("/q/n{i}")).is_some());
            if i % 1000 == 0 {
                scattered.check_layout();
            }
        }
        assert!(scattered.is_empty() && scattered.chunks.is_empty());
        // Descending, into an empty map and after a full chunk (as after loading a snapshot).
        let mut descending = NodeMap::default();
        for i in (0..10_000).rev() {
            insert(&mut descending, &format!("/q/n{i:010}"), i);
        }
        descending.check_layout();
        assert!(descending.fill() > CHUNK as f64 * 0.45, "descending: {}", descending.fill());
        assert!(descending.most_room() < CHUNK_STEP, "descending: {} spare", descending.most_room());
        let mut after_full = NodeMap::default();
        for i in 0..CHUNK as i64 {
            insert(&mut after_full, &format!("/q/n{i:010}"), i);
        }
        for i in (CHUNK as i64..10_000).rev() {
            insert(&mut after_full, &format!("/q/n{i:010}"), i);
        }
        after_full.check_layout();
        assert!(after_full.fill() > CHUNK as f64 * 0.45, "descending after a full chunk: {}", after_full.fill());
    }

    #[test]
    fn depth_chars_keep_their_order_past_the_surrogates() {
        let around = [0, 1, 127, 128, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0x10_0000];
        for w in around.windows(2) {
            assert!(depth_char(w[0]) < depth_char(w[1]), "{} vs {}", w[0], w[1]);
        }
    }
}
