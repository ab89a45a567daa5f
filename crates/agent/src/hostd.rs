//! `tandem hostd`: the host daemon. One event loop owns a
//! [`policy::Arbiter`], the VMs and the actuators; one thread per channel
//! reads frames, one serves the control socket (`tandem hostd status`) and
//! one the Prometheus metrics.
//!
//! A VM's channel is a unix socket: hostd listens on it (QEMU's chardev as a
//! client, `server=off`, or a guest daemon on the unix transport connects to
//! it), or with `connect = true` hostd connects to QEMU's chardev server
//! socket and reconnects when it goes away. Or it is a vsock connection: one
//! listener on `vsock_port` serves every VM declared with `cid`, and the
//! peer CID of each accepted connection ([`VsockRoutes`]) says whose it is.
//! Either way a connection goes to the same per-VM code (`serve_channel`).
//!
//! Every boost is undone on NO-HELP, on lease expiry (the arbiter's), when
//! the channel closes, when the VM's process exits, on SIGINT/SIGTERM/SIGHUP,
//! and at the next start after a crash (the [`Journal`] state file).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use policy::{Arbiter, BoostChange, IoprioBoost, Message, PolicyConfig, MS, PROTOCOL_VERSION};
use serde::{Deserialize, Serialize};

use crate::actuator::{
    Actuator, BfqIdlingActuator, CgroupMoveActuator, CgroupWeightActuator, IoprioActuator, Journal,
    RecoveryScope, ScopeVm, VmTarget,
};
use crate::listen::{self, CHANNEL_LIMITS, CLIENT_LIMITS};
use crate::transport::{
    write_message, FrameReader, ReadError, SocketStream, Stream, VsockListener, VMADDR_CID_ANY,
    VMADDR_CID_HOST, VMADDR_PORT_ANY,
};
use crate::vmproc::{self, Liveness, ProcessId};
use crate::{err, now_ns, sys, Result};
use policy::ratelimit::{ChannelLimiter, ChannelLimits};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A VM's name as a label value, escaped as the exposition format asks
/// (backslash, double quote and line feed as `\\`, `\"`, `\n`):
/// prometheus-client 0.24 writes label values as they are (its issue 151).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct VmName(String);

impl EncodeLabelValue for VmName {
    fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => e.write_str("\\\\")?,
                '"' => e.write_str("\\\"")?,
                '\n' => e.write_str("\\n")?,
                c => e.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A per-VM metric: its name, its help and its value for VM `i`.
type PerVm<'a, T> = (&'a str, &'a str, &'a dyn Fn(usize) -> T);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VmLabel {
    vm: VmName,
}

impl VmLabel {
    fn new(name: &str) -> VmLabel {
        VmLabel {
            vm: VmName(name.to_string()),
        }
    }
}

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
        self.metrics_endpoint()?;
        self.policy()?;
        Ok(())
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

enum Event {
    Opened {
        vm: usize,
        conn: u64,
        stream: Stream,
    },
    Msg {
        vm: usize,
        conn: u64,
        msg: Message,
    },
    Closed {
        vm: usize,
        conn: u64,
    },
    /// Messages dropped (coalesced) by the rate limit, malformed frames,
    /// bytes read, since the channel's last report.
    Counted {
        vm: usize,
        limited: u64,
        malformed: u64,
        bytes: u64,
    },
    Control {
        req: String,
        reply: Sender<String>,
    },
    /// The vsock listener closed a connection from a CID that is no VM's.
    VsockRefused {
        cid: u32,
    },
    /// `vm_dir` changed (inotify): VMs may have come or gone.
    VmDirChanged,
}

#[derive(Default)]
struct VmRuntime {
    conn: Option<(u64, Stream)>,
    alive: bool,
    /// A VM from `vm_dir` that went away: its slot is free for the next.
    removed: bool,
    /// Tells the channel's connecting thread to stop (a VM dropped).
    stop: Arc<AtomicBool>,
    /// The QEMU process and its start time.
    qemu: Option<ProcessId>,
    /// Bytes read from the VM's channel.
    bytes: u64,
    /// Times its process could not be checked (an error reading /proc).
    check_errors: u64,
    boosted_since: Option<u64>,
    boosts: u64,
    messages: u64,
    limited: u64,
    malformed: u64,
    connections: u64,
    actuator_errors: u64,
    last_error: Option<String>,
    /// Budget denials already in the boost log.
    denials_logged: u64,
    /// QMP named the vCPU threads.
    qmp_done: bool,
    /// The boost (count) at which QMP was last asked: at most once per
    /// boost, so a stuck QEMU does not stall the event loop at each rescan.
    qmp_asked_at: Option<u64>,
}

/// One line of hostd's log (see [`crate::logging`]).
fn log(m: &str) {
    tracing::info!(target: "hostd", "{m}");
}

/// A problem worth an operator's attention: an actuator or a VM that
/// cannot be served.
fn warn(m: &str) {
    tracing::warn!(target: "hostd", "{m}");
}

/// A VM's channel limits, shared by all of its connections (a guest that
/// reconnects does not get a fresh bucket).
type SharedLimiter = Arc<Mutex<ChannelLimiter>>;

fn lock(l: &SharedLimiter) -> std::sync::MutexGuard<'_, ChannelLimiter> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// A channel's read side: reads no more bytes than the VM's byte bucket
/// holds. When it is empty the reader waits (at most 50 ms at a time, so a
/// coalesced message still goes out on time), and the guest's writes back
/// up into its own socket buffer.
struct Metered {
    inner: Stream,
    limiter: SharedLimiter,
    bytes: u64,
}

impl Read for Metered {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let slice = 50 * MS;
        let mut waited = 0;
        loop {
            let now = now_ns();
            let (n, wait) = {
                let mut l = lock(&self.limiter);
                (l.readable(now).min(buf.len()), l.read_wait(now))
            };
            if n > 0 {
                let r = self.inner.read(&mut buf[..n])?;
                lock(&self.limiter).bytes_read(now_ns(), r);
                self.bytes += r as u64;
                return Ok(r);
            }
            if waited >= slice {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let w = wait.clamp(MS, slice - waited);
            thread::sleep(Duration::from_nanos(w));
            waited += w;
        }
    }
}

/// What one connection has to tell the event loop about its counters.
#[derive(Default)]
struct Tally {
    limited: u64,
    malformed: u64,
    reported_bytes: u64,
    at: u64,
}

impl Tally {
    /// Sends the counters (at most once a second unless `force`).
    fn report(&mut self, vm: usize, bytes: u64, tx: &Sender<Event>, force: bool) {
        let now = now_ns();
        let news = self.limited + self.malformed > 0 || bytes > self.reported_bytes;
        if !news || (!force && now.saturating_sub(self.at) < policy::SEC) {
            return;
        }
        let _ = tx.send(Event::Counted {
            vm,
            limited: self.limited,
            malformed: self.malformed,
            bytes: bytes - self.reported_bytes,
        });
        self.reported_bytes = bytes;
        self.limited = 0;
        self.malformed = 0;
        self.at = now;
    }
}

/// A channel's stream ended or broke: refuses a malformed frame with the
/// reason, and counts it.
fn close_on(e: ReadError, w: &mut Stream, tally: &mut Tally) {
    let reason = match e {
        ReadError::Eof { partial } => {
            tally.malformed += (partial > 0) as u64;
            return;
        }
        ReadError::Timeout | ReadError::Io(_) => return,
        ReadError::Decode(policy::DecodeError::UnknownVersion(v)) => {
            format!("protocol version {v} is not supported; this host speaks {PROTOCOL_VERSION}")
        }
        ReadError::Decode(e) => format!("malformed frame: {e}"),
    };
    let _ = write_message(w, &Message::Refuse { reason });
    tally.malformed += 1;
}

