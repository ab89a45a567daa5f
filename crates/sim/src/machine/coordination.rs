//! The coordination part (see [`crate::coord`] for the model): each VM's
//! guest side (the detector and the help client, which watch the guest
//! BFQ's raised busy queues), the host's arbiter, which VMs the host
//! privileges now, and the counters. It owns the coordination messages in
//! flight and the deadlines of both sides. Actuation, what privileging a
//! VM does to its QEMU threads, is the mode's ([`CoordConfig::actuation`]),
//! applied here to the threads QEMU has.
//!
//! In `vhost-ioprio` the guest side asks nothing: on the same need, guestd
//! raises the urgent tasks' ioprio inside the guest for a lease ([`Marks`]),
//! and the VM's vhost-user-blk backend ([`VhostBackend`]) maps each
//! request's header ioprio to the host's with the real backend's policy
//! (`vhostblk::classmap::ClassPolicy`).

use super::{Ev, Machine};
use crate::coord::{CoordConfig, CoordStats, Coordination, BOOST_IOPRIO};
use crate::request::{IoPrio, IoPrioClass, Pid};
use devmodel::Nanos;
use policy::mark::{Mark, MarkEnd, MarkRule, Usage};
use policy::mode::Knob;
use vhostblk::classmap::ClassPolicy;
use vhostblk::ioprio::{Class, Ioprio};

/// The coordination part's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum CoordEv {
    /// A guest's coordination message reaches the host.
    Msg(usize, CoordMsg),
    /// The host's arbiter has a deadline (lease expiry, budget, quantum).
    Host(Nanos),
    /// A guest's coordination client has a deadline (renewal, NO-HELP).
    Guest(usize, Nanos),
}

/// A coordination message in flight (the `policy` protocol's HELP and
/// NO-HELP, as the host's arbiter uses them).
#[derive(Clone, Copy, Debug)]
pub(super) enum CoordMsg {
    Help {
        duration_ns: Nanos,
        reason: policy::HelpReason,
    },
    NoHelp,
}

/// What a coordinated guest does about the need its detector sees.
enum GuestAction {
    /// Asks its host for help (the help modes).
    Ask(policy::HelpClient),
    /// Marks the urgent tasks itself (`vhost-ioprio`).
    Mark(Marks),
}

/// guestd's marks in a `vhost-ioprio` guest: the tasks whose ioprio it
/// raised (`ioprio_set(2)` to [`BOOST_IOPRIO`], what `ionice -c1` sets),
/// each with its mark, the end of its renewal, the ioprio to give back and
/// its I/O time under the mark. How long a mark lasts is the policy crate's
/// [`MarkRule`], the rule guestd applies (`agent::iomark`): the rule's
/// lease of I/O time (here the time the task is urgent, which needs a busy
/// queue: requests queued or in flight), at most its wall-time bound,
/// however long the task stays urgent; a task whose lease ran out while
/// still urgent is spent, and not marked again until it is no longer
/// urgent (a new raising, after it went idle). The rule's service bound is
/// the guest BFQ's own here: it ends a raising after the same
/// `max_service_from_wr`, so the task leaves the urgent list.
struct Marks {
    rule: MarkRule,
    leases: Vec<Lease>,
    spent: Vec<Pid>,
    /// The previous update.
    last: Nanos,
}

/// One task's mark.
struct Lease {
    pid: Pid,
    mark: Mark,
    /// Until when the need renews it.
    until: Nanos,
    old: IoPrio,
    /// The time it was urgent (its queue busy) since the mark.
    io_ns: Nanos,
}

impl Marks {
    fn new(rule: MarkRule) -> Marks {
        Marks {
            rule,
            leases: Vec::new(),
            spent: Vec::new(),
            last: 0,
        }
    }

