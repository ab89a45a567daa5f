//! Helpers the command-line tests share.
// Each test binary uses a part of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Runs the `tandem` binary under test with `args` and waits for it.
pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .expect("run tandem")
}

/// Sends `sig` to process `pid` (one the test started).
pub fn send_signal(pid: u32, sig: nix::sys::signal::Signal) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig)
}

/// A scratch directory under the target directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    pub fn p(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The parent pid of a process.
pub fn ppid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Processes whose command line contains all of `words` (not this test).
/// Zombies have an empty command line and are gone for this purpose.
pub fn processes_with(words: &[&str]) -> Vec<u32> {
    let me = std::process::id();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(c) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let c = String::from_utf8_lossy(&c).replace('\0', " ");
        if !c.is_empty() && words.iter().all(|w| c.contains(w)) {
            v.push(pid);
        }
    }
    v
}

/// A prerequisite of a test marked `#[ignore = "needs ..."]`.
///
/// Such tests need root, a device or a tool that a developer's machine may
/// lack: `cargo test` reports them as ignored, and CI (`tools/test`) runs
/// them with `--include-ignored` after installing what they need. Run that
/// way, a test whose prerequisite is still missing fails with the message of
/// [`require`]; it never returns early and counts as passed.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// Effective user id 0.
    Root,
    /// An executable on `PATH` (the tests start it by name), and the Debian
    /// package that has it.
    Tool(&'static str, &'static str),
    /// A path that must exist (a device node, a kernel interface), and how
    /// to get it.
    Path(&'static str, &'static str),
}

/// `/dev/fuse` and loop devices, which `tandem devemu` needs.
pub const FUSE_AND_LOOP: [Need; 2] = [
    Need::Path("/dev/fuse", "modprobe fuse"),
    Need::Path("/dev/loop-control", "modprobe loop"),
];

/// What bringing up an emulated device (`tandem devemu up`) needs.
pub const DEVEMU: [Need; 4] = [Need::Root, FUSE_AND_LOOP[0], FUSE_AND_LOOP[1], LOSETUP];

/// Attaches loop devices (devemu, and the tests' own).
pub const LOSETUP: Need = Need::Tool("losetup", "mount");
/// Formats the real runner's work disk and the guest's data disk.
pub const MKFS_EXT4: Need = Need::Tool("mkfs.ext4", "e2fsprogs");
/// Runs the trace recorder, and the stand-in VMs of the hostd tests.
pub const PYTHON3: Need = Need::Tool("python3", "python3");

impl Need {
    /// Why it is missing, or `None` when it is there.
    fn missing(&self) -> Option<String> {
        match *self {
            Need::Root => (!devemu::is_root()).then(|| "root (run as root or with sudo)".into()),
            Need::Tool(t, pkg) => {
                (!on_path(t)).then(|| format!("{t} on PATH (apt-get install {pkg})"))
            }
            Need::Path(p, how) => {
                (!std::path::Path::new(p).exists()).then(|| format!("{p} ({how})"))
            }
        }
    }
}

/// Whether an executable file `name` is in one of `PATH`'s directories.
pub fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Fails the test, naming everything missing, unless all of `needs` hold.
/// Called first by every `#[ignore = "needs ..."]` test.
#[track_caller]
pub fn require(needs: &[Need]) {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    assert!(
        missing.is_empty(),
        "this test needs {}. It is #[ignore]d for that reason, and was run without \
         it (--include-ignored); tools/test, run as root, installs what the tests need",
        missing.join(", ")
    );
}

/// The paths a run with this pid names after itself: its run directory,
/// its devemu instance's state directory and backing file.
pub fn run_paths(pid: u32) -> [(String, String); 3] {
    [
        ("/run/tandem/bench".into(), format!("{pid}-")),
        ("/run/tandem/devemu".into(), format!("bench-{pid}-")),
        (
            "/var/lib/tandem/devemu".into(),
            format!("tandem-devemu-bench-{pid}-"),
        ),
    ]
}

