//! [`Names`]: a jute `vector<ustring>` held as its encoded bytes, for the lists of child names
//! a `getChildren` reply carries. A server builds one by appending names straight into one
//! buffer ([`NamesBuilder`]), so a listing of 100,000 children costs one growing buffer
//! instead of 100,000 strings and a vector of them, and encoding it is one copy. Decoding
//! (a client's side) checks each name as a `Vec<String>` field would and keeps the bytes.

use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;

use crate::error::IResult;
use crate::record::JuteField;

/// A `vector<ustring>` of names, kept encoded: each name's 4-byte length and its UTF-8 bytes,
/// one after another (the vector's count is kept beside them). Null (`-1`) reads as empty, as
/// a `Vec<String>` field does.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Names {
    count: usize,
    body: Bytes,
}

/// Appends names to a [`Names`] being built.
#[derive(Debug, Default)]
pub struct NamesBuilder {
    count: usize,
    body: BytesMut,
}

impl NamesBuilder {
    /// A builder with room for `bytes` of encoded names.
    pub fn with_capacity(bytes: usize) -> NamesBuilder {
        NamesBuilder { count: 0, body: BytesMut::with_capacity(bytes) }
    }

    /// Appends one name.
    ///
    /// # Panics
    /// If the name is longer than `i32::MAX` bytes, which no frame can carry.
    pub fn push(&mut self, name: &str) {
        self.push_bytes(name.as_bytes());
    }

    /// Appends one name given as bytes, which must be UTF-8: a server copying names out of
    /// keys it built from `&str`s skips checking them again. A name that is not UTF-8 reads
    /// back as empty.
    ///
    /// # Panics
    /// If the name is longer than `i32::MAX` bytes.
    pub fn push_bytes(&mut self, name: &[u8]) {
        let len = i32::try_from(name.len()).expect("a name shorter than 2 GiB");
        self.body.put_i32(len);
        self.body.put_slice(name);
        self.count += 1;
    }

    /// The names appended so far.
    pub fn finish(self) -> Names {
        Names { count: self.count, body: self.body.freeze() }
    }
}

impl Names {
    /// How many names.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The names in order.
    pub fn iter(&self) -> NamesIter<'_> {
        NamesIter { rest: &self.body }
    }

    /// The names as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

/// The names of a [`Names`], in order.
#[derive(Debug, Clone)]
pub struct NamesIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NamesIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (len, rest) = self.rest.split_first_chunk::<4>()?;
        let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
        let (name, rest) = rest.split_at_checked(len)?;
        self.rest = rest;
        // Built from `&str`s (or bytes the builder's caller vouched for), or checked on decode.
        Some(std::str::from_utf8(name).unwrap_or_default())
    }
}

impl<'a> IntoIterator for &'a Names {
    type Item = &'a str;
    type IntoIter = NamesIter<'a>;

    fn into_iter(self) -> NamesIter<'a> {
        self.iter()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Names {
        let mut b = NamesBuilder::default();
        for name in iter {
            b.push(name.as_ref());
        }
        b.finish()
    }
}

impl From<Vec<String>> for Names {
    fn from(v: Vec<String>) -> Names {
        v.iter().collect()
    }
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl JuteField for Names {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        // As a `Vec<String>` field reads it (null is empty, a null name is an error, invalid
        // UTF-8 is replaced), then re-encoded: a client's side, where this is no hot path.
        let (rest, names) = Vec::<String>::decode_field(input)?;
        Ok((rest, Names::from(names)))
    }

    fn encode_field(&self, buf: &mut BytesMut) {
        crate::primitives::put_length(buf, Some(self.count));
        buf.put_slice(&self.body);
    }

    fn field_len(&self) -> usize {
        4 + self.body.len()
    }

    const MIN_LEN: usize = 4;
}

#[cfg(feature = "serde")]
impl serde::Serialize for Names {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
        Vec::<String>::deserialize(d).map(Names::from)
    }
}

#[cfg(any(test, feature = "proptest"))]
impl crate::record::strategy::FieldStrategy for Names {
    fn strategy() -> proptest::strategy::BoxedStrategy<Self> {
        use proptest::strategy::Strategy;
        <Vec<String> as crate::record::strategy::FieldStrategy>::strategy().prop_map(Names::from).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JuteField;

    #[test]
    fn encodes_as_a_vector_of_strings() {
        let v = vec!["a".to_owned(), String::new(), "zoo/keeper ü".to_owned()];
        let names = Names::from(v.clone());
        assert_eq!(names.len(), 3);
        assert_eq!(names.to_vec(), v);
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        names.encode_field(&mut a);
        v.encode_field(&mut b);
        assert_eq!(a, b);
        assert_eq!(names.field_len(), v.field_len());
        let (rest, back) = Names::decode_field(&a).expect("decodes");
        assert!(rest.is_empty());
        assert_eq!(back, names);
    }

    #[test]
    fn null_reads_as_empty_and_bad_input_fails() {
        let (_, n) = Names::decode_field(&[0xff, 0xff, 0xff, 0xff]).expect("null vector");
        assert!(n.is_empty());
        assert_eq!(n.iter().count(), 0);
        // A count of 2 with one name only.
        assert!(Names::decode_field(&[0, 0, 0, 2, 0, 0, 0, 1, b'x']).is_err());
        // A null name.
        assert!(Names::decode_field(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
