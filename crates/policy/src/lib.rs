//! Coordination policy shared by `tandem sim` and the host/guest daemons.
//!
//! A guest asks its host for help when one of its applications needs urgent
//! service (an application starting, an interactive or soft real-time task);
//! the host then boosts that VM's I/O until the guest says it no longer needs
//! help. This crate holds every decision of that exchange, so that the
//! simulator and the real daemons make exactly the same ones:
//!
//! - [`protocol`]: the messages between guest and host and their wire format;
//! - guest side: [`detect`] turns what the guest sees into an [`Urgency`], and
//!   [`HelpClient`] turns a stream of urgencies into HELP / NO-HELP messages
//!   with leases;
//! - host side: [`Arbiter`] grants help under [`lease`]s and [`budget`]s and
//!   shares a limited number of boost slots fairly among the VMs that ask;
//!   [`ratelimit`] bounds what one guest's channel may cost the host.
//!
//! - [`mark`]: how long a guest's own mark of an urgent process's I/O
//!   priority lasts (`vhost-ioprio`), for guestd and the simulator alike;
//! - [`mode`]: the coordination modes ([`CoordMode`]) and what each asks of
//!   the host, read by every runner's actuation.
//!
//! Everything is pure and deterministic: no I/O, no clocks, no threads. Every
//! function that depends on time takes the current time from its caller as
//! [`Nanos`], and the objects that have timers report the next time they must
//! be called (`next_deadline`), so a discrete-event simulator and a real
//! event loop drive them the same way.
//!
//! ```
//! use policy::{Arbiter, BfqStateDetector, BoostChange, HelpClient, Message, PolicyConfig, MS};
//!
//! // Guest: BFQ raised a queue at t = 0; the client turns that into a HELP.
//! let mut detector = BfqStateDetector::new(1000 * MS);
//! let mut client = HelpClient::new(1000 * MS);
//! let urgency = detector.observe(0, 1, 0).unwrap();
//! let frame = client.step(0, &urgency).unwrap().encode();
//!
//! // Host: decode, hand it to the arbiter, update at its deadline.
//! let mut host = Arbiter::new(PolicyConfig::default());
//! host.add_vm(7, 1);
//! if let (Message::Help { duration_hint_ms, .. }, _) = policy::decode(&frame).unwrap() {
//!     host.help(7, 0, duration_hint_ms as u64 * MS);
//! }
//! assert_eq!(host.next_deadline(), Some(0));
//! assert_eq!(host.update(0), vec![BoostChange::Boost(7)]);
//! ```

pub mod arbiter;
pub mod budget;
pub mod config;
pub mod detect;
pub mod fairshare;
pub mod help_client;
pub mod lease;
pub mod mark;
pub mod mode;
pub mod protocol;
pub mod ratelimit;

/// Time in nanoseconds, on whatever clock the caller uses (simulated time in
/// `tandem sim`, a monotonic clock in the daemons).
pub type Nanos = u64;

/// A VM, as the host numbers them.
pub type VmId = u32;

/// One millisecond.
pub const MS: Nanos = 1_000_000;
/// One second.
pub const SEC: Nanos = 1_000_000_000;

pub use arbiter::{Arbiter, BoostChange, UnboostReason, VmStats};
pub use config::PolicyConfig;
pub use detect::{
    BfqStateDetector, GuestEvent, GuestSignalConfig, GuestSignalDetector, IoClassifier, IoRole,
    Urgency,
};
pub use help_client::HelpClient;
pub use mode::{CoordMode, IoprioBoost, Knob, Threads, UnknownMode, When};
pub use protocol::{
    decode, DecodeError, HelpReason, Message, Resource, MAX_MESSAGE_BYTES, PROTOCOL_VERSION,
};
