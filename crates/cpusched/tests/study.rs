//! The coordinated task scheduling study's findings (Fanguède,
//! Spyridakis, Raho 2014, Figures 1 and 3), each as an assertion with a
//! margin, on the `chromebook-2014` platform (2 cores, HZ=100).

use cpusched::cyclictest::{run_latency, CpuCoordination, Histogram, LatencySetup};
use cpusched::{FairKind, Platform};

const SAMPLES: u64 = 10_000;

fn cell(sched: FairKind, host: usize, guest: Option<usize>) -> Histogram {
    let mut s = LatencySetup::new(Platform::chromebook_2014(), sched, host, guest);
    s.loops = SAMPLES;
    run_latency(&s).unwrap().hist
}

fn avg(sched: FairKind, host: usize, guest: Option<usize>) -> f64 {
    cell(sched, host, guest).avg_us()
}

#[test]
fn cfs_no_guest_latency_stays_flat_as_host_loops_grow() {
    let v: Vec<f64> = (0..=8).map(|n| avg(FairKind::Cfs, n, None)).collect();
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
    assert!(hi < 2.0 * lo, "no-guest averages {v:?}");
}

#[test]
fn cfs_zero_guest_loops_follow_no_guest_with_a_constant_overhead() {
    let d: Vec<f64> = (0..=8)
        .map(|n| avg(FairKind::Cfs, n, Some(0)) - avg(FairKind::Cfs, n, None))
        .collect();
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    assert!(mean > 0.0, "overheads {d:?}");
    for x in &d {
        assert!((x - mean).abs() <= 0.5 * mean, "overheads {d:?}");
    }
}

#[test]
fn cfs_guest_loop_beyond_two_cores_raises_latency_tenfold() {
    for host in 2..=7 {
        let with = avg(FairKind::Cfs, host, Some(1));
        let without = avg(FairKind::Cfs, host, Some(0));
        assert!(
            with >= 10.0 * without,
            "{host} host loops: 1 guest loop {with:.1} us, 0 guest loops {without:.1} us"
        );
    }
    // With the vCPU free to use a core of its own, nothing rises.
    let fits = avg(FairKind::Cfs, 1, Some(1));
    assert!(
        fits < 2.0 * avg(FairKind::Cfs, 1, Some(0)),
        "1+1 loops: {fits:.1} us"
    );
}

#[test]
fn cfs_two_guest_loops_beat_one_at_a_high_total() {
    for total in 4..=8 {
        let one = avg(FairKind::Cfs, total - 1, Some(1));
        let two = avg(FairKind::Cfs, total - 2, Some(2));
        assert!(
            two < one,
            "total {total}: 2 guest loops {two:.1} us, 1 guest loop {one:.1} us"
        );
    }
}

#[test]
fn cfs_figure3_contrast_three_host_loops_against_two_plus_one_in_the_guest() {
    let all_host = cell(FairKind::Cfs, 3, Some(0));
    let one_in_guest = cell(FairKind::Cfs, 2, Some(1));
    // The model's tail lies above 200 us but mostly beyond the 5000 us of
    // the study's histogram (overflows): at HZ=100 a vCPU that waits
    // waits a whole tick, so the first deadline of the wait is late by 9
    // to 10 ms. The study's samples between 200 and 5000 us need shorter
    // waits than the model produces (see the README's gaps).
    let tail_host = all_host.share_between(200, 5001);
    let tail_guest = one_in_guest.share_between(200, 5001);
    assert!(
        tail_host < 0.01,
        "3 host loops: {tail_host:.4} of samples above 200 us"
    );
    // "A significant amount" (the study gives no number): at least 2%,
    // and ten times the share with the loops all in the host.
    assert!(
        tail_guest > 0.02,
        "2 host + 1 guest: {tail_guest:.4} of samples above 200 us"
    );
    assert!(tail_guest > 10.0 * tail_host, "{tail_guest} vs {tail_host}");
    // Both have most of their samples near the minimum.
    assert!(all_host.share_between(0, 100) > 0.95);
}

