//! Help from what a user-space daemon in a stock guest can see: execs,
//! per-process I/O, explicit requests. It applies BFQ's rules for weight
//! raising to those signals, so it asks for help in the cases where BFQ in
//! the guest would raise a queue.

use std::collections::{BTreeMap, HashMap};

use crate::detect::softrt::{SoftRtClassifier, SoftRtRules};
use crate::detect::{reason_rank, Urgency};
use crate::protocol::{HelpReason, Resource};
use crate::{Nanos, SEC};

/// Something the guest daemon saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestEvent {
    /// A process started a new program.
    Exec { pid: u32 },
    /// A process did `bytes` of I/O since the daemon last looked.
    IoActivity { pid: u32, bytes: u64 },
    /// A process was blocked waiting for I/O (state D) when the daemon
    /// looked, without new bytes: it is not idle, the device is slow.
    IoWait { pid: u32 },
    /// A user or a program asked for help for `duration_ns`, on behalf of a
    /// process or of the whole guest.
    Explicit {
        duration_ns: Nanos,
        pid: Option<u32>,
    },
    /// A process exited: its needs end.
    ProcessExit { pid: u32 },
    /// The daemon begins a look at every process: the events until the
    /// next `Look` are this look's. A daemon that sends them has its
    /// processes' I/O time counted look by look, however late its looks
    /// come ([`GuestSignalDetector::io_ns`]).
    Look,
    /// What the daemon read of a process's use of the CPU at this look
    /// ([`CpuReading`]): a program still starting that is on a CPU or
    /// waiting for one keeps its exec's need ([`CpuReading::on_cpu_since`]).
    Cpu { pid: u32, reading: CpuReading },
}

/// One reading of a process's use of the CPU, as a daemon in a stock guest
/// sees it (`None`: not readable): the state letter of `/proc/PID/stat`,
/// the run and run-queue wait times of `/proc/PID/schedstat` (the kernel's
/// `se.sum_exec_runtime` and `sched_info.run_delay`, with
/// `CONFIG_SCHED_INFO`), and the voluntary and involuntary context switches
/// of `/proc/PID/status` (`nvcsw`, `nivcsw`). All are the thread group
/// leader's: a start's main thread is the one that loads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuReading {
    /// When it was read (the daemon's clock).
    pub at: Nanos,
    /// State R: running, or runnable and waiting for a CPU.
    pub runnable: bool,
    pub run_ns: Option<Nanos>,
    pub wait_ns: Option<Nanos>,
    pub voluntary: Option<u64>,
    pub involuntary: Option<u64>,
}

/// The share of the time between two readings that a process must have
/// spent running or waiting for a CPU to count as busy on the CPU
/// ([`CpuReading::on_cpu_since`]): half, design choice, "mostly computing
/// rather than sleeping". A program that has finished starting and waits
/// for its user sleeps nearly all the time; one that computes or waits for
/// a CPU between its reads is runnable most of it. Not a higher share:
/// schedstat adds a run-queue wait only when it ends (and a run at a tick
/// or switch, `agent::cfsv::SLEPT_SHARE` measured the lag), so a process
/// kept waiting across a reading shows less than it was runnable; the
/// state letter at the reading covers that case.
pub const ON_CPU_SHARE_PERCENT: u64 = 50;

impl CpuReading {
    /// Whether the process progressed on the CPU at or since the reading
    /// `prev` (`None`: none before): it is runnable now (state R); or it
    /// ran and waited for a CPU [`ON_CPU_SHARE_PERCENT`] of the time since;
    /// or it was preempted (an involuntary switch) and never blocked (no
    /// voluntary one) since, so it was runnable all along. A process that
    /// sleeps (waits for input, a timer, another process) does none of
    /// these; one blocked on I/O is the detector's `IoWait`.
    pub fn on_cpu_since(&self, prev: Option<&CpuReading>) -> bool {
        if self.runnable {
            return true;
        }
        let Some(prev) = prev else {
            return false;
        };
        let elapsed = self.at.saturating_sub(prev.at);
        let delta = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        if let (Some(ran), Some(waited)) = (
            delta(self.run_ns, prev.run_ns),
            delta(self.wait_ns, prev.wait_ns),
        ) {
            let busy = ran.saturating_add(waited);
            if elapsed > 0
                && busy.saturating_mul(100) >= elapsed.saturating_mul(ON_CPU_SHARE_PERCENT)
            {
                return true;
            }
        }
        matches!(
            (
                delta(self.voluntary, prev.voluntary),
                delta(self.involuntary, prev.involuntary),
            ),
            (Some(0), Some(preempted)) if preempted > 0
        )
    }
}

/// How [`GuestSignalDetector`] judges its signals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestSignalConfig {
    /// How long an exec needs help. Default 3 s: BFQ raises a new queue's
    /// weight for a time set by the device's peak rate, about 3-25 s; the
    /// short end keeps a false alarm cheap, and the guest asks again if the
    /// program keeps doing I/O after an idle time.
    pub exec_help_ns: Nanos,
    /// How long after its last I/O (or wait for I/O) a newly executed
    /// program still needs help. Default 1 s: four of guestd's 250 ms looks,
    /// so that a start-up that outlasts `exec_help_ns` because the device is
    /// slow (or the host starves the VM) is not abandoned halfway; a program
    /// that goes quiet loses the help soon after.
    ///
    /// Counted in looks when the daemon's looks come late
    /// ([`GuestSignalConfig::look_period_ns`]): the grace stretches by the
    /// ratio of the last look's spacing to the period, so it still spans
    /// four looks. A guest starved of CPU (a TCG guest on a loaded host)
    /// looks at its processes less often than it means to, and a grace in
    /// wall time shorter than the spacing of two looks ended the need of
    /// a start seen at every one of them.
    pub exec_active_grace_ns: Nanos,
    /// The period of the daemon's looks, if it says where each begins
    /// ([`GuestEvent::Look`]); `None`: the grace is wall time only.
    pub look_period_ns: Option<Nanos>,
    /// How much I/O time an exec's help covers: the time, from its exec on,
    /// in which guestd saw its program's I/O progress (new bytes since the
    /// previous look), not time spent blocked without progress. Default 10 s:
    /// BFQ ends a new queue's interactive weight raising after
    /// `bfq_wr_duration()`, which scales with the device's peak rate; the
    /// host's BFQ computed 10.5 s for the emulated 10 MB/s disk (its trace
    /// logs `raising period dur 0/10500 msec`). A greedy program that starts
    /// and never stops reading costs at most this, and the budget bounds the
    /// rest.
    ///
    /// Why progress and not wall time: a start-up that the host holds back
    /// (its budget spent, or another VM boosted) waits on reads that do not
    /// complete. Counted in wall time, its help ran out while it waited: in
    /// real runs such starts went on unboosted to the 60 s timeout once the
    /// budget allowed a boost again. Counted in progress, it keeps asking
    /// and is boosted when the budget allows.
    pub exec_help_max_ns: Nanos,
    /// An exec's help ends once its program has read this much since the
    /// exec. Default 120000 sectors (58.6 MiB): BFQ's
    /// `max_service_from_wr`, after which it ends a queue's weight raising
    /// because, by its authors' measurements, an application start-up has
    /// loaded by then and a queue still reading is a greedy process
    /// ("once transferred 110K sectors, these processes have no right to be
    /// weight-raised any longer").
    pub exec_help_max_bytes: u64,
    /// No exec is helped longer than this after the exec, whatever its
    /// progress. Default 25 s: the longest interactive weight raising BFQ
    /// grants (`bfq_wr_duration()` clamps to 3-25 s).
    pub exec_help_deadline_ns: Nanos,
    /// I/O from a process idle at least this long counts as a resume. Default
    /// 2 s: BFQ's `bfq_wr_min_idle_time`, after which it raises a queue that
    /// becomes busy again as if it were new.
    pub io_resume_idle_ns: Nanos,
    /// How long a resume needs help. Default 3 s, as for an exec: BFQ gives a
    /// resumed queue the same raising as a new one.
    pub io_resume_help_ns: Nanos,
    /// The soft real-time rules.
    pub softrt: SoftRtRules,
    /// How many processes' I/O history to keep; beyond that the least
    /// recently active one is forgotten. Default 4096: design choice, more
    /// than the processes doing I/O on a desktop, a bound on memory.
    pub max_tracked_pids: usize,
}

