//! Each device's cells in turn: the device made ready ([`crate::device`]),
//! the cell's host scheduler switched, the cell's repetitions run through
//! the procedure (native cells in `crate::native`, VM cells in
//! `crate::vm_cell`), the scheduler restored; each cell's results written
//! as it finishes ([`Record`]).

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

/// Where a run's results go as its cells finish ([`experiment::IncrementalWriter`],
/// the simulator's writer): each cell's rows to `results.csv` at once and
/// `results.json` rewritten (through a temporary file) after every cell, so
/// that a run that dies (an error, Ctrl-C, SIGKILL, a crash of the machine)
/// keeps the cells it finished; a cell whose run fails is named in
/// `meta.extra.failed_cells` with the reason.
pub(crate) struct Record {
    writer: experiment::IncrementalWriter,
    out: std::path::PathBuf,
    /// The writer's slot of each cell's first row (`Options::cells` order).
    first_slot: Vec<usize>,
    /// How many rows each cell has (`experiment::latency::results_per_cell`).
    rows: Vec<usize>,
    /// results.json's `meta.extra`: the machine, the guest, the scheduler
    /// tunables, the steal share and the failed cells, as the run learns them.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// cyclictest's histograms of the latency cells done.
    hists: Vec<(Cell, Histogram)>,
    /// The failure that ends the run is in `failed_cells` already.
    failure_named: bool,
}

impl Record {
    fn create(o: &Options, out: &Path) -> Result<Record> {
        experiment::prepare_out_dir(out).map_err(|e| crate::Error::Usage(format!("--out: {e}")))?;
        let meta = RunMeta {
            runner: "real".into(),
            scenario: o.scenario.name.clone(),
            tandem_version: env!("CARGO_PKG_VERSION").into(),
            seed: o.scenario.seed,
            extra: Default::default(),
        };
        let planned = experiment::planned(&o.cells);
        let writer =
            experiment::IncrementalWriter::create(out, meta, o.provenance.clone(), &planned)
                .map_err(|e| run_err(format!("writing {}: {e}", out.display())))?;
        Ok(Record {
            writer,
            out: out.to_path_buf(),
            first_slot: experiment::first_slots(&o.cells),
            rows: o
                .cells
                .iter()
                .map(experiment::latency::results_per_cell)
                .collect(),
            extra: Default::default(),
            hists: Vec::new(),
            failure_named: false,
        })
    }

    fn write_err(&self, e: impl std::fmt::Display) -> crate::Error {
        run_err(format!("writing {}: {e}", self.out.display()))
    }

    /// Cell `index` (of `Options::cells`) is done: its rows, its histogram
    /// (the file at once, the charts at the end) and `meta.extra` go to disk.
    fn cell_done(
        &mut self,
        index: usize,
        rows: Vec<CellResult>,
        hist: Option<(Cell, Histogram)>,
    ) -> Result<()> {
        if rows.len() != self.rows[index] {
            return Err(run_err(format!(
                "cell {}: {} result rows where {} were planned",
                index + 1,
                rows.len(),
                self.rows[index]
            )));
        }
        for (k, r) in rows.into_iter().enumerate() {
            self.writer
                .push(self.first_slot[index] + k, r)
                .map_err(|e| self.write_err(e))?;
        }
        if let Some((c, h)) = hist {
            write_histogram(&self.out, &c, &h)?;
            self.hists.push((c, h));
        }
        self.checkpoint()
    }

    /// `meta.extra` as it is now, and results.json rewritten.
    fn checkpoint(&mut self) -> Result<()> {
        self.writer.set_extra(self.extra.clone());
        self.writer.checkpoint().map_err(|e| self.write_err(e))
    }

    /// The run failed in `cell` (`None`: before or after its cells): named in
    /// `meta.extra.failed_cells` with the reason, unless a stop signal
    /// ended it (`provenance.interrupted_by` says so).
    fn cell_failed(&mut self, cell: Option<&Cell>, why: &crate::Error) {
        if crate::interrupt::received().is_some() {
            return;
        }
        self.failure_named = true;
        let mut entry = serde_json::Map::new();
        if let Some(c) = cell {
            entry.insert("cell".into(), c.key().into());
        }
        entry.insert("reason".into(), why.to_string().into());
        crate::vm_vhost::push_failed_cell(&mut self.extra, entry.into());
    }

    /// Ends the run's outputs: every file for the cells done, marked
    /// incomplete if the run did not end well (`failed`) or a signal stopped
    /// it. Returns the rows written.
    fn finish(mut self, failed: bool) -> Result<Vec<CellResult>> {
        self.writer.set_extra(self.extra.clone());
        let ended = crate::interrupt::received().or(failed.then_some("error"));
        let out = self.out.clone();
        let (_, results) = self
            .writer
            .finish(ended)
            .map_err(|e| run_err(format!("writing {}: {e}", out.display())))?;
        write_histogram_plots(&out, &self.hists)?;
        Ok(results)
    }
}

