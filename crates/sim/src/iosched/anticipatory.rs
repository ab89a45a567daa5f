//! The anticipatory scheduler (`block/as-iosched.c`, removed in 2.6.33;
//! this follows the last version, 2.6.32, and
//! `Documentation/block/as-iosched.txt`).
//!
//! AS is deadline plus one idea. A process that reads a file synchronously
//! issues its next read a moment after the previous one completes; by then a
//! deadline-style elevator has already moved the head to some other
//! process's request, far away, and the reader's next request pays a seek
//! there and back. With two such readers the disk spends its time seeking
//! ("deceptive idleness"). So after a process's sync request completes, AS
//! may keep the disk idle for a short while (`antic_expire`), betting that
//! the same process will soon ask for something close by.
//!
//! The bet is only placed when it is likely to pay, judged from each
//! process's history (`struct as_io_context`):
//! - its mean **think time** between a completion and its next sync request:
//!   a process that thinks longer than `antic_expire` would not be back in
//!   time, so waiting for it only wastes the disk;
//! - its mean **seek distance**: a request from anyone that is closer to the
//!   head than what this process usually asks for ends the wait at once,
//!   since it is at least as good as what we are waiting for (and it also
//!   counts in the process's history, which helps cooperating processes
//!   that work in the same area).
//!
//! The wait also ends when the process submits anything (a read, or a write
//! that is presumably an fsync), when it still has requests queued, and
//! when the timer runs out; then AS dispatches as deadline would.
//!
//! Around this sits a deadline-like scheduler, with two classes, sync
//! ("reads") and async ("writes") as in the 2.6.32 code, which sorts by
//! `rq_is_sync()`, not by direction:
//! - a sorted tree per class, served by a one-way elevator that allows short
//!   backward seeks (up to `MAXBACK`, weighted twice as a forward seek);
//! - a FIFO per class with `read_expire`/`write_expire`, checked at most once
//!   per expiry interval so that many expired requests do not turn into a
//!   seek storm;
//! - batches that last a time (`read_batch_expire`, `write_batch_expire`)
//!   rather than a count; the write batch's request count is tuned from how
//!   long write batches actually take (`update_write_batch`). A change of
//!   batch waits until the previous batch's requests have completed.
//!
//! Simplifications:
//! - Times are in nanoseconds. AS was written for HZ = 1000 (the 2.6
//!   default when it was the default scheduler): `antic_expire` is HZ/150,
//!   "default around 6ms", which is 6 jiffies at HZ = 1000 but 1 jiffy
//!   (4 ms) at HZ = 250 and 10 ms at HZ = 100. We use the 6 ms the code and
//!   its documentation mean, and compute `as_close_req`'s delay in ms as the
//!   2.6.16 code did.
//! - Processes never exit in the simulator, so the exit-probability
//!   heuristics (`exit_prob`, `exit_no_coop`) never fire and are left out.
//! - `aic->nr_dispatched` counts requests on the dispatch list not yet taken
//!   by the driver; here dispatch hands the request straight to the device,
//!   so that count is always zero and is left out.
//! - The next request in elevator order is computed when needed (nearest
//!   request at or after the head, or the first one after wrapping, against
//!   the nearest one behind it, by `as_choose_req`) instead of cached in
//!   `next_rq`; that is the choice the cache converges to.

