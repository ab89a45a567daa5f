//! Behaviour of the device models and of `Device`.

use devmodel::{
    preset, AccessKind, Device, Direction, FlashModel, HddModel, IoRequest, Nanos, ServiceModel,
    PRESETS,
};

/// splitmix64: a fixed pseudo-random sequence for test workloads.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A 4 KiB-aligned sector in [0, cap - 8).
    fn sector4k(&mut self, cap: u64) -> u64 {
        (self.next() % (cap / 8 - 1)) * 8
    }
}

fn read(sector: u64, sectors: u32) -> IoRequest {
    IoRequest {
        sector,
        sectors,
        dir: Direction::Read,
    }
}

fn write(sector: u64, sectors: u32) -> IoRequest {
    IoRequest {
        sector,
        sectors,
        dir: Direction::Write,
    }
}

/// A closed loop keeping `qd` commands outstanding; a finished command is
/// replaced `gap` ns after its completion. Returns (tag, submit, complete) in
/// completion order.
fn closed_loop(
    dev: &mut Device,
    qd: usize,
    total: usize,
    gap: Nanos,
    mut next: impl FnMut(usize) -> IoRequest,
) -> Vec<(u64, Nanos, Nanos)> {
    let mut submit_at: Vec<Nanos> = vec![0; qd.min(total)];
    let mut submitted_time = vec![0; total];
    let mut submitted = 0;
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let next_submit = submit_at.iter().copied().min();
        let next_done = dev.next_completion();
        match (next_submit, next_done) {
            (Some(s), d) if d.is_none_or(|d| s <= d) => {
                let i = submit_at.iter().position(|&x| x == s).unwrap();
                submit_at.swap_remove(i);
                assert!(dev.can_accept(), "closed loop never exceeds the depth");
                let req = next(submitted);
                submitted_time[submitted] = s;
                dev.submit(s, submitted as u64, req);
                assert!(dev.in_flight() <= dev.queue_depth());
                submitted += 1;
            }
            (_, Some(d)) => {
                while let Some(tag) = dev.pop_completed(d) {
                    out.push((tag, submitted_time[tag as usize], d));
                    if submitted + submit_at.len() < total {
                        submit_at.push(d + gap);
                    }
                }
            }
            (None, None) => panic!("stalled"),
            _ => unreachable!(),
        }
    }
    out
}

fn device(name: &str, qd: usize) -> Device {
    Device::new(preset(name).unwrap(), qd)
}

/// Bytes/s of one sequential reader issuing 128 KiB reads at queue depth 1.
fn sequential_rate(name: &str, gap: Nanos) -> f64 {
    let mut dev = device(name, 1);
    let base = dev.info().capacity_sectors / 4;
    let n = 400;
    let log = closed_loop(&mut dev, 1, n, gap, |i| read(base + i as u64 * 256, 256));
    let elapsed = log.last().unwrap().2 - log[0].1;
    (n as u64 * 128 * 1024) as f64 * 1e9 / elapsed as f64
}

#[test]
fn sequential_128k_reader_reaches_peak_on_every_preset() {
    for &name in PRESETS {
        let peak = preset(name).unwrap().info().peak_read_bytes_per_s;
        let rate = sequential_rate(name, 1_000);
        let err = (rate - peak).abs() / peak;
        println!(
            "{name}: peak {:.1} MB/s, 1 us gap {:.1} MB/s",
            peak / 1e6,
            rate / 1e6
        );
        assert!(err < 0.05, "{name}: {rate} vs peak {peak}");
    }
    // The slow devices keep their peak with a 20 us host gap too (the disk's
    // read-ahead absorbs the gap entirely).
    for name in ["hdd-1.8in", "microsd-class6", "emmc"] {
        let peak = preset(name).unwrap().info().peak_read_bytes_per_s;
        let rate = sequential_rate(name, 20_000);
        assert!(
            (rate - peak).abs() / peak < 0.05,
            "{name}: {rate} vs {peak}"
        );
    }
    let hdd = sequential_rate("hdd-1.8in", 20_000);
    assert!(
        (hdd - 10.0e6).abs() / 10.0e6 < 0.01,
        "paper's 10 MB/s: {hdd}"
    );
}

