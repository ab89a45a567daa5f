//! Per-entity load tracking as in Linux 3.8 to 3.17 (kernel/sched/fair.c,
//! `CONFIG_SMP`): each entity's runnable history as a geometric series of
//! 1024 us periods with y^32 = 1/2, its load contribution
//! (`load_avg_contrib`), each `cfs_rq`'s `runnable_load_avg` and decaying
//! `blocked_load_avg`, and each group's `load_avg` and `runnable_avg`.
//!
//! Two users: `update_cfs_shares()`, which weighs a group's entity on a
//! CPU against the group's tracked load on every CPU (blocked load of
//! threads that slept recently included), and the load balancer, which
//! compares CPUs by their `runnable_load_avg` (`weighted_cpuload()`).
//! A group whose threads run in short bursts on many CPUs thus gets a
//! small entity weight on the CPU where one of them wakes, hence a large
//! wake-up grain: the mechanism the CFS-v slides name.
//!
//! The fixed-point tables (`runnable_avg_yN_inv`, `runnable_avg_yN_sum`)
//! are computed here at compile time from their definition (y^n and the
//! floor of 1024 * sum y^k), not copied.

use crate::Nanos;

/// `LOAD_AVG_PERIOD`: the half-life of the series, in periods (fair.c).
pub const LOAD_AVG_PERIOD: u64 = 32;
/// `LOAD_AVG_MAX_N`: after this many full periods the series is at its
/// maximum (fair.c).
pub const LOAD_AVG_MAX_N: u64 = 345;
/// `LOAD_AVG_MAX`: the series' maximum, 1024 * sum y^k from k = 0 (fair.c).
pub const LOAD_AVG_MAX: u64 = 47742;
/// `NICE_0_SHIFT` (`SCHED_LOAD_SHIFT` on 3.x): 1024 is one CPU.
const NICE_0_SHIFT: u32 = 10;

/// (y^k) in 0.32 fixed point, k = 1 (y = 2^(-1/32), rounded down).
const fn mul_fix(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 32) as u64
}

const fn pow_fix(y: u64, k: u64) -> u64 {
    let mut r = 1u64 << 32;
    let mut i = 0;
    while i < k {
        r = mul_fix(r, y);
        i += 1;
    }
    r
}

