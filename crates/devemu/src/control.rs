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

use crate::engine::Engine;
use crate::fs::{ImageFs, IMAGE_NAME};
use crate::{check_model, model_capacity, need_root, run_err, show_size, Error, Result};

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

fn run_cmd(prog: &str, args: &[&str]) -> Result<String> {
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

    let image_s = image.to_string_lossy().to_string();
    let dev = run_cmd("losetup", &["--find", "--show", "--direct-io=on", &image_s])?;
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
    }
    Ok(())
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
    let engine = match devmodel::preset(&o.model) {
        Ok(model) => Some(Engine::start(model)),
        Err(_) => None, // instant
    };
    let fs = ImageFs::new(backing, size, engine);
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
