//! hostd's configuration: the file and `--vm` flags, their defaults and
//! their validation.

use super::warn;
use std::path::PathBuf;

use policy::{IoprioBoost, PolicyConfig, MS};
use serde::{Deserialize, Serialize};

use crate::cfsv::{CfsvActuator, CfsvBoost};
use crate::cpuboost::{BoostCap, CpuActuator, CpuBoostKind};
use crate::transport::{VMADDR_CID_ANY, VMADDR_CID_HOST, VMADDR_PORT_ANY};
use crate::vmproc::{self, ProcessId};
use crate::{err, Result};
use policy::ratelimit::ChannelLimits;

pub const DEFAULT_STATE_FILE: &str = "/run/tandem/hostd.state";
pub const DEFAULT_CONTROL: &str = "/run/tandem/hostd.sock";
/// The metrics socket's name beside the control socket, by default.
pub const DEFAULT_METRICS_NAME: &str = "hostd-metrics.sock";
/// The longest lease accepted, ms (one hour).
pub const MAX_LEASE_MS: u64 = 3_600_000;
/// The longest budget window accepted, s (one day).
pub const MAX_BUDGET_WINDOW_S: f64 = 86_400.0;

/// Where hostd serves its Prometheus metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsEndpoint {
    Off,
    Unix(PathBuf),
    Tcp(String),
}

/// The metrics endpoint a configuration asks for: `None` is the unix
/// socket beside the control socket; TCP only when an address is given.
pub fn metrics_endpoint(m: &str) -> Result<MetricsEndpoint> {
    if m == "off" {
        return Ok(MetricsEndpoint::Off);
    }
    if let Some(p) = m.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(err("metrics = \"unix:\": a socket path is needed"));
        }
        return Ok(MetricsEndpoint::Unix(PathBuf::from(p)));
    }
    if !m.contains(':') {
        return Err(err(format!(
            "metrics = {m:?}: expected unix:PATH, HOST:PORT (TCP) or off"
        )));
    }
    Ok(MetricsEndpoint::Tcp(m.to_string()))
}

/// Configuration keys under their old names, read for one release with a
/// warning: (old, new). Every key is named as its command-line flag
/// (`lease_ms` is `--lease-ms`).
pub const DEPRECATED_KEYS: &[(&str, &str)] =
    &[("max_lease_ms", "lease_ms"), ("bfq_strict", "bfq_idling")];

