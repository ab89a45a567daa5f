//! The CPU model: the host kernel, one kernel per guest whose CPUs are
//! vCPUs, and the event queue that drives them (ticks, burst ends, timer
//! expiries). A vCPU is a host task: while the host runs it, its guest
//! CPU executes; otherwise the guest makes no progress and the guest's
//! interrupts (its tick, its timers) wait for the host to run it again.

use devmodel::heap::TimedHeap;

use crate::class::{SchedClass, TaskHint};
use crate::kernel::{Event, Kernel, KernelCfg};
use crate::platform::Platform;
use crate::rt::Rt;
use crate::task::{GroupId, Policy, TaskId, TaskSpec, TaskState};
use crate::{bfs, cfs, cfsv, credit, eevdf, FairKind, Nanos};

/// A kernel of the model: 0 is the host, then one per VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelId(pub usize);

impl KernelId {
    pub const HOST: KernelId = KernelId(0);
}

/// A virtual machine: its vCPU threads on the host, its guest kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmId(pub usize);

/// What the driver must react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub kernel: KernelId,
    pub task: TaskId,
    pub kind: CompletionKind,
    pub at: Nanos,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// The task ran for the first time since its wake-up.
    Started,
    /// The task finished its burst: give it another, block it or sleep.
    BurstDone,
}

/// A queued event; kernel and CPU indices as `u32` keep a heap slot at
/// 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Step { k: u32, cpu: u32, gen: u32 },
    Tick { k: u32, cpu: u32, gen: u32 },
    Timer { k: u32, task: TaskId, gen: u32 },
}

/// Event bookkeeping of one CPU of one kernel.
#[derive(Clone, Debug, Default)]
struct CpuEv {
    step_gen: u32,
    /// When the armed step event fires, if one is armed.
    step_at: Option<Nanos>,
    tick_gen: u32,
    tick_armed: bool,
    tick_pending: bool,
    /// Guest timers that fired while the vCPU was not running.
    pending: Vec<TaskId>,
}

struct Vm {
    vcpus: Vec<TaskId>,
    group: GroupId,
}

pub struct CpuModel {
    pub platform: Platform,
    kernels: Vec<Kernel>,
    cpu_ev: Vec<Vec<CpuEv>>,
    vms: Vec<Vm>,
    /// Host task -> (guest kernel, guest CPU) for vCPU threads.
    vcpu_of: Vec<Option<(usize, usize)>>,
    host_seen: Vec<Option<TaskId>>,
    host_groups: u32,
    heap: TimedHeap<Ev>,
    now: Nanos,
    out: Vec<Completion>,
    /// How many of `out` the last `advance_to` returned.
    delivered: usize,
    processed: u64,
    /// Reused buffer for [`Self::flush`] (it runs after every event).
    scratch_dirty: Vec<usize>,
}

/// A kernel's classes: RT over the chosen fair class.
fn make_kernel(mut cfg: KernelCfg, fair: FairKind) -> Kernel {
    let n = cfg.cpus;
    let detail = |core: &mut crate::fair::FairCore| {
        core.load_tracking = cfg.load_tracking;
        core.next_buddy = cfg.next_buddy;
    };
    let fair: Box<dyn SchedClass> = match fair {
        FairKind::Cfs => {
            let mut c = cfs::new(n);
            detail(&mut c.core);
            Box::new(c)
        }
        FairKind::Eevdf => {
            let mut c = eevdf::new(n);
            detail(&mut c.core);
            Box::new(c)
        }
        FairKind::Bfs => Box::new(bfs::Bfs::new()),
        FairKind::CfsV(o) => {
            let mut c = cfsv::new(n, o);
            detail(&mut c.fair.core);
            Box::new(c)
        }
        FairKind::Credit(o) => {
            // Xen's per-pCPU ticker, whatever the platform's HZ.
            cfg.hz = credit::TICK_HZ;
            Box::new(credit::Credit::new(n, o))
        }
    };
    let share = cfg.rt_runtime_share;
    Kernel::new(cfg, Box::new(Rt::new(n, share)), fair)
}

