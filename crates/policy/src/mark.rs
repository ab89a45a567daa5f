//! How long an in-guest mark lasts: the rule by which guestd
//! (`tandem guestd --mark-ioprio`, `agent::iomark`) and the simulator's
//! `vhost-ioprio` guest raise an urgent process's I/O priority inside the
//! guest and give it back. Both apply this one rule, so that the simulated
//! and the real cells compare.
//!
//! A mark is BFQ's interactive weight raising done by hand: it favours a
//! process that starts (or resumes I/O after an idle time) for as long as a
//! start needs, and no longer. BFQ bounds a raising two ways
//! (`bfq_update_wr_data()` in block/bfq-iosched.c), and so does a mark:
//!
//! - **time**: a raising lasts `bfq_wr_duration()` from its start, however
//!   busy the queue stays; a mark lasts at most [`MarkRule::lease_ns`] from
//!   when it was set, whatever the need still says. The need (guestd's
//!   detector, or the simulated guest BFQ's raising) may outlast it: a
//!   program that keeps reading while the host starves the VM keeps
//!   "starting" in the detector's eyes (its exec's need is extended while it
//!   waits on I/O, up to 25 s). A mark that followed the need spent the
//!   VM's RT budget on background readers: in the real `cloud2014-real`
//!   cell with guest and host 5r-seq (2026-11-26, load 16 to 22), guestd
//!   marked the guest's five new readers for as long as their need lasted,
//!   and the backend demoted 21 of the third xterm start's RT requests for
//!   the budget (that start timed out);
//! - **service**: BFQ ends a raising once the queue has had
//!   `max_service_from_wr` (120000 sectors) since it began ("once
//!   transferred 110K sectors, these processes have no right to be
//!   weight-raised any longer"): by then an application has loaded, and a
//!   queue still reading is a greedy one. A mark ends once its process has
//!   read [`MarkRule::greedy_bytes`] since the mark.
//!
//! A mark that ended is not set again while the same need lasts (the caller
//! keeps it spent): a greedy reader is favoured again only after a new need,
//! which for a process that keeps reading means it first went idle (BFQ
//! raises a queue again only after `bfq_wr_min_idle_time`, 2 s, idle).

use crate::{Nanos, SEC};

/// Default [`MarkRule::lease_ns`]: 8 s. What one start needs, within BFQ's
/// interactive raising bounds (`bfq_wr_duration()` clamps to 3 to 25 s):
/// real xterm start-ups under `vhost-ioprio` took 3.5 to 7.7 s on the
/// emulated 1.8-inch disk under host load (docs/measurements.md, 2026-11-26;
/// idle 3.52 s), and the simulator's help modes ask for help during the
/// first 8 s of a raising for the same reason (start-ups with help took 3
/// to 5 s on its slowest device, `tandem sim run vbfq`; the simulator's
/// `coord::DEFAULT_HELP_PER_RAISING_NS` is this constant). Longer, the
/// guest's background readers, new programs too, keep the RT class for
/// longer than any start and spend the budget the next starts need (see the
/// module's documentation); the 60 s start timeout used before did.
pub const DEFAULT_MARK_LEASE_NS: Nanos = 8 * SEC;

/// BFQ's `max_service_from_wr` (block/bfq-iosched.c): 120000 sectors of
/// 512 bytes, the service after which it ends a queue's weight raising.
pub const MAX_SERVICE_FROM_WR_BYTES: u64 = 120_000 * 512;

/// The rule: how long a mark may last, and how much its process may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkRule {
    /// The longest a mark lasts from when it was set.
    pub lease_ns: Nanos,
    /// A marked process that has read this much since its mark is a greedy
    /// reader: its mark ends.
    pub greedy_bytes: u64,
}

impl Default for MarkRule {
    fn default() -> Self {
        MarkRule {
            lease_ns: DEFAULT_MARK_LEASE_NS,
            greedy_bytes: MAX_SERVICE_FROM_WR_BYTES,
        }
    }
}