    /// Applies the need as of `now`: while it lasts, each task of `urgent`
    /// is marked (or its renewal extended to `now + renew`) while the rule
    /// allows; marks whose renewal ran out, whose lease ran out, and all of
    /// them once the need is gone, end. Returns the ioprio changes to make,
    /// and the number of new marks.
    fn update(
        &mut self,
        now: Nanos,
        need: bool,
        urgent: &[Pid],
        renew: Nanos,
        prio_of: impl Fn(Pid) -> IoPrio,
    ) -> (Vec<(Pid, IoPrio)>, u64) {
        let since = now.saturating_sub(self.last);
        self.last = now;
        let mut changes = Vec::new();
        let mut spent = Vec::new();
        let rule = self.rule;
        self.leases.retain_mut(|l| {
            if urgent.contains(&l.pid) {
                l.io_ns += since;
            }
            let used = Usage {
                read: None,
                io_ns: Some(l.io_ns),
            };
            match rule.check(&l.mark, now, need.then_some(l.until), used) {
                Ok(_) => true,
                Err(why) => {
                    changes.push((l.pid, l.old));
                    if why != MarkEnd::NeedOver {
                        spent.push(l.pid);
                    }
                    false
                }
            }
        });
        self.spent.extend(spent);
        self.spent.retain(|p| need && urgent.contains(p));
        let mut new = 0;
        if need {
            for &pid in urgent {
                if self.spent.contains(&pid) {
                    continue;
                }
                match self.leases.iter_mut().find(|l| l.pid == pid) {
                    Some(l) => l.until = now + renew,
                    None => {
                        let used = Usage {
                            read: None,
                            io_ns: Some(0),
                        };
                        self.leases.push(Lease {
                            pid,
                            mark: rule.start(now, used),
                            until: now + renew,
                            old: prio_of(pid),
                            io_ns: 0,
                        });
                        changes.push((pid, BOOST_IOPRIO));
                        new += 1;
                    }
                }
            }
        }
        (changes, new)
    }

    /// When the next mark may end: its renewal's end, or when its lease
    /// runs out if its task stays urgent.
    fn next_deadline(&self) -> Option<Nanos> {
        self.leases
            .iter()
            .map(|l| {
                let used = Usage {
                    read: None,
                    io_ns: Some(l.io_ns),
                };
                self.rule
                    .check(&l.mark, self.last, Some(l.until), used)
                    .unwrap_or(self.last)
            })
            .min()
    }
}

/// A VM's vhost-user-blk backend (`tandem vhost-blk`), as `vhost-ioprio`
/// models it: the real backend's class policy, and its counters.
struct VhostBackend {
    policy: ClassPolicy,
}

/// The `vhostblk` encoding of a simulated ioprio.
fn to_vhost(p: IoPrio) -> Ioprio {
    let class = match p.class {
        IoPrioClass::Rt => Class::Rt,
        IoPrioClass::Be => Class::Be,
        IoPrioClass::Idle => Class::Idle,
    };
    Ioprio::new(class, p.level)
}

/// A simulated ioprio from the `vhostblk` encoding; no class is the
/// issuing thread's own, the default.
fn from_vhost(p: Ioprio) -> IoPrio {
    let class = match p.class {
        Class::None => return IoPrio::DEFAULT,
        Class::Rt => IoPrioClass::Rt,
        Class::Be => IoPrioClass::Be,
        Class::Idle => IoPrioClass::Idle,
    };
    IoPrio::new(class, p.level)
}

/// The guest side of a coordinated VM.
struct GuestCoord {
    detector: policy::BfqStateDetector,
    action: GuestAction,
    /// The current need, as the detector last said.
    urgency: policy::Urgency,
    /// The guest asks for help all the time (a misbehaving guest).
    greedy: bool,
    /// Raised busy queues at the last look.
    last_raised: usize,
    /// The pending [`CoordEv::Guest`] event.
    timer_ev: Option<Nanos>,
}

/// One VM, as coordination sees it.
#[derive(Default)]
struct VmCoord {
    /// The guest side (None when the VM neither asks nor marks).
    guest: Option<GuestCoord>,
    /// The VM's vhost-user-blk backend (`vhost-ioprio` only).
    backend: Option<VhostBackend>,
    /// The host privileges the VM's threads now (helped, or statically).
    boosted: bool,
    /// Statically privileged (`static-rt`), whatever the guest says.
    static_boost: bool,
    /// When the current boost began, and the boosted time before it.
    boosted_since: Nanos,
    /// The host boosts the VM's vCPU threads now (`help-cpu`, `help-all`:
    /// granted by the CPU arbiter; `static-cpu`: always).
    vcpus_boosted: bool,
    /// When the current vCPU boost began.
    vcpus_since: Nanos,
    stats: CoordStats,
}