impl CpuModel {
    pub fn new(platform: Platform, host: FairKind) -> CpuModel {
        let cfg = platform.host_cfg();
        let n = cfg.cpus;
        CpuModel {
            platform,
            kernels: vec![make_kernel(cfg, host)],
            cpu_ev: vec![vec![CpuEv::default(); n]],
            vms: Vec::new(),
            vcpu_of: Vec::new(),
            host_seen: vec![None; n],
            host_groups: 0,
            heap: TimedHeap::new(),
            now: 0,
            out: Vec::new(),
            delivered: 0,
            processed: 0,
            scratch_dirty: Vec::new(),
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Events handled so far (for the events-per-second benchmark).
    pub fn events_processed(&self) -> u64 {
        self.processed
    }

    pub fn kernel(&self, k: KernelId) -> &Kernel {
        &self.kernels[k.0]
    }

    /// A host CPU cgroup with `cpu.shares`.
    pub fn add_host_group(&mut self, shares: u64) -> GroupId {
        let g = GroupId(self.host_groups);
        self.host_groups += 1;
        self.kernels[0].add_group(g, shares);
        g
    }

    /// A VM of `vcpus` vCPUs whose threads sit in a host group of their
    /// own (as libvirt does), running `guest` as its scheduler.
    pub fn add_vm(
        &mut self,
        vcpus: usize,
        guest: FairKind,
        shares: u64,
    ) -> Result<(VmId, KernelId), String> {
        if vcpus == 0 || vcpus > self.platform.max_vcpus {
            return Err(format!(
                "a VM on platform '{}' has 1 to {} vCPUs, not {vcpus}",
                self.platform.name, self.platform.max_vcpus
            ));
        }
        let group = self.add_host_group(shares);
        let k = self.kernels.len();
        let mut kern = make_kernel(self.platform.guest_cfg(vcpus), guest);
        for c in &mut kern.cpus {
            c.powered = false;
        }
        self.kernels.push(kern);
        self.cpu_ev.push(vec![CpuEv::default(); vcpus]);
        let mut tasks = Vec::new();
        for i in 0..vcpus {
            let spec = TaskSpec {
                name: format!("vm{}-vcpu{i}", self.vms.len()),
                group: Some(group),
                cpu: i % self.platform.cores,
                ..TaskSpec::busy_loop("vcpu")
            };
            let t = self.kernels[0].spawn(&spec, true, self.now);
            self.vcpu_of.resize(t.idx() + 1, None);
            self.vcpu_of[t.idx()] = Some((k, i));
            tasks.push(t);
        }
        self.vms.push(Vm {
            vcpus: tasks,
            group,
        });
        Ok((VmId(self.vms.len() - 1), KernelId(k)))
    }

    /// The host thread of a VM's vCPU.
    /// Caps a host group at `cap_pct` percent of one core (a Xen domain's
    /// `cap` under credit; other schedulers ignore it).
    pub fn set_group_cap(&mut self, g: GroupId, cap_pct: u32) {
        self.kernels[0].set_group_cap(g, cap_pct);
    }

    pub fn vcpu_task(&self, vm: VmId, i: usize) -> TaskId {
        self.vms[vm.0].vcpus[i]
    }

    pub fn vm_group(&self, vm: VmId) -> GroupId {
        self.vms[vm.0].group
    }

    pub fn spawn(&mut self, k: KernelId, spec: TaskSpec) -> TaskId {
        let t = self.kernels[k.0].spawn(&spec, false, self.now);
        self.flush();
        t
    }

    /// Changes a task's policy (`sched_setscheduler`): off its queue,
    /// new policy, back on.
    pub fn set_policy(&mut self, k: KernelId, t: TaskId, policy: Policy) {
        self.kernels[k.0].set_policy(t, policy, self.now);
        self.flush();
    }

    pub fn set_burst(&mut self, k: KernelId, t: TaskId, work: Nanos) {
        self.kernels[k.0].set_burst(t, work, self.now);
        self.flush();
    }

    /// `sched_yield()` by a running task.
    pub fn yield_task(&mut self, k: KernelId, t: TaskId) {
        self.kernels[k.0].yield_now(t, self.now);
        self.flush();
    }

    pub fn block(&mut self, k: KernelId, t: TaskId) {
        self.kernels[k.0].block(t, self.now);
        self.flush();
    }

    pub fn wake(&mut self, k: KernelId, t: TaskId) {
        self.kernels[k.0].wake(t, self.now);
        self.flush();
    }

    /// Tells task `t`'s class something it cannot see (see [`TaskHint`]).
    pub fn hint(&mut self, k: KernelId, t: TaskId, h: TaskHint) {
        self.kernels[k.0].hint(t, h, self.now);
        self.flush();
    }

    /// A virtual interrupt for guest `k` whose handler wakes its blocked
    /// task `t` (a virtqueue's completion), delivered to the vCPU `t` last
    /// ran on: taken at once if the vCPU runs (a VM exit), else when it
    /// next runs, waking a halted vCPU thread. The host's class hears of
    /// it first ([`TaskHint::VirtualInterrupt`]).
    pub fn interrupt_wake(&mut self, k: KernelId, t: TaskId) {
        assert!(k != KernelId::HOST, "a virtual interrupt goes to a guest");
        let cpu = self.kernels[k.0].tasks[t.idx()].cpu;
        let vcpu = self.vms[k.0 - 1].vcpus[cpu];
        self.kernels[0].hint(vcpu, TaskHint::VirtualInterrupt, self.now);
        self.ipi_wake(k, t);
    }

    /// [`Self::interrupt_wake`] for an interrupt the host's class is not
    /// told of: a guest's function-call IPI (`CALL_FUNCTION_SINGLE_VECTOR`),
    /// which is neither a virtqueue interrupt nor a rescheduling IPI.
    pub fn ipi_wake(&mut self, k: KernelId, t: TaskId) {
        assert!(k != KernelId::HOST, "a virtual interrupt goes to a guest");
        if self.kernels[k.0].tasks[t.idx()].state == TaskState::Blocked {
            self.timer_fired(k.0, t);
        }
        self.flush();
    }

    /// Blocks `t` until the absolute time `deadline`
    /// (`clock_nanosleep(TIMER_ABSTIME)`); its timer fires on the CPU it
    /// last ran on.
    pub fn sleep_until(&mut self, k: KernelId, t: TaskId, deadline: Nanos) {
        self.kernels[k.0].block(t, self.now);
        let gen = self.kernels[k.0].tasks[t.idx()].timer_gen;
        let at = deadline.max(self.now) + self.platform.timer_irq_ns;
        self.push(
            at,
            Ev::Timer {
                k: k.0 as u32,
                task: t,
                gen,
            },
        );
        self.flush();
    }

    /// A kernel's `jiffies`: the host's follow the clock; a guest's are
    /// as its kernel last saw the clock (at a tick it processed or when a
    /// vCPU came back), so they stall and jump.
    pub fn jiffies(&self, k: KernelId) -> u64 {
        if k == KernelId::HOST {
            return self.now / self.kernels[0].tick_ns();
        }
        self.kernels[k.0].jiffies
    }

    /// CPU time task `t` has made progress with.
    pub fn progress(&self, k: KernelId, t: TaskId) -> Nanos {
        self.kernels[k.0].tasks[t.idx()].progress
    }

    /// Brings every CPU's accounting up to now (before reading progress).
    pub fn settle_all(&mut self) {
        for k in 0..self.kernels.len() {
            for cpu in 0..self.kernels[k].cpus.len() {
                self.kernels[k].settle(cpu, self.now);
            }
        }
    }

    /// Runs up to `t`, ignoring completions (for workloads that need no
    /// answers, such as busy loops), and settles every CPU.
    pub fn run_until(&mut self, t: Nanos) {
        while let Some(n) = self.next_event_time() {
            if n > t {
                break;
            }
            self.advance_to(n);
        }
        self.advance_to(t);
        self.settle_all();
    }

    pub fn next_event_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|(t, _)| t)
    }