use super::{IoScheduler, MergeKind, SchedCtx, MSEC};
use crate::request::{Pid, RqId};
use devmodel::Nanos;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// `default_read_expire` (`HZ / 8`): "max time before a read is submitted".
pub const READ_EXPIRE: Nanos = 125 * MSEC;
/// `default_write_expire` (`HZ / 4`).
pub const WRITE_EXPIRE: Nanos = 250 * MSEC;
/// `default_read_batch_expire` (`HZ / 2`): how long a stream of reads may
/// run before AS looks at whether it is time to switch to writes.
pub const READ_BATCH_EXPIRE: Nanos = 500 * MSEC;
/// `default_write_batch_expire` (`HZ / 8`): the target length of a write
/// batch, for the auto-tuning of `write_batch_count`.
pub const WRITE_BATCH_EXPIRE: Nanos = 125 * MSEC;
/// `default_antic_expire` (`HZ / 150`, "default around 6ms"): the longest
/// AS waits for the anticipated process. See the module documentation for
/// why 6 ms and not the jiffy-rounded value.
pub const ANTIC_EXPIRE: Nanos = 6 * MSEC;
/// `MAX_THINKTIME` (`HZ / 50`): think times are clipped to 20 ms, so that a
/// process in a long non-I/O phase gets a penalty but not one that takes
/// ages to decay.
pub const MAX_THINKTIME: Nanos = 20 * MSEC;
/// `MAXBACK` (1024 * 1024 sectors): the farthest the elevator goes backward
/// for a request.
pub const MAXBACK: u64 = 1024 * 1024;
/// `BACK_PENALTY` (2): a backward seek counts twice its distance.
pub const BACK_PENALTY: u64 = 2;
/// `as_close_req()`: a request within 8192 sectors (4 MiB) of the head is
/// "close"; the window doubles every ms the anticipation has lasted.
const CLOSE_DELTA: u64 = 8192;
/// `as_close_req()`: past 20 ms of waiting, anything is close enough.
const CLOSE_MAX_DELAY_MS: u64 = 20;
/// `as_init_queue()`: `write_batch_count = batch_expire[ASYNC] / 10`, at
/// least 2; in jiffies at HZ = 1000, i.e. 12.
const WRITE_BATCH_COUNT_INIT: u32 = {
    let n = (WRITE_BATCH_EXPIRE / MSEC / 10) as u32;
    if n < 2 {
        2
    } else {
        n
    }
};

/// `BLK_RW_ASYNC` / `BLK_RW_SYNC`: the two classes AS sorts into.
const ASYNC: usize = 0;
const SYNC: usize = 1;

/// `enum anticipation_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Antic {
    /// Not anticipating (normal operation).
    Off,
    /// The last read has not yet completed.
    WaitReq,
    /// Anticipating a request vs the last read, which has completed.
    WaitNext,
    /// Anticipating but found a candidate or timed out.
    Finished,
}

/// What AS remembers about a queued request.
#[derive(Clone, Copy, Debug, Default)]
struct AsRq {
    sector: u64,
    seq: u64,
    /// `rq_fifo_time`: expiry.
    expires: Nanos,
    dir: u8,
    pid: Pid,
}

/// `struct as_io_context`: one per process.
#[derive(Clone, Copy, Debug, Default)]
struct Aic {
    /// Requests of this process queued in the scheduler.
    nr_queued: u32,
    /// `AS_TASK_IOSTARTED`: the process has started some sync I/O.
    io_started: bool,
    /// `AS_TASK_IORUNNING`: some of its sync I/O has completed.
    io_running: bool,
    last_end_request: Nanos,
    /// Decaying averages, fixed point with 1.0 = 256 samples.
    ttime_total: u64,
    ttime_samples: u64,
    ttime_mean: Nanos,
    seek_total: u64,
    seek_samples: u64,
    seek_mean: u64,
    /// End of its last sync request.
    last_request_pos: u64,
}

/// The scheduler-wide think time and seek distance of processes on their
/// first sample (`new_ttime_*`, `new_seek_*`), used to judge a process that
/// has no history yet.
#[derive(Clone, Copy, Debug, Default)]
struct NewProc {
    ttime_total: u64,
    ttime_mean: Nanos,
    seek_total: u64,
    seek_mean: u64,
}

/// A request as the anticipation logic looks at it.
#[derive(Clone, Copy, Debug)]
struct Cand {
    pid: Pid,
    sync: bool,
    sector: u64,
    end: u64,
}

