//! The `Record` trait and the `jute_record!` macro that generates both directions of a record.
//!
//! A jute record is its fields concatenated in declaration order, with no tags. Each record is
//! declared once, as a field list; the macro generates the struct, its nom decoder, its
//! `BufMut` encoder, its exact encoded length and (with the `proptest` feature or in tests) an
//! `Arbitrary` strategy, so decode and encode cannot drift apart. Field types map to jute types
//! through [`JuteField`]:
//!
//! | Rust type        | jute type                         | null (`-1`) on decode |
//! |------------------|-----------------------------------|-----------------------|
//! | `i32` / `i64`    | `int` / `long`                    | —                     |
//! | `bool`           | `boolean`                         | —                     |
//! | `String`         | `ustring`                         | an error              |
//! | `Option<String>` | `ustring`                         | `None`                |
//! | `Bytes`          | `buffer`                          | read as empty         |
//! | `Option<Bytes>`  | `buffer`                          | `None`                |
//! | `Vec<T>`         | `vector<T>`                       | read as empty         |
//! | `Option<Vec<T>>` | `vector<T>`                       | `None`                |
//! | a record         | nested record                     | —                     |
//!
//! Fields whose null is meaningful in ZooKeeper (znode data, ACL lists, reconfig strings) use
//! `Option`, so a null round-trips; a null buffer or vector elsewhere is read as empty, and a
//! null string where ZooKeeper dereferences it is an error (ZooKeeper answers it with
//! `MarshallingError`). A vector count below -1 is an empty vector, as in ZooKeeper.

use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;

use crate::error::finish;
use crate::error::DecodeError;
use crate::error::DecodeErrorKind;
use crate::error::IResult;
use crate::primitives;

/// A value that can be one field of a jute record.
pub trait JuteField: Sized {
    /// Parses the field from the front of `input`.
    fn decode_field(input: &[u8]) -> IResult<'_, Self>;
    /// Appends the field's encoding.
    fn encode_field(&self, buf: &mut BytesMut);
    /// The exact number of bytes [`JuteField::encode_field`] writes.
    fn field_len(&self) -> usize;
    /// The fewest bytes any value of this type encodes to (bounds vector pre-allocation).
    const MIN_LEN: usize;
}

/// A whole jute record: decodes from and encodes to a byte slice.
pub trait Record: JuteField {
    /// The class name in `zookeeper.jute`.
    const NAME: &'static str;

    /// Decodes a record that must fill `input` exactly.
    fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        let (rest, value) = finish(Self::decode_field(input))?;
        if !rest.is_empty() {
            return Err(DecodeError::new(DecodeErrorKind::TrailingBytes(rest.len())).at(Self::NAME, ""));
        }
        Ok(value)
    }

    /// Encodes the record into a fresh buffer.
    fn to_bytes(&self) -> BytesMut {
        let mut buf = BytesMut::with_capacity(self.field_len());
        self.encode_field(&mut buf);
        buf
    }
}

/// Decodes one `T` from the front of `input` and returns the bytes after it: for streams of
/// records with optional trailers (ZooKeeper's txn log entries), where [`Record::decode`]'s
/// "fills the input exactly" does not hold.
pub fn decode_prefix<T: JuteField>(input: &[u8]) -> Result<(&[u8], T), DecodeError> {
    finish(T::decode_field(input))
}

impl JuteField for i32 {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        primitives::int(input)
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        buf.put_i32(*self);
    }
    fn field_len(&self) -> usize {
        4
    }
    const MIN_LEN: usize = 4;
}

impl JuteField for i64 {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        primitives::long(input)
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        buf.put_i64(*self);
    }
    fn field_len(&self) -> usize {
        8
    }
    const MIN_LEN: usize = 8;
}

impl JuteField for bool {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        primitives::boolean(input)
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_boolean(buf, *self);
    }
    fn field_len(&self) -> usize {
        1
    }
    const MIN_LEN: usize = 1;
}

