//! Splitting work across threads by output rows, on a persistent pool.
//!
//! Decoding a small model issues hundreds of small parallel operations per
//! token, so starting threads per operation would cost more than the work.
//! [`Threads`] keeps `n - 1` workers alive; the calling thread is worker 0.
//! A call splits the items into `n` fixed *parts* and publishes the job; a
//! worker (spinning briefly, then parked) claims part `i`, its own, while
//! the caller runs part 0 and then claims every part no worker has claimed
//! yet. So a worker the OS has descheduled (another process on its core)
//! never holds the caller up: the caller does its part instead.
//!
//! Contract that keeps results deterministic: part `i` always covers the
//! same items and is passed index `i` (for per-part scratch space), and what
//! is computed for an item does not depend on which thread runs it. Results
//! are therefore bit-identical for any thread count and any scheduling.
//!
//! Panics: a part that panics, on a worker or on the caller, is caught where
//! it ran and its part still counts as done; the caller always waits for
//! every part (the workers borrow its closure until then) and then resumes
//! the first panic. So a panic reaches the caller of
//! [`Threads::split_indexed`] as if the work had run on its own thread, the
//! workers live on, and the pool serves the next call.

use std::any::Any;
use std::cell::Cell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Spin iterations a worker waits for the next job before parking.
const SPIN_LIMIT: u32 = 1 << 14;

thread_local! {
    /// Set while this thread runs a pool job: nested calls run inline.
    static IN_JOB: Cell<bool> = const { Cell::new(false) };
}

/// A job as the workers see it: a type-erased borrowed closure.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize, Range<usize>) + Sync),
    n_items: usize,
}

/// The current job and which of its parts have been claimed; guarded by a
/// mutex, so a worker that wakes late can never see a half-written job.
struct Slot {
    generation: u64,
    job: Option<Job>,
    /// `claimed[i]`: part i has been taken by some thread.
    claimed: Vec<bool>,
}

// SAFETY: the raw closure pointer in `job` is only dereferenced by a thread
// that claimed a part of that very job (under the slot's lock); the caller
// does not return, and so keeps the closure alive, until every part it
// published is done. The closure itself is `Sync`.
unsafe impl Send for Slot {}

struct Shared {
    n_threads: usize,
    slot: Mutex<Slot>,
    /// Bumped once per job (after the slot is written); workers watch it.
    generation: AtomicU64,
    /// Parts of the current job finished so far (panicked ones included).
    done: AtomicUsize,
    /// The first panic of the current job's parts, for the caller to resume.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    park_lock: Mutex<()>,
    park_cvar: Condvar,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims part `i` of job `generation` if it is still open; returns the
    /// job to run.
    fn claim(&self, generation: u64, i: usize) -> Option<Job> {
        let mut slot = self.slot();
        if slot.generation != generation || slot.claimed[i] {
            return None;
        }
        slot.claimed[i] = true;
        slot.job
    }

    /// Runs part `i` of `job`, keeping a panic for the caller, and counts
    /// the part done either way.
    fn run_counted(&self, f: &(dyn Fn(usize, Range<usize>) + Sync), i: usize, n_items: usize) {
        if let Err(payload) = run_part(f, i, self.n_threads, n_items) {
            let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
        }
        self.done.fetch_add(1, Ordering::AcqRel);
    }
}

/// The range of `n_items` that part `i` of `n` covers.
fn range_of(i: usize, n: usize, n_items: usize) -> Range<usize> {
    let per = n_items.div_ceil(n);
    (i * per).min(n_items)..((i + 1) * per).min(n_items)
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises callers: one job at a time.
    dispatch: Mutex<()>,
}

