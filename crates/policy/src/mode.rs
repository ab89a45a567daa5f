//! Coordination modes: every way tandem lets a host privilege a VM, with
//! what each asks of the host, as data.
//!
//! A mode is the scenario key `coordination` (and the CPU model's modes of
//! the same key). Its name is its canonical spelling everywhere: scenario
//! files, `results.csv`, file names, cell ids. What the mode *means* is
//! here too, so that each runner's actuation reads it instead of matching
//! names:
//!
//! - [`CoordMode::resources`]: the resources the host privileges (storage
//!   I/O, CPU time, or both for `help-all`), the same [`Resource`] the
//!   guest names in its HELP;
//! - [`CoordMode::threads`]: which of the VM's host threads are acted on;
//! - [`CoordMode::knob`]: what the host changes on them;
//! - [`CoordMode::when`]: always (a static baseline) or only while the
//!   guest is helped (the guest asks, the [`crate::Arbiter`] grants).
//!
//! Adding a mode: a variant here (name, meaning, and [`CoordMode::ALL`]),
//! then its actuation in each runner that runs it (see `crates/policy/README.md`).

use std::fmt;
use std::str::FromStr;

use crate::protocol::Resource;

/// A coordination mode: the scenario key `coordination`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum CoordMode {
    /// No coordination: the host sees QEMU threads only.
    #[default]
    Off,
    /// Static prioritization, the baseline: VM 1's QEMU I/O threads are
    /// always in the RT ioprio class, whether or not the guest needs it.
    StaticRt,
    /// RT ioprio class for the VM's QEMU I/O threads while it is helped
    /// (hostd's `ioprio-rt` actuator, with `--bfq-idling` and
    /// `--boost-cgroup` as its companions on a real BFQ host).
    HelpRt,
    /// The BFQ weight of the VM's QEMU I/O threads multiplied while it is
    /// helped (hostd: the VM's cgroup weight, `cgroup_weight`).
    HelpWeight,
    /// The host BFQ treats the VM's queues as weight-raised while it is
    /// helped, as Virtual-BFQ did (a kernel patch on a real host).
    HelpWr,
    /// Per-request priority through virtio-blk: the guest raises a starting
    /// task's ioprio for a lease (the same urgency rule as the help modes,
    /// but no message to the host), the virtio-blk header carries it, and
    /// the VM's vhost-user-blk backend (`tandem vhost-blk`) issues each
    /// request with it, mapped by its policy (RT only for a VM allowed it
    /// and within its RT budget, else best-effort level 0). Only the marked
    /// requests are favoured, not the VM's other I/O.
    VhostIoprio,
    /// The VM's vCPU threads always `SCHED_RR`, as pvsched's boost.
    StaticCpu,
    /// The VM's vCPU threads `SCHED_RR` while the guest asks for help
    /// (each time it wakes a task that slept).
    HelpCpu,
    /// CFS-v on a stock host (hostd's `cfsv` mode): the host itself finds
    /// the VM's I/O-related QEMU threads (QEMU's main loop, iothreads and
    /// workers always; a vCPU whose runs after wake-ups are short, by
    /// CFS-v's 2-bit counter) and gives them CPU precedence over computing
    /// tasks. The guest asks nothing.
    Cfsv,
    /// One urgency signal, both boosts: while the guest asks for help (for
    /// either resource), the VM's QEMU I/O threads in the RT ioprio class
    /// (as `help-rt`) and its vCPU threads `SCHED_RR` (as `help-cpu`), each
    /// under its own lease and budget (hostd's `--help-all`). No published
    /// system does both (issue 25).
    HelpAll,
}

/// Which of a VM's host threads a mode acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Threads {
    /// None ([`CoordMode::Off`]).
    None,
    /// QEMU's threads that issue the VM's disk I/O (the main loop, I/O
    /// threads and workers: every thread of the process but the vCPUs).
    QemuIo,
    /// The VM's vCPU threads.
    Vcpu,
    /// The VM's vhost-user-blk backend: its submitter threads, one per host
    /// ioprio in use, each set to that ioprio (`tandem vhost-blk`).
    Backend,
    /// The VM's QEMU threads the host's I/O classifier calls I/O-related
    /// (`policy::detect::io_class`): the I/O threads always, a vCPU while
    /// its runs after wake-ups are short.
    IoRelated,
    /// Both [`Threads::QemuIo`] (their ioprio) and [`Threads::Vcpu`] (their
    /// CPU policy): every thread of the VM's QEMU process.
    QemuIoAndVcpu,
}

