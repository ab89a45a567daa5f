//! `tandem hostd bench-hostile`: what a hostile guest or local client costs
//! hostd, and what it costs the other VMs.
//!
//! A real hostd (`tandem hostd run`, a child process, default limits) serves
//! two VMs whose QEMU processes are stand-ins (`tandem hostd fake-qemu` under
//! QEMU's name): `flood`, whose channel the attacks use, and `quiet`, whose
//! boost latency is measured (HELP written to its channel until
//! `ioprio_get` on its process shows the boost). For each hostile input the
//! benchmark measures, over a fixed window while the input runs: hostd's CPU
//! (utime + stime from `/proc/PID/stat`, as a share of one core), the quiet
//! VM's boost latency (median and p90 of `trials` boosts), hostd's resident
//! memory, and how long a `GET /metrics` takes on the metrics socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use policy::{HelpReason, Message, Resource, PROTOCOL_VERSION};

use crate::latency::{pct, wait_for, Kids};
use crate::sys;
use crate::{err, Result};

pub struct HostileOptions {
    /// This binary (it runs hostd and the stand-in QEMU processes).
    pub exe: PathBuf,
    /// Seconds each input runs while it is measured.
    pub window_s: f64,
    /// Boosts of the quiet VM timed in each window.
    pub trials: usize,
}

/// The hostile inputs tried, by name.
pub const INPUTS: [&str; 8] = [
    "none",
    "hello-flood",
    "help-flood",
    "heartbeat-flood",
    "reconnect-churn",
    "control-flood",
    "metrics-flood",
    "idle-connections",
];

/// One row of the result.
#[derive(Clone, Debug)]
pub struct HostileRow {
    pub input: String,
    /// hostd's CPU, % of one core.
    pub cpu_pct: f64,
    /// The quiet VM's boost latency, ms: median and p90.
    pub boost_p50_ms: f64,
    pub boost_p90_ms: f64,
    /// hostd's resident memory at the end of the window, KiB.
    pub rss_kib: u64,
    /// How long a scraper took to get `GET /metrics` answered at the end of
    /// the window (trying again when closed unanswered), ms.
    pub metrics_ms: f64,
}

fn hello(name: &str) -> Vec<u8> {
    Message::Hello {
        version: PROTOCOL_VERSION,
        vm_name: name.into(),
    }
    .encode()
}

fn help(ms: u32) -> Vec<u8> {
    Message::Help {
        resource: Resource::Io,
        reason: HelpReason::Explicit,
        duration_hint_ms: ms,
    }
    .encode()
}

fn no_help() -> Vec<u8> {
    Message::NoHelp {
        resource: Resource::Io,
    }
    .encode()
}

/// Connects to a VM's channel and says Hello (the answer is drained by a
/// thread of its own, so that hostd's writes never block).
fn guest(sock: &Path, name: &str) -> Result<UnixStream> {
    let mut s = UnixStream::connect(sock).map_err(|e| err(format!("{}: {e}", sock.display())))?;
    s.write_all(&hello(name)).map_err(|e| err(e.to_string()))?;
    let mut r = s.try_clone().map_err(|e| err(e.to_string()))?;
    thread::spawn(move || {
        let mut b = [0u8; 4096];
        while matches!(r.read(&mut b), Ok(n) if n > 0) {}
    });
    Ok(s)
}

