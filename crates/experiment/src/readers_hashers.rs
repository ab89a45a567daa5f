//! The readers-hashers benchmark's table (the CFS-v study, issue 28): one
//! row per VM layout and host CPU scheduler, the mean over repetitions of
//! each VM's I/O rate, hashing rate and CPU use.

use std::fmt::Write as _;

use crate::cpu::{CpuSched, VmLayout};
use crate::result::{CellResult, Metric};
use crate::scenario::Benchmark;

/// True for the benchmark's results.
pub fn is_readers_hashers(r: &CellResult) -> bool {
    r.cell.benchmark == Benchmark::ReadersHashers
}

/// The columns, with their metrics.
const COLUMNS: [(&str, Metric); 6] = [
    ("VM1 IOPS", Metric::Vm1Iops),
    ("VM2 IOPS", Metric::Vm2Iops),
    ("VM1 MD5 MB/s", Metric::Vm1HashMbS),
    ("VM2 MD5 MB/s", Metric::Vm2HashMbS),
    ("VM1 CPU %", Metric::Vm1CpuPct),
    ("VM2 CPU %", Metric::Vm2CpuPct),
];

/// The table, rows in order of first appearance (`runner | layout | host
/// CPU scheduler | coordination`).
pub fn render_table(results: &[&CellResult]) -> String {
    let row_key = |r: &CellResult| {
        format!(
            "{} {} {} {}",
            r.runner,
            r.cell.cpu.vm_layout.map(|l| l.as_str()).unwrap_or("-"),
            r.cell.cpu.host_sched(),
            r.cell.coordination
        )
    };
    let mut rows: Vec<String> = Vec::new();
    for r in results {
        let k = row_key(r);
        if !rows.contains(&k) {
            rows.push(k);
        }
    }
    let mut out =
        String::from("== readers-hashers: mean over repetitions (MB/s = IOPS x 4 KiB) ==\n");
    let _ = write!(out, "{:<32}", "runner layout host-cpu coordination");
    for (h, _) in COLUMNS {
        let _ = write!(out, " {h:>13}");
    }
    out.push('\n');
    for k in &rows {
        let _ = write!(out, "{k:<32}");
        for (_, m) in COLUMNS {
            let v = results
                .iter()
                .find(|r| row_key(r) == *k && r.metric == m)
                .map(|r| r.summary().mean);
            match v {
                Some(v) => {
                    let _ = write!(out, " {v:>13.1}");
                }
                None => {
                    let _ = write!(out, " {:>13}", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// Per VM, the means of (IOPS, MD5 MB/s, CPU %) of `runner`'s cells of
/// `layout` under the host CPU scheduler `sched` (coordination off);
/// `None` when a metric is missing.
pub fn vm_means(
    results: &[CellResult],
    layout: VmLayout,
    sched: CpuSched,
) -> Option<[(f64, f64, f64); 2]> {
    let mean = |m: Metric| {
        results
            .iter()
            .find(|r| {
                is_readers_hashers(r)
                    && r.metric == m
                    && r.cell.cpu.vm_layout == Some(layout)
                    && r.cell.cpu.host_sched() == sched
                    && r.cell.coordination.is_off()
            })
            .map(|r| r.summary().mean)
    };
    let vm = |iops, hash, cpu| Some((mean(iops)?, mean(hash)?, mean(cpu)?));
    Some([
        vm(Metric::Vm1Iops, Metric::Vm1HashMbS, Metric::Vm1CpuPct)?,
        vm(Metric::Vm2Iops, Metric::Vm2HashMbS, Metric::Vm2CpuPct)?,
    ])
}
