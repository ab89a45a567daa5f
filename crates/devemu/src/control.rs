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

use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::engine::{Calibration, Engine};
use crate::fs::{ImageFs, IMAGE_NAME};
use crate::loopdev::{self, LoopControl};
use crate::{check_model, model_capacity, need_root, run_err, show_size, Error, Result};
use std::sync::Arc;

/// One emulated device, as recorded in its `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Instance {
    /// Name of the state directory: a number for `tandem devemu up`, a name
    /// the caller chose otherwise (`tandem bench run` names it after itself,
    /// so that its journal can hold the name before the directory exists).
    #[serde(deserialize_with = "id_from_number_or_name")]
    pub id: String,
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
        state_root().join(&self.id)
    }

    /// Whether the daemon is running.
    pub fn daemon_alive(&self) -> bool {
        daemon_pids(&self.mountpoint).contains(&self.pid)
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
    /// Name of the state directory (default: the first free number). A
    /// caller that names it can record the name before `up` makes anything,
    /// and undo an `up` killed at any moment with [`teardown_id`].
    pub name: Option<String>,
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

/// State files written before ids were names hold a number.
fn id_from_number_or_name<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(u64),
        Name(String),
    }
    Ok(match Id::deserialize(d)? {
        Id::Number(n) => n.to_string(),
        Id::Name(s) => s,
    })
}

/// The command line of process `pid`, argument by argument; `None` when it
/// is gone or a zombie (whose command line is empty).
fn argv(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Whether `args` is a `tandem devemu serve` command line serving `mountpoint`.
fn serves(args: &[String], mountpoint: &Path) -> bool {
    let has = |w: &str| args.iter().any(|a| a == w);
    has("devemu")
        && has("serve")
        && args
            .windows(2)
            .any(|w| w[0] == "--mountpoint" && Path::new(&w[1]) == mountpoint)
}

/// The daemons serving `mountpoint`, found by their command line: the
/// mount point is the instance's own (in its state directory), so a reused
/// pid, or a daemon whose pid was never recorded (a kill between its start
/// and the state file's next write), is told apart without the pid.
/// A zombie's command line is empty, so it is not counted.
pub fn daemon_pids(mountpoint: &Path) -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| argv(*pid).is_some_and(|a| serves(&a, mountpoint)))
        .collect()
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
    // Numbered ones first, in order; named ones after them.
    v.sort_by(|a, b| {
        let n = |i: &Instance| i.id.parse::<u64>().unwrap_or(u64::MAX);
        n(a).cmp(&n(b)).then_with(|| a.id.cmp(&b.id))
    });
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

