//! Arbitrary bytes as an Apache ZooKeeper txn log, read and replayed onto a tree as an import
//! does: an error or a tree, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = warden::zkdata::fuzzing::log(data);
});
