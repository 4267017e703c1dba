//! Where the runtime's worker threads run: one to a CPU while the server has parallel work,
//! wherever the kernel puts them otherwise. Owns the placement policy and its controller; it
//! knows nothing of requests beyond a load figure it is handed. ZooKeeper has no counterpart
//! (the JVM leaves its threads to the kernel).
//!
//! Why: on a small machine shared with other busy processes, the kernel often queues a woken
//! worker behind the other worker on the CPU where the wake-up happened, while the other CPU
//! idles (a woken thread goes where its waker runs when no CPU looks idle at that instant,
//! and an idle CPU seldom pulls a thread that ran within the last half millisecond). Under a
//! 16 × 8 set load on 2 vCPUs, `perf sched` counted ~200 ms of run-queue delay per 500 ms
//! for the two workers, and the server used 0.8 of 2 cores; pinned one to a CPU, set
//! throughput rose by about a quarter (BENCHMARKS.md, nineteenth pass). Pinned workers cost
//! a lone client's round trips, though: its thread and the worker that serves it then sit on
//! different CPUs, and waking a halted vCPU costs tens of µs each way (get 1×1 p50 0.033 →
//! 0.085 ms in one run; the spread is wide on this host). So in `auto` mode the workers are
//! spread only while several clients are served at once: the controller ([`adapt`]) counts
//! the connections that sent a packet in each 25 ms window, spreads the workers when the
//! running mean reaches [`SPREAD_AT`] and frees them again below [`FREE_BELOW`]. A lone
//! client never has them pinned, however fast it sends.
//!
//! A worker applies a change itself, the next time it wakes from parking (tokio's
//! `on_thread_unpark`), with `sched_setaffinity` on its own thread; after a change the
//! controller spawns a no-op task per worker so that idle ones wake and apply it too.
//! Blocking threads and threads of Warden's own (the log writer) are never pinned.

use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nix::sched::CpuSet;
use nix::unistd::Pid;

/// `runtime.spreadWorkers` (Warden's own zoo.cfg key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Spread while several clients send at once, free otherwise (the default).
    Auto,
    /// Always one worker to a CPU.
    Always,
    /// Never pinned: the kernel places the workers.
    Never,
}

/// Mean connections active per window at and above which the workers are spread.
pub const SPREAD_AT: f64 = 2.0;
/// Mean connections active per window below which spread workers are freed again.
pub const FREE_BELOW: f64 = 1.5;
/// How often the controller samples the load.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);
/// Weight of the newest sample in the running mean (about 100 ms of memory at 25 ms).
const SAMPLE_WEIGHT: f64 = 0.25;

/// Prometheus name of this module's metric.
pub mod names {
    /// 1 while the workers are spread one to a CPU, 0 while the kernel places them.
    pub const SPREAD: &str = "warden_runtime_workers_spread";
}

/// The CPUs in `set`, in order.
fn cpus_in(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect()
}

/// The placement shared by the controller and the workers' unpark hook.
pub struct Placement {
    /// The CPUs this process may run on, as found at start.
    cpus: Vec<usize>,
    mode: Mode,
    spread: AtomicBool,
    /// Bumped at every change; each worker compares it with the one it last applied.
    generation: AtomicU64,
    next_worker: AtomicUsize,
}

thread_local! {
    /// This worker's index and the generation it last applied (`usize::MAX`: no index yet).
    static APPLIED: Cell<(usize, u64)> = const { Cell::new((usize::MAX, 0)) };
}

impl Placement {
    /// The placement for this process's CPUs; `None` when there is nothing to place (one CPU,
    /// or the affinity cannot be read).
    pub fn new(mode: Mode) -> Option<Arc<Placement>> {
        let allowed = match nix::sched::sched_getaffinity(Pid::from_raw(0)) {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this process's CPU affinity; workers are not placed");
                return None;
            }
        };
        Self::with_cpus(mode, cpus_in(&allowed))
    }

    fn with_cpus(mode: Mode, cpus: Vec<usize>) -> Option<Arc<Placement>> {
        if cpus.len() < 2 || mode == Mode::Never {
            return None;
        }
        Some(Arc::new(Placement {
            cpus,
            mode,
            spread: AtomicBool::new(mode == Mode::Always),
            generation: AtomicU64::new(1),
            next_worker: AtomicUsize::new(0),
        }))
    }

    /// Whether the workers are (to be) spread now.
    pub fn is_spread(&self) -> bool {
        self.spread.load(Ordering::Acquire)
    }

    /// Changes the placement; true when it changed.
    fn set_spread(&self, spread: bool) -> bool {
        if self.spread.swap(spread, Ordering::AcqRel) == spread {
            return false;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        metrics::gauge!(names::SPREAD).set(if spread { 1.0 } else { 0.0 });
        tracing::debug!(spread, "worker placement changed");
        true
    }

    /// The CPUs worker `index` may run on now.
    fn cpus_for(&self, index: usize) -> CpuSet {
        let mut set = CpuSet::new();
        let chosen: &[usize] =
            if self.is_spread() { std::slice::from_ref(&self.cpus[index % self.cpus.len()]) } else { &self.cpus };
        for &c in chosen {
            // Every CPU here came from `sched_getaffinity`, so it is in range.
            let _ = set.set(c);
        }
        set
    }

    /// tokio's `on_thread_unpark` hook: applies a change made since this worker last looked.
    /// An atomic load when nothing changed.
    pub fn on_unpark(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        let (index, applied) = APPLIED.with(Cell::get);
        if applied == generation {
            return;
        }
        let index = if index == usize::MAX { self.next_worker.fetch_add(1, Ordering::Relaxed) } else { index };
        if let Err(e) = nix::sched::sched_setaffinity(Pid::from_raw(0), &self.cpus_for(index)) {
            tracing::debug!(error = %e, worker = index, "sched_setaffinity failed");
        }
        APPLIED.with(|a| a.set((index, generation)));
    }
}

