//! The wall clock, read in one place: milliseconds since the Unix epoch, as ZooKeeper's
//! `Time.currentWallTime` gives ctime, mtime and TTL checks. Only proposers read it (the
//! time is stamped into each txn, so apply stays a pure function of the log); statistics and
//! admin output read it for display.

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
