//! `tandem vm disk-io`: the in-guest disk checker and load of
//! `vhostblk::diskio` (the vhost-blk tests and `tools/vhost-blk-bench.sh`
//! run it in the guest).

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

use vhostblk::diskio::{self, Load, Mode, Span};

use crate::Failure;

#[derive(Subcommand)]
pub enum DiskIoCommand {
    /// Write a checksummed pattern with O_DIRECT|O_DSYNC, printing `acked N` after each block.
    Write(PatternArgs),
    /// Read the pattern back and print `verified GOOD bad BAD first_bad N|-`; exit 1 if any is bad.
    Verify(PatternArgs),
    /// A direct-I/O load through io_uring; prints one JSON line (ops, bytes, secs, iops, mb_s).
    Load(LoadArgs),
}

#[derive(Args)]
pub struct PatternArgs {
    /// The device (or file).
    #[arg(long, default_value = "/dev/vda")]
    dev: PathBuf,
    /// Pattern seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// First block.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Blocks.
    #[arg(long)]
    count: u64,
    /// Block size in KiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    block_kib: u32,
    /// Read through the page cache (a host image file on a filesystem without O_DIRECT).
    #[arg(long)]
    buffered: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Randread,
    Seqread,
    Seqwrite,
}

#[derive(Args)]
pub struct LoadArgs {
    #[arg(long, default_value = "/dev/vda")]
    dev: PathBuf,
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Request size in bytes (a multiple of 512).
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    depth: u32,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

impl PatternArgs {
    fn span(&self) -> Span {
        Span {
            seed: self.seed,
            first: self.first,
            count: self.count,
            block: self.block_kib as usize * 1024,
        }
    }
}

pub fn run(cmd: DiskIoCommand) -> Result<(), Failure> {
    let io = |what: &str, dev: &std::path::Path| {
        let d = dev.display().to_string();
        let w = what.to_string();
        move |e: std::io::Error| Failure::Run(format!("{w} {d}: {e}"))
    };
    match cmd {
        DiskIoCommand::Write(a) => {
            diskio::write_pattern(&a.dev, a.span(), &mut std::io::stdout().lock())
                .map_err(io("writing", &a.dev))
        }
        DiskIoCommand::Verify(a) => {
            let v = diskio::verify_pattern(&a.dev, a.span(), !a.buffered)
                .map_err(io("reading", &a.dev))?;
            let first = v.first_bad.map_or("-".to_string(), |i| i.to_string());
            println!("verified {} bad {} first_bad {first}", v.good, v.bad);
            if v.bad > 0 {
                return Err(Failure::Run(format!("{} bad blocks", v.bad)));
            }
            Ok(())
        }
        DiskIoCommand::Load(a) => {
            if a.bs == 0 || a.bs % 512 != 0 || !a.seconds.is_finite() || a.seconds <= 0.0 {
                return Err(Failure::Usage(
                    "--bs must be a multiple of 512 and --seconds positive".into(),
                ));
            }
            let mode = match a.mode {
                ModeArg::Randread => Mode::RandRead,
                ModeArg::Seqread => Mode::SeqRead,
                ModeArg::Seqwrite => Mode::SeqWrite,
            };
            let r = diskio::run_load(
                &a.dev,
                Load {
                    mode,
                    block: a.bs,
                    depth: a.depth,
                    time: Duration::from_secs_f64(a.seconds),
                },
            )
            .map_err(io("loading", &a.dev))?;
            let mut v = serde_json::to_value(r).map_err(|e| Failure::Run(e.to_string()))?;
            v["mode"] = mode.name().into();
            v["bs"] = a.bs.into();
            v["depth"] = a.depth.into();
            println!("disk-io {v}");
            Ok(())
        }
    }
}
