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
//!
//! With `cpu`, the hint is a CPU one: the stand-in QEMU has a vCPU thread
//! that its QMP socket names, hostd runs with `--cpu-boost rr`, each hint
//! is a HELP for the CPU (what guestd sends for `tandem hint --cpu`), and
//! the clock stops when `sched_getscheduler` on the vCPU thread shows
//! `SCHED_RR`; a NO-HELP for the CPU ends it.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use policy::{GuestEvent, HelpReason, Message, Resource, MS, PROTOCOL_VERSION};

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
    /// Time CPU hints (vCPU boosts) instead of I/O ones.
    pub cpu: bool,
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

/// The benchmark's rig: the stand-in QEMU, a real hostd serving it (both
/// stopped on drop), and the guest side of its channel.
struct Rig {
    /// The channel, after the Hello (closed before the processes stop).
    s: UnixStream,
    /// The guest side's decisions (guestd's own code).
    core: GuestCore,
    vm_pid: u32,
    hostd_pid: u32,
    /// Dropped last (fields drop in order): stops hostd and the stand-in.
    _kids: Kids,
}

impl Rig {
    /// Starts the stand-in QEMU and a hostd serving it, and says Hello.
    fn start(o: &LatencyOptions) -> Result<Rig> {
        let dir = std::env::temp_dir().join(format!("tandem-latency-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
        let mut kids = Kids(Vec::new(), dir.clone());
        // hostd serves only a QEMU process: the stand-in is this binary's
        // idle `hostd fake-qemu` under QEMU's name.
        let qmp = dir.join("qmp.sock");
        let vm = crate::testkit::fake_qemu_command(&dir, &o.exe)
            .and_then(|mut c| {
                c.args(["hostd", "fake-qemu"]);
                if o.cpu {
                    c.args(["--vcpus", "1", "--qmp"]).arg(&qmp);
                }
                c.spawn()
            })
            .map_err(|e| err(format!("starting the stand-in QEMU: {e}")))?;
        let vm_pid = vm.id();
        crate::testkit::wait_exec(vm_pid);
        kids.0.push(vm);
        let sock = dir.join("vm.sock");
        let mut spec = format!("name=bench,socket={},pid={vm_pid}", sock.display());
        if o.cpu {
            wait_for(&qmp)?;
            spec += &format!(",qmp={}", qmp.display());
        }
        let hostd = Command::new(&o.exe)
            .args(["hostd", "run", "--vm"])
            .arg(spec)
            .args(if o.cpu {
                &["--cpu-boost", "rr"][..]
            } else {
                &[]
            })
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
        let s = hello(&sock)?;
        Ok(Rig {
            _kids: kids,
            vm_pid,
            hostd_pid,
            s,
            core: GuestCore::new(1000 * MS, 250 * MS),
        })
    }

    /// `n` hints, one at a time: the latency of each (µs) from the guest
    /// side's event to `boosted()`, and how many were missed (no boost, or
    /// no restore by `restored()`, within 2 s). A CPU hint is the HELP for
    /// the CPU itself, ended by a NO-HELP.
    fn hint_latencies(
        &mut self,
        n: usize,
        cpu: bool,
        probe: &Probe<'_>,
    ) -> Result<(Vec<f64>, usize)> {
        let mut lat = Vec::with_capacity(n);
        let mut missed = 0;
        for i in 0..n {
            let pid = 1_000_000 + i as u32;
            let t0 = Instant::now();
            if cpu {
                self.write(&Message::Help {
                    resource: Resource::Cpu,
                    reason: HelpReason::Explicit,
                    duration_hint_ms: 1000,
                })?;
            } else {
                self.send(GuestEvent::Exec { pid })?;
            }
            if poll(probe.boosted) {
                lat.push(t0.elapsed().as_secs_f64() * 1e6);
            } else {
                missed += 1;
            }
            if cpu {
                self.write(&Message::NoHelp {
                    resource: Resource::Cpu,
                })?;
            } else {
                self.send(GuestEvent::ProcessExit { pid })?;
            }
            if !poll(probe.restored) {
                missed += 1;
            }
        }
        Ok((lat, missed))
    }

    fn write(&mut self, m: &Message) -> Result<()> {
        write_message(&mut self.s, m).map_err(|e| err(e.to_string()))
    }

    /// Passes a guest event to the guest side and its message, if any, to hostd.
    fn send(&mut self, ev: GuestEvent) -> Result<()> {
        if let Some(m) = self.core.event(now_ns(), ev) {
            write_message(&mut self.s, &m).map_err(|e| err(e.to_string()))?;
        }
        Ok(())
    }

    /// hostd's CPU use (% of one CPU) and RSS (KiB) over `secs`, idle or
    /// under `rate` hints a second (each a HELP and a NO-HELP).
    fn cpu_use(&mut self, secs: f64, rate: Option<f64>) -> (f64, u64) {
        let (c0, _) = sys::cpu_and_rss(self.hostd_pid).unwrap_or((0.0, 0));
        let t0 = Instant::now();
        let dur = Duration::from_secs_f64(secs);
        match rate {
            None => std::thread::sleep(dur),
            Some(rate) => {
                let mut k = 0u64;
                while t0.elapsed() < dur {
                    let due = Duration::from_secs_f64(k as f64 / rate);
                    if let Some(w) = due.checked_sub(t0.elapsed()) {
                        std::thread::sleep(w);
                    }
                    let pid = 2_000_000 + k as u32;
                    for ev in [GuestEvent::Exec { pid }, GuestEvent::ProcessExit { pid }] {
                        let _ = self.send(ev);
                    }
                    k += 1;
                }
            }
        }
        let el = t0.elapsed().as_secs_f64();
        let (c1, rss) = sys::cpu_and_rss(self.hostd_pid).unwrap_or((0.0, 0));
        ((c1 - c0) / el * 100.0, rss)
    }
}

/// Connects to a VM's channel at `sock` as a guest daemon does, and says
/// Hello; anything hostd sends afterwards is read and dropped.
fn hello(sock: &Path) -> Result<UnixStream> {
    let mut s = UnixStream::connect(sock).map_err(|e| err(e.to_string()))?;
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
    std::thread::spawn(move || {
        let mut b = [0u8; 256];
        while matches!(r.get_ref().try_clone().map(|mut x| x.read(&mut b)), Ok(Ok(n)) if n > 0) {}
    });
    Ok(s)
}

/// How the benchmark sees a boost: applied, and undone.
struct Probe<'a> {
    boosted: &'a dyn Fn() -> bool,
    restored: &'a dyn Fn() -> bool,
}

/// Spins until `ok()` (true) or 2 s have passed (false): a spin, not a
/// sleep, so the latency measured is hostd's and not the wake-up's.
fn poll(ok: &dyn Fn() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if ok() {
            return true;
        }
        if t.elapsed() > Duration::from_secs(2) {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// The stand-in QEMU's vCPU thread (named `CPU 0/KVM`).
fn vcpu_thread(pid: u32) -> Result<u32> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let found = sys::threads(pid).ok().and_then(|ts| {
            ts.into_iter().find(|t| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                    .is_ok_and(|c| c.starts_with("CPU "))
            })
        });
        if let Some(tid) = found {
            return Ok(tid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(err("the stand-in QEMU's vCPU thread did not appear"))
}

pub fn bench_latency(o: &LatencyOptions) -> Result<String> {
    if !crate::is_root() {
        return Err(err(
            "bench-latency needs root (hostd sets I/O priorities of another process)",
        ));
    }
    let mut rig = Rig::start(o)?;
    let vm_pid = rig.vm_pid;
    let (mut lat, missed) = if o.cpu {
        let vcpu = vcpu_thread(vm_pid)?;
        let rr = || sys::sched_get(vcpu).is_ok_and(|s| s.policy == libc::SCHED_RR);
        let probe = Probe {
            boosted: &rr,
            restored: &|| !rr(),
        };
        rig.hint_latencies(o.hints, true, &probe)?
    } else {
        let orig = sys::ioprio_get(vm_pid).map_err(|e| err(e.to_string()))?;
        let boosted = sys::ioprio_value(sys::IOPRIO_CLASS_RT, 4);
        let probe = Probe {
            boosted: &|| sys::ioprio_get(vm_pid).ok() == Some(boosted),
            restored: &|| sys::ioprio_get(vm_pid).ok() == Some(orig),
        };
        rig.hint_latencies(o.hints, false, &probe)?
    };
    let n = lat.len();
    let p50 = pct(&mut lat, 0.5);
    let p99 = pct(&mut lat, 0.99);
    let max = pct(&mut lat, 1.0);
    let (idle_cpu, idle_rss) = rig.cpu_use(o.phase_s, None);
    let (load_cpu, load_rss) = rig.cpu_use(o.phase_s, Some(o.rate));
    drop(rig);
    let what = if o.cpu {
        "CPU hint sent by the guest side -> vCPU at SCHED_RR"
    } else {
        "exec seen by the guest side -> boost applied by hostd"
    };
    Ok(format!(
        "hint latency ({what}, unix transport)\n\
         hints: {} measured, {missed} missed\n\
         p50: {p50:.1} us   p99: {p99:.1} us   max: {max:.1} us\n\
         hostd idle:             {idle_cpu:.2}% of one CPU, RSS {idle_rss} KiB ({:.0} s)\n\
         hostd at {:.0} hints/s: {load_cpu:.2}% of one CPU, RSS {load_rss} KiB ({:.0} s; each hint a HELP and a NO-HELP)\n",
        n, o.phase_s, o.rate, o.phase_s
    ))
}
