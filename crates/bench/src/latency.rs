//! `benchmark = "latency"` on real machines: Debian's `cyclictest`
//! (`rt-tests`), run as the coordinated scheduling study ran it, with the
//! cell's busy loops ([`crate::cpuload`]) around it, read into the
//! simulator's histogram ([`cpusched::cyclictest_output`]) and results
//! (`latency_avg_us` in `values`, `latency_max_us` and the loops'
//! throughput in `counters`), so that real and simulated cells compare
//! line for line and write the same histogram file
//! ([`Histogram::to_cyclictest_text`]).
//!
//! The study's command was `cyclictest -q -n -l LOOPS -h 5000`. rt-tests
//! 2.0 dropped `-n` (it always sleeps with `clock_nanosleep`, which is what
//! `-n` chose) and refuses it, so the command here is
//! `cyclictest -q -l LOOPS -h 5000`: the same measurement. Without `-p` or
//! `--policy` the thread is `SCHED_OTHER`, as in the study. The same
//! arguments serve the guest's cyclictest ([`cyclictest_args`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cpusched::cyclictest::{Histogram, HIST_BUCKETS};
use experiment::RunResult;

use crate::cpuload::{CpuLoad, WarmLoads};
use crate::{run_err, workers, Result};

/// The native cyclictest, found on `PATH` (Debian: `/usr/bin/cyclictest`,
/// package `rt-tests`; the guest image carries it at the same path).
pub const CYCLICTEST: &str = "cyclictest";

/// Counter of a latency run: its maximum latency (us), as the simulator's.
pub use experiment::latency::LATENCY_MAX_US;
/// Counter of a latency run: the host's busy loops' iterations per second
/// while cyclictest ran (absent without host loops).
pub const HOST_LOOPS_ITER_S: &str = "host_loops_iter_s";
/// Counter of a latency run: the guest's busy loops' iterations per
/// second while cyclictest ran (absent without guest loops).
pub const GUEST_LOOPS_ITER_S: &str = "guest_loops_iter_s";

/// The loops run this long before cyclictest starts, as in the simulator
/// ([`cpusched::cyclictest::WARMUP`]): the kernel's balancer has spread them.
pub const WARMUP: Duration = Duration::from_nanos(cpusched::cyclictest::WARMUP);

/// cyclictest's arguments for `loops` samples (one thread, 1000 us
/// interval, quiet, a `-h 5000` histogram on stdout).
pub fn cyclictest_args(loops: u64) -> Vec<String> {
    vec![
        "-q".into(),
        "-l".into(),
        loops.to_string(),
        "-h".into(),
        HIST_BUCKETS.to_string(),
    ]
}

/// How long a run of `loops` samples may take before it is given up:
/// each sample is a 1 ms interval plus its latency; twenty times the
/// intervals, plus a minute, is far beyond any latency the study saw
/// (under 100 ms) and still ends a hung run.
pub fn run_timeout(loops: u64) -> Duration {
    Duration::from_millis(loops.saturating_mul(20)) + Duration::from_secs(60)
}

/// One run of cyclictest and what the loops got meanwhile.
#[derive(Clone, Debug)]
pub struct LatencyRun {
    pub hist: Histogram,
    /// The host's loops' iterations per second during the run (`None`
    /// without host loops).
    pub host_loops_iter_s: Option<f64>,
    /// The guest's loops' iterations per second of guest time, for a VM
    /// cell ([`guest_loops_rate`]; `None` natively or without guest loops).
    pub guest_loops_iter_s: Option<f64>,
    /// For a VM cell, its QEMU threads' scheduling over the run, by role
    /// ([`crate::cputime::counters`] of [`crate::cputime::Role::QEMU`]); empty natively.
    pub qemu_threads: BTreeMap<String, f64>,
}

impl LatencyRun {
    /// The run as the simulator reports one: the average latency (us) in
    /// `values`, the maximum and the loops' throughput in `counters`.
    pub fn run_result(&self) -> RunResult {
        let mut r = RunResult {
            values: vec![self.hist.avg_us()],
            ..RunResult::default()
        };
        r.counters.insert(LATENCY_MAX_US.into(), self.hist.max_us());
        if let Some(rate) = self.host_loops_iter_s {
            r.counters.insert(HOST_LOOPS_ITER_S.into(), rate);
        }
        if let Some(rate) = self.guest_loops_iter_s {
            r.counters.insert(GUEST_LOOPS_ITER_S.into(), rate);
        }
        r.counters.extend(self.qemu_threads.clone());
        r
    }
}

