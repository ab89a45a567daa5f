//! CPU urgency, from what a daemon in a stock guest can see: a program that
//! starts, runnable tasks of a real-time class, a rise of the steal time the
//! hypervisor reports, the daemon's own lateness on a periodic timer, and
//! explicit requests (`tandem hint --cpu`). Each rule and its threshold is
//! here once ([`CpuRules`]), for guestd and the simulator's `help-cpu`.
//!
//! Every rule raises a need that lasts a while after its last sign (a hold);
//! the detector reports the strongest live need as one [`Urgency`] for
//! [`Resource::Cpu`], and [`crate::HelpClient`] turns it into messages.

use crate::detect::{reason_rank, Urgency};
use crate::protocol::{HelpReason, Resource};
use crate::{Nanos, MS, SEC};

/// [`HelpReason::Other`] code of a steal-time rise (the hypervisor ran
/// something else while the guest's vCPUs had work).
pub const STEAL_RISE: HelpReason = HelpReason::Other(1);
/// [`HelpReason::Other`] code of a late wake-up of the guest daemon's
/// periodic timer.
pub const WAKEUP_LATE: HelpReason = HelpReason::Other(2);

/// The CPU rules' thresholds.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuRules {
    /// How long an exec needs CPU help. Default 1 s: pvsched boosts a vCPU
    /// for at most 1 s at a time, and the host caps a boost there anyway;
    /// a start-up that needs longer asks again through its other signs.
    pub exec_help_ns: Nanos,
    /// Runnable tasks of an RT class (`SCHED_FIFO`, `SCHED_RR`) at least
    /// this many: help. Default 1: an RT task that is runnable is, by its
    /// class, one that must not wait, and a vCPU preempted by the host
    /// makes it wait.
    pub rt_runnable_min: u32,
    /// A share of the elapsed CPU time stolen, between two samples, at
    /// least this: help. Default 0.10: an idle host steals well under 1%
    /// (interrupts, host daemons); a host running one CPU hog per core
    /// beside a one-vCPU guest steals about half, two per core two thirds.
    pub steal_share_min: f64,
    /// The daemon's periodic timer. Default 10 ms: one sample per 10 ms
    /// costs the guest nothing measurable and sees a host time slice (CFS
    /// gives a competitor at least `sched_min_granularity`, 3 ms on a
    /// two-core host, and up to `sched_latency`, 12 ms) as a late wake-up.
    pub timer_period_ns: Nanos,
    /// A wake-up later than this past its due time: help. Default 4 ms: one
    /// tick of an HZ=250 host, beyond the timer slack (50 µs) and the
    /// guest's own tick; a wake-up held back longer waited for a host
    /// competitor's slice.
    pub wakeup_late_min_ns: Nanos,
    /// How long the need of an RT task, a steal rise or a late wake-up
    /// outlives its last sign. Default 500 ms: half of the host's 1 s cap,
    /// so a guest that stops seeing the sign stops asking before the cap
    /// throttles it, and 50 of the timer's periods, enough to bridge the
    /// moments a boosted vCPU shows no sign because the boost works.
    pub hold_ns: Nanos,
}

impl Default for CpuRules {
    fn default() -> Self {
        CpuRules {
            exec_help_ns: SEC,
            rt_runnable_min: 1,
            steal_share_min: 0.10,
            timer_period_ns: 10 * MS,
            wakeup_late_min_ns: 4 * MS,
            hold_ns: 500 * MS,
        }
    }
}

impl CpuRules {
    /// Checks that every threshold makes sense.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.steal_share_min > 0.0 && self.steal_share_min <= 1.0) {
            return Err(format!(
                "steal_share_min = {}: it must be in (0, 1]",
                self.steal_share_min
            ));
        }
        if self.timer_period_ns == 0 || self.hold_ns == 0 || self.exec_help_ns == 0 {
            return Err("timer_period_ns, hold_ns and exec_help_ns must be positive".into());
        }
        if self.rt_runnable_min == 0 {
            return Err("rt_runnable_min must be at least 1".into());
        }
        Ok(())
    }
}

/// Cumulative CPU time of the guest, from the `cpu` line of `/proc/stat`
/// (in clock ticks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time stolen by the hypervisor (the 8th field).
    pub steal: u64,
    /// All of user, nice, system, idle, iowait, irq, softirq and steal
    /// (guest and guest_nice are already in user and nice).
    pub total: u64,
}

impl CpuTimes {
    /// The aggregate `cpu ` line of a `/proc/stat` text; `None` when there is
    /// none or it is malformed. Kernels before 2.6.11 have no steal field:
    /// it reads as 0.
    pub fn from_proc_stat(text: &str) -> Option<CpuTimes> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        if f.len() < 4 {
            return None;
        }
        Some(CpuTimes {
            steal: f.get(7).copied().unwrap_or(0),
            total: f.iter().take(8).sum(),
        })
    }
}