/// What the host changes on the threads a mode acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Knob {
    /// Nothing ([`CoordMode::Off`]).
    None,
    /// The threads' ioprio, class RT (`ioprio_set(2)`; hostd's `ioprio-rt`).
    IoprioRt,
    /// The BFQ weight of the threads' queues, multiplied by a factor
    /// (hostd: the VM's cgroup `io.bfq.weight`).
    BfqWeight,
    /// BFQ's weight raising of the threads' queues (weight x30 and the
    /// idling of raised queues), as for an interactive application.
    BfqRaise,
    /// The threads' CPU policy, `SCHED_RR` (`sched_setscheduler(2)`).
    SchedRr,
    /// Each request issued with the ioprio the guest wrote in its virtio-blk
    /// header, mapped by the backend's policy, from the submitter thread of
    /// the mapped ioprio (host BFQ takes the class from the issuing task).
    RequestIoprio,
    /// CPU precedence over computing tasks on a stock kernel (hostd's
    /// `--cfsv-boost`: nice, a `cpu.shares` group, `SCHED_RR` or
    /// `SCHED_DEADLINE`).
    CpuPrecedence,
    /// [`Knob::IoprioRt`] on the I/O threads and [`Knob::SchedRr`] on the
    /// vCPU threads, at once ([`Threads::QemuIoAndVcpu`]).
    IoprioRtAndSchedRr,
}

/// When a mode's knob is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum When {
    /// Never ([`CoordMode::Off`]).
    Never,
    /// For the whole run, whatever the guest says (a static baseline; in
    /// the simulator, to VM 1 only).
    Always,
    /// While the host's [`crate::Arbiter`] has the VM helped: the guest asks
    /// with HELP under a lease, the host grants within budgets.
    WhileHelped,
    /// Request by request, for the requests of tasks the guest marked
    /// urgent itself (their ioprio raised for a lease); the host is not
    /// asked, its backend applies its policy and budgets to each request.
    PerRequest,
    /// While the host's classifier calls a thread I/O-related, re-read
    /// every period (hostd's `cfsv_period_ms`); the guest is not asked.
    WhileClassified,
}

/// An unknown coordination mode name: says the value and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown coordination mode \"{}\"; accepted: {}",
            self.0,
            CoordMode::names().join(", ")
        )
    }
}

impl std::error::Error for UnknownMode {}

impl CoordMode {
    /// Every mode, I/O modes then CPU modes: the order of listings.
    pub const ALL: [CoordMode; 10] = [
        CoordMode::Off,
        CoordMode::StaticRt,
        CoordMode::HelpRt,
        CoordMode::HelpWeight,
        CoordMode::HelpWr,
        CoordMode::VhostIoprio,
        CoordMode::Cfsv,
        CoordMode::StaticCpu,
        CoordMode::HelpCpu,
        CoordMode::HelpAll,
    ];