impl VmCoord {
    fn privileged(&self) -> bool {
        self.boosted || self.static_boost
    }

    /// Starts or ends the vCPU boost at `now`, counting its time.
    fn set_vcpus_boosted(&mut self, on: bool, now: Nanos) {
        if on {
            self.vcpus_since = now;
        } else {
            self.stats.vcpu_boosted_ns += now - self.vcpus_since;
        }
        self.vcpus_boosted = on;
    }
}

/// An arbiter's grants as of `now`, as (VM, boosted) pairs, and its next
/// deadline (nothing without an arbiter).
fn grants(arb: Option<&mut policy::Arbiter>, now: Nanos) -> (Vec<(usize, bool)>, Option<Nanos>) {
    let Some(arb) = arb else {
        return (Vec::new(), None);
    };
    let changes = arb
        .update(now)
        .into_iter()
        .map(|c| match c {
            policy::BoostChange::Boost(vm) => (vm as usize, true),
            policy::BoostChange::Unboost(vm, _) => (vm as usize, false),
        })
        .collect();
    (changes, arb.next_deadline())
}

/// Coordination between the guests and the host.
#[derive(Default)]
pub(super) struct Coordinator {
    cfg: CoordConfig,
    /// The host side of the I/O boost (help modes that boost I/O).
    arbiter: Option<policy::Arbiter>,
    /// The host side of the vCPU boost (help modes that boost vCPUs), with
    /// leases and budgets of its own, as hostd's CPU arbiter: in
    /// `help-all` one HELP goes to both, and each grants or refuses it
    /// within its own budget.
    cpu_arbiter: Option<policy::Arbiter>,
    /// The pending [`CoordEv::Host`] event.
    host_ev: Option<Nanos>,
    vms: Vec<VmCoord>,
}

impl Coordinator {
    /// Whether the guests ask for help (the mode has an arbiter).
    pub(super) fn asks_for_help(&self) -> bool {
        self.arbiter.is_some() || self.cpu_arbiter.is_some()
    }

    /// The host's arbiters: the I/O one, the vCPU one.
    fn arbiters(&mut self) -> impl Iterator<Item = &mut policy::Arbiter> {
        self.arbiter.iter_mut().chain(self.cpu_arbiter.iter_mut())
    }

    /// Whether the guests mark their urgent requests (`vhost-ioprio`).
    pub(super) fn marks_requests(&self) -> bool {
        self.cfg.mode.marks_requests()
    }

    /// A VM was added: it gets a guest side that asks for help, or marks
    /// its urgent tasks, when the mode does, and the host's arbiter or the
    /// VM's backend learns of it.
    pub(super) fn add_vm(&mut self, vm: usize) {
        let mut v = VmCoord::default();
        let lease = self.cfg.policy.max_lease_ns;
        let action = if self.asks_for_help() {
            for arb in self.arbiters() {
                arb.add_vm(vm as policy::VmId, 1);
            }
            Some(GuestAction::Ask(policy::HelpClient::new(lease)))
        } else if self.cfg.mode.marks_requests() {
            let allow_rt = self.cfg.vhost_allow_rt.contains(&vm);
            v.backend = Some(VhostBackend {
                policy: ClassPolicy::new(allow_rt, &self.cfg.policy),
            });
            Some(GuestAction::Mark(Marks::new(self.cfg.mark)))
        } else {
            None
        };
        if let Some(action) = action {
            v.guest = Some(GuestCoord {
                detector: policy::BfqStateDetector::new(lease)
                    .with_hysteresis(self.cfg.no_help_delay_ns),
                action,
                urgency: policy::Urgency::NoHelp,
                greedy: false,
                last_raised: 0,
                timer_ev: None,
            });
        }
        self.vms.push(v);
    }

