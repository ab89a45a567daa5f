//! Stand-ins for the end-to-end test and the benchmark, without a VM:
//!
//! - [`fake_vm_main`]: a "VM-like" process whose reads go through a pool of
//!   worker threads, as QEMU's do (`--aio threads`): requests are handed out
//!   round robin, one at a time, with `O_DIRECT` (QEMU's `cache=none`), and
//!   each burst starts one more worker that leaves when the burst ends (QEMU's
//!   pool workers come and go);
//! - [`burst_main`]: the "application start-up" a guest runs: a new program
//!   (so the process connector reports its exec) that asks the fake VM for a
//!   burst of reads (files read whole at scattered places) and waits for it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::{err, Result};

struct Job {
    off: u64,
    len: usize,
    done: Sender<std::io::Result<()>>,
}

fn worker(file: Arc<File>, rx: Receiver<Job>) {
    // O_DIRECT needs an aligned buffer: over-allocate and align to 4 KiB.
    let mut raw = vec![0u8; (1 << 20) + 4096];
    let shift = raw.as_ptr().align_offset(4096);
    while let Ok(j) = rx.recv() {
        let len = j.len.min(1 << 20);
        let r = file
            .read_exact_at(&mut raw[shift..shift + len], j.off)
            .map(|_| ());
        let _ = j.done.send(r);
    }
}

/// Runs the fake VM until killed: `threads` pool workers reading `image`.
pub fn fake_vm_main(image: &Path, threads: usize, control: &Path) -> Result<()> {
    let file = Arc::new(
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(image)
            .map_err(|e| err(format!("{}: {e}", image.display())))?,
    );
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut pool: Vec<Sender<Job>> = Vec::new();
    for _ in 0..threads.max(1) {
        let (tx, rx) = mpsc::channel();
        let f = file.clone();
        thread::spawn(move || worker(f, rx));
        pool.push(tx);
    }
    let _ = std::fs::remove_file(control);
    let l = UnixListener::bind(control).map_err(|e| err(format!("{}: {e}", control.display())))?;
    let mut next = 0usize;
    for s in l.incoming().flatten() {
        let mut line = String::new();
        let Ok(c) = s.try_clone() else { continue };
        let _ = BufReader::new(c).read_line(&mut line);
        // burst READS KIB SEED RUN
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let (reads, kib, seed, run) = match f[..] {
            [r, k, s, n] if k > 0 && k <= 1024 && n > 0 => (r, k, s, n),
            _ => {
                let mut s = s;
                let _ = s.write_all(b"error: expected `burst READS KIB SEED RUN`\n");
                continue;
            }
        };
        // A worker that joins for this burst and leaves after it.
        let (tx, rx) = mpsc::channel();
        let fc = file.clone();
        let extra = thread::spawn(move || worker(fc, rx));
        pool.push(tx);
        let len = (kib * 1024) as usize;
        let slots = (size / len as u64).max(1);
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let t0 = Instant::now();
        let mut failed = None;
        let mut off = 0;
        for i in 0..reads {
            if i % run == 0 {
                // A new "file": a random place, then `run` reads in a row.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                off = (x % slots.saturating_sub(run).max(1)) * len as u64;
            } else {
                off += len as u64;
            }
            let (dtx, drx) = mpsc::channel();
            next = (next + 1) % pool.len();
            let _ = pool[next].send(Job {
                off,
                len,
                done: dtx,
            });
            match drx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed = Some(e.to_string()),
                Err(_) => failed = Some("worker gone".into()),
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        pool.pop();
        let _ = extra.join();
        let mut s = s;
        let _ = match failed {
            None => writeln!(s, "done {secs:.6}"),
            Some(e) => writeln!(s, "error: {e}"),
        };
    }
    Ok(())
}

/// Asks the fake VM at `control` for a burst of `reads` reads of `kib` KiB,
/// in runs of `run` consecutive reads at random places (files read whole),
/// and returns its duration in seconds.
pub fn burst_main(control: &Path, reads: u64, kib: u64, seed: u64, run: u64) -> Result<f64> {
    let mut s =
        UnixStream::connect(control).map_err(|e| err(format!("{}: {e}", control.display())))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    writeln!(s, "burst {reads} {kib} {seed} {run}").map_err(|e| err(e.to_string()))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| err(e.to_string()))?;
    line.trim()
        .strip_prefix("done ")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(format!("fake VM: {}", line.trim())))
}