/// Reads one channel until it closes. Every message takes a token of the
/// VM's message bucket and its bytes of the byte bucket (see [`Metered`]).
/// Answers Hello itself; passes Help and NoHelp on, keeping only the
/// latest of those past the rate; drops Hellos and Heartbeats past it.
fn serve_channel(vm: usize, conn: u64, stream: Stream, tx: Sender<Event>, limiter: SharedLimiter) {
    let (Ok(mut w), Ok(reg)) = (stream.try_clone(), stream.try_clone()) else {
        // Out of descriptors: this connection closes, nothing else.
        return;
    };
    if tx
        .send(Event::Opened {
            vm,
            conn,
            stream: reg,
        })
        .is_err()
    {
        return;
    }
    stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut r = FrameReader::new(Metered {
        inner: stream,
        limiter: limiter.clone(),
        bytes: 0,
    });
    let mut hello = false;
    let mut pending: Option<Message> = None;
    let mut tally = Tally::default();
    let refuse = |w: &mut Stream, reason: String| {
        let _ = write_message(w, &Message::Refuse { reason });
    };
    loop {
        let res = r.read_message();
        // Flush a coalesced message when the bucket allows.
        if pending.is_some() && lock(&limiter).message(now_ns()) {
            if let Some(msg) = pending.take() {
                if tx.send(Event::Msg { vm, conn, msg }).is_err() {
                    return;
                }
            }
        }
        tally.report(vm, r.get_ref().bytes, &tx, false);
        let msg = match res {
            Ok(m) => m,
            Err(ReadError::Timeout) => continue,
            Err(e) => {
                close_on(e, &mut w, &mut tally);
                break;
            }
        };
        let within = lock(&limiter).message(now_ns());
        match msg {
            Message::Hello { version, .. } => {
                if !within {
                    // A Hello flood: not answered, counted.
                    tally.limited += 1;
                    continue;
                }
                if version != PROTOCOL_VERSION {
                    refuse(
                        &mut w,
                        format!(
                            "protocol version {version} is not supported; this host speaks {PROTOCOL_VERSION}"
                        ),
                    );
                    break;
                }
                hello = true;
                let ack = Message::HelloAck {
                    version: PROTOCOL_VERSION,
                };
                if write_message(&mut w, &ack).is_err() {
                    break;
                }
            }
            Message::Heartbeat { seq } => {
                // Echoed within the rate limit; a flood of them is dropped.
                if within {
                    let _ = write_message(&mut w, &Message::Heartbeat { seq });
                } else {
                    tally.limited += 1;
                }
            }
            Message::Help { .. } | Message::NoHelp { .. } if hello => {
                if within {
                    // The newest message supersedes a coalesced one.
                    tally.limited += pending.take().is_some() as u64;
                    if tx.send(Event::Msg { vm, conn, msg }).is_err() {
                        return;
                    }
                } else {
                    tally.limited += pending.replace(msg).is_some() as u64;
                }
            }
            Message::Help { .. } | Message::NoHelp { .. } => {
                refuse(&mut w, "Hello first".into());
                tally.malformed += 1;
                break;
            }
            Message::HelloAck { .. } | Message::Refuse { .. } => {
                refuse(&mut w, "host-to-guest message sent by a guest".into());
                tally.malformed += 1;
                break;
            }
        }
    }
    tally.report(vm, r.get_ref().bytes, &tx, true);
    let _ = tx.send(Event::Closed { vm, conn });
}

static CONN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_conn() -> u64 {
    CONN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Serves VM `vm`'s unix socket, if it has one (a VM with `cid` is served
/// by the vsock listener). Returns the socket file it created, if any.
fn start_channel(
    vm: usize,
    cfg: &VmConfig,
    tx: Sender<Event>,
    limiter: SharedLimiter,
    stop: Arc<AtomicBool>,
) -> Result<Option<PathBuf>> {
    let Some(path) = cfg.socket.clone() else {
        return Ok(None);
    };
    if cfg.connect {
        thread::Builder::new()
            .name(format!("vm{vm}-connect"))
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    connect_once(vm, &path, &tx, &limiter, &stop);
                    thread::sleep(Duration::from_millis(500));
                }
            })
            .map_err(|e| err(format!("VM {}: starting its thread: {e}", cfg.name)))?;
        Ok(None)
    } else {
        let l = listen::bind_unix(&path, &format!("VM {} socket", cfg.name))?;
        listen::serve(
            format!("tandem hostd: VM {} socket", cfg.name),
            &format!("vm{vm}-channel"),
            l,
            CHANNEL_LIMITS,
            move |s: UnixStream| {
                serve_channel(
                    vm,
                    next_conn(),
                    Stream::Unix(s),
                    tx.clone(),
                    limiter.clone(),
                )
            },
        )?;
        Ok(Some(path))
    }
}

/// Connects to a VM's chardev server socket and serves it until it closes;
/// not once the VM is dropped (its slot may be another VM's by then).
fn connect_once(
    vm: usize,
    path: &Path,
    tx: &Sender<Event>,
    limiter: &SharedLimiter,
    stop: &AtomicBool,
) {
    if let Ok(s) = UnixStream::connect(path) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        serve_channel(
            vm,
            next_conn(),
            Stream::Unix(s),
            tx.clone(),
            limiter.clone(),
        );
    }
}

/// Which VM an accepted vsock connection belongs to: the one declared with
/// the peer's CID. The host kernel reports that CID at accept, and a guest
/// cannot choose it (QEMU's `vhost-vsock-pci,guest-cid=N` sets it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VsockRoutes {
    by_cid: BTreeMap<u32, usize>,
}

impl VsockRoutes {
    /// The VMs declared with `cid`, by their index in `vms` (a validated
    /// configuration has no CID twice; the first would win).
    pub fn new(vms: &[VmConfig]) -> VsockRoutes {
        let mut by_cid = BTreeMap::new();
        for (i, v) in vms.iter().enumerate() {
            if let Some(cid) = v.cid {
                by_cid.entry(cid).or_insert(i);
            }
        }
        VsockRoutes { by_cid }
    }

    /// The VM whose guest has CID `peer_cid`; `None`: close the connection.
    pub fn route(&self, peer_cid: u32) -> Option<usize> {
        self.by_cid.get(&peer_cid).copied()
    }

    /// (CID, VM index), by CID.
    pub fn iter(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.by_cid.iter().map(|(c, v)| (*c, *v))
    }
}

/// Hands a connection accepted on the vsock port to its VM's channel code
/// (the caller runs it in a thread of its own, as for a connection on a
/// VM's unix socket), or closes it and reports the unknown CID. Returns the
/// VM.
fn dispatch_vsock(
    routes: &VsockRoutes,
    peer_cid: u32,
    s: SocketStream,
    tx: &Sender<Event>,
    limiters: &[SharedLimiter],
) -> Option<usize> {
    match routes.route(peer_cid) {
        Some(vm) => {
            let limiter = limiters.get(vm)?.clone();
            serve_channel(vm, next_conn(), Stream::Socket(s), tx.clone(), limiter);
            Some(vm)
        }
        None => {
            let _ = s.shutdown();
            drop(s);
            let _ = tx.send(Event::VsockRefused { cid: peer_cid });
            None
        }
    }
}

/// Binds the vsock port on any CID and serves it: each VM with `cid` may
/// hold [`CHANNEL_LIMITS`] connections at once.
fn start_vsock(
    port: u32,
    routes: VsockRoutes,
    tx: Sender<Event>,
    limiters: Vec<SharedLimiter>,
) -> Result<()> {
    let l = VsockListener::bind(port).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EAFNOSUPPORT) => {
                " (this kernel has no vsock: modprobe vhost_vsock on a host)"
            }
            Some(libc::EADDRINUSE) => " (in use by another process: another hostd?)",
            _ => "",
        };
        err(format!("vsock port {port}: {e}{hint}"))
    })?;
    let vms = routes.iter().count().max(1);
    let limits = listen::ConnLimits {
        max_open: CHANNEL_LIMITS.max_open * vms,
        accept_rate: CHANNEL_LIMITS.accept_rate * vms as f64,
        accept_burst: CHANNEL_LIMITS.accept_burst * vms as f64,
    };
    listen::serve(
        format!("tandem hostd: vsock port {port}"),
        "vsock-channel",
        l,
        limits,
        move |(s, cid): (SocketStream, u32)| {
            dispatch_vsock(&routes, cid, s, &tx, &limiters);
        },
    )
}

fn ask(tx: &Sender<Event>, req: &str) -> String {
    let (rtx, rrx) = mpsc::channel();
    if tx
        .send(Event::Control {
            req: req.to_string(),
            reply: rtx,
        })
        .is_err()
    {
        return "hostd is stopping\n".into();
    }
    rrx.recv_timeout(Duration::from_secs(2))
        .unwrap_or_else(|_| "hostd did not answer\n".into())
}

/// How long a control or metrics client may take to send its whole request,
/// and then to read the whole answer (a client that stalls or trickles loses
/// its connection, and its slot).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Answers one control connection: one request line, one answer.
fn control_answer(s: UnixStream, tx: &Sender<Event>) {
    let mut s = listen::Deadline::new(s, CLIENT_TIMEOUT);
    let mut line = String::new();
    let _ = BufReader::new(&mut s).take(256).read_line(&mut line);
    let answer = ask(tx, line.trim());
    s.restart(CLIENT_TIMEOUT);
    let _ = s.write_all(answer.as_bytes());
}

