//! The CPU time of a run's threads, by role: the kernel's scheduling
//! counters of each thread (`/proc/PID/task/TID/schedstat`: CPU time, time
//! runnable but waiting for a CPU, times put on a CPU), read at two moments
//! and summed by the thread's [`Role`] into the run's counters
//! ([`counters`]): `<role>_run_ms`, `<role>_wait_ms`, `<role>_slices` and
//! `<role>_wait_us_per_slice`.
//!
//! Who is read, and when (the measurement of a repetition: from the
//! procedure's `begin_measure` to its `finish`, see
//! [`experiment::procedure`]):
//! - the app ([`Role::App`]): each start's process, read once it has exited
//!   and before it is reaped (a zombie keeps its counters;
//!   [`crate::workers::kill_reading`]), counted whole; in a VM the guest
//!   agent reads it inside the guest and answers with it;
//! - the background workloads ([`Role::HostWorkload`], and in a VM
//!   [`Role::GuestWorkload`], read by the agent): every worker process, read
//!   at both ends, before they are stopped;
//! - QEMU's threads in a VM cell, by what they do for the guest
//!   ([`QemuThreads`]).
//!
//! Why QEMU by role: a guest's timer interrupt reaches its vCPU through
//! QEMU's threads, and which thread fires it depends on the accelerator.
//! Under KVM the kernel's in-kernel LAPIC fires it on the vCPU thread. Under
//! TCG without icount (QEMU's default, MTTCG or not) the guest's LAPIC timer
//! is a `QEMU_CLOCK_VIRTUAL` timer (hw/intc/apic.c, `apic_realize`) of the
//! main loop's timer list, run by the main-loop thread (util/main-loop.c,
//! `main_loop_wait` -> `qemu_clock_run_all_timers`), which then kicks the
//! vCPU thread (`tcg_handle_interrupt` -> `qemu_cpu_kick`). A main-loop
//! thread that waits for a CPU delays every guest wake-up; its wait per time
//! on a CPU is the `qemu_main_wait_us_per_slice` counter. A VM latency cell
//! reads QEMU's threads around the guest's cyclictest instead of the whole
//! measurement.

use std::collections::BTreeMap;

use agent::cfsv::{parse_schedstat, SchedStat};

/// Whose thread it is, for the run's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The app: each start's process.
    App,
    /// The host's background workload: its readers, writers and `sync`.
    HostWorkload,
    /// VM 1's guest's background workload, read inside the guest.
    GuestWorkload,
    /// QEMU's first thread, which runs its main loop (QEMU's `main` ->
    /// `qemu_main_loop`): its timers, its event handlers.
    QemuMain,
    /// A vCPU thread (QMP's `query-cpus-fast`).
    QemuVcpu,
    /// Every other QEMU thread (iothreads, the pool's workers, RCU).
    QemuOther,
}

impl Role {
    /// QEMU's roles, by thread.
    pub const QEMU: [Role; 3] = [Role::QemuMain, Role::QemuVcpu, Role::QemuOther];

    /// The role's part of the counter names (`<key>_run_ms`, ...).
    pub fn key(self) -> &'static str {
        match self {
            Role::App => "app",
            Role::HostWorkload => "host_workload",
            Role::GuestWorkload => "guest_workload",
            Role::QemuMain => "qemu_main",
            Role::QemuVcpu => "qemu_vcpu",
            Role::QemuOther => "qemu_other",
        }
    }
}

/// The threads of one QEMU process, by role.
#[derive(Clone, Debug)]
pub struct QemuThreads {
    pub pid: u32,
    pub vcpus: Vec<u32>,
}

impl QemuThreads {
    pub fn role(&self, tid: u32) -> Role {
        if tid == self.pid {
            Role::QemuMain
        } else if self.vcpus.contains(&tid) {
            Role::QemuVcpu
        } else {
            Role::QemuOther
        }
    }

    /// Every thread's schedstat now, added to `s` by role.
    pub fn read_into(&self, s: &mut Snapshot) {
        for (tid, st) in threads_of(self.pid) {
            s.add(self.role(tid), tid, st);
        }
    }

    /// A snapshot of QEMU's threads alone.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        self.read_into(&mut s);
        s
    }
}

/// One reading of threads' schedstat, by role and thread id. Thread ids
/// of different roles may come from different kernels (the guest's and the
/// host's), so a thread is its role and its id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot(BTreeMap<(Role, u32), SchedStat>);

impl Snapshot {
    /// Adds a thread's reading; a thread already there (an id reused by a
    /// later process of the same role, as the app's starts may) is summed.
    pub fn add(&mut self, role: Role, tid: u32, st: SchedStat) {
        let s = self.0.entry((role, tid)).or_default();
        s.run_ns += st.run_ns;
        s.wait_ns += st.wait_ns;
        s.slices += st.slices;
    }

    /// Every thread of process `pid` now, as `role`; a process or thread
    /// gone meanwhile is left out.
    pub fn read_process(&mut self, role: Role, pid: u32) {
        for (tid, st) in threads_of(pid) {
            self.add(role, tid, st);
        }
    }

