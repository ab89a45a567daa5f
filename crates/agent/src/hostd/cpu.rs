//! hostd's CPU boost: which HELPs ask for it, and the reconciliation of
//! each VM's vCPU knob with its arbiter's grant and its cap
//! ([`crate::cpuboost::BoostCap`]).

use policy::{Message, Resource};

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

    /// Brings every VM's vCPUs to what the CPU arbiter grants, within the
    /// cap: boosts those newly granted, restores those no longer granted
    /// or capped.
    pub(super) fn update_cpu(&mut self, now: u64) {
        if self.cpu_actuator.is_none() {
            return;
        }
        let _ = self.cpu_arbiter.update(now);
        for i in 0..self.rt.len() {
            let want = self.rt[i].alive && self.cpu_arbiter.is_boosted(i as u32);
            let was_throttled = self.rt[i].cpu_cap.throttled(now);
            let on = self.rt[i].cpu_cap.step(now, want);
            if on && !self.rt[i].cpu_on {
                self.cpu_boost(i, now);
            } else if !on && self.rt[i].cpu_on {
                self.cpu_unboost(i, now);
                if self.rt[i].cpu_cap.throttled(now) && !was_throttled {
                    self.log_boost(i, now, "CPU boost capped: throttled");
                }
            }
        }
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
        let vcpus = self
            .journal
            .entries()
            .iter()
            .filter(|e| {
                matches!(e, crate::actuator::Entry::Sched { vm, .. } if *vm == self.targets[i].name)
            })
            .count();
        Some(format!(
            "  cpu: {state}  boosts {}  throttles {}  granted_s {:.2}  helps {}  vcpus_boosted {vcpus}\n",
            r.cpu_boosts,
            r.cpu_cap.throttles,
            st.boosted_ns as f64 / 1e9,
            st.helps,
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
