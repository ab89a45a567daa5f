//! Boost budgets: how much boosted time a VM had in the trailing window, when
//! it will run out if it stays boosted, and when it may be boosted again.
//!
//! A VM that asks for help all the time (a buggy or greedy guest) would
//! otherwise starve the others for as long as it likes. The ledger keeps the
//! VM's boosted intervals inside the window; everything older is dropped, and
//! when a VM's boosts are so fragmented that more than [`MAX_INTERVALS`]
//! remain, two neighbours are merged into one of the same total length placed
//! as late as the second one allows. Moving boosted time later keeps it in the
//! window longer, so the ledger may overstate the VM's use, never understate
//! it: the budget still holds.

use std::collections::VecDeque;

use crate::Nanos;

/// The most closed intervals a ledger keeps. Design choice: 64 intervals cover
/// a window of boosts cut every quantum (10 s / 100 ms = 100 would be the
/// worst case with default knobs, and half of those fit in the default
/// budget), while bounding memory and the cost of each query.
pub const MAX_INTERVALS: usize = 64;

/// One VM's boosted time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetLedger {
    /// Closed boosted intervals `[start, end)`, in time order, disjoint, all
    /// ending at or before `open`'s start.
    closed: VecDeque<(Nanos, Nanos)>,
    /// Start of the boost in progress, if the VM is boosted.
    open: Option<Nanos>,
}

impl BudgetLedger {
    /// The VM is boosted from `now` on.
    pub fn start(&mut self, now: Nanos) {
        if self.open.is_none() {
            self.open = Some(now);
        }
    }

    /// The VM's boost ends at `now`.
    pub fn stop(&mut self, now: Nanos) {
        let Some(start) = self.open.take() else {
            return;
        };
        let end = now.max(start);
        if end == start {
            return;
        }
        match self.closed.back_mut() {
            Some(last) if last.1 >= start => last.1 = last.1.max(end),
            _ => self.closed.push_back((start, end)),
        }
        if self.closed.len() > MAX_INTERVALS {
            self.merge_cheapest_pair();
        }
    }

    /// Merges two neighbouring intervals `[a, b)` and `[c, d)` into
    /// `[c - (b - a), d)`: the same boosted time, the earlier part moved later
    /// by the gap between them. Of all neighbours it picks the pair that moves
    /// the least time the least far (smallest `(b - a) * (c - b)`, the oldest
    /// on a tie), so the overstatement stays small: always merging the two
    /// oldest would drag one ever-growing block forward by every gap it
    /// swallows, overstating the use by seconds.
    fn merge_cheapest_pair(&mut self) {
        let cost = |i: usize| {
            let (a, b) = self.closed[i];
            let c = self.closed[i + 1].0;
            (b - a) as u128 * (c - b) as u128
        };
        let Some(i) = (0..self.closed.len().saturating_sub(1)).min_by_key(|&i| (cost(i), i)) else {
            return;
        };
        let (a, b) = self.closed[i];
        if let Some(mut next) = self.closed.remove(i + 1) {
            next.0 -= b - a;
            self.closed[i] = next;
        }
    }

    /// Whether a boost is in progress.
    pub fn is_running(&self) -> bool {
        self.open.is_some()
    }

    /// How many closed intervals the ledger holds (bounded by
    /// [`MAX_INTERVALS`]).
    pub fn intervals(&self) -> usize {
        self.closed.len()
    }

    /// Drops intervals that ended before the window `[now - window, now]`.
    pub fn forget_before(&mut self, now: Nanos, window: Nanos) {
        let from = now.saturating_sub(window);
        while self.closed.front().is_some_and(|&(_, end)| end <= from) {
            self.closed.pop_front();
        }
    }

    /// Boosted time inside `[t - window, t]`, for any `t` at or after the last
    /// change, counting a boost in progress as lasting until `t`.
    pub fn used(&self, t: Nanos, window: Nanos) -> Nanos {
        let from = t.saturating_sub(window);
        let overlap = |start: Nanos, end: Nanos| end.min(t).saturating_sub(start.max(from));
        let closed: Nanos = self.closed.iter().map(|&(s, e)| overlap(s, e)).sum();
        closed + self.open.map_or(0, |s| overlap(s, t))
    }

    /// For a VM boosted now: the earliest time at or after `now` when its use
    /// of the window reaches `budget` if it stays boosted; `None` if that
    /// never happens (the budget is the whole window) or falls beyond the
    /// clock's range.
    ///
    /// While a boost runs, the use grows by the time boosted and shrinks only
    /// as older boosts slide out of the window, which can never outpace it;
    /// so the use is non-decreasing and a binary search finds the moment.
    pub fn exhausted_at(&self, now: Nanos, window: Nanos, budget: Nanos) -> Option<Nanos> {
        if budget >= window || self.open.is_none() {
            return None;
        }
        first_time(now, now.saturating_add(window), |t| {
            self.used(t, window) >= budget
        })
    }

