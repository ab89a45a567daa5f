//! A caller of the arbiter that behaves as the simulator and the host daemon
//! must: it calls `update` at every `next_deadline`, applies the changes, and
//! records who was boosted when, so properties can be checked against a
//! computation that does not trust the arbiter.

#![allow(dead_code)]

use std::collections::BTreeMap;

use policy::{Arbiter, BoostChange, Nanos, PolicyConfig, VmId};

pub struct Driver {
    pub arbiter: Arbiter,
    pub now: Nanos,
    /// Boost intervals per VM; the last one is open (`None`) while boosted.
    pub intervals: BTreeMap<VmId, Vec<(Nanos, Option<Nanos>)>>,
    /// Called after every `update` with the time and the changes.
    pub on_update: Vec<(Nanos, Vec<BoostChange>)>,
    pub record_updates: bool,
    /// Updates made at deadlines, to catch a caller flooded with wake-ups.
    pub updates: u64,
}

impl Driver {
    pub fn new(cfg: PolicyConfig, vms: &[(VmId, u32)]) -> Self {
        let mut arbiter = Arbiter::new(cfg);
        for &(vm, w) in vms {
            arbiter.add_vm(vm, w);
        }
        Driver {
            arbiter,
            now: 0,
            intervals: BTreeMap::new(),
            on_update: Vec::new(),
            record_updates: false,
            updates: 0,
        }
    }

    /// Calls `update` at every deadline up to and including `t`, then moves
    /// the clock to `t`.
    pub fn run_until(&mut self, t: Nanos) {
        self.run_until_checked(t, |_, _| {});
    }

    /// As [`Driver::run_until`], calling `check` after every update.
    pub fn run_until_checked(&mut self, t: Nanos, mut check: impl FnMut(&Arbiter, Nanos)) {
        let mut same_time_calls = 0;
        let mut last = None;
        while let Some(d) = self.arbiter.next_deadline() {
            if d > t {
                break;
            }
            assert!(
                d >= self.now,
                "deadline {d} is before the clock {}",
                self.now
            );
            if last == Some(d) {
                same_time_calls += 1;
                assert!(same_time_calls < 4, "no progress at {d}");
            } else {
                same_time_calls = 0;
            }
            last = Some(d);
            self.updates += 1;
            assert!(
                self.updates < 200_000,
                "too many updates, at {d}: {:?}",
                self.arbiter
            );
            self.update(d);
            check(&self.arbiter, d);
        }
        self.now = self.now.max(t);
    }

    pub fn update(&mut self, t: Nanos) {
        self.now = self.now.max(t);
        let changes = self.arbiter.update(t);
        self.apply(t, &changes);
        if self.record_updates {
            self.on_update.push((t, changes));
        }
    }

    pub fn remove(&mut self, vm: VmId, t: Nanos) {
        self.run_until(t);
        let changes = self.arbiter.remove_vm(vm, t);
        self.apply(t, &changes);
    }

    /// Applies changes, checking they make sense: no double boost, no
    /// unboost of a VM that is not boosted, never more boosted VMs than slots.
    pub fn apply(&mut self, t: Nanos, changes: &[BoostChange]) {
        for c in changes {
            match *c {
                BoostChange::Boost(vm) => {
                    let iv = self.intervals.entry(vm).or_default();
                    assert!(
                        iv.last().is_none_or(|l| l.1.is_some()),
                        "VM {vm} boosted twice"
                    );
                    iv.push((t, None));
                }
                BoostChange::Unboost(vm, _) => {
                    let last = self
                        .intervals
                        .get_mut(&vm)
                        .and_then(|iv| iv.last_mut())
                        .filter(|l| l.1.is_none())
                        .unwrap_or_else(|| panic!("VM {vm} unboosted but not boosted"));
                    last.1 = Some(t);
                }
            }
        }
        let boosted: Vec<VmId> = self
            .intervals
            .iter()
            .filter(|(_, iv)| iv.last().is_some_and(|l| l.1.is_none()))
            .map(|(&vm, _)| vm)
            .collect();
        assert_eq!(
            boosted,
            self.arbiter.boosted(),
            "the changes and the arbiter disagree"
        );
        // Raised newcomers are boosted beyond the slots; the others fit in
        // the slots left.
        let raised = self.arbiter.raised();
        let others = boosted
            .iter()
            .filter(|vm| raised.binary_search(vm).is_err())
            .count();
        assert!(
            others + raised.len() <= self.arbiter.config().max_boosted.max(raised.len()),
            "at {t}: boosted {boosted:?}, raised {raised:?}, {} slots",
            self.arbiter.config().max_boosted
        );
    }

