//! Adaptive polling before a queue thread sleeps, after QEMU's AioContext
//! polling (`util/aio-posix.c`: `run_poll_handlers()` polls the handlers
//! for up to `poll_ns` before `ppoll`/`epoll_wait`, and
//! `adjust_polling_time()` moves `poll_ns` with the time the thread then
//! waited, `block_ns`).
//!
//! A queue thread that has just issued a request, or answered one, would
//! otherwise go back to `epoll_wait` and be woken again for the next event
//! (the I/O's completion, the guest's next request): a sleep, a wake-up and
//! a trip through the run-queue each time. Polling the io_uring's
//! completion queue and the virtqueue's avail index for a short while
//! instead catches an event that comes soon without that round trip.
//! Bounded, and adaptive so that it costs nothing when it does not pay: a
//! wait that turns out longer than [`POLL_MAX_NS`] turns the window off
//! (0) until a short wait is seen again; an idle queue polls at most one
//! window after its last event and then sleeps.
//!
//! One window per event source, as QEMU keeps one per handler
//! (`AioPolledEvent`): under TCG the I/O completes in tens of µs while the
//! guest's next request at depth 1 comes hundreds of µs later, and a single
//! window shared by both would be shrunk by the one and never serve the
//! other.

use std::time::Duration;

/// The longest window: QEMU's default `poll-max-ns` for an iothread
/// (`IOTHREAD_POLL_MAX_NS_DEFAULT`, 32768 ns, iothread.c; "max polling
/// times around 16-32 microseconds yield IOPS improvements for both
/// iodepth=1 and iodepth=32 workloads" on NVMe, its comment says).
pub const POLL_MAX_NS: u64 = 32_768;
/// The first window after a short wait: QEMU's `adjust_polling_time()`
/// starts at 4000 ns ("start polling at 4 microseconds").
pub const POLL_START_NS: u64 = 4_000;
/// How the window grows after a wait it would have caught: QEMU's default
/// `poll-grow` (0, meaning 2).
pub const POLL_GROW: u64 = 2;

/// One event source's polling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptivePoll {
    ns: u64,
    /// The longest window (QEMU's `poll-max-ns`); 0 never polls.
    max: u64,
}

impl Default for AdaptivePoll {
    fn default() -> AdaptivePoll {
        AdaptivePoll::new(POLL_MAX_NS)
    }
}

impl AdaptivePoll {
    /// A window that opens up to `max_ns` (0: never polls).
    pub fn new(max_ns: u64) -> AdaptivePoll {
        AdaptivePoll { ns: 0, max: max_ns }
    }

    /// How long to poll now (zero: sleep at once).
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.ns)
    }

    /// Learns from a wait of `block_ns` (polling included) for this
    /// source, as `adjust_polling_time()` does with QEMU's default
    /// `poll-shrink` (0: a wait too long to poll for turns polling off).
    pub fn adjust(&mut self, block_ns: u64) {
        if block_ns <= self.ns {
            // Caught by the window: the sweet spot.
        } else if block_ns > self.max {
            self.ns = 0;
        } else if self.ns < self.max {
            self.ns = if self.ns == 0 {
                POLL_START_NS.min(self.max)
            } else {
                (self.ns * POLL_GROW).min(self.max)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_waits_open_the_window_up_to_the_maximum_and_a_long_one_closes_it() {
        let mut p = AdaptivePoll::default();
        assert_eq!(p.window(), Duration::ZERO);
        // A wait the window could have caught opens it, then doubles it.
        p.adjust(10_000);
        assert_eq!(p.window().as_nanos() as u64, POLL_START_NS);
        p.adjust(10_000);
        assert_eq!(p.window().as_nanos() as u64, 2 * POLL_START_NS);
        // A wait inside the window leaves it as it is.
        p.adjust(1_000);
        assert_eq!(p.window().as_nanos() as u64, 2 * POLL_START_NS);
        // Waits of 30 µs: 16 µs, then 32 µs, which catches them.
        for _ in 0..10 {
            p.adjust(30_000);
        }
        assert_eq!(p.window().as_nanos() as u64, 8 * POLL_START_NS);
        // Longer waits, still under the maximum: up to the maximum.
        p.adjust(32_500);
        assert_eq!(p.window().as_nanos() as u64, POLL_MAX_NS);
        // Idle (a wait longer than any window): no polling at all.
        p.adjust(1_000_000);
        assert_eq!(p.window(), Duration::ZERO);
        p.adjust(1_000_000);
        assert_eq!(p.window(), Duration::ZERO);
    }

    #[test]
    fn a_maximum_of_zero_never_polls() {
        let mut p = AdaptivePoll::new(0);
        for wait in [0, 1, 1_000, 10_000] {
            p.adjust(wait);
            assert_eq!(p.window(), Duration::ZERO);
        }
    }
}
