//! Where a VM latency cell's wake-up latency is spent: the kernel's
//! scheduling counters of each QEMU thread (`/proc/PID/task/TID/schedstat`:
//! CPU time, time runnable but waiting for a CPU, times put on a CPU),
//! read before and after the guest's cyclictest and summed by the thread's
//! role ([`ThreadRole`]) into the run's counters.
//!
//! Why by role: a guest's timer interrupt reaches its vCPU through QEMU's
//! threads, and which thread fires it depends on the accelerator. Under KVM
//! the kernel's in-kernel LAPIC fires it on the vCPU thread. Under TCG
//! without icount (QEMU's default, MTTCG or not) the guest's LAPIC timer is
//! a `QEMU_CLOCK_VIRTUAL` timer (hw/intc/apic.c, `apic_realize`) of the main
//! loop's timer list, run by the main-loop thread (util/main-loop.c,
//! `main_loop_wait` -> `qemu_clock_run_all_timers`), which then kicks the
//! vCPU thread (`tcg_handle_interrupt` -> `qemu_cpu_kick`). A main-loop
//! thread that waits for a CPU delays every guest wake-up; its wait per
//! time on a CPU is the `qemu_main_wait_us_per_slice` counter.

use std::collections::BTreeMap;

use agent::cfsv::{parse_schedstat, SchedStat};

/// What a QEMU thread does for the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadRole {
    /// The process's first thread, which runs QEMU's main loop (QEMU's
    /// `main` -> `qemu_main_loop`): its timers, its event handlers.
    MainLoop,
    /// A vCPU thread (QMP's `query-cpus-fast`).
    Vcpu,
    /// Every other thread (iothreads, the pool's workers, RCU).
    Other,
}

impl ThreadRole {
    pub const ALL: [ThreadRole; 3] = [ThreadRole::MainLoop, ThreadRole::Vcpu, ThreadRole::Other];

    /// The role's part of the counter names (`qemu_<key>_...`).
    pub fn key(self) -> &'static str {
        match self {
            ThreadRole::MainLoop => "main",
            ThreadRole::Vcpu => "vcpu",
            ThreadRole::Other => "other",
        }
    }
}

/// The threads of one QEMU process, by role.
#[derive(Clone, Debug)]
pub struct QemuSched {
    pub pid: u32,
    pub vcpus: Vec<u32>,
}

/// One reading of every thread's schedstat.
#[derive(Clone, Debug, Default)]
pub struct Snapshot(BTreeMap<u32, SchedStat>);

impl QemuSched {
    pub fn role(&self, tid: u32) -> ThreadRole {
        if tid == self.pid {
            ThreadRole::MainLoop
        } else if self.vcpus.contains(&tid) {
            ThreadRole::Vcpu
        } else {
            ThreadRole::Other
        }
    }

    /// Every thread's schedstat now; a thread gone meanwhile is left out.
    pub fn snapshot(&self) -> Snapshot {
        let tids = agent::sys::threads(self.pid).unwrap_or_default();
        Snapshot(
            tids.into_iter()
                .filter_map(|tid| {
                    let p = format!("/proc/{}/task/{tid}/schedstat", self.pid);
                    let t = std::fs::read_to_string(p).ok()?;
                    Some((tid, parse_schedstat(&t)?))
                })
                .collect(),
        )
    }

    /// The counters of the threads' scheduling between two snapshots, by
    /// role: `qemu_<role>_run_ms`, `qemu_<role>_wait_ms`,
    /// `qemu_<role>_slices` and `qemu_<role>_wait_us_per_slice` (the mean
    /// time it waited for a CPU each time it got one). A thread started
    /// in between counts from zero.
    pub fn counters(&self, before: &Snapshot, after: &Snapshot) -> BTreeMap<String, f64> {
        let mut sums: BTreeMap<ThreadRole, SchedStat> = BTreeMap::new();
        for (&tid, a) in &after.0 {
            let b = before.0.get(&tid).copied().unwrap_or_default();
            let s = sums.entry(self.role(tid)).or_default();
            s.run_ns += a.run_ns.saturating_sub(b.run_ns);
            s.wait_ns += a.wait_ns.saturating_sub(b.wait_ns);
            s.slices += a.slices.saturating_sub(b.slices);
        }
        let mut out = BTreeMap::new();
        for role in ThreadRole::ALL {
            let s = sums.get(&role).copied().unwrap_or_default();
            let k = role.key();
            out.insert(format!("qemu_{k}_run_ms"), s.run_ns as f64 / 1e6);
            out.insert(format!("qemu_{k}_wait_ms"), s.wait_ns as f64 / 1e6);
            out.insert(format!("qemu_{k}_slices"), s.slices as f64);
            if s.slices > 0 {
                out.insert(
                    format!("qemu_{k}_wait_us_per_slice"),
                    s.wait_ns as f64 / 1e3 / s.slices as f64,
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(run_ns: u64, wait_ns: u64, slices: u64) -> SchedStat {
        SchedStat {
            run_ns,
            wait_ns,
            slices,
        }
    }

    #[test]
    fn deltas_are_summed_by_role() {
        let q = QemuSched {
            pid: 100,
            vcpus: vec![102],
        };
        let before = Snapshot([(100, st(1_000_000, 0, 10)), (102, st(0, 0, 0))].into());
        let after = Snapshot(
            [
                (100, st(3_000_000, 4_000_000, 20)),
                (102, st(9_000_000, 1_000_000, 2)),
                // Started in between: counted whole.
                (105, st(500_000, 200_000, 1)),
            ]
            .into(),
        );
        let c = q.counters(&before, &after);
        assert_eq!(c["qemu_main_run_ms"], 2.0);
        assert_eq!(c["qemu_main_wait_ms"], 4.0);
        assert_eq!(c["qemu_main_slices"], 10.0);
        assert_eq!(c["qemu_main_wait_us_per_slice"], 400.0);
        assert_eq!(c["qemu_vcpu_run_ms"], 9.0);
        assert_eq!(c["qemu_vcpu_wait_us_per_slice"], 500.0);
        assert_eq!(c["qemu_other_wait_ms"], 0.2);
    }

    /// This process's own threads read back: the main thread has run.
    #[test]
    fn a_live_process_is_read() {
        let q = QemuSched {
            pid: std::process::id(),
            vcpus: Vec::new(),
        };
        let s = q.snapshot();
        let main = s.0.get(&q.pid).expect("the main thread's schedstat");
        assert!(main.run_ns > 0 && main.slices > 0, "{main:?}");
    }
}
