//! Native cells: the app and the workloads run on the host, on the
//! device's file system. [`OnHost`] is the procedure's host for them
//! ([`experiment::procedure::Host`]); the process-level steps (starting S's
//! workers, timing a start) live here and serve the guest agent too
//! (`crate::guest`), which runs the same steps inside a VM.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use cpusched::cyclictest::Histogram;
use experiment::procedure::{self, Scope};
use experiment::{Pattern, ProfileCell, RunResult, WorkloadSpec};

use crate::cells::CellCtx;
use crate::cleanup::Cleanup;
use crate::cpuload::WarmLoads;
use crate::cputime::{Role, RunCpu, Snapshot};
use crate::workers::{self, Kind};
use crate::{check_interrupted, run_err, sectors_done, sleep, Error, Result};

/// The native side of the procedure: each step on the host itself.
///
/// Its properties as a host: there is no guest (dropping the guests'
/// caches does nothing); the benchmarked disk is the device (its
/// `/sys/block/X/stat`); a background worker that died during the settle
/// time fails the run.
pub(crate) struct OnHost<'a> {
    x: &'a CellCtx<'a>,
    /// The repetition's seed, for the workers' random offsets.
    seed: u64,
    cleanup: &'a mut Cleanup,
    /// The cell's cyclictest histogram, the repetitions' merged (latency).
    hist: &'a mut Option<Histogram>,
    /// The repetition's CPU time of the app and the workload.
    cpu: RunCpu,
    /// The host's busy loops of a hot start-up (`host_cpu_load`).
    loads: Option<WarmLoads>,
}

/// A hot start's work rate ([`crate::cpuload::work_per_us`]) for a cell
/// with hot caches, `None` for a cold one.
pub(crate) fn hot_work(c: &experiment::Cell) -> Option<f64> {
    (c.cpu.caches == experiment::Caches::Hot).then(crate::cpuload::work_per_us)
}

/// Counter of a hot start-up's run: the work rate its starts did their
/// recorded CPU time at (units of [`crate::cpuload::work`] per µs, the
/// host's), for the record.
pub const APP_WORK_PER_US: &str = "app_work_per_us";

/// A hot start-up's loops' rates (`host_loops_iter_s`,
/// `guest_loops_iter_s`, for the sides that have loops) and its work rate
/// into a run's counters.
pub(crate) fn hot_counters(out: &mut RunResult, host: Option<f64>, guest: Option<f64>) {
    for (k, rate) in [
        (crate::latency::HOST_LOOPS_ITER_S, host),
        (crate::latency::GUEST_LOOPS_ITER_S, guest),
        (APP_WORK_PER_US, Some(crate::cpuload::work_per_us())),
    ] {
        if let Some(r) = rate {
            out.counters.insert(k.into(), r);
        }
    }
}