#[test]
fn peaks_match_table_one_of_the_paper() {
    for (name, mb) in [
        ("hdd-1.8in", 10.0),
        ("microsd-class6", 16.0),
        ("emmc", 70.0),
    ] {
        let p = preset(name).unwrap().info().peak_read_bytes_per_s / 1e6;
        assert!((p - mb).abs() / mb < 0.01, "{name}: {p}");
    }
}

/// Mean service time of random 4 KiB reads at queue depth 1.
fn random_4k_latency(name: &str, n: usize) -> f64 {
    let mut dev = device(name, 1);
    let cap = dev.info().capacity_sectors;
    let mut rng = Rng(42);
    let log = closed_loop(&mut dev, 1, n, 20_000, |_| read(rng.sector4k(cap), 8));
    log.iter().map(|&(_, s, d)| (d - s) as f64).sum::<f64>() / n as f64
}

#[test]
fn hdd_random_reads_are_much_slower_than_sequential() {
    let random = random_4k_latency("hdd-1.8in", 2000);
    println!("hdd random 4 KiB: {:.2} ms", random / 1e6);
    assert!(random > 10e6, "{random}");
    // datasheet-level sanity: overhead 1 + seek ~15 + half turn 7.1 + transfer
    assert!(random > 18e6 && random < 28e6, "{random}");

    let mut dev = device("hdd-1.8in", 1);
    let log = closed_loop(&mut dev, 1, 2000, 20_000, |i| {
        read(1_000_000 + 8 * i as u64, 8)
    });
    let seq = log[1..]
        .iter()
        .map(|&(_, s, d)| (d - s) as f64)
        .sum::<f64>()
        / 1999.0;
    println!("hdd sequential 4 KiB: {:.3} ms", seq / 1e6);
    assert!(random > 20.0 * seq, "{random} vs {seq}");
}

#[test]
fn hdd_seek_grows_with_distance() {
    let mut m = HddModel::new(&devmodel::hdd::MK6006GAH);
    let spc = m.sectors_per_track() * devmodel::hdd::MK6006GAH_HEADS as u64;
    let mut prev = 0;
    let mut t = 0;
    for d in [1u64, 10, 100, 1_000, 10_000, 30_000, 60_000, 100_000] {
        // Go back to cylinder 0 (a miss far away), then seek d cylinders.
        m.reset();
        t += m.start(0, &read(0, 8), t) + 1_000_000;
        let target = d * spc + spc / 2;
        t += m.start(0, &read(target, 8), t) + 1_000_000;
        let b = m.last_breakdown();
        assert_eq!(b.kind, AccessKind::Miss);
        assert!(b.seek > prev, "seek({d}) = {} not above {prev}", b.seek);
        assert!(b.distance.abs_diff(d) <= 1, "{} vs {d}", b.distance);
        prev = b.seek;
    }
    assert!(prev >= 26_000_000, "near full stroke: {prev}");
}

