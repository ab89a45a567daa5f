//! VM mode of the real runner: cells with a `guest_sched` run in a real QEMU
//! guest whose disk image lives on the (emulated) device, next to the host
//! workload's files, as in the CLOUD 2014 experiment.
//!
//! The host side (this module) boots the guest built by `tandem vm image`,
//! drives it over a virtio-serial control port (`tandem.bench`, one JSON
//! object per line, served in the guest by [`crate::guest`]), runs the host
//! workload itself, drops the host's caches before every start, and for
//! `help-*` coordination runs `tandem hostd` against the guest's second port
//! (`tandem.help`), where `tandem guestd` asks for help.
//!
//! QEMU runs with KVM only when `/dev/kvm` can really run a guest: the device
//! node can exist where hardware virtualization is not available (nested
//! setups without VMX/SVM), and QEMU then hangs in its first `KVM_RUN`. So the
//! probe runs a two-byte guest (`hlt`) through the KVM API in a child process
//! with a timeout, and falls back to TCG.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{check_interrupted, run_err, Error, Result};

/// The control port's name in the guest (the image's init runs
/// `tandem vm agent --port tandem.bench` when the port exists).
pub const CONTROL_PORT: &str = "tandem.bench";
/// The port guestd talks to hostd through.
pub const HELP_PORT: &str = "tandem.help";
/// The guest's name in hostd (the run has one VM).
pub const VM_NAME: &str = "vm1";
/// Where the guest mounts its data disk (the image's init).
pub const GUEST_DATA: &str = "/data";

/// How long a TCG guest may take from QEMU's start to the agent's `ready`
/// line. A TCG boot takes about 5 s on an idle machine; the host workload
/// is not running yet, but the emulated disk serves the first reads.
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the guest may take to answer a request that is not a start.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a QEMU whose control socket broke gets to exit before the runner
/// says it still runs: QEMU closes its sockets as it exits, and its exit
/// (flushing its log, the disk's cache) takes milliseconds; 5 s leaves room
/// for a loaded host.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// How long the KVM probe's guest may take to halt.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The accelerator QEMU runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// TCG, and why KVM was not used.
    Tcg(String),
}

impl Accel {
    pub fn name(&self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg(_) => "tcg",
        }
    }
}

/// KVM when a guest really runs on `/dev/kvm`, TCG otherwise. Two steps:
/// a real-mode `hlt` through the KVM API (cheap; refuses a missing or
/// broken node), then the guest kernel itself under QEMU with KVM, without
/// an initramfs, which must get as far as looking for its root filesystem
/// (and panic) within [`KVM_BOOT_PROBE_TIMEOUT`]. The second step catches
/// hosts where KVM runs real-mode code but a kernel hangs once it leaves
/// real mode (seen with nested virtualization that lacks features).
pub fn probe_accel(exe: &Path, kernel: &Path, dir: &Path) -> Accel {
    if let Err(why) = kvm_runs_a_guest(exe) {
        return Accel::Tcg(why);
    }
    match kvm_boots_kernel(kernel, dir) {
        Ok(()) => Accel::Kvm,
        Err(why) => Accel::Tcg(why),
    }
}

/// How long the guest kernel may take under KVM to reach its root mount.
/// A kernel reaches it in well under a second with KVM (about 1.6 s under
/// TCG on this project's test machine).
pub const KVM_BOOT_PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// What the kernel prints when it has initialised everything and finds no
/// root filesystem (init/do_mounts.c).
const ROOT_PANIC: &str = "VFS: Unable to mount root fs";

