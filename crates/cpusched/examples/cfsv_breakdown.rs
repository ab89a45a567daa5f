//! Where a request's time goes in one CFS-v cell: `cargo run --release -p
//! cpusched --example cfsv_breakdown -- CASE HOST [seed] [measure_ms]
//! [sample_us]` (CASE `separate` or `mixed`, HOST `cfs` or `cfs-v`).

use cpusched::cfsv_study::{breakdown, Case, StudySetup};
use cpusched::{FairKind, MS, US};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: cfsv_breakdown separate|mixed cfs|cfs-v [seed] [measure_ms] [sample_us]");
        std::process::exit(2)
    };
    let case = match args.first().map(String::as_str) {
        Some("separate") => Case::Separate,
        Some("mixed") => Case::Mixed,
        _ => usage(),
    };
    let host = args
        .get(1)
        .map_or(Err(String::new()), |h| FairKind::parse(h))
        .unwrap_or_else(|_| usage());
    let num = |i: usize, d: u64| {
        args.get(i)
            .map_or(Ok(d), |s| s.parse())
            .unwrap_or_else(|_| usage())
    };
    let mut s = StudySetup::new(case, host);
    s.seed = num(2, 1);
    s.measure_ns = num(3, 2000) * MS;
    match breakdown::run(&s, num(4, 10) * US) {
        Ok(b) => print!("{}", b.render()),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}
