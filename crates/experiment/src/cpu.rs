//! The CPU side of a scenario (issue 25): the platform, the CPU schedulers of
//! host and guest, busy-loop loads, cyclictest's loop count and the start-up's
//! cache state. Parsed once into typed values; the simulator's CPU model
//! (crate `cpusched`) runs them. Cells of scenarios that set none of these keys
//! carry [`CpuCell::default`], which changes neither their seeds, their ids, their
//! stat file names nor their `results.json` records.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The fair scheduler a kernel runs on the CPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuSched {
    /// CFS as in Linux 3.12 to 3.17.
    Cfs,
    /// EEVDF as in Linux 6.6 and later.
    Eevdf,
    /// BFS 0.44x.
    Bfs,
    /// CFS-v (Shim and Lee, Samsung, 2014) over CFS 3.x: I/O-related threads
    /// always preempt (`cpusched::cfsv`).
    #[serde(rename = "cfs-v")]
    CfsV,
    /// Xen's credit scheduler (`cpusched::credit`): the vCPU scheduler of
    /// `hypervisor = "xen-pv"` (host only).
    Credit,
    /// Credit without BOOST for woken vCPUs: the comparison that shows what
    /// BOOST does.
    #[serde(rename = "credit-noboost")]
    CreditNoBoost,
}

/// The names [`CpuSched::parse`] accepts.
pub const ACCEPTED_CPU_SCHEDS: &str =
    "cfs, eevdf, bfs, cfs-v, credit and credit-noboost (host_cpu_sched with hypervisor = \"xen-pv\")";

impl CpuSched {
    pub fn as_str(self) -> &'static str {
        match self {
            CpuSched::Cfs => "cfs",
            CpuSched::Eevdf => "eevdf",
            CpuSched::Bfs => "bfs",
            CpuSched::CfsV => "cfs-v",
            CpuSched::Credit => "credit",
            CpuSched::CreditNoBoost => "credit-noboost",
        }
    }

    /// A hypervisor's vCPU scheduler (Xen's credit), not a Linux one.
    pub fn is_xen(self) -> bool {
        matches!(self, CpuSched::Credit | CpuSched::CreditNoBoost)
    }

    pub fn parse(s: &str) -> Option<CpuSched> {
        match s {
            "cfs" => Some(CpuSched::Cfs),
            "eevdf" => Some(CpuSched::Eevdf),
            "bfs" => Some(CpuSched::Bfs),
            "cfs-v" => Some(CpuSched::CfsV),
            "credit" => Some(CpuSched::Credit),
            "credit-noboost" => Some(CpuSched::CreditNoBoost),
            _ => None,
        }
    }
}

impl fmt::Display for CpuSched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the readers and hashers of the `readers-hashers` benchmark run
/// (matrix key `vm_layout`; the CFS-v slides' two cases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VmLayout {
    /// VM 1: 32 random-read threads; VM 2: 16 MD5-hashing threads.
    Separate,
    /// Two VMs, each with 16 random-read threads and 8 hashing threads.
    Mixed,
}

/// The names [`VmLayout::parse`] accepts.
pub const ACCEPTED_VM_LAYOUTS: &str = "separate, mixed";

impl VmLayout {
    pub fn as_str(self) -> &'static str {
        match self {
            VmLayout::Separate => "separate",
            VmLayout::Mixed => "mixed",
        }
    }

    pub fn parse(s: &str) -> Option<VmLayout> {
        match s {
            "separate" => Some(VmLayout::Separate),
            "mixed" => Some(VmLayout::Mixed),
            _ => None,
        }
    }
}

