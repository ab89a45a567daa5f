//! Property: budgets hold under adversarial HELP patterns. With a caller that
//! updates at every deadline, no VM is ever boosted for more than
//! `budget_fraction * budget_window_ns` in any window, checked from the boost
//! intervals alone.

mod common;

use common::strategy::{config, gap, op};
use common::{max_window_use, Driver, Op};
use policy::{Nanos, PolicyConfig, VmId, MS, SEC};
use proptest::prelude::*;

const VMS: VmId = 4;

fn play(cfg: PolicyConfig, weights: Vec<u32>, ops: &[Op]) -> Result<(), TestCaseError> {
    let vms: Vec<(VmId, u32)> = (1..=VMS).zip(weights).collect();
    let window = cfg.budget_window_ns;
    let budget = cfg.budget_ns();
    let mut d = Driver::new(cfg, &vms);
    let mut t: Nanos = 0;
    for o in ops {
        t += o.gap();
        d.run_until(t);
        match *o {
            Op::Help { vm, hint, .. } => d.arbiter.help(vm, t, hint),
            Op::NoHelp { vm, .. } => d.arbiter.no_help(vm, t),
            Op::Update { .. } | Op::Remove { .. } => d.update(t),
        }
    }
    d.run_until(t + 2 * window);
    // Stats count up to the last update.
    d.update(d.now);
    for vm in 1..=VMS {
        let iv = d.closed_intervals(vm);
        let used = max_window_use(&iv, window);
        prop_assert!(
            used <= budget,
            "VM {} used {} of a {} window, budget {}",
            vm,
            used,
            window,
            budget
        );
        prop_assert_eq!(d.arbiter.stats(vm).unwrap().boosted_ns, d.boosted_ns(vm));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn budgets_hold_for_random_patterns(
        cfg in config(),
        weights in proptest::collection::vec(1u32..8, VMS as usize),
        ops in proptest::collection::vec(op(VMS, false), 1..200),
    ) {
        play(cfg, weights, &ops)?;
    }

    /// The greediest guests: they renew just before every lease end, so only
    /// the budget stops them.
    #[test]
    fn budgets_hold_for_greedy_guests(
        cfg in config(),
        weights in proptest::collection::vec(1u32..8, VMS as usize),
        renew_gaps in proptest::collection::vec(gap(), 1..400),
        who in proptest::collection::vec(1..=VMS, 400),
    ) {
        let renew = cfg.max_lease_ns;
        let ops: Vec<Op> = renew_gaps
            .iter()
            .zip(&who)
            .map(|(&g, &vm)| Op::Help { vm, gap: g.min(renew / 2), hint: Nanos::MAX })
            .collect();
        play(cfg, weights, &ops)?;
    }
}

/// One VM asking without end for a minute: it gets the budget, and only the
/// budget, of every window.
#[test]
fn a_lone_greedy_vm_gets_its_budget() {
    let cfg = PolicyConfig {
        max_lease_ns: 10 * SEC,
        budget_window_ns: 10 * SEC,
        quantum_ns: 100 * MS,
        ..PolicyConfig::default()
    };
    let mut d = Driver::new(cfg, &[(1, 1)]);
    let mut t = 0;
    while t < 60 * SEC {
        d.run_until(t);
        d.arbiter.help(1, t, 10 * SEC);
        t += 300 * MS;
    }
    d.run_until(t);
    let iv = d.closed_intervals(1);
    assert_eq!(max_window_use(&iv, 10 * SEC), 5 * SEC);
    // About half of the minute, a little less for the quantum of headroom.
    let total = d.boosted_ns(1);
    assert!(total > 28 * SEC && total <= 30 * SEC, "{total}");
}
