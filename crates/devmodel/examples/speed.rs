//! Cost of the model per request: a closed loop of random and sequential
//! requests through `Device` on every preset.
//!
//! Run: `cargo run --release -p devmodel --example speed`

use std::time::Instant;

use devmodel::{preset, Device, Direction, IoRequest, PRESETS};

fn main() {
    for &name in PRESETS {
        for depth in [1usize, 32] {
            let mut dev = Device::new(preset(name).unwrap(), depth);
            let cap = dev.info().capacity_sectors;
            let mut x: u64 = 0x1234_5678;
            let n = 2_000_000u64;
            let t0 = Instant::now();
            let mut submitted = 0u64;
            let mut now = 0;
            while submitted < n {
                while dev.can_accept() && submitted < n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let seq = x.is_multiple_of(4);
                    let req = IoRequest {
                        sector: if seq {
                            (submitted * 256) % (cap - 256)
                        } else {
                            (x % (cap / 8 - 1)) * 8
                        },
                        sectors: if seq { 256 } else { 8 },
                        dir: if x % 8 == 1 {
                            Direction::Write
                        } else {
                            Direction::Read
                        },
                    };
                    dev.submit(now, submitted, req);
                    submitted += 1;
                }
                now = dev.next_completion().unwrap();
                while dev.pop_completed(now).is_some() {}
            }
            let el = t0.elapsed().as_secs_f64();
            println!(
                "{name:>15} depth {depth:>2}: {:6.1} ns per request (submit + completion), {:.1} M requests/s",
                el * 1e9 / n as f64,
                n as f64 / el / 1e6
            );
        }
    }
}