/// `as_update_thinktime()`.
fn update_thinktime(new: &mut NewProc, aic: &mut Aic, ttime: Nanos) {
    if aic.ttime_samples == 0 {
        new.ttime_total = (7 * new.ttime_total + 256 * ttime) / 8;
        new.ttime_mean = new.ttime_total / 256;
    }
    aic.ttime_samples = (7 * aic.ttime_samples + 256) / 8;
    aic.ttime_total = (7 * aic.ttime_total + 256 * ttime) / 8;
    aic.ttime_mean = (aic.ttime_total + 128) / aic.ttime_samples;
}

/// `as_update_seekdist()`.
fn update_seekdist(new: &mut NewProc, aic: &mut Aic, sdist: u64) {
    if aic.seek_samples == 0 {
        new.seek_total = (7 * new.seek_total + 256 * sdist) / 8;
        new.seek_mean = new.seek_total / 256;
    }
    // Don't let the odd fragment or page-in blow the mean up: clip to four
    // times the mean plus 1 GiB early on, plus 64 MiB once settled.
    let sdist = if aic.seek_samples <= 60 {
        sdist.min(aic.seek_mean * 4 + 2 * 1024 * 1024)
    } else {
        sdist.min(aic.seek_mean * 4 + 2 * 1024 * 64)
    };
    aic.seek_samples = (7 * aic.seek_samples + 256) / 8;
    aic.seek_total = (7 * aic.seek_total + 256 * sdist) / 8;
    aic.seek_mean = (aic.seek_total + aic.seek_samples / 2) / aic.seek_samples;
}

/// `as_update_iohist()`: a sync request from the process updates its think
/// time (only when nothing of it was in flight: otherwise it did not wait)
/// and its seek distance.
fn update_iohist(new: &mut NewProc, aic: &mut Aic, c: Cand, now: Nanos) {
    if !c.sync {
        return;
    }
    if aic.io_running || aic.io_started {
        let mut ttime = 0;
        if aic.io_running && aic.nr_queued == 0 {
            ttime = now
                .saturating_sub(aic.last_end_request)
                .min(MAX_THINKTIME - 1);
        }
        update_thinktime(new, aic, ttime);
        update_seekdist(new, aic, c.sector.abs_diff(aic.last_request_pos));
    }
    aic.last_request_pos = c.end;
    aic.io_started = true;
}

/// The anticipatory scheduler. See the module documentation.
#[derive(Debug)]
pub struct Anticipatory {
    /// `sort_list[ASYNC|SYNC]`: (start sector, id).
    sort_list: [BTreeSet<(u64, RqId)>; 2],
    /// `fifo_list[ASYNC|SYNC]`: (arrival number, id).
    fifo_list: [BTreeSet<(u64, RqId)>; 2],
    rqs: Vec<AsRq>,
    aics: HashMap<Pid, Aic>,
    new: NewProc,
    /// `last_sector[dir]`: end of the last dispatch per class.
    last_sector: [u64; 2],
    current_batch_expires: Nanos,
    last_check_fifo: [Nanos; 2],
    /// Waiting for the old batch's requests to complete.
    changed_batch: bool,
    /// Waiting for the first read of a new read batch to complete.
    new_batch: bool,
    batch_data_dir: usize,
    write_batch_count: u32,
    current_write_count: u32,
    write_batch_idled: bool,
    antic_status: Antic,
    antic_start: Nanos,
    /// The process we may anticipate on: owner of the last sync dispatch.
    io_context: Option<Pid>,
    /// Its last request has completed.
    ioc_finished: bool,
    /// Requests dispatched and not completed.
    nr_dispatched: usize,
    seq: u64,
    queued: usize,
    fifo_expire: [Nanos; 2],
    batch_expire: [Nanos; 2],
    antic_expire: Nanos,
}

impl Default for Anticipatory {
    fn default() -> Self {
        Anticipatory::new()
    }
}

