//! The host's decision: which VMs are boosted now.
//!
//! The arbiter takes the guests' HELP and NO-HELP messages and, at each
//! [`Arbiter::update`], works out who is boosted:
//!
//! 1. a VM whose lease ran out or who said NO-HELP stops wanting help;
//! 2. a boosted VM that has used up its budget is unboosted; a VM that wants
//!    help but has less than one quantum of budget left waits until enough of
//!    its old boosted time has slid out of the window (so a boost always lasts
//!    a useful while instead of flapping on and off);
//! 3. the VMs raised as newcomers (starting an application, see
//!    [`PolicyConfig::newcomer_factor`]) are all boosted; the `max_boosted`
//!    slots go to the remaining VMs that want help, less one for each raised
//!    VM. A VM keeps its slot for a quantum; when its quantum ends, or a
//!    slot is free, the slots are shared out again by [`crate::fairshare`].
//!
//! Boosts start and end only at `update` (and [`Arbiter::remove_vm`]), which is
//! when the caller applies them, so the time between the two is exactly the
//! time the VM was boosted, and that is what budgets and fair shares count.
//! The caller must call `update` again at [`Arbiter::next_deadline`] (which is
//! "now" right after a message, so a HELP is acted on at once); if it does, no
//! VM ever exceeds its budget, and late calls overshoot by at most the delay.
//!
//! Time must not go backwards: a `now` earlier than one already seen is taken
//! as the latest time seen.

use std::collections::BTreeMap;

use crate::budget::BudgetLedger;
use crate::fairshare::{pick, virtual_service, Candidate, SystemVirtualTime, VirtualTime};
use crate::lease::{Lease, LeaseEnd};
use crate::protocol::HelpReason;
use crate::{Nanos, PolicyConfig, VmId};

/// A change the caller must apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoostChange {
    /// Start favouring this VM.
    Boost(VmId),
    /// Stop favouring this VM, and why.
    Unboost(VmId, UnboostReason),
}

/// Why a boost ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnboostReason {
    /// The guest said it no longer needs help.
    NoHelp,
    /// The guest's lease ran out without a renewal.
    LeaseExpired,
    /// The VM used up its budget for the window.
    BudgetExhausted,
    /// Another VM won the slot when the quantum ended.
    Preempted,
    /// The VM was removed.
    VmRemoved,
}

/// What happened to one VM, for logs and results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmStats {
    /// Total boosted time, up to the last `update`.
    pub boosted_ns: Nanos,
    /// HELP messages received (renewals included).
    pub helps: u64,
    /// Leases that ran out without a NO-HELP.
    pub leases_expired: u64,
    /// Times the budget ended a boost or held back a VM that wanted help
    /// (counted once per stretch of being held back).
    pub budget_denials: u64,
    /// Times the VM lost its slot to another one.
    pub preemptions: u64,
}

/// One VM as the arbiter sees it.
#[derive(Clone, Debug)]
struct VmState {
    weight: u32,
    lease: Lease,
    ledger: BudgetLedger,
    boosted: bool,
    /// When the boosted VM's quantum ends.
    quantum_end: Nanos,
    /// Virtual start time, see [`crate::fairshare`].
    vstart: VirtualTime,
    /// Whether it competed for slots at the last update.
    competing: bool,
    /// Whether the budget held it back at the last update.
    budget_blocked: bool,
    /// When its budget situation changes next (runs out while boosted, or
    /// enough budget is back while held back), as of the last update.
    budget_deadline: Option<Nanos>,
    /// Whether the reason of its latest HELP is a start
    /// ([`HelpReason::is_start`]).
    start_reason: bool,
    /// Whether it wanted help for a start (a live lease, a start reason)
    /// at the last update, and since when it has not (`None`: it never
    /// did).
    asking: bool,
    quiet_since: Option<Nanos>,
    /// Raised as a newcomer until then (see [`PolicyConfig::newcomer_factor`]).
    raised_until: Nanos,
    stats: VmStats,
}

impl VmState {
    /// Weight in the arbitration at `t`: raised newcomers weigh more.
    fn weight_at(&self, t: Nanos, cfg: &PolicyConfig) -> u32 {
        if t < self.raised_until {
            self.weight.saturating_mul(cfg.newcomer_factor)
        } else {
            self.weight
        }
    }
}

