//! What hostd reports: the status table and the Prometheus metrics.

use super::{Hostd, VsockRoutes};

use policy::MS;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A VM's name as a label value, escaped as the exposition format asks
/// (backslash, double quote and line feed as `\\`, `\"`, `\n`):
/// prometheus-client 0.24 writes label values as they are (its issue 151).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) struct VmName(String);

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
pub(super) type PerVm<'a, T> = (&'a str, &'a str, &'a dyn Fn(usize) -> T);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VmLabel {
    vm: VmName,
}

impl VmLabel {
    pub(super) fn new(name: &str) -> VmLabel {
        VmLabel {
            vm: VmName(name.to_string()),
        }
    }
}

impl Hostd {
    pub(super) fn status_text(&self, now: u64) -> String {
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
            if let Some(l) = self.cpu_status(i, now) {
                s += &l;
            }
            if let Some(l) = self.cfsv_status(i) {
                s += &l;
            }
            if let Some(e) = &r.last_error {
                s += &format!("  last actuator error: {e}\n");
            }
        }
        s
    }

    /// The CPU boost's metrics, per VM.
    fn register_cpu(&self, reg: &mut Registry, served: &[usize]) {
        let label = |i: usize| VmLabel::new(&self.targets[i].name);
        let on = Family::<VmLabel, Gauge>::default();
        for &i in served {
            on.get_or_create(&label(i)).set(self.rt[i].cpu_on as i64);
        }
        reg.register("cpu_boosted", "1 while the VM's vCPUs are boosted", on);
        let counters: [PerVm<'_, u64>; 2] = [
            ("cpu_boosts", "CPU boosts started", &|i| {
                self.rt[i].cpu_boosts
            }),
            (
                "cpu_throttles",
                "CPU boosts ended by the cap (cpu_max_boost_ms)",
                &|i| self.rt[i].cpu_cap.throttles,
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

    /// The Prometheus metrics (OpenMetrics text, by prometheus-client).
    pub(super) fn metrics_text(&self, _now: u64) -> String {
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
        if self.cpu_actuator.is_some() {
            self.register_cpu(&mut reg, &served);
        }
        if self.cfsv.is_some() {
            self.register_cfsv(&mut reg, &served);
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
}