    /// Closed intervals of `vm`, counting an open one as ending at `self.now`.
    pub fn closed_intervals(&self, vm: VmId) -> Vec<(Nanos, Nanos)> {
        self.intervals
            .get(&vm)
            .map(|iv| {
                iv.iter()
                    .map(|&(s, e)| (s, e.unwrap_or(self.now)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Total boosted time of `vm` up to `self.now`.
    pub fn boosted_ns(&self, vm: VmId) -> Nanos {
        self.closed_intervals(vm).iter().map(|&(s, e)| e - s).sum()
    }
}

/// The most boosted time inside any window of length `w`, computed from
/// the intervals alone. The maximum is reached by a window that starts at
/// an interval start or ends at an interval end.
pub fn max_window_use(intervals: &[(Nanos, Nanos)], w: Nanos) -> Nanos {
    let use_in = |from: Nanos, to: Nanos| -> Nanos {
        intervals
            .iter()
            .map(|&(s, e)| e.min(to).saturating_sub(s.max(from)))
            .sum()
    };
    intervals
        .iter()
        .flat_map(|&(s, e)| [use_in(s, s + w), use_in(e.saturating_sub(w), e)])
        .max()
        .unwrap_or(0)
}

/// One step of a guest population's behaviour, `gap` after the previous one.
#[derive(Clone, Debug)]
pub enum Op {
    Help {
        vm: VmId,
        gap: Nanos,
        hint: Nanos,
    },
    NoHelp {
        vm: VmId,
        gap: Nanos,
    },
    /// The caller updates at a time of its own (a message for someone else).
    Update {
        gap: Nanos,
    },
    Remove {
        vm: VmId,
        gap: Nanos,
    },
}

impl Op {
    pub fn gap(&self) -> Nanos {
        match *self {
            Op::Help { gap, .. }
            | Op::NoHelp { gap, .. }
            | Op::Update { gap }
            | Op::Remove { gap, .. } => gap,
        }
    }
}

pub mod strategy {
    use super::*;
    use policy::{MS, SEC};
    use proptest::prelude::*;

    /// Gaps from a few nanoseconds to a few seconds, most of them short.
    pub fn gap() -> impl Strategy<Value = Nanos> {
        prop_oneof![
            3 => 0..MS,
            4 => 0..200 * MS,
            2 => 0..3 * SEC,
        ]
    }

    /// HELP hints from nothing to far beyond any lease.
    pub fn hint() -> impl Strategy<Value = Nanos> {
        prop_oneof![
            1 => Just(0),
            3 => 0..500 * MS,
            3 => 0..5 * SEC,
            1 => Just(Nanos::MAX),
        ]
    }

    pub fn op(vms: VmId, with_remove: bool) -> impl Strategy<Value = Op> {
        let remove_weight = if with_remove { 1 } else { 0 };
        prop_oneof![
            8 => (1..=vms, gap(), hint()).prop_map(|(vm, gap, hint)| Op::Help { vm, gap, hint }),
            3 => (1..=vms, gap()).prop_map(|(vm, gap)| Op::NoHelp { vm, gap }),
            2 => gap().prop_map(|gap| Op::Update { gap }),
            remove_weight => (1..=vms, gap()).prop_map(|(vm, gap)| Op::Remove { vm, gap }),
        ]
    }

    /// Configurations where leases, budgets and quanta are all of the same
    /// order, so they interact.
    pub fn config() -> impl Strategy<Value = PolicyConfig> {
        (
            (
                1..3 * SEC,
                100 * MS..10 * SEC,
                0.02f64..=1.0,
                1usize..=3,
                10 * MS..300 * MS,
            ),
            (1u32..=30, 0..3 * SEC, 0..10 * SEC),
        )
            .prop_map(
                |((lease, window, fraction, slots, quantum), (factor, quiet, raise))| {
                    PolicyConfig {
                        max_lease_ns: lease,
                        budget_window_ns: window,
                        budget_fraction: fraction,
                        max_boosted: slots,
                        quantum_ns: quantum,
                        newcomer_factor: factor,
                        newcomer_quiet_ns: quiet,
                        newcomer_raise_ns: raise,
                    }
                },
            )
    }
}
