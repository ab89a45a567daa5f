//! Which of a QEMU process's threads do what, asked of QEMU itself over QMP
//! (its JSON machine protocol on a unix socket, `-qmp unix:PATH,server=on`):
//! `query-iothreads` gives the iothreads' thread ids, `query-cpus-fast` the
//! vCPU threads'. hostd's I/O actuator leaves the vCPU threads alone: they
//! run guest code, and the guest's disk requests are submitted by the
//! iothreads (`aio=native`/`io_uring` with `iothread=`), the main loop, or
//! the thread pool's workers (`aio=threads`), which QMP does not list and
//! which come and go; those are the VM's other threads, found in `/proc` at
//! each rescan. Without QMP every thread is boosted.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{err, Result};

/// What runs the guest's vCPUs, as QMP's `query-kvm` says (QEMU 7.2, the
/// version Debian 12 ships, has no `query-accelerators`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Accel {
    /// QEMU did not say (an older or a fake QEMU): taken as KVM, whose
    /// vCPU threads are all a CPU boost needs.
    #[default]
    Unknown,
    /// KVM: the guest's LAPIC timer is KVM's, in the kernel; it fires on
    /// the vCPU thread's own CPU.
    Kvm,
    /// KVM present or not but off: on Linux, TCG (QEMU's translator).
    Tcg,
}

/// A QEMU process's threads, as QMP names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QemuThreads {
    /// (iothread id, thread id)
    pub iothreads: Vec<(String, u32)>,
    /// (vCPU index, thread id)
    pub vcpus: Vec<(u32, u32)>,
    pub accel: Accel,
}

impl QemuThreads {
    /// The threads of QEMU process `pid` outside the vCPUs that deliver
    /// the vCPUs' timer interrupts, and so belong to a CPU boost with them.
    /// Under TCG without icount (QEMU's default, MTTCG or not) the guest's
    /// LAPIC timer is a `QEMU_CLOCK_VIRTUAL` timer of the main loop
    /// (hw/intc/apic.c, `apic_realize`), run by the main-loop thread
    /// (util/main-loop.c, `main_loop_wait` -> `qemu_clock_run_all_timers`),
    /// which kicks the vCPU thread (accel/tcg: `tcg_handle_interrupt` ->
    /// `qemu_cpu_kick`); only with icount does the vCPU thread run them
    /// itself (`tcg-accel-ops-rr.c`, `icount_handle_deadline`). The main
    /// loop is QEMU's first thread (`main` -> `qemu_main_loop`): its thread
    /// id is the process id. Under KVM (or unknown): none.
    pub fn timer_tids(&self, pid: u32) -> Vec<u32> {
        match self.accel {
            Accel::Tcg => vec![pid],
            Accel::Kvm | Accel::Unknown => Vec::new(),
        }
    }

    /// The vCPUs' thread ids.
    pub fn vcpu_tids(&self) -> Vec<u32> {
        self.vcpus.iter().map(|&(_, tid)| tid).collect()
    }
}

/// The process listening on QMP socket `path` (QEMU), from the kernel's
/// record of the peer (`SO_PEERCRED`): hostd needs no `pid=` for a VM
/// declared with `qmp=`.
pub fn peer_pid(path: &Path) -> Result<u32> {
    let s = UnixStream::connect(path).map_err(|e| err(format!("QMP {}: {e}", path.display())))?;
    let cred = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| err(format!("QMP {}: no peer process ({e})", path.display())))?;
    if cred.pid() <= 0 {
        return Err(err(format!("QMP {}: no peer process", path.display())));
    }
    Ok(cred.pid() as u32)
}

/// How long a QMP exchange may take: QEMU answers these queries at once
/// unless its main loop is stuck.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);

struct Qmp {
    r: BufReader<UnixStream>,
    w: UnixStream,
    deadline: Instant,
}