    /// The readings of `role`, as `(tid, run_ns, wait_ns, slices)` (the
    /// guest agent's answer).
    pub fn rows(&self, role: Role) -> Vec<[u64; 4]> {
        self.0
            .iter()
            .filter(|((r, _), _)| *r == role)
            .map(|(&(_, tid), &s)| {
                let [run, wait, slices] = sched_json(s);
                [tid as u64, run, wait, slices]
            })
            .collect()
    }

    /// Adds rows of [`Snapshot::rows`] (read elsewhere: in the guest) as
    /// `role`; a malformed row is left out.
    pub fn add_rows(&mut self, role: Role, rows: &serde_json::Value) {
        for r in rows.as_array().into_iter().flatten() {
            if let Some((tid, st)) = numbers(r).split_first() {
                if let Some(st) = sched_of(st) {
                    self.add(role, *tid as u32, st);
                }
            }
        }
    }

    /// Whether there is a reading of `role`.
    pub fn has(&self, role: Role) -> bool {
        self.0.keys().any(|(r, _)| *r == role)
    }
}

/// A JSON array's numbers (none for anything else).
fn numbers(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(serde_json::Value::as_u64)
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

/// A reading as the guest agent sends it: `[run_ns, wait_ns, slices]`.
pub fn sched_json(st: SchedStat) -> [u64; 3] {
    [st.run_ns, st.wait_ns, st.slices]
}

fn sched_of(v: &[u64]) -> Option<SchedStat> {
    match *v {
        [run_ns, wait_ns, slices] => Some(SchedStat {
            run_ns,
            wait_ns,
            slices,
        }),
        _ => None,
    }
}

/// A reading of [`sched_json`] back (`None` for null or anything else).
pub fn parse_sched_json(v: &serde_json::Value) -> Option<SchedStat> {
    sched_of(&numbers(v))
}

/// Thread `tid` of process `pid`'s schedstat now (of an exited process not
/// yet reaped too: its zombie keeps its main thread's).
pub fn read_thread(pid: u32, tid: u32) -> Option<SchedStat> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&t)
}

fn threads_of(pid: u32) -> Vec<(u32, SchedStat)> {
    agent::sys::threads(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| Some((tid, read_thread(pid, tid)?)))
        .collect()
}

/// The counters of the threads' scheduling between two snapshots, for each
/// of `roles`: `<role>_run_ms`, `<role>_wait_ms`, `<role>_slices` and,
/// when it got a CPU at all, `<role>_wait_us_per_slice` (the mean time it
/// waited for a CPU each time it got one). A thread that is not in
/// `before` (started in between) counts from zero; one that is gone from
/// `after` is left out (read the threads before stopping them).
pub fn counters(before: &Snapshot, after: &Snapshot, roles: &[Role]) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<Role, SchedStat> = BTreeMap::new();
    for (id, a) in &after.0 {
        let b = before.0.get(id).copied().unwrap_or_default();
        let s = sums.entry(id.0).or_default();
        s.run_ns += a.run_ns.saturating_sub(b.run_ns);
        s.wait_ns += a.wait_ns.saturating_sub(b.wait_ns);
        s.slices += a.slices.saturating_sub(b.slices);
    }
    let mut out = BTreeMap::new();
    for &role in roles {
        let s = sums.get(&role).copied().unwrap_or_default();
        let k = role.key();
        out.insert(format!("{k}_run_ms"), s.run_ns as f64 / 1e6);
        out.insert(format!("{k}_wait_ms"), s.wait_ns as f64 / 1e6);
        out.insert(format!("{k}_slices"), s.slices as f64);
        if s.slices > 0 {
            out.insert(
                format!("{k}_wait_us_per_slice"),
                s.wait_ns as f64 / 1e3 / s.slices as f64,
            );
        }
    }
    out
}

/// A repetition's CPU time, as a procedure host keeps it: the readings when
/// the measurement began, and each start of the app.
#[derive(Clone, Debug, Default)]
pub struct RunCpu {
    before: Snapshot,
    apps: Snapshot,
    starts: u32,
    /// CPU time and start-up time summed over the starts that finished
    /// (`app_cpu_s`, `app_cpu_share`, as the simulator's).
    finished: (u64, u64),
}

impl RunCpu {
    /// The measurement begins: the workloads' (and QEMU's) threads now.
    pub fn begin(&mut self, now: Snapshot) {
        self.before = now;
    }

    /// One start of the app: its process's reading (none when it could not
    /// be read) and how long it took (`None`: timed out).
    pub fn app_start(&mut self, sched: Option<SchedStat>, secs: Option<f64>) {
        self.starts += 1;
        if let Some(st) = sched {
            // Each start is a thread of its own (its number, not its pid: a
            // guest's and the host's pids may meet).
            self.apps.add(Role::App, self.starts, st);
            if let Some(s) = secs {
                self.finished.0 += st.run_ns;
                self.finished.1 += (s * 1e9).round() as u64;
            }
        }
    }