/// Runs `program` (cyclictest, or a wrapper that runs it elsewhere) with
/// [`cyclictest_args`] and parses its histogram ([`run_cyclictest_output`]).
pub fn run_cyclictest(
    program: &Path,
    loops: u64,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<Histogram> {
    parse(&run_cyclictest_output(program, loops, check)?)
}

/// cyclictest's output read into the simulator's histogram.
pub fn parse(output: &str) -> Result<Histogram> {
    cpusched::cyclictest_output::parse_histogram(output)
        .map_err(|e| run_err(format!("cyclictest's output: {e}")))
}

/// Runs `program` with [`cyclictest_args`] and returns its standard
/// output (the guest agent sends it to the host as it is, and the host
/// parses it as the native runner does). `check` is asked about
/// every 50 ms whether to go on (the runner's Ctrl-C); an error from it, a
/// run longer than [`run_timeout`], a failed exit or an output that is not
/// cyclictest's kills cyclictest (it runs in a process group of its own
/// and dies with the run) and is returned.
pub fn run_cyclictest_output(
    program: &Path,
    loops: u64,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<String> {
    if loops == 0 {
        return Err(crate::Error::Usage("cyclictest: 0 loops".into()));
    }
    let mut cmd = Command::new(program);
    cmd.args(cyclictest_args(loops))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGKILL);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| {
        run_err(format!(
            "starting {}: {e} (Debian: apt-get install rt-tests)",
            program.display()
        ))
    })?;
    // Read both pipes while cyclictest runs (its histogram is larger than
    // a pipe's buffer).
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let deadline = Instant::now() + run_timeout(loops);
    let status = loop {
        if let Some(st) = child
            .try_wait()
            .map_err(|e| run_err(format!("cyclictest: {e}")))?
        {
            break st;
        }
        let stop = check().err().or_else(|| {
            (Instant::now() > deadline).then(|| {
                run_err(format!(
                    "cyclictest -l {loops}: no end after {:?}",
                    run_timeout(loops)
                ))
            })
        });
        if let Some(e) = stop {
            workers::kill(&mut child);
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if !status.success() {
        return Err(run_err(format!(
            "{} {}: {status}: {}",
            program.display(),
            cyclictest_args(loops).join(" "),
            stderr.trim()
        )));
    }
    Ok(stdout)
}

/// One repetition of a native latency cell: `host_loops` busy loops
/// started, [`WARMUP`], cyclictest for `loops` samples on the host, the
/// loops stopped. An error if a loop died during the run (the load would
/// be missing from the measurement).
pub fn run_native(
    loops: u64,
    host_loops: usize,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<LatencyRun> {
    let load = WarmLoads::start(host_loops, check)?;
    let hist = run_cyclictest(Path::new(CYCLICTEST), loops, check)?;
    Ok(LatencyRun {
        hist,
        host_loops_iter_s: load.finish()?,
        guest_loops_iter_s: None,
        qemu_threads: BTreeMap::new(),
    })
}

/// The guest agent's part of the latency benchmark: the guest's busy
/// loops (`guest_cpu_load`) and its cyclictest, with the same code as on
/// the host. The agent (`tandem vm agent`, [`crate::guest`]) hands it the
/// requests named in [`GuestLatency::OPS`]:
/// - `cpu_load {n}`: stops the guest's loops and starts `n` (0 stops
///   them): `{pids}`;
/// - `cpu_load_sample`: the loops' counts and the guest's monotonic clock,
///   `{iterations: [..], at_s}` (two samples give the loops' rate in guest
///   time, [`guest_loops_rate`]); an error if a loop died;
/// - `cyclictest {loops}`: runs the image's cyclictest
///   (`vmimage::tools::CYCLICTEST`) and answers `{output}`, its standard
///   output, which the host reads with [`parse`].
#[derive(Default)]
pub struct GuestLatency {
    load: Option<CpuLoad>,
    started: Option<Instant>,
}

/// Where the guest image puts cyclictest (`vmimage::tools::CYCLICTEST`).
pub const GUEST_CYCLICTEST: &str = "/usr/bin/cyclictest";

impl GuestLatency {
    /// The requests [`GuestLatency::handle`] answers.
    pub const OPS: [&'static str; 3] = ["cpu_load", "cpu_load_sample", "cyclictest"];

    /// Answers one request of [`GuestLatency::OPS`] (`None` for another op).
    pub fn handle(
        &mut self,
        op: &str,
        req: &serde_json::Value,
    ) -> Option<Result<serde_json::Value>> {
        use serde_json::json;
        let num = |k: &str| {
            req.get(k)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| crate::Error::Usage(format!("{op}: no {k}")))
        };
        Some(match op {
            "cpu_load" => num("n").and_then(|n| {
                // The old loops go before the new ones start.
                self.load = None;
                let load = CpuLoad::start(n as usize)?;
                let pids = load.pids();
                self.load = Some(load);
                Ok(json!({"ok": true, "pids": pids}))
            }),
            "cpu_load_sample" => self.sample(),
            "cyclictest" => num("loops").and_then(|loops| {
                let output =
                    run_cyclictest_output(Path::new(GUEST_CYCLICTEST), loops, &mut || Ok(()))?;
                Ok(json!({"ok": true, "output": output}))
            }),
            _ => return None,
        })
    }

    fn sample(&mut self) -> Result<serde_json::Value> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let (iterations, at) = match &mut self.load {
            Some(load) => {
                load.check_running()?;
                let s = load.sample();
                (s.iterations, s.at)
            }
            None => (Vec::new(), Instant::now()),
        };
        let at_s = at.saturating_duration_since(started).as_secs_f64();
        Ok(serde_json::json!({"ok": true, "iterations": iterations, "at_s": at_s}))
    }

    /// Stops the guest's loops (the agent's `stop` and `quit`).
    pub fn stop(&mut self) {
        self.load = None;
    }
}

/// The guest's loops' iterations per second (guest time) between two
/// `cpu_load_sample` answers.
pub fn guest_loops_rate(earlier: &serde_json::Value, later: &serde_json::Value) -> Result<f64> {
    let read = |v: &serde_json::Value| -> Result<(u64, f64)> {
        let its = v
            .get("iterations")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| run_err(format!("cpu_load_sample: no iterations in {v}")))?;
        let sum = its.iter().filter_map(serde_json::Value::as_u64).sum();
        let at = v
            .get("at_s")
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| run_err(format!("cpu_load_sample: no at_s in {v}")))?;
        Ok((sum, at))
    };
    let ((a, ta), (b, tb)) = (read(earlier)?, read(later)?);
    if tb <= ta {
        return Ok(0.0);
    }
    Ok(b.saturating_sub(a) as f64 / (tb - ta))
}
