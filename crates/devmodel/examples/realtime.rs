//! How a device emulator drives a `Device` in real time.
//!
//! The emulator keeps one clock: nanoseconds since it started. Each request it
//! receives (from FUSE, in `devemu`) is submitted at the current clock value;
//! the model says when it completes; the emulator sleeps until then and
//! answers. Here a few requests stand in for FUSE traffic.
//!
//! Run: `cargo run -p devmodel --example realtime [preset]`

use std::time::{Duration, Instant};

use devmodel::{preset, Device, Direction, IoRequest, Nanos};

fn main() {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "emmc".to_string());
    let model = match preset(&name) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let depth = model.info().default_queue_depth;
    let mut dev = Device::new(model, depth);
    let epoch = Instant::now();
    let clock = || epoch.elapsed().as_nanos() as Nanos;

    // Stand-in for incoming requests: 8 scattered 4 KiB reads, then 1 MiB read
    // sequentially in 128 KiB pieces.
    let mut incoming: Vec<IoRequest> = (0..8u64)
        .map(|i| IoRequest {
            sector: (i * 7_919_999) % (dev.info().capacity_sectors - 8),
            sectors: 8,
            dir: Direction::Read,
        })
        .collect();
    incoming.extend((0..8u64).map(|i| IoRequest {
        sector: 1_000_000 + i * 256,
        sectors: 256,
        dir: Direction::Read,
    }));
    incoming.reverse();

    let mut modelled: Nanos = 0;
    let mut tag = 0u64;
    while !incoming.is_empty() || dev.in_flight() > 0 {
        // Accept what the device queue can take (a real emulator gets these
        // from its request channel).
        while dev.can_accept() {
            let Some(req) = incoming.pop() else { break };
            dev.submit(clock(), tag, req);
            tag += 1;
        }
        // Sleep until the next modelled completion, then answer it.
        if let Some(t) = dev.next_completion() {
            let now = clock();
            if t > now {
                std::thread::sleep(Duration::from_nanos(t - now));
            }
            while let Some(done) = dev.pop_completed(clock()) {
                modelled = t;
                println!("{:>10.3} ms  request {done} complete", clock() as f64 / 1e6);
            }
        }
    }
    println!(
        "{}: modelled completion of the last request at {:.3} ms, wall clock {:.3} ms",
        dev.info().name,
        modelled as f64 / 1e6,
        epoch.elapsed().as_secs_f64() * 1e3
    );
}
