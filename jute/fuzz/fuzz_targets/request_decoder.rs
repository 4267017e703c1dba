//! Decodes arbitrary bytes as a request frame body; whatever decodes must re-encode to a frame
//! that decodes to the same request.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((header, request)) = jute::decode_request(data) {
        let mut buf = BytesMut::new();
        request.encode(header.xid, &mut buf);
        let (_, again) = jute::decode_request(&buf).expect("a re-encoded request decodes");
        assert_eq!(again, request);
    }
    for op in jute::OpCode::ALL {
        let _ = jute::Response::decode(*op, data);
    }
});
