//! `tandem bench run` on an emulated 1.8-inch disk: BFQ against mq-deadline and
//! none under five sequential readers, the cleanup guarantee when a run is
//! interrupted, and the results of the cells finished before it stopped.
//!
//! Most tests need root, /dev/fuse and loop devices: they are ignored by
//! default and CI runs them with `-- --include-ignored` as root. They check
//! and clean only what they made themselves (found by the names a run gives
//! things after its pid), since other runs may use devices at the same time.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;

use common::{
    bench_run, bench_run_in, leftovers, named, processes_with, tandem, BenchRun, Scratch,
};
use nix::sys::signal::Signal;

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

fn can_run() -> bool {
    devemu::is_root() && Path::new("/dev/fuse").exists() && Path::new("/dev/loop-control").exists()
}

/// For the tests that need them: fails (never skips) without them.
fn need_devices() {
    assert!(
        can_run(),
        "needs root, /dev/fuse and /dev/loop-control (the test is ignored by default)"
    );
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Whether block device `dev` is mounted somewhere.
fn dev_mounted(dev: &str) -> bool {
    mounts().lines().any(|l| l.contains(&format!(" {dev} ")))
}

/// A scratch directory holding the CI scenario ([`common::scenario_dir`]):
/// the directory, the scenario file and the output directory to give the
/// run.
fn ci_scenario(name: &str) -> (Scratch, std::path::PathBuf, std::path::PathBuf) {
    common::scenario_dir(SCENARIO, name)
}

/// The hypervisor's CPU steal over a run, as its results.json records it.
fn steal_share(out: &Path) -> Option<f64> {
    let meta = common::results_json(out);
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
#[ignore = "needs root: an emulated device (FUSE, loop device)"]
fn bfq_starts_the_app_in_under_half_the_time_under_5r_seq() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let args = ["--file-mib", "32", "--settle-s", "6", "--pause-s", "2"];
    let (_dir, out, csv) = bench_run(SCENARIO, "bench-bfq", &args);
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
    // Nothing left behind: checked by bench_run.
}

/// A native start-up run records the CPU time of the app's starts and of
/// the host workload's processes over the measurement, from their
/// schedstat (`bench::cputime`), under the names the simulator uses for the
/// app's.
#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device)"]
fn a_native_start_up_records_the_app_and_workload_cpu_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let (_dir, out, _) = bench_run(
        SCENARIO,
        "bench-cpu",
        &[
            "--file-mib",
            "32",
            "--settle-s",
            "2",
            "--pause-s",
            "1",
            "--only",
            "host_sched=bfq",
        ],
    );
    let json = common::results_json(&out);
    let run = &json["cells"][0]["runs"][0];
    let counter = |k: &str| run["counters"][k].as_f64().unwrap_or(f64::NAN);
    for k in [
        "app_run_ms",
        "app_slices",
        "host_workload_run_ms",
        "host_workload_slices",
    ] {
        assert!(counter(k) > 0.0, "{k}: {run}");
    }
    // Per start, the simulator's names: CPU time in seconds and its share of
    // the start-up time.
    let (cpu_s, share) = (counter("app_cpu_s"), counter("app_cpu_share"));
    assert!(cpu_s > 0.0 && cpu_s * 1e3 <= counter("app_run_ms"), "{run}");
    assert!(share > 0.0 && share <= 1.0, "{run}");
    // A native cell has no guest and no QEMU.
    assert!(run["counters"].get("qemu_main_run_ms").is_none(), "{run}");
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
/// more), so that it has changed what it changes.
fn wait_for_workers(child: &mut Child) {
    let pid = child.id();
    let t0 = Instant::now();
    loop {
        let workers: Vec<u32> = processes_with(&["bench", "worker", "seq-read"]);
        let ours = workers.iter().any(|w| {
            std::fs::read_to_string(format!("/proc/{w}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .map(|r| r.split_whitespace().nth(1) == Some(&pid.to_string()))
                })
                .unwrap_or(false)
        });
        if ours {
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
}

/// Sends `sig` to the run and waits for it to end.
fn signal_and_wait(child: &mut Child, sig: Signal) -> std::process::ExitStatus {
    let _ = common::send_signal(child.id(), sig);
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

/// Interrupts the run (Ctrl-C) once its background workers run.
fn interrupt_midway(mut child: Child) -> std::process::ExitStatus {
    wait_for_workers(&mut child);
    signal_and_wait(&mut child, Signal::SIGINT)
}

#[test]
#[ignore = "needs root: emulated devices (FUSE, loop devices)"]
fn an_interrupted_run_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let (_dir, scenario, out) = ci_scenario("bench-kill");

    // 1. On an emulated device the run brings up itself.
    let child = spawn_run(&scenario, &out, &[]);
    let pid = child.id();
    let st = interrupt_midway(child);
    assert!(!st.success());
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");

    // 2. On a device given with --device: its scheduler comes back.
    let (dev, sched_file) = own_device();
    let child = spawn_run(&scenario, &out, &["--device", &dev]);
    let pid = child.id();
    let st = interrupt_midway(child);
    assert!(!st.success());
    let left = leftovers(pid, Some(&dev));
    assert!(left.is_empty(), "left behind: {left:#?}");
    let sched = std::fs::read_to_string(&sched_file).unwrap();
    assert!(
        sched.contains("[mq-deadline]"),
        "scheduler not restored: {sched}"
    );
    assert!(!dev_mounted(&dev), "{dev} still mounted");
    let down = tandem(&["devemu", "down", &dev]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!Path::new(&dev).exists());
}

/// The rows of results.csv after its header.
fn csv_rows(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("results.csv"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Waits until the run has written `n` rows to results.csv (its first cells
/// done), at most 300 s.
fn wait_for_rows(child: &mut Child, out: &Path, n: usize) {
    let t0 = Instant::now();
    while csv_rows(out).len() < n {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the run ended before {n} cells were done: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no {n} rows in results.csv after 300 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The cells' keys in a results.json, and its provenance.
fn json_cells(out: &Path) -> (Vec<String>, serde_json::Value) {
    let j = common::results_json(out);
    let cells = j["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cell"]["host_sched"].as_str().unwrap().to_string())
        .collect();
    (cells, j["meta"]["extra"]["provenance"].clone())
}

#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device)"]
fn a_run_stopped_after_a_cell_keeps_that_cells_results() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let (_dir, scenario, out) = ci_scenario("bench-keep");
    // The three cells (bfq, mq-deadline, none), in matrix order.
    let run =
        |out: &Path| BenchRun::start(&scenario, out, &["--file-mib", "16", "--settle-s", "1"]).0;

    // 1. Ctrl-C in the second cell: the first cell's row and results.json
    // stay, marked incomplete and interrupted.
    let mut child = run(&out);
    let pid = child.id();
    wait_for_rows(&mut child, &out, 1);
    let st = signal_and_wait(&mut child, Signal::SIGINT);
    assert!(!st.success());
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let rows = csv_rows(&out);
    assert!(!rows.is_empty() && rows.len() < 3, "{rows:?}");
    assert!(rows[0].contains(",bfq,"), "{rows:?}");
    let (cells, prov) = json_cells(&out);
    assert_eq!(cells.len(), rows.len(), "{cells:?}");
    assert_eq!(cells[0], "bfq");
    assert_eq!(prov["complete"], false, "{prov}");
    assert_eq!(prov["interrupted_by"], "SIGINT", "{prov}");
    assert_eq!(prov["cells_planned"], 3, "{prov}");
    assert!(
        err.contains(&format!("{} of 3 cells were measured", cells.len())),
        "{err}"
    );
    assert!(std::fs::read_to_string(out.join("table.txt"))
        .unwrap()
        .contains("bfq"));
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");

    // 2. SIGKILL (a crash: no chance to write anything more) after the first
    // cell: results.csv and results.json already hold it.
    let out2 = out.with_file_name("out-killed");
    let mut child = run(&out2);
    let pid = child.id();
    wait_for_rows(&mut child, &out2, 1);
    let st = signal_and_wait(&mut child, Signal::SIGKILL);
    assert!(!st.success());
    let rows = csv_rows(&out2);
    assert!(rows[0].contains(",bfq,"), "{rows:?}");
    let (cells, prov) = json_cells(&out2);
    assert!(cells.first().is_some_and(|c| c == "bfq"), "{cells:?}");
    assert_eq!(prov["complete"], false, "{prov}");
    let cl = tandem(&["bench", "cleanup"]);
    assert!(cl.status.success());
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
fn refusals() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, scenario, out) = ci_scenario("bench-refuse");
    let s = scenario.to_str().unwrap();
    let o = out.to_str().unwrap();
    if !devemu::is_root() {
        let r = tandem(&["bench", "run", s, "--out", o]);
        assert_eq!(r.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&r.stderr).contains("root"));
        return;
    }
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
    if can_run() {
        let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["bench", "run", bad.to_str().unwrap(), "--out", o, "--quiet"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let r = child.wait_with_output().unwrap();
        assert_eq!(r.status.code(), Some(2));
        let e = String::from_utf8_lossy(&r.stderr);
        assert!(e.contains("cfq") && e.contains("bfq"), "{e}");
        // The emulated device it brought up is gone.
        let left = leftovers(pid, None);
        assert!(left.is_empty(), "left behind: {left:#?}");
    }
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
        let e = String::from_utf8_lossy(&r.stderr);
        assert!(e.contains("mounted on /") && e.contains("refused"), "{e}");
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
#[ignore = "needs root: an emulated device (FUSE, loop device)"]
fn one_sequential_reader_gets_the_emulated_disk_rate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let (dir, scenario, _) = common::scenario_dir(
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
        "bench-thr",
    );
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
        let csv = bench_run_in(&scenario, &out, &["--file-mib", "64", "--settle-s", "3"]);
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
#[ignore = "needs root: emulated devices (FUSE, loop devices)"]
fn a_killed_run_is_undone_by_bench_cleanup() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let (_dir, scenario, out) = ci_scenario("bench-sigkill");
    // A device of the test's own, whose scheduler the run changes to bfq.
    let (dev, sched_file) = own_device();
    let mut child = spawn_run(&scenario, &out, &["--device", &dev]);
    let pid = child.id();
    wait_for_workers(&mut child);
    // While the run lives (it holds its directory's lock), cleanup leaves
    // it alone.
    let cl = tandem(&["bench", "cleanup"]);
    assert!(
        !String::from_utf8_lossy(&cl.stdout).contains(&format!("run {pid}:")),
        "{}",
        String::from_utf8_lossy(&cl.stdout)
    );
    assert!(child.try_wait().unwrap().is_none(), "the run ended");
    assert!(std::fs::read_to_string(&sched_file)
        .unwrap()
        .contains("[bfq]"));
    let st = signal_and_wait(&mut child, Signal::SIGKILL);
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
    while !children_of(pid).is_empty() {
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
    let left = leftovers(pid, Some(&dev));
    assert!(left.is_empty(), "left behind: {left:#?}");
    let again = tandem(&["bench", "cleanup"]);
    assert!(!String::from_utf8_lossy(&again.stdout).contains(&format!("run {pid}:")));

    let down = tandem(&["devemu", "down", &dev]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );

    // 2. A run on an emulated disk it brought up itself: the disk outlives
    // the SIGKILL, and the cleanup tears it down.
    let mut child = spawn_run(&scenario, &out, &[]);
    let pid = child.id();
    wait_for_workers(&mut child);
    let st = signal_and_wait(&mut child, Signal::SIGKILL);
    assert!(!st.success());
    assert!(
        leftovers(pid, None)
            .iter()
            .any(|l| l.starts_with("process") && l.contains("devemu serve")),
        "the emulated disk should have outlived the run"
    );
    let cl = tandem(&["bench", "cleanup"]);
    let said = String::from_utf8_lossy(&cl.stdout).to_string();
    assert!(cl.status.success(), "{said}");
    assert!(
        said.contains(&format!("run {pid}:")) && said.contains("tear down the emulated device"),
        "{said}"
    );
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

// ---------------------------------------------------------------------------
// Data safety: what `--device` refuses (issue 22). Each test makes its own
// scratch file and loop device, and removes both.

/// A loop device over a scratch file of the test's own; detached and
/// removed on drop.
struct ScratchDisk {
    _dir: Scratch,
    file: std::path::PathBuf,
    dev: String,
}

impl ScratchDisk {
    /// A zeroed disk of `mib` MiB; `prepare` writes to its file before the
    /// loop device is attached.
    fn new(name: &str, mib: u64, prepare: impl FnOnce(&Path)) -> ScratchDisk {
        let dir = Scratch::new(name);
        let file = dir.p("disk.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        prepare(&file);
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        ScratchDisk {
            _dir: dir,
            file,
            dev,
        }
    }

    /// The whole disk's bytes.
    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.file).unwrap()
    }
}

impl Drop for ScratchDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

fn run_ok(prog: &str, args: &[&str]) {
    let out = Command::new(prog).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An MBR with one Linux partition from sector 2048 to the end, and an ext4
/// file system in it holding a file.
fn mbr_with_ext4_partition(file: &Path) {
    use std::io::{Seek, SeekFrom, Write};
    let sectors = std::fs::metadata(file).unwrap().len() / 512;
    let mut mbr = [0u8; 512];
    let entry = &mut mbr[446..462];
    entry[4] = 0x83; // Linux
    entry[8..12].copy_from_slice(&2048u32.to_le_bytes());
    entry[12..16].copy_from_slice(&((sectors - 2048) as u32).to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    let mut f = OpenOptions::new().write(true).open(file).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&mbr).unwrap();
    drop(f);
    let part_kib = (sectors - 2048) / 2;
    let f = file.to_str().unwrap();
    run_ok(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-E",
            "offset=1048576",
            f,
            &format!("{part_kib}k"),
        ],
    );
    let mnt = file.with_file_name("part");
    std::fs::create_dir_all(&mnt).unwrap();
    run_ok(
        "mount",
        &["-o", "loop,offset=1048576", f, mnt.to_str().unwrap()],
    );
    std::fs::write(mnt.join("precious.txt"), "the user's data\n").unwrap();
    run_ok("umount", &[mnt.to_str().unwrap()]);
}

/// A one-cell native scenario with nothing in the background: the least a
/// run writes.
const ONE_CELL: &str = r#"
name = "ci-one-cell"
benchmark = "startup"
app = "bash"
iterations = 1
repetitions = 1
timeout_s = 30
seed = 1

[matrix]
device = ["hdd-1.8in"]
host_sched = ["mq-deadline"]
host_workload = ["none"]
"#;

/// `tandem bench run` of [`ONE_CELL`] on `dev` with `extra` arguments, and
/// an environment change; no terminal on stdin.
fn run_on(dev: &str, extra: &[&str], path: Option<&Path>) -> std::process::Output {
    let dir = Scratch::new("bench-one");
    std::fs::write(dir.p("one.toml"), ONE_CELL).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(["bench", "run"])
        .arg(dir.p("one.toml"))
        .arg("--out")
        .arg(dir.p("out"))
        .args([
            "--quiet",
            "--file-mib",
            "8",
            "--pause-s",
            "0",
            "--device",
            dev,
        ])
        .args(extra)
        .stdin(Stdio::null());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().unwrap();
    eprintln!(
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out
}

/// A refusal: exit code 2, the finding named, the device byte for byte as
/// it was.
fn assert_refused(disk: &ScratchDisk, extra: &[&str], finding: &str) {
    let before = disk.bytes();
    let out = run_on(&disk.dev, extra, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(finding), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(disk.bytes() == before, "the device was written to");
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn refuses_a_disk_with_a_partition_table() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-mbr", 128, mbr_with_ext4_partition);
    assert_refused(&disk, &[], "a dos partition table");
    // A bare --force, and one naming another device, are no consent.
    assert_refused(&disk, &["--force", "/dev/null"], "does not name");
    let out = run_on(&disk.dev, &["--force"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force needs the device again"));
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn refuses_raw_data_without_a_signature() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Bytes no probe knows, near the end of the disk only.
    let disk = ScratchDisk::new("guard-raw", 128, |f| {
        let f = OpenOptions::new().write(true).open(f).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"raw user data", (128 << 20) - 4096).unwrap();
    });
    assert_refused(&disk, &[], "non-zero data in its last MiB");
    let disk = ScratchDisk::new("guard-raw2", 128, |f| {
        let f = OpenOptions::new().write(true).open(f).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0x5a; 512], 8192).unwrap();
    });
    assert_refused(&disk, &[], "non-zero data in its first MiB");
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn refuses_an_ext4_disk() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-ext4", 128, |f| {
        run_ok("mkfs.ext4", &["-q", "-F", f.to_str().unwrap()])
    });
    assert_refused(&disk, &[], "an ext4 file system");
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn a_missing_probe_tool_is_an_error() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-nowipefs", 128, |f| {
        run_ok("mkfs.ext4", &["-q", "-F", f.to_str().unwrap()])
    });
    let before = disk.bytes();
    // A PATH with everything a run uses but wipefs.
    let bin = Scratch::new("guard-path");
    for tool in [
        "mkfs.ext4",
        "mount",
        "umount",
        "losetup",
        "blkid",
        "sh",
        "bash",
    ] {
        if let Ok(p) = which(tool) {
            std::os::unix::fs::symlink(p, bin.p(tool)).unwrap();
        }
    }
    let out = run_on(&disk.dev, &[], Some(&bin.0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("wipefs") && err.contains("does not touch"),
        "{err}"
    );
    assert!(disk.bytes() == before, "the device was written to");
}

/// Where `tool` is on this test's PATH.
fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
        .ok_or(())
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn force_naming_the_device_goes_ahead() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-force", 128, mbr_with_ext4_partition);
    let out = run_on(&disk.dev, &["--force", &disk.dev], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("going ahead") && err.contains("dos partition table"),
        "{err}"
    );
    // Formatted: the partition table is gone, an ext4 file system is there.
    let probe = Command::new("blkid")
        .args(["-p", "-o", "export", &disk.dev])
        .output()
        .unwrap();
    let probe = String::from_utf8_lossy(&probe.stdout);
    assert!(
        probe.contains("TYPE=ext4") && !probe.contains("PTTYPE"),
        "{probe}"
    );
    assert!(!dev_mounted(&disk.dev));
}

// ---------------------------------------------------------------------------
// Errors as a non-root user.

#[test]
#[ignore = "needs root: switches to the unprivileged user nobody (setpriv)"]
fn commands_that_need_root_say_so() {
    let dir = Scratch::new("bench-nonroot");
    std::fs::write(dir.p("one.toml"), ONE_CELL).unwrap();
    let scenario = dir.p("one.toml");
    let scenario = scenario.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "run", scenario, "--out", "/tmp/x"],
            "I/O schedulers",
        ),
        (
            &[
                "bench",
                "run",
                scenario,
                "--out",
                "/tmp/x",
                "--device",
                "/dev/loop0",
            ],
            "I/O schedulers",
        ),
        (&["bench", "cleanup"], "emulated devices"),
        (&["bench", "record-trace", "--", "true"], "ftrace"),
        (
            &["devemu", "up", "--model", "emmc", "--size", "1G"],
            "loop device",
        ),
        (&["devemu", "down", "/dev/loop7"], "unmounts FUSE"),
        (&["devemu", "down", "--all"], "unmounts FUSE"),
        (&["devemu", "probe", "/dev/loop7"], "block device directly"),
        (
            &["devemu", "probe", "/dev/loop7", "--max-throughput", "2"],
            "block device directly",
        ),
    ];
    for (args, why) in cases {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_tandem"))
            .args(*args)
            .current_dir("/")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{args:?}: exit {:?}: {}", out.status.code(), err.trim());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("needs root") && err.contains(why),
            "{args:?}: {err}"
        );
    }
    // What needs no root works as nobody.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_tandem"))
        .args(["devemu", "status"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// A SIGKILL at any moment of a run on an emulated device (issue 22): after
// `tandem bench cleanup`, or the next run, nothing the run made is left.
// What the run made is found by the names it gives things (its pid and
// start time), so that devices other tests or users run at the same time
// are neither counted nor touched.

const KILL_SCENARIO: &str = r#"
name = "ci-kill"
benchmark = "startup"
app = "bash"
iterations = 3
repetitions = 1
timeout_s = 30
seed = 1

[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq"]
host_workload = ["1r-seq"]
"#;

/// What the run is doing, from what it wrote and the processes it started.
#[derive(Default, Debug)]
struct RunView {
    pid: u32,
    state: Option<serde_json::Value>,
    calibrated: bool,
    journal: Option<serde_json::Value>,
}

impl RunView {
    fn of(pid: u32) -> RunView {
        let read_json = |p: std::path::PathBuf| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
        };
        let state_dir = named("/run/tandem/devemu", &format!("bench-{pid}-"))
            .into_iter()
            .next();
        let run_dir = named("/run/tandem/bench", &format!("{pid}-"))
            .into_iter()
            .next();
        RunView {
            state: state_dir
                .as_ref()
                .and_then(|d| read_json(d.join("state.json"))),
            calibrated: state_dir.is_some_and(|d| d.join("calibration").exists()),
            journal: run_dir.and_then(|d| read_json(d.join("cleanup.json"))),
            pid,
        }
    }
    fn state_has(&self, key: &str) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| !s[key].is_null() && s[key] != 0 && s[key] != false)
    }
    fn journal_len(&self, key: &str) -> usize {
        self.journal
            .as_ref()
            .and_then(|j| j[key].as_array().map(Vec::len))
            .unwrap_or(0)
    }
    /// Whether a child's command line holds `word` (a scan of /proc, done
    /// only for the moments that need it so that the others poll fast).
    fn child(&self, word: &str) -> bool {
        children_of(self.pid).iter().any(|c| c.contains(word))
    }
}