/// One VM in the configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    pub name: String,
    /// The channel's unix socket (this or `cid`).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The guest's vsock CID (QEMU's `vhost-vsock-pci,guest-cid=N`): its
    /// connections to hostd's `vsock_port` are this VM's channel (this or
    /// `socket`).
    #[serde(default)]
    pub cid: Option<u32>,
    /// The QEMU process (this or `qmp`: without it, hostd asks the QMP
    /// socket's peer credentials at start).
    #[serde(default)]
    pub pid: Option<u32>,
    /// Connect to the socket (QEMU's chardev is the server) instead of listening.
    /// Unix sockets only.
    #[serde(default)]
    pub connect: bool,
    /// The VM's own cgroup directory, for the cgroup weight actuator.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// QEMU's QMP socket (`-qmp unix:PATH,server=on,wait=off`): names the
    /// vCPU threads, which the I/O actuator then leaves alone.
    #[serde(default)]
    pub qmp: Option<PathBuf>,
    /// Weight in the arbitration among VMs.
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// hostd's configuration (`--config FILE`, TOML; `--vm` adds VMs). Each
/// key is its command-line flag without the dashes (`rate_limit_bytes` is
/// `--rate-limit-bytes`); [`HostdConfig::keys`] lists them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostdConfig {
    #[serde(default, rename = "vm")]
    pub vms: Vec<VmConfig>,
    /// A directory of QMP sockets, one per VM (see [`crate::vmdir`] for
    /// the layouts): VMs that appear there are served, and dropped when
    /// they go, without a restart.
    #[serde(default)]
    pub vm_dir: Option<PathBuf>,
    /// Original values of everything boosted (for recovery after a crash).
    #[serde(default = "default_state")]
    pub state_file: PathBuf,
    /// Control socket for `tandem hostd status`.
    #[serde(default = "default_control")]
    pub control: PathBuf,
    /// Prometheus metrics: `unix:PATH` (by default `metrics.sock` beside
    /// the control socket), `HOST:PORT` (TCP, only when asked for), or `off`.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Listen for guests on this vsock port (any CID); VMs with `cid` are
    /// served there.
    #[serde(default)]
    pub vsock_port: Option<u32>,
    /// `ioprio-rt` (default), `ioprio-be0` or `none`.
    #[serde(default)]
    pub ioprio: IoprioBoost,
    /// Level of the RT class (0-7).
    #[serde(default = "default_level")]
    pub ioprio_level: u32,
    /// BFQ weight for a boosted VM's cgroup (VMs with `cgroup` set).
    #[serde(default = "default_weight")]
    pub cgroup_weight: u32,
    /// A cgroup v1 blkio group (usually the hierarchy's root) that a boosted
    /// VM's I/O threads move into until the boost ends, so that BFQ applies
    /// the ioprio boost at once (see `actuator::CgroupMoveActuator`). The VMs
    /// then live in groups of their own when not boosted.
    #[serde(default)]
    pub boost_cgroup: Option<PathBuf>,
    /// While a VM is boosted, make BFQ idle for it on the host disks under
    /// its images: `strict_guarantees`, and `slice_idle` at least 32 ms (see
    /// `actuator::BfqIdlingActuator`). `bfq_strict`, this key's name
    /// before the idle window was added, is read too (see [`DEPRECATED_KEYS`]).
    #[serde(default)]
    pub bfq_idling: bool,
    /// Messages per second a channel may send before hostd coalesces them.
    #[serde(default = "default_rate")]
    pub rate_limit: f64,
    /// Messages a channel may send at once above the rate.
    #[serde(default = "default_burst")]
    pub rate_burst: f64,
    /// Bytes per second hostd reads from a channel: past it the guest's
    /// writes wait (its socket buffer fills), so a flood costs hostd no
    /// more than this.
    #[serde(default = "default_rate_bytes")]
    pub rate_limit_bytes: f64,
    /// Bytes a channel may send at once above `rate_limit_bytes` (at least
    /// one whole frame, 256).
    #[serde(default = "default_burst_bytes")]
    pub rate_burst_bytes: f64,
    /// How often to look for new threads of boosted VMs and for VMs that exited, ms.
    #[serde(default = "default_rescan")]
    pub rescan_ms: u64,
    /// The host's lease on a HELP, ms (policy's `max_lease_ns`; the key was
    /// `max_lease_ms` before it took the command line's name).
    #[serde(default = "default_lease")]
    pub lease_ms: u64,
    /// Share of `budget_window_s` a VM may spend boosted (policy's
    /// `budget_fraction`; default 0.5).
    #[serde(default = "default_budget_fraction")]
    pub budget_fraction: f64,
    /// The sliding window over which budgets are counted, seconds (default 60).
    #[serde(default = "default_budget_window_s")]
    pub budget_window_s: f64,
    /// Log every change of a VM's demand and boost (HELP after a quiet
    /// spell, NO-HELP, boost, unboost and why), with the time since hostd
    /// started and the VM's use of its budget: the timeline that explains a
    /// slow start-up.
    #[serde(default)]
    pub log_boosts: bool,
    /// How a VM's vCPU threads (named by QMP: the VM needs `qmp=`) are
    /// boosted while its guest asks for CPU help: `off` (CPU HELPs are
    /// ignored), `rr` (`SCHED_RR` at `cpu_rt_priority`), `nice`
    /// (`cpu_nice`) or `shares` (the QEMU's cgroup v1 `cpu.shares` set to
    /// `cpu_shares`).
    #[serde(default)]
    pub cpu_boost: CpuBoostKind,
    /// `SCHED_RR` priority of a boosted vCPU (1-99).
    #[serde(default = "default_cpu_rt_priority")]
    pub cpu_rt_priority: i32,
    /// Nice value of a boosted vCPU (-20 to 19).
    #[serde(default = "default_cpu_nice")]
    pub cpu_nice: i32,
    /// `cpu.shares` of a boosted VM's group (2 to 262144).
    #[serde(default = "default_cpu_shares")]
    pub cpu_shares: u64,
    /// The longest a CPU boost lasts at once, ms (at most 1000, pvsched's cap).
    #[serde(default = "default_cpu_max_boost_ms")]
    pub cpu_max_boost_ms: u64,
    /// How long a CPU boost that reached `cpu_max_boost_ms` is held off, ms.
    #[serde(default = "default_cpu_throttle_ms")]
    pub cpu_throttle_ms: u64,
    /// One signal for both: any HELP boosts the VM's I/O threads and its
    /// vCPUs, any NO-HELP ends both (needs `cpu_boost`).
    #[serde(default)]
    pub help_all: bool,
    /// CFS-v on stock Linux: sample every QEMU thread's schedstat each
    /// `cfsv_period_ms`, classify it with CFS-v's 2-bit counter, and
    /// favour the I/O-related ones as `cfsv_boost` says.
    #[serde(default)]
    pub cfsv: bool,
    /// How `cfsv` favours an I/O-related thread: `nice` (`cfsv_nice`),
    /// `shares` (a cgroup v1 `cpu` group of their own, `cfsv_shares`),
    /// `rr` (`SCHED_RR` at `cfsv_rt_priority`) or `deadline`
    /// (`SCHED_DEADLINE`, `cfsv_dl_runtime_us` per ms).
    #[serde(default)]
    pub cfsv_boost: CfsvBoost,
    /// How often `cfsv` samples the threads, ms.
    #[serde(default = "default_cfsv_period_ms")]
    pub cfsv_period_ms: u64,
    /// Nice value of an I/O-related thread with `cfsv_boost = "nice"`.
    #[serde(default = "default_cfsv_nice")]
    pub cfsv_nice: i32,
    /// `SCHED_RR` priority of an I/O-related thread with `cfsv_boost = "rr"`.
    #[serde(default = "default_cfsv_rt_priority")]
    pub cfsv_rt_priority: i32,
    /// `cpu.shares` of the I/O-related threads' group with `cfsv_boost = "shares"`.
    #[serde(default = "default_cfsv_shares")]
    pub cfsv_shares: u64,
    /// `SCHED_DEADLINE` runtime per 1 ms period with `cfsv_boost = "deadline"`, us.
    #[serde(default = "default_cfsv_dl_runtime_us")]
    pub cfsv_dl_runtime_us: u64,
}

