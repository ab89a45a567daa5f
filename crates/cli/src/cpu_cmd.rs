//! `tandem sim cpu-study`: the coordinated task scheduling study's tables
//! on the CPU model (crate `cpusched`), and its events-per-second figure.

use std::io::Write as _;

use clap::Args;
use cpusched::{study, FairKind, Platform};

use crate::Failure;

#[derive(Args)]
pub struct CpuStudyArgs {
    /// CPU scheduler of host and guest.
    #[arg(long, default_value = "cfs",
          value_parser = clap::builder::PossibleValuesParser::new(FairKind::NAMES))]
    sched: String,
    /// Platform preset.
    #[arg(long, default_value = "chromebook-2014",
          value_parser = clap::builder::PossibleValuesParser::new(cpusched::platform::PRESETS))]
    platform: String,
    /// cyclictest samples per cell (the study took 2 x 100000).
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Measure events per second on the contended cell (8 host loops,
    /// 1 guest loop) instead of printing the tables.
    #[arg(long)]
    bench: bool,
}

pub fn run(a: CpuStudyArgs) -> Result<(), Failure> {
    let sched = FairKind::parse(&a.sched).map_err(|e| Failure::Usage(format!("--sched: {e}")))?;
    let p =
        Platform::preset(&a.platform).map_err(|e| Failure::Usage(format!("--platform: {e}")))?;
    if a.samples == 0 || a.samples > 10_000_000 {
        return Err(Failure::Usage(format!(
            "--samples {}: out of range; accepted: 1 to 10000000",
            a.samples
        )));
    }
    let text = if a.bench {
        let (events, secs) = study::bench_cell(&p, sched, a.samples).map_err(Failure::Run)?;
        format!(
            "{} on {}, 8 host loops + 1 guest loop, {} samples: {events} events in {secs:.3} s = {:.2} M events/s\n",
            sched.name(),
            p.name,
            a.samples,
            events as f64 / secs.max(1e-9) / 1e6
        )
    } else {
        let lat = study::latency_table(&p, sched, a.samples).map_err(Failure::Run)?;
        let coord = study::coordination_table(&p, sched, a.samples).map_err(Failure::Run)?;
        format!("{lat}\n{coord}")
    };
    // A closed pipe (`| head`) ends the output quietly instead of a panic.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Run(format!("writing the tables: {e}")))
        }
        _ => Ok(()),
    }
}
