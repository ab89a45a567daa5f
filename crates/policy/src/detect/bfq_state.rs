//! Help from the guest BFQ's own state, as the simulator sees it.

use crate::detect::Urgency;
use crate::protocol::{HelpReason, Resource};
use crate::Nanos;

/// Watches the count of the guest BFQ's weight-raised queues (interactive and
/// soft real-time): help is needed while any is raised.
///
/// It emits `Help` when the count goes from 0 to more, another `Help` every
/// `renew_every_ns` while it stays above 0 (so the host's lease does not run
/// out), and `NoHelp` once it has been 0 for `hysteresis_ns`.
#[derive(Clone, Debug)]
pub struct BfqStateDetector {
    lease_ns: Nanos,
    renew_every_ns: Nanos,
    hysteresis_ns: Nanos,
    /// Whether the guest is asking for help.
    active: bool,
    /// When the last `Help` was emitted.
    last_help_at: Nanos,
    /// Reason of the last `Help`.
    reason: HelpReason,
    /// Since when the count is 0 while still active (waiting out the
    /// hysteresis).
    idle_since: Option<Nanos>,
}

impl BfqStateDetector {
    /// A detector whose `Help`s ask for `lease_ns` each. Renewals come every
    /// half lease, a design choice that leaves half a lease for the renewal to
    /// arrive; the hysteresis is 0 (NO-HELP as soon as nothing is raised).
    pub fn new(lease_ns: Nanos) -> Self {
        BfqStateDetector {
            lease_ns,
            renew_every_ns: (lease_ns / 2).max(1),
            hysteresis_ns: 0,
            active: false,
            last_help_at: 0,
            reason: HelpReason::Interactive,
            idle_since: None,
        }
    }

    /// Renew every `ns` instead (at least 1 ns).
    pub fn with_renew_every(mut self, ns: Nanos) -> Self {
        self.renew_every_ns = ns.max(1);
        self
    }

    /// Send NO-HELP only after nothing has been raised for `ns`, so a
    /// raised queue that empties for a moment does not cost a NO-HELP/HELP
    /// round trip.
    pub fn with_hysteresis(mut self, ns: Nanos) -> Self {
        self.hysteresis_ns = ns;
        self
    }

    /// The counts of raised queues at `now`; returns the urgency to pass on,
    /// if any.
    pub fn observe(
        &mut self,
        now: Nanos,
        raised_interactive: usize,
        raised_softrt: usize,
    ) -> Option<Urgency> {
        if raised_interactive + raised_softrt > 0 {
            self.idle_since = None;
            // An interactive raising (a program starting) names the need
            // even beside soft real-time ones: the host raises a start, and
            // a program starting in a guest whose background readers BFQ
            // deems soft real-time is still a start. A change of reason
            // goes out at once.
            let reason = if raised_interactive > 0 {
                HelpReason::Interactive
            } else {
                HelpReason::SoftRealTime
            };
            let changed = reason != self.reason;
            self.reason = reason;
            if !self.active || changed || self.renewal_due(now) {
                self.active = true;
                return Some(self.help(now));
            }
            return None;
        }
        if !self.active {
            return None;
        }
        let since = *self.idle_since.get_or_insert(now);
        if now >= since.saturating_add(self.hysteresis_ns) {
            self.active = false;
            self.idle_since = None;
            return Some(Urgency::NoHelp);
        }
        self.renewal_due(now).then(|| self.help(now))
    }

    /// When to call [`BfqStateDetector::observe`] again even if the counts do
    /// not change: the next renewal or the end of the hysteresis. `None` while
    /// no help is asked.
    pub fn next_deadline(&self) -> Option<Nanos> {
        if !self.active {
            return None;
        }
        let renew = self.last_help_at.saturating_add(self.renew_every_ns);
        let quiet = self
            .idle_since
            .map(|s| s.saturating_add(self.hysteresis_ns));
        Some(quiet.map_or(renew, |q| q.min(renew)))
    }

    fn renewal_due(&self, now: Nanos) -> bool {
        now >= self.last_help_at.saturating_add(self.renew_every_ns)
    }

    fn help(&mut self, now: Nanos) -> Urgency {
        self.last_help_at = now;
        Urgency::Help {
            resource: Resource::Io,
            reason: self.reason,
            duration_ns: self.lease_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MS, SEC};

    fn is_help(u: Option<Urgency>) -> bool {
        matches!(u, Some(Urgency::Help { .. }))
    }

    #[test]
    fn help_renew_and_no_help() {
        let mut d = BfqStateDetector::new(SEC);
        assert_eq!(d.observe(0, 0, 0), None);
        assert_eq!(d.next_deadline(), None);
        assert_eq!(
            d.observe(10, 1, 0),
            Some(Urgency::Help {
                resource: Resource::Io,
                reason: HelpReason::Interactive,
                duration_ns: SEC
            })
        );
        assert_eq!(d.observe(20, 2, 0), None);
        assert_eq!(d.next_deadline(), Some(10 + 500 * MS));
        assert!(is_help(d.observe(10 + 500 * MS, 1, 0)));
        assert_eq!(d.observe(600 * MS, 0, 0), Some(Urgency::NoHelp));
        assert_eq!(d.observe(700 * MS, 0, 0), None);
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn reasons_are_reported_and_a_start_beside_a_stream_goes_out_at_once() {
        let reason = |u: Option<Urgency>| match u {
            Some(Urgency::Help { reason, .. }) => Some(reason),
            _ => None,
        };
        let mut d = BfqStateDetector::new(SEC);
        assert_eq!(reason(d.observe(0, 0, 1)), Some(HelpReason::SoftRealTime));
        // Still the stream: nothing new to say before the renewal.
        assert_eq!(d.observe(10 * MS, 0, 2), None);
        // A program starts beside it: a start, sent at once, not at the
        // renewal.
        assert_eq!(
            reason(d.observe(20 * MS, 1, 2)),
            Some(HelpReason::Interactive)
        );
        assert_eq!(d.observe(30 * MS, 1, 2), None);
        // It is up; the stream goes on.
        assert_eq!(
            reason(d.observe(40 * MS, 0, 2)),
            Some(HelpReason::SoftRealTime)
        );
    }

    #[test]
    fn hysteresis_delays_no_help_and_absorbs_blips() {
        let mut d = BfqStateDetector::new(SEC).with_hysteresis(50 * MS);
        assert!(is_help(d.observe(0, 1, 0)));
        assert_eq!(d.observe(100 * MS, 0, 0), None);
        assert_eq!(d.next_deadline(), Some(150 * MS));
        // Raised again within the hysteresis: no message at all.
        assert_eq!(d.observe(120 * MS, 1, 0), None);
        assert_eq!(d.observe(200 * MS, 0, 0), None);
        assert_eq!(d.observe(250 * MS, 0, 0), Some(Urgency::NoHelp));
    }

    #[test]
    fn renewals_continue_during_hysteresis() {
        let mut d = BfqStateDetector::new(SEC)
            .with_hysteresis(SEC)
            .with_renew_every(100 * MS);
        assert!(is_help(d.observe(0, 1, 0)));
        assert_eq!(d.observe(50 * MS, 0, 0), None);
        assert_eq!(d.next_deadline(), Some(100 * MS));
        assert!(is_help(d.observe(100 * MS, 0, 0)));
    }
}
