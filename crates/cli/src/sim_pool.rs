//! The simulator's worker pool for `tandem sim run`: runs the repetitions of a
//! set of cells on N threads, calibrates first (one repetition each of a few cells
//! drawn from the matrix, timed, kept as results), waits at a gate for the go
//! once the estimate is made, hands each cell to the output as soon as its last
//! repetition is done, and stops taking work on SIGINT or SIGTERM.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cpusched::cyclictest::Histogram;
use experiment::estimate::{process_memory, Calibration};
use experiment::{Cell, CellResult, IncrementalWriter, RunResult};
use indicatif::ProgressBar;

/// The signals that stop a run, keeping what it measured.
pub struct Signals {
    /// Set by the first SIGINT or SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// Which of them came (its number), 0 if none.
    which: Arc<AtomicUsize>,
}

impl Signals {
    /// Installs the handlers: the first signal asks the run to stop after the
    /// repetitions under way; a second one ends the process at once (exit 130).
    pub fn install() -> std::io::Result<Signals> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let stop = Arc::new(AtomicBool::new(false));
        let which = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM] {
            // Registered before the flag, so it sees the flag of an earlier signal.
            signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))?;
            signal_hook::flag::register_usize(sig, Arc::clone(&which), sig as usize)?;
            signal_hook::flag::register(sig, Arc::clone(&stop))?;
        }
        Ok(Signals { stop, which })
    }

    /// The signal that stopped the run, by name, and the shell's exit code for it
    /// (128 + its number).
    pub fn received(&self) -> Option<(&'static str, u8)> {
        match self.which.load(Ordering::SeqCst) as i32 {
            signal_hook::consts::SIGINT => Some(("SIGINT", 130)),
            signal_hook::consts::SIGTERM => Some(("SIGTERM", 143)),
            _ => None,
        }
    }
}

/// Whether the runs after the calibration may start.
#[derive(Clone, Copy, PartialEq)]
enum GateState {
    Closed,
    Go,
    Stop,
}

/// Where finished cells go: held until the go (a dry run or a refused run writes
/// nothing), then to the writer.
struct Output {
    writer: Option<IncrementalWriter>,
    held: Vec<(usize, CellResult)>,
}

/// What the calibration runs measured so far.
#[derive(Default)]
struct CalState {
    finished: Vec<Duration>,
    running: Vec<(usize, Instant)>,
    kept_bytes: Vec<u64>,
}

struct Shared {
    cells: Vec<Cell>,
    /// The writer's slot of each cell's first result (latency cells have two:
    /// [`experiment::planned`]).
    first_slot: Vec<usize>,
    /// cyclictest's histogram of each latency cell, its runs summed.
    hists: Mutex<Vec<Option<Histogram>>>,
    opts: sim::bench::SimOptions,
    /// (cell, repetition), the calibration runs first.
    work: Vec<(usize, u32)>,
    calibration_len: usize,
    next: AtomicUsize,
    gate: (Mutex<GateState>, Condvar),
    stop: Arc<AtomicBool>,
    slots: Mutex<Vec<Vec<Option<RunResult>>>>,
    remaining: Vec<AtomicU32>,
    out: Mutex<Output>,
    cal: (Mutex<CalState>, Condvar),
    errors: Mutex<Vec<String>>,
    pb: ProgressBar,
}

/// The running pool.
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    resident_before: u64,
    jobs: usize,
    cells_sampled: usize,
}

/// The cells the calibration runs: `k` of them drawn at random (a fixed seed, so
/// the same matrix gives the same sample), in matrix order. Not evenly spaced: the
/// matrix's inner keys repeat with a period, and evenly spaced cells can all be
/// its idle ones.
fn calibration_cells(n: usize, k: usize) -> Vec<usize> {
    let k = k.min(n);
    let mut all: Vec<usize> = (0..n).collect();
    let mut x = CALIBRATION_SEED;
    for i in 0..k {
        x = experiment::splitmix64(x);
        let j = i + (x % (n - i) as u64) as usize;
        all.swap(i, j);
    }
    let mut sample = all[..k].to_vec();
    sample.sort_unstable();
    sample
}

/// Any fixed value: the seed of the calibration sample.
const CALIBRATION_SEED: u64 = 0x7461_6e64_656d;

/// How many cells the calibration samples: a fifth of them, at least one per job
/// and [`MIN_CALIBRATION_RUNS`], at most [`MAX_CALIBRATION_RUNS`]. Run times differ
/// by 100x between an idle cell and a loaded one (vbfq: 0.001 to 0.14 s), so the
/// mean needs many of them; a dry run waits for them at most the calibration wait.
fn calibration_size(cells: usize, jobs: usize) -> usize {
    (cells / 5)
        .clamp(
            jobs.max(MIN_CALIBRATION_RUNS),
            MAX_CALIBRATION_RUNS.max(jobs),
        )
        .min(cells)
}