fn default_state() -> PathBuf {
    DEFAULT_STATE_FILE.into()
}
fn default_control() -> PathBuf {
    DEFAULT_CONTROL.into()
}
fn default_level() -> u32 {
    4
}
fn default_weight() -> u32 {
    1000
}
fn default_rate() -> f64 {
    // Design choice: a guest sends a HELP, a renewal every half lease and a
    // NO-HELP; 200 per second is far above any honest guest.
    200.0
}
fn default_burst() -> f64 {
    50.0
}
fn default_rate_bytes() -> f64 {
    // Design choice: an honest guest sends at most a few HELPs and renewals
    // a second, 5 to 10 bytes each, and a Hello of at most 70 bytes when it
    // connects; 8 KiB/s leaves room for 800 such messages a second.
    8192.0
}
fn default_burst_bytes() -> f64 {
    // 16 frames of the longest kind (policy::MAX_MESSAGE_BYTES).
    4096.0
}
fn default_rescan() -> u64 {
    // Design choice: QEMU's pool starts workers on demand; a new worker
    // waits at most this long for the boost.
    200
}
fn default_cpu_rt_priority() -> i32 {
    // pvsched boosts a vCPU to SCHED_RR 8: above the priorities of common
    // RT daemons' low end (1-5), well below the kernel's own threads (50, 99).
    8
}
fn default_cpu_nice() -> i32 {
    // Design choice: weight 9548 against a nice-0 task's 1024 (the kernel's
    // sched_prio_to_weight), about 90% of a CPU against one hog.
    -10
}
fn default_cpu_shares() -> u64 {
    // Eight times the default group's 1024, as -10 is about nine times nice 0.
    8192
}
fn default_cpu_max_boost_ms() -> u64 {
    // pvsched's cap: a vCPU is boosted 1 s at most at a time.
    1000
}
fn default_cpu_throttle_ms() -> u64 {
    // Design choice: as long as the cap, so a guest that always asks holds
    // its vCPUs boosted at most half the time, before the budget.
    1000
}
fn default_cfsv_period_ms() -> u64 {
    // Measured: one VM with 70 sampled threads costs hostd 0.79% of a CPU
    // at 25 ms (2800 schedstat reads a second, about 2.8 us each on this
    // 2-core VM under load) and 0.99% at 20 ms, too near the 1% it may
    // cost. 25 ms is still several of CFS's slices (3 ms and more under
    // load), so a hog shows whole slices and an I/O thread many wake-ups
    // in one sample, and a thread that starts doing I/O is I/O-related one
    // sample later (see crates/agent/README.md).
    25
}
fn default_cfsv_nice() -> i32 {
    // The strongest nice: weight 88761, 87 times a nice-0 hog's 1024.
    -20
}
fn default_cfsv_rt_priority() -> i32 {
    // The lowest RT priority: above every normal task, below any RT
    // daemon and the vCPU boost's 8.
    1
}
fn default_cfsv_shares() -> u64 {
    // The kernel's MAX_SHARES: the group weighs 256 nice-0 hogs.
    262_144
}
fn default_cfsv_dl_runtime_us() -> u64 {
    // CFS-v's partial boost: "at most 200 us".
    200
}
fn default_budget_fraction() -> f64 {
    PolicyConfig::default().budget_fraction
}
fn default_budget_window_s() -> f64 {
    PolicyConfig::default().budget_window_ns as f64 / 1e9
}
fn default_lease() -> u64 {
    PolicyConfig::default().max_lease_ns / MS
}

