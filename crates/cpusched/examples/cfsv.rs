//! Prints the CFS-v experiment against the slides' figures, then every
//! cell with the options tried alone:
//! `cargo run --release -p cpusched --example cfsv -- [measure_ms]`.

use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::published::{compare, Published};
use cpusched::cfsv_study::{case_table, hosts_tried, Case};
use cpusched::MS;

fn main() {
    let ms: u64 = std::env::args()
        .nth(1)
        .map_or(Ok(1000), |s| s.parse())
        .unwrap_or_else(|_| {
            eprintln!("measure_ms must be a positive integer");
            std::process::exit(2)
        });
    let hosts = hosts_tried();
    match compare(CfsvOptions::default(), ms * MS) {
        Ok(c) => println!("{}", c.table(&Published::shipped())),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    for case in [Case::Separate, Case::Mixed] {
        let t0 = std::time::Instant::now();
        match case_table(case, &hosts, ms * MS) {
            Ok(t) => println!("{t}({:.1} s)\n", t0.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
}