#[test]
fn bfs_no_guest_latency_rises_with_the_loops() {
    let v: Vec<f64> = (0..=8).map(|n| avg(FairKind::Bfs, n, None)).collect();
    assert!(v[8] > 2.0 * v[0], "BFS no-guest averages {v:?}");
    for w in v.windows(3) {
        assert!(w[2] >= w[0], "not rising: {v:?}");
    }
}

#[test]
fn bfs_guest_loop_beyond_two_cores_raises_latency() {
    for host in 2..=6 {
        let with = avg(FairKind::Bfs, host, Some(1));
        let without = avg(FairKind::Bfs, host, Some(0));
        assert!(
            with >= 10.0 * without,
            "{host} host loops: {with:.1} us vs {without:.1} us"
        );
    }
}

#[test]
fn static_cpu_keeps_guest_latency_near_no_guest() {
    for host in 3..=6 {
        let mut s = LatencySetup::new(Platform::chromebook_2014(), FairKind::Cfs, host, Some(1));
        s.loops = SAMPLES;
        s.coordination = CpuCoordination::StaticCpu;
        let boosted = run_latency(&s).unwrap().hist.avg_us();
        let reference = avg(FairKind::Cfs, host + 1, None);
        let off = avg(FairKind::Cfs, host, Some(1));
        assert!(
            boosted <= 3.0 * reference,
            "{host} host loops: static-cpu {boosted:.1} us, no guest {reference:.1} us"
        );
        assert!(
            off >= 10.0 * reference,
            "{host} host loops: off {off:.1} us, no guest {reference:.1} us"
        );
    }
}

#[test]
fn help_cpu_keeps_guest_latency_near_no_guest_and_costs_less_than_static() {
    for host in 3..=6 {
        let run = |c| {
            let mut s =
                LatencySetup::new(Platform::chromebook_2014(), FairKind::Cfs, host, Some(1));
            s.loops = SAMPLES;
            s.coordination = c;
            run_latency(&s).unwrap()
        };
        let (help, stat) = (
            run(CpuCoordination::HelpCpu),
            run(CpuCoordination::StaticCpu),
        );
        let reference = avg(FairKind::Cfs, host + 1, None);
        assert!(
            help.hist.avg_us() <= 3.0 * reference,
            "{host} host loops: help-cpu {:.1} us, no guest {reference:.1} us",
            help.hist.avg_us()
        );
        // Static boosting takes at least as much from the host loops.
        assert!(
            stat.host_loops_share <= help.host_loops_share + 1e-3,
            "host loops: static {:.4}, help {:.4}",
            stat.host_loops_share,
            help.host_loops_share
        );
    }
}

#[test]
fn a_cell_is_deterministic() {
    let a = cell(FairKind::Cfs, 3, Some(1));
    let b = cell(FairKind::Cfs, 3, Some(1));
    assert_eq!(a.buckets, b.buckets);
    assert_eq!(a.sum_ns, b.sum_ns);
}

/// `help-all` on the CPU model: a cyclictest cell does no disk I/O, so the
/// I/O half of the boost has nothing to act on and the vCPUs get exactly
/// `help-cpu`'s boost (the same samples, the same boosted time).
#[test]
fn help_all_on_the_cpu_model_boosts_the_vcpus_as_help_cpu() {
    let run = |c| {
        let mut s = LatencySetup::new(Platform::chromebook_2014(), FairKind::Cfs, 3, Some(1));
        s.loops = SAMPLES;
        s.coordination = c;
        run_latency(&s).unwrap()
    };
    let (all, cpu, off) = (
        run(CpuCoordination::HelpAll),
        run(CpuCoordination::HelpCpu),
        run(CpuCoordination::Off),
    );
    assert!(all.boosted_ns > 0);
    assert_eq!(all.boosted_ns, cpu.boosted_ns);
    assert_eq!(all.hist.buckets, cpu.hist.buckets);
    assert!(all.hist.avg_us() < off.hist.avg_us() / 3.0);
}
