//! The guest's side of a lease: turns a stream of [`Urgency`] into HELP and
//! NO-HELP messages.
//!
//! The host's lease on a HELP is short (1 s by default), so a crashed guest
//! cannot keep its boost; the client therefore renews while the need lasts.
//! It sends as few messages as that allows: one HELP when a need starts, a
//! renewal every half lease while it lasts (half a lease of slack for the
//! renewal to arrive), and one NO-HELP when it ends.

use crate::detect::Urgency;
use crate::protocol::{HelpReason, Message, Resource};
use crate::{Nanos, MS};

/// What the last HELP covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sent {
    resource: Resource,
    reason: HelpReason,
    /// The host's lease (as asked for) runs until here.
    covered_until: Nanos,
    /// Send a renewal at or after this time if help is still needed.
    renew_at: Nanos,
}

/// Turns urgencies into messages with leases. Use one client per resource.
#[derive(Clone, Debug)]
pub struct HelpClient {
    lease_ns: Nanos,
    sent: Option<Sent>,
}

impl HelpClient {
    /// A client whose HELPs ask for at most `lease_ns` each (the host's lease
    /// should be at least as long, or renewals come too late).
    pub fn new(lease_ns: Nanos) -> Self {
        HelpClient {
            lease_ns: lease_ns.max(1),
            sent: None,
        }
    }

    /// The urgency at `now`; returns the message to send, if any.
    ///
    /// On `Help`, a HELP goes out when help was not asked yet, when its
    /// resource or reason changed, when the renewal is due, or when the need now reaches past what was asked and
    /// less than half a lease of it is left. It asks for the rest of the need,
    /// capped at the lease. A `Help` for no time counts as `NoHelp`. On
    /// `NoHelp`, one NO-HELP goes out if help had been asked.
    pub fn step(&mut self, now: Nanos, u: &Urgency) -> Option<Message> {
        match *u {
            Urgency::Help {
                resource,
                reason,
                duration_ns,
            } if duration_ns > 0 => {
                let need_end = now.saturating_add(duration_ns);
                let half = (self.lease_ns / 2).max(1);
                let send = match self.sent {
                    None => true,
                    Some(s) if s.resource != resource || s.reason != reason => true,
                    Some(s) => {
                        now >= s.renew_at
                            || (need_end > s.covered_until
                                && now >= s.covered_until.saturating_sub(half))
                    }
                };
                if !send {
                    return None;
                }
                let hint = duration_ns.min(self.lease_ns);
                let covered_until = now.saturating_add(hint);
                let renew_at = if hint >= self.lease_ns {
                    now.saturating_add(half)
                } else {
                    // The need ends within this lease; renew only if it grows.
                    covered_until
                };
                self.sent = Some(Sent {
                    resource,
                    reason,
                    covered_until,
                    renew_at,
                });
                Some(Message::Help {
                    resource,
                    reason,
                    duration_hint_ms: ns_to_ms_ceil(hint),
                })
            }
            _ => self.sent.take().map(|s| Message::NoHelp {
                resource: s.resource,
            }),
        }
    }

    /// When to call [`HelpClient::step`] again even if the urgency does not
    /// change: when the renewal is due. `None` while no help is asked.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.sent.map(|s| s.renew_at)
    }

    /// Whether help is asked (a HELP went out and no NO-HELP since).
    pub fn is_helping(&self) -> bool {
        self.sent.is_some()
    }
}

/// Nanoseconds to whole milliseconds, rounded up so the host's lease covers
/// at least what was meant, and capped at what the wire field holds.
fn ns_to_ms_ceil(ns: Nanos) -> u32 {
    ns.div_ceil(MS).min(u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SEC;

    fn need(duration_ns: Nanos) -> Urgency {
        Urgency::Help {
            resource: Resource::Io,
            reason: HelpReason::Exec,
            duration_ns,
        }
    }

    fn help_ms(ms: u32) -> Option<Message> {
        Some(Message::Help {
            resource: Resource::Io,
            reason: HelpReason::Exec,
            duration_hint_ms: ms,
        })
    }

    #[test]
    fn help_then_renewals_then_one_no_help() {
        let mut c = HelpClient::new(SEC);
        assert_eq!(c.step(0, &Urgency::NoHelp), None);
        assert_eq!(c.step(0, &need(3 * SEC)), help_ms(1000));
        assert_eq!(c.step(100 * MS, &need(3 * SEC)), None);
        assert_eq!(c.next_deadline(), Some(500 * MS));
        assert_eq!(c.step(500 * MS, &need(2500 * MS)), help_ms(1000));
        assert_eq!(
            c.step(700 * MS, &Urgency::NoHelp),
            Some(Message::NoHelp {
                resource: Resource::Io
            })
        );
        assert_eq!(c.step(800 * MS, &Urgency::NoHelp), None);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn a_short_need_is_asked_once_and_renewed_only_if_it_grows() {
        let mut c = HelpClient::new(SEC);
        assert_eq!(c.step(0, &need(300 * MS)), help_ms(300));
        assert_eq!(c.next_deadline(), Some(300 * MS));
        assert_eq!(c.step(100 * MS, &need(200 * MS)), None);
        // The need grows past what was asked, with less than half a lease left.
        assert_eq!(c.step(200 * MS, &need(2 * SEC)), help_ms(1000));
    }

    #[test]
    fn a_new_reason_goes_out_at_once() {
        let mut c = HelpClient::new(SEC);
        let stream = Urgency::Help {
            resource: Resource::Io,
            reason: HelpReason::SoftRealTime,
            duration_ns: 10 * SEC,
        };
        assert!(c.step(0, &stream).is_some());
        assert_eq!(c.step(100 * MS, &stream), None);
        assert_eq!(
            c.step(200 * MS, &need(10 * SEC)),
            help_ms(1000),
            "a start beside the stream is news for the host"
        );
        assert_eq!(c.step(300 * MS, &need(10 * SEC)), None);
    }

    #[test]
    fn a_late_step_renews_at_once() {
        let mut c = HelpClient::new(SEC);
        c.step(0, &need(10 * SEC));
        assert_eq!(c.step(5 * SEC, &need(5 * SEC)), help_ms(1000));
    }

    #[test]
    fn help_for_no_time_is_no_help() {
        let mut c = HelpClient::new(SEC);
        assert_eq!(c.step(0, &need(0)), None);
        c.step(0, &need(SEC));
        assert_eq!(
            c.step(10, &need(0)),
            Some(Message::NoHelp {
                resource: Resource::Io
            })
        );
    }

    #[test]
    fn hints_round_up_to_whole_milliseconds() {
        assert_eq!(ns_to_ms_ceil(1), 1);
        assert_eq!(ns_to_ms_ceil(MS), 1);
        assert_eq!(ns_to_ms_ceil(MS + 1), 2);
        assert_eq!(ns_to_ms_ceil(Nanos::MAX), u32::MAX);
    }
}
