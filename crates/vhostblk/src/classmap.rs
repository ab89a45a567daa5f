//! The backend's policy: which host I/O priority a guest's request gets.
//!
//! - BE and IDLE requests keep their class and level; requests without a
//!   class (`IOPRIO_CLASS_NONE`, what a guest task that never called
//!   `ioprio_set` sends) are issued without one, so the host scheduler
//!   treats them as the backend's own (BE, from its nice value).
//! - RT stays RT only for a VM allowed it (`--allow-rt`), and only while
//!   the VM's RT service stays inside its budget; otherwise it becomes the
//!   highest best-effort level (BE/0), which still puts it ahead of the
//!   VM's default BE/4 requests.
//! - The budget is the `policy` crate's [`BudgetLedger`], the same ledger
//!   hostd uses for help boosts: the VM counts as boosted while it has an
//!   RT request in flight, and may be boosted for at most
//!   `budget_fraction` of any `budget_window_ns` (defaults from
//!   [`PolicyConfig`]).

use crate::ioprio::{Class, Ioprio, BE_HIGHEST};
use policy::budget::BudgetLedger;
use policy::{Nanos, PolicyConfig};

/// Why an RT request was issued as BE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demotion {
    /// The VM may not use RT.
    NotAllowed,
    /// The VM spent its RT budget.
    Budget,
}

/// The mapping and the VM's RT budget.
#[derive(Debug)]
pub struct ClassPolicy {
    allow_rt: bool,
    window: Nanos,
    budget: Nanos,
    ledger: BudgetLedger,
    rt_in_flight: u32,
    /// What requests without a class are issued with (the VM's own
    /// best-effort level, [`crate::vmpolicy::VmPolicy::classless`]).
    classless: Ioprio,
}

/// The mapping's answer for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub host: Ioprio,
    pub demoted: Option<Demotion>,
}

impl ClassPolicy {
    /// `config` gives the budget's window and fraction.
    pub fn new(allow_rt: bool, config: &PolicyConfig) -> ClassPolicy {
        let window = config.budget_window_ns;
        ClassPolicy {
            allow_rt,
            window,
            budget: (window as f64 * config.budget_fraction) as Nanos,
            ledger: BudgetLedger::default(),
            rt_in_flight: 0,
            classless: Ioprio::NONE,
        }
    }

    /// Requests without a class are issued with `prio` instead of none.
    pub fn with_classless(mut self, prio: Ioprio) -> ClassPolicy {
        self.classless = prio;
        self
    }

    /// What requests without a class are issued with: the VM's default,
    /// which the queue threads issue themselves (`submit::LocalRing`).
    pub fn classless(&self) -> Ioprio {
        self.classless
    }

    /// The host priority for a request the guest sent with `guest`, issued
    /// at `now`. An RT answer must be followed by [`Self::rt_done`] when the
    /// request completes.
    pub fn map(&mut self, guest: Ioprio, now: Nanos) -> Mapped {
        if guest.class == Class::None {
            return Mapped {
                host: self.classless,
                demoted: None,
            };
        }
        if guest.class != Class::Rt {
            return Mapped {
                host: guest,
                demoted: None,
            };
        }
        let demoted = if !self.allow_rt {
            Some(Demotion::NotAllowed)
        } else if self.ledger.used(now, self.window) >= self.budget {
            Some(Demotion::Budget)
        } else {
            None
        };
        if let Some(d) = demoted {
            return Mapped {
                host: Ioprio::new(Class::Be, BE_HIGHEST),
                demoted: Some(d),
            };
        }
        if self.rt_in_flight == 0 {
            self.ledger.forget_before(now, self.window);
            self.ledger.start(now);
        }
        self.rt_in_flight += 1;
        Mapped {
            host: guest,
            demoted: None,
        }
    }

    /// An RT request issued by [`Self::map`] completed at `now`.
    pub fn rt_done(&mut self, now: Nanos) {
        self.rt_in_flight = self.rt_in_flight.saturating_sub(1);
        if self.rt_in_flight == 0 {
            self.ledger.stop(now);
        }
    }

    /// RT service time in the window ending at `now`.
    pub fn rt_used(&self, now: Nanos) -> Nanos {
        self.ledger.used(now, self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{MS, SEC};

    fn cfg() -> PolicyConfig {
        PolicyConfig {
            budget_window_ns: 10 * SEC,
            budget_fraction: 0.5,
            ..PolicyConfig::default()
        }
    }

    #[test]
    fn rt_is_demoted_to_the_highest_best_effort_level_unless_allowed() {
        let mut p = ClassPolicy::new(false, &cfg());
        let m = p.map(Ioprio::new(Class::Rt, 3), 0);
        assert_eq!(m.host, Ioprio::new(Class::Be, 0));
        assert_eq!(m.demoted, Some(Demotion::NotAllowed));
        for g in [
            Ioprio::new(Class::Be, 6),
            Ioprio::new(Class::Idle, 0),
            Ioprio::NONE,
        ] {
            assert_eq!(
                p.map(g, 0),
                Mapped {
                    host: g,
                    demoted: None
                }
            );
        }
        let mut p = ClassPolicy::new(true, &cfg());
        assert_eq!(
            p.map(Ioprio::new(Class::Rt, 3), 0).host,
            Ioprio::new(Class::Rt, 3)
        );
    }

    #[test]
    fn classless_requests_take_the_vms_level_and_classed_ones_keep_theirs() {
        let mut p = ClassPolicy::new(false, &cfg()).with_classless(Ioprio::new(Class::Be, 6));
        assert_eq!(p.map(Ioprio::NONE, 0).host, Ioprio::new(Class::Be, 6));
        assert_eq!(
            p.map(Ioprio::new(Class::Be, 2), 0).host,
            Ioprio::new(Class::Be, 2)
        );
        assert_eq!(
            p.map(Ioprio::new(Class::Rt, 0), 0).host,
            Ioprio::new(Class::Be, 0)
        );
    }

    #[test]
    fn rt_service_beyond_the_budget_is_demoted_until_it_slides_out() {
        let mut p = ClassPolicy::new(true, &cfg());
        // 5 s of RT in flight (two overlapping requests count once).
        assert_eq!(p.map(Ioprio::new(Class::Rt, 0), 0).demoted, None);
        assert_eq!(p.map(Ioprio::new(Class::Rt, 0), MS).demoted, None);
        p.rt_done(2 * SEC);
        p.rt_done(5 * SEC);
        assert_eq!(p.rt_used(5 * SEC), 5 * SEC);
        let m = p.map(Ioprio::new(Class::Rt, 0), 6 * SEC);
        assert_eq!(m.demoted, Some(Demotion::Budget));
        // 11 s: one second of the old use has left the window.
        assert_eq!(p.map(Ioprio::new(Class::Rt, 0), 11 * SEC).demoted, None);
    }
}