fn start_control(path: &Path, tx: Sender<Event>) -> Result<()> {
    let l = listen::bind_unix(path, "control socket")?;
    listen::serve(
        "tandem hostd: control socket".into(),
        "control",
        l,
        CLIENT_LIMITS,
        move |s: UnixStream| control_answer(s, &tx),
    )
}

/// The request line of an HTTP request head, if complete.
fn request_line(head: &[u8]) -> Option<(String, String)> {
    let end = head.iter().position(|&b| b == b'\n')?;
    let line = String::from_utf8_lossy(&head[..end]);
    let mut f = line.split_whitespace();
    Some((f.next()?.to_string(), f.next()?.to_string()))
}

/// Answers one HTTP request: `GET /metrics` gets the metrics, another path
/// 404, another method 405. The request head may take at most
/// [`CLIENT_TIMEOUT`] and 8 KiB, the answer [`CLIENT_TIMEOUT`].
fn http_answer<S: Read + Write + listen::Timed>(s: S, tx: &Sender<Event>) {
    let mut s = listen::Deadline::new(s, CLIENT_TIMEOUT);
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    while got.len() < 8192 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") || got.windows(2).any(|w| w == b"\n\n")
                {
                    break;
                }
            }
        }
    }
    let (status, body) = match request_line(&got) {
        Some((m, p)) if m == "GET" && (p == "/metrics" || p.starts_with("/metrics?")) => {
            ("200 OK", ask(tx, "metrics"))
        }
        Some((m, _)) if m != "GET" => ("405 Method Not Allowed", "GET only\n".to_string()),
        Some(_) => ("404 Not Found", "the metrics are at /metrics\n".to_string()),
        None => ("400 Bad Request", "no request line\n".to_string()),
    };
    s.restart(CLIENT_TIMEOUT);
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let _ = write!(
        s,
        "HTTP/1.0 {status}\r\n{allow}Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        body
    );
}

/// Serves the metrics where `ep` says; returns the socket file it created.
fn start_metrics(ep: &MetricsEndpoint, tx: Sender<Event>) -> Result<Option<PathBuf>> {
    match ep {
        MetricsEndpoint::Off => Ok(None),
        MetricsEndpoint::Unix(path) => {
            let l = listen::bind_unix(path, "metrics socket")?;
            listen::serve(
                "tandem hostd: metrics socket".into(),
                "metrics",
                l,
                CLIENT_LIMITS,
                move |s: UnixStream| http_answer(s, &tx),
            )?;
            Ok(Some(path.clone()))
        }
        MetricsEndpoint::Tcp(addr) => {
            let l = TcpListener::bind(addr).map_err(|e| err(format!("metrics {addr}: {e}")))?;
            listen::serve(
                format!("tandem hostd: metrics {addr}"),
                "metrics",
                l,
                CLIENT_LIMITS,
                move |s: std::net::TcpStream| http_answer(s, &tx),
            )?;
            Ok(None)
        }
    }
}

/// The daemon. Runs until SIGINT/SIGTERM/SIGHUP.
pub struct Hostd {
    cfg: HostdConfig,
    arbiter: Arbiter,
    targets: Vec<VmTarget>,
    rt: Vec<VmRuntime>,
    actuators: Vec<Box<dyn Actuator>>,
    journal: Journal,
    /// Connections to the vsock port from CIDs that are no VM's.
    vsock_refused: u64,
    /// Those CIDs (each is logged once).
    vsock_refused_cids: std::collections::BTreeSet<u32>,
    /// When hostd started, for the times in the boost log.
    started_ns: u64,
    /// Each VM's channel limits, shared by its connections.
    limiters: Vec<SharedLimiter>,
    /// Where SIGHUP gets the configuration again.
    reload: Option<ReloadFn>,
    /// The VMs by slot: the configuration's first, then those found in
    /// `vm_dir` (a dropped one's slot is given to the next).
    vms: Vec<VmConfig>,
    /// The slots of the VMs found in `vm_dir`, by QMP socket.
    found: BTreeMap<PathBuf, usize>,
    /// QMP sockets in `vm_dir` that are no running QEMU's, logged once and
    /// asked again at each rescan (QEMU may have bound but not yet listened).
    skipped: std::collections::BTreeSet<PathBuf>,
    /// For the channels of VMs found while running.
    tx: Option<Sender<Event>>,
}

/// Builds the configuration again (SIGHUP): the file and the command line.
pub type ReloadFn = Box<dyn Fn() -> Result<HostdConfig> + Send>;

/// Tells the service manager (systemd, `Type=notify`) of a state change;
/// nothing without `NOTIFY_SOCKET`.
fn notify(states: &[sd_notify::NotifyState]) {
    let _ = sd_notify::notify(false, states);
}

/// The settings a reload cannot change while hostd runs, by name, where
/// `new` differs from `old`.
fn needs_restart(old: &HostdConfig, new: &HostdConfig) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut differ = |name, d: bool| {
        if d {
            v.push(name)
        }
    };
    differ("the VMs", old.vms != new.vms);
    differ("vm_dir", old.vm_dir != new.vm_dir);
    differ("state_file", old.state_file != new.state_file);
    differ("control", old.control != new.control);
    differ("metrics", old.metrics != new.metrics);
    differ("vsock_port", old.vsock_port != new.vsock_port);
    differ(
        "the actuators",
        (
            &old.ioprio,
            old.ioprio_level,
            old.cgroup_weight,
            &old.boost_cgroup,
            old.bfq_idling,
        ) != (
            &new.ioprio,
            new.ioprio_level,
            new.cgroup_weight,
            &new.boost_cgroup,
            new.bfq_idling,
        ),
    );
    differ(
        "the lease and budget",
        (old.lease_ms, old.budget_fraction, old.budget_window_s)
            != (new.lease_ms, new.budget_fraction, new.budget_window_s),
    );
    v
}

impl Hostd {
    pub fn new(cfg: HostdConfig) -> Result<Hostd> {
        cfg.validate()?;
        let mut arbiter = Arbiter::try_new(cfg.policy()?).map_err(err)?;
        let mut actuators: Vec<Box<dyn Actuator>> = Vec::new();
        match cfg.ioprio {
            IoprioBoost::Rt => actuators.push(Box::new(IoprioActuator::rt(cfg.ioprio_level))),
            IoprioBoost::Be0 => actuators.push(Box::new(IoprioActuator::be0())),
            IoprioBoost::None => {}
        }
        // After the ioprio change: both take effect at the thread's next
        // request, the move re-queueing the queue with its new class.
        if let Some(dir) = &cfg.boost_cgroup {
            actuators.push(Box::new(CgroupMoveActuator::new(dir)?));
        }
        if cfg.bfq_idling {
            actuators.push(Box::new(BfqIdlingActuator));
        }
        if cfg.vms.iter().any(|v| v.cgroup.is_some()) {
            actuators.push(Box::new(CgroupWeightActuator {
                weight: cfg.cgroup_weight,
            }));
        }
        let mut targets = Vec::new();
        let mut rt = Vec::new();
        // QEMU's pid as given, or as the kernel tells the QMP socket's
        // peer (SO_PEERCRED): the process that listens on it. Either must
        // be a QEMU process.
        let qemus = cfg.check_processes()?;
        for (i, (v, qemu)) in cfg.vms.iter().zip(qemus).enumerate() {
            arbiter.add_vm(i as u32, v.weight);
            targets.push(VmTarget {
                name: v.name.clone(),
                pid: qemu.map(|q| q.pid).unwrap_or(0),
                cgroup: v.cgroup.clone(),
                vcpu_tids: Vec::new(),
            });
            rt.push(VmRuntime {
                alive: qemu.is_some(),
                qemu,
                ..VmRuntime::default()
            });
        }
        let journal = Journal::new(Some(cfg.state_file.clone()));
        let now = now_ns();
        let limiters = cfg
            .vms
            .iter()
            .map(|_| Arc::new(Mutex::new(ChannelLimiter::new(&cfg.channel_limits(), now))))
            .collect();
        let mut h = Hostd {
            vms: cfg.vms.clone(),
            cfg,
            arbiter,
            targets,
            rt,
            actuators,
            journal,
            vsock_refused: 0,
            vsock_refused_cids: Default::default(),
            started_ns: now_ns(),
            limiters,
            reload: None,
            found: BTreeMap::new(),
            skipped: Default::default(),
            tx: None,
        };
        // The VMs already running, before the state file is recovered (a
        // previous hostd's boosts of them are then in scope).
        h.sync_vm_dir(now_ns());
        Ok(h)
    }