fn kvm_boots_kernel(kernel: &Path, dir: &Path) -> std::result::Result<(), String> {
    let log = dir.join("kvm-probe.log");
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(qemu_binary());
    cmd.args(["-accel", "kvm", "-cpu", "host", "-m", "256", "-smp", "1"])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(kernel)
        .args(["-append", "console=ttyS0 panic=-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGKILL);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", qemu_binary()))?;
    let t0 = Instant::now();
    let booted = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(ROOT_PANIC) {
            break true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            break std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(ROOT_PANIC);
        }
        if t0.elapsed() > KVM_BOOT_PROBE_TIMEOUT {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    kill_qemu(&mut child);
    let _ = std::fs::remove_file(&log);
    if booted {
        Ok(())
    } else {
        Err(format!(
            "/dev/kvm runs a real-mode guest, but the guest kernel under QEMU with KVM did not reach its root mount in {} s (no usable hardware virtualization)",
            KVM_BOOT_PROBE_TIMEOUT.as_secs()
        ))
    }
}

/// The stable KVM API version (KVM_API_VERSION in include/uapi/linux/kvm.h).
const KVM_API: i32 = 12;
/// Where the probe guest's one page of memory sits in guest-physical space.
const PROBE_GUEST_ADDR: u64 = 0x1000;

/// Run `hlt` in real mode through the KVM API, in a child process
/// (`tandem bench kvm-probe`, see [`kvm_probe_main`]): a broken KVM can hang
/// in `KVM_RUN`, and a child can be killed after a timeout where a thread
/// could not.
fn kvm_runs_a_guest(exe: &Path) -> std::result::Result<(), String> {
    use nix::unistd::{access, AccessFlags};
    if access("/dev/kvm", AccessFlags::R_OK | AccessFlags::W_OK).is_err() {
        return Err("/dev/kvm is missing or not accessible".into());
    }
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "kvm-probe"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGKILL);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting the KVM probe ({}): {e}", exe.display()))?;
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                return match st.code() {
                    Some(0) => Ok(()),
                    Some(1) => Err("/dev/kvm: KVM_GET_API_VERSION or KVM_CREATE_VM failed".into()),
                    Some(2) => Err("/dev/kvm: setting up a vCPU failed".into()),
                    Some(3) => Err("/dev/kvm: KVM_RUN failed".into()),
                    Some(4) => Err("/dev/kvm: the probe guest did not halt".into()),
                    Some(c) => Err(format!("/dev/kvm probe exited with {c}")),
                    None => Err("/dev/kvm probe was killed".into()),
                };
            }
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the KVM probe: {e}")),
        }
        if t0.elapsed() > KVM_PROBE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "/dev/kvm exists but a guest does not run on it (KVM_RUN did not return in {} s: no hardware virtualization)",
                KVM_PROBE_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One page of guest memory: KVM maps host memory into the guest by whole
/// pages, so its host address must be page-aligned.
#[repr(C, align(4096))]
struct GuestPage([u8; 4096]);

/// The probe proper (`tandem bench kvm-probe`): one vCPU in real mode runs
/// `hlt` at [`PROBE_GUEST_ADDR`]. Returns the exit code
/// [`kvm_runs_a_guest`] reads: 0 halted, 1 no VM, 2 no vCPU, 3 `KVM_RUN`
/// failed, 4 the guest did something else.
pub fn kvm_probe_main() -> i32 {
    use kvm_ioctls::{Kvm, VcpuExit};
    // Declared before the VM, so dropped after it on every return.
    let mut page = Box::new(GuestPage([0; 4096]));
    page.0[0] = 0xf4; // hlt
    let Ok(kvm) = Kvm::new() else { return 1 };
    if kvm.get_api_version() != KVM_API {
        return 1;
    }
    let Ok(vm) = kvm.create_vm() else { return 1 };
    let region = kvm_bindings::kvm_userspace_memory_region {
        slot: 0,
        flags: 0,
        guest_phys_addr: PROBE_GUEST_ADDR,
        memory_size: page.0.len() as u64,
        userspace_addr: page.0.as_mut_ptr() as u64,
    };
    // SAFETY: the region is `page`, a live, page-aligned allocation of
    // exactly `memory_size` bytes that outlives `vm` (declared before it).
    // kvm-ioctls marks this call unsafe because the guest may write that
    // memory behind Rust's back; nothing here touches `page` afterwards.
    if unsafe { vm.set_user_memory_region(region) }.is_err() {
        return 2;
    }
    let Ok(mut vcpu) = vm.create_vcpu(0) else {
        return 2;
    };
    // Real mode with CS base 0 and selector 0, so CS:IP = PROBE_GUEST_ADDR.
    let Ok(mut sregs) = vcpu.get_sregs() else {
        return 2;
    };
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    if vcpu.set_sregs(&sregs).is_err() {
        return 2;
    }
    // Bit 1 of RFLAGS is reserved and always set.
    let regs = kvm_bindings::kvm_regs {
        rip: PROBE_GUEST_ADDR,
        rflags: 0x2,
        ..Default::default()
    };
    if vcpu.set_regs(&regs).is_err() {
        return 2;
    }
    match vcpu.run() {
        Ok(VcpuExit::Hlt) => 0,
        Ok(_) => 4,
        Err(_) => 3,
    }
}

