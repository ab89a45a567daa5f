//! The S benchmark suite's timing constants and the write-rate caps of its writers,
//! shared by every runner (the simulator's `sim::bench` and the real runner's `bench`),
//! so that a scenario means the same steps whoever runs it. The procedure that uses
//! them is [`crate::procedure`]. Each constant names the line of the suite it stands
//! for.

use crate::workload::{Pattern, WorkloadSpec};

/// `SLEEPTIME_ITER` plus the one-second pause of `invoke_commands`: the suite waits
/// 3 s + 1 s before each start.
pub const PAUSE_BEFORE_START_S: f64 = 4.0;

/// After a start shorter than 2 s the suite sleeps 2 s more "to let a minimum of thr
/// stats be printed".
pub const SHORT_START_S: f64 = 2.0;

/// The pause before each start with hot caches (`caches = "hot"`, the coordinated
/// task scheduling study's start-up test), in ms. [`PAUSE_BEFORE_START_S`] lets a cold
/// start's disk settle; a hot start leaves nothing to settle but the schedulers'
/// state, which the busy loops renew within a few ticks, so 0.5 s keeps 100 starts
/// short. The simulator (`sim::cpu_bench`) and the real runner (the procedure) both
/// pause this long.
pub const HOT_PAUSE_MS: u64 = 500;

/// `transitory_duration 7` with the "+6 s because fio is slow to start many jobs":
/// schedulers without `wr_max_time` in sysfs (mainline BFQ has none) wait 7 + 6 s
/// before measuring.
pub const SETTLE_S: f64 = 7.0 + 6.0;

/// The suite runs `sync` every 2 s while writers run ("increase difficulty by
/// periodically syncing").
pub const SYNC_PERIOD_S: f64 = 2.0;

/// S's default write-rate cap on rotational devices: `MAXRATE=4000` kB/s in total
/// over the writers; flash devices get no cap.
pub const MAXRATE_ROTATIONAL_KB_S: f64 = 4000.0;

/// Random writers get 1/60 of the cap.
pub const RANDOM_WRITE_RATE_DIVISOR: f64 = 60.0;

/// Settle time before measuring with these workloads running: [`SETTLE_S`], or
/// nothing when no workload runs.
pub fn settle_s(workloads: &[WorkloadSpec]) -> f64 {
    if workloads.iter().all(|w| w.is_none()) {
        0.0
    } else {
        SETTLE_S
    }
}

/// The write-rate cap of each writer of `w`, in bytes per second (0: no cap), on a
/// device that is rotational or not.
pub fn writer_rate_bytes_per_s(w: &WorkloadSpec, rotational: bool) -> f64 {
    if w.writers == 0 || !rotational {
        return 0.0;
    }
    let mut per_writer = MAXRATE_ROTATIONAL_KB_S * 1000.0 / w.writers as f64;
    if w.pattern == Some(Pattern::Rand) {
        per_writer /= RANDOM_WRITE_RATE_DIVISOR;
    }
    per_writer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_caps_follow_the_suite() {
        let w = |s: &str| WorkloadSpec::parse(s).unwrap();
        assert_eq!(writer_rate_bytes_per_s(&w("2r2w-seq"), true), 2_000_000.0);
        assert_eq!(
            writer_rate_bytes_per_s(&w("2r2w-rand"), true),
            2_000_000.0 / 60.0
        );
        assert_eq!(writer_rate_bytes_per_s(&w("2r2w-seq"), false), 0.0);
        assert_eq!(writer_rate_bytes_per_s(&w("5r-seq"), true), 0.0);
        assert_eq!(settle_s(&[WorkloadSpec::NONE]), 0.0);
        assert_eq!(settle_s(&[WorkloadSpec::NONE, w("1r-seq")]), 13.0);
    }
}