impl Default for HostdConfig {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

impl HostdConfig {
    /// Parses a configuration file; a key under an old name
    /// ([`DEPRECATED_KEYS`]) is read as its new one, with a warning logged.
    pub fn from_toml(text: &str) -> Result<HostdConfig> {
        let (c, warnings) = Self::from_toml_warnings(text)?;
        for w in warnings {
            warn(&w);
        }
        Ok(c)
    }

    /// [`HostdConfig::from_toml`], returning the deprecation warnings.
    pub fn from_toml_warnings(text: &str) -> Result<(HostdConfig, Vec<String>)> {
        let what = |e: &dyn std::fmt::Display| err(format!("hostd config: {e}"));
        let mut table: toml::Table = text.parse().map_err(|e| what(&e))?;
        let mut warnings = Vec::new();
        for (old, new) in DEPRECATED_KEYS {
            let Some(v) = table.remove(*old) else {
                continue;
            };
            if table.contains_key(*new) {
                return Err(err(format!(
                    "hostd config: {old} and {new} both given; {old} is {new}'s old name: keep {new}"
                )));
            }
            warnings.push(format!(
                "hostd config: {old} is deprecated and will go in the next release: write {new} (the same as --{})",
                new.replace('_', "-")
            ));
            table.insert(new.to_string(), v);
        }
        let c: HostdConfig = toml::Value::Table(table).try_into().map_err(|e| what(&e))?;
        Ok((c, warnings))
    }

