//! Figure 3's two cells (CFS, 3 host loops against 2 host + 1 guest loop)
//! as shares of samples below 200 us, in 200..5000 us and above 5000 us:
//! `cargo run --release -p cpusched --example fig3 -- [host HZ]`.

use cpusched::cyclictest::{run_latency, LatencySetup};
use cpusched::{FairKind, Platform};

fn main() {
    let hz: u32 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 100,
        Some(Ok(h)) if h > 0 => h,
        Some(_) => {
            eprintln!("HZ must be a positive integer");
            std::process::exit(2);
        }
    };
    for (host, guest) in [(3, 0), (2, 1)] {
        let mut p = Platform::chromebook_2014();
        p.hz = hz;
        let mut s = LatencySetup::new(p, FairKind::Cfs, host, Some(guest));
        s.loops = 100_000;
        let h = run_latency(&s).expect("cell runs").hist;
        println!(
            "host HZ={hz} {host} host + {guest} guest: avg {:.1} us, max {:.0} us, <200 us {:.4}, 200..5000 us {:.4}, >5000 us {:.4}",
            h.avg_us(),
            h.max_us(),
            h.share_between(0, 200),
            h.share_between(200, 5000),
            h.overflow as f64 / h.count as f64
        );
    }
}
