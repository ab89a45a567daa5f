//! The processes a benchmark starts: background readers and writers with the
//! S suite's semantics, the periodic `sync`, and the replay of an app's
//! start-up I/O trace. Each is `tandem bench worker ...` or `tandem bench
//! replay ...`, a child process of the run that dies with it
//! (`PR_SET_PDEATHSIG`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use nix::sys::signal::{self, killpg, Signal};
use nix::unistd::Pid;

use agent::cfsv::SchedStat;

use crate::{run_err, Result};

/// What a worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Buffered sequential reads (S: `Nr-seq`), wrapping around at the end.
    SeqRead,
    /// Buffered 4 KiB reads at random offsets (S: `Nr-rand`).
    RandRead,
    /// Buffered sequential writes, rate-capped.
    SeqWrite,
    /// Buffered 4 KiB writes at random offsets, rate-capped.
    RandWrite,
    /// `sync` every 2 s (S syncs while writers run).
    Sync,
}

impl Kind {
    /// Name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SeqRead => "seq-read",
            Kind::RandRead => "rand-read",
            Kind::SeqWrite => "seq-write",
            Kind::RandWrite => "rand-write",
            Kind::Sync => "sync",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<Kind> {
        [
            Kind::SeqRead,
            Kind::RandRead,
            Kind::SeqWrite,
            Kind::RandWrite,
            Kind::Sync,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Sequential readers read this much per `read` call.
const SEQ_READ_BYTES: usize = 64 * 1024;
/// Sequential writers write this much per `write` call.
const SEQ_WRITE_BYTES: usize = 128 * 1024;
/// Random readers and writers: 4 KiB (S: `bs=4k`).
const RAND_BYTES: usize = 4096;
/// Readers drop what they have read from the page cache every this many
/// bytes: the S suite's files outgrow memory; these are small, and must not
/// be served from the cache.
const DROP_EVERY_BYTES: u64 = 8 << 20;
/// S syncs every 2 s while writers run.
pub const SYNC_PERIOD: Duration = Duration::from_secs(experiment::suite::SYNC_PERIOD_S as u64);

/// Page-cache advice on a worker's file. Advice is a hint: a kernel that
/// ignores it only makes the worker's I/O less faithful, so errors are dropped.
fn fadvise(f: &File, off: u64, len: u64, advice: PosixFadviseAdvice) {
    let _ = posix_fadvise(f.as_raw_fd(), off as i64, len as i64, advice);
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Run a worker until killed.
pub fn worker_main(kind: Kind, file: Option<&Path>, rate_bytes_s: f64, seed: u64) -> Result<()> {
    if kind == Kind::Sync {
        loop {
            std::thread::sleep(SYNC_PERIOD);
            nix::unistd::sync();
        }
    }
    let path = file.ok_or_else(|| run_err("worker: --file is required"))?;
    let write = matches!(kind, Kind::SeqWrite | Kind::RandWrite);
    let mut f = OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| run_err(format!("worker: {}: {e}", path.display())))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    if size < RAND_BYTES as u64 {
        return Err(run_err(format!("worker: {} is too small", path.display())));
    }
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let blocks = size / RAND_BYTES as u64;
    let started = Instant::now();
    let mut done: u64 = 0;
    let pace = |done: u64| {
        if rate_bytes_s > 0.0 {
            let due = Duration::from_secs_f64(done as f64 / rate_bytes_s);
            let el = started.elapsed();
            if due > el {
                std::thread::sleep(due - el);
            }
        }
    };
    match kind {
        Kind::SeqRead => {
            let mut buf = vec![0u8; SEQ_READ_BYTES];
            let mut pos: u64 = 0;
            let mut dropped: u64 = 0;
            loop {
                let n = f
                    .read(&mut buf)
                    .map_err(|e| run_err(format!("worker read: {e}")))?;
                if n == 0 {
                    fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
                    f.seek(SeekFrom::Start(0))
                        .map_err(|e| run_err(e.to_string()))?;
                    pos = 0;
                    dropped = 0;
                    continue;
                }
                pos += n as u64;
                if pos - dropped >= DROP_EVERY_BYTES {
                    fadvise(
                        &f,
                        dropped,
                        pos - dropped,
                        PosixFadviseAdvice::POSIX_FADV_DONTNEED,
                    );
                    dropped = pos;
                }
            }
        }
        Kind::RandRead => {
            // fio's default for random patterns: no readahead.
            fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_RANDOM);
            let mut buf = vec![0u8; RAND_BYTES];
            let mut count: u64 = 0;
            loop {
                let off = (rng.next() % blocks) * RAND_BYTES as u64;
                f.read_exact_at(&mut buf, off)
                    .map_err(|e| run_err(format!("worker read: {e}")))?;
                count += 1;
                if count.is_multiple_of(256) {
                    fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
                }
            }
        }
        Kind::SeqWrite => {
            let mut buf = vec![0u8; SEQ_WRITE_BYTES];
            buf.iter_mut().for_each(|b| *b = rng.next() as u8);
            let mut pos: u64 = 0;
            loop {
                if pos + SEQ_WRITE_BYTES as u64 > size {
                    pos = 0;
                }
                f.write_all_at(&buf, pos)
                    .map_err(|e| run_err(format!("worker write: {e}")))?;
                pos += SEQ_WRITE_BYTES as u64;
                done += SEQ_WRITE_BYTES as u64;
                pace(done);
            }
        }
        Kind::RandWrite => {
            let mut buf = vec![0u8; RAND_BYTES];
            buf.iter_mut().for_each(|b| *b = rng.next() as u8);
            loop {
                let off = (rng.next() % blocks) * RAND_BYTES as u64;
                f.write_all_at(&buf, off)
                    .map_err(|e| run_err(format!("worker write: {e}")))?;
                done += RAND_BYTES as u64;
                pace(done);
            }
        }
        Kind::Sync => unreachable!("handled above"),
    }
}

/// Make a child die with its parent, and put it in its own process group.
fn detach_with_parent(cmd: &mut Command) {
    devemu::die_with_parent(cmd, Signal::SIGKILL);
    cmd.process_group(0);
}

/// Start a worker process.
pub fn spawn_worker(
    exe: &Path,
    kind: Kind,
    file: Option<&Path>,
    rate_bytes_s: f64,
    seed: u64,
) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "worker", "--kind", kind.as_str()]);
    if let Some(f) = file {
        cmd.arg("--file").arg(f);
    }
    cmd.arg("--rate")
        .arg(format!("{rate_bytes_s}"))
        .arg("--seed")
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    detach_with_parent(&mut cmd);
    cmd.spawn()
        .map_err(|e| run_err(format!("starting a worker ({}): {e}", exe.display())))
}