/// Entries of `dir` whose name starts with `prefix`.
pub fn named(dir: &str, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// What is left of the run with this pid: files and directories named
/// after it, mounts on or of them, processes naming them, loop devices
/// attached to its image, and its loop device `loop_dev` (from its devemu
/// record) if it still exists unattached or is in a process's arguments.
pub fn leftovers(pid: u32, loop_dev: Option<&str>) -> Vec<String> {
    let mut left = Vec::new();
    let prefixes: Vec<String> = run_paths(pid)
        .iter()
        .map(|(d, p)| format!("{d}/{p}"))
        .collect();
    let ours = |s: &str| prefixes.iter().any(|p| s.starts_with(p.as_str()));
    for (d, p) in run_paths(pid) {
        for f in named(&d, &p) {
            left.push(format!("path {}", f.display()));
        }
    }
    for l in std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
    {
        let mp = l.split(' ').nth(4).unwrap_or("");
        let src = l.split(" - ").nth(1).and_then(|r| r.split(' ').nth(1));
        if ours(mp) || src.is_some_and(|s| ours(s) || Some(s) == loop_dev) {
            left.push(format!("mount {mp}"));
        }
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(c) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = c
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| ours(a) || Some(a.as_str()) == loop_dev) {
            left.push(format!(
                "process {}: {}",
                e.path().display(),
                args.join(" ")
            ));
        }
    }
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let b = std::fs::read_to_string(e.path().join("loop/backing_file")).unwrap_or_default();
        if ours(b.trim()) {
            left.push(format!("loop device {:?} on {}", e.file_name(), b.trim()));
        }
    }
    // The VM's blkio groups (QEMU's, and the vhost-user-blk backend's).
    for g in named("/sys/fs/cgroup/blkio", &format!("tandem-bench-{pid}-")) {
        left.push(format!("blkio group {}", g.display()));
    }
    if let Some(dev) = loop_dev {
        let sys = format!("/sys/block/{}", dev.trim_start_matches("/dev/"));
        // Unattached for a while: not another instance's being set up.
        let unbound =
            || Path::new(&sys).exists() && !Path::new(&sys).join("loop/backing_file").exists();
        if unbound() {
            std::thread::sleep(Duration::from_secs(1));
            if unbound() {
                left.push(format!("loop device {dev}, unattached"));
            }
        }
    }
    left
}

/// Polls `f` every 10 ms until it holds; fails the test, naming `what`,
/// after `secs` seconds.
#[track_caller]
pub fn wait_until(what: &str, secs: f64, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed().as_secs_f64() < secs,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child process, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Proc(pub std::process::Child);
impl Proc {
    pub fn spawn(cmd: &mut std::process::Command) -> Proc {
        Proc(
            cmd.stdin(std::process::Stdio::null())
                .spawn()
                .expect("spawn"),
        )
    }
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }
    /// SIGTERM and wait; returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        self.signal(libc::SIGTERM);
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(s)) = self.0.try_wait() {
                return s.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        false
    }
}
impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

/// Writes the scenario `text` to `s.toml` in a new scratch directory
/// `name`; returns the directory, the scenario file and the output
/// directory to give a run (`out` in it, not made).
pub fn scenario_dir(text: &str, name: &str) -> (Scratch, PathBuf, PathBuf) {
    let dir = Scratch::new(name);
    let scenario = dir.0.join("s.toml");
    std::fs::write(&scenario, text).unwrap();
    let out = dir.0.join("out");
    (dir, scenario, out)
}

/// A `tandem bench run` under way, for the tests that watch it, signal it
/// or kill what it started while it runs.
pub struct BenchRun(pub std::process::Child);