/// How the guest's disk is attached.
#[derive(Clone, Debug)]
pub struct DiskOptions {
    /// QEMU's `aio=`: `native` (one iothread submits with Linux AIO; the
    /// default, as in the simulator), `io_uring` or `threads` (a pool).
    pub aio: String,
    /// QEMU's `cache=`: `none` (O_DIRECT, so the host page cache does not
    /// fake a fast disk), or `writeback`, `writethrough`, `directsync`,
    /// `unsafe`.
    pub cache: String,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            aio: "native".into(),
            cache: "none".into(),
        }
    }
}

pub const AIO_MODES: &[&str] = &["native", "io_uring", "threads"];
/// Accelerators `--vm-accel` forces instead of probing.
pub const ACCELS: &[&str] = &["kvm", "tcg"];
pub const CACHE_MODES: &[&str] = &["none", "writeback", "writethrough", "directsync", "unsafe"];

impl DiskOptions {
    pub fn validate(&self) -> Result<()> {
        if !AIO_MODES.contains(&self.aio.as_str()) {
            return Err(Error::Usage(format!(
                "--vm-aio {:?}: accepted: {}",
                self.aio,
                AIO_MODES.join(", ")
            )));
        }
        if !CACHE_MODES.contains(&self.cache.as_str()) {
            return Err(Error::Usage(format!(
                "--vm-cache {:?}: accepted: {}",
                self.cache,
                CACHE_MODES.join(", ")
            )));
        }
        // Linux AIO is only asynchronous with O_DIRECT; QEMU refuses
        // aio=native otherwise.
        if self.aio == "native" && !matches!(self.cache.as_str(), "none" | "directsync") {
            return Err(Error::Usage(format!(
                "--vm-aio native needs --vm-cache none or directsync (O_DIRECT), not {}",
                self.cache
            )));
        }
        Ok(())
    }
}

/// Everything a guest boot needs.
pub struct BootSpec<'a> {
    pub accel: &'a Accel,
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    pub disk: &'a Path,
    pub disk_opts: &'a DiskOptions,
    pub mem_mib: u32,
    /// Sockets, console log and QEMU's files go here.
    pub dir: &'a Path,
    /// The disk through a vhost-user-blk backend listening here
    /// (`vhost-ioprio`, [`crate::vhost`]) instead of QEMU's own virtio-blk.
    pub vhost_socket: Option<&'a Path>,
}

/// A running guest: QEMU and the control connection to the agent.
pub struct Guest {
    pub qemu: Child,
    pub dir: PathBuf,
    ctl: Option<(BufReader<UnixStream>, UnixStream)>,
    /// What the agent said when it came up.
    pub hello: Value,
    /// The id of the last request: answers carry their request's id.
    last_id: u64,
    /// The disk's vhost-user-blk backend, checked with QEMU at every look.
    backend: Option<crate::vhost::Backend>,
}

pub fn qemu_binary() -> &'static str {
    "qemu-system-x86_64"
}

/// QEMU's command line for a boot.
pub fn qemu_args(b: &BootSpec) -> Vec<String> {
    let d = b.dir;
    let mut a: Vec<String> = Vec::new();
    let mut push = |s: &str| a.push(s.to_string());
    push("-accel");
    push(b.accel.name());
    push("-m");
    push(&b.mem_mib.to_string());
    // One vCPU: the host has two cores, and under TCG each vCPU is a busy
    // host thread next to the host workload.
    push("-smp");
    push("1");
    push("-nodefaults");
    push("-display");
    push("none");
    push("-no-reboot");
    push("-serial");
    push(&format!("file:{}", d.join("console.log").display()));
    push("-kernel");
    push(&b.kernel.display().to_string());
    push("-initrd");
    push(&b.initramfs.display().to_string());
    push("-append");
    push(vmimage::KERNEL_CMDLINE);
    a.extend(disk_args(b));
    let mut push = |s: &str| a.push(s.to_string());
    push("-device");
    push("virtio-serial-pci");
    for (id, name) in [("ctl", CONTROL_PORT), ("help", HELP_PORT)] {
        push("-chardev");
        push(&format!(
            "socket,id={id},path={},server=on,wait=off",
            d.join(format!("{id}.sock")).display()
        ));
        push("-device");
        push(&format!("virtserialport,chardev={id},name={name}"));
    }
    push("-qmp");
    push(&format!(
        "unix:{},server=on,wait=off",
        d.join("qmp.sock").display()
    ));
    a
}

