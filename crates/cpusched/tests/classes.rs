//! The must-show behaviour of each scheduling class (issue 25).

use cpusched::model::CompletionKind;
use cpusched::{CpuModel, FairKind, KernelId, Nanos, Platform, Policy, TaskId, TaskSpec, MS};

const HOST: KernelId = KernelId::HOST;

fn one_core(hz: u32) -> Platform {
    let mut p = Platform::chromebook_2014();
    p.cores = 1;
    p.hz = hz;
    p
}

fn loop_with(policy: Policy) -> TaskSpec {
    TaskSpec {
        policy,
        ..TaskSpec::busy_loop("loop")
    }
}

fn share(m: &CpuModel, a: TaskId, b: TaskId) -> f64 {
    let (pa, pb) = (m.progress(HOST, a) as f64, m.progress(HOST, b) as f64);
    pa / (pa + pb)
}

#[test]
fn cfs_two_nice0_loops_share_one_core_evenly() {
    let mut m = CpuModel::new(one_core(100), FairKind::Cfs);
    let a = m.spawn(HOST, loop_with(Policy::NORMAL));
    let b = m.spawn(HOST, loop_with(Policy::NORMAL));
    m.run_until(10_000 * MS);
    let s = share(&m, a, b);
    assert!((s - 0.5).abs() < 0.01, "share {s}");
}

#[test]
fn cfs_nice_minus5_gets_3121_to_1024() {
    for hz in [100, 1000] {
        let mut m = CpuModel::new(one_core(hz), FairKind::Cfs);
        let a = m.spawn(HOST, loop_with(Policy::Normal { nice: -5 }));
        let b = m.spawn(HOST, loop_with(Policy::NORMAL));
        m.run_until(20_000 * MS);
        let ratio = m.progress(HOST, a) as f64 / m.progress(HOST, b) as f64;
        let want = 3121.0 / 1024.0;
        assert!(
            (ratio / want - 1.0).abs() < 0.02,
            "HZ={hz}: ratio {ratio}, want {want}"
        );
    }
}

/// Wakes `sleeper` at `at` after a long sleep and returns how long after
/// its timer it first ran.
fn wake_latency(m: &mut CpuModel, sleeper: TaskId, at: Nanos) -> Nanos {
    // The sleeper's first burst ends; it sleeps until `at`.
    loop {
        let t = m.next_event_time().expect("events");
        let done = m.advance_to(t).to_vec();
        if done
            .iter()
            .any(|c| c.task == sleeper && c.kind == CompletionKind::BurstDone)
        {
            break;
        }
    }
    m.set_burst(HOST, sleeper, 100_000);
    m.sleep_until(HOST, sleeper, at);
    loop {
        let t = m.next_event_time().expect("events");
        let done = m.advance_to(t).to_vec();
        if let Some(c) = done
            .iter()
            .find(|c| c.task == sleeper && c.kind == CompletionKind::Started)
        {
            return c.at - at;
        }
    }
}

fn sleeper_spec() -> TaskSpec {
    TaskSpec {
        name: "sleeper".into(),
        policy: Policy::NORMAL,
        group: None,
        cpu: 0,
        burst: Some(50_000),
        report_start: true,
    }
}

#[test]
fn cfs_task_waking_after_long_sleep_preempts_a_loop_within_wakeup_granularity() {
    let mut m = CpuModel::new(one_core(100), FairKind::Cfs);
    m.spawn(HOST, loop_with(Policy::NORMAL));
    let s = m.spawn(HOST, sleeper_spec());
    let lat = wake_latency(&mut m, s, 2_000 * MS + 3 * MS);
    // Wake-up granularity on one CPU is 1 ms; a tick is 10 ms. The
    // sleeper runs after the interrupt and one switch.
    assert!(
        lat < cpusched::cfs::WAKEUP_GRANULARITY as Nanos,
        "latency {lat} ns"
    );
    assert!(lat < 20_000, "latency {lat} ns");
}

#[test]
fn eevdf_lag_stays_within_one_slice() {
    let mut p = Platform::chromebook_2014();
    p.hz = 1000;
    let mut m = CpuModel::new(p, FairKind::Eevdf);
    let loops: Vec<TaskId> = (0..4)
        .map(|i| {
            m.spawn(
                HOST,
                TaskSpec {
                    cpu: i % 2,
                    ..loop_with(Policy::NORMAL)
                },
            )
        })
        .collect();
    // 2 CPUs: base slice 0.75 ms x (1 + ilog2(2)) = 1.5 ms.
    let slice = 2 * cpusched::eevdf::BASE_SLICE;
    let mut worst = 0i64;
    let mut samples = 0;
    for step in 1..=5000u64 {
        m.run_until(step * MS + 337_000);
        for &t in &loops {
            if let Some(lag) = m.kernel(HOST).fair_lag(t) {
                worst = worst.max(lag.abs());
                samples += 1;
            }
        }
    }
    assert!(samples > 10_000, "{samples} samples");
    assert!(worst <= slice, "worst lag {worst} ns > slice {slice} ns");
}