    /// Handles every event up to `limit`, stopping early after the first
    /// instant that produced completions; returns them.
    pub fn advance_to(&mut self, limit: Nanos) -> &[Completion] {
        // Completions that commands produced since the last call (a wake
        // with no switch cost starts its task at once) are returned now;
        // those returned last time are dropped.
        self.out.drain(..self.delivered);
        while let Some((at, &ev)) = self.heap.peek() {
            if at > limit {
                break;
            }
            if !self.out.is_empty() && at > self.now {
                self.delivered = self.out.len();
                return &self.out;
            }
            self.heap.pop();
            self.now = at;
            // A stale event changes nothing, and the previous flush left
            // nothing to react to.
            if self.handle(ev) {
                self.flush();
            }
        }
        if self.out.is_empty() {
            self.now = self.now.max(limit);
        }
        self.delivered = self.out.len();
        &self.out
    }

    fn push(&mut self, at: Nanos, ev: Ev) {
        self.heap.push(at, ev);
    }

    /// Handles one event; false if it was stale (nothing happened).
    fn handle(&mut self, ev: Ev) -> bool {
        let now = self.now;
        match ev {
            Ev::Step { k, cpu, gen } => {
                let (k, cpu) = (k as usize, cpu as usize);
                if self.cpu_ev[k][cpu].step_gen != gen {
                    return false;
                }
                self.cpu_ev[k][cpu].step_at = None;
                self.processed += 1;
                self.kernels[k].step(cpu, now);
            }
            Ev::Tick { k, cpu, gen } => {
                let (k, cpu) = (k as usize, cpu as usize);
                let ce = &mut self.cpu_ev[k][cpu];
                if ce.tick_gen != gen {
                    return false;
                }
                self.processed += 1;
                ce.tick_armed = false;
                if self.kernels[k].cpus[cpu].powered {
                    self.kernels[k].tick(cpu, now);
                } else {
                    ce.tick_pending = true;
                }
                self.kernels[k].dirty.push(cpu);
            }
            Ev::Timer { k, task, gen } => {
                let k = k as usize;
                let t = &self.kernels[k].tasks[task.idx()];
                if t.timer_gen != gen || t.state != TaskState::Blocked {
                    return false;
                }
                self.processed += 1;
                self.timer_fired(k, task);
            }
        }
        true
    }