impl Pool {
    /// Starts `n_threads - 1` workers; if the OS refuses one, those already
    /// started are stopped again and the error returned.
    fn new(n_threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            n_threads,
            slot: Mutex::new(Slot {
                generation: 0,
                job: None,
                claimed: vec![true; n_threads],
            }),
            generation: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park_lock: Mutex::new(()),
            park_cvar: Condvar::new(),
        });
        let mut pool = Pool {
            shared,
            workers: Vec::with_capacity(n_threads.saturating_sub(1)),
            dispatch: Mutex::new(()),
        };
        for i in 1..n_threads {
            let shared = pool.shared.clone();
            let worker = std::thread::Builder::new()
                .name(format!("ferrite-worker-{i}"))
                .spawn(move || worker_loop(&shared, i))?;
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    fn run(&self, n_items: usize, f: &(dyn Fn(usize, Range<usize>) + Sync)) {
        let _one_at_a_time = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let n = s.n_threads;
        // SAFETY: only the lifetime is erased. The pointer is dereferenced
        // only by threads that claimed a part of this job, and this function
        // does not return before all n parts are done.
        let f_static: *const (dyn Fn(usize, Range<usize>) + Sync) =
            unsafe { std::mem::transmute(f) };
        let generation = {
            let mut slot = s.slot();
            slot.generation += 1;
            slot.job = Some(Job {
                f: f_static,
                n_items,
            });
            slot.claimed.iter_mut().for_each(|c| *c = false);
            slot.claimed[0] = true; // part 0 is the caller's
            s.done.store(0, Ordering::SeqCst);
            s.generation.store(slot.generation, Ordering::SeqCst);
            slot.generation
        };
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.park_cvar.notify_all();
        }
        s.run_counted(f, 0, n_items);
        // Take over every part no worker has started.
        for i in 1..n {
            if s.claim(generation, i).is_some() {
                s.run_counted(f, i, n_items);
            }
        }
        // Wait for the parts workers did claim: even after a panic, since
        // they borrow `f` until they report their part done.
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) != n {
            spins = spins.saturating_add(1);
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let panicked = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(payload) = panicked {
            resume_unwind(payload);
        }
    }
}

/// Clears [`IN_JOB`] when dropped, so a part that panics does not leave
/// its thread marked as inside a job.
struct InJob;

impl InJob {
    fn enter() -> InJob {
        IN_JOB.with(|flag| flag.set(true));
        InJob
    }
}

impl Drop for InJob {
    fn drop(&mut self) {
        IN_JOB.with(|flag| flag.set(false));
    }
}

/// Runs part `i` of `n` of a job, catching a panic of `f`.
fn run_part(
    f: &(dyn Fn(usize, Range<usize>) + Sync),
    i: usize,
    n: usize,
    n_items: usize,
) -> Result<(), Box<dyn Any + Send>> {
    let range = range_of(i, n, n_items);
    if range.is_empty() {
        return Ok(());
    }
    let _in_job = InJob::enter();
    // AssertUnwindSafe: whatever state `f` left half-updated belongs to the
    // caller of `Threads::split_indexed`, which gets the panic back (resumed
    // once every part is done) exactly as if it had run `f` itself.
    catch_unwind(AssertUnwindSafe(|| f(i, range)))
}

