//! Properties of the whole path: a Warden tree exported as a ZooKeeper snapshot and imported
//! again is the same tree; damaged or arbitrary bytes in either format give an error, never a
//! panic.

use bytes::Bytes;
use proptest::prelude::*;

use super::export;
use super::fuzzing;
use super::import;
use crate::tree::acl::AclEntry;
use crate::tree::acl::AuthId;
use crate::tree::txn::CreateOp;
use crate::tree::txn::Txn;
use crate::tree::txn::TxnOp;
use crate::tree::DataTree;

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    Create { parent: u8, name: u8, data: Vec<u8>, flags: i32, digest_acl: bool },
    Set { parent: u8, name: u8, data: Vec<u8> },
    Delete { parent: u8, name: u8 },
    Session { id: u8 },
    Close { id: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..4, 0u8..6, proptest::collection::vec(any::<u8>(), 0..20), prop_oneof![Just(0), Just(1), Just(2), Just(3), Just(4), Just(5), Just(6)], any::<bool>())
            .prop_map(|(parent, name, data, flags, digest_acl)| Step::Create { parent, name, data, flags, digest_acl }),
        2 => (0u8..4, 0u8..6, proptest::collection::vec(any::<u8>(), 0..20)).prop_map(|(parent, name, data)| Step::Set { parent, name, data }),
        1 => (0u8..4, 0u8..6).prop_map(|(parent, name)| Step::Delete { parent, name }),
        1 => (1u8..4).prop_map(|id| Step::Session { id }),
        1 => (1u8..4).prop_map(|id| Step::Close { id }),
    ]
}

fn path(parent: u8, name: u8) -> String {
    if parent == 0 {
        format!("/p{name}")
    } else {
        format!("/p{parent}/n{name}")
    }
}

/// Applies a history to a fresh tree, as the state machine would (zxids from 1).
fn build(steps: &[Step]) -> DataTree {
    let mut t = DataTree::new();
    for p in 1..4 {
        let _ = t.apply(t.last_zxid() + 1, &txn(0, create(&format!("/p{p}"), vec![], 0, false)));
    }
    for s in steps {
        let (session, op) = match s {
            Step::Create { parent, name, data, flags, digest_acl } => {
                let session = if flags & 1 == 1 { 1 } else { 0 };
                (session, create(&path(*parent, *name), data.clone(), *flags, *digest_acl))
            }
            Step::Set { parent, name, data } => {
                (0, TxnOp::SetData { path: path(*parent, *name), data: Some(Bytes::from(data.clone())), version: -1 })
            }
            Step::Delete { parent, name } => (0, TxnOp::Delete { path: path(*parent, *name), version: -1 }),
            Step::Session { id } => (
                0,
                TxnOp::CreateSession {
                    session_id: i64::from(*id),
                    timeout_ms: 5000,
                    passwd: super::replay::password(i64::from(*id)),
                },
            ),
            Step::Close { id } => (0, TxnOp::CloseSession { session_id: i64::from(*id) }),
        };
        let _ = t.apply(t.last_zxid() + 1, &txn(session, op));
    }
    t
}

fn txn(session_id: i64, op: TxnOp) -> Txn {
    Txn { session_id, time_ms: 1_700_000_000_000, auth: Default::default(), op }
}

fn create(path: &str, data: Vec<u8>, flags: i32, digest_acl: bool) -> TxnOp {
    let acl = if digest_acl {
        vec![AclEntry { perms: 31, id: AuthId { scheme: "digest".into(), id: "u:abc=".into() } }]
    } else {
        AclEntry::open()
    };
    let ttl = if flags == 5 || flags == 6 { 60_000 } else { -1 };
    TxnOp::Create(CreateOp { path: path.into(), data: Some(Bytes::from(data)), acl, flags, ttl })
}

/// Every node (path, data, ACL, persisted Stat, children) and session (id, timeout, password,
/// ephemerals) of a tree.
fn view(t: &DataTree) -> (Vec<String>, Vec<String>) {
    let nodes = t
        .iter_nodes()
        .map(|(p, n)| format!("{p} {:?} {:?} {:?} {}", n.data(), n.acl, n.stat.persisted(), n.stat.num_children))
        .collect();
    let sessions = t
        .sessions()
        .map(|(id, s)| format!("{id} {} {:?} {:?}", s.timeout_ms, s.passwd, s.ephemerals.iter().collect::<Vec<_>>()))
        .collect();
    (nodes, sessions)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Export then import gives back every node with its Stat, data and ACL, every session
    /// with its password, and the last zxid; ZooKeeper's digest of both agrees.
    #[test]
    fn export_then_import_is_identity(steps in proptest::collection::vec(step(), 0..60)) {
        let tree = build(&steps);
        let dir = tempfile::tempdir().unwrap();
        let report = export::export(&tree, dir.path()).unwrap();
        let back = import::import(dir.path(), dir.path()).unwrap().unwrap();
        prop_assert_eq!(back.report.last_zxid, tree.last_zxid());
        prop_assert_eq!(view(&back.tree), view(&tree));
        prop_assert_eq!(super::digest::tree(&back.tree), report.digest);
        prop_assert_eq!(back.tree.data_size(), tree.data_size());
    }

    /// Any byte of a real snapshot flipped, or the file cut anywhere: an error or a tree,
    /// never a panic.
    #[test]
    fn damaged_snapshots_never_panic(steps in proptest::collection::vec(step(), 0..20), at in any::<prop::sample::Index>(), bit in 0u8..8, cut in any::<bool>()) {
        let tree = build(&steps);
        let dir = tempfile::tempdir().unwrap();
        let report = export::export(&tree, dir.path()).unwrap();
        let mut bytes = std::fs::read(&report.path).unwrap();
        let i = at.index(bytes.len());
        if cut { bytes.truncate(i) } else { bytes[i] ^= 1 << bit }
        let _ = fuzzing::snapshot(&bytes);
    }

    /// Arbitrary bytes behind a valid header, as a snapshot or a log: never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut snap = super::snapshot::SNAPSHOT_MAGIC.to_be_bytes().to_vec();
        snap.extend_from_slice(&2i32.to_be_bytes());
        snap.extend_from_slice(&0i64.to_be_bytes());
        snap.extend_from_slice(&tail);
        let _ = fuzzing::snapshot(&snap);
        let mut log = super::txnlog::LOG_MAGIC.to_be_bytes().to_vec();
        log.extend_from_slice(&2i32.to_be_bytes());
        log.extend_from_slice(&0i64.to_be_bytes());
        log.extend_from_slice(&tail);
        let _ = fuzzing::log(&log);
    }
}
