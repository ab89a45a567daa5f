//! Where a request's time goes: the measured window sampled at a fixed
//! period, each VM's requests in flight (and its readers between their
//! interrupt and their next read) put in a place (which hop) and a state
//! (served, queued behind the server's other jobs, waiting for a CPU and
//! behind whom, or running). Sampling reads the model and changes nothing:
//! the cell's figures are those of [`super::run`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::path::Job;
use super::{Cell, HostRole, StudySetup, MAX_WORKERS};
use crate::model::KernelId;
use crate::task::TaskId;
use crate::{Nanos, US};

/// Mean time per request (us) in each (place, state), per VM.
#[derive(Clone, Debug, Default)]
pub struct Breakdown {
    pub vms: Vec<BTreeMap<String, f64>>,
    /// Requests completed per VM in the window.
    pub requests: Vec<u64>,
    /// Per VM: share (%) of the 8 host CPUs' time running each kind of
    /// that VM's threads; key "idle" for CPUs running nothing (VM 1 only).
    pub host_cpu: Vec<BTreeMap<String, f64>>,
    /// Per VM: CPU time per request (us) of each part of the I/O path
    /// (its readers, the rest of its vCPUs' time besides its tasks, its
    /// main loop, its workers), with the softirq and the host's switches
    /// shared over both VMs' requests; and "hashers (CPUs)": its hashers'
    /// CPU time in CPUs.
    pub cpu_per_request: Vec<BTreeMap<&'static str, f64>>,
}

impl Breakdown {
    /// A table: one row per (place, state), one column per VM.
    pub fn render(&self) -> String {
        let mut keys: Vec<&String> = self.vms.iter().flat_map(|m| m.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut out = String::new();
        let _ = writeln!(out, "{:<44} {:>9} {:>9}", "us per request", "VM 1", "VM 2");
        let get = |i: usize, k: &str| self.vms.get(i).and_then(|m| m.get(k)).copied();
        let cell = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.1}"));
        for k in keys {
            let _ = writeln!(out, "{k:<44} {:>9} {:>9}", cell(get(0, k)), cell(get(1, k)));
        }
        let tot = |i: usize| self.vms.get(i).map(|m| m.values().sum::<f64>());
        let _ = writeln!(
            out,
            "{:<44} {:>9} {:>9}",
            "total",
            cell(tot(0)),
            cell(tot(1))
        );
        let _ = writeln!(out, "requests: {:?}", self.requests);
        let mut keys: Vec<&String> = self.host_cpu.iter().flat_map(|m| m.keys()).collect();
        keys.sort();
        keys.dedup();
        let _ = writeln!(
            out,
            "{:<44} {:>9} {:>9}",
            "CPU per request, us", "VM 1", "VM 2"
        );
        let mut parts: Vec<&&str> = self.cpu_per_request.iter().flat_map(|m| m.keys()).collect();
        parts.sort();
        parts.dedup();
        for k in parts {
            let g = |i: usize| self.cpu_per_request.get(i).and_then(|m| m.get(*k)).copied();
            let _ = writeln!(out, "{k:<44} {:>9} {:>9}", cell(g(0)), cell(g(1)));
        }
        let _ = writeln!(
            out,
            "{:<44} {:>9} {:>9}",
            "host CPU time, %", "VM 1", "VM 2"
        );
        for k in keys {
            let g = |i: usize| self.host_cpu.get(i).and_then(|m| m.get(k)).copied();
            let _ = writeln!(out, "{k:<44} {:>9} {:>9}", cell(g(0)), cell(g(1)));
        }
        out
    }
}

/// Who a host task is, for the "behind whom" of a wait.
fn who(cell: &Cell, vcpu_vm: &[Option<usize>], v: usize, t: Option<TaskId>) -> String {
    let Some(t) = t else {
        return "idle".into();
    };
    if let Some(&Some(o)) = vcpu_vm.get(t.idx()) {
        return if o == v {
            "own vCPU"
        } else {
            "other VM's vCPU"
        }
        .into();
    }
    match cell.host_role.get(t.idx()).copied().flatten() {
        Some(HostRole::Main(o)) if o == v => "own main loop".into(),
        Some(HostRole::Main(_)) => "other main loop".into(),
        Some(HostRole::Worker(o, _)) if o == v => "own worker".into(),
        Some(HostRole::Worker(..)) => "other VM's worker".into(),
        Some(HostRole::Softirq(_)) => "ksoftirqd".into(),
        None => "other".into(),
    }
}

/// The state of host task `t` serving a job of VM `v` at place `at`.
fn host_state(cell: &Cell, vcpu_vm: &[Option<usize>], v: usize, t: TaskId) -> String {
    let h = cell.m.kernel(KernelId::HOST);
    let cpu = h.tasks[t.idx()].cpu;
    match h.curr[cpu] {
        Some(c) if c == t => "runs".into(),
        c => format!("waits for a CPU, behind {}", who(cell, vcpu_vm, v, c)),
    }
}