    /// Applies the arbiters' changes as of `now`; returns the VMs whose
    /// I/O privilege changed, those whose vCPU boost changed, and the
    /// arbiters' next deadline.
    fn arbitrate(&mut self, now: Nanos) -> (Vec<usize>, Vec<usize>, Option<Nanos>) {
        let (io, io_next) = grants(self.arbiter.as_mut(), now);
        let (cpu, cpu_next) = grants(self.cpu_arbiter.as_mut(), now);
        let mut changed = (Vec::new(), Vec::new());
        for (vm, on) in io {
            let v = &mut self.vms[vm];
            if v.boosted == on {
                continue;
            }
            if on {
                v.boosted_since = now;
            } else {
                v.stats.boosted_ns += now - v.boosted_since;
            }
            v.boosted = on;
            changed.0.push(vm);
        }
        for (vm, on) in cpu {
            if self.vms[vm].vcpus_boosted != on {
                self.vms[vm].set_vcpus_boosted(on, now);
                changed.1.push(vm);
            }
        }
        let next = io_next.into_iter().chain(cpu_next).min();
        (changed.0, changed.1, next)
    }

    /// The guest side of VM `vm` looks at its elevator's raised busy
    /// queues, `(interactive, soft_rt)`: the detector turns them into a
    /// need, the client into HELP, renewals and NO-HELP. Returns the
    /// message to send, if any.
    fn guest_step(&mut self, vm: usize, now: Nanos, raised: (usize, usize)) -> Option<CoordMsg> {
        let lease = self.cfg.policy.max_lease_ns;
        let v = &mut self.vms[vm];
        let gc = v.guest.as_mut()?;
        let due = |t: Option<Nanos>| t.is_some_and(|t| t <= now);
        let (interactive, soft_rt) = raised;
        if gc.greedy {
            gc.urgency = policy::Urgency::Help {
                resource: policy::Resource::Io,
                reason: policy::HelpReason::Explicit,
                duration_ns: lease,
            };
        } else if interactive + soft_rt != gc.last_raised || due(gc.detector.next_deadline()) {
            gc.last_raised = interactive + soft_rt;
            if let Some(u) = gc.detector.observe(now, interactive, soft_rt) {
                gc.urgency = u;
            }
        }
        let GuestAction::Ask(client) = &mut gc.action else {
            return None;
        };
        match client.step(now, &gc.urgency)? {
            policy::Message::Help {
                duration_hint_ms,
                reason,
                ..
            } => {
                v.stats.helps_sent += 1;
                v.stats.start_helps_sent += reason.is_start() as u64;
                Some(CoordMsg::Help {
                    duration_ns: duration_hint_ms as Nanos * 1_000_000,
                    reason,
                })
            }
            policy::Message::NoHelp { .. } => {
                v.stats.no_helps_sent += 1;
                Some(CoordMsg::NoHelp)
            }
            _ => None,
        }
    }

    /// The guest side of VM `vm` marks its urgent tasks (`vhost-ioprio`):
    /// while its detector sees a need, the tasks `urgent` lists get their
    /// ioprio raised for a lease. Returns the ioprio changes to make.
    fn guest_mark(
        &mut self,
        vm: usize,
        now: Nanos,
        urgent: &[Pid],
        prio_of: impl Fn(Pid) -> IoPrio,
    ) -> Vec<(Pid, IoPrio)> {
        let lease = self.cfg.policy.max_lease_ns;
        let v = &mut self.vms[vm];
        let Some(gc) = v.guest.as_mut() else {
            return Vec::new();
        };
        let need = matches!(gc.urgency, policy::Urgency::Help { .. });
        let GuestAction::Mark(marks) = &mut gc.action else {
            return Vec::new();
        };
        let (changes, new) = marks.update(now, need, urgent, lease, prio_of);
        v.stats.marks += new;
        changes
    }

    /// Whether VM `vm`'s guest needs urgency now (its detector's last word).
    fn guest_needs(&self, vm: usize) -> bool {
        self.vms[vm]
            .guest
            .as_ref()
            .is_some_and(|gc| matches!(gc.urgency, policy::Urgency::Help { .. }))
    }

