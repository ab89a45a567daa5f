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

/// Default [`MarkRule::lease_ns`]: 8 s of I/O. What one start needs, within
/// BFQ's interactive raising bounds (`bfq_wr_duration()` clamps to 3 to
/// 25 s): real xterm start-ups under `vhost-ioprio` took 3.5 to 7.7 s on the
/// emulated 1.8-inch disk under host load (docs/measurements.md, 2026-11-26;
/// idle 3.52 s), and the simulator's help modes ask for help during the
/// first 8 s of a raising for the same reason (start-ups with help took 3
/// to 5 s on its slowest device, `tandem sim run vbfq`; the simulator's
/// `coord::DEFAULT_HELP_PER_RAISING_NS` is this constant). Longer, the
/// guest's background readers, new programs too, keep the RT class for
/// longer than any start and spend the budget the next starts need (see the
/// module's documentation); the 60 s start timeout used before did.
pub const DEFAULT_MARK_LEASE_NS: Nanos = 8 * SEC;

/// Default [`MarkRule::max_wall_ns`]: 25 s, the longest interactive raising
/// BFQ grants (`bfq_wr_duration()`'s upper clamp, set for "a QEMU/KVM
/// virtual machine running in a slow PC" where a start took 23 s).
pub const MAX_WR_DURATION_NS: Nanos = 25 * SEC;

/// BFQ's `max_service_from_wr` (block/bfq-iosched.c): 120000 sectors of
/// 512 bytes, the service after which it ends a queue's weight raising.
pub const MAX_SERVICE_FROM_WR_BYTES: u64 = 120_000 * 512;

/// The rule: how long a mark may last, and how much its process may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkRule {
    /// How much I/O time (time in which its process read or waited on a
    /// read, [`Usage::io_ns`]) a mark covers; when the caller does not
    /// count I/O time, how long it lasts from when it was set.
    ///
    /// I/O time and not wall time: what a mark costs the VM's RT budget is
    /// the time its process has RT requests in flight. A background reader
    /// has them all the time, and its mark ends after this much wall time;
    /// a start slowed by the guest's CPU (a loaded TCG host: idle xterm
    /// starts of 5.5 to 12 s, measured 2026-11-26, load 18) spends much of
    /// its time computing, costs the budget nothing meanwhile, and keeps
    /// its mark (up to [`MarkRule::max_wall_ns`]).
    pub lease_ns: Nanos,
    /// The longest a mark lasts from when it was set, whatever its I/O.
    pub max_wall_ns: Nanos,
    /// A marked process that has read this much since its mark is a greedy
    /// reader: its mark ends.
    pub greedy_bytes: u64,
}

impl Default for MarkRule {
    fn default() -> Self {
        MarkRule {
            lease_ns: DEFAULT_MARK_LEASE_NS,
            max_wall_ns: MAX_WR_DURATION_NS,
            greedy_bytes: MAX_SERVICE_FROM_WR_BYTES,
        }
    }
}

/// Why a mark ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkEnd {
    /// The process no longer needs it (its need ended).
    NeedOver,
    /// It has covered [`MarkRule::lease_ns`] (or lasted
    /// [`MarkRule::max_wall_ns`]).
    LeaseOver,
    /// Its process read [`MarkRule::greedy_bytes`] since the mark.
    Greedy,
}

/// What a process has done so far, as the caller counts it (`None`: not
/// counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes read.
    pub read: Option<u64>,
    /// Time in which it read or waited on a read.
    pub io_ns: Option<Nanos>,
}

/// One mark: when it was set, and what its process had done by then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub at: Nanos,
    pub used_at: Usage,
}

impl MarkRule {
    /// A mark set at `now` on a process that has done `used` so far.
    pub fn start(&self, now: Nanos, used: Usage) -> Mark {
        Mark {
            at: now,
            used_at: used,
        }
    }