#[test]
fn hdd_rotational_latency_averages_half_a_revolution() {
    let mut m = HddModel::new(&devmodel::hdd::MK6006GAH);
    let cap = m.info().capacity_sectors;
    let mut rng = Rng(7);
    let (mut t, mut rot, mut seek) = (0u64, 0u64, 0u64);
    let n = 5000;
    for _ in 0..n {
        let d = m.start(0, &read(rng.sector4k(cap), 8), t);
        let b = m.last_breakdown();
        assert_eq!(b.kind, AccessKind::Miss);
        rot += b.rotation;
        seek += b.seek;
        t += d + 20_000;
    }
    let half = m.rotation_ns() as f64 / 2.0;
    let mean_rot = rot as f64 / n as f64;
    let mean_seek = seek as f64 / n as f64;
    println!(
        "mean rotational wait {:.2} ms (half turn {:.2}), mean seek {:.2} ms",
        mean_rot / 1e6,
        half / 1e6,
        mean_seek / 1e6
    );
    assert!(
        (mean_rot - half).abs() / half < 0.05,
        "{mean_rot} vs {half}"
    );
    // Random seeks average about the datasheet's 15 ms (14.0 ms with the curve
    // anchored at one third of the stroke).
    assert!((mean_seek - 15e6).abs() / 15e6 < 0.1, "{mean_seek}");
}

#[test]
fn hdd_sequential_continuation_needs_no_seek_or_rotation() {
    let mut m = HddModel::new(&devmodel::hdd::MK6006GAH);
    let d1 = m.start(0, &read(5_000_000, 256), 0);
    assert_eq!(m.last_breakdown().kind, AccessKind::Miss);
    let d2 = m.start(0, &read(5_000_256, 256), d1 + 20_000);
    let b = m.last_breakdown();
    assert_eq!(b.kind, AccessKind::Stream);
    assert_eq!(b.seek + b.rotation, 0);
    assert!(d2 < d1);
    // A small skip ahead of the running stream waits for the media: no seek and
    // no lost revolution.
    let t3 = d1 + 20_000 + d2 + 100_000;
    let d3 = m.start(0, &read(5_000_512 + 100, 8), t3);
    assert_eq!(m.last_breakdown().kind, AccessKind::Stream);
    assert!(d3 < 6_000_000, "{d3}");
    // After an idle period the read-ahead has the next data already: a hit.
    let t4 = t3 + d3 + 20_000_000;
    m.start(0, &read(5_000_620, 128), t4);
    assert_eq!(m.last_breakdown().kind, AccessKind::CacheHit);
    // A sequential write stream streams too.
    let t4 = t4 + 100_000_000;
    let w1 = m.start(0, &write(9_000_000, 256), t4);
    m.start(0, &write(9_000_256, 256), t4 + w1 + 20_000);
    assert_eq!(m.last_breakdown().kind, AccessKind::SeqWrite);
}

#[test]
fn hdd_ncq_reordering_raises_random_throughput() {
    let run = |qd: usize| {
        let mut dev = Device::new(preset("hdd-1.8in").unwrap(), qd);
        let cap = dev.info().capacity_sectors;
        let mut rng = Rng(3);
        let log = closed_loop(&mut dev, qd, 1500, 0, |_| read(rng.sector4k(cap), 8));
        1500.0 * 1e9 / log.last().unwrap().2 as f64
    };
    let (q1, q16) = (run(1), run(16));
    println!("hdd random 4 KiB IOPS: QD1 {q1:.1}, QD16 {q16:.1}");
    assert!(q16 > 1.5 * q1, "{q1} {q16}");
}

#[test]
fn flash_random_4k_costs_more_than_sequential_bytes() {
    for name in ["microsd-class6", "emmc", "ssd-sata", "nvme"] {
        let peak = preset(name).unwrap().info().peak_read_bytes_per_s;
        let seq_4k = 4096.0 / peak * 1e9;
        let random = random_4k_latency(name, 500);
        println!(
            "{name}: random 4 KiB {:.1} us ({:.0} IOPS), sequential cost of 4 KiB {:.1} us",
            random / 1e3,
            1e9 / random,
            seq_4k / 1e3
        );
        assert!(random > 2.0 * seq_4k, "{name}: {random} vs {seq_4k}");
    }
}

#[test]
fn flash_random_reads_hit_datasheet_qd1_iops() {
    for (name, iops) in [("ssd-sata", 10_000.0), ("nvme", 15_000.0)] {
        let got = 1e9 / random_4k_latency(name, 500);
        assert!((got - iops).abs() / iops < 0.05, "{name}: {got}");
    }
}