impl Anticipatory {
    pub fn new() -> Anticipatory {
        Anticipatory {
            sort_list: [BTreeSet::new(), BTreeSet::new()],
            fifo_list: [BTreeSet::new(), BTreeSet::new()],
            rqs: Vec::new(),
            aics: HashMap::default(),
            new: NewProc::default(),
            last_sector: [0, 0],
            // `as_init_queue()`: jiffies + batch_expire[SYNC], at time 0.
            current_batch_expires: READ_BATCH_EXPIRE,
            last_check_fifo: [0, 0],
            changed_batch: false,
            new_batch: false,
            // kzalloc'd: 0 is BLK_RW_ASYNC.
            batch_data_dir: ASYNC,
            write_batch_count: WRITE_BATCH_COUNT_INIT,
            current_write_count: 0,
            write_batch_idled: false,
            antic_status: Antic::Off,
            antic_start: 0,
            io_context: None,
            ioc_finished: false,
            nr_dispatched: 0,
            seq: 0,
            queued: 0,
            fifo_expire: [WRITE_EXPIRE, READ_EXPIRE],
            batch_expire: [WRITE_BATCH_EXPIRE, READ_BATCH_EXPIRE],
            antic_expire: ANTIC_EXPIRE,
        }
    }

    fn cand(&self, id: RqId, ctx: &SchedCtx) -> Cand {
        let r = ctx.rq(id);
        Cand {
            pid: r.ioc.pid,
            sync: r.sync,
            sector: r.sector,
            end: r.end_sector(),
        }
    }

    /// `as_choose_req()`: the better of two requests of one class, by
    /// position only: the nearest in front of the head, or a short way
    /// behind it at twice the cost; failing both, the lowest one (one
    /// backward seek, then forward again).
    fn choose_req(&self, dir: usize, a: Option<RqId>, b: Option<RqId>) -> Option<RqId> {
        let (a, b) = match (a, b) {
            (None, b) => return b,
            (a, None) => return a,
            (Some(a), Some(b)) if a == b => return Some(b),
            (Some(a), Some(b)) => (a, b),
        };
        let last = self.last_sector[dir];
        let (s1, s2) = (self.rqs[a].sector, self.rqs[b].sector);
        let dist = |s: u64| -> Option<u64> {
            if s >= last {
                Some(s - last)
            } else if s + MAXBACK >= last {
                Some((last - s) * BACK_PENALTY)
            } else {
                None // behind the head: wraps
            }
        };
        Some(match (dist(s1), dist(s2)) {
            (Some(_), None) => a,
            (None, Some(_)) => b,
            (None, None) => {
                if s1 <= s2 {
                    a
                } else {
                    b
                }
            }
            (Some(d1), Some(d2)) => {
                if d1 < d2 || (d1 == d2 && s1 >= s2) {
                    a
                } else {
                    b
                }
            }
        })
    }

    /// `next_rq[dir]`: the next request in elevator order.
    fn next_rq(&self, dir: usize) -> Option<RqId> {
        let last = self.last_sector[dir];
        let tree = &self.sort_list[dir];
        let next = tree
            .range((last, 0)..)
            .next()
            .or_else(|| tree.first())
            .map(|&(_, id)| id);
        let prev = tree.range(..(last, 0)).next_back().map(|&(_, id)| id);
        self.choose_req(dir, next, prev)
    }

    fn fifo_head(&self, dir: usize) -> Option<RqId> {
        self.fifo_list[dir].first().map(|&(_, id)| id)
    }

    /// `as_antic_expired()`.
    fn antic_expired(&self, now: Nanos) -> bool {
        now.saturating_sub(self.antic_start) >= self.antic_expire
    }

    /// `as_antic_waitnext()`: the anticipated request completed; wait for
    /// its successor until `antic_start + antic_expire`.
    fn antic_waitnext(&mut self, ctx: &mut SchedCtx) {
        ctx.arm_timer(self.antic_start + self.antic_expire);
        self.antic_status = Antic::WaitNext;
    }

    /// `as_antic_waitreq()`: start anticipating; the clock only starts when
    /// the process's request completes, i.e. when the process wakes up.
    fn antic_waitreq(&mut self, ctx: &mut SchedCtx) {
        if self.antic_status == Antic::Off {
            if self.io_context.is_none() || self.ioc_finished {
                self.antic_waitnext(ctx);
            } else {
                self.antic_status = Antic::WaitReq;
            }
        }
    }

