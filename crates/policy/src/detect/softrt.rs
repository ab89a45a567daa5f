//! Soft real-time classification of one process's I/O, in the manner of
//! BFQ: a process whose I/O comes in regular bursts at a low average rate
//! (audio and video players, for instance) needs its bursts served on time
//! more than it needs bandwidth.

use std::collections::VecDeque;

use crate::{Nanos, MS, SEC};

/// Bytes per sector, the unit of BFQ's rate limit.
const SECTOR_BYTES: u64 = 512;

/// The rules a process's bursts must follow to count as soft real-time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoftRtRules {
    /// I/O after a pause longer than this starts a new burst. Default 8 ms:
    /// BFQ's `slice_idle`, how long BFQ waits for more I/O from a queue before
    /// taking it as done. A daemon that samples per-process I/O less often
    /// must raise it above its sampling period.
    pub burst_gap_ns: Nanos,
    /// How many periods (between burst starts) must agree before the process
    /// counts as soft real-time. Default 3: design choice, the fewest that
    /// show a rhythm rather than a coincidence.
    pub min_periods: usize,
    /// How far each period may stray from their mean, in percent of the mean.
    /// Default 25: design choice, loose enough for timer and scheduling
    /// jitter, tight enough to tell a player from a random reader.
    pub jitter_percent: u32,
    /// The average rate must stay below this, in 512-byte sectors per second.
    /// Default 7000: BFQ's `bfq_wr_max_softrt_rate`.
    pub max_sectors_per_s: u64,
    /// A soft real-time need lasts until this long after the next burst is
    /// due, so it stays live while bursts keep coming on time. Default 300 ms:
    /// BFQ's `bfq_wr_rt_max_time`, how long one soft real-time raising lasts.
    pub hold_ns: Nanos,
}

impl Default for SoftRtRules {
    fn default() -> Self {
        SoftRtRules {
            burst_gap_ns: 8 * MS,
            min_periods: 3,
            jitter_percent: 25,
            max_sectors_per_s: 7000,
            hold_ns: 300 * MS,
        }
    }
}

/// One burst of I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Burst {
    pub start: Nanos,
    pub bytes: u64,
}

/// Splits one process's I/O into bursts and tells, at each new burst, whether
/// the recent bursts look soft real-time.
#[derive(Clone, Debug, Default)]
pub struct SoftRtClassifier {
    /// The burst in progress.
    current: Option<Burst>,
    /// Time of the last I/O.
    last_io: Nanos,
    /// The latest completed bursts, at most `min_periods` of them.
    history: VecDeque<Burst>,
}

impl SoftRtClassifier {
    /// `bytes` of I/O at `now`. Returns the mean period when this I/O starts a
    /// new burst and the bursts so far are soft real-time under `rules`.
    pub fn io(&mut self, rules: &SoftRtRules, now: Nanos, bytes: u64) -> Option<Nanos> {
        let gap = now.saturating_sub(self.last_io);
        self.last_io = self.last_io.max(now);
        match self.current.as_mut() {
            Some(b) if gap <= rules.burst_gap_ns => {
                b.bytes = b.bytes.saturating_add(bytes);
                return None;
            }
            Some(b) => {
                self.history.push_back(*b);
                while self.history.len() > rules.min_periods {
                    self.history.pop_front();
                }
            }
            None => {}
        }
        self.current = Some(Burst { start: now, bytes });
        self.soft_real_time_period(rules, now)
    }

    /// The mean period if the completed bursts, with a new one starting at
    /// `now`, are regular and slow enough.
    fn soft_real_time_period(&self, rules: &SoftRtRules, now: Nanos) -> Option<Nanos> {
        if rules.min_periods == 0 || self.history.len() < rules.min_periods {
            return None;
        }
        let starts: Vec<Nanos> = self
            .history
            .iter()
            .map(|b| b.start)
            .chain(std::iter::once(now))
            .collect();
        let span = now.checked_sub(starts[0]).filter(|&s| s > 0)?;
        let periods = starts.windows(2).map(|w| w[1].saturating_sub(w[0]));
        let mean = span / rules.min_periods as Nanos;
        let allowed = mean as u128 * rules.jitter_percent as u128 / 100;
        let regular = periods
            .into_iter()
            .all(|p| (p as i128 - mean as i128).unsigned_abs() <= allowed);
        let bytes: u128 = self.history.iter().map(|b| b.bytes as u128).sum();
        // sectors / (span / 1 s) < max  <=>  sectors * 1 s < max * span
        let sectors = bytes / SECTOR_BYTES as u128;
        let limit = rules.max_sectors_per_s as u128 * span as u128;
        let slow = sectors * u128::from(SEC) < limit;
        (regular && slow).then_some(mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds bursts of `bytes` every `period`, each as two I/Os 1 ms apart.
    fn feed(c: &mut SoftRtClassifier, period: Nanos, bytes: u64, n: u64) -> Vec<Option<Nanos>> {
        let r = SoftRtRules::default();
        (0..n)
            .map(|i| {
                let got = c.io(&r, i * period, bytes / 2);
                assert_eq!(c.io(&r, i * period + MS, bytes / 2), None);
                got
            })
            .collect()
    }

    #[test]
    fn a_steady_slow_reader_is_soft_real_time() {
        let mut c = SoftRtClassifier::default();
        // 64 KiB every 40 ms: 128 sectors / 40 ms = 3200 sectors/s.
        let got = feed(&mut c, 40 * MS, 64 * 1024, 6);
        assert_eq!(got[..3], [None, None, None]);
        assert_eq!(got[3], Some(40 * MS));
        assert_eq!(got[5], Some(40 * MS));
    }

    #[test]
    fn a_fast_reader_is_not() {
        let mut c = SoftRtClassifier::default();
        // 1 MiB every 40 ms: 51200 sectors/s.
        let got = feed(&mut c, 40 * MS, 1024 * 1024, 6);
        assert!(got.iter().all(Option::is_none));
    }

    #[test]
    fn irregular_bursts_are_not() {
        let r = SoftRtRules::default();
        let mut c = SoftRtClassifier::default();
        let mut got = Vec::new();
        for t in [0, 40, 120, 140, 260, 280, 400] {
            got.push(c.io(&r, t * MS, 4096));
        }
        assert!(got.iter().all(Option::is_none), "{got:?}");
    }

    #[test]
    fn close_io_joins_the_current_burst() {
        let r = SoftRtRules::default();
        let mut c = SoftRtClassifier::default();
        c.io(&r, 0, 1);
        c.io(&r, 8 * MS, 1);
        assert!(c.history.is_empty());
        c.io(&r, 17 * MS, 1);
        assert_eq!(c.history.len(), 1);
        assert_eq!(c.history[0].bytes, 2);
    }
}
