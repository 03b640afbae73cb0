//! Keeps a thread polling the runtime's timers and sockets while a handler blocks its
//! own.
//!
//! Tokio polls its timers and sockets from a worker thread that has nothing to run and
//! parks on them. A thread leaving that park to run a task does not wake another to
//! take its place (tokio's eager hand-off of the driver is an unstable option). If the
//! task it runs is a handler that blocks the thread, no thread polls the timers or the
//! sockets until the handler returns, though the other threads sit idle: attempt
//! timeouts do not fire, heartbeats are not sent, the store's answers are not read. In
//! the torture suite's blocking handler (a worker with one slot and two threads, a
//! handler blocking 2.5 s), the attempt timeout due at 600 ms now and then fired only
//! when the handler returned (1 run of 6 on a quiet machine, more on a busy one);
//! the tests below show the stall every time. A task spawned on every release of a
//! PostgreSQL connection had hidden it, by waking a thread that then parked on the
//! timers.
//!
//! So, while any handler is alive, a thread of the worker's own (`revenant-nudge`)
//! spawns an empty task onto the runtime every [`TICK`], from outside it. Tokio wakes a
//! parked thread to run it, and that thread, with nothing else to do, parks on the
//! timers and sockets. While a handler blocks a thread, a timer fires or an answer is
//! read at most a tick late, as long as another thread is free; a worker whose every
//! thread is blocked is beyond this (its leases run out, docs/reliability.md). It costs
//! a wake-up per tick while handlers run and nothing while none does. On a
//! current-thread runtime there is no other thread to wake, and it is not started.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};

/// How often the nudging thread wakes: the most a timer or an answer is late while a
/// handler blocks a thread.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Counts the handlers alive (their tasks not yet ended), for the nudging thread.
#[derive(Clone, Default)]
pub(crate) struct Alive(Arc<AtomicUsize>);

impl Alive {
    /// Counts one handler until the guard is dropped (with the handler's task).
    pub(crate) fn enter(&self) -> AliveGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        AliveGuard(self.0.clone())
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// One handler counted in [`Alive`].
pub(crate) struct AliveGuard(Arc<AtomicUsize>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The nudging thread; stops within a tick of being dropped.
pub(crate) struct Nudger {
    stop: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl Nudger {
    /// Starts the thread on the current runtime, unless it has a single thread (or
    /// the thread cannot be started, which is logged: the worker runs without it).
    pub(crate) fn start(alive: Alive) -> Option<Nudger> {
        let runtime = Handle::try_current().ok()?;
        if runtime.runtime_flavor() == RuntimeFlavor::CurrentThread {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let started = std::thread::Builder::new()
            .name("revenant-nudge".into())
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    std::thread::park_timeout(TICK);
                    if alive.any() && !stopped.load(Ordering::Acquire) {
                        // From outside the runtime: it goes to the shared queue, and
                        // a parked thread is woken for it.
                        drop(runtime.spawn(async {}));
                    }
                }
            });
        match started {
            Ok(thread) => Some(Nudger {
                stop,
                thread: thread.thread().clone(),
            }),
            Err(err) => {
                tracing::warn!(error = %err, "could not start the thread that keeps timers going while a handler blocks its thread; running without it");
                None
            }
        }
    }
}

impl Drop for Nudger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_current_thread_runtime_gets_no_nudger() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        assert!(Nudger::start(Alive::default()).is_none());
    }

    /// How late a 200 ms timer fires while another task blocks, for 1.5 s, the thread
    /// that was polling the timers when it woke that task.
    fn a_timer_beside_a_blocked_thread(nudge: bool) -> Duration {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let alive = Alive::default();
            let _nudger = nudge.then(|| Nudger::start(alive.clone()).expect("started"));
            let _handler = alive.enter();
            // Both threads idle, one of them parked on the timers.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let timer = tokio::spawn(async {
                let start = tokio::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(200)).await;
                start.elapsed()
            });
            // Woken by the timers, so it runs on the thread that polled them.
            let blocker = tokio::spawn(async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                std::thread::sleep(Duration::from_millis(1_500));
            });
            let fired_after = timer.await.unwrap();
            blocker.await.unwrap();
            fired_after
        })
    }

    #[test]
    fn a_timer_fires_while_a_task_blocks_the_thread_that_polled_the_timers() {
        // Without the nudger it fires when the block ends, 1.5 s in (tokio 1.54; see
        // the module docs). The bound leaves a busy machine a second.
        let late = a_timer_beside_a_blocked_thread(true);
        assert!(late < Duration::from_millis(1_200), "fired after {late:?}");
    }

    #[test]
    #[ignore = "shows tokio's behaviour without the nudger; run by hand"]
    fn without_the_nudger_the_timer_waits_for_the_block() {
        let late = a_timer_beside_a_blocked_thread(false);
        assert!(late >= Duration::from_millis(1_400), "fired after {late:?}");
    }

    #[test]
    fn alive_counts_until_the_guard_is_dropped() {
        let alive = Alive::default();
        let one = alive.enter();
        let two = alive.enter();
        assert!(alive.any());
        drop(one);
        assert!(alive.any());
        drop(two);
        assert!(!alive.any());
    }
}