impl BenchRun {
    /// Starts `tandem bench run SCENARIO --out OUT --quiet ARGS`, with no
    /// input and its output piped.
    pub fn start(scenario: &Path, out: &Path, args: &[&str]) -> BenchRun {
        BenchRun(
            Command::new(env!("CARGO_BIN_EXE_tandem"))
                .args(["bench", "run"])
                .arg(scenario)
                .arg("--out")
                .arg(out)
                .arg("--quiet")
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// What the run wrote on stderr (all of it once the run has ended).
    pub fn stderr(&mut self) -> String {
        let mut e = String::new();
        let _ = std::io::Read::read_to_string(self.0.stderr.as_mut().unwrap(), &mut e);
        e
    }

    /// Fails the test, with the run's exit status and stderr, if the run
    /// has ended before `what`.
    #[track_caller]
    pub fn assert_running(&mut self, what: &str) {
        if let Ok(Some(st)) = self.0.try_wait() {
            panic!("the run ended before {what}: {st}: {}", self.stderr());
        }
    }

    /// Waits for the run to end, failing the test, named `what`, after
    /// `secs` seconds; its exit status and stderr.
    #[track_caller]
    pub fn end_within(&mut self, secs: f64, what: &str) -> (std::process::ExitStatus, String) {
        wait_until(what, secs, || self.0.try_wait().unwrap().is_some());
        let st = self.0.wait().unwrap();
        (st, self.stderr())
    }

    /// Waits for the run, which must succeed and leave none of its
    /// processes, files, mounts or loop devices behind ([`leftovers`]).
    #[track_caller]
    pub fn succeed(self) {
        let pid = self.pid();
        let r = self.0.wait_with_output().unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let left = leftovers(pid, None);
        assert!(left.is_empty(), "left behind: {left:#?}");
    }
}

/// `tandem bench run SCENARIO --out OUT --quiet ARGS` ([`BenchRun`]),
/// which must succeed and leave nothing behind; returns its results.csv.
pub fn bench_run_in(scenario: &Path, out: &Path, args: &[&str]) -> String {
    BenchRun::start(scenario, out, args).succeed();
    std::fs::read_to_string(out.join("results.csv")).unwrap()
}

/// [`bench_run_in`] on the scenario `text` in a scratch directory
/// ([`scenario_dir`]); returns the directory, the output directory and
/// results.csv.
pub fn bench_run(text: &str, name: &str, args: &[&str]) -> (Scratch, PathBuf, String) {
    let (dir, scenario, out) = scenario_dir(text, name);
    let csv = bench_run_in(&scenario, &out, args);
    (dir, out, csv)
}

/// The run's results.json in `out`.
pub fn results_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

/// The one failed cell of the run whose results.json is `json` (its
/// `failed_cells`, which must hold one): the cell and the reason.
#[track_caller]
pub fn one_failed_cell(json: &serde_json::Value) -> (String, String) {
    let failed = json["meta"]["extra"]["failed_cells"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let field = |k: &str| failed[0][k].as_str().unwrap().to_string();
    (field("cell"), field("reason"))
}

/// Runs `run` while `watch` runs on a thread of its own, given a flag that
/// is set once `run` has returned (or failed the test); returns what both
/// returned.
pub fn watching<R, T: Send>(
    watch: impl FnOnce(&AtomicBool) -> T + Send,
    run: impl FnOnce() -> R,
) -> (R, T) {
    /// Sets the flag when dropped: also when `run` panics, so that the
    /// watcher stops and the panic is not stuck waiting for it.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| watch(&stop));
        let r = {
            let _stop = Stop(&stop);
            run()
        };
        (r, w.join().unwrap())
    })
}

/// The arguments of a run whose guests boot `image`
/// ([`latency_guest_image`]) under TCG with 512 MiB of memory, on 16 MiB
/// files.
pub fn tcg_guest(image: &Path) -> Vec<&str> {
    let image = image.to_str().unwrap();
    vec![
        "--vm-image",
        image,
        "--vm-accel",
        "tcg",
        "--vm-mem-mib",
        "512",
        "--file-mib",
        "16",
    ]
}

/// A guest image with cyclictest (`tandem vm image`), built into a
/// directory kept between test runs (the .deb cache makes a rebuild take
/// seconds).
pub fn latency_guest_image() -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("latency-guest");
    let out = base.join("img");
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["vm", "image", "--out"])
        .arg(&out)
        .arg("--cache")
        .arg(base.join("debs"))
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tandem vm image: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}
