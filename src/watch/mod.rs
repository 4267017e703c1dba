//! The watch manager: one-shot data, exist and child watches, persistent and
//! persistent-recursive watches, and the `setWatches` catch-up on reconnect. Counterpart of
//! ZooKeeper's `WatchManager` pair (data and child tables) in `DataTree`.
//!
//! Not replicated: watches live on the server the client is connected to and die with the
//! connection. `trigger` is called by the state machine under the tree's write lock (lock
//! order: tree, then this manager), and queues each event on the session's outbound channel,
//! so an event is always queued before any later reply that reflects its change.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Mutex;

use futures::channel::mpsc::UnboundedSender;
use jute::EventType;
use jute::KeeperState;
use jute::WatcherEvent;

use crate::tree::acl;
use crate::tree::acl::AclEntry;
use crate::tree::path;
use crate::tree::Change;
use crate::tree::DataTree;

/// The paths of a `setWatches2`: data, exist, child, persistent and persistent-recursive
/// watches.
pub type SetWatches<'a> = (&'a [String], &'a [String], &'a [String], &'a [String], &'a [String]);

/// How a watch behaves after firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fires once.
    Standard,
    /// Fires until removed (`addWatch` PERSISTENT).
    Persistent,
    /// Fires for the node and every descendant until removed (`addWatch` PERSISTENT_RECURSIVE).
    Recursive,
}

/// An event queued to a connection, with the zxid of the change that fired it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub zxid: i64,
    pub event: WatcherEvent,
}

/// Which table a watch lives in (ZooKeeper's `dataWatches` / `childWatches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Data,
    Child,
}

#[derive(Default)]
struct Inner {
    data: HashMap<String, HashMap<i64, Mode>>,
    child: HashMap<String, HashMap<i64, Mode>>,
    senders: HashMap<i64, UnboundedSender<Event>>,
    /// Each connected session's identities: a watcher is told of a change only if it may READ
    /// the node (ZooKeeper 3.8 `WatchManager.triggerWatch` with an ACL).
    auth: HashMap<i64, acl::AuthIds>,
    recursive: usize,
}

impl Inner {
    fn table(&mut self, t: Table) -> &mut HashMap<String, HashMap<i64, Mode>> {
        match t {
            Table::Data => &mut self.data,
            Table::Child => &mut self.child,
        }
    }

    fn add(&mut self, t: Table, path: &str, session: i64, mode: Mode) {
        let entry = self.table(t).entry(path.to_owned()).or_default();
        let old = entry.get(&session).copied();
        // A one-shot registration never downgrades a persistent one.
        if old.is_some_and(|m| m != Mode::Standard) && mode == Mode::Standard {
            return;
        }
        entry.insert(session, mode);
        if mode == Mode::Recursive && old != Some(Mode::Recursive) {
            self.recursive += 1;
        }
        if old == Some(Mode::Recursive) && mode != Mode::Recursive {
            self.recursive -= 1;
        }
    }

    /// Collects the sessions watching `path` in table `t` for an event, removing one-shots.
    /// `recursive_too` includes recursive watchers (they only sit in the data table).
    fn fire(&mut self, t: Table, path: &str, out: &mut Vec<i64>, skip: &HashSet<i64>) {
        let Some(watchers) = self.table(t).get_mut(path) else { return };
        watchers.retain(|session, mode| {
            if *mode == Mode::Recursive {
                return true; // recursive watchers are fired by `fire_recursive`
            }
            if !skip.contains(session) {
                out.push(*session);
            }
            *mode != Mode::Standard
        });
        if watchers.is_empty() {
            self.table(t).remove(path);
        }
    }

    fn fire_recursive(&mut self, path: &str, out: &mut Vec<i64>, skip: &HashSet<i64>) {
        if self.recursive == 0 {
            return;
        }
        let mut p = Some(path);
        while let Some(cur) = p {
            if let Some(w) = self.data.get(cur) {
                for (s, m) in w {
                    if *m == Mode::Recursive && !skip.contains(s) && !out.contains(s) {
                        out.push(*s);
                    }
                }
            }
            p = path::parent(cur);
        }
    }

    fn send_checked(&self, sessions: &[i64], zxid: i64, event: EventType, path: &str, node_acl: &[AclEntry]) {
        let allowed: Vec<i64> = sessions
            .iter()
            .copied()
            .filter(|s| acl::allowed(node_acl, jute::perms::READ, self.auth.get(s).map_or(&[][..], |a| &a[..])))
            .collect();
        self.send(&allowed, zxid, event, path);
    }

    fn send(&self, sessions: &[i64], zxid: i64, event: EventType, path: &str) {
        for s in sessions {
            if let Some(tx) = self.senders.get(s) {
                let _ = tx.unbounded_send(Event {
                    zxid,
                    event: WatcherEvent {
                        event_type: event.code(),
                        state: KeeperState::SyncConnected.code(),
                        path: path.to_owned(),
                    },
                });
            }
        }
    }
}

