//! Prints the latency table of the coordinated scheduling study's matrix
//! (CFS or BFS on the Chromebook): `cargo run --release -p cpusched
//! --example study -- [cfs|bfs] [samples]`.

use cpusched::cyclictest::{run_latency, CpuCoordination, LatencySetup};
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
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10}",
        "total", "no guest", "0 guest", "1 guest", "2 guest"
    );
    for total in 0..=8usize {
        let mut row = format!("{total:>6}");
        for guest in [None, Some(0), Some(1), Some(2)] {
            let host = total as i64 - guest.unwrap_or(0) as i64;
            if !(0..=8).contains(&host) {
                row += &format!(" {:>10}", "-");
                continue;
            }
            let mut s = LatencySetup::new(Platform::chromebook_2014(), sched, host as usize, guest);
            s.loops = samples;
            let h = run_latency(&s).expect("cell runs").hist;
            row += &format!(" {:>10.1}", h.avg_us());
        }
        println!("{row}");
    }
    println!();
    println!("1 guest loop, coordination: avg latency us (host loops' share of the 2 cores)");
    println!(
        "{:>6} {:>18} {:>18} {:>18}",
        "host", "off", "static-cpu", "help-cpu"
    );
    for host in 0..=8usize {
        let mut row = format!("{host:>6}");
        for c in [
            CpuCoordination::Off,
            CpuCoordination::StaticCpu,
            CpuCoordination::HelpCpu,
        ] {
            let mut s = LatencySetup::new(Platform::chromebook_2014(), sched, host, Some(1));
            s.loops = samples;
            s.coordination = c;
            let r = run_latency(&s).expect("cell runs");
            row += &format!(" {:>9.1} ({:.3})", r.hist.avg_us(), r.host_loops_share);
        }
        println!("{row}");
    }
}