impl JuteField for Option<String> {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        primitives::ustring(input)
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_ustring(buf, self.as_deref());
    }
    fn field_len(&self) -> usize {
        4 + self.as_ref().map_or(0, String::len)
    }
    const MIN_LEN: usize = 4;
}

impl JuteField for String {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        // ZooKeeper's server fails on a null where it expects a string (a NullPointerException
        // answered as MarshallingError); fields that may be null are `Option<String>`.
        match primitives::ustring(input)? {
            (rest, Some(s)) => Ok((rest, s)),
            (_, None) => crate::error::fail(DecodeErrorKind::Invalid("null string")),
        }
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_ustring(buf, Some(self));
    }
    fn field_len(&self) -> usize {
        4 + self.len()
    }
    const MIN_LEN: usize = 4;
}

impl JuteField for Option<Bytes> {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        primitives::buffer_bytes(input)
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_buffer(buf, self.as_deref());
    }
    fn field_len(&self) -> usize {
        4 + self.as_ref().map_or(0, Bytes::len)
    }
    const MIN_LEN: usize = 4;
}

impl JuteField for Bytes {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        let (rest, b) = primitives::buffer_bytes(input)?;
        Ok((rest, b.unwrap_or_default()))
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_buffer(buf, Some(self));
    }
    fn field_len(&self) -> usize {
        4 + self.len()
    }
    const MIN_LEN: usize = 4;
}

impl<T: JuteField> JuteField for Vec<T> {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        let (mut rest, count) = primitives::vector_length(input, T::MIN_LEN.max(1))?;
        let Some(count) = count else {
            return Ok((rest, Vec::new()));
        };
        // `length` proved count * MIN_LEN <= rest.len(), so this allocation is bounded by the
        // frame, and the loop consumes at least one byte per element.
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let (r, item) = T::decode_field(rest)?;
            rest = r;
            out.push(item);
        }
        Ok((rest, out))
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        primitives::put_length(buf, Some(self.len()));
        for item in self {
            item.encode_field(buf);
        }
    }
    fn field_len(&self) -> usize {
        4 + self.iter().map(JuteField::field_len).sum::<usize>()
    }
    const MIN_LEN: usize = 4;
}

/// A `vector<T>` whose null (`-1`) is kept distinct from empty (ACL lists: ZooKeeper answers a
/// null ACL with `InvalidACL`).
impl<T: JuteField> JuteField for Option<Vec<T>> {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        if input.len() >= 4 && input[..4] == [0xff, 0xff, 0xff, 0xff] {
            return Ok((&input[4..], None));
        }
        let (rest, v) = Vec::<T>::decode_field(input)?;
        Ok((rest, Some(v)))
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        match self {
            Some(v) => v.encode_field(buf),
            None => primitives::put_length(buf, None),
        }
    }
    fn field_len(&self) -> usize {
        self.as_ref().map_or(4, JuteField::field_len)
    }
    const MIN_LEN: usize = 4;
}

/// The optional trailing `boolean` of `ConnectRequest`/`ConnectResponse`: present iff bytes
/// remain in the frame (ZooKeeper's `ProtocolManager`). Only meaningful as a record's last field.
impl JuteField for Option<bool> {
    fn decode_field(input: &[u8]) -> IResult<'_, Self> {
        if input.is_empty() {
            return Ok((input, None));
        }
        let (rest, b) = primitives::boolean(input)?;
        Ok((rest, Some(b)))
    }
    fn encode_field(&self, buf: &mut BytesMut) {
        if let Some(b) = self {
            primitives::put_boolean(buf, *b);
        }
    }
    fn field_len(&self) -> usize {
        usize::from(self.is_some())
    }
    const MIN_LEN: usize = 0;
}

/// Proptest strategies for field types (generated records compose them).
#[cfg(any(test, feature = "proptest"))]
pub mod strategy {
    use bytes::Bytes;
    use proptest::prelude::*;

