//! Key numbers of every preset, measured by driving the models the way the
//! tests do: sequential 128 KiB reads at queue depth 1 and 32, random 4 KiB
//! reads and writes at several queue depths (closed loop, no host gap).
//!
//! Run: `cargo run --release -p devmodel --example summary`

use devmodel::{preset, Device, Direction, IoRequest, Nanos, PRESETS};

/// Requests/s and mean latency of a closed loop keeping `qd` commands in flight.
fn closed_loop(
    name: &str,
    qd: usize,
    n: usize,
    mut next: impl FnMut(usize) -> IoRequest,
) -> (f64, f64) {
    let mut dev = Device::new(preset(name).unwrap(), qd);
    let mut submitted = 0;
    let mut start = vec![0; n];
    let mut lat_sum = 0u64;
    let mut done = 0;
    let mut now: Nanos = 0;
    while done < n {
        while dev.can_accept() && submitted < n {
            start[submitted] = now;
            dev.submit(now, submitted as u64, next(submitted));
            submitted += 1;
        }
        now = dev.next_completion().unwrap();
        while let Some(tag) = dev.pop_completed(now) {
            lat_sum += now - start[tag as usize];
            done += 1;
        }
    }
    (n as f64 * 1e9 / now as f64, lat_sum as f64 / n as f64)
}

fn main() {
    for &name in PRESETS {
        let m = preset(name).unwrap();
        let info = m.info().clone();
        let cap = info.capacity_sectors;
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (cap / 8 - 1)) * 8
        };
        println!(
            "{name} ({}): parallelism {}, default queue depth {}, peak read {:.1} MB/s",
            info.description,
            m.parallelism(),
            info.default_queue_depth,
            info.peak_read_bytes_per_s / 1e6
        );
        for qd in [1usize, 32] {
            let (iops, _) = closed_loop(name, qd, 2000, |i| IoRequest {
                sector: 1_000_000 + i as u64 * 256,
                sectors: 256,
                dir: Direction::Read,
            });
            println!(
                "  seq 128 KiB read  QD{qd:<3}: {:8.1} MB/s",
                iops * 131072.0 / 1e6
            );
        }
        for qd in [1usize, 32] {
            let (iops, _) = closed_loop(name, qd, 2000, |i| IoRequest {
                sector: 1_000_000 + i as u64 * 256,
                sectors: 256,
                dir: Direction::Write,
            });
            println!(
                "  seq 128 KiB write QD{qd:<3}: {:8.1} MB/s",
                iops * 131072.0 / 1e6
            );
        }
        let n = if info.rotational || name == "microsd-class6" {
            2000
        } else {
            20000
        };
        for qd in [1usize, 4, 32, 64] {
            let (iops, lat) = closed_loop(name, qd, n, |_| IoRequest {
                sector: rnd(),
                sectors: 8,
                dir: Direction::Read,
            });
            println!(
                "  rand 4 KiB read   QD{qd:<3}: {iops:10.0} IOPS, mean latency {:9.1} us",
                lat / 1e3
            );
        }
        let n = if name == "microsd-class6" { 100 } else { n };
        for qd in [1usize, 32] {
            let (iops, lat) = closed_loop(name, qd, n, |_| IoRequest {
                sector: rnd(),
                sectors: 8,
                dir: Direction::Write,
            });
            println!(
                "  rand 4 KiB write  QD{qd:<3}: {iops:10.0} IOPS, mean latency {:9.1} us",
                lat / 1e3
            );
        }
    }
}
