//! The result schema shared by all runners.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cell::Cell;
use crate::scenario::Benchmark;
use crate::stats::{percentiles, summarize, IntervalNote, Percentiles, Summary};

/// The measured quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Metric {
    /// Start-up time in seconds (`startup_s`).
    #[serde(rename = "startup_s")]
    StartupS,
    /// Aggregate throughput in MB/s (`throughput_mb_s`).
    #[serde(rename = "throughput_mb_s")]
    ThroughputMbS,
    /// cyclictest's average latency in microseconds (`latency_avg_us`).
    #[serde(rename = "latency_avg_us")]
    LatencyAvgUs,
    /// cyclictest's maximum latency in microseconds (`latency_max_us`).
    #[serde(rename = "latency_max_us")]
    LatencyMaxUs,
    /// A profile's transactions (operations) per second (`tps`), as FFSB
    /// reports its random and mixed profiles.
    #[serde(rename = "tps")]
    Tps,
    /// A profile's median request latency in milliseconds (`io_latency_p50_ms`).
    #[serde(rename = "io_latency_p50_ms")]
    IoLatencyP50Ms,
    /// A profile's 99th-percentile request latency in milliseconds
    /// (`io_latency_p99_ms`).
    #[serde(rename = "io_latency_p99_ms")]
    IoLatencyP99Ms,
    /// The readers-hashers benchmark, per VM (1 or 2): reads per second,
    /// their MB/s, the hashers' MD5 MB/s, and the CPU use of the VM's host
    /// threads in % of one CPU.
    #[serde(rename = "vm1_iops")]
    Vm1Iops,
    #[serde(rename = "vm1_mb_s")]
    Vm1MbS,
    #[serde(rename = "vm1_hash_mb_s")]
    Vm1HashMbS,
    #[serde(rename = "vm1_cpu_pct")]
    Vm1CpuPct,
    #[serde(rename = "vm2_iops")]
    Vm2Iops,
    #[serde(rename = "vm2_mb_s")]
    Vm2MbS,
    #[serde(rename = "vm2_hash_mb_s")]
    Vm2HashMbS,
    #[serde(rename = "vm2_cpu_pct")]
    Vm2CpuPct,
}

/// The readers-hashers benchmark's metrics, in the order of its result rows.
pub const READERS_HASHERS_METRICS: [Metric; 8] = [
    Metric::Vm1Iops,
    Metric::Vm1MbS,
    Metric::Vm1HashMbS,
    Metric::Vm1CpuPct,
    Metric::Vm2Iops,
    Metric::Vm2MbS,
    Metric::Vm2HashMbS,
    Metric::Vm2CpuPct,
];

