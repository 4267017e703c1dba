//! Decode errors: what was wrong, in which record and field, with which length.
//!
//! Every failure to parse a frame ends up as a [`DecodeError`]. It names the record and field
//! being read when the input ran out or held an impossible value, so a server can log one
//! precise line and close the connection (ZooKeeper's `MarshallingError` situations). The
//! decoder never panics; these values are the only way it reports trouble.

use std::fmt;

use nom::error::ErrorKind;
use nom::error::ParseError;

/// What went wrong while decoding, independent of where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The frame ended before a fixed-size value (`needed` bytes) could be read.
    Truncated {
        /// Bytes the value needs.
        needed: usize,
        /// Bytes left in the frame.
        available: usize,
    },
    /// A length prefix was negative but not the null marker `-1`.
    NegativeLength(i32),
    /// A length prefix (or vector count) promised more bytes than the frame has left.
    LengthExceedsFrame {
        /// The length read.
        length: usize,
        /// Bytes left in the frame.
        available: usize,
    },
    /// A `ustring` was not valid UTF-8.
    InvalidUtf8,
    /// A boolean byte other than 0 or 1.
    InvalidBool(u8),
    /// An integer that is not a known value of a protocol enum.
    UnknownValue {
        /// The enum.
        what: &'static str,
        /// The value read.
        value: i32,
    },
    /// The record was complete but the frame had bytes left over.
    TrailingBytes(usize),
    /// A structural rule of the protocol was broken (e.g. a multi op of a forbidden type).
    Invalid(&'static str),
}

/// A decode failure with its location: the record and field being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The jute record being decoded (`"CreateRequest"`), or `""` for a bare primitive.
    pub record: &'static str,
    /// The field being decoded (`"path"`), or `""` when the error concerns the whole record.
    pub field: &'static str,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// An error with no location yet; [`DecodeError::at`] adds it on the way up.
    pub fn new(kind: DecodeErrorKind) -> Self {
        DecodeError { record: "", field: "", kind }
    }

    /// Records where the error happened, keeping the innermost location if one is already set.
    pub fn at(mut self, record: &'static str, field: &'static str) -> Self {
        if self.record.is_empty() {
            self.record = record;
            self.field = field;
        }
        self
    }
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeErrorKind::Truncated { needed, available } => {
                write!(f, "truncated: needed {needed} bytes, {available} left")
            }
            DecodeErrorKind::NegativeLength(len) => write!(f, "invalid negative length {len}"),
            DecodeErrorKind::LengthExceedsFrame { length, available } => {
                write!(f, "length {length} exceeds the {available} bytes left in the frame")
            }
            DecodeErrorKind::InvalidUtf8 => write!(f, "string is not valid UTF-8"),
            DecodeErrorKind::InvalidBool(b) => write!(f, "invalid boolean byte {b:#04x}"),
            DecodeErrorKind::UnknownValue { what, value } => write!(f, "unknown {what} {value}"),
            DecodeErrorKind::TrailingBytes(n) => write!(f, "{n} unexpected trailing bytes"),
            DecodeErrorKind::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.record.is_empty(), self.field.is_empty()) {
            (true, _) => write!(f, "{}", self.kind),
            (false, true) => write!(f, "{}: {}", self.record, self.kind),
            (false, false) => write!(f, "{}.{}: {}", self.record, self.field, self.kind),
        }
    }
}

impl std::error::Error for DecodeError {}

impl<'a> ParseError<&'a [u8]> for DecodeError {
    fn from_error_kind(input: &'a [u8], kind: ErrorKind) -> Self {
        // The only nom failures our parsers can produce are "not enough input" ones: every
        // combinator we use over complete input fails only at the end of the frame.
        let _ = kind;
        DecodeError::new(DecodeErrorKind::Truncated { needed: 0, available: input.len() })
    }

    fn append(_input: &'a [u8], _kind: ErrorKind, other: Self) -> Self {
        other
    }
}

/// nom's result type over a byte slice with our error.
pub type IResult<'a, T> = nom::IResult<&'a [u8], T, DecodeError>;

/// Builds a nom failure from an error kind.
pub(crate) fn fail<T>(kind: DecodeErrorKind) -> Result<T, nom::Err<DecodeError>> {
    Err(nom::Err::Failure(DecodeError::new(kind)))
}

/// Turns a nom result over a complete frame into a plain result.
pub(crate) fn finish<T>(result: Result<T, nom::Err<DecodeError>>) -> Result<T, DecodeError> {
    result.map_err(|e| match e {
        nom::Err::Error(e) | nom::Err::Failure(e) => e,
        // Only streaming parsers return Incomplete; ours are all `complete`, but a frame that
        // ends early is a truncation either way.
        nom::Err::Incomplete(_) => DecodeError::new(DecodeErrorKind::Truncated { needed: 0, available: 0 }),
    })
}

/// Adds record/field context to an error travelling up through nom.
pub(crate) fn in_field(
    record: &'static str,
    field: &'static str,
) -> impl Fn(nom::Err<DecodeError>) -> nom::Err<DecodeError> {
    move |e| e.map(|inner| inner.at(record, field))
}
