//! `tandem bench run` on an emulated 1.8-inch disk: BFQ against mq-deadline and
//! none under five sequential readers, and the cleanup guarantee when a run is
//! interrupted.
//!
//! All but the usage errors need root, /dev/fuse and loop devices: they are
//! `#[ignore = "needs root: ..."]`, run with `cargo test -- --include-ignored`
//! (as `tools/test` does, as root), and fail there when one is missing.
//!
//! "Nothing left behind" means nothing of the test's own runs: other runs
//! and emulated devices may be on the machine at the same time and are not
//! looked at (see `common::leftovers_of_run`).

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{
    adopt_orphans, descendants, leftovers_of_run, note_devemu, require, tandem, DevemuSeen, Need,
    Scratch, DEVEMU, MKFS_EXT4,
};

static SERIAL: Mutex<()> = Mutex::new(());

const SCENARIO: &str = r#"
name = "ci-real-hdd"
benchmark = "startup"
app = "bash"
iterations = 2
repetitions = 1
timeout_s = 30
seed = 1

[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq", "mq-deadline", "none"]
host_workload = ["5r-seq"]
"#;

/// What a run on an emulated disk needs: the disk, and ext4 to mount on it.
/// Also makes this test the reaper of what its runs leave behind, for
/// [`nothing_left`].
fn require_bench() {
    require(&DEVEMU);
    require(&[MKFS_EXT4, Need::Tool("mount", "mount")]);
    adopt_orphans();
}

/// Fails unless run `pid` left nothing behind (see `leftovers_of_run`).
fn nothing_left(pid: u32, devemu: &[DevemuSeen]) {
    let left = leftovers_of_run(pid, devemu);
    assert!(left.is_empty(), "run {pid} left: {left:#?}");
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Whether block device `dev` is mounted somewhere.
fn dev_mounted(dev: &str) -> bool {
    mounts().lines().any(|l| l.contains(&format!(" {dev} ")))
}

/// A scratch directory holding the CI scenario: the directory, the
/// scenario file and the output directory to give the run.
fn ci_scenario(name: &str) -> (Scratch, std::path::PathBuf, std::path::PathBuf) {
    let dir = Scratch::new(name);
    let scenario = dir.0.join("ci.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = dir.0.join("out");
    (dir, scenario, out)
}

/// `tandem bench run SCENARIO --out OUT --quiet ARGS...`, which must succeed
/// and leave nothing behind; returns its results.csv.
fn bench_run(scenario: &Path, out: &Path, args: &[&str]) -> String {
    let log = out.with_extension("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run"])
        .arg(scenario)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let (st, devemu) = wait_watching(&mut child, Duration::from_secs(1200));
    assert!(
        st.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    nothing_left(child.id(), &devemu);
    std::fs::read_to_string(out.join("results.csv")).unwrap()
}

/// Waits for `child` to end, at most `limit`, noting the emulated devices it
/// brings up on the way.
fn wait_watching(child: &mut Child, limit: Duration) -> (ExitStatus, Vec<DevemuSeen>) {
    let mut devemu = Vec::new();
    let t0 = Instant::now();
    loop {
        note_devemu(&mut devemu);
        if let Some(st) = child.try_wait().unwrap() {
            return (st, devemu);
        }
        assert!(t0.elapsed() < limit, "the run took more than {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The hypervisor's CPU steal over a run, as its results.json records it.
fn steal_share(out: &Path) -> Option<f64> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    meta.pointer("/meta/extra/cpu_steal_share")
        .and_then(|v| v.as_f64())
}

/// Mean start-up time per host scheduler from results.csv.
fn means(csv: &str) -> Vec<(String, f64)> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (s, m) = (col("host_sched"), col("mean"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[s].to_string(), f[m].parse().unwrap())
        })
        .collect()
}

#[test]
#[ignore = "needs root: an emulated disk (/dev/fuse, a loop device), ext4 and I/O schedulers"]
fn bfq_starts_the_app_in_under_half_the_time_under_5r_seq() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_bench();
    let (_dir, scenario, out) = ci_scenario("bench-bfq");
    let csv = bench_run(
        &scenario,
        &out,
        &["--file-mib", "32", "--settle-s", "6", "--pause-s", "2"],
    );
    assert!(csv.lines().skip(1).all(|l| l.starts_with("real,")), "{csv}");
    for f in [
        "results.json",
        "table.txt",
        "startup-hdd-1.8in.svg",
        "bfq-5r0w-seq-lat_thr_stat.txt",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // The hypervisor's CPU steal over the run is recorded with the results.
    let steal = steal_share(&out);
    assert!(steal.is_some_and(|s| (0.0..=1.0).contains(&s)), "{steal:?}");
    let m = means(&csv);
    let get = |s: &str| m.iter().find(|(n, _)| n == s).unwrap().1;
    let (bfq, dl, none) = (get("bfq"), get("mq-deadline"), get("none"));
    assert!(bfq * 2.0 < dl, "bfq {bfq:.2} s vs mq-deadline {dl:.2} s");
    assert!(bfq * 2.0 < none, "bfq {bfq:.2} s vs none {none:.2} s");
    // bench_run checked that nothing was left behind.
}

/// Starts `tandem bench run` of the CI scenario's bfq cell, quietly, with
/// `extra` arguments; its outputs go to `out`.
fn spawn_run(scenario: &Path, out: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "bench",
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--file-mib",
            "16",
            "--only",
            "host_sched=bfq",
            "--quiet",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// An emulated disk of the test's own with mq-deadline on it: the device and
/// its scheduler file.
fn own_device() -> (String, String) {
    let up = tandem(&["devemu", "up", "--model", "hdd-1.8in", "--size", "512M"]);
    assert!(up.status.success());
    let dev = String::from_utf8_lossy(&up.stdout).trim().to_string();
    let name = dev.trim_start_matches("/dev/").to_string();
    let sched_file = format!("/sys/block/{name}/queue/scheduler");
    std::fs::write(&sched_file, "mq-deadline").unwrap();
    (dev, sched_file)
}

/// Waits until the run `child` has its background workers going (then 2 s
/// more), so that it has changed what it changes; returns the emulated
/// devices it brought up.
fn wait_for_workers(child: &mut Child) -> Vec<DevemuSeen> {
    let mut devemu = Vec::new();
    let t0 = Instant::now();
    loop {
        note_devemu(&mut devemu);
        if workers_running() {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the run ended before its workers started: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no workers after 300 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    devemu
}

/// Whether a background reader of this test's runs is running.
fn workers_running() -> bool {
    descendants().iter().any(|(_, args)| {
        ["bench", "worker", "seq-read"]
            .iter()
            .all(|w| args.iter().any(|a| a == w))
    })
}

/// Sends `sig` to the run and waits for it to end.
fn signal_and_wait(child: &mut Child, sig: i32) -> std::process::ExitStatus {
    // SAFETY: a signal to the run we started.
    unsafe { libc::kill(child.id() as i32, sig) };
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run did not stop within 60 s of signal {sig}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Interrupts the run (Ctrl-C) once its background workers run; returns
/// how it ended and the emulated devices it brought up.
fn interrupt_midway(mut child: Child) -> (ExitStatus, Vec<DevemuSeen>) {
    let devemu = wait_for_workers(&mut child);
    (signal_and_wait(&mut child, libc::SIGINT), devemu)
}

#[test]
#[ignore = "needs root: an emulated disk (/dev/fuse, a loop device), ext4 and I/O schedulers"]
fn an_interrupted_run_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_bench();
    let (_dir, scenario, out) = ci_scenario("bench-kill");

    // 1. On an emulated device the run brings up itself.
    let child = spawn_run(&scenario, &out, &[]);
    let pid = child.id();
    let (st, devemu) = interrupt_midway(child);
    assert!(!st.success());
    assert_eq!(devemu.len(), 1, "one emulated disk: {devemu:?}");
    // No worker, app, devemu daemon, mount, loop device or directory of it.
    nothing_left(pid, &devemu);

    // 2. On a device given with --device: its scheduler comes back.
    let (dev, sched_file) = own_device();
    let child = spawn_run(&scenario, &out, &["--device", &dev]);
    let pid = child.id();
    let (st, _) = interrupt_midway(child);
    assert!(!st.success());
    let sched = std::fs::read_to_string(&sched_file).unwrap();
    assert!(
        sched.contains("[mq-deadline]"),
        "scheduler not restored: {sched}"
    );
    assert!(!workers_running(), "workers left");
    assert!(!dev_mounted(&dev), "{dev} still mounted");
    let down = tandem(&["devemu", "down", &dev]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!Path::new(&dev).exists());
    nothing_left(pid, &[]);
}

/// Without root, a run is refused (exit code 1) with a message that says
/// so. As root, the test runs tandem as the unprivileged user `nobody`.
#[test]
fn a_run_without_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let (dir, scenario, out) = ci_scenario("bench-noroot");
    // nobody reads the scenario and may write the output directory.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(["bench", "run"])
        .arg(&scenario)
        .arg("--out")
        .arg(&out);
    if devemu::is_root() {
        // nobody and nogroup on Debian.
        cmd.uid(65534).gid(65534);
    }
    let r = cmd.output().unwrap();
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{e}");
    assert!(e.contains("needs root"), "{e}");
}

#[test]
#[ignore = "needs root: the refusals come after the root check; an emulated disk for one"]
fn refusals() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_bench();
    let (dir, scenario, out) = ci_scenario("bench-refuse");
    let s = scenario.to_str().unwrap();
    let o = out.to_str().unwrap();
    // No such device.
    let r = tandem(&[
        "bench",
        "run",
        s,
        "--out",
        o,
        "--device",
        "/dev/nonexistent-disk",
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("no such device"));
    // A scheduler the device lacks.
    let bad = dir.0.join("cfq.toml");
    std::fs::write(
        &bad,
        SCENARIO.replace("\"bfq\", \"mq-deadline\", \"none\"", "\"cfq\""),
    )
    .unwrap();
    let log = dir.0.join("cfq.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run", bad.to_str().unwrap(), "--out", o, "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let (st, devemu) = wait_watching(&mut child, Duration::from_secs(300));
    assert_eq!(st.code(), Some(2));
    let e = std::fs::read_to_string(&log).unwrap();
    assert!(e.contains("cfq") && e.contains("bfq"), "{e}");
    // The emulated disk it brought up to find that out is gone.
    nothing_left(child.id(), &devemu);
    // A mounted device with data: the root filesystem's.
    let root_dev = mounts()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|r| r.split(' ').nth(1))
        .map(str::to_string)
        .unwrap();
    if root_dev.starts_with("/dev/") {
        let r = tandem(&["bench", "run", s, "--out", o, "--device", &root_dev]);
        assert_eq!(r.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&r.stderr).contains("refused unless --force"));
    }
    // Unknown scheduler name in the scenario.
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, SCENARIO.replace("\"none\"]", "\"elevator9\"]")).unwrap();
    let r = tandem(&["bench", "run", bad.to_str().unwrap(), "--out", o]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("elevator9"));
    // A boost budget hostd would refuse, refused before any guest boots.
    let r = tandem(&[
        "bench",
        "run",
        "cloud2014-real",
        "--out",
        o,
        "--hostd-budget-fraction",
        "1.5",
    ]);
    assert_eq!(r.status.code(), Some(2));
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("budget_fraction is 1.5"), "{e}");
}

#[test]
#[ignore = "needs root: an emulated disk (/dev/fuse, a loop device), ext4 and I/O schedulers"]
fn one_sequential_reader_gets_the_emulated_disk_rate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_bench();
    let dir = Scratch::new("bench-thr");
    let scenario = dir.0.join("thr.toml");
    std::fs::write(
        &scenario,
        r#"
name = "ci-real-thr"
benchmark = "throughput"
app = "bash"
repetitions = 1
duration_s = 6
sample_s = 2
seed = 1

[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq"]
host_workload = ["1r-seq"]
"#,
    )
    .unwrap();
    // The model's peak is 10.0 MB/s; buffered reads with 128 KiB read-ahead
    // get it. As in the devemu test, the emulated disk is late while the
    // hypervisor steals CPU time (`devemu::probe::STEAL_WARN_SHARE`): a run
    // that misses under steal is taken again, up to three in all; a miss
    // without steal fails at once.
    let mut attempts = Vec::new();
    let mut within = false;
    let mut stolen = true;
    while !within && stolen && attempts.len() < 3 {
        let out = dir.0.join(format!("out{}", attempts.len()));
        let csv = bench_run(&scenario, &out, &["--file-mib", "64", "--settle-s", "3"]);
        assert!(csv.contains("throughput_mb_s"), "{csv}");
        let mb_s = means(&csv)[0].1;
        let steal = steal_share(&out).unwrap_or(0.0);
        within = (9.0..=11.0).contains(&mb_s);
        stolen = steal > devemu::probe::STEAL_WARN_SHARE;
        attempts.push(format!("{mb_s:.2} MB/s, CPU steal {:.1}%", steal * 100.0));
    }
    assert!(within, "no run within 9-11 MB/s:\n{}", attempts.join("\n"));
}

#[test]
#[ignore = "needs root: an emulated disk (/dev/fuse, a loop device), ext4 and I/O schedulers"]
fn a_killed_run_is_undone_by_bench_cleanup() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_bench();
    let (_dir, scenario, out) = ci_scenario("bench-sigkill");
    // A device of the test's own, whose scheduler the run changes to bfq.
    let (dev, sched_file) = own_device();
    let mut child = spawn_run(&scenario, &out, &["--device", &dev]);
    let pid = child.id();
    wait_for_workers(&mut child);
    // While the run lives (it holds its directory's lock), cleanup leaves
    // it alone. (It may undo other runs that died on this machine: only
    // what it says of this one is looked at.)
    let cl = tandem(&["bench", "cleanup"]);
    let said = String::from_utf8_lossy(&cl.stdout).to_string();
    assert!(cl.status.success(), "{said}");
    assert!(!said.contains(&format!("run {pid}:")), "{said}");
    assert!(child.try_wait().unwrap().is_none(), "the run ended");
    assert!(std::fs::read_to_string(&sched_file)
        .unwrap()
        .contains("[bfq]"));
    let st = signal_and_wait(&mut child, libc::SIGKILL);
    assert!(!st.success());

    // SIGKILL gave the run no chance: the scheduler is still bfq and the work
    // directory still mounted. The workers die with the run (PR_SET_PDEATHSIG).
    let sched = std::fs::read_to_string(&sched_file).unwrap();
    assert!(sched.contains("[bfq]"), "{sched}");
    assert!(
        dev_mounted(&dev),
        "the work directory should still be mounted"
    );
    let t0 = Instant::now();
    while workers_running() {
        assert!(t0.elapsed() < Duration::from_secs(10), "workers left");
        std::thread::sleep(Duration::from_millis(100));
    }

    let cl = tandem(&["bench", "cleanup"]);
    let said = String::from_utf8_lossy(&cl.stdout).to_string();
    assert!(
        cl.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&cl.stderr)
    );
    assert!(said.contains(&format!("run {pid}:")), "{said}");
    assert!(said.contains("back to mq-deadline"), "{said}");
    let sched = std::fs::read_to_string(&sched_file).unwrap();
    assert!(
        sched.contains("[mq-deadline]"),
        "scheduler not restored: {sched}"
    );
    assert!(!dev_mounted(&dev), "{dev} still mounted");
    let again = tandem(&["bench", "cleanup"]);
    let said = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(
        !said.contains(&format!("run {pid}:")),
        "undone twice: {said}"
    );

    let down = tandem(&["devemu", "down", &dev]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    nothing_left(pid, &[]);

    // 2. A run on an emulated disk it brought up itself: the disk outlives
    // the SIGKILL, and the cleanup tears it down.
    let mut child = spawn_run(&scenario, &out, &[]);
    let pid = child.id();
    let devemu = wait_for_workers(&mut child);
    let st = signal_and_wait(&mut child, libc::SIGKILL);
    assert!(!st.success());
    assert_eq!(devemu.len(), 1, "one emulated disk: {devemu:?}");
    assert!(
        !leftovers_of_run(pid, &devemu).is_empty(),
        "the emulated disk should have outlived the run"
    );
    let cl = tandem(&["bench", "cleanup"]);
    let said = String::from_utf8_lossy(&cl.stdout).to_string();
    assert!(cl.status.success(), "{said}");
    assert!(
        said.contains(&format!("run {pid}:")) && said.contains("tear down the emulated device"),
        "{said}"
    );
    nothing_left(pid, &devemu);
}
