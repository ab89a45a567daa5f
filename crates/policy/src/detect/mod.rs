//! Urgency detection: the guest side's judgement of whether one of its
//! applications needs urgent service right now.
//!
//! Two detectors feed the same [`Urgency`] (and [`io_class`] holds CFS-v's
//! host-side I/O classifier):
//!
//! - [`BfqStateDetector`] reads the guest BFQ's own verdict (how many of its
//!   queues are weight-raised). The simulator has it; so would a kernel that
//!   exported it.
//! - [`GuestSignalDetector`] works from what a user-space daemon in a stock
//!   guest can see (execs, per-process I/O, explicit requests) and applies
//!   BFQ's rules to them.
//!
//! Either output goes to a [`crate::HelpClient`], which turns it into
//! messages with leases.

mod bfq_state;
pub mod cpu;
mod guest_signal;
pub mod io_class;
mod softrt;

pub use bfq_state::BfqStateDetector;
pub use guest_signal::{
    CpuReading, GuestEvent, GuestSignalConfig, GuestSignalDetector, ON_CPU_SHARE_PERCENT,
};
pub use io_class::{IoClassifier, IoRole};
pub use softrt::{Burst, SoftRtClassifier, SoftRtRules};

use crate::protocol::{HelpReason, Resource};
use crate::Nanos;

/// The guest's need at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Help is needed with `resource`, for `reason`, for about `duration_ns`
    /// more.
    Help {
        resource: Resource,
        reason: HelpReason,
        duration_ns: Nanos,
    },
    /// No help is needed.
    NoHelp,
}

/// How strong a reason is, to report the strongest of several live needs.
///
/// Explicit requests come first (a user or a program said so). Soft real-time
/// comes next because BFQ raises a soft real-time queue's weight far more
/// than an interactive one's. Then the interactive family: the scheduler's
/// own verdict, then an exec (a starting application, the case the start-up
/// measurements are about), then an I/O resume (BFQ's weakest guess).
pub fn reason_rank(reason: HelpReason) -> u8 {
    match reason {
        HelpReason::Explicit => 5,
        HelpReason::SoftRealTime => 4,
        HelpReason::Interactive => 3,
        HelpReason::Exec => 2,
        HelpReason::IoResume => 1,
        HelpReason::Other(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_distinct_and_explicit_is_strongest() {
        let all = [
            HelpReason::Explicit,
            HelpReason::SoftRealTime,
            HelpReason::Interactive,
            HelpReason::Exec,
            HelpReason::IoResume,
            HelpReason::Other(3),
        ];
        let ranks: Vec<u8> = all.iter().map(|&r| reason_rank(r)).collect();
        assert!(ranks.windows(2).all(|w| w[0] > w[1]));
    }
}
