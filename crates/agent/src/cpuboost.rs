//! hostd's CPU boost: the VM's vCPU threads (QMP's `query-cpus-fast`),
//! favoured with `SCHED_RR`, a nice value or the VM's cgroup v1
//! `cpu.shares` ([`CpuActuator`]), for at most a capped time at once
//! ([`BoostCap`]), as pvsched does. Under TCG the thread that fires the
//! vCPUs' timers, QEMU's main loop, is boosted with them
//! ([`crate::qmp::QemuThreads::timer_tids`]): a `SCHED_RR` vCPU whose
//! timer thread waits behind the host's loops wakes no sooner than it.
//! QEMU's other threads are left to the I/O actuators.
//!
//! Safety: RT throttling (`/proc/sys/kernel/sched_rt_runtime_us`) is never
//! changed, and no `SCHED_RR` boost is made while it is off; only threads
//! that QMP names and that belong to the VM's QEMU process are touched;
//! every original value is in the [`Journal`] first, so an exit, a crash
//! (at the next start) or the end of the boost restores it.

use std::path::PathBuf;
use std::str::FromStr;

use policy::{Nanos, Resource, MS};
use serde::{Deserialize, Serialize};

use crate::actuator::{Actuator, Entry, Journal, VmTarget};
use crate::{err, sys, Result};

/// How a boosted VM's vCPUs are favoured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuBoostKind {
    /// No CPU boost (CPU HELPs are ignored).
    #[default]
    Off,
    /// `SCHED_RR` at `cpu_rt_priority`: the vCPU preempts every normal task
    /// on its CPU, within the kernel's RT throttling.
    Rr,
    /// A lower nice value (`cpu_nice`): a larger CFS weight.
    Nice,
    /// The VM's cgroup v1 `cpu.shares` raised to `cpu_shares`.
    Shares,
}

impl CpuBoostKind {
    pub const NAMES: &'static str = "off, rr, nice, shares";
}

impl FromStr for CpuBoostKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "off" => Ok(CpuBoostKind::Off),
            "rr" => Ok(CpuBoostKind::Rr),
            "nice" => Ok(CpuBoostKind::Nice),
            "shares" => Ok(CpuBoostKind::Shares),
            _ => Err(format!(
                "{s:?} is no CPU boost; accepted: {}",
                CpuBoostKind::NAMES
            )),
        }
    }
}

/// The cap on one boost: on for at most `max_ns` at a time, then off
/// (throttled) for `throttle_ns` whatever the guest asks, then on again if
/// it still asks. pvsched caps a boosted vCPU at 1 s the same way, so that
/// a guest that always asks cannot keep a host CPU; the budget then bounds
/// its share over the budget window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoostCap {
    pub max_ns: Nanos,
    pub throttle_ns: Nanos,
    state: CapState,
    /// Times the cap ended a boost.
    pub throttles: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CapState {
    Off,
    On { since: Nanos },
    Throttled { until: Nanos },
}

impl BoostCap {
    pub fn new(max_ns: Nanos, throttle_ns: Nanos) -> BoostCap {
        BoostCap {
            max_ns,
            throttle_ns,
            state: CapState::Off,
            throttles: 0,
        }
    }

    /// Whether the boost is on at `now`, given whether the arbiter grants
    /// it (`want`).
    pub fn step(&mut self, now: Nanos, want: bool) -> bool {
        self.state = match self.state {
            CapState::Throttled { until } if now < until => self.state,
            CapState::On { since } if want && now.saturating_sub(since) >= self.max_ns => {
                self.throttles += 1;
                CapState::Throttled {
                    until: now + self.throttle_ns,
                }
            }
            CapState::On { .. } if want => self.state,
            _ if want => CapState::On { since: now },
            _ => CapState::Off,
        };
        matches!(self.state, CapState::On { .. })
    }

    /// Whether the cap holds the boost off now.
    pub fn throttled(&self, now: Nanos) -> bool {
        matches!(self.state, CapState::Throttled { until } if now < until)
    }

    /// Whether a throttle ended by `now` that [`BoostCap::step`] has not
    /// seen yet: the moment to hand a standing request back to the arbiter.
    pub fn throttle_over(&self, now: Nanos) -> bool {
        matches!(self.state, CapState::Throttled { until } if now >= until)
    }

    /// When [`BoostCap::step`] must be called next: the end of the boost's
    /// allowance or of the throttle.
    pub fn next_deadline(&self) -> Option<Nanos> {
        match self.state {
            CapState::Off => None,
            CapState::On { since } => Some(since + self.max_ns),
            CapState::Throttled { until } => Some(until),
        }
    }
}

impl Default for BoostCap {
    /// pvsched's: 1 s boosted at most, then 1 s off.
    fn default() -> Self {
        BoostCap::new(1000 * MS, 1000 * MS)
    }
}