    /// A sleeper's timer fired: on the host it wakes at once; in a guest
    /// it is a virtual interrupt for the vCPU the task last ran on, taken
    /// now if the vCPU runs (at the cost of a VM exit), else when it next
    /// runs.
    fn timer_fired(&mut self, k: usize, task: TaskId) {
        let now = self.now;
        if k == 0 {
            self.kernels[0].wake(task, now);
            return;
        }
        let cpu = self.kernels[k].tasks[task.idx()].cpu;
        if self.kernels[k].cpus[cpu].powered {
            self.kernels[k].settle(cpu, now);
            self.kernels[k].cpus[cpu].overhead += self.platform.vm_exit_ns;
            self.kernels[k].wake(task, now);
        } else {
            self.cpu_ev[k][cpu].pending.push(task);
        }
        self.kernels[k].dirty.push(cpu);
    }

    /// Reacts to every CPU whose state changed, until nothing changes.
    fn flush(&mut self) {
        loop {
            let mut any = false;
            for k in 0..self.kernels.len() {
                if self.kernels[k].events.is_empty() && self.kernels[k].dirty.is_empty() {
                    continue;
                }
                for ev in self.kernels[k].events.drain(..) {
                    let (task, kind, at) = match ev {
                        Event::Started(t, at) => (t, CompletionKind::Started, at),
                        Event::BurstDone(t, at) => (t, CompletionKind::BurstDone, at),
                    };
                    self.out.push(Completion {
                        kernel: KernelId(k),
                        task,
                        kind,
                        at,
                    });
                }
                if let Some(mut bits) = self.kernels[k].dirty.take_word() {
                    any |= bits != 0;
                    while bits != 0 {
                        self.cpu_changed(k, bits.trailing_zeros() as usize);
                        bits &= bits - 1;
                    }
                    continue;
                }
                let mut dirty = std::mem::take(&mut self.scratch_dirty);
                self.kernels[k].dirty.drain_into(&mut dirty);
                for &cpu in &dirty {
                    any = true;
                    self.cpu_changed(k, cpu);
                }
                dirty.clear();
                self.scratch_dirty = dirty;
            }
            if !any {
                break;
            }
        }
    }