    /// Whether mark `m` still holds at `now`, for a need that lasts until
    /// `need_until` (`None`: no need now) and a process that has done `used`
    /// so far: `Ok(end)`, the time it ends at the latest if its process
    /// keeps doing I/O (a read may end it sooner), or why it is over.
    pub fn check(
        &self,
        m: &Mark,
        now: Nanos,
        need_until: Option<Nanos>,
        used: Usage,
    ) -> Result<Nanos, MarkEnd> {
        let Some(need_until) = need_until.filter(|&u| u > now) else {
            return Err(MarkEnd::NeedOver);
        };
        let wall_end = m.at.saturating_add(self.max_wall_ns);
        let lease_end = match (m.used_at.io_ns, used.io_ns) {
            (Some(from), Some(io)) => {
                let left = self.lease_ns.saturating_sub(io.saturating_sub(from));
                if left == 0 {
                    return Err(MarkEnd::LeaseOver);
                }
                now.saturating_add(left).min(wall_end)
            }
            _ => m.at.saturating_add(self.lease_ns).min(wall_end),
        };
        if now >= lease_end {
            return Err(MarkEnd::LeaseOver);
        }
        if let (Some(from), Some(read)) = (m.used_at.read, used.read) {
            if read.saturating_sub(from) >= self.greedy_bytes {
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

    fn read(bytes: u64) -> Usage {
        Usage {
            read: Some(bytes),
            io_ns: None,
        }
    }

    fn io(ns: Nanos) -> Usage {
        Usage {
            read: None,
            io_ns: Some(ns),
        }
    }

    /// A start shorter than the lease keeps its mark until its need ends.
    #[test]
    fn a_mark_follows_a_short_need() {
        let r = MarkRule::default();
        let m = r.start(SEC, read(0));
        assert_eq!(r.check(&m, SEC, Some(4 * SEC), read(MIB)), Ok(4 * SEC));
        assert_eq!(
            r.check(&m, 4 * SEC, Some(4 * SEC), read(2 * MIB)),
            Err(MarkEnd::NeedOver)
        );
        assert_eq!(
            r.check(&m, 2 * SEC, None, Usage::default()),
            Err(MarkEnd::NeedOver)
        );
    }

    /// Without I/O time, a need that outlasts the lease (a reader the host
    /// starves, whose exec's need is extended up to 25 s) loses the mark
    /// at the lease's end, however long the need says.
    #[test]
    fn a_mark_ends_at_its_lease_whatever_the_need() {
        let r = MarkRule::default();
        let m = r.start(10 * SEC, read(0));
        let need = Some(35 * SEC);
        assert_eq!(r.check(&m, 10 * SEC, need, read(0)), Ok(18 * SEC));
        assert_eq!(
            r.check(&m, 18 * SEC - 1, need, read(MIB)),
            Ok(18 * SEC),
            "still within the lease"
        );
        assert_eq!(
            r.check(&m, 18 * SEC, need, read(MIB)),
            Err(MarkEnd::LeaseOver)
        );
    }

    /// Counted in I/O time: a reader doing I/O all the time loses the mark
    /// after the lease's wall time; a start that spends half its time
    /// computing keeps it twice as long; nothing keeps it past BFQ's 25 s.
    #[test]
    fn the_lease_counts_io_time_up_to_bfqs_longest_raising() {
        let r = MarkRule::default();
        let need = Some(60 * SEC);
        let reader = r.start(0, io(SEC));
        assert_eq!(r.check(&reader, 4 * SEC, need, io(5 * SEC)), Ok(8 * SEC));
        assert_eq!(
            r.check(&reader, 8 * SEC, need, io(9 * SEC)),
            Err(MarkEnd::LeaseOver)
        );
        let start = r.start(0, io(0));
        assert_eq!(r.check(&start, 8 * SEC, need, io(4 * SEC)), Ok(12 * SEC));
        assert_eq!(r.check(&start, 15 * SEC, need, io(7 * SEC)), Ok(16 * SEC));
        assert_eq!(
            r.check(&start, 16 * SEC, need, io(8 * SEC)),
            Err(MarkEnd::LeaseOver)
        );
        let computing = r.start(0, io(0));
        assert_eq!(r.check(&computing, 24 * SEC, need, io(SEC)), Ok(25 * SEC));
        assert_eq!(
            r.check(&computing, 25 * SEC, need, io(SEC)),
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
        let m = r.start(0, read(before));
        let need = Some(20 * SEC);
        let limit = before + MAX_SERVICE_FROM_WR_BYTES;
        assert_eq!(r.check(&m, SEC, need, read(limit - 1)), Ok(8 * SEC));
        assert_eq!(r.check(&m, SEC, need, read(limit)), Err(MarkEnd::Greedy));
        // Without read counts only time bounds it.
        let blind = r.start(0, Usage::default());
        assert_eq!(r.check(&blind, SEC, need, read(limit)), Ok(8 * SEC));
    }
}
