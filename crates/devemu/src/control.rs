//! Bringing emulated devices up and down, and the daemon that serves them.
//!
//! Each device has a state directory `STATE_ROOT/<id>/` holding `state.json`
//! (what was created, so that `down` can undo exactly that), `mnt/` (the FUSE
//! mount point) and `serve.log` (the daemon's stderr).

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant as Clock};

use serde::{Deserialize, Serialize};

use crate::engine::{Calibration, Engine};
use crate::fs::{ImageFs, IMAGE_NAME};
use crate::{check_model, model_capacity, need_root, run_err, show_size, Error, Result};
use std::sync::Arc;

/// One emulated device, as recorded in its `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Instance {
    /// Number of the state directory.
    pub id: u32,
    /// Model name (a devmodel preset or `instant`).
    pub model: String,
    /// Size in bytes.
    pub size: u64,
    /// The backing file.
    pub backing: PathBuf,
    /// Whether `up` created the backing file (then `down` removes it).
    pub created_backing: bool,
    /// FUSE mount point.
    pub mountpoint: PathBuf,
    /// The daemon's process id.
    pub pid: u32,
    /// The loop device, e.g. `/dev/loop3` (None while being set up).
    pub loop_dev: Option<String>,
    /// The loop device's index if `up` created it (then `down` removes it).
    #[serde(default)]
    pub created_loop: Option<u32>,
    /// Measured round trip of the kernel path: fixed part (ns).
    #[serde(default)]
    pub overhead_ns: u64,
    /// Measured round trip of the kernel path: per byte (ps).
    #[serde(default)]
    pub overhead_ps_per_byte: u64,
}

impl Instance {
    /// The state directory.
    pub fn state_dir(&self) -> PathBuf {
        state_root().join(self.id.to_string())
    }

    /// Whether the daemon is running.
    pub fn daemon_alive(&self) -> bool {
        pid_alive(self.pid)
    }

    fn save(&self) -> Result<()> {
        let path = self.state_dir().join("state.json");
        let text = serde_json::to_string_pretty(self).expect("serializable state");
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, text)
            .and_then(|_| fs::rename(&tmp, &path))
            .map_err(|e| run_err(format!("writing {}: {e}", path.display())))
    }
}

/// Options of [`up`].
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// Model name.
    pub model: String,
    /// Size in bytes.
    pub size: u64,
    /// Directory for the backing file (default [`crate::DEFAULT_DIR`]).
    pub dir: Option<PathBuf>,
    /// The `tandem` executable to re-execute as the daemon.
    pub exe: PathBuf,
}

/// Options of [`serve`] (the daemon).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Model name.
    pub model: String,
    /// Backing file.
    pub backing: PathBuf,
    /// Mount point.
    pub mountpoint: PathBuf,
}

/// `STATE_ROOT`, overridable for tests of other crates through
/// `TANDEM_DEVEMU_STATE` (not documented for users).
fn state_root() -> PathBuf {
    std::env::var_os("TANDEM_DEVEMU_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(crate::STATE_ROOT))
}

fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // Reap it if it is our own exited child (bench runs bring devices up
    // from a long-lived process); harmless otherwise.
    // SAFETY: waitpid with WNOHANG on a pid; no memory is passed.
    unsafe {
        libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG);
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3 (after the parenthesised command name) is the state; Z and X are gone.
        Ok(s) => match s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
        {
            Some("Z") | Some("X") | None => false,
            Some(_) => {
                // Guard against pid reuse: the process must be a tandem devemu daemon.
                fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| {
                        let c = String::from_utf8_lossy(&c);
                        c.contains("devemu") && c.contains("serve")
                    })
                    .unwrap_or(false)
            }
        },
        Err(_) => false,
    }
}

/// Every recorded instance, sorted by id.
pub fn status() -> Result<Vec<Instance>> {
    let root = state_root();
    let rd = match fs::read_dir(&root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(run_err(format!("reading {}: {e}", root.display()))),
    };
    let mut v = Vec::new();
    for ent in rd.flatten() {
        let p = ent.path().join("state.json");
        if let Ok(text) = fs::read_to_string(&p) {
            if let Ok(inst) = serde_json::from_str::<Instance>(&text) {
                v.push(inst);
            }
        }
    }
    v.sort_by_key(|i| i.id);
    Ok(v)
}

