//! `tandem sim cfsv-study`: the CFS-v experiment on the CPU model (crate
//! `cpusched`), set against the slides' figures (reference/cfsv2014.toml).

use std::io::Write as _;

use clap::Args;
use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::published::{compare, Published};
use cpusched::cfsv_study::{case_table, hosts_tried, Case};
use cpusched::MS;

use crate::Failure;

#[derive(Args)]
pub struct CfsvStudyArgs {
    /// Measured window of each cell, in ms (after a 3 s warm-up).
    #[arg(long, default_value_t = 2000)]
    measure_ms: u64,
    /// Also print every cell, with CFS-v's options tried alone.
    #[arg(long)]
    cells: bool,
}

pub fn run(a: CfsvStudyArgs) -> Result<(), Failure> {
    if a.measure_ms == 0 || a.measure_ms > 600_000 {
        return Err(Failure::Usage(format!(
            "--measure-ms {}: out of range; accepted: 1 to 600000",
            a.measure_ms
        )));
    }
    let c = compare(CfsvOptions::default(), a.measure_ms * MS).map_err(Failure::Run)?;
    let mut text = c.table(&Published::shipped());
    if a.cells {
        let hosts = hosts_tried();
        for case in [Case::Separate, Case::Mixed] {
            text.push('\n');
            text += &case_table(case, &hosts, a.measure_ms * MS).map_err(Failure::Run)?;
        }
    }
    // A closed pipe (`| head`) ends the output quietly instead of a panic.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Run(format!("writing the tables: {e}")))
        }
        _ => Ok(()),
    }
}
