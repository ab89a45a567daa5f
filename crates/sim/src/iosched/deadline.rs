//! deadline (`block/deadline-iosched.c`, removed in 5.0) and mq-deadline
//! (`block/mq-deadline.c`), which the simulator runs as one scheduler.
//!
//! Each direction (read, write) keeps its requests twice: in a tree sorted by
//! start sector, and in a FIFO in arrival order with an expiry time on each.
//!
//! - **One-way elevator.** Most of the time requests leave in sector order,
//!   continuing upwards from where the last dispatch in that direction was.
//!   On a disk that keeps seeks short and in one direction, which is where
//!   most of the throughput comes from.
//! - **Deadlines.** A request far behind the head would wait as long as
//!   nearer requests keep arriving. So each request gets an expiry time
//!   (`read_expire`, `write_expire`), and when a new batch starts and the
//!   oldest request of the chosen direction has expired, the batch starts
//!   from that request instead of from the head position.
//! - **Batches.** Up to `fifo_batch` requests go out in one direction before
//!   the scheduler looks at deadlines or the other direction again. Checking
//!   deadlines only between batches keeps one expired request from breaking
//!   a sequential run into seeks every time.
//! - **Reads first, but writes are not starved.** A process usually waits on
//!   its reads, while writes are mostly write-back nobody waits on, so a new
//!   batch is a read batch when reads are pending. But each read batch
//!   started while writes wait counts, and after `writes_starved` of them the
//!   writes get a batch of their own.
//!
//! Merging is done by the block layer; deadline allows back and front
//! merges (`front_merges` = 1), and a front merge moves the request in the
//! sort tree (`dd_request_merged`).
//!
//! Simplifications, all chosen because the simulator does not need them:
//! - mq-deadline's three priority levels (RT/BE/IDLE served in order, with
//!   `prio_aging_expire` = 10 s against starvation) are not modelled: every
//!   request is in one level, as in legacy deadline and as in mq-deadline
//!   when all processes have the default ioprio.
//! - The `dispatch` list for requests inserted at the head (flushes,
//!   requeues) does not exist here.
//! - Times are in nanoseconds rather than jiffies, so `read_expire` is
//!   exactly 500 ms whatever the tick.
//! - The elevator continues from the start sector of the last dispatch in
//!   each direction (`latest_pos` and `deadline_from_pos()` in mq-deadline
//!   since 6.3). 6.1 cached a pointer to the next request instead, which
//!   skipped requests that arrived just behind it during a sweep; the
//!   position-based rule is the newer kernel's and is simpler.

use super::{IoScheduler, MergeKind, SchedCtx, MSEC, SEC};
use crate::request::RqId;
use devmodel::Nanos;
use std::collections::BTreeSet;

/// `read_expire` (`block/mq-deadline.c`, `HZ / 2`): "max time before a read
/// is submitted".
pub const READ_EXPIRE: Nanos = 500 * MSEC;
/// `write_expire` (`5 * HZ`): the same for writes; "these limits are SOFT!".
pub const WRITE_EXPIRE: Nanos = 5 * SEC;
/// `writes_starved` (2): "max times reads can starve a write".
pub const WRITES_STARVED: u32 = 2;
/// `fifo_batch` (16): "# of sequential requests treated as one by the above
/// parameters. For throughput."
pub const FIFO_BATCH: u32 = 16;
/// `front_merges` (1, set in `dd_init_sched`): deadline looks for front
/// merges. The block layer does the merging; this records the default.
pub const FRONT_MERGES: bool = true;

/// `DD_READ` / `DD_WRITE` (`enum dd_data_dir`).
const DD_READ: usize = 0;
const DD_WRITE: usize = 1;

/// What deadline remembers about a queued request.
#[derive(Clone, Copy, Debug, Default)]
struct DdRq {
    /// Sort key (start sector) under which it sits in `sort_list`.
    sector: u64,
    /// Arrival number: the FIFO key (expiry is arrival + a per-direction
    /// constant, so arrival order is expiry order).
    seq: u64,
    /// `rq->fifo_time`: when the request expires.
    fifo_time: Nanos,
    dir: u8,
}

