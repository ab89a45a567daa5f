//! Scenario files: schema, validation and expansion into cells.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Value;

use crate::cell::{cell_seed, Cell};
use crate::cpu::{
    Caches, CpuCell, CpuSched, VmLayout, ACCEPTED_CPU_SCHEDS, ACCEPTED_VM_LAYOUTS, DEFAULT_LOOPS,
    MAX_CPU_LOAD, MAX_LOOPS,
};
use crate::other_vms::{OtherVms, ACCEPTED_OTHER_VMS};
use crate::profile::{Profile, ProfileCell, DEFAULT_BLOCK_KIB, DEFAULT_READ_SHARE, MAX_BLOCK_KIB};
use crate::vocab::{CoordMode, Device, Hypervisor, IoSched};
use crate::workload::WorkloadSpec;

/// The benchmark a scenario runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Benchmark {
    /// Cold-cache start-up time of an application (S: `comm_startup_lat`).
    Startup,
    /// Aggregate throughput of the workload (S: `throughput-sync`).
    Throughput,
    /// cyclictest's wake-up latency (the coordinated task scheduling study).
    Latency,
    /// A file-system benchmark profile (the two-tier I/O scheduler study's
    /// FFSB profiles, [`crate::profile`]).
    Profile,
    /// 4 KiB `O_DIRECT` random readers beside MD5 hashers in two VMs (the
    /// CFS-v study, issue 28): per-VM I/O rate, hashing rate and CPU use.
    #[serde(rename = "readers-hashers")]
    ReadersHashers,
}

/// The benchmarks [`Benchmark::parse`] accepts.
pub const ACCEPTED_BENCHMARKS: &str = "startup, throughput, latency, profile, readers-hashers";

impl Benchmark {
    /// True for the benchmarks that run on the CPU model whatever the caches.
    pub fn on_cpu_model(self) -> bool {
        matches!(self, Benchmark::Latency | Benchmark::ReadersHashers)
    }

    /// `startup` or `throughput`.
    pub fn as_str(self) -> &'static str {
        match self {
            Benchmark::Startup => "startup",
            Benchmark::Throughput => "throughput",
            Benchmark::Latency => "latency",
            Benchmark::Profile => "profile",
            Benchmark::ReadersHashers => "readers-hashers",
        }
    }

    /// Parses `startup` or `throughput`.
    pub fn parse(s: &str) -> Option<Benchmark> {
        match s {
            "startup" => Some(Benchmark::Startup),
            "throughput" => Some(Benchmark::Throughput),
            "latency" => Some(Benchmark::Latency),
            "profile" => Some(Benchmark::Profile),
            "readers-hashers" => Some(Benchmark::ReadersHashers),
            _ => None,
        }
    }
}

impl fmt::Display for Benchmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a runner can run. Used to validate scenario values and to write errors that
/// list the accepted values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    pub devices: Vec<Device>,
    pub host_scheds: Vec<IoSched>,
    pub guest_scheds: Vec<IoSched>,
    pub coordination: Vec<CoordMode>,
    pub apps: Vec<String>,
    /// Whether `app = "cmd:<command line>"` is allowed (real runner only).
    pub allow_cmd_apps: bool,
    /// Whether VM cells (non-empty `matrix.guest_sched`) are allowed.
    pub allow_vm: bool,
}

/// A validated scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub benchmark: Benchmark,
    pub app: String,
    pub iterations: u32,
    pub repetitions: u32,
    pub timeout_s: f64,
    pub duration_s: f64,
    pub sample_s: f64,
    pub seed: u64,
    /// Platform, vCPUs per VM, cyclictest's loops and the caches (the CPU model's
    /// part of the cells; its matrix values are left at their defaults here).
    #[serde(default)]
    pub cpu: CpuCell,
    /// The VM cells' hypervisor (`hypervisor`, default `kvm`).
    #[serde(default)]
    pub hypervisor: Hypervisor,
    /// The profiles' block size in KiB (`block_kib`).
    #[serde(default = "default_block_kib")]
    pub block_kib: u32,
    /// The mixed profile's read share in percent (`read_share`).
    #[serde(default = "default_read_share")]
    pub read_share: u8,
    /// The simulated host's kernel profile (`host_kernel`, a name of
    /// `sim::kernel::KernelName`), for scenarios that model a published
    /// host: `tandem sim run` uses it unless `--host-kernel` is given. The
    /// simulator checks the name; the real runner runs on the kernel it
    /// finds. Absent: the simulator's default host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_kernel: Option<String>,
    pub matrix: Matrix,
}

fn default_block_kib() -> u32 {
    DEFAULT_BLOCK_KIB
}

fn default_read_share() -> u8 {
    DEFAULT_READ_SHARE
}

/// The `[matrix]` table, its values parsed (each type is written back by its
/// canonical name). Empty `guest_sched`/`guest_workload` mean native cells; a `None`
/// in `guest_sched` (`""` in the scenario) stands for native cells beside VM cells.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matrix {
    pub device: Vec<Device>,
    pub host_sched: Vec<IoSched>,
    pub host_workload: Vec<WorkloadSpec>,
    pub guest_sched: Vec<Option<IoSched>>,
    pub guest_workload: Vec<WorkloadSpec>,
    /// `["none"]` unless the scenario runs VMs besides VM 1.
    #[serde(default = "default_other_vms")]
    pub other_vms: Vec<OtherVms>,
    pub coordination: Vec<CoordMode>,
    /// CPU schedulers of the host (empty: CFS) and of the guests (empty: the
    /// host's), busy loops in the host and in each guest (empty: none).
    #[serde(default)]
    pub host_cpu_sched: Vec<CpuSched>,
    #[serde(default)]
    pub guest_cpu_sched: Vec<CpuSched>,
    #[serde(default)]
    pub host_cpu_load: Vec<u8>,
    #[serde(default)]
    pub guest_cpu_load: Vec<u8>,
    /// The profiles of `benchmark = "profile"` (empty for other benchmarks).
    #[serde(default)]
    pub profile: Vec<Profile>,
    /// Their thread counts (`[1]` when the key is absent).
    #[serde(default)]
    pub threads: Vec<u32>,
    /// Where the readers and hashers run (`readers-hashers` only).
    #[serde(default)]
    pub vm_layout: Vec<VmLayout>,
}

fn default_other_vms() -> Vec<OtherVms> {
    vec![OtherVms::none()]
}

/// Longest scenario file accepted, in bytes: the largest shipped scenario is under
/// 2 KiB, so 1 MiB leaves room for any hand-written matrix while a wrong path (a
/// device, a log) is refused before it fills the memory.
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Most repetitions per cell: the S suite runs 10 to 20; 10,000 already makes
/// Student's t indistinguishable from the normal, and a cell's runs stay in
/// memory (`repetitions = 1000000000` would need 15 GB before the first run).
pub const MAX_REPETITIONS: u32 = 10_000;

