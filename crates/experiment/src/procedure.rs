//! The S suite's procedure, written once for every runner: the order of its steps and
//! its decisions (which caches are dropped when, how long to settle and pause, the
//! timeout, how many samples), generic over a [`Host`] that knows how to do each step.
//!
//! The simulator (`sim::bench::SimHost`) and the real runner (`bench::native::OnHost`
//! for native cells, `bench::vm_cell::InGuest` for VM cells) implement [`Host`]; neither
//! writes the procedure itself. One repetition of a cell
//! ([`run_repetition`]) follows the suite's `comm_startup_lat.sh` and
//! `throughput-sync.sh`:
//!
//! 1. the host's caches are dropped ([`Scope::Host`]), so that a repetition does not
//!    find what the one before read;
//! 2. the background workloads start (host and guests), and settle for
//!    [`suite::SETTLE_S`] (none when nothing runs);
//! 3. the measurement begins ([`Host::begin_measure`]);
//! 4. latency: cyclictest for the cell's `loops` samples ([`Host::latency`]), with
//!    the cell's busy loops (`host_cpu_load`, `guest_cpu_load`) running around it;
//!    start-up: per start, the pause ([`suite::PAUSE_BEFORE_START_S`]), the caches
//!    dropped in the guests that start the app and then in the host, the start with
//!    the cell's timeout; a start shorter than [`suite::SHORT_START_S`] is followed by
//!    that much rest, and a start that hits the timeout counts as the timeout and ends
//!    the run;
//!    start-up with hot caches (`caches = "hot"`, the coordinated task scheduling
//!    study's test): one untimed warm-up start (the app's files are then in the page
//!    caches), the cell's busy loops started ([`Host::start_cpu_loads`]), then per
//!    start the pause ([`suite::HOT_PAUSE_MS`]) and the start, no cache dropped and no
//!    rest; a timeout ends the run as above; the loops stop
//!    ([`Host::stop_cpu_loads`]);
//!    throughput: the disk's sectors read and written, sampled every `sample_s` over
//!    `duration_s` (at least one sample), in MB/s (10^6 bytes);
//! 5. the workloads stop and the host adds its counters ([`Host::finish`]).
//!
//! A new benchmark is a new arm of [`run_repetition`] (its steps, in order), plus the
//! steps it needs that [`Host`] does not have yet, implemented by each host. The
//! simulator runs its latency cells on its CPU model (`sim::cpu_bench`), which is not
//! a [`Host`] (no disk, no caches, no workloads but busy loops), and its start-ups
//! with hot caches the same way; the real runner runs both here. What runs on the
//! simulator's CPU model only (`readers-hashers`) is refused by [`run_repetition`]'s
//! first check ([`on_cpu_model`]) before any step.

use crate::cpu::Caches;
use crate::scenario::Benchmark;
use crate::suite;
use crate::{Cell, ProfileCell, RunResult, WorkloadSpec};

/// Whose page cache a step drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The kernels of the guests that start the app (VM cells); native cells have
    /// none, and a host does nothing for this scope there.
    Guest,
    /// The host's kernel: in native cells the one the app starts in, in VM cells the
    /// one under the guests (the VM extension of the suite drops it too, before every
    /// start; otherwise the host's cache of the guest's image fakes a fast disk).
    Host,
}

/// Overrides of the suite's waits: the real runner's `--settle-s` and `--pause-s`, for
/// short runs (tests). `Waits::default()` is the suite's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Waits {
    /// Settle time when a workload runs, instead of [`suite::SETTLE_S`].
    pub settle_s: Option<f64>,
    /// Pause before each start, instead of [`suite::PAUSE_BEFORE_START_S`].
    pub pause_s: Option<f64>,
}

impl Waits {
    /// The settle time after starting `started`: nothing when no workload runs, else
    /// the override or the suite's.
    pub fn settle_s(&self, started: &[WorkloadSpec]) -> f64 {
        match self.settle_s {
            Some(s) if suite::settle_s(started) > 0.0 => s,
            _ => suite::settle_s(started),
        }
    }

    /// The pause before each start.
    pub fn pause_s(&self) -> f64 {
        self.pause_s.unwrap_or(suite::PAUSE_BEFORE_START_S)
    }

    /// The pause before each start with hot caches: the override or
    /// [`suite::HOT_PAUSE_MS`].
    pub fn hot_pause_s(&self) -> f64 {
        self.pause_s.unwrap_or(suite::HOT_PAUSE_MS as f64 / 1000.0)
    }
}

