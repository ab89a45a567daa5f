//! CPU workloads for the real runners: N busy loops ("infinite loops" in
//! the coordinated scheduling study), each a process of its own, pinned
//! nowhere, at the default policy and nice, for the scenario keys
//! `host_cpu_load` (on the host) and `guest_cpu_load` (in a guest, started
//! by the guest agent the same way).
//!
//! Each loop counts the blocks of work it has done in a shared page, so a
//! run reports what the loops got ([`CpuLoad::sample`], [`Sample::rate_since`]:
//! iterations per second): the loops' throughput cost of a coordination
//! mode (boosting a vCPU takes CPU time from them).
//!
//! The loops are forked children of the run, not re-executed binaries:
//! they need no command line, and a test process starts them as the runner
//! does. They never outlive the run: [`CpuLoad`]'s drop (success, error,
//! Ctrl-C, which the runner turns into an error) kills and reaps them, and a
//! run killed without a chance to clean up (SIGKILL, a crash) takes them
//! along through `PR_SET_PDEATHSIG`, as every process a run starts
//! ([`devemu::die_with_parent`]); so, as for the workers, there is nothing
//! to write in the run's journal ([`crate::cleanup`]). The parent-death
//! signal fires when the *thread* that forked ends: start the loops from
//! the thread that outlives them (the runner's).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use crate::{run_err, Result};

/// The most loops a run may start: the scenario keys go to 8, and a
/// hundred keeps a typo from forking thousands of spinning processes.
pub const MAX_LOOPS: usize = 100;

/// One iteration: this many dependent multiply-adds, then the loop's counter
/// is stored. A block of a few microseconds keeps the store (and its cache
/// line's traffic to the reader) a negligible part of the loop, so the
/// count measures the CPU time the loop got.
const BLOCK: u32 = 4096;

/// Each counter on a cache line of its own: loops on different cores do
/// not slow each other down through false sharing.
const SLOT_BYTES: usize = 64;

/// The process name of a loop (`ps`, `/proc/PID/comm`).
const LOOP_NAME: &std::ffi::CStr = c"tandem-cpuload";

/// A page shared with the loops: one counter per loop.
struct Counters {
    ptr: *mut u8,
    len: usize,
    n: usize,
}

// The mapping is only accessed through atomics.
unsafe impl Send for Counters {}
unsafe impl Sync for Counters {}

impl Counters {
    fn new(n: usize) -> Result<Counters> {
        let len = (n.max(1) * SLOT_BYTES).next_multiple_of(4096);
        // SAFETY: a fresh anonymous mapping, no address asked for.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(run_err(format!(
                "busy loops: mapping their counters: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Counters {
            ptr: ptr.cast(),
            len,
            n,
        })
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.n);
        // SAFETY: in the mapping (len >= n * SLOT_BYTES), 64-byte aligned
        // (the mapping is page aligned), zero-initialised, and only ever
        // accessed as an AtomicU64.
        unsafe { &*self.ptr.add(i * SLOT_BYTES).cast::<AtomicU64>() }
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once; the loops are gone (CpuLoad
        // drops them first) or have their own copy of the mapping.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// N running busy loops. Dropping it stops them.
pub struct CpuLoad {
    pids: Vec<Pid>,
    /// Per loop, whether it was reaped already ([`CpuLoad::check_running`]):
    /// its pid may belong to another process by now, never to be killed.
    reaped: Vec<bool>,
    counters: Counters,
}

/// The loops' counts at one moment.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Instant,
    /// Per loop, the iterations done since it started.
    pub iterations: Vec<u64>,
}

impl Sample {
    /// All the loops' iterations per second between `earlier` and this
    /// sample (0 without loops or time between them).
    pub fn rate_since(&self, earlier: &Sample) -> f64 {
        let secs = self.at.saturating_duration_since(earlier.at).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        let done: u64 = self
            .iterations
            .iter()
            .zip(&earlier.iterations)
            .map(|(b, a)| b.saturating_sub(*a))
            .sum();
        done as f64 / secs
    }
}

impl CpuLoad {
    /// Starts `n` busy loops (none for 0).
    pub fn start(n: usize) -> Result<CpuLoad> {
        if n > MAX_LOOPS {
            return Err(crate::Error::Usage(format!(
                "{n} busy loops: at most {MAX_LOOPS}"
            )));
        }
        let mut load = CpuLoad {
            pids: Vec::with_capacity(n),
            reaped: vec![false; n],
            counters: Counters::new(n)?,
        };
        let parent = nix::unistd::getpid();
        for i in 0..n {
            // SAFETY: the child runs only `busy_loop`, which makes
            // async-signal-safe system calls and touches no lock and no
            // allocator (the rule for a child of a threaded process).
            match unsafe { fork() } {
                Ok(ForkResult::Child) => busy_loop(load.counters.slot(i), parent),
                Ok(ForkResult::Parent { child }) => load.pids.push(child),
                // Dropping `load` stops the loops started so far.
                Err(e) => return Err(run_err(format!("busy loops: fork: {e}"))),
            }
        }
        Ok(load)
    }

    /// How many loops run.
    pub fn len(&self) -> usize {
        self.pids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
    }