/// The CPU actuator's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuActuator {
    pub kind: CpuBoostKind,
    /// `SCHED_RR` priority (1-99).
    pub rt_priority: i32,
    /// Nice value of a boosted vCPU (-20 to 19).
    pub nice: i32,
    /// `cpu.shares` of a boosted VM's group.
    pub shares: u64,
}

impl Actuator for CpuActuator {
    fn name(&self) -> &'static str {
        match self.kind {
            CpuBoostKind::Off => "cpu-off",
            CpuBoostKind::Rr => "cpu-rr",
            CpuBoostKind::Nice => "cpu-nice",
            CpuBoostKind::Shares => "cpu-shares",
        }
    }

    fn resource(&self) -> Resource {
        Resource::Cpu
    }

    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        match self.kind {
            CpuBoostKind::Off => Ok(0),
            CpuBoostKind::Shares => self.boost_shares(vm, j),
            CpuBoostKind::Rr | CpuBoostKind::Nice => self.boost_vcpus(vm, j),
        }
    }
}

impl CpuActuator {
    /// `SCHED_RR` or nice on each vCPU thread and each thread that
    /// delivers their timers; a thread that is not the VM's QEMU's is
    /// refused (the others are boosted).
    fn boost_vcpus(&self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        if vm.vcpu_tids.is_empty() {
            return Err(err(format!(
                "VM {}: no vCPU threads known (QMP named none; give the VM qmp=): its CPU is not boosted",
                vm.name
            )));
        }
        if self.kind == CpuBoostKind::Rr {
            rt_throttling_on()?;
        }
        let (mut changed, mut refused) = (0, Vec::new());
        for &tid in vm.vcpu_tids.iter().chain(&vm.timer_tids) {
            let start = match vcpu_of(vm, tid) {
                Ok(s) => s,
                Err(e) => {
                    refused.push(e.0);
                    continue;
                }
            };
            if j.entries().iter().any(
                |e| matches!(e, Entry::Sched { tid: t, start: s, .. } if *t == tid && *s == start),
            ) {
                continue;
            }
            let orig = sys::sched_get(tid).map_err(|e| err(format!("thread {tid}: {e}")))?;
            j.add(Entry::Sched {
                vm: vm.name.clone(),
                tid,
                start,
                orig,
            })?;
            let r = match self.kind {
                CpuBoostKind::Rr => sys::sched_set_policy(tid, libc::SCHED_RR, self.rt_priority),
                _ => sys::set_nice(tid, self.nice),
            };
            match r {
                Ok(()) => changed += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    return Err(err(format!(
                        "thread {tid}: {} failed: {e}{}",
                        self.name(),
                        if e.raw_os_error() == Some(libc::EPERM) {
                            " (with RT group scheduling, QEMU's cpu group needs cpu.rt_runtime_us)"
                        } else {
                            ""
                        }
                    )))
                }
            }
        }
        if refused.is_empty() {
            Ok(changed)
        } else {
            Err(err(refused.join("; ")))
        }
    }

    /// The VM's QEMU's cgroup v1 `cpu.shares` raised.
    fn boost_shares(&self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        let file = shares_file(vm)?;
        if j.entries()
            .iter()
            .any(|e| matches!(e, Entry::CpuShares { file: f, .. } if *f == file))
        {
            return Ok(0);
        }
        let t =
            std::fs::read_to_string(&file).map_err(|e| err(format!("{}: {e}", file.display())))?;
        let orig = t
            .trim()
            .parse()
            .map_err(|_| err(format!("{}: unexpected content {t:?}", file.display())))?;
        j.add(Entry::CpuShares {
            vm: vm.name.clone(),
            file: file.clone(),
            orig,
        })?;
        std::fs::write(&file, format!("{}\n", self.shares))
            .map_err(|e| err(format!("{}: {e}", file.display())))?;
        Ok(1)
    }
}