/// The decision for one step of the controller: whether to be spread after this sample.
fn decide(spread: bool, mean_active: f64) -> bool {
    if spread {
        mean_active >= FREE_BELOW
    } else {
        mean_active >= SPREAD_AT
    }
}

/// Follows the load and spreads or frees the workers, until `stop` fires. `take_active`
/// closes a window and returns how many connections sent a packet in it. Does nothing
/// unless the mode is [`Mode::Auto`].
pub async fn adapt(
    placement: Arc<Placement>,
    take_active: impl Fn() -> u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    metrics::gauge!(names::SPREAD).set(if placement.is_spread() { 1.0 } else { 0.0 });
    if placement.mode != Mode::Auto {
        return;
    }
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mean = 0.0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        mean += SAMPLE_WEIGHT * (take_active() as f64 - mean);
        if placement.set_spread(decide(placement.is_spread(), mean)) {
            // A parked worker applies the change only when it next wakes; an idle one could
            // sleep on with the old placement. Tasks spawned here wake the parked workers (a
            // second spawn pushes the first to the stealable queue and wakes one).
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            for _ in 0..workers {
                tokio::spawn(async {});
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spreading needs a sustained overlap, and a spread placement is kept through a lull
    /// shorter than the running mean's memory: no flapping at the threshold.
    #[test]
    fn the_controller_has_hysteresis() {
        assert!(!decide(false, 0.0));
        assert!(!decide(false, 1.0), "a lone client stays free");
        assert!(!decide(false, 1.9));
        assert!(decide(false, 2.0));
        assert!(decide(true, 1.6), "spread is kept between the two thresholds");
        assert!(!decide(true, 1.4));
    }

    /// One CPU, or `never`, leaves nothing to place.
    #[test]
    fn nothing_to_place_on_one_cpu_or_when_off() {
        assert!(Placement::with_cpus(Mode::Auto, vec![0]).is_none());
        assert!(Placement::with_cpus(Mode::Never, vec![0, 1]).is_none());
        let p = Placement::with_cpus(Mode::Always, vec![2, 5]).expect("two cpus");
        assert!(p.is_spread());
    }

    /// Spread, worker i gets the i-th allowed CPU (round robin); freed, every allowed CPU.
    #[test]
    fn spread_workers_take_one_allowed_cpu_each() {
        let p = Placement::with_cpus(Mode::Auto, vec![2, 5]).expect("two cpus");
        assert_eq!(cpus_in(&p.cpus_for(0)), vec![2, 5]);
        assert!(p.set_spread(true));
        assert!(!p.set_spread(true), "no change, no wake-ups");
        for (worker, cpu) in [(0, 2), (1, 5), (2, 2)] {
            assert_eq!(cpus_in(&p.cpus_for(worker)), vec![cpu], "worker {worker}");
        }
    }

    /// End to end on a real runtime: with the hook installed, spreading pins each worker
    /// thread to one CPU, and freeing gives it every allowed CPU back.
    #[test]
    fn workers_apply_the_placement_when_they_unpark() {
        let Some(p) = Placement::new(Mode::Auto) else {
            return; // one CPU: nothing to show
        };
        let hook = p.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_unpark(move || hook.on_unpark())
            .build()
            .expect("runtime");
        let allowed_per_worker = |rt: &tokio::runtime::Runtime| -> Vec<usize> {
            rt.block_on(async {
                let mut counts = Vec::new();
                // Each task sleeps first, so its worker parks and unparks before it looks.
                for _ in 0..8 {
                    let n = tokio::spawn(async {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        cpus_in(&nix::sched::sched_getaffinity(Pid::from_raw(0)).expect("affinity")).len()
                    })
                    .await
                    .expect("join");
                    counts.push(n);
                }
                counts
            })
        };
        assert!(p.set_spread(true));
        assert!(allowed_per_worker(&rt).iter().all(|&n| n == 1), "spread: one CPU per worker");
        assert!(p.set_spread(false));
        assert!(allowed_per_worker(&rt).iter().all(|&n| n == p.cpus.len()), "freed: every allowed CPU");
    }
}
