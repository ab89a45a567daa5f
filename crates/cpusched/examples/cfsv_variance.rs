//! How the CFS-v experiment's figures vary within one run and from seed to
//! seed: `cargo run --release -p cpusched --example cfsv_variance --
//! [seeds] [measure_ms] [window_ms] [separate|mixed]`. Each cell runs once per device seed
//! 1..=seeds; its measured window is cut into windows of `window_ms`. Per
//! cell and seed: the figure over the whole window and the spread of its
//! windows; then the must-show changes per seed (cfs and cfs-v of the same
//! seed), their mean and a 95% confidence interval over the seeds.
//! `CFSV_FIRST_SEED=N` starts at seed N, `CFSV_HOST=cfs` (or `cfs-v`) runs
//! one host scheduler only (no changes then).

use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::published::{change_pct, mean_ci95};
use cpusched::cfsv_study::{run_windows, Case, StudyResult, StudySetup};
use cpusched::{FairKind, MS};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map_or(Ok(default), |s| s.parse())
        .unwrap_or_else(|_| {
            eprintln!("usage: cfsv_variance [seeds] [measure_ms] [window_ms] [separate|mixed]");
            std::process::exit(2)
        })
}

/// Mean and sample standard deviation.
fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, v.sqrt())
}

/// The two figures of a case: (I/O rate, hashing rate) the must-show reads.
fn figures(case: Case, r: &StudyResult) -> (f64, f64) {
    match case {
        Case::Separate => (r.vms[0].iops, r.vms[1].hash_mb_s),
        Case::Mixed => (r.iops(), r.hash_mb_s()),
    }
}

fn main() {
    let (seeds, ms, win) = (arg(1, 8).max(1), arg(2, 2000).max(1), arg(3, 250).max(1));
    let hosts = [FairKind::Cfs, FairKind::CfsV(CfsvOptions::default())];
    let cases = match std::env::args().nth(4).as_deref() {
        Some("separate") => vec![Case::Separate],
        Some("mixed") => vec![Case::Mixed],
        _ => vec![Case::Separate, Case::Mixed],
    };
    for case in cases {
        // [host][seed] -> (io, hash)
        let mut whole = [Vec::new(), Vec::new()];
        for (h, &host) in hosts.iter().enumerate() {
            if std::env::var("CFSV_HOST").is_ok_and(|x| x != host.name()) {
                continue;
            }
            println!(
                "{} {} ({} ms in windows of {} ms)",
                case.name(),
                host.name(),
                ms,
                win
            );
            let first: u64 = std::env::var("CFSV_FIRST_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            for seed in first..first + seeds {
                let mut s = StudySetup::new(case, host);
                (s.measure_ns, s.seed) = (ms * MS, seed);
                let t0 = std::time::Instant::now();
                let w = run_windows(&s, win * MS).unwrap_or_else(|e| {
                    eprintln!("{e}");
                    std::process::exit(1)
                });
                let f: Vec<(f64, f64)> = w.iter().map(|r| figures(case, r)).collect();
                let io: Vec<f64> = f.iter().map(|x| x.0).collect();
                let hash: Vec<f64> = f.iter().map(|x| x.1).collect();
                let ((im, isd), (hm, hsd)) = (mean_sd(&io), mean_sd(&hash));
                let series: Vec<String> = io.iter().map(|x| format!("{:.0}", x / 1e3)).collect();
                let k = (io.len() as f64).sqrt();
                println!(
                    "  seed {seed}: IOPS {im:>7.0} (windows sd {isd:>6.0}, se {:>5.0}) MD5 {hm:>6.0} (sd {hsd:>5.0}, se {:>4.0}) kIOPS per window {} [{:.1} s]",
                    isd / k,
                    hsd / k,
                    series.join(" "),
                    t0.elapsed().as_secs_f64()
                );
                whole[h].push((im, hm));
            }
            let io: Vec<f64> = whole[h].iter().map(|x| x.0).collect();
            let hash: Vec<f64> = whole[h].iter().map(|x| x.1).collect();
            let ((im, isd), (hm, hsd)) = (mean_sd(&io), mean_sd(&hash));
            println!("  over seeds: IOPS {im:.0} sd {isd:.0}; MD5 {hm:.0} sd {hsd:.0}");
        }
        let per: Vec<(f64, f64)> = whole[0]
            .iter()
            .zip(&whole[1])
            .map(|(a, b)| (change_pct(a.0, b.0), change_pct(a.1, b.1)))
            .collect();
        println!("{} changes per seed (cfs -> cfs-v):", case.name());
        for (i, (io, h)) in per.iter().enumerate() {
            println!("  seed {}: I/O {io:+7.1}%  hashing {h:+6.1}%", i + 1);
        }
        let n = per.len();
        let (io, h): (Vec<f64>, Vec<f64>) = per.iter().copied().unzip();
        let ((im, ici), (hm, hci)) = (mean_ci95(&io), mean_ci95(&h));
        println!(
            "  mean of per-seed changes: I/O {im:+.1}% +-{ici:.1}, hashing {hm:+.1}% +-{hci:.1} (95% CI, {n} seeds)"
        );
        let mean =
            |h: usize, f: fn(&(f64, f64)) -> f64| whole[h].iter().map(f).sum::<f64>() / n as f64;
        println!(
            "  change of the means: I/O {:+.1}%, hashing {:+.1}%",
            change_pct(mean(0, |x| x.0), mean(1, |x| x.0)),
            change_pct(mean(0, |x| x.1), mean(1, |x| x.1))
        );
    }
}
