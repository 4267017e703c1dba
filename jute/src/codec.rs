//! tokio-util codecs for both ends of a client connection.
//!
//! Framing is a 4-byte big-endian signed length followed by that many bytes. The length is
//! checked against the configured maximum (ZooKeeper's `jute.maxbuffer`, default 1,048,575)
//! *before* any buffer grows, and a negative or oversized length is fatal for the connection,
//! as in ZooKeeper's `NIOServerCnxn.readLength` ("Len error"). On a fresh server-side
//! connection the first four bytes may instead spell a four-letter word (`ruok`, `srvr`, ...),
//! which ZooKeeper answers on the client port; [`ServerCodec`] reports those before framing.
//!
//! [`ServerCodec`] yields [`ClientMessage`]s (the handshake first, then requests) and writes
//! [`ServerMessage`]s; [`ClientCodec`] is its mirror for clients, the load tool and tests.

use std::collections::HashMap;
use std::io;

use bytes::Buf;
use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;
use tokio_util::codec::Decoder;
use tokio_util::codec::Encoder;

use crate::consts::OpCode;
use crate::error::DecodeError;
use crate::proto::ConnectRequest;
use crate::proto::ConnectResponse;
use crate::proto::ReplyHeader;
use crate::proto::RequestHeader;
use crate::record::JuteField;
use crate::record::Record;
use crate::request::decode_request;
use crate::request::MalformedRequest;
use crate::request::Request;
use crate::request::RequestError;
use crate::response::decode_reply;
use crate::response::Response;

/// ZooKeeper's default `jute.maxbuffer`: the largest frame either side accepts.
pub const DEFAULT_MAX_FRAME: usize = 0xfffff;

/// The four-letter words ZooKeeper recognises (`FourLetterCommands`), plus telnet's
/// "interrupt process" sequence that it treats as a close.
pub const FOUR_LETTER_WORDS: &[&[u8; 4]] = &[
    b"ruok",
    b"dump",
    b"conf",
    b"cons",
    b"crst",
    b"envi",
    b"srvr",
    b"srst",
    b"stat",
    b"wchc",
    b"wchp",
    b"wchs",
    b"mntr",
    b"isro",
    b"gtmk",
    b"stmk",
    b"hash",
    b"dirs",
    b"\xff\xf4\xff\xfd",
];

/// A codec failure that ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A length prefix was negative or above the maximum ("Len error" in ZooKeeper).
    #[error("frame length {length} is outside 0..={max}")]
    FrameLength {
        /// The length read.
        length: i64,
        /// The configured maximum.
        max: usize,
    },
    /// The handshake frame was not a valid `ConnectRequest`.
    #[error("bad ConnectRequest: {0}")]
    Connect(DecodeError),
    /// A request frame too short to hold a `RequestHeader`.
    #[error("bad request: {0}")]
    Request(DecodeError),
    /// A reply frame that could not be decoded (client side).
    #[error("bad reply: {0}")]
    Reply(DecodeError),
}

