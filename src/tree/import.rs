//! Building a tree from another server's files (an Apache ZooKeeper data dir, see `zkdata`):
//! nodes with the whole Stat their snapshot recorded, and the txns of their log replayed as
//! ZooKeeper's own restart replays them (`DataTree.processTxn` and the `createNode`,
//! `deleteNode`, `setData`, `setACL`, `killSession` it calls).
//!
//! Replay is not [`DataTree::apply`]: ZooKeeper logs the outcome of its checks, not the
//! request, so replay checks nothing but existence, takes versions and the parent's cversion
//! from the txn, and may meet a change the (fuzzy) snapshot already holds, which it skips as
//! ZooKeeper does ([`TreeError::NoNode`] and [`TreeError::NodeExists`] are reported and
//! ignored by the caller). Nothing here runs once the server serves: an imported tree enters
//! Raft as the initial snapshot.

use bytes::Bytes;

use super::kind_of;
use super::DataTree;
use super::Ephemerals;
use super::Node;
use super::NodeKind;
use super::NodeStat;
use super::SessionEntry;
use super::SharedAcl;
use super::TreeError;
use super::CONFIG_NODE;

/// The parent of a ZooKeeper path, as `DataTree.createNode` cuts it (`""` is the root).
fn parent_of(path: &str) -> Option<&str> {
    let slash = path.rfind('/')?;
    Some(if slash == 0 { "/" } else { &path[..slash] })
}

/// ZooKeeper stores the root under `""`; the node map under `/`.
fn key_of(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}

/// What finishing an import did beyond the files' own contents.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportFixups {
    /// Ephemerals whose session is in no session table, deleted as ZooKeeper's
    /// `ZooKeeperServer.loadData` deletes them (the session died while a snapshot was taken).
    pub orphan_ephemerals: Vec<String>,
    /// Special nodes the files lacked (a 3.4 data dir has no `/zookeeper/config`), created.
    pub added_special: Vec<&'static str>,
}

impl DataTree {
    /// A tree with no node at all, not even the root, to import into.
    pub fn import_start() -> DataTree {
        let mut t = DataTree::new();
        t.nodes = Default::default();
        t.data_size = 0;
        t.digest = None;
        t
    }

    /// Adds a node read from a snapshot, with its persisted Stat (its child count is counted
    /// here, as its children arrive). ZooKeeper's root comes under the path `""`. The parent
    /// must already be there: snapshots store parents first (`DataTree.deserialize` refuses
    /// them otherwise, as this does).
    pub fn import_node(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        acl: SharedAcl,
        stat: NodeStat,
    ) -> Result<(), String> {
        let key = key_of(path);
        if self.nodes.contains(key) {
            return Err(format!("node {key} appears twice"));
        }
        if !path.is_empty() {
            super::path::validate(path).map_err(|e| e.to_string())?;
            let parent = parent_of(path).ok_or_else(|| format!("invalid path {path:?}"))?;
            self.nodes
                .update(key_of(parent), |p| p.stat.num_children += 1)
                .ok_or_else(|| format!("node {path} comes before its parent {parent}"))?;
        }
        let stat = NodeStat { num_children: 0, ..stat };
        self.register(key, stat.ephemeral_owner);
        self.nodes.insert(key, Node { acl, stat }, data);
        Ok(())
    }

    /// Files a new node under its session (or as reapable), as `createNode` does.
    fn register(&mut self, path: &str, owner: i64) {
        match kind_of(owner) {
            NodeKind::Ephemeral(session) => match self.sessions.get_mut(&session) {
                Some(s) => s.ephemerals.insert(path.to_owned()),
                // Kept with no session for now: the session may be created later in the log,
                // or else the node is an orphan that `import_finish` deletes.
                None => {
                    let entry = self.sessions.entry(session).or_insert_with(|| SessionEntry {
                        timeout_ms: ORPHAN_TIMEOUT,
                        passwd: Bytes::new(),
                        ephemerals: Ephemerals::default(),
                    });
                    entry.ephemerals.insert(path.to_owned());
                }
            },
            NodeKind::Container | NodeKind::Ttl(_) => {
                self.reapable.insert(path.to_owned());
            }
            NodeKind::Normal => {}
        }
    }

    /// Adds (or replaces) a session of the imported session table. Ephemerals already filed
    /// under its id stay.
    pub fn import_session(&mut self, id: i64, timeout_ms: i32, passwd: Bytes) {
        let entry = self.sessions.entry(id).or_insert_with(|| SessionEntry {
            timeout_ms,
            passwd: passwd.clone(),
            ephemerals: Ephemerals::default(),
        });
        entry.timeout_ms = timeout_ms;
        entry.passwd = passwd;
    }

