//! The file-system benchmark profiles of the two-tier I/O scheduler study
//! (`benchmark = "profile"`, issue 29): FFSB-style workloads, each run by N
//! threads on files with `O_DIRECT` (the study enabled direct I/O "to
//! eliminate the impact of memory caching"), measured as transactions per
//! second (random and mixed profiles) or MB/s (sequential ones), with the
//! latency percentiles of the requests beside.
//!
//! A scenario names them in `[matrix]`: `profile = ["ffsb-randread", ...]`
//! and `threads = [1, 8]`; `block_kib` and `read_share` are top-level keys.
//! Why `ffsb-*` names with a `threads` key rather than the `NrMw-pattern`
//! workloads: those say how many readers and writers run *beside* the
//! measured thing, each on its own file and forever; a profile is the measured
//! thing itself, and its mixed profile has every thread do both reads and
//! writes (a read share per operation), which `NrMw` cannot say.

use std::fmt;
use std::str::FromStr;

use crate::result::{Metric, RunResult};
use crate::vocab::serde_by_name;

/// One of the study's five profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    /// Random reads of `block_kib` each.
    RandRead,
    /// Random writes (overwrites of a preallocated file).
    RandWrite,
    /// Sequential reads, each thread through its own file.
    SeqRead,
    /// Sequential writes, each thread through its own file.
    SeqWrite,
    /// Random reads and writes, each operation a read with `read_share`.
    Mixed,
}

impl Profile {
    /// Every profile, in the study's order.
    pub const ALL: [Profile; 5] = [
        Profile::RandRead,
        Profile::RandWrite,
        Profile::SeqRead,
        Profile::SeqWrite,
        Profile::Mixed,
    ];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::RandRead => "ffsb-randread",
            Profile::RandWrite => "ffsb-randwrite",
            Profile::SeqRead => "ffsb-seqread",
            Profile::SeqWrite => "ffsb-seqwrite",
            Profile::Mixed => "ffsb-mixed",
        }
    }

    /// True for the sequential profiles (measured in MB/s).
    pub fn is_sequential(self) -> bool {
        matches!(self, Profile::SeqRead | Profile::SeqWrite)
    }

    /// The share of operations that read, in percent: 100 or 0, or
    /// `read_share` for the mixed profile.
    pub fn read_pct(self, read_share: u8) -> u8 {
        match self {
            Profile::RandRead | Profile::SeqRead => 100,
            Profile::RandWrite | Profile::SeqWrite => 0,
            Profile::Mixed => read_share,
        }
    }

    /// The profile's main metric, as the study reports it: MB/s for the
    /// sequential profiles, transactions per second for the others.
    pub fn metric(self) -> Metric {
        if self.is_sequential() {
            Metric::ThroughputMbS
        } else {
            Metric::Tps
        }
    }
}

/// The names [`Profile`] parses, for error messages.
pub fn accepted_profiles() -> String {
    let names: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
    names.join(", ")
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Profile, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown profile \"{s}\"; accepted: {}", accepted_profiles()))
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

serde_by_name!(Profile);

/// The most threads a profile runs: the study ran 1 and 8; 64 leaves room
/// for a queue-depth sweep while each thread's state stays small.
pub const MAX_THREADS: u32 = 64;

/// Block size when `block_kib` is absent: 4 KiB, the `read_blocksize` and
/// `write_blocksize` of FFSB's example profiles (`examples/profile_everything`
/// in the FFSB sources); the study does not give its own.
pub const DEFAULT_BLOCK_KIB: u32 = 4;

/// The largest block: 1 MiB, FFSB's largest example size, and more than one
/// request of a 2.6.32 kernel's `max_sectors_kb` (512).
pub const MAX_BLOCK_KIB: u32 = 1024;

/// The mixed profile's read share when `read_share` is absent, in percent:
/// half reads, half writes (FFSB's `examples/profile_everything` weights its
/// read and write operations alike; the study does not give its own).
pub const DEFAULT_READ_SHARE: u8 = 50;

/// The counter of a run's median request latency (ms), next to its samples.
pub const IO_LATENCY_P50_MS: &str = "io_latency_p50_ms";

/// The counter of a run's 99th-percentile request latency (ms).
pub const IO_LATENCY_P99_MS: &str = "io_latency_p99_ms";

