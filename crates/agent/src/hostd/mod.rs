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
//! Either way a connection goes to the same per-VM code (`channel::ChannelCtx::serve`).
//!
//! Every boost is undone on NO-HELP, on lease expiry (the arbiter's), when
//! the channel closes, when the VM's process exits, on SIGINT/SIGTERM/SIGHUP,
//! and at the next start after a crash (the [`Journal`] state file).

mod cfsv;
mod channel;
mod config;
mod control;
mod cpu;
mod metrics;
mod state;
#[cfg(test)]
mod tests;

pub use channel::VsockRoutes;
pub use config::*;
pub use control::{boosted_from_status, query};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use policy::{Arbiter, IoprioBoost, Message, PolicyConfig, MS};

use crate::actuator::{
    Actuator, BfqIdlingActuator, CgroupMoveActuator, CgroupWeightActuator, IoprioActuator, Journal,
    RecoveryScope, ScopeVm, VmTarget,
};
use crate::cpuboost::{BoostCap, CpuActuator};
use crate::transport::Stream;
use crate::vmproc::ProcessId;
use crate::{err, now_ns, sys, Result};
use policy::ratelimit::ChannelLimiter;
use std::sync::atomic::AtomicBool;

use channel::{lock, start_channel, start_vsock, ChannelCtx, SharedLimiter, VsockCtx};
use control::{start_control, start_metrics};

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
    /// The boost (count of I/O and CPU boosts) at which QMP was last
    /// asked: at most once per boost, so a stuck QEMU does not stall the
    /// event loop at each rescan.
    qmp_asked_at: Option<u64>,
    /// The cap on its CPU boost.
    cpu_cap: BoostCap,
    /// Its vCPUs are boosted now.
    cpu_on: bool,
    /// CPU boosts started.
    cpu_boosts: u64,
    /// The guest's CPU request: until when (its lease) and why; kept while
    /// the cap throttles the VM (its HELPs then do not reach the arbiter)
    /// and handed to the arbiter again when the throttle ends.
    cpu_asked: Option<(u64, policy::HelpReason)>,
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

/// The daemon. Runs until SIGINT/SIGTERM/SIGHUP.
pub struct Hostd {
    cfg: HostdConfig,
    arbiter: Arbiter,
    /// The CPU boosts' leases, budgets and arbitration (as the I/O ones',
    /// apart from them: a VM may hold one and not the other).
    cpu_arbiter: Arbiter,
    /// The vCPUs' knob, if `cpu_boost` asks for one.
    cpu_actuator: Option<CpuActuator>,
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
    /// The `cfsv` mode's boost, if it is on.
    cfsv: Option<crate::cfsv::CfsvActuator>,
    /// Its threads and counters, by VM slot.
    cfsv_vms: BTreeMap<usize, crate::cfsv::VmCfsv>,
    /// Its next sample.
    cfsv_next: u64,
}

/// The CPU arbiter's policy: the I/O one's leases and budget, and as many
/// slots as the host has CPUs. Design choice: one boosted vCPU per host CPU
/// gets a CPU of its own; more would only take turns among themselves.
fn cpu_policy(io: PolicyConfig) -> PolicyConfig {
    PolicyConfig {
        max_boosted: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..io
    }
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
        "the CPU boost",
        (
            old.cpu_boost,
            old.cpu_rt_priority,
            old.cpu_nice,
            old.cpu_shares,
            old.cpu_max_boost_ms,
            old.cpu_throttle_ms,
            old.help_all,
        ) != (
            new.cpu_boost,
            new.cpu_rt_priority,
            new.cpu_nice,
            new.cpu_shares,
            new.cpu_max_boost_ms,
            new.cpu_throttle_ms,
            new.help_all,
        ),
    );
    differ(
        "cfsv",
        (
            old.cfsv,
            old.cfsv_boost,
            old.cfsv_period_ms,
            old.cfsv_nice,
            old.cfsv_rt_priority,
            old.cfsv_shares,
            old.cfsv_dl_runtime_us,
        ) != (
            new.cfsv,
            new.cfsv_boost,
            new.cfsv_period_ms,
            new.cfsv_nice,
            new.cfsv_rt_priority,
            new.cfsv_shares,
            new.cfsv_dl_runtime_us,
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
        let mut cpu_arbiter = Arbiter::try_new(cpu_policy(cfg.policy()?)).map_err(err)?;
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
            cpu_arbiter.add_vm(i as u32, v.weight);
            targets.push(VmTarget {
                name: v.name.clone(),
                pid: qemu.map(|q| q.pid).unwrap_or(0),
                cgroup: v.cgroup.clone(),
                vcpu_tids: Vec::new(),
                timer_tids: Vec::new(),
            });
            rt.push(VmRuntime {
                alive: qemu.is_some(),
                qemu,
                cpu_cap: cfg.cpu_cap(),
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
        let cfsv = cfg.cfsv_actuator()?;
        let mut h = Hostd {
            cfsv,
            cfsv_vms: BTreeMap::new(),
            cfsv_next: now,
            vms: cfg.vms.clone(),
            cpu_actuator: cfg.cpu_actuator(),
            cfg,
            arbiter,
            cpu_arbiter,
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
            cpu_mount: sys::cgroup_v1_mount("cpu"),
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
        if !self
            .cfsv
            .as_ref()
            .is_some_and(|a| a.boost == crate::cfsv::CfsvBoost::Shares)
        {
            crate::cfsv::remove_leftover_group();
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
                let ctx = ChannelCtx {
                    vm: i,
                    tx: tx.clone(),
                    limiter: limiters[i].clone(),
                };
                if let Some(p) = start_channel(ctx, v, self.rt[i].stop.clone())? {
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
                let ctx = VsockCtx {
                    routes: VsockRoutes::new(&self.cfg.vms),
                    tx: tx.clone(),
                    limiters: limiters.clone(),
                };
                start_vsock(port, ctx)?;
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
            self.log_cpu_settings();
            self.log_cfsv_settings();
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
            self.cpu_arbiter.remove_vm(i as u32, now);
        }
        self.update_cpu(now);
        let rev = self.journal.revert_all();
        if let Some(a) = &self.cfsv {
            a.finish();
        }
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
            if let Some(d) = self.cpu_deadline() {
                wake = wake.min(d);
            }
            if let Some(d) = self.cfsv_deadline() {
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
            if self.cpu_deadline().is_some_and(|d| d <= now) {
                self.update_cpu(now);
            }
            if self.cfsv_deadline().is_some_and(|d| d <= now) {
                self.cfsv_step(now);
            }
            if now >= next_rescan {
                self.sync_vm_dir(now);
                self.rescan(now);
                next_rescan = now + self.cfg.rescan_ms * MS;
            }
        }
    }
}
