//! Quotas: which paths have one, the usage apply keeps for each, and the hard-limit check.
//! ZooKeeper's counterparts are `Quotas`, `StatsTrack`, the quota half of `DataTree`
//! (`updateQuotaStat`, `updateQuotaForPath`, `getMaxPrefixWithQuota`) and
//! `ZooKeeperServer.checkQuota`.
//!
//! A quota on `/p` is the node `/zookeeper/quota/p/zookeeper_limits`, whose data holds the
//! limits (`count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=20`). zkCli's `setquota`
//! writes it, with `zookeeper_stats` beside it, through ordinary creates; the server does the
//! rest. Creating the stats node makes the server count `/p`'s subtree (`/p` included) into
//! it, and from then on every create, delete and setData under `/p` adds to it. As in
//! ZooKeeper the stats node's data changes and its Stat does not (no version, no mzxid, no
//! watch). The stats live in the tree, so snapshots, restarts and failover keep them; the
//! index of quota'd paths is rebuilt from the tree ([`DataTree::index_quotas`]).
//!
//! With `zookeeper.enforceQuota` the proposer wraps creates and setData in
//! [`TxnOp::QuotaEnforced`](super::txn::TxnOp::QuotaEnforced), and apply refuses an op that
//! would take the usage past a hard limit with [`TreeError::QuotaExceeded`], changing
//! nothing. A soft limit only logs a warning.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;

use imbl::OrdSet;

use super::nodes::NodeMap;
use super::DataTree;
use super::TreeError;

/// Where quotas live (`Quotas.quotaZookeeper`).
pub const QUOTA_ROOT: &str = "/zookeeper/quota";
/// The node holding a path's limits (`Quotas.limitNode`).
pub const LIMIT_NODE: &str = "zookeeper_limits";
/// The node holding a path's usage (`Quotas.statNode`).
pub const STAT_NODE: &str = "zookeeper_stats";

/// `Quotas.limitPath`.
pub fn limit_path(path: &str) -> String {
    format!("{QUOTA_ROOT}{path}/{LIMIT_NODE}")
}

/// `Quotas.statPath`.
pub fn stat_path(path: &str) -> String {
    format!("{QUOTA_ROOT}{path}/{STAT_NODE}")
}

/// The path a quota node belongs to, if `path` is a limits or stats node of `node_name`:
/// `/zookeeper/quota/a/b/zookeeper_limits` gives `/a/b`.
fn quota_path_of<'a>(path: &'a str, node_name: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(QUOTA_ROOT)?;
    let owner = rest.strip_suffix(node_name)?.strip_suffix('/')?;
    (!owner.is_empty()).then_some(owner)
}

/// ZooKeeper's `StatsTrack`: the text of a limits or stats node, `key=value` pairs split by
/// `,` or `;`. A key that is not there reads as -1 (no limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsTrack {
    pairs: BTreeMap<String, i64>,
}

impl StatsTrack {
    pub const COUNT: &'static str = "count";
    pub const BYTES: &'static str = "bytes";
    pub const COUNT_HARD: &'static str = "countHardLimit";
    pub const BYTES_HARD: &'static str = "byteHardLimit";

    /// Reads a node's text. ZooKeeper throws on a value that is not a number; apply cannot,
    /// so such a pair is left out (it reads as -1), the same way on every replica.
    pub fn parse(data: &[u8]) -> StatsTrack {
        let text = String::from_utf8_lossy(data);
        let mut pairs = BTreeMap::new();
        for pair in text.split([',', ';']).filter(|p| !p.is_empty()) {
            // Java's split("=") drops trailing empty parts: "bytes=5=" is bytes 5.
            let mut parts = pair.split('=');
            let (Some(key), value) = (parts.next(), parts.next().unwrap_or("")) else { continue };
            let value = if value.is_empty() { Ok(-1) } else { value.trim().parse::<i64>() };
            if let Ok(v) = value {
                pairs.insert(key.to_owned(), v);
            }
        }
        StatsTrack { pairs }
    }

    pub fn get(&self, key: &str) -> i64 {
        self.pairs.get(key).copied().unwrap_or(-1)
    }

    pub fn set(&mut self, key: &str, value: i64) {
        self.pairs.insert(key.to_owned(), value);
    }

