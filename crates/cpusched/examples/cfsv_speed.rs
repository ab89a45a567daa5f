//! The CFS-v experiment against the slides with the host's speed factor
//! varied (the i7-2600's speed against the machine the per-request costs
//! of `cpusched::iocost` were measured on is an estimate):
//! `cargo run --release -p cpusched --example cfsv_speed -- [measure_ms] [speed...]`.

use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::host_i7_2600;
use cpusched::cfsv_study::published::{compare_on, Published};
use cpusched::MS;

fn main() {
    let mut args = std::env::args().skip(1);
    let parsed = (|| -> Result<(u64, Vec<f64>), String> {
        let ms = args.next().map_or(Ok(1000), |s| s.parse::<u64>());
        let ms = ms.map_err(|e| format!("measure_ms: {e}"))?;
        let speeds = args
            .map(|s| s.parse::<f64>().map_err(|e| format!("speed {s}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ms, speeds))
    })();
    let (ms, mut speeds) = parsed.unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    if speeds.is_empty() {
        speeds.push(host_i7_2600().speed);
    }
    for speed in speeds {
        let mut p = host_i7_2600();
        p.speed = speed;
        match compare_on(&p, CfsvOptions::default(), ms * MS) {
            Ok(c) => println!("speed {speed}\n{}", c.table(&Published::shipped())),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
}
