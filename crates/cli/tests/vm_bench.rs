//! `tandem bench run` in VM mode, from nothing: the run builds the guest
//! image from Debian packages, brings up an emulated 1.8-inch disk, puts the
//! guest's disk image on it, boots the guest under QEMU (KVM if it really
//! runs a guest, TCG otherwise), runs one reader in the guest, makes two
//! starts of the app with tandem hostd and guestd coordinating, and leaves
//! nothing behind: no QEMU, no hostd, no loop device, no FUSE mount.
//!
//! Needs root, /dev/fuse, loop devices, qemu-system-x86 and apt's access to
//! Debian's packages: the tests are `#[ignore = "needs root, ..."]`, run with
//! `cargo test -- --include-ignored` by `tools/test` (which installs what is
//! missing), and fail there when something is still missing.
//!
//! "Nothing behind" means nothing of this test's run: other runs, a user's
//! own hostd or QEMU may be on the machine at the same time and are not
//! looked at (see `common::leftovers_of_run`).

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{
    adopt_orphans, descendants, leftovers_of_run, note_devemu, require, DevemuSeen, Need, Scratch,
    DEVEMU, MKFS_EXT4,
};

static SERIAL: Mutex<()> = Mutex::new(());

const SCENARIO: &str = r#"
name = "ci-vm"
benchmark = "startup"
app = "xterm"
iterations = 2
repetitions = 1
timeout_s = 60
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["1r-seq"]
host_sched = ["bfq"]
host_workload = ["none"]
coordination = ["help-rt"]
"#;

/// What a VM cell needs: an emulated disk, ext4, QEMU, and apt (the guest
/// image is made of Debian's kernel and busybox packages).
fn require_vm() {
    require(&DEVEMU);
    require(&[
        MKFS_EXT4,
        Need::Tool("qemu-system-x86_64", "qemu-system-x86"),
        Need::Tool("apt-get", "apt"),
        Need::Tool("objcopy", "binutils"),
    ]);
}

/// Starts `tandem bench run` on the CI scenario in `dir`, with `args`.
fn spawn_run(dir: &Scratch, args: &[&str]) -> Child {
    let scenario = dir.0.join("ci-vm.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run"])
        .arg(&scenario)
        .arg("--out")
        .arg(dir.0.join("out"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // A file, not a pipe: the test polls the run and reads its messages
        // only at the end.
        .stderr(std::fs::File::create(dir.p("stderr.log")).unwrap())
        .spawn()
        .unwrap()
}

/// The run's standard error (once it has ended).
fn stderr_of(dir: &Scratch) -> String {
    std::fs::read_to_string(dir.p("stderr.log")).unwrap_or_default()
}

#[test]
#[ignore = "needs root, qemu-system-x86_64 and apt: an emulated disk and a guest built from Debian packages"]
fn a_vm_cell_runs_in_a_real_guest_and_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_vm();
    adopt_orphans();
    let dir = Scratch::new("vm-bench");
    let out = dir.0.join("out");
    let mut child = spawn_run(
        &dir,
        &[
            "--file-mib",
            "32",
            "--settle-s",
            "3",
            "--pause-s",
            "1",
            "--quiet",
        ],
    );
    // The emulated disk the run brings up, seen while it runs: its daemon's
    // command line names its backing file and mount point.
    let mut devemu = Vec::new();
    let t0 = Instant::now();
    let st = loop {
        note_devemu(&mut devemu);
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1800),
            "the run took more than 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = stderr_of(&dir);
    assert!(st.success(), "tandem bench run failed: {stderr}");
    assert_eq!(devemu.len(), 1, "one emulated disk: {devemu:?}");

    // The result files, with two starts measured in the guest.
    for f in ["results.json", "results.csv", "table.txt"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let meta = &r["meta"];
    assert_eq!(meta["runner"], "real");
    let accel = meta["extra"]["vm"]["accel"].as_str().unwrap_or("");
    assert!(accel == "kvm" || accel == "tcg", "accel {accel:?}");
    assert_eq!(meta["extra"]["vm"]["blkio_group"], "own");
    assert!(meta["extra"]["vm"]["guest_kernel"]
        .as_str()
        .is_some_and(|k| k.ends_with("-amd64")));
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    let run0 = &cells[0]["runs"][0];
    let values: Vec<f64> = run0["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(values.len(), 2, "two starts: {run0}");
    assert_eq!(run0["timeouts"], 0);
    // The xterm trace reads about 10 MB from a 10 MB/s disk: a start takes
    // at least half a second whatever the guest's CPU.
    assert!(values.iter().all(|v| *v > 0.5 && *v < 60.0), "{values:?}");
    // guestd saw the app's exec and asked; hostd boosted the VM.
    let helps = run0["counters"]["vm1_helps"].as_f64().unwrap_or(0.0);
    let boosted = run0["counters"]["vm1_boosted_s"].as_f64().unwrap_or(0.0);
    assert!(
        helps >= 2.0,
        "helps {helps} (counters {})",
        run0["counters"]
    );
    assert!(boosted > 0.0, "boosted {boosted}");
    // A short cell stays within its budget; the counter is there to show it.
    assert_eq!(
        run0["counters"]["vm1_budget_denials"].as_f64(),
        Some(0.0),
        "counters {}",
        run0["counters"]
    );
    // With a cgroup v1 blkio hierarchy (this host has one), hostd moves the
    // boosted VM's I/O threads out of the VM's own group.
    let logs = out.join("vm-logs");
    let hostd_log = std::fs::read_dir(&logs)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("hostd.log")).ok())
        .collect::<String>();
    assert!(
        hostd_log.contains("actuators: ioprio, blkio-cgroup-move, bfq-idling"),
        "{hostd_log}"
    );

    nothing_left(child.id(), &devemu);
}

/// Nothing of run `run_pid` left: no process it started (QEMU, hostd,
/// workers, the devemu daemon), no mount, loop device or directory of its
/// own, no blkio group of its, and the emulated disk `devemu` gone.
fn nothing_left(run_pid: u32, devemu: &[DevemuSeen]) {
    let left = leftovers_of_run(run_pid, devemu);
    assert!(left.is_empty(), "the run left: {left:#?}");
}

#[test]
#[ignore = "needs root, qemu-system-x86_64 and apt: an emulated disk and a guest built from Debian packages"]
fn ctrl_c_in_a_vm_cell_stops_qemu_and_hostd_and_leaves_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_vm();
    adopt_orphans();
    let dir = Scratch::new("vm-bench-kill");
    let mut child = spawn_run(&dir, &["--file-mib", "32", "--settle-s", "30", "--quiet"]);
    let pid = child.id();
    // Wait until the run's guest and hostd are both up, then Ctrl-C.
    let mut devemu = Vec::new();
    let t0 = Instant::now();
    loop {
        note_devemu(&mut devemu);
        let mine = descendants();
        let running = |words: &[&str]| {
            mine.iter()
                .any(|(_, args)| words.iter().all(|w| args.iter().any(|a| a.contains(w))))
        };
        if running(&["qemu-system"]) && running(&["hostd", "run"]) {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "the run ended before its guest was up: {st}: {}",
                stderr_of(&dir)
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "no guest and hostd after 600 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: SIGINT to the run we started.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the run did not stop within 90 s of Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!st.success());
    let e = stderr_of(&dir);
    assert!(e.contains("interrupted"), "{e}");
    assert_eq!(devemu.len(), 1, "one emulated disk: {devemu:?}");
    nothing_left(pid, &devemu);
}