/// The watch manager handle.
#[derive(Default)]
pub struct WatchManager {
    /// std `Mutex`: never held across `.await`; taken inside the tree lock by `trigger`.
    inner: Mutex<Inner>,
}

impl WatchManager {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Attaches a connection: events for `session` go to `tx` from now on.
    pub fn connect(&self, session: i64, tx: UnboundedSender<Event>, auth: acl::AuthIds) {
        let mut inner = self.lock();
        inner.senders.insert(session, tx);
        inner.auth.insert(session, auth);
    }

    /// The session's identities changed (`addauth`).
    pub fn set_auth(&self, session: i64, auth: acl::AuthIds) {
        self.lock().auth.insert(session, auth);
    }

    /// Drops every watch of `session` (its connection closed), if `tx` is still its sender.
    pub fn disconnect(&self, session: i64, tx: &UnboundedSender<Event>) {
        let mut inner = self.lock();
        if inner.senders.get(&session).is_some_and(|t| t.same_receiver(tx)) {
            inner.senders.remove(&session);
            inner.auth.remove(&session);
            let mut removed_recursive = 0;
            for t in [Table::Data, Table::Child] {
                inner.table(t).retain(|_, w| {
                    if w.remove(&session) == Some(Mode::Recursive) {
                        removed_recursive += 1;
                    }
                    !w.is_empty()
                });
            }
            inner.recursive -= removed_recursive;
        }
    }

    /// Registers a watch (call while holding the tree read lock the read was served under).
    pub fn add(&self, table: Table, path: &str, session: i64, mode: Mode) {
        self.lock().add(table, path, session, mode);
    }

    /// `addWatch`: persistent watches sit in both tables, recursive ones in the data table only.
    pub fn add_persistent(&self, path: &str, session: i64, recursive: bool) {
        let mut inner = self.lock();
        if recursive {
            inner.add(Table::Data, path, session, Mode::Recursive);
        } else {
            inner.add(Table::Data, path, session, Mode::Persistent);
            inner.add(Table::Child, path, session, Mode::Persistent);
        }
    }

    /// Fires the watches for one applied txn's changes, in order.
    pub fn trigger(&self, zxid: i64, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut inner = self.lock();
        if inner.data.is_empty() && inner.child.is_empty() {
            return;
        }
        for c in changes {
            let mut out = Vec::new();
            let none = HashSet::new();
            match c.event {
                EventType::NodeCreated | EventType::NodeDataChanged => {
                    inner.fire(Table::Data, &c.path, &mut out, &none);
                    inner.fire_recursive(&c.path, &mut out, &none);
                }
                EventType::NodeDeleted => {
                    inner.fire(Table::Data, &c.path, &mut out, &none);
                    inner.fire_recursive(&c.path, &mut out, &none);
                    // A watcher gets one NodeDeleted even if it watched data and children.
                    let seen: HashSet<i64> = out.iter().copied().collect();
                    inner.fire(Table::Child, &c.path, &mut out, &seen);
                }
                EventType::NodeChildrenChanged => inner.fire(Table::Child, &c.path, &mut out, &none),
                _ => {}
            }
            inner.send_checked(&out, zxid, c.event, &c.path, &c.acl);
        }
    }