impl procedure::Host for OnHost<'_> {
    type Error = Error;

    fn drop_caches(&mut self, scope: Scope) -> Result<()> {
        match scope {
            Scope::Guest => Ok(()),
            Scope::Host => crate::drop_caches(),
        }
    }

    fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>> {
        let w: WorkloadSpec = self.x.c.host_workload;
        let r = self.x.ready;
        start_workload(
            &self.x.d.o.exe,
            &w,
            &r.files,
            self.seed,
            r.rotational,
            &mut self.cleanup.workers,
        )?;
        Ok(vec![w])
    }

    fn wait(&mut self, secs: f64) -> Result<()> {
        sleep(secs)
    }

    fn settle(&mut self, secs: f64) -> Result<()> {
        sleep(secs)?;
        workers_alive(&mut self.cleanup.workers, "a background worker")
    }

    fn begin_measure(&mut self) -> Result<()> {
        self.cpu
            .begin(workers_snapshot(&self.cleanup.workers, Role::HostWorkload));
        Ok(())
    }

    fn start_app(&mut self, timeout_s: f64) -> Result<Option<f64>> {
        let r = self.x.ready;
        let s = time_start(
            &self.x.d.o.exe,
            self.x.d.app,
            &r.app_dir,
            &r.workdir,
            timeout_s,
            hot_work(self.x.c),
        )?;
        self.cpu.app_start(s.sched, s.secs);
        Ok(s.secs)
    }

    fn start_cpu_loads(&mut self) -> Result<()> {
        let n = self.x.c.cpu.host_cpu_load as usize;
        self.loads = Some(WarmLoads::start(n, &mut check_interrupted)?);
        Ok(())
    }

    fn stop_cpu_loads(&mut self, out: &mut RunResult) -> Result<()> {
        let host = self.loads.take().map(WarmLoads::finish).transpose()?;
        hot_counters(out, host.flatten(), None);
        Ok(())
    }

    fn latency(&mut self, loops: u64) -> Result<RunResult> {
        let host_loops = self.x.c.cpu.host_cpu_load as usize;
        let run = crate::latency::run_native(loops, host_loops, &mut check_interrupted)?;
        keep_histogram(self.hist, &run.hist);
        Ok(run.run_result())
    }

    fn profile(&mut self, p: &ProfileCell, duration_s: f64, sample_s: f64) -> Result<RunResult> {
        crate::profile::run_native(&self.x.ready.files, p, duration_s, sample_s, self.seed)
    }

    fn sectors(&mut self) -> Result<u64> {
        Ok(sectors_done(&self.x.ready.sb.stat))
    }

    fn finish(&mut self, out: &mut RunResult) -> Result<()> {
        let now = workers_snapshot(&self.cleanup.workers, Role::HostWorkload);
        self.cpu.finish(now, &[Role::HostWorkload], out);
        self.cleanup.stop_workers();
        Ok(())
    }

    fn unsupported(&self, what: &str) -> Error {
        cpu_model_only(what)
    }
}

/// The real runner's error for a cell of the CPU model's benchmarks
/// (`readers-hashers`: the command line refuses it first; this is the
/// procedure's word on it).
pub(crate) fn cpu_model_only(what: &str) -> Error {
    Error::Usage(format!(
        "{what}: runs on the simulator's CPU model only (tandem sim run)"
    ))
}

/// Adds a repetition's histogram to the cell's (the simulator merges its
/// repetitions' the same way).
pub(crate) fn keep_histogram(cell: &mut Option<Histogram>, run: &Histogram) {
    cell.get_or_insert_with(Histogram::default).merge(run);
}

/// The repetitions of a native cell, each through the procedure; a latency
/// cell's histogram goes to `hist`.
pub(crate) fn run_cell(
    x: &CellCtx,
    cleanup: &mut Cleanup,
    hist: &mut Option<Histogram>,
) -> Result<Vec<RunResult>> {
    let mut runs = Vec::new();
    for rep in 0..x.c.repetitions {
        x.progress_repetition(rep);
        let r = procedure::run_repetition(
            x.c,
            &x.d.o.waits(),
            &mut OnHost {
                x,
                seed: x.rep_seed(rep),
                cleanup,
                hist,
                cpu: RunCpu::default(),
                loads: None,
            },
        );
        cleanup.stop_workers();
        runs.push(r?);
    }
    Ok(runs)
}

/// The start of the app of a cell.
pub enum App {
    Trace(String, experiment::apptrace::AppTrace),
    Command(String),
}

/// The app a scenario names: `cmd:<command line>` or a trace preset.
pub fn app_of(name: &str) -> Result<App> {
    if let Some(c) = name.strip_prefix("cmd:") {
        return Ok(App::Command(c.trim().to_string()));
    }
    experiment::apptrace::preset(name)
        .map(|t| App::Trace(name.to_string(), t))
        .ok_or_else(|| Error::Usage(format!("app {name:?}: no such trace")))
}

/// The background workers' threads now, as `role` (their CPU time,
/// [`crate::cputime`]).
pub fn workers_snapshot(workers: &[Child], role: Role) -> Snapshot {
    let mut s = Snapshot::default();
    for ch in workers {
        s.read_process(role, ch.id());
    }
    s
}

