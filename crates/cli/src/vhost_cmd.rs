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
    /// A cgroup v1 blkio group for this VM, directly under the blkio mount (made if
    /// missing, removed at exit if made here). The backend's threads issue from it,
    /// except the RT one, which issues from the root group.
    #[arg(long, value_name = "DIR")]
    cgroup: Option<PathBuf>,
    /// The VM group's BFQ weight (1-1000, blkio.bfq.weight): VMs share the disk in
    /// proportion. Needs --cgroup.
    #[arg(long, value_name = "N", requires = "cgroup")]
    weight: Option<u32>,
    /// Issue the guest's requests that carry no class at best-effort level L (0-7)
    /// instead of without a class: a VM's share by level, without cgroups.
    #[arg(long, value_name = "L")]
    be_level: Option<u8>,
    /// The share of each budget window this VM may have RT requests in flight, in
    /// (0, 1] (default: the policy crate's, 0.5); beyond it RT is issued as BE/0.
    #[arg(long, value_name = "F")]
    rt_budget: Option<f64>,
    /// The RT budget's sliding window, in seconds (default: 60).
    #[arg(long, value_name = "S")]
    rt_budget_window_s: Option<f64>,
    /// How long a queue thread may poll for its next event before it sleeps,
    /// adaptively, as QEMU's iothread `poll-max-ns` (default: QEMU's, 32768);
    /// 0 never polls.
    #[arg(long, value_name = "NS", default_value_t = vhostblk::poll::POLL_MAX_NS)]
    poll_max_ns: u64,
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
        poll_max_ns: a.poll_max_ns,
        vm: vhostblk::vmpolicy::VmPolicy {
            cgroup: a.cgroup,
            weight: a.weight,
            be_level: a.be_level,
            rt_budget: a.rt_budget,
            rt_budget_window_s: a.rt_budget_window_s,
        },
    };
    let stats = vhostblk::server::run(&opts, stop).map_err(|e| match e {
        vhostblk::server::Error::Usage(m) => Failure::Usage(m),
        vhostblk::server::Error::Run(m) => Failure::Run(m),
    })?;
    println!("{}", stats.snapshot());
    Ok(())
}