    /// `StatsTrack.toString`: `count` and `bytes` first, then, after a `=` that old parsers
    /// skip, every other key in name order after a `;`.
    pub fn format(&self) -> String {
        let mut out = format!("count={},bytes={}", self.get(Self::COUNT), self.get(Self::BYTES));
        let mut rest = self.pairs.iter().filter(|(k, _)| *k != Self::COUNT && *k != Self::BYTES).peekable();
        if rest.peek().is_some() {
            out.push('=');
            for (k, v) in rest {
                out.push_str(&format!(";{k}={v}"));
            }
        }
        out
    }
}

/// The deepest path with a quota at or above `path` (`getMaxPrefixWithQuota`; a quota on `/`
/// counts for nothing there, and here).
fn quota_of<'a>(quotas: &'a OrdSet<String>, path: &str) -> Option<&'a str> {
    if quotas.is_empty() {
        return None;
    }
    let mut prefix = path;
    loop {
        if let Some(q) = quotas.get(prefix).filter(|q| q.as_str() != "/") {
            return Some(q.as_str());
        }
        match prefix.rfind('/') {
            Some(0) | None => return None,
            Some(i) => prefix = &prefix[..i],
        }
    }
}

/// When a warning last went to the log, in txn time: at most one a second, as ZooKeeper's
/// `RateLogger` keeps them from flooding it.
static LAST_WARNING_MS: AtomicI64 = AtomicI64::new(i64::MIN);

fn warn(time_ms: i64, message: impl FnOnce() -> String) {
    let last = LAST_WARNING_MS.load(Ordering::Relaxed);
    if time_ms.saturating_sub(last) >= 1000
        && LAST_WARNING_MS.compare_exchange(last, time_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        tracing::warn!("{}", message());
    }
}

/// `ZooKeeperServer.checkQuota` for a change of `count` nodes and `bytes` bytes at `path`:
/// over a hard limit is [`TreeError::QuotaExceeded`] when `enforce`; over a soft limit (or an
/// unenforced hard one) is a warning.
pub(super) fn check(
    quotas: &OrdSet<String>,
    nodes: &NodeMap,
    path: &str,
    count: i64,
    bytes: i64,
    enforce: bool,
    time_ms: i64,
) -> Result<(), TreeError> {
    let Some(quota) = quota_of(quotas, path) else { return Ok(()) };
    let Some(limits) = nodes.get(&limit_path(quota)) else { return Ok(()) };
    let limits = StatsTrack::parse(limits.data().unwrap_or_default());
    let Some(usage) = nodes.get(&stat_path(quota)) else { return Ok(()) };
    let usage = StatsTrack::parse(usage.data().unwrap_or_default());
    for (diff, soft_key, hard_key, what) in [
        (count, StatsTrack::COUNT, StatsTrack::COUNT_HARD, "count"),
        (bytes, StatsTrack::BYTES, StatsTrack::BYTES_HARD, "bytes"),
    ] {
        let (soft, hard) = (limits.get(soft_key), limits.get(hard_key));
        if diff == 0 || (soft < 0 && hard < 0) {
            continue;
        }
        let now = usage.get(soft_key).saturating_add(diff);
        let (limit, kind) = if hard > -1 { (hard, "hard") } else { (soft, "soft") };
        if now > limit {
            let label = if what == "count" { "Count" } else { "Byte" };
            warn(time_ms, || format!("Quota exceeded: {quota} [current {what}={now}, {kind}{label}Limit={limit}]"));
            if hard > -1 && enforce {
                return Err(TreeError::QuotaExceeded);
            }
        }
    }
    Ok(())
}

impl DataTree {
    /// Rebuilds the index of quota'd paths from the limits nodes under `/zookeeper/quota`
    /// (`DataTree.setupQuota`, without its recount: the usage a snapshot holds is exact, and
    /// recounting on one member only would set its tree apart from the others').
    pub(super) fn index_quotas(&mut self) {
        if self.quotas.is_some() {
            return;
        }
        let index =
            self.subtree(QUOTA_ROOT).iter().filter_map(|p| quota_path_of(p, LIMIT_NODE)).map(str::to_owned).collect();
        self.quotas = Some(index);
    }

    /// The index, built if a snapshot just brought the tree.
    pub(super) fn quota_index(&mut self) -> &OrdSet<String> {
        self.index_quotas();
        self.quotas.get_or_insert_with(OrdSet::new)
    }