    /// `DataTree.createNode` as replay runs it: `parent_cversion` -1 means "the parent's plus
    /// one"; the parent's cversion and pzxid move only forward. A node already there (the
    /// fuzzy snapshot has it) gets the txn's ACL and [`TreeError::NodeExists`], as in
    /// ZooKeeper.
    #[allow(clippy::too_many_arguments)]
    pub fn replay_create(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        acl: SharedAcl,
        owner: i64,
        parent_cversion: i32,
        zxid: i64,
        time: i64,
    ) -> Result<(), TreeError> {
        // ZooKeeper validated every path it created; one that is not valid is damage.
        super::path::validate(path).map_err(|_| TreeError::BadArguments)?;
        let parent = parent_of(path).ok_or(TreeError::BadArguments)?;
        let parent = key_of(parent).to_owned();
        if !self.nodes.contains(&parent) {
            return Err(TreeError::NoNode);
        }
        if self.nodes.contains(path) {
            self.nodes.update(path, |n| n.acl = acl);
            return Err(TreeError::NodeExists);
        }
        self.nodes.update(&parent, |p| {
            let cversion = if parent_cversion == -1 { p.stat.cversion.wrapping_add(1) } else { parent_cversion };
            if cversion > p.stat.cversion {
                p.stat.cversion = cversion;
                p.stat.pzxid = zxid;
            }
            p.stat.num_children += 1;
        });
        let node = Node::new(acl, zxid, time, owner);
        self.register(path, owner);
        self.nodes.insert(path, node, data);
        Ok(())
    }

    /// `DataTree.setCversionPzxid`: after a `create` found its node already there, the parent
    /// still gets the txn's cversion (if larger) and the txn's zxid.
    pub fn replay_set_cversion_pzxid(&mut self, path: &str, cversion: i32, zxid: i64) -> Result<(), TreeError> {
        let path = key_of(path.strip_suffix('/').unwrap_or(path));
        self.nodes
            .update(path, |n| {
                let cversion = if cversion == -1 { n.stat.cversion.wrapping_add(1) } else { cversion };
                if cversion > n.stat.cversion {
                    n.stat.cversion = cversion;
                    n.stat.pzxid = zxid;
                }
            })
            .ok_or(TreeError::NoNode)
    }

    /// `DataTree.deleteNode`: the parent's pzxid moves forward even when the node is gone
    /// already, as in ZooKeeper.
    pub fn replay_delete(&mut self, path: &str, zxid: i64) -> Result<(), TreeError> {
        let parent = key_of(parent_of(path).ok_or(TreeError::BadArguments)?).to_owned();
        let exists = self.nodes.contains(path);
        self.nodes
            .update(&parent, |p| {
                if exists {
                    p.stat.num_children = p.stat.num_children.saturating_sub(1);
                }
                if zxid > p.stat.pzxid {
                    p.stat.pzxid = zxid;
                }
            })
            .ok_or(TreeError::NoNode)?;
        if !exists {
            return Err(TreeError::NoNode);
        }
        // ZooKeeper never logs the delete of a node with children; should a damaged history
        // hold one, its descendants go too rather than stay unreachable.
        for below in self.subtree(path).into_iter().rev() {
            self.unfile(&below);
            self.nodes.remove(&below);
        }
        self.unfile(path);
        self.nodes.remove(path);
        Ok(())
    }

    /// Takes a node off its session's list or the reapable set.
    fn unfile(&mut self, path: &str) {
        let Some(owner) = self.nodes.get(path).map(|n| n.stat.ephemeral_owner) else { return };
        self.unfile_kind(path, kind_of(owner));
    }

    /// `DataTree.setData`: the txn's version, zxid and time.
    pub fn replay_set_data(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        version: i32,
        zxid: i64,
        time: i64,
    ) -> Result<(), TreeError> {
        let key = key_of(path);
        self.nodes
            .set_data_checked(
                key,
                data,
                |_| Ok::<(), TreeError>(()),
                |(), n| {
                    n.stat.version = version;
                    n.stat.mzxid = zxid;
                    n.stat.mtime = time;
                },
            )
            .ok_or(TreeError::NoNode)?
    }

    /// The ACL a node holds now, for an import to check what its replay left.
    pub fn import_acl_of(&self, path: &str) -> Option<SharedAcl> {
        self.nodes.get(key_of(path)).map(|n| n.acl.clone())
    }