    /// A strategy for a field type.
    pub trait FieldStrategy: Sized + std::fmt::Debug {
        /// Any value of the type, small enough to keep tests fast.
        fn strategy() -> BoxedStrategy<Self>;
    }

    macro_rules! via_any {
        ($($t:ty),*) => {$(
            impl FieldStrategy for $t {
                fn strategy() -> BoxedStrategy<Self> { any::<$t>().boxed() }
            }
        )*};
    }
    via_any!(i32, i64, bool, Option<bool>);

    impl FieldStrategy for String {
        fn strategy() -> BoxedStrategy<Self> {
            ".{0,24}".boxed()
        }
    }
    impl FieldStrategy for Option<String> {
        fn strategy() -> BoxedStrategy<Self> {
            proptest::option::of(String::strategy()).boxed()
        }
    }
    impl FieldStrategy for Bytes {
        fn strategy() -> BoxedStrategy<Self> {
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from).boxed()
        }
    }
    impl FieldStrategy for Option<Bytes> {
        fn strategy() -> BoxedStrategy<Self> {
            proptest::option::of(Bytes::strategy()).boxed()
        }
    }
    impl<T: FieldStrategy + 'static> FieldStrategy for Option<Vec<T>> {
        fn strategy() -> BoxedStrategy<Self> {
            proptest::option::of(Vec::<T>::strategy()).boxed()
        }
    }
    impl<T: FieldStrategy + 'static> FieldStrategy for Vec<T> {
        fn strategy() -> BoxedStrategy<Self> {
            proptest::collection::vec(T::strategy(), 0..4).boxed()
        }
    }
}

/// Declares jute records: the struct plus decode, encode, length and test strategies, all from
/// one field list in `zookeeper.jute` order.
#[macro_export]
#[doc(hidden)]
macro_rules! jute_record {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident ($jname:literal) {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty ),+ $(,)?
        }
    )+) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "serde", derive(::serde::Serialize, ::serde::Deserialize))]
        pub struct $name {
            $( $(#[$fmeta])* #[doc = concat!("jute field `", stringify!($field), "`.")] pub $field: $ty, )+
        }

        impl $crate::record::JuteField for $name {
            fn decode_field(input: &[u8]) -> $crate::error::IResult<'_, Self> {
                $(
                    let (input, $field) = <$ty as $crate::record::JuteField>::decode_field(input)
                        .map_err($crate::error::in_field($jname, stringify!($field)))?;
                )+
                Ok((input, $name { $($field),+ }))
            }
            fn encode_field(&self, buf: &mut $crate::__bytes::BytesMut) {
                $( <$ty as $crate::record::JuteField>::encode_field(&self.$field, buf); )+
            }
            fn field_len(&self) -> usize {
                0 $( + <$ty as $crate::record::JuteField>::field_len(&self.$field) )+
            }
            const MIN_LEN: usize = 0 $( + <$ty as $crate::record::JuteField>::MIN_LEN )+;
        }

        impl $crate::record::Record for $name {
            const NAME: &'static str = $jname;
        }

        #[cfg(any(test, feature = "proptest"))]
        impl $crate::record::strategy::FieldStrategy for $name {
            fn strategy() -> $crate::__proptest::strategy::BoxedStrategy<Self> {
                use $crate::__proptest::strategy::Strategy;
                (
                    $( <$ty as $crate::record::strategy::FieldStrategy>::strategy(), )+
                )
                    .prop_map(|($($field,)+)| $name { $($field),+ })
                    .boxed()
            }
        }

        #[cfg(any(test, feature = "proptest"))]
        impl $crate::__proptest::arbitrary::Arbitrary for $name {
            type Parameters = ();
            type Strategy = $crate::__proptest::strategy::BoxedStrategy<Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                <$name as $crate::record::strategy::FieldStrategy>::strategy()
            }
        }
    )+};
}