    /// The configuration file's keys (those of a default configuration,
    /// `vm` included), for the test that each has a command-line flag.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(HostdConfig::default()) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.vms.is_empty() && self.vm_dir.is_none() {
            return Err(err(
                "no VM: give --vm-dir DIR (a directory of QMP sockets), --vm name=N,socket=PATH,pid=PID (or cid=N with --vsock-port) or a [[vm]] in --config",
            ));
        }
        for (i, v) in self.vms.iter().enumerate() {
            if v.name.is_empty() || v.name.len() > policy::protocol::MAX_VM_NAME_BYTES {
                return Err(err(format!("VM {i}: name must be 1 to 64 bytes")));
            }
            if self.vms[..i].iter().any(|o| o.name == v.name) {
                return Err(err(format!("VM {}: duplicate name", v.name)));
            }
            if v.weight == 0 {
                return Err(err(format!("VM {}: weight must be at least 1", v.name)));
            }
            if v.pid.is_none() && v.qmp.is_none() {
                return Err(err(format!(
                    "VM {}: no QEMU process: give pid=PID or qmp=PATH (QEMU's QMP socket, whose peer is QEMU)",
                    v.name
                )));
            }
            match (&v.socket, v.cid) {
                (None, None) => {
                    return Err(err(format!(
                        "VM {}: no channel: give socket=PATH (unix socket, virtio-serial) or cid=N (vsock)",
                        v.name
                    )))
                }
                (Some(_), Some(_)) => {
                    return Err(err(format!(
                        "VM {}: socket= and cid= both given: a VM has one channel, a unix socket or vsock",
                        v.name
                    )))
                }
                (Some(p), None) => {
                    if let Some(o) = self.vms[..i].iter().find(|o| o.socket.as_ref() == Some(p)) {
                        return Err(err(format!(
                            "VM {}: socket {} is VM {}'s too",
                            v.name,
                            p.display(),
                            o.name
                        )));
                    }
                }
                (None, Some(cid)) => {
                    if cid <= VMADDR_CID_HOST || cid == VMADDR_CID_ANY {
                        return Err(err(format!(
                            "VM {}: cid={cid} is not a guest's CID (0, 1, 2 and {VMADDR_CID_ANY} are reserved); give QEMU's vhost-vsock-pci,guest-cid=N (3 or more)",
                            v.name
                        )));
                    }
                    if v.connect {
                        return Err(err(format!(
                            "VM {}: connect= is for socket=; with cid= the guest connects to hostd's vsock port",
                            v.name
                        )));
                    }
                    if let Some(o) = self.vms[..i].iter().find(|o| o.cid == Some(cid)) {
                        return Err(err(format!(
                            "VM {}: cid={cid} is VM {}'s too; each guest has its own CID",
                            v.name, o.name
                        )));
                    }
                    if self.vsock_port.is_none() {
                        return Err(err(format!(
                            "VM {}: cid={cid} needs hostd's vsock listener: give --vsock-port PORT (vsock_port = PORT in the config)",
                            v.name
                        )));
                    }
                }
            }
        }
        if let Some(port) = self.vsock_port {
            if port == 0 || port == VMADDR_PORT_ANY {
                return Err(err(format!(
                    "vsock_port {port}: 1 to {}",
                    VMADDR_PORT_ANY - 1
                )));
            }
            if self.vms.iter().all(|v| v.cid.is_none()) {
                return Err(err(format!(
                    "vsock_port {port}: no VM has cid=N, so no guest could be served there"
                )));
            }
        }
        if self.ioprio_level > 7 {
            return Err(err("ioprio_level: 0 to 7"));
        }
        if !(1..=1000).contains(&self.cgroup_weight) {
            return Err(err("cgroup_weight: 1 to 1000 (BFQ's range)"));
        }
        self.channel_limits()
            .validate()
            .map_err(|e| err(format!("{e} (hostd config)")))?;
        // Design choice: 10 ms is the finest rescan that is not a busy
        // loop, one minute the longest a new QEMU thread should wait.
        if !(10..=60_000).contains(&self.rescan_ms) {
            return Err(err(format!(
                "rescan_ms = {}: it must be from 10 to 60000 (ms)",
                self.rescan_ms
            )));
        }
        self.validate_cpu()?;
        self.validate_cfsv()?;
        self.metrics_endpoint()?;
        self.policy()?;
        Ok(())
    }

    /// The CPU boost's settings.
    fn validate_cpu(&self) -> Result<()> {
        if !(1..=99).contains(&self.cpu_rt_priority) {
            return Err(err(format!(
                "cpu_rt_priority = {}: 1 to 99 (SCHED_RR's range)",
                self.cpu_rt_priority
            )));
        }
        if !(-20..=19).contains(&self.cpu_nice) {
            return Err(err(format!("cpu_nice = {}: -20 to 19", self.cpu_nice)));
        }
        // The kernel's MIN_SHARES and MAX_SHARES (kernel/sched/sched.h).
        if !(2..=262_144).contains(&self.cpu_shares) {
            return Err(err(format!(
                "cpu_shares = {}: 2 to 262144",
                self.cpu_shares
            )));
        }
        if !(1..=1000).contains(&self.cpu_max_boost_ms) {
            return Err(err(format!(
                "cpu_max_boost_ms = {}: 1 to 1000 (a vCPU is boosted at most 1 s at a time)",
                self.cpu_max_boost_ms
            )));
        }
        if !(1..=60_000).contains(&self.cpu_throttle_ms) {
            return Err(err(format!(
                "cpu_throttle_ms = {}: 1 to 60000",
                self.cpu_throttle_ms
            )));
        }
        if self.help_all && self.cpu_boost == CpuBoostKind::Off {
            return Err(err(
                "help_all boosts the vCPUs too: give cpu_boost (rr, nice or shares)",
            ));
        }
        Ok(())
    }

    /// The `cfsv` mode's settings.
    fn validate_cfsv(&self) -> Result<()> {
        if !(1..=1000).contains(&self.cfsv_period_ms) {
            return Err(err(format!(
                "cfsv_period_ms = {}: 1 to 1000",
                self.cfsv_period_ms
            )));
        }
        if !(-20..=19).contains(&self.cfsv_nice) {
            return Err(err(format!("cfsv_nice = {}: -20 to 19", self.cfsv_nice)));
        }
        if !(1..=99).contains(&self.cfsv_rt_priority) {
            return Err(err(format!(
                "cfsv_rt_priority = {}: 1 to 99 (SCHED_RR's range)",
                self.cfsv_rt_priority
            )));
        }
        if !(2..=262_144).contains(&self.cfsv_shares) {
            return Err(err(format!(
                "cfsv_shares = {}: 2 to 262144",
                self.cfsv_shares
            )));
        }
        // The kernel wants at least 1024 ns, and at most the period.
        if !(2..=1000).contains(&self.cfsv_dl_runtime_us) {
            return Err(err(format!(
                "cfsv_dl_runtime_us = {}: 2 to 1000 (of a 1 ms period)",
                self.cfsv_dl_runtime_us
            )));
        }
        if self.cfsv && self.cpu_boost != CpuBoostKind::Off {
            return Err(err(
                "cfsv and cpu_boost both set vCPU threads' scheduling: give one of them",
            ));
        }
        Ok(())
    }

    /// The `cfsv` actuator, if `cfsv` is on.
    pub fn cfsv_actuator(&self) -> Result<Option<CfsvActuator>> {
        if !self.cfsv {
            return Ok(None);
        }
        CfsvActuator::new(
            self.cfsv_boost,
            self.cfsv_nice,
            self.cfsv_rt_priority,
            self.cfsv_shares,
            self.cfsv_dl_runtime_us * 1000,
        )
        .map(Some)
    }

    /// The CPU actuator, if a CPU boost is asked for.
    pub fn cpu_actuator(&self) -> Option<CpuActuator> {
        (self.cpu_boost != CpuBoostKind::Off).then_some(CpuActuator {
            kind: self.cpu_boost,
            rt_priority: self.cpu_rt_priority,
            nice: self.cpu_nice,
            shares: self.cpu_shares,
        })
    }

    /// The cap on a CPU boost.
    pub fn cpu_cap(&self) -> BoostCap {
        BoostCap::new(self.cpu_max_boost_ms * MS, self.cpu_throttle_ms * MS)
    }

    /// Where the metrics are served (see [`metrics_endpoint`]).
    pub fn metrics_endpoint(&self) -> Result<MetricsEndpoint> {
        match &self.metrics {
            Some(m) => metrics_endpoint(m),
            None => Ok(MetricsEndpoint::Unix(
                self.control.with_file_name(DEFAULT_METRICS_NAME),
            )),
        }
    }

    /// The per-channel rate limits.
    pub fn channel_limits(&self) -> ChannelLimits {
        ChannelLimits {
            msg_rate: self.rate_limit,
            msg_burst: self.rate_burst,
            byte_rate: self.rate_limit_bytes,
            byte_burst: self.rate_burst_bytes,
        }
    }

    /// Checks that each VM's `pid` (or the QMP socket's peer) is a running
    /// QEMU process; returns them by VM (`None`: not running now).
    pub fn check_processes(&self) -> Result<Vec<Option<ProcessId>>> {
        let mut out = Vec::new();
        for v in &self.vms {
            let what = format!("VM {}", v.name);
            let pid = match (v.pid, &v.qmp) {
                (Some(p), _) => Some(p),
                (None, Some(q)) => match crate::qmp::peer_pid(q) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        warn(&format!(
                            "{what}: {e} (it will not be served until hostd restarts)"
                        ));
                        None
                    }
                },
                (None, None) => None,
            };
            let Some(pid) = pid else {
                out.push(None);
                continue;
            };
            match vmproc::read_start_time(pid) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    warn(&format!(
                        "{what}: no QEMU process {pid} (it will not be served until hostd restarts)"
                    ));
                    out.push(None);
                }
                _ => out.push(Some(vmproc::check_qemu(pid, &what)?)),
            }
        }
        Ok(out)
    }

    pub fn policy(&self) -> Result<PolicyConfig> {
        if !(self.budget_window_s.is_finite() && self.budget_window_s > 0.0) {
            return Err(err(format!(
                "budget_window_s is {}; it must be a positive number of seconds",
                self.budget_window_s
            )));
        }
        // Design choice: a lease longer than an hour is a mistake (a guest
        // renews every half lease), and a budget window longer than a day
        // would never let a VM's budget recover within a session.
        if !(1..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return Err(err(format!(
                "lease_ms = {}: it must be from 1 to {MAX_LEASE_MS} (one hour)",
                self.lease_ms
            )));
        }
        if self.budget_window_s > MAX_BUDGET_WINDOW_S {
            return Err(err(format!(
                "budget_window_s = {}: it must be at most {MAX_BUDGET_WINDOW_S} (one day)",
                self.budget_window_s
            )));
        }
        if !self.budget_fraction.is_finite() {
            return Err(err(format!(
                "budget_fraction = {}: it must be a finite number in (0, 1]",
                self.budget_fraction
            )));
        }
        let p = PolicyConfig {
            max_lease_ns: self
                .lease_ms
                .checked_mul(MS)
                .ok_or_else(|| err("lease_ms: too large"))?,
            budget_fraction: self.budget_fraction,
            budget_window_ns: (self.budget_window_s * 1e9).round() as u64,
            ..PolicyConfig::default()
        };
        p.validate().map_err(|e| err(format!("policy: {e}")))?;
        Ok(p)
    }
}