/// What the procedure asks of a machine, simulated or real. Each step says what it
/// must do; the procedure decides when.
pub trait Host {
    /// The host's failures (the simulator's `String`, the real runner's `Error`).
    type Error;

    /// Drop the page cache of `scope` (after writing back what is dirty, as `sync;
    /// echo 3 > /proc/sys/vm/drop_caches` does).
    fn drop_caches(&mut self, scope: Scope) -> Result<(), Self::Error>;

    /// Start the cell's background workloads (the host's and the guests'), each
    /// process on its own file as S does; return every workload started (`none`
    /// included), from which the procedure decides the settle time.
    fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>, Self::Error>;

    /// Let `secs` pass with the workloads running (samples, the rest after a short
    /// start).
    fn wait(&mut self, secs: f64) -> Result<(), Self::Error>;

    /// The settle time after the workloads started. By default a [`Host::wait`]; a
    /// host may check its workloads are still alive at its end.
    fn settle(&mut self, secs: f64) -> Result<(), Self::Error> {
        self.wait(secs)
    }

    /// The pause before a start: in the suite, two `sleep`s and the shell commands
    /// between them. By default a [`Host::wait`]; a host whose processes would
    /// otherwise start at exact instants adds the delay of those commands here.
    fn pause(&mut self, secs: f64) -> Result<(), Self::Error> {
        self.wait(secs)
    }