/// The work, calibration runs (repetition 0 of `sample`) first, then the rest in
/// matrix order.
fn plan(cells: &[Cell], sample: &[usize]) -> Vec<(usize, u32)> {
    let mut work: Vec<(usize, u32)> = sample.iter().map(|&i| (i, 0)).collect();
    for (i, c) in cells.iter().enumerate() {
        for rep in 0..c.repetitions {
            if !(rep == 0 && sample.contains(&i)) {
                work.push((i, rep));
            }
        }
    }
    work
}

/// Fewest calibration runs (fewer cells: all of them).
const MIN_CALIBRATION_RUNS: usize = 3;

/// Most calibration runs, unless there are more jobs.
const MAX_CALIBRATION_RUNS: usize = 256;

impl Pool {
    /// Starts `jobs` threads on the cells; they run the calibration and wait at
    /// the gate.
    pub fn start(
        cells: Vec<Cell>,
        opts: sim::bench::SimOptions,
        jobs: usize,
        stop: Arc<AtomicBool>,
        pb: ProgressBar,
    ) -> Pool {
        let sample = calibration_cells(cells.len(), calibration_size(cells.len(), jobs));
        let work = plan(&cells, &sample);
        let first_slot = experiment::first_slots(&cells);
        let shared = Arc::new(Shared {
            first_slot,
            hists: Mutex::new(vec![None; cells.len()]),
            slots: Mutex::new(
                cells
                    .iter()
                    .map(|c| vec![None; c.repetitions as usize])
                    .collect(),
            ),
            remaining: cells
                .iter()
                .map(|c| AtomicU32::new(c.repetitions))
                .collect(),
            cells,
            opts,
            calibration_len: sample.len(),
            work,
            next: AtomicUsize::new(0),
            gate: (Mutex::new(GateState::Closed), Condvar::new()),
            stop,
            out: Mutex::new(Output {
                writer: None,
                held: Vec::new(),
            }),
            cal: (Mutex::new(CalState::default()), Condvar::new()),
            errors: Mutex::new(Vec::new()),
            pb,
        });
        let resident_before = process_memory().map_or(0, |(rss, _)| rss);
        let threads = (0..jobs)
            .map(|_| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || worker(&s))
            })
            .collect();
        Pool {
            shared,
            threads,
            resident_before,
            jobs,
            cells_sampled: sample.len(),
        }
    }

    /// Waits until the calibration runs are done, `wait` has passed, or a signal
    /// came, and says what they measured.
    pub fn calibrate(&self, wait: Duration) -> Calibration {
        let s = &self.shared;
        let deadline = Instant::now() + wait;
        let (lock, cv) = &s.cal;
        let mut st = lock.lock().expect("no poisoned lock");
        while st.finished.len() < s.calibration_len
            && Instant::now() < deadline
            && !s.stop.load(Ordering::SeqCst)
            && s.errors.lock().expect("no poisoned lock").is_empty()
        {
            st = cv
                .wait_timeout(st, Duration::from_millis(100))
                .expect("no poisoned lock")
                .0;
        }
        let kept = &st.kept_bytes;
        Calibration {
            finished: st.finished.clone(),
            unfinished: st.running.iter().map(|(_, t)| t.elapsed()).collect(),
            cells_sampled: self.cells_sampled,
            resident_before: self.resident_before,
            peak_during: process_memory().map_or(0, |(_, hwm)| hwm),
            concurrent: self.jobs.min(s.calibration_len),
            kept_per_run: kept.iter().sum::<u64>() / kept.len().max(1) as u64,
        }
    }

    /// Opens the gate: finished cells go to `writer` from now on (those held so
    /// far first), and the other runs start.
    pub fn go(&self, writer: IncrementalWriter) -> Result<(), String> {
        {
            let mut out = self.shared.out.lock().expect("no poisoned lock");
            let mut writer = writer;
            for (i, r) in std::mem::take(&mut out.held) {
                writer.push(i, r).map_err(|e| e.to_string())?;
            }
            out.writer = Some(writer);
        }
        self.open(GateState::Go);
        Ok(())
    }

    fn open(&self, state: GateState) {
        let (lock, cv) = &self.shared.gate;
        *lock.lock().expect("no poisoned lock") = state;
        cv.notify_all();
    }

    /// Waits for every thread (they stop early after a signal or an error) and
    /// returns the writer and the first error.
    /// Also returns the latency cells' histograms, by cell index.
    pub fn join(
        self,
    ) -> (
        Option<IncrementalWriter>,
        Option<String>,
        Vec<(usize, Histogram)>,
    ) {
        for t in self.threads {
            let _ = t.join();
        }
        let writer = self
            .shared
            .out
            .lock()
            .expect("no poisoned lock")
            .writer
            .take();
        let error = self
            .shared
            .errors
            .lock()
            .expect("no poisoned lock")
            .first()
            .cloned();
        let hists = std::mem::take(&mut *self.shared.hists.lock().expect("no poisoned lock"))
            .into_iter()
            .enumerate()
            .filter_map(|(i, h)| Some((i, h?)))
            .collect();
        (writer, error, hists)
    }

    /// Stops the threads after the runs under way; none of their results is written.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.open(GateState::Stop);
    }

    /// The first error of a run, if any (a run that failed stops the pool).
    pub fn error(&self) -> Option<String> {
        self.shared
            .errors
            .lock()
            .expect("no poisoned lock")
            .first()
            .cloned()
    }
}