impl Qmp {
    /// The next line that is not an asynchronous event.
    fn reply(&mut self) -> Result<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            if Instant::now() > self.deadline {
                return Err(err("QMP: no answer in time"));
            }
            match self.r.read_line(&mut line) {
                Ok(0) => return Err(err("QMP: QEMU closed the socket")),
                Ok(_) => {}
                Err(e) => return Err(err(format!("QMP: {e}"))),
            }
            let v: Value = serde_json::from_str(line.trim())
                .map_err(|e| err(format!("QMP: not JSON ({e}): {:?}", line.trim())))?;
            if v.get("event").is_none() {
                return Ok(v);
            }
        }
    }

    fn execute(&mut self, cmd: &str) -> Result<Value> {
        let mut line = json!({ "execute": cmd }).to_string();
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .map_err(|e| err(format!("QMP: {e}")))?;
        let v = self.reply()?;
        if let Some(e) = v.get("error") {
            return Err(err(format!("QMP {cmd}: {e}")));
        }
        v.get("return")
            .cloned()
            .ok_or_else(|| err(format!("QMP {cmd}: no return in {v}")))
    }
}

fn tid_of(v: &Value) -> Option<u32> {
    v.get("thread-id")?
        .as_u64()
        .and_then(|t| u32::try_from(t).ok())
}