    /// The loops' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.pids.iter().map(|p| p.as_raw() as u32).collect()
    }

    /// The loops' counts now.
    pub fn sample(&self) -> Sample {
        Sample {
            at: Instant::now(),
            iterations: (0..self.pids.len())
                .map(|i| self.counters.slot(i).load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// An error if a loop has died (killed by someone else): its CPU load
    /// would silently be missing from the measurement.
    pub fn check_running(&mut self) -> Result<()> {
        for (i, &pid) in self.pids.iter().enumerate() {
            if self.reaped[i] {
                return Err(run_err(format!("busy loop {pid} ended")));
            }
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(st) => {
                    self.reaped[i] = true;
                    return Err(run_err(format!("busy loop {pid} ended: {st:?}")));
                }
                Err(e) => {
                    self.reaped[i] = true;
                    return Err(run_err(format!("busy loop {pid}: {e}")));
                }
            }
        }
        Ok(())
    }

    /// Stops the loops and reaps them (what drop does).
    pub fn stop(mut self) {
        self.kill_all();
    }

    fn kill_all(&mut self) {
        let live = || self.pids.iter().zip(&self.reaped).filter(|(_, r)| !**r);
        for (&pid, _) in live() {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
        for (&pid, _) in live() {
            // Reaped whether it died now or earlier; ECHILD if someone else
            // reaped it (a `waitpid(-1)` elsewhere) is nothing to undo.
            let _ = waitpid(pid, None);
        }
        self.pids.clear();
        self.reaped.clear();
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A loop's life: die with the run, leave the terminal's process group
/// (Ctrl-C goes to the runner, which stops the loops itself), then spin.
fn busy_loop(counter: &AtomicU64, parent: Pid) -> ! {
    // Only system calls here (see the fork in `CpuLoad::start`).
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || nix::unistd::getppid() != parent
    {
        // SAFETY: _exit, without the parent's atexit handlers.
        unsafe { libc::_exit(1) }
    }
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let _ = nix::sys::prctl::set_name(LOOP_NAME);
    let mut x: u64 = 1;
    let mut done: u64 = 0;
    loop {
        x = work(x, BLOCK.into());
        done += 1;
        counter.store(done, Ordering::Relaxed);
    }
}

/// `n` units of CPU work from `x`: dependent LCG steps (Knuth's MMIX
/// constants) the compiler cannot fold. The busy loops' work, and the hot
/// start-up's recorded CPU time ([`work_per_us`]).
#[inline(never)]
pub fn work(mut x: u64, n: u64) -> u64 {
    for _ in 0..n {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    x
}

/// The calibration's rounds and each round's CPU time: five rounds of 10 ms
/// take 50 ms of CPU once per run, and the fastest round is the one least
/// disturbed (a preemption's cache refill, an interrupt).
const CALIBRATION_ROUNDS: u32 = 5;
const CALIBRATION_ROUND_NS: u64 = 10_000_000;

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), ns: what the thread
/// ran, whatever the other processes took from it meanwhile.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; this clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How many units of [`work`] this machine's host does in a microsecond of
/// CPU time, measured on the CPU time of the measuring thread (so that the
/// other helpers' processes or the cell's busy loops, which take wall time,
/// do not lower it); measured once per process. The hot start-up's replay
/// turns its trace's recorded CPU time into this much work per µs, natively
/// and in a guest alike: a guest does the host's work for the same start, so
/// a slower vCPU (TCG) takes longer, as the recorded app would.
pub fn work_per_us() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let mut best: f64 = 0.0;
        let mut x = 1;
        for _ in 0..CALIBRATION_ROUNDS {
            let (t0, mut units) = (thread_cpu_ns(), 0u64);
            let mut t = t0;
            while t - t0 < CALIBRATION_ROUND_NS {
                x = work(x, BLOCK.into());
                units += u64::from(BLOCK);
                t = thread_cpu_ns();
            }
            best = best.max(units as f64 * 1e3 / (t - t0) as f64);
        }
        std::hint::black_box(x);
        best
    })
}

/// A cell's busy loops on this machine, started and warmed up
/// ([`crate::latency::WARMUP`]: the kernel's balancer has spread them),
/// sampled when the measurement begins. Dropping it stops them.
pub struct WarmLoads {
    load: CpuLoad,
    begun: Sample,
}

impl WarmLoads {
    /// `n` loops (none for 0), warmed up; `check` is asked every 20 ms
    /// whether to go on (the runner's Ctrl-C).
    pub fn start(n: usize, check: &mut dyn FnMut() -> Result<()>) -> Result<WarmLoads> {
        let load = CpuLoad::start(n)?;
        let end = Instant::now() + crate::latency::WARMUP;
        while Instant::now() < end {
            check()?;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let begun = load.sample();
        Ok(WarmLoads { load, begun })
    }

    /// The loops' iterations per second since the measurement began
    /// (`None` without loops), after checking none died: its load would be
    /// missing from the measurement. The loops stop.
    pub fn finish(mut self) -> Result<Option<f64>> {
        let now = self.load.sample();
        self.load.check_running()?;
        Ok((!self.load.is_empty()).then(|| now.rate_since(&self.begun)))
    }
}