/// Start the replay of an app trace whose files are in `dir`; with hot
/// caches, `work_per_us` turns its CPU time into work ([`replay_main`]).
pub fn spawn_replay(exe: &Path, app: &str, dir: &Path, work_per_us: Option<f64>) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "replay", "--app", app, "--dir"])
        .arg(dir);
    if let Some(rate) = work_per_us {
        cmd.arg("--cpu-work-per-us").arg(rate.to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    detach_with_parent(&mut cmd);
    cmd.spawn()
        .map_err(|e| run_err(format!("starting the app replay: {e}")))
}

/// Start a `cmd:` app: `sh -c CMD` in `cwd`.
pub fn spawn_command(command: &str, cwd: &Path) -> Result<Child> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", command])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    detach_with_parent(&mut cmd);
    cmd.spawn()
        .map_err(|e| run_err(format!("starting {command:?}: {e}")))
}

/// Kill a child's process group and reap the child.
pub fn kill(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    // The group first (the child made it, see detach_with_parent), then the
    // child itself in case it left its group. Either may be gone already.
    let _ = killpg(pid, Signal::SIGKILL);
    let _ = signal::kill(pid, Signal::SIGKILL);
    let _ = child.wait();
}

/// Kill a child's process group as [`kill`] does, but read the child's
/// schedstat ([`crate::cputime::read_thread`] of its main thread) once it
/// has exited and before it is reaped: a zombie keeps its counters, a
/// reaped process has none. Returns how it exited (a child that had exited
/// before keeps its own status) and the reading. The app is one process
/// (the replay, or the command `sh -c` execs); threads of it that ended
/// before its main thread are not in the reading.
pub fn kill_reading(child: &mut Child) -> (Option<std::process::ExitStatus>, Option<SchedStat>) {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    let raw = child.id() as i32;
    let pid = Pid::from_raw(raw);
    let _ = killpg(pid, Signal::SIGKILL);
    let _ = signal::kill(pid, Signal::SIGKILL);
    // Wait for the exit, leaving the child waitable (`WNOWAIT`).
    let exited = loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.is_ok(),
        }
    };
    let st = exited
        .then(|| crate::cputime::read_thread(raw as u32, raw as u32))
        .flatten();
    (child.wait().ok(), st)
}

