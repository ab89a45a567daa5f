//! cyclictest as the coordinated scheduling study ran it
//! (`cyclictest -q -n -l 100000 -h 5000`): one thread, `SCHED_OTHER`
//! unless told otherwise, sleeping with `clock_nanosleep(TIMER_ABSTIME)`
//! to deadlines 1000 us apart; each sample is the wake-up time (when the
//! thread runs again) minus the deadline. A deadline already past when
//! the thread goes back to sleep is skipped, as rt-tests' `timerthread()`
//! does. Busy loops run in the host and in the guest; without a guest
//! ("no guest") the thread runs on the host.

use std::fmt::Write as _;

use policy::{CoordMode, PolicyConfig};

use crate::coord::{BoostChange, HelpCpu};
use crate::model::{CompletionKind, CpuModel, KernelId};
use crate::platform::Platform;
use crate::task::{Policy, TaskSpec};
use crate::{FairKind, Nanos, MS, US};

/// cyclictest's `-h 5000`: 1 us buckets up to 5000 us, then overflows.
pub const HIST_BUCKETS: usize = 5000;

/// A latency histogram in cyclictest's terms (microseconds).
#[derive(Clone, Debug)]
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub overflow: u64,
    pub count: u64,
    pub sum_ns: u128,
    pub min_ns: Nanos,
    pub max_ns: Nanos,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; HIST_BUCKETS],
            overflow: 0,
            count: 0,
            sum_ns: 0,
            min_ns: Nanos::MAX,
            max_ns: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, lat: Nanos) {
        let us = (lat / US) as usize;
        match self.buckets.get_mut(us) {
            Some(b) => *b += 1,
            None => self.overflow += 1,
        }
        self.count += 1;
        self.sum_ns += lat as u128;
        self.min_ns = self.min_ns.min(lat);
        self.max_ns = self.max_ns.max(lat);
    }

    /// Adds `other`'s samples (the runs of one cell in one histogram, as
    /// their `-h` outputs summed).
    pub fn merge(&mut self, other: &Histogram) {
        for (x, y) in self.buckets.iter_mut().zip(&other.buckets) {
            *x += y;
        }
        self.overflow += other.overflow;
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn avg_us(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.count as f64 / 1000.0
    }

    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1000.0
    }

    /// The share of samples in `[lo_us, hi_us)` (overflows count above
    /// 5000 us).
    pub fn share_between(&self, lo_us: usize, hi_us: usize) -> f64 {
        let mut n: u64 = self.buckets[lo_us.min(HIST_BUCKETS)..hi_us.min(HIST_BUCKETS)]
            .iter()
            .sum();
        if hi_us > HIST_BUCKETS {
            n += self.overflow;
        }
        n as f64 / self.count.max(1) as f64
    }

    /// The output of `cyclictest -h`: one `bucket count` line per
    /// microsecond, then the summary lines.
    pub fn to_cyclictest_text(&self) -> String {
        let mut s = String::from("# Histogram\n");
        for (i, n) in self.buckets.iter().enumerate() {
            let _ = writeln!(s, "{i:06} {n:06}");
        }
        // As rt-tests' cyclictest writes them (checked on Debian's rt-tests
        // 2.4, the fixtures of tests/cyclictest_output.rs): `Total` counts the
        // samples in the rows, not the overflows, and `Avg` is truncated.
        let _ = writeln!(s, "# Total: {:09}", self.count - self.overflow);
        let min = if self.count == 0 { 0 } else { self.min_ns / US };
        let _ = writeln!(s, "# Min Latencies: {min:05}");
        let _ = writeln!(s, "# Avg Latencies: {:05}", self.avg_us() as u64);
        let _ = writeln!(s, "# Max Latencies: {:05}", self.max_ns / US);
        let _ = writeln!(s, "# Histogram Overflows: {:05}", self.overflow);
        s
    }
}