    /// `DataTree.setACL`: the txn's ACL and version.
    pub fn replay_set_acl(&mut self, path: &str, acl: SharedAcl, version: i32) -> Result<(), TreeError> {
        self.nodes
            .update(key_of(path), |n| {
                n.acl = acl;
                n.stat.aversion = version;
            })
            .ok_or(TreeError::NoNode)
    }

    /// `FileTxnSnapLog.processTransaction` + `DataTree.killSession`: the session leaves the
    /// table; the paths the txn lists and the session's own ephemerals are deleted (each one
    /// missing is skipped).
    pub fn replay_close_session(&mut self, id: i64, paths: Option<&[String]>, zxid: i64) {
        let own: Vec<String> =
            self.sessions.remove(&id).map(|s| s.ephemerals.iter().cloned().collect()).unwrap_or_default();
        for path in paths.unwrap_or(&[]).iter().chain(own.iter().filter(|p| !paths.unwrap_or(&[]).contains(p))) {
            let _ = self.replay_delete(path, zxid);
        }
    }

    /// The tree an admin `restore` leaves at `zxid`: `self` (a snapshot's tree, from
    /// `import_finish`) with the sessions of `current` (the tree it replaces). Connected
    /// clients keep their sessions: a session of the snapshot that `current` lacks loses its
    /// ephemerals, one in both keeps those the snapshot gives it. `/zookeeper/config` stays
    /// `current`'s (the ensemble is this one, not the snapshot's), and the zxid only grows:
    /// every replica computes the same tree.
    pub fn restore_onto(mut self, current: &DataTree, zxid: i64) -> DataTree {
        let gone: Vec<i64> = self.sessions.keys().filter(|id| current.session(**id).is_none()).copied().collect();
        for id in gone {
            self.replay_close_session(id, None, zxid);
        }
        for (id, live) in current.sessions() {
            let entry = self.sessions.entry(*id).or_insert_with(|| SessionEntry {
                timeout_ms: live.timeout_ms,
                passwd: live.passwd.clone(),
                ephemerals: Ephemerals::default(),
            });
            entry.timeout_ms = live.timeout_ms;
            entry.passwd = live.passwd.clone();
        }
        if let Some(config) = current.node(CONFIG_NODE) {
            let (stat, data) = (config.stat, config.data().unwrap_or_default().to_vec());
            self.replace_data(CONFIG_NODE, &data, |node| node.stat = stat);
        }
        self.last_zxid = zxid;
        self.digest = None;
        self.quotas = None;
        self.compute_derived();
        self
    }

    /// Ends an import at `last_zxid`: deletes orphaned ephemerals (at `last_zxid`, as
    /// `ZooKeeperServer.loadData` kills their sessions), adds missing special nodes, and
    /// recomputes the sizes and digest. Fails if the files held no root.
    pub fn import_finish(&mut self, last_zxid: i64) -> Result<ImportFixups, String> {
        if !self.nodes.contains("/") {
            return Err("the snapshot holds no root node".into());
        }
        let mut fixups = ImportFixups::default();
        let orphans: Vec<i64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.timeout_ms == ORPHAN_TIMEOUT && s.passwd.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in orphans {
            let paths: Vec<String> =
                self.sessions.get(&id).map(|s| s.ephemerals.iter().cloned().collect()).unwrap_or_default();
            fixups.orphan_ephemerals.extend(paths.iter().cloned());
            self.replay_close_session(id, None, last_zxid);
        }
        let fresh = DataTree::new();
        for path in ["/zookeeper", "/zookeeper/quota", "/zookeeper/config"] {
            if self.nodes.contains(path) {
                continue;
            }
            let Some(parent) = super::path::parent(path) else { continue };
            let Some(node) = fresh.nodes.get(path) else { continue };
            let node = Node { acl: node.acl.clone(), stat: node.stat };
            if self.nodes.update(parent, |p| p.stat.num_children += 1).is_some() {
                self.nodes.insert(path, node, None);
                fixups.added_special.push(path);
            }
        }
        self.last_zxid = last_zxid;
        self.data_size = self.nodes.iter().map(|(p, n)| p.len() as i64 + n.data().map_or(0, <[u8]>::len) as i64).sum();
        self.digest = None;
        self.quotas = None;
        self.compute_derived();
        // ZooKeeper recounts every quota when it loads (DataTree.setupQuota); its fuzzy
        // snapshot's stats plus its log's txns need it, and the count here must be exact.
        self.recount_quotas();
        Ok(fixups)
    }
}