impl Cell {
    fn sample(&self, vcpu_vm: &[Option<usize>], into: &mut [BTreeMap<String, u64>]) {
        let h = self.m.kernel(KernelId::HOST);
        for (v, vm) in self.vms.iter().enumerate() {
            let mut add = |k: String| *into[v].entry(k).or_default() += 1;
            for w in 0..vm.workers.len() {
                if vm.free.contains(&w) {
                    continue;
                }
                let mine = |j: &Job| j.req().worker == w;
                let place = |j: Option<usize>, name: &str, server_task: TaskId| match j {
                    Some(0) => Some(format!(
                        "{name}: {}",
                        host_state(self, vcpu_vm, v, server_task)
                    )),
                    Some(_) => Some(format!("{name}: queued behind other jobs")),
                    None => None,
                };
                let main_kind = |submit: bool| {
                    if submit {
                        "1 main loop (submit)"
                    } else {
                        "5 main loop (complete)"
                    }
                };
                let submit = vm.main.position(|j| mine(j) && matches!(j, Job::Submit(_)));
                let complete = vm
                    .main
                    .position(|j| mine(j) && matches!(j, Job::Complete(_)));
                if let Some(k) = place(submit, main_kind(true), vm.main.task) {
                    add(k);
                    continue;
                }
                if let Some(k) = place(complete, main_kind(false), vm.main.task) {
                    add(k);
                    continue;
                }
                let wk = &vm.workers[w];
                if let Some(p) = wk.position(|_| true) {
                    let submit = wk.position(|j| matches!(j, Job::Submit(_))) == Some(p);
                    let name = if submit {
                        "2 worker (issue)"
                    } else {
                        "4 worker (return)"
                    };
                    add(place(Some(0), name, wk.task).unwrap_or_default());
                    continue;
                }
                if self.inflight[v * MAX_WORKERS + w].is_some() {
                    add("3 device".into());
                    continue;
                }
                let s = self
                    .softirq
                    .iter()
                    .find_map(|s| s.position(mine).map(|p| (s, p)));
                if let Some((s, p)) = s {
                    add(place(Some(p), "3 softirq", s.task).unwrap_or_default());
                    continue;
                }
                add("? between hops".into());
            }
            // Readers between their interrupt and their next read.
            let g = self.m.kernel(vm.k);
            for (r, at) in self.hops.irq[v].iter().enumerate() {
                if at.is_none() {
                    continue;
                }
                let at_irq = vm
                    .irq
                    .position(|j| j.req().reader.idx() == r)
                    .map(|p| (super::IRQ_VCPU, p));
                let (gcpu, stage) = match at_irq {
                    Some((c, p)) => (
                        c,
                        if p == 0 {
                            "6 guest IRQ"
                        } else {
                            "6 guest IRQ (queued)"
                        },
                    ),
                    None => (g.tasks[r].cpu, "6 guest"),
                };
                let vcpu = vm.host_threads[gcpu];
                let hcpu = h.tasks[vcpu.idx()].cpu;
                let k = if h.curr[hcpu] != Some(vcpu) {
                    let state = if h.tasks[vcpu.idx()].state == crate::task::TaskState::Blocked {
                        "vCPU halted".to_string()
                    } else {
                        format!(
                            "vCPU waits for a CPU, behind {}",
                            who(self, vcpu_vm, v, h.curr[hcpu])
                        )
                    };
                    format!("{stage}: {state}")
                } else if at_irq.is_some() {
                    format!("{stage}: vCPU runs")
                } else {
                    match g.curr[gcpu] {
                        Some(c) if c.idx() == r => "6 guest: reader runs".into(),
                        Some(c) if self.reader_of[v].get(c.idx()).copied().unwrap_or(false) => {
                            "6 guest: vCPU runs another reader".into()
                        }
                        Some(_) => "6 guest: vCPU runs a hasher".into(),
                        None => "6 guest: vCPU runs, reader not queued yet".into(),
                    }
                };
                add(k);
            }
        }
    }
}