/// Most starts per run (`iterations`): each is at least a cold start, seconds long.
pub const MAX_ITERATIONS: u32 = 10_000;

/// Most cells in a matrix: the largest shipped scenario has a few hundred; the
/// expansion allocates every cell up front.
pub const MAX_CELLS: usize = 100_000;

/// Most runs (cells × repetitions) in a scenario; each keeps its values in memory.
pub const MAX_RUNS: u64 = 1_000_000;

/// Longest `timeout_s` and `duration_s`: a day of simulated or real time per run.
pub const MAX_RUN_SECONDS: f64 = 86_400.0;

/// Reads at most `limit` bytes of `path` as text; a longer file is an error that
/// gives the limit.
fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read scenario: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read scenario: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "not a scenario: longer than {} KiB (scenarios are small TOML files)",
            limit / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| "cannot read scenario: not UTF-8 text".to_string())
}

/// Top-level scenario keys, in documentation order.
pub const SCENARIO_KEYS: &[&str] = &[
    "name",
    "benchmark",
    "app",
    "iterations",
    "repetitions",
    "timeout_s",
    "duration_s",
    "sample_s",
    "seed",
    "loops",
    "caches",
    "platform",
    "vcpus",
    "hypervisor",
    "block_kib",
    "read_share",
    "host_kernel",
    "matrix",
];

/// Keys of the `[matrix]` table; also the keys `--only` filters accept.
pub const MATRIX_KEYS: &[&str] = &[
    "device",
    "host_sched",
    "host_workload",
    "guest_sched",
    "guest_workload",
    "coordination",
    "other_vms",
    "host_cpu_sched",
    "guest_cpu_sched",
    "host_cpu_load",
    "guest_cpu_load",
    "profile",
    "threads",
    "vm_layout",
];

/// Default values.
pub mod defaults {
    pub const APP: &str = "xterm";
    pub const ITERATIONS: u32 = 5;
    pub const REPETITIONS: u32 = 10;
    pub const TIMEOUT_S: f64 = 60.0;
    pub const DURATION_S: f64 = 60.0;
    pub const SAMPLE_S: f64 = 2.0;
    pub const SEED: u64 = 1;
    pub const COORDINATION: crate::vocab::CoordMode = crate::vocab::CoordMode::Off;
    /// Name used by [`super::Scenario::from_toml_str`] when `name` is absent
    /// ([`super::Scenario::load`] uses the file stem instead).
    pub const NAME: &str = "scenario";
}

/// A scenario error: one message naming the file (when loaded from one), the offending
/// key, the value and what is accepted.
///
/// Display: `PATH: KEY: MESSAGE`, leaving out the parts that are not known, e.g.
/// `s.toml: matrix.host_sched: unknown scheduler "bfqq"; accepted: noop, cfq, bfq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The scenario file, when the scenario was loaded from a file.
    pub path: Option<PathBuf>,
    /// The offending key (`iterations`, `matrix.host_sched`, ...), if any.
    pub key: Option<String>,
    /// What is wrong, with the value and what is accepted.
    pub message: String,
}

