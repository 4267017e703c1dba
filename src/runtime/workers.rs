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
//! throughput rose by about a quarter (docs/perf/pass-19.md). Pinned workers cost
//! a lone client's round trips, though: its thread and the worker that serves it then sit on
//! different CPUs, and waking a halted vCPU costs tens of µs each way (get 1×1 p50 0.033 →
//! 0.085 ms in one run; the spread is wide on this host). So in `auto` mode the workers are
//! spread only while several clients are served at once: the controller ([`adapt`]) counts
//! the connections that sent a packet in each 25 ms window, spreads the workers when the
//! running mean reaches [`SPREAD_AT`] and frees them again below [`FREE_BELOW`]. A lone
//! client never has them pinned, however fast it sends. An idle server is sampled every
//! 250 ms instead, so that its first client is seen within a quarter second.
//!
//! A worker applies a change itself, the next time it wakes from parking (tokio's
//! `on_thread_unpark`), with `sched_setaffinity` on its own thread; after a change the
//! controller spawns a no-op task per worker so that idle ones wake and apply it too.
//! Blocking threads and threads of Warden's own (the log writer) are never pinned.
//!
//! **A lone writer, one worker.** Whenever a worker finds more than one task ready (and a
//! chain of task hand-offs, as in openraft's core, state machine and I/O completion tasks,
//! soon exhausts tokio's LIFO slot), tokio wakes a parked worker to share the work. At one
//! client's pace there is none to share: the woken worker finds the queue empty and parks
//! again, and on this machine it often preempted the worker that had the work on the way
//! (docs/perf/pass-20.md: 36 thread switches per 1×1 write over the three members
//! of an ensemble, 19 with one worker each). So in `auto` mode, while
//! fewer than [`SPREAD_AT`] clients send at once, fewer than [`RELEASE_AT_REQUESTS`] client
//! packets arrive per window and between [`HOLD_FROM_TXNS`] and [`RELEASE_AT_TXNS`] txns are
//! applied, all workers but one wait in tokio's `on_thread_park` hook
//! ([`Placement::on_park`]), where tokio still counts them awake, so it wakes none of them.
//! A worker is held only while another runs: that one parks later and takes tokio's I/O
//! driver, so the sockets are always polled. Held workers are released as soon as the
//! controller sees other load, and each returns by itself after [`HOLD_AT_MOST`]. The bounds
//! are measured: one pipelining client (1×32 gets) lost a quarter of its throughput with one
//! worker, and a lone reader lost a little. An ensemble member holds too (the leader and a
//! follower without clients by their txn rate alone). Its log writer thread wakes openraft
//! from outside the runtime, which tokio would not pass on while a worker is held, so the
//! writer releases held workers after each flush ([`Placement::woke_from_outside`]), and a
//! worker is not held while tasks wait in tokio's global queue. At 1×1 writes on a 3-member
//! ensemble that cut thread switches per write from 35 to 26 and CPU per write by 3–10%
//! (docs/perf/pass-22.md).

use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Condvar;
use std::sync::Mutex;
use std::time::Duration;

use nix::sched::CpuSet;
use nix::unistd::Pid;

pub use crate::config::SpreadWorkers as Mode;

