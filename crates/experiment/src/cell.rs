//! Cells (one point of a scenario's matrix), per-cell seeds and `--only` filters.

use serde::{Deserialize, Serialize};

use crate::cpu::CpuCell;
use crate::other_vms::OtherVms;
use crate::profile::ProfileCell;
use crate::scenario::{Benchmark, MATRIX_KEYS};
use crate::vocab::{CoordMode, Device, Hypervisor, IoSched};
use crate::workload::WorkloadSpec;

/// One point of a scenario's matrix, with everything a runner needs to run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub scenario: String,
    pub device: Device,
    pub host_sched: IoSched,
    /// Written by its canonical name (`none`, `5r-seq`, `2r2w-rand`, ...).
    pub host_workload: WorkloadSpec,
    /// `None` for native cells (app and workload run on the host).
    pub guest_sched: Option<IoSched>,
    /// `None` for native cells.
    pub guest_workload: Option<WorkloadSpec>,
    /// The VMs besides VM 1 (see [`OtherVms`]), written by canonical value: `none`
    /// (only VM 1, the default, so results written before the key existed still
    /// read back) or e.g. `3x5r-seq`. Always none for native cells.
    #[serde(default)]
    pub other_vms: OtherVms,
    pub coordination: CoordMode,
    /// The CPU model's settings (platform, CPU schedulers, busy loops, loops,
    /// caches); the default for scenarios without CPU keys, and then left out of
    /// `results.json`.
    #[serde(default, skip_serializing_if = "CpuCell::is_default")]
    pub cpu: CpuCell,
    /// The profile a `benchmark = "profile"` cell runs (`None` for other
    /// benchmarks, and then left out of `results.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileCell>,
    /// The hypervisor of VM cells; `kvm`, the default, is left out of
    /// `results.json`.
    #[serde(default, skip_serializing_if = "Hypervisor::is_default")]
    pub hypervisor: Hypervisor,
    pub benchmark: Benchmark,
    pub app: String,
    pub iterations: u32,
    pub repetitions: u32,
    pub timeout_s: f64,
    pub duration_s: f64,
    pub sample_s: f64,
    /// The cell's own seed, see [`cell_seed`].
    pub seed: u64,
}

impl Cell {
    /// True when the cell has no VM (no guest scheduler).
    pub fn is_native(&self) -> bool {
        self.guest_sched.is_none()
    }

    /// True when the cell runs on the CPU model: latency, and start-up with
    /// hot caches.
    pub fn on_cpu_model(&self) -> bool {
        self.benchmark == Benchmark::Latency || self.cpu.caches == crate::cpu::Caches::Hot
    }

    /// True when VMs other than VM 1 run.
    pub fn has_other_vms(&self) -> bool {
        !self.other_vms.is_none()
    }

    /// A stable, human-readable id: the cell's matrix values as `KEY=VALUE` pairs in
    /// expansion order, e.g. `device=hdd-1.8in guest_sched=bfq guest_workload=5r-seq
    /// host_sched=bfq host_workload=1r-seq coordination=off` (guest pairs only for VM
    /// cells; `other_vms=...` before `coordination` only when it is not `none`, so ids
    /// of cells without other VMs are what they were before the key existed). Each
    /// pair is also a valid `--only` argument.
    pub fn key(&self) -> String {
        let mut parts = vec![format!("device={}", self.device)];
        if let Some(g) = self.guest_sched {
            parts.push(format!("guest_sched={g}"));
        }
        if let Some(g) = self.guest_workload {
            parts.push(format!("guest_workload={g}"));
        }
        parts.push(format!("host_sched={}", self.host_sched));
        parts.push(format!("host_workload={}", self.host_workload));
        if self.has_other_vms() {
            parts.push(format!("other_vms={}", self.other_vms));
        }
        if !self.cpu.is_default() {
            for k in CPU_KEYS {
                let v = self.get(k).unwrap_or_default();
                if !v.is_empty() {
                    parts.push(format!("{k}={v}"));
                }
            }
        }
        parts.push(format!("coordination={}", self.coordination));
        if let Some(p) = self.profile {
            parts.push(format!("profile={}", p.profile));
            parts.push(format!("threads={}", p.threads));
        }
        parts.join(" ")
    }