    /// ZooKeeper's quota gauges (`QuotaMetricsUtils`): per top-level namespace, the sums over
    /// its quotas of the count limit, the byte limit (each the hard one if set, else the
    /// soft one), the count usage and the byte usage.
    pub fn quota_metrics(&self) -> BTreeMap<String, [i64; 4]> {
        let built;
        let index = match &self.quotas {
            Some(q) => q,
            None => {
                built = self
                    .subtree(QUOTA_ROOT)
                    .iter()
                    .filter_map(|p| quota_path_of(p, LIMIT_NODE))
                    .map(str::to_owned)
                    .collect();
                &built
            }
        };
        let mut out: BTreeMap<String, [i64; 4]> = BTreeMap::new();
        let read = |path: String| StatsTrack::parse(self.nodes.get(&path).and_then(|n| n.data()).unwrap_or_default());
        for path in index {
            let Some(namespace) = path.split('/').nth(1) else { continue };
            let limits = read(limit_path(path));
            let usage = read(stat_path(path));
            let hard_or_soft = |hard: &str, soft: &str| match limits.get(hard) {
                h if h > -1 => h,
                _ => limits.get(soft),
            };
            let sums = out.entry(namespace.to_owned()).or_default();
            for (sum, v) in sums.iter_mut().zip([
                hard_or_soft(StatsTrack::COUNT_HARD, StatsTrack::COUNT),
                hard_or_soft(StatsTrack::BYTES_HARD, StatsTrack::BYTES),
                usage.get(StatsTrack::COUNT),
                usage.get(StatsTrack::BYTES),
            ]) {
                *sum += v;
            }
        }
        out
    }

    /// Recounts every quota's usage from the tree (`updateQuotaForPath` for each): for a tree
    /// imported from ZooKeeper's files, whose fuzzy snapshot may hold stats that its log's
    /// txns then moved.
    pub fn recount_quotas(&mut self) {
        let paths: Vec<String> = self.quota_index().iter().cloned().collect();
        for path in paths {
            self.recount_quota(&path);
        }
    }

    /// `updateQuotaForPath`: writes `path`'s subtree (itself included) count and bytes into
    /// its stats node.
    fn recount_quota(&mut self, path: &str) {
        let (mut count, mut bytes) = (0i64, 0i64);
        if let Some(node) = self.nodes.get(path) {
            count += 1;
            bytes += node.data().map_or(0, <[u8]>::len) as i64;
            for child in self.subtree(path) {
                count += 1;
                bytes += self.nodes.get(&child).and_then(|n| n.data()).map_or(0, <[u8]>::len) as i64;
            }
        }
        let mut usage = StatsTrack::default();
        usage.set(StatsTrack::COUNT, count);
        usage.set(StatsTrack::BYTES, bytes);
        self.replace_data(&stat_path(path), usage.format().as_bytes(), |_| {});
    }

    /// After a create of `path` with `bytes` of data: a new limits node starts a quota, a new
    /// stats node gets its path's count (`DataTree.createNode`), and the quota above `path`
    /// counts the node.
    pub(super) fn quota_created(&mut self, path: &str, bytes: i64) {
        if path.starts_with(QUOTA_ROOT) {
            if let Some(owner) = quota_path_of(path, LIMIT_NODE) {
                let owner = owner.to_owned();
                self.quota_index();
                if let Some(q) = self.quotas.as_mut() {
                    q.insert(owner);
                }
            }
            if let Some(owner) = quota_path_of(path, STAT_NODE) {
                let owner = owner.to_owned();
                self.recount_quota(&owner);
            }
        }
        self.add_usage(path, 1, bytes);
    }

    /// After `path` (with `bytes` of data) was removed: a removed limits node ends its quota
    /// (`DataTree.deleteNode`), and the quota above `path` stops counting it.
    pub(super) fn quota_removed(&mut self, path: &str, bytes: i64) {
        if let Some(owner) = quota_path_of(path, LIMIT_NODE) {
            let owner = owner.to_owned();
            self.quota_index();
            if let Some(q) = self.quotas.as_mut() {
                q.remove(&owner);
            }
        }
        self.add_usage(path, -1, -bytes);
    }

