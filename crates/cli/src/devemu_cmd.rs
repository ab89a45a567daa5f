//! `tandem devemu`: the emulated block device (crate `devemu`).

use clap::{Args, Subcommand};
use std::path::PathBuf;

use crate::Failure;

#[derive(Subcommand)]
pub enum DevemuCommand {
    /// Create a backing file, mount the emulating FUSE filesystem, attach a loop
    /// device with direct I/O and print its name (needs root).
    Up(UpArgs),
    /// Tear down an emulated device: loop device, mount, daemon, backing file.
    Down(DownArgs),
    /// List the emulated devices that are up.
    Status,
    /// Measure a device with O_DIRECT reads against its model (needs root).
    Probe(ProbeArgs),
    /// The daemon behind `up` (started by `up`; not for direct use).
    #[command(hide = true)]
    Serve(ServeArgs),
}

#[derive(Args)]
pub struct UpArgs {
    /// Device model: a devmodel preset, or `instant` (no model: answers at once,
    /// to measure the emulator's own cost).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(devemu::model_names()))]
    model: String,
    /// Size of the device, e.g. 8G, 512M.
    #[arg(long, default_value = "8G")]
    size: String,
    /// Directory for the (sparse) backing file.
    #[arg(long, default_value = devemu::DEFAULT_DIR)]
    dir: PathBuf,
}

#[derive(Args)]
pub struct DownArgs {
    /// The device, e.g. /dev/loop3.
    #[arg(required_unless_present = "all")]
    device: Option<String>,
    /// Tear down every emulated device.
    #[arg(long, conflicts_with = "device")]
    all: bool,
}

#[derive(Args)]
pub struct ProbeArgs {
    /// The device, e.g. /dev/loop3.
    device: String,
    /// Model to compare with (default: the device's own).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(devemu::model_names()))]
    model: Option<String>,
    /// MiB read sequentially.
    #[arg(long, default_value_t = 64)]
    seq_mib: u64,
    /// Random 4 KiB reads.
    #[arg(long, default_value_t = 400)]
    rand_reads: u64,
    /// Instead: highest sequential throughput with this many parallel readers.
    #[arg(long, value_name = "JOBS")]
    max_throughput: Option<usize>,
    /// Request size of --max-throughput, in KiB.
    #[arg(long, default_value_t = 1024)]
    block_kib: u64,
}

#[derive(Args)]
pub struct ServeArgs {
    #[arg(long)]
    model: String,
    #[arg(long)]
    backing: PathBuf,
    #[arg(long)]
    mountpoint: PathBuf,
}

fn fail(e: devemu::Error) -> Failure {
    match e {
        devemu::Error::Usage(m) => Failure::Usage(m),
        devemu::Error::Run(m) => Failure::Run(m),
    }
}

pub fn run(cmd: DevemuCommand) -> Result<(), Failure> {
    match cmd {
        DevemuCommand::Up(a) => {
            devemu::check_model(&a.model).map_err(fail)?;
            let size = devemu::parse_size(&a.size).map_err(fail)?;
            let exe = std::env::current_exe()
                .map_err(|e| Failure::Run(format!("finding the tandem executable: {e}")))?;
            let dir = (a.dir != std::path::Path::new(devemu::DEFAULT_DIR)).then_some(a.dir);
            let inst = devemu::up(&devemu::UpOptions {
                model: a.model,
                size,
                dir,
                exe,
                name: None,
            })
            .map_err(fail)?;
            println!("{}", inst.loop_dev.unwrap_or_default());
            Ok(())
        }
        DevemuCommand::Down(a) => {
            if a.all {
                for i in devemu::down_all().map_err(fail)? {
                    eprintln!(
                        "tandem: {} ({}) is down",
                        i.loop_dev.as_deref().unwrap_or("-"),
                        i.model
                    );
                }
            } else {
                let dev = a.device.unwrap_or_default();
                let i = devemu::down(&dev).map_err(fail)?;
                eprintln!(
                    "tandem: {} ({}) is down",
                    i.loop_dev.as_deref().unwrap_or(&dev),
                    i.model
                );
            }
            Ok(())
        }
        DevemuCommand::Status => {
            let list = devemu::status().map_err(fail)?;
            print!("{}", devemu::control::status_table(&list));
            Ok(())
        }
        DevemuCommand::Probe(a) => {
            if let Some(jobs) = a.max_throughput {
                let bytes = a.seq_mib << 20;
                let (mb_s, cpu) =
                    devemu::probe::throughput(&a.device, jobs, a.block_kib << 10, bytes)
                        .map_err(fail)?;
                let total_mb = (bytes * jobs.max(1) as u64) as f64 / 1e6;
                println!(
                    "sequential read, {} KiB O_DIRECT, {} readers x {} MiB: {:.1} MB/s",
                    a.block_kib,
                    jobs.max(1),
                    a.seq_mib,
                    mb_s
                );
                if let Some(cpu) = cpu {
                    println!(
                        "emulator CPU: {:.3} s for {:.1} MB served, {:.3} ms per MB",
                        cpu,
                        total_mb,
                        cpu * 1e3 / total_mb
                    );
                }
                return Ok(());
            }
            let o = devemu::ProbeOptions {
                model: a.model,
                seq_bytes: a.seq_mib << 20,
                rand_reads: a.rand_reads,
                seed: 1,
            };
            let r = devemu::probe(&a.device, &o).map_err(fail)?;
            print!("{}", r.render(&o));
            Ok(())
        }
        DevemuCommand::Serve(a) => devemu::serve(&devemu::ServeOptions {
            model: a.model,
            backing: a.backing,
            mountpoint: a.mountpoint,
        })
        .map_err(fail),
    }
}