impl fmt::Display for VmLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The page cache before a start (`caches`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Caches {
    /// Dropped before each start (the S suite): the start-up reads the disk.
    #[default]
    Cold,
    /// Kept (the coordinated task scheduling study's start-up test): no disk
    /// I/O, the start-up is the app's CPU time on the CPU model.
    Hot,
}

impl Caches {
    pub fn as_str(self) -> &'static str {
        match self {
            Caches::Cold => "cold",
            Caches::Hot => "hot",
        }
    }

    pub fn parse(s: &str) -> Option<Caches> {
        match s {
            "cold" => Some(Caches::Cold),
            "hot" => Some(Caches::Hot),
            _ => None,
        }
    }
}

/// The most busy loops in the host or a guest (the study's 0 to 8).
pub const MAX_CPU_LOAD: u8 = 8;

/// cyclictest's loops per run when `loops` is absent (`-l 100000`, the study).
pub const DEFAULT_LOOPS: u64 = 100_000;

/// The most loops per run a scenario may ask for (bounded time: about 17
/// simulated minutes per run).
pub const MAX_LOOPS: u64 = 1_000_000;

/// The platform when `platform` is absent: the one every scenario before the
/// CPU model ran on.
pub const DEFAULT_PLATFORM: &str = "default";

/// The CPU settings of one cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuCell {
    /// Platform preset name (validated by the runner, which knows them).
    pub platform: String,
    /// vCPUs of each VM.
    pub vcpus: u32,
    /// cyclictest's loops per run (latency).
    pub loops: u64,
    pub caches: Caches,
    /// `None`: the matrix has no `host_cpu_sched` (CFS).
    pub host_cpu_sched: Option<CpuSched>,
    /// `None`: the same as the host's (also for native cells).
    pub guest_cpu_sched: Option<CpuSched>,
    /// Busy loops in the host.
    pub host_cpu_load: u8,
    /// Busy loops in the guest (0 for native cells).
    pub guest_cpu_load: u8,
    /// The readers' and hashers' layout (`readers-hashers` cells only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_layout: Option<VmLayout>,
}

impl Default for CpuCell {
    fn default() -> Self {
        CpuCell {
            platform: DEFAULT_PLATFORM.to_string(),
            vcpus: 1,
            loops: DEFAULT_LOOPS,
            caches: Caches::Cold,
            host_cpu_sched: None,
            guest_cpu_sched: None,
            host_cpu_load: 0,
            guest_cpu_load: 0,
            vm_layout: None,
        }
    }
}

impl CpuCell {
    /// True when nothing differs from a scenario without CPU keys.
    pub fn is_default(&self) -> bool {
        *self == CpuCell::default()
    }

    /// The host's CPU scheduler (CFS when not given).
    pub fn host_sched(&self) -> CpuSched {
        self.host_cpu_sched.unwrap_or(CpuSched::Cfs)
    }

    /// The guest's CPU scheduler (the host's when not given; CFS under
    /// Xen's credit).
    pub fn guest_sched(&self) -> CpuSched {
        // A Xen DomU runs Linux (CFS), whatever schedules the vCPUs.
        let host = self.host_sched();
        self.guest_cpu_sched
            .unwrap_or(if host.is_xen() { CpuSched::Cfs } else { host })
    }

    /// The part of a stat file name that tells CPU cells apart:
    /// `-cpu-<platform>-<host sched>[-<guest sched>]-h<N>[-g<M>][-hot]`, empty for
    /// the default. `guest` says whether the cell has a VM.
    pub fn file_part(&self, guest: bool) -> String {
        if self.is_default() {
            return String::new();
        }
        let mut s = format!("-cpu-{}-{}", self.platform, self.host_sched());
        if guest && self.guest_sched() != self.host_sched() {
            s.push_str(&format!("-{}", self.guest_sched()));
        }
        s.push_str(&format!("-h{}", self.host_cpu_load));
        if guest {
            s.push_str(&format!("-g{}", self.guest_cpu_load));
        }
        if self.caches == Caches::Hot {
            s.push_str("-hot");
        }
        if let Some(l) = self.vm_layout {
            s.push_str(&format!("-{l}"));
        }
        s
    }
}
