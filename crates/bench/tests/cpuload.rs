//! Busy loops for the real runners: they start, count, and are gone after
//! their owner drops them, and after their owner is killed with SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench::cpuload::CpuLoad;

/// Whether `pid` is a live process (not a zombie). Zombies are loops the
/// kernel killed but nobody reaped yet.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn loops_start_count_and_are_gone_after_drop() {
    let mut load = CpuLoad::start(2).unwrap();
    assert_eq!(load.len(), 2);
    let pids = load.pids();
    for &p in &pids {
        assert!(alive(p), "loop {p} runs");
    }
    let a = load.sample();
    std::thread::sleep(Duration::from_millis(300));
    let b = load.sample();
    for &p in &pids {
        assert_eq!(comm(p), "tandem-cpuload");
    }
    load.check_running().unwrap();
    for (i, (x, y)) in a.iterations.iter().zip(&b.iterations).enumerate() {
        assert!(y > x, "loop {i} counted nothing: {x} -> {y}");
    }
    let rate = b.rate_since(&a);
    // At least 10 blocks of 4096 multiply-adds a second even on a
    // crowded 2-core machine (about 10^5 where they get a core).
    assert!(rate > 10.0, "{rate} iterations/s");
    drop(load);
    for &p in &pids {
        assert!(!alive(p), "loop {p} left after drop");
        // Reaped, not a zombie: no /proc entry at all (or reused by
        // another process, which would not be ours).
        assert!(comm(p) != "tandem-cpuload", "loop {p} not reaped");
    }
}

#[test]
fn zero_loops_and_too_many() {
    let none = CpuLoad::start(0).unwrap();
    assert!(none.is_empty());
    let s = none.sample();
    assert_eq!(s.rate_since(&s), 0.0);
    assert!(CpuLoad::start(bench::cpuload::MAX_LOOPS + 1).is_err());
}

#[test]
fn a_killed_loop_is_reported() {
    let mut load = CpuLoad::start(1).unwrap();
    let pid = load.pids()[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let t0 = Instant::now();
    loop {
        match load.check_running() {
            Err(e) => {
                assert!(e.to_string().contains(&pid.to_string()), "{e}");
                break;
            }
            Ok(()) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(()) => panic!("loop {pid} killed, still reported running"),
        }
    }
}

/// The owner of the loops in [`loops_die_with_a_killed_owner`]: this test
/// binary run again with `TANDEM_CPULOAD_OWNER` set; it prints the loops'
/// pids and waits to be killed.
#[test]
fn cpuload_owner_process() {
    if std::env::var_os("TANDEM_CPULOAD_OWNER").is_none() {
        return;
    }
    let load = CpuLoad::start(3).unwrap();
    let pids: Vec<String> = load.pids().iter().map(u32::to_string).collect();
    println!("PIDS {}", pids.join(" "));
    std::thread::sleep(Duration::from_secs(60));
    panic!("not killed");
}

#[test]
fn loops_die_with_a_killed_owner() {
    // Orphans come to this process (not to init), so that it can see them
    // die and reap them: the proof that they were killed.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cpuload_owner_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TANDEM_CPULOAD_OWNER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(owner.stdout.take().unwrap());
    let mut pids = Vec::new();
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        // libtest prints the test's name on the same line.
        if let Some((_, rest)) = line.trim().split_once("PIDS ") {
            pids = rest.split(' ').map(|p| p.parse::<u32>().unwrap()).collect();
            break;
        }
        line.clear();
    }
    assert_eq!(pids.len(), 3, "the owner started its loops");
    for &p in &pids {
        assert!(alive(p), "loop {p} runs");
    }
    owner.kill().unwrap(); // SIGKILL: no drop, no handler
    owner.wait().unwrap();
    let t0 = Instant::now();
    let mut left: Vec<u32> = pids.clone();
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(10) {
        // Reap the orphans that died (they are ours now).
        for &p in &left {
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(p as i32),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
        left.retain(|&p| alive(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        left.is_empty(),
        "loops {left:?} outlived their killed owner"
    );
}

#[test]
fn work_is_deterministic_and_the_hosts_rate_is_positive() {
    use bench::cpuload::{work, work_per_us};
    assert_eq!(work(7, 0), 7);
    assert_eq!(work(1, 5), work(work(1, 2), 3));
    assert_ne!(work(1, 5), work(1, 4));
    let r = work_per_us();
    assert!(r.is_finite() && r > 0.0, "{r}");
    // Measured once a process.
    assert_eq!(work_per_us(), r);
    assert_eq!(bench::workers::hot_work_units(2_000, 1.5), 3);
    assert_eq!(bench::workers::hot_work_units(0, 1e3), 0);
}

/// This thread's CPU time, user and system, in seconds.
fn thread_cpu_s() -> f64 {
    // SAFETY: a zeroed rusage for getrusage to fill.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage pointer.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// A hot replay does the trace's recorded CPU time as CPU work (at least
/// half of it in CPU time, whatever else runs); a cold one sleeps it and
/// spends less.
#[test]
fn a_hot_replay_spends_the_traces_cpu_time_and_a_cold_one_sleeps_it() {
    let trace = experiment::apptrace::preset("xterm").unwrap();
    let dir = std::env::temp_dir().join(format!("tandem-hot-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, f) in trace.files.iter().enumerate() {
        bench::workers::fill_file(
            &bench::workers::app_file(&dir, i),
            f.size.max(4096),
            i as u64,
        )
        .unwrap();
    }
    let think_s =
        (trace.reads.iter().map(|r| r.think_ns).sum::<u64>() + trace.tail_ns) as f64 / 1e9;
    let rate = bench::cpuload::work_per_us();
    // Once to fill the page cache, then each way.
    bench::workers::replay_main("xterm", &dir, None).unwrap();
    let t0 = thread_cpu_s();
    bench::workers::replay_main("xterm", &dir, Some(rate)).unwrap();
    let hot = thread_cpu_s() - t0;
    let t0 = thread_cpu_s();
    bench::workers::replay_main("xterm", &dir, None).unwrap();
    let cold = thread_cpu_s() - t0;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        hot >= think_s / 2.0,
        "hot {hot} s of CPU for {think_s} s recorded"
    );
    assert!(cold < hot, "cold {cold} s, hot {hot} s");
}