/// The largest y in 0.32 fixed point with y^32 <= 1/2, by bisection.
const fn y_fix() -> u64 {
    let (mut lo, mut hi) = (1u64 << 31, 1u64 << 32);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if pow_fix(mid, LOAD_AVG_PERIOD) <= 1 << 31 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `runnable_avg_yN_inv[n]`: y^n in 0.32 fixed point, n < 32 (n = 0 is
/// 0xffffffff, as the kernel's).
const YN_INV: [u64; 32] = {
    let y = y_fix();
    let mut t = [0u64; 32];
    t[0] = 0xffff_ffff;
    let mut n = 1;
    while n < 32 {
        t[n] = pow_fix(y, n as u64);
        n += 1;
    }
    t
};

/// `runnable_avg_yN_sum[n]`: floor(1024 * sum y^k, k = 1..=n), n <= 32.
const YN_SUM: [u64; 33] = {
    let y = y_fix();
    let mut t = [0u64; 33];
    let mut acc = 0u64;
    let mut n = 1;
    while n <= 32 {
        acc += 1024 * pow_fix(y, n as u64);
        t[n] = acc >> 32;
        n += 1;
    }
    t
};

/// `decay_load()`: val * y^n.
pub fn decay_load(val: u64, n: u64) -> u64 {
    if n == 0 {
        return val;
    }
    if n > LOAD_AVG_PERIOD * 63 {
        return 0;
    }
    let (val, n) = (val >> (n / LOAD_AVG_PERIOD), n % LOAD_AVG_PERIOD);
    mul_fix(val, YN_INV[n as usize])
}

/// `__compute_runnable_contrib()`: sum of 1024 * y^k, k = 1..=n.
fn runnable_contrib(n: u64) -> u64 {
    let mut n = n;
    if n >= LOAD_AVG_MAX_N {
        return LOAD_AVG_MAX;
    }
    if n <= LOAD_AVG_PERIOD {
        return YN_SUM[n as usize];
    }
    let mut contrib = 0;
    while n > LOAD_AVG_PERIOD {
        contrib = contrib / 2 + YN_SUM[LOAD_AVG_PERIOD as usize];
        n -= LOAD_AVG_PERIOD;
    }
    decay_load(contrib, n) + YN_SUM[n as usize]
}

/// `struct sched_avg`: an entity's runnable history and load contribution.
#[derive(Clone, Debug, Default)]
pub struct SchedAvg {
    /// `runnable_avg_sum` and `runnable_avg_period`, in 1024 ns units.
    pub sum: u64,
    pub period: u64,
    /// `last_runnable_update`.
    pub last: Nanos,
    /// `load_avg_contrib`.
    pub contrib: u64,
    /// `decay_count`: how its contribution relates to its queue's decay.
    pub decay: Decay,
}

/// `se->avg.decay_count`'s three cases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Decay {
    /// Runnable, new, or moved by the balancer (0).
    #[default]
    Synced,
    /// Blocked; its queue's decay counter at that time (> 0).
    Blocked(u64),
    /// Blocked, and woken on another CPU (< 0): the sleep is accrued as
    /// not runnable when it is enqueued there.
    Moved,
}

impl SchedAvg {
    /// `init_task_runnable_average()`: a new task starts as if it had been
    /// runnable for its first slice (here one period), so its first
    /// contribution is its whole weight.
    pub fn new_task(now: Nanos) -> SchedAvg {
        SchedAvg {
            sum: 1024,
            period: 1024,
            last: now,
            ..Default::default()
        }
    }

    /// `__update_entity_runnable_avg()`: accrues the time since the last
    /// update, runnable or not; true when a period boundary was crossed
    /// (the contribution must be recomputed).
    pub fn update(&mut self, now: Nanos, runnable: bool) -> bool {
        let Some(delta) = now.checked_sub(self.last) else {
            self.last = now;
            return false;
        };
        let mut delta = delta >> 10;
        if delta == 0 {
            return false;
        }
        // The kernel moves `last` to `now`, dropping the sub-1024 ns rest.
        self.last = now;
        let mut decayed = false;
        let delta_w = self.period % 1024;
        if delta + delta_w >= 1024 {
            decayed = true;
            let fill = 1024 - delta_w;
            if runnable {
                self.sum += fill;
            }
            self.period += fill;
            delta -= fill;
            let periods = delta / 1024;
            delta %= 1024;
            self.sum = decay_load(self.sum, periods + 1);
            self.period = decay_load(self.period, periods + 1);
            let c = runnable_contrib(periods);
            if runnable {
                self.sum += c;
            }
            self.period += c;
        }
        if runnable {
            self.sum += delta;
        }
        self.period += delta;
        decayed
    }

    /// `__update_task_entity_contrib()`: weight times the runnable share.
    pub fn task_contrib(&self, weight: u64) -> u64 {
        self.sum * weight / (self.period + 1)
    }

    /// The runnable share of one CPU, 1024 = always
    /// (`__update_tg_runnable_avg()`'s `contrib`).
    pub fn runnable_share(&self) -> u64 {
        (self.sum << NICE_0_SHIFT) / (self.period + 1)
    }
}

/// A `cfs_rq`'s tracked load (the 3.x fields of the same names).
#[derive(Clone, Debug, Default)]
pub struct RqAvg {
    /// Sum of the contributions of its queued entities, `curr` included.
    pub runnable_load_avg: u64,
    /// Sum of the (decaying) contributions of its entities that block.
    pub blocked_load_avg: u64,
    /// Milliseconds (`clock >> 20`) of the last decay of the blocked load.
    pub last_decay: u64,
    /// Decays applied so far (`decay_counter`).
    pub decay_counter: u64,
    /// Load of tasks that left for another CPU while blocked
    /// (`removed_load`), taken off at the next update.
    pub removed_load: u64,
    /// What this queue last added to its group's `load_avg`.
    pub tg_load_contrib: u64,
    /// What this queue's group entity last added to the group's
    /// `runnable_avg`.
    pub tg_runnable_contrib: u64,
}

impl RqAvg {
    /// `subtract_blocked_load_contrib()`.
    pub fn subtract_blocked(&mut self, load: u64) {
        self.blocked_load_avg = self.blocked_load_avg.saturating_sub(load);
    }

    /// The decaying part of `update_cfs_rq_blocked_load()`: false when no
    /// millisecond passed and no update is forced.
    pub fn decay_blocked(&mut self, now: Nanos, force: bool) -> bool {
        let now_ms = now >> 20;
        let decays = now_ms.saturating_sub(self.last_decay);
        if decays == 0 && !force {
            return false;
        }
        let removed = std::mem::take(&mut self.removed_load);
        self.subtract_blocked(removed);
        if decays > 0 {
            self.blocked_load_avg = decay_load(self.blocked_load_avg, decays);
            self.decay_counter += decays;
            self.last_decay = now_ms;
        }
        true
    }

    /// `__update_cfs_rq_tg_load_contrib()`: the change to push into the
    /// group's `load_avg`, if it is forced or beyond 1/8 of the last one.
    pub fn tg_load_delta(&mut self, force: bool) -> i64 {
        let now = (self.runnable_load_avg + self.blocked_load_avg) as i64;
        let delta = now - self.tg_load_contrib as i64;
        if delta == 0 {
            return 0;
        }
        if force || delta.unsigned_abs() > self.tg_load_contrib / 8 {
            self.tg_load_contrib = now as u64;
            return delta;
        }
        0
    }
}

/// `__update_tg_runnable_avg()`: the change to push into the group's
/// `runnable_avg` from its entity's runnable share on one CPU, if beyond
/// 1/64 of the last one.
pub fn tg_runnable_delta(se: &SchedAvg, rq: &mut RqAvg) -> i64 {
    let now = se.runnable_share() as i64;
    let delta = now - rq.tg_runnable_contrib as i64;
    if delta.unsigned_abs() > rq.tg_runnable_contrib / 64 {
        rq.tg_runnable_contrib = now as u64;
        return delta;
    }
    0
}

/// `__update_group_entity_contrib()`: a group entity's contribution, its
/// queue's part of the group's load times the group's shares, scaled
/// down by the group's runnable average when the group uses less than
/// one CPU (so it weighs as a task of equal weight would).
pub fn group_contrib(rq_tg_load: u64, shares: u64, tg_load_avg: u64, tg_runnable: u64) -> u64 {
    let c = rq_tg_load * shares / (tg_load_avg + 1);
    if tg_runnable < 1024 {
        (c * tg_runnable) >> NICE_0_SHIFT
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_follow_their_definition() {
        // y^32 = 1/2 and the first sum is 1024 * y, within rounding of
        // the kernel's own tables (0xfa83b2da, 1002, 23371: its sums are
        // a little lower, 0.05% at n = 32, from rounding each term).
        assert!((YN_INV[1] as i64 - 0xfa83_b2da_i64).abs() < 4);
        assert_eq!(YN_SUM[1], 1002);
        assert!((YN_SUM[32] as i64 - 23371).abs() <= 16, "{}", YN_SUM[32]);
        assert_eq!(decay_load(1000, 32), 499);
        // Just below the cap, the series from k = 1 is the cap less about
        // its k = 0 term.
        let below = runnable_contrib(LOAD_AVG_MAX_N - 1) as i64;
        assert!((below + 1024 - LOAD_AVG_MAX as i64).abs() < 60, "{below}");
    }

    #[test]
    fn an_always_runnable_entity_tends_to_its_weight() {
        let mut a = SchedAvg::default();
        for ms in 1..=400 {
            a.update(ms * 1_000_000, true);
        }
        let c = a.task_contrib(1024);
        assert!(c > 1000, "{c}");
        // Blocked for 32 ms: about half of it.
        let mut b = a.clone();
        b.update(432_000_000, false);
        let half = b.task_contrib(1024);
        assert!((480..=560).contains(&half), "{half}");
    }

    #[test]
    fn an_entity_runnable_nine_tenths_of_the_time_contributes_nine_tenths() {
        let mut a = SchedAvg::default();
        let mut t = 0;
        for _ in 0..2000 {
            t += 100_000;
            a.update(t, false);
            t += 900_000;
            a.update(t, true);
        }
        let busy = a.task_contrib(1024);
        assert!((880..=960).contains(&busy), "{busy}");
    }
}
