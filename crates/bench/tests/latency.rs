//! The native latency benchmark: Debian's cyclictest on this host, with
//! and without busy loops. Needs rt-tests (cyclictest) and root (cyclictest
//! sets /dev/cpu_dma_latency and, as the runner does, runs as root).

use std::path::Path;

use bench::latency::{
    guest_loops_rate, run_cyclictest, run_native, GuestLatency, HOST_LOOPS_ITER_S, LATENCY_MAX_US,
};
use serde_json::json;

fn keep_going() -> bench::Result<()> {
    Ok(())
}

#[test]
#[ignore = "needs root and rt-tests: runs Debian's cyclictest (apt-get install rt-tests)"]
fn cyclictest_with_and_without_loops() {
    for host_loops in [0, 2] {
        let run = run_native(2000, host_loops, &mut keep_going).unwrap();
        let h = &run.hist;
        let (avg, max) = (h.avg_us(), h.max_us());
        eprintln!(
            "cyclictest -l 2000, {host_loops} host loops: avg {avg:.2} us, max {max} us, \
             {} overflows, loops {:?} iterations/s",
            h.overflow, run.host_loops_iter_s
        );
        assert_eq!(h.count, 2000);
        assert!(avg.is_finite() && avg > 0.0, "avg {avg}");
        assert!(max >= avg, "max {max} < avg {avg}");
        let r = run.run_result();
        assert_eq!(r.values, vec![avg]);
        assert_eq!(r.counters[LATENCY_MAX_US], max);
        match host_loops {
            0 => assert!(!r.counters.contains_key(HOST_LOOPS_ITER_S)),
            _ => assert!(r.counters[HOST_LOOPS_ITER_S] > 0.0),
        }
    }
}

#[test]
fn a_missing_cyclictest_and_a_stop_are_errors() {
    let e = run_cyclictest(Path::new("/nonexistent/cyclictest"), 10, &mut keep_going)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rt-tests"), "{e}");
    assert!(run_cyclictest(Path::new("/bin/true"), 0, &mut keep_going).is_err());
    // Something that exits 0 without cyclictest's output.
    let e = run_cyclictest(Path::new("/bin/true"), 10, &mut keep_going)
        .unwrap_err()
        .to_string();
    assert!(e.contains("# Histogram"), "{e}");
}

#[test]
fn a_stopped_run_kills_cyclictest() {
    // `sleep` stands in for a long cyclictest: the check stops it at once.
    let dir = std::env::temp_dir().join(format!("tandem-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("cyclictest");
    std::fs::write(&fake, "#!/bin/sh\necho $$ > \"$0.pid\"\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t0 = std::time::Instant::now();
    let mut calls = 0;
    let mut stop = || {
        calls += 1;
        if calls > 3 {
            Err(bench::Error::Run("interrupted".into()))
        } else {
            Ok(())
        }
    };
    let e = run_cyclictest(&fake, 100, &mut stop)
        .unwrap_err()
        .to_string();
    assert!(e.contains("interrupted"), "{e}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(dir.join("cyclictest.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the stopped cyclictest {pid} is still there"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn guest_requests_start_sample_and_stop_loops() {
    let mut g = GuestLatency::default();
    assert!(g.handle("hello", &json!({})).is_none(), "not a latency op");
    assert!(g.handle("cpu_load", &json!({})).unwrap().is_err(), "no n");
    let a = g.handle("cpu_load", &json!({"n": 2})).unwrap().unwrap();
    let pids: Vec<u64> = a["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let s0 = g.handle("cpu_load_sample", &json!({})).unwrap().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s1 = g.handle("cpu_load_sample", &json!({})).unwrap().unwrap();
    let rate = guest_loops_rate(&s0, &s1).unwrap();
    assert!(rate > 0.0, "{s0} {s1}");
    // n = 0 stops them (reaped: no /proc entry, or not a loop any more).
    g.handle("cpu_load", &json!({"n": 0})).unwrap().unwrap();
    for p in pids {
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        assert_ne!(comm.trim(), "tandem-cpuload", "loop {p} left");
    }
    let empty = g.handle("cpu_load_sample", &json!({})).unwrap().unwrap();
    assert_eq!(empty["iterations"], json!([]));
    assert!(guest_loops_rate(&json!({}), &empty).is_err());
}

#[test]
#[ignore = "needs root and rt-tests: runs Debian's cyclictest at the guest image's path"]
fn the_guest_cyclictest_request_answers_its_output() {
    let mut g = GuestLatency::default();
    let a = g
        .handle("cyclictest", &json!({"loops": 50}))
        .unwrap()
        .unwrap();
    let h = bench::latency::parse(a["output"].as_str().unwrap()).unwrap();
    assert_eq!(h.count, 50);
}