/// Runs one cell as [`super::run`] does, sampling every `every_ns` of the
/// measured window.
pub fn run(s: &StudySetup, every_ns: Nanos) -> Result<Breakdown, String> {
    let mut cell = Cell::build(s)?;
    cell.run_to(s.warmup_ns);
    let a = cell.counters();
    let acc0 = cell.accounts();
    let h = cell.m.kernel(KernelId::HOST);
    let mut vcpu_vm = vec![None; h.tasks.len()];
    for (v, vm) in cell.vms.iter().enumerate() {
        for &t in &vm.host_threads[..8] {
            vcpu_vm[t.idx()] = Some(v);
        }
    }
    let nvm = cell.vms.len();
    let mut samples = vec![BTreeMap::new(); nvm];
    let mut cpu_samples = vec![BTreeMap::<String, u64>::new(); nvm];
    let (mut t, end) = (s.warmup_ns, s.warmup_ns + s.measure_ns);
    let mut n = 0u64;
    while t < end {
        t = (t + every_ns).min(end);
        cell.run_to(t);
        cell.sample(&vcpu_vm, &mut samples);
        let h = cell.m.kernel(KernelId::HOST);
        for c in &h.curr {
            let owner = c.and_then(|c| {
                vcpu_vm[c.idx()].or(match cell.host_role.get(c.idx()).copied().flatten() {
                    Some(HostRole::Main(v)) | Some(HostRole::Worker(v, _)) => Some(v),
                    _ => None,
                })
            });
            let v = owner.unwrap_or(0);
            *cpu_samples[v]
                .entry(who(&cell, &vcpu_vm, v, *c))
                .or_default() += 1;
        }
        n += 1;
    }
    let b = cell.counters();
    let acc1 = cell.accounts();
    let requests: Vec<u64> = a.iter().zip(&b).map(|(x, y)| y.0 - x.0).collect();
    let vms = samples
        .into_iter()
        .zip(&requests)
        .map(|(m, &r)| {
            let per = every_ns as f64 / US as f64 / r.max(1) as f64;
            m.into_iter().map(|(k, c)| (k, c as f64 * per)).collect()
        })
        .collect();
    let total = (n * cell.m.platform.cores as u64).max(1) as f64;
    let host_cpu = cpu_samples
        .into_iter()
        .map(|m| {
            m.into_iter()
                .map(|(k, c)| (k, c as f64 * 100.0 / total))
                .collect()
        })
        .collect();
    let all: u64 = requests.iter().sum();
    let cpu_per_request = (0..nvm)
        .map(|v| {
            let d = |f: fn(&Accounts) -> Nanos| (f(&acc1[v]) - f(&acc0[v])) as f64 / 1e3;
            let r = requests[v].max(1) as f64;
            let shared = |f: fn(&Accounts) -> Nanos| d(f) / all.max(1) as f64;
            let mut m = BTreeMap::new();
            m.insert("readers", d(|a| a.readers) / r);
            m.insert(
                "vCPUs besides their tasks",
                (d(|a| a.vcpus) - d(|a| a.readers) - d(|a| a.hashers)) / r,
            );
            m.insert("main loop", d(|a| a.main) / r);
            m.insert("workers", d(|a| a.workers) / r);
            m.insert("softirq (shared)", shared(|a| a.softirq));
            m.insert("host switches (shared)", shared(|a| a.host_switch));
            m.insert(
                "hashers (CPUs)",
                d(|a| a.hashers) / (s.measure_ns as f64 / 1e3),
            );
            m
        })
        .collect();
    Ok(Breakdown {
        vms,
        requests,
        host_cpu,
        cpu_per_request,
    })
}

/// CPU time counters of one VM (softirq and host switches: the host's).
#[derive(Clone, Copy, Debug, Default)]
struct Accounts {
    readers: Nanos,
    hashers: Nanos,
    vcpus: Nanos,
    main: Nanos,
    workers: Nanos,
    softirq: Nanos,
    host_switch: Nanos,
}

impl Cell {
    fn accounts(&mut self) -> Vec<Accounts> {
        self.m.settle_all();
        let m = &self.m;
        let h = KernelId::HOST;
        let sum = |k: KernelId, ts: &mut dyn Iterator<Item = TaskId>| -> Nanos {
            ts.map(|t| m.progress(k, t)).sum()
        };
        let softirq = sum(h, &mut self.softirq.iter().map(|s| s.task));
        let switches: u64 = m.kernel(h).cpus.iter().map(|c| c.switches).sum();
        let host_switch = switches * m.platform.switch_ns;
        self.vms
            .iter()
            .enumerate()
            .map(|(v, vm)| {
                let g = m.kernel(vm.k);
                let readers = (0..g.tasks.len())
                    .filter(|&i| self.reader_of[v].get(i).copied().unwrap_or(false))
                    .map(|i| g.tasks[i].progress)
                    .sum();
                Accounts {
                    readers,
                    hashers: sum(vm.k, &mut vm.hashers.iter().copied()),
                    vcpus: sum(h, &mut vm.host_threads[..8].iter().copied()),
                    main: m.progress(h, vm.main.task),
                    workers: sum(h, &mut vm.workers.iter().map(|w| w.task)),
                    softirq,
                    host_switch,
                }
            })
            .collect()
    }
}