impl ScenarioError {
    fn new(key: Option<&str>, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            path: None,
            key: key.map(str::to_string),
            message: message.into(),
        }
    }

    fn key(key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError::new(Some(key), message)
    }

    fn with_path(mut self, path: &Path) -> ScenarioError {
        self.path = Some(path.to_path_buf());
        self
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{}: ", p.display())?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

impl Scenario {
    /// Parses and validates a scenario. `name` defaults to `"scenario"`.
    pub fn from_toml_str(text: &str, accepted: &Accepted) -> Result<Scenario, ScenarioError> {
        parse_scenario(text, accepted, defaults::NAME)
    }

    /// Reads, parses and validates a scenario file. Errors start with the path.
    /// `name` defaults to the file stem.
    /// A file longer than [`MAX_SCENARIO_BYTES`] is refused after reading at most one
    /// byte more than that (so `/dev/zero` fails at once).
    pub fn load(path: &Path, accepted: &Accepted) -> Result<Scenario, ScenarioError> {
        let text = read_bounded(path, MAX_SCENARIO_BYTES)
            .map_err(|e| ScenarioError::new(None, e).with_path(path))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| defaults::NAME.to_string());
        parse_scenario(&text, accepted, &stem).map_err(|e| e.with_path(path))
    }

    /// True when the matrix has guest schedulers (VM cells).
    pub fn is_vm(&self) -> bool {
        self.matrix.guest_sched.iter().any(Option::is_some)
    }

    /// Refuses a hypervisor the runner does not run (`accepted`: the runner's),
    /// naming the accepted ones.
    pub fn check_hypervisor(&self, accepted: &[Hypervisor]) -> Result<(), ScenarioError> {
        if accepted.contains(&self.hypervisor) {
            return Ok(());
        }
        Err(ScenarioError::key(
            "hypervisor",
            format!(
                "\"{}\" is not run by this runner; accepted: {}",
                self.hypervisor,
                list(&names(accepted))
            ),
        ))
    }

    /// The profile settings of the cells, in matrix order (`[None]` for other
    /// benchmarks).
    fn profile_combos(&self) -> Vec<Option<ProfileCell>> {
        if self.benchmark != Benchmark::Profile {
            return vec![None];
        }
        let m = &self.matrix;
        let mut out = Vec::new();
        for &profile in &m.profile {
            for &threads in &m.threads {
                out.push(Some(ProfileCell {
                    profile,
                    threads,
                    block_kib: self.block_kib,
                    read_share: self.read_share,
                }));
            }
        }
        out
    }

    /// True when the cells run on the CPU model: latency, readers and
    /// hashers, and start-up with hot caches.
    pub fn runs_on_cpu_model(&self) -> bool {
        self.benchmark.on_cpu_model() || self.cpu.caches == Caches::Hot
    }

    /// Number of cells [`Scenario::cells`] returns.
    pub fn cell_count(&self) -> usize {
        cell_count(&self.matrix) as usize
    }

    /// The CPU settings of the cells, host part then guest part (guest part
    /// only for VM cells), in matrix order.
    fn cpu_combos(&self, vm: bool) -> Vec<CpuCell> {
        fn or_one<T: Copy>(v: &[T]) -> Vec<Option<T>> {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().copied().map(Some).collect()
            }
        }
        let m = &self.matrix;
        let none: Vec<Option<CpuSched>> = vec![None];
        let guest_scheds = if vm { or_one(&m.guest_cpu_sched) } else { none };
        let guest_loads = if vm {
            or_one(&m.guest_cpu_load)
        } else {
            vec![None]
        };
        let mut out = Vec::new();
        for hs in or_one(&m.host_cpu_sched) {
            for gs in &guest_scheds {
                for hl in or_one(&m.host_cpu_load) {
                    for gl in &guest_loads {
                        for layout in or_one(&m.vm_layout) {
                            out.push(CpuCell {
                                host_cpu_sched: hs,
                                guest_cpu_sched: *gs,
                                host_cpu_load: hl.unwrap_or(0),
                                guest_cpu_load: gl.unwrap_or(0),
                                vm_layout: layout,
                                ..self.cpu.clone()
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// Full cartesian expansion of the matrix, in a stable order: `device` (outermost),
    /// `guest_sched`, `guest_workload`, `host_sched`, `host_workload`, `other_vms`,
    /// `host_cpu_sched`, `guest_cpu_sched`, `host_cpu_load`, `guest_cpu_load`,
    /// `coordination`, `profile`, `threads` (innermost), each in the order of its list. A `""` in
    /// `guest_sched` stands for native cells (no guest keys crossed in). Each cell gets its own seed
    /// ([`cell_seed`]), which depends only on the scenario seed and the cell's matrix
    /// values, so running a subset (`--only`) gives the same per-cell results.
    pub fn cells(&self) -> Vec<Cell> {
        let m = &self.matrix;
        let guests: Vec<(Option<IoSched>, Option<WorkloadSpec>)> = if m.guest_sched.is_empty() {
            vec![(None, None)]
        } else {
            m.guest_sched
                .iter()
                .flat_map(|gs| -> Vec<(Option<IoSched>, Option<WorkloadSpec>)> {
                    let Some(gs) = gs else {
                        return vec![(None, None)];
                    };
                    m.guest_workload
                        .iter()
                        .map(|gw| (Some(*gs), Some(*gw)))
                        .collect()
                })
                .collect()
        };
        let cpu_native = self.cpu_combos(false);
        let cpu_vm = self.cpu_combos(true);
        let profiles = self.profile_combos();
        let mut cells = Vec::new();
        for device in &m.device {
            for (guest_sched, guest_workload) in &guests {
                for host_sched in &m.host_sched {
                    for host_workload in &m.host_workload {
                        let cpus = if guest_sched.is_some() {
                            &cpu_vm
                        } else {
                            &cpu_native
                        };
                        for (other_vms, cpu) in m
                            .other_vms
                            .iter()
                            .flat_map(|o| cpus.iter().map(move |c| (o, c)))
                        {
                            for (coordination, profile) in m
                                .coordination
                                .iter()
                                .flat_map(|c| profiles.iter().map(move |p| (c, p)))
                            {
                                let mut cell = Cell {
                                    scenario: self.name.clone(),
                                    device: *device,
                                    host_sched: *host_sched,
                                    host_workload: *host_workload,
                                    guest_sched: *guest_sched,
                                    guest_workload: *guest_workload,
                                    other_vms: other_vms.clone(),
                                    coordination: *coordination,
                                    cpu: cpu.clone(),
                                    profile: *profile,
                                    hypervisor: self.hypervisor,
                                    benchmark: self.benchmark,
                                    app: self.app.clone(),
                                    iterations: self.iterations,
                                    repetitions: self.repetitions,
                                    timeout_s: self.timeout_s,
                                    duration_s: self.duration_s,
                                    sample_s: self.sample_s,
                                    seed: 0,
                                };
                                cell.seed = cell_seed(self.seed, &cell);
                                cells.push(cell);
                            }
                        }
                    }
                }
            }
        }
        cells
    }
}

fn type_name(v: &Value) -> &'static str {
    v.type_str()
}

/// A TOML value as error messages quote it.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Table(_) => "a table".to_string(),
    }
}

fn wrong_type(key: &str, expected: &str, v: &Value) -> ScenarioError {
    ScenarioError::key(
        key,
        format!(
            "expected {expected}, found {} {}",
            type_name(v),
            describe(v)
        ),
    )
}

fn get_string(key: &str, v: &Value) -> Result<String, ScenarioError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(wrong_type(key, "a string", v)),
    }
}

fn get_positive_u32(key: &str, v: &Value) -> Result<u32, ScenarioError> {
    match v {
        Value::Integer(i) if *i >= 1 && *i <= i64::from(u32::MAX) => Ok(*i as u32),
        Value::Integer(i) if *i < 1 => Err(ScenarioError::key(
            key,
            format!("must be at least 1, found {i}"),
        )),
        Value::Integer(i) => Err(ScenarioError::key(
            key,
            format!("too large: {i}; at most {}", u32::MAX),
        )),
        _ => Err(wrong_type(key, "a positive integer", v)),
    }
}

/// A positive integer of at most `max`.
fn get_bounded_u32(key: &str, v: &Value, max: u32) -> Result<u32, ScenarioError> {
    let n = get_positive_u32(key, v)?;
    if n > max {
        return Err(ScenarioError::key(
            key,
            format!("too large: {n}; at most {max}"),
        ));
    }
    Ok(n)
}

fn get_positive_secs(key: &str, v: &Value) -> Result<f64, ScenarioError> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Float(f) => *f,
        _ => return Err(wrong_type(key, "a number of seconds", v)),
    };
    if !(x.is_finite() && x > 0.0) {
        return Err(ScenarioError::key(
            key,
            format!(
                "must be a positive, finite number of seconds, found {}",
                describe(v)
            ),
        ));
    }
    if x > MAX_RUN_SECONDS {
        return Err(ScenarioError::key(
            key,
            format!("too long: {x} s; at most {MAX_RUN_SECONDS} s (a day)"),
        ));
    }
    Ok(x)
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_string()
    } else {
        items.join(", ")
    }
}

/// A matrix list: an array of strings, or a bare string as a one-element list.
fn get_string_list(key: &str, v: &Value) -> Result<Vec<String>, ScenarioError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(ScenarioError::key(
                    key,
                    format!(
                        "expected a list of strings, but item {} is {} {}",
                        i + 1,
                        type_name(item),
                        describe(item)
                    ),
                )),
            })
            .collect(),
        _ => Err(wrong_type(key, "a list of strings", v)),
    }
}

fn check_duplicates(key: &str, values: &[String]) -> Result<(), ScenarioError> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err(ScenarioError::key(
                key,
                format!("duplicate value \"{v}\" (each value may appear once)"),
            ));
        }
    }
    Ok(())
}

/// The names of typed values, for error messages.
fn names<T: fmt::Display>(values: &[T]) -> Vec<String> {
    values.iter().map(ToString::to_string).collect()
}

