//! `tandem vhost-blk`: a vhost-user-blk backend that issues each guest
//! request with the guest's I/O priority (crate `vhostblk`).

use clap::Args;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::Failure;

#[derive(Args)]
pub struct VhostBlkArgs {
    /// The vhost-user socket QEMU connects to (-chardev socket,path=PATH).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// The raw disk image (a file or a block device).
    #[arg(long, value_name = "FILE")]
    image: PathBuf,
    /// Offer the disk read-only: writes fail in the guest with an I/O error.
    #[arg(long)]
    read_only: bool,
    /// Virtqueues (one backend thread each).
    #[arg(long, default_value_t = 1, value_name = "N")]
    queues: u16,
    /// Let this VM's RT requests stay RT on the host (within its budget; needs root).
    /// Without it they are issued at the highest best-effort level.
    #[arg(long)]
    allow_rt: bool,
    /// Logical block size offered to the guest.
    #[arg(long, default_value_t = 512, value_name = "BYTES")]
    blk_size: u32,
    /// Keep the counters (requests per class, refusals, errors) in this JSON file.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
}

pub fn run(a: VhostBlkArgs) -> Result<(), Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| Failure::Run(format!("installing the signal handler: {e}")))?;
    }
    let opts = vhostblk::server::Options {
        socket: a.socket,
        image: a.image,
        read_only: a.read_only,
        queues: a.queues,
        allow_rt: a.allow_rt,
        blk_size: a.blk_size,
        stats: a.stats,
    };
    let stats = vhostblk::server::run(&opts, stop).map_err(|e| match e {
        vhostblk::server::Error::Usage(m) => Failure::Usage(m),
        vhostblk::server::Error::Run(m) => Failure::Run(m),
    })?;
    println!("{}", stats.snapshot());
    Ok(())
}