    /// The measurement ends, with the threads read now (before the
    /// workloads stop): the counters of `roles` into `out`, the app's when
    /// there were starts, each unless the run has it already (a VM latency
    /// cell's QEMU threads, read around its cyclictest).
    pub fn finish(&self, mut after: Snapshot, roles: &[Role], out: &mut experiment::RunResult) {
        let mut roles = roles.to_vec();
        if self.starts > 0 {
            roles.insert(0, Role::App);
            for (&id, &st) in &self.apps.0 {
                after.add(id.0, id.1, st);
            }
            experiment::result::app_cpu_counters(out, self.finished.0, self.finished.1);
        }
        for (k, v) in counters(&self.before, &after, &roles) {
            out.counters.entry(k).or_insert(v);
        }
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
    fn qemu_deltas_are_summed_by_role() {
        let q = QemuThreads {
            pid: 100,
            vcpus: vec![102],
        };
        let mut before = Snapshot::default();
        before.add(q.role(100), 100, st(1_000_000, 0, 10));
        before.add(q.role(102), 102, st(0, 0, 0));
        let mut after = Snapshot::default();
        after.add(q.role(100), 100, st(3_000_000, 4_000_000, 20));
        after.add(q.role(102), 102, st(9_000_000, 1_000_000, 2));
        // Started in between: counted whole.
        after.add(q.role(105), 105, st(500_000, 200_000, 1));
        let c = counters(&before, &after, &Role::QEMU);
        assert_eq!(c["qemu_main_run_ms"], 2.0);
        assert_eq!(c["qemu_main_wait_ms"], 4.0);
        assert_eq!(c["qemu_main_slices"], 10.0);
        assert_eq!(c["qemu_main_wait_us_per_slice"], 400.0);
        assert_eq!(c["qemu_vcpu_run_ms"], 9.0);
        assert_eq!(c["qemu_vcpu_wait_us_per_slice"], 500.0);
        assert_eq!(c["qemu_other_wait_ms"], 0.2);
    }

    /// The same thread id in two roles (a guest's and the host's) is two
    /// threads; a role asked for but never read counts zero, without a
    /// wait per slice; a role not asked for is left out.
    #[test]
    fn roles_keep_their_threads_apart() {
        let mut before = Snapshot::default();
        before.add(Role::HostWorkload, 7, st(1_000_000, 0, 1));
        let mut after = Snapshot::default();
        after.add(Role::HostWorkload, 7, st(5_000_000, 0, 3));
        after.add(Role::GuestWorkload, 7, st(2_000_000, 1_000_000, 4));
        // Two starts whose processes had the same id: summed.
        after.add(Role::App, 9, st(3_000_000, 0, 1));
        after.add(Role::App, 9, st(1_000_000, 0, 1));
        let c = counters(
            &before,
            &after,
            &[
                Role::App,
                Role::HostWorkload,
                Role::GuestWorkload,
                Role::QemuMain,
            ],
        );
        assert_eq!(c["host_workload_run_ms"], 4.0);
        assert_eq!(c["host_workload_slices"], 2.0);
        assert_eq!(c["guest_workload_run_ms"], 2.0);
        assert_eq!(c["guest_workload_wait_us_per_slice"], 250.0);
        assert_eq!(c["app_run_ms"], 4.0);
        assert_eq!(c["app_slices"], 2.0);
        assert_eq!(c["qemu_main_run_ms"], 0.0);
        assert!(!c.contains_key("qemu_main_wait_us_per_slice"));
        assert!(!c.contains_key("qemu_vcpu_run_ms"));
    }

    /// The guest agent's rows come back as they left; malformed rows are
    /// dropped.
    #[test]
    fn rows_round_trip_through_json() {
        let mut s = Snapshot::default();
        s.add(Role::GuestWorkload, 3, st(10, 20, 30));
        s.add(Role::GuestWorkload, 4, st(1, 2, 3));
        s.add(Role::HostWorkload, 5, st(7, 7, 7));
        let json = serde_json::json!(s.rows(Role::GuestWorkload));
        let mut back = Snapshot::default();
        back.add_rows(Role::GuestWorkload, &json);
        back.add_rows(
            Role::GuestWorkload,
            &serde_json::json!([[1, 2], "x", [5, 1, 1, -1]]),
        );
        assert_eq!(back.rows(Role::GuestWorkload), s.rows(Role::GuestWorkload));
        assert!(!back.has(Role::HostWorkload));
        let one = st(5, 6, 7);
        assert_eq!(
            parse_sched_json(&serde_json::json!(sched_json(one))),
            Some(one)
        );
        assert_eq!(parse_sched_json(&serde_json::Value::Null), None);
    }

    /// This process's own threads read back: the main thread has run.
    #[test]
    fn a_live_process_is_read() {
        let pid = std::process::id();
        let mut s = Snapshot::default();
        s.read_process(Role::HostWorkload, pid);
        let main =
            s.0.get(&(Role::HostWorkload, pid))
                .expect("the main thread");
        assert!(main.run_ns > 0 && main.slices > 0, "{main:?}");
    }
}