    /// The canonical name (scenario value, results, file names).
    pub fn name(self) -> &'static str {
        match self {
            CoordMode::Off => "off",
            CoordMode::StaticRt => "static-rt",
            CoordMode::HelpRt => "help-rt",
            CoordMode::HelpWeight => "help-weight",
            CoordMode::HelpWr => "help-wr",
            CoordMode::VhostIoprio => "vhost-ioprio",
            CoordMode::StaticCpu => "static-cpu",
            CoordMode::HelpCpu => "help-cpu",
            CoordMode::Cfsv => "cfsv",
            CoordMode::HelpAll => "help-all",
        }
    }

    /// The names of [`CoordMode::ALL`], in order.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|m| m.name()).collect()
    }

    /// The mode of a name, or an error naming the value and the accepted ones.
    pub fn parse(s: &str) -> Result<CoordMode, UnknownMode> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }

    /// True for [`CoordMode::Off`].
    pub fn is_off(self) -> bool {
        self == CoordMode::Off
    }

    /// The resources the host privileges: none for `off`, both for
    /// `help-all`.
    pub fn resources(self) -> &'static [Resource] {
        match self.threads() {
            Threads::None => &[],
            // CFS-v's precedence is CPU time, given to serve the VM's I/O.
            Threads::QemuIo | Threads::Backend | Threads::IoRelated => &[Resource::Io],
            Threads::Vcpu => &[Resource::Cpu],
            Threads::QemuIoAndVcpu => &[Resource::Io, Resource::Cpu],
        }
    }

    /// The VM's host threads the mode acts on.
    pub fn threads(self) -> Threads {
        match self {
            CoordMode::Off => Threads::None,
            CoordMode::StaticRt | CoordMode::HelpRt | CoordMode::HelpWeight | CoordMode::HelpWr => {
                Threads::QemuIo
            }
            CoordMode::VhostIoprio => Threads::Backend,
            CoordMode::Cfsv => Threads::IoRelated,
            CoordMode::StaticCpu | CoordMode::HelpCpu => Threads::Vcpu,
            CoordMode::HelpAll => Threads::QemuIoAndVcpu,
        }
    }

    /// What the host changes on those threads.
    pub fn knob(self) -> Knob {
        match self {
            CoordMode::Off => Knob::None,
            CoordMode::StaticRt | CoordMode::HelpRt => Knob::IoprioRt,
            CoordMode::HelpWeight => Knob::BfqWeight,
            CoordMode::HelpWr => Knob::BfqRaise,
            CoordMode::VhostIoprio => Knob::RequestIoprio,
            CoordMode::Cfsv => Knob::CpuPrecedence,
            CoordMode::StaticCpu | CoordMode::HelpCpu => Knob::SchedRr,
            CoordMode::HelpAll => Knob::IoprioRtAndSchedRr,
        }
    }

    /// The knob set on the VM's I/O threads ([`Knob::None`] when the mode
    /// leaves them alone): `help-all`'s I/O half is `help-rt`'s.
    pub fn io_knob(self) -> Knob {
        match self.knob() {
            Knob::IoprioRtAndSchedRr => Knob::IoprioRt,
            Knob::SchedRr => Knob::None,
            k => k,
        }
    }

    /// Whether the mode sets the vCPU threads' policy ([`Knob::SchedRr`]):
    /// the CPU modes, and `help-all`'s CPU half.
    pub fn boosts_vcpus(self) -> bool {
        matches!(self.knob(), Knob::SchedRr | Knob::IoprioRtAndSchedRr)
    }

    /// Whether the knob is set for the whole run or only while helped.
    pub fn when(self) -> When {
        match self {
            CoordMode::Off => When::Never,
            CoordMode::StaticRt | CoordMode::StaticCpu => When::Always,
            CoordMode::HelpRt
            | CoordMode::HelpWeight
            | CoordMode::HelpWr
            | CoordMode::HelpCpu
            | CoordMode::HelpAll => When::WhileHelped,
            CoordMode::VhostIoprio => When::PerRequest,
            CoordMode::Cfsv => When::WhileClassified,
        }
    }

    /// Modes in which the guest marks its urgent tasks' requests itself and
    /// the host's backend honours each request's ioprio.
    pub fn marks_requests(self) -> bool {
        self.when() == When::PerRequest
    }

    /// Modes in which guests ask for help and the host answers.
    pub fn asks_for_help(self) -> bool {
        self.when() == When::WhileHelped
    }

    /// Modes that privilege the VM's CPU time (its vCPU threads): the
    /// CPU model's modes, `help-all` among them.
    pub fn is_cpu(self) -> bool {
        self.resources().contains(&Resource::Cpu)
    }

    /// Modes that privilege the VM's I/O (`help-all` among them).
    pub fn is_io(self) -> bool {
        self.resources().contains(&Resource::Io)
    }

    /// Modes that privilege the VM's I/O and nothing else: those a cell
    /// without I/O (latency, hot start-up) cannot run.
    pub fn is_io_only(self) -> bool {
        self.is_io() && !self.is_cpu()
    }
}

impl fmt::Display for CoordMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CoordMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<CoordMode, UnknownMode> {
        CoordMode::parse(s)
    }
}

impl serde::Serialize for CoordMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for CoordMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CoordMode, D::Error> {
        let s = String::deserialize(d)?;
        CoordMode::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for CoordMode {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// hostd's ioprio actuator (`--ioprio`, config key `ioprio`): how the
/// [`Knob::IoprioRt`] of `help-rt` is set on a real host, or an
/// alternative to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IoprioBoost {
    /// Class RT at `ioprio_level` ([`Knob::IoprioRt`]): `help-rt`.
    #[default]
    Rt,
    /// Class BE level 0: the best of the default class, for hosts where
    /// RT is not wanted.
    Be0,
    /// No ioprio change (another actuator, e.g. the cgroup weight, acts).
    None,
}

impl IoprioBoost {
    pub const ALL: [IoprioBoost; 3] = [IoprioBoost::Rt, IoprioBoost::Be0, IoprioBoost::None];

