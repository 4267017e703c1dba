//! Map keys: a path behind one character whose code point is the path's depth, so keys sort
//! by depth first and by path second, and a node's children are adjacent.

use compact_str::CompactString;

/// The depth of a path: its number of components (`/` has none).
pub(super) fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The key prefix for a depth: a character whose code point sorts as the depth does.
/// Code points skip the surrogate range; depths past the last code point (paths of megabytes)
/// share it, which [`NodeMap::children`] tolerates by checking names for slashes.
pub(super) fn depth_char(d: usize) -> char {
    let cp = if d < 0xD800 { d } else { d + 0x800 };
    u32::try_from(cp).ok().and_then(char::from_u32).unwrap_or(char::MAX)
}

pub(super) fn key_of(d: usize, parts: &[&str]) -> CompactString {
    let c = depth_char(d);
    let mut k = CompactString::with_capacity(c.len_utf8() + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(c);
    for p in parts {
        k.push_str(p);
    }
    k
}

/// The map key of a path.
pub(super) fn key(path: &str) -> CompactString {
    key_of(depth(path), &[path])
}

/// The path inside a key.
pub(super) fn path_of(key: &str) -> &str {
    let mut chars = key.chars();
    chars.next();
    chars.as_str()
}

/// The common start of the keys of `parent`'s descendants `levels` below it.
pub(super) fn descendant_prefix(parent: &str, levels: usize) -> CompactString {
    let slash = if parent == "/" { "" } else { "/" };
    key_of(depth(parent) + levels, &[parent, slash])
}