    /// For a VM not boosted now: the earliest time at or after `now` when its
    /// use of the window has fallen to `target` or less. Without a boost the
    /// use only falls, and it is zero a window after the last boost.
    pub fn falls_to(&self, now: Nanos, window: Nanos, target: Nanos) -> Nanos {
        first_time(now, now.saturating_add(window), |t| {
            self.used(t, window) <= target
        })
        .unwrap_or(Nanos::MAX)
    }
}

/// The smallest `t` in `[lo, hi]` with `pred(t)`, for a predicate that stays
/// true once true; `None` if it is false at `hi`.
fn first_time(lo: Nanos, hi: Nanos, pred: impl Fn(Nanos) -> bool) -> Option<Nanos> {
    if !pred(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Nanos = 1_000;

    fn ledger(intervals: &[(Nanos, Nanos)]) -> BudgetLedger {
        let mut l = BudgetLedger::default();
        for &(s, e) in intervals {
            l.start(s);
            l.stop(e);
        }
        l
    }

    #[test]
    fn use_counts_only_the_window() {
        let l = ledger(&[(0, 100), (500, 700)]);
        assert_eq!(l.used(700, W), 300);
        assert_eq!(l.used(1_050, W), 250);
        assert_eq!(l.used(1_600, W), 100);
        assert_eq!(l.used(1_700, W), 0);
    }

    #[test]
    fn a_running_boost_counts_until_the_query_time() {
        let mut l = ledger(&[(0, 100)]);
        l.start(200);
        assert!(l.is_running());
        assert_eq!(l.used(300, W), 200);
    }

    #[test]
    fn adjacent_boosts_merge() {
        let l = ledger(&[(0, 100), (100, 200)]);
        assert_eq!(l.intervals(), 1);
        assert_eq!(l.used(200, W), 200);
    }

    #[test]
    fn exhaustion_accounts_for_time_sliding_out() {
        // 300 used in [0, 300); boosted again from 900, budget 500.
        let mut l = ledger(&[(0, 300)]);
        l.start(900);
        // At t: used = (300 - max(0, t - 1000)) + (t - 900) for t in [1000, 1300]
        // = 300 + 100 + ... reaches 500 at t = 1000 + x where 300 - x + 100 + x = 400:
        // constant 400 while the old boost slides out, then grows again at 1300.
        assert_eq!(l.exhausted_at(900, W, 500), Some(1_400));
        assert_eq!(l.used(1_400, W), 500);
        assert_eq!(l.used(1_399, W), 499);
    }

    #[test]
    fn a_whole_window_budget_never_binds() {
        let mut l = BudgetLedger::default();
        l.start(0);
        assert_eq!(l.exhausted_at(0, W, W), None);
    }

    #[test]
    fn use_falls_as_boosts_slide_out() {
        let l = ledger(&[(0, 300), (400, 500)]);
        assert_eq!(l.falls_to(500, W, 150), 1_250);
        assert_eq!(l.used(1_250, W), 150);
        assert_eq!(l.falls_to(500, W, 400), 500);
        assert_eq!(l.falls_to(500, W, 0), 1_500);
    }

    #[test]
    fn merging_overstates_fragmented_use_only_a_little() {
        // 10 ms on, 10 ms off for a 10 s window: 500 boosts for 64 slots.
        let (ms, window) = (1_000_000, 10_000_000_000);
        let mut l = BudgetLedger::default();
        for i in 0..500 {
            l.start(i * 20 * ms);
            l.stop(i * 20 * ms + 10 * ms);
        }
        let end = 500 * 20 * ms;
        for t in (end..end + window).step_by(7 * ms as usize) {
            let from = t - window;
            let truth: Nanos = (0..500u64)
                .map(|i| {
                    (i * 20 * ms + 10 * ms)
                        .min(t)
                        .saturating_sub((i * 20 * ms).max(from))
                })
                .sum();
            let used = l.used(t, window);
            assert!(used >= truth);
            assert!(used - truth <= 200 * ms, "t={t}: {used} vs {truth}");
        }
    }

    #[test]
    fn history_is_bounded_and_never_understated() {
        let mut l = BudgetLedger::default();
        let mut exact = Vec::new();
        for i in 0..200u64 {
            let (s, e) = (i * 10, i * 10 + 3);
            l.start(s);
            l.stop(e);
            exact.push((s, e));
            assert!(l.intervals() <= MAX_INTERVALS);
            let now = e;
            for t in now..now + 3 * W {
                if t % 37 != 0 {
                    continue;
                }
                let truth: Nanos = exact
                    .iter()
                    .map(|&(s, e): &(Nanos, Nanos)| {
                        e.min(t).saturating_sub(s.max(t.saturating_sub(W)))
                    })
                    .sum();
                assert!(l.used(t, W) >= truth, "t={t}");
            }
        }
        // Merging moves boosted time, it never loses any.
        let total: Nanos = l.closed.iter().map(|&(s, e)| e - s).sum();
        assert_eq!(total, 200 * 3);
        l.forget_before(10_000, W);
        assert_eq!(l.intervals(), 0);
    }
}
