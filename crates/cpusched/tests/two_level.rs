//! Two levels: vCPUs are host tasks, and a guest scheduler runs the
//! guest's tasks on them (issue 25).

use cpusched::cyclictest::{run_latency, LatencySetup};
use cpusched::{CpuModel, FairKind, KernelId, Platform, TaskSpec, MS};

fn one_core() -> Platform {
    let mut p = Platform::chromebook_2014();
    p.cores = 1;
    p
}

#[test]
fn guest_loop_on_a_vcpu_sharing_a_core_with_a_host_loop_gets_half_the_core() {
    for sched in [FairKind::Cfs, FairKind::Eevdf, FairKind::Bfs] {
        let mut m = CpuModel::new(one_core(), sched);
        let h = m.spawn(KernelId::HOST, TaskSpec::busy_loop("host"));
        let (_vm, gk) = m.add_vm(1, sched, 1024).unwrap();
        let g = m.spawn(gk, TaskSpec::busy_loop("guest"));
        m.run_until(10_000 * MS);
        let (pg, ph) = (
            m.progress(gk, g) as f64,
            m.progress(KernelId::HOST, h) as f64,
        );
        let total = 10_000.0 * MS as f64;
        assert!(
            (pg / total - 0.5).abs() < 0.02,
            "{sched:?}: guest loop got {}",
            pg / total
        );
        assert!(
            (ph / total - 0.5).abs() < 0.02,
            "{sched:?}: host loop got {}",
            ph / total
        );
    }
}

#[test]
fn a_guest_makes_no_progress_while_its_vcpu_waits() {
    // Two host loops and the vCPU on one core: the guest loop gets a
    // third, never more.
    let mut m = CpuModel::new(one_core(), FairKind::Cfs);
    m.spawn(KernelId::HOST, TaskSpec::busy_loop("h1"));
    m.spawn(KernelId::HOST, TaskSpec::busy_loop("h2"));
    let (vm, gk) = m.add_vm(1, FairKind::Cfs, 1024).unwrap();
    let g = m.spawn(gk, TaskSpec::busy_loop("guest"));
    m.run_until(6_000 * MS);
    let vcpu = m.vcpu_task(vm, 0);
    let (pg, pv) = (m.progress(gk, g), m.progress(KernelId::HOST, vcpu));
    assert!(pg <= pv, "guest progress {pg} beyond its vCPU's {pv}");
    let share = pg as f64 / (6_000 * MS) as f64;
    assert!((share - 1.0 / 3.0).abs() < 0.02, "guest share {share}");
}

#[test]
fn guest_latency_rises_when_its_vcpu_is_preempted() {
    let cell = |host_loops| {
        let mut s = LatencySetup::new(one_core(), FairKind::Cfs, host_loops, Some(1));
        s.loops = 3_000;
        run_latency(&s).unwrap().hist
    };
    let alone = cell(0);
    let shared = cell(1);
    assert!(
        shared.avg_us() > 10.0 * alone.avg_us(),
        "vCPU alone {:.1} us, sharing its core {:.1} us",
        alone.avg_us(),
        shared.avg_us()
    );
    // While the host loop runs, the guest's timer interrupt waits: the
    // worst case is close to a host tick (HZ=100) or more.
    assert!(shared.max_us() > 5_000.0, "max {:.0} us", shared.max_us());
}

#[test]
fn too_many_vcpus_is_an_error_that_names_the_platform() {
    let mut m = CpuModel::new(Platform::chromebook_2014(), FairKind::Cfs);
    let err = m.add_vm(3, FairKind::Cfs, 1024).unwrap_err();
    assert!(
        err.contains("chromebook-2014") && err.contains('3'),
        "{err}"
    );
    assert!(Platform::preset("nope")
        .unwrap_err()
        .contains("chromebook-2014"));
    assert!(FairKind::parse("o1").unwrap_err().contains("cfs"));
}

#[test]
fn the_guest_scheduler_shares_its_vcpu_fairly_under_steal() {
    // One core: a host loop and a 1-vCPU guest running two loops. The
    // guest's CFS charges its running loop for the time its vCPU waited
    // (no steal accounting on 3.x ARM guests), and still splits what the
    // vCPU gets evenly: a quarter of the core each.
    let mut m = CpuModel::new(one_core(), FairKind::Cfs);
    m.spawn(KernelId::HOST, TaskSpec::busy_loop("host"));
    let (_vm, gk) = m.add_vm(1, FairKind::Cfs, 1024).unwrap();
    let a = m.spawn(gk, TaskSpec::busy_loop("g1"));
    let b = m.spawn(gk, TaskSpec::busy_loop("g2"));
    m.run_until(20_000 * MS);
    let total = (20_000 * MS) as f64;
    for t in [a, b] {
        let share = m.progress(gk, t) as f64 / total;
        assert!((share - 0.25).abs() < 0.03, "guest loop got {share}");
    }
}

#[test]
fn guest_jiffies_stall_while_the_vcpu_waits_and_then_jump() {
    // One core: a host loop and a guest loop; the guest's ticks fall while
    // its vCPU waits half the time, so its jiffies advance in jumps.
    let mut m = CpuModel::new(one_core(), FairKind::Cfs);
    m.spawn(KernelId::HOST, TaskSpec::busy_loop("host"));
    let (_vm, gk) = m.add_vm(1, FairKind::Cfs, 1024).unwrap();
    m.spawn(gk, TaskSpec::busy_loop("guest"));
    let (mut last, mut biggest_jump, mut behind) = (0u64, 0u64, 0u64);
    for ms in 1..=2_000u64 {
        m.run_until(ms * MS);
        let (g, h) = (m.jiffies(gk), m.jiffies(KernelId::HOST));
        assert!(g <= h, "guest jiffies {g} ahead of the host's {h}");
        biggest_jump = biggest_jump.max(g - last);
        behind = behind.max(h - g);
        last = g;
    }
    // HZ=100: a 10 ms wait of the vCPU skips a tick.
    assert!(biggest_jump >= 2, "largest step {biggest_jump}");
    assert!(behind >= 1, "never behind the host");
    assert!(last >= 195, "guest jiffies {last} after 2 s at HZ=100");
}