fn worker_loop(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new generation: spin, then park.
        let mut spins = 0u32;
        loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            let guard = s
                .park_cvar
                .wait_while(guard, |_| {
                    s.generation.load(Ordering::SeqCst) == seen
                        && !s.shutdown.load(Ordering::SeqCst)
                })
                .unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(guard);
            spins = 0;
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        if let Some(job) = s.claim(seen, index) {
            // SAFETY: we claimed a part of this job, so the dispatcher is
            // still inside `Pool::run` and keeps the closure alive until we
            // report the part done below.
            let f = unsafe { &*job.f };
            s.run_counted(f, index, job.n_items);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .park_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.park_cvar.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The cores this process may run on (1 if the OS does not say).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A handle to a pool of `count()` threads (the caller included). Cheap to
/// clone; the workers stop when the last handle is dropped.
#[derive(Clone)]
pub struct Threads {
    n: usize,
    pool: Option<Arc<Pool>>,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Threads({})", self.n)
    }
}

impl Threads {
    /// A pool of `n` threads (at least 1; 1 means run on the caller only).
    /// Panics if the OS cannot start them; [`Threads::try_new`] says why
    /// instead.
    pub fn new(n: usize) -> Threads {
        Threads::try_new(n).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Threads::new`], with an error if the OS refuses to start a
    /// thread (too many threads, no memory for their stacks).
    pub fn try_new(n: usize) -> Result<Threads, crate::Error> {
        let n = n.max(1);
        let pool = match n {
            1 => None,
            _ => Some(Arc::new(Pool::new(n).map_err(|e| {
                crate::Error::Internal(format!("cannot start {n} threads: {e}"))
            })?)),
        };
        Ok(Threads { n, pool })
    }

    /// One thread per available core.
    pub fn all_cores() -> Threads {
        Threads::new(available_cores())
    }

    /// How many threads.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Calls `f` on contiguous ranges that together cover `0..n_items`,
    /// concurrently, one range per thread. Returns when all are done.
    pub fn split<F: Fn(Range<usize>) + Sync>(&self, n_items: usize, f: F) {
        self.split_indexed(n_items, |_, range| f(range));
    }

    /// As [`Threads::split`], also passing the index (`0..count()`) of the
    /// thread running each range, for per-thread scratch space. Thread `i`
    /// always gets the same range for the same `n_items`.
    pub fn split_indexed<F: Fn(usize, Range<usize>) + Sync>(&self, n_items: usize, f: F) {
        match &self.pool {
            Some(pool) if n_items > 1 && !IN_JOB.with(|flag| flag.get()) => pool.run(n_items, &f),
            _ => {
                // One thread, or a nested call from inside a job: run every
                // thread's range here, in order.
                for i in 0..self.n {
                    let range = range_of(i, self.n, n_items);
                    if !range.is_empty() {
                        f(i, range);
                    }
                }
            }
        }
    }
}

pub use ferrite_kernels::disjoint::DisjointSlice;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_item_once_for_any_thread_count() {
        for n in 1..=5 {
            let threads = Threads::new(n);
            for n_items in [0, 1, 2, 3, 7, 64, 1000] {
                let counts: Vec<AtomicU32> = (0..n_items).map(|_| AtomicU32::new(0)).collect();
                threads.split(n_items, |r| {
                    for i in r {
                        counts[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(
                    counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                    "n={n} items={n_items}"
                );
            }
        }
    }

    #[test]
    fn many_small_jobs_and_nested_calls() {
        let threads = Threads::new(3);
        let total = AtomicU32::new(0);
        for _ in 0..2000 {
            threads.split(4, |r| {
                threads.split(2, |inner| {
                    total.fetch_add((r.len() * inner.len()) as u32, Ordering::Relaxed);
                });
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 2000 * 4 * 2);
    }

    #[test]
    fn pool_shared_between_callers() {
        let threads = Threads::new(2);
        std::thread::scope(|s| {
            for _ in 0..3 {
                let t = threads.clone();
                s.spawn(move || {
                    for _ in 0..200 {
                        let sum = AtomicU32::new(0);
                        t.split(10, |r| {
                            sum.fetch_add(r.len() as u32, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 10);
                    }
                });
            }
        });
    }

    /// Runs `f` on a thread of its own and fails the test if it has not
    /// returned within a minute (a pool that loses a part spins forever).
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the pool hung after a panic")
    }

    /// A part that panics, on the caller (part 0) or on a worker, reaches
    /// the caller as a panic once every other part is done; the pool then
    /// serves the next job, and no thread stays marked as inside a job.
    #[test]
    fn a_panicking_part_reaches_the_caller_and_the_pool_lives_on() {
        for (n, bad_part) in [(2, 0), (2, 1), (3, 1), (3, 2), (4, 0)] {
            let (caught, finished, in_job_after, sum) = within_a_minute(move || {
                let threads = Threads::new(n);
                let finished = Arc::new(AtomicU32::new(0));
                let result = catch_unwind(AssertUnwindSafe(|| {
                    threads.split_indexed(n * 4, |i, _| {
                        if i == bad_part {
                            panic!("part {i} fails");
                        }
                        // The other parts outlive the panic: they must
                        // still be able to use what the caller lent them.
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        finished.fetch_add(1, Ordering::SeqCst);
                    })
                }));
                let caught = result
                    .err()
                    .and_then(|p| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let in_job_after = IN_JOB.with(|flag| flag.get());
                let sum = AtomicU32::new(0);
                threads.split(100, |r| {
                    sum.fetch_add(r.len() as u32, Ordering::Relaxed);
                });
                (
                    caught,
                    finished.load(Ordering::SeqCst),
                    in_job_after,
                    sum.load(Ordering::Relaxed),
                )
            });
            assert_eq!(caught, format!("part {bad_part} fails"), "n={n}");
            assert_eq!(finished, n as u32 - 1, "n={n}: every other part ran");
            assert!(!in_job_after, "n={n}: the caller is not left inside a job");
            assert_eq!(sum, 100, "n={n}: the pool serves the next job");
        }
    }
}
