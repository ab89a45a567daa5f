//! hostd's state machine: what each event does to the arbiter, the VMs and
//! the actuators.

use super::channel::{start_channel, ChannelCtx};
use super::{log, warn, Event, Hostd, VmConfig, VmRuntime};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use policy::{BoostChange, Message, MS};

use crate::actuator::VmTarget;
use crate::vmproc::{self, Liveness};
use crate::{err, now_ns};
use policy::ratelimit::ChannelLimiter;
use std::sync::atomic::Ordering;

impl Hostd {
    /// One line of the boost log (`log_boosts`): seconds since start, the
    /// VM, what happened, and its use of the budget window.
    pub(super) fn log_boost(&self, i: usize, now: u64, what: &str) {
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

    pub(super) fn apply(&mut self, changes: Vec<BoostChange>, now: u64) {
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

    /// Asks QEMU which threads are VM `i`'s vCPUs, and under TCG which
    /// delivers their timers, once per QEMU process; on failure every
    /// thread is boosted by the I/O actuators, and the error is shown.
    pub(super) fn map_threads(&mut self, i: usize) {
        let Some(sock) = self.vms[i].qmp.clone() else {
            return;
        };
        let asks = self.rt[i].boosts + self.rt[i].cpu_boosts;
        if self.rt[i].qmp_done || self.rt[i].qmp_asked_at == Some(asks) {
            return;
        }
        self.rt[i].qmp_asked_at = Some(asks);
        match crate::qmp::query_threads(&sock) {
            Ok(t) => {
                let timers = t.timer_tids(self.targets[i].pid);
                log(&format!(
                    "VM {}: QMP: iothreads {:?}, vCPU threads {:?} (left to the CPU actuators), accelerator {:?}, timer threads {timers:?} (boosted with the vCPUs)",
                    self.targets[i].name, t.iothreads, t.vcpus, t.accel
                ));
                self.targets[i].vcpu_tids = t.vcpu_tids();
                self.targets[i].timer_tids = timers;
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
    pub(super) fn still_running(&mut self, i: usize, now: u64) -> bool {
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
    pub(super) fn vm_exited(&mut self, i: usize, now: u64) {
        self.rt[i].alive = false;
        log(&format!(
            "VM {}: process {} exited",
            self.targets[i].name, self.targets[i].pid
        ));
        let ch = self.arbiter.remove_vm(i as u32, now);
        self.apply(ch, now);
        self.cpu_arbiter.remove_vm(i as u32, now);
        self.update_cpu(now);
        // Anything left (the arbiter had it unboosted already).
        let _ = self.journal.revert_vm(&self.targets[i].name);
        if let Some((_, s)) = self.rt[i].conn.take() {
            s.shutdown();
        }
    }

    /// The VMs served now (not those dropped from `vm_dir`).
    pub(super) fn live_vms(&self) -> usize {
        self.rt.iter().filter(|r| !r.removed).count()
    }

    /// Reads `vm_dir` again: serves the VMs that appeared, drops those that
    /// went (their QMP socket gone or their QEMU exited).
    pub(super) fn sync_vm_dir(&mut self, now: u64) {
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
    pub(super) fn add_found(&mut self, f: crate::vmdir::FoundVm) {
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
            timer_tids: Vec::new(),
        };
        let rt = VmRuntime {
            alive: true,
            qemu: Some(qemu),
            cpu_cap: self.cfg.cpu_cap(),
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
        self.cpu_arbiter.add_vm(i as u32, 1);
        self.skipped.remove(&f.qmp);
        self.found.insert(f.qmp, i);
        if let Some(tx) = self.tx.clone() {
            let ctx = ChannelCtx {
                vm: i,
                tx,
                limiter: self.limiters[i].clone(),
            };
            if let Err(e) = start_channel(ctx, &self.vms[i], self.rt[i].stop.clone()) {
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
    pub(super) fn drop_vm(&mut self, i: usize, now: u64) {
        if self.rt[i].alive {
            self.rt[i].alive = false;
            let ch = self.arbiter.remove_vm(i as u32, now);
            self.apply(ch, now);
            self.cpu_arbiter.remove_vm(i as u32, now);
            self.update_cpu(now);
            let _ = self.journal.revert_vm(&self.targets[i].name);
        } else {
            self.arbiter.remove_vm(i as u32, now);
            self.cpu_arbiter.remove_vm(i as u32, now);
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
    pub(super) fn boost(&mut self, i: usize) {
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

    pub(super) fn rescan(&mut self, now: u64) {
        for i in 0..self.targets.len() {
            if self.arbiter.is_boosted(i as u32) {
                // Checks the process first.
                self.boost(i);
            } else {
                self.still_running(i, now);
            }
        }
    }

    pub(super) fn handle(&mut self, ev: Event, now: u64) {
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
                let (io, cpu) = self.resources_of(&msg);
                match msg {
                    Message::Help {
                        duration_hint_ms,
                        reason,
                        ..
                    } => {
                        let lease = duration_hint_ms as u64 * MS;
                        if io {
                            if !self.arbiter.wants_help(vm as u32) {
                                self.log_boost(vm, now, &format!("HELP ({reason:?})"));
                            }
                            self.arbiter.help_for(vm as u32, now, lease, reason)
                        }
                        if cpu {
                            self.cpu_help(vm, now, lease, reason)
                        }
                    }
                    Message::NoHelp { .. } => {
                        if io {
                            if self.arbiter.wants_help(vm as u32) {
                                self.log_boost(vm, now, "NO-HELP");
                            }
                            self.arbiter.no_help(vm as u32, now)
                        }
                        if cpu {
                            self.cpu_no_help(vm, now)
                        }
                    }
                    _ => {}
                }
                let ch = self.arbiter.update(now);
                self.apply(ch, now);
                self.update_cpu(now);
            }
            Event::Closed { vm, conn } => {
                if self.rt[vm].conn.as_ref().map(|c| c.0) == Some(conn) {
                    self.rt[vm].conn = None;
                    // A guest that goes away needs no more help.
                    if self.rt[vm].alive {
                        self.arbiter.no_help(vm as u32, now);
                        let ch = self.arbiter.update(now);
                        self.apply(ch, now);
                        self.cpu_no_help(vm, now);
                        self.update_cpu(now);
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
}