    /// The tree was replaced whole (a snapshot installed from the leader): fires every watch
    /// the change between `old` and `new` triggers, as the txns in between would have, then
    /// at `new`'s zxid. Call under the tree's write lock, before any read can see `new`, so
    /// every event is queued before a reply that shows its change.
    ///
    /// The events are inferred from the two trees, as ZooKeeper's `setWatches` infers them
    /// on reconnect: a node gone is NodeDeleted, a new node NodeCreated, one replaced by a
    /// node of the same path (another czxid) NodeDeleted then NodeCreated, a new mzxid
    /// NodeDataChanged, a new pzxid NodeChildrenChanged. Only watched paths are compared
    /// (and, under a recursive watch, its whole subtree in either tree). Deletions go first,
    /// deepest first, then creations, parents first, then data and child changes.
    pub fn tree_replaced(&self, old: &DataTree, new: &DataTree) {
        let candidates = {
            let inner = self.lock();
            if inner.data.is_empty() && inner.child.is_empty() {
                return;
            }
            let mut paths: std::collections::BTreeSet<String> =
                inner.data.keys().chain(inner.child.keys()).cloned().collect();
            if inner.recursive > 0 {
                let roots: Vec<&String> = inner
                    .data
                    .iter()
                    .filter(|(_, w)| w.values().any(|m| *m == Mode::Recursive))
                    .map(|(p, _)| p)
                    .collect();
                for root in roots {
                    paths.extend(old.subtree(root));
                    paths.extend(new.subtree(root));
                }
            }
            paths
        };
        let (mut deleted, mut created, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let change =
            |event, path: &str, acl: &crate::tree::SharedAcl| Change { event, path: path.to_owned(), acl: acl.clone() };
        for path in &candidates {
            match (old.node(path), new.node(path)) {
                (None, None) => {}
                (Some(o), None) => deleted.push(change(EventType::NodeDeleted, path, o.acl)),
                (None, Some(n)) => created.push(change(EventType::NodeCreated, path, n.acl)),
                (Some(o), Some(n)) => {
                    if o.stat.czxid != n.stat.czxid {
                        deleted.push(change(EventType::NodeDeleted, path, o.acl));
                        created.push(change(EventType::NodeCreated, path, n.acl));
                    } else if o.stat.mzxid != n.stat.mzxid {
                        changed.push(change(EventType::NodeDataChanged, path, n.acl));
                    }
                    if o.stat.czxid == n.stat.czxid && o.stat.pzxid != n.stat.pzxid {
                        changed.push(change(EventType::NodeChildrenChanged, path, n.acl));
                    }
                }
            }
        }
        // Candidates come in path order, where a parent sorts before its children.
        deleted.reverse();
        let changes: Vec<Change> = deleted.into_iter().chain(created).chain(changed).collect();
        if !changes.is_empty() {
            tracing::info!(events = changes.len(), "tree replaced by a snapshot: firing the watches it triggers");
        }
        self.trigger(new.last_zxid(), &changes);
    }

    /// Removes watches of `session` at `path` of the given `WatcherType`; true if any existed.
    /// With `dry_run` only checks (`checkWatches`).
    pub fn remove(&self, session: i64, path: &str, watcher_type: jute::WatcherType, dry_run: bool) -> bool {
        use jute::WatcherType as W;
        let mut inner = self.lock();
        let mut found = false;
        let wanted: &[(Table, &[Mode])] = match watcher_type {
            W::Children => &[(Table::Child, &[Mode::Standard])],
            W::Data => &[(Table::Data, &[Mode::Standard])],
            W::Any => &[
                (Table::Child, &[Mode::Standard, Mode::Persistent]),
                (Table::Data, &[Mode::Standard, Mode::Persistent, Mode::Recursive]),
            ],
            W::Persistent => &[(Table::Child, &[Mode::Persistent]), (Table::Data, &[Mode::Persistent])],
            W::PersistentRecursive => &[(Table::Data, &[Mode::Recursive])],
        };
        for (t, modes) in wanted {
            let mut removed_recursive = false;
            if let Some(w) = inner.table(*t).get_mut(path) {
                if let Some(m) = w.get(&session).copied() {
                    if modes.contains(&m) {
                        found = true;
                        if !dry_run {
                            w.remove(&session);
                            removed_recursive = m == Mode::Recursive;
                        }
                    }
                }
                if w.is_empty() {
                    inner.table(*t).remove(path);
                }
            }
            if removed_recursive {
                inner.recursive -= 1;
            }
        }
        found
    }

    /// `setWatches`/`setWatches2` on reconnect (`DataTree.setWatches`): fires what changed
    /// since `relative_zxid`, re-registers the rest. `watches` are the data, exist, child,
    /// persistent and persistent-recursive watches the client held.
    pub fn set_watches(&self, tree: &DataTree, session: i64, relative_zxid: i64, watches: SetWatches<'_>) {
        let (data, exist, child, persistent, recursive) = watches;
        let zxid = tree.last_zxid();
        let mut inner = self.lock();
        for p in data {
            match tree.node(p) {
                None => inner.send(&[session], zxid, EventType::NodeDeleted, p),
                Some(n) if n.stat.mzxid > relative_zxid => inner.send(&[session], zxid, EventType::NodeDataChanged, p),
                Some(_) => inner.add(Table::Data, p, session, Mode::Standard),
            }
        }
        for p in exist {
            match tree.node(p) {
                Some(_) => inner.send(&[session], zxid, EventType::NodeCreated, p),
                None => inner.add(Table::Data, p, session, Mode::Standard),
            }
        }
        for p in child {
            match tree.node(p) {
                None => inner.send(&[session], zxid, EventType::NodeDeleted, p),
                Some(n) if n.stat.pzxid > relative_zxid => {
                    inner.send(&[session], zxid, EventType::NodeChildrenChanged, p)
                }
                Some(_) => inner.add(Table::Child, p, session, Mode::Standard),
            }
        }
        for p in persistent {
            inner.add(Table::Data, p, session, Mode::Persistent);
            inner.add(Table::Child, p, session, Mode::Persistent);
        }
        for p in recursive {
            inner.add(Table::Data, p, session, Mode::Recursive);
        }
    }

    /// Watched paths per session (`wchc`): data and exist watches, as ZooKeeper 3.8 reports
    /// them (its child watches are not listed there, though `watch_count` counts them).
    pub fn by_session(&self) -> std::collections::BTreeMap<i64, std::collections::BTreeSet<String>> {
        let inner = self.lock();
        let mut out: std::collections::BTreeMap<i64, std::collections::BTreeSet<String>> = Default::default();
        for table in [&inner.data] {
            for (path, w) in table {
                for s in w.keys() {
                    out.entry(*s).or_default().insert(path.clone());
                }
            }
        }
        out
    }

    /// Watching sessions per path (`wchp`): data and exist watches, as in ZooKeeper 3.8.
    pub fn by_path(&self) -> std::collections::BTreeMap<String, std::collections::BTreeSet<i64>> {
        let inner = self.lock();
        let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<i64>> = Default::default();
        for table in [&inner.data] {
            for (path, w) in table {
                out.entry(path.clone()).or_default().extend(w.keys().copied());
            }
        }
        out
    }

    /// Number of (path, session) registrations (`watch_count`).
    pub fn count(&self) -> usize {
        let inner = self.lock();
        inner.data.values().map(HashMap::len).sum::<usize>() + inner.child.values().map(HashMap::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::txn::CreateOp;
    use crate::tree::txn::Txn;
    use crate::tree::txn::TxnOp;

    fn apply(tree: &mut DataTree, op: TxnOp) {
        let zxid = tree.last_zxid() + 1;
        let (r, _) = tree.apply(zxid, &Txn { session_id: 0, time_ms: 1, auth: Default::default(), op });
        assert!(r.is_ok(), "{r:?}");
    }

    fn create(tree: &mut DataTree, path: &str) {
        apply(
            tree,
            TxnOp::Create(CreateOp { path: path.into(), data: None, acl: AclEntry::open(), flags: 0, ttl: -1 }),
        );
    }

    fn set(tree: &mut DataTree, path: &str) {
        apply(tree, TxnOp::SetData { path: path.into(), data: Some(bytes::Bytes::from_static(b"x")), version: -1 });
    }

    fn delete(tree: &mut DataTree, path: &str) {
        apply(tree, TxnOp::Delete { path: path.into(), version: -1 });
    }

    /// A session's events, as (type, path), in the order they were queued.
    fn events(rx: &mut futures::channel::mpsc::UnboundedReceiver<Event>) -> Vec<(EventType, String)> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            let t = EventType::try_from(e.event.event_type).expect("event type");
            out.push((t, e.event.path));
        }
        out
    }

    /// A tree replaced whole (a snapshot from the leader) fires what the txns in between
    /// would have: data, exist, child and recursive watches, one-shots once, deletions
    /// (deepest first) before creations, at the new tree's zxid; unwatched changes fire
    /// nothing.
    #[test]
    fn a_replaced_tree_fires_the_watches_its_changes_trigger() {
        let mut old = DataTree::new();
        for p in ["/d", "/gone", "/p", "/p/kid", "/r", "/r/a", "/r/a/b", "/quiet", "/again"] {
            create(&mut old, p);
        }
        let mut new = old.clone();
        set(&mut new, "/d");
        delete(&mut new, "/gone");
        create(&mut new, "/born");
        create(&mut new, "/p/kid2");
        delete(&mut new, "/r/a/b");
        create(&mut new, "/r/c");
        set(&mut new, "/quiet");
        delete(&mut new, "/again");
        create(&mut new, "/again");

        let w = WatchManager::default();
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        w.connect(1, tx, std::sync::Arc::from([]));
        w.add(Table::Data, "/d", 1, Mode::Standard);
        w.add(Table::Data, "/gone", 1, Mode::Standard);
        w.add(Table::Data, "/born", 1, Mode::Standard); // an exist watch
        w.add(Table::Child, "/p", 1, Mode::Standard);
        w.add(Table::Data, "/again", 1, Mode::Standard);
        w.add_persistent("/r", 1, true);
        w.tree_replaced(&old, &new);
        use EventType::*;
        assert_eq!(
            events(&mut rx),
            vec![
                (NodeDeleted, "/r/a/b".into()),
                (NodeDeleted, "/gone".into()),
                (NodeDeleted, "/again".into()),
                (NodeCreated, "/born".into()),
                (NodeCreated, "/r/c".into()),
                (NodeDataChanged, "/d".into()),
                (NodeChildrenChanged, "/p".into()),
            ]
        );
        // One-shots are gone, the recursive watch stays.
        assert_eq!(w.by_session().get(&1).map(|p| p.iter().cloned().collect::<Vec<_>>()), Some(vec!["/r".into()]));
        // Nothing changed, nothing fires.
        w.tree_replaced(&new, &new.clone());
        assert!(events(&mut rx).is_empty());
    }
}