/// Command lines of the children of `pid`.
fn children_of(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split(' ').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
                v.push(String::from_utf8_lossy(&c).replace('\0', " "));
            }
        }
    }
    v
}

/// When to kill the run.
enum When {
    /// This long after it started.
    After(Duration),
    /// When it is first seen doing this.
    Doing(&'static str, fn(&RunView) -> bool),
}

fn kill_moments() -> Vec<When> {
    let mut v: Vec<When> = [0, 5, 15, 30, 60, 100, 200, 400, 800]
        .into_iter()
        .map(|ms| When::After(Duration::from_millis(ms)))
        .collect();
    v.extend([
        When::Doing("devemu: state directory made", |v| v.state.is_some()),
        When::Doing("devemu: backing file recorded", |v| {
            v.state_has("created_backing")
        }),
        When::Doing("devemu: daemon started", |v| v.state_has("pid")),
        When::Doing("devemu: loop device recorded", |v| {
            v.state_has("created_loop")
        }),
        When::Doing("devemu: loop device attached", |v| v.state_has("loop_dev")),
        When::Doing("devemu: calibration", |v| {
            v.state_has("loop_dev") && !v.calibrated
        }),
        When::Doing("mkfs", |v| v.child("mkfs.ext4")),
        When::Doing("work directory mounted", |v| v.journal_len("mounts") > 0),
        When::Doing("file writing", |v| v.journal_len("files") > 0),
        When::Doing("workload", |v| v.child("worker")),
        When::Doing("start-up (app replay)", |v| v.child("replay")),
    ]);
    v
}

/// Waits for the moment (or the end of the run); whether it was seen.
fn wait_for(child: &mut Child, when: &When) -> bool {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        match when {
            When::After(d) if t0.elapsed() >= *d => return true,
            When::Doing(_, f) if f(&RunView::of(child.id())) => return true,
            _ => {}
        }
        if t0.elapsed() > Duration::from_secs(300) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One run of `scenario` (with `extra` arguments) killed with SIGKILL at
/// `when`, then undone by `tandem bench cleanup`, or by the next run when
/// `by_next_run`. Returns the report's line and what went wrong.
fn kill_once(
    scenario: &Path,
    out: &Path,
    extra: &[&str],
    when: &When,
    by_next_run: bool,
) -> (String, Vec<String>) {
    let name = match when {
        When::After(d) => format!("{} ms after start", d.as_millis()),
        When::Doing(n, _) => n.to_string(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run"])
        .arg(scenario)
        .arg("--out")
        .arg(out)
        .args(["--quiet", "--settle-s", "1", "--pause-s", "0.5"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let seen = wait_for(&mut child, when);
    signal_and_wait(&mut child, Signal::SIGKILL);
    let state = RunView::of(pid).state;
    let loop_dev = state.as_ref().and_then(|s| {
        s["loop_dev"]
            .as_str()
            .map(str::to_string)
            .or_else(|| s["created_loop"].as_u64().map(|n| format!("/dev/loop{n}")))
    });
    // What dies with the run (QEMU, workers) takes a moment.
    std::thread::sleep(Duration::from_millis(300));
    let before = leftovers(pid, loop_dev.as_deref());
    let out = if by_next_run {
        tandem(&[
            "bench",
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--device",
            "/dev/nonexistent-tandem-test-disk",
        ])
    } else {
        tandem(&["bench", "cleanup"])
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    if !by_next_run && !out.status.success() {
        failures.push(format!("{name}: bench cleanup failed: {said}"));
    }
    if !before.is_empty() && !said.contains(&format!("{pid}")) {
        failures.push(format!("{name}: run {pid} not undone: {said}"));
    }
    let after = leftovers(pid, loop_dev.as_deref());
    if !after.is_empty() {
        failures.push(format!("{name}: left after cleanup: {after:#?}"));
    }
    let kinds = ["path", "mount", "process", "loop"]
        .map(|k| format!("{} {k}", before.iter().filter(|b| b.starts_with(k)).count()))
        .join(", ");
    let line = format!(
        "{:<32} {:<5} left by the kill: {kinds}; after {}: {}",
        name,
        if seen { "seen" } else { "MISSED" },
        if by_next_run {
            "the next run"
        } else {
            "bench cleanup"
        },
        after.len(),
    );
    (line, failures)
}

/// Kills runs of `scenario` at each of `moments` (every third undone by the
/// next run, the others by `tandem bench cleanup`), prints the report and
/// checks that nothing was left and that each of `must_see` was hit.
fn kill_at_moments(scenario: &Path, extra: &[&str], moments: &[When], must_see: &[&str]) {
    let out = scenario.with_file_name("out");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (i, when) in moments.iter().enumerate() {
        let (line, f) = kill_once(scenario, &out, extra, when, i % 3 == 2);
        report.push(line);
        failures.extend(f);
    }
    eprintln!(
        "kill moment                      seen  result\n{}",
        report.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The long phases must have been hit, or the test proved little.
    for phase in must_see {
        assert!(
            report
                .iter()
                .any(|r| r.starts_with(phase) && r.contains(" seen ")),
            "{phase} was never seen:\n{}",
            report.join("\n")
        );
    }
}

#[test]
#[ignore = "needs root: emulated devices (FUSE, loop devices), SIGKILL of runs"]
fn a_sigkill_at_any_moment_leaves_nothing_after_cleanup() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let dir = Scratch::new("bench-killpoints");
    let scenario = dir.p("kill.toml");
    std::fs::write(&scenario, KILL_SCENARIO).unwrap();
    kill_at_moments(
        &scenario,
        &["--file-mib", "16"],
        &kill_moments(),
        &[
            "devemu: calibration",
            "file writing",
            "workload",
            "start-up",
        ],
    );
}

/// A VM cell with hostd (`help-rt`) on an emulated disk.
const KILL_VM_SCENARIO: &str = r#"
name = "ci-kill-vm"
benchmark = "startup"
app = "bash"
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

#[test]
#[ignore = "needs root and qemu-system-x86_64: VM cells on emulated devices, SIGKILL of runs"]
fn a_sigkill_during_a_vm_cell_leaves_nothing_after_cleanup() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let dir = Scratch::new("bench-killvm");
    // One guest image for every run (`tandem vm image`, about 80 s).
    let image = dir.p("image");
    let r = tandem(&["vm", "image", "--out", image.to_str().unwrap(), "--quiet"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let scenario = dir.p("kill-vm.toml");
    std::fs::write(&scenario, KILL_VM_SCENARIO).unwrap();
    // The guest's disk image loop-mounted on the host to be filled.
    let guest_disk = |v: &RunView| {
        v.journal.as_ref().is_some_and(|j| {
            j["mounts"].as_array().is_some_and(|m| {
                m.iter().filter_map(|x| x.as_str()).any(|x| {
                    x.ends_with("guest-disk")
                        && mounts().lines().any(|l| l.split(' ').nth(4) == Some(x))
                })
            })
        })
    };
    let moments = [
        When::Doing("guest disk being filled", guest_disk),
        When::Doing("VM boot (QEMU started)", |v| v.child("qemu-system")),
        When::Doing("hostd started", |v| v.child("hostd")),
    ];
    kill_at_moments(
        &scenario,
        &[
            "--file-mib",
            "16",
            "--vm-image",
            image.to_str().unwrap(),
            "--vm-mem-mib",
            "512",
        ],
        &moments,
        &[
            "guest disk being filled",
            "VM boot (QEMU started)",
            "hostd started",
        ],
    );
}

#[test]
#[ignore = "needs root and qemu-system-x86_64: VM cells on tandem vhost-blk on emulated devices, SIGKILL of runs"]
fn a_sigkill_during_a_vhost_ioprio_cell_leaves_nothing_after_cleanup() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    need_devices();
    let dir = Scratch::new("bench-killvhost");
    let image = dir.p("image");
    let r = tandem(&["vm", "image", "--out", image.to_str().unwrap(), "--quiet"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let scenario = dir.p("kill-vhost.toml");
    // KILL_VM_SCENARIO's cell with its disk on `tandem vhost-blk`.
    let vhost = KILL_VM_SCENARIO.replace(r#"["help-rt"]"#, r#"["vhost-ioprio"]"#);
    assert!(vhost.contains("vhost-ioprio"));
    std::fs::write(&scenario, vhost).unwrap();
    // The backend up (its blkio group made) but QEMU not yet, then QEMU
    // booting on it, then the guest reading through it.
    let moments = [
        When::Doing("vhost-blk started", |v| {
            v.child("vhost-blk --socket") && !v.child("qemu-system")
        }),
        When::Doing("VM boot on vhost-blk", |v| {
            v.child("vhost-blk --socket") && v.child("qemu-system")
        }),
        When::Doing("guest reading", |v| {
            v.child("qemu-system") && guest_reads_through_backend(v.pid)
        }),
    ];
    kill_at_moments(
        &scenario,
        &[
            "--file-mib",
            "16",
            "--vm-image",
            image.to_str().unwrap(),
            "--vm-mem-mib",
            "512",
        ],
        &moments,
        &["VM boot on vhost-blk", "guest reading"],
    );
}

/// Whether the run's backend has served more than a boot reads (its
/// counters file in the run's first VM cell).
fn guest_reads_through_backend(pid: u32) -> bool {
    common::named("/run/tandem/bench", &format!("{pid}-"))
        .first()
        .and_then(|d| std::fs::read_to_string(d.join("vm-cell1/vhost-blk.json")).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["bytes_read"].as_u64())
        .is_some_and(|n| n > 4 << 20)
}

/// `tandem bench run` of [`ONE_CELL`] on `dev` with a terminal on its stdin
/// (script(1)'s pseudo-terminal), to which `answer` is typed.
fn run_on_a_terminal(dev: &str, answer: &str) -> std::process::Output {
    use std::io::Write;
    let dir = Scratch::new("bench-tty");
    std::fs::write(dir.p("one.toml"), ONE_CELL).unwrap();
    let cmd = format!(
        "{} bench run {} --out {} --quiet --file-mib 8 --pause-s 0 --device {dev}",
        env!("CARGO_BIN_EXE_tandem"),
        dir.p("one.toml").display(),
        dir.p("out").display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{answer}").unwrap();
    child.wait_with_output().unwrap()
}

#[test]
#[ignore = "needs root: loop devices over scratch files (and script(1) for a terminal)"]
fn on_a_terminal_it_asks_for_the_device_path() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-tty", 128, |f| {
        run_ok("mkfs.ext4", &["-q", "-F", f.to_str().unwrap()])
    });
    let before = disk.bytes();
    // "yes" is not the device's path.
    let out = run_on_a_terminal(&disk.dev, "yes");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("an ext4 file system") && said.contains(&format!("Type {}", disk.dev)),
        "{said}"
    );
    assert!(said.contains("not confirmed"), "{said}");
    assert!(disk.bytes() == before, "the device was written to");
    // Its path is.
    let out = run_on_a_terminal(&disk.dev, &disk.dev);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(disk.bytes() != before, "the run did not format the device");
}

/// An md RAID member: a version 1.2 superblock 4 KiB into the disk
/// (`struct mdp_superblock_1`, include/uapi/linux/raid/md_p.h), with its
/// checksum (`calc_sb_1_csum` in drivers/md/md.c), as `mdadm --create`
/// writes it; no mdadm needed.
fn md_raid_member(file: &Path) {
    let mut sb = [0u8; 1024];
    let put32 =
        |sb: &mut [u8], off: usize, v: u32| sb[off..off + 4].copy_from_slice(&v.to_le_bytes());
    let put64 =
        |sb: &mut [u8], off: usize, v: u64| sb[off..off + 8].copy_from_slice(&v.to_le_bytes());
    put32(&mut sb, 0, 0xa92b_4efc); // magic
    put32(&mut sb, 4, 1); // major_version
    sb[16..32].copy_from_slice(&[7; 16]); // set_uuid
    sb[32..45].copy_from_slice(b"tandem-test:0"); // set_name
    put32(&mut sb, 72, 1); // level: raid1
    put64(&mut sb, 80, 100_000); // size
    put32(&mut sb, 92, 2); // raid_disks
    put64(&mut sb, 128, 2048); // data_offset
    put64(&mut sb, 136, 100_000); // data_size
    put64(&mut sb, 144, 8); // super_offset: this superblock, in sectors
    sb[168..184].copy_from_slice(&[9; 16]); // device_uuid
    put32(&mut sb, 220, 2); // max_dev
                            // The checksum: the 32-bit little-endian words of the first 256 bytes
                            // and the dev_roles (2 bytes per device) summed in 64 bits, folded.
    let words = (256 + 2 * 2) / 4;
    let sum: u64 = (0..words)
        .map(|i| u32::from_le_bytes(sb[i * 4..i * 4 + 4].try_into().unwrap()) as u64)
        .sum();
    put32(&mut sb, 216, ((sum & 0xffff_ffff) + (sum >> 32)) as u32);
    let f = OpenOptions::new().write(true).open(file).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &sb, 4096).unwrap();
}

#[test]
#[ignore = "needs root: loop devices over scratch files"]
fn refuses_a_raid_member() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let disk = ScratchDisk::new("guard-raid", 128, md_raid_member);
    assert_refused(&disk, &[], "a linux_raid_member RAID member");
}

/// The KVM probe's child says how far a real-mode guest got by its exit
/// code, 0 (halted) to 4, and never dies of a signal or a panic (101); with
/// no /dev/kvm it is 1.
#[test]
#[ignore = "needs root: opens /dev/kvm read-write"]
fn the_kvm_probe_child_reports_by_its_exit_code() {
    let o = tandem(&["bench", "kvm-probe"]);
    let code = o.status.code();
    assert!(matches!(code, Some(0..=4)), "{:?}", o.status);
    if !Path::new("/dev/kvm").exists() {
        assert_eq!(code, Some(1));
    }
}
