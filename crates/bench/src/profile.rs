//! FFSB-style profile workloads, for real: N threads doing `O_DIRECT` I/O on
//! files of their own (thread `i` on file `i`), each op timed. What the
//! simulator's profile cells model, run on the host (`native::OnHost`) or
//! in a guest (the agent's `profile` op, `crate::guest`).
//!
//! A job is random or sequential, with a share of reads (1 for the read
//! profiles, 0 for the write ones, in between for the mixed one) and a block
//! size; each thread issues one request at a time (FFSB's threads do
//! synchronous I/O), for the job's seconds. The result: operations and
//! bytes done, per second, and the ops' latency percentiles.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use experiment::profile::{ProfileCell, IO_LATENCY_P50_MS, IO_LATENCY_P99_MS};
use experiment::RunResult;
use serde::{Deserialize, Serialize};

use crate::{run_err, Result};

/// `O_DIRECT` needs buffers, offsets and sizes aligned to the logical
/// block size; 4096 covers every disk (512 and 4K native) and page size.
pub const ALIGN: usize = 4096;

/// Latency samples kept per thread before they are thinned (every other
/// sample dropped, and every other one recorded from then on): 2^20
/// samples, 8 MiB, bounds the memory of a long run while keeping the
/// percentiles of the whole run (a uniform thinning over time).
const MAX_SAMPLES: usize = 1 << 20;

/// One profile run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Random offsets (FFSB's random profiles) or sequential ones (each
    /// thread from the start of its file, wrapping at the end).
    pub random: bool,
    /// Share of operations that read, in [0, 1].
    pub read_share: f64,
    /// Bytes per operation, a multiple of [`ALIGN`].
    pub block_bytes: usize,
    /// Threads, one file each.
    pub threads: u32,
    /// How long the threads run.
    pub secs: f64,
    /// The rates are sampled every this many seconds (the cell's
    /// `sample_s`): `secs / sample_s` samples, at least one.
    pub sample_s: f64,
    /// The offsets' and the read/write choice's seed.
    pub seed: u64,
}