/// Writes `chunk` over and over until `stop`, never cutting a frame.
fn write_until(s: &mut UnixStream, chunk: &[u8], stop: &AtomicBool) {
    let _ = s.set_write_timeout(Some(Duration::from_millis(50)));
    let mut off = 0;
    while !stop.load(Ordering::Relaxed) {
        match s.write(&chunk[off..]) {
            Ok(n) => off = (off + n) % chunk.len(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return,
        }
    }
}

/// One request to a unix socket; the answer's length (0 on any error).
fn request(sock: &Path, req: &[u8]) -> usize {
    let Ok(mut s) = UnixStream::connect(sock) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(req).is_err() {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.len()
}

/// Starts hostile input `input` against hostd's sockets in `dir`; it runs
/// until `stop`.
fn attack(input: &str, dir: &Path, stop: Arc<AtomicBool>) -> Result<Vec<thread::JoinHandle<()>>> {
    let flood_sock = dir.join("flood.sock");
    let frames: Vec<u8> = match input {
        "hello-flood" => (0..500).flat_map(|_| hello("flood")).collect(),
        "help-flood" => (0..500)
            .flat_map(|i| if i % 2 == 0 { help(1000) } else { no_help() })
            .collect(),
        "heartbeat-flood" => (0..500u64)
            .flat_map(|seq| Message::Heartbeat { seq }.encode())
            .collect(),
        _ => Vec::new(),
    };
    let mut threads = Vec::new();
    let mut spawn = |f: Box<dyn FnOnce() + Send>| threads.push(thread::spawn(f));
    match input {
        "none" => {}
        "hello-flood" | "help-flood" | "heartbeat-flood" => {
            let mut s = guest(&flood_sock, "flood")?;
            spawn(Box::new(move || write_until(&mut s, &frames, &stop)));
        }
        "reconnect-churn" => spawn(Box::new(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = UnixStream::connect(&flood_sock) {
                    let _ = s.write_all(&hello("flood"));
                }
            }
        })),
        "control-flood" | "metrics-flood" => {
            let (sock, req): (PathBuf, &[u8]) = if input == "control-flood" {
                (dir.join("control.sock"), b"status\n")
            } else {
                (
                    dir.join("hostd-metrics.sock"),
                    b"GET /metrics HTTP/1.0\r\n\r\n",
                )
            };
            for _ in 0..4 {
                let (sock, stop) = (sock.clone(), stop.clone());
                spawn(Box::new(move || {
                    while !stop.load(Ordering::Relaxed) {
                        request(&sock, req);
                    }
                }));
            }
        }
        "idle-connections" => {
            let dir = dir.to_path_buf();
            spawn(Box::new(move || {
                let mut held = Vec::new();
                for i in 0..1000 {
                    let name = ["control.sock", "hostd-metrics.sock", "flood.sock"][i % 3];
                    if let Ok(s) = UnixStream::connect(dir.join(name)) {
                        held.push(s);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        other => return Err(err(format!("unknown hostile input {other:?}"))),
    }
    Ok(threads)
}

/// Times `trials` boosts of the VM whose channel is `s` and whose QEMU is
/// `pid`: HELP until the boost shows, NO-HELP until it is gone.
fn boost_latencies(s: &mut UnixStream, pid: u32, trials: usize) -> Result<Vec<f64>> {
    let orig = sys::ioprio_get(pid).map_err(|e| err(e.to_string()))?;
    let boosted = sys::ioprio_value(sys::IOPRIO_CLASS_RT, 4);
    let wait = |want: u32| {
        let t = Instant::now();
        while sys::ioprio_get(pid).ok() != Some(want) {
            if t.elapsed() > Duration::from_secs(5) {
                return false;
            }
            thread::sleep(Duration::from_micros(50));
        }
        true
    };
    let mut lat = Vec::new();
    for _ in 0..trials {
        let t0 = Instant::now();
        s.write_all(&help(1000)).map_err(|e| err(e.to_string()))?;
        if wait(boosted) {
            lat.push(t0.elapsed().as_secs_f64() * 1e3);
        } else {
            lat.push(5000.0);
        }
        s.write_all(&no_help()).map_err(|e| err(e.to_string()))?;
        wait(orig);
        // The arbiter's minimum spacing between a VM's boosts.
        thread::sleep(Duration::from_millis(250));
    }
    Ok(lat)
}

/// One window: `input` runs while hostd's CPU and the quiet VM's boosts are
/// measured.
fn measure(
    input: &str,
    dir: &Path,
    hostd_pid: u32,
    quiet: (&mut UnixStream, u32),
    o: &HostileOptions,
) -> Result<HostileRow> {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = attack(input, dir, stop.clone())?;
    thread::sleep(Duration::from_millis(500));
    let (c0, _) = sys::cpu_and_rss(hostd_pid).ok_or_else(|| err("hostd is gone"))?;
    let t0 = Instant::now();
    let mut lat = boost_latencies(quiet.0, quiet.1, o.trials)?;
    let left = Duration::from_secs_f64(o.window_s).saturating_sub(t0.elapsed());
    thread::sleep(left);
    let el = t0.elapsed().as_secs_f64();
    let (c1, rss) = sys::cpu_and_rss(hostd_pid).ok_or_else(|| err("hostd is gone"))?;
    // A scraper that tries again when its connection is closed unanswered
    // (all slots taken): the time until it has the metrics.
    let m0 = Instant::now();
    let mut metrics_ms = f64::NAN;
    while m0.elapsed() < Duration::from_secs(10) {
        let got = request(
            &dir.join("hostd-metrics.sock"),
            b"GET /metrics HTTP/1.0\r\n\r\n",
        );
        if got > 0 {
            metrics_ms = m0.elapsed().as_secs_f64() * 1e3;
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    Ok(HostileRow {
        input: input.to_string(),
        cpu_pct: (c1 - c0) / el * 100.0,
        boost_p50_ms: pct(&mut lat, 0.5),
        boost_p90_ms: pct(&mut lat, 0.9),
        rss_kib: rss,
        metrics_ms,
    })
}

/// Runs every input in [`INPUTS`] against a fresh hostd each.
pub fn bench_hostile(o: &HostileOptions) -> Result<Vec<HostileRow>> {
    if !crate::is_root() {
        return Err(err(
            "bench-hostile needs root (hostd sets the I/O priority of another process)",
        ));
    }
    if !(o.window_s.is_finite() && o.window_s > 0.0 && o.window_s <= 600.0) || o.trials == 0 {
        return Err(err(
            "--window-s must be in (0, 600] and --trials at least 1",
        ));
    }
    let mut rows = Vec::new();
    for input in INPUTS {
        let dir = std::env::temp_dir().join(format!("tandem-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
        let mut kids = Kids(Vec::new(), dir.clone());
        let mut pids = Vec::new();
        for _ in 0..2 {
            let c = crate::testkit::fake_qemu_command(&dir, &o.exe)
                .and_then(|mut c| c.args(["hostd", "fake-qemu"]).spawn())
                .map_err(|e| err(format!("starting a stand-in QEMU: {e}")))?;
            crate::testkit::wait_exec(c.id());
            pids.push(c.id());
            kids.0.push(c);
        }
        let hostd = Command::new(&o.exe)
            .args(["hostd", "run", "--vm"])
            .arg(format!(
                "name=flood,socket={},pid={}",
                dir.join("flood.sock").display(),
                pids[0]
            ))
            .arg("--vm")
            .arg(format!(
                "name=quiet,socket={},pid={}",
                dir.join("quiet.sock").display(),
                pids[1]
            ))
            .arg("--control")
            .arg(dir.join("control.sock"))
            .arg("--state-file")
            .arg(dir.join("hostd.state"))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| err(format!("{}: {e}", o.exe.display())))?;
        let hostd_pid = hostd.id();
        kids.0.push(hostd);
        wait_for(&dir.join("hostd-metrics.sock"))?;
        let mut q = guest(&dir.join("quiet.sock"), "quiet")?;
        rows.push(measure(input, &dir, hostd_pid, (&mut q, pids[1]), o)?);
        drop(q);
        drop(kids);
    }
    Ok(rows)
}

/// The rows as a table (the one in docs/hostile-inputs.md).
pub fn table(rows: &[HostileRow]) -> String {
    let mut s = String::from(
        "| hostile input | hostd CPU (% of one core) | quiet VM's boost latency p50 / p90 (ms) | hostd RSS (KiB) | GET /metrics (ms) |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.2} | {:.2} / {:.2} | {} | {:.1} |\n",
            r.input, r.cpu_pct, r.boost_p50_ms, r.boost_p90_ms, r.rss_kib, r.metrics_ms
        );
    }
    s
}