/// QEMU's arguments for the guest's disk.
///
/// Built in: the disk's requests are submitted by one named iothread (with
/// aio=native or io_uring) or by its pool of workers (aio=threads): the
/// threads the host scheduler sees, and hostd boosts.
///
/// Through a vhost-user-blk backend: the backend maps the guest's memory to
/// read and write the requests' buffers, so that memory is a shared memfd
/// (`share=on`; QEMU's docs/interop/vhost-user.rst), made the guest's RAM
/// through a NUMA node; the backend's own threads submit the I/O.
fn disk_args(b: &BootSpec) -> Vec<String> {
    let v = match b.vhost_socket {
        Some(sock) => vec![
            "-object".into(),
            format!("memory-backend-memfd,id=mem,size={}M,share=on", b.mem_mib),
            "-numa".into(),
            "node,memdev=mem".into(),
            "-chardev".into(),
            format!("socket,id=vhb,path={}", sock.display()),
            "-device".into(),
            "vhost-user-blk-pci,chardev=vhb,num-queues=1".into(),
        ],
        None => vec![
            "-object".into(),
            "iothread,id=io0".into(),
            "-drive".into(),
            format!(
                "file={},if=none,id=vd0,format=raw,cache={},aio={}",
                b.disk.display(),
                b.disk_opts.cache,
                b.disk_opts.aio
            ),
            "-device".into(),
            "virtio-blk-pci,drive=vd0,iothread=io0".into(),
        ],
    };
    v
}

/// The last lines of the guest's console, for errors.
fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(15);
    lines[from..].join("\n")
}

impl Guest {
    /// Start QEMU and wait for the agent's `ready` line.
    pub fn boot(b: &BootSpec) -> Result<Guest> {
        Guest::boot_with(b, None)
    }

    /// [`Guest::boot`] with the disk's vhost-user-blk backend (listening on
    /// `b.vhost_socket`), which the guest then owns: checked at every look
    /// at QEMU, stopped after it.
    pub fn boot_with(b: &BootSpec, backend: Option<crate::vhost::Backend>) -> Result<Guest> {
        Guest::boot_or_died(b, backend).map_err(|(e, _)| e)
    }

    /// [`Guest::boot_with`], its error paired with whether QEMU had exited
    /// by then (the guest powered off or panicked while it booted, rather
    /// than QEMU failing to start or the guest being slow).
    pub fn boot_or_died(
        b: &BootSpec,
        backend: Option<crate::vhost::Backend>,
    ) -> std::result::Result<Guest, (Error, bool)> {
        let mut g = Guest::spawn(b, backend).map_err(|e| (e, false))?;
        match g.wait_ready() {
            Ok(()) => Ok(g),
            Err(e) => {
                let died = g.is_dead();
                Err((e, died))
            }
        }
    }

