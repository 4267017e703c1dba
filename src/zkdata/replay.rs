//! Replaying ZooKeeper's txn log onto an imported tree, as `FileTxnSnapLog.processTransaction`
//! and `DataTree.processTxn` do when ZooKeeper restarts: each txn's outcome as logged, with
//! the fuzzy snapshot's overlap (a node already created, already deleted) skipped.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use jute::txn::TxnHeader;
use jute::Acl;
use jute::OpCode;

use super::password::session_password;
use super::txnlog::ZkTxn;
use crate::tree::acl::AclEntry;
use crate::tree::DataTree;
use crate::tree::SharedAcl;
use crate::tree::TreeError;

/// One allocation per distinct ACL list, as ZooKeeper's ACL cache keeps one per list: most
/// nodes share a handful.
#[derive(Default)]
pub struct Acls(HashMap<Vec<AclEntry>, SharedAcl>);

impl Acls {
    pub fn get(&mut self, acl: &[Acl]) -> SharedAcl {
        let list: Vec<AclEntry> = acl.iter().map(AclEntry::from).collect();
        self.0.entry(list).or_insert_with_key(|l| Arc::new(l.clone())).clone()
    }

    pub fn intern(&mut self, list: Vec<AclEntry>) -> SharedAcl {
        self.0.entry(list).or_insert_with_key(|l| Arc::new(l.clone())).clone()
    }
}

/// Counts of what the replay met, for the import's report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReplayStats {
    pub txns: u64,
    /// Txns (or ops of a multi) whose change the snapshot already held, skipped.
    pub skipped: u64,
}

/// A session created by the import: the password ZooKeeper gave it.
pub fn password(id: i64) -> Bytes {
    Bytes::copy_from_slice(&session_password(id))
}

/// Applies one logged txn.
pub fn apply(tree: &mut DataTree, acls: &mut Acls, header: &TxnHeader, txn: &ZkTxn, stats: &mut ReplayStats) {
    stats.txns += 1;
    match txn {
        // A failed multi logs every op as an error: nothing of it took effect.
        ZkTxn::Multi(ops) if ops.iter().any(|op| matches!(op, ZkTxn::Error { .. })) => {}
        ZkTxn::Multi(ops) => {
            for op in ops {
                apply_one(tree, acls, header, op, stats);
            }
        }
        op => apply_one(tree, acls, header, op, stats),
    }
}

fn apply_one(tree: &mut DataTree, acls: &mut Acls, h: &TxnHeader, txn: &ZkTxn, stats: &mut ReplayStats) {
    let zxid = h.zxid;
    let outcome = match txn {
        ZkTxn::CreateSession { timeout } => {
            tree.import_session(h.client_id, *timeout, password(h.client_id));
            Ok(())
        }
        ZkTxn::CloseSession { paths } => {
            tree.replay_close_session(h.client_id, paths.as_deref(), zxid);
            Ok(())
        }
        ZkTxn::Create { opcode, path, data, acl, ephemeral, parent_cversion } => {
            let owner = if *ephemeral { h.client_id } else { 0 };
            let r = tree.replay_create(path, data.as_deref(), acls.get(acl), owner, *parent_cversion, zxid, h.time);
            // DataTree.processTxn: a `create` (not create2) whose node is there already still
            // brings its parent's cversion and pzxid up to the txn's.
            if r == Err(TreeError::NodeExists) && *opcode == OpCode::Create {
                if let Some(slash) = path.rfind('/') {
                    let _ = tree.replay_set_cversion_pzxid(&path[..slash], *parent_cversion, zxid);
                }
            }
            r
        }
        ZkTxn::CreateTtl { path, data, acl, parent_cversion, ttl } => tree.replay_create(
            path,
            data.as_deref(),
            acls.get(acl),
            crate::tree::ttl_owner(*ttl),
            *parent_cversion,
            zxid,
            h.time,
        ),
        ZkTxn::CreateContainer { path, data, acl, parent_cversion } => tree.replay_create(
            path,
            data.as_deref(),
            acls.get(acl),
            crate::tree::CONTAINER_OWNER,
            *parent_cversion,
            zxid,
            h.time,
        ),
        ZkTxn::Delete { path } => tree.replay_delete(path, zxid),
        ZkTxn::SetData { path, data, version } => tree.replay_set_data(path, data.as_deref(), *version, zxid, h.time),
        ZkTxn::SetAcl { path, acl, version } => tree.replay_set_acl(path, acls.get(acl), *version),
        ZkTxn::Check { .. } | ZkTxn::Error { .. } | ZkTxn::Multi(_) => Ok(()),
    };
    if outcome.is_err() {
        stats.skipped += 1;
    }
}
