//! tandem's emulated block device: a FUSE filesystem exposing one image file
//! whose reads and writes take the time a `devmodel` preset says, with a loop
//! device (direct I/O) on top, so that the kernel's block layer and I/O
//! schedulers see a slow disk, an SD card or an eMMC.
//!
//! - [`up`] creates the backing file, starts the daemon (a re-exec of
//!   `tandem devemu serve`), waits for the mount, attaches the loop device and
//!   records everything under [`STATE_ROOT`].
//! - [`down`] undoes it; [`status`] lists what is up.
//! - [`serve`] is the daemon: the FUSE session and the timing engine.
//! - [`probe`] measures a device with O_DIRECT reads against the model.
//!
//! The timing comes from `devmodel` only ([`engine`]); this crate has no
//! device model of its own.

pub mod control;
pub mod engine;
pub mod fs;
pub mod loopdev;
pub mod probe;

pub use control::{down, down_all, run_cmd, serve, status, up, Instance, ServeOptions, UpOptions};
pub use probe::{probe, ProbeOptions, ProbeReport};

/// Where the state of running emulated devices is kept, one directory each.
pub const STATE_ROOT: &str = "/run/tandem/devemu";

/// Default directory for backing files (not /tmp or /run: they can be large,
/// and /run is in memory).
pub const DEFAULT_DIR: &str = "/var/lib/tandem/devemu";

/// The smallest emulated device: the calibration at bring-up reads the
/// first [`probe::CALIBRATION_SPAN`] bytes, so a smaller one can not come up.
pub const MIN_SIZE: u64 = probe::CALIBRATION_SPAN;

/// The model name of the zero-cost mode: every request is answered as soon as
/// the backing file has served it. Used to measure the emulator's own cost.
pub const INSTANT: &str = "instant";

/// A failure, split as the command line reports it. Either shows as its
/// message alone: the command line adds `tandem: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Bad input (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Something failed while running (exit code 1).
    #[error("{0}")]
    Run(String),
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn run_err(m: impl Into<String>) -> Error {
    Error::Run(m.into())
}

/// The model names `--model` accepts: the devmodel presets and [`INSTANT`].
pub fn model_names() -> Vec<&'static str> {
    let mut v = devmodel::PRESETS.to_vec();
    v.push(INSTANT);
    v
}

/// Check a model name; the error lists the accepted ones.
pub fn check_model(name: &str) -> Result<()> {
    if name == INSTANT || devmodel::preset(name).is_ok() {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "unknown model {name:?}; accepted: {} ({INSTANT}: no model, answers at once, to measure the emulator's own cost)",
            model_names().join(", ")
        )))
    }
}

/// Capacity limit of a model in bytes (None for [`INSTANT`]).
pub fn model_capacity(name: &str) -> Option<u64> {
    devmodel::preset(name)
        .ok()
        .map(|m| m.info().capacity_sectors * devmodel::SECTOR_BYTES)
}

/// Parse a size: a number of bytes with an optional binary suffix
/// (`K`, `M`, `G`, `T`, optionally followed by `iB` or `B`), e.g. `8G`, `512MiB`.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || {
        Error::Usage(format!(
            "bad size {s:?}: expected a number of bytes with an optional suffix K, M, G or T (powers of 1024), e.g. 8G"
        ))
    };
    let t = s.trim();
    let digits = t.bytes().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let suffix = t[digits..].trim().to_ascii_uppercase();
    let shift = match suffix.as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Human-readable binary size (for status lines).
pub fn show_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, v) in UNITS {
        if bytes >= v && bytes.is_multiple_of(v) {
            return format!("{}{u}", bytes / v);
        }
    }
    for (u, v) in UNITS {
        if bytes >= v {
            return format!("{:.1}{u}", bytes as f64 / v as f64);
        }
    }
    format!("{bytes}")
}

/// True when running as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The error for commands that need root: `what` needs root because `why`.
pub fn need_root(what: &str, why: &str) -> Result<()> {
    if is_root() {
        Ok(())
    } else {
        Err(Error::Run(format!(
            "{what} needs root ({why}); run it as root, e.g. with sudo"
        )))
    }
}

/// Makes a child of this process die with it: `sig` when the spawning
/// thread ends (`PR_SET_PDEATHSIG`), and no start at all if this process is
/// already gone when the child sets that up (the race `prctl` alone leaves).
/// What a run starts (mkfs, mount, workers, QEMU) then never outlives a run
/// killed with SIGKILL.
pub fn die_with_parent(cmd: &mut std::process::Command, sig: nix::sys::signal::Signal) {
    use std::os::unix::process::CommandExt;
    let parent = nix::unistd::getpid();
    // SAFETY: prctl and getppid are async-signal-safe, and the closure
    // allocates nothing (an Errno converts to io::Error without allocating).
    // Why unsafe: std's `pre_exec` is the only hook between fork and exec,
    // and std has no parent-death signal of its own.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(sig)?;
            if nix::unistd::getppid() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Why `up` needs root.
pub(crate) const WHY_UP: &str = "it mounts a FUSE filesystem and attaches a loop device";
/// Why `down` needs root.
pub(crate) const WHY_DOWN: &str =
    "it detaches and removes loop devices, unmounts FUSE file systems and stops their daemons";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_show_their_message_alone() {
        let e = Error::Usage("--size: not a size".into());
        assert_eq!(e.to_string(), "--size: not a size");
        let e: Box<dyn std::error::Error> = Box::new(Error::Run("mount failed".into()));
        assert_eq!(e.to_string(), "mount failed");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 1k "), Ok(1024));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert_eq!(show_size(8 << 30), "8G");
        assert_eq!(show_size(1536 << 20), "1536M");
    }

    #[test]
    fn models() {
        assert!(check_model("hdd-1.8in").is_ok());
        assert!(check_model(INSTANT).is_ok());
        let e = check_model("floppy").unwrap_err();
        assert!(matches!(&e, Error::Usage(m) if m.contains("hdd-1.8in") && m.contains("floppy")));
    }
}