/// Reads one length-prefixed frame body off `src`, enforcing `max`.
fn take_frame(src: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, CodecError> {
    if src.len() < 4 {
        return Ok(None);
    }
    let length = i32::from_be_bytes([src[0], src[1], src[2], src[3]]);
    if length < 0 || length as usize > max {
        return Err(CodecError::FrameLength { length: i64::from(length), max });
    }
    let length = length as usize;
    if src.len() < 4 + length {
        // Only now, with the length proven acceptable, make room for the rest of the frame.
        src.reserve(4 + length - src.len());
        return Ok(None);
    }
    src.advance(4);
    Ok(Some(src.split_to(length)))
}

/// True if `buf` starts with a whole length-prefixed frame, or with a length prefix that
/// decoding rejects at once (negative): either way, decoding it needs no more input. A
/// connection uses this to tell whether requests it has already read are waiting.
pub fn holds_frame(buf: &[u8]) -> bool {
    match buf.first_chunk::<4>() {
        Some(prefix) => {
            let length = i32::from_be_bytes(*prefix);
            length < 0 || buf.len() - 4 >= length as usize
        }
        None => false,
    }
}

fn put_frame(dst: &mut BytesMut, body_len: usize, write: impl FnOnce(&mut BytesMut)) {
    dst.reserve(4 + body_len);
    let start = dst.len();
    dst.put_i32(0);
    write(dst);
    let len = (dst.len() - start - 4) as i32;
    dst[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// A reply frame cut where its one large field sits: the bytes before the field's data, the
/// data itself (shared, not copied), and the bytes after it. Concatenated they are exactly
/// what [`ServerCodec`] writes for the same reply, so a server can send a large value from
/// the buffer that holds it instead of copying it into its write buffer first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitFrame {
    /// The length prefix, the header and everything of the body before the data (the data's
    /// own length included).
    pub head: Bytes,
    /// The data.
    pub data: Bytes,
    /// The rest of the body.
    pub tail: Bytes,
}

/// Cuts a `getData` reply whose data holds at least `at_least` bytes (see [`SplitFrame`]);
/// `None` for any other reply, which is written whole.
pub fn split_reply(header: &ReplyHeader, response: &Response, at_least: usize) -> Option<SplitFrame> {
    let Response::GetData(r) = response else { return None };
    let data = r.data.as_ref().filter(|d| d.len() >= at_least)?;
    let body_len = response.encoded_len();
    let mut head = BytesMut::with_capacity(4 + 16 + 4);
    head.put_i32(i32::try_from(16 + body_len).ok()?);
    header.encode_field(&mut head);
    head.put_i32(i32::try_from(data.len()).ok()?);
    let mut tail = BytesMut::with_capacity(body_len - 4 - data.len());
    r.stat.encode_field(&mut tail);
    Some(SplitFrame { head: head.freeze(), data: data.clone(), tail: tail.freeze() })
}

/// What a client sent, as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// A four-letter word as the first bytes of the connection. `stmk` carries its 8-byte
    /// argument in `arg`.
    FourLetterWord {
        /// The word's bytes.
        word: [u8; 4],
        /// `stmk`'s argument.
        arg: Option<[u8; 8]>,
    },
    /// The handshake.
    Connect(ConnectRequest),
    /// A request.
    Request {
        /// The header.
        header: RequestHeader,
        /// The typed body.
        request: Request,
    },
    /// A request whose header was readable but whose body or opcode was not; ZooKeeper answers
    /// these with an error code and keeps the connection.
    Malformed(MalformedRequest),
}

/// What the server writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// The handshake answer (no `ReplyHeader`).
    Connect(ConnectResponse),
    /// A reply or notification.
    Reply {
        /// The header.
        header: ReplyHeader,
        /// The body.
        response: Response,
    },
    /// Raw bytes with no framing (four-letter-word output).
    Raw(Bytes),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    Fresh,
    Session,
}

/// The server side of a client connection.
#[derive(Debug)]
pub struct ServerCodec {
    max_frame: usize,
    state: ServerState,
    last_frame: usize,
}

impl ServerCodec {
    /// A codec for a fresh connection accepting frames of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        ServerCodec { max_frame, state: ServerState::Fresh, last_frame: 0 }
    }

    /// The length of the last request frame decoded (without its 4-byte prefix).
    pub fn last_frame_len(&self) -> usize {
        self.last_frame
    }
}

