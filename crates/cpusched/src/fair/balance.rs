//! Load balancing of the fair class (kernel/sched/fair.c): where a waking
//! task goes, and which task an idle or underloaded CPU pulls.

use super::FairCore;
use crate::class::{Balance, Ctx};
use crate::task::TaskId;

/// `imbalance_pct` of the multi-core (MC) domain: the busiest CPU must
/// carry 25% more load before the periodic pass moves anything
/// (kernel/sched/topology.c `sd_init()`, 3.x `SD_MC_INIT`).
const IMBALANCE_PCT: u64 = 125;

/// `select_idle_sibling()` for a task whose previous CPU is `prev` (the
/// target: wake-affine pulls towards the waker are not modelled, the
/// wakers here being timers and drivers): `prev` if idle, else an idle CPU
/// of the shared-cache domain (searched from `prev` on), else `prev`. With
/// SMT (`ctx.smt` threads per core: the 3.16 host), as 3.x searches the
/// shared-cache domain's groups: a core whose threads are all idle (its
/// first thread), then an idle SMT sibling of `prev`, else `prev`; a CPU
/// idle while its sibling runs is not taken from another core.
pub fn select_idle_sibling(ctx: &Ctx, prev: usize) -> usize {
    let n = ctx.nr_cpus();
    if ctx.idle(prev) {
        return prev;
    }
    if ctx.smt <= 1 || !n.is_multiple_of(ctx.smt) {
        return (0..n)
            .map(|i| (prev + i) % n)
            .find(|&c| ctx.idle(c))
            .unwrap_or(prev);
    }
    let cores = n / ctx.smt;
    let threads = |core: usize| (0..ctx.smt).map(move |t| core + t * cores);
    let own = prev % cores;
    let idle_core = (1..cores)
        .map(|i| (own + i) % cores)
        .find(|&c| threads(c).all(|cpu| ctx.idle(cpu)));
    if let Some(c) = idle_core {
        return c;
    }
    threads(own).find(|&c| ctx.idle(c)).unwrap_or(prev)
}

/// The queued (not running) fair tasks of `cpu`, with their enqueue
/// order, in task order.
fn queued<'a>(
    f: &'a FairCore,
    ctx: &'a Ctx,
    cpu: usize,
) -> impl Iterator<Item = (u64, TaskId)> + 'a {
    let curr = ctx.curr[cpu];
    f.task_se.iter().enumerate().filter_map(move |(i, &se)| {
        let e = &f.ents[se];
        let t = TaskId(i as u32);
        let queued = e.on_rq && f.rqs[e.rq].cpu == cpu && curr != Some(t);
        (queued && !ctx.tasks[i].policy.is_rt()).then_some((e.seq, t))
    })
}

/// The queued (not running) fair tasks of `cpu`, oldest enqueue first.
fn queued_tasks(f: &FairCore, ctx: &Ctx, cpu: usize) -> Vec<TaskId> {
    let mut v: Vec<(u64, TaskId)> = queued(f, ctx, cpu).collect();
    v.sort();
    v.into_iter().map(|(_, t)| t).collect()
}

/// `sysctl_sched_migration_cost`: a task that ran within the last 0.5 ms
/// is cache hot (kernel/sched/core.c, 3.x).
const MIGRATION_COST_NS: u64 = 500_000;
/// `cache_nice_tries` of the MC domain (3.x `sd_init()` /
/// `SD_MC_INIT`): hot tasks move once this many passes in a row failed.
const CACHE_NICE_TRIES: u32 = 1;

/// `can_migrate_task()`'s cache test (`task_hot()`): a task that ran
/// within the migration cost stays, unless passes keep failing.
fn can_migrate(f: &FairCore, t: TaskId, failed: u32) -> bool {
    if !f.load_tracking {
        return true;
    }
    let se = f.task_se[t.idx()];
    let hot = f.now.saturating_sub(f.ents[se].exec_start) < MIGRATION_COST_NS;
    !hot || failed > CACHE_NICE_TRIES
}

