//! A deterministic model of CPU scheduling for the tandem simulator.
//!
//! N cores run tasks that alternate CPU bursts with blocking (a sleep to an
//! absolute deadline, or a block/wake pair driven from outside). Each
//! kernel (the host, and one per guest) runs the kernel's scheduling
//! classes behind one trait ([`class::SchedClass`]) that mirrors
//! `struct sched_class`: RT (`SCHED_FIFO`/`SCHED_RR` with throttling) above
//! a fair class, which is CFS as in Linux 3.12-3.17, EEVDF as in Linux
//! 6.6+, or BFS 0.44x. A guest's CPUs are vCPUs: host tasks that make the
//! guest progress only while the host runs them.
//!
//! The model owns its state and its event queue; a driver (the simulator's
//! event loop, or [`cyclictest`]) advances it with
//! [`CpuModel::next_event_time`] / [`CpuModel::advance_to`] and answers
//! each [`Completion`] with the task's next action. Time is integer
//! nanoseconds; the same inputs give the same outputs.

pub mod bfs;
pub mod cfs;
pub mod cfsv;
pub mod cfsv_study;
pub mod class;
pub mod coord;
pub mod credit;
pub mod cyclictest;
pub mod cyclictest_output;
pub mod eevdf;
pub mod fair;
pub mod iocost;
pub mod kernel;
pub mod model;
pub mod platform;
pub mod rt;
pub mod study;
pub mod task;
pub mod weights;

/// Simulated time in nanoseconds (the same unit as `devmodel::Nanos`).
pub type Nanos = u64;

/// One millisecond, in nanoseconds.
pub const MS: Nanos = 1_000_000;
/// One microsecond, in nanoseconds.
pub const US: Nanos = 1_000;

pub use model::{Completion, CpuModel, KernelId, VmId};
pub use platform::{Platform, Preemption};
pub use task::{Policy, TaskId, TaskSpec};

/// Which fair scheduler a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FairKind {
    /// CFS as in Linux 3.12 to 3.17.
    Cfs,
    /// EEVDF as in Linux 6.6 and later.
    Eevdf,
    /// BFS 0.44x (one global queue).
    Bfs,
    /// CFS-v (Samsung, 2014): CFS 3.x whose woken I/O-related threads
    /// preempt computing ones ([`cfsv`]); a host scheduler.
    CfsV(cfsv::CfsvOptions),
    /// Xen's credit scheduler ([`credit`]): a hypervisor's vCPU
    /// scheduler, so a host scheduler only.
    Credit(credit::CreditOptions),
}

impl FairKind {
    /// Every name [`FairKind::parse`] accepts (the CLI lists them).
    pub const NAMES: &[&'static str] = &["cfs", "eevdf", "bfs", "cfs-v"];
    /// The hypervisor's vCPU schedulers [`FairKind::parse`] also accepts
    /// (host only: Xen's credit, with and without BOOST).
    pub const HYPERVISOR_NAMES: &[&'static str] = &["credit", "credit-noboost"];

    /// The name used in scenarios and tables.
    pub fn name(self) -> &'static str {
        match self {
            FairKind::Cfs => "cfs",
            FairKind::Eevdf => "eevdf",
            FairKind::Bfs => "bfs",
            FairKind::CfsV(_) => "cfs-v",
            FairKind::Credit(o) if o.boost => "credit",
            FairKind::Credit(_) => "credit-noboost",
        }
    }

    /// Parses a scenario name; the error names the accepted values.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "cfs" => Ok(FairKind::Cfs),
            "eevdf" => Ok(FairKind::Eevdf),
            "bfs" => Ok(FairKind::Bfs),
            "cfs-v" => Ok(FairKind::CfsV(cfsv::CfsvOptions::default())),
            "credit" => Ok(FairKind::Credit(credit::CreditOptions::default())),
            "credit-noboost" => Ok(FairKind::Credit(credit::CreditOptions {
                boost: false,
                ..Default::default()
            })),
            _ => Err(format!(
                "unknown CPU scheduler '{s}' (accepted: {}, {})",
                Self::NAMES.join(", "),
                Self::HYPERVISOR_NAMES.join(", ")
            )),
        }
    }
}