    /// QEMU started on `b`.
    fn spawn(b: &BootSpec, backend: Option<crate::vhost::Backend>) -> Result<Guest> {
        std::fs::create_dir_all(b.dir).map_err(|e| run_err(format!("{}: {e}", b.dir.display())))?;
        let log = std::fs::File::create(b.dir.join("qemu.log"))
            .map_err(|e| run_err(format!("qemu.log: {e}")))?;
        let log2 = log.try_clone().map_err(|e| run_err(e.to_string()))?;
        let mut cmd = Command::new(qemu_binary());
        cmd.args(qemu_args(b))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // QEMU dies with the run.
        devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGKILL);
        let qemu = cmd.spawn().map_err(|e| {
            run_err(format!(
                "starting {}: {e} (install Debian's qemu-system-x86)",
                qemu_binary()
            ))
        })?;
        Ok(Guest {
            qemu,
            dir: b.dir.to_path_buf(),
            ctl: None,
            hello: Value::Null,
            last_id: 0,
            backend,
        })
    }

    /// Connects to the control socket and waits for the agent's hello.
    fn wait_ready(&mut self) -> Result<()> {
        let g = self;
        let t0 = Instant::now();
        let sock = g.dir.join("ctl.sock");
        let stream = loop {
            check_interrupted()?;
            g.check_alive()?;
            if let Ok(s) = UnixStream::connect(&sock) {
                break s;
            }
            if t0.elapsed() > BOOT_TIMEOUT {
                return Err(run_err("QEMU did not open its control socket"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| run_err(e.to_string()))?;
        let w = stream.try_clone().map_err(|e| run_err(e.to_string()))?;
        g.ctl = Some((BufReader::new(stream), w));
        // The agent's first words may be lost if it spoke before the host
        // connected: ask until it answers.
        let hello = loop {
            match g.call(json!({"op": "hello"}), Some(Duration::from_secs(2))) {
                Ok(v) => break v,
                Err(e)
                    if t0.elapsed() < BOOT_TIMEOUT && e.to_string().contains("did not answer") => {}
                Err(e) => return Err(e),
            }
        };
        g.hello = hello;
        Ok(())
    }

    /// QEMU's QMP socket (`-qmp`), which names the vCPU threads.
    pub fn qmp_socket(&self) -> PathBuf {
        self.dir.join("qmp.sock")
    }

    pub fn pid(&self) -> u32 {
        self.qemu.id()
    }

    /// The disk's vhost-user-blk backend, if the guest has one.
    pub fn backend(&mut self) -> Option<&mut crate::vhost::Backend> {
        self.backend.as_mut()
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(b) = &mut self.backend {
            b.check()?;
        }
        if let Ok(Some(st)) = self.qemu.try_wait() {
            return Err(self.exited(st));
        }
        Ok(())
    }

    /// The error of a QEMU that exited with `st`: its log and the guest
    /// console's last lines (the guest's own account: a panic, the OOM
    /// killer, the agent's exit status as the image's init reports it).
    fn exited(&self, st: std::process::ExitStatus) -> Error {
        let log = std::fs::read_to_string(self.dir.join("qemu.log")).unwrap_or_default();
        run_err(format!(
            "QEMU exited ({st}): {}\nguest console:\n{}",
            log.trim(),
            console_tail(&self.dir)
        ))
    }

    /// Whether QEMU has exited (the guest powered off or crashed): the
    /// error of a cell whose guest is gone, which the next cell's fresh
    /// guest does not inherit.
    pub fn is_dead(&mut self) -> bool {
        matches!(self.qemu.try_wait(), Ok(Some(_)))
    }

    /// The error of a control port that failed with `e` while `what`: the
    /// socket breaks (ECONNRESET, EPIPE) when QEMU closes it on its way out,
    /// a moment before the process is gone, so QEMU gets [`EXIT_GRACE`] to
    /// exit and then speaks for itself ([`Guest::exited`]).
    fn port_failed(&mut self, what: &str, e: std::io::Error) -> Error {
        let t0 = Instant::now();
        while t0.elapsed() < EXIT_GRACE {
            if let Ok(Some(st)) = self.qemu.try_wait() {
                return run_err(format!(
                    "control port: {e} while {what}: {}",
                    self.exited(st)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        run_err(format!(
            "control port: {e} while {what} (QEMU still runs); guest console:\n{}",
            console_tail(&self.dir)
        ))
    }

    /// Read the agent's answer to request `id`, within `timeout`. Other
    /// lines (stale answers, unsolicited hellos) are skipped.
    fn read_answer(&mut self, id: u64, timeout: Duration, what: &str) -> Result<Value> {
        let t0 = Instant::now();
        let mut line = String::new();
        loop {
            check_interrupted()?;
            self.check_alive()?;
            let (r, _) = self.ctl.as_mut().ok_or_else(|| run_err("no control"))?;
            match r.read_line(&mut line) {
                Ok(0) => {
                    let closed = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the guest closed it",
                    );
                    return Err(self.port_failed(what, closed));
                }
                Ok(_) if line.ends_with('\n') => {
                    let v: Option<Value> = serde_json::from_str(line.trim()).ok();
                    line.clear();
                    if let Some(v) = v {
                        if v.get("id").and_then(Value::as_u64) == Some(id) {
                            return Ok(v);
                        }
                    }
                }
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => return Err(self.port_failed(what, e)),
            }
            if t0.elapsed() > timeout {
                return Err(run_err(format!(
                    "the guest did not answer in {} s while {what}; guest console:\n{}",
                    timeout.as_secs_f64(),
                    console_tail(&self.dir)
                )));
            }
        }
    }

    /// Send a request and wait for its answer; `{"ok": false}` is an error.
    pub fn call(&mut self, mut req: Value, timeout: Option<Duration>) -> Result<Value> {
        let what = req
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        self.last_id += 1;
        let id = self.last_id;
        if let Some(m) = req.as_object_mut() {
            m.insert("id".into(), id.into());
        }
        let mut line = req.to_string();
        line.push('\n');
        let (_, w) = self.ctl.as_mut().ok_or_else(|| run_err("no control"))?;
        if let Err(e) = w.write_all(line.as_bytes()) {
            return Err(self.port_failed(&what, e));
        }
        let v = self.read_answer(id, timeout.unwrap_or(REQUEST_TIMEOUT), &what)?;
        if v.get("ok").and_then(Value::as_bool) != Some(true) {
            let e = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no reason given");
            return Err(run_err(format!("the guest refused {what}: {e}")));
        }
        Ok(v)
    }

    /// Ask the agent to quit (the guest powers off), then make sure QEMU is
    /// gone.
    pub fn shutdown(mut self) -> Result<()> {
        let _ = self.call(json!({"op": "quit"}), Some(Duration::from_secs(30)));
        self.ctl = None;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.qemu.try_wait() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_qemu(&mut self.qemu);
        Ok(())
    }
}

/// Stop QEMU: SIGTERM (it closes its files), then SIGKILL after 5 s.
pub fn kill_qemu(c: &mut Child) {
    crate::workers::terminate(c, Duration::from_secs(5));
}

impl Drop for Guest {
    fn drop(&mut self) {
        kill_qemu(&mut self.qemu);
    }
}

/// The VM's own group in the cgroup v1 blkio hierarchy, as libvirt gives each
/// VM one. hostd's `--boost-cgroup` then moves the VM's I/O threads from it to
/// the hierarchy's root while the VM is boosted: BFQ re-queues a queue that
/// changes group, and so applies the RT class at once instead of at the
/// queue's next turn, which a starved VM may wait seconds for.
pub struct VmGroup {
    pub dir: PathBuf,
    /// The hierarchy's root, where the boosted threads go.
    pub root: PathBuf,
}

impl VmGroup {
    /// Creates the group and moves process `pid` (all its threads) into it.
    /// `None` when the host has no cgroup v1 blkio hierarchy. `record` is
    /// given the group's directory before it is made (the run's journal).
    pub fn create(
        name: &str,
        pid: u32,
        record: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Option<VmGroup>> {
        let Some(root) = agent::sys::cgroup_v1_mount("blkio") else {
            return Ok(None);
        };
        let dir = root.join(format!("tandem-bench-{}-{name}", std::process::id()));
        record(&dir)?;
        std::fs::create_dir(&dir).map_err(|e| run_err(format!("{}: {e}", dir.display())))?;
        let g = VmGroup { dir, root };
        std::fs::write(g.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| run_err(format!("{}/cgroup.procs: {e}", g.dir.display())))?;
        Ok(Some(g))
    }
}

impl Drop for VmGroup {
    /// Empties the group (QEMU has normally exited already) and removes it.
    fn drop(&mut self) {
        for _ in 0..100 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for p in procs.split_whitespace() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), p);
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `tandem hostd` for one guest, in help-rt mode: while the guest asks for
/// help, RT ioprio on the QEMU process's threads, those threads moved to the
/// blkio root group (`boost_cgroup`), and BFQ idling for it on the host disk
/// under the guest's image (`strict_guarantees`, 32 ms `slice_idle`), so
/// that BFQ keeps the disk for the guest's next read
/// (`agent::actuator::BfqIdlingActuator`).
pub struct Hostd {
    child: Child,
    pub control: PathBuf,
}

/// What hostd boosts for a cell: the VM's I/O threads (`--ioprio`, with
/// BFQ idling: `help-rt`), its vCPU threads (`--cpu-boost`: `help-cpu`), or
/// both on every HELP (`--help-all`: `help-all`).
#[derive(Clone, Copy, Debug)]
pub enum HostdBoost {
    Io(policy::IoprioBoost),
    Cpu(agent::cpuboost::CpuBoostKind),
    /// `--ioprio I --bfq-idling --cpu-boost C --help-all`: one HELP, for
    /// either resource, boosts both, each under hostd's own arbiter.
    All(policy::IoprioBoost, agent::cpuboost::CpuBoostKind),
    /// `--cfsv --cfsv-boost KIND` (`cfsv`): hostd classifies QEMU's
    /// threads itself; no guestd.
    Cfsv(agent::cfsv::CfsvBoost),
}

impl Hostd {
    /// `boost_cgroup`: hostd's `--boost-cgroup` (see [`VmGroup`]);
    /// `budget_fraction`: its `--budget-fraction` (`None`: its default).
    pub fn start(
        exe: &Path,
        guest: &Guest,
        boost: HostdBoost,
        boost_cgroup: Option<&Path>,
        budget_fraction: Option<f64>,
    ) -> Result<Hostd> {
        let dir = &guest.dir;
        let control = dir.join("hostd.sock");
        let log = std::fs::File::create(dir.join("hostd.log"))
            .map_err(|e| run_err(format!("hostd.log: {e}")))?;
        let log2 = log.try_clone().map_err(|e| run_err(e.to_string()))?;
        let mut cmd = Command::new(exe);
        cmd.args(["hostd", "run", "--vm"])
            .arg(format!(
                "name={VM_NAME},socket={},pid={},connect=1,qmp={}",
                dir.join("help.sock").display(),
                guest.pid(),
                dir.join("qmp.sock").display()
            ))
            .arg("--state-file")
            .arg(dir.join("hostd.state"))
            .arg("--control")
            .arg(&control)
            // hostd.log, kept in OUT/vm-logs, then tells when each boost
            // began and ended and what the budget allowed.
            .arg("--log-boosts");
        let cpu_boost = |kind: agent::cpuboost::CpuBoostKind| {
            serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        };
        match boost {
            HostdBoost::Io(ioprio) => {
                cmd.args(["--ioprio", ioprio.name()]).arg("--bfq-idling");
            }
            HostdBoost::Cpu(kind) => {
                cmd.args(["--cpu-boost", &cpu_boost(kind)]);
            }
            HostdBoost::All(ioprio, kind) => {
                cmd.args(["--ioprio", ioprio.name()]).arg("--bfq-idling");
                cmd.args(["--cpu-boost", &cpu_boost(kind)])
                    .arg("--help-all");
            }
            HostdBoost::Cfsv(kind) => {
                cmd.args(["--cfsv", "--cfsv-boost", kind.name()]);
            }
        }
        if let Some(d) = boost_cgroup {
            cmd.arg("--boost-cgroup").arg(d);
        }
        if let Some(f) = budget_fraction {
            cmd.arg("--budget-fraction").arg(f.to_string());
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        // SIGTERM, not SIGKILL, so hostd still reverts its boosts if the
        // run dies.
        devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGTERM);
        let child = cmd
            .spawn()
            .map_err(|e| run_err(format!("starting tandem hostd: {e}")))?;
        let mut h = Hostd { child, control };
        let t0 = Instant::now();
        while !h.control.exists() {
            if let Ok(Some(st)) = h.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("hostd.log")).unwrap_or_default();
                return Err(run_err(format!(
                    "tandem hostd exited ({st}): {}",
                    log.trim()
                )));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(run_err("tandem hostd did not come up in 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(h)
    }

    /// hostd's counters for the VM (its Prometheus metrics, without the
    /// `tandem_hostd_` prefix), e.g. `boosted_seconds_total`.
    pub fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        let mut m = std::collections::BTreeMap::new();
        let Ok(mut s) = UnixStream::connect(&self.control) else {
            return m;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(b"metrics\n").is_err() {
            return m;
        }
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
        for l in out.lines().filter(|l| !l.starts_with('#')) {
            let Some((k, v)) = l.rsplit_once(' ') else {
                continue;
            };
            let name = k.split('{').next().unwrap_or(k);
            if let (Some(n), Ok(v)) = (name.strip_prefix("tandem_hostd_"), v.parse::<f64>()) {
                m.insert(n.to_string(), v);
            }
        }
        m
    }

    /// Stop hostd with SIGTERM: it reverts every boost before it exits.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        use crate::workers::Stopped;
        match crate::workers::terminate(&mut self.child, Duration::from_secs(10)) {
            Stopped::Before => Ok(()),
            Stopped::OnTerm(st) if st.success() => Ok(()),
            Stopped::OnTerm(st) => Err(run_err(format!("tandem hostd exited with {st}"))),
            Stopped::Killed => Err(run_err("tandem hostd did not stop on SIGTERM")),
        }
    }
}

impl Drop for Hostd {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A boot of the test image in `/run/x`.
    fn spec<'a>(
        accel: &'a Accel,
        opts: &'a DiskOptions,
        mem_mib: u32,
        vhost_socket: Option<&'a Path>,
    ) -> BootSpec<'a> {
        BootSpec {
            accel,
            kernel: Path::new("/img/vmlinuz"),
            initramfs: Path::new("/img/initramfs.cpio.gz"),
            disk: Path::new("/mnt/vm1.img"),
            disk_opts: opts,
            mem_mib,
            dir: Path::new("/run/x"),
            vhost_socket,
        }
    }

    #[test]
    fn qemu_command_line() {
        let (accel, opts) = (Accel::Tcg("test".into()), DiskOptions::default());
        let a = qemu_args(&spec(&accel, &opts, 1024, None)).join(" ");
        assert!(a.starts_with("-accel tcg -m 1024 -smp 1"), "{a}");
        assert!(
            a.contains("file=/mnt/vm1.img,if=none,id=vd0,format=raw,cache=none,aio=native"),
            "{a}"
        );
        assert!(
            a.contains("virtserialport,chardev=ctl,name=tandem.bench"),
            "{a}"
        );
        assert!(
            a.contains("virtserialport,chardev=help,name=tandem.help"),
            "{a}"
        );
        assert!(
            a.contains("path=/run/x/help.sock,server=on,wait=off"),
            "{a}"
        );
    }

    #[test]
    fn a_vhost_user_disk_replaces_the_built_in_one_and_shares_the_guests_memory() {
        let (accel, opts) = (Accel::Tcg("test".into()), DiskOptions::default());
        let sock = Path::new("/run/x/vhost-blk.sock");
        let a = qemu_args(&spec(&accel, &opts, 768, Some(sock))).join(" ");
        assert!(
            a.contains(
                "-object memory-backend-memfd,id=mem,size=768M,share=on -numa node,memdev=mem"
            ),
            "{a}"
        );
        assert!(
            a.contains("-chardev socket,id=vhb,path=/run/x/vhost-blk.sock -device vhost-user-blk-pci,chardev=vhb"),
            "{a}"
        );
        // QEMU does not open the image itself.
        assert!(!a.contains("vm1.img"), "{a}");
        assert!(!a.contains("virtio-blk-pci"), "{a}");
        assert!(a.contains("-m 768"), "{a}");
    }

    #[test]
    fn disk_options_checked() {
        assert!(DiskOptions::default().validate().is_ok());
        let bad = DiskOptions {
            aio: "native".into(),
            cache: "writeback".into(),
        };
        assert!(bad.validate().unwrap_err().to_string().contains("O_DIRECT"));
        let bad = DiskOptions {
            aio: "posix".into(),
            cache: "none".into(),
        };
        assert!(bad.validate().unwrap_err().to_string().contains("accepted"));
        let ok = DiskOptions {
            aio: "threads".into(),
            cache: "writeback".into(),
        };
        assert!(ok.validate().is_ok());
    }
}