impl VmState {
    fn new(weight: u32) -> Self {
        VmState {
            weight: weight.max(1),
            lease: Lease::default(),
            ledger: BudgetLedger::default(),
            boosted: false,
            quantum_end: 0,
            vstart: 0,
            competing: false,
            budget_blocked: false,
            budget_deadline: None,
            start_reason: false,
            asking: false,
            quiet_since: None,
            raised_until: 0,
            stats: VmStats::default(),
        }
    }
}

/// Grants help to VMs under leases and budgets, and shares the boost slots
/// fairly among the VMs that ask.
#[derive(Clone, Debug)]
pub struct Arbiter {
    cfg: PolicyConfig,
    vms: BTreeMap<VmId, VmState>,
    system_vtime: SystemVirtualTime,
    /// Boosted time is charged up to here.
    charged_until: Nanos,
    /// The latest time any call gave.
    now: Nanos,
    /// A message or a removal arrived since the last update.
    update_due: bool,
}

impl Arbiter {
    /// An arbiter with no VMs.
    ///
    /// # Panics
    ///
    /// If `cfg` is not valid ([`PolicyConfig::validate`]); use
    /// [`Arbiter::try_new`] for configurations that come from users.
    pub fn new(cfg: PolicyConfig) -> Self {
        match Self::try_new(cfg) {
            Ok(a) => a,
            Err(e) => panic!("invalid policy configuration: {e}"),
        }
    }

