//! Prints the coordinated scheduling study's tables on the CPU model:
//! `cargo run --release -p cpusched --example study -- [cfs|bfs|eevdf] [samples]`
//! (the same as `tandem sim cpu-study`).

use cpusched::study::{coordination_table, latency_table};
use cpusched::{FairKind, Platform};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sched = match FairKind::parse(args.get(1).map_or("cfs", |s| s.as_str())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let samples: u64 = match args.get(2).map(|s| s.parse()) {
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("samples must be a positive integer");
            std::process::exit(2);
        }
    };
    let p = Platform::chromebook_2014();
    for t in [
        latency_table(&p, sched, samples),
        coordination_table(&p, sched, samples),
    ] {
        match t {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
}