impl Default for ServerCodec {
    fn default() -> Self {
        ServerCodec::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for ServerCodec {
    type Item = ClientMessage;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ClientMessage>, CodecError> {
        match self.state {
            ServerState::Fresh => {
                if src.len() < 4 {
                    return Ok(None);
                }
                let word = [src[0], src[1], src[2], src[3]];
                if FOUR_LETTER_WORDS.contains(&&word) {
                    let arg = if &word == b"stmk" {
                        if src.len() < 12 {
                            return Ok(None);
                        }
                        let mut arg = [0u8; 8];
                        arg.copy_from_slice(&src[4..12]);
                        src.advance(12);
                        Some(arg)
                    } else {
                        src.advance(4);
                        None
                    };
                    return Ok(Some(ClientMessage::FourLetterWord { word, arg }));
                }
                let Some(frame) = take_frame(src, self.max_frame)? else {
                    return Ok(None);
                };
                // Bytes after the optional readOnly flag are ignored, as ZooKeeper ignores them.
                let (_, connect) =
                    crate::error::finish(ConnectRequest::decode_field(&frame)).map_err(CodecError::Connect)?;
                self.state = ServerState::Session;
                Ok(Some(ClientMessage::Connect(connect)))
            }
            ServerState::Session => {
                let Some(frame) = take_frame(src, self.max_frame)? else {
                    return Ok(None);
                };
                self.last_frame = frame.len();
                match decode_request(&frame) {
                    Ok((header, request)) => Ok(Some(ClientMessage::Request { header, request })),
                    Err(RequestError::Body(m)) => Ok(Some(ClientMessage::Malformed(m))),
                    Err(RequestError::Header(e)) => Err(CodecError::Request(e)),
                }
            }
        }
    }
}

impl Encoder<ServerMessage> for ServerCodec {
    type Error = CodecError;

    fn encode(&mut self, item: ServerMessage, dst: &mut BytesMut) -> Result<(), CodecError> {
        match item {
            ServerMessage::Connect(resp) => put_frame(dst, resp.field_len(), |b| resp.encode_field(b)),
            ServerMessage::Reply { header, response } => {
                put_frame(dst, 16 + response.encoded_len(), |b| {
                    header.encode_field(b);
                    response.encode_body(b);
                });
            }
            ServerMessage::Raw(bytes) => dst.extend_from_slice(&bytes),
        }
        Ok(())
    }
}

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOutgoing {
    /// The handshake.
    Connect(ConnectRequest),
    /// A request with its xid.
    Request {
        /// The request's xid.
        xid: i32,
        /// The request.
        request: Request,
    },
}

/// What a client receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerIncoming {
    /// The handshake answer.
    Connect(ConnectResponse),
    /// A reply (matched to its request's opcode by xid) or a notification (xid -1).
    Reply {
        /// The header.
        header: ReplyHeader,
        /// The body.
        response: Response,
    },
}

/// The client side of a connection: remembers each outstanding xid's opcode so replies decode
/// to the right body type.
#[derive(Debug)]
pub struct ClientCodec {
    max_frame: usize,
    connected: bool,
    pending: HashMap<i32, OpCode>,
}

impl ClientCodec {
    /// A codec for a new connection accepting frames of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        ClientCodec { max_frame, connected: false, pending: HashMap::new() }
    }
}

