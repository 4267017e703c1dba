//! Process tuning, in one place: the memory allocator ([`alloc`]), where the runtime's worker
//! threads run ([`workers`]), transparent huge pages, and the tokio runtime built with the
//! workers' hooks. Nothing here knows of requests or data: the server hands the worker
//! controller a load figure. ZooKeeper's counterpart is the JVM's own tuning flags.

pub mod alloc;
pub mod workers;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::SpreadWorkers;

/// How long the runtime waits at exit for blocking tasks (a snapshot still being written).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// Turns transparent huge pages off for this process. mimalloc asks for them, and the kernel
/// then zeroes a whole 2 MiB page on the first touch of each: restarting with 1,000,000
/// znodes spent 45% of its time in `clear_page_erms` and took 5.7-6.9 s instead of 2.8-3.0 s
/// (and more RSS).
fn disable_transparent_huge_pages() {
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("warden: PR_SET_THP_DISABLE failed ({e}); continuing with transparent huge pages");
    }
}

/// Tunes the process: call first thing in `main`, before any thread or allocation that
/// matters.
pub fn prepare() {
    alloc::configure();
    disable_transparent_huge_pages();
}

/// Runs `main` on a multi-thread tokio runtime whose workers apply the placement `mode`
/// (see [`workers`]); `main` gets the placement to steer, if the mode places anything.
pub fn run<F, Fut>(mode: SpreadWorkers, main: F) -> std::io::Result<Fut::Output>
where
    F: FnOnce(Option<Arc<workers::Placement>>) -> Fut,
    Fut: Future,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // Each worker applies the placement itself when it wakes; the server's controller
    // changes it with the load.
    let placement = workers::Placement::new(mode);
    if let Some(p) = placement.clone() {
        let held = p.clone();
        builder.on_thread_unpark(move || p.on_unpark());
        builder.on_thread_park(move || held.on_park());
    }
    let runtime = builder.build()?;
    let result = runtime.block_on(main(placement));
    // A snapshot still being written on a blocking thread would otherwise hold the exit.
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    Ok(result)
}