#[test]
fn bfs_woken_task_with_earlier_deadline_preempts() {
    let mut m = CpuModel::new(one_core(100), FairKind::Bfs);
    let l = m.spawn(HOST, loop_with(Policy::NORMAL));
    let s = m.spawn(HOST, sleeper_spec());
    let at = 2_000 * MS + 3 * MS;
    let lat = wake_latency(&mut m, s, at);
    // The sleeper kept the deadline it had before its long sleep, earlier
    // than the loop's, which was renewed at its last expired slice.
    let bfs_slice = cpusched::bfs::timeslice();
    assert!(lat < 20_000, "latency {lat} ns (BFS slice {bfs_slice} ns)");
    let _ = l;
}

#[test]
fn bfs_nice_levels_follow_deadline_ratios() {
    let r = cpusched::bfs::prio_ratios();
    assert_eq!(r[0], 128);
    assert_eq!(r[1], 140);
    // nice 0 is 20 steps of 11/10 from nice -20.
    assert!(r[20] > 800 && r[20] < 900, "{}", r[20]);
}

#[test]
fn sched_fifo_starves_fair_tasks_but_for_rt_throttling() {
    let mut m = CpuModel::new(one_core(1000), FairKind::Cfs);
    let rt = m.spawn(HOST, loop_with(Policy::Fifo { prio: 50 }));
    let fair = m.spawn(HOST, loop_with(Policy::NORMAL));
    m.run_until(10_000 * MS);
    let s = share(&m, fair, rt);
    // sched_rt_runtime_us 950000 of sched_rt_period_us 1000000.
    assert!((s - 0.05).abs() < 0.005, "fair share {s}");
}

#[test]
fn rt_runtime_share_lets_one_rt_hog_borrow_an_idle_cpus_runtime() {
    // Two CPUs, one FIFO hog. With RT_RUNTIME_SHARE (3.x) the hog borrows
    // the other CPU's unused runtime and is never throttled; without it,
    // it runs 95% of each period.
    for (share, want) in [(true, 1.0), (false, 0.95)] {
        let mut p = Platform::chromebook_2014();
        p.hz = 1000;
        p.rt_runtime_share = share;
        let mut m = CpuModel::new(p, FairKind::Cfs);
        let rt = m.spawn(HOST, loop_with(Policy::Fifo { prio: 50 }));
        m.run_until(10_000 * MS);
        let got = m.progress(HOST, rt) as f64 / (10_000 * MS) as f64;
        assert!(
            (got - want).abs() < 0.005,
            "share={share}: RT hog got {got}"
        );
    }
}

#[test]
fn sched_rr_round_robins_equal_priorities_every_100ms() {
    let mut m = CpuModel::new(one_core(1000), FairKind::Cfs);
    let a = m.spawn(HOST, loop_with(Policy::Rr { prio: 10 }));
    let b = m.spawn(HOST, loop_with(Policy::Rr { prio: 10 }));
    m.run_until(150 * MS);
    // a ran its 100 ms slice first, then b.
    assert!(m.progress(HOST, a) >= 99 * MS, "{}", m.progress(HOST, a));
    assert!(m.progress(HOST, b) >= 45 * MS, "{}", m.progress(HOST, b));
    m.run_until(900 * MS);
    let s = share(&m, a, b);
    assert!((s - 0.5).abs() < 0.07, "share {s}");
}

#[test]
fn cfs_groups_share_by_cpu_shares() {
    // One core: a group of 2048 shares with two loops against a group of
    // 1024 with one loop: the groups split 2:1, whatever their loops.
    let mut m = CpuModel::new(one_core(1000), FairKind::Cfs);
    let g1 = m.add_host_group(2048);
    let g2 = m.add_host_group(1024);
    let spec = |g| TaskSpec {
        group: Some(g),
        ..TaskSpec::busy_loop("g")
    };
    let a1 = m.spawn(HOST, spec(g1));
    let a2 = m.spawn(HOST, spec(g1));
    let b = m.spawn(HOST, spec(g2));
    m.run_until(10_000 * MS);
    let (pa, pb) = (
        (m.progress(HOST, a1) + m.progress(HOST, a2)) as f64,
        m.progress(HOST, b) as f64,
    );
    assert!((pa / pb / 2.0 - 1.0).abs() < 0.03, "{pa} vs {pb}");
}