impl Default for GuestSignalConfig {
    fn default() -> Self {
        GuestSignalConfig {
            exec_help_ns: 3 * SEC,
            exec_active_grace_ns: SEC,
            look_period_ns: None,
            exec_help_max_ns: 10 * SEC,
            exec_help_deadline_ns: 25 * SEC,
            exec_help_max_bytes: 120_000 * 512,
            io_resume_idle_ns: 2 * SEC,
            io_resume_help_ns: 3 * SEC,
            softrt: SoftRtRules::default(),
            max_tracked_pids: 4096,
        }
    }
}

impl GuestSignalConfig {
    /// The defaults for a daemon that samples each process's I/O every
    /// `period_ns`: a burst ends only after at least one sample without I/O
    /// (a gap of 1.5 periods), instead of BFQ's 8 ms.
    ///
    /// Why: sampled, a steady reader shows I/O in every sample, so with an
    /// 8 ms gap each sample starts a "burst", the bursts keep the sampling
    /// rhythm, and a reader slowed below BFQ's soft real-time rate passes
    /// for a player. That is what a host that starves the VM does to the
    /// guest's own sequential reader: in one real cell (1r-seq guest, 5r-seq
    /// host) guestd asked 23 times for soft real-time help for that reader
    /// and spent the VM's budget on it. BFQ only raises a queue as soft
    /// real-time if it empties between bursts; a sample without I/O is the
    /// closest a daemon gets. The cost: a player whose period is shorter than
    /// the sampling period looks like a steady reader and is not detected
    /// (BFQ in the guest still raises it; explicit hints still work).
    pub fn for_sampling(period_ns: Nanos) -> GuestSignalConfig {
        let mut c = GuestSignalConfig::default();
        c.softrt.burst_gap_ns = c.softrt.burst_gap_ns.max(period_ns.saturating_mul(3) / 2);
        c.look_period_ns = (period_ns > 0).then_some(period_ns);
        c
    }
}

/// One process's I/O history.
#[derive(Clone, Debug, Default)]
struct ProcessIo {
    /// Last I/O, or the exec that made the process what it is.
    last_seen: Nanos,
    /// When the process started its current program, if guestd saw it.
    exec_at: Option<Nanos>,
    /// Since that exec, the time in which its I/O made progress.
    exec_io_ns: Nanos,
    /// Since that exec, the bytes it read.
    exec_bytes: u64,
    /// The bytes it read since guestd first saw it (a mark's service,
    /// [`crate::mark::MarkRule::greedy_bytes`], counts from these).
    read_bytes: u64,
    /// The time in which it read or waited on I/O since guestd first saw
    /// it (a mark's lease, [`crate::mark::MarkRule::lease_ns`], counts
    /// from these): the time between two sightings of I/O no further apart
    /// than the soft real-time rules' burst gap (1.5 looks for guestd), so
    /// a program that computes between its reads is not charged for it.
    io_ns: Nanos,
    /// The last sighting of its I/O (bytes or a wait).
    last_io: Option<Nanos>,
    /// Its last [`CpuReading`], the base of the next one's judgement.
    cpu: Option<CpuReading>,
    softrt: SoftRtClassifier,
}

impl ProcessIo {
    /// Its I/O was seen at `now`: the time since the last sighting counts
    /// as I/O time if no longer than `gap`, or if that sighting was at the
    /// daemon's previous look (it began at `prev_look`): I/O seen at two
    /// looks in a row was in flight between them, however late the second
    /// look came.
    ///
    /// Why the looks and not only the gap: in a guest starved of CPU (a TCG
    /// guest on a loaded host) guestd's looks come later than its period,
    /// and a reader seen at every look was charged nothing for the gaps
    /// over 1.5 periods. Its mark's lease, counted in this I/O time
    /// ([`crate::mark::MarkRule::lease_ns`]), then never ran out: in the
    /// real `cloud2014-real` run with guest and host 5r-seq (2026-11-26,
    /// load 26 to 35), none of 46 marks ended by the lease, although five
    /// readers read all the time (docs/measurements.md).
    fn io_seen(&mut self, now: Nanos, gap: Nanos, prev_look: Option<Nanos>) {
        if let Some(prev) = self.last_io {
            let since = now.saturating_sub(prev);
            if since <= gap || prev_look.is_some_and(|l| prev >= l) {
                self.io_ns = self.io_ns.saturating_add(since);
            }
        }
        self.last_io = Some(self.last_io.map_or(now, |p| p.max(now)));
    }
}

/// A live need: help for `reason` on behalf of a process (or the guest)
/// until some time.
type NeedKey = (u8, Option<u32>);

