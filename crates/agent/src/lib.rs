//! The coordination daemons: `tandem guestd` in a guest asks its host for
//! help when an application needs urgent I/O, and `tandem hostd` on the host
//! boosts that VM's QEMU threads with stock Linux knobs.
//!
//! Every decision comes from the `policy` crate: the wire format
//! ([`policy::protocol`]), the guest's urgency ([`policy::GuestSignalDetector`],
//! [`policy::HelpClient`]) and the host's leases, budgets and arbitration
//! ([`policy::Arbiter`]). This crate holds what touches the system: the
//! transports and framing ([`transport`]), the kernel interfaces ([`sys`]), the
//! actuators ([`actuator`]), the two daemons ([`hostd`], [`guestd`]) and the
//! latency benchmark ([`latency`]).

pub mod actuator;
pub mod cfsv;
pub mod cpuboost;
pub mod guestd;
pub mod hostd;
pub mod hostile;
pub mod iomark;
pub mod latency;
pub mod listen;
pub mod logging;
pub mod qmp;
pub mod sys;
pub mod testkit;
pub mod transport;
pub mod vmdir;
pub mod vmproc;

use std::time::Instant;

/// An error with a message for the user.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

pub fn err(m: impl Into<String>) -> Error {
    Error(m.into())
}

/// Monotonic nanoseconds since the first call in this process: the clock the
/// policy objects are driven with.
pub fn now_ns() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