    /// `as_antic_stop()`.
    fn antic_stop(&mut self, ctx: &mut SchedCtx) {
        match self.antic_status {
            Antic::WaitNext => {
                ctx.cancel_timer();
                self.antic_status = Antic::Finished;
            }
            Antic::WaitReq => self.antic_status = Antic::Finished,
            Antic::Off | Antic::Finished => {}
        }
    }

    /// `as_close_req()`: is `c` close to the head, given how long we have
    /// waited and how far the anticipated process usually seeks?
    fn close_req(&self, aic: &Aic, c: Cand, now: Nanos) -> bool {
        let last = self.last_sector[self.batch_data_dir];
        let next = c.sector;
        let delay_ms = if self.antic_status == Antic::Off || !self.ioc_finished {
            0
        } else {
            now.saturating_sub(self.antic_start) / MSEC
        };
        let delta = if delay_ms == 0 {
            CLOSE_DELTA
        } else if delay_ms <= CLOSE_MAX_DELAY_MS && delay_ms <= self.antic_expire / MSEC {
            CLOSE_DELTA << delay_ms
        } else {
            return true;
        };
        if last <= next + (delta >> 1) && next <= last + delta {
            return true;
        }
        let s = last.abs_diff(next);
        if aic.seek_samples == 0 {
            // Process has just started I/O: judge from other processes.
            self.new.seek_mean > s
        } else {
            aic.seek_mean > s
        }
    }

    /// `as_can_break_anticipation()`: is `c` (or the passing of time) a
    /// reason to stop waiting for the anticipated process?
    fn can_break_anticipation(&mut self, c: Option<Cand>, now: Nanos) -> bool {
        let Some(pid) = self.io_context else {
            return true;
        };
        if c.is_some_and(|c| c.pid == pid) {
            // The request we were waiting for, or a write from the same
            // process (presumably an fsync): no more reads are coming.
            return true;
        }
        if self.ioc_finished && self.antic_expired(now) {
            // Should already be Finished; the timer has not run yet.
            return true;
        }
        let Some(mut aic) = self.aics.get(&pid).copied() else {
            return false;
        };
        if aic.nr_queued > 0 {
            // It has more requests queued: no point waiting.
            return true;
        }
        if let Some(c) = c {
            if c.sync && self.close_req(&aic, c, now) {
                // A close request that is not ours. Counting it in our
                // history helps processes that cooperate in one area.
                update_iohist(&mut self.new, &mut aic, c, now);
                self.aics.insert(pid, aic);
                return true;
            }
        }
        if aic.ttime_samples == 0 {
            // No history: judge from how new processes usually behave.
            self.new.ttime_mean > self.antic_expire
        } else {
            // The process thinks too long between requests to be back in
            // time.
            aic.ttime_mean > self.antic_expire
        }
    }

    /// `as_can_anticipate()`: keep waiting rather than dispatch `rq`?
    fn can_anticipate(&mut self, rq: Option<Cand>, now: Nanos) -> bool {
        if self.io_context.is_none() {
            // The last request submitted was a write.
            return false;
        }
        if self.antic_status == Antic::Finished {
            // Just finished waiting: run the next request.
            return false;
        }
        !self.can_break_anticipation(rq, now)
    }

    /// `as_fifo_expired()`: rate-limited to one check per expiry interval,
    /// so that a pile of expired requests does not become a seek storm.
    fn fifo_expired(&mut self, dir: usize, now: Nanos) -> bool {
        if now.saturating_sub(self.last_check_fifo[dir]) < self.fifo_expire[dir] {
            return false;
        }
        self.last_check_fifo[dir] = now;
        self.fifo_head(dir)
            .is_some_and(|id| now > self.rqs[id].expires)
    }

    /// `as_batch_expired()`.
    fn batch_expired(&self, now: Nanos) -> bool {
        if self.changed_batch || self.new_batch {
            return false;
        }
        if self.batch_data_dir == SYNC {
            now > self.current_batch_expires
        } else {
            now > self.current_batch_expires || self.current_write_count == 0
        }
    }

