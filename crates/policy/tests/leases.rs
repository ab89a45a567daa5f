//! Property: leases expire. A VM that stops sending HELP is unboosted by
//! `last_help + min(hint, max_lease)`, and one that says NO-HELP is
//! unboosted at once, whatever else happens around it.

mod common;

use std::collections::BTreeMap;

use common::strategy::{config, op};
use common::{Driver, Op};
use policy::{Nanos, VmId};
use proptest::prelude::*;

const VMS: VmId = 4;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn boosts_end_when_leases_do(
        cfg in config(),
        weights in proptest::collection::vec(1u32..8, VMS as usize),
        ops in proptest::collection::vec(op(VMS, true), 1..120),
    ) {
        let vms: Vec<(VmId, u32)> = (1..=VMS).zip(weights).collect();
        let max_lease = cfg.max_lease_ns;
        let mut d = Driver::new(cfg, &vms);
        // When each VM's help ends, by the rules: set by HELP, ended by NO-HELP.
        let mut lease_end: BTreeMap<VmId, Nanos> = BTreeMap::new();
        let check = |lease_end: &BTreeMap<VmId, Nanos>| {
            let lease_end = lease_end.clone();
            move |a: &policy::Arbiter, now: Nanos| {
                for vm in a.boosted() {
                    let end = lease_end.get(&vm).copied().unwrap_or(0);
                    assert!(now < end, "VM {vm} boosted at {now}, its help ended at {end}");
                }
            }
        };
        let mut t: Nanos = 0;
        for o in &ops {
            t += o.gap();
            d.run_until_checked(t, check(&lease_end));
            match *o {
                Op::Help { vm, hint, .. } => {
                    d.arbiter.help(vm, t, hint);
                    lease_end.insert(vm, t.saturating_add(hint.min(max_lease)));
                }
                Op::NoHelp { vm, .. } => {
                    d.arbiter.no_help(vm, t);
                    lease_end.insert(vm, t);
                }
                Op::Update { .. } => {
                    d.update(t);
                    check(&lease_end)(&d.arbiter, t);
                }
                Op::Remove { vm, .. } => {
                    d.remove(vm, t);
                    d.arbiter.add_vm(vm, 1);
                    lease_end.remove(&vm);
                }
            }
        }
        // Everyone falls silent: all boosts end by their lease ends.
        d.run_until_checked(t + max_lease + 1, check(&lease_end));
        prop_assert!(d.arbiter.boosted().is_empty());
        prop_assert_eq!(d.arbiter.next_deadline(), None);
        for (&vm, iv) in &d.intervals {
            if let Some(&(_, Some(end))) = iv.last() {
                let limit = lease_end.get(&vm).copied().unwrap_or(end);
                prop_assert!(end <= limit, "VM {} unboosted at {} after its lease end {}", vm, end, limit);
            }
        }
    }
}