/// The name a stand-in for QEMU runs under: hostd serves only processes
/// whose executable and command line name a QEMU system emulator
/// ([`crate::vmproc::check_qemu`]).
pub const FAKE_QEMU_NAME: &str = "qemu-system-x86_64";

/// A command that runs `program` under the name [`FAKE_QEMU_NAME`] in
/// `dir`: a hard link to it (same file system), or else a copy, so that the
/// kernel's `/proc/PID/exe` and the command line both say
/// `qemu-system-x86_64` while the program is whatever the test needs
/// (`sleep`, or tandem's own `hostd fake-vm` / `fake-qemu`).
pub fn fake_qemu_command(dir: &Path, program: &Path) -> std::io::Result<std::process::Command> {
    let bin = dir.join(FAKE_QEMU_NAME);
    if !bin.exists() {
        std::fs::create_dir_all(dir)?;
        if std::fs::hard_link(program, &bin).is_err() {
            std::fs::copy(program, &bin)?;
        }
    }
    let mut c = std::process::Command::new(bin);
    c.stdin(std::process::Stdio::null());
    Ok(c)
}

/// Waits (at most 5 s) until process `pid` has exec'd a program named
/// [`FAKE_QEMU_NAME`]: right after a spawn its command line may still be
/// empty, and hostd would rightly refuse it.
pub fn wait_exec(pid: u32) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&argv).contains(FAKE_QEMU_NAME) {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A stand-in for QEMU, killed on drop.
pub struct FakeQemu(std::process::Child);

impl FakeQemu {
    /// Runs `program args` as [`fake_qemu_command`] does.
    pub fn spawn(dir: &Path, program: &Path, args: &[&str]) -> std::io::Result<FakeQemu> {
        let q = fake_qemu_command(dir, program)?
            .args(args)
            .spawn()
            .map(FakeQemu)?;
        wait_exec(q.pid());
        Ok(q)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for FakeQemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `tandem hostd fake-qemu` stands for.
#[derive(Clone, Debug, Default)]
pub struct FakeQemuSpec {
    /// Idle threads beside the main one (QEMU's main loop, workers).
    pub threads: usize,
    /// vCPU threads, named as QEMU names them (`CPU N/KVM`), idle, and
    /// listed by the QMP server's `query-cpus-fast`.
    pub vcpus: usize,
    /// Thread ids QMP lists as vCPUs too, though they are not this
    /// process's (a lying or broken QEMU, for the refusal test).
    pub foreign_vcpus: Vec<u32>,
    /// Files held open for reading (as QEMU holds its disk images).
    pub read: Vec<std::path::PathBuf>,
    /// Files held open for writing (its logs).
    pub write: Vec<std::path::PathBuf>,
    /// Serve QMP on this unix socket.
    pub qmp: Option<std::path::PathBuf>,
    /// The vCPU threads spin instead of idling (a guest computing).
    pub busy_vcpus: bool,
    /// QMP's `query-kvm` answers as QEMU 7.2 under TCG (`enabled` false),
    /// and the vCPU threads are named `CPU N/TCG`; otherwise it answers as
    /// a QEMU without the command.
    pub tcg: bool,
    /// I/O-ish threads named `worker`, as QEMU's thread pool names them:
    /// each works `work_us` of CPU then sleeps `sleep_us`, over and over.
    pub workers: usize,
    pub work_us: u64,
    pub sleep_us: u64,
    /// Where the workers' completed operations are written (a number,
    /// replaced every 100 ms).
    pub report: Option<std::path::PathBuf>,
}

/// Spins for `d` of wall-clock time (CPU work while not preempted).
fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// `spec.workers` worker threads and the thread that reports their count.
fn start_workers(spec: &FakeQemuSpec) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let ops = std::sync::Arc::new(AtomicU64::new(0));
    let (work, sleep) = (
        Duration::from_micros(spec.work_us),
        Duration::from_micros(spec.sleep_us),
    );
    for _ in 0..spec.workers {
        let ops = ops.clone();
        thread::Builder::new()
            .name("worker".into())
            .spawn(move || loop {
                spin(work);
                ops.fetch_add(1, Ordering::Relaxed);
                thread::sleep(sleep);
            })
            .map_err(|e| err(format!("starting a worker: {e}")))?;
    }
    if let Some(p) = spec.report.clone() {
        thread::Builder::new()
            .name("report".into())
            .spawn(move || loop {
                let tmp = p.with_extension("tmp");
                if std::fs::write(&tmp, format!("{}\n", ops.load(Ordering::Relaxed))).is_ok() {
                    let _ = std::fs::rename(&tmp, &p);
                }
                thread::sleep(Duration::from_millis(100));
            })
            .map_err(|e| err(format!("starting a thread: {e}")))?;
    }
    Ok(())
}

/// `tandem hostd fake-qemu`: a process with idle threads and vCPU threads,
/// holding files open and serving QMP as `spec` says; runs until killed.
pub fn fake_qemu_main(spec: &FakeQemuSpec) -> Result<()> {
    let mut vcpus: Vec<(u32, u32)> = Vec::new();
    for i in 0..spec.vcpus {
        let (tx, rx) = std::sync::mpsc::channel();
        let busy = spec.busy_vcpus;
        thread::Builder::new()
            .name(format!("CPU {i}/{}", if spec.tcg { "TCG" } else { "KVM" }))
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let _ = tx.send(unsafe { libc::gettid() } as u32);
                loop {
                    if busy {
                        spin(Duration::from_secs(1));
                    } else {
                        thread::park();
                    }
                }
            })
            .map_err(|e| err(format!("starting a vCPU thread: {e}")))?;
        let tid = rx.recv().map_err(|_| err("a vCPU thread did not start"))?;
        vcpus.push((i as u32, tid));
    }
    let n = vcpus.len() as u32;
    vcpus.extend(
        spec.foreign_vcpus
            .iter()
            .enumerate()
            .map(|(k, &t)| (n + k as u32, t)),
    );
    if let Some(p) = &spec.qmp {
        serve_qmp(p, vcpus, spec.tcg)?;
    }
    start_workers(spec)?;
    let (threads, read, write) = (spec.threads, &spec.read, &spec.write);
    let mut files = Vec::new();
    for p in read {
        files.push(File::open(p).map_err(|e| err(format!("{}: {e}", p.display())))?);
    }
    for p in write {
        files.push(
            OpenOptions::new()
                .write(true)
                .open(p)
                .map_err(|e| err(format!("{}: {e}", p.display())))?,
        );
    }
    for _ in 0..threads {
        thread::Builder::new()
            .spawn(|| loop {
                thread::park();
            })
            .map_err(|e| err(format!("starting a thread: {e}")))?;
    }
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

/// A QMP server on `path`, as QEMU's `-qmp unix:PATH,server=on,wait=off`:
/// the greeting, then `vcpus` (index, thread id) to `query-cpus-fast`,
/// TCG's answer to `query-kvm` if `tcg`, and an empty answer to every other
/// command (no iothreads), one client at a time.
fn serve_qmp(path: &Path, vcpus: Vec<(u32, u32)>, tcg: bool) -> Result<()> {
    let cpus = serde_json::Value::Array(
        vcpus
            .iter()
            .map(|&(i, tid)| serde_json::json!({"cpu-index": i, "thread-id": tid, "target": "x86_64"}))
            .collect(),
    );
    let cpus = format!(r#"{{"return": {cpus}}}"#);
    use std::io::{BufRead, BufReader, Write};
    let l = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| err(format!("QMP {}: {e}", path.display())))?;
    thread::Builder::new()
        .spawn(move || {
            for s in l.incoming().flatten() {
                let Ok(mut w) = s.try_clone() else { continue };
                let _ = writeln!(w, r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#);
                for line in BufReader::new(s).lines().map_while(|l| l.ok()) {
                    let reply = if line.contains("qmp_capabilities") {
                        r#"{"return": {}}"#
                    } else if line.contains("query-cpus-fast") {
                        &cpus
                    } else if tcg && line.contains("query-kvm") {
                        r#"{"return": {"enabled": false, "present": true}}"#
                    } else {
                        r#"{"return": []}"#
                    };
                    if writeln!(w, "{reply}").is_err() {
                        break;
                    }
                }
            }
        })
        .map_err(|e| err(format!("starting a thread: {e}")))?;
    Ok(())
}