/// Ask QEMU at `socket` for its iothreads and vCPU threads.
pub fn query_threads(socket: &Path) -> Result<QemuThreads> {
    let s =
        UnixStream::connect(socket).map_err(|e| err(format!("QMP {}: {e}", socket.display())))?;
    s.set_read_timeout(Some(QMP_TIMEOUT))
        .map_err(|e| err(e.to_string()))?;
    let w = s.try_clone().map_err(|e| err(e.to_string()))?;
    let mut q = Qmp {
        r: BufReader::new(s),
        w,
        deadline: Instant::now() + QMP_TIMEOUT,
    };
    let greeting = q.reply()?;
    if greeting.get("QMP").is_none() {
        return Err(err(format!("QMP: unexpected greeting {greeting}")));
    }
    q.execute("qmp_capabilities")?;
    let mut t = QemuThreads::default();
    if let Some(list) = q.execute("query-iothreads")?.as_array() {
        for io in list {
            if let (Some(id), Some(tid)) = (io.get("id").and_then(Value::as_str), tid_of(io)) {
                t.iothreads.push((id.to_string(), tid));
            }
        }
    }
    // A QEMU that does not answer `query-kvm` as QEMU 7.2 does leaves the
    // accelerator unknown rather than failing the thread map.
    if let Ok(kvm) = q.execute("query-kvm") {
        t.accel = match kvm.get("enabled").and_then(Value::as_bool) {
            Some(true) => Accel::Kvm,
            Some(false) => Accel::Tcg,
            None => Accel::Unknown,
        };
    }
    if let Some(list) = q.execute("query-cpus-fast")?.as_array() {
        for c in list {
            let idx = c
                .get("cpu-index")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok());
            if let (Some(idx), Some(tid)) = (idx, tid_of(c)) {
                t.vcpus.push((idx, tid));
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    /// The QMP socket's peer is the process listening on it (python3 plays
    /// that process; the test fails when python3 is missing).
    #[test]
    #[ignore = "needs python3: a listening process other than the test"]
    fn peer_pid_is_the_listening_process() {
        let dir = std::env::temp_dir().join(format!("tandem-qmp-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("qmp.sock");
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind({:?})\ns.listen(1)\ntime.sleep(30)",
                path.to_str().unwrap()
            ))
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !path.exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let got = peer_pid(&path);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(got.unwrap(), child.id());
        assert!(peer_pid(&dir.join("missing.sock")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;
    use std::os::unix::net::UnixListener;

    /// A QMP server that answers like QEMU 7.2, with an event in between.
    /// `kvm`: the answer to `query-kvm`, or `None` for a QEMU without it.
    fn fake_qemu(
        path: &Path,
        iothreads: &str,
        cpus: &str,
        kvm: Option<&str>,
    ) -> std::thread::JoinHandle<()> {
        let l = UnixListener::bind(path).unwrap();
        let (io, cpu, kvm) = (
            iothreads.to_string(),
            cpus.to_string(),
            kvm.map(str::to_string),
        );
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            writeln!(w, r#"{{"QMP": {{"version": {{"qemu": {{"micro": 22, "minor": 2, "major": 7}}}}, "capabilities": ["oob"]}}}}"#).unwrap();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap() > 0 {
                let v: Value = serde_json::from_str(line.trim()).unwrap();
                line.clear();
                match v["execute"].as_str().unwrap() {
                    "qmp_capabilities" => writeln!(w, r#"{{"return": {{}}}}"#).unwrap(),
                    "query-iothreads" => {
                        writeln!(w, r#"{{"event": "RESUME", "timestamp": {{"seconds": 1, "microseconds": 2}}}}"#).unwrap();
                        writeln!(w, r#"{{"return": {io}}}"#).unwrap();
                    }
                    "query-cpus-fast" => writeln!(w, r#"{{"return": {cpu}}}"#).unwrap(),
                    "query-kvm" if kvm.is_some() => {
                        writeln!(w, r#"{{"return": {}}}"#, kvm.as_deref().unwrap()).unwrap()
                    }
                    _ => writeln!(
                        w,
                        r#"{{"error": {{"class": "CommandNotFound", "desc": "no"}}}}"#
                    )
                    .unwrap(),
                }
            }
        })
    }

    #[test]
    fn threads_from_qmp() {
        let dir = std::env::temp_dir().join(format!("tandem-qmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("qmp.sock");
        let h = fake_qemu(
            &sock,
            r#"[{"poll-shrink": 0, "thread-id": 4242, "poll-grow": 0, "poll-max-ns": 32768, "id": "io0"}]"#,
            r#"[{"thread-id": 4243, "props": {"core-id": 0, "thread-id": 0, "socket-id": 0}, "qom-path": "/machine/unattached/device[0]", "cpu-index": 0, "target": "x86_64"}, {"thread-id": 4244, "cpu-index": 1, "target": "x86_64"}]"#,
            // QEMU 7.2 under TCG, as `qemu-system-x86_64 -accel tcg` answers.
            Some(r#"{"enabled": false, "present": true}"#),
        );
        let t = query_threads(&sock).unwrap();
        h.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(t.iothreads, vec![("io0".to_string(), 4242)]);
        assert_eq!(t.vcpus, vec![(0, 4243), (1, 4244)]);
        assert_eq!(t.accel, Accel::Tcg);
        // Under TCG the main loop (thread id = process id) fires the timers.
        assert_eq!(t.timer_tids(4240), vec![4240]);
    }

    /// Under KVM, or a QEMU that does not answer `query-kvm`, the vCPU
    /// threads alone.
    #[test]
    fn kvm_or_unknown_adds_no_timer_thread() {
        for (n, kvm, accel) in [
            (1, Some(r#"{"enabled": true, "present": true}"#), Accel::Kvm),
            (2, None, Accel::Unknown),
        ] {
            let dir =
                std::env::temp_dir().join(format!("tandem-qmp-kvm{n}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let sock = dir.join("qmp.sock");
            let h = fake_qemu(&sock, "[]", r#"[{"thread-id": 7, "cpu-index": 0}]"#, kvm);
            let t = query_threads(&sock).unwrap();
            h.join().unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(t.accel, accel);
            assert_eq!(t.vcpu_tids(), vec![7]);
            assert!(t.timer_tids(5).is_empty());
        }
    }

    #[test]
    fn a_missing_socket_is_a_clear_error() {
        let e = query_threads(Path::new("/nonexistent/qmp.sock")).unwrap_err();
        assert!(e.0.contains("/nonexistent/qmp.sock"), "{}", e.0);
    }
}
