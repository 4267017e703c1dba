//! Crash points for fault tests: places in the write path (log append, snapshot write and
//! install, apply) where a test build (feature `failpoints`) can be told to abort the process,
//! as a `kill -9` landing exactly there would. Armed by the `FAILPOINTS` environment variable
//! in the `fail` crate's syntax, e.g. `FAILPOINTS=log-append-after=5%return`; without the
//! feature every point compiles to nothing.

/// Aborts the process if the crash point `name` is armed and fires (test builds only).
#[macro_export]
macro_rules! crash_point {
    ($name:expr) => {
        #[cfg(feature = "failpoints")]
        $crate::failpoint::check($name);
    };
}

/// Every crash point, for tests that pick one.
pub const POINTS: &[&str] = &[
    "log-append-before",
    "log-append-after",
    "snapshot-write-before-rename",
    "snapshot-write-after-rename",
    "snapshot-install-before-rename",
    "snapshot-install-after-rename",
    "apply-before",
    "apply-after",
];

/// Reads `FAILPOINTS` (the feature's build only); the returned guard keeps them armed.
#[cfg(feature = "failpoints")]
pub fn setup() -> fail::FailScenario<'static> {
    let scenario = fail::FailScenario::setup();
    if let Ok(spec) = std::env::var("FAILPOINTS") {
        tracing::warn!(spec = spec.as_str(), "crash points armed (a test build)");
    }
    scenario
}

/// Aborts if `name` fires.
#[cfg(feature = "failpoints")]
pub fn check(name: &str) {
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("warden: crash point {name} fired: aborting");
        std::process::abort();
    }
}