/// What a profile cell runs: the profile, its threads, block size and read
/// share, always with `O_DIRECT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ProfileCell {
    pub profile: Profile,
    pub threads: u32,
    pub block_kib: u32,
    /// Percent of the mixed profile's operations that read (the other
    /// profiles read all or nothing, [`Profile::read_pct`]).
    pub read_share: u8,
}

impl ProfileCell {
    /// `profile` with `threads` threads and the default block size and share.
    pub fn new(profile: Profile, threads: u32) -> ProfileCell {
        ProfileCell {
            profile,
            threads,
            block_kib: DEFAULT_BLOCK_KIB,
            read_share: DEFAULT_READ_SHARE,
        }
    }

    /// The share of operations that read, in percent.
    pub fn read_pct(&self) -> u8 {
        self.profile.read_pct(self.read_share)
    }

    /// Bytes per operation.
    pub fn block_bytes(&self) -> u64 {
        u64::from(self.block_kib) * 1024
    }

    /// The part of a stat file name that tells profile cells apart:
    /// `-ffsb-randread-8t`, then `-<K>k` when the block size is not the
    /// default and `-r<P>` for a mixed profile whose share is not.
    pub fn file_part(&self) -> String {
        let mut s = format!("-{}-{}t", self.profile, self.threads);
        if self.block_kib != DEFAULT_BLOCK_KIB {
            s.push_str(&format!("-{}k", self.block_kib));
        }
        if self.profile == Profile::Mixed && self.read_share != DEFAULT_READ_SHARE {
            s.push_str(&format!("-r{}", self.read_share));
        }
        s
    }
}

/// Parses a thread count: 1 to [`MAX_THREADS`].
pub fn check_threads(n: i64) -> Result<u32, String> {
    if (1..=i64::from(MAX_THREADS)).contains(&n) {
        Ok(n as u32)
    } else {
        Err(format!(
            "threads {n} out of range; accepted: 1 to {MAX_THREADS}"
        ))
    }
}

/// The result rows of a profile cell's runs: the main metric (each run's
/// samples), then the runs' median and 99th-percentile latencies (ms), from
/// the [`IO_LATENCY_P50_MS`] and [`IO_LATENCY_P99_MS`] counters.
pub fn result_rows(p: &ProfileCell, runs: Vec<RunResult>) -> Vec<(Metric, Vec<RunResult>)> {
    let counter = |name: &str| -> Vec<RunResult> {
        runs.iter()
            .map(|r| RunResult {
                values: r.counters.get(name).copied().into_iter().collect(),
                ..RunResult::default()
            })
            .collect()
    };
    let p50 = counter(IO_LATENCY_P50_MS);
    let p99 = counter(IO_LATENCY_P99_MS);
    vec![
        (p.profile.metric(), runs),
        (Metric::IoLatencyP50Ms, p50),
        (Metric::IoLatencyP99Ms, p99),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_round_trip_and_unknown_ones_list_the_accepted() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>(), Ok(p));
        }
        let e = "ffsb-randrw".parse::<Profile>().unwrap_err();
        assert!(e.contains("unknown profile \"ffsb-randrw\""), "{e}");
        assert!(e.contains("ffsb-mixed"), "{e}");
    }

    #[test]
    fn metrics_and_read_shares_follow_the_study() {
        assert_eq!(Profile::SeqRead.metric(), Metric::ThroughputMbS);
        assert_eq!(Profile::Mixed.metric(), Metric::Tps);
        assert_eq!(Profile::RandWrite.read_pct(70), 0);
        assert_eq!(Profile::Mixed.read_pct(70), 70);
    }

    #[test]
    fn threads_out_of_range_are_refused() {
        assert_eq!(check_threads(8), Ok(8));
        assert!(check_threads(0).unwrap_err().contains("1 to 64"));
        assert!(check_threads(65).is_err());
    }

    #[test]
    fn file_parts_name_only_what_differs_from_the_defaults() {
        let mut p = ProfileCell::new(Profile::Mixed, 8);
        assert_eq!(p.file_part(), "-ffsb-mixed-8t");
        p.block_kib = 64;
        p.read_share = 70;
        assert_eq!(p.file_part(), "-ffsb-mixed-8t-64k-r70");
    }
}