/// What the guest daemon saw, for the CPU rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CpuEvent {
    /// A process started a new program.
    Exec,
    /// Tasks of an RT class that were runnable when the daemon looked.
    RtRunnable { tasks: u32 },
    /// The guest's CPU times now (cumulative).
    Stat(CpuTimes),
    /// The daemon's periodic timer fired `late_ns` after its due time.
    TimerWake { late_ns: Nanos },
    /// A user or a program asked for CPU help for `duration_ns`.
    Explicit { duration_ns: Nanos },
}

/// The live needs, one per rule: (until, reason).
#[derive(Clone, Copy, Debug, Default)]
struct Needs {
    exec: Option<Nanos>,
    rt: Option<Nanos>,
    steal: Option<Nanos>,
    late: Option<Nanos>,
    explicit: Option<Nanos>,
}

/// Applies [`CpuRules`] to the daemon's observations.
#[derive(Clone, Debug)]
pub struct CpuDetector {
    rules: CpuRules,
    needs: Needs,
    last_stat: Option<CpuTimes>,
}

impl CpuDetector {
    pub fn new(rules: CpuRules) -> CpuDetector {
        CpuDetector {
            rules,
            needs: Needs::default(),
            last_stat: None,
        }
    }

    pub fn rules(&self) -> &CpuRules {
        &self.rules
    }

    /// Takes one observation at `now`; returns the urgency after it.
    pub fn observe(&mut self, now: Nanos, ev: CpuEvent) -> Urgency {
        let r = &self.rules;
        let hold = now + r.hold_ns;
        match ev {
            CpuEvent::Exec => extend(&mut self.needs.exec, now + r.exec_help_ns),
            CpuEvent::RtRunnable { tasks } if tasks >= r.rt_runnable_min => {
                extend(&mut self.needs.rt, hold)
            }
            CpuEvent::RtRunnable { .. } => {}
            CpuEvent::Stat(t) => {
                if let Some(prev) = self.last_stat.replace(t) {
                    let total = t.total.saturating_sub(prev.total);
                    let steal = t.steal.saturating_sub(prev.steal);
                    if total > 0 && steal as f64 >= r.steal_share_min * total as f64 {
                        extend(&mut self.needs.steal, hold);
                    }
                }
            }
            CpuEvent::TimerWake { late_ns } if late_ns >= r.wakeup_late_min_ns => {
                extend(&mut self.needs.late, hold)
            }
            CpuEvent::TimerWake { .. } => {}
            CpuEvent::Explicit { duration_ns } => {
                extend(&mut self.needs.explicit, now + duration_ns)
            }
        }
        self.poll(now)
    }

    /// Forgets the needs that ended by `now`; returns the urgency at `now`.
    pub fn poll(&mut self, now: Nanos) -> Urgency {
        let n = &mut self.needs;
        for need in [
            &mut n.exec,
            &mut n.rt,
            &mut n.steal,
            &mut n.late,
            &mut n.explicit,
        ] {
            if need.is_some_and(|u| u <= now) {
                *need = None;
            }
        }
        self.urgency(now)
    }

    /// The strongest need still live at `now`, or no help.
    pub fn urgency(&self, now: Nanos) -> Urgency {
        let n = &self.needs;
        [
            (n.explicit, HelpReason::Explicit),
            (n.rt, HelpReason::SoftRealTime),
            (n.exec, HelpReason::Exec),
            (n.steal, STEAL_RISE),
            (n.late, WAKEUP_LATE),
        ]
        .into_iter()
        .filter_map(|(until, reason)| until.filter(|&u| u > now).map(|u| (u, reason)))
        .max_by_key(|&(u, reason)| (cpu_rank(reason), u))
        .map_or(Urgency::NoHelp, |(until, reason)| Urgency::Help {
            resource: Resource::Cpu,
            reason,
            duration_ns: until - now,
        })
    }

    /// When the urgency changes next without a new observation (a need
    /// ends): call [`CpuDetector::poll`] then.
    pub fn next_deadline(&self) -> Option<Nanos> {
        let n = &self.needs;
        [n.exec, n.rt, n.steal, n.late, n.explicit]
            .into_iter()
            .flatten()
            .min()
    }
}

/// The CPU reasons ranked as [`reason_rank`] ranks the I/O ones, the two
/// CPU-only reasons below an exec: they say the VM waits, not that a
/// program the user is looking at does.
fn cpu_rank(reason: HelpReason) -> u8 {
    match reason {
        r if r == STEAL_RISE => 1,
        r if r == WAKEUP_LATE => 0,
        r => reason_rank(r) + 1,
    }
}

