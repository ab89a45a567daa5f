//! `tandem hostd bench-latency`: how long from the guest side seeing an exec
//! to hostd having applied the boost, over the unix transport; and hostd's
//! CPU and memory while idle and under a steady stream of hints.
//!
//! It starts a real hostd (`tandem hostd run`, a child process) serving one
//! VM whose "QEMU" is an idle child process (`tandem hostd fake-qemu` under
//! QEMU's name). For each hint the guest side
//! ([`GuestCore`], the same code as guestd's) takes an exec event, and the
//! HELP it returns is written to the channel; the clock stops when
//! `ioprio_get` on the VM's thread shows the boost. Then the process's exit
//! ends the need, the NO-HELP goes out and the benchmark waits for the
//! original priority to come back before the next hint.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use policy::{GuestEvent, Message, MS, PROTOCOL_VERSION};

use crate::guestd::GuestCore;
use crate::sys;
use crate::transport::{write_message, FrameReader};
use crate::{err, now_ns, Result};

pub struct LatencyOptions {
    pub exe: PathBuf,
    pub hints: usize,
    /// Hints per second in the load phase.
    pub rate: f64,
    /// Seconds of each of the idle and load phases.
    pub phase_s: f64,
}

/// Child processes stopped (SIGTERM, then SIGKILL) and a directory removed on drop.
pub(crate) struct Kids(pub(crate) Vec<Child>, pub(crate) PathBuf);
impl Drop for Kids {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

pub(crate) fn wait_for(p: &Path) -> Result<()> {
    let t = Instant::now();
    while !p.exists() {
        if t.elapsed() > Duration::from_secs(10) {
            return Err(err(format!("{} did not appear", p.display())));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

#[allow(clippy::too_many_lines)] // TODO(issue 24): split
pub fn bench_latency(o: &LatencyOptions) -> Result<String> {
    if !crate::is_root() {
        return Err(err(
            "bench-latency needs root (hostd sets I/O priorities of another process)",
        ));
    }
    let dir = std::env::temp_dir().join(format!("tandem-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
    let mut kids = Kids(Vec::new(), dir.clone());
    // hostd serves only a QEMU process: the stand-in is this binary's idle
    // `hostd fake-qemu` under QEMU's name.
    let vm = crate::testkit::fake_qemu_command(&dir, &o.exe)
        .and_then(|mut c| c.args(["hostd", "fake-qemu"]).spawn())
        .map_err(|e| err(format!("starting the stand-in QEMU: {e}")))?;
    let vm_pid = vm.id();
    crate::testkit::wait_exec(vm_pid);
    kids.0.push(vm);
    let sock = dir.join("vm.sock");
    let hostd = Command::new(&o.exe)
        .args(["hostd", "run", "--vm"])
        .arg(format!("name=bench,socket={},pid={vm_pid}", sock.display()))
        .arg("--control")
        .arg(dir.join("control.sock"))
        .arg("--state-file")
        .arg(dir.join("hostd.state"))
        .args(["--rate-limit", "1000000", "--rate-burst", "1000000"])
        .args([
            "--rate-limit-bytes",
            "100000000",
            "--rate-burst-bytes",
            "100000000",
        ])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("{}: {e}", o.exe.display())))?;
    let hostd_pid = hostd.id();
    kids.0.push(hostd);
    wait_for(&sock)?;
    wait_for(&dir.join("control.sock"))?;
    let orig = sys::ioprio_get(vm_pid).map_err(|e| err(e.to_string()))?;
    let boosted = sys::ioprio_value(sys::IOPRIO_CLASS_RT, 4);
    let mut s = UnixStream::connect(&sock).map_err(|e| err(e.to_string()))?;
    write_message(
        &mut s,
        &Message::Hello {
            version: PROTOCOL_VERSION,
            vm_name: "bench".into(),
        },
    )
    .map_err(|e| err(e.to_string()))?;
    let mut r = FrameReader::new(s.try_clone().map_err(|e| err(e.to_string()))?);
    match r.read_message() {
        Ok(Message::HelloAck { .. }) => {}
        other => return Err(err(format!("hostd answered {other:?}"))),
    }
    // Drain anything else hostd may send.
    std::thread::spawn(move || {
        let mut b = [0u8; 256];
        while matches!(r.get_ref().try_clone().map(|mut x| x.read(&mut b)), Ok(Ok(n)) if n > 0) {}
    });
    let wait_prio = |want: u32| -> bool {
        let t = Instant::now();
        loop {
            if sys::ioprio_get(vm_pid).ok() == Some(want) {
                return true;
            }
            if t.elapsed() > Duration::from_secs(2) {
                return false;
            }
            std::hint::spin_loop();
        }
    };
    let mut core = GuestCore::new(1000 * MS, 250 * MS);
    let mut lat = Vec::with_capacity(o.hints);
    let mut missed = 0;
    for i in 0..o.hints {
        let pid = 1_000_000 + i as u32;
        let t0 = Instant::now();
        let m = core.event(now_ns(), GuestEvent::Exec { pid });
        if let Some(m) = m {
            write_message(&mut s, &m).map_err(|e| err(e.to_string()))?;
        }
        if wait_prio(boosted) {
            lat.push(t0.elapsed().as_secs_f64() * 1e6);
        } else {
            missed += 1;
        }
        if let Some(m) = core.event(now_ns(), GuestEvent::ProcessExit { pid }) {
            write_message(&mut s, &m).map_err(|e| err(e.to_string()))?;
        }
        if !wait_prio(orig) {
            missed += 1;
        }
    }
    let n = lat.len();
    let p50 = pct(&mut lat, 0.5);
    let p99 = pct(&mut lat, 0.99);
    let max = pct(&mut lat, 1.0);

    let cpu = |secs: f64, load: Option<(&mut UnixStream, &mut GuestCore)>| -> (f64, u64) {
        let (c0, _) = sys::cpu_and_rss(hostd_pid).unwrap_or((0.0, 0));
        let t0 = Instant::now();
        let dur = Duration::from_secs_f64(secs);
        match load {
            None => std::thread::sleep(dur),
            Some((s, core)) => {
                let mut k = 0u64;
                while t0.elapsed() < dur {
                    let due = Duration::from_secs_f64(k as f64 / o.rate);
                    if let Some(w) = due.checked_sub(t0.elapsed()) {
                        std::thread::sleep(w);
                    }
                    let pid = 2_000_000 + k as u32;
                    for ev in [GuestEvent::Exec { pid }, GuestEvent::ProcessExit { pid }] {
                        if let Some(m) = core.event(now_ns(), ev) {
                            let _ = write_message(s, &m);
                        }
                    }
                    k += 1;
                }
            }
        }
        let el = t0.elapsed().as_secs_f64();
        let (c1, rss) = sys::cpu_and_rss(hostd_pid).unwrap_or((0.0, 0));
        ((c1 - c0) / el * 100.0, rss)
    };
    let (idle_cpu, idle_rss) = cpu(o.phase_s, None);
    let (load_cpu, load_rss) = cpu(o.phase_s, Some((&mut s, &mut core)));
    drop(s);
    drop(kids);
    Ok(format!(
        "hint latency (exec seen by the guest side -> boost applied by hostd, unix transport)\n\
         hints: {} measured, {missed} missed\n\
         p50: {p50:.1} us   p99: {p99:.1} us   max: {max:.1} us\n\
         hostd idle:             {idle_cpu:.2}% of one CPU, RSS {idle_rss} KiB ({:.0} s)\n\
         hostd at {:.0} hints/s: {load_cpu:.2}% of one CPU, RSS {load_rss} KiB ({:.0} s; each hint a HELP and a NO-HELP)\n",
        n, o.phase_s, o.rate, o.phase_s
    ))
}