impl Metric {
    /// `startup_s` or `throughput_mb_s`.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::StartupS => "startup_s",
            Metric::ThroughputMbS => "throughput_mb_s",
            Metric::LatencyAvgUs => "latency_avg_us",
            Metric::LatencyMaxUs => "latency_max_us",
            Metric::Tps => "tps",
            Metric::IoLatencyP50Ms => "io_latency_p50_ms",
            Metric::IoLatencyP99Ms => "io_latency_p99_ms",
            Metric::Vm1Iops => "vm1_iops",
            Metric::Vm1MbS => "vm1_mb_s",
            Metric::Vm1HashMbS => "vm1_hash_mb_s",
            Metric::Vm1CpuPct => "vm1_cpu_pct",
            Metric::Vm2Iops => "vm2_iops",
            Metric::Vm2MbS => "vm2_mb_s",
            Metric::Vm2HashMbS => "vm2_hash_mb_s",
            Metric::Vm2CpuPct => "vm2_cpu_pct",
        }
    }

    /// Parses `startup_s` or `throughput_mb_s`.
    pub fn parse(s: &str) -> Option<Metric> {
        match s {
            "startup_s" => Some(Metric::StartupS),
            "throughput_mb_s" => Some(Metric::ThroughputMbS),
            "latency_avg_us" => Some(Metric::LatencyAvgUs),
            "latency_max_us" => Some(Metric::LatencyMaxUs),
            "tps" => Some(Metric::Tps),
            "io_latency_p50_ms" => Some(Metric::IoLatencyP50Ms),
            "io_latency_p99_ms" => Some(Metric::IoLatencyP99Ms),
            other => READERS_HASHERS_METRICS
                .into_iter()
                .find(|m| m.as_str() == other),
        }
    }

    /// The metric a benchmark measures (latency also measures
    /// [`Metric::LatencyMaxUs`]). The profile benchmark's depends on the
    /// profile ([`Metric::for_cell`]); here it is [`Metric::Tps`], the random
    /// profiles'.
    pub fn for_benchmark(b: Benchmark) -> Metric {
        match b {
            Benchmark::Startup => Metric::StartupS,
            Benchmark::Throughput => Metric::ThroughputMbS,
            Benchmark::Latency => Metric::LatencyAvgUs,
            Benchmark::Profile => Metric::Tps,
            Benchmark::ReadersHashers => Metric::Vm1Iops,
        }
    }

    /// The main metric of a cell: its benchmark's, or its profile's.
    pub fn for_cell(cell: &Cell) -> Metric {
        match cell.profile {
            Some(p) if cell.benchmark == Benchmark::Profile => p.profile.metric(),
            _ => Metric::for_benchmark(cell.benchmark),
        }
    }

    /// Unit for labels: `s` or `MB/s`.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::StartupS => "s",
            Metric::ThroughputMbS => "MB/s",
            Metric::LatencyAvgUs | Metric::LatencyMaxUs => "us",
            Metric::Tps => "tps",
            Metric::IoLatencyP50Ms | Metric::IoLatencyP99Ms => "ms",
            Metric::Vm1Iops | Metric::Vm2Iops => "IOPS",
            Metric::Vm1MbS | Metric::Vm2MbS | Metric::Vm1HashMbS | Metric::Vm2HashMbS => "MB/s",
            Metric::Vm1CpuPct | Metric::Vm2CpuPct => "%",
        }
    }

    /// Axis/table label, e.g. `Start-up time [s]`.
    pub fn label(self) -> &'static str {
        match self {
            Metric::StartupS => "Start-up time [s]",
            Metric::ThroughputMbS => "Aggregate throughput [MB/s]",
            Metric::LatencyAvgUs => "Average latency [us]",
            Metric::LatencyMaxUs => "Maximum latency [us]",
            Metric::Tps => "Transactions per second",
            Metric::IoLatencyP50Ms => "Median request latency [ms]",
            Metric::IoLatencyP99Ms => "99th-percentile request latency [ms]",
            Metric::Vm1Iops => "VM 1 I/O rate [IOPS]",
            Metric::Vm1MbS => "VM 1 I/O rate [MB/s]",
            Metric::Vm1HashMbS => "VM 1 hashing [MB/s]",
            Metric::Vm1CpuPct => "VM 1 CPU use [% of a CPU]",
            Metric::Vm2Iops => "VM 2 I/O rate [IOPS]",
            Metric::Vm2MbS => "VM 2 I/O rate [MB/s]",
            Metric::Vm2HashMbS => "VM 2 hashing [MB/s]",
            Metric::Vm2CpuPct => "VM 2 CPU use [% of a CPU]",
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The run counter of the share of a start-up run's time that was the app's CPU
/// time (over the starts that finished): both runners write it, the simulator on a
/// CPU model only (its app's bursts and per-request costs), the real runner from the
/// app process's schedstat (`bench::cputime`).
pub const APP_CPU_SHARE: &str = "app_cpu_share";
/// The run counter of the app's CPU time per start, in seconds: the finished starts'
/// CPU time over all the run's starts (as [`APP_CPU_SHARE`]).
pub const APP_CPU_S: &str = "app_cpu_s";

/// Writes [`APP_CPU_SHARE`] and [`APP_CPU_S`] into a start-up run whose `values` are
/// its starts, from the CPU time and the start-up time summed over the starts that
/// finished (nothing when none did).
pub fn app_cpu_counters(out: &mut RunResult, cpu_ns: u64, up_ns: u64) {
    if up_ns == 0 {
        return;
    }
    let starts = out.values.len().max(1) as f64;
    out.counters
        .insert(APP_CPU_SHARE.into(), cpu_ns as f64 / up_ns as f64);
    out.counters
        .insert(APP_CPU_S.into(), cpu_ns as f64 / 1e9 / starts);
}

/// One run (repetition) of a cell: the start-up times of its starts (a timed-out start
/// counts as `timeout_s` and increments `timeouts`), or the throughput samples.
/// Both runners stop a run at its first timed-out start, so the timed-out starts are
/// the last `timeouts` values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub values: Vec<f64>,
    #[serde(default)]
    pub timeouts: u32,
    /// What else the runner measured during the run, by name (e.g. how long the
    /// host boosted each VM, `vm2_boosted_s`). Reports may show them; the statistics
    /// are over `values` only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, f64>,
}

