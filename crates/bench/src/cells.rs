//! Each device's cells in turn: the device made ready ([`crate::device`]),
//! the cell's host scheduler switched, the cell's repetitions run through
//! the procedure (native cells in `crate::native`, VM cells in
//! `crate::vm_cell`), the scheduler restored; then the outputs.

use std::path::Path;

use cpusched::cyclictest::Histogram;
use experiment::{Cell, CellResult, RunMeta};

use crate::cleanup::Cleanup;
use crate::device::{self, DeviceRun, Ready};
use crate::native::App;
use crate::options::Options;
use crate::sysfs::{read_tunables, set_cell_sched};
use crate::{guard, native, progress, run_err, vm_cell, Result};

/// One cell of a device, with what it runs on: the run context the
/// procedure's hosts are made from.
pub(crate) struct CellCtx<'a> {
    pub d: &'a DeviceRun<'a>,
    pub ready: &'a Ready,
    pub c: &'a Cell,
    /// The cell's index among the device's cells.
    pub ci: usize,
}

impl CellCtx<'_> {
    /// The progress line of repetition `rep`, for native and VM cells alike.
    pub fn progress_repetition(&self, rep: u32) {
        progress(
            self.d.o,
            &format!(
                "cell {}/{} [{}] repetition {}/{}",
                self.ci + 1,
                self.d.cells.len(),
                self.c.key(),
                rep + 1,
                self.c.repetitions
            ),
        );
    }

    /// The seed of repetition `rep`: the workers' random offsets.
    pub fn rep_seed(&self, rep: u32) -> u64 {
        experiment::splitmix64(self.c.seed ^ rep as u64)
    }
}

/// Each device's cells in turn, then the outputs.
pub(crate) fn run_devices(
    o: &Options,
    out: &Path,
    devices: &[String],
    app: &App,
    device_use: Option<&guard::DeviceUse>,
) -> Result<Vec<CellResult>> {
    crate::interrupt::install_signal_handlers();
    let mut results = Vec::new();
    let mut hists: Vec<(Cell, Histogram)> = Vec::new();
    let mut extra = serde_json::Map::new();
    // On a virtual machine, time the hypervisor gives other guests delays
    // every process of the run, the emulated device's included: recorded
    // with the results.
    let steal = devemu::probe::StealMeter::start();
    for label in devices {
        let cells: Vec<&Cell> = o
            .cells
            .iter()
            .filter(|c| c.device.name() == label)
            .collect();
        let mut cleanup = Cleanup::default();
        let d = DeviceRun {
            o,
            label,
            cells: &cells,
            app,
            device_use,
        };
        let r = device::prepare(&d, &mut cleanup, &mut extra)
            .and_then(|ready| run_cells(&d, &ready, &mut cleanup, &mut extra, &mut hists));
        let fin = cleanup.finish();
        results.extend(r?);
        fin?;
    }
    if let Some(share) = steal.share() {
        extra.insert("cpu_steal_share".into(), share.into());
        if share > devemu::probe::STEAL_WARN_SHARE {
            tracing::warn!(
                "the hypervisor stole {:.1}% of the CPU time during the run; the timings include its delays",
                share * 100.0
            );
        }
    }
    let meta = RunMeta {
        runner: "real".into(),
        scenario: o.scenario.name.clone(),
        tandem_version: env!("CARGO_PKG_VERSION").into(),
        seed: o.scenario.seed,
        extra,
    };
    experiment::write_outputs(out, &meta, &results)
        .map_err(|e| run_err(format!("writing {}: {e}", out.display())))?;
    write_histograms(out, &hists)?;
    Ok(results)
}

/// cyclictest's histograms, one per latency cell, in its `-h` format and
/// under the simulator's names ([`experiment::latency::histogram_file_name`]),
/// and their charts as the simulator draws them
/// ([`experiment::plot::hist::write_histogram_plots`]).
fn write_histograms(out: &Path, hists: &[(Cell, Histogram)]) -> Result<()> {
    for (c, h) in hists {
        let path = out.join(experiment::latency::histogram_file_name(c));
        std::fs::write(&path, h.to_cyclictest_text())
            .map_err(|e| run_err(format!("writing {}: {e}", path.display())))?;
    }
    let pairs: Vec<_> = hists
        .iter()
        .map(|(c, h)| {
            let counts = experiment::plot::hist::HistogramCounts {
                buckets: &h.buckets,
                overflow: h.overflow,
                count: h.count,
            };
            (c, counts)
        })
        .collect();
    experiment::plot::hist::write_histogram_plots(out, &pairs)
        .map_err(|e| run_err(format!("writing {}: {e}", out.display())))?;
    Ok(())
}

/// The cells of a ready device, each with its host scheduler.
fn run_cells(
    d: &DeviceRun,
    ready: &Ready,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
    hists: &mut Vec<(Cell, Histogram)>,
) -> Result<Vec<CellResult>> {
    let mut results = Vec::new();
    let mut tunables = serde_json::Map::new();
    for (ci, c) in d.cells.iter().enumerate() {
        let k = c.host_sched.kernel_name();
        set_cell_sched(d.o, k, &ready.dev, &ready.sb)?;
        tunables.insert(
            k.to_string(),
            serde_json::to_value(read_tunables(&ready.sb.queue)).unwrap_or_default(),
        );
        let x = CellCtx { d, ready, c, ci };
        let mut hist = None;
        let runs = if c.is_native() {
            native::run_cell(&x, cleanup, &mut hist)?
        } else {
            vm_cell::run_cell(&x, cleanup, &mut hist, extra)?
        };
        cleanup.restore_sched();
        results.extend(experiment::latency::cell_results(c, "real", runs));
        hists.extend(hist.map(|h| ((*c).clone(), h)));
    }
    extra.insert(format!("scheduler_tunables:{}", d.label), tunables.into());
    Ok(results)
}