    /// VM `vm`'s backend maps a request's header ioprio to the host's
    /// (the real backend's policy); the counters see it.
    fn backend_map(&mut self, vm: usize, header: IoPrio, now: Nanos) -> IoPrio {
        let v = &mut self.vms[vm];
        let Some(b) = v.backend.as_mut() else {
            return IoPrio::DEFAULT;
        };
        let mapped = b.policy.map(to_vhost(header), now);
        let host = from_vhost(mapped.host);
        v.stats.backend_requests += 1;
        v.stats.guest_rt_requests += (header.class == IoPrioClass::Rt) as u64;
        v.stats.host_rt_requests += (host.class == IoPrioClass::Rt) as u64;
        v.stats.rt_demoted += mapped.demoted.is_some() as u64;
        host
    }

    /// The guest side's next deadline after `now`, if it needs a new
    /// [`CoordEv::Guest`] event for it.
    fn guest_timer(&mut self, vm: usize, now: Nanos) -> Option<Nanos> {
        let gc = self.vms[vm].guest.as_mut()?;
        let action_next = match &gc.action {
            GuestAction::Ask(client) => client.next_deadline(),
            GuestAction::Mark(marks) => marks.next_deadline(),
        };
        let next = [gc.detector.next_deadline(), action_next]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min()?;
        if gc.timer_ev.is_none_or(|e| next < e) {
            gc.timer_ev = Some(next);
            return Some(next);
        }
        None
    }
}

impl Machine {
    /// Sets the coordination between guests and host. Call it before
    /// adding VMs: each VM added afterwards gets a guest side that asks for
    /// help when the mode does, and the host's arbiter learns of it.
    pub fn set_coordination(&mut self, cfg: CoordConfig) -> Result<(), String> {
        cfg.policy.validate()?;
        if self.qemu.len() > 0 {
            return Err("coordination must be set before VMs are added".into());
        }
        let help = cfg.mode.asks_for_help();
        self.coord.arbiter =
            (help && cfg.mode.is_io()).then(|| policy::Arbiter::new(cfg.policy.clone()));
        self.coord.cpu_arbiter =
            (help && cfg.mode.boosts_vcpus()).then(|| policy::Arbiter::new(cfg.policy.clone()));
        self.coord.cfg = cfg;
        Ok(())
    }

    /// Whether VM `vm`'s backend may issue RT requests as RT
    /// (`vhost-ioprio`; by default VM 1 may, as `CoordConfig::vhost_allow_rt`
    /// says). Call it before the VM issues I/O: it starts a new budget.
    pub fn set_vhost_allow_rt(&mut self, vm: usize, allow: bool) {
        let policy = &self.coord.cfg.policy;
        if let Some(b) = self.coord.vms[vm].backend.as_mut() {
            b.policy = ClassPolicy::new(allow, policy);
        }
    }

    /// Makes VM `vm` a greedy guest: it asks for help all the time.
    pub fn set_greedy(&mut self, vm: usize) {
        if let Some(gc) = self.coord.vms[vm].guest.as_mut() {
            gc.greedy = true;
        }
        self.poll_guest(vm);
        self.schedule_block_events();
        self.schedule_kicks();
    }

    /// Privileges VM `vm`'s QEMU threads for good (`static-rt`).
    pub fn set_static_boost(&mut self, vm: usize) {
        self.coord.vms[vm].static_boost = true;
        self.actuate(vm);
    }

    /// Boosts VM `vm`'s vCPU threads for good (`static-cpu`).
    pub fn set_static_vcpu_boost(&mut self, vm: usize) {
        let now = self.now();
        self.coord.vms[vm].set_vcpus_boosted(true, now);
        self.actuate_vcpus(vm);
    }

    /// Coordination counters of VM `vm` so far.
    pub fn coord_stats(&self, vm: usize) -> CoordStats {
        let v = &self.coord.vms[vm];
        let mut s = v.stats;
        if v.boosted {
            s.boosted_ns += self.now() - v.boosted_since;
        }
        if v.vcpus_boosted {
            s.vcpu_boosted_ns += self.now() - v.vcpus_since;
        }
        s
    }

    /// Whether the host privileges VM `vm` now.
    pub fn vm_boosted(&self, vm: usize) -> bool {
        self.coord.vms[vm].privileged()
    }

