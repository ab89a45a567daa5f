//! The coordination part (see [`crate::coord`] for the model): each VM's
//! guest side (the detector and the help client, which watch the guest
//! BFQ's raised busy queues), the host's arbiter, which VMs the host
//! privileges now, and the counters. It owns the coordination messages in
//! flight and the deadlines of both sides. Actuation, what privileging a
//! VM does to its QEMU threads, is the mode's ([`CoordConfig::actuation`]),
//! applied here to the threads QEMU has.

use super::{Ev, Machine};
use crate::coord::{CoordConfig, CoordStats, Coordination};
use crate::request::Pid;
use devmodel::Nanos;

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

/// The guest side of a coordinated VM.
struct GuestCoord {
    detector: policy::BfqStateDetector,
    client: policy::HelpClient,
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
    /// The guest side (None when the VM does not ask).
    guest: Option<GuestCoord>,
    /// The host privileges the VM's threads now (helped, or statically).
    boosted: bool,
    /// Statically privileged (`static-rt`), whatever the guest says.
    static_boost: bool,
    /// When the current boost began, and the boosted time before it.
    boosted_since: Nanos,
    stats: CoordStats,
}

impl VmCoord {
    fn privileged(&self) -> bool {
        self.boosted || self.static_boost
    }
}

/// Coordination between the guests and the host.
#[derive(Default)]
pub(super) struct Coordinator {
    cfg: CoordConfig,
    /// The host side (modes that ask for help).
    arbiter: Option<policy::Arbiter>,
    /// The pending [`CoordEv::Host`] event.
    host_ev: Option<Nanos>,
    vms: Vec<VmCoord>,
}

impl Coordinator {
    /// Whether the guests ask for help (the mode has an arbiter).
    pub(super) fn asks_for_help(&self) -> bool {
        self.arbiter.is_some()
    }

    /// A VM was added: it gets a guest side that asks for help when the
    /// mode does, and the host's arbiter learns of it.
    pub(super) fn add_vm(&mut self, vm: usize) {
        let mut v = VmCoord::default();
        if let Some(arb) = self.arbiter.as_mut() {
            arb.add_vm(vm as policy::VmId, 1);
            let lease = self.cfg.policy.max_lease_ns;
            v.guest = Some(GuestCoord {
                detector: policy::BfqStateDetector::new(lease)
                    .with_hysteresis(self.cfg.no_help_delay_ns),
                client: policy::HelpClient::new(lease),
                urgency: policy::Urgency::NoHelp,
                greedy: false,
                last_raised: 0,
                timer_ev: None,
            });
        }
        self.vms.push(v);
    }

    /// Applies the arbiter's changes as of `now`; returns the VMs whose
    /// privilege changed, and the arbiter's next deadline.
    fn arbitrate(&mut self, now: Nanos) -> (Vec<usize>, Option<Nanos>) {
        let Some(arb) = self.arbiter.as_mut() else {
            return (Vec::new(), None);
        };
        let changes = arb.update(now);
        let next = arb.next_deadline();
        let mut changed = Vec::new();
        for c in changes {
            let (vm, on) = match c {
                policy::BoostChange::Boost(vm) => (vm as usize, true),
                policy::BoostChange::Unboost(vm, _) => (vm as usize, false),
            };
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
            changed.push(vm);
        }
        (changed, next)
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
        match gc.client.step(now, &gc.urgency)? {
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

    /// The guest side's next deadline after `now`, if it needs a new
    /// [`CoordEv::Guest`] event for it.
    fn guest_timer(&mut self, vm: usize, now: Nanos) -> Option<Nanos> {
        let gc = self.vms[vm].guest.as_mut()?;
        let next = [gc.detector.next_deadline(), gc.client.next_deadline()]
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
        self.coord.arbiter = cfg
            .mode
            .asks_for_help()
            .then(|| policy::Arbiter::new(cfg.policy.clone()));
        self.coord.cfg = cfg;
        Ok(())
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

    /// Coordination counters of VM `vm` so far.
    pub fn coord_stats(&self, vm: usize) -> CoordStats {
        let v = &self.coord.vms[vm];
        let mut s = v.stats;
        if v.boosted {
            s.boosted_ns += self.now() - v.boosted_since;
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
                if let Some(arb) = self.coord.arbiter.as_mut() {
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
        if let Some(t) = self.coord.guest_timer(vm, now) {
            self.q.push(t, Ev::Coord(CoordEv::Guest(vm, t)));
        }
    }

    /// The host's arbiter decides who is boosted now; the changes are
    /// applied to the VMs' QEMU threads.
    fn host_coord_update(&mut self) {
        let now = self.now();
        if !self.coord.asks_for_help() {
            return;
        }
        let (changed, next) = self.coord.arbitrate(now);
        for vm in changed {
            self.actuate(vm);
        }
        if let Some(t) = next {
            let t = t.max(now);
            if self.coord.host_ev.is_none_or(|e| t < e || e < now) {
                self.coord.host_ev = Some(t);
                self.q.push(t, Ev::Coord(CoordEv::Host(t)));
            }
        }
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
        if self.coord.cfg.mode == Coordination::Off {
            return;
        }
        let (boost, prio) = self.coord.cfg.actuation(on);
        self.procs.set_prio(pid, prio);
        let now = self.now();
        self.kernels[super::HOST].block.set_boost(now, pid, boost);
    }
}
