//! The host's policy knobs: how long help lasts, how much of it a VM may
//! have, and how it is shared.

use crate::{Nanos, SEC};

/// Default [`PolicyConfig::max_lease_ns`]. Design choice: a guest that
/// crashes or loses its NO-HELP keeps its boost for at most 1 s, while a
/// healthy guest renews twice a second, which costs nothing.
pub const DEFAULT_MAX_LEASE_NS: Nanos = SEC;

/// Default [`PolicyConfig::budget_window_ns`]: 60 s. Design choice: several
/// application start-ups long, and more than twice BFQ's longest interactive
/// weight raising (25 s), so that one slow start-up fits in the budget even
/// when the guest's background processes asked for help shortly before (BFQ
/// raises every new process, a streaming reader's too). Measured with
/// `tandem sim run vbfq`: with a 10 s window the guest's own readers spent the
/// budget before xterm started, and help-rt start-ups under host load rose to
/// 4x idle (1r-seq guest, `hdd-1.8in`); with 60 s they stay within 1.35x.
pub const DEFAULT_BUDGET_WINDOW_NS: Nanos = 60 * SEC;

/// Default [`PolicyConfig::budget_fraction`]. Design choice: a VM may be
/// boosted for at most half of any window, so the others always get at least
/// the other half.
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.5;

/// Default [`PolicyConfig::max_boosted`]. Design choice: with one disk,
/// boosting everyone is boosting no one. VMs raised as newcomers (starting
/// applications) are boosted beyond the slots (see [`crate::Arbiter`]).
pub const DEFAULT_MAX_BOOSTED: usize = 1;

/// Default [`PolicyConfig::quantum_ns`]: 1 s. Design choice: a host actuator
/// from user space (an ioprio class, a cgroup weight) takes effect when the
/// elevator next requeues the VM's queue, after the queues ahead of it have had
/// their slices (up to BFQ's budget timeout, `bfq_timeout` = 125 ms, each): a
/// few hundred milliseconds on a loaded disk. A quantum much shorter than that
/// would hand the slot over before the boost ever acts.
pub const DEFAULT_QUANTUM_NS: Nanos = SEC;

/// Default [`PolicyConfig::newcomer_factor`]: 30, BFQ's interactive weight
/// raising coefficient (`bfq_wr_coeff`). A VM that starts asking for help
/// for a start after a quiet spell is, like a process that starts doing I/O
/// after a long idle time, most likely starting an application: it is
/// raised for a while, boosted at once beyond the slots (taking a slot from
/// a VM that is not raised), and weighs 30 times more in the arbitration.
/// 1 turns this off.
pub const DEFAULT_NEWCOMER_FACTOR: u32 = 30;

/// Default [`PolicyConfig::newcomer_quiet_ns`]: 2 s, BFQ's
/// `bfq_wr_min_idle_time`: a queue idle that long is raised again when it
/// restarts.
pub const DEFAULT_NEWCOMER_QUIET_NS: Nanos = 2 * SEC;

/// Default [`PolicyConfig::newcomer_raise_ns`]: 8 s. Design choice: BFQ raises
/// an application for 3 to 25 s depending on the device's speed; a start-up
/// with the host's help took 3 to 5 s on the slowest simulated device
/// (`tandem sim run vbfq`). Longer, a VM could hold the raise with a stream of
/// requests after its start-up; the budget bounds it anyway.
pub const DEFAULT_NEWCOMER_RAISE_NS: Nanos = 8 * SEC;

/// The host's policy knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// A HELP lasts at most this long unless renewed.
    pub max_lease_ns: Nanos,
    /// Length of the sliding window over which budgets are counted.
    pub budget_window_ns: Nanos,
    /// Largest share of any window a VM may spend boosted, in (0, 1]. At 1 the
    /// budget never binds.
    pub budget_fraction: f64,
    /// How many VMs that are not raised as newcomers may be boosted at
    /// once, less one for each raised one boosted (those are all boosted).
    pub max_boosted: usize,
    /// How long a boosted VM keeps its slot before the slots are shared out
    /// again, when more VMs ask than there are slots.
    pub quantum_ns: Nanos,
    /// Weight factor of a VM that starts asking after `newcomer_quiet_ns`
    /// without asking, for `newcomer_raise_ns` at most (1: no raising).
    pub newcomer_factor: u32,
    pub newcomer_quiet_ns: Nanos,
    pub newcomer_raise_ns: Nanos,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            max_lease_ns: DEFAULT_MAX_LEASE_NS,
            budget_window_ns: DEFAULT_BUDGET_WINDOW_NS,
            budget_fraction: DEFAULT_BUDGET_FRACTION,
            max_boosted: DEFAULT_MAX_BOOSTED,
            quantum_ns: DEFAULT_QUANTUM_NS,
            newcomer_factor: DEFAULT_NEWCOMER_FACTOR,
            newcomer_quiet_ns: DEFAULT_NEWCOMER_QUIET_NS,
            newcomer_raise_ns: DEFAULT_NEWCOMER_RAISE_NS,
        }
    }
}

impl PolicyConfig {
    /// Checks that the knobs make sense; the error names the knob, its value
    /// and what is accepted.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_lease_ns == 0 {
            return Err("max_lease_ns is 0; it must be at least 1 ns".into());
        }
        if self.budget_window_ns == 0 {
            return Err("budget_window_ns is 0; it must be at least 1 ns".into());
        }
        if !(self.budget_fraction > 0.0 && self.budget_fraction <= 1.0) {
            return Err(format!(
                "budget_fraction is {}; it must be in (0, 1]",
                self.budget_fraction
            ));
        }
        if self.budget_ns() == 0 {
            return Err(format!(
                "budget_fraction {} of budget_window_ns {} is less than 1 ns",
                self.budget_fraction, self.budget_window_ns
            ));
        }
        if self.max_boosted == 0 {
            return Err("max_boosted is 0; at least one VM must be allowed a boost".into());
        }
        if self.quantum_ns == 0 {
            return Err("quantum_ns is 0; it must be at least 1 ns".into());
        }
        if self.newcomer_factor == 0 {
            return Err("newcomer_factor is 0; it must be at least 1 (1: no raising)".into());
        }
        Ok(())
    }

    /// The most boosted time a VM may have in any window, in nanoseconds.
    pub fn budget_ns(&self) -> Nanos {
        let b = (self.budget_window_ns as f64 * self.budget_fraction).floor();
        if b.is_nan() || b < 0.0 {
            0
        } else {
            (b as Nanos).min(self.budget_window_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = PolicyConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.budget_ns(), 30 * SEC);
    }

    #[test]
    fn nonsense_is_refused_by_name() {
        let bad = |f: fn(&mut PolicyConfig), word: &str| {
            let mut c = PolicyConfig::default();
            f(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(word), "{e}");
        };
        bad(|c| c.budget_fraction = 0.0, "budget_fraction");
        bad(|c| c.budget_fraction = 1.5, "budget_fraction");
        bad(|c| c.budget_fraction = f64::NAN, "budget_fraction");
        bad(|c| c.budget_window_ns = 0, "budget_window_ns");
        bad(|c| c.max_boosted = 0, "max_boosted");
        bad(|c| c.quantum_ns = 0, "quantum_ns");
        bad(|c| c.max_lease_ns = 0, "max_lease_ns");
        bad(
            |c| {
                c.budget_window_ns = 3;
                c.budget_fraction = 0.1
            },
            "less than 1 ns",
        );
    }
}