/// Bytes a run's result takes until the end: its values and counters in memory (a
/// B-tree entry: the key, the value and about 48 bytes of node), and its text in
/// results.json, which the end of the run builds whole (measured by writing it).
fn kept_bytes(r: &RunResult) -> u64 {
    let counters: usize = r.counters.keys().map(|k| k.len() + 8 + 48).sum();
    let memory = std::mem::size_of::<RunResult>() + r.values.len() * 8 + counters;
    let json = serde_json::to_string_pretty(r).map_or(0, |t| t.len());
    (memory + json) as u64
}

fn worker(s: &Shared) {
    loop {
        if s.stop.load(Ordering::SeqCst) {
            break;
        }
        let w = s.next.fetch_add(1, Ordering::Relaxed);
        let Some(&(cell, rep)) = s.work.get(w) else {
            break;
        };
        let calibrating = w < s.calibration_len;
        if !calibrating && (!wait_for_go(s) || s.stop.load(Ordering::SeqCst)) {
            break;
        }
        let started = Instant::now();
        if calibrating {
            s.cal
                .0
                .lock()
                .expect("no poisoned lock")
                .running
                .push((w, started));
        }
        let r = run_one(s, cell, rep);
        if calibrating {
            let mut st = s.cal.0.lock().expect("no poisoned lock");
            st.running.retain(|(i, _)| *i != w);
            st.finished.push(started.elapsed());
            if let Ok(run) = &r {
                st.kept_bytes.push(kept_bytes(run));
            }
            s.cal.1.notify_all();
        }
        s.pb.inc(1);
        match r {
            Ok(run) => record(s, cell, rep, run),
            Err(e) => fail(s, format!("{}: {e}", s.cells[cell].key())),
        }
    }
}

/// One repetition; a latency run's histogram joins its cell's.
fn run_one(s: &Shared, cell: usize, rep: u32) -> Result<RunResult, String> {
    let c = &s.cells[cell];
    if c.benchmark != experiment::Benchmark::Latency {
        return sim::bench::run_repetition(c, &s.opts, rep);
    }
    let (run, h) = sim::cpu_bench::run_latency_rep(c, rep)?;
    s.hists.lock().expect("no poisoned lock")[cell]
        .get_or_insert_with(Histogram::default)
        .merge(&h);
    Ok(run)
}

fn wait_for_go(s: &Shared) -> bool {
    let (lock, cv) = &s.gate;
    let mut g = lock.lock().expect("no poisoned lock");
    while *g == GateState::Closed {
        g = cv.wait(g).expect("no poisoned lock");
    }
    *g == GateState::Go
}

fn fail(s: &Shared, e: String) {
    s.errors.lock().expect("no poisoned lock").push(e);
    s.stop.store(true, Ordering::SeqCst);
    s.cal.1.notify_all();
}

/// Stores a repetition; the cell's last one sends the cell to the output.
fn record(s: &Shared, cell: usize, rep: u32, run: RunResult) {
    let runs = {
        let mut slots = s.slots.lock().expect("no poisoned lock");
        slots[cell][rep as usize] = Some(run);
        if s.remaining[cell].fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        std::mem::take(&mut slots[cell])
    };
    let runs: Vec<RunResult> = runs.into_iter().flatten().collect();
    let results = sim::cpu_bench::cell_results(&s.cells[cell], runs);
    let mut out = s.out.lock().expect("no poisoned lock");
    for (k, result) in results.into_iter().enumerate() {
        let slot = s.first_slot[cell] + k;
        match out.writer.as_mut() {
            Some(w) => {
                if let Err(e) = w.push(slot, result) {
                    drop(out);
                    fail(s, format!("writing results: {e}"));
                    return;
                }
            }
            None => out.held.push((slot, result)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_samples_distinct_cells() {
        let s = calibration_cells(90, 9);
        assert_eq!(s.len(), 9);
        assert!(s.windows(2).all(|w| w[0] < w[1] && w[1] < 90), "{s:?}");
        // not the evenly spaced 0, 10, 20, ...
        assert_ne!(s, (0..9).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(calibration_cells(90, 9), s, "the same sample each time");
        assert_eq!(calibration_cells(2, 3), vec![0, 1]);
        assert_eq!(calibration_cells(5, 5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn calibration_size_grows_with_the_matrix() {
        assert_eq!(calibration_size(4, 1), 3);
        assert_eq!(calibration_size(2, 2), 2);
        assert_eq!(calibration_size(90, 2), 18);
        assert_eq!(calibration_size(10_000, 2), 256);
        assert_eq!(calibration_size(10_000, 300), 300);
    }
}