    /// `update_write_batch()`: size the next write batch (in requests) so
    /// that it lasts about `write_batch_expire`.
    fn update_write_batch(&mut self, now: Nanos) {
        let batch = self.batch_expire[ASYNC] as i64;
        let write_time = (now as i64 - self.current_batch_expires as i64 + batch).max(0);
        if write_time > batch && !self.write_batch_idled {
            if write_time > batch * 3 {
                self.write_batch_count /= 2;
            } else {
                self.write_batch_count = self.write_batch_count.saturating_sub(1);
            }
        } else if write_time < batch && self.current_write_count == 0 {
            if batch > write_time * 3 {
                self.write_batch_count *= 2;
            } else {
                self.write_batch_count += 1;
            }
        }
        self.write_batch_count = self.write_batch_count.max(1);
    }

    /// `as_move_to_dispatch()`.
    fn move_to_dispatch(&mut self, ctx: &mut SchedCtx, id: RqId) -> RqId {
        self.antic_stop(ctx);
        self.antic_status = Antic::Off;
        let r = self.rqs[id];
        let dir = r.dir as usize;
        self.last_sector[dir] = ctx.rq(id).end_sector();
        if dir == SYNC {
            // In case we have to anticipate after this.
            self.io_context = Some(r.pid);
        } else {
            self.io_context = None;
            self.current_write_count = self.current_write_count.saturating_sub(1);
        }
        self.ioc_finished = false;
        self.sort_list[dir].remove(&(r.sector, id));
        self.fifo_list[dir].remove(&(r.seq, id));
        if let Some(aic) = self.aics.get_mut(&r.pid) {
            aic.nr_queued -= 1;
        }
        self.queued -= 1;
        self.nr_dispatched += 1;
        id
    }
}