    /// On SIGHUP, build the configuration with `f` and apply what can be
    /// applied while running: the rate limits, `rescan_ms` and
    /// `log_boosts`. A change to anything else is logged as needing a
    /// restart and not applied; an invalid configuration is logged and the
    /// running one kept.
    pub fn reload_with(mut self, f: ReloadFn) -> Hostd {
        self.reload = Some(f);
        self
    }

    fn reload(&mut self) {
        notify(&[sd_notify::NotifyState::Reloading]);
        let Some(f) = &self.reload else {
            log("SIGHUP: nothing to reload from");
            notify(&[sd_notify::NotifyState::Ready]);
            return;
        };
        match f().and_then(|c| c.validate().map(|()| c)) {
            Err(e) => warn(&format!(
                "SIGHUP: configuration not reloaded: {e}; the running one stays"
            )),
            Ok(new) => {
                let kept = needs_restart(&self.cfg, &new);
                self.cfg.rate_limit = new.rate_limit;
                self.cfg.rate_burst = new.rate_burst;
                self.cfg.rate_limit_bytes = new.rate_limit_bytes;
                self.cfg.rate_burst_bytes = new.rate_burst_bytes;
                self.cfg.rescan_ms = new.rescan_ms;
                self.cfg.log_boosts = new.log_boosts;
                let now = now_ns();
                for l in &self.limiters {
                    lock(l).set_limits(&self.cfg.channel_limits(), now);
                }
                let mut m = format!(
                    "SIGHUP: reloaded: rate {} msgs/s (burst {}), {} B/s (burst {}), rescan {} ms, log_boosts {}",
                    self.cfg.rate_limit,
                    self.cfg.rate_burst,
                    self.cfg.rate_limit_bytes,
                    self.cfg.rate_burst_bytes,
                    self.cfg.rescan_ms,
                    self.cfg.log_boosts
                );
                if !kept.is_empty() {
                    m += &format!(
                        "; changed but kept as they were until a restart: {}",
                        kept.join(", ")
                    );
                }
                log(&m);
            }
        }
        notify(&[sd_notify::NotifyState::Ready]);
    }

    /// One line of the boost log (`log_boosts`): seconds since start, the
    /// VM, what happened, and its use of the budget window.
    fn log_boost(&self, i: usize, now: u64, what: &str) {
        if !self.cfg.log_boosts {
            return;
        }
        let cfg = self.arbiter.config();
        let used = self.arbiter.budget_used(i as u32, now).unwrap_or(0) as f64 / 1e9;
        let t = now.saturating_sub(self.started_ns) as f64 / 1e9;
        let name = &self.targets[i].name;
        // The same as fields, for JSON logs.
        tracing::info!(
            target: "hostd",
            t_s = t,
            vm = %name,
            event = what,
            budget_used_s = used,
            "{t:.3} VM {name}: {what} (budget: {used:.1} of {:.1} s used in the last {:.0} s)",
            cfg.budget_ns() as f64 / 1e9,
            cfg.budget_window_ns as f64 / 1e9,
        );
    }

    fn apply(&mut self, changes: Vec<BoostChange>, now: u64) {
        for c in changes {
            match c {
                BoostChange::Boost(vm) => {
                    let i = vm as usize;
                    self.log_boost(i, now, "boost");
                    self.rt[i].boosts += 1;
                    self.rt[i].boosted_since = Some(now);
                    self.boost(i);
                }
                BoostChange::Unboost(vm, why) => {
                    let i = vm as usize;
                    self.rt[i].boosted_since = None;
                    for a in self.actuators.iter_mut() {
                        if let Err(e) = a.unboost(&self.targets[i], &mut self.journal) {
                            self.rt[i].actuator_errors += 1;
                            self.rt[i].last_error = Some(e.0.clone());
                            warn(&format!(
                                "VM {}: unboost ({}): {e}",
                                self.targets[i].name,
                                a.name()
                            ));
                        }
                    }
                    self.log_boost(i, now, &format!("unboost: {why:?}"));
                }
            }
        }
        for i in 0..self.rt.len() {
            let denials = self
                .arbiter
                .stats(i as u32)
                .unwrap_or_default()
                .budget_denials;
            if denials > self.rt[i].denials_logged {
                self.rt[i].denials_logged = denials;
                self.log_boost(i, now, "held back by the budget");
            }
        }
    }

    /// Asks QEMU which threads are VM `i`'s vCPUs, once per QEMU process;
    /// on failure every thread is boosted, and the error is shown.
    fn map_threads(&mut self, i: usize) {
        let Some(sock) = self.vms[i].qmp.clone() else {
            return;
        };
        if self.rt[i].qmp_done || self.rt[i].qmp_asked_at == Some(self.rt[i].boosts) {
            return;
        }
        self.rt[i].qmp_asked_at = Some(self.rt[i].boosts);
        match crate::qmp::query_threads(&sock) {
            Ok(t) => {
                log(&format!(
                    "VM {}: QMP: iothreads {:?}, vCPU threads {:?} (left to the CPU actuators)",
                    self.targets[i].name, t.iothreads, t.vcpus
                ));
                self.targets[i].vcpu_tids = t.vcpus.iter().map(|&(_, tid)| tid).collect();
                self.rt[i].qmp_done = true;
            }
            Err(e) => {
                self.rt[i].last_error = Some(e.0.clone());
                warn(&format!(
                    "VM {}: {e}; boosting all of its threads",
                    self.targets[i].name
                ));
            }
        }
    }

    /// Whether VM `i`'s QEMU still runs: checked by start time before each
    /// boost and at each rescan. A VM is marked exited (and everything of
    /// it undone) only when its process is gone; an error reading /proc
    /// (out of descriptors) leaves it as it is, to be asked again.
    fn still_running(&mut self, i: usize, now: u64) -> bool {
        if !self.rt[i].alive {
            return false;
        }
        let Some(q) = self.rt[i].qemu else {
            return false;
        };
        match q.liveness() {
            Liveness::Running => true,
            Liveness::Unknown(e) => {
                self.rt[i].check_errors += 1;
                self.rt[i].last_error = Some(format!("checking process {}: {e}", q.pid));
                false
            }
            Liveness::Gone => {
                self.vm_exited(i, now);
                false
            }
        }
    }

    /// VM `i`'s QEMU is gone: end its boost and its channel.
    fn vm_exited(&mut self, i: usize, now: u64) {
        self.rt[i].alive = false;
        log(&format!(
            "VM {}: process {} exited",
            self.targets[i].name, self.targets[i].pid
        ));
        let ch = self.arbiter.remove_vm(i as u32, now);
        self.apply(ch, now);
        // Anything left (the arbiter had it unboosted already).
        let _ = self.journal.revert_vm(&self.targets[i].name);
        if let Some((_, s)) = self.rt[i].conn.take() {
            s.shutdown();
        }
    }

    /// The VMs served now (not those dropped from `vm_dir`).
    fn live_vms(&self) -> usize {
        self.rt.iter().filter(|r| !r.removed).count()
    }

    /// Reads `vm_dir` again: serves the VMs that appeared, drops those that
    /// went (their QMP socket gone or their QEMU exited).
    fn sync_vm_dir(&mut self, now: u64) {
        let Some(dir) = self.cfg.vm_dir.clone() else {
            return;
        };
        let present = crate::vmdir::scan(&dir);
        let gone: Vec<(PathBuf, usize)> = self
            .found
            .iter()
            .filter(|(q, &i)| !self.rt[i].alive || !present.iter().any(|f| &f.qmp == *q))
            .map(|(q, &i)| (q.clone(), i))
            .collect();
        for (qmp, i) in gone {
            self.found.remove(&qmp);
            self.drop_vm(i, now);
        }
        self.skipped.retain(|q| present.iter().any(|f| &f.qmp == q));
        for f in present {
            if !self.found.contains_key(&f.qmp) {
                self.add_found(f);
            }
        }
    }

