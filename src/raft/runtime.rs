//! The Raft runtime: openraft's core, its state-machine worker and its replication tasks run
//! on a tokio runtime of their own, with one worker thread, apart from the runtime that serves
//! client connections. So does the peer port ([`crate::peer`]): a follower's AppendEntries
//! goes from its socket to the core and its answer back without waking a thread of the other
//! runtime each way. A/B on 3-node ensembles, alternating, ten rounds (BENCHMARKS.md,
//! thirteenth pass): with the peer port here, set and create 1x1 p50 on a follower and set
//! 16x8 throughput were each ahead in 8 of 10 rounds (medians -16%, -15%, +21%).
//!
//! A write's serial chain (an fsync, then the core's turn to note it, apply the batch and
//! append the next one) otherwise waits behind whatever connection tasks the shared workers
//! have queued: replies and new requests of up to 128 in flight. On its own worker the core
//! runs as soon as the OS wakes it. Measured with warden-bench 16×8 against a standalone
//! server, alternating builds (BENCHMARKS.md, eleventh pass): set +8% and create +14% in
//! ops/s (every round ahead); set 1×1 latency unchanged. Two workers did no better than one. A
//! current-thread runtime is no choice: the log store's commit blocks its thread, and the
//! state-machine worker must keep applying meanwhile (on this runtime the log store's
//! `block_in_place` hands the worker's tasks to another thread for the length of a commit).

use std::future::Future;
use std::time::Duration;

/// How long stopping waits for the runtime's blocking tasks (a snapshot being written).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// A runtime on threads of its own, stopped when dropped.
pub struct RaftRuntime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RaftRuntime {
    /// Starts the runtime and the thread that drives it.
    pub fn start() -> std::io::Result<RaftRuntime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("warden-raft")
            .build()?;
        let handle = rt.handle().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("warden-raft-main".into()).spawn(move || {
            // Until stopped, or until the stopping side is gone.
            rt.block_on(async {
                let _ = rx.await;
            });
            rt.shutdown_timeout(STOP_WAIT);
        })?;
        Ok(RaftRuntime { handle, stop: Some(tx), thread: Some(thread) })
    }

    /// Spawns `fut` on this runtime (and whatever it spawns).
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fut)
    }

    /// Runs `fut` on this runtime (and whatever it spawns) and waits for its output.
    pub async fn run<F>(&self, fut: F) -> Result<F::Output, tokio::task::JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fut).await
    }
}

impl Drop for RaftRuntime {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_on_its_own_threads_and_stops() {
        let rt = RaftRuntime::start().expect("runtime starts");
        let name = rt
            .run(async {
                // What the future spawns runs there too.
                tokio::spawn(async { std::thread::current().name().map(str::to_owned) }).await
            })
            .await
            .expect("task ran")
            .expect("spawned task ran");
        assert_eq!(name.as_deref(), Some("warden-raft"));
        drop(rt);
    }
}