    /// The measurement begins (the workloads have settled): a host that counts
    /// something over the measurement marks its start here.
    fn begin_measure(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Start the app once, in every kernel that starts it, and wait for it: the
    /// seconds until the last one was up, or `None` when `timeout_s` passed first.
    /// The app is gone when this returns. With hot caches (the cell's `caches`) the
    /// app's recorded CPU time is CPU work, not waiting.
    fn start_app(&mut self, timeout_s: f64) -> Result<Option<f64>, Self::Error>;

    /// Start the cell's busy loops (`host_cpu_load` on the host, `guest_cpu_load` in
    /// VM 1's guest) and let them warm up, for the start-ups with hot caches. The
    /// host stops them when the repetition ends, on an error too. By default the
    /// host does not run hot start-ups ([`Host::unsupported`]).
    fn start_cpu_loads(&mut self) -> Result<(), Self::Error> {
        Err(self.unsupported("benchmark = \"startup\" with caches = \"hot\""))
    }

    /// Stop the loops [`Host::start_cpu_loads`] started, after checking none died,
    /// and add what they got (iterations per second) to `out`'s counters.
    fn stop_cpu_loads(&mut self, out: &mut RunResult) -> Result<(), Self::Error> {
        let _ = out;
        Ok(())
    }

    /// One run of cyclictest for `loops` samples where the cell measures (the host
    /// in native cells, VM 1's guest in VM cells), with the cell's busy loops
    /// started before it (and warmed up) and stopped after it: the run's average
    /// latency (us) in `values`, its maximum in the
    /// [`crate::latency::LATENCY_MAX_US`] counter, the loops' iterations per second
    /// in counters of their own. The host keeps the histogram for the cell's file.
    /// By default the host does not run it ([`Host::unsupported`]).
    fn latency(&mut self, loops: u64) -> Result<RunResult, Self::Error> {
        let _ = loops;
        Err(self.unsupported("benchmark = \"latency\""))
    }

    /// One run of a file-system benchmark profile where the cell measures (the
    /// host in native cells, VM 1's guest in VM cells): `profile.threads`
    /// threads, each on its own preallocated file opened with `O_DIRECT`, for
    /// `duration_s` (the workloads started and settled before it). `values`:
    /// the profile's metric ([`crate::Profile::metric`]: operations per
    /// second, or MB/s for the sequential profiles) in each `sample_s`; the
    /// run's median and 99th-percentile request latencies (ms) in the
    /// [`crate::profile::IO_LATENCY_P50_MS`] and
    /// [`crate::profile::IO_LATENCY_P99_MS`] counters. By default the host does
    /// not run it ([`Host::unsupported`]).
    fn profile(
        &mut self,
        profile: &ProfileCell,
        duration_s: f64,
        sample_s: f64,
    ) -> Result<RunResult, Self::Error> {
        let _ = (profile, duration_s, sample_s);
        Err(self.unsupported("benchmark = \"profile\""))
    }

    /// Sectors (512 bytes) read and written so far on the benchmarked disk: the
    /// device in native cells, VM 1's virtual disk in VM cells.
    fn sectors(&mut self) -> Result<u64, Self::Error>;

    /// The end of a repetition: stop the workloads and add the host's counters to
    /// `out`.
    fn finish(&mut self, out: &mut RunResult) -> Result<(), Self::Error>;

    /// The error for a cell this host does not run; `what` names its benchmark
    /// ([`on_cpu_model`]).
    fn unsupported(&self, what: &str) -> Self::Error;
}

/// One repetition of `cell` on `host`. A failed step ends the repetition with its
/// error; the host's own cleanup stops what it started.
pub fn run_repetition<H: Host>(
    cell: &Cell,
    waits: &Waits,
    host: &mut H,
) -> Result<RunResult, H::Error> {
    if let Some(what) = on_cpu_model(cell) {
        // The hook of the benchmarks that run on the simulator's CPU model only
        // (see the module's documentation).
        return Err(host.unsupported(&what));
    }
    host.drop_caches(Scope::Host)?;
    let started = host.start_workloads()?;
    host.settle(waits.settle_s(&started))?;
    host.begin_measure()?;
    let mut out = RunResult::default();
    match cell.benchmark {
        Benchmark::Startup if cell.cpu.caches == Caches::Hot => {
            hot_starts(cell, waits, host, &mut out)?
        }
        Benchmark::Startup => cold_starts(cell, waits, host, &mut out)?,
        Benchmark::Throughput => throughput(cell, host, &mut out)?,
        Benchmark::Latency => out = host.latency(cell.cpu.loops)?,
        Benchmark::Profile => match cell.profile {
            Some(p) => out = host.profile(&p, cell.duration_s, cell.sample_s)?,
            None => return Err(host.unsupported("benchmark = \"profile\" without a profile")),
        },
        // Refused by `on_cpu_model` above.
        Benchmark::ReadersHashers => return Err(host.unsupported(cell.benchmark.as_str())),
    }
    host.finish(&mut out)?;
    Ok(out)
}

/// The benchmark of a cell that runs on the simulator's CPU model only, not through
/// the procedure (`readers-hashers`), named for an error message; `None` for the
/// procedure's (latency among them: [`Host::latency`]; hot start-up:
/// [`Host::start_cpu_loads`]).
pub fn on_cpu_model(cell: &Cell) -> Option<String> {
    (cell.benchmark == Benchmark::ReadersHashers)
        .then(|| "benchmark = \"readers-hashers\"".to_string())
}

/// `iterations` cold starts (S: `comm_startup_lat.sh`); the run stops at the first
/// start that times out, as the suite does.
fn cold_starts<H: Host>(
    cell: &Cell,
    waits: &Waits,
    host: &mut H,
    out: &mut RunResult,
) -> Result<(), H::Error> {
    for _ in 0..cell.iterations {
        host.pause(waits.pause_s())?;
        // The guests' caches first (their write-back reaches the host's), then the
        // host's.
        host.drop_caches(Scope::Guest)?;
        host.drop_caches(Scope::Host)?;
        match host.start_app(cell.timeout_s)? {
            Some(took) => {
                out.values.push(took);
                if took < suite::SHORT_START_S {
                    host.wait(suite::SHORT_START_S)?;
                }
            }
            None => {
                out.values.push(cell.timeout_s);
                out.timeouts += 1;
                break;
            }
        }
    }
    Ok(())
}

/// `iterations` starts with hot caches (the coordinated task scheduling study's
/// start-up test): one untimed warm-up start fills the page caches (the host's and,
/// in VM cells, the guest's), then the busy loops start and each start follows a
/// [`Waits::hot_pause_s`] pause, nothing dropped. A timeout, of the warm-up start
/// too, counts as the timeout and ends the run, as in [`cold_starts`].
fn hot_starts<H: Host>(
    cell: &Cell,
    waits: &Waits,
    host: &mut H,
    out: &mut RunResult,
) -> Result<(), H::Error> {
    if host.start_app(cell.timeout_s)?.is_none() {
        out.values.push(cell.timeout_s);
        out.timeouts += 1;
        return Ok(());
    }
    host.start_cpu_loads()?;
    for _ in 0..cell.iterations {
        host.pause(waits.hot_pause_s())?;
        match host.start_app(cell.timeout_s)? {
            Some(took) => out.values.push(took),
            None => {
                out.values.push(cell.timeout_s);
                out.timeouts += 1;
                break;
            }
        }
    }
    host.stop_cpu_loads(out)
}

/// The number of throughput samples of a cell: `duration_s / sample_s`, at least one.
pub fn samples(cell: &Cell) -> usize {
    (cell.duration_s / cell.sample_s).floor().max(1.0) as usize
}

/// Aggregate MB/s (10^6 bytes, reads plus writes completed by the benchmarked disk),
/// sampled every `sample_s` over `duration_s` (S: `throughput-sync.sh`).
fn throughput<H: Host>(cell: &Cell, host: &mut H, out: &mut RunResult) -> Result<(), H::Error> {
    let mut last = host.sectors()?;
    for _ in 0..samples(cell) {
        host.wait(cell.sample_s)?;
        let now = host.sectors()?;
        out.values
            .push(now.saturating_sub(last) as f64 * 512.0 / 1e6 / cell.sample_s);
        last = now;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that records the steps asked of it, with scripted start-up times.
    #[derive(Default)]
    struct Script {
        steps: Vec<String>,
        starts: Vec<Option<f64>>,
        sectors: u64,
        workload: Option<WorkloadSpec>,
    }

    impl Host for Script {
        type Error = String;
        fn drop_caches(&mut self, scope: Scope) -> Result<(), String> {
            self.steps.push(format!("drop {scope:?}"));
            Ok(())
        }
        fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>, String> {
            self.steps.push("workloads".into());
            Ok(vec![self.workload.unwrap_or(WorkloadSpec::NONE)])
        }
        fn wait(&mut self, secs: f64) -> Result<(), String> {
            self.steps.push(format!("wait {secs}"));
            self.sectors += (secs * 1000.0) as u64;
            Ok(())
        }
        fn settle(&mut self, secs: f64) -> Result<(), String> {
            self.steps.push(format!("settle {secs}"));
            Ok(())
        }
        fn pause(&mut self, secs: f64) -> Result<(), String> {
            self.steps.push(format!("pause {secs}"));
            Ok(())
        }
        fn start_app(&mut self, timeout_s: f64) -> Result<Option<f64>, String> {
            self.steps.push(format!("start {timeout_s}"));
            Ok(self.starts.remove(0))
        }
        fn latency(&mut self, loops: u64) -> Result<RunResult, String> {
            self.steps.push(format!("latency {loops}"));
            let mut r = RunResult {
                values: vec![42.0],
                ..RunResult::default()
            };
            r.counters
                .insert(crate::latency::LATENCY_MAX_US.into(), 900.0);
            Ok(r)
        }
        fn sectors(&mut self) -> Result<u64, String> {
            Ok(self.sectors)
        }
        fn finish(&mut self, _: &mut RunResult) -> Result<(), String> {
            self.steps.push("finish".into());
            Ok(())
        }
        fn unsupported(&self, what: &str) -> String {
            format!("no {what}")
        }
    }

    fn cell(benchmark: Benchmark) -> Cell {
        let mut c = crate::Scenario::from_toml_str(
            "name = \"t\"\nbenchmark = \"startup\"\napp = \"bash\"\n[matrix]\n\
             device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"1r-seq\"]\n",
            &crate::Accepted {
                devices: vec!["hdd-1.8in".parse().unwrap()],
                host_scheds: vec!["bfq".parse().unwrap()],
                guest_scheds: Vec::new(),
                coordination: vec!["off".parse().unwrap()],
                apps: vec!["bash".into()],
                allow_cmd_apps: false,
                allow_vm: false,
            },
        )
        .unwrap()
        .cells()
        .remove(0);
        c.benchmark = benchmark;
        c.iterations = 3;
        c.timeout_s = 9.0;
        c.duration_s = 3.0;
        c.sample_s = 1.0;
        c
    }

    #[test]
    fn a_start_up_drops_guest_then_host_caches_and_a_timeout_ends_the_run() {
        let mut h = Script {
            starts: vec![Some(1.5), None, Some(1.0)],
            workload: Some(WorkloadSpec::parse("1r-seq").unwrap()),
            ..Script::default()
        };
        let out = run_repetition(&cell(Benchmark::Startup), &Waits::default(), &mut h).unwrap();
        assert_eq!(out.values, vec![1.5, 9.0]);
        assert_eq!(out.timeouts, 1);
        assert_eq!(
            h.steps,
            [
                "drop Host",
                "workloads",
                "settle 13",
                "pause 4",
                "drop Guest",
                "drop Host",
                "start 9",
                "wait 2",
                "pause 4",
                "drop Guest",
                "drop Host",
                "start 9",
                "finish"
            ]
        );
    }

    #[test]
    fn an_idle_machine_does_not_settle_and_overrides_apply_only_when_busy() {
        let w = Waits {
            settle_s: Some(1.0),
            pause_s: Some(0.5),
        };
        assert_eq!(w.settle_s(&[WorkloadSpec::NONE]), 0.0);
        assert_eq!(w.settle_s(&[WorkloadSpec::parse("2r-rand").unwrap()]), 1.0);
        assert_eq!(w.pause_s(), 0.5);
        assert_eq!(Waits::default().pause_s(), suite::PAUSE_BEFORE_START_S);
    }

    #[test]
    fn throughput_samples_the_disk_every_sample_s() {
        let mut h = Script::default();
        let out = run_repetition(&cell(Benchmark::Throughput), &Waits::default(), &mut h).unwrap();
        // 1000 sectors a second of `wait`: 0.512 MB/s, three samples; no workload
        // started, no settling.
        assert_eq!(out.values, vec![0.512; 3]);
        assert_eq!(&h.steps[..3], ["drop Host", "workloads", "settle 0"]);
    }

    #[test]
    fn a_benchmark_of_the_cpu_model_only_is_the_hosts_error_before_any_step() {
        let mut h = Script::default();
        let rh = cell(Benchmark::ReadersHashers);
        let e = run_repetition(&rh, &Waits::default(), &mut h).unwrap_err();
        assert_eq!(e, "no benchmark = \"readers-hashers\"");
        assert!(h.steps.is_empty());
    }

    /// [`Host`]'s required steps for a fake host that wraps a [`Script`] (its
    /// `.0`), each taken as the script takes it, and the optional steps named
    /// (`settle`, `pause`) too; what the fake leaves out is [`Host`]'s default.
    /// Each fake host below states only what it adds.
    macro_rules! script_steps {
        (@also settle) => {
            fn settle(&mut self, secs: f64) -> Result<(), String> {
                self.0.settle(secs)
            }
        };
        (@also pause) => {
            fn pause(&mut self, secs: f64) -> Result<(), String> {
                self.0.pause(secs)
            }
        };
        ($($also:ident),*) => {
            type Error = String;
            fn drop_caches(&mut self, s: Scope) -> Result<(), String> {
                self.0.drop_caches(s)
            }
            fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>, String> {
                self.0.start_workloads()
            }
            fn wait(&mut self, secs: f64) -> Result<(), String> {
                self.0.wait(secs)
            }
            fn start_app(&mut self, t: f64) -> Result<Option<f64>, String> {
                self.0.start_app(t)
            }
            fn sectors(&mut self) -> Result<u64, String> {
                self.0.sectors()
            }
            fn finish(&mut self, out: &mut RunResult) -> Result<(), String> {
                self.0.finish(out)
            }
            fn unsupported(&self, what: &str) -> String {
                self.0.unsupported(what)
            }
            $(script_steps!(@also $also);)*
        };
    }

    /// A host that runs hot start-ups: [`Script`] with busy loops.
    struct Hot(Script);
    impl Host for Hot {
        script_steps!(settle, pause);
        fn start_cpu_loads(&mut self) -> Result<(), String> {
            self.0.steps.push("loops".into());
            Ok(())
        }
        fn stop_cpu_loads(&mut self, out: &mut RunResult) -> Result<(), String> {
            self.0.steps.push("loops stop".into());
            out.counters.insert("host_loops_iter_s".into(), 7.0);
            Ok(())
        }
    }

    fn hot_cell() -> Cell {
        let mut c = cell(Benchmark::Startup);
        c.cpu.caches = crate::Caches::Hot;
        c.host_workload = WorkloadSpec::NONE;
        c
    }

    #[test]
    fn hot_start_ups_warm_up_once_then_start_under_the_loops_with_no_cache_dropped() {
        let mut h = Hot(Script {
            starts: vec![Some(0.9), Some(0.1), Some(0.2), Some(0.3)],
            ..Script::default()
        });
        let out = run_repetition(&hot_cell(), &Waits::default(), &mut h).unwrap();
        // The warm-up start is not a value; no rest after these short starts.
        assert_eq!(out.values, vec![0.1, 0.2, 0.3]);
        assert_eq!(out.counters["host_loops_iter_s"], 7.0);
        assert_eq!(
            h.0.steps,
            [
                "drop Host",
                "workloads",
                "settle 0",
                "start 9",
                "loops",
                "pause 0.5",
                "start 9",
                "pause 0.5",
                "start 9",
                "pause 0.5",
                "start 9",
                "loops stop",
                "finish"
            ]
        );
        // `--pause-s` overrides the hot pause as the cold one.
        let w = Waits {
            settle_s: None,
            pause_s: Some(0.25),
        };
        assert_eq!(w.hot_pause_s(), 0.25);
    }

    #[test]
    fn a_hot_start_that_times_out_ends_the_run_and_so_does_the_warm_up() {
        let mut h = Hot(Script {
            starts: vec![Some(0.9), Some(0.1), None],
            ..Script::default()
        });
        let out = run_repetition(&hot_cell(), &Waits::default(), &mut h).unwrap();
        assert_eq!((out.values, out.timeouts), (vec![0.1, 9.0], 1));
        assert_eq!(h.0.steps.iter().filter(|s| *s == "loops stop").count(), 1);
        let mut h = Hot(Script {
            starts: vec![None],
            ..Script::default()
        });
        let out = run_repetition(&hot_cell(), &Waits::default(), &mut h).unwrap();
        assert_eq!((out.values, out.timeouts), (vec![9.0], 1));
        assert!(!h.0.steps.contains(&"loops".to_string()), "{:?}", h.0.steps);
    }

    #[test]
    fn a_host_without_busy_loops_refuses_a_hot_start_up() {
        let mut h = Script {
            starts: vec![Some(0.9)],
            ..Script::default()
        };
        let e = run_repetition(&hot_cell(), &Waits::default(), &mut h).unwrap_err();
        assert_eq!(e, "no benchmark = \"startup\" with caches = \"hot\"");
        assert!(!h.steps.contains(&"finish".to_string()));
    }

    #[test]
    fn a_latency_cell_runs_cyclictest_once_between_the_workloads_and_finish() {
        let mut h = Script {
            workload: Some(WorkloadSpec::parse("1r-seq").unwrap()),
            ..Script::default()
        };
        let mut c = cell(Benchmark::Latency);
        c.cpu.loops = 1234;
        let out = run_repetition(&c, &Waits::default(), &mut h).unwrap();
        assert_eq!(out.values, vec![42.0]);
        assert_eq!(out.counters[crate::latency::LATENCY_MAX_US], 900.0);
        assert_eq!(
            h.steps,
            [
                "drop Host",
                "workloads",
                "settle 13",
                "latency 1234",
                "finish"
            ]
        );
        let rows = crate::latency::cell_results(&c, "real", vec![out]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].metric, crate::Metric::LatencyMaxUs);
        assert_eq!(rows[1].runs[0].values, vec![900.0]);
    }

    #[test]
    fn a_profile_cell_runs_the_profile_once_between_the_workloads_and_finish() {
        /// A host that runs profiles: one sample per second of `duration_s`.
        struct Ffsb(Script);
        impl Host for Ffsb {
            script_steps!();
            fn profile(&mut self, p: &ProfileCell, d: f64, s: f64) -> Result<RunResult, String> {
                self.0
                    .steps
                    .push(format!("{} {}t {d} {s}", p.profile, p.threads));
                Ok(RunResult {
                    values: vec![100.0; (d / s) as usize],
                    ..RunResult::default()
                })
            }
        }
        let mut c = cell(Benchmark::Profile);
        c.profile = Some(ProfileCell::new(crate::Profile::Mixed, 8));
        let mut h = Ffsb(Script::default());
        let out = run_repetition(&c, &Waits::default(), &mut h).unwrap();
        assert_eq!(out.values, vec![100.0; 3]);
        assert_eq!(
            h.0.steps,
            [
                "drop Host",
                "workloads",
                "wait 0",
                "ffsb-mixed 8t 3 1",
                "finish"
            ]
        );
        // The default host does not run profiles, and says so before finishing.
        let mut plain = Script::default();
        let e = run_repetition(&c, &Waits::default(), &mut plain).unwrap_err();
        assert_eq!(e, "no benchmark = \"profile\"");
    }

    /// A host that does not run cyclictest (the default [`Host::latency`]) says so.
    #[test]
    fn a_host_without_latency_refuses_a_latency_cell() {
        struct NoLatency(Script);
        impl Host for NoLatency {
            script_steps!();
        }
        let mut h = NoLatency(Script::default());
        let e = run_repetition(&cell(Benchmark::Latency), &Waits::default(), &mut h).unwrap_err();
        assert_eq!(e, "no benchmark = \"latency\"");
        assert!(!h.0.steps.contains(&"finish".to_string()));
    }
}
