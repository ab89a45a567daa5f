//! CPU coordination on the host side: boosting a VM's vCPU threads while
//! its guest asks for help (`help-cpu`), with the same leases and budgets
//! as the I/O help of the `policy` crate: a HELP is good for at most
//! `max_lease_ns` (1 s, pvsched's cap on one boost) unless renewed, and a
//! VM is boosted for at most `budget_fraction` of any `budget_window_ns`
//! (then throttled: HELPs are refused until its use falls back).

use policy::budget::BudgetLedger;
use policy::lease::Lease;
use policy::PolicyConfig;

use crate::Nanos;

/// One VM's CPU help state.
#[derive(Clone, Debug)]
pub struct HelpCpu {
    cfg: PolicyConfig,
    lease: Lease,
    ledger: BudgetLedger,
    /// Boosted time so far, for reports.
    pub boosted_ns: Nanos,
    since: Option<Nanos>,
    /// HELPs refused because the budget was spent.
    pub refused: u64,
}

/// What the host must do to the vCPU threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoostChange {
    Boost,
    Unboost,
    None,
}

impl HelpCpu {
    pub fn new(cfg: PolicyConfig) -> HelpCpu {
        HelpCpu {
            cfg,
            lease: Lease::default(),
            ledger: BudgetLedger::default(),
            boosted_ns: 0,
            since: None,
            refused: 0,
        }
    }

    pub fn boosted(&self) -> bool {
        self.since.is_some()
    }

    /// A HELP at `now` for `hint_ns`.
    pub fn help(&mut self, now: Nanos, hint_ns: Nanos) -> BoostChange {
        let (window, budget) = (self.cfg.budget_window_ns, self.cfg.budget_ns());
        self.ledger.forget_before(now, window);
        if self.ledger.used(now, window) >= budget {
            self.refused += 1;
            return self.settle(now);
        }
        self.lease.grant(now, hint_ns, self.cfg.max_lease_ns);
        if self.since.is_none() {
            self.since = Some(now);
            self.ledger.start(now);
            return BoostChange::Boost;
        }
        BoostChange::None
    }

    /// When the boost must next be looked at: the lease's end or the
    /// budget's exhaustion, whichever is first.
    pub fn next_check(&self, now: Nanos) -> Option<Nanos> {
        self.since?;
        let (window, budget) = (self.cfg.budget_window_ns, self.cfg.budget_ns());
        let spent = self.ledger.exhausted_at(now, window, budget);
        match (self.lease.until(), spent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Ends the boost if its lease ran out or the budget is spent.
    pub fn settle(&mut self, now: Nanos) -> BoostChange {
        let Some(start) = self.since else {
            return BoostChange::None;
        };
        self.lease.settle(now);
        let (window, budget) = (self.cfg.budget_window_ns, self.cfg.budget_ns());
        let spent = self.ledger.used(now, window) >= budget;
        if self.lease.is_live() && !spent {
            return BoostChange::None;
        }
        self.lease.withdraw(now);
        self.ledger.stop(now);
        self.boosted_ns += now - start;
        self.since = None;
        BoostChange::Unboost
    }

    /// Boosted time since the start, the boost in progress included.
    pub fn boosted_total(&self, now: Nanos) -> Nanos {
        self.boosted_ns + self.since.map_or(0, |s| now.saturating_sub(s))
    }

    /// Boosted time inside the trailing window at `now`.
    pub fn used(&self, now: Nanos) -> Nanos {
        self.ledger.used(now, self.cfg.budget_window_ns)
    }

    pub fn budget_ns(&self) -> Nanos {
        self.cfg.budget_ns()
    }

    pub fn window_ns(&self) -> Nanos {
        self.cfg.budget_window_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MS;

    #[test]
    fn a_vm_that_always_asks_gets_no_more_than_its_budget() {
        let mut h = HelpCpu::new(PolicyConfig::default());
        let mut worst = 0;
        // A HELP every millisecond for 3 minutes.
        for i in 0..180_000u64 {
            let now = i * MS;
            h.settle(now);
            h.help(now, 2 * MS);
            worst = worst.max(h.used(now));
        }
        assert!(worst <= h.budget_ns(), "{worst} > {}", h.budget_ns());
        assert!(h.refused > 0);
        // It was boosted close to its budget, not starved.
        assert!(
            h.boosted_ns as f64 >= 0.45 * 180_000.0 * MS as f64,
            "{}",
            h.boosted_ns
        );
    }

    #[test]
    fn a_lease_not_renewed_ends_the_boost() {
        let mut h = HelpCpu::new(PolicyConfig::default());
        assert_eq!(h.help(0, 2 * MS), BoostChange::Boost);
        assert_eq!(h.next_check(0), Some(2 * MS));
        assert_eq!(h.settle(MS), BoostChange::None);
        assert_eq!(h.settle(2 * MS), BoostChange::Unboost);
        assert!(!h.boosted());
    }
}