/// Mean connections active per window at and above which the workers are spread.
pub const SPREAD_AT: f64 = 2.0;
/// Mean connections active per window below which spread workers are freed again.
pub const FREE_BELOW: f64 = 1.5;
/// Mean client packets per window at and above which no worker is held (20,000 a second).
pub const RELEASE_AT_REQUESTS: f64 = 500.0;
/// Mean client packets per window below which workers are held again (15,000 a second).
pub const HOLD_BELOW_REQUESTS: f64 = 375.0;
/// Mean txns applied per window at and above which no worker is held (10,000 a second).
pub const RELEASE_AT_TXNS: f64 = 250.0;
/// Mean txns applied per window below which workers are held again (7,500 a second).
pub const HOLD_BELOW_TXNS: f64 = 187.5;
/// Mean txns applied per window from which workers are held (40 a second): the hold pays
/// where a request passes through several tasks (connection, proposer, openraft's core and
/// state machine); a lone reader, served on its connection's task, lost by it (get 1×1 p50
/// ×1.09, set 1×1 p50 ×0.89; docs/perf/pass-20.md).
pub const HOLD_FROM_TXNS: f64 = 1.0;
/// Mean txns applied per window below which held workers are released again.
pub const RELEASE_BELOW_TXNS: f64 = 0.5;
/// How long a worker is held in the park hook at most before it parks as tokio would have it.
/// A worker held there still counts as searching for work if it was when it came to park,
/// and tokio wakes nobody for a task scheduled from outside the runtime while one searches:
/// such a task may wait this long when the free worker is parked too (it wakes for its
/// sockets and timers). The one such waker on a request path, an ensemble's log writer,
/// releases held workers itself ([`Placement::woke_from_outside`]); a snapshot's blocking
/// task is the one left.
const HOLD_AT_MOST: Duration = Duration::from_millis(20);
/// How often the controller samples the load.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);
/// How often it samples a server that has been idle for [`IDLE_AFTER`] samples, with its
/// workers neither spread nor held: each sample wakes a thread, and on an idle server that
/// costs more than the rest of its idle work (docs/perf/pass-21.md).
const IDLE_SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Samples with no client packet and no txn applied after which sampling slows down.
const IDLE_AFTER: u32 = 8;
/// Weight of the newest sample in the running mean (about 100 ms of memory at 25 ms).
const SAMPLE_WEIGHT: f64 = 0.25;

/// Prometheus name of this module's metric.
pub mod names {
    /// 1 while the workers are spread one to a CPU, 0 while the kernel places them.
    pub const SPREAD: &str = "warden_runtime_workers_spread";
    /// 1 while all workers but one are held at low load, 0 otherwise.
    pub const HOLD: &str = "warden_runtime_workers_held";
}

/// One window of load, as the server counted it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Connections that sent a packet in the window.
    pub active_connections: u64,
    /// Client packets received in the window.
    pub requests: u64,
    /// Txns applied in the window: the writes, whichever client sent them.
    pub txns_applied: u64,
}

impl Window {
    /// The counts of a window `lasted` long, as a window of [`SAMPLE_EVERY`] would have seen
    /// them at the same rate (active connections stay as counted).
    fn scaled_to_sample(self, lasted: Duration) -> Window {
        let f = SAMPLE_EVERY.as_secs_f64() / lasted.as_secs_f64();
        let scale = |n: u64| (n as f64 * f).round() as u64;
        Window { requests: scale(self.requests), txns_applied: scale(self.txns_applied), ..self }
    }
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
    /// Whether all workers but one are to be held at park (low load).
    hold: AtomicBool,
    /// The runtime's worker count, once the controller runs (0 before: nobody is held).
    workers: AtomicUsize,
    /// Workers held in the park hook now (see [`Placement::on_park`]).
    held: Mutex<usize>,
    /// Signalled when held workers should go: spread, or the controller stopped.
    release: Condvar,
    /// Set when the controller stops: nobody is held from then on.
    stopped: AtomicBool,
    /// Workers parked in tokio now (between the park hook's return and the unpark hook).
    parked: AtomicUsize,
    /// Bumped after a thread outside the runtime woke a task (see
    /// [`Placement::woke_from_outside`]); a held worker goes back to tokio when it changes.
    outside_wakes: AtomicU64,
    /// The runtime, once the controller runs: a worker is not held while its global queue
    /// (where tasks woken from outside land) has tasks.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// [`HOLD_AT_MOST`], longer in tests that watch a held worker.
    hold_at_most: Duration,
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
            hold: AtomicBool::new(false),
            workers: AtomicUsize::new(0),
            held: Mutex::new(0),
            release: Condvar::new(),
            stopped: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            outside_wakes: AtomicU64::new(0),
            runtime: std::sync::OnceLock::new(),
            hold_at_most: HOLD_AT_MOST,
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
        if spread {
            self.release_held();
        }
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
        let _ = self.parked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
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

impl Placement {
    /// To be called by a thread outside the runtime (an ensemble's log writer) after it woke a
    /// task. Such a task waits in tokio's global queue, and tokio wakes no parked worker for it
    /// while a held worker counts as searching for work; so held workers go back to tokio now,
    /// and the last of them to park finds the task and wakes a worker for it. One atomic add,
    /// and a lock when workers are held.
    pub fn woke_from_outside(&self) {
        self.outside_wakes.fetch_add(1, Ordering::AcqRel);
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *held > 0 {
            self.release.notify_all();
        }
    }