impl Job {
    /// The job's inputs checked before any file is touched.
    pub fn check(&self) -> Result<()> {
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(ALIGN) {
            return Err(crate::Error::Usage(format!(
                "profile: block size {} is not a multiple of {ALIGN} (O_DIRECT)",
                self.block_bytes
            )));
        }
        if !(0.0..=1.0).contains(&self.read_share) {
            return Err(crate::Error::Usage(format!(
                "profile: read share {} is not in [0, 1]",
                self.read_share
            )));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if self.threads == 0 || !positive(self.secs) || !positive(self.sample_s) {
            return Err(crate::Error::Usage(
                "profile: needs at least one thread, a positive duration and sample period".into(),
            ));
        }
        Ok(())
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Operations completed (reads and writes).
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// The run's length, from the threads' start to the last one's end.
    pub secs: f64,
    /// Median and 99th percentile of the ops' latency, in microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Whether the files were opened with `O_DIRECT` (a file system that
    /// refuses it, tmpfs, gets buffered I/O and says so here).
    pub direct: bool,
    /// Operations and bytes completed in each sample period.
    pub samples: Vec<(u64, u64)>,
    /// The sample period (s).
    pub sample_s: f64,
}

impl Stats {
    /// Operations per second (FFSB's transactions per second).
    pub fn tps(&self) -> f64 {
        self.ops as f64 / self.secs.max(f64::MIN_POSITIVE)
    }

    /// MB/s (10^6 bytes).
    pub fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(f64::MIN_POSITIVE)
    }

    /// Each sample's rate: operations per second, or MB/s when `mb_s`.
    pub fn sample_rates(&self, mb_s: bool) -> Vec<f64> {
        let per = self.sample_s.max(f64::MIN_POSITIVE);
        self.samples
            .iter()
            .map(|&(ops, bytes)| {
                if mb_s {
                    bytes as f64 / 1e6 / per
                } else {
                    ops as f64 / per
                }
            })
            .collect()
    }
}

/// A buffer aligned for `O_DIRECT` (`Vec` gives no alignment guarantee
/// beyond the element's).
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Result<AlignedBuf> {
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|e| run_err(format!("profile buffer: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked by Job::check).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(run_err("profile buffer: out of memory"));
        }
        Ok(AlignedBuf { ptr, layout })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of layout.size() bytes, owned here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Open `path` for the job, with `O_DIRECT` when the file system takes it.
fn open(path: &Path, write: bool) -> Result<(File, bool)> {
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    match o.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => o
            .open(path)
            .map(|f| (f, false))
            .map_err(|e| run_err(format!("profile: {}: {e}", path.display()))),
        Err(e) => Err(run_err(format!("profile: {}: {e}", path.display()))),
    }
}

/// xorshift64*: the workers' generator, seeded per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Latency samples with bounded memory (see [`MAX_SAMPLES`]).
#[derive(Default)]
struct Samples {
    kept: Vec<f64>,
    stride: u64,
    seen: u64,
}

impl Samples {
    fn record(&mut self, us: f64) {
        self.stride = self.stride.max(1);
        if self.seen.is_multiple_of(self.stride) {
            if self.kept.len() >= MAX_SAMPLES {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride *= 2;
            }
            self.kept.push(us);
        }
        self.seen += 1;
    }
}

/// What one thread did.
struct ThreadOut {
    ops: u64,
    bytes: u64,
    samples: Samples,
    direct: bool,
}

/// One thread's loop on `path` until `deadline` (or `stop` says so).
fn thread_main(
    path: &Path,
    job: &Job,
    index: u64,
    deadline: Instant,
    shared: &Shared,
) -> Result<ThreadOut> {
    let write = job.read_share < 1.0;
    let (f, direct) = open(path, write)?;
    let size = f
        .metadata()
        .map_err(|e| run_err(format!("profile: {}: {e}", path.display())))?
        .len();
    let blocks = size / job.block_bytes as u64;
    if blocks == 0 {
        return Err(run_err(format!(
            "profile: {} ({size} bytes) is smaller than one block",
            path.display()
        )));
    }
    let mut rng = Rng(experiment::splitmix64(job.seed ^ index) | 1);
    let mut buf = AlignedBuf::new(job.block_bytes)?;
    buf.as_mut().iter_mut().for_each(|b| *b = rng.next() as u8);
    let mut out = ThreadOut {
        ops: 0,
        bytes: 0,
        samples: Samples::default(),
        direct,
    };
    let mut next_block = 0u64;
    while Instant::now() < deadline {
        // The stop check is cheap but not free: every 64 ops.
        if out.ops.is_multiple_of(64) && shared.stopped() {
            break;
        }
        let block = if job.random {
            rng.next() % blocks
        } else {
            let b = next_block % blocks;
            next_block = b + 1;
            b
        };
        let off = block * job.block_bytes as u64;
        let read = job.read_share >= 1.0 || rng.unit() < job.read_share;
        let t0 = Instant::now();
        let r = if read {
            f.read_exact_at(buf.as_mut(), off)
        } else {
            f.write_all_at(buf.as_mut(), off)
        };
        r.map_err(|e| run_err(format!("profile: {} at {off}: {e}", path.display())))?;
        out.samples.record(t0.elapsed().as_secs_f64() * 1e6);
        out.ops += 1;
        out.bytes += job.block_bytes as u64;
        shared.ops.fetch_add(1, Ordering::Relaxed);
        shared
            .bytes
            .fetch_add(job.block_bytes as u64, Ordering::Relaxed);
    }
    Ok(out)
}

/// What the threads and the sampler share.
struct Shared<'a> {
    ops: AtomicU64,
    bytes: AtomicU64,
    /// Set when a thread failed or the sampler was told to stop.
    halt: AtomicBool,
    stop: &'a (dyn Fn() -> bool + Sync),
}

impl Shared<'_> {
    fn stopped(&self) -> bool {
        self.halt.load(Ordering::Relaxed) || (self.stop)()
    }
}

/// The sampler (the calling thread): the counters' deltas at each sample
/// boundary until the deadline or a stop.
fn sample(shared: &Shared, t0: Instant, job: &Job) -> Vec<(u64, u64)> {
    let n = (job.secs / job.sample_s).floor().max(1.0) as u32;
    let mut out = Vec::new();
    let (mut last_ops, mut last_bytes) = (0, 0);
    for k in 1..=n {
        let due = t0 + Duration::from_secs_f64(job.sample_s * f64::from(k));
        while Instant::now() < due {
            if shared.stopped() {
                return out;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(50)));
        }
        let (ops, bytes) = (
            shared.ops.load(Ordering::Relaxed),
            shared.bytes.load(Ordering::Relaxed),
        );
        out.push((ops - last_ops, bytes - last_bytes));
        (last_ops, last_bytes) = (ops, bytes);
    }
    out
}