/// The timeout of a session entry made only to hold ephemerals whose session is not (yet) in
/// the table; with an empty password it marks the entry as such.
const ORPHAN_TIMEOUT: i32 = i32::MIN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::acl::AclEntry;
    use std::sync::Arc;

    fn stat(czxid: i64, cversion: i32) -> NodeStat {
        NodeStat {
            czxid,
            mzxid: czxid,
            ctime: 1,
            mtime: 1,
            version: 0,
            cversion,
            aversion: 0,
            ephemeral_owner: 0,
            pzxid: czxid,
            num_children: 0,
        }
    }

    fn open() -> SharedAcl {
        Arc::new(AclEntry::open())
    }

    fn base() -> DataTree {
        let mut t = DataTree::import_start();
        t.import_node("", None, open(), stat(0, 1)).unwrap();
        t.import_node("/zookeeper", None, open(), stat(0, 0)).unwrap();
        t.import_node("/a", Some(b"x"), open(), stat(3, 0)).unwrap();
        t
    }

    /// Children are counted as they arrive; a child before its parent is refused.
    #[test]
    fn nodes_and_child_counts() {
        let mut t = base();
        assert_eq!(t.node("/").unwrap().stat.num_children, 2);
        assert!(t.import_node("/b/c", None, open(), stat(4, 0)).unwrap_err().contains("before its parent"));
        let fixups = t.import_finish(9).unwrap();
        assert_eq!(fixups.added_special, vec!["/zookeeper/quota", "/zookeeper/config"]);
        assert_eq!(t.last_zxid(), 9);
        assert_eq!(t.node("/zookeeper/config").unwrap().stat.version, -1);
    }

    /// A replayed create takes the txn's parent cversion only if it is larger; -1 adds one.
    #[test]
    fn create_parent_cversion_rule() {
        let mut t = base();
        t.replay_create("/a/s0000000005", None, open(), 0, 6, 10, 2).unwrap();
        assert_eq!((t.node("/a").unwrap().stat.cversion, t.node("/a").unwrap().stat.pzxid), (6, 10));
        t.replay_create("/a/x", None, open(), 0, 2, 11, 2).unwrap();
        assert_eq!((t.node("/a").unwrap().stat.cversion, t.node("/a").unwrap().stat.pzxid), (6, 10));
        t.replay_create("/a/y", None, open(), 0, -1, 12, 2).unwrap();
        assert_eq!((t.node("/a").unwrap().stat.cversion, t.node("/a").unwrap().stat.pzxid), (7, 12));
        assert_eq!(t.replay_create("/a/y", None, open(), 0, -1, 13, 2), Err(TreeError::NodeExists));
        assert_eq!(t.replay_create("/q/y", None, open(), 0, -1, 13, 2), Err(TreeError::NoNode));
        assert_eq!(t.node("/a").unwrap().stat.num_children, 3);
    }

    /// A delete moves the parent's pzxid even when the node is already gone.
    #[test]
    fn delete_moves_pzxid_even_when_missing() {
        let mut t = base();
        assert_eq!(t.replay_delete("/a/gone", 20), Err(TreeError::NoNode));
        assert_eq!(t.node("/a").unwrap().stat.pzxid, 20);
        t.replay_delete("/a", 21).unwrap();
        assert!(t.node("/a").is_none());
        assert_eq!(t.node("/").unwrap().stat.num_children, 1);
        assert_eq!(t.node("/").unwrap().stat.pzxid, 21);
    }

    /// Ephemerals of a session closed in the log go; those of a session in no table go at
    /// the finish.
    #[test]
    fn sessions_and_orphans() {
        let mut t = base();
        t.import_session(7, 4000, Bytes::from_static(b"pw"));
        t.replay_create("/a/e7", None, open(), 7, -1, 30, 2).unwrap();
        t.replay_create("/a/e8", None, open(), 8, -1, 31, 2).unwrap();
        t.replay_create("/a/e9", None, open(), 9, -1, 32, 2).unwrap();
        t.import_session(9, 5000, Bytes::from_static(b"pw9"));
        t.replay_close_session(7, Some(&["/a/e7".to_string()]), 33);
        assert!(t.node("/a/e7").is_none());
        let fixups = t.import_finish(40).unwrap();
        assert_eq!(fixups.orphan_ephemerals, vec!["/a/e8".to_string()]);
        assert!(t.node("/a/e8").is_none());
        assert_eq!(t.node("/a").unwrap().stat.pzxid, 40);
        assert_eq!(t.ephemerals(9, "/"), vec!["/a/e9".to_string()]);
        assert_eq!(t.session(9).unwrap().timeout_ms, 5000);
    }
}
