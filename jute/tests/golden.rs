//! Golden bytes: frames captured from a real Apache ZooKeeper 3.8 talking to real clients
//! (zkCli, kazoo, a raw old-style client) decode, and re-encode to exactly the same bytes.
//! How the captures were made, and how to make them again: `tests/fixtures/README.md`.

use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;

use bytes::BytesMut;
use jute::decode_reply;
use jute::decode_request;
use jute::ConnectRequest;
use jute::ConnectResponse;
use jute::JuteField;
use jute::OpCode;
use jute::Record;
use jute::Request;
use jute::Response;

struct Row {
    file: String,
    kind: String,
    opcode: i32,
    err: Option<i32>,
    note: String,
}

fn frames_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/frames")
}

fn manifest() -> Vec<Row> {
    let text = std::fs::read_to_string(frames_dir().join("manifest.tsv")).expect("manifest.tsv is committed");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header line").split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
    let (file, kind, opcode, err, note) = (col("file"), col("kind"), col("opcode"), col("err"), col("note"));
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Row {
                file: f[file].to_string(),
                kind: f[kind].to_string(),
                opcode: f[opcode].parse().unwrap_or_else(|_| panic!("opcode in {l}")),
                err: f.get(err).and_then(|e| e.parse().ok()),
                note: f.get(note).unwrap_or(&"").to_string(),
            }
        })
        .collect()
}

/// Decodes one frame body per its manifest row and re-encodes it.
fn reencode(row: &Row, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    match row.kind.as_str() {
        "connect_request" => ConnectRequest::decode(body).expect("ConnectRequest").encode_field(&mut out),
        "connect_response" => ConnectResponse::decode(body).expect("ConnectResponse").encode_field(&mut out),
        "request" | "ping_request" | "auth_request" | "set_watches_request" => {
            let (header, request) = decode_request(body).unwrap_or_else(|e| panic!("{}: {e}", row.file));
            assert_eq!(request.opcode().code(), row.opcode, "{}", row.file);
            request.encode(header.xid, &mut out);
        }
        "reply" | "ping_reply" | "auth_reply" | "set_watches_reply" | "notification" => {
            let op = OpCode::try_from(row.opcode).expect("known opcode");
            let (header, response) = decode_reply(body, |_| Some(op)).unwrap_or_else(|e| panic!("{}: {e}", row.file));
            if let Some(err) = row.err {
                assert_eq!(header.err, err, "{}", row.file);
            }
            header.encode_field(&mut out);
            response.encode_body(&mut out);
        }
        other => panic!("unknown kind {other} in manifest"),
    }
    out.to_vec()
}

#[test]
fn captured_frames_decode_and_reencode_byte_for_byte() {
    let rows = manifest();
    assert!(rows.len() >= 50, "expected a real capture, found {} frames", rows.len());
    for row in &rows {
        let frame = std::fs::read(frames_dir().join(&row.file)).unwrap_or_else(|e| panic!("{}: {e}", row.file));
        let len = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, frame.len() - 4, "{}: length prefix", row.file);
        let body = &frame[4..];
        assert_eq!(reencode(row, body), body, "{} ({}) re-encodes differently", row.file, row.note);
    }
}

#[test]
fn captures_cover_what_the_protocol_needs() {
    let rows = manifest();
    let requests: BTreeSet<i32> = rows.iter().filter(|r| r.kind == "request").map(|r| r.opcode).collect();
    for op in [OpCode::Create, OpCode::Create2, OpCode::GetData, OpCode::SetData, OpCode::GetChildren2, OpCode::Exists]
    {
        assert!(requests.contains(&op.code()), "no captured {op} request");
    }
    assert!(rows.iter().any(|r| r.kind == "notification"), "no notification captured");
    assert!(rows.iter().any(|r| r.kind == "ping_reply"), "no ping captured");
    assert!(rows.iter().any(|r| r.kind == "reply" && r.err.is_some_and(|e| e != 0)), "no error reply captured");

    // The handshake with and without the trailing readOnly flag.
    let mut with_flag = false;
    let mut without_flag = false;
    for row in rows.iter().filter(|r| r.kind == "connect_request") {
        let frame = std::fs::read(frames_dir().join(&row.file)).expect("frame");
        match ConnectRequest::decode(&frame[4..]).expect("ConnectRequest").read_only {
            Some(_) => with_flag = true,
            None => without_flag = true,
        }
    }
    assert!(with_flag && without_flag, "need connects with and without readOnly");

    // A multi with a failing op: the reply carries per-op results, and one is an error.
    let failed_multi = rows.iter().any(|r| {
        r.kind == "reply" && r.opcode == OpCode::Multi.code() && {
            let frame = std::fs::read(frames_dir().join(&r.file)).expect("frame");
            matches!(
                decode_reply(&frame[4..], |_| Some(OpCode::Multi)),
                Ok((_, Response::Multi(results))) if results.iter().any(|x| matches!(x, jute::MultiResult::Error(e) if *e != 0))
            )
        }
    });
    assert!(failed_multi, "no multi with a failing op captured");
    let _ = Request::Ping;
}