#[test]
fn the_same_inputs_give_the_same_run() {
    let run = || {
        let mut m = CpuModel::new(Platform::chromebook_2014(), FairKind::Cfs);
        let t: Vec<TaskId> = (0..3)
            .map(|_| m.spawn(HOST, loop_with(Policy::NORMAL)))
            .collect();
        m.run_until(3_000 * MS);
        t.iter().map(|&x| m.progress(HOST, x)).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn changing_policy_back_and_forth_never_runs_a_task_twice() {
    for sched in [FairKind::Cfs, FairKind::Eevdf, FairKind::Bfs] {
        let mut m = CpuModel::new(Platform::chromebook_2014(), sched);
        let a = m.spawn(HOST, loop_with(Policy::NORMAL));
        let b = m.spawn(
            HOST,
            TaskSpec {
                cpu: 1,
                ..loop_with(Policy::NORMAL)
            },
        );
        for i in 1..=200u64 {
            m.run_until(i * 5 * MS);
            let p = if i % 2 == 1 {
                Policy::Rr { prio: 8 }
            } else {
                Policy::NORMAL
            };
            m.set_policy(HOST, a, p);
        }
        let (pa, pb) = (m.progress(HOST, a), m.progress(HOST, b));
        // Two loops on two cores: each close to a core, never more.
        assert!(pa <= 1_000 * MS && pb <= 1_000 * MS, "{sched:?}: {pa} {pb}");
        assert!(pa + pb >= 1_900 * MS, "{sched:?}: {pa} {pb}");
    }
}

#[test]
fn cfs_yield_lets_the_other_task_run_first() {
    // One core, two tasks with 1 ms bursts: A yields after each of its
    // bursts instead of sleeping, so B, queued behind it, runs next.
    let mut m = CpuModel::new(one_core(1000), FairKind::Cfs);
    let burst = |name: &str| TaskSpec {
        burst: Some(MS),
        ..TaskSpec::busy_loop(name)
    };
    let a = m.spawn(HOST, burst("a"));
    let b = m.spawn(HOST, burst("b"));
    let mut order = Vec::new();
    while order.len() < 6 {
        let t = m.next_event_time().expect("events");
        let done = m.advance_to(t).to_vec();
        for c in done.iter().filter(|c| c.kind == CompletionKind::BurstDone) {
            order.push(c.task);
            m.set_burst(HOST, c.task, MS);
            m.yield_task(HOST, c.task);
        }
    }
    // Strict alternation: each yield hands the CPU to the other task.
    for w in order.windows(2) {
        assert_ne!(w[0], w[1], "{order:?}");
    }
    assert!(order.contains(&a) && order.contains(&b));
}

#[test]
fn bfs_task_with_a_later_deadline_waits_for_the_running_slice() {
    // A new nice 19 task gets a deadline far beyond the running loop's
    // (its nice ratio is ~7x nice 0's): it does not preempt, and waits
    // while the loop's renewed deadlines stay earlier than its own.
    let mut m = CpuModel::new(one_core(100), FairKind::Bfs);
    m.spawn(HOST, loop_with(Policy::NORMAL));
    let at = 100 * MS + 3 * MS;
    m.run_until(at);
    let s = m.spawn(
        HOST,
        TaskSpec {
            burst: Some(50_000),
            ..loop_with(Policy::Normal { nice: 19 })
        },
    );
    let done = loop {
        let t = m.next_event_time().expect("events");
        let out = m.advance_to(t).to_vec();
        if let Some(c) = out
            .iter()
            .find(|c| c.task == s && c.kind == CompletionKind::BurstDone)
        {
            break c.at;
        }
    };
    assert!(done - at > MS, "ran after {} ns", done - at);
    assert!(cpusched::bfs::deadline_diff(19) > 6 * cpusched::bfs::deadline_diff(0));
}

#[test]
fn a_start_produced_by_a_command_is_not_lost() {
    // With no switch cost a woken task starts at once, inside `wake()`:
    // the next advance_to still returns it.
    let mut p = one_core(1000);
    p.switch_ns = 0;
    let mut m = CpuModel::new(p, FairKind::Cfs);
    let s = m.spawn(HOST, sleeper_spec());
    m.run_until(MS);
    m.block(HOST, s);
    m.set_burst(HOST, s, 10_000);
    m.wake(HOST, s);
    let t = m.now() + MS;
    let out = m.advance_to(t).to_vec();
    assert!(
        out.iter()
            .any(|c| c.task == s && c.kind == CompletionKind::Started),
        "{out:?}"
    );
}