/// Turns guest events into an [`Urgency`].
///
/// - an exec needs help for `exec_help_ns`, and longer while its program
///   keeps doing or waiting on I/O (up to `exec_active_grace_ns` after the
///   last sighting, until its I/O has made progress for `exec_help_max_ns`,
///   at most `exec_help_deadline_ns` after the exec), and not once it has
///   read `exec_help_max_bytes`: a start-up
///   lasts as long as its reads take;
/// - I/O from a known process idle for `io_resume_idle_ns` needs help for
///   `io_resume_help_ns` (a process first seen doing I/O does not count: the
///   exec covers new programs, and a daemon that starts late would otherwise
///   ask for help for every process once);
/// - a process whose I/O follows the soft real-time rules needs help until
///   its next burst is due plus the rules' hold time;
/// - an explicit request needs help for as long as it says;
/// - a process's needs end when it exits.
#[derive(Clone, Debug)]
pub struct GuestSignalDetector {
    cfg: GuestSignalConfig,
    processes: HashMap<u32, ProcessIo>,
    /// Live needs by (reason rank, pid): the time each ends and its reason.
    needs: BTreeMap<NeedKey, (Nanos, HelpReason)>,
    /// When the daemon's last two looks began (`GuestEvent::Look`): the
    /// one before the last, and the last.
    looks: (Option<Nanos>, Option<Nanos>),
}

impl GuestSignalDetector {
    pub fn new(cfg: GuestSignalConfig) -> Self {
        GuestSignalDetector {
            cfg,
            processes: HashMap::new(),
            needs: BTreeMap::new(),
            looks: (None, None),
        }
    }

    /// Takes in an event seen at `now`.
    pub fn observe(&mut self, now: Nanos, ev: GuestEvent) {
        match ev {
            GuestEvent::Exec { pid } => {
                self.track(pid).insert(
                    pid,
                    ProcessIo {
                        last_seen: now,
                        exec_at: Some(now),
                        ..ProcessIo::default()
                    },
                );
                let until = now.saturating_add(self.cfg.exec_help_ns);
                self.need(HelpReason::Exec, Some(pid), until);
            }
            GuestEvent::IoActivity { pid, bytes } => self.io(now, pid, bytes),
            // BFQ's idleness is an empty queue (bfq_wr_min_idle_time counts
            // from the last request's completion with nothing queued), and a
            // process blocked on a read has a request queued. Without this, a
            // reader the host starves for 2 s would look idle and then
            // "resume": the starvation itself would ask for help, and its
            // boosts would eat the budget meant for starting programs.
            //
            // Nor is a blocked process soft real-time: BFQ only grants that
            // raising to a queue that empties between its bursts (it computes
            // `soft_rt_next_start` when the queue goes idle), and a process
            // waiting on its reads keeps its queue backlogged. A greedy reader
            // that the host starves reads in slow bursts that would otherwise
            // pass for a player's.
            GuestEvent::IoWait { pid } => {
                if let Some(p) = self.processes.get_mut(&pid) {
                    p.last_seen = p.last_seen.max(now);
                    p.softrt = SoftRtClassifier::default();
                    p.io_seen(now, self.cfg.softrt.burst_gap_ns, self.looks.0);
                }
                self.extend_exec(now, pid);
            }
            GuestEvent::Look => self.looks = (self.looks.1, Some(now)),
            // A start that computes, or waits for a CPU, between its reads
            // is still starting: BFQ keeps a new queue's interactive raising
            // for `bfq_wr_duration()` whether or not the queue empties
            // meanwhile (`bfq_update_wr_data()` ends it by time and service
            // only), and a CPU-starved start (a TCG guest on a loaded host)
            // can spend more than the grace between two reads. Its exec's
            // need is extended as for a wait on I/O, within the same caps,
            // but the time does not count as I/O time (a mark's lease):
            // computing costs no RT service. Only for a program that has
            // read or waited on I/O since its exec: one that only computes
            // (a busy loop) is not loading anything, and keeps the exec's
            // minimum only.
            GuestEvent::Cpu { pid, reading } => {
                let Some(p) = self.processes.get_mut(&pid) else {
                    return;
                };
                let busy = reading.on_cpu_since(p.cpu.as_ref());
                p.cpu = Some(reading);
                if busy && p.last_io.is_some() {
                    self.extend_exec(now, pid);
                }
            }
            GuestEvent::Explicit { duration_ns, pid } => {
                self.need(HelpReason::Explicit, pid, now.saturating_add(duration_ns));
            }
            GuestEvent::ProcessExit { pid } => {
                self.processes.remove(&pid);
                self.needs.retain(|&(_, p), _| p != Some(pid));
            }
        }
    }

    /// The urgency at `now`: help while any need is live, with the strongest
    /// live reason and a duration reaching the end of the latest need.
    pub fn poll(&mut self, now: Nanos) -> Urgency {
        let live: BTreeMap<NeedKey, Nanos> = self
            .needs
            .iter()
            .filter_map(|(&k, &(until, _))| Some((k, self.live_until(k, until, now)?)))
            .collect();
        self.needs.retain(|k, _| live.contains_key(k));
        let strongest = self.needs.iter().next_back().map(|(_, &(_, r))| r);
        let latest = live.values().copied().max();
        match (strongest, latest) {
            (Some(reason), Some(until)) => Urgency::Help {
                resource: Resource::Io,
                reason,
                duration_ns: until.saturating_sub(now).max(1),
            },
            _ => Urgency::NoHelp,
        }
    }