impl IoScheduler for Anticipatory {
    fn name(&self) -> &'static str {
        "anticipatory"
    }

    /// `as_add_request()` and `as_update_rq()`.
    fn insert(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        let c = self.cand(rq, ctx);
        let now = ctx.now;
        let dir = if c.sync { SYNC } else { ASYNC };
        let aic = self.aics.entry(c.pid).or_default();
        update_iohist(&mut self.new, aic, c, now);
        aic.nr_queued += 1;
        if self.rqs.len() <= rq {
            self.rqs.resize(rq + 1, AsRq::default());
        }
        self.seq += 1;
        self.rqs[rq] = AsRq {
            sector: c.sector,
            seq: self.seq,
            expires: now + self.fifo_expire[dir],
            dir: dir as u8,
            pid: c.pid,
        };
        self.sort_list[dir].insert((c.sector, rq));
        self.fifo_list[dir].insert((self.seq, rq));
        self.queued += 1;
        // Is this the request we have been anticipating?
        if matches!(self.antic_status, Antic::WaitReq | Antic::WaitNext)
            && self.can_break_anticipation(Some(c), now)
        {
            self.antic_stop(ctx);
        }
    }

    /// `as_merged_request()`: a front merge repositions the request.
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

    /// `as_dispatch_request()`.
    fn dispatch(&mut self, ctx: &mut SchedCtx) -> Option<RqId> {
        let now = ctx.now;
        let reads = !self.fifo_list[SYNC].is_empty();
        let writes = !self.fifo_list[ASYNC].is_empty();

        // Signal that the write batch was uncontended, so we can't time it.
        if self.batch_data_dir == ASYNC && !reads && (self.current_write_count == 0 || !writes) {
            self.write_batch_idled = true;
        }

        if !(reads || writes)
            || matches!(self.antic_status, Antic::WaitReq | Antic::WaitNext)
            || self.changed_batch
        {
            return None;
        }

        enum Pick {
            Rq(RqId),
            FifoExpired,
        }
        let pick = 'select: {
            if !(reads && writes && self.batch_expired(now)) {
                // The batch is still running, or only one class has work.
                let rq = self.next_rq(self.batch_data_dir);
                if self.batch_data_dir == SYNC && self.antic_expire > 0 {
                    if self.fifo_expired(SYNC, now) {
                        break 'select Pick::FifoExpired;
                    }
                    let c = rq.map(|id| self.cand(id, ctx));
                    if self.can_anticipate(c, now) {
                        self.antic_waitreq(ctx);
                        return None;
                    }
                }
                if let Some(rq) = rq {
                    if reads && !writes {
                        self.current_batch_expires = now + self.batch_expire[SYNC];
                    }
                    break 'select Pick::Rq(rq);
                }
            }

            // Not running a batch: choose the class.
            if reads && !(writes && self.batch_data_dir == SYNC) {
                if self.batch_data_dir == ASYNC {
                    self.changed_batch = true;
                }
                self.batch_data_dir = SYNC;
                self.last_check_fifo[SYNC] = now;
                break 'select Pick::Rq(self.fifo_head(SYNC)?);
            }
            // The last batch was a read (or there are only writes).
            if self.batch_data_dir == SYNC {
                self.changed_batch = true;
                // new_batch might be set when the queue ran out of reads.
                self.new_batch = false;
            }
            self.batch_data_dir = ASYNC;
            self.current_write_count = self.write_batch_count;
            self.write_batch_idled = false;
            self.last_check_fifo[ASYNC] = now;
            Pick::Rq(self.fifo_head(ASYNC)?)
        };

        // If a request has expired, serve it.
        let dir = self.batch_data_dir;
        let rq = match pick {
            Pick::Rq(rq) if !self.fifo_expired(dir, now) => rq,
            _ => self.fifo_head(dir)?,
        };

        if self.changed_batch {
            // Let the previous batch drain before starting the new one.
            if self.nr_dispatched > 0 {
                return None;
            }
            if dir == ASYNC {
                self.current_batch_expires = now + self.batch_expire[ASYNC];
            } else {
                self.new_batch = true;
            }
            self.changed_batch = false;
        }
        Some(self.move_to_dispatch(ctx, rq))
    }

    /// `as_completed_request()` and `as_put_io_context()`.
    fn completed(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        let now = ctx.now;
        let c = self.cand(rq, ctx);
        let dir = if c.sync { SYNC } else { ASYNC };
        if self.changed_batch && self.nr_dispatched == 1 {
            self.current_batch_expires = now + self.batch_expire[self.batch_data_dir];
            self.changed_batch = false;
            if self.batch_data_dir == SYNC {
                self.new_batch = true;
            }
        }
        self.nr_dispatched = self.nr_dispatched.saturating_sub(1);

        // Start counting the batch from when a request of that class is
        // actually served (helps devices with deep queues and write caches).
        if self.new_batch && self.batch_data_dir == dir {
            self.update_write_batch(now);
            self.current_batch_expires = now + self.batch_expire[SYNC];
            self.new_batch = false;
        }

        if self.io_context == Some(c.pid) {
            self.antic_start = now;
            self.ioc_finished = true;
            if self.antic_status == Antic::WaitReq {
                // We were waiting on this request; now anticipate the next.
                self.antic_waitnext(ctx);
            }
        }

        if c.sync {
            let aic = self.aics.entry(c.pid).or_default();
            aic.io_running = true;
            aic.last_end_request = now;
        }
    }

    /// `as_antic_timeout()`: stop waiting; the block layer dispatches next.
    fn timer(&mut self, _ctx: &mut SchedCtx) {
        if matches!(self.antic_status, Antic::WaitReq | Antic::WaitNext) {
            self.antic_status = Antic::Finished;
        }
    }

    fn queued(&self) -> usize {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Harness, Spec, Stream};
    use super::super::SEC;
    use super::*;

    const SERVICE: Nanos = 2 * MSEC;

    #[test]
    fn waits_for_a_close_read_from_the_same_process() {
        let mut h = Harness::new(Anticipatory::new(), SERVICE);
        h.submit(Spec::read(1, 0));
        // Another process's read, far away, queued while A's is on the disk.
        h.submit(Spec::read(2, 50_000_000));
        // A's follow-up arrives 2 ms after its first read completed.
        h.submit_at(SERVICE + 2 * MSEC, Spec::read(1, 8));
        h.run_until(SEC);
        let order: Vec<u32> = h.log.iter().map(|d| d.pid).collect();
        assert_eq!(order, vec![1, 1, 2]);
        // The disk idled for A instead of seeking away: A's second read went
        // out the moment it arrived.
        assert_eq!(h.log[1].at, SERVICE + 2 * MSEC);
        // The wait started at A's completion, with the 6 ms timer.
        assert_eq!(h.timer_log[0], (SERVICE, SERVICE + ANTIC_EXPIRE));
        // After A's second read, A had no more: AS waited again (A's think
        // time, 2 ms, is short), timed out, and moved on to B.
        let a2_done = h.log[1].at + SERVICE;
        assert_eq!(h.log[2].at, a2_done + ANTIC_EXPIRE);
    }

    #[test]
    fn without_a_follow_up_it_times_out_and_moves_on() {
        let mut h = Harness::new(Anticipatory::new(), SERVICE);
        h.submit(Spec::read(1, 0));
        h.submit(Spec::read(2, 50_000_000));
        h.run_until(SEC);
        let order: Vec<u32> = h.log.iter().map(|d| d.pid).collect();
        assert_eq!(order, vec![1, 2]);
        assert_eq!(h.log[1].at, SERVICE + ANTIC_EXPIRE);
        assert_eq!(h.timer_log.len(), 1);
        assert_eq!(h.sched.queued(), 0);
    }

    #[test]
    fn does_not_wait_for_a_process_that_thinks_too_long() {
        let mut h = Harness::new(Anticipatory::new(), SERVICE);
        // A reads alone with 15 ms of think time between reads: longer than
        // antic_expire, so waiting for it would only waste the disk.
        let a = h.add_stream(Stream {
            think: 15 * MSEC,
            ..Stream::greedy(Spec::read(1, 0))
        });
        // Reads go out at 0, 17, 34, 51 ms (2 ms service + 15 ms think).
        h.run_until(52 * MSEC);
        h.stop_stream(a);
        // B's far read arrives while A's last read is on the disk...
        let a_last = *h.log.last().unwrap();
        assert_eq!(a_last.pid, 1);
        assert!(h.now < a_last.at + SERVICE);
        h.submit(Spec::read(2, 50_000_000));
        h.run_until(SEC);
        // ... and goes out as soon as A's read completes.
        let b = h.dispatches_of(2);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].at, a_last.at + SERVICE);
    }

    #[test]
    fn a_close_request_from_another_process_ends_the_wait() {
        let mut h = Harness::new(Anticipatory::new(), SERVICE);
        h.submit(Spec::read(1, 1_000_000));
        // Another process reads right next to where A's read ends: at least
        // as good as what A would ask for, so no reason to wait.
        h.submit(Spec::read(2, 1_000_000 + 8 + 64));
        h.run_until(SEC);
        let b = h.dispatches_of(2);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].at, SERVICE);
        assert!(h.timer_log.is_empty());
    }

    #[test]
    fn an_expired_read_is_served_despite_anticipation() {
        let mut h = Harness::new(Anticipatory::new(), SERVICE);
        // A greedy sequential reader that AS keeps anticipating on...
        h.add_stream(Stream::greedy(Spec::read(1, 10_000_000)));
        h.run_until(10 * MSEC);
        // ... and a read far behind it, which the elevator would not pick.
        let t0 = h.now;
        h.submit(Spec::read(2, 8));
        h.run_until(2 * SEC);
        let b = h.dispatches_of(2);
        assert_eq!(b.len(), 1);
        let waited = b[0].at - t0;
        assert!(waited > READ_EXPIRE, "waited {waited}");
        // The FIFO is checked at most once per read_expire, so the wait is
        // below twice read_expire plus a request.
        assert!(waited <= 2 * READ_EXPIRE + SERVICE, "waited {waited}");
    }
}
