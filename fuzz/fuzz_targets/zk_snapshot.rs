//! Arbitrary bytes as an Apache ZooKeeper snapshot, read and imported into a tree as
//! `warden import` does: an error or a tree, never a panic, a hang or an allocation the
//! input does not pay for.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = warden::zkdata::fuzzing::snapshot(data);
});