    /// Serves a VM found in `vm_dir`, if its QMP socket's peer is a QEMU
    /// process and its name is no other VM's.
    fn add_found(&mut self, f: crate::vmdir::FoundVm) {
        let what = format!("VM {} ({})", f.name, f.qmp.display());
        let named = self
            .targets
            .iter()
            .zip(&self.rt)
            .any(|(t, r)| !r.removed && t.name == f.name);
        let qemu = if f.name.len() > policy::protocol::MAX_VM_NAME_BYTES {
            Err(err("its name is longer than 64 bytes"))
        } else if named {
            Err(err("another VM has this name"))
        } else {
            crate::qmp::peer_pid(&f.qmp).and_then(|pid| vmproc::check_qemu(pid, &what))
        };
        let qemu = match qemu {
            Ok(q) => q,
            Err(e) => {
                // A socket left by a killed QEMU, or not QEMU's: asked again
                // at the next rescan, logged once.
                if self.skipped.insert(f.qmp) {
                    warn(&format!("{what}: not served (yet): {e}"));
                }
                return;
            }
        };
        let cfg = VmConfig {
            name: f.name.clone(),
            socket: Some(f.channel.clone()),
            cid: None,
            pid: Some(qemu.pid),
            connect: true,
            cgroup: None,
            // libvirt holds the monitor's one connection: no thread names.
            qmp: (!f.libvirt).then(|| f.qmp.clone()),
            weight: 1,
        };
        let i = self
            .rt
            .iter()
            .position(|r| r.removed)
            .unwrap_or(self.rt.len());
        let target = VmTarget {
            name: f.name.clone(),
            pid: qemu.pid,
            cgroup: None,
            vcpu_tids: Vec::new(),
        };
        let rt = VmRuntime {
            alive: true,
            qemu: Some(qemu),
            ..VmRuntime::default()
        };
        let limiter = Arc::new(Mutex::new(ChannelLimiter::new(
            &self.cfg.channel_limits(),
            now_ns(),
        )));
        if i == self.rt.len() {
            self.vms.push(cfg);
            self.targets.push(target);
            self.rt.push(rt);
            self.limiters.push(limiter);
        } else {
            (self.vms[i], self.targets[i], self.rt[i]) = (cfg, target, rt);
            self.limiters[i] = limiter;
        }
        self.arbiter.add_vm(i as u32, 1);
        self.skipped.remove(&f.qmp);
        self.found.insert(f.qmp, i);
        if let Some(tx) = self.tx.clone() {
            let (stop, l) = (self.rt[i].stop.clone(), self.limiters[i].clone());
            if let Err(e) = start_channel(i, &self.vms[i], tx, l, stop) {
                warn(&format!("{what}: {e}"));
            }
        }
        log(&format!(
            "{what}: serving it: QEMU pid {}, channel {}",
            qemu.pid,
            f.channel.display()
        ));
    }

    /// Drops VM `i`, found in `vm_dir`: undoes its boost, closes its
    /// channel and frees its slot.
    fn drop_vm(&mut self, i: usize, now: u64) {
        if self.rt[i].alive {
            self.rt[i].alive = false;
            let ch = self.arbiter.remove_vm(i as u32, now);
            self.apply(ch, now);
            let _ = self.journal.revert_vm(&self.targets[i].name);
        } else {
            self.arbiter.remove_vm(i as u32, now);
        }
        self.rt[i].stop.store(true, Ordering::Relaxed);
        if let Some((_, s)) = self.rt[i].conn.take() {
            s.shutdown();
        }
        self.rt[i].removed = true;
        log(&format!(
            "VM {}: gone from vm_dir; dropped",
            self.targets[i].name
        ));
    }

    /// Boosts VM `i` (again: new threads get it too), once its process is
    /// checked to be the same QEMU.
    fn boost(&mut self, i: usize) {
        if !self.still_running(i, now_ns()) {
            return;
        }
        self.map_threads(i);
        for a in self.actuators.iter_mut() {
            if let Err(e) = a.boost(&self.targets[i], &mut self.journal) {
                self.rt[i].actuator_errors += 1;
                self.rt[i].last_error = Some(e.0.clone());
                warn(&format!(
                    "VM {}: boost ({}): {e}",
                    self.targets[i].name,
                    a.name()
                ));
            }
        }
    }

    fn rescan(&mut self, now: u64) {
        for i in 0..self.targets.len() {
            if self.arbiter.is_boosted(i as u32) {
                // Checks the process first.
                self.boost(i);
            } else {
                self.still_running(i, now);
            }
        }
    }

    fn handle(&mut self, ev: Event, now: u64) {
        match ev {
            Event::Opened { vm, conn, stream } => {
                if let Some((_, old)) = self.rt[vm].conn.replace((conn, stream)) {
                    // A guest daemon restarted: the new channel replaces the old.
                    old.shutdown();
                }
                self.rt[vm].connections += 1;
                if !self.rt[vm].alive {
                    if let Some((_, s)) = self.rt[vm].conn.take() {
                        s.shutdown();
                    }
                }
            }
            Event::Msg { vm, conn, msg } => {
                if self.rt[vm].conn.as_ref().map(|c| c.0) != Some(conn) || !self.rt[vm].alive {
                    return;
                }
                self.rt[vm].messages += 1;
                match msg {
                    Message::Help {
                        resource: policy::Resource::Io,
                        duration_hint_ms,
                        reason,
                    } => {
                        if !self.arbiter.wants_help(vm as u32) {
                            self.log_boost(vm, now, &format!("HELP ({reason:?})"));
                        }
                        self.arbiter
                            .help_for(vm as u32, now, duration_hint_ms as u64 * MS, reason)
                    }
                    Message::NoHelp {
                        resource: policy::Resource::Io,
                    } => {
                        if self.arbiter.wants_help(vm as u32) {
                            self.log_boost(vm, now, "NO-HELP");
                        }
                        self.arbiter.no_help(vm as u32, now)
                    }
                    // CPU help: no CPU actuator yet.
                    _ => {}
                }
                let ch = self.arbiter.update(now);
                self.apply(ch, now);
            }
            Event::Closed { vm, conn } => {
                if self.rt[vm].conn.as_ref().map(|c| c.0) == Some(conn) {
                    self.rt[vm].conn = None;
                    // A guest that goes away needs no more help.
                    if self.rt[vm].alive {
                        self.arbiter.no_help(vm as u32, now);
                        let ch = self.arbiter.update(now);
                        self.apply(ch, now);
                    }
                }
            }
            Event::Counted {
                vm,
                limited,
                malformed,
                bytes,
            } => {
                self.rt[vm].limited += limited;
                self.rt[vm].malformed += malformed;
                self.rt[vm].bytes += bytes;
            }
            Event::VmDirChanged => self.sync_vm_dir(now),
            Event::VsockRefused { cid } => {
                self.vsock_refused += 1;
                if self.vsock_refused_cids.insert(cid) {
                    log(&format!(
                        "vsock: closed a connection from CID {cid}: no VM has cid={cid} (later ones from it are only counted)"
                    ));
                }
            }
            Event::Control { req, reply } => {
                let text = match req.as_str() {
                    "status" => self.status_text(now),
                    "metrics" => self.metrics_text(now),
                    other => format!("unknown request {other:?}; accepted: status, metrics\n"),
                };
                let _ = reply.send(text);
            }
        }
    }