/// Whether a child has exited, without reaping it (`WNOWAIT`): its
/// schedstat stays readable ([`kill_reading`]). An error (no such child)
/// counts as exited.
pub fn has_exited(child: &Child) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let pid = Pid::from_raw(child.id() as i32);
    !matches!(
        waitid(
            Id::Pid(pid),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
        ),
        Ok(WaitStatus::StillAlive)
    )
}

/// How [`terminate`] stopped a child.
#[derive(Debug)]
pub enum Stopped {
    /// It had exited already.
    Before,
    /// It exited on SIGTERM, with this status.
    OnTerm(std::process::ExitStatus),
    /// It was still there after the grace time: SIGKILL.
    Killed,
}

/// Stop a child that cleans up on SIGTERM (QEMU closes its files, hostd
/// reverts its boosts, guestd says NO-HELP): SIGTERM, up to `grace` for it
/// to exit, then SIGKILL. It is reaped either way.
pub fn terminate(child: &mut Child, grace: Duration) -> Stopped {
    if let Ok(Some(_)) = child.try_wait() {
        return Stopped::Before;
    }
    let _ = signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(st)) = child.try_wait() {
            return Stopped::OnTerm(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Stopped::Killed
}

/// Where an app trace's file `i` lives under `dir`.
pub fn app_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("f{i}"))
}

/// Replay the start-up I/O of a trace (the hidden `tandem bench replay`):
/// each read with no readahead beyond what the trace records, the recorded
/// CPU time in between. With cold caches (`work_per_us` `None`) the reads
/// go to the disk and the CPU time is slept ([`spin_or_sleep`]); with hot
/// caches (`Some`: [`crate::cpuload::work_per_us`] of the host) the reads
/// hit the page cache and the CPU time is CPU work: that many units of
/// [`crate::cpuload::work`] per recorded µs, so that a start is CPU-bound
/// as the trace says and waits for a CPU behind the busy loops.
pub fn replay_main(app: &str, dir: &Path, work_per_us: Option<f64>) -> Result<()> {
    let trace = experiment::apptrace::preset(app)
        .ok_or_else(|| run_err(format!("no app trace {app:?}")))?;
    let files: Vec<File> = (0..trace.files.len())
        .map(|i| {
            let p = app_file(dir, i);
            let f = File::open(&p).map_err(|e| run_err(format!("{}: {e}", p.display())))?;
            fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_RANDOM);
            Ok(f)
        })
        .collect::<Result<_>>()?;
    let mut buf = Vec::new();
    let mut x = 1;
    let mut think = |ns: u64| match work_per_us {
        Some(rate) => x = crate::cpuload::work(x, hot_work_units(ns, rate)),
        None => spin_or_sleep(ns),
    };
    for r in &trace.reads {
        think(r.think_ns);
        buf.resize(r.len as usize, 0);
        let f = &files[r.file];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], r.offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => return Err(run_err(format!("replay read: {e}"))),
            }
        }
    }
    think(trace.tail_ns);
    std::hint::black_box(x);
    Ok(())
}

/// The units of [`crate::cpuload::work`] for `ns` of recorded CPU time at
/// `rate` units per µs.
pub fn hot_work_units(ns: u64, rate: f64) -> u64 {
    (ns as f64 / 1e3 * rate).round() as u64
}

/// The recorded CPU time between reads: sleeping would give the CPU away and
/// let the disk idle the same, so sleep (the difference is the CPU the
/// machine has to spare, which this benchmark does not measure).
fn spin_or_sleep(ns: u64) {
    if ns > 0 {
        std::thread::sleep(Duration::from_nanos(ns));
    }
}

/// Write `bytes` of pseudo-random data into a new file (then fsync).
pub fn fill_file(path: &Path, bytes: u64, seed: u64) -> Result<()> {
    let mut f = File::create(path).map_err(|e| run_err(format!("{}: {e}", path.display())))?;
    let mut rng = XorShift(seed | 1);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for chunk in buf.chunks_mut(8) {
            let v = rng.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n])
            .map_err(|e| run_err(format!("writing {}: {e}", path.display())))?;
        left -= n as u64;
    }
    f.sync_all()
        .map_err(|e| run_err(format!("syncing {}: {e}", path.display())))?;
    Ok(())
}