    fn cpu_changed(&mut self, k: usize, cpu: usize) {
        let now = self.now;
        let next = self.kernels[k].next_step(cpu);
        let ce = &mut self.cpu_ev[k][cpu];
        // An event already armed for the same time stays valid.
        if next != ce.step_at {
            ce.step_gen += 1;
            ce.step_at = next;
            let gen = ce.step_gen;
            if let Some(at) = next {
                let (k, cpu) = (k as u32, cpu as u32);
                self.push(at, Ev::Step { k, cpu, gen });
            }
        }
        self.arm_tick(k, cpu);
        if k == 0 {
            let cur = self.kernels[0].curr[cpu];
            let seen = self.host_seen[cpu];
            if cur != seen {
                self.host_seen[cpu] = cur;
                if let Some((gk, gc)) =
                    seen.and_then(|t| self.vcpu_of.get(t.idx()).copied().flatten())
                {
                    self.power(gk, gc, false);
                }
                if let Some((gk, gc)) =
                    cur.and_then(|t| self.vcpu_of.get(t.idx()).copied().flatten())
                {
                    self.power(gk, gc, true);
                }
            }
            return;
        }
        // Guest kernels follow the host in VM order.
        let vcpu = self.vms[k - 1].vcpus[cpu];
        let g = &self.kernels[k];
        let has_work = g.curr[cpu].is_some() || !self.cpu_ev[k][cpu].pending.is_empty();
        let host_state = self.kernels[0].tasks[vcpu.idx()].state;
        if g.cpus[cpu].powered && !has_work {
            // The guest idles: WFI traps and the vCPU thread blocks
            // (`kvm_vcpu_block()`).
            self.kernels[0].block(vcpu, now);
        } else if !g.cpus[cpu].powered && has_work && host_state == TaskState::Blocked {
            // `kvm_vcpu_kick()`: the halted vCPU thread wakes. With no
            // interrupt pending, the guest woke a task on it: a
            // rescheduling IPI.
            if self.cpu_ev[k][cpu].pending.is_empty() {
                self.kernels[0].hint(vcpu, TaskHint::VirtualInterrupt, now);
            }
            self.kernels[0].wake(vcpu, now);
        }
    }

    /// Ticks run on busy, executing CPUs at multiples of 1/HZ (`NO_HZ`
    /// idle stops them on idle ones).
    fn arm_tick(&mut self, k: usize, cpu: usize) {
        let needs = self.kernels[k].needs_tick(cpu);
        let busy = needs && self.kernels[k].cpus[cpu].powered;
        let ce = &mut self.cpu_ev[k][cpu];
        if busy && !ce.tick_armed {
            let tick = self.kernels[k].tick_ns();
            ce.tick_armed = true;
            ce.tick_gen += 1;
            let (gen, at) = (ce.tick_gen, (self.now / tick + 1) * tick);
            let (k, cpu) = (k as u32, cpu as u32);
            self.push(at, Ev::Tick { k, cpu, gen });
        } else if !needs && ce.tick_armed {
            ce.tick_armed = false;
            ce.tick_gen += 1;
        }
    }

    /// The host starts or stops running a vCPU thread.
    fn power(&mut self, k: usize, cpu: usize, on: bool) {
        let now = self.now;
        let g = &mut self.kernels[k];
        g.settle(cpu, now);
        g.cpus[cpu].powered = on;
        g.cpus[cpu].since = now;
        g.dirty.push(cpu);
        if !on {
            return;
        }
        g.cpus[cpu].overhead += self.platform.vm_entry_ns;
        g.catch_up_jiffies(now);
        for t in std::mem::take(&mut self.cpu_ev[k][cpu].pending) {
            self.kernels[k].wake(t, now);
        }
        if std::mem::take(&mut self.cpu_ev[k][cpu].tick_pending) {
            self.kernels[k].tick(cpu, now);
        }
    }
}
