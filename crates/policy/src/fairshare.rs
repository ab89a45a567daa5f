//! Fair sharing of boost slots among the VMs that ask, in the manner of
//! WF2Q+ (the scheduling discipline behind BFQ's B-WF2Q+).
//!
//! Each competing VM has a virtual start time: the boosted time it has
//! received divided by its weight. The system virtual time advances by the
//! boosted time served divided by the total weight of the competitors, and
//! never lags behind the smallest virtual start. When slots are shared out,
//! the VMs whose virtual start is not ahead of the system virtual time are
//! *eligible*; among them the ones whose next quantum would finish first (in
//! virtual time) win. A VM that starts competing again begins at the system
//! virtual time, so time spent not asking does not turn into a credit it could
//! later use to shut the others out.

use crate::{Nanos, VmId};

/// Virtual time: nanoseconds of boosted service per unit of weight, in units
/// of 1/[`VIRTUAL_UNITS_PER_NS`] so that integer division by a weight keeps
/// its precision.
pub type VirtualTime = u128;

/// Sub-nanosecond resolution of [`VirtualTime`]. Design choice: 2^32 makes
/// the rounding error of one division smaller than a nanosecond for any `u32`
/// weight, and `u128` leaves room for centuries of service.
pub const VIRTUAL_UNITS_PER_NS: u128 = 1 << 32;

/// Virtual time of `service_ns` of service at `weight` (weights below 1 count
/// as 1).
pub fn virtual_service(service_ns: Nanos, weight: u64) -> VirtualTime {
    service_ns as u128 * VIRTUAL_UNITS_PER_NS / weight.max(1) as u128
}

/// The system virtual time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemVirtualTime(pub VirtualTime);

impl SystemVirtualTime {
    /// `served_ns` of boost were given while competitors of total weight
    /// `total_weight` were competing.
    pub fn advance(&mut self, served_ns: Nanos, total_weight: u64) {
        if total_weight > 0 {
            self.0 += virtual_service(served_ns, total_weight);
        }
    }

    /// Never lag behind the smallest virtual start among the competitors, so
    /// at least one of them is eligible.
    pub fn catch_up(&mut self, min_start: Option<VirtualTime>) {
        if let Some(m) = min_start {
            self.0 = self.0.max(m);
        }
    }
}

/// A VM that competes for the free slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub vm: VmId,
    /// Virtual start time.
    pub start: VirtualTime,
    pub weight: u32,
    /// Whether it holds a slot now (its quantum ended): on a tie it gives way
    /// to a VM that has been waiting, so equal VMs take turns every quantum.
    pub holding: bool,
}

/// Picks up to `slots` winners among `candidates`: eligible ones (virtual
/// start not after `system`) first, each group by smallest virtual finish of
/// one `quantum_ns` more, then VMs not holding a slot before holders, then the
/// smaller id. Filling slots
/// with ineligible VMs when too few are eligible keeps every slot in use
/// while anyone asks. The result is in id order.
pub fn pick(
    candidates: &[Candidate],
    system: SystemVirtualTime,
    quantum_ns: Nanos,
    slots: usize,
) -> Vec<VmId> {
    let mut order: Vec<_> = candidates
        .iter()
        .map(|c| {
            let ineligible = c.start > system.0;
            let finish = c.start + virtual_service(quantum_ns, c.weight as u64);
            ((ineligible, finish, c.holding, c.vm), c.vm)
        })
        .collect();
    order.sort_unstable();
    let mut won: Vec<VmId> = order.into_iter().take(slots).map(|(_, vm)| vm).collect();
    won.sort_unstable();
    won
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(vm: VmId, start_ns: Nanos, weight: u32, holding: bool) -> Candidate {
        Candidate {
            vm,
            start: virtual_service(start_ns, 1),
            weight,
            holding,
        }
    }

    #[test]
    fn smallest_finish_among_eligible_wins() {
        let sys = SystemVirtualTime(virtual_service(100, 1));
        let c = [cand(1, 100, 1, false), cand(2, 50, 1, false)];
        assert_eq!(pick(&c, sys, 10, 1), vec![2]);
        // A heavier VM finishes its quantum sooner in virtual time.
        let c = [cand(1, 50, 1, false), cand(2, 60, 4, false)];
        assert_eq!(pick(&c, sys, 100, 1), vec![2]);
    }

    #[test]
    fn ineligible_vms_only_fill_leftover_slots() {
        let sys = SystemVirtualTime(virtual_service(100, 1));
        // VM 2 would finish first but starts in the future.
        let c = [cand(1, 100, 1, false), cand(2, 150, 100, false)];
        assert_eq!(pick(&c, sys, 1000, 1), vec![1]);
        assert_eq!(pick(&c, sys, 1000, 2), vec![1, 2]);
    }

    #[test]
    fn ties_go_to_the_waiting_vm_then_the_smaller_id() {
        let sys = SystemVirtualTime(virtual_service(100, 1));
        let c = [cand(1, 100, 1, true), cand(2, 100, 1, false)];
        assert_eq!(pick(&c, sys, 10, 1), vec![2]);
        let c = [cand(3, 100, 1, false), cand(2, 100, 1, false)];
        assert_eq!(pick(&c, sys, 10, 1), vec![2]);
    }

    #[test]
    fn system_time_advances_by_weight_and_catches_up() {
        let mut s = SystemVirtualTime::default();
        s.advance(100, 4);
        assert_eq!(s.0, virtual_service(25, 1));
        s.catch_up(Some(virtual_service(10, 1)));
        assert_eq!(s.0, virtual_service(25, 1));
        s.catch_up(Some(virtual_service(40, 1)));
        assert_eq!(s.0, virtual_service(40, 1));
        s.advance(100, 0);
        assert_eq!(s.0, virtual_service(40, 1));
    }
}