    fn status_text(&self, now: u64) -> String {
        let p = self.arbiter.config();
        let mut s = format!(
            "hostd pid {}  lease {} ms  budget {:.1} s per {:.0} s window  rate {} msgs/s, {} B/s per VM  actuators: {}\n",
            std::process::id(),
            p.max_lease_ns / MS,
            p.budget_ns() as f64 / 1e9,
            p.budget_window_ns as f64 / 1e9,
            self.cfg.rate_limit,
            self.cfg.rate_limit_bytes,
            self.actuators
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(port) = self.cfg.vsock_port {
            let vms: Vec<String> = VsockRoutes::new(&self.cfg.vms)
                .iter()
                .map(|(cid, i)| format!("cid {cid} = {}", self.targets[i].name))
                .collect();
            s += &format!(
                "vsock port {port} (any CID): listening; {}; {} connection(s) from other CIDs closed\n",
                vms.join(", "),
                self.vsock_refused
            );
        }
        if let Some(d) = &self.cfg.vm_dir {
            s += &format!(
                "vm_dir {}: watching; {} VM(s) found there, {} socket(s) not served\n",
                d.display(),
                self.found.len(),
                self.skipped.len()
            );
        }
        s += "VM               PID      STATE      CHANNEL    BOOSTED  FOR_S   BOOSTS  BOOSTED_S  HELPS  MSGS   LIMITED  MALFORMED  THREADS\n";
        for (i, t) in self.targets.iter().enumerate() {
            let r = &self.rt[i];
            if r.removed {
                continue;
            }
            let st = self.arbiter.stats(i as u32).unwrap_or_default();
            let threads = self
                .journal
                .entries()
                .iter()
                .filter(|e| matches!(e, crate::actuator::Entry::Ioprio { vm, .. } if *vm == t.name))
                .count();
            s += &format!(
                "{:<16} {:<8} {:<10} {:<10} {:<8} {:<7.2} {:<7} {:<10.2} {:<6} {:<6} {:<8} {:<10} {}\n",
                t.name,
                t.pid,
                if r.alive { "running" } else { "exited" },
                if r.conn.is_some() { "connected" } else { "-" },
                if self.arbiter.is_boosted(i as u32) { "yes" } else { "no" },
                r.boosted_since.map(|b| (now - b) as f64 / 1e9).unwrap_or(0.0),
                r.boosts,
                st.boosted_ns as f64 / 1e9,
                st.helps,
                r.messages,
                r.limited,
                r.malformed,
                threads,
            );
            if let Some(e) = &r.last_error {
                s += &format!("  last actuator error: {e}\n");
            }
        }
        s
    }

    /// The Prometheus metrics (OpenMetrics text, by prometheus-client).
    fn metrics_text(&self, _now: u64) -> String {
        let mut reg = Registry::with_prefix("tandem_hostd");
        let st = |i: usize| self.arbiter.stats(i as u32).unwrap_or_default();
        let label = |i: usize| VmLabel::new(&self.targets[i].name);
        let served: Vec<usize> = (0..self.targets.len())
            .filter(|&i| !self.rt[i].removed)
            .collect();
        let vms = served.iter().copied();
        let gauges: [PerVm<'_, bool>; 2] = [
            ("boosted", "1 while the VM is boosted", &|i| {
                self.arbiter.is_boosted(i as u32)
            }),
            ("connected", "1 while the VM's channel is open", &|i| {
                self.rt[i].conn.is_some()
            }),
        ];
        for (name, help, f) in gauges {
            let fam = Family::<VmLabel, Gauge>::default();
            for i in vms.clone() {
                fam.get_or_create(&label(i)).set(f(i) as i64);
            }
            reg.register(name, help, fam);
        }
        let seconds = Family::<VmLabel, Counter<f64, AtomicU64>>::default();
        for i in vms.clone() {
            seconds
                .get_or_create(&label(i))
                .inc_by(st(i).boosted_ns as f64 / 1e9);
        }
        // Registered without the `_total` that prometheus-client adds.
        reg.register("boosted_seconds", "Time boosted", seconds);
        let counters: [PerVm<'_, u64>; 10] = [
            ("boosts", "Boosts started", &|i| self.rt[i].boosts),
            ("helps", "HELP messages taken by the arbiter", &|i| st(i).helps),
            ("leases_expired", "Leases that ran out without NO-HELP", &|i| {
                st(i).leases_expired
            }),
            ("budget_denials", "Times the budget held the VM back", &|i| {
                st(i).budget_denials
            }),
            ("messages", "Messages passed to the arbiter", &|i| self.rt[i].messages),
            ("rate_limited", "Messages coalesced or dropped by the rate limit", &|i| {
                self.rt[i].limited
            }),
            ("malformed", "Channels closed on a malformed frame", &|i| self.rt[i].malformed),
            (
                "channel_bytes",
                "Bytes read from the VM's channel (at most rate_limit_bytes a second)",
                &|i| self.rt[i].bytes,
            ),
            (
                "process_check_errors",
                "Times the VM's QEMU process could not be checked (an error reading /proc); it stays served",
                &|i| self.rt[i].check_errors,
            ),
            ("actuator_errors", "Failed actuator calls", &|i| self.rt[i].actuator_errors),
        ];
        for (name, help, f) in counters {
            let fam = Family::<VmLabel, Counter>::default();
            for i in vms.clone() {
                fam.get_or_create(&label(i)).inc_by(f(i));
            }
            reg.register(name, help, fam);
        }
        if self.cfg.vsock_port.is_some() {
            let c = Counter::<u64>::default();
            c.inc_by(self.vsock_refused);
            reg.register(
                "vsock_refused",
                "Connections to the vsock port from CIDs that are no VM's, closed",
                c,
            );
        }
        let mut s = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut s, &reg) {
            return format!("# metrics could not be encoded: {e}\n");
        }
        s
    }

    /// What a state file left by a previous hostd may name: the knobs of
    /// this configuration's VMs.
    fn recovery_scope(&self) -> RecoveryScope {
        RecoveryScope {
            vms: self
                .targets
                .iter()
                .zip(&self.rt)
                .map(|(t, r)| ScopeVm {
                    name: t.name.clone(),
                    pid: r.qemu.map(|q| q.pid),
                    cgroup: t.cgroup.clone(),
                })
                .collect(),
            blkio_mount: sys::cgroup_v1_mount("blkio"),
        }
    }