fn random_iops(name: &str, qd: usize, dir: Direction) -> f64 {
    let mut dev = device(name, qd);
    let cap = dev.info().capacity_sectors;
    let mut rng = Rng(11);
    let n = 20_000;
    let log = closed_loop(&mut dev, qd, n, 0, |_| IoRequest {
        sector: rng.sector4k(cap),
        sectors: 8,
        dir,
    });
    n as f64 * 1e9 / log.last().unwrap().2 as f64
}

#[test]
fn ssd_and_nvme_parallelism_multiplies_random_iops() {
    for name in ["ssd-sata", "nvme"] {
        let q1 = random_iops(name, 1, Direction::Read);
        let q32 = random_iops(name, 32, Direction::Read);
        let w1 = random_iops(name, 1, Direction::Write);
        let w32 = random_iops(name, 32, Direction::Write);
        println!("{name}: random 4 KiB read IOPS QD1 {q1:.0} QD32 {q32:.0}; write QD1 {w1:.0} QD32 {w32:.0}");
        assert!(q32 > 5.0 * q1, "{name}: {q1} {q32}");
        assert!(w32 > 1.5 * w1, "{name}: {w1} {w32}");
    }
    // The SATA drive saturates at its datasheet 98K IOPS, the NVMe drive goes far beyond.
    let sata = random_iops("ssd-sata", 32, Direction::Read);
    assert!((sata - 98_000.0).abs() / 98_000.0 < 0.05, "{sata}");
    let nvme = random_iops("nvme", 64, Direction::Read);
    assert!(nvme > 300_000.0, "{nvme}");
}

#[test]
fn sd_card_random_writes_are_very_slow() {
    let mut dev = device("microsd-class6", 1);
    let cap = dev.info().capacity_sectors;
    let mut rng = Rng(5);
    let n = 50;
    let log = closed_loop(&mut dev, 1, n, 0, |_| write(rng.sector4k(cap), 8));
    let kb_s = n as f64 * 4.0 * 1e9 / log.last().unwrap().2 as f64;
    println!("microsd random 4 KiB writes: {kb_s:.1} KB/s");
    assert!(kb_s < 100.0, "{kb_s}");
    // sequential writes go at the Class 6 rate
    let mut dev = device("microsd-class6", 1);
    let log = closed_loop(&mut dev, 1, 200, 0, |i| write(i as u64 * 256, 256));
    let mb_s = 200.0 * 131072.0 * 1e3 / log.last().unwrap().2 as f64;
    assert!(mb_s > 5.5 && mb_s < 6.1, "{mb_s}");
}

#[test]
fn device_respects_queue_depth_and_orders_completions() {
    for (name, qd) in [
        ("hdd-1.8in", 8),
        ("ssd-sata", 32),
        ("nvme", 64),
        ("emmc", 1),
    ] {
        let mut dev = device(name, qd);
        let cap = dev.info().capacity_sectors;
        let mut rng = Rng(99);
        for tag in 0..qd as u64 {
            assert!(dev.can_accept());
            dev.submit(0, tag, read(rng.sector4k(cap), 8));
        }
        assert_eq!(dev.in_flight(), qd);
        assert!(!dev.can_accept(), "{name}: full at depth {qd}");
        let mut last = 0;
        let mut seen = vec![false; qd];
        while let Some(t) = dev.next_completion() {
            assert!(t >= last, "{name}: completion times go backwards");
            let tag = dev.pop_completed(t).expect("a completion at its time");
            assert!(!seen[tag as usize]);
            seen[tag as usize] = true;
            last = t;
            assert!(dev.can_accept());
        }
        assert!(seen.iter().all(|&s| s), "{name}: every command completes");
        assert_eq!(dev.in_flight(), 0);
        assert_eq!(dev.pop_completed(u64::MAX), None);
    }
}