/// The runner's accepted value named by each of `values`, or an error naming the key,
/// the value and what the runner accepts.
fn members<T: Copy + fmt::Display>(
    key: &str,
    what: &str,
    values: &[String],
    accepted: &[T],
) -> Result<Vec<T>, ScenarioError> {
    values
        .iter()
        .map(|v| {
            accepted
                .iter()
                .find(|a| a.to_string() == *v)
                .copied()
                .ok_or_else(|| {
                    ScenarioError::key(
                        key,
                        format!(
                            "unknown {what} \"{v}\"; accepted: {}",
                            list(&names(accepted))
                        ),
                    )
                })
        })
        .collect()
}

/// Parsed workloads, refusing two spellings of the same one.
fn parse_workloads(key: &str, values: &[String]) -> Result<Vec<WorkloadSpec>, ScenarioError> {
    let parsed = values
        .iter()
        .map(|v| WorkloadSpec::parse(v).map_err(|e| ScenarioError::key(key, e)))
        .collect::<Result<Vec<_>, _>>()?;
    check_duplicates(key, &names(&parsed))?;
    Ok(parsed)
}

fn check_app(app: &str, explicit: bool, accepted: &Accepted) -> Result<(), ScenarioError> {
    let key = "app";
    let accepted_list = || {
        let mut s = list(&accepted.apps);
        if accepted.allow_cmd_apps {
            s.push_str(", or cmd:<command line>");
        }
        s
    };
    let default_note = if explicit { "" } else { " (the default)" };
    if let Some(cmd) = app.strip_prefix("cmd:") {
        if !accepted.allow_cmd_apps {
            return Err(ScenarioError::key(
                key,
                format!(
                    "\"{app}\": cmd: apps run real commands and only the real runner \
                     (tandem bench run) can run them; accepted: {}",
                    accepted_list()
                ),
            ));
        }
        if cmd.trim().is_empty() {
            return Err(ScenarioError::key(
                key,
                format!("\"{app}\": empty command line after cmd:"),
            ));
        }
        return Ok(());
    }
    if !accepted.apps.iter().any(|a| a == app) {
        return Err(ScenarioError::key(
            key,
            format!(
                "unknown app \"{app}\"{default_note}; accepted: {}",
                accepted_list()
            ),
        ));
    }
    Ok(())
}

fn parse_scenario(
    text: &str,
    accepted: &Accepted,
    default_name: &str,
) -> Result<Scenario, ScenarioError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ScenarioError::new(None, e.to_string().trim_end()))?;

    for k in table.keys() {
        if !SCENARIO_KEYS.contains(&k.as_str()) {
            return Err(ScenarioError::new(
                None,
                format!(
                    "unknown key \"{k}\"; accepted keys: {}",
                    SCENARIO_KEYS.join(", ")
                ),
            ));
        }
    }

    let name = parse_name(&table, default_name)?;
    let benchmark = parse_benchmark(&table)?;
    let (app, app_explicit) = match table.get("app") {
        Some(v) => (get_string("app", v)?, true),
        None => (defaults::APP.to_string(), false),
    };
    // The app matters only for start-up; still reject an explicit app nobody can run.
    if benchmark == Benchmark::Startup || app_explicit {
        check_app(&app, app_explicit, accepted)?;
    }
    let t = parse_timing(&table)?;
    let seed = parse_seed(&table)?;
    let mut matrix = parse_matrix(matrix_table(&table)?, accepted)?;
    let cpu = parse_cpu_settings(&table, benchmark)?;
    let (hypervisor, block_kib, read_share) = parse_profile_settings(&table, benchmark)?;
    check_xen_cpu_matrix(&matrix, benchmark, hypervisor)?;
    if benchmark == Benchmark::Profile && hypervisor == Hypervisor::XenPv {
        check_layout(&matrix, benchmark)?;
    } else {
        check_cpu_matrix(&matrix, benchmark, &cpu)?;
    }
    check_profile_matrix(&mut matrix, benchmark)?;
    check_size(&matrix, t.repetitions)?;
    let host_kernel = parse_host_kernel(&table)?;

    Ok(Scenario {
        name,
        benchmark,
        app,
        iterations: t.iterations,
        repetitions: t.repetitions,
        timeout_s: t.timeout_s,
        duration_s: t.duration_s,
        sample_s: t.sample_s,
        seed,
        cpu,
        hypervisor,
        block_kib,
        read_share,
        host_kernel,
        matrix,
    })
}

/// `host_kernel`: a non-empty profile name (the simulator checks it against
/// its profiles when it runs the scenario).
fn parse_host_kernel(table: &toml::Table) -> Result<Option<String>, ScenarioError> {
    let Some(v) = table.get("host_kernel") else {
        return Ok(None);
    };
    let s = get_string("host_kernel", v)?;
    if s.trim().is_empty() {
        return Err(ScenarioError::key(
            "host_kernel",
            "empty kernel profile name (leave the key out for the simulator's default host)",
        ));
    }
    Ok(Some(s))
}

/// `name`, or the default (the file stem, or [`defaults::NAME`]).
fn parse_name(table: &toml::Table, default_name: &str) -> Result<String, ScenarioError> {
    Ok(match table.get("name") {
        Some(v) => {
            let s = get_string("name", v)?;
            if s.trim().is_empty() || s.chars().any(char::is_control) {
                return Err(ScenarioError::key(
                    "name",
                    format!("must be a non-empty name without control characters, found {s:?}"),
                ));
            }
            s
        }
        None => default_name.to_string(),
    })
}

/// `benchmark`, required.
fn parse_benchmark(table: &toml::Table) -> Result<Benchmark, ScenarioError> {
    Ok(match table.get("benchmark") {
        Some(v) => {
            let s = get_string("benchmark", v)?;
            Benchmark::parse(&s).ok_or_else(|| {
                ScenarioError::key(
                    "benchmark",
                    format!("unknown benchmark \"{s}\"; accepted: {ACCEPTED_BENCHMARKS}"),
                )
            })?
        }
        None => {
            return Err(ScenarioError::key(
                "benchmark",
                format!("missing required key; accepted: {ACCEPTED_BENCHMARKS}"),
            ))
        }
    })
}

/// The scenario's counts and durations.
struct Timing {
    iterations: u32,
    repetitions: u32,
    timeout_s: f64,
    duration_s: f64,
    sample_s: f64,
}

