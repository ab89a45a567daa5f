//! Coordinated scheduling between guests and host, Virtual-BFQ style.
//!
//! The guest's elevator knows when an application needs the disk urgently:
//! BFQ raises the weight of a queue it deems interactive (an application
//! starting) or soft real-time. A coordinated guest watches that state and
//! asks its host for help while a raised queue has I/O pending; the host
//! privileges the VM's QEMU threads while the help lasts. Every request
//! goes through the `policy` crate, the same code as the real daemons:
//!
//! - guest side: [`policy::BfqStateDetector`] turns the guest BFQ's count
//!   of raised busy queues into HELP / NO-HELP, and [`policy::HelpClient`]
//!   puts leases on them (renewals while the need lasts);
//! - the message crosses a [`Channel`] with its latency;
//! - host side: [`policy::Arbiter`] applies leases, budgets and the
//!   arbitration among VMs, and says which VMs are boosted;
//! - the host actuator is the cell's [`Coordination`] mode.
//!
//! A *greedy* VM (a guest that misbehaves) asks for help all the time,
//! whatever its elevator says; the budgets are what keep it in check.

use crate::iosched::HostBoost;
use crate::request::{IoPrio, IoPrioClass};
use devmodel::Nanos;
use policy::PolicyConfig;

/// The host-side privileging mode: the scenario key `coordination`. The
/// modes, their names and their meaning live in [`policy::mode`]; this
/// module is the simulator's actuation of the I/O ones
/// ([`CoordConfig::actuation`]); the CPU ones run on the CPU model
/// (`crate::cpu_bench`).
pub use policy::mode::{CoordMode as Coordination, Knob};

/// How a guest's HELP and NO-HELP reach the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// A hypervisor call, as the original Virtual-BFQ made on ARM (HVC):
    /// about 2000 cycles, 1.2 us on the 1.7 GHz Cortex-A15 of the
    /// published runs.
    Hypercall,
    /// A message on a virtio-serial port read by the host daemon: a
    /// virtqueue notification, a wake-up of QEMU and of the daemon on the
    /// host, tens of microseconds (the same order as [`crate::vm`]'s
    /// notification constants, twice: guest to QEMU, QEMU to the daemon).
    VirtioSerial,
    /// A host daemon that polls the guests' state every
    /// [`POLL_PERIOD_NS`]: a message waits for the next poll.
    Polling,
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for Channel {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// Hypercall latency: 2000 cycles at 1.7 GHz.
pub const HYPERCALL_NS: Nanos = 1_200;
/// virtio-serial message latency: two notification hops of about 20 us.
pub const VIRTIO_SERIAL_NS: Nanos = 40_000;
/// Polling period of a polling host daemon: 10 ms, a daemon that costs a
/// fraction of a percent of a core.
pub const POLL_PERIOD_NS: Nanos = 10_000_000;

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 3] = [Channel::Hypercall, Channel::VirtioSerial, Channel::Polling];

    pub fn parse(s: &str) -> Result<Channel, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.name()).collect();
                format!(
                    "unknown coordination channel \"{s}\"; accepted: {}",
                    names.join(", ")
                )
            })
    }

    /// The name the command line and results.json give it.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Hypercall => "hypercall",
            Channel::VirtioSerial => "virtio-serial",
            Channel::Polling => "polling",
        }
    }

    /// When a message sent at `now` reaches the host's arbiter.
    pub fn delivery(self, now: Nanos) -> Nanos {
        match self {
            Channel::Hypercall => now + HYPERCALL_NS,
            Channel::VirtioSerial => now + VIRTIO_SERIAL_NS,
            Channel::Polling => (now / POLL_PERIOD_NS + 1) * POLL_PERIOD_NS,
        }
    }
}

/// ioprio given to privileged QEMU threads: class RT at level 4, what
/// `ionice -c1` sets when no level is given (`IOPRIO_NORM`).
pub const BOOST_IOPRIO: IoPrio = IoPrio {
    class: IoPrioClass::Rt,
    level: 4,
};

/// Weight factor of `help-weight`: 10, so that a helped VM's threads
/// weigh as much as ten unhelped processes of the same ioprio. Smaller
/// than BFQ's own interactive raising (x30): the difference between
/// `help-weight` and `help-wr` is then the weight and the idling
/// treatment of raised queues.
pub const DEFAULT_WEIGHT_FACTOR: u32 = 10;

/// Guest-side hysteresis before NO-HELP: a raised application alternates
/// reads with CPU bursts of up to tens of milliseconds (the recorded
/// start-up traces); 100 ms without a raised busy queue means the
/// application is done with the disk.
pub const DEFAULT_NO_HELP_DELAY_NS: Nanos = 100_000_000;