    /// `updateQuotaStat`: adds to the usage of the quota above `path`, if any. Only the stats
    /// node's data changes.
    pub(super) fn add_usage(&mut self, path: &str, count: i64, bytes: i64) {
        let Some(quota) = quota_of(self.quota_index(), path) else { return };
        let stats = stat_path(quota);
        let Some(node) = self.nodes.get(&stats) else {
            tracing::error!("missing quota stats node {stats}");
            return;
        };
        let mut usage = StatsTrack::parse(node.data().unwrap_or_default());
        usage.set(StatsTrack::COUNT, usage.get(StatsTrack::COUNT).saturating_add(count));
        usage.set(StatsTrack::BYTES, usage.get(StatsTrack::BYTES).saturating_add(bytes));
        self.replace_data(&stats, usage.format().as_bytes(), |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::txn::TxnOutput;

    /// The text zkCli writes and reads back: count and bytes first, the hard limits after a
    /// `=` and `;`, in name order; a missing key is -1.
    #[test]
    fn stats_track_reads_and_writes_zookeeper_text() {
        let t = StatsTrack::parse(b"count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=20");
        assert_eq!(t.get(StatsTrack::COUNT), 10);
        assert_eq!(t.get(StatsTrack::BYTES), -1);
        assert_eq!(t.get(StatsTrack::COUNT_HARD), 20);
        assert_eq!(t.format(), "count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=20");
        let old = StatsTrack::parse(b"count=3,bytes=12");
        assert_eq!(old.get(StatsTrack::COUNT_HARD), -1);
        assert_eq!(old.format(), "count=3,bytes=12");
        let junk = StatsTrack::parse(b"count=x,bytes=,=;;");
        assert_eq!((junk.get(StatsTrack::COUNT), junk.get(StatsTrack::BYTES)), (-1, -1));
    }

    use crate::tree::acl::AclEntry;
    use crate::tree::txn::CreateOp;
    use crate::tree::txn::Txn;
    use crate::tree::txn::TxnOp;
    use bytes::Bytes;

    fn txn(op: TxnOp) -> Txn {
        Txn { session_id: 0, time_ms: 1000, auth: Default::default(), op }
    }

    fn create(path: &str, data: &str) -> TxnOp {
        TxnOp::Create(CreateOp {
            path: path.into(),
            data: Some(Bytes::copy_from_slice(data.as_bytes())),
            acl: AclEntry::open(),
            flags: 0,
            ttl: -1,
        })
    }

    fn set(path: &str, data: &str) -> TxnOp {
        TxnOp::SetData { path: path.into(), data: Some(Bytes::copy_from_slice(data.as_bytes())), version: -1 }
    }

    fn data(t: &DataTree, path: &str) -> String {
        String::from_utf8_lossy(t.node(path).and_then(|n| n.data()).unwrap_or_default()).into_owned()
    }

    /// Applies ops at increasing zxids; each must succeed.
    fn run(t: &mut DataTree, ops: Vec<TxnOp>) {
        for op in ops {
            let zxid = t.last_zxid() + 1;
            let (r, _) = t.apply(zxid, &txn(op.clone()));
            assert!(r.is_ok(), "{op:?}: {r:?}");
        }
    }

    /// zkCli's `setquota -n 3 /q` on a tree with /q and one child, as ordinary creates.
    fn with_quota(limits: &str) -> DataTree {
        let mut t = DataTree::new();
        run(
            &mut t,
            vec![
                create("/q", "ab"),
                create("/q/c", "xyz"),
                create("/zookeeper/quota/q", ""),
                create("/zookeeper/quota/q/zookeeper_limits", limits),
                create("/zookeeper/quota/q/zookeeper_stats", "count=0,bytes=0"),
            ],
        );
        t
    }

    /// Creating the stats node counts the subtree (the quota'd node included); creates,
    /// setData and deletes below then move the count and bytes; the stats node's Stat stays
    /// (ZooKeeper's DataTree.updateQuotaStat writes only its data).
    #[test]
    fn usage_follows_the_subtree() {
        let mut t = with_quota("count=3,bytes=-1");
        let stats = "/zookeeper/quota/q/zookeeper_stats";
        assert_eq!(data(&t, stats), "count=2,bytes=5");
        let before = t.exists(stats).unwrap();
        run(&mut t, vec![create("/q/d", "1234"), set("/q/c", "x"), create("/other", "zzzz")]);
        assert_eq!(data(&t, stats), "count=3,bytes=7");
        run(&mut t, vec![TxnOp::Delete { path: "/q/d".into(), version: -1 }]);
        assert_eq!(data(&t, stats), "count=2,bytes=3");
        let after = t.exists(stats).unwrap();
        assert_eq!((after.version, after.mzxid), (before.version, before.mzxid));
        // Removing the limits node ends the quota: the stats stop moving.
        run(&mut t, vec![TxnOp::Delete { path: "/zookeeper/quota/q/zookeeper_limits".into(), version: -1 }]);
        run(&mut t, vec![create("/q/e", "")]);
        assert_eq!(data(&t, stats), "count=2,bytes=3");
    }

    /// Enforced, a create or setData past a hard limit fails with QuotaExceeded and changes
    /// nothing; a soft limit never refuses; unenforced, nothing refuses.
    #[test]
    fn hard_limits_refuse_when_enforced() {
        let mut t = with_quota("count=-1,bytes=-1=;byteHardLimit=8;countHardLimit=3");
        let enforced = |op| TxnOp::QuotaEnforced(Box::new(op));
        run(&mut t, vec![enforced(create("/q/d", ""))]);
        let digest = t.digest();
        let (r, _) = t.apply(100, &txn(enforced(create("/q/e", ""))));
        assert_eq!(r, Err(TreeError::QuotaExceeded));
        let (r, _) = t.apply(101, &txn(enforced(set("/q/c", "123456789"))));
        assert_eq!(r, Err(TreeError::QuotaExceeded));
        assert_eq!(t.digest(), digest);
        assert_eq!(data(&t, "/zookeeper/quota/q/zookeeper_stats"), "count=3,bytes=5");
        // Within the byte limit (5 - 3 + 6 = 8) passes.
        run(&mut t, vec![enforced(set("/q/c", "123456"))]);
        // A multi's earlier ops count against its later ones.
        let multi = TxnOp::Multi(vec![
            TxnOp::Delete { path: "/q/d".into(), version: -1 },
            create("/q/f", ""),
            create("/q/g", ""),
        ]);
        let (r, _) = t.apply(200, &txn(enforced(multi)));
        assert!(matches!(r, Ok(TxnOutput::Multi { failed: true, .. })), "{r:?}");
        // The same ops unenforced pass.
        run(&mut t, vec![create("/q/e", ""), set("/q/c", "123456789")]);
        let mut soft = with_quota("count=2,bytes=1");
        run(&mut soft, vec![TxnOp::QuotaEnforced(Box::new(create("/q/d", "long")))]);
    }

    /// The index is rebuilt from the limits nodes after a snapshot (serde skips it).
    #[test]
    fn index_survives_a_snapshot() {
        let t = with_quota("count=5,bytes=-1");
        let bytes = postcard::to_stdvec(&t).expect("encode");
        let mut back: DataTree = postcard::from_bytes(&bytes).expect("decode");
        back.compute_derived();
        run(&mut back, vec![create("/q/d", "1")]);
        assert_eq!(data(&back, "/zookeeper/quota/q/zookeeper_stats"), "count=3,bytes=6");
        let mut wrong = back.clone();
        wrong.replace_data("/zookeeper/quota/q/zookeeper_stats", b"count=0,bytes=0", |_| {});
        wrong.recount_quotas();
        assert_eq!(data(&wrong, "/zookeeper/quota/q/zookeeper_stats"), "count=3,bytes=6");
    }

    #[test]
    fn quota_paths() {
        assert_eq!(quota_path_of("/zookeeper/quota/a/b/zookeeper_limits", LIMIT_NODE), Some("/a/b"));
        assert_eq!(quota_path_of("/zookeeper/quota/zookeeper_limits", LIMIT_NODE), None);
        assert_eq!(quota_path_of("/zookeeper/quota/a/xzookeeper_limits", LIMIT_NODE), None);
        assert_eq!(quota_path_of("/a/zookeeper_limits", LIMIT_NODE), None);
        let q: OrdSet<String> = ["/a".to_owned(), "/a/b/c".to_owned()].into_iter().collect();
        assert_eq!(quota_of(&q, "/a/b/c/d"), Some("/a/b/c"));
        assert_eq!(quota_of(&q, "/a/b"), Some("/a"));
        assert_eq!(quota_of(&q, "/a"), Some("/a"));
        assert_eq!(quota_of(&q, "/ab"), None);
        assert_eq!(quota_of(&q, "/"), None);
    }
}