/// `iterations`, `repetitions`, `timeout_s`, `duration_s` and `sample_s`.
fn parse_timing(table: &toml::Table) -> Result<Timing, ScenarioError> {
    let iterations = match table.get("iterations") {
        Some(v) => get_bounded_u32("iterations", v, MAX_ITERATIONS)?,
        None => defaults::ITERATIONS,
    };
    let repetitions = match table.get("repetitions") {
        Some(v) => get_bounded_u32("repetitions", v, MAX_REPETITIONS)?,
        None => defaults::REPETITIONS,
    };
    let timeout_s = match table.get("timeout_s") {
        Some(v) => get_positive_secs("timeout_s", v)?,
        None => defaults::TIMEOUT_S,
    };
    let duration_s = match table.get("duration_s") {
        Some(v) => get_positive_secs("duration_s", v)?,
        None => defaults::DURATION_S,
    };
    let sample_s = match table.get("sample_s") {
        Some(v) => get_positive_secs("sample_s", v)?,
        None => defaults::SAMPLE_S,
    };
    if sample_s > duration_s {
        let note = |k: &str| {
            if table.contains_key(k) {
                ""
            } else {
                ", the default"
            }
        };
        return Err(ScenarioError::key(
            "sample_s",
            format!(
                "sample_s ({sample_s}{}) must not exceed duration_s ({duration_s}{})",
                note("sample_s"),
                note("duration_s")
            ),
        ));
    }
    Ok(Timing {
        iterations,
        repetitions,
        timeout_s,
        duration_s,
        sample_s,
    })
}

/// `seed`, a non-negative integer.
fn parse_seed(table: &toml::Table) -> Result<u64, ScenarioError> {
    Ok(match table.get("seed") {
        Some(Value::Integer(i)) if *i >= 0 => *i as u64,
        Some(Value::Integer(i)) => {
            return Err(ScenarioError::key(
                "seed",
                format!("must be a non-negative integer, found {i}"),
            ))
        }
        Some(v) => return Err(wrong_type("seed", "a non-negative integer", v)),
        None => defaults::SEED,
    })
}

/// The `[matrix]` table, required.
fn matrix_table(table: &toml::Table) -> Result<&toml::Table, ScenarioError> {
    Ok(match table.get("matrix") {
        Some(Value::Table(t)) => t,
        Some(v) => return Err(wrong_type("matrix", "a table ([matrix])", v)),
        None => {
            return Err(ScenarioError::key(
                "matrix",
                format!(
                    "missing required table [matrix]; its keys: {}",
                    MATRIX_KEYS.join(", ")
                ),
            ))
        }
    })
}

/// `loops`, `caches`, `platform` and `vcpus`.
fn parse_cpu_settings(table: &toml::Table, benchmark: Benchmark) -> Result<CpuCell, ScenarioError> {
    let mut cpu = CpuCell::default();
    if let Some(v) = table.get("caches") {
        let s = get_string("caches", v)?;
        cpu.caches = Caches::parse(&s).ok_or_else(|| {
            ScenarioError::key(
                "caches",
                format!("unknown value \"{s}\"; accepted: cold, hot"),
            )
        })?;
        if cpu.caches == Caches::Hot && benchmark != Benchmark::Startup {
            return Err(ScenarioError::key(
                "caches",
                format!(
                    "\"hot\" is for the start-up benchmark only, but benchmark = \"{benchmark}\"; \
                     accepted with {benchmark}: cold (or leave caches out)"
                ),
            ));
        }
    }
    if let Some(v) = table.get("loops") {
        if benchmark != Benchmark::Latency {
            return Err(ScenarioError::key(
                "loops",
                format!("cyclictest's loops are for benchmark = \"latency\" only, but benchmark = \"{benchmark}\""),
            ));
        }
        let n = get_positive_u32("loops", v)? as u64;
        if n > MAX_LOOPS {
            return Err(ScenarioError::key(
                "loops",
                format!("too large: {n}; accepted: 1 to {MAX_LOOPS} (default {DEFAULT_LOOPS})"),
            ));
        }
        cpu.loops = n;
    }
    if let Some(v) = table.get("platform") {
        let s = get_string("platform", v)?;
        if s.trim().is_empty() {
            return Err(ScenarioError::key("platform", "empty platform name"));
        }
        cpu.platform = s;
    }
    if let Some(v) = table.get("vcpus") {
        cpu.vcpus = get_positive_u32("vcpus", v)?;
    }
    Ok(cpu)
}

