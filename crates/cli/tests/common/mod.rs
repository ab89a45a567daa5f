//! Helpers the command-line tests share.
// Each test binary uses a part of them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `tandem` binary under test with `args` and waits for it.
pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .expect("run tandem")
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

// ------------------------------------------------- what a test itself started
//
// Other users of the machine (a user's own hostd, other test runs) may run
// devemu daemons, QEMU, loop devices and FUSE mounts at the same time: a
// "nothing left behind" check looks only at what this test started.

/// Makes this test process the reaper of its orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`): a daemon that a run started and left behind
/// (the devemu daemon detaches with setsid) stays in this process's tree,
/// where [`descendants`] finds it, instead of going to init.
pub fn adopt_orphans() {
    // SAFETY: prctl with an integer argument, on this process only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(
        r,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// This process's live descendants (zombies excluded): pid and command line
/// (arguments split).
pub fn descendants() -> Vec<(u32, Vec<String>)> {
    // pid -> (parent, state) of every process.
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (Some(state), Some(Ok(ppid))) = (f.next(), f.next().map(str::parse::<u32>)) else {
            continue;
        };
        procs.push((pid, ppid, state == "Z"));
    }
    let mut mine = vec![std::process::id()];
    let mut i = 0;
    while i < mine.len() {
        let parent = mine[i];
        mine.extend(procs.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    mine.into_iter()
        .skip(1)
        .filter(|pid| !procs.iter().any(|p| p.0 == *pid && p.2))
        .filter_map(|pid| {
            let c = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = String::from_utf8_lossy(&c)
                .split('\0')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>();
            (!args.is_empty()).then_some((pid, args))
        })
        .collect()
}

/// An emulated device a run brought up, as its daemon's command line names
/// it: the backing file and the FUSE mount point.
#[derive(Clone, Debug, PartialEq)]
pub struct DevemuSeen {
    pub backing: String,
    pub mountpoint: String,
}

/// Adds to `seen` the emulated devices whose daemon (`tandem devemu serve`)
/// is now among this process's descendants. Called while a run goes on.
pub fn note_devemu(seen: &mut Vec<DevemuSeen>) {
    for (_, args) in descendants() {
        if !(args.iter().any(|a| a == "devemu") && args.iter().any(|a| a == "serve")) {
            continue;
        }
        let after = |flag: &str| {
            let i = args.iter().position(|a| a == flag)?;
            args.get(i + 1).cloned()
        };
        if let (Some(backing), Some(mountpoint)) = (after("--backing"), after("--mountpoint")) {
            let d = DevemuSeen {
                backing,
                mountpoint,
            };
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
    }
}

/// Loop devices whose backing file path contains `word`.
pub fn loops_with(word: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let f = e.path().join("loop/backing_file");
        if let Ok(b) = std::fs::read_to_string(&f) {
            if b.contains(word) {
                v.push(format!("{}: {}", e.file_name().to_string_lossy(), b.trim()));
            }
        }
    }
    v
}

/// What `tandem bench run` with pid `run_pid` left behind, from this test's
/// own view: live descendants of this process (with [`adopt_orphans`], any
/// process the run started), its run directory `/run/tandem/bench/<pid>`
/// and mounts and loop devices under it, its blkio groups
/// (`tandem-bench-<pid>-*`), and the emulated devices in `devemu`
/// (mounted, attached, or their backing file still there). Empty when the
/// run cleaned up.
pub fn leftovers_of_run(run_pid: u32, devemu: &[DevemuSeen]) -> Vec<String> {
    let mut left: Vec<String> = descendants()
        .into_iter()
        .map(|(pid, args)| format!("process {pid}: {}", args.join(" ")))
        .collect();
    let run_dir = format!("/run/tandem/bench/{run_pid}");
    if std::path::Path::new(&run_dir).exists() {
        left.push(run_dir.clone());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounted = |p: &str| {
        mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .any(|m| m == p || m.starts_with(&format!("{p}/")))
    };
    if mounted(&run_dir) {
        left.push(format!("a mount under {run_dir}"));
    }
    left.extend(loops_with(&format!("{run_dir}/")));
    for d in devemu {
        if mounted(&d.mountpoint) {
            left.push(format!("FUSE mount {}", d.mountpoint));
        }
        left.extend(loops_with(&d.backing));
        if std::path::Path::new(&d.backing).exists() {
            left.push(format!("backing file {}", d.backing));
        }
    }
    let prefix = format!("tandem-bench-{run_pid}-");
    for e in std::fs::read_dir("/sys/fs/cgroup/blkio")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&prefix) {
            left.push(format!("blkio group {n}"));
        }
    }
    left
}