/// Run `job` on `files` (thread `i` on `files[i]`; at least `threads`
/// files). `stop` is asked now and then (Ctrl-C).
pub fn run(files: &[PathBuf], job: &Job, stop: &(dyn Fn() -> bool + Sync)) -> Result<Stats> {
    job.check()?;
    if files.len() < job.threads as usize {
        return Err(run_err(format!(
            "profile: {} threads need {} files, {} there",
            job.threads,
            job.threads,
            files.len()
        )));
    }
    let shared = Shared {
        ops: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        halt: AtomicBool::new(false),
        stop,
    };
    let n = (job.secs / job.sample_s).floor().max(1.0);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(job.sample_s * n);
    let (outs, samples) = std::thread::scope(|s| {
        let shared = &shared;
        let handles: Vec<_> = files
            .iter()
            .take(job.threads as usize)
            .enumerate()
            .map(|(i, p)| {
                s.spawn(move || {
                    let r = thread_main(p, job, i as u64, deadline, shared);
                    if r.is_err() {
                        shared.halt.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let samples = sample(shared, t0, job);
        let outs: Vec<Result<ThreadOut>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(run_err("profile: a thread panicked")))
            })
            .collect();
        (outs, samples)
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut stats = Stats {
        secs,
        direct: true,
        samples,
        sample_s: job.sample_s,
        ..Stats::default()
    };
    let mut lat = Vec::new();
    for o in outs {
        let o = o?;
        stats.ops += o.ops;
        stats.bytes += o.bytes;
        stats.direct &= o.direct;
        // A thread thinned past the cap weighs less than it should in the
        // pooled percentiles; it takes over 2^20 ops in one run to get there.
        lat.extend(o.samples.kept);
    }
    if !lat.is_empty() {
        let p = experiment::stats::percentiles(&lat);
        stats.p50_us = p.median;
        stats.p99_us = p.p99;
    }
    Ok(stats)
}

/// The job of a profile cell's run: `p`'s threads, block size and read
/// share, random unless sequential, for `duration_s` sampled every
/// `sample_s`.
pub fn job_of(p: &ProfileCell, duration_s: f64, sample_s: f64, seed: u64) -> Job {
    Job {
        random: !p.profile.is_sequential(),
        read_share: f64::from(p.read_pct()) / 100.0,
        block_bytes: p.block_bytes() as usize,
        threads: p.threads,
        secs: duration_s,
        sample_s,
        seed,
    }
}

/// A run's result as the procedure wants it ([`experiment::procedure::Host::profile`]):
/// the profile's metric in each sample (tps, or MB/s for the sequential
/// profiles), the latency percentiles in ms as counters, and whether the
/// files were opened with `O_DIRECT` (1 or 0).
pub fn run_result(p: &ProfileCell, s: &Stats) -> RunResult {
    let mut out = RunResult {
        values: s.sample_rates(p.profile.is_sequential()),
        ..RunResult::default()
    };
    out.counters
        .insert(IO_LATENCY_P50_MS.into(), s.p50_us / 1000.0);
    out.counters
        .insert(IO_LATENCY_P99_MS.into(), s.p99_us / 1000.0);
    out.counters
        .insert("o_direct".into(), if s.direct { 1.0 } else { 0.0 });
    out
}

/// A profile run on the host (native cells): `files` are the device's.
pub(crate) fn run_native(
    files: &[PathBuf],
    p: &ProfileCell,
    duration_s: f64,
    sample_s: f64,
    seed: u64,
) -> Result<RunResult> {
    let job = job_of(p, duration_s, sample_s, seed);
    let stats = run(files, &job, &|| crate::check_interrupted().is_err())?;
    crate::check_interrupted()?;
    Ok(run_result(p, &stats))
}

/// A profile run in the guest, through the agent's `profile` op.
pub(crate) fn run_in_guest(
    guest: &mut crate::vm::Guest,
    p: &ProfileCell,
    duration_s: f64,
    sample_s: f64,
    seed: u64,
) -> Result<RunResult> {
    let job = job_of(p, duration_s, sample_s, seed);
    let a = guest.call(
        serde_json::json!({"op": "profile", "job": job}),
        // The guest runs the whole job before it answers; a slow (TCG) guest
        // needs time to start and join its threads too.
        Some(Duration::from_secs_f64(duration_s + 60.0)),
    )?;
    let stats: Stats = serde_json::from_value(a.get("stats").cloned().unwrap_or_default())
        .map_err(|e| run_err(format!("the guest's profile answer {a}: {e}")))?;
    Ok(run_result(p, &stats))
}

/// The guest agent's `profile {job}` op (`crate::guest`): the job on the data
/// disk's files `file0`, `file1`, ..., its [`Stats`] as the answer's `stats`.
pub fn agent_op(data: &Path, req: &serde_json::Value) -> Result<serde_json::Value> {
    let job: Job = serde_json::from_value(req.get("job").cloned().unwrap_or_default())
        .map_err(|e| crate::Error::Usage(format!("profile: bad job: {e}")))?;
    let files = data_files(data, job.threads);
    let stats = run(&files, &job, &|| false)?;
    Ok(serde_json::json!({"ok": true, "stats": stats}))
}

/// The files of a profile's threads in `dir`: `file0`, `file1`, ... (the
/// names the device and the guest disk are filled with).
pub fn data_files(dir: &Path, threads: u32) -> Vec<PathBuf> {
    (0..threads).map(|i| dir.join(format!("file{i}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, n: usize, bytes: u64) -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("file{i}"));
                crate::workers::fill_file(&p, bytes, i as u64 + 1).unwrap();
                p
            })
            .collect()
    }

    fn job(random: bool, read_share: f64, threads: u32) -> Job {
        Job {
            random,
            read_share,
            block_bytes: ALIGN,
            threads,
            secs: 0.4,
            sample_s: 0.2,
            seed: 7,
        }
    }

    /// Each thread works: ops, bytes = ops x block, rates from them, and
    /// percentiles in order.
    #[test]
    fn threads_count_ops_bytes_and_latencies() {
        let dir = std::env::temp_dir().join(format!("tandem-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = files(&dir, 2, 1 << 20);
        for j in [job(true, 1.0, 2), job(false, 0.0, 1), job(true, 0.5, 2)] {
            let s = run(&f, &j, &|| false).unwrap();
            assert!(s.ops > 0, "{j:?}: no op");
            assert_eq!(s.bytes, s.ops * ALIGN as u64);
            assert!(s.secs >= 0.4 && s.secs < 5.0, "{}", s.secs);
            assert!((s.tps() - s.ops as f64 / s.secs).abs() < 1e-6);
            assert!(s.p50_us > 0.0 && s.p50_us <= s.p99_us, "{s:?}");
            // Two samples of 0.2 s, which add up to (almost) every op: the
            // ops finishing after the last sample are not in one.
            assert_eq!(s.samples.len(), 2);
            let sampled: u64 = s.samples.iter().map(|x| x.0).sum();
            assert!(
                sampled <= s.ops && sampled + 2 * j.threads as u64 >= s.ops,
                "{s:?}"
            );
            let rates = s.sample_rates(false);
            assert!((rates[0] - s.samples[0].0 as f64 * 5.0).abs() < 1e-6);
            let mb = s.sample_rates(true);
            assert!((mb[1] - s.samples[1].1 as f64 / 2e5).abs() < 1e-6);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stop request ends the run early.
    #[test]
    fn stop_ends_the_run() {
        let dir = std::env::temp_dir().join(format!("tandem-profile-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = files(&dir, 1, 1 << 20);
        let mut j = job(true, 1.0, 1);
        j.secs = 30.0;
        let t0 = Instant::now();
        let s = run(&f, &j, &|| true).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{s:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Bad jobs are refused before any file is opened.
    #[test]
    fn bad_jobs_are_refused() {
        let f = [PathBuf::from("/nonexistent/file0")];
        let mut j = job(true, 1.0, 1);
        j.block_bytes = 1000;
        assert!(run(&f, &j, &|| false)
            .unwrap_err()
            .to_string()
            .contains("multiple of 4096"));
        let mut j = job(true, 1.5, 1);
        assert!(run(&f, &j, &|| false)
            .unwrap_err()
            .to_string()
            .contains("read share"));
        j = job(true, 1.0, 2);
        assert!(run(&f, &j, &|| false)
            .unwrap_err()
            .to_string()
            .contains("2 files"));
    }

    /// Thinning keeps memory bounded and the samples' spread.
    #[test]
    fn samples_are_thinned_past_the_cap() {
        let mut s = Samples::default();
        for i in 0..(MAX_SAMPLES as u64 * 3) {
            s.record(i as f64);
        }
        assert!(s.kept.len() <= MAX_SAMPLES);
        assert!(s.stride >= 2);
        let last = *s.kept.last().unwrap();
        assert!(last > (MAX_SAMPLES * 2) as f64, "the late samples are kept");
    }
}