/// Each device's cells in turn, the outputs written as they finish.
pub(crate) fn run_devices(
    o: &Options,
    out: &Path,
    devices: &[String],
    app: &App,
    device_use: Option<&guard::DeviceUse>,
) -> Result<Vec<CellResult>> {
    crate::interrupt::install_signal_handlers();
    let mut rec = Record::create(o, out)?;
    // On a virtual machine, time the hypervisor gives other guests delays
    // every process of the run, the emulated device's included: recorded
    // with the results.
    let steal = devemu::probe::StealMeter::start();
    let mut run = || -> Result<()> {
        for label in devices {
            // The device's cells, with their index among the run's.
            let (index, cells): (Vec<usize>, Vec<&Cell>) = o
                .cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.device.name() == label)
                .unzip();
            let mut cleanup = Cleanup::default();
            let d = DeviceRun {
                o,
                label,
                cells: &cells,
                app,
                device_use,
            };
            let r = device::prepare(&d, &mut cleanup, &mut rec.extra)
                .and_then(|ready| run_cells(&d, &index, &ready, &mut cleanup, &mut rec));
            let fin = cleanup.finish();
            r.and(fin)?;
        }
        Ok(())
    };
    let r = run();
    if let Err(e) = &r {
        // A failure in a cell was named with its cell by run_cells.
        if !rec.failure_named {
            rec.cell_failed(None, e);
        }
    }
    if let Some(share) = steal.share() {
        rec.extra.insert("cpu_steal_share".into(), share.into());
        if share > devemu::probe::STEAL_WARN_SHARE {
            tracing::warn!(
                "the hypervisor stole {:.1}% of the CPU time during the run; the timings include its delays",
                share * 100.0
            );
        }
    }
    let planned = o.cells.len();
    let failed = r.is_err();
    let results = rec.finish(failed)?;
    match r {
        Ok(()) => Ok(results),
        Err(e) => {
            let done: std::collections::BTreeSet<String> =
                results.iter().map(|r| r.cell.key()).collect();
            let m = format!(
                "{e}\n{} of {planned} cells were measured and are in {} (results.json says the run is incomplete)",
                done.len(),
                out.display()
            );
            // Bad input found while running (a scheduler the device lacks)
            // stays a usage error (exit code 2).
            Err(match e {
                crate::Error::Usage(_) => crate::Error::Usage(m),
                crate::Error::Run(_) => run_err(m),
            })
        }
    }
}

/// The key of the failed cells' list in results.json's `meta.extra`.
pub(crate) const FAILED_CELLS_KEY: &str = "failed_cells";

/// A latency cell's cyclictest histogram, in its `-h` format and under the
/// simulator's name ([`experiment::latency::histogram_file_name`]).
fn write_histogram(out: &Path, c: &Cell, h: &Histogram) -> Result<()> {
    let path = out.join(experiment::latency::histogram_file_name(c));
    std::fs::write(&path, h.to_cyclictest_text())
        .map_err(|e| run_err(format!("writing {}: {e}", path.display())))
}

/// The histograms' charts as the simulator draws them
/// ([`experiment::plot::hist::write_histogram_plots`]).
fn write_histogram_plots(out: &Path, hists: &[(Cell, Histogram)]) -> Result<()> {
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

/// The cells of a ready device, each with its host scheduler, each
/// recorded as it finishes; `index` is each cell's among the run's.
fn run_cells(
    d: &DeviceRun,
    index: &[usize],
    ready: &Ready,
    cleanup: &mut Cleanup,
    rec: &mut Record,
) -> Result<()> {
    let mut tunables = serde_json::Map::new();
    for (ci, c) in d.cells.iter().enumerate() {
        let mut hist = None;
        let r = (|| {
            let k = c.host_sched.kernel_name();
            set_cell_sched(d.o, k, &ready.dev, &ready.sb)?;
            tunables.insert(
                k.to_string(),
                serde_json::to_value(read_tunables(&ready.sb.queue)).unwrap_or_default(),
            );
            let x = CellCtx { d, ready, c, ci };
            let runs = if c.is_native() {
                native::run_cell(&x, cleanup, &mut hist)?
            } else {
                vm_cell::run_cell(&x, cleanup, &mut hist, &mut rec.extra)?
            };
            cleanup.restore_sched();
            Ok(runs)
        })();
        let runs = match r {
            Ok(runs) => runs,
            Err(e) => {
                rec.cell_failed(Some(c), &e);
                return Err(e);
            }
        };
        rec.extra.insert(
            format!("scheduler_tunables:{}", d.label),
            tunables.clone().into(),
        );
        rec.cell_done(
            index[ci],
            experiment::latency::cell_results(c, "real", runs),
            hist.map(|h| ((*c).clone(), h)),
        )?;
    }
    Ok(())
}