    /// The value of a matrix key ([`MATRIX_KEYS`]), for filters. Guest keys of native
    /// cells give `Some("")`. Unknown keys give `None`.
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "device" => self.device.to_string(),
            "host_sched" => self.host_sched.to_string(),
            "host_workload" => self.host_workload.name(),
            "guest_sched" => self.guest_sched.map(|g| g.to_string()).unwrap_or_default(),
            "guest_workload" => self.guest_workload.map(|g| g.name()).unwrap_or_default(),
            "other_vms" => self.other_vms.name(),
            "coordination" => self.coordination.to_string(),
            "host_cpu_sched" => self.cpu.host_sched().as_str().to_string(),
            "host_cpu_load" => self.cpu.host_cpu_load.to_string(),
            "guest_cpu_sched" if self.is_native() => String::new(),
            "guest_cpu_sched" => self.cpu.guest_sched().as_str().to_string(),
            "guest_cpu_load" if self.is_native() => String::new(),
            "guest_cpu_load" => self.cpu.guest_cpu_load.to_string(),
            "profile" => self
                .profile
                .map(|p| p.profile.to_string())
                .unwrap_or_default(),
            "threads" => self
                .profile
                .map(|p| p.threads.to_string())
                .unwrap_or_default(),
            _ => return None,
        })
    }

    /// The workload that shares the app's scheduler: the guest workload for VM cells,
    /// the host workload for native cells. This is the workload S names files after.
    pub fn app_side_workload(&self) -> WorkloadSpec {
        self.guest_workload.unwrap_or(self.host_workload)
    }

    /// The scheduler the app runs under: the guest's for VM cells, else the host's.
    pub fn app_side_sched(&self) -> IoSched {
        self.guest_sched.unwrap_or(self.host_sched)
    }
}

/// The CPU matrix keys, in the order cell ids list them.
const CPU_KEYS: [&str; 4] = [
    "host_cpu_sched",
    "guest_cpu_sched",
    "host_cpu_load",
    "guest_cpu_load",
];

/// FNV-1a, 64 bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finalizer (Steele, Lea, Flood 2014): one step of the generator's output
/// function applied to `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The per-cell seed:
///
/// ```text
/// bytes = device 0x1f host_sched 0x1f host_workload 0x1f guest_sched 0x1f
///         guest_workload 0x1f coordination          (absent guest values = "")
///         [0x1f other_vms]                          (only when other_vms is not "none")
/// seed  = splitmix64(scenario_seed XOR splitmix64(fnv1a64(bytes)))
/// ```
///
/// `other_vms` goes last and only when it is not `none`, so the seeds of every cell
/// without other VMs are the seeds they had before the key existed.
///
/// It depends only on the scenario seed and the cell's matrix values (with canonical
/// workload names), not on the cell's position in the matrix, nor on other cells.
pub fn cell_seed(scenario_seed: u64, cell: &Cell) -> u64 {
    let mut bytes = Vec::new();
    let fields = [
        cell.device.name().to_string(),
        cell.host_sched.name().to_string(),
        cell.host_workload.name(),
        cell.guest_sched
            .map(IoSched::name)
            .unwrap_or("")
            .to_string(),
        cell.guest_workload.map(|w| w.name()).unwrap_or_default(),
        cell.coordination.name().to_string(),
    ];
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            bytes.push(0x1f);
        }
        bytes.extend_from_slice(f.as_bytes());
    }
    if cell.has_other_vms() {
        bytes.push(0x1f);
        bytes.extend_from_slice(cell.other_vms.name().as_bytes());
    }
    // CPU settings likewise only when they are not the default.
    if !cell.cpu.is_default() {
        bytes.push(0x1f);
        bytes.extend_from_slice(cell.cpu.file_part(!cell.is_native()).as_bytes());
    }
    // The profile (with its threads, block size and share) and a hypervisor
    // other than the default likewise.
    if let Some(p) = cell.profile {
        bytes.push(0x1f);
        bytes.extend_from_slice(p.file_part().as_bytes());
    }
    if !cell.hypervisor.is_default() {
        bytes.push(0x1f);
        bytes.extend_from_slice(cell.hypervisor.name().as_bytes());
    }
    splitmix64(scenario_seed ^ splitmix64(fnv1a64(&bytes)))
}