fn extend(until: &mut Option<Nanos>, to: Nanos) {
    *until = Some(until.map_or(to, |u| u.max(to)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(u: Urgency) -> Option<HelpReason> {
        match u {
            Urgency::Help {
                resource: Resource::Cpu,
                reason,
                ..
            } => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn an_exec_asks_for_its_help_time_then_stops() {
        let mut d = CpuDetector::new(CpuRules::default());
        let u = d.observe(0, CpuEvent::Exec);
        assert_eq!(
            u,
            Urgency::Help {
                resource: Resource::Cpu,
                reason: HelpReason::Exec,
                duration_ns: SEC
            }
        );
        assert_eq!(d.next_deadline(), Some(SEC));
        assert_eq!(d.poll(SEC), Urgency::NoHelp);
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn runnable_rt_tasks_ask_for_help_while_seen() {
        let mut d = CpuDetector::new(CpuRules::default());
        assert_eq!(
            d.observe(0, CpuEvent::RtRunnable { tasks: 0 }),
            Urgency::NoHelp
        );
        assert_eq!(
            reason(d.observe(0, CpuEvent::RtRunnable { tasks: 1 })),
            Some(HelpReason::SoftRealTime)
        );
        // Seen again 400 ms later: held 500 ms from then.
        d.observe(400 * MS, CpuEvent::RtRunnable { tasks: 2 });
        assert!(reason(d.urgency(899 * MS)).is_some());
        assert_eq!(d.urgency(900 * MS), Urgency::NoHelp);
    }

    #[test]
    fn a_steal_rise_above_the_share_asks_for_help() {
        let mut d = CpuDetector::new(CpuRules::default());
        let t = |steal, total| CpuEvent::Stat(CpuTimes { steal, total });
        // The first sample has nothing to compare with.
        assert_eq!(d.observe(0, t(500, 10_000)), Urgency::NoHelp);
        // 5 of 100 ticks stolen: below 10%.
        assert_eq!(d.observe(10 * MS, t(505, 10_100)), Urgency::NoHelp);
        // 10 of 100: at the threshold.
        assert_eq!(reason(d.observe(20 * MS, t(515, 10_200))), Some(STEAL_RISE));
        // A counter that went back (a new boot's numbers) is no rise.
        let mut d = CpuDetector::new(CpuRules::default());
        d.observe(0, t(500, 10_000));
        assert_eq!(d.observe(10 * MS, t(0, 100)), Urgency::NoHelp);
    }

    #[test]
    fn a_late_wake_up_past_the_threshold_asks_for_help() {
        let mut d = CpuDetector::new(CpuRules::default());
        assert_eq!(
            d.observe(0, CpuEvent::TimerWake { late_ns: 3 * MS }),
            Urgency::NoHelp
        );
        assert_eq!(
            reason(d.observe(0, CpuEvent::TimerWake { late_ns: 4 * MS })),
            Some(WAKEUP_LATE)
        );
    }

    #[test]
    fn the_strongest_live_need_is_reported_with_its_own_time() {
        let mut d = CpuDetector::new(CpuRules::default());
        d.observe(0, CpuEvent::TimerWake { late_ns: 9 * MS });
        d.observe(0, CpuEvent::Exec);
        let u = d.observe(
            0,
            CpuEvent::Explicit {
                duration_ns: 200 * MS,
            },
        );
        assert_eq!(reason(u), Some(HelpReason::Explicit));
        // The hint is over at 200 ms; the exec (1 s) outranks the lateness.
        assert_eq!(reason(d.poll(300 * MS)), Some(HelpReason::Exec));
        assert_eq!(d.next_deadline(), Some(500 * MS));
    }

    #[test]
    fn proc_stat_cpu_line() {
        let s = "cpu  100 2 30 4000 5 0 6 70 0 0\ncpu0 50 1 15 2000 2 0 3 35 0 0\nintr 1\n";
        assert_eq!(
            CpuTimes::from_proc_stat(s),
            Some(CpuTimes {
                steal: 70,
                total: 100 + 2 + 30 + 4000 + 5 + 6 + 70
            })
        );
        assert_eq!(
            CpuTimes::from_proc_stat("cpu  1 2 3 4\n").map(|t| t.steal),
            Some(0)
        );
        assert_eq!(CpuTimes::from_proc_stat("cpu0 1 2 3 4\n"), None);
        assert_eq!(CpuTimes::from_proc_stat("cpu  1 x 3 4\n"), None);
    }

    #[test]
    fn rules_are_checked() {
        assert!(CpuRules::default().validate().is_ok());
        let bad = CpuRules {
            steal_share_min: 0.0,
            ..CpuRules::default()
        };
        assert!(bad.validate().is_err());
    }
}