/// A worker that died (a read error, a full disk) is a failed run.
pub fn workers_alive(workers: &mut [Child], who: &str) -> Result<()> {
    for ch in workers.iter_mut() {
        if let Ok(Some(st)) = ch.try_wait() {
            return Err(run_err(format!("{who} exited early ({st})")));
        }
    }
    Ok(())
}

/// Start a background workload as S does: readers, then rate-capped
/// writers, and a sync every 2 s while writers run. `files` holds one file
/// per process; the children are pushed on `workers` (killed by the caller).
pub fn start_workload(
    exe: &Path,
    w: &WorkloadSpec,
    files: &[PathBuf],
    seed: u64,
    rotational: bool,
    workers: &mut Vec<Child>,
) -> Result<()> {
    let random = w.pattern == Some(Pattern::Rand);
    if files.len() < (w.readers + w.writers) as usize {
        return Err(run_err(format!(
            "workload {}: {} files needed, {} there",
            w.name(),
            w.readers + w.writers,
            files.len()
        )));
    }
    for (i, f) in files.iter().enumerate().take(w.readers as usize) {
        let kind = if random {
            Kind::RandRead
        } else {
            Kind::SeqRead
        };
        workers.push(workers::spawn_worker(
            exe,
            kind,
            Some(f),
            0.0,
            seed + i as u64,
        )?);
    }
    if w.writers > 0 {
        let per = experiment::suite::writer_rate_bytes_per_s(w, rotational);
        for i in 0..w.writers as usize {
            let kind = if random {
                Kind::RandWrite
            } else {
                Kind::SeqWrite
            };
            let f = &files[w.readers as usize + i];
            workers.push(workers::spawn_worker(
                exe,
                kind,
                Some(f),
                per,
                seed + 100 + i as u64,
            )?);
        }
        workers.push(workers::spawn_worker(exe, Kind::Sync, None, 0.0, 0)?);
    }
    Ok(())
}

/// One start of the app ([`time_start`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Start {
    /// The seconds it took, or `None` when it ran into the timeout (it is
    /// killed then).
    pub secs: Option<f64>,
    /// The app process's schedstat when it had exited (CPU time, wait for
    /// a CPU, slices), for the run's CPU counters ([`crate::cputime`]).
    pub sched: Option<agent::cfsv::SchedStat>,
}

/// One start of the app, with the caches as the cell wants them already:
/// how long it took, and the CPU time it spent. `work_per_us` is a hot
/// start's ([`workers::replay_main`]; a `cmd:` app runs as it is).
pub fn time_start(
    exe: &Path,
    app: &App,
    app_dir: &Path,
    workdir: &Path,
    timeout_s: f64,
    work_per_us: Option<f64>,
) -> Result<Start> {
    let t0 = Instant::now();
    let mut child = match app {
        App::Trace(name, _) => workers::spawn_replay(exe, name, app_dir, work_per_us)?,
        App::Command(cmdline) => workers::spawn_command(cmdline, workdir)?,
    };
    let timeout = Duration::from_secs_f64(timeout_s);
    // The child is left unreaped when it exits (`has_exited`), so that its
    // schedstat can be read (`kill_reading`).
    let exited = loop {
        if let Err(e) = check_interrupted() {
            workers::kill(&mut child);
            return Err(e);
        }
        if workers::has_exited(&child) {
            break true;
        }
        if t0.elapsed() >= timeout {
            break false;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = t0.elapsed().as_secs_f64();
    let (status, sched) = workers::kill_reading(&mut child);
    if !exited {
        return Ok(Start { secs: None, sched });
    }
    match status {
        Some(st) if !st.success() => Err(run_err(format!("the app exited with {st}"))),
        Some(_) => Ok(Start {
            secs: Some(took),
            sched,
        }),
        None => Err(run_err("waiting for the app: no status")),
    }
}