/// Refuses an RT boost while RT throttling is off: a `SCHED_RR` vCPU
/// spinning in a guest would then hold its host CPU for ever.
pub(crate) fn rt_throttling_on() -> Result<()> {
    match sys::rt_runtime_us() {
        Ok(-1) => Err(err(
            "RT throttling is off (/proc/sys/kernel/sched_rt_runtime_us is -1): hostd makes no SCHED_RR boost without it",
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(err(format!(
            "/proc/sys/kernel/sched_rt_runtime_us: {e}: no SCHED_RR boost without knowing RT throttling is on"
        ))),
    }
}

/// Thread `tid`'s start time, if it is a thread of the VM's QEMU process;
/// else why it is not boosted.
fn vcpu_of(vm: &VmTarget, tid: u32) -> Result<u64> {
    if sys::thread_group(tid) != Some(vm.pid) {
        return Err(err(format!(
            "thread {tid} is not a thread of VM {}'s QEMU (pid {}): not boosted",
            vm.name, vm.pid
        )));
    }
    sys::thread_start_time(tid).ok_or_else(|| err(format!("thread {tid} is gone")))
}

/// The `cpu.shares` file of the group the VM's QEMU runs in (cgroup v1
/// `cpu`); the root group has none to raise.
fn shares_file(vm: &VmTarget) -> Result<PathBuf> {
    let mount = sys::cgroup_v1_mount("cpu")
        .ok_or_else(|| err("cpu.shares: no cgroup v1 cpu hierarchy is mounted"))?;
    let group = sys::thread_cgroup(vm.pid, "cpu")
        .ok_or_else(|| err(format!("VM {}: its cpu group is unknown", vm.name)))?;
    if group == "/" {
        return Err(err(format!(
            "VM {}: QEMU runs in the root cpu group, whose cpu.shares means nothing: give it a group of its own",
            vm.name
        )));
    }
    Ok(mount.join(group.trim_start_matches('/')).join("cpu.shares"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boost_is_capped_then_throttled_then_given_again() {
        let mut c = BoostCap::new(1000 * MS, 500 * MS);
        assert!(!c.step(0, false));
        assert_eq!(c.next_deadline(), None);
        assert!(c.step(0, true));
        assert_eq!(c.next_deadline(), Some(1000 * MS));
        assert!(c.step(999 * MS, true));
        // 1 s on: throttled, whatever the guest asks.
        assert!(!c.step(1000 * MS, true));
        assert_eq!(c.throttles, 1);
        assert!(c.throttled(1200 * MS));
        assert!(!c.step(1200 * MS, true));
        assert_eq!(c.next_deadline(), Some(1500 * MS));
        assert!(!c.throttle_over(1499 * MS) && c.throttle_over(1500 * MS));
        // Throttle over, still asked for: on again for another second.
        assert!(c.step(1500 * MS, true));
        assert_eq!(c.next_deadline(), Some(2500 * MS));
    }

    #[test]
    fn a_boost_that_ends_early_is_not_throttled() {
        let mut c = BoostCap::default();
        assert!(c.step(0, true));
        assert!(!c.step(300 * MS, false));
        assert_eq!(c.next_deadline(), None);
        // A new boost gets its whole second.
        assert!(c.step(400 * MS, true));
        assert!(c.step(1399 * MS, true));
        assert!(!c.step(1400 * MS, true));
        assert_eq!(c.throttles, 1);
        // A NO-HELP during the throttle does not shorten it.
        assert!(!c.step(1500 * MS, false));
        assert!(!c.step(1600 * MS, true));
        assert!(c.throttled(1600 * MS));
        // Not asked for when the throttle ends: off.
        assert!(!c.step(2400 * MS, false));
        assert!(!c.throttled(2400 * MS));
    }

    #[test]
    fn boost_kinds_parse() {
        assert_eq!("rr".parse::<CpuBoostKind>(), Ok(CpuBoostKind::Rr));
        assert_eq!("shares".parse::<CpuBoostKind>(), Ok(CpuBoostKind::Shares));
        assert!("fifo".parse::<CpuBoostKind>().unwrap_err().contains("rr"));
    }

    /// A thread of another process is refused, and left as it was.
    #[test]
    fn a_thread_of_another_process_is_refused() {
        let vm = VmTarget {
            name: "a".into(),
            pid: std::process::id(),
            cgroup: None,
            // pid 1's thread: not this process's.
            vcpu_tids: vec![1],
            timer_tids: Vec::new(),
        };
        let mut j = Journal::new(None);
        let mut a = CpuActuator {
            kind: CpuBoostKind::Nice,
            rt_priority: 8,
            nice: -5,
            shares: 8192,
        };
        let e = a.boost(&vm, &mut j).unwrap_err();
        assert!(e.0.contains("not a thread of VM a's QEMU"), "{e}");
        assert!(j.entries().is_empty());
    }

    /// A timer thread (under TCG, QEMU's main loop) is checked as a vCPU
    /// is: another process's is refused while the VM's own vCPU is boosted
    /// and journalled, then restored.
    #[test]
    fn a_timer_thread_of_another_process_is_refused() {
        let me = std::process::id();
        let vm = VmTarget {
            name: "a".into(),
            pid: me,
            cgroup: None,
            // This process's main thread stands for the vCPU.
            vcpu_tids: vec![me],
            timer_tids: vec![1],
        };
        let orig = sys::sched_get(me).unwrap();
        let mut j = Journal::new(None);
        // Its own nice: the change needs no privilege, the journal still
        // records it.
        let mut a = CpuActuator {
            kind: CpuBoostKind::Nice,
            rt_priority: 8,
            nice: orig.nice,
            shares: 8192,
        };
        let e = a.boost(&vm, &mut j).unwrap_err();
        assert!(
            e.0.contains("thread 1 is not a thread of VM a's QEMU"),
            "{e}"
        );
        assert!(
            matches!(j.entries(), [Entry::Sched { tid, .. }] if *tid == me),
            "{:?}",
            j.entries()
        );
        a.unboost(&vm, &mut j).unwrap();
        assert!(j.entries().is_empty());
        assert_eq!(sys::sched_get(me).unwrap(), orig);
    }
}