    /// Tasks waiting in the runtime's global queue (woken from outside it, or overflow).
    fn global_queue_depth(&self) -> usize {
        self.runtime.get().map_or(0, |h| h.metrics().global_queue_depth())
    }

    /// Whether all workers but one are held at park now.
    pub fn is_holding(&self) -> bool {
        self.hold.load(Ordering::Acquire)
    }

    /// Starts or stops holding workers; true when it changed. Stopping releases them.
    fn set_hold(&self, hold: bool) -> bool {
        if self.hold.swap(hold, Ordering::AcqRel) == hold {
            return false;
        }
        if !hold {
            self.release_held();
        }
        metrics::gauge!(names::HOLD).set(if hold { 1.0 } else { 0.0 });
        tracing::debug!(hold, "worker hold changed");
        true
    }

    /// Whether a worker about to park, with `held` others held already, is held too: never
    /// the last worker that is not held, nor while spread, nor once the controller stopped.
    fn may_hold(&self, held: usize) -> bool {
        self.is_holding()
            && !self.is_spread()
            && !self.stopped.load(Ordering::Acquire)
            && held + 1 < self.workers.load(Ordering::Acquire)
    }

    /// tokio's `on_thread_park` hook, run before the worker counts itself parked: at low
    /// load this worker waits here (at most [`HOLD_AT_MOST`]) while another runs, so tokio
    /// never wakes it to look for work that the running worker already has.
    pub fn on_park(&self) {
        // An atomic load on every park while nothing is to be held (most loads).
        if self.is_holding() {
            self.hold_here();
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
    }

    /// Holds this worker, as [`Placement::on_park`] says, if another worker is running now.
    /// A held worker leaves tokio's I/O driver alone, and a worker parked in tokio may sleep
    /// without it (the driver goes to one parked worker at a time): holding the last worker
    /// that runs could leave nobody to poll the sockets until the hold ends. A running worker
    /// parks later, and then takes the driver. (Measured: holding whichever worker parks put
    /// an ensemble's 1×1 write p99 at 3.7× with stalls of the full [`HOLD_AT_MOST`].)
    fn hold_here(&self) {
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read before the queue: a task woken from outside after this read bumps the count
        // (see `woke_from_outside`), and one woken before it is in the queue by now.
        let wakes = self.outside_wakes.load(Ordering::Acquire);
        let workers = self.workers.load(Ordering::Acquire);
        let others_running = workers.saturating_sub(self.parked.load(Ordering::Acquire) + *held + 1);
        if !self.may_hold(*held) || others_running == 0 || self.global_queue_depth() > 0 {
            return;
        }
        let mut held = held;
        *held += 1;
        let (mut held, _) = self
            .release
            .wait_timeout_while(held, self.hold_at_most, |_| {
                self.is_holding()
                    && !self.is_spread()
                    && !self.stopped.load(Ordering::Acquire)
                    && self.outside_wakes.load(Ordering::Acquire) == wakes
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *held -= 1;
    }

    /// Wakes every held worker (each then re-checks why it was held).
    fn release_held(&self) {
        let _held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.release.notify_all();
    }

    /// Workers held in the park hook now.
    #[cfg(test)]
    fn held_now(&self) -> usize {
        *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Running means of the load, one sample per window.
#[derive(Debug, Clone, Copy)]
struct Means {
    active: f64,
    requests: f64,
    txns: f64,
}

impl Means {
    /// Starts as if busy: nobody is held until the load has been seen to be low.
    fn busy() -> Means {
        Means { active: 0.0, requests: RELEASE_AT_REQUESTS, txns: RELEASE_AT_TXNS }
    }

    fn add(&mut self, w: Window) {
        self.active += SAMPLE_WEIGHT * (w.active_connections as f64 - self.active);
        self.requests += SAMPLE_WEIGHT * (w.requests as f64 - self.requests);
        self.txns += SAMPLE_WEIGHT * (w.txns_applied as f64 - self.txns);
    }
}

/// Whether to hold all workers but one after a sample with these running means.
fn decide_hold(holding: bool, m: Means) -> bool {
    if m.active >= SPREAD_AT {
        return false;
    }
    if holding {
        m.requests < RELEASE_AT_REQUESTS && (RELEASE_BELOW_TXNS..RELEASE_AT_TXNS).contains(&m.txns)
    } else {
        m.requests < HOLD_BELOW_REQUESTS && (HOLD_FROM_TXNS..HOLD_BELOW_TXNS).contains(&m.txns) && m.active < FREE_BELOW
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

/// Follows the load, spreads or frees the workers and holds or releases all but one, until
/// `stop` fires. `take_window` closes a window and returns the load counted in it. Does
/// nothing unless the mode is [`Mode::Auto`].
pub async fn adapt(
    placement: Arc<Placement>,
    mut take_window: impl FnMut() -> Window,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    metrics::gauge!(names::SPREAD).set(if placement.is_spread() { 1.0 } else { 0.0 });
    metrics::gauge!(names::HOLD).set(0.0);
    if placement.mode != Mode::Auto {
        return;
    }
    let runtime = tokio::runtime::Handle::current();
    placement.workers.store(runtime.metrics().num_workers(), Ordering::Release);
    let _ = placement.runtime.set(runtime);
    struct Stopped<'a>(&'a Placement);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            self.0.stopped.store(true, Ordering::Release);
            self.0.release_held();
        }
    }
    let _stopped = Stopped(&placement);
    let mut means = Means::busy();
    let mut quiet = 0u32;
    loop {
        let idle = quiet >= IDLE_AFTER && !placement.is_spread() && !placement.is_holding();
        let period = if idle { IDLE_SAMPLE_EVERY } else { SAMPLE_EVERY };
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        let window = take_window();
        quiet = if window == Window::default() { quiet.saturating_add(1) } else { 0 };
        means.add(if idle { window.scaled_to_sample(period) } else { window });
        placement.set_hold(decide_hold(placement.is_holding(), means));
        if placement.set_spread(decide(placement.is_spread(), means.active)) {
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

    /// A long (idle-time) window's counts are taken at the rate of a normal one, so the first
    /// burst after a quiet spell does not look ten times as heavy as it is.
    #[test]
    fn a_long_window_counts_at_the_normal_rate() {
        let w = Window { active_connections: 3, requests: 5_000, txns_applied: 1_001 };
        let scaled = w.scaled_to_sample(IDLE_SAMPLE_EVERY);
        assert_eq!(scaled, Window { active_connections: 3, requests: 500, txns_applied: 100 });
        assert_eq!(w.scaled_to_sample(SAMPLE_EVERY), w);
    }

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

    /// Workers are held only while one client at most sends, below the packet bound, and
    /// writes flow below the txn bound; released at once when any of that changes, held
    /// again only within the inner bounds.
    #[test]
    fn the_hold_follows_a_lone_slow_writer() {
        let m = |active, requests, txns| Means { active, requests, txns };
        assert!(decide_hold(false, m(1.0, 100.0, 25.0)), "one client writing 1,000 a second: hold");
        assert!(!decide_hold(false, m(1.0, 300.0, 0.0)), "a lone reader: not held");
        assert!(!decide_hold(false, m(0.0, 0.0, 0.0)), "idle: not held");
        assert!(!decide_hold(false, Means::busy()), "not before the load was seen");
        assert!(!decide_hold(true, m(2.0, 100.0, 25.0)), "several clients: release");
        assert!(!decide_hold(true, m(1.0, RELEASE_AT_REQUESTS, 25.0)), "a fast pipelining client: release");
        assert!(!decide_hold(true, m(1.0, 100.0, RELEASE_AT_TXNS)), "fast writes: release");
        assert!(!decide_hold(true, m(1.0, 100.0, 0.4)), "the writes stopped: release");
        assert!(decide_hold(true, m(1.0, RELEASE_AT_REQUESTS - 1.0, 0.6)), "held within the bounds");
        assert!(!decide_hold(false, m(1.0, HOLD_BELOW_REQUESTS, 25.0)), "held again only within the inner bounds");
        assert!(!decide_hold(false, m(1.0, 100.0, HOLD_BELOW_TXNS)));
        assert!(!decide_hold(false, m(1.0, 100.0, 0.9)));
        assert!(!decide_hold(false, m(1.6, 10.0, 25.0)), "between the client thresholds: not held again");
    }

    /// A placement for two CPUs whose workers are held at most `hold_at_most`, and a
    /// two-worker runtime with its park and unpark hooks.
    fn two_workers_with_hooks(hold_at_most: Duration) -> (Arc<Placement>, tokio::runtime::Runtime) {
        let mut p = Placement::with_cpus(Mode::Auto, vec![0, 1]).expect("two cpus");
        Arc::get_mut(&mut p).expect("one handle").hold_at_most = hold_at_most;
        p.workers.store(2, Ordering::Release);
        let (park, unpark) = (p.clone(), p.clone());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_park(move || park.on_park())
            .on_thread_unpark(move || unpark.on_unpark())
            .build()
            .expect("runtime");
        (p, rt)
    }

    /// End to end on a real runtime with both hooks: while holding, an idle runtime keeps
    /// one worker free and the other waits in the park hook; tasks (I/O-less, timers) still
    /// run; stopping the hold releases the waiting worker at once.
    #[test]
    fn held_workers_wait_in_the_park_hook_and_are_released() {
        // Long enough to watch the held worker. (Tasks spawned from this thread, outside
        // the runtime, may wait that long for a held worker that is searching.)
        let (p, rt) = two_workers_with_hooks(Duration::from_millis(250));
        assert!(p.set_hold(true));
        let wait_for = |want: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while p.held_now() != want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            p.held_now()
        };
        // Both workers busy at once, then nothing to do: the first to finish is held (the
        // other still runs), and the other parks in tokio.
        let work_then_park = || {
            rt.block_on(async {
                let busy = |ms| tokio::spawn(async move { std::thread::sleep(Duration::from_millis(ms)) });
                let (a, b) = (busy(20), busy(60));
                a.await.expect("join");
                b.await.expect("join");
            })
        };
        work_then_park();
        assert_eq!(wait_for(1), 1, "one worker held, never both");
        let sum = rt.block_on(async {
            let tasks: Vec<_> = (0..64u64)
                .map(|i| {
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(i % 3)).await;
                        i
                    })
                })
                .collect();
            let mut sum = 0;
            for t in tasks {
                sum += t.await.expect("join");
            }
            sum
        });
        assert_eq!(sum, (0..64).sum::<u64>(), "the free worker runs everything");
        assert!(p.set_hold(false));
        assert_eq!(wait_for(0), 0, "released");
        assert!(p.set_hold(true));
        work_then_park();
        assert_eq!(wait_for(1), 1);
        assert!(p.set_spread(true));
        assert_eq!(wait_for(0), 0, "spreading releases the held worker too");
    }

    /// A task woken from a thread outside the runtime (as the log writer wakes openraft) runs
    /// at once while a worker is held: tokio alone would leave it queued until the hold ends,
    /// because the held worker counts as searching for work.
    #[test]
    fn a_wake_from_outside_releases_the_held_worker() {
        // Far longer than the wait below, so only the release can explain the task running.
        let (p, rt) = two_workers_with_hooks(Duration::from_secs(30));
        let _ = p.runtime.set(rt.handle().clone());
        assert!(p.set_hold(true));
        for round in 0..5 {
            let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            // A task that waits for the value, then both workers busy at once, then idle: one
            // worker is held, the other parks in tokio.
            rt.block_on(async {
                tokio::spawn(async move {
                    let _ = done_tx.send(rx.await);
                });
                let busy = |ms| tokio::spawn(async move { std::thread::sleep(Duration::from_millis(ms)) });
                let (a, b) = (busy(20), busy(60));
                a.await.expect("join");
                b.await.expect("join");
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while p.held_now() != 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(p.held_now(), 1, "round {round}: one worker held");
            let waker = p.clone();
            std::thread::spawn(move || {
                let _ = tx.send(round);
                waker.woke_from_outside();
            })
            .join()
            .expect("waker thread");
            let got = done_rx.recv_timeout(Duration::from_secs(10));
            assert_eq!(got, Ok(Ok(round)), "round {round}: the woken task ran before the hold ran out");
            // Tasks spawned from this thread next round would wait out a hold (no release
            // follows them), so start each round unheld.
            assert!(p.set_hold(false));
            assert!(p.set_hold(true));
        }
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
