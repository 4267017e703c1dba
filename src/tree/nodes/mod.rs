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

use super::Node;

mod entry;
mod keys;
mod serde;
#[cfg(test)]
mod tests;

use self::entry::Entry;
pub use self::entry::NodeRef;
use self::keys::*;
pub use self::serde::DecodedBatch;
pub use self::serde::MapBuilder;

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
        self.runs_from(from).flatten()
    }

    /// Every entry from `from` on, in key order, a chunk's worth at a time.
    fn runs_from<'a>(&'a self, from: &str) -> impl Iterator<Item = &'a [Entry]> + 'a {
        let (first, rest): (&[Entry], _) = match self.chunks.get_prev(from) {
            Some((k, c)) => {
                (&c.0[c.0.partition_point(|e| e.key_bytes() < from.as_bytes())..], Bound::Excluded(k.as_str()))
            }
            None => (&[], Bound::Unbounded),
        };
        std::iter::once(first).chain(self.chunks.range::<_, str>((rest, Bound::Unbounded)).map(|(_, c)| &c.0[..]))
    }

    /// Appends the names of `parent`'s children, in byte order, to `out`: what `children`
    /// yields, for a getChildren reply. Each entry is an allocation of its own, and under a
    /// wide parent most are not in the CPU's caches: a chunk's entries are first touched all
    /// together, so that their cache misses overlap, and only then are their keys read and
    /// copied, each entry once. (getChildren of 100,000 children walked the entries twice,
    /// missing the cache on each, and made a `String` per name: 18 ms against ZooKeeper's
    /// 8.5, BENCHMARKS.md run M.)
    pub fn push_children(&self, parent: &str, out: &mut jute::NamesBuilder) {
        let start = descendant_prefix(parent, 1);
        let prefix = start.as_bytes();
        for run in self.runs_from(&start) {
            if run.is_empty() {
                continue; // the first chunk's part past the prefix may be empty
            }
            std::hint::black_box(run.iter().fold(0u8, |acc, e| acc ^ e.first_byte()));
            // Keys sort, so when a run's last key has the prefix every key before it in the
            // run does (the first is at or past the prefix): one comparison per chunk. When it
            // does not, the walk ends inside this run.
            let all = run.last().is_some_and(|e| e.key_bytes().starts_with(prefix));
            for e in run {
                let key = e.key_bytes();
                if !all && !key.starts_with(prefix) {
                    return;
                }
                // A key is UTF-8 (built from a `&str`) and the prefix ends at a '/', so the
                // name after it is too.
                let name = key.get(prefix.len()..).unwrap_or_default();
                if !name.contains(&b'/') {
                    out.push_bytes(name);
                }
            }
        }
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
