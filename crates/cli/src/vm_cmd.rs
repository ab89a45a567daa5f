//! `tandem vm`: real QEMU guests for the benchmark runner (crate `vmimage`
//! builds their image).

use clap::{Args, Subcommand};
use std::path::PathBuf;

use crate::Failure;

#[derive(Subcommand)]
pub enum VmCommand {
    /// Build the benchmark guest (kernel, initramfs, optional data disk) from Debian packages.
    Image(ImageArgs),
}

#[derive(Args)]
pub struct ImageArgs {
    /// Output directory: vmlinuz, initramfs.img, manifest.json (and data.img).
    #[arg(long)]
    out: PathBuf,
    /// Also make a raw ext4 data disk of N MiB (data.img; the guest mounts it on /data).
    #[arg(long, value_name = "N")]
    data_mib: Option<u64>,
    /// Keep the downloaded .deb files in DIR and reuse them (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Kernel package, or a metapackage depending on one.
    #[arg(long, value_name = "P", default_value = vmimage::DEFAULT_KERNEL_PACKAGE)]
    kernel_package: String,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

fn fail(e: vmimage::Error) -> Failure {
    match e {
        vmimage::Error::Usage(m) => Failure::Usage(m),
        vmimage::Error::Run(m) => Failure::Run(m),
    }
}

pub fn run(cmd: VmCommand) -> Result<(), Failure> {
    match cmd {
        VmCommand::Image(a) => image(a),
    }
}

fn image(a: ImageArgs) -> Result<(), Failure> {
    let data_disk_bytes = match a.data_mib {
        None => None,
        Some(n) => {
            let min = vmimage::MIN_DATA_DISK_BYTES >> 20;
            if n < min {
                return Err(Failure::Usage(format!(
                    "--data-mib {n}: the data disk needs at least {min} MiB"
                )));
            }
            Some(
                n.checked_mul(1 << 20)
                    .ok_or_else(|| Failure::Usage(format!("--data-mib {n}: too large")))?,
            )
        }
    };
    // The guest runs this very binary as its agent.
    let tandem_exe = std::env::current_exe()
        .map_err(|e| Failure::Run(format!("finding the tandem executable: {e}")))?;
    let o = vmimage::ImageOptions {
        out: a.out,
        tandem_exe,
        kernel_package: a.kernel_package,
        cache_dir: a.cache,
        data_disk_bytes,
        quiet: a.quiet,
    };
    let started = std::time::Instant::now();
    let img = vmimage::build(&o).map_err(fail)?;
    println!("kernel: {}", img.kernel.display());
    println!("initramfs: {}", img.initramfs.display());
    if let Some(d) = &img.data_disk {
        println!("data disk: {}", d.display());
    }
    println!("manifest: {}", img.manifest.display());
    if !a.quiet {
        eprintln!(
            "tandem: guest image for kernel {} built in {:.1} s; boot it with -append '{}'",
            img.kernel_version,
            started.elapsed().as_secs_f64(),
            vmimage::KERNEL_CMDLINE
        );
    }
    Ok(())
}
