//! znode path rules: validation as ZooKeeper's `PathUtils.validatePath` applies it, and
//! parent/child splitting.

/// Why a path is not acceptable (reported to clients as `BadArguments`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid path {path:?}: {reason}")]
pub struct InvalidPath {
    pub path: String,
    pub reason: &'static str,
}

/// Validates a znode path the way ZooKeeper's `PathUtils.validatePath(String)` does: absolute,
/// no empty, `.` or `..` components, no trailing slash (except the root), and none of the
/// characters ZooKeeper forbids (NUL, control characters, surrogates and specials).
pub fn validate(path: &str) -> Result<(), InvalidPath> {
    let bad = |reason| Err(InvalidPath { path: path.to_owned(), reason });
    if path.is_empty() {
        return bad("path length must be > 0");
    }
    if !path.starts_with('/') {
        return bad("path must start with / character");
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return bad("path must not end with / character");
    }
    body_error(path).map_or(Ok(()), bad)
}

/// The first rule an absolute path longer than `/` breaks in its components or characters:
/// components first, then characters, as ZooKeeper reports them. Every path is checked on
/// every write, so both passes look at bytes (a `/` byte is always the character); a
/// non-ASCII path goes through the character ranges.
fn body_error(path: &str) -> Option<&'static str> {
    for component in path.as_bytes()[1..].split(|&b| b == b'/') {
        match component {
            b"" => return Some("empty node name specified"),
            b"." | b".." => return Some("relative paths not allowed"),
            _ => {}
        }
    }
    let forbidden = |c: char| {
        c == '\u{0}'
            || ('\u{1}'..='\u{1f}').contains(&c)
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{e000}'..='\u{f8ff}').contains(&c) // surrogates (d800-dfff) cannot occur in a Rust str
            || ('\u{fff0}'..='\u{ffff}').contains(&c)
    };
    let bad_char =
        if path.is_ascii() { path.bytes().any(|b| b < 0x20 || b == 0x7f) } else { path.chars().any(forbidden) };
    bad_char.then_some("invalid character")
}

/// The parent of a non-root path (`"/a/b"` -> `"/a"`, `"/a"` -> `"/"`), or `None` for the root
/// or a path without a slash.
pub fn parent(path: &str) -> Option<&str> {
    let idx = path.rfind('/')?;
    if path.len() == 1 {
        return None;
    }
    Some(if idx == 0 { "/" } else { &path[..idx] })
}

/// True if `path` is `ancestor` or below it.
pub fn is_at_or_below(path: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || path == ancestor
        || (path.len() > ancestor.len() && path.starts_with(ancestor) && path.as_bytes()[ancestor.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The component and character rules as first written, on `str` and `char`: the
    /// reference for [`body_error`].
    fn body_error_by_chars(path: &str) -> Option<&'static str> {
        for component in path[1..].split('/') {
            match component {
                "" => return Some("empty node name specified"),
                "." | ".." => return Some("relative paths not allowed"),
                _ => {}
            }
        }
        let forbidden = |c: char| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}');
        path.chars().any(forbidden).then_some("invalid character")
    }

    proptest! {
        /// Byte-level checks accept and refuse (with the same reason) exactly what the
        /// character-level rules do.
        #[test]
        fn validation_agrees_with_the_char_rules(
            path in prop_oneof![
                "/[/a.]{0,12}",
                "/[ -~]{0,30}",
                "/[\\x00-\\x{a0}/.]{0,12}",
                "/(\\PC|[\\x00-\\x1f]|\\x{e000}|\\x{fff5}|/|\\.){0,12}",
            ],
        ) {
            prop_assert_eq!(body_error(&path), body_error_by_chars(&path));
        }
    }

    #[test]
    fn validation_matches_zookeeper() {
        for ok in ["/", "/a", "/a/b", "/a-b_c.d", "/zookeeper/quota", "/a..b"] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/..", "/a\u{0}", "/a\u{1}b", "/\u{fff5}"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parents_and_ancestors() {
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert!(is_at_or_below("/a/b", "/a"));
        assert!(!is_at_or_below("/ab", "/a"));
    }
}