    /// The name in hostd's configuration and flags.
    pub fn name(self) -> &'static str {
        match self {
            IoprioBoost::Rt => "ioprio-rt",
            IoprioBoost::Be0 => "ioprio-be0",
            IoprioBoost::None => "none",
        }
    }

    /// The actuator that sets a mode's knob, when the knob is an ioprio.
    pub fn for_mode(mode: CoordMode) -> Option<IoprioBoost> {
        (mode.io_knob() == Knob::IoprioRt).then_some(IoprioBoost::Rt)
    }
}

impl fmt::Display for IoprioBoost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IoprioBoost {
    type Err = String;
    fn from_str(s: &str) -> Result<IoprioBoost, String> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("ioprio = {s:?}: accepted: ioprio-rt, ioprio-be0, none"))
    }
}

impl serde::Serialize for IoprioBoost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for IoprioBoost {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IoprioBoost, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for IoprioBoost {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_accepted() {
        for m in CoordMode::ALL {
            assert_eq!(m.name().parse::<CoordMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        let e = "help-io".parse::<CoordMode>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown coordination mode \"help-io\"; accepted: off, static-rt, help-rt, \
             help-weight, help-wr, vhost-ioprio, cfsv, static-cpu, help-cpu, help-all"
        );
    }

    #[test]
    fn meaning_is_consistent() {
        for m in CoordMode::ALL {
            // A mode acts on threads exactly when it has a knob and a time.
            let acts = m.threads() != Threads::None;
            assert_eq!(acts, m.knob() != Knob::None, "{m}");
            assert_eq!(acts, m.when() != When::Never, "{m}");
            assert_eq!(m.is_cpu(), m.boosts_vcpus(), "{m}");
            assert_eq!(m.is_io(), m.io_knob() != Knob::None, "{m}");
            assert_eq!(m.is_cpu() && m.is_io(), m == CoordMode::HelpAll, "{m}");
            assert_eq!(m.asks_for_help(), m.name().starts_with("help-"), "{m}");
            assert_eq!(
                m.when() == When::Always,
                m.name().starts_with("static-"),
                "{m}"
            );
        }
        assert_eq!(
            IoprioBoost::for_mode(CoordMode::HelpRt),
            Some(IoprioBoost::Rt)
        );
        assert_eq!(IoprioBoost::for_mode(CoordMode::HelpWeight), None);
        // vhost-ioprio needs no hostd actuator: the backend acts per request.
        let v = CoordMode::VhostIoprio;
        assert_eq!(IoprioBoost::for_mode(v), None);
        assert!(v.is_io() && v.marks_requests() && !v.asks_for_help());
        assert_eq!(v.threads(), Threads::Backend);
        // cfsv: the host classifies and acts by itself, no HELP, no marks.
        let c = CoordMode::Cfsv;
        assert_eq!(IoprioBoost::for_mode(c), None);
        assert!(c.is_io() && !c.is_cpu() && !c.asks_for_help() && !c.marks_requests());
        assert_eq!(c.knob(), Knob::CpuPrecedence);
        // help-all: help-rt's I/O knob and help-cpu's vCPU knob, on one HELP.
        let a = CoordMode::HelpAll;
        assert_eq!(a.io_knob(), CoordMode::HelpRt.knob());
        assert!(a.boosts_vcpus() && CoordMode::HelpCpu.boosts_vcpus());
        assert_eq!(IoprioBoost::for_mode(a), Some(IoprioBoost::Rt));
        assert!(a.asks_for_help() && !a.is_io_only());
        assert_eq!(a.resources(), [Resource::Io, Resource::Cpu]);
        assert!(CoordMode::HelpRt.is_io_only() && !CoordMode::HelpCpu.is_io_only());
    }

    #[test]
    fn ioprio_actuator_names() {
        for a in IoprioBoost::ALL {
            assert_eq!(a.name().parse::<IoprioBoost>(), Ok(a));
        }
        assert!("rt"
            .parse::<IoprioBoost>()
            .unwrap_err()
            .contains("accepted"));
    }
}