/// How long into a raising the guest asks for help: 8 s. BFQ raises an
/// application starting for 3 to 25 s (`bfq_wr_duration()`), sized for the
/// application to load on an uncontended disk; with the host's help, the
/// start-ups here take 3 to 5 s. A longer raising is a process that keeps
/// the disk busy (BFQ raises every new queue, a streaming reader's too, until
/// it has had 120000 sectors of service): helping it would spend the VM's
/// budget on background I/O just before an application needs it.
///
/// The same allowance as a `vhost-ioprio` guest's mark (the policy crate's
/// [`policy::mark::DEFAULT_MARK_LEASE_NS`]): one constant for "what a start
/// needs".
pub const DEFAULT_HELP_PER_RAISING_NS: Nanos = policy::mark::DEFAULT_MARK_LEASE_NS;

/// Coordination knobs of a simulated machine.
#[derive(Clone, Debug)]
pub struct CoordConfig {
    pub mode: Coordination,
    pub channel: Channel,
    /// Leases, budgets and arbitration of the host side.
    pub policy: PolicyConfig,
    /// `help-weight`'s factor.
    pub weight_factor: u32,
    /// Guest-side delay before NO-HELP.
    pub no_help_delay_ns: Nanos,
    /// A raised queue counts as a need for help only during the first
    /// this-long of its raising.
    pub help_per_raising_ns: Nanos,
    /// `vhost-ioprio`: the VMs (by index, VM 1 is 0) whose backend may
    /// issue RT as RT (`tandem vhost-blk --allow-rt`); the others' RT
    /// requests become best-effort level 0.
    pub vhost_allow_rt: Vec<usize>,
    /// `vhost-ioprio`: how long a guest's mark lasts (the rule guestd
    /// applies, `tandem guestd --mark-ioprio`).
    pub mark: policy::mark::MarkRule,
}

impl Default for CoordConfig {
    fn default() -> Self {
        CoordConfig {
            mode: Coordination::Off,
            channel: Channel::VirtioSerial,
            policy: PolicyConfig::default(),
            weight_factor: DEFAULT_WEIGHT_FACTOR,
            no_help_delay_ns: DEFAULT_NO_HELP_DELAY_NS,
            help_per_raising_ns: DEFAULT_HELP_PER_RAISING_NS,
            // The scenario's VM 1, whose start-ups are measured; VMs 2..N
            // are the neighbours.
            vhost_allow_rt: vec![0],
            mark: policy::mark::MarkRule::default(),
        }
    }
}

impl CoordConfig {
    /// What the host elevator applies to a boosted VM's threads, and the
    /// ioprio they carry, in this mode.
    pub fn actuation(&self, boosted: bool) -> (HostBoost, IoPrio) {
        if !boosted {
            return (HostBoost::None, IoPrio::DEFAULT);
        }
        match self.mode.io_knob() {
            // `vhost-ioprio` changes no thread: the backend issues each
            // request from the submitter of its mapped ioprio. `cfsv`'s CPU
            // precedence is no I/O knob: the I/O model has no host CPUs
            // (the simulated CFS-v is the CPU model's, `tandem sim
            // cfsv-study`), and it never asks for help anyway.
            // `help-all`'s vCPU half is the CPU model's
            // (`Machine::actuate_vcpus`); its I/O knob is `IoprioRt`.
            Knob::None
            | Knob::SchedRr
            | Knob::IoprioRtAndSchedRr
            | Knob::RequestIoprio
            | Knob::CpuPrecedence => (HostBoost::None, IoPrio::DEFAULT),
            Knob::IoprioRt => (HostBoost::None, BOOST_IOPRIO),
            Knob::BfqWeight => (HostBoost::Weight(self.weight_factor), IoPrio::DEFAULT),
            Knob::BfqRaise => (HostBoost::Raise, IoPrio::DEFAULT),
        }
    }
}

/// Counters of one VM's coordination.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoordStats {
    /// HELP messages the guest sent (first requests and renewals).
    pub helps_sent: u64,
    /// Of those, the ones whose reason is a start
    /// ([`policy::HelpReason::is_start`]).
    pub start_helps_sent: u64,
    /// NO-HELP messages the guest sent.
    pub no_helps_sent: u64,
    /// Time the host had the VM boosted, in total.
    pub boosted_ns: Nanos,
    /// Time the host had the VM's vCPU threads boosted, in total
    /// (`help-cpu`, `help-all`, `static-cpu` on a CPU model).
    pub vcpu_boosted_ns: Nanos,
    /// `vhost-ioprio`: tasks the guest marked urgent (new leases).
    pub marks: u64,
    /// `vhost-ioprio`: requests the VM's backend issued on the host.
    pub backend_requests: u64,
    /// Of those, the ones whose virtio-blk header said RT.
    pub guest_rt_requests: u64,
    /// Of those, the ones issued with RT on the host.
    pub host_rt_requests: u64,
    /// RT requests issued as best-effort level 0 (the VM may not use RT,
    /// or spent its RT budget).
    pub rt_demoted: u64,
}