#[test]
fn device_pop_completed_is_not_early_and_late_pops_keep_time_order() {
    let mut dev = device("ssd-sata", 32);
    let mut rng = Rng(1);
    let cap = dev.info().capacity_sectors;
    for tag in 0..32 {
        dev.submit(0, tag, read(rng.sector4k(cap), 8));
    }
    let first = dev.next_completion().unwrap();
    assert_eq!(dev.pop_completed(first - 1), None);
    // Collect everything late, in one go: order still follows completion times.
    let mut times = Vec::new();
    while let Some(t) = dev.next_completion() {
        times.push(t);
        dev.pop_completed(u64::MAX / 2).unwrap();
    }
    assert_eq!(times.len(), 32);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

fn mixed_run(dev: &mut Device) -> Vec<(u64, Nanos, Nanos)> {
    let cap = dev.info().capacity_sectors;
    let mut rng = Rng(2024);
    let qd = dev.queue_depth();
    closed_loop(dev, qd, 3000, 5_000, |i| {
        let r = rng.next();
        let sector = if r.is_multiple_of(3) {
            (i as u64 * 256) % (cap - 256)
        } else {
            rng.sector4k(cap)
        };
        IoRequest {
            sector,
            sectors: if r.is_multiple_of(3) { 256 } else { 8 },
            dir: if r.is_multiple_of(5) {
                Direction::Write
            } else {
                Direction::Read
            },
        }
    })
}

#[test]
fn device_is_deterministic() {
    for &name in PRESETS {
        for qd in [1, 4, 32] {
            let a = mixed_run(&mut device(name, qd));
            let b = mixed_run(&mut device(name, qd));
            assert_eq!(a, b, "{name} qd {qd}");
            // reset_state gives the same run again on the same device
            let mut dev = device(name, qd);
            let first = mixed_run(&mut dev);
            dev.reset_state();
            assert_eq!(mixed_run(&mut dev), first, "{name} qd {qd} after reset");
        }
    }
}

#[test]
fn unit_mapping_is_in_range() {
    for &name in PRESETS {
        let m = preset(name).unwrap();
        let mut rng = Rng(8);
        for _ in 0..1000 {
            let r = read(rng.sector4k(m.info().capacity_sectors), 8);
            if let Some(u) = m.unit_for(&r) {
                assert!(u < m.parallelism());
            }
        }
    }
    let m = FlashModel::new(&devmodel::flash::NVME_970EVO);
    assert_eq!(m.parallelism(), 32);
    assert_eq!(m.unit_for(&write(0, 8)), None, "writes go to any unit");
}

#[test]
fn unknown_preset_names_value_and_accepted_list() {
    let err = preset("floppy").err().expect("unknown preset is an error");
    let msg = err.to_string();
    assert!(msg.contains("floppy"), "{msg}");
    for p in PRESETS {
        assert!(msg.contains(p), "{msg} lacks {p}");
    }
    let _: &dyn std::error::Error = &err;
}

#[test]
fn presets_describe_themselves() {
    for &name in PRESETS {
        let m = preset(name).unwrap();
        let i = m.info();
        assert_eq!(i.name, name);
        assert!(!i.description.is_empty());
        assert!(i.capacity_sectors > 0);
        assert_eq!(i.rotational, name == "hdd-1.8in" || name == "sas-10k");
        assert!(i.default_queue_depth >= 1);
    }
    let qd = |n| preset(n).unwrap().info().default_queue_depth;
    assert_eq!(qd("hdd-1.8in"), 1);
    assert_eq!(qd("microsd-class6"), 1);
    assert_eq!(qd("emmc"), 1);
    assert_eq!(qd("ssd-sata"), 32);
    assert_eq!(qd("nvme"), 64);
    assert_eq!(qd("sas-10k"), 32);
}

/// Mean service time of 400 random 4 KiB reads, one at a time.
fn mean_random_read_ns(m: &mut dyn ServiceModel) -> f64 {
    let cap = m.info().capacity_sectors;
    let mut r = Rng(7);
    let mut now: Nanos = 0;
    let n = 400;
    for _ in 0..n {
        let req = read(r.sector4k(cap), 8);
        now += m.start(0, &req, now);
    }
    now as f64 / n as f64
}

/// The calibration knobs of an HDD preset move what they name: a slower
/// seek and a slower spindle make random reads slower, by about the
/// added seek and half the added rotation.
#[test]
fn hdd_params_change_the_model_they_name() {
    let base = mean_random_read_ns(&mut *devmodel::preset("hdd-1.8in").unwrap());
    let set = |s: &[(&str, f64)]| {
        let s: Vec<(String, f64)> = s.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        mean_random_read_ns(&mut *devmodel::preset_with_hdd_params("hdd-1.8in", &s).unwrap())
    };
    let slow_seek = set(&[("avg_seek_ms", 20.0), ("full_stroke_ms", 36.0)]);
    assert!(
        slow_seek > base + 3.0e6,
        "avg seek 15 -> 20 ms: {base} -> {slow_seek} ns"
    );
    // 4200 -> 3600 rpm: half a revolution is 7.14 -> 8.33 ms.
    let slow_spin = set(&[("rpm", 3600.0)]);
    assert!(
        slow_spin > base + 0.6e6,
        "4200 -> 3600 rpm: {base} -> {slow_spin} ns"
    );
    // No setting: the preset itself.
    assert_eq!(set(&[]), base);
}

#[test]
fn hdd_params_are_refused_by_name_and_left_alone_on_flash() {
    let bad = |s: &str| devmodel::parse_hdd_param(s).unwrap_err();
    assert!(bad("seek=3").contains("unknown HDD parameter \"seek\""));
    assert!(bad("avg_seek_ms").contains("NAME=VALUE"));
    assert!(bad("avg_seek_ms=fast").contains("not a number"));
    assert!(bad("rpm=-1").contains("positive"));
    assert!(bad("cache_segments=9").contains("whole number from 1 to 8"));
    assert!(bad("avg_seek_ms=40").contains("seek times out of order"));
    assert_eq!(
        devmodel::parse_hdd_param(" miss_overhead_ms = 2.5").unwrap(),
        ("miss_overhead_ms".to_string(), 2.5)
    );
    // Together: each is fine alone, the pair puts the seeks out of order.
    assert!(devmodel::parse_hdd_params(&["avg_seek_ms=25"]).is_ok());
    let pair = devmodel::parse_hdd_params(&["avg_seek_ms=25", "full_stroke_ms=20"]);
    assert!(pair.unwrap_err().contains("seek times out of order"));
    // Flash presets have no HDD parameters: built as they are.
    let s = vec![("avg_seek_ms".to_string(), 20.0)];
    let mut emmc = devmodel::preset_with_hdd_params("emmc", &s).unwrap();
    let plain = mean_random_read_ns(&mut *preset("emmc").unwrap());
    assert_eq!(mean_random_read_ns(&mut *emmc), plain);
    assert!(devmodel::preset_with_hdd_params("floppy", &s).is_err());
}

/// `sas-10k` serves a random 4 KiB read over the whole disk in about its
/// datasheet's average seek (3.9 ms) plus half a revolution (3 ms) plus the
/// command overhead (0.2 ms): 7.1 ms, within the seek curve's shape
/// (+-1.5 ms); and 1.8-inch disk settings that put its seeks out of order
/// are refused when it is built with them.
#[test]
fn the_sas_10k_preset_serves_random_reads_in_its_datasheets_time() {
    let t = mean_random_read_ns(&mut *preset("sas-10k").unwrap());
    assert!((t - 7.1e6).abs() < 1.5e6, "mean random 4 KiB read {t} ns");
    let s = devmodel::parse_hdd_params(&["avg_seek_ms=25"]).unwrap();
    let e = devmodel::preset_with_hdd_params("sas-10k", &s)
        .err()
        .unwrap();
    assert!(e.contains("seek times out of order"), "{e}");
}

/// MB/s of 8 interleaved sequential 4 KiB streams (1 GiB apart, served one
/// command at a time in round robin, 20 us between commands), as the
/// study's 8 FFSB threads give a noop elevator.
fn interleaved_streams_mb_s(p: &devmodel::HddParams, dir: Direction) -> f64 {
    let mut m = HddModel::new(p);
    let (streams, per_stream) = (8u64, 400u64);
    let mut now: Nanos = 0;
    for i in 0..per_stream {
        for k in 0..streams {
            let sector = k * (1 << 21) + i * 8;
            let req = IoRequest {
                sector,
                sectors: 8,
                dir,
            };
            now += m.start(0, &req, now) + 20_000;
        }
    }
    (streams * per_stream * 4096) as f64 * 1e3 / now as f64
}

/// The `sas-10k` preset's buffer segments follow 8 interleaved sequential
/// streams (ARLA read-ahead per stream, writes gathered per segment): the
/// same disk without per-stream segments serves each command as a miss (a
/// seek and a rotational wait per 4 KiB), at a few MB/s.
#[test]
fn the_sas_10k_buffer_segments_follow_interleaved_streams() {
    let on = devmodel::hdd::SAS10K;
    let off = devmodel::HddParams {
        streams: devmodel::Streams::OFF,
        ..on.clone()
    };
    for dir in [Direction::Read, Direction::Write] {
        let (with, without) = (
            interleaved_streams_mb_s(&on, dir),
            interleaved_streams_mb_s(&off, dir),
        );
        println!("{dir:?}: 8 interleaved streams {with:.1} MB/s, without streams {without:.1}");
        assert!(without < 5.0, "{dir:?} without streams: {without}");
        assert!(with > 10.0 * without, "{dir:?}: {with} vs {without}");
    }
}

/// Tags in completion order after submitting `reqs` at once at t = 0.
fn completion_order(mut dev: Device, reqs: &[IoRequest]) -> Vec<u64> {
    for (i, r) in reqs.iter().enumerate() {
        assert!(dev.can_accept(), "request {i} within depth");
        dev.submit(0, i as u64, *r);
    }
    assert!(!dev.can_accept(), "the depth is full");
    let mut order = Vec::new();
    while let Some(t) = dev.next_completion() {
        while let Some(tag) = dev.pop_completed(t) {
            order.push(tag);
        }
    }
    order
}

#[test]
fn transport_fifo_serves_in_arrival_order_where_ncq_reorders() {
    // Far, near, far, near: the disk's own queue of 4 (SPTF) takes the near
    // ones first; behind a FIFO transport of 4 the one-command disk serves
    // them as they came (the real runner's loop device, LOOP_TAG_DEPTH).
    let cap = preset("hdd-1.8in").unwrap().info().capacity_sectors;
    let reqs = [
        read(cap - 4096, 8),
        read(64, 8),
        read(cap - 2048, 8),
        read(128, 8),
    ];
    let ncq = completion_order(device("hdd-1.8in", 4), &reqs);
    let fifo = completion_order(
        Device::behind_fifo(preset("hdd-1.8in").unwrap(), 1, devmodel::LOOP_TAG_DEPTH),
        &reqs,
    );
    assert_eq!(fifo, vec![0, 1, 2, 3]);
    assert_ne!(ncq, fifo, "NCQ reorders the same requests");
    // A transport no deeper than the device is the device alone.
    let same = completion_order(
        Device::behind_fifo(preset("hdd-1.8in").unwrap(), 4, 2),
        &reqs,
    );
    assert_eq!(same, ncq);
}