impl RunResult {
    /// Mean of the values, `None` when there are none.
    pub fn mean(&self) -> Option<f64> {
        if self.values.is_empty() {
            None
        } else {
            Some(self.values.iter().sum::<f64>() / self.values.len() as f64)
        }
    }

    /// The values of the starts that finished (all of them for throughput samples).
    pub fn finished(&self) -> &[f64] {
        let done = self.values.len().saturating_sub(self.timeouts as usize);
        &self.values[..done]
    }
}

/// The starts of a cell that finished, apart from those that timed out.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    /// How many starts (or samples) finished.
    pub n: usize,
    /// Their mean (NaN when none finished).
    pub mean: f64,
}

/// All the runs of one cell, by one runner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub cell: Cell,
    /// `sim`, `real` or `paper`.
    pub runner: String,
    pub metric: Metric,
    pub runs: Vec<RunResult>,
}

impl CellResult {
    /// The per-run means, skipping runs without values.
    pub fn run_means(&self) -> Vec<f64> {
        self.runs.iter().filter_map(RunResult::mean).collect()
    }

    /// Statistics over the per-run means, like the S suite's overall statistics across
    /// repetitions (calc_overall_stats.sh).
    pub fn summary(&self) -> Summary {
        summarize(&self.run_means())
    }

    /// Statistics over every value of every run pooled together.
    pub fn pooled_summary(&self) -> Summary {
        let all: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.values.iter().copied())
            .collect();
        summarize(&all)
    }

    /// Total number of timed-out starts over all runs.
    pub fn timeouts(&self) -> u32 {
        self.runs.iter().map(|r| r.timeouts).sum()
    }

    /// The starts that finished, over all runs pooled: their count and mean, to be
    /// read beside [`CellResult::timeouts`].
    pub fn finished(&self) -> Finished {
        let values: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.finished().iter().copied())
            .collect();
        let n = values.len();
        let mean = if n == 0 {
            f64::NAN
        } else {
            values.iter().sum::<f64>() / n as f64
        };
        Finished { n, mean }
    }

    /// Median, p90 and p99 of every value of every run pooled together (timed-out
    /// starts count as `timeout_s`, so with timeouts they are lower bounds).
    pub fn percentiles(&self) -> Percentiles {
        let all: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.values.iter().copied())
            .collect();
        percentiles(&all)
    }

    /// What the 95% interval of [`CellResult::summary`] is worth.
    pub fn interval_note(&self) -> IntervalNote {
        IntervalNote::of(&self.summary(), self.timeouts())
    }

    /// Total number of values (starts or samples) over all runs.
    pub fn value_count(&self) -> usize {
        self.runs.iter().map(|r| r.values.len()).sum()
    }
}

/// Metadata of one run of a scenario, written into `results.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// `sim`, `real` or `paper`.
    pub runner: String,
    pub scenario: String,
    pub tandem_version: String,
    pub seed: u64,
    /// Anything else (kernel version, device parameters, timestamps...). Written as is.
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}