/// The deadline elevator. See the module documentation.
#[derive(Debug)]
pub struct Deadline {
    /// `sort_list[dir]`: (start sector, id).
    sort_list: [BTreeSet<(u64, RqId)>; 2],
    /// `fifo_list[dir]`: (arrival number, id).
    fifo_list: [BTreeSet<(u64, RqId)>; 2],
    /// Per-request data, indexed by request id (ids are reused after
    /// completion, so a slot is only meaningful while the request is queued).
    rqs: Vec<DdRq>,
    /// `latest_pos[dir]`: start sector of the last dispatch per direction.
    latest_pos: [u64; 2],
    /// `last_dir`: direction of the current batch.
    last_dir: usize,
    /// `batching`: requests dispatched in the current batch.
    batching: u32,
    /// `starved`: read batches started while writes were waiting.
    starved: u32,
    seq: u64,
    queued: usize,
    fifo_expire: [Nanos; 2],
    fifo_batch: u32,
    writes_starved: u32,
}

impl Default for Deadline {
    fn default() -> Self {
        Deadline::new()
    }
}

impl Deadline {
    pub fn new() -> Deadline {
        Deadline {
            sort_list: [BTreeSet::new(), BTreeSet::new()],
            fifo_list: [BTreeSet::new(), BTreeSet::new()],
            rqs: Vec::new(),
            latest_pos: [0, 0],
            // `dd_init_sched()` starts with `last_dir = DD_WRITE`.
            last_dir: DD_WRITE,
            batching: 0,
            starved: 0,
            seq: 0,
            queued: 0,
            fifo_expire: [READ_EXPIRE, WRITE_EXPIRE],
            fifo_batch: FIFO_BATCH,
            writes_starved: WRITES_STARVED,
        }
    }

    /// `deadline_from_pos()`: the first request at or after `pos`.
    fn next_request(&self, dir: usize) -> Option<RqId> {
        self.sort_list[dir]
            .range((self.latest_pos[dir], 0)..)
            .next()
            .map(|&(_, id)| id)
    }

    /// `deadline_fifo_request()`: the oldest request.
    fn fifo_request(&self, dir: usize) -> Option<RqId> {
        self.fifo_list[dir].first().map(|&(_, id)| id)
    }

    /// `deadline_check_fifo()`: has the oldest request expired?
    fn check_fifo(&self, dir: usize, now: Nanos) -> bool {
        self.fifo_request(dir)
            .is_some_and(|id| now >= self.rqs[id].fifo_time)
    }

    /// `deadline_move_request()`: off the sort tree and the FIFO, to the
    /// device; the elevator continues from its position.
    fn move_request(&mut self, id: RqId) -> RqId {
        let r = self.rqs[id];
        let dir = r.dir as usize;
        self.sort_list[dir].remove(&(r.sector, id));
        self.fifo_list[dir].remove(&(r.seq, id));
        self.latest_pos[dir] = r.sector;
        self.queued -= 1;
        self.batching += 1;
        id
    }
}