/// One CPU matrix list: `*_cpu_sched` names or `*_cpu_load` counts as strings.
fn parse_cpu_list<T>(
    t: &toml::Table,
    k: &str,
    accepted: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, ScenarioError> {
    let key = format!("matrix.{k}");
    let Some(v) = t.get(k) else {
        return Ok(Vec::new());
    };
    let l = get_string_list(&key, v)?;
    check_duplicates(&key, &l)?;
    if l.is_empty() {
        return Err(ScenarioError::key(
            &key,
            format!("empty list; give at least one value (or leave it out); accepted: {accepted}"),
        ));
    }
    l.iter()
        .map(|s| {
            parse(s).ok_or_else(|| {
                ScenarioError::key(&key, format!("unknown value \"{s}\"; accepted: {accepted}"))
            })
        })
        .collect()
}

fn parse_load(s: &str) -> Option<u8> {
    // Counts as strings, as the other matrix values: "0" ... "8", no signs or
    // leading zeros.
    let n: u8 = s.parse().ok()?;
    (n <= MAX_CPU_LOAD && n.to_string() == s).then_some(n)
}

/// Xen's vCPU scheduler: `credit` and `credit-noboost` are host schedulers
/// of `hypervisor = "xen-pv"` only. A Xen PV profile scenario takes
/// `host_cpu_sched` (the vCPU scheduler) and `host_cpu_load` (that many
/// CPU-bound DomUs beside the measured one: Xen has no host processes, so
/// other domains are what competes for the pCPUs), and no Linux scheduler
/// there.
fn check_xen_cpu_matrix(
    m: &Matrix,
    benchmark: Benchmark,
    hypervisor: Hypervisor,
) -> Result<(), ScenarioError> {
    if let Some(s) = m.guest_cpu_sched.iter().find(|s| s.is_xen()) {
        return Err(ScenarioError::key(
            "matrix.guest_cpu_sched",
            format!("\"{s}\" is Xen's vCPU scheduler, a host_cpu_sched"),
        ));
    }
    let xen_profile = benchmark == Benchmark::Profile && hypervisor == Hypervisor::XenPv;
    for s in &m.host_cpu_sched {
        if s.is_xen() != xen_profile {
            let why = if xen_profile {
                "a Xen PV profile scenario schedules vCPUs with credit or credit-noboost"
            } else {
                "it is Xen's vCPU scheduler, for benchmark = \"profile\" with hypervisor = \"xen-pv\""
            };
            return Err(ScenarioError::key(
                "matrix.host_cpu_sched",
                format!("\"{s}\": {why}"),
            ));
        }
    }
    if xen_profile {
        for (k, set) in [
            ("matrix.guest_cpu_sched", !m.guest_cpu_sched.is_empty()),
            ("matrix.guest_cpu_load", !m.guest_cpu_load.is_empty()),
            (
                "matrix.coordination",
                m.coordination.iter().any(|c| *c != CoordMode::Off),
            ),
        ] {
            if set {
                return Err(ScenarioError::key(
                    k,
                    "set, but a Xen PV profile scenario takes only host_cpu_sched and host_cpu_load of the CPU keys",
                ));
            }
        }
    }
    Ok(())
}

/// The CPU matrix keys, and which cells may use the CPU model's keys and
/// coordination modes: latency and hot start-up cells run on it; cold
/// start-up cells on a named platform run their processes on it too, so
/// they take host loops and the modes that boost vCPUs (`help-cpu`,
/// `help-all`: the I/O and the CPU both contended).
fn check_cpu_matrix(m: &Matrix, benchmark: Benchmark, cpu: &CpuCell) -> Result<(), ScenarioError> {
    check_layout(m, benchmark)?;
    let on_cpu = benchmark.on_cpu_model() || cpu.caches == Caches::Hot;
    let cold_on_platform =
        benchmark == Benchmark::Startup && cpu.platform != crate::cpu::DEFAULT_PLATFORM;
    // The profile benchmark compares the VM with the real machine, as the
    // study did: native cells beside VM cells are its reference too.
    let native_ok = on_cpu || benchmark == Benchmark::Profile;
    let why = "only latency and hot start-up (caches = \"hot\") cells run on the CPU model";
    if !on_cpu {
        let set = [
            ("matrix.host_cpu_sched", !m.host_cpu_sched.is_empty()),
            ("matrix.guest_cpu_sched", !m.guest_cpu_sched.is_empty()),
            // Busy loops on the host beside a guest's I/O: CFS-v's case
            // (`cfsv`), which the real runner runs in throughput cells; the
            // simulator's I/O model has no host CPUs and runs them as if
            // absent (its CFS-v is the CPU model's `tandem sim cfsv-study`).
            (
                "matrix.host_cpu_load",
                !m.host_cpu_load.is_empty()
                    && benchmark != Benchmark::Throughput
                    && !cold_on_platform,
            ),
            ("matrix.guest_cpu_load", !m.guest_cpu_load.is_empty()),
        ];
        // `platform` and `vcpus` are accepted: cold start-up and
        // throughput cells run their processes on the platform's CPU
        // model when one is named (issue 27).
        if let Some((k, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ScenarioError::key(
                k,
                format!(
                    "set, but {why}; this scenario's benchmark is {benchmark} with cold caches"
                ),
            ));
        }
        if let Some(c) = m.coordination.iter().find(|c| c.is_cpu()) {
            if !cold_on_platform {
                return Err(ScenarioError::key(
                    "matrix.coordination",
                    format!(
                        "\"{c}\" boosts vCPUs, but {why}, or cold start-up cells on a platform \
                         (give platform)"
                    ),
                ));
            }
        }
        if !native_ok && m.guest_sched.iter().any(Option::is_none) {
            return Err(ScenarioError::key(
                "matrix.guest_sched",
                format!("\"\" (native cells beside VM cells, the \"no guest\" reference) is accepted only for benchmark = \"profile\", or where {why}"),
            ));
        }
        return Ok(());
    }
    if let Some(c) = m.coordination.iter().find(|c| c.is_io_only()) {
        let cpu_modes: Vec<&str> = CoordMode::ALL
            .into_iter()
            .filter(|m| !m.is_io_only())
            .map(CoordMode::name)
            .collect();
        return Err(ScenarioError::key(
            "matrix.coordination",
            format!(
                "\"{c}\" coordinates I/O, which latency and hot start-up cells do not do; \
                 accepted: {}",
                cpu_modes.join(", ")
            ),
        ));
    }
    if !m.guest_sched.iter().any(Option::is_some) {
        for (k, set) in [
            ("matrix.guest_cpu_sched", !m.guest_cpu_sched.is_empty()),
            ("matrix.guest_cpu_load", !m.guest_cpu_load.is_empty()),
        ] {
            if set {
                return Err(ScenarioError::key(
                    k,
                    "set, but the matrix has no VM cells (matrix.guest_sched)",
                ));
            }
        }
    }
    Ok(())
}

/// `matrix.vm_layout` is the `readers-hashers` benchmark's, and that one
/// needs it (its VMs are the two of the layout, its schedulers the host's).
fn check_layout(m: &Matrix, benchmark: Benchmark) -> Result<(), ScenarioError> {
    let key = "matrix.vm_layout";
    match (benchmark == Benchmark::ReadersHashers, m.vm_layout.is_empty()) {
        (true, true) => Err(ScenarioError::key(
            key,
            format!("missing; the readers-hashers benchmark needs it; accepted: {ACCEPTED_VM_LAYOUTS}"),
        )),
        (false, false) => Err(ScenarioError::key(
            key,
            format!("set, but only the readers-hashers benchmark has VM layouts; this scenario's benchmark is {benchmark}"),
        )),
        (true, false) if !m.guest_cpu_load.is_empty() || !m.host_cpu_load.is_empty() => {
            Err(ScenarioError::key(
                "matrix.host_cpu_load",
                "set, but the readers-hashers benchmark's load is its hashers (vm_layout)",
            ))
        }
        _ => Ok(()),
    }
}

/// Refuses a matrix of more than [`MAX_CELLS`] cells or [`MAX_RUNS`] runs, counted
/// before any cell is made.
fn check_size(m: &Matrix, repetitions: u32) -> Result<(), ScenarioError> {
    let cells = cell_count(m);
    if cells > MAX_CELLS as u64 {
        return Err(ScenarioError::key(
            "matrix",
            format!("{cells} cells; at most {MAX_CELLS} (split the scenario, or use --only)"),
        ));
    }
    let runs = cells * u64::from(repetitions);
    if runs > MAX_RUNS {
        return Err(ScenarioError::key(
            "repetitions",
            format!("{cells} cells x {repetitions} repetitions = {runs} runs; at most {MAX_RUNS}"),
        ));
    }
    Ok(())
}

/// The number of cells of a matrix, saturating rather than overflowing: native
/// cells (no `guest_sched`, or each `""` in it) cross the host's CPU keys, VM cells
/// the guest's too.
fn cell_count(m: &Matrix) -> u64 {
    let n = |l: usize| l.max(1) as u64;
    let host_cpu = n(m.host_cpu_sched.len())
        .saturating_mul(n(m.host_cpu_load.len()))
        .saturating_mul(n(m.vm_layout.len()));
    let guest_cpu = n(m.guest_cpu_sched.len()).saturating_mul(n(m.guest_cpu_load.len()));
    let native = m.guest_sched.iter().filter(|g| g.is_none()).count() as u64;
    let vm = (m.guest_sched.len() as u64 - native)
        .saturating_mul(m.guest_workload.len() as u64)
        .saturating_mul(guest_cpu);
    let guest = if m.guest_sched.is_empty() {
        1
    } else {
        native.saturating_add(vm)
    };
    let guest = guest.saturating_mul(host_cpu);
    let profiles = if m.profile.is_empty() {
        1
    } else {
        (m.profile.len() as u64).saturating_mul(n(m.threads.len()))
    };
    let guest = guest.saturating_mul(profiles);
    [
        m.device.len(),
        m.host_sched.len(),
        m.host_workload.len(),
        m.other_vms.len(),
        m.coordination.len(),
    ]
    .iter()
    .fold(guest, |acc, &n| acc.saturating_mul(n as u64))
}

/// The `[matrix]` table's string lists, read once each: `get` gives a list (a bare
/// string is a one-element list) refusing duplicates, `required` refuses it missing
/// or empty with `hint` (what is accepted).
struct MatrixTable<'a>(&'a toml::Table);

