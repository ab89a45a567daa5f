//! The CFS-v experiment's four cells over several device seeds, their
//! means and spread: `cargo run --release -p cpusched --example cfsv_seeds
//! -- [seeds] [measure_ms]`. The balancer's placement of the hogs differs
//! from seed to seed, so one seed can mislead (see crates/cpusched/README.md).

use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::published::{Changes, Published};
use cpusched::cfsv_study::{run, Case, StudySetup};
use cpusched::{FairKind, MS};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map_or(Ok(default), |s| s.parse())
        .unwrap_or_else(|_| {
            eprintln!("usage: cfsv_seeds [seeds] [measure_ms] (positive integers)");
            std::process::exit(2)
        })
}

type Vms = [(f64, f64, f64); 2];

fn main() {
    let (seeds, ms) = (arg(1, 3).max(1), arg(2, 2000).max(1));
    let hosts = [FairKind::Cfs, FairKind::CfsV(CfsvOptions::default())];
    let mut mean: Vec<[Vms; 2]> = Vec::new();
    for case in [Case::Separate, Case::Mixed] {
        let mut per_host = [[(0.0, 0.0, 0.0); 2]; 2];
        for (h, &host) in hosts.iter().enumerate() {
            let mut line = format!("{:<8} {:<6}", case.name(), host.name());
            for seed in 1..=seeds {
                let mut s = StudySetup::new(case, host);
                s.measure_ns = ms * MS;
                s.seed = seed;
                let r = run(&s).unwrap_or_else(|e| {
                    eprintln!("{e}");
                    std::process::exit(1)
                });
                for (i, v) in r.vms.iter().enumerate() {
                    let acc = &mut per_host[h][i];
                    acc.0 += v.iops / seeds as f64;
                    acc.1 += v.hash_mb_s / seeds as f64;
                    acc.2 += v.cpu_pct / seeds as f64;
                }
                line += &format!(
                    " | {:>6.0} {:>6.0} IOPS {:>5.0} MD5 {:>4.0}%",
                    r.vms[0].iops,
                    r.vms[1].iops,
                    r.hash_mb_s(),
                    r.vms[0].cpu_pct
                );
            }
            println!("{line}");
        }
        mean.push(per_host);
    }
    let c = Changes::from_vms(Some(mean[0]), Some(mean[1]));
    println!("means over {seeds} seeds, {ms} ms each:");
    print!("{}", c.render(&Published::shipped()));
}
