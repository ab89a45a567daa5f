//! hostd's CPU boost: which HELPs ask for it, and the reconciliation of
//! each VM's vCPU knob with its arbiter's grant and its cap
//! ([`crate::cpuboost::BoostCap`]).

use policy::{HelpReason, Message, Resource};

use super::{log, warn, Hostd};
use crate::actuator::Actuator;

impl Hostd {
    /// Whether a HELP or NO-HELP is for the I/O boost, the CPU boost, or
    /// both (`help_all`). Without a CPU actuator CPU messages are ignored.
    pub(super) fn resources_of(&self, msg: &Message) -> (bool, bool) {
        let resource = match msg {
            Message::Help { resource, .. } | Message::NoHelp { resource } => *resource,
            _ => return (false, false),
        };
        let cpu_on = self.cpu_actuator.is_some();
        if self.cfg.help_all && cpu_on {
            return (true, true);
        }
        (
            resource == Resource::Io,
            resource == Resource::Cpu && cpu_on,
        )
    }

    /// When the CPU boosts need [`Hostd::update_cpu`] next: a lease or
    /// budget of the CPU arbiter, or a cap.
    pub(super) fn cpu_deadline(&self) -> Option<u64> {
        self.cpu_actuator.as_ref()?;
        let caps = self.rt.iter().filter_map(|r| r.cpu_cap.next_deadline());
        self.cpu_arbiter
            .next_deadline()
            .into_iter()
            .chain(caps)
            .min()
    }

    /// A HELP for the CPU: to the arbiter, or kept for the end of the
    /// throttle if the cap holds the VM off now.
    pub(super) fn cpu_help(&mut self, vm: usize, now: u64, lease: u64, reason: HelpReason) {
        let lease = lease.min(self.cpu_arbiter.config().max_lease_ns);
        self.rt[vm].cpu_asked = Some((now + lease, reason));
        if !self.rt[vm].cpu_cap.throttled(now) {
            self.cpu_arbiter.help_for(vm as u32, now, lease, reason)
        }
    }

    /// A NO-HELP for the CPU (or the guest gone).
    pub(super) fn cpu_no_help(&mut self, vm: usize, now: u64) {
        self.rt[vm].cpu_asked = None;
        self.cpu_arbiter.no_help(vm as u32, now)
    }

    /// Brings every VM's vCPUs to what the CPU arbiter grants, within the
    /// cap: boosts those newly granted, restores those no longer granted
    /// or capped. A capped VM gives its arbitration slot back (and spends
    /// no budget while throttled); its request, if it still stands, goes
    /// to the arbiter again when the throttle ends.
    pub(super) fn update_cpu(&mut self, now: u64) {
        if self.cpu_actuator.is_none() {
            return;
        }
        for i in 0..self.rt.len() {
            let ended = self.rt[i].cpu_cap.throttle_over(now);
            if let (true, Some((until, reason))) = (ended, self.rt[i].cpu_asked) {
                if until > now && self.rt[i].alive {
                    self.cpu_arbiter
                        .help_for(i as u32, now, until - now, reason);
                }
            }
        }
        let _ = self.cpu_arbiter.update(now);
        if self.reconcile_cpu(now) {
            // A capped VM gave its slot back: another may take it now.
            let _ = self.cpu_arbiter.update(now);
            self.reconcile_cpu(now);
        }
    }

    /// One pass of [`Hostd::update_cpu`]; returns whether the cap throttled a VM.
    fn reconcile_cpu(&mut self, now: u64) -> bool {
        let mut capped = false;
        for i in 0..self.rt.len() {
            let want = self.rt[i].alive && self.cpu_arbiter.is_boosted(i as u32);
            let on = self.rt[i].cpu_cap.step(now, want);
            if on && !self.rt[i].cpu_on {
                self.cpu_boost(i, now);
            } else if !on && self.rt[i].cpu_on {
                self.cpu_unboost(i, now);
                if self.rt[i].cpu_cap.throttled(now) {
                    self.cpu_arbiter.no_help(i as u32, now);
                    self.log_boost(i, now, "CPU boost capped: throttled");
                    capped = true;
                }
            }
        }
        capped
    }

    fn cpu_boost(&mut self, i: usize, now: u64) {
        self.rt[i].cpu_boosts += 1;
        self.rt[i].cpu_on = true;
        self.log_boost(i, now, "CPU boost");
        self.map_threads(i);
        let Some(a) = self.cpu_actuator.as_mut() else {
            return;
        };
        if let Err(e) = a.boost(&self.targets[i], &mut self.journal) {
            self.rt[i].actuator_errors += 1;
            self.rt[i].last_error = Some(e.0.clone());
            warn(&format!(
                "VM {}: CPU boost ({}): {e}",
                self.targets[i].name,
                a.name()
            ));
        }
    }

    fn cpu_unboost(&mut self, i: usize, now: u64) {
        self.rt[i].cpu_on = false;
        let Some(a) = self.cpu_actuator.as_mut() else {
            return;
        };
        if let Err(e) = a.unboost(&self.targets[i], &mut self.journal) {
            self.rt[i].actuator_errors += 1;
            self.rt[i].last_error = Some(e.0.clone());
            warn(&format!(
                "VM {}: CPU unboost ({}): {e}",
                self.targets[i].name,
                a.name()
            ));
        }
        self.log_boost(i, now, "CPU unboost");
    }

    /// The status line of VM `i`'s CPU boost, if hostd boosts CPUs.
    pub(super) fn cpu_status(&self, i: usize, now: u64) -> Option<String> {
        self.cpu_actuator.as_ref()?;
        let r = &self.rt[i];
        let st = self.cpu_arbiter.stats(i as u32).unwrap_or_default();
        let state = if r.cpu_on {
            "boosted"
        } else if r.cpu_cap.throttled(now) {
            "throttled"
        } else {
            "no"
        };
        let t = &self.targets[i];
        let boosted = |tids: &[u32]| {
            self.journal
                .entries()
                .iter()
                .filter(|e| {
                    matches!(e, crate::actuator::Entry::Sched { vm, tid, .. } if *vm == t.name && tids.contains(tid))
                })
                .count()
        };
        Some(format!(
            "  cpu: {state}  boosts {}  throttles {}  granted_s {:.2}  helps {}  vcpus_boosted {}  timer_threads_boosted {}\n",
            r.cpu_boosts,
            r.cpu_cap.throttles,
            st.boosted_ns as f64 / 1e9,
            st.helps,
            boosted(&t.vcpu_tids),
            boosted(&t.timer_tids),
        ))
    }

    /// Logs the CPU boost's settings at start.
    pub(super) fn log_cpu_settings(&self) {
        if let Some(a) = &self.cpu_actuator {
            log(&format!(
                "CPU boost: {} (SCHED_RR priority {}, nice {}, cpu.shares {}), at most {} ms at a time then off {} ms{}",
                a.name(),
                a.rt_priority,
                a.nice,
                a.shares,
                self.cfg.cpu_max_boost_ms,
                self.cfg.cpu_throttle_ms,
                if self.cfg.help_all {
                    "; help_all: every HELP boosts I/O and vCPUs"
                } else {
                    ""
                }
            ));
        }
    }
}