/// Why a mark ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkEnd {
    /// The process no longer needs it (its need ended).
    NeedOver,
    /// It has lasted [`MarkRule::lease_ns`].
    LeaseOver,
    /// Its process read [`MarkRule::greedy_bytes`] since the mark.
    Greedy,
}

/// One mark: when it was set, and how much its process had read by then
/// (`None`: the caller does not count reads; only time bounds the mark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub at: Nanos,
    pub read_at: Option<u64>,
}

impl MarkRule {
    /// A mark set at `now` on a process that has read `read` bytes so far.
    pub fn start(&self, now: Nanos, read: Option<u64>) -> Mark {
        Mark {
            at: now,
            read_at: read,
        }
    }

    /// Whether mark `m` still holds at `now`, for a need that lasts until
    /// `need_until` (`None`: no need now) and a process that has read `read`
    /// bytes so far: `Ok(end)`, the time it ends unless a read ends it
    /// sooner, or why it is over.
    pub fn check(
        &self,
        m: &Mark,
        now: Nanos,
        need_until: Option<Nanos>,
        read: Option<u64>,
    ) -> Result<Nanos, MarkEnd> {
        let Some(need_until) = need_until.filter(|&u| u > now) else {
            return Err(MarkEnd::NeedOver);
        };
        let lease_end = m.at.saturating_add(self.lease_ns);
        if now >= lease_end {
            return Err(MarkEnd::LeaseOver);
        }
        if let (Some(from), Some(now_read)) = (m.read_at, read) {
            if now_read.saturating_sub(from) >= self.greedy_bytes {
                return Err(MarkEnd::Greedy);
            }
        }
        Ok(need_until.min(lease_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A start shorter than the lease keeps its mark until its need ends.
    #[test]
    fn a_mark_follows_a_short_need() {
        let r = MarkRule::default();
        let m = r.start(SEC, Some(0));
        assert_eq!(r.check(&m, SEC, Some(4 * SEC), Some(MIB)), Ok(4 * SEC));
        assert_eq!(
            r.check(&m, 4 * SEC, Some(4 * SEC), Some(2 * MIB)),
            Err(MarkEnd::NeedOver)
        );
        assert_eq!(r.check(&m, 2 * SEC, None, None), Err(MarkEnd::NeedOver));
    }

    /// A need that outlasts the lease (a reader the host starves, whose
    /// exec's need is extended up to 25 s) loses the mark at the lease's
    /// end, however long the need says.
    #[test]
    fn a_mark_ends_at_its_lease_whatever_the_need() {
        let r = MarkRule::default();
        let m = r.start(10 * SEC, Some(0));
        let need = Some(35 * SEC);
        assert_eq!(r.check(&m, 10 * SEC, need, Some(0)), Ok(18 * SEC));
        assert_eq!(
            r.check(&m, 18 * SEC - 1, need, Some(MIB)),
            Ok(18 * SEC),
            "still within the lease"
        );
        assert_eq!(
            r.check(&m, 18 * SEC, need, Some(MIB)),
            Err(MarkEnd::LeaseOver)
        );
    }

    /// A process that reads BFQ's `max_service_from_wr` since its mark is a
    /// greedy reader, within the lease or not; reads before the mark do not
    /// count.
    #[test]
    fn a_greedy_reader_loses_its_mark() {
        let r = MarkRule::default();
        let before = 500 * MIB;
        let m = r.start(0, Some(before));
        let need = Some(20 * SEC);
        let limit = before + MAX_SERVICE_FROM_WR_BYTES;
        assert_eq!(r.check(&m, SEC, need, Some(limit - 1)), Ok(8 * SEC));
        assert_eq!(r.check(&m, SEC, need, Some(limit)), Err(MarkEnd::Greedy));
        // Without read counts only time bounds it.
        let blind = r.start(0, None);
        assert_eq!(r.check(&blind, SEC, need, Some(limit)), Ok(8 * SEC));
    }
}