impl IoScheduler for Deadline {
    fn name(&self) -> &'static str {
        "deadline"
    }

    /// `dd_insert_request()`: into the sort tree and at the FIFO's tail with
    /// `fifo_time = now + fifo_expire[dir]`.
    fn insert(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        let r = ctx.rq(rq);
        let dir = if r.is_read() { DD_READ } else { DD_WRITE };
        if self.rqs.len() <= rq {
            self.rqs.resize(rq + 1, DdRq::default());
        }
        self.seq += 1;
        self.rqs[rq] = DdRq {
            sector: r.sector,
            seq: self.seq,
            fifo_time: ctx.now + self.fifo_expire[dir],
            dir: dir as u8,
        };
        self.sort_list[dir].insert((r.sector, rq));
        self.fifo_list[dir].insert((self.seq, rq));
        self.queued += 1;
    }

    /// `dd_request_merged()`: a front merge changed the start sector, so the
    /// request moves in the sort tree. Its expiry does not change.
    fn merged(&mut self, ctx: &mut SchedCtx, rq: RqId, kind: MergeKind) {
        if kind == MergeKind::Front {
            let new = ctx.rq(rq).sector;
            let r = &mut self.rqs[rq];
            let dir = r.dir as usize;
            if r.sector != new {
                self.sort_list[dir].remove(&(r.sector, rq));
                r.sector = new;
                self.sort_list[dir].insert((new, rq));
            }
        }
    }

    /// `__dd_dispatch_request()`.
    fn dispatch(&mut self, ctx: &mut SchedCtx) -> Option<RqId> {
        // Batches are reads XOR writes: keep going in the current direction
        // while the batch lasts and there is something further up.
        if let Some(rq) = self.next_request(self.last_dir) {
            if self.batching < self.fifo_batch {
                return Some(self.move_request(rq));
            }
        }

        // Not running a batch: choose the direction.
        let reads = !self.fifo_list[DD_READ].is_empty();
        let writes = !self.fifo_list[DD_WRITE].is_empty();
        let data_dir = if reads {
            // `dd->starved++ >= dd->writes_starved`, counted only while
            // writes wait.
            let starve_writes = writes && {
                let s = self.starved;
                self.starved += 1;
                s >= self.writes_starved
            };
            if starve_writes {
                self.starved = 0;
                DD_WRITE
            } else {
                DD_READ
            }
        } else if writes {
            self.starved = 0;
            DD_WRITE
        } else {
            return None;
        };

        // A deadline has expired, or we ran out of higher-sectored requests:
        // start again from the oldest request. Otherwise continue the sweep.
        let next = self.next_request(data_dir);
        let rq = match next {
            Some(next) if !self.check_fifo(data_dir, ctx.now) => next,
            _ => self.fifo_request(data_dir)?,
        };
        self.last_dir = data_dir;
        self.batching = 0;
        Some(self.move_request(rq))
    }

    fn completed(&mut self, _ctx: &mut SchedCtx, _rq: RqId) {}

    fn timer(&mut self, _ctx: &mut SchedCtx) {}

    fn queued(&self) -> usize {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Harness, Spec, Stream};
    use super::*;
    use devmodel::Direction;

    /// A deterministic scatter of sectors (a multiplicative hash).
    fn scatter(i: u64) -> u64 {
        (i.wrapping_mul(2_654_435_761) % 10_000_000) * 8
    }

    #[test]
    fn dispatches_in_sector_order_one_way() {
        let mut h = Harness::new(Deadline::new(), MSEC);
        for i in 0..40 {
            h.insert(Spec::read(i as u32 + 1, scatter(i)));
        }
        h.kick();
        h.run_until(SEC);
        let got: Vec<u64> = h.log.iter().map(|d| d.sector).collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(got.len(), 40);
        assert_eq!(got, sorted, "one sweep upwards, nothing expired");
    }

    #[test]
    fn sweep_continues_from_the_head_and_wraps_through_the_fifo() {
        let mut h = Harness::new(Deadline::new(), MSEC);
        h.submit(Spec::read(1, 5_000_000));
        // Arrive while the first is on the device: two behind the head (the
        // older one first), two ahead.
        h.submit(Spec::read(2, 3_000_000));
        h.submit(Spec::read(3, 1_000_000));
        h.submit(Spec::read(4, 9_000_000));
        h.submit(Spec::read(5, 6_000_000));
        h.run_until(SEC);
        let got: Vec<u32> = h.log.iter().map(|d| d.pid).collect();
        // Up from 5M: 6M, 9M; nothing further up, so the batch restarts at
        // the oldest request (3M), then continues upwards from there: 1M is
        // behind again and only goes out last.
        assert_eq!(got, vec![1, 5, 4, 2, 3]);
    }

    #[test]
    fn batches_of_at_most_fifo_batch_and_writes_starved_at_most_two_batches() {
        let mut h = Harness::new(Deadline::new(), MSEC);
        for i in 0..100 {
            h.insert(Spec::read(1, scatter(i)));
        }
        for i in 0..40 {
            h.insert(Spec::write(2, scatter(1000 + i)));
        }
        h.kick();
        h.run_until(10 * SEC);
        assert_eq!(h.log.len(), 140);
        // Runs of one direction.
        let mut runs: Vec<(Direction, usize)> = Vec::new();
        for d in &h.log {
            match runs.last_mut() {
                Some((dir, n)) if *dir == d.dir => *n += 1,
                _ => runs.push((d.dir, 1)),
            }
        }
        // The scheduler starts as if a write batch were under way
        // (`last_dir = DD_WRITE`, `batching = 0`), so 16 writes go first.
        // Then, while both are pending: two read batches of 16, one write
        // batch of 16, and so on.
        let b = FIFO_BATCH as usize;
        assert_eq!(
            runs,
            vec![
                (Direction::Write, b),
                (Direction::Read, 2 * b),
                (Direction::Write, b),
                (Direction::Read, 2 * b),
                (Direction::Write, 40 - 2 * b),
                (Direction::Read, 100 - 4 * b),
            ]
        );
        // While writes wait, reads never get more than writes_starved
        // batches in a row; a write run is never longer than one batch while
        // reads wait.
        let writes_total = 40;
        let mut writes_done = 0;
        for (dir, n) in &runs {
            if writes_done == writes_total {
                break;
            }
            match dir {
                Direction::Read => {
                    assert!(*n <= (WRITES_STARVED * FIFO_BATCH) as usize, "{runs:?}")
                }
                Direction::Write => {
                    assert!(*n <= FIFO_BATCH as usize, "{runs:?}");
                    writes_done += n;
                }
            }
        }
        // Nothing expires within the first 140 ms, so every run continues
        // the sweep of its direction upwards.
        let mut i = 0;
        for (_, n) in &runs[..5] {
            let run = &h.log[i..i + n];
            assert!(run.windows(2).all(|w| w[0].sector <= w[1].sector));
            i += n;
        }
    }

    #[test]
    fn expired_read_is_served_within_read_expire_plus_one_batch() {
        let service = MSEC;
        let mut h = Harness::new(Deadline::new(), service);
        // A sequential reader keeps 4 requests queued ahead of the head.
        let stream = h.add_stream(Stream {
            depth: 4,
            ..Stream::greedy(Spec::read(1, 1_000_000))
        });
        h.run_until(10 * MSEC);
        // A read behind the head: the elevator never comes back to it on its
        // own while the stream keeps giving it nearer work.
        let t0 = h.now;
        h.submit(Spec::read(2, 8));
        h.run_until(3 * SEC);
        h.stop_stream(stream);
        let far = h.dispatches_of(2);
        assert_eq!(far.len(), 1);
        assert_eq!(far[0].inserted_at, t0);
        let waited = far[0].at - far[0].inserted_at;
        assert!(
            waited >= READ_EXPIRE,
            "served before expiring ({waited} ns): the test would prove nothing"
        );
        assert!(
            waited <= READ_EXPIRE + FIFO_BATCH as u64 * service,
            "waited {waited} ns"
        );
        // And the stream ran the whole time (the disk was never idle).
        assert!(h.count_between(1, t0, t0 + READ_EXPIRE) as u64 >= READ_EXPIRE / service - 1);
    }

    #[test]
    fn front_merge_moves_the_request_in_the_sort_tree() {
        let mut h = Harness::new(Deadline::new(), MSEC);
        h.submit(Spec::read(1, 100_000));
        let a = h.insert(Spec::read(2, 200_000));
        h.insert(Spec::read(3, 150_000));
        // A bio in front of `a` joins it: `a` now starts at 120_000 and
        // comes before the request at 150_000.
        {
            let rq = h.rqs.get_mut(a);
            rq.sector = 120_000;
            rq.sectors += 80_000;
        }
        let mut ctx = SchedCtx {
            now: h.now,
            rqs: &h.rqs,
            in_driver: 1,
            queue_depth: 1,
            rotational: true,
            cgroups: &h.cgroups,
            ticks: h.ticks,
            timer_request: None,
        };
        h.sched.merged(&mut ctx, a, MergeKind::Front);
        h.run_until(SEC);
        let got: Vec<u32> = h.log.iter().map(|d| d.pid).collect();
        assert_eq!(got, vec![1, 2, 3]);
    }
}