    /// Runs the daemon until a stop signal; reverts every boost before returning.
    pub fn run(mut self) -> Result<()> {
        sys::install_daemon_handlers();
        let rec = Journal::recover(&self.cfg.state_file, &self.recovery_scope())?;
        for why in &rec.refused {
            warn(&format!(
                "{}: not restored: {why}",
                self.cfg.state_file.display()
            ));
        }
        if rec.restored > 0 {
            log(&format!(
                "restored {} knob(s) left boosted by a previous hostd ({})",
                rec.restored,
                self.cfg.state_file.display()
            ));
        }
        let (tx, rx) = mpsc::channel();
        let mut created: Vec<PathBuf> = Vec::new();
        let limiters = self.limiters.clone();
        let r = (|| -> Result<()> {
            for (i, v) in self.vms.iter().enumerate() {
                let stop = self.rt[i].stop.clone();
                if let Some(p) = start_channel(i, v, tx.clone(), limiters[i].clone(), stop)? {
                    created.push(p);
                }
            }
            if let Some(dir) = &self.cfg.vm_dir {
                let wake = tx.clone();
                crate::vmdir::watch(dir, move || {
                    let _ = wake.send(Event::VmDirChanged);
                })?;
            }
            self.tx = Some(tx.clone());
            if let Some(port) = self.cfg.vsock_port {
                start_vsock(
                    port,
                    VsockRoutes::new(&self.cfg.vms),
                    tx.clone(),
                    limiters.clone(),
                )?;
            }
            start_control(&self.cfg.control, tx.clone())?;
            created.push(self.cfg.control.clone());
            if let Some(p) = start_metrics(&self.cfg.metrics_endpoint()?, tx.clone())? {
                created.push(p);
            }
            Ok(())
        })();
        drop(tx);
        if r.is_ok() {
            let vsock = match self.cfg.vsock_port {
                Some(p) => format!("; vsock port {p}"),
                None => String::new(),
            };
            let dir = match &self.cfg.vm_dir {
                Some(d) => format!(" (and those in {})", d.display()),
                None => String::new(),
            };
            log(&format!(
                "serving {} VM(s){dir}; control {}{vsock}; actuators: {}",
                self.live_vms(),
                self.cfg.control.display(),
                self.actuators
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            notify(&[
                sd_notify::NotifyState::Ready,
                sd_notify::NotifyState::Status(&format!("serving {} VM(s)", self.live_vms())),
            ]);
            self.event_loop(&rx);
            notify(&[sd_notify::NotifyState::Stopping]);
        }
        // Daemon exit: undo everything.
        let now = now_ns();
        for i in 0..self.targets.len() {
            let ch = self.arbiter.remove_vm(i as u32, now);
            self.apply(ch, now);
        }
        let rev = self.journal.revert_all();
        for p in created {
            let _ = std::fs::remove_file(p);
        }
        r?;
        rev
    }

    fn event_loop(&mut self, rx: &Receiver<Event>) {
        let mut next_rescan = now_ns() + self.cfg.rescan_ms * MS;
        // systemd's watchdog (WatchdogSec=): pinged from this loop at half
        // its period, so a stuck loop gets hostd restarted.
        let mut usec = 0u64;
        let watchdog = sd_notify::watchdog_enabled(false, &mut usec)
            .then(|| (usec / 2).saturating_mul(1000).max(MS));
        let mut next_ping = now_ns();
        while !sys::stop_requested() {
            if sys::reload_requested() {
                self.reload();
            }
            let now = now_ns();
            if let Some(period) = watchdog {
                if now >= next_ping {
                    notify(&[sd_notify::NotifyState::Watchdog]);
                    next_ping = now + period;
                }
            }
            let mut wake = next_rescan.min(now + 100 * MS);
            if watchdog.is_some() {
                wake = wake.min(next_ping);
            }
            if let Some(d) = self.arbiter.next_deadline() {
                wake = wake.min(d);
            }
            match rx.recv_timeout(Duration::from_nanos(wake.saturating_sub(now))) {
                Ok(ev) => {
                    let now = now_ns();
                    self.handle(ev, now);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = now_ns();
            if self.arbiter.next_deadline().is_some_and(|d| d <= now) {
                let ch = self.arbiter.update(now);
                self.apply(ch, now);
            }
            if now >= next_rescan {
                self.sync_vm_dir(now);
                self.rescan(now);
                next_rescan = now + self.cfg.rescan_ms * MS;
            }
        }
    }
}

/// `tandem hostd status`: asks a running hostd over its control socket.
pub fn query(control: &Path, req: &str) -> Result<String> {
    let mut s = UnixStream::connect(control).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied && !crate::is_root() {
            return err(format!(
                "{}: permission denied: hostd's control socket is root's; run this as root (e.g. sudo tandem hostd status)",
                control.display()
            ));
        }
        err(format!(
            "{}: {e} (is tandem hostd running? --control gives another socket)",
            control.display()
        ))
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| err(e.to_string()))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| err(e.to_string()))?;
    Ok(out)
}

/// Per-VM boosted flag from a status text (for tests and scripts).
pub fn boosted_from_status(status: &str) -> BTreeMap<String, bool> {
    status
        .lines()
        .skip_while(|l| !l.starts_with("VM "))
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.to_string(), *f.get(4)? == "yes"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_args_and_config() {
        let v = parse_vm_arg("name=a,socket=/tmp/a.sock,pid=12").unwrap();
        assert_eq!(v.pid, Some(12));
        // QEMU's pid may come from its QMP socket instead; one of them is needed.
        let q = parse_vm_arg("name=a,socket=/tmp/a.sock,qmp=/tmp/q.sock").unwrap();
        assert_eq!(q.pid, None);
        assert!(config(vec![q.clone()], None).validate().is_ok());
        let none = VmConfig { qmp: None, ..q };
        let e = config(vec![none], None).validate().unwrap_err().0;
        assert!(e.contains("give pid=PID or qmp=PATH"), "{e}");
        assert!(parse_vm_arg("name=a,pid=1").is_err());
        assert!(parse_vm_arg("name=a,socket=/x,pid=x").is_err());
        assert!(parse_vm_arg("name=a,socket=/x,pid=1,colour=red").is_err());
        let c = HostdConfig::from_toml(
            "metrics = \"127.0.0.1:9120\"\n[[vm]]\nname = \"a\"\nsocket = \"/tmp/a\"\npid = 5\n",
        )
        .unwrap();
        assert_eq!(c.vms.len(), 1);
        c.validate().unwrap();
        assert!(HostdConfig::from_toml("bogus = 1").is_err());
        // The budget knobs reach the policy, and bad ones are refused.
        let mut b = c.clone();
        b.budget_fraction = 0.75;
        b.budget_window_s = 30.0;
        let p = b.policy().unwrap();
        assert_eq!(p.budget_window_ns, 30_000_000_000);
        assert_eq!(p.budget_ns(), 22_500_000_000);
        for (f, w) in [(0.0, 60.0), (1.5, 60.0), (0.5, 0.0), (0.5, f64::NAN)] {
            b.budget_fraction = f;
            b.budget_window_s = w;
            let e = b.validate().unwrap_err().0;
            assert!(e.contains("budget"), "{f} {w}: {e}");
        }
        assert!(HostdConfig::default().validate().is_err());
    }

    /// A key under its old name is read, with a warning; old and new
    /// together are refused.
    #[test]
    fn deprecated_keys_are_read_with_a_warning() {
        let vm = "[[vm]]\nname = \"a\"\nsocket = \"/tmp/a\"\npid = 5\n";
        let (c, w) = HostdConfig::from_toml_warnings(&format!(
            "max_lease_ms = 700\nbfq_strict = true\n{vm}"
        ))
        .unwrap();
        assert_eq!((c.lease_ms, c.bfq_idling), (700, true));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("max_lease_ms is deprecated") && w[0].contains("lease_ms"),
            "{w:?}"
        );
        let (c, w) = HostdConfig::from_toml_warnings(&format!("lease_ms = 800\n{vm}")).unwrap();
        assert_eq!((c.lease_ms, w.len()), (800, 0));
        let e = HostdConfig::from_toml("lease_ms = 1\nmax_lease_ms = 2\n")
            .unwrap_err()
            .0;
        assert!(e.contains("both given"), "{e}");
        assert!(HostdConfig::keys().contains(&"lease_ms".to_string()));
    }

    /// The example configuration shipped in dist/ is valid as it is.
    #[test]
    fn the_example_configuration_is_valid() {
        let c = HostdConfig::from_toml(include_str!("../../../dist/hostd.toml")).unwrap();
        assert_eq!(c.vm_dir.as_deref(), Some(Path::new("/run/tandem/vms")));
        c.validate().unwrap();
    }

    fn vm(name: &str, socket: Option<&str>, cid: Option<u32>) -> VmConfig {
        VmConfig {
            name: name.into(),
            socket: socket.map(PathBuf::from),
            cid,
            pid: Some(1),
            connect: false,
            cgroup: None,
            qmp: None,
            weight: 1,
        }
    }

    fn config(vms: Vec<VmConfig>, vsock_port: Option<u32>) -> HostdConfig {
        HostdConfig {
            vms,
            vsock_port,
            ..HostdConfig::default()
        }
    }

    fn config_error(c: &HostdConfig) -> String {
        c.validate().expect_err("an invalid configuration").0
    }

    #[test]
    fn vsock_vms_in_arguments_and_config() {
        let v = parse_vm_arg("name=a,cid=7,pid=12").unwrap();
        assert_eq!((v.cid, v.socket), (Some(7), None));
        assert!(parse_vm_arg("name=a,cid=x,pid=1")
            .unwrap_err()
            .0
            .contains("cid=\"x\""));
        assert!(parse_vm_arg("name=a,pid=1")
            .unwrap_err()
            .0
            .contains("socket=PATH or cid=N"));
        let c = HostdConfig::from_toml(
            "vsock_port = 5000\n[[vm]]\nname = \"a\"\ncid = 3\npid = 5\n[[vm]]\nname = \"b\"\nsocket = \"/tmp/b\"\npid = 6\n",
        )
        .unwrap();
        assert_eq!(c.vsock_port, Some(5000));
        assert_eq!(c.vms[0].cid, Some(3));
        c.validate().unwrap();
    }

    #[test]
    fn vsock_configuration_errors_are_clear() {
        let ok = config(vec![vm("a", None, Some(5))], Some(5000));
        ok.validate().unwrap();
        let e = config_error(&config(vec![vm("a", None, Some(5))], None));
        assert!(
            e.contains("cid=5 needs hostd's vsock listener") && e.contains("--vsock-port"),
            "{e}"
        );
        let e = config_error(&config(
            vec![vm("a", None, Some(5)), vm("b", None, Some(5))],
            Some(5000),
        ));
        assert!(e.contains("VM b: cid=5 is VM a's too"), "{e}");
        let e = config_error(&config(vec![vm("a", Some("/tmp/a"), Some(5))], Some(5000)));
        assert!(e.contains("socket= and cid= both given"), "{e}");
        let e = config_error(&config(vec![vm("a", None, None)], None));
        assert!(e.contains("VM a: no channel"), "{e}");
        for cid in [0, 1, 2, u32::MAX] {
            let e = config_error(&config(vec![vm("a", None, Some(cid))], Some(5000)));
            assert!(
                e.contains(&format!("cid={cid} is not a guest's CID")),
                "{e}"
            );
        }
        let mut c = config(vec![vm("a", None, Some(5))], Some(5000));
        c.vms[0].connect = true;
        assert!(config_error(&c).contains("connect= is for socket="));
        for port in [0, u32::MAX] {
            let e = config_error(&config(vec![vm("a", None, Some(5))], Some(port)));
            assert!(e.contains(&format!("vsock_port {port}: 1 to")), "{e}");
        }
        let e = config_error(&config(vec![vm("a", Some("/tmp/a"), None)], Some(5000)));
        assert!(e.contains("no VM has cid=N"), "{e}");
        let e = config_error(&config(
            vec![vm("a", Some("/tmp/a"), None), vm("b", Some("/tmp/a"), None)],
            None,
        ));
        assert!(e.contains("socket /tmp/a is VM a's too"), "{e}");
    }

    #[test]
    fn vsock_connections_are_routed_by_peer_cid() {
        let vms = vec![
            vm("unix", Some("/tmp/u"), None),
            vm("five", None, Some(5)),
            vm("seven", None, Some(7)),
        ];
        let r = VsockRoutes::new(&vms);
        assert_eq!(r.route(5), Some(1));
        assert_eq!(r.route(7), Some(2));
        for unknown in [0, 1, 2, 3, 6, 8, u32::MAX] {
            assert_eq!(r.route(unknown), None, "CID {unknown}");
        }
        assert_eq!(r.iter().collect::<Vec<_>>(), [(5, 1), (7, 2)]);
        assert_eq!(VsockRoutes::new(&vms[..1]), VsockRoutes::default());
    }

    /// A connected socket pair standing for an accepted vsock connection
    /// (this machine cannot connect over vsock: no loopback transport) and
    /// the guest's end.
    fn pair() -> (SocketStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (SocketStream::from(std::os::fd::OwnedFd::from(a)), b)
    }

    fn hello(name: &str) -> Message {
        Message::Hello {
            version: PROTOCOL_VERSION,
            vm_name: name.into(),
        }
    }

    #[test]
    fn an_accepted_vsock_connection_is_served_as_its_vms_channel() {
        let routes =
            VsockRoutes::new(&[vm("unix", Some("/tmp/u"), None), vm("seven", None, Some(7))]);
        let (tx, rx) = mpsc::channel();
        let (host, mut guest) = pair();
        let limiters = test_limiters(2);
        let t = {
            let (routes, tx, limiters) = (routes.clone(), tx.clone(), limiters.clone());
            thread::spawn(move || dispatch_vsock(&routes, 7, host, &tx, &limiters))
        };
        let conn = match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            Event::Opened { vm: 1, conn, .. } => conn,
            _ => panic!("expected VM 1's channel to open"),
        };
        write_message(&mut guest, &hello("seven")).unwrap();
        let mut r = FrameReader::new(guest.try_clone().unwrap());
        assert_eq!(
            r.read_message().unwrap(),
            Message::HelloAck {
                version: PROTOCOL_VERSION
            }
        );
        let help = Message::Help {
            resource: policy::Resource::Io,
            reason: policy::HelpReason::Exec,
            duration_hint_ms: 500,
        };
        write_message(&mut guest, &help).unwrap();
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            Event::Msg {
                vm: 1,
                conn: c,
                msg,
            } => {
                assert_eq!((c, msg), (conn, help));
            }
            _ => panic!("expected the Help on VM 1's channel"),
        }
        // The guest goes away (both of its descriptors).
        drop((r, guest));
        loop {
            match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
                Event::Closed { vm: 1, conn: c } if c == conn => break,
                Event::Counted { vm: 1, .. } => {}
                _ => panic!("expected VM 1's channel to close"),
            }
        }
        assert_eq!(t.join().unwrap(), Some(1));

        // A CID that is no VM's: closed at once, reported.
        let (host, mut guest) = pair();
        assert_eq!(dispatch_vsock(&routes, 9, host, &tx, &limiters), None);
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            Event::VsockRefused { cid: 9 }
        ));
        let mut buf = [0u8; 8];
        assert_eq!(guest.read(&mut buf).unwrap(), 0, "closed");
    }

    #[test]
    fn a_new_vsock_connection_replaces_the_old_and_unknown_cids_are_counted() {
        let dir = std::env::temp_dir().join(format!("tandem-hostd-vsock-{}", std::process::id()));
        let qemu = crate::testkit::FakeQemu::spawn(&dir, Path::new("/bin/sleep"), &["60"]).unwrap();
        let mut c = config(vec![vm("a", None, Some(5))], Some(5000));
        c.vms[0].pid = Some(qemu.pid());
        c.ioprio = IoprioBoost::None;
        c.state_file = dir.join("state");
        c.control = dir.join("control");
        let mut h = Hostd::new(c).unwrap();
        let (s1, mut g1) = pair();
        let (s2, g2) = pair();
        h.handle(
            Event::Opened {
                vm: 0,
                conn: 1,
                stream: Stream::Socket(s1),
            },
            now_ns(),
        );
        h.handle(
            Event::Opened {
                vm: 0,
                conn: 2,
                stream: Stream::Socket(s2),
            },
            now_ns(),
        );
        let mut buf = [0u8; 8];
        assert_eq!(
            g1.read(&mut buf).unwrap(),
            0,
            "the old channel is shut down"
        );
        // The old channel's reader ends: the new one stays.
        h.handle(Event::Closed { vm: 0, conn: 1 }, now_ns());
        assert_eq!(h.rt[0].conn.as_ref().map(|c| c.0), Some(2));
        h.handle(Event::VsockRefused { cid: 9 }, now_ns());
        h.handle(Event::VsockRefused { cid: 9 }, now_ns());
        let st = h.status_text(now_ns());
        assert!(
            st.contains("vsock port 5000 (any CID): listening; cid 5 = a; 2 connection(s) from other CIDs closed"),
            "{st}"
        );
        assert!(
            st.lines()
                .any(|l| l.starts_with("a ") && l.contains("connected")),
            "{st}"
        );
        assert_eq!(boosted_from_status(&st).get("a"), Some(&false), "{st}");
        assert_eq!(boosted_from_status(&st).len(), 1, "{st}");
        assert!(h
            .metrics_text(now_ns())
            .contains("\ntandem_hostd_vsock_refused_total 2\n"));
        drop(g2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A label value unescaped as a Prometheus parser does (`\\`, `\"`,
    /// `\n`); panics on anything the format does not allow.
    fn unescape(v: &str) -> String {
        let mut out = String::new();
        let mut it = v.chars();
        while let Some(c) = it.next() {
            match c {
                '\\' => match it.next() {
                    Some('\\') => out.push('\\'),
                    Some('"') => out.push('"'),
                    Some('n') => out.push('\n'),
                    other => panic!("bad escape {other:?} in {v:?}"),
                },
                '"' | '\n' => panic!("unescaped {c:?} in {v:?}"),
                c => out.push(c),
            }
        }
        out
    }

    /// A VM named with a quote, a backslash and a line feed: every sample
    /// line of the metrics parses back (name, one label, a number) to that
    /// name. prometheus-client has no parser; `unescape` follows the text
    /// format's rules.
    #[test]
    fn metrics_escape_label_values() {
        let dir = std::env::temp_dir().join(format!("tandem-hostd-escape-{}", std::process::id()));
        let qemu = crate::testkit::FakeQemu::spawn(&dir, Path::new("/bin/sleep"), &["60"]).unwrap();
        let name = "a\"b\\c\nd";
        let sock = dir.join("s.sock");
        let mut c = config(vec![vm(name, sock.to_str(), None)], None);
        c.vms[0].pid = Some(qemu.pid());
        c.ioprio = IoprioBoost::None;
        c.state_file = dir.join("state");
        c.control = dir.join("control");
        let h = Hostd::new(c).unwrap();
        let m = h.metrics_text(now_ns());
        let mut samples = Vec::new();
        for l in m.lines().filter(|l| !l.starts_with('#')) {
            let (lhs, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}\n{m}"));
            value.parse::<f64>().unwrap_or_else(|_| panic!("{l:?}"));
            let (metric, rest) = lhs.split_once("{vm=\"").unwrap_or_else(|| panic!("{l:?}"));
            let v = rest.strip_suffix("\"}").unwrap_or_else(|| panic!("{l:?}"));
            assert_eq!(unescape(v), name, "{l:?}");
            samples.push(metric.to_string());
        }
        assert_eq!(samples.len(), 13, "{m}");
        assert!(
            samples.contains(&"tandem_hostd_boosted_seconds_total".to_string()),
            "{m}"
        );
        assert!(m.ends_with("# EOF\n"), "{m}");
        drop(qemu);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The metrics endpoint answers `GET /metrics` only.
    #[test]
    fn metrics_answer_get_metrics_only() {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            while let Ok(ev) = rx.recv() {
                if let Event::Control { reply, .. } = ev {
                    let _ = reply.send("m 1\n".to_string());
                }
            }
        });
        for (req, want) in [
            ("GET /metrics HTTP/1.0\r\n\r\n", "200 OK"),
            ("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", "200 OK"),
            ("POST /metrics HTTP/1.0\r\n\r\n", "405 Method Not Allowed"),
            ("GET / HTTP/1.0\r\n\r\n", "404 Not Found"),
            ("\r\n\r\n", "400 Bad Request"),
        ] {
            let (a, mut b) = UnixStream::pair().unwrap();
            b.write_all(req.as_bytes()).unwrap();
            let t = {
                let tx = tx.clone();
                thread::spawn(move || http_answer(a, &tx))
            };
            let mut out = String::new();
            b.read_to_string(&mut out).unwrap();
            t.join().unwrap();
            assert!(
                out.starts_with(&format!("HTTP/1.0 {want}\r\n")),
                "{req:?}: {out}"
            );
            assert_eq!(out.ends_with("\r\n\r\nm 1\n"), want == "200 OK", "{out}");
        }
    }

    fn test_limiters(n: usize) -> Vec<SharedLimiter> {
        let c = HostdConfig::default();
        (0..n)
            .map(|_| {
                Arc::new(Mutex::new(ChannelLimiter::new(
                    &c.channel_limits(),
                    now_ns(),
                )))
            })
            .collect()
    }
}
