//! `tandem vm`: real QEMU guests for the benchmark runner (crate `vmimage`
//! builds their image).

use clap::{Args, Subcommand};
use std::path::PathBuf;

use crate::Failure;

#[derive(Subcommand)]
pub enum VmCommand {
    /// Build the benchmark guest (kernel, initramfs, optional data disk) from Debian packages.
    Image(ImageArgs),
    /// Whether QEMU can use KVM here (a guest kernel must boot on it), or falls back to TCG.
    Probe(ProbeArgs),
    /// The benchmark agent inside a guest (the image's init starts it).
    #[command(hide = true)]
    Agent(AgentArgs),
    /// In the guest: a checksummed pattern writer and verifier, and a direct-I/O load.
    #[command(subcommand)]
    DiskIo(crate::diskio_cmd::DiskIoCommand),
}

#[derive(Args)]
pub struct ProbeArgs {
    /// A guest image made by `tandem vm image` (its kernel is booted under KVM).
    #[arg(long, value_name = "DIR")]
    image: PathBuf,
}

#[derive(Args)]
pub struct AgentArgs {
    /// The virtio-serial port's name (or a device path).
    #[arg(long, default_value = bench::vm::CONTROL_PORT)]
    port: String,
    /// Where the guest's data disk is mounted.
    #[arg(long, default_value = bench::vm::GUEST_DATA)]
    data: PathBuf,
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
    /// The tandem binary to put in the guest as /bin/tandem (default: this one), e.g. a
    /// static one from `cargo static`: an x86-64 ELF executable.
    #[arg(long, value_name = "PATH")]
    tandem_exe: Option<PathBuf>,
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
        VmCommand::Probe(a) => {
            let img = vmimage::open(&a.image).map_err(fail)?;
            let dir = std::env::temp_dir().join(format!("tandem-kvm-probe-{}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Failure::Run(format!("{}: {e}", dir.display())))?;
            let exe = std::env::current_exe()
                .map_err(|e| Failure::Run(format!("finding the tandem executable: {e}")))?;
            let accel = bench::vm::probe_accel(&exe, &img.kernel, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            match accel {
                bench::vm::Accel::Kvm => println!("kvm"),
                bench::vm::Accel::Tcg(why) => println!("tcg: {why}"),
            }
            Ok(())
        }
        VmCommand::Agent(a) => bench::guest::agent_main(&a.port, &a.data).map_err(|e| match e {
            bench::Error::Usage(m) => Failure::Usage(m),
            bench::Error::Run(m) => Failure::Run(m),
        }),
        VmCommand::DiskIo(c) => crate::diskio_cmd::run(c),
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
    // The guest runs this very binary as its agent, or the one given.
    let tandem_exe = match a.tandem_exe {
        Some(p) => {
            vmimage::exe::check(&p).map_err(|e| Failure::Usage(format!("--tandem-exe: {e}")))?;
            p
        }
        None => std::env::current_exe()
            .map_err(|e| Failure::Run(format!("finding the tandem executable: {e}")))?,
    };
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
