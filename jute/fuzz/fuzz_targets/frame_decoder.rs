//! Feeds arbitrary bytes, in arbitrary chunks, through the server and client codecs: they must
//! return items or errors, never panic, and never grow a buffer past the frame limit.
#![no_main]

use bytes::BytesMut;
use jute::ClientCodec;
use jute::ServerCodec;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

const MAX: usize = 4096;

fn drain<D: Decoder>(codec: &mut D, data: &[u8], chunk: usize) {
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(buf.capacity() <= 4 * (MAX + 4) + 2 * data.len(), "buffer grew past the frame limit");
    }
}

fuzz_target!(|data: &[u8]| {
    let chunk = data.first().map_or(1, |b| usize::from(*b % 17) + 1);
    drain(&mut ServerCodec::new(MAX), data, chunk);
    drain(&mut ClientCodec::new(MAX), data, chunk);
});