impl Default for ClientCodec {
    fn default() -> Self {
        ClientCodec::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for ClientCodec {
    type Item = ServerIncoming;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ServerIncoming>, CodecError> {
        let Some(frame) = take_frame(src, self.max_frame)? else {
            return Ok(None);
        };
        if !self.connected {
            let resp = ConnectResponse::decode(&frame).map_err(CodecError::Reply)?;
            self.connected = true;
            return Ok(Some(ServerIncoming::Connect(resp)));
        }
        let pending = &mut self.pending;
        let (header, response) = decode_reply(&frame, |xid| pending.remove(&xid)).map_err(CodecError::Reply)?;
        Ok(Some(ServerIncoming::Reply { header, response }))
    }
}

impl Encoder<ClientOutgoing> for ClientCodec {
    type Error = CodecError;

    fn encode(&mut self, item: ClientOutgoing, dst: &mut BytesMut) -> Result<(), CodecError> {
        match item {
            ClientOutgoing::Connect(req) => put_frame(dst, req.field_len(), |b| req.encode_field(b)),
            ClientOutgoing::Request { xid, request } => {
                self.pending.insert(xid, request.opcode());
                put_frame(dst, 64, |b| request.encode(xid, b));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_reply_concatenates_to_the_whole_frame() {
        let header = ReplyHeader { xid: 7, zxid: 0x1_0000_0002, err: 0 };
        let stat = crate::proto::Stat { czxid: 3, mzxid: 4, version: 5, data_length: 9000, ..Default::default() };
        let data = Bytes::from(vec![0xab; 9000]);
        let response =
            Response::GetData(crate::proto::GetDataResponse { data: Some(data.clone()), stat: stat.clone() });
        let mut whole = BytesMut::new();
        ServerCodec::default()
            .encode(ServerMessage::Reply { header: header.clone(), response: response.clone() }, &mut whole)
            .expect("encodes");
        let parts = split_reply(&header, &response, 4096).expect("large enough to split");
        assert_eq!(parts.data.as_ptr(), data.as_ptr(), "the data is shared, not copied");
        assert_eq!([&parts.head[..], &parts.data[..], &parts.tail[..]].concat(), whole.to_vec());
        assert!(split_reply(&header, &response, 9001).is_none());
        let small = Response::GetData(crate::proto::GetDataResponse { data: None, stat });
        assert!(split_reply(&header, &small, 0).is_none());
        assert!(split_reply(&header, &Response::Empty, 0).is_none());
    }

    #[test]
    fn oversized_frame_is_refused_before_allocating() {
        let mut codec = ServerCodec::new(1024);
        let mut src = BytesMut::from(&[0x00, 0x10, 0x00, 0x00, 1, 2, 3][..]);
        let cap_before = src.capacity();
        assert!(matches!(codec.decode(&mut src), Err(CodecError::FrameLength { length: 0x100000, max: 1024 })));
        assert_eq!(src.capacity(), cap_before);
        let mut src = BytesMut::from(&[0xff, 0xff, 0xff, 0xfe][..]);
        assert!(matches!(ServerCodec::default().decode(&mut src), Err(CodecError::FrameLength { length: -2, .. })));
    }

    #[test]
    fn holds_frame_only_when_decoding_needs_no_more_input() {
        assert!(!holds_frame(&[]));
        assert!(!holds_frame(&[0, 0, 0]));
        assert!(holds_frame(&[0, 0, 0, 0]));
        assert!(!holds_frame(&[0, 0, 0, 3, 1, 2]));
        assert!(holds_frame(&[0, 0, 0, 3, 1, 2, 3]));
        assert!(holds_frame(&[0, 0, 0, 1, 9, 0, 0]));
        assert!(holds_frame(&[0xff, 0xff, 0xff, 0xfe]));
    }

    #[test]
    fn four_letter_word_only_on_a_fresh_connection() {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&b"ruok"[..]);
        assert_eq!(codec.decode(&mut src).unwrap(), Some(ClientMessage::FourLetterWord { word: *b"ruok", arg: None }));
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&b"stmk\0\0\0\0"[..]);
        assert_eq!(codec.decode(&mut src).unwrap(), None);
        src.extend_from_slice(&[0, 0, 0, 1]);
        assert_eq!(
            codec.decode(&mut src).unwrap(),
            Some(ClientMessage::FourLetterWord { word: *b"stmk", arg: Some([0, 0, 0, 0, 0, 0, 0, 1]) })
        );
    }

    #[test]
    fn handshake_then_requests_then_malformed_bodies() {
        let mut client = ClientCodec::default();
        let mut server = ServerCodec::default();
        let mut wire = BytesMut::new();
        let connect = ConnectRequest { time_out: 30000, passwd: Bytes::from(vec![0; 16]), ..Default::default() };
        client.encode(ClientOutgoing::Connect(connect.clone()), &mut wire).unwrap();
        client
            .encode(
                ClientOutgoing::Request {
                    xid: 1,
                    request: Request::Exists(crate::proto::ExistsRequest { path: "/a".into(), watch: true }),
                },
                &mut wire,
            )
            .unwrap();
        // An unknown opcode 99 with a readable header.
        wire.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 99]);
        assert_eq!(server.decode(&mut wire).unwrap(), Some(ClientMessage::Connect(connect)));
        assert!(matches!(server.decode(&mut wire).unwrap(), Some(ClientMessage::Request { .. })));
        match server.decode(&mut wire).unwrap() {
            Some(ClientMessage::Malformed(m)) => assert_eq!(m.header.xid, 2),
            other => panic!("expected malformed, got {other:?}"),
        }
        // A frame too short for a header ends the connection.
        wire.extend_from_slice(&[0, 0, 0, 2, 0, 0]);
        assert!(matches!(server.decode(&mut wire), Err(CodecError::Request(_))));
    }
}