/// One cell of the latency benchmark.
#[derive(Clone, Debug)]
pub struct LatencySetup {
    pub platform: Platform,
    pub host_sched: FairKind,
    pub guest_sched: FairKind,
    pub host_loops: usize,
    /// `None`: no guest, cyclictest on the host.
    pub guest_loops: Option<usize>,
    /// cyclictest's policy (`-p`/`--policy`); `SCHED_OTHER` by default.
    pub policy: Policy,
    /// Samples to take (`-l`; the study ran 2 x 100000).
    pub loops: u64,
    /// Coordination of the vCPU threads.
    pub coordination: CpuCoordination,
    /// vCPUs of the guest (the study's: 1).
    pub vcpus: usize,
    /// How long the loops run before the benchmark starts ([`WARMUP`]; a
    /// runner varies it a little so that repetitions start at different
    /// phases of the tick, as real runs do).
    pub warmup: Nanos,
}

/// How the host treats the VM's vCPU threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuCoordination {
    Off,
    /// `static-cpu`: vCPU threads always `SCHED_RR` priority 8, as
    /// pvsched's boost.
    StaticCpu,
    /// `help-cpu`: the guest asks for help each time it wakes a task that
    /// slept (here cyclictest's thread), with a lease of two intervals that
    /// the next wake-up renews; the host boosts the vCPU thread to
    /// `SCHED_RR` 8 while helped, within the `policy` crate's lease cap and
    /// budget ([`crate::coord::HelpCpu`]). Each HELP costs a hypercall on
    /// the vCPU.
    HelpCpu,
    /// `help-all`: the same HELP boosts the VM's I/O threads too. The
    /// CPU model's cells (cyclictest, the hot start-up) do no disk I/O, so
    /// the I/O half has nothing to act on and the vCPUs are boosted as in
    /// `help-cpu`; both halves act in the simulator's I/O machine on a
    /// platform (`sim::machine`).
    HelpAll,
}

impl CpuCoordination {
    /// The mode, as `policy` names it and describes it.
    pub fn mode(self) -> CoordMode {
        match self {
            CpuCoordination::Off => CoordMode::Off,
            CpuCoordination::StaticCpu => CoordMode::StaticCpu,
            CpuCoordination::HelpCpu => CoordMode::HelpCpu,
            CpuCoordination::HelpAll => CoordMode::HelpAll,
        }
    }

