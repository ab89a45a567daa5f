//! What VM throughput cells add for CFS-v's case (`coordination = "cfsv"`
//! against `off`): the host's busy loops (`host_cpu_load`, more loops than
//! cores) beside the guest's random readers, their rate over the measured
//! window, the guest's read rate in IOPS, and what hostd's `cfsv` mode
//! classified and boosted. Kept apart from `vm_cell` so that the cell's
//! steps stay one place and CFS-v's additions another.

use std::collections::BTreeMap;

use experiment::workload::Pattern;
use experiment::{Benchmark, Cell, RunResult, WorkloadSpec};

use crate::cpuload::{CpuLoad, Sample};
use crate::latency::HOST_LOOPS_ITER_S;
use crate::Result;

/// The guest's random readers' requests per second, from the disk's sectors:
/// each read is 4 KiB (`workers::RAND_BYTES`, S's `bs=4k`).
pub const VM1_READ_IOPS: &str = "vm1_read_iops";

/// hostd's `cfsv` gauges at the end of a repetition: the VM's QEMU threads
/// it samples, those it classifies as I/O-related and those it boosts.
const CFSV_GAUGES: [(&str, &str); 3] = [
    ("cfsv_threads", "vm1_cfsv_threads"),
    ("cfsv_io_related", "vm1_cfsv_io_related"),
    ("cfsv_boosted", "vm1_cfsv_boosted"),
];

/// The size of a random reader's request, bytes (`workers::RAND_BYTES`).
const RAND_READ_BYTES: f64 = 4096.0;

/// The host's busy loops of a VM throughput or cold start-up cell, started
/// with the workloads (so that hostd's classifier sees them through the
/// settle time, and a start-up waits for a core as the simulator's
/// `help-all` cells do) and sampled around the measured window.
pub(crate) struct HostHogs {
    load: CpuLoad,
    begun: Option<Sample>,
}

impl HostHogs {
    /// The cell's loops, if it is a throughput or cold start-up cell with
    /// `host_cpu_load` (a hot start-up starts its loops after its warm-up
    /// start, `crate::vm_cell::VmLoads`).
    pub fn start(c: &Cell) -> Result<Option<HostHogs>> {
        let n = c.cpu.host_cpu_load as usize;
        if !matches!(c.benchmark, Benchmark::Throughput | Benchmark::Startup)
            || c.on_cpu_model()
            || n == 0
        {
            return Ok(None);
        }
        Ok(Some(HostHogs {
            load: CpuLoad::start(n)?,
            begun: None,
        }))
    }

    /// The measured window begins.
    pub fn begin(&mut self) {
        self.begun = Some(self.load.sample());
    }

    /// The loops' rate over the window into `out` (iterations per second,
    /// all loops together), after checking none died; the loops stop.
    pub fn finish(mut self, out: &mut RunResult) -> Result<()> {
        let now = self.load.sample();
        self.load.check_running()?;
        if let Some(b) = &self.begun {
            out.counters
                .insert(HOST_LOOPS_ITER_S.into(), now.rate_since(b));
        }
        self.load.stop();
        Ok(())
    }
}

/// The guest's random read rate in requests per second, from the
/// throughput samples (MB/s of 4 KiB reads), for a random-readers-only
/// workload; `None` otherwise (sequential reads or writes mix sizes).
pub(crate) fn read_iops(w: &WorkloadSpec, out: &RunResult) -> Option<f64> {
    if w.pattern != Some(Pattern::Rand) || w.writers > 0 || w.readers == 0 {
        return None;
    }
    out.mean().map(|mb_s| mb_s * 1e6 / RAND_READ_BYTES)
}

/// hostd's `cfsv` gauges (metrics without the `tandem_hostd_` prefix) into
/// the repetition's counters; nothing when hostd runs another mode.
pub(crate) fn cfsv_counters(metrics: &BTreeMap<String, f64>, out: &mut RunResult) {
    for (k, name) in CFSV_GAUGES {
        if let Some(v) = metrics.get(k) {
            out.counters.insert(name.into(), *v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iops_only_for_random_readers() {
        let out = RunResult {
            values: vec![4.096, 8.192],
            ..RunResult::default()
        };
        let w = |s: &str| WorkloadSpec::parse(s).unwrap();
        let iops = read_iops(&w("4r-rand"), &out).unwrap();
        assert!((iops - 1500.0).abs() < 1e-6, "{iops}");
        for s in ["4r-seq", "2r2w-rand", "none"] {
            assert_eq!(read_iops(&w(s), &out), None, "{s}");
        }
    }

    #[test]
    fn cfsv_gauges_are_copied_when_hostd_has_them() {
        let mut m = BTreeMap::new();
        m.insert("cfsv_boosted".to_string(), 5.0);
        m.insert("boosts_total".to_string(), 1.0);
        let mut out = RunResult::default();
        cfsv_counters(&m, &mut out);
        assert_eq!(out.counters.get("vm1_cfsv_boosted"), Some(&5.0));
        assert_eq!(out.counters.len(), 1);
    }
}
