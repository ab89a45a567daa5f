//! CFS-v's I/O classifier (Shim and Lee, "CFS-v: I/O Demand-driven VM
//! Scheduler in KVM", Samsung, 2014): a 2-bit counter per host thread
//! that says whether the thread serves a VM's I/O. The simulator's
//! `cfs-v` host scheduler feeds it from its run queues; hostd's `cfsv`
//! mode will feed it from `/proc/PID/task/TID/schedstat` samples.
//!
//! Rules, all from the slides:
//! - a woken thread that runs less than [`SHORT_RUN_NS`] (500 us) before
//!   it blocks again: +1;
//! - a run (a time slice) of more than [`LONG_RUN_NS`] (1 ms): -1;
//! - the counter saturates at 0 and [`COUNT_MAX`] (2 bits);
//! - "I/O-related" at [`IO_RELATED_AT`] (2) or more;
//! - QEMU's main loop, its worker threads and softirq work are always
//!   I/O-related, whatever they ran.

use crate::Nanos;

/// A woken thread that runs less than this before blocking counts up
/// (the slides: "consumes CPU less than 500us").
pub const SHORT_RUN_NS: Nanos = 500_000;
/// A run longer than this counts down (the slides: "consumes time slice
/// more than 1ms").
pub const LONG_RUN_NS: Nanos = 1_000_000;
/// The counter's ceiling: two bits.
pub const COUNT_MAX: u8 = 3;
/// "I/O related" from this count on (the slides: "larger than or equal
/// to 2").
pub const IO_RELATED_AT: u8 = 2;

/// What a host thread is to its VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoRole {
    /// A vCPU thread, or any thread judged by its counter.
    Counted,
    /// QEMU's main loop (or an iothread): always I/O-related.
    MainLoop,
    /// A QEMU worker (the thread pool that issues `preadv`/`pwritev` for
    /// `aio=threads`): always I/O-related.
    Worker,
    /// Softirq work (`ksoftirqd`): always I/O-related.
    Softirq,
}

impl IoRole {
    /// Whether the role is I/O-related whatever the counter says.
    pub fn always_io(self) -> bool {
        !matches!(self, IoRole::Counted)
    }
}

/// One thread's 2-bit I/O counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoClassifier {
    role: IoRole,
    count: u8,
}

impl IoClassifier {
    /// A new thread starts at 0 (not I/O-related unless its role is).
    pub fn new(role: IoRole) -> IoClassifier {
        IoClassifier { role, count: 0 }
    }

    pub fn role(&self) -> IoRole {
        self.role
    }

    pub fn set_role(&mut self, role: IoRole) {
        self.role = role;
    }

    /// The counter, 0..=3.
    pub fn count(&self) -> u8 {
        self.count
    }

    /// One run of the thread: `ran_ns` of CPU in one go, `after_wakeup`
    /// when the run started with a wake-up and ended with the thread
    /// blocking (the +1 rule needs both); a run cut by preemption or still
    /// going at a tick passes `false` and can only count down.
    pub fn on_run(&mut self, ran_ns: Nanos, after_wakeup: bool) {
        if after_wakeup && ran_ns < SHORT_RUN_NS {
            self.count = (self.count + 1).min(COUNT_MAX);
        } else if ran_ns > LONG_RUN_NS {
            self.count = self.count.saturating_sub(1);
        }
    }

    /// Whether the thread is I/O-related now.
    pub fn is_io_related(&self) -> bool {
        self.role.always_io() || self.count >= IO_RELATED_AT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Nanos = 1_000;

    #[test]
    fn short_runs_after_wakeups_make_a_thread_io_related() {
        let mut c = IoClassifier::new(IoRole::Counted);
        assert!(!c.is_io_related());
        c.on_run(100 * US, true);
        assert_eq!(c.count(), 1);
        assert!(!c.is_io_related(), "one short run is not enough");
        c.on_run(499 * US, true);
        assert!(c.is_io_related());
        // Saturates at 3.
        for _ in 0..10 {
            c.on_run(10 * US, true);
        }
        assert_eq!(c.count(), COUNT_MAX);
    }

    #[test]
    fn a_short_run_that_did_not_follow_a_wakeup_does_not_count_up() {
        let mut c = IoClassifier::new(IoRole::Counted);
        c.on_run(100 * US, false);
        c.on_run(100 * US, false);
        assert_eq!(c.count(), 0);
    }

    #[test]
    fn a_long_run_takes_it_back() {
        let mut c = IoClassifier::new(IoRole::Counted);
        for _ in 0..3 {
            c.on_run(50 * US, true);
        }
        assert!(c.is_io_related());
        // Between 500 us and 1 ms: neither rule applies.
        c.on_run(800 * US, true);
        assert_eq!(c.count(), 3);
        c.on_run(1_001 * US, false);
        assert_eq!(c.count(), 2);
        assert!(c.is_io_related());
        c.on_run(5_000 * US, true);
        assert_eq!(c.count(), 1);
        assert!(!c.is_io_related());
        // Saturates at 0.
        for _ in 0..5 {
            c.on_run(10_000 * US, false);
        }
        assert_eq!(c.count(), 0);
        // Exactly 1 ms is not "more than 1 ms".
        c.on_run(50 * US, true);
        c.on_run(LONG_RUN_NS, false);
        assert_eq!(c.count(), 1);
    }

    #[test]
    fn always_io_roles_stay_io_related() {
        for role in [IoRole::MainLoop, IoRole::Worker, IoRole::Softirq] {
            let mut c = IoClassifier::new(role);
            assert!(c.is_io_related());
            for _ in 0..10 {
                c.on_run(50_000 * US, false);
            }
            assert_eq!(c.count(), 0);
            assert!(c.is_io_related(), "{role:?}");
        }
    }
}
