//! The `cfsv` mode in the state machine: each period every live VM's QEMU
//! threads are sampled and classified, and each thread's boost brought to
//! its class (see [`crate::cfsv`]).

use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;

use super::metrics::{PerVm, VmLabel};
use super::{log, warn, Hostd};
use crate::cfsv::VmCfsv;

impl Hostd {
    /// When the next sample is due.
    pub(super) fn cfsv_deadline(&self) -> Option<u64> {
        self.cfsv.as_ref().map(|_| self.cfsv_next)
    }

    /// One period: samples, classifies and boosts every live VM's threads.
    pub(super) fn cfsv_step(&mut self, now: u64) {
        let Some(act) = self.cfsv.clone() else {
            return;
        };
        self.cfsv_next = now + self.cfg.cfsv_period_ms * policy::MS;
        for i in 0..self.targets.len() {
            let pid = self.targets[i].pid;
            let live = self.rt[i].alive && !self.rt[i].removed && pid != 0;
            let same = self.cfsv_vms.get(&i).is_some_and(|v| v.pid == pid);
            if !live || !same {
                // Gone, or another QEMU in the slot: the journal's entries
                // of the VM went with vm_exited/drop_vm.
                self.cfsv_vms.remove(&i);
            }
            if !live {
                continue;
            }
            if self.vms[i].qmp.is_some() && !self.rt[i].qmp_done {
                self.map_threads(i);
            }
            let v = self
                .cfsv_vms
                .entry(i)
                .or_insert_with(|| VmCfsv::new(&self.targets[i].name, pid));
            v.sample(now, &self.targets[i].vcpu_tids, crate::now_ns);
            let before = v.errors;
            let r = v.reconcile(&act, &mut self.journal);
            if let Err(e) = r {
                if before == 0 {
                    warn(&format!("cfsv: {e}"));
                }
            }
        }
    }

    /// Logs the settings at start.
    pub(super) fn log_cfsv_settings(&self) {
        if let Some(a) = &self.cfsv {
            log(&format!(
                "cfsv: every {} ms, I/O-related threads boosted by {} (nice {}, SCHED_RR {}, cpu.shares {}, SCHED_DEADLINE {} us per ms)",
                self.cfg.cfsv_period_ms,
                a.boost.name(),
                a.nice,
                a.rt_priority,
                a.shares,
                a.dl_runtime_ns / 1000
            ));
        }
    }

    /// The status line of VM `i`.
    pub(super) fn cfsv_status(&self, i: usize) -> Option<String> {
        let a = self.cfsv.as_ref()?;
        let v = self.cfsv_vms.get(&i);
        let c = v.map(|v| v.counts()).unwrap_or_default();
        Some(format!(
            "  cfsv: {}  threads {}  io_related {}  boosted {}  samples {}  errors {}\n",
            a.boost.name(),
            c.threads,
            c.io_related,
            c.boosted,
            v.map_or(0, |v| v.samples),
            v.map_or(0, |v| v.errors),
        ))
    }

    /// The `cfsv` metrics, per VM.
    pub(super) fn register_cfsv(&self, reg: &mut Registry, served: &[usize]) {
        let label = |i: usize| VmLabel::new(&self.targets[i].name);
        let counts = |i: usize| {
            self.cfsv_vms
                .get(&i)
                .map(|v| v.counts())
                .unwrap_or_default()
        };
        let gauges: [PerVm<'_, usize>; 3] = [
            ("cfsv_threads", "QEMU threads cfsv samples", &|i| {
                counts(i).threads
            }),
            (
                "cfsv_io_related",
                "Threads cfsv classifies as I/O-related",
                &|i| counts(i).io_related,
            ),
            ("cfsv_boosted", "Threads cfsv boosts now", &|i| {
                counts(i).boosted
            }),
        ];
        for (name, help, f) in gauges {
            let fam = Family::<super::metrics::VmLabel, Gauge>::default();
            for &i in served {
                fam.get_or_create(&label(i)).set(f(i) as i64);
            }
            reg.register(name, help, fam);
        }
        let counters: [PerVm<'_, u64>; 2] = [
            ("cfsv_samples", "schedstat files read", &|i| {
                self.cfsv_vms.get(&i).map_or(0, |v| v.samples)
            }),
            (
                "cfsv_errors",
                "Threads cfsv failed to boost or restore",
                &|i| self.cfsv_vms.get(&i).map_or(0, |v| v.errors),
            ),
        ];
        for (name, help, f) in counters {
            let fam = Family::<VmLabel, Counter>::default();
            for &i in served {
                fam.get_or_create(&label(i)).inc_by(f(i));
            }
            reg.register(name, help, fam);
        }
    }
}