/// One line per instance, for `tandem devemu status`.
pub fn status_table(list: &[Instance]) -> String {
    if list.is_empty() {
        return "no emulated devices are up\n".into();
    }
    let mut s = format!(
        "{:<12} {:<16} {:>8} {:>8}  {:<11} {}\n",
        "DEVICE", "MODEL", "SIZE", "PID", "DAEMON", "BACKING FILE"
    );
    for i in list {
        s += &format!(
            "{:<12} {:<16} {:>8} {:>8}  {:<11} {}{}\n",
            i.loop_dev.as_deref().unwrap_or("-"),
            i.model,
            show_size(i.size),
            i.pid,
            if i.daemon_alive() {
                "running"
            } else {
                "not running"
            },
            i.backing.display(),
            if i.created_backing { "" } else { " (kept)" }
        );
    }
    s
}

fn is_mounted(mp: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mp.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == want))
}

/// Mount points (from /proc/self/mountinfo) of filesystems on `dev`.
pub fn mounts_of(dev: &str) -> Vec<String> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(" - ")?;
            let source = b.split(' ').nth(1)?;
            (source == dev).then(|| a.split(' ').nth(4).unwrap_or("?").to_string())
        })
        .collect()
}

/// Runs a command with no input; its stdout (trimmed), or an error with its stderr.
pub fn run_cmd(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| run_err(format!("running {prog}: {e}")))?;
    if !out.status.success() {
        return Err(run_err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn sys_block(dev: &str) -> PathBuf {
    let name = dev.trim_start_matches("/dev/");
    PathBuf::from("/sys/block").join(name)
}

/// The backing file of a loop device, if attached.
fn loop_backing(dev: &str) -> Option<String> {
    fs::read_to_string(sys_block(dev).join("loop/backing_file"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn umount(mp: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| run_err("mount point with a NUL byte"))?;
    let deadline = Clock::now() + Duration::from_secs(5);
    loop {
        if !is_mounted(mp) {
            return Ok(());
        }
        // SAFETY: umount2 on a NUL-terminated path.
        let r = unsafe { libc::umount2(c.as_ptr(), 0) };
        if r == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if Clock::now() > deadline {
            // Busy for too long: detach it lazily so nothing stays visible.
            // SAFETY: as above.
            let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            if r == 0 {
                return Ok(());
            }
            return Err(run_err(format!("unmounting {}: {err}", mp.display())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop_daemon(pid: u32) {
    let deadline = Clock::now() + Duration::from_secs(5);
    let mut sent_term = false;
    while pid_alive(pid) {
        if Clock::now() > deadline {
            // SAFETY: kill on a pid we verified is our daemon.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            std::thread::sleep(Duration::from_millis(100));
            break;
        }
        if !sent_term && Clock::now() + Duration::from_secs(3) > deadline {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            sent_term = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    pid_alive(pid); // reap
}

/// Allocate a fresh state directory; returns its id.
fn new_state_dir() -> Result<u32> {
    let root = state_root();
    fs::create_dir_all(&root).map_err(|e| run_err(format!("creating {}: {e}", root.display())))?;
    for id in 0..10_000u32 {
        match fs::create_dir(root.join(id.to_string())) {
            Ok(()) => return Ok(id),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(run_err(format!(
                    "creating a state directory in {}: {e}",
                    root.display()
                )))
            }
        }
    }
    Err(run_err(format!(
        "{}: no free state directory",
        root.display()
    )))
}

/// Bring an emulated device up; returns its record (with `loop_dev` set).
pub fn up(o: &UpOptions) -> Result<Instance> {
    check_model(&o.model)?;
    if o.size < (1 << 20) || o.size % 4096 != 0 {
        return Err(Error::Usage(format!(
            "bad size {}: must be at least 1M and a multiple of 4K",
            o.size
        )));
    }
    if let Some(cap) = model_capacity(&o.model) {
        if o.size > cap {
            return Err(Error::Usage(format!(
                "bad size {}: larger than the {} model's capacity ({} bytes, {})",
                show_size(o.size),
                o.model,
                cap,
                show_size(cap)
            )));
        }
    }
    let dir = match &o.dir {
        Some(d) => {
            if !d.is_dir() {
                return Err(Error::Usage(format!(
                    "--dir {}: no such directory",
                    d.display()
                )));
            }
            d.clone()
        }
        None => PathBuf::from(crate::DEFAULT_DIR),
    };
    need_root("tandem devemu up")?;
    if !Path::new("/dev/fuse").exists() {
        return Err(run_err(
            "/dev/fuse is missing: load the fuse module (modprobe fuse)",
        ));
    }
    fs::create_dir_all(&dir).map_err(|e| run_err(format!("creating {}: {e}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| run_err(format!("{}: {e}", dir.display())))?;
    let id = new_state_dir()?;
    let mut inst = Instance {
        id,
        model: o.model.clone(),
        size: o.size,
        backing: dir.join(format!("tandem-devemu-{id}.img")),
        created_backing: false,
        mountpoint: state_root().join(id.to_string()).join("mnt"),
        pid: 0,
        loop_dev: None,
        created_loop: None,
        overhead_ns: 0,
        overhead_ps_per_byte: 0,
    };
    match bring_up(o, &mut inst) {
        Ok(()) => Ok(inst),
        Err(e) => {
            let _ = teardown(&inst);
            Err(e)
        }
    }
}

fn bring_up(o: &UpOptions, inst: &mut Instance) -> Result<()> {
    // Free space for the backing file (sparse, but it fills as it is written).
    let avail = free_bytes(inst.backing.parent().expect("backing file has a directory"));
    if let Some(avail) = avail {
        if avail < o.size {
            eprintln!(
                "tandem: warning: {} has {} free, less than the device's {}; writes past that will fail",
                inst.backing.parent().unwrap().display(),
                show_size(avail),
                show_size(o.size)
            );
        }
    }
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&inst.backing)
        .map_err(|e| run_err(format!("creating {}: {e}", inst.backing.display())))?;
    inst.created_backing = true;
    f.set_len(o.size)
        .map_err(|e| run_err(format!("sizing {}: {e}", inst.backing.display())))?;
    drop(f);
    fs::create_dir_all(&inst.mountpoint)
        .map_err(|e| run_err(format!("creating {}: {e}", inst.mountpoint.display())))?;
    inst.save()?;

    // The daemon: this executable again, detached in its own session.
    let log_path = inst.state_dir().join("serve.log");
    let log =
        File::create(&log_path).map_err(|e| run_err(format!("{}: {e}", log_path.display())))?;
    let mut cmd = Command::new(&o.exe);
    cmd.args(["devemu", "serve", "--model", &o.model, "--backing"])
        .arg(&inst.backing)
        .arg("--mountpoint")
        .arg(&inst.mountpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| run_err(format!("starting the daemon {}: {e}", o.exe.display())))?;
    inst.pid = child.id();
    inst.save()?;
    let image = inst.mountpoint.join(IMAGE_NAME);
    let deadline = Clock::now() + Duration::from_secs(15);
    loop {
        if is_mounted(&inst.mountpoint) && image.exists() {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut log = String::new();
            let _ = File::open(&log_path).and_then(|mut f| f.read_to_string(&mut log));
            return Err(run_err(format!(
                "the devemu daemon exited ({status}) before mounting: {}",
                log.trim()
            )));
        }
        if Clock::now() > deadline {
            return Err(run_err(format!(
                "the devemu daemon did not mount {} within 15 s",
                inst.mountpoint.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The daemon outlives this process; dropping the handle does not kill it.
    drop(child);

    // A loop device of our own (created now, removed at `down`): the queue
    // settings below then leave no trace on the machine's other loop devices.
    let index = add_loop()?;
    inst.created_loop = Some(index);
    let dev = format!("/dev/loop{index}");
    inst.save()?;
    let image_s = image.to_string_lossy().to_string();
    run_cmd("losetup", &["--direct-io=on", &dev, &image_s])?;
    inst.loop_dev = Some(dev.clone());
    inst.save()?;
    let dio = fs::read_to_string(sys_block(&dev).join("loop/dio")).unwrap_or_default();
    if dio.trim() != "1" {
        return Err(run_err(format!(
            "{dev}: the loop device did not enable direct I/O over the FUSE file"
        )));
    }
    // Tell the block layer what kind of device this is: BFQ and the other
    // schedulers idle or not depending on it.
    if let Ok(m) = devmodel::preset(&o.model) {
        let rot = if m.info().rotational { "1" } else { "0" };
        let _ = fs::write(sys_block(&dev).join("queue/rotational"), rot);
        // A disk's default read-ahead (VM_READAHEAD_PAGES, 128 KiB), not the
        // loop driver's (twice its I/O size, 2.5 MiB here).
        let _ = fs::write(sys_block(&dev).join("queue/read_ahead_kb"), "128");
        // Keep the I/O scheduler in charge: by default the loop device takes 128
        // requests from the scheduler at once, which then wait in the emulator
        // in arrival order. Writing nr_requests while no scheduler is attached
        // shrinks the driver's tag depth, and that depth stays when a scheduler
        // is attached later. The kernel's floor is 4 (BLKDEV_MIN_RQ).
        let depth = m.info().default_queue_depth.max(4);
        let q = sys_block(&dev).join("queue");
        let sched = fs::read_to_string(q.join("scheduler")).unwrap_or_default();
        if sched.contains("[none]") {
            let _ = fs::write(q.join("nr_requests"), depth.to_string());
        }
    }
    // Measure the kernel path's round trip while the daemon still completes
    // each request after a fixed delay (no model), then put the model in
    // force with that overhead taken out.
    let (c0, c1) = measure_overhead(&dev, &o.model)?;
    inst.overhead_ns = c0;
    inst.overhead_ps_per_byte = c1;
    inst.save()?;
    let cal = inst.state_dir().join("calibration");
    fs::write(&cal, format!("{c0} {c1}\n"))
        .map_err(|e| run_err(format!("{}: {e}", cal.display())))?;
    let ack = inst.state_dir().join("calibrated");
    // SAFETY: a signal to the daemon we started.
    unsafe { libc::kill(inst.pid as libc::pid_t, libc::SIGUSR1) };
    let deadline = Clock::now() + Duration::from_secs(5);
    while !ack.exists() {
        if Clock::now() > deadline {
            return Err(run_err(
                "the devemu daemon did not take its calibration within 5 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Median O_DIRECT read latencies of 4 KiB and 128 KiB requests on `dev`, while
/// the daemon completes each one the model's mean time for such reads after it
/// arrived (`crate::probe::calibration_delays`): returns (fixed ns, ps per
/// byte) of the round trip beyond that delay.
fn measure_overhead(dev: &str, model: &str) -> Result<(u64, u64)> {
    use crate::probe::{calibration_delays, median_latency_ns, CALIBRATION_READS};
    let delays = calibration_delays(model);
    let [(small_bytes, small_n), (large_bytes, large_n)] = CALIBRATION_READS;
    // Other load on the machine only adds: keep the lowest of three rounds.
    let (mut small, mut large) = (u64::MAX, u64::MAX);
    for _ in 0..3 {
        small = small.min(median_latency_ns(dev, small_bytes as usize, small_n)?);
        large = large.min(median_latency_ns(dev, large_bytes as usize, large_n)?);
    }
    let small = small.saturating_sub(delays.for_bytes(small_bytes));
    let large = large.saturating_sub(delays.for_bytes(large_bytes));
    let c1 = large.saturating_sub(small) * 1000 / (large_bytes - small_bytes);
    let c0 = small.saturating_sub(small_bytes * c1 / 1000);
    Ok((c0, c1))
}

const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;

/// Create a new loop device with an unused index (from 64 up, away from the
/// ones losetup hands out first); returns the index.
fn add_loop() -> Result<u32> {
    use std::os::unix::io::AsRawFd;
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| {
            run_err(format!(
                "/dev/loop-control: {e} (is the loop module loaded?)"
            ))
        })?;
    for n in 64..1024u32 {
        if Path::new(&format!("/sys/block/loop{n}")).exists() {
            continue;
        }
        // SAFETY: LOOP_CTL_ADD takes the index as its integer argument.
        let r = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_ADD as _, n as libc::c_ulong) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                continue;
            }
            return Err(run_err(format!("creating /dev/loop{n}: {e}")));
        }
        let node = PathBuf::from(format!("/dev/loop{n}"));
        let deadline = Clock::now() + Duration::from_secs(5);
        while !node.exists() {
            if Clock::now() > deadline {
                remove_loop(n);
                return Err(run_err(format!("{} did not appear", node.display())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        return Ok(n);
    }
    Err(run_err("no free loop device index below 1024"))
}

/// Remove a loop device created by [`add_loop`] (retrying while it is busy).
fn remove_loop(n: u32) -> bool {
    use std::os::unix::io::AsRawFd;
    let Ok(ctl) = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
    else {
        return false;
    };
    let deadline = Clock::now() + Duration::from_secs(10);
    loop {
        if !Path::new(&format!("/sys/block/loop{n}")).exists() {
            return true;
        }
        // SAFETY: LOOP_CTL_REMOVE takes the index as its integer argument.
        let r = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_REMOVE as _, n as libc::c_ulong) };
        if r == 0 {
            return true;
        }
        if Clock::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        Some(s.f_bavail as u64 * s.f_frsize as u64)
    }
}

/// Undo whatever of `inst` exists: loop device, mount, daemon, backing file,
/// state directory. Best effort; returns the first failure.
fn teardown(inst: &Instance) -> Result<()> {
    let mut first: Option<Error> = None;
    let mut note = |e: Error| {
        if first.is_none() {
            first = Some(e);
        }
    };
    if let Some(dev) = &inst.loop_dev {
        let image = inst.mountpoint.join(IMAGE_NAME);
        if loop_backing(dev).is_some_and(|b| Path::new(&b) == image) {
            if let Err(e) = run_cmd("losetup", &["-d", dev]) {
                note(e);
            }
            // Wait until the kernel has really let go of the file (a brief
            // opener such as udev's probe defers the detach).
            let deadline = Clock::now() + Duration::from_secs(10);
            while loop_backing(dev).is_some_and(|b| Path::new(&b) == image) {
                if Clock::now() > deadline {
                    note(run_err(format!(
                        "{dev}: the loop device did not detach within 10 s"
                    )));
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    if let Some(n) = inst.created_loop {
        if !remove_loop(n) {
            note(run_err(format!(
                "/dev/loop{n}: could not remove the loop device (busy)"
            )));
        }
    }
    if let Err(e) = umount(&inst.mountpoint) {
        note(e);
    }
    stop_daemon(inst.pid);
    if inst.created_backing {
        if let Err(e) = fs::remove_file(&inst.backing) {
            if e.kind() != std::io::ErrorKind::NotFound {
                note(run_err(format!("removing {}: {e}", inst.backing.display())));
            }
        }
        // The default directory goes too once empty.
        let default = Path::new(crate::DEFAULT_DIR);
        if inst.backing.parent() == Some(default) && fs::remove_dir(default).is_ok() {
            let _ = fs::remove_dir(default.parent().expect("/var/lib/tandem"));
        }
    }
    if first.is_none() {
        let _ = fs::remove_dir_all(inst.state_dir());
        // Leave nothing behind: remove the state root when empty.
        let root = state_root();
        let _ = fs::remove_dir(&root);
        if let Some(parent) = root.parent() {
            if parent.ends_with("tandem") {
                let _ = fs::remove_dir(parent);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Find the instance for `dev` (`/dev/loopN`, `loopN`).
pub fn find(dev: &str) -> Result<Instance> {
    let want = if dev.starts_with('/') {
        dev.to_string()
    } else {
        format!("/dev/{dev}")
    };
    status()?
        .into_iter()
        .find(|i| i.loop_dev.as_deref() == Some(want.as_str()))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{dev}: not a device brought up by tandem devemu (`tandem devemu status` lists them)"
            ))
        })
}

/// Tear down the emulated device `dev`. Refused while a filesystem on it is
/// mounted.
pub fn down(dev: &str) -> Result<Instance> {
    need_root("tandem devemu down")?;
    let inst = find(dev)?;
    if let Some(d) = &inst.loop_dev {
        let m = mounts_of(d);
        if !m.is_empty() {
            return Err(run_err(format!(
                "{d} is mounted on {}; unmount it first",
                m.join(", ")
            )));
        }
    }
    teardown(&inst)?;
    Ok(inst)
}

/// Tear down every recorded device.
pub fn down_all() -> Result<Vec<Instance>> {
    need_root("tandem devemu down")?;
    let mut done = Vec::new();
    for inst in status()? {
        if let Some(d) = &inst.loop_dev {
            for m in mounts_of(d) {
                let _ = umount(Path::new(&m));
            }
        }
        teardown(&inst)?;
        done.push(inst);
    }
    Ok(done)
}

/// The daemon: mount the filesystem and serve it until it is unmounted.
pub fn serve(o: &ServeOptions) -> Result<()> {
    check_model(&o.model)?;
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&o.backing)
        .map_err(|e| run_err(format!("opening {}: {e}", o.backing.display())))?;
    let size = backing
        .metadata()
        .map_err(|e| run_err(format!("{}: {e}", o.backing.display())))?
        .len();
    // Device time must not depend on the host's other load: the daemon's
    // threads (all created below inherit it) run at a modest real-time
    // priority. They only ever sleep or do short work per request.
    // SAFETY: sched_setscheduler on this process with a valid parameter.
    unsafe {
        let p = libc::sched_param { sched_priority: 10 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) != 0 {
            eprintln!(
                "tandem devemu: warning: no real-time priority; timing may suffer under load"
            );
        }
    }
    // SIGUSR1 (from `up`) delivers the calibration; block it in every thread
    // and take it in one.
    // SAFETY: signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let calibration = Arc::new(Calibration::new(crate::probe::calibration_delays(&o.model)));
    let state_dir = o
        .mountpoint
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    {
        let calibration = calibration.clone();
        std::thread::Builder::new()
            .name("devemu-calibration".into())
            .spawn(move || take_calibration(&state_dir, &calibration))
            .map_err(|e| run_err(format!("starting a thread: {e}")))?;
    }
    let engine = match devmodel::preset(&o.model) {
        Ok(model) => Some(Engine::start(model)),
        Err(_) => None, // instant
    };
    let fs = ImageFs::new(backing, size, engine, calibration);
    crate::engine::tight_timer_slack();
    let options = [
        fuser::MountOption::FSName("tandem-devemu".into()),
        fuser::MountOption::Subtype(o.model.clone()),
        fuser::MountOption::DefaultPermissions,
    ];
    let mut session = fuser::Session::new(fs, &o.mountpoint, &options)
        .map_err(|e| run_err(format!("mounting {}: {e}", o.mountpoint.display())))?;
    session
        .run()
        .map_err(|e| run_err(format!("serving {}: {e}", o.mountpoint.display())))?;
    Ok(())
}

fn take_calibration(state_dir: &Path, calibration: &Calibration) {
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: sigwait on a local set; SIGUSR1 is blocked in every thread.
        let r = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigwait(&set, &mut sig)
        };
        if r != 0 {
            return;
        }
        let text = fs::read_to_string(state_dir.join("calibration")).unwrap_or_default();
        if text.trim() == "off" {
            calibration.suspend();
            let _ = fs::write(state_dir.join("calibrated"), "");
            continue;
        }
        let v: Vec<u64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [c0, c1] = v[..] {
            calibration.set(c0, c1);
            let _ = fs::write(state_dir.join("calibrated"), "");
        }
    }
}

/// Suspend the model (`false`: every request is answered at once, e.g. while a
/// benchmark writes its files) or put it back in force with the calibration
/// measured at `up` (`true`).
pub fn set_timed(inst: &Instance, timed: bool) -> Result<()> {
    let dir = inst.state_dir();
    let ack = dir.join("calibrated");
    let _ = fs::remove_file(&ack);
    let text = if timed {
        format!("{} {}\n", inst.overhead_ns, inst.overhead_ps_per_byte)
    } else {
        "off\n".to_string()
    };
    fs::write(dir.join("calibration"), text)
        .map_err(|e| run_err(format!("{}: {e}", dir.display())))?;
    if !inst.daemon_alive() {
        return Err(run_err(format!(
            "the devemu daemon (pid {}) is not running",
            inst.pid
        )));
    }
    // SAFETY: a signal to our daemon (checked alive just above).
    unsafe { libc::kill(inst.pid as libc::pid_t, libc::SIGUSR1) };
    let deadline = Clock::now() + Duration::from_secs(5);
    while !ack.exists() {
        if Clock::now() > deadline {
            return Err(run_err("the devemu daemon did not answer within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