    /// The coordination part's events.
    pub(super) fn on_coord(&mut self, now: Nanos, ev: CoordEv) {
        match ev {
            CoordEv::Msg(vm, msg) => {
                // One message, every arbiter of the mode (both in
                // `help-all`, as hostd's `--help-all`).
                for arb in self.coord.arbiters() {
                    match msg {
                        CoordMsg::Help {
                            duration_ns,
                            reason,
                        } => arb.help_for(vm as policy::VmId, now, duration_ns, reason),
                        CoordMsg::NoHelp => arb.no_help(vm as policy::VmId, now),
                    }
                }
                self.host_coord_update();
            }
            CoordEv::Host(at) => {
                if self.coord.host_ev == Some(at) {
                    self.coord.host_ev = None;
                    self.host_coord_update();
                }
            }
            CoordEv::Guest(vm, at) => {
                if let Some(gc) = self.coord.vms[vm].guest.as_mut() {
                    if gc.timer_ev == Some(at) {
                        gc.timer_ev = None;
                    }
                }
                // The guest is polled after every event.
            }
        }
    }

    /// Every guest side looks at its elevator (after every event).
    pub(super) fn poll_guests(&mut self) {
        for vm in 0..self.qemu.len() {
            self.poll_guest(vm);
        }
    }

    /// The guest side of VM `vm` looks at its elevator; its messages leave
    /// through the channel.
    fn poll_guest(&mut self, vm: usize) {
        let now = self.now();
        let guest = self.qemu.guest_of(vm);
        let since = now.saturating_sub(self.coord.cfg.help_per_raising_ns);
        let raised = self.kernels[guest]
            .block
            .scheduler()
            .as_bfq()
            .map_or((0, 0), |b| b.raised_busy_queues(since));
        if let Some(msg) = self.coord.guest_step(vm, now, raised) {
            let at = self.coord.cfg.channel.delivery(now);
            self.q.push(at, Ev::Coord(CoordEv::Msg(vm, msg)));
        }
        if self.coord.marks_requests() {
            self.mark_guest(vm, since);
        }
        if let Some(t) = self.coord.guest_timer(vm, now) {
            self.q.push(t, Ev::Coord(CoordEv::Guest(vm, t)));
        }
    }

    /// guestd in VM `vm`'s guest (`vhost-ioprio`) raises the ioprio of the
    /// tasks its elevator deems urgent, for a lease, and gives it back when
    /// the lease or the need ends; their next requests carry it.
    fn mark_guest(&mut self, vm: usize, since: Nanos) {
        let now = self.now();
        let urgent = if self.coord.guest_needs(vm) {
            let guest = self.qemu.guest_of(vm);
            self.kernels[guest]
                .block
                .scheduler()
                .as_bfq()
                .map_or_else(Vec::new, |b| b.raised_busy_pids(since))
        } else {
            Vec::new()
        };
        let procs = &self.procs;
        let changes = self
            .coord
            .guest_mark(vm, now, &urgent, |pid| procs.ioc(pid).prio);
        for (pid, prio) in changes {
            self.procs.set_prio(pid, prio);
        }
    }

    /// VM `vm`'s vhost-user-blk backend maps a request's header ioprio to
    /// the host ioprio it issues the request with.
    pub(super) fn vhost_map(&mut self, vm: usize, header: IoPrio) -> IoPrio {
        let now = self.now();
        self.coord.backend_map(vm, header, now)
    }

    /// An RT request of VM `vm`'s backend completed (its RT budget).
    pub(super) fn vhost_rt_done(&mut self, vm: usize) {
        let now = self.now();
        if let Some(b) = self.coord.vms[vm].backend.as_mut() {
            b.policy.rt_done(now);
        }
    }

    /// The host's arbiter decides who is boosted now; the changes are
    /// applied to the VMs' QEMU threads.
    fn host_coord_update(&mut self) {
        let now = self.now();
        if !self.coord.asks_for_help() {
            return;
        }
        let (io, cpu, next) = self.coord.arbitrate(now);
        for vm in io {
            self.actuate(vm);
        }
        for vm in cpu {
            self.actuate_vcpus(vm);
        }
        if let Some(t) = next {
            let t = t.max(now);
            if self.coord.host_ev.is_none_or(|e| t < e || e < now) {
                self.coord.host_ev = Some(t);
                self.q.push(t, Ev::Coord(CoordEv::Host(t)));
            }
        }
    }

