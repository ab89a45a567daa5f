//! The coordinated task scheduling study's matrix on the CPU model
//! (Fanguède, Spyridakis, Raho 2014, Figure 1): average cyclictest latency
//! against the total number of loops, one column per guest load plus "no
//! guest", and the coordination modes side by side; and the model's speed
//! on its most contended cell.

use std::fmt::Write as _;
use std::time::Instant;

use crate::cyclictest::{run_latency, CpuCoordination, LatencySetup};
use crate::{FairKind, Platform};

/// The most loops in the host, as in the study.
pub const MAX_HOST_LOOPS: usize = 8;

/// Figure 1 as a table: one row per total, columns no guest, 0, 1 and 2
/// guest loops (`-` where the host would need more than 8 or fewer than
/// 0 loops).
pub fn latency_table(p: &Platform, sched: FairKind, samples: u64) -> Result<String, String> {
    let mut out = format!(
        "{} on {}: average cyclictest latency (us), {samples} samples per cell\n",
        sched.name(),
        p.name
    );
    let _ = writeln!(
        out,
        "{:>6} {:>10} {:>10} {:>10} {:>10}",
        "total", "no guest", "0 guest", "1 guest", "2 guest"
    );
    for total in 0..=MAX_HOST_LOOPS {
        let _ = write!(out, "{total:>6}");
        for guest in [None, Some(0), Some(1), Some(2)] {
            let host = total as i64 - guest.unwrap_or(0) as i64;
            if !(0..=MAX_HOST_LOOPS as i64).contains(&host) {
                let _ = write!(out, " {:>10}", "-");
                continue;
            }
            let mut s = LatencySetup::new(p.clone(), sched, host as usize, guest);
            s.loops = samples;
            let r = run_latency(&s)?;
            let _ = write!(out, " {:>10.1}", r.hist.avg_us());
        }
        out.push('\n');
    }
    Ok(out)
}

/// One guest loop and 0 to 8 host loops under each coordination mode:
/// average latency and the host loops' share of the cores.
pub fn coordination_table(p: &Platform, sched: FairKind, samples: u64) -> Result<String, String> {
    let modes = [
        CpuCoordination::Off,
        CpuCoordination::StaticCpu,
        CpuCoordination::HelpCpu,
    ];
    let mut out =
        String::from("1 guest loop: average latency us (host loops' share of the cores)\n");
    let _ = write!(out, "{:>6}", "host");
    for c in modes {
        let _ = write!(out, " {:>18}", c.name());
    }
    out.push('\n');
    for host in 0..=MAX_HOST_LOOPS {
        let _ = write!(out, "{host:>6}");
        for c in modes {
            let mut s = LatencySetup::new(p.clone(), sched, host, Some(1));
            s.loops = samples;
            s.coordination = c;
            let r = run_latency(&s)?;
            let _ = write!(out, " {:>9.1} ({:.3})", r.hist.avg_us(), r.host_loops_share);
        }
        out.push('\n');
    }
    Ok(out)
}

/// The CPU-contended cell (8 host loops, 1 guest loop, cyclictest in the
/// guest): simulated events handled and the wall-clock seconds they took.
pub fn bench_cell(p: &Platform, sched: FairKind, samples: u64) -> Result<(u64, f64), String> {
    let mut s = LatencySetup::new(p.clone(), sched, MAX_HOST_LOOPS, Some(1));
    s.loops = samples;
    let t0 = Instant::now();
    let r = run_latency(&s)?;
    Ok((r.events, t0.elapsed().as_secs_f64()))
}