/// A `--only` filter: `KEY=VALUE` arguments. Repeating a key keeps cells matching any
/// of its values; different keys must all match. An empty filter matches every cell.
///
/// Workload and `other_vms` values are compared by canonical name (`5r0w-seq` matches
/// `5r-seq`, `5r-seq,5r-seq` matches `2x5r-seq`). `guest_sched=` and `guest_workload=`
/// (empty value) match native cells; `other_vms=none` matches native cells too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// (key, accepted values), keys in order of first appearance.
    clauses: Vec<(String, Vec<String>)>,
}

impl Filter {
    /// Parses `KEY=VALUE` arguments.
    pub fn parse(args: &[String]) -> Result<Filter, String> {
        let mut clauses: Vec<(String, Vec<String>)> = Vec::new();
        for arg in args {
            let (key, value) = arg.split_once('=').ok_or_else(|| {
                format!(
                    "invalid filter \"{arg}\": expected KEY=VALUE (e.g. host_sched=bfq); \
                     keys: {}",
                    MATRIX_KEYS.join(", ")
                )
            })?;
            let key = key.trim();
            if !MATRIX_KEYS.contains(&key) {
                return Err(format!(
                    "invalid filter \"{arg}\": unknown key \"{key}\"; accepted keys: {}",
                    MATRIX_KEYS.join(", ")
                ));
            }
            let value = if key.ends_with("_workload") && !value.is_empty() {
                WorkloadSpec::canonical(value)
                    .map_err(|e| format!("invalid filter \"{arg}\": {e}"))?
            } else if key == "other_vms" && !value.is_empty() {
                OtherVms::canonical(value).map_err(|e| format!("invalid filter \"{arg}\": {e}"))?
            } else if key == "host_workload" {
                return Err(format!(
                    "invalid filter \"{arg}\": empty value; accepted: {}",
                    crate::workload::ACCEPTED_WORKLOADS
                ));
            } else {
                value.to_string()
            };
            if value.is_empty() && !key.starts_with("guest_") {
                return Err(format!(
                    "invalid filter \"{arg}\": empty value (only guest_sched= and \
                     guest_workload= may be empty, to select native cells)"
                ));
            }
            match clauses.iter_mut().find(|(k, _)| k == key) {
                Some((_, values)) => {
                    if !values.contains(&value) {
                        values.push(value);
                    }
                }
                None => clauses.push((key.to_string(), vec![value])),
            }
        }
        Ok(Filter { clauses })
    }

    /// True when the filter has no clause (matches everything).
    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// (key, values) clauses, keys in order of first appearance.
    pub fn clauses(&self) -> &[(String, Vec<String>)] {
        &self.clauses
    }

    /// Whether `cell` passes the filter.
    pub fn matches(&self, cell: &Cell) -> bool {
        self.clauses
            .iter()
            .all(|(key, values)| match cell.get(key) {
                Some(v) => values.contains(&v),
                None => false,
            })
    }

    /// The cells that pass, in their order.
    pub fn apply(&self, cells: &[Cell]) -> Vec<Cell> {
        cells.iter().filter(|c| self.matches(c)).cloned().collect()
    }

    /// Checks the filter against a scenario's cells: an error names any `KEY=VALUE`
    /// whose value no cell has (with the values the cells have), or says that the
    /// filter as a whole selects no cell. Catches typos such as `host_sched=bfqq`.
    pub fn check(&self, cells: &[Cell]) -> Result<(), String> {
        for (key, values) in &self.clauses {
            let mut present: Vec<String> = Vec::new();
            for c in cells {
                if let Some(v) = c.get(key) {
                    if !present.contains(&v) {
                        present.push(v);
                    }
                }
            }
            for v in values {
                if !present.contains(v) {
                    let shown: Vec<String> = present
                        .iter()
                        .map(|p| {
                            if p.is_empty() {
                                "(empty: native cells)".to_string()
                            } else {
                                p.clone()
                            }
                        })
                        .collect();
                    return Err(format!(
                        "filter {key}={v} matches no cell; values of {key} in this scenario: {}",
                        shown.join(", ")
                    ));
                }
            }
        }
        if !cells.is_empty() && !cells.iter().any(|c| self.matches(c)) {
            return Err("the filters together match no cell".to_string());
        }
        Ok(())
    }
}