/// Parses `name=N,socket=PATH|cid=CID,pid=PID[,cgroup=DIR][,qmp=PATH][,connect=1][,weight=W]`.
pub fn parse_vm_arg(s: &str) -> Result<VmConfig> {
    let (mut name, mut socket, mut pid, mut cgroup, mut connect, mut weight) =
        (None, None, None, None, false, 1);
    let (mut qmp, mut cid) = (None, None);
    for kv in s.split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| err(format!("--vm {s:?}: {kv:?} is not KEY=VALUE")))?;
        match k {
            "name" => name = Some(v.to_string()),
            "socket" => socket = Some(PathBuf::from(v)),
            "cid" => {
                cid = Some(v.parse().map_err(|_| {
                    err(format!("--vm: cid={v:?} is not a vsock CID (a number)"))
                })?)
            }
            "pid" => {
                pid = Some(
                    v.parse()
                        .map_err(|_| err(format!("--vm: pid={v:?} is not a process id")))?,
                )
            }
            "cgroup" => cgroup = Some(PathBuf::from(v)),
            "qmp" => qmp = Some(PathBuf::from(v)),
            "connect" => connect = matches!(v, "1" | "true" | "yes"),
            "weight" => {
                weight = v
                    .parse()
                    .map_err(|_| err(format!("--vm: weight={v:?} is not a number")))?
            }
            _ => {
                return Err(err(format!(
                    "--vm: unknown key {k:?}; accepted: name, socket, cid, pid, cgroup, qmp, connect, weight"
                )))
            }
        }
    }
    if socket.is_none() && cid.is_none() {
        return Err(err(format!(
            "--vm {s:?}: socket=PATH or cid=N (vsock) is missing"
        )));
    }
    Ok(VmConfig {
        name: name.ok_or_else(|| err(format!("--vm {s:?}: name= is missing")))?,
        socket,
        cid,
        pid,
        connect,
        cgroup,
        qmp,
        weight,
    })
}