    /// When the urgency changes next without a new event (a need ends). An
    /// exec's need judged at the daemon's looks ([`Self::live_until`]) ends
    /// at a look, which comes as an event.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.needs
            .iter()
            .filter(|(&k, _)| !self.on_look_clock(k))
            .map(|(_, &(until, _))| until)
            .min()
    }

    /// Whether need `k` is judged at the daemon's looks: an exec's need,
    /// once the daemon says where its looks begin.
    fn on_look_clock(&self, k: NeedKey) -> bool {
        k.0 == reason_rank(HelpReason::Exec) && k.1.is_some() && self.looks.1.is_some()
    }

    /// Until when need `k`, which its rules end at `until`, counts as live
    /// at `now` (`None`: over).
    ///
    /// An exec's need is extended by what the daemon sees of its program
    /// at its looks, so it is judged at the looks too: it is over once a
    /// whole look that began after `until` has been seen (the one before
    /// the last, `looks.0`), not at `until` in wall time. In a guest starved
    /// of CPU, guestd's main loop woke at `until` before the sampler's late
    /// look could extend it: in the real `cloud2014-real` check (guest and
    /// host 5r-seq, TCG, 2026-11-26, load about 20) every reader's need
    /// ended at its exec's 3 s and all five were marked again together as
    /// I/O resumes, look after look. Meanwhile such a need reports at least
    /// a look period left. If the looks stop, it ends anyway once `until`
    /// is `exec_help_deadline_ns` past (a safety net, BFQ's longest
    /// raising).
    fn live_until(&self, k: NeedKey, until: Nanos, now: Nanos) -> Option<Nanos> {
        if !self.on_look_clock(k) {
            return (until > now).then_some(until);
        }
        let judged = self.looks.0.unwrap_or(0);
        let stale = until.saturating_add(self.cfg.exec_help_deadline_ns) <= now;
        let period = self.cfg.look_period_ns.unwrap_or(1);
        (until > judged && !stale).then(|| until.max(now.saturating_add(period)))
    }

    /// The processes with a live need at `now`: each pid with the reasons of
    /// its live needs and the time the latest ends. Needs on behalf of no
    /// process (an explicit hint without a pid) are left out. guestd's
    /// in-guest marking (`--mark-ioprio`) acts on these, so the rules of
    /// who is urgent stay here, once.
    pub fn process_needs(&self, now: Nanos) -> Vec<(u32, Vec<HelpReason>, Nanos)> {
        let mut by_pid: BTreeMap<u32, (Vec<HelpReason>, Nanos)> = BTreeMap::new();
        for (&k, &(until, reason)) in &self.needs {
            let (Some(pid), Some(until)) = (k.1, self.live_until(k, until, now)) else {
                continue;
            };
            let e = by_pid.entry(pid).or_insert((Vec::new(), until));
            e.0.push(reason);
            e.1 = e.1.max(until);
        }
        by_pid
            .into_iter()
            .map(|(pid, (reasons, until))| (pid, reasons, until))
            .collect()
    }

    /// The bytes process `pid` has read since it was first seen (its I/O
    /// history, `None` once forgotten or never seen).
    pub fn read_bytes(&self, pid: u32) -> Option<u64> {
        self.processes.get(&pid).map(|p| p.read_bytes)
    }

    /// The time process `pid` has read or waited on I/O since it was first
    /// seen (`None` once forgotten or never seen).
    pub fn io_ns(&self, pid: u32) -> Option<Nanos> {
        self.processes.get(&pid).map(|p| p.io_ns)
    }

    /// The processes still starting at `now` (their exec's need is live):
    /// those whose use of the CPU a daemon reads for [`GuestEvent::Cpu`].
    pub fn starting(&self, now: Nanos) -> Vec<u32> {
        let exec = reason_rank(HelpReason::Exec);
        self.needs
            .iter()
            .filter(|(&k, &(until, _))| k.0 == exec && self.live_until(k, until, now).is_some())
            .filter_map(|(&(_, pid), _)| pid)
            .collect()
    }

    /// How many processes' I/O history is kept.
    pub fn tracked_processes(&self) -> usize {
        self.processes.len()
    }

    fn io(&mut self, now: Nanos, pid: u32, bytes: u64) {
        let cfg = &self.cfg;
        let mut needs = Vec::new();
        match self.processes.get_mut(&pid) {
            Some(p) => {
                // Idle: not seen for the resume's idle time, and not at the
                // daemon's previous look. A process seen at two looks in a
                // row was not idle between them, however late the second
                // came: in the starved guest above, guestd's looks came
                // more than 2 s apart and the guest's five readers, never
                // idle, "resumed" together at one look after another.
                let seen_last_look = self.looks.0.is_some_and(|l| p.last_seen >= l);
                let prev_seen = p.last_seen;
                if now.saturating_sub(p.last_seen) >= cfg.io_resume_idle_ns && !seen_last_look {
                    needs.push((
                        HelpReason::IoResume,
                        now.saturating_add(cfg.io_resume_help_ns),
                    ));
                }
                // The time since the last look (at most a grace, for a
                // process seen again after a pause) had progress.
                if bytes > 0 && p.exec_at.is_some() {
                    let since = now.saturating_sub(p.last_seen);
                    p.exec_io_ns = p
                        .exec_io_ns
                        .saturating_add(since.min(cfg.exec_active_grace_ns));
                    p.exec_bytes = p.exec_bytes.saturating_add(bytes);
                }
                p.read_bytes = p.read_bytes.saturating_add(bytes);
                if bytes > 0 {
                    p.io_seen(now, cfg.softrt.burst_gap_ns, self.looks.0);
                }
                p.last_seen = p.last_seen.max(now);
                // Nor does a burst end between two looks in a row: a sample
                // without I/O is what ends one (`for_sampling`), and late
                // looks made a steady reader's every look a "burst" of a
                // slow player (the same real check: soft real-time help
                // asked for a guest reader).
                let stretched;
                let rules = if seen_last_look {
                    stretched = SoftRtRules {
                        burst_gap_ns: cfg
                            .softrt
                            .burst_gap_ns
                            .max(now.saturating_sub(prev_seen).saturating_add(1)),
                        ..cfg.softrt.clone()
                    };
                    &stretched
                } else {
                    &cfg.softrt
                };
                if let Some(period) = p.softrt.io(rules, now, bytes) {
                    let until = now
                        .saturating_add(period)
                        .saturating_add(cfg.softrt.hold_ns);
                    needs.push((HelpReason::SoftRealTime, until));
                }
            }
            None => {
                let mut p = ProcessIo {
                    last_seen: now,
                    read_bytes: bytes,
                    last_io: (bytes > 0).then_some(now),
                    ..ProcessIo::default()
                };
                p.softrt.io(&cfg.softrt, now, bytes);
                self.track(pid).insert(pid, p);
            }
        }
        for (reason, until) in needs {
            self.need(reason, Some(pid), until);
        }
        self.extend_exec(now, pid);
    }

    /// A program still starting (its exec's need is live) that does or waits
    /// on I/O at `now` keeps needing help a while longer, up to the cap.
    fn extend_exec(&mut self, now: Nanos, pid: u32) {
        let Some((exec_at, io_ns, bytes)) = self
            .processes
            .get(&pid)
            .and_then(|p| Some((p.exec_at?, p.exec_io_ns, p.exec_bytes)))
        else {
            return;
        };
        let key = (reason_rank(HelpReason::Exec), Some(pid));
        if bytes >= self.cfg.exec_help_max_bytes {
            // A start-up has loaded by now: a greedy reader, whose help
            // ends at once, as BFQ ends its raising.
            self.needs.remove(&key);
            return;
        }
        if io_ns >= self.cfg.exec_help_max_ns {
            return; // its share of progress is spent: a greedy reader
        }
        let Some(&(until, _)) = self.needs.get(&key) else {
            return; // over: a later burst of I/O is a resume, not a start
        };
        if self.live_until(key, until, now).is_none() {
            return;
        }
        let cap = exec_at.saturating_add(self.cfg.exec_help_deadline_ns);
        let wanted = now.saturating_add(self.grace()).min(cap);
        if wanted > until {
            self.need(HelpReason::Exec, Some(pid), wanted);
        }
    }

    /// The exec's grace now: [`GuestSignalConfig::exec_active_grace_ns`],
    /// stretched by the lateness of the daemon's last look.
    fn grace(&self) -> Nanos {
        let grace = self.cfg.exec_active_grace_ns;
        match (self.looks, self.cfg.look_period_ns) {
            ((Some(before), Some(last)), Some(period)) if last - before > period => {
                let stretched = u128::from(grace) * u128::from(last - before) / u128::from(period);
                Nanos::try_from(stretched).unwrap_or(Nanos::MAX)
            }
            _ => grace,
        }
    }

    /// Makes room for `pid` in the process table, forgetting the least
    /// recently active process if the table is full.
    fn track(&mut self, pid: u32) -> &mut HashMap<u32, ProcessIo> {
        if !self.processes.contains_key(&pid) && self.processes.len() >= self.cfg.max_tracked_pids {
            let oldest = self
                .processes
                .iter()
                .min_by_key(|(&pid, p)| (p.last_seen, pid))
                .map(|(&pid, _)| pid);
            if let Some(old) = oldest {
                self.processes.remove(&old);
            }
        }
        &mut self.processes
    }

    fn need(&mut self, reason: HelpReason, pid: Option<u32>, until: Nanos) {
        let e = self
            .needs
            .entry((reason_rank(reason), pid))
            .or_insert((until, reason));
        *e = (e.0.max(until), reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MS;

    /// The live needs by process: an exec's, an explicit hint's with and
    /// without a pid; the pid-less one is left out, and an ended one too.
    #[test]
    fn process_needs_by_pid() {
        let mut d = det();
        d.observe(0, GuestEvent::Exec { pid: 7 });
        d.observe(
            0,
            GuestEvent::Explicit {
                duration_ns: 10 * SEC,
                pid: Some(7),
            },
        );
        d.observe(
            0,
            GuestEvent::Explicit {
                duration_ns: SEC,
                pid: Some(8),
            },
        );
        d.observe(
            0,
            GuestEvent::Explicit {
                duration_ns: SEC,
                pid: None,
            },
        );
        let n = d.process_needs(MS);
        assert_eq!(n.len(), 2, "{n:?}");
        assert_eq!(n[0].0, 7);
        assert!(n[0].1.contains(&HelpReason::Exec) && n[0].1.contains(&HelpReason::Explicit));
        assert_eq!(n[0].2, 10 * SEC);
        assert_eq!((n[1].0, n[1].2), (8, SEC));
        assert_eq!(d.process_needs(2 * SEC).len(), 1);
    }

    /// The bytes a process read are counted from its first sighting
    /// (a mark's service counts from them), restart at its exec (a new
    /// program), and are forgotten at its exit.
    #[test]
    fn read_bytes_count_a_process_reads() {
        let mut d = det();
        assert_eq!(d.read_bytes(7), None);
        d.observe(0, GuestEvent::IoActivity { pid: 7, bytes: 100 });
        d.observe(MS, GuestEvent::IoActivity { pid: 7, bytes: 50 });
        d.observe(2 * MS, GuestEvent::IoWait { pid: 7 });
        assert_eq!(d.read_bytes(7), Some(150));
        d.observe(3 * MS, GuestEvent::Exec { pid: 7 });
        assert_eq!(d.read_bytes(7), Some(0));
        d.observe(4 * MS, GuestEvent::IoActivity { pid: 7, bytes: 8 });
        assert_eq!(d.read_bytes(7), Some(8));
        d.observe(5 * MS, GuestEvent::ProcessExit { pid: 7 });
        assert_eq!(d.read_bytes(7), None);
    }

    /// I/O time: the time between sightings of a process's I/O (bytes or a
    /// wait) at guestd's looks; a gap longer than the burst gap (the
    /// program computed) does not count, nor does a look without I/O.
    #[test]
    fn io_time_counts_the_looks_with_io() {
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
        let look = |k: u64| k * 250 * MS;
        d.observe(look(0), GuestEvent::IoActivity { pid: 7, bytes: 1 });
        d.observe(look(1), GuestEvent::IoActivity { pid: 7, bytes: 1 });
        d.observe(look(2), GuestEvent::IoWait { pid: 7 });
        assert_eq!(d.io_ns(7), Some(500 * MS));
        // Looks 3 to 6 without I/O (computing), then reads again.
        d.observe(look(7), GuestEvent::IoActivity { pid: 7, bytes: 1 });
        d.observe(look(8), GuestEvent::IoActivity { pid: 7, bytes: 0 });
        assert_eq!(d.io_ns(7), Some(500 * MS));
        d.observe(look(9), GuestEvent::IoActivity { pid: 7, bytes: 1 });
        assert_eq!(d.io_ns(7), Some(500 * MS), "look 8 had no I/O");
        d.observe(look(10), GuestEvent::IoWait { pid: 7 });
        assert_eq!(d.io_ns(7), Some(750 * MS));
    }

    /// I/O time with late looks (a guest starved of CPU): a reader seen at
    /// every look, the looks 600 ms apart (more than the 375 ms burst gap),
    /// is charged the time between them when the daemon says where each
    /// look begins, and nothing without; a look that misses it breaks the
    /// count.
    #[test]
    fn io_time_counts_late_looks_in_a_row() {
        let run = |looks: bool| {
            let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
            for k in 0..10u64 {
                let t = k * 600 * MS;
                if looks {
                    d.observe(t, GuestEvent::Look);
                }
                if k != 6 {
                    d.observe(t + MS, GuestEvent::IoActivity { pid: 7, bytes: 1 });
                }
            }
            d.io_ns(7).unwrap()
        };
        // Looks 0 to 5 in a row (3 s), then 7 to 9 (1.2 s); look 6 saw
        // nothing.
        assert_eq!(run(true), 4200 * MS);
        assert_eq!(run(false), 0);
    }

    fn reading(at: Nanos, runnable: bool, run_ns: Nanos, wait_ns: Nanos) -> CpuReading {
        CpuReading {
            at,
            runnable,
            run_ns: Some(run_ns),
            wait_ns: Some(wait_ns),
            voluntary: None,
            involuntary: None,
        }
    }

    /// On the CPU: runnable at the reading; or running and waiting for a
    /// CPU half of the time since the last; or preempted and never
    /// blocked. Not: asleep at the reading with a little run time, or
    /// blocked voluntarily.
    #[test]
    fn on_the_cpu_from_proc_readings() {
        let prev = reading(0, false, SEC, SEC);
        let t = 250 * MS;
        assert!(reading(t, true, SEC, SEC).on_cpu_since(Some(&prev)));
        assert!(reading(t, true, 0, 0).on_cpu_since(None), "R needs no base");
        assert!(!reading(t, false, 2 * SEC, 0).on_cpu_since(None));
        // 50 ms run and 75 ms on the run queue of 250 ms: busy.
        let busy = reading(t, false, SEC + 50 * MS, SEC + 75 * MS);
        assert!(busy.on_cpu_since(Some(&prev)));
        // 124 ms of 250: asleep most of the time.
        let idle = reading(t, false, SEC + 100 * MS, SEC + 24 * MS);
        assert!(!idle.on_cpu_since(Some(&prev)));
        // Without schedstat: the context switches.
        let sw = |at, v, i| CpuReading {
            at,
            voluntary: Some(v),
            involuntary: Some(i),
            ..CpuReading::default()
        };
        let base = sw(0, 10, 10);
        assert!(
            sw(t, 10, 12).on_cpu_since(Some(&base)),
            "preempted, never slept"
        );
        assert!(!sw(t, 11, 12).on_cpu_since(Some(&base)), "it blocked");
        assert!(
            !sw(t, 10, 10).on_cpu_since(Some(&base)),
            "asleep throughout"
        );
    }

    /// guestd's detector fed, at each 250 ms look after an exec at 0,
    /// `ev(k)` (I/O events) and a CPU reading with `cpu(k)` (runnable at
    /// the look); the time of the first look at which its exec's need is
    /// over (a resume's need may follow it: I/O after 2 s without is one).
    /// Judged at the looks: a need is over at the look after the first one
    /// that began after its end, 250 ms after it in wall time.
    fn need_ends(ev: impl Fn(u64) -> Option<GuestEvent>, cpu: impl Fn(u64) -> bool) -> Nanos {
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
        d.observe(0, GuestEvent::Exec { pid: 7 });
        (1..=200u64)
            .map(|k| (k, k * SEC / 4))
            .find(|&(k, t)| {
                d.observe(t, GuestEvent::Look);
                if let Some(e) = ev(k) {
                    d.observe(t, e);
                }
                if d.starting(t).contains(&7) {
                    let reading = reading(t, cpu(k), 0, 0);
                    d.observe(t, GuestEvent::Cpu { pid: 7, reading });
                }
                d.poll(t);
                !d.starting(t).contains(&7)
            })
            .map(|(_, t)| t)
            .unwrap()
    }

    /// A start starved of CPU: it reads for 1 s, then is runnable (waiting
    /// for a CPU) for 2 s, then reads for 1 s more. It keeps its exec's
    /// need throughout and loses it 1 s after its last sign of progress;
    /// without the CPU readings it lost it in the middle (the defect).
    #[test]
    fn a_start_waiting_for_a_cpu_keeps_its_need() {
        let read = |k: u64| {
            (k <= 4 || (13..=16).contains(&k)).then_some(GuestEvent::IoActivity {
                pid: 7,
                bytes: 4096,
            })
        };
        let starved = |k: u64| (5..=12).contains(&k);
        assert_eq!(need_ends(read, starved), 5 * SEC + SEC / 4);
        assert_eq!(need_ends(read, |_| false), 3 * SEC + SEC / 4);
    }

    /// Looks 1.5 s apart (a starved guest; guestd means 250 ms): a start
    /// seen waiting on I/O at every look keeps its need (the grace spans
    /// four looks), and loses it five looks after it went quiet. With the grace
    /// in wall time (1 s), the need ended before the next look.
    #[test]
    fn the_grace_spans_four_late_looks() {
        let run = |looks: bool| {
            let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
            if looks {
                d.observe(0, GuestEvent::Look);
            }
            d.observe(0, GuestEvent::Exec { pid: 7 });
            (1..40u64)
                .map(|k| k * 1500 * MS)
                .find(|&t| {
                    if looks {
                        d.observe(t, GuestEvent::Look);
                    }
                    if t <= 9 * SEC {
                        d.observe(t, GuestEvent::IoWait { pid: 7 });
                    }
                    d.poll(t);
                    !d.starting(t).contains(&7)
                })
                .unwrap()
        };
        // Seen until 9 s: the need lasts 6 s (four looks) more, and is over
        // at the look after the first one past its end.
        assert_eq!(run(true), 16 * SEC + SEC / 2);
        // Without looks: the exec's 3 s, extended at 1.5 s to 2.5 s, ends
        // before the look at 3 s can extend it.
        assert_eq!(run(false), 3 * SEC);
    }

    /// The starved guest of the real check: guestd's looks 2.5 s apart.
    /// Its main loop's timer polls between them: an exec's need outlives
    /// its end in wall time until a look has been seen past it, so the next
    /// look's sighting extends it; and readers seen at every look never
    /// "resume" (no look missed them), while one that a look missed and
    /// that was not seen for 2 s does.
    #[test]
    fn late_looks_neither_end_a_start_nor_resume_a_reader() {
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
        let io = |pid| GuestEvent::IoActivity { pid, bytes: 4096 };
        d.observe(0, GuestEvent::Look);
        d.observe(0, io(5));
        d.observe(MS, GuestEvent::Exec { pid: 7 });
        for k in 1..=4u64 {
            let look = k * 2500 * MS;
            // The timer, after the exec's 3 s and before the look at 5 s.
            assert!(d.starting(look - MS).contains(&7), "look {k}");
            assert_eq!(
                d.next_deadline(),
                None,
                "no wake-up for a need judged at looks"
            );
            d.observe(look, GuestEvent::Look);
            d.observe(look + MS, io(5));
            d.observe(look + MS, GuestEvent::IoWait { pid: 7 });
            d.poll(look + MS);
            let needs = d.process_needs(look + MS);
            assert!(
                needs.iter().all(|(pid, _, _)| *pid != 5),
                "look {k}: a reader seen at every look is neither resumed nor a player: {needs:?}"
            );
            assert!(d.starting(look + MS).contains(&7), "look {k}");
        }
        // Look 5 misses the reader, look 6 sees it: 5 s since its last
        // sighting, a look between without it: a resume.
        d.observe(12_500 * MS, GuestEvent::Look);
        d.observe(15_000 * MS, GuestEvent::Look);
        d.observe(15_000 * MS + MS, io(5));
        assert!(d
            .process_needs(15_000 * MS + MS)
            .iter()
            .any(|(pid, r, _)| *pid == 5 && r.contains(&HelpReason::IoResume)));
    }

    /// The caps hold: a program that reads once and then computes for ever
    /// keeps its need until 25 s after its exec (BFQ's longest raising),
    /// and a busy loop that never read keeps only the exec's 3 s.
    #[test]
    fn the_cpu_keeps_a_need_only_within_its_caps() {
        let once = |k: u64| {
            (k == 1).then_some(GuestEvent::IoActivity {
                pid: 7,
                bytes: 4096,
            })
        };
        assert_eq!(need_ends(once, |_| true), 25 * SEC + SEC / 4);
        assert_eq!(need_ends(|_| None, |_| true), 3 * SEC + SEC / 4);
    }

    /// A reader that reads at every look and is runnable at every look
    /// loses its need after its 10 s of progress, as without the CPU
    /// readings: computing between reads does not lengthen a greedy
    /// reader's need.
    #[test]
    fn a_busy_reader_keeps_the_progress_cap() {
        let reads = |_| {
            Some(GuestEvent::IoActivity {
                pid: 7,
                bytes: 4096,
            })
        };
        let end = 11 * SEC;
        assert_eq!(need_ends(reads, |_| true), end);
        assert_eq!(need_ends(reads, |_| false), end);
    }

    fn det() -> GuestSignalDetector {
        GuestSignalDetector::new(GuestSignalConfig::default())
    }

    fn help(reason: HelpReason, duration_ns: Nanos) -> Urgency {
        Urgency::Help {
            resource: Resource::Io,
            reason,
            duration_ns,
        }
    }

    #[test]
    fn an_exec_needs_help_for_three_seconds() {
        let mut d = det();
        assert_eq!(d.poll(0), Urgency::NoHelp);
        d.observe(100, GuestEvent::Exec { pid: 7 });
        assert_eq!(d.poll(100), help(HelpReason::Exec, 3 * SEC));
        assert_eq!(d.next_deadline(), Some(100 + 3 * SEC));
        assert_eq!(d.poll(SEC + 100), help(HelpReason::Exec, 2 * SEC));
        assert_eq!(d.poll(3 * SEC + 100), Urgency::NoHelp);
        assert_eq!(d.next_deadline(), None);
    }

    /// The time of the first look at which a detector configured as guestd's
    /// stops asking for help for pid 7, fed `ev(k)` at the k-th look, every
    /// 250 ms for 30 s after an exec at 0.
    fn help_ends(ev: impl Fn(u64) -> GuestEvent) -> Option<Nanos> {
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
        d.observe(0, GuestEvent::Exec { pid: 7 });
        (1..=120u64).map(|k| k * SEC / 4).find(|&t| {
            d.observe(t, ev(t * 4 / SEC));
            match d.poll(t) {
                Urgency::Help { reason, .. } => {
                    assert_eq!(reason, HelpReason::Exec, "at {t}");
                    false
                }
                Urgency::NoHelp => true,
            }
        })
    }

    #[test]
    fn a_start_that_keeps_reading_keeps_its_help_for_ten_seconds_of_reads() {
        // New bytes at every look, as a greedy reader, or a start-up that the
        // host serves: help for 10 s of I/O; the last extension (at 9.75 s,
        // 1 s of grace) ends it at 10.75 s.
        let reads = |_| GuestEvent::IoActivity {
            pid: 7,
            bytes: 4096,
        };
        assert_eq!(help_ends(reads), Some(10 * SEC + 3 * SEC / 4));
        // One look in three blocked without new bytes: those do not count,
        // so the help lasts 15 s.
        let mixed = |k: u64| {
            if k.is_multiple_of(3) {
                GuestEvent::IoWait { pid: 7 }
            } else {
                GuestEvent::IoActivity {
                    pid: 7,
                    bytes: 4096,
                }
            }
        };
        let end = help_ends(mixed).unwrap();
        assert!((14 * SEC..=16 * SEC).contains(&end), "{end}");
    }

    #[test]
    fn a_program_that_reads_more_than_bfqs_raising_allows_loses_its_help_at_once() {
        // A sequential reader served at 10 MB/s (2.5 MB a look) passes BFQ's
        // 58.6 MiB (61.44 MB) at its 25th look (6.25 s), before its 10 s of
        // progress.
        let fast = |_| GuestEvent::IoActivity {
            pid: 7,
            bytes: 2_500_000,
        };
        assert_eq!(help_ends(fast), Some(6 * SEC + SEC / 4));
        // xterm's recorded start-up reads 9.8 MB, far below the bound: over 4 s
        // here, then quiet (another process's I/O goes on); the help ends 1 s
        // after its last read.
        let xterm = |k: u64| {
            if k <= 16 {
                GuestEvent::IoActivity {
                    pid: 7,
                    bytes: 9_800_000 / 16,
                }
            } else {
                GuestEvent::IoActivity { pid: 8, bytes: 1 }
            }
        };
        assert_eq!(help_ends(xterm), Some(5 * SEC));
    }

    #[test]
    fn a_start_the_host_holds_back_keeps_asking_until_the_deadline() {
        // Mostly blocked without progress (the host does not serve the VM),
        // a read getting through every 2 s: the start keeps asking, up to
        // 25 s after its exec.
        let starved = |k: u64| {
            if k.is_multiple_of(8) {
                GuestEvent::IoActivity {
                    pid: 7,
                    bytes: 4096,
                }
            } else {
                GuestEvent::IoWait { pid: 7 }
            }
        };
        assert_eq!(help_ends(starved), Some(25 * SEC));
    }

    #[test]
    fn a_program_that_goes_quiet_keeps_only_the_exec_minimum_or_the_grace() {
        let mut d = det();
        d.observe(0, GuestEvent::Exec { pid: 7 });
        let io = GuestEvent::IoActivity {
            pid: 7,
            bytes: 4096,
        };
        // Reads at 1 s: the minimum (3 s) still rules.
        d.observe(SEC, io);
        assert_eq!(d.poll(SEC), help(HelpReason::Exec, 2 * SEC));
        // Reads at 2.5 s: help until 3.5 s (1 s grace), then over.
        d.observe(5 * SEC / 2, io);
        assert_eq!(d.poll(3 * SEC), help(HelpReason::Exec, SEC / 2));
        assert_eq!(d.poll(7 * SEC / 2), Urgency::NoHelp);
        // I/O after the need ended does not revive the exec's help.
        d.observe(4 * SEC, io);
        assert_eq!(d.poll(4 * SEC), Urgency::NoHelp);
        // Nor does the I/O of a process that never exec'd under guestd.
        d.observe(5 * SEC, GuestEvent::IoActivity { pid: 9, bytes: 1 });
        d.observe(5 * SEC + 1, GuestEvent::IoWait { pid: 9 });
        assert_eq!(d.poll(5 * SEC + 1), Urgency::NoHelp);
    }

    #[test]
    fn a_sampled_steady_reader_is_not_a_player_but_a_slow_sampled_player_is() {
        // Sampled every 250 ms: a reader the host slows to 1 MB/s shows
        // 256 KiB in every sample.
        let sample = 250 * MS;
        // The times at which each detector asked for help over 10 s of samples.
        let asks = |d: &mut GuestSignalDetector| -> Vec<Nanos> {
            (0..40u64)
                .map(|k| k * sample)
                .filter(|&t| {
                    d.observe(
                        t,
                        GuestEvent::IoActivity {
                            pid: 4,
                            bytes: 256 * 1024,
                        },
                    );
                    d.poll(t) != Urgency::NoHelp
                })
                .collect()
        };
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(sample));
        assert_eq!(asks(&mut d), Vec::<Nanos>::new());
        // With BFQ's 8 ms gap the same samples pass for a player: the reason
        // for the sampling-aware gap.
        assert!(!asks(&mut det()).is_empty());
        // A player reading 64 KiB every second, seen in one sample of four,
        // is soft real-time.
        let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(sample));
        let mut got = Urgency::NoHelp;
        for k in 0..6u64 {
            let t = 20 * SEC + k * SEC;
            d.observe(
                t,
                GuestEvent::IoActivity {
                    pid: 5,
                    bytes: 64 * 1024,
                },
            );
            got = d.poll(t);
        }
        assert!(
            matches!(
                got,
                Urgency::Help {
                    reason: HelpReason::SoftRealTime,
                    ..
                }
            ),
            "{got:?}"
        );
    }

    #[test]
    fn io_after_two_idle_seconds_is_a_resume() {
        let mut d = det();
        let io = |pid| GuestEvent::IoActivity { pid, bytes: 4096 };
        d.observe(0, io(5));
        assert_eq!(d.poll(0), Urgency::NoHelp, "first sight is not a resume");
        d.observe(SEC, io(5));
        assert_eq!(d.poll(SEC), Urgency::NoHelp);
        d.observe(3 * SEC - 1, io(5));
        assert_eq!(d.poll(3 * SEC - 1), Urgency::NoHelp);
        d.observe(5 * SEC, io(5));
        assert_eq!(d.poll(5 * SEC), help(HelpReason::IoResume, 3 * SEC));
    }

    #[test]
    fn waiting_for_a_slow_device_is_not_idleness() {
        let mut d = det();
        let io = |pid| GuestEvent::IoActivity { pid, bytes: 4096 };
        d.observe(0, io(5));
        // Blocked on its reads for 4 s (seen every 250 ms), then served.
        for i in 1..=16 {
            d.observe(i * SEC / 4, GuestEvent::IoWait { pid: 5 });
        }
        d.observe(4 * SEC + 1, io(5));
        assert_eq!(d.poll(4 * SEC + 1), Urgency::NoHelp);
        // A wait seen for a process never seen doing I/O tracks nothing.
        d.observe(5 * SEC, GuestEvent::IoWait { pid: 6 });
        assert_eq!(d.tracked_processes(), 1);
        // Slow bursts with waits in between never pass for soft real-time.
        for k in 0..20u64 {
            let t = 5 * SEC + k * SEC / 4;
            if k % 2 == 0 {
                d.observe(
                    t,
                    GuestEvent::IoActivity {
                        pid: 5,
                        bytes: 65536,
                    },
                );
            } else {
                d.observe(t, GuestEvent::IoWait { pid: 5 });
            }
            assert_eq!(d.poll(t), Urgency::NoHelp, "at {t}");
        }
        // Truly idle for 2 s afterwards: a resume.
        d.observe(12 * SEC, io(5));
        assert_eq!(d.poll(12 * SEC), help(HelpReason::IoResume, 3 * SEC));
    }

    #[test]
    fn a_player_is_soft_real_time_while_it_keeps_its_rhythm() {
        let mut d = det();
        for i in 0..6 {
            d.observe(
                i * 40 * MS,
                GuestEvent::IoActivity {
                    pid: 3,
                    bytes: 32 * 1024,
                },
            );
        }
        let now = 200 * MS;
        assert_eq!(
            d.poll(now),
            help(HelpReason::SoftRealTime, 40 * MS + 300 * MS)
        );
        // It stops: the need lapses after the next period plus the hold.
        assert_eq!(d.poll(now + 340 * MS), Urgency::NoHelp);
    }

    #[test]
    fn the_strongest_reason_and_the_latest_end_are_reported() {
        let mut d = det();
        d.observe(0, GuestEvent::Exec { pid: 1 });
        d.observe(
            0,
            GuestEvent::Explicit {
                duration_ns: SEC,
                pid: None,
            },
        );
        assert_eq!(d.poll(0), help(HelpReason::Explicit, 3 * SEC));
        assert_eq!(d.next_deadline(), Some(SEC));
        assert_eq!(d.poll(SEC), help(HelpReason::Exec, 2 * SEC));
    }

    #[test]
    fn exit_ends_a_process_s_needs() {
        let mut d = det();
        d.observe(0, GuestEvent::Exec { pid: 1 });
        d.observe(
            0,
            GuestEvent::Explicit {
                duration_ns: SEC,
                pid: Some(2),
            },
        );
        d.observe(10, GuestEvent::ProcessExit { pid: 1 });
        assert_eq!(d.poll(10), help(HelpReason::Explicit, SEC - 10));
        d.observe(20, GuestEvent::ProcessExit { pid: 2 });
        assert_eq!(d.poll(20), Urgency::NoHelp);
        assert_eq!(d.tracked_processes(), 0);
    }

    #[test]
    fn the_process_table_is_bounded() {
        let mut d = GuestSignalDetector::new(GuestSignalConfig {
            max_tracked_pids: 3,
            ..GuestSignalConfig::default()
        });
        for pid in 0..10 {
            d.observe(pid as Nanos, GuestEvent::IoActivity { pid, bytes: 1 });
        }
        assert_eq!(d.tracked_processes(), 3);
        // The survivors are the most recent ones: 9 is known, so a resume counts.
        d.observe(5 * SEC, GuestEvent::IoActivity { pid: 9, bytes: 1 });
        assert!(matches!(d.poll(5 * SEC), Urgency::Help { .. }));
    }
}