impl MatrixTable<'_> {
    fn get(&self, k: &str) -> Result<Option<Vec<String>>, ScenarioError> {
        let key = format!("matrix.{k}");
        match self.0.get(k) {
            Some(v) => {
                let l = get_string_list(&key, v)?;
                check_duplicates(&key, &l)?;
                Ok(Some(l))
            }
            None => Ok(None),
        }
    }

    fn required(&self, k: &str, hint: &str) -> Result<Vec<String>, ScenarioError> {
        let key = format!("matrix.{k}");
        match self.get(k)? {
            None => Err(ScenarioError::key(
                &key,
                format!("missing required list; {hint}"),
            )),
            Some(l) if l.is_empty() => Err(ScenarioError::key(
                &key,
                format!("empty list; give at least one value; {hint}"),
            )),
            Some(l) => Ok(l),
        }
    }
}

fn accepted_hint<T: fmt::Display>(a: &[T]) -> String {
    format!("accepted: {}", list(&names(a)))
}

fn parse_matrix(t: &toml::Table, accepted: &Accepted) -> Result<Matrix, ScenarioError> {
    for k in t.keys() {
        if !MATRIX_KEYS.contains(&k.as_str()) {
            return Err(ScenarioError::new(
                None,
                format!(
                    "unknown key \"matrix.{k}\"; accepted keys in [matrix]: {}",
                    MATRIX_KEYS.join(", ")
                ),
            ));
        }
    }
    let mt = MatrixTable(t);
    let device = mt.required("device", &accepted_hint(&accepted.devices))?;
    let device = members("matrix.device", "device", &device, &accepted.devices)?;
    let host_sched = mt.required("host_sched", &accepted_hint(&accepted.host_scheds))?;
    let host_sched = members(
        "matrix.host_sched",
        "scheduler",
        &host_sched,
        &accepted.host_scheds,
    )?;
    let host_workload = mt.required(
        "host_workload",
        &format!("accepted: {}", crate::workload::ACCEPTED_WORKLOADS),
    )?;
    let host_workload = parse_workloads("matrix.host_workload", &host_workload)?;
    let (guest_sched, guest_workload) = parse_guests(&mt, accepted)?;
    let other_vms = parse_other_vms(
        mt.get("other_vms")?,
        guest_sched.iter().any(Option::is_some),
    )?;
    let coordination = parse_coordination(&mt, accepted)?;

    let scheds = |k: &str| parse_cpu_list(t, k, ACCEPTED_CPU_SCHEDS, CpuSched::parse);
    let loads = |k: &str| {
        parse_cpu_list(
            t,
            k,
            "\"0\" to \"8\" (busy loops, counts as strings)",
            parse_load,
        )
    };
    let matrix = Matrix {
        vm_layout: parse_cpu_list(t, "vm_layout", ACCEPTED_VM_LAYOUTS, VmLayout::parse)?,
        host_cpu_sched: scheds("host_cpu_sched")?,
        guest_cpu_sched: scheds("guest_cpu_sched")?,
        host_cpu_load: loads("host_cpu_load")?,
        guest_cpu_load: loads("guest_cpu_load")?,
        profile: parse_profiles(&mt)?,
        threads: parse_threads(t)?,
        device,
        host_sched,
        host_workload,
        guest_sched,
        guest_workload,
        other_vms,
        coordination,
    };
    if matrix.guest_sched.iter().any(Option::is_none)
        && matrix.other_vms.iter().any(|o| !o.is_none())
    {
        return Err(ScenarioError::key(
            "matrix.guest_sched",
            "\"\" (native cells) cannot be combined with other_vms: other VMs run beside VM 1",
        ));
    }
    Ok(matrix)
}