/// Runs a command with no input; its stdout (trimmed), or an error with its
/// stderr. It dies with this process (a `mkfs` or `losetup` does not go on
/// after a kill of the run that started it).
pub fn run_cmd(prog: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(prog);
    cmd.args(args).stdin(Stdio::null());
    crate::die_with_parent(&mut cmd, Signal::SIGKILL);
    let out = cmd
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

fn umount(mp: &Path) -> Result<()> {
    let deadline = Clock::now() + Duration::from_secs(5);
    loop {
        if !is_mounted(mp) {
            return Ok(());
        }
        let err = match umount2(mp, MntFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if Clock::now() > deadline {
            // Busy for too long: detach it lazily so nothing stays visible.
            return umount2(mp, MntFlags::MNT_DETACH)
                .map_err(|_| run_err(format!("unmounting {}: {err}", mp.display())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops every daemon serving `mountpoint`. Unmounted, a daemon ends by
/// itself; one that does not within 2 s gets SIGTERM, and SIGKILL at 4 s.
/// `recorded`: the daemon's pid as recorded (0: none), reaped too if it was
/// a child of ours that has exited already.
fn stop_daemons(mountpoint: &Path, recorded: u32) -> Result<()> {
    let t0 = Clock::now();
    let mut sent = None;
    let mut seen: Vec<u32> = Vec::from_iter((recorded != 0).then_some(recorded));
    loop {
        let pids = daemon_pids(mountpoint);
        if pids.is_empty() {
            // Reap those that were children of ours (a bench run brings its
            // device up itself); for any other pid this fails harmlessly.
            for pid in seen {
                let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
            }
            return Ok(());
        }
        for p in &pids {
            if !seen.contains(p) {
                seen.push(*p);
            }
        }
        let waited = t0.elapsed();
        if waited > Duration::from_secs(6) {
            return Err(run_err(format!(
                "the devemu daemon of {} (pid {pids:?}) did not stop",
                mountpoint.display()
            )));
        }
        let sig = if waited > Duration::from_secs(4) {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        if waited > Duration::from_secs(2) && sent != Some(sig) {
            for pid in &pids {
                // Gone in between is fine.
                let _ = kill(Pid::from_raw(*pid as i32), sig);
            }
            sent = Some(sig);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Creates a state directory: `name` when given, else the first free
/// number. Returns its id.
fn new_state_dir(name: Option<&str>) -> Result<String> {
    let root = state_root();
    fs::create_dir_all(&root).map_err(|e| run_err(format!("creating {}: {e}", root.display())))?;
    let make = |id: &str| fs::create_dir(root.join(id));
    if let Some(n) = name {
        return make(n).map(|()| n.to_string()).map_err(|e| {
            run_err(format!(
                "creating the state directory {}: {e}",
                root.join(n).display()
            ))
        });
    }
    for id in 0..10_000u32 {
        match make(&id.to_string()) {
            Ok(()) => return Ok(id.to_string()),
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

/// A state directory name a caller may choose: one path component of
/// letters, digits, `-` and `_`, not all digits (those are `up`'s own).
fn check_name(n: &str) -> Result<()> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !n.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "bad instance name {n:?}: up to 64 letters, digits, - and _, not all digits"
        )))
    }
}

/// The checks of [`up`] that need neither root nor the machine.
fn check_up(o: &UpOptions) -> Result<()> {
    check_model(&o.model)?;
    if o.size < crate::MIN_SIZE || !o.size.is_multiple_of(4096) {
        return Err(Error::Usage(format!(
            "bad size {}: an emulated device needs at least {} (its calibration at bring-up reads its first {}) and a multiple of 4K",
            show_size(o.size),
            show_size(crate::MIN_SIZE),
            show_size(crate::probe::CALIBRATION_SPAN),
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
    if let Some(n) = &o.name {
        check_name(n)?;
    }
    if let Some(d) = &o.dir {
        if !d.is_dir() {
            return Err(Error::Usage(format!(
                "--dir {}: no such directory",
                d.display()
            )));
        }
    }
    Ok(())
}

/// Bring an emulated device up; returns its record (with `loop_dev` set).
///
/// Each thing `up` makes is recorded in the instance's `state.json` before
/// it is made (the state directory holds the record itself, and the daemon
/// is known by its mount point there), so that [`teardown_id`] undoes an
/// `up` killed at any moment.
pub fn up(o: &UpOptions) -> Result<Instance> {
    check_up(o)?;
    need_root("tandem devemu up", crate::WHY_UP)?;
    if !Path::new("/dev/fuse").exists() {
        return Err(run_err(
            "/dev/fuse is missing: load the fuse module (modprobe fuse)",
        ));
    }
    let dir = o
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::DEFAULT_DIR));
    let id = new_state_dir(o.name.as_deref())?;
    let mut inst = Instance {
        backing: dir.join(format!("tandem-devemu-{id}.img")),
        mountpoint: state_root().join(&id).join("mnt"),
        id,
        model: o.model.clone(),
        size: o.size,
        created_backing: false,
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
    inst.save()?;
    make_backing(o, inst)?;
    fs::create_dir_all(&inst.mountpoint)
        .map_err(|e| run_err(format!("creating {}: {e}", inst.mountpoint.display())))?;
    start_daemon(o, inst)?;
    let dev = attach_loop(inst)?;
    let dio = fs::read_to_string(sys_block(&dev).join("loop/dio")).unwrap_or_default();
    if dio.trim() != "1" {
        return Err(run_err(format!(
            "{dev}: the loop device did not enable direct I/O over the FUSE file"
        )));
    }
    tune_queue(&dev, &o.model);
    calibrate(inst, &dev, &o.model)
}

/// The (sparse) backing file, recorded as ours before it is made.
fn make_backing(o: &UpOptions, inst: &mut Instance) -> Result<()> {
    let dir = inst
        .backing
        .parent()
        .expect("backing file has a directory")
        .to_path_buf();
    fs::create_dir_all(&dir).map_err(|e| run_err(format!("creating {}: {e}", dir.display())))?;
    // Free space for the backing file (sparse, but it fills as it is written).
    if let Some(avail) = free_bytes(&dir) {
        if avail < o.size {
            tracing::warn!(
                "{} has {} free, less than the device's {}; writes past that will fail",
                dir.display(),
                show_size(avail),
                show_size(o.size)
            );
        }
    }
    // A file of that name that is already there is someone else's: refused
    // before the record claims it.
    if fs::symlink_metadata(&inst.backing).is_ok() {
        return Err(run_err(format!(
            "{}: exists already; not overwritten",
            inst.backing.display()
        )));
    }
    inst.created_backing = true;
    inst.save()?;
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&inst.backing)
        .map_err(|e| run_err(format!("creating {}: {e}", inst.backing.display())))?;
    f.set_len(o.size)
        .map_err(|e| run_err(format!("sizing {}: {e}", inst.backing.display())))
}

/// The daemon: this executable again, detached in its own session; waits
/// for its mount. It is known by its mount point (see [`daemon_pids`]), so
/// a kill before its pid is recorded still finds it.
fn start_daemon(o: &UpOptions, inst: &mut Instance) -> Result<()> {
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
    // Why unsafe: std's `pre_exec` is the only hook between fork and exec,
    // and std's own `CommandExt::setsid` is not stable yet.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
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
    Ok(())
}

/// A loop device of our own (created now, removed at `down`): the queue
/// settings then leave no trace on the machine's other loop devices. Its
/// index and name are recorded before it is created and attached.
fn attach_loop(inst: &mut Instance) -> Result<String> {
    let ctl = LoopControl::lock()?;
    let index = ctl.add(|n| {
        inst.created_loop = Some(n);
        inst.save()
    })?;
    let dev = format!("/dev/loop{index}");
    inst.loop_dev = Some(dev.clone());
    inst.save()?;
    let image = inst.mountpoint.join(IMAGE_NAME);
    run_cmd(
        "losetup",
        &["--direct-io=on", &dev, &image.to_string_lossy()],
    )?;
    drop(ctl);
    Ok(dev)
}

/// Tell the block layer what kind of device this is: BFQ and the other
/// schedulers idle or not depending on it.
fn tune_queue(dev: &str, model: &str) {
    let Ok(m) = devmodel::preset(model) else {
        return;
    };
    let rot = if m.info().rotational { "1" } else { "0" };
    let _ = fs::write(sys_block(dev).join("queue/rotational"), rot);
    // A disk's default read-ahead (VM_READAHEAD_PAGES, 128 KiB), not the
    // loop driver's (twice its I/O size, 2.5 MiB here).
    let _ = fs::write(sys_block(dev).join("queue/read_ahead_kb"), "128");
    // Keep the I/O scheduler in charge: by default the loop device takes 128
    // requests from the scheduler at once, which then wait in the emulator
    // in arrival order. Writing nr_requests while no scheduler is attached
    // shrinks the driver's tag depth, and that depth stays when a scheduler
    // is attached later. The kernel's floor is 4 (BLKDEV_MIN_RQ): the
    // simulator's twin is `--dispatch-depth 4` (devmodel::LOOP_TAG_DEPTH).
    let depth = m.info().default_queue_depth.max(devmodel::LOOP_TAG_DEPTH);
    let q = sys_block(dev).join("queue");
    let sched = fs::read_to_string(q.join("scheduler")).unwrap_or_default();
    if sched.contains("[none]") {
        let _ = fs::write(q.join("nr_requests"), depth.to_string());
    }
}

/// Measure the kernel path's round trip while the daemon still completes
/// each request after a fixed delay (no model), then put the model in
/// force with that overhead taken out.
fn calibrate(inst: &mut Instance, dev: &str, model: &str) -> Result<()> {
    let (c0, c1) = measure_overhead(dev, model)?;
    inst.overhead_ns = c0;
    inst.overhead_ps_per_byte = c1;
    inst.save()?;
    let cal = inst.state_dir().join("calibration");
    fs::write(&cal, format!("{c0} {c1}\n"))
        .map_err(|e| run_err(format!("{}: {e}", cal.display())))?;
    let ack = inst.state_dir().join("calibrated");
    kill(Pid::from_raw(inst.pid as i32), Signal::SIGUSR1)
        .map_err(|e| run_err(format!("signalling the devemu daemon: {e}")))?;
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

/// Bytes free for an unprivileged writer on the file system of `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// Detach and remove the instance's loop device, if it is still the one
/// `up` made: attached to the instance's image, or created and not attached
/// (under the loop lock, see [`crate::loopdev`]). A device bound to another
/// file is another's by now and left alone.
fn release_loop(inst: &Instance) -> Result<()> {
    let image = inst.mountpoint.join(IMAGE_NAME);
    let index = inst
        .created_loop
        .or_else(|| inst.loop_dev.as_deref().and_then(loopdev::index_of));
    let Some(n) = index else {
        return Ok(());
    };
    let dev = format!("/dev/loop{n}");
    if loopdev::bound_to(n, &image) {
        run_cmd("losetup", &["-d", &dev])?;
        // Wait until the kernel has really let go of the file (a brief
        // opener such as udev's probe defers the detach).
        let deadline = Clock::now() + Duration::from_secs(10);
        while loopdev::bound_to(n, &image) {
            if Clock::now() > deadline {
                return Err(run_err(format!(
                    "{dev}: the loop device did not detach within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if inst.created_loop.is_some() {
        LoopControl::lock()?.remove_unbound(n)?;
    }
    Ok(())
}

/// Undo whatever of `inst` exists: loop device, mount, daemon, backing file,
/// state directory. Each step tolerates a thing that was recorded but never
/// made (a kill between the record and the making). Best effort; returns
/// the first failure, and keeps the state directory (the record) then.
fn teardown(inst: &Instance) -> Result<()> {
    let mut first: Option<Error> = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    note(release_loop(inst));
    // Unmount, stop the daemons, and unmount again: a daemon that was
    // starting may have mounted in between.
    note(umount(&inst.mountpoint));
    note(stop_daemons(&inst.mountpoint, inst.pid));
    note(umount(&inst.mountpoint));
    if inst.created_backing {
        if let Err(e) = fs::remove_file(&inst.backing) {
            if e.kind() != std::io::ErrorKind::NotFound {
                note(Err(run_err(format!(
                    "removing {}: {e}",
                    inst.backing.display()
                ))));
            }
        }
    }
    // The default directory goes too once empty.
    let default = Path::new(crate::DEFAULT_DIR);
    if inst.backing.parent() == Some(default) && fs::remove_dir(default).is_ok() {
        let _ = fs::remove_dir(default.parent().expect("/var/lib/tandem"));
    }
    if first.is_none() {
        remove_state_dir(&inst.state_dir());
    }
    first.map_or(Ok(()), Err)
}

/// Removes a state directory, then the state root and `/run/tandem` when
/// they are empty. Never through a mount: a still-mounted mount point stays.
fn remove_state_dir(dir: &Path) {
    if is_mounted(&dir.join("mnt")) {
        return;
    }
    let _ = fs::remove_dir_all(dir);
    let root = state_root();
    let _ = fs::remove_dir(&root);
    if let Some(parent) = root.parent() {
        if parent.ends_with("tandem") {
            let _ = fs::remove_dir(parent);
        }
    }
}

/// Undo the instance in state directory `id` (a name given to [`up`]),
/// whatever of it exists: what `tandem bench run` calls for the device it
/// brought up, after a kill at any moment of [`up`] or later. Nothing to do
/// when the directory is not there (the kill came before it was made).
pub fn teardown_id(id: &str) -> Result<()> {
    check_name(id)?;
    let dir = state_root().join(id);
    if !dir.exists() {
        return Ok(());
    }
    match fs::read_to_string(dir.join("state.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Instance>(&t).ok())
    {
        Some(inst) => {
            if let Some(d) = &inst.loop_dev {
                if loopdev::index_of(d)
                    .is_some_and(|n| loopdev::bound_to(n, &inst.mountpoint.join(IMAGE_NAME)))
                {
                    let m = mounts_of(d);
                    if !m.is_empty() {
                        return Err(run_err(format!(
                            "{d} is mounted on {}; unmount it first",
                            m.join(", ")
                        )));
                    }
                }
            }
            teardown(&inst)
        }
        // Killed between making the directory and its first record: it
        // holds nothing else.
        None => {
            remove_state_dir(&dir);
            Ok(())
        }
    }
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
    need_root("tandem devemu down", crate::WHY_DOWN)?;
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
    need_root("tandem devemu down", crate::WHY_DOWN)?;
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
    if realtime_priority().is_err() {
        tracing::warn!("no real-time priority; timing may suffer under load");
    }
    // SIGUSR1 (from `up`) delivers the calibration; block it in every thread
    // (threads inherit the mask of the thread that creates them) and take it
    // in one.
    if let Err(e) = calibration_signal().thread_block() {
        return Err(run_err(format!("blocking SIGUSR1: {e}")));
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

/// SCHED_FIFO priority 10 for this thread (and the threads it creates
/// from then on). 10: above every normal task, below the kernel's own
/// real-time threads (which sit at 50 and up, e.g. threaded IRQs).
fn realtime_priority() -> std::result::Result<(), thread_priority::Error> {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
    };
    let priority = ThreadPriorityValue::try_from(10u8)
        .map_err(|_| thread_priority::Error::Priority("10 is out of range"))?;
    set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Crossplatform(priority),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    )
}

/// The signal `up` sends when the calibration file is ready.
fn calibration_signal() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGUSR1);
    set
}

fn take_calibration(state_dir: &Path, calibration: &Calibration) {
    let set = calibration_signal();
    loop {
        if set.wait().is_err() {
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
    kill(Pid::from_raw(inst.pid as i32), Signal::SIGUSR1)
        .map_err(|e| run_err(format!("signalling the devemu daemon: {e}")))?;
    let deadline = Clock::now() + Duration::from_secs(5);
    while !ack.exists() {
        if Clock::now() > deadline {
            return Err(run_err("the devemu daemon did not answer within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_is_known_by_its_mount_point() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mp = Path::new("/run/tandem/devemu/bench-1-2/mnt");
        let daemon = args(&[
            "/usr/bin/tandem",
            "devemu",
            "serve",
            "--model",
            "emmc",
            "--mountpoint",
            "/run/tandem/devemu/bench-1-2/mnt",
        ]);
        assert!(serves(&daemon, mp));
        // Another instance's daemon, or a command that only names the path.
        assert!(!serves(&daemon, Path::new("/run/tandem/devemu/3/mnt")));
        let viewer = args(&["less", "--mountpoint", "/run/tandem/devemu/bench-1-2/mnt"]);
        assert!(!serves(&viewer, mp));
    }

    #[test]
    fn names_and_sizes() {
        assert!(check_name("bench-123-456").is_ok());
        for bad in ["", "12", "../x", "a/b", "a b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let o = |size| UpOptions {
            model: "emmc".into(),
            size,
            dir: None,
            exe: PathBuf::from("tandem"),
            name: None,
        };
        assert!(check_up(&o(crate::MIN_SIZE)).is_ok());
        let e = check_up(&o(crate::MIN_SIZE - 4096)).unwrap_err();
        assert!(
            matches!(&e, Error::Usage(m) if m.contains("at least 64M")),
            "{e}"
        );
    }
}
