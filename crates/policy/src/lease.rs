//! Help leases: a HELP is good for a limited time unless renewed, so a guest
//! that crashes, hangs or loses its NO-HELP cannot keep its boost.

use crate::Nanos;

/// How a lease ended, as the arbiter learns at its next update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseEnd {
    /// The guest said NO-HELP before the lease ran out.
    Withdrawn,
    /// The lease ran out without a renewal.
    Expired,
}

/// One VM's current help lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// The lease is live until this time (exclusive); `None` when there is no
    /// lease.
    until: Option<Nanos>,
    /// How the last lease ended, not yet collected by [`Lease::settle`].
    ended: Option<LeaseEnd>,
}

impl Lease {
    /// A HELP at `now` asking for `hint_ns`: the lease runs until
    /// `now + min(hint_ns, max_ns)`, replacing any earlier one (a renewal may
    /// also shorten it: the guest's latest word counts).
    pub fn grant(&mut self, now: Nanos, hint_ns: Nanos, max_ns: Nanos) {
        self.until = Some(now.saturating_add(hint_ns.min(max_ns)));
        self.ended = None;
    }

    /// A NO-HELP at `now`. A lease that had already run out counts as expired.
    pub fn withdraw(&mut self, now: Nanos) {
        if let Some(until) = self.until.take() {
            self.ended = Some(if until <= now {
                LeaseEnd::Expired
            } else {
                LeaseEnd::Withdrawn
            });
        }
    }

    /// Ends the lease if it has run out at `now`, and returns how the lease
    /// ended since the last call, if it did.
    pub fn settle(&mut self, now: Nanos) -> Option<LeaseEnd> {
        if self.until.is_some_and(|u| u <= now) {
            self.until = None;
            self.ended = Some(LeaseEnd::Expired);
        }
        self.ended.take()
    }

    /// Whether a lease is held (as of the last [`Lease::settle`]).
    pub fn is_live(&self) -> bool {
        self.until.is_some()
    }

    /// When the lease runs out, if one is held.
    pub fn until(&self) -> Option<Nanos> {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_capped_and_expires() {
        let mut l = Lease::default();
        l.grant(100, 5_000, 1_000);
        assert_eq!(l.until(), Some(1_100));
        assert_eq!(l.settle(1_099), None);
        assert!(l.is_live());
        assert_eq!(l.settle(1_100), Some(LeaseEnd::Expired));
        assert!(!l.is_live());
        assert_eq!(l.settle(2_000), None);
    }

    #[test]
    fn renewals_replace_the_lease() {
        let mut l = Lease::default();
        l.grant(0, 1_000, 1_000);
        l.grant(500, 100, 1_000);
        assert_eq!(l.until(), Some(600));
    }

    #[test]
    fn withdrawal_is_told_apart_from_expiry() {
        let mut l = Lease::default();
        l.grant(0, 1_000, 1_000);
        l.withdraw(10);
        assert_eq!(l.settle(10), Some(LeaseEnd::Withdrawn));
        l.grant(20, 10, 1_000);
        l.withdraw(30);
        assert_eq!(l.settle(30), Some(LeaseEnd::Expired));
        l.withdraw(40);
        assert_eq!(l.settle(40), None);
    }

    #[test]
    fn huge_hints_do_not_overflow() {
        let mut l = Lease::default();
        l.grant(Nanos::MAX - 1, Nanos::MAX, Nanos::MAX);
        assert_eq!(l.until(), Some(Nanos::MAX));
    }
}