    /// Applies VM `vm`'s vCPU boost to its vCPU threads on the CPU model:
    /// `SCHED_RR` at pvsched's priority while boosted, as the CPU model's
    /// `help-cpu` (`cpusched::cyclictest::PVSCHED_RR_PRIO`).
    fn actuate_vcpus(&mut self, vm: usize) {
        let p = if self.coord.vms[vm].vcpus_boosted {
            cpusched::Policy::Rr {
                prio: cpusched::cyclictest::PVSCHED_RR_PRIO,
            }
        } else {
            cpusched::Policy::NORMAL
        };
        let guest = self.qemu.guest_of(vm);
        self.cpu.set_vcpus(guest, p);
    }

    /// Applies VM `vm`'s current privilege to all its live QEMU threads.
    fn actuate(&mut self, vm: usize) {
        for pid in self.qemu_threads(vm) {
            self.actuate_thread(vm, pid);
        }
    }

    /// Applies VM `vm`'s current privilege to one of its QEMU threads: its
    /// ioprio (seen by the elevator on the thread's next request) and the
    /// host elevator's own boost.
    pub(super) fn actuate_thread(&mut self, vm: usize, pid: Pid) {
        let on = self.coord.vms[vm].privileged();
        // `vhost-ioprio` leaves the threads alone: each backend submitter
        // keeps the ioprio it was made with.
        if self.coord.cfg.mode == Coordination::Off
            || self.coord.cfg.mode.io_knob() == Knob::RequestIoprio
        {
            return;
        }
        let (boost, prio) = self.coord.cfg.actuation(on);
        self.procs.set_prio(pid, prio);
        let now = self.now();
        self.kernels[super::HOST].block.set_boost(now, pid, boost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Nanos = 1_000_000_000;
    const LOOK: Nanos = 100_000_000;

    /// guestd's rule in the simulated guest: five readers that the guest's
    /// BFQ keeps raised (urgent) for 25 s lose their marks after the
    /// lease (8 s) and are not marked again while they stay urgent; the app
    /// urgent from 17 s to 23 s is marked for all of it (and the renewal
    /// after); a reader marked
    /// again once it left the urgent list (a new raising) is a new mark.
    #[test]
    fn marks_last_the_rules_lease_and_spent_tasks_wait_for_a_new_raising() {
        let mut m = Marks::new(MarkRule::default());
        let readers: Vec<Pid> = (10..15).collect();
        let app: Pid = 20;
        let mut marked = std::collections::HashMap::<Pid, Nanos>::new();
        let mut prio = std::collections::HashMap::<Pid, IoPrio>::new();
        for step in 0..250 {
            let now = step * LOOK;
            let mut urgent = readers.clone();
            if (17 * SEC..23 * SEC).contains(&now) {
                urgent.push(app);
            }
            let (changes, _) = m.update(now, true, &urgent, SEC, |_| IoPrio::DEFAULT);
            prio.extend(changes);
            for (&pid, &p) in &prio {
                if p == BOOST_IOPRIO {
                    *marked.entry(pid).or_default() += LOOK;
                }
            }
        }
        for r in &readers {
            assert_eq!(marked[r], 8 * SEC, "reader {r}");
        }
        // The app: its whole start, and the renewal's tail after its last
        // urgent look (the lease renewed to one look + `renew`).
        assert_eq!(
            marked[&app],
            6 * SEC + SEC - LOOK,
            "the app, its whole start"
        );
        // A reader leaves the urgent list (idle), then is raised again.
        let now = 25 * SEC;
        m.update(now, true, &[], SEC, |_| IoPrio::DEFAULT);
        let (changes, new) = m.update(now + LOOK, true, &readers[..1], SEC, |_| IoPrio::DEFAULT);
        assert_eq!((changes, new), (vec![(readers[0], BOOST_IOPRIO)], 1));
    }
}