/// `load_balance()` reduced to two CPUs' worth of logic applied to the
/// busiest CPU: newly idle CPUs pull any waiting task; the periodic pass
/// moves a task if the busiest CPU's load exceeds this one's by
/// `IMBALANCE_PCT` and the task's load is at most twice the imbalance
/// (`detach_tasks()`: `load/2 > imbalance` skips a task). Loads are the
/// tracked ones of 3.x (`weighted_cpuload()` and `task_h_load()` read
/// `runnable_load_avg` and `load_avg_contrib`), refreshed first
/// (`update_blocked_averages()`), so a brief burst of wake-ups on a CPU
/// does not look like an imbalance.
pub fn find_task_to_pull(
    f: &mut FairCore,
    ctx: &Ctx,
    cpu: usize,
    why: Balance,
) -> Option<(TaskId, usize)> {
    f.update_blocked_averages(cpu);
    let pass = one_pass(f, ctx, cpu, why);
    // `load_balance()`: a periodic pass that found an imbalance and moved
    // nothing counts as failed; one that moved a task or found none
    // starts over.
    let failed = &mut f.nr_balance_failed[cpu];
    match pass {
        Pass::Pull(t, src) => {
            *failed = 0;
            Some((t, src))
        }
        Pass::Failed => {
            *failed += u32::from(why == Balance::Periodic);
            None
        }
        Pass::Balanced => {
            if why == Balance::Periodic {
                *failed = 0;
            }
            None
        }
    }
}

/// What one balancing pass found.
enum Pass {
    Pull(TaskId, usize),
    Failed,
    Balanced,
}

fn one_pass(f: &FairCore, ctx: &Ctx, cpu: usize, why: Balance) -> Pass {
    let load = |c: usize| f.cpu_load(c);
    let this = load(cpu);
    let busiest = (0..f.ncpus)
        .filter(|&c| c != cpu && queued(f, ctx, c).next().is_some())
        .max_by_key(|&c| (load(c), std::cmp::Reverse(c)));
    let Some(busiest) = busiest else {
        return Pass::Balanced;
    };
    let failed = f.nr_balance_failed.get(cpu).copied().unwrap_or(0);
    let tasks: Vec<TaskId> = queued_tasks(f, ctx, busiest)
        .into_iter()
        .filter(|&t| can_migrate(f, t, failed))
        .collect();
    match why {
        Balance::NewlyIdle => {
            if !ctx.idle(cpu) {
                return Pass::Balanced;
            }
            tasks
                .first()
                .map_or(Pass::Balanced, |&t| Pass::Pull(t, busiest))
        }
        Balance::Periodic => {
            let b = load(busiest);
            if b * 100 <= this * IMBALANCE_PCT {
                return Pass::Balanced;
            }
            let imbalance = (b - this) / 2;
            tasks
                .into_iter()
                .find(|&t| f.task_h_load(t) / 2 <= imbalance)
                .map_or(Pass::Failed, |t| Pass::Pull(t, busiest))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `busy` CPUs run something (task 0), the others are idle.
    fn pick(smt: usize, busy: &[usize], prev: usize) -> usize {
        let curr: Vec<Option<TaskId>> = (0..8)
            .map(|c| busy.contains(&c).then_some(TaskId(0)))
            .collect();
        let ctx = Ctx {
            now: 0,
            tasks: &[],
            curr: &curr,
            tick_ns: 4_000_000,
            smt,
        };
        select_idle_sibling(&ctx, prev)
    }

    #[test]
    fn with_smt_only_a_fully_idle_core_or_a_sibling_is_taken() {
        // 4 cores x 2 threads: CPU c and c + 4 are siblings.
        let all_but_3: Vec<usize> = (0..8).filter(|&c| c != 3).collect();
        // CPU 3 idles beside its busy sibling 7: not taken from core 1.
        assert_eq!(pick(2, &all_but_3, 1), 1);
        // Without SMT any idle CPU is.
        assert_eq!(pick(1, &all_but_3, 1), 3);
        // From its sibling (7) it is taken.
        assert_eq!(pick(2, &all_but_3, 7), 3);
        // A fully idle core (CPUs 2 and 6) is taken, at its first thread.
        let busy: Vec<usize> = (0..8).filter(|&c| c != 2 && c != 6).collect();
        assert_eq!(pick(2, &busy, 1), 2);
        // The previous CPU first when idle.
        assert_eq!(pick(2, &busy, 6), 6);
    }
}