    /// The CPU model's treatment of a mode: `None` for the I/O modes.
    pub fn from_mode(mode: CoordMode) -> Option<Self> {
        match mode {
            CoordMode::Off => Some(CpuCoordination::Off),
            CoordMode::StaticCpu => Some(CpuCoordination::StaticCpu),
            CoordMode::HelpCpu => Some(CpuCoordination::HelpCpu),
            CoordMode::HelpAll => Some(CpuCoordination::HelpAll),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        self.mode().name()
    }

    /// Whether the guest asks for help and the host boosts its vCPUs while
    /// helped (`help-cpu`, `help-all`).
    pub fn asks_for_help(self) -> bool {
        self.mode().asks_for_help() && self.mode().boosts_vcpus()
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        CoordMode::parse(s)
            .ok()
            .and_then(Self::from_mode)
            .ok_or_else(|| {
                let accepted: Vec<&str> = CoordMode::ALL
                    .into_iter()
                    .filter(|m| Self::from_mode(*m).is_some())
                    .map(CoordMode::name)
                    .collect();
                format!(
                    "unknown CPU coordination '{s}' (accepted: {})",
                    accepted.join(", ")
                )
            })
    }
}

/// The cost of one HELP hypercall: about 2000 cycles (the study's HVC,
/// section VI.B), in ns at the platform's clock.
pub fn hypercall_ns(p: &Platform) -> Nanos {
    2000 * 1000 / p.mhz.max(1) as Nanos
}

/// What one cell measured.
#[derive(Clone, Debug)]
pub struct LatencyResult {
    pub hist: Histogram,
    /// CPU time the host's loops got during the measurement, as a share
    /// of all cores.
    pub host_loops_share: f64,
    /// Time the vCPU thread was boosted by `help-cpu`.
    pub boosted_ns: Nanos,
    /// Simulated time of the measurement.
    pub measured_ns: Nanos,
    /// Events the model handled for the whole cell.
    pub events: u64,
}

/// pvsched's boost priority for vCPU threads.
pub const PVSCHED_RR_PRIO: u8 = 8;

/// cyclictest's interval (`-i`, default 1000 us).
pub const INTERVAL: Nanos = MS;
/// The CPU work of one cyclictest cycle (read the clock, update the
/// histogram, compute the next deadline): a few microseconds on the
/// study's cores; an assumption, not a measurement.
pub const CYCLE_WORK: Nanos = 2 * US;
/// The loops start this long before cyclictest, so the balancer has
/// settled them.
pub const WARMUP: Nanos = 200 * MS;

impl LatencySetup {
    pub fn new(
        platform: Platform,
        sched: FairKind,
        host_loops: usize,
        guest_loops: Option<usize>,
    ) -> Self {
        LatencySetup {
            platform,
            host_sched: sched,
            guest_sched: sched,
            host_loops,
            guest_loops,
            policy: Policy::NORMAL,
            loops: 20_000,
            coordination: CpuCoordination::Off,
            vcpus: 1,
            warmup: WARMUP,
        }
    }
}

/// A loaded machine: the model after the warm-up, with the host loops and
/// the VM's loops running (`static-cpu` applied); the kernel a benchmark
/// runs in (the guest's, or the host's with no guest); the vCPU threads.
pub struct Loaded {
    pub m: CpuModel,
    pub k: KernelId,
    pub host_loops: Vec<crate::TaskId>,
    pub vcpus: Vec<crate::TaskId>,
}

/// A built cell: the loaded machine and cyclictest's task.
struct Cell {
    m: CpuModel,
    k: KernelId,
    t: crate::TaskId,
    host_loops: Vec<crate::TaskId>,
    vcpus: Vec<crate::TaskId>,
}

/// Builds the machine a benchmark runs on (cyclictest here, the hot
/// start-up in the simulator): host loops, the VM and its loops, and the
/// warm-up.
pub fn build_loaded(s: &LatencySetup) -> Result<Loaded, String> {
    let mut m = CpuModel::new(s.platform.clone(), s.host_sched);
    let cores = s.platform.cores;
    let mut host_loops = Vec::new();
    for i in 0..s.host_loops {
        let spec = TaskSpec {
            cpu: i % cores,
            ..TaskSpec::busy_loop(&format!("host-loop{i}"))
        };
        host_loops.push(m.spawn(KernelId::HOST, spec));
    }
    let mut k = KernelId::HOST;
    let mut vcpus = Vec::new();
    if let Some(gl) = s.guest_loops {
        let (vm, gk) = m.add_vm(s.vcpus, s.guest_sched, 1024)?;
        vcpus = (0..s.vcpus).map(|i| m.vcpu_task(vm, i)).collect();
        if s.coordination == CpuCoordination::StaticCpu {
            for &t in &vcpus {
                let boost = Policy::Rr {
                    prio: PVSCHED_RR_PRIO,
                };
                m.set_policy(KernelId::HOST, t, boost);
            }
        }
        for i in 0..gl {
            m.spawn(gk, TaskSpec::busy_loop(&format!("guest-loop{i}")));
        }
        k = gk;
    }
    while m.now() < s.warmup {
        let next = m.next_event_time().unwrap_or(s.warmup).min(s.warmup);
        m.advance_to(next);
    }
    Ok(Loaded {
        m,
        k,
        host_loops,
        vcpus,
    })
}

/// Builds the model of a cell: the loaded machine and the cyclictest
/// thread.
fn build(s: &LatencySetup) -> Result<Cell, String> {
    let Loaded {
        mut m,
        k,
        host_loops,
        vcpus,
    } = build_loaded(s)?;
    let spec = TaskSpec {
        name: "cyclictest".into(),
        policy: s.policy,
        group: None,
        cpu: 0,
        burst: Some(CYCLE_WORK),
        report_start: true,
    };
    let t = m.spawn(k, spec);
    Ok(Cell {
        m,
        k,
        t,
        host_loops,
        vcpus,
    })
}

/// Runs one cell: `s.loops` samples, and what the host loops got.
pub fn run_latency(s: &LatencySetup) -> Result<LatencyResult, String> {
    let Cell {
        mut m,
        k,
        t,
        host_loops,
        vcpus,
    } = build(s)?;
    let help = s.coordination.asks_for_help() && !vcpus.is_empty();
    let mut coord = HelpCpu::new(PolicyConfig::default());
    let boost = Policy::Rr {
        prio: PVSCHED_RR_PRIO,
    };
    let work = CYCLE_WORK + if help { hypercall_ns(&s.platform) } else { 0 };
    let start = m.now();
    let loops_before: Nanos = host_loops
        .iter()
        .map(|&h| m.progress(KernelId::HOST, h))
        .sum();
    let mut hist = Histogram::default();
    let mut deadline: Option<Nanos> = None;
    let mut next = m.now() + INTERVAL;
    let mut done = Vec::new();
    while hist.count < s.loops {
        let Some(mut at) = m.next_event_time() else {
            return Err("the CPU model ran out of events".into());
        };
        if let Some(c) = coord.next_check(m.now()) {
            at = at.min(c.max(m.now()));
        }
        done.clear();
        done.extend_from_slice(m.advance_to(at));
        if help && coord.settle(m.now()) == BoostChange::Unboost {
            set_vcpus(&mut m, &vcpus, Policy::NORMAL);
        }
        for c in done.iter().filter(|c| c.kernel == k && c.task == t) {
            match c.kind {
                CompletionKind::Started => {
                    if let Some(d) = deadline.take() {
                        hist.record(c.at.saturating_sub(d));
                    }
                    if help && coord.help(m.now(), 2 * INTERVAL) == BoostChange::Boost {
                        set_vcpus(&mut m, &vcpus, boost);
                    }
                }
                CompletionKind::BurstDone => {
                    let now = m.now();
                    while next <= now {
                        next += INTERVAL;
                    }
                    deadline = Some(next);
                    m.set_burst(k, t, work);
                    m.sleep_until(k, t, next);
                    next += INTERVAL;
                }
            }
        }
    }
    m.settle_all();
    let measured_ns = m.now() - start;
    let loops_after: Nanos = host_loops
        .iter()
        .map(|&h| m.progress(KernelId::HOST, h))
        .sum();
    let boosted_ns = coord.boosted_total(m.now());
    Ok(LatencyResult {
        hist,
        host_loops_share: (loops_after - loops_before) as f64
            / (measured_ns.max(1) as f64 * s.platform.cores as f64),
        boosted_ns,
        measured_ns,
        events: m.events_processed(),
    })
}

/// Sets the host policy of every vCPU thread (the boost of `help-cpu`
/// and its end).
pub fn set_vcpus(m: &mut CpuModel, vcpus: &[crate::TaskId], p: Policy) {
    for &t in vcpus {
        m.set_policy(KernelId::HOST, t, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_prints_as_cyclictest_h_does() {
        let mut h = Histogram::default();
        for lat in [3_400, 3_900, 12_000, 7_000_000] {
            h.record(lat);
        }
        let text = h.to_cyclictest_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# Histogram");
        assert_eq!(lines.len(), 1 + HIST_BUCKETS + 5);
        assert_eq!(lines[1 + 3], "000003 000002");
        assert_eq!(lines[1 + 12], "000012 000001");
        // Three samples in the rows; the fourth is an overflow.
        assert!(text.contains("# Total: 000000003\n"));
        assert!(text.contains("# Min Latencies: 00003\n"));
        assert!(text.contains("# Max Latencies: 07000\n"));
        assert!(text.contains("# Histogram Overflows: 00001\n"));
        assert_eq!(h.share_between(0, 5000), 0.75);
        assert_eq!(h.share_between(5000, 5001), 0.25);
    }
}