    /// An arbiter with no VMs, or the reason `cfg` is not valid.
    pub fn try_new(cfg: PolicyConfig) -> Result<Self, String> {
        cfg.validate()?;
        Ok(Arbiter {
            cfg,
            vms: BTreeMap::new(),
            system_vtime: SystemVirtualTime::default(),
            charged_until: 0,
            now: 0,
            update_due: false,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Adds a VM with a weight for sharing the slots (0 counts as 1). Adding a
    /// VM that is already known only changes its weight.
    pub fn add_vm(&mut self, vm: VmId, weight: u32) {
        match self.vms.get_mut(&vm) {
            Some(s) => s.weight = weight.max(1),
            None => {
                self.vms.insert(vm, VmState::new(weight));
            }
        }
    }

    /// Forgets a VM; if it was boosted, the caller must unboost it. Its slot
    /// is given out at the next update, which [`Arbiter::next_deadline`] asks
    /// for at once.
    pub fn remove_vm(&mut self, vm: VmId, now: Nanos) -> Vec<BoostChange> {
        let now = self.observe_time(now);
        if !self.vms.contains_key(&vm) {
            return Vec::new();
        }
        self.charge(now);
        self.update_due = true;
        match self.vms.remove(&vm) {
            Some(s) if s.boosted => vec![BoostChange::Unboost(vm, UnboostReason::VmRemoved)],
            _ => Vec::new(),
        }
    }

    /// A HELP (or a renewal) from `vm` at `now` for a start
    /// ([`HelpReason::Interactive`]): see [`Arbiter::help_for`].
    pub fn help(&mut self, vm: VmId, now: Nanos, duration_hint_ns: Nanos) {
        self.help_for(vm, now, duration_hint_ns, HelpReason::Interactive)
    }

    /// A HELP (or a renewal) from `vm` at `now`, for `reason`: it wants
    /// help until `now + min(duration_hint_ns, max_lease_ns)`. A hint of 0
    /// asks for nothing. Only a start ([`HelpReason::is_start`]) can earn
    /// the newcomer raise. Messages from unknown VMs are ignored.
    pub fn help_for(&mut self, vm: VmId, now: Nanos, duration_hint_ns: Nanos, reason: HelpReason) {
        let now = self.observe_time(now);
        let max = self.cfg.max_lease_ns;
        if let Some(s) = self.vms.get_mut(&vm) {
            s.start_reason = reason.is_start();
            s.lease.grant(now, duration_hint_ns, max);
            s.stats.helps += 1;
            self.update_due = true;
        }
    }

    /// A NO-HELP from `vm` at `now`. Messages from unknown VMs are ignored.
    pub fn no_help(&mut self, vm: VmId, now: Nanos) {
        let now = self.observe_time(now);
        if let Some(s) = self.vms.get_mut(&vm) {
            s.lease.withdraw(now);
            self.update_due = true;
        }
    }

    /// Recomputes who is boosted at `now`: expires leases, stops VMs out of
    /// budget, and shares the slots among the VMs that want help. Returns the
    /// changes since the last call: unboosts first, then boosts, each in VM id
    /// order.
    pub fn update(&mut self, now: Nanos) -> Vec<BoostChange> {
        let now = self.observe_time(now);
        self.charge(now);
        self.update_due = false;

        let limits = Limits::of(&self.cfg);
        let mut unboosts = Vec::new();
        let mut candidates = Vec::new();
        let mut keepers: Vec<(Candidate, bool)> = Vec::new();
        let system = self.system_vtime;
        let cfg = &self.cfg;
        for (&vm, s) in &mut self.vms {
            let (change, wants) = settle_vm(vm, s, now, cfg, &limits, system);
            unboosts.extend(change);
            match wants {
                Some(Wants::Keep(c, raised)) => keepers.push((c, raised)),
                Some(Wants::Compete(c)) => candidates.push(c),
                None => {}
            }
        }
        let (candidates, winners) = self.choose(now, candidates, keepers);
        let mut boosts = self.apply_winners(now, &candidates, &winners, &mut unboosts);
        for s in self.vms.values_mut().filter(|s| s.boosted) {
            s.budget_deadline = s.ledger.exhausted_at(now, limits.window, limits.budget);
        }

        unboosts.sort_by_key(change_vm);
        boosts.sort_by_key(change_vm);
        unboosts.extend(boosts);
        unboosts
    }

    /// The VMs that get a slot among `candidates` (keepers that must compete
    /// again joined to them): the raised newcomers all, the others by
    /// virtual start time in the slots left.
    fn choose(
        &mut self,
        now: Nanos,
        mut candidates: Vec<Candidate>,
        keepers: Vec<(Candidate, bool)>,
    ) -> (Vec<Candidate>, Vec<VmId>) {
        // VMs raised as newcomers (starting an application, see
        // `PolicyConfig::newcomer_factor`) are all boosted, each within its
        // budget: two VMs starting applications at once are served side by
        // side, as BFQ serves two raised queues, instead of one waiting for
        // the other's quantum. The slots limit the others, and a raised
        // newcomer waiting for a slot takes it from holders that are not
        // raised at once, as BFQ lets a raised queue preempt the one in
        // service, instead of waiting for the end of their quantum.
        let raised: Vec<VmId> = self
            .vms
            .iter()
            .filter(|(_, s)| s.competing && now < s.raised_until)
            .map(|(&vm, _)| vm)
            .collect();
        let is_raised = |vm: VmId| raised.binary_search(&vm).is_ok();
        let raised_waiting = candidates.iter().any(|c| !c.holding && is_raised(c.vm));
        // Slots left for the VMs that are not raised; holders that no
        // longer fit (a holder's own raise ended while others are raised)
        // compete for them again.
        let room = self.cfg.max_boosted.saturating_sub(raised.len());
        let others_holding = keepers.iter().filter(|&&(_, raised)| !raised).count();
        let displace = raised_waiting || others_holding > room;
        if displace {
            let others = keepers.into_iter().filter(|&(_, raised)| !raised);
            candidates.extend(others.map(|(c, _)| c));
            candidates.sort_by_key(|c| c.vm);
        }
        let others_keeping = if displace { 0 } else { others_holding };

        let min_start = self
            .vms
            .values()
            .filter(|s| s.competing)
            .map(|s| s.vstart)
            .min();
        self.system_vtime.catch_up(min_start);

        let (raised_candidates, others): (Vec<Candidate>, Vec<Candidate>) =
            candidates.iter().partition(|c| is_raised(c.vm));
        let free = room.saturating_sub(others_keeping);
        let mut winners = pick(&others, self.system_vtime, self.cfg.quantum_ns, free);
        winners.extend(raised_candidates.iter().map(|c| c.vm));
        winners.sort_unstable();
        (candidates, winners)
    }

    /// Boosts the `winners` among `candidates` (a new quantum for those
    /// already boosted) and preempts the others that were boosted (into
    /// `unboosts`); returns the boosts.
    fn apply_winners(
        &mut self,
        now: Nanos,
        candidates: &[Candidate],
        winners: &[VmId],
        unboosts: &mut Vec<BoostChange>,
    ) -> Vec<BoostChange> {
        let mut boosts = Vec::new();
        for c in candidates {
            let Some(s) = self.vms.get_mut(&c.vm) else {
                continue;
            };
            let won = winners.binary_search(&c.vm).is_ok();
            if won {
                if !s.boosted {
                    s.boosted = true;
                    s.ledger.start(now);
                    boosts.push(BoostChange::Boost(c.vm));
                }
                s.quantum_end = now.saturating_add(self.cfg.quantum_ns);
            } else if s.boosted {
                unboost(s, now);
                s.stats.preemptions += 1;
                unboosts.push(BoostChange::Unboost(c.vm, UnboostReason::Preempted));
            }
        }
        boosts
    }

    /// The next time [`Arbiter::update`] must be called even if no message
    /// arrives: at once after a message or a removal, else the earliest lease
    /// expiry, budget running out, budget coming back for a VM held back,
    /// quantum end while another VM waits, or end of a boosted VM's newcomer
    /// raise. `None` when nothing is pending.
    pub fn next_deadline(&self) -> Option<Nanos> {
        if self.update_due {
            return Some(self.now);
        }
        let someone_waits = self.vms.values().any(|s| s.competing && !s.boosted);
        self.vms
            .values()
            .flat_map(|s| {
                let quantum = (s.boosted && someone_waits).then_some(s.quantum_end);
                // A boosted VM's raise ending frees the room it took beyond
                // the slots.
                let raise_end = (s.boosted && s.raised_until > self.now).then_some(s.raised_until);
                [s.lease.until(), s.budget_deadline, quantum, raise_end]
            })
            .flatten()
            .min()
    }

    /// Whether `vm` is boosted (as of the last update).
    pub fn is_boosted(&self, vm: VmId) -> bool {
        self.vms.get(&vm).is_some_and(|s| s.boosted)
    }

    /// The boosted VMs, in id order.
    pub fn boosted(&self) -> Vec<VmId> {
        self.vms
            .iter()
            .filter(|(_, s)| s.boosted)
            .map(|(&vm, _)| vm)
            .collect()
    }

    /// The boosted VMs that are raised as newcomers (as of the last
    /// update), in id order: they are boosted beyond the `max_boosted`
    /// slots.
    pub fn raised(&self) -> Vec<VmId> {
        self.vms
            .iter()
            .filter(|(_, s)| s.boosted && self.now < s.raised_until)
            .map(|(&vm, _)| vm)
            .collect()
    }

    /// Whether `vm` holds a live help lease (as of the last call).
    pub fn wants_help(&self, vm: VmId) -> bool {
        self.vms.get(&vm).is_some_and(|s| s.lease.is_live())
    }

    /// `vm`'s boosted time inside the budget window ending at `now` (at or
    /// after the last update); `None` for an unknown VM.
    pub fn budget_used(&self, vm: VmId, now: Nanos) -> Option<Nanos> {
        let now = now.max(self.now);
        self.vms
            .get(&vm)
            .map(|s| s.ledger.used(now, self.cfg.budget_window_ns))
    }

    /// What happened to `vm` so far; `None` for an unknown VM.
    pub fn stats(&self, vm: VmId) -> Option<VmStats> {
        self.vms.get(&vm).map(|s| s.stats)
    }

    /// The known VMs, in id order.
    pub fn vms(&self) -> Vec<VmId> {
        self.vms.keys().copied().collect()
    }

    /// Clamps `now` so time never goes backwards, and remembers it.
    fn observe_time(&mut self, now: Nanos) -> Nanos {
        self.now = self.now.max(now);
        self.now
    }

    /// Charges the boosted VMs for the time since the last charge: their
    /// totals, their virtual times and the system virtual time.
    fn charge(&mut self, now: Nanos) {
        let served = now.saturating_sub(self.charged_until);
        self.charged_until = now;
        if served == 0 {
            return;
        }
        let since = now - served;
        let mut total_weight = 0u64;
        let mut boosted = 0u64;
        for s in self.vms.values_mut() {
            let w = s.weight_at(since, &self.cfg) as u64;
            if s.competing {
                total_weight += w;
            }
            if s.boosted {
                boosted += 1;
                s.stats.boosted_ns += served;
                s.vstart += virtual_service(served, w);
            }
        }
        self.system_vtime
            .advance(served.saturating_mul(boosted), total_weight);
    }
}

/// The budget limits of one update.
struct Limits {
    window: Nanos,
    budget: Nanos,
    /// Whether the budget is less than the window (else it never binds).
    budget_binds: bool,
    /// Admission needs a quantum of budget, or the whole budget if it is
    /// smaller than a quantum: a VM may start a boost only with its use at
    /// most this.
    admit_below: Nanos,
}

impl Limits {
    fn of(cfg: &PolicyConfig) -> Limits {
        let budget = cfg.budget_ns();
        Limits {
            window: cfg.budget_window_ns,
            budget,
            budget_binds: budget < cfg.budget_window_ns,
            admit_below: budget - cfg.quantum_ns.min(budget),
        }
    }
}

/// What a VM wants after [`settle_vm`]: to keep its slot for the rest of
/// its quantum (and whether it is raised), or to compete for one.
enum Wants {
    Keep(Candidate, bool),
    Compete(Candidate),
}

/// One VM's part of an update: settles its lease and newcomer raise,
/// unboosts it if its lease ended or its budget ran out (the change), and
/// says whether it wants a slot.
fn settle_vm(
    vm: VmId,
    s: &mut VmState,
    now: Nanos,
    cfg: &PolicyConfig,
    limits: &Limits,
    system: SystemVirtualTime,
) -> (Option<BoostChange>, Option<Wants>) {
    let ended = s.lease.settle(now);
    if ended == Some(LeaseEnd::Expired) {
        s.stats.leases_expired += 1;
    }
    settle_raise(s, now, cfg);
    s.ledger.forget_before(now, limits.window);
    s.budget_deadline = None;
    if !s.lease.is_live() {
        let mut change = None;
        if s.boosted {
            let reason = match ended {
                Some(LeaseEnd::Withdrawn) => UnboostReason::NoHelp,
                _ => UnboostReason::LeaseExpired,
            };
            unboost(s, now);
            change = Some(BoostChange::Unboost(vm, reason));
        }
        s.competing = false;
        s.budget_blocked = false;
        return (change, None);
    }

    let used = s.ledger.used(now, limits.window);
    let out_of_budget = limits.budget_binds
        && if s.boosted {
            used >= limits.budget
        } else {
            used > limits.admit_below
        };
    if out_of_budget {
        let mut change = None;
        if s.boosted {
            unboost(s, now);
            change = Some(BoostChange::Unboost(vm, UnboostReason::BudgetExhausted));
        }
        if !s.budget_blocked {
            s.stats.budget_denials += 1;
        }
        s.budget_blocked = true;
        s.competing = false;
        s.budget_deadline = Some(s.ledger.falls_to(now, limits.window, limits.admit_below));
        return (change, None);
    }
    s.budget_blocked = false;

    if !s.competing {
        s.vstart = s.vstart.max(system.0);
        s.competing = true;
    }
    let candidate = Candidate {
        vm,
        start: s.vstart,
        weight: s.weight_at(now, cfg),
        holding: s.boosted,
    };
    let wants = if s.boosted && s.quantum_end > now {
        Wants::Keep(candidate, now < s.raised_until)
    } else {
        Wants::Compete(candidate)
    };
    (None, Some(wants))
}

/// A VM that starts asking for a start after a quiet spell (or for the
/// first time) is raised, as BFQ raises a queue that restarts after
/// `bfq_wr_min_idle_time`; the raise ends when it stops asking for a start.
/// A VM already asking for another reason (a soft real-time stream) whose
/// guest now asks for a start counts as starting to ask.
fn settle_raise(s: &mut VmState, now: Nanos, cfg: &PolicyConfig) {
    let asking = s.lease.is_live() && s.start_reason;
    if asking && !s.asking {
        let quiet = s
            .quiet_since
            .is_none_or(|q| now.saturating_sub(q) >= cfg.newcomer_quiet_ns);
        if quiet && cfg.newcomer_factor > 1 {
            s.raised_until = now.saturating_add(cfg.newcomer_raise_ns);
        }
    } else if !asking && s.asking {
        s.quiet_since = Some(now);
        s.raised_until = s.raised_until.min(now);
    }
    s.asking = asking;
}

fn unboost(s: &mut VmState, now: Nanos) {
    s.boosted = false;
    s.ledger.stop(now);
}

fn change_vm(c: &BoostChange) -> VmId {
    match *c {
        BoostChange::Boost(vm) | BoostChange::Unboost(vm, _) => vm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The knobs these tests were written for: a 10 s window (5 s of budget)
    /// and a 100 ms quantum, short enough to follow by hand.
    /// Slot mechanics without the newcomer raise; the tests of the raise
    /// turn it on.
    fn test_cfg() -> PolicyConfig {
        PolicyConfig {
            budget_window_ns: 10 * SEC,
            quantum_ns: 100 * MS,
            newcomer_factor: 1,
            ..PolicyConfig::default()
        }
    }
    use crate::{MS, SEC};

    /// The newcomer raise on, long leases, no budget, 1 s quanta.
    fn raise_cfg() -> PolicyConfig {
        PolicyConfig {
            max_lease_ns: 100 * SEC,
            budget_fraction: 1.0,
            quantum_ns: SEC,
            newcomer_factor: crate::config::DEFAULT_NEWCOMER_FACTOR,
            ..test_cfg()
        }
    }

    fn arbiter(cfg: PolicyConfig, vms: &[(VmId, u32)]) -> Arbiter {
        let mut a = Arbiter::new(cfg);
        for &(vm, w) in vms {
            a.add_vm(vm, w);
        }
        a
    }

    #[test]
    fn help_boosts_and_no_help_unboosts() {
        let mut a = arbiter(test_cfg(), &[(1, 1)]);
        assert_eq!(a.next_deadline(), None);
        a.help(1, 10, SEC);
        assert_eq!(a.next_deadline(), Some(10));
        assert_eq!(a.update(10), vec![BoostChange::Boost(1)]);
        assert!(a.is_boosted(1));
        assert_eq!(a.next_deadline(), Some(10 + SEC));
        a.no_help(1, 500 * MS);
        assert_eq!(
            a.update(500 * MS),
            vec![BoostChange::Unboost(1, UnboostReason::NoHelp)]
        );
        assert_eq!(a.stats(1).unwrap().boosted_ns, 500 * MS - 10);
        assert_eq!(a.next_deadline(), None);
    }

    #[test]
    fn leases_are_capped_and_expire() {
        let mut a = arbiter(test_cfg(), &[(1, 1)]);
        a.help(1, 0, 60 * SEC);
        a.update(0);
        assert_eq!(a.next_deadline(), Some(SEC));
        assert_eq!(a.update(SEC - 1), vec![]);
        assert_eq!(
            a.update(SEC),
            vec![BoostChange::Unboost(1, UnboostReason::LeaseExpired)]
        );
        assert_eq!(a.stats(1).unwrap().leases_expired, 1);
    }

    /// A VM that asks all the time holds the slot; another one that starts
    /// asking after a quiet spell is raised: it takes the slot at once, keeps
    /// almost all of it while raised, and the greedy one gets it back after.
    #[test]
    fn a_newcomer_after_a_quiet_spell_preempts_and_is_favoured() {
        let cfg = raise_cfg();
        let mut a = arbiter(cfg.clone(), &[(1, 1), (2, 1)]);
        a.help(1, 0, 100 * SEC);
        assert_eq!(a.update(0), vec![BoostChange::Boost(1)]);
        // VM 2 has never asked: it is raised when it does, mid-quantum of VM 1.
        let t = 30 * SEC + 300 * MS;
        a.update(t);
        a.help(2, t, 100 * SEC);
        assert_eq!(
            a.update(t),
            vec![
                BoostChange::Unboost(1, UnboostReason::Preempted),
                BoostChange::Boost(2)
            ]
        );
        // While raised (8 s), VM 2 weighs 30 times more.
        let mut t2 = t;
        while t2 < t + cfg.newcomer_raise_ns {
            t2 += 100 * MS;
            a.update(t2);
        }
        let got = a.stats(2).unwrap().boosted_ns;
        assert!(got >= 7 * SEC, "VM 2 boosted {got} ns of the 8 s raise");
        // Then they share equally again: VM 1 is not starved.
        let before = a.stats(1).unwrap().boosted_ns;
        for k in 1..=100 {
            a.update(t2 + k * 100 * MS);
        }
        let gained = a.stats(1).unwrap().boosted_ns - before;
        assert!(gained >= 4 * SEC, "VM 1 got {gained} ns of the next 10 s");
        // Without the raise (factor 1), VM 2 waits for VM 1's quantum.
        let mut b = arbiter(
            PolicyConfig {
                newcomer_factor: 1,
                ..cfg
            },
            &[(1, 1), (2, 1)],
        );
        b.help(1, 0, 100 * SEC);
        b.update(0);
        b.update(t);
        b.help(2, t, 100 * SEC);
        assert_eq!(b.update(t), vec![]);
    }

    /// Only a start earns the raise: a VM that starts asking for a soft
    /// real-time stream competes at its plain weight, and is raised once
    /// its guest asks for a start.
    #[test]
    fn only_a_start_is_raised() {
        let cfg = raise_cfg();
        let mut a = arbiter(cfg, &[(1, 1), (2, 1)]);
        a.help(1, 0, 100 * SEC);
        a.update(0);
        let t = 30 * SEC + 300 * MS;
        a.update(t);
        a.help_for(2, t, 100 * SEC, HelpReason::SoftRealTime);
        assert_eq!(a.update(t), vec![], "a stream waits for the quantum");
        let t2 = t + 50 * MS;
        a.help_for(2, t2, 100 * SEC, HelpReason::Interactive);
        assert_eq!(
            a.update(t2),
            vec![
                BoostChange::Unboost(1, UnboostReason::Preempted),
                BoostChange::Boost(2)
            ],
            "a start preempts"
        );
        assert!(HelpReason::Exec.is_start() && HelpReason::IoResume.is_start());
        assert!(!HelpReason::SoftRealTime.is_start() && !HelpReason::Other(9).is_start());
    }

    /// Two VMs that start applications at once are both raised and both
    /// boosted, beyond the one slot, side by side instead of one after the
    /// other; the VM that asks all the time gets the slot back after.
    #[test]
    fn two_starts_at_once_are_boosted_together() {
        let cfg = raise_cfg();
        let mut a = arbiter(cfg.clone(), &[(1, 1), (2, 1), (3, 1)]);
        a.help(1, 0, 100 * SEC);
        a.update(0);
        let t = 30 * SEC;
        a.update(t);
        a.help(2, t, 2 * SEC);
        a.help(3, t, 2 * SEC);
        assert_eq!(
            a.update(t),
            vec![
                BoostChange::Unboost(1, UnboostReason::Preempted),
                BoostChange::Boost(2),
                BoostChange::Boost(3)
            ]
        );
        assert_eq!(a.raised(), vec![2, 3]);
        // Quantum ends do not part them while they are raised.
        a.update(t + SEC + 500 * MS);
        assert_eq!(a.boosted(), vec![2, 3]);
        a.no_help(2, t + 1800 * MS);
        a.no_help(3, t + 1800 * MS);
        assert_eq!(
            a.update(t + 1800 * MS),
            vec![
                BoostChange::Unboost(2, UnboostReason::NoHelp),
                BoostChange::Unboost(3, UnboostReason::NoHelp),
                BoostChange::Boost(1)
            ]
        );
        // With the raise off, the one slot goes to one of them at a time.
        let mut b = arbiter(
            PolicyConfig {
                newcomer_factor: 1,
                ..cfg
            },
            &[(1, 1), (2, 1), (3, 1)],
        );
        b.help(2, t, 2 * SEC);
        b.help(3, t, 2 * SEC);
        assert_eq!(b.update(t), vec![BoostChange::Boost(2)]);
    }

    #[test]
    fn renewals_keep_the_boost() {
        let mut a = arbiter(test_cfg(), &[(1, 1)]);
        a.help(1, 0, SEC);
        a.update(0);
        for k in 1..=4 {
            a.help(1, k * 500 * MS, SEC);
            assert_eq!(a.update(k * 500 * MS), vec![]);
        }
        assert!(a.is_boosted(1));
        assert_eq!(a.stats(1).unwrap().helps, 5);
    }

    #[test]
    fn the_budget_cuts_a_greedy_vm_and_lets_it_back() {
        let cfg = PolicyConfig {
            max_lease_ns: 100 * SEC,
            ..test_cfg()
        };
        let mut a = arbiter(cfg, &[(1, 1)]);
        a.help(1, 0, 100 * SEC);
        a.update(0);
        assert_eq!(a.next_deadline(), Some(5 * SEC));
        assert_eq!(
            a.update(5 * SEC),
            vec![BoostChange::Unboost(1, UnboostReason::BudgetExhausted)]
        );
        // Back when a quantum of budget is free: the first 100 ms slid out.
        assert_eq!(a.next_deadline(), Some(10 * SEC + 100 * MS));
        assert_eq!(a.update(10 * SEC + 100 * MS), vec![BoostChange::Boost(1)]);
        // Its use stays at 4.9 s while the old boost slides out, then grows:
        // it runs out 100 ms after the old boost has left the window.
        assert_eq!(a.next_deadline(), Some(15 * SEC + 100 * MS));
        let st = a.stats(1).unwrap();
        assert_eq!(st.budget_denials, 1);
    }

    #[test]
    fn one_slot_rotates_every_quantum() {
        let cfg = PolicyConfig {
            budget_fraction: 1.0,
            ..test_cfg()
        };
        let mut a = arbiter(cfg, &[(1, 1), (2, 1)]);
        a.help(1, 0, SEC);
        a.help(2, 0, SEC);
        assert_eq!(a.update(0), vec![BoostChange::Boost(1)]);
        assert_eq!(a.next_deadline(), Some(100 * MS));
        assert_eq!(
            a.update(100 * MS),
            vec![
                BoostChange::Unboost(1, UnboostReason::Preempted),
                BoostChange::Boost(2)
            ]
        );
        assert_eq!(
            a.update(200 * MS),
            vec![
                BoostChange::Unboost(2, UnboostReason::Preempted),
                BoostChange::Boost(1)
            ]
        );
        assert_eq!(a.stats(1).unwrap().preemptions, 1);
    }

    #[test]
    fn a_lone_vm_keeps_its_slot_without_wakeups() {
        let mut a = arbiter(test_cfg(), &[(1, 1), (2, 1)]);
        a.help(1, 0, SEC);
        a.update(0);
        // Only the lease expiry, no quantum end: nobody waits.
        assert_eq!(a.next_deadline(), Some(SEC));
    }

    #[test]
    fn a_newcomer_waits_at_most_a_quantum() {
        let mut a = arbiter(test_cfg(), &[(1, 1), (2, 1)]);
        a.help(1, 0, SEC);
        a.update(0);
        a.help(1, 500 * MS, SEC);
        a.update(500 * MS);
        a.help(2, 520 * MS, SEC);
        // VM 1's quantum was renewed at 500 ms: VM 2 waits for its end.
        assert_eq!(a.update(520 * MS), vec![]);
        assert_eq!(a.next_deadline(), Some(600 * MS));
        assert_eq!(
            a.update(600 * MS),
            vec![
                BoostChange::Unboost(1, UnboostReason::Preempted),
                BoostChange::Boost(2)
            ]
        );
    }

    #[test]
    fn removal_unboosts_and_frees_the_slot() {
        let mut a = arbiter(test_cfg(), &[(1, 1), (2, 1)]);
        a.help(1, 0, SEC);
        a.help(2, 0, SEC);
        a.update(0);
        assert_eq!(
            a.remove_vm(1, 10 * MS),
            vec![BoostChange::Unboost(1, UnboostReason::VmRemoved)]
        );
        assert_eq!(a.next_deadline(), Some(10 * MS));
        assert_eq!(a.update(10 * MS), vec![BoostChange::Boost(2)]);
        assert_eq!(a.stats(1), None);
        assert_eq!(a.remove_vm(1, 20 * MS), vec![]);
    }

    #[test]
    fn two_slots_serve_two_vms_together() {
        let cfg = PolicyConfig {
            max_boosted: 2,
            ..test_cfg()
        };
        let mut a = arbiter(cfg, &[(1, 1), (2, 1), (3, 1)]);
        for vm in 1..=3 {
            a.help(vm, 0, SEC);
        }
        assert_eq!(
            a.update(0),
            vec![BoostChange::Boost(1), BoostChange::Boost(2)]
        );
        assert_eq!(a.boosted(), vec![1, 2]);
    }

    #[test]
    fn unknown_vms_and_backward_time_are_harmless() {
        let mut a = arbiter(test_cfg(), &[(1, 1)]);
        a.help(9, 0, SEC);
        a.no_help(9, 0);
        assert_eq!(a.update(0), vec![]);
        a.help(1, 100, SEC);
        a.update(100);
        assert_eq!(a.update(50), vec![]);
        assert!(a.is_boosted(1));
        assert_eq!(a.stats(9), None);
    }

    #[test]
    fn a_nohelp_after_expiry_counts_as_expiry() {
        let mut a = arbiter(test_cfg(), &[(1, 1)]);
        a.help(1, 0, 10 * MS);
        a.update(0);
        a.no_help(1, 20 * MS);
        assert_eq!(
            a.update(20 * MS),
            vec![BoostChange::Unboost(1, UnboostReason::LeaseExpired)]
        );
    }

    #[test]
    fn invalid_config_is_refused() {
        let cfg = PolicyConfig {
            max_boosted: 0,
            ..test_cfg()
        };
        assert!(Arbiter::try_new(cfg).unwrap_err().contains("max_boosted"));
    }
}
