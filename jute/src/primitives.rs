//! The jute primitive types: nom parsers over a complete frame and `BufMut` writers.
//!
//! jute (ZooKeeper's `BinaryInputArchive`/`BinaryOutputArchive`) encodes `int` and `long` as
//! big-endian 4 and 8 bytes, `boolean` as one byte, and `buffer`, `ustring` and `vector<T>` as
//! an `int` length followed by the contents, where `-1` means null. This module knows no record.
//! Every length is checked against the bytes left in the frame before anything is allocated:
//! a hostile length is an error, never an allocation.

use bytes::BufMut;
use bytes::Bytes;
use nom::bytes::complete::take;
use nom::number::complete::be_i32;
use nom::number::complete::be_i64;
use nom::number::complete::be_u8;
use nom::Parser;

use crate::error::fail;
use crate::error::DecodeErrorKind;
use crate::error::IResult;

fn need(input: &[u8], needed: usize) -> Result<(), nom::Err<crate::DecodeError>> {
    if input.len() < needed {
        fail(DecodeErrorKind::Truncated { needed, available: input.len() })
    } else {
        Ok(())
    }
}

/// jute `int`: 4 bytes, big-endian.
pub fn int(input: &[u8]) -> IResult<'_, i32> {
    need(input, 4)?;
    be_i32.parse(input)
}

/// jute `long`: 8 bytes, big-endian.
pub fn long(input: &[u8]) -> IResult<'_, i64> {
    need(input, 8)?;
    be_i64.parse(input)
}

/// jute `boolean`: one byte, 0 or 1. ZooKeeper's reader accepts any non-zero byte as true;
/// we do the same so that no real client is refused, and re-encode it as 1.
pub fn boolean(input: &[u8]) -> IResult<'_, bool> {
    need(input, 1)?;
    let (rest, b) = be_u8.parse(input)?;
    Ok((rest, b != 0))
}

/// A length prefix: `None` for the null marker `-1`, otherwise a length that fits in the
/// bytes left (each element at least `min_elem` bytes long).
pub fn length(input: &[u8], min_elem: usize) -> IResult<'_, Option<usize>> {
    let (rest, len) = int(input)?;
    if len == -1 {
        return Ok((rest, None));
    }
    if len < 0 {
        return fail(DecodeErrorKind::NegativeLength(len));
    }
    let len = len as usize;
    if len.saturating_mul(min_elem) > rest.len() {
        return fail(DecodeErrorKind::LengthExceedsFrame { length: len, available: rest.len() });
    }
    Ok((rest, Some(len)))
}

/// jute `buffer`: `None` for null.
pub fn buffer(input: &[u8]) -> IResult<'_, Option<&[u8]>> {
    let (rest, len) = length(input, 1)?;
    match len {
        None => Ok((rest, None)),
        Some(len) => {
            let (rest, data) = take(len).parse(rest)?;
            Ok((rest, Some(data)))
        }
    }
}

/// jute `buffer` copied into [`Bytes`]; `None` for null.
pub fn buffer_bytes(input: &[u8]) -> IResult<'_, Option<Bytes>> {
    let (rest, data) = buffer(input)?;
    Ok((rest, data.map(Bytes::copy_from_slice)))
}

/// jute `ustring`: UTF-8; `None` for null. Invalid UTF-8 is decoded with replacement
/// characters, as Java's `new String(bytes, UTF_8)` in ZooKeeper's `BinaryInputArchive` does.
pub fn ustring(input: &[u8]) -> IResult<'_, Option<String>> {
    let (rest, data) = buffer(input)?;
    // Valid UTF-8 (nearly every string) is checked by `from_utf8`, which is several times
    // faster than the lossy decoder's chunk walk (0.3% of a set-heavy server's CPU).
    Ok((
        rest,
        data.map(|d| std::str::from_utf8(d).map_or_else(|_| String::from_utf8_lossy(d).into_owned(), str::to_owned)),
    ))
}

/// A `vector` count: `None` for null (`-1`); any other negative count is an empty vector, as
/// in ZooKeeper's `BinaryInputArchive.startVector` (its loop runs while the count is positive).
pub fn vector_length(input: &[u8], min_elem: usize) -> IResult<'_, Option<usize>> {
    let (rest, len) = int(input)?;
    if len < -1 {
        return Ok((rest, Some(0)));
    }
    length(input, min_elem)
}

/// Writes a jute `int`.
pub fn put_int(buf: &mut impl BufMut, v: i32) {
    buf.put_i32(v);
}

/// Writes a jute `long`.
pub fn put_long(buf: &mut impl BufMut, v: i64) {
    buf.put_i64(v);
}

/// Writes a jute `boolean`.
pub fn put_boolean(buf: &mut impl BufMut, v: bool) {
    buf.put_u8(u8::from(v));
}

/// Writes a length prefix, `-1` for null.
///
/// # Panics
/// Never for data that fits in a frame: jute lengths are `int`, and frames are far smaller.
pub fn put_length(buf: &mut impl BufMut, len: Option<usize>) {
    match len {
        None => buf.put_i32(-1),
        Some(len) => buf.put_i32(i32::try_from(len).expect("jute lengths fit in an int")),
    }
}

/// Writes a jute `buffer` (`None` as null).
pub fn put_buffer(buf: &mut impl BufMut, data: Option<&[u8]>) {
    put_length(buf, data.map(<[u8]>::len));
    if let Some(data) = data {
        buf.put_slice(data);
    }
}

/// Writes a jute `ustring` (`None` as null).
pub fn put_ustring(buf: &mut impl BufMut, s: Option<&str>) {
    put_buffer(buf, s.map(str::as_bytes));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DecodeError;

    #[test]
    fn ustring_decodes_invalid_utf8_with_replacement_characters() {
        let valid = [0, 0, 0, 3, b'/', 0xc3, 0xa9];
        assert_eq!(ustring(&valid).map(|(_, s)| s).ok(), Some(Some("/\u{e9}".to_owned())));
        let invalid = [0, 0, 0, 3, b'/', 0xff, b'a'];
        assert_eq!(ustring(&invalid).map(|(_, s)| s).ok(), Some(Some("/\u{fffd}a".to_owned())));
    }

    #[test]
    fn hostile_lengths_are_errors_not_allocations() {
        // A buffer claiming 2 GiB in a 6-byte frame.
        let frame = [0x7f, 0xff, 0xff, 0xff, 1, 2];
        let err = buffer(&frame).unwrap_err();
        assert!(matches!(
            err,
            nom::Err::Failure(DecodeError {
                kind: DecodeErrorKind::LengthExceedsFrame { length: 0x7fff_ffff, available: 2 },
                ..
            })
        ));
        let frame = [0xff, 0xff, 0xff, 0xfe];
        assert!(buffer(&frame).is_err());
    }

    #[test]
    fn null_and_empty_differ() {
        assert_eq!(buffer(&[0xff, 0xff, 0xff, 0xff]).unwrap().1, None);
        assert_eq!(buffer(&[0, 0, 0, 0]).unwrap().1, Some(&[][..]));
        let mut out = Vec::new();
        put_buffer(&mut out, None);
        put_ustring(&mut out, Some(""));
        assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    }

    #[test]
    fn truncated_int_says_how_much() {
        let err = long(&[1, 2, 3]).unwrap_err();
        assert!(matches!(
            err,
            nom::Err::Failure(DecodeError { kind: DecodeErrorKind::Truncated { needed: 8, available: 3 }, .. })
        ));
    }
}