/// `matrix.guest_sched` (a `""` in it is `None`: native cells) and
/// `matrix.guest_workload`: both or neither, and only for a runner of VM cells.
fn parse_guests(
    mt: &MatrixTable,
    accepted: &Accepted,
) -> Result<(Vec<Option<IoSched>>, Vec<WorkloadSpec>), ScenarioError> {
    let guest_sched = mt.get("guest_sched")?.unwrap_or_default();
    let guest_workload = mt.get("guest_workload")?.unwrap_or_default();
    let quoted = |l: &[String]| {
        l.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if guest_sched.is_empty() {
        if !guest_workload.is_empty() {
            return Err(ScenarioError::key(
                "matrix.guest_workload",
                format!(
                    "set to {}, but matrix.guest_sched is missing or empty; give guest \
                     schedulers for VM cells (accepted: {}), or leave guest_workload out \
                     for native cells",
                    quoted(&guest_workload),
                    list(&names(&accepted.guest_scheds))
                ),
            ));
        }
        return Ok((Vec::new(), Vec::new()));
    }
    if !accepted.allow_vm {
        return Err(ScenarioError::key(
            "matrix.guest_sched",
            format!(
                "this runner cannot run VM cells (guest_sched = {}); \
                 leave guest_sched and guest_workload out for native cells",
                quoted(&guest_sched)
            ),
        ));
    }
    let vm_scheds: Vec<String> = guest_sched
        .iter()
        .filter(|g| !g.is_empty())
        .cloned()
        .collect();
    let mut vm = members(
        "matrix.guest_sched",
        "scheduler",
        &vm_scheds,
        &accepted.guest_scheds,
    )?
    .into_iter();
    if guest_workload.is_empty() && !vm_scheds.is_empty() {
        return Err(ScenarioError::key(
            "matrix.guest_workload",
            format!(
                "missing or empty, but matrix.guest_sched is set; give the guest \
                 workloads (e.g. [\"none\", \"1r-seq\"]); accepted: {}",
                crate::workload::ACCEPTED_WORKLOADS
            ),
        ));
    }
    let scheds = guest_sched
        .iter()
        .map(|g| if g.is_empty() { None } else { vm.next() })
        .collect();
    let workloads = parse_workloads("matrix.guest_workload", &guest_workload)?;
    Ok((scheds, workloads))
}

/// `matrix.coordination`: `["off"]` when absent, if the runner accepts it.
fn parse_coordination(
    mt: &MatrixTable,
    accepted: &Accepted,
) -> Result<Vec<CoordMode>, ScenarioError> {
    let accepted_list = || list(&names(&accepted.coordination));
    match mt.get("coordination")? {
        None => {
            if !accepted.coordination.contains(&defaults::COORDINATION) {
                return Err(ScenarioError::key(
                    "matrix.coordination",
                    format!(
                        "the default \"{}\" is not accepted by this runner; accepted: {}",
                        defaults::COORDINATION,
                        accepted_list()
                    ),
                ));
            }
            Ok(vec![defaults::COORDINATION])
        }
        Some(l) if l.is_empty() => Err(ScenarioError::key(
            "matrix.coordination",
            format!(
                "empty list; give at least one value (or leave it out for [\"off\"]); \
                 accepted: {}",
                accepted_list()
            ),
        )),
        Some(l) => members(
            "matrix.coordination",
            "coordination mode",
            &l,
            &accepted.coordination,
        ),
    }
}

/// `matrix.other_vms`: canonical values, `["none"]` when absent. Other VMs run beside
/// VM 1, so a native scenario (`is_vm` false) accepts only `none`.
fn parse_other_vms(
    values: Option<Vec<String>>,
    is_vm: bool,
) -> Result<Vec<OtherVms>, ScenarioError> {
    let key = "matrix.other_vms";
    let values = match values {
        None => return Ok(vec![OtherVms::none()]),
        Some(l) if l.is_empty() => {
            return Err(ScenarioError::key(
                key,
                format!(
                    "empty list; give at least one value (or leave it out for [\"none\"]); \
                     accepted: {ACCEPTED_OTHER_VMS}"
                ),
            ))
        }
        Some(l) => l,
    };
    let parsed = values
        .iter()
        .map(|v| OtherVms::parse(v).map_err(|e| ScenarioError::key(key, e)))
        .collect::<Result<Vec<OtherVms>, ScenarioError>>()?;
    check_duplicates(key, &names(&parsed))?;
    if !is_vm {
        if let Some((written, _)) = values.iter().zip(&parsed).find(|(_, c)| !c.is_none()) {
            return Err(ScenarioError::key(
                key,
                format!(
                    "\"{written}\" needs VM cells: other VMs run beside VM 1, the VM that runs \
                     the app, but this scenario is native (matrix.guest_sched is missing or \
                     empty); set matrix.guest_sched and matrix.guest_workload, or use \
                     other_vms = [\"none\"] (the default)"
                ),
            ));
        }
    }
    Ok(parsed)
}

/// `hypervisor`, `block_kib` and `read_share`; the last two only for the
/// profile benchmark.
fn parse_profile_settings(
    table: &toml::Table,
    benchmark: Benchmark,
) -> Result<(Hypervisor, u32, u8), ScenarioError> {
    let hypervisor = match table.get("hypervisor") {
        Some(v) => get_string("hypervisor", v)?
            .parse::<Hypervisor>()
            .map_err(|e| ScenarioError::key("hypervisor", e))?,
        None => Hypervisor::default(),
    };
    for k in ["block_kib", "read_share"] {
        if table.contains_key(k) && benchmark != Benchmark::Profile {
            return Err(ScenarioError::key(
                k,
                format!("is for benchmark = \"profile\" only, but benchmark = \"{benchmark}\""),
            ));
        }
    }
    let block_kib = match table.get("block_kib") {
        Some(v) => get_bounded_u32("block_kib", v, MAX_BLOCK_KIB)?,
        None => DEFAULT_BLOCK_KIB,
    };
    let read_share = match table.get("read_share") {
        Some(Value::Integer(i)) if (0..=100).contains(i) => *i as u8,
        Some(Value::Integer(i)) => {
            return Err(ScenarioError::key(
                "read_share",
                format!("{i} out of range; accepted: 0 to 100 (percent of the mixed profile's operations that read)"),
            ))
        }
        Some(v) => return Err(wrong_type("read_share", "an integer percentage (0 to 100)", v)),
        None => DEFAULT_READ_SHARE,
    };
    Ok((hypervisor, block_kib, read_share))
}

/// `matrix.profile`: profile names.
fn parse_profiles(mt: &MatrixTable) -> Result<Vec<Profile>, ScenarioError> {
    let Some(l) = mt.get("profile")? else {
        return Ok(Vec::new());
    };
    l.iter()
        .map(|s| {
            s.parse::<Profile>()
                .map_err(|e| ScenarioError::key("matrix.profile", e))
        })
        .collect()
}

/// `matrix.threads`: thread counts, integers (or counts as strings, as the
/// other matrix values), 1 to [`crate::profile::MAX_THREADS`].
fn parse_threads(t: &toml::Table) -> Result<Vec<u32>, ScenarioError> {
    let key = "matrix.threads";
    let items = match t.get("threads") {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items.clone(),
        Some(v) => vec![v.clone()],
    };
    let mut out = Vec::new();
    for item in &items {
        let n = match item {
            Value::Integer(i) => *i,
            Value::String(s) => s
                .parse::<i64>()
                .map_err(|_| ScenarioError::key(key, format!("\"{s}\" is not a thread count")))?,
            v => return Err(wrong_type(key, "a list of thread counts", v)),
        };
        let n = crate::profile::check_threads(n).map_err(|e| ScenarioError::key(key, e))?;
        if out.contains(&n) {
            return Err(ScenarioError::key(
                key,
                format!("duplicate value {n} (each value may appear once)"),
            ));
        }
        out.push(n);
    }
    Ok(out)
}

/// The profile benchmark needs profiles; other benchmarks take none.
fn check_profile_matrix(m: &mut Matrix, benchmark: Benchmark) -> Result<(), ScenarioError> {
    if benchmark != Benchmark::Profile {
        for (k, set) in [
            ("matrix.profile", !m.profile.is_empty()),
            ("matrix.threads", !m.threads.is_empty()),
        ] {
            if set {
                return Err(ScenarioError::key(
                    k,
                    format!("is for benchmark = \"profile\" only, but benchmark = \"{benchmark}\""),
                ));
            }
        }
        return Ok(());
    }
    if m.profile.is_empty() {
        return Err(ScenarioError::key(
            "matrix.profile",
            format!(
                "benchmark = \"profile\" needs a non-empty list of profiles; accepted: {}",
                crate::profile::accepted_profiles()
            ),
        ));
    }
    if m.threads.is_empty() {
        m.threads.push(1);
    }
    Ok(())
}
