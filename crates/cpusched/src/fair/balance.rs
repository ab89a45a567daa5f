//! Load balancing of the fair class (kernel/sched/fair.c): where a waking
//! task goes, and which task an idle or underloaded CPU pulls.

use super::FairCore;
use crate::class::{Balance, Ctx};
use crate::task::TaskId;

/// `imbalance_pct` of the multi-core (MC) domain: the busiest CPU must
/// carry 25% more load before the periodic pass moves anything
/// (kernel/sched/topology.c `sd_init()`, 3.x `SD_MC_INIT`).
const IMBALANCE_PCT: u64 = 125;

/// `select_idle_sibling()`: the previous CPU if idle, else an idle CPU of
/// the shared-cache domain (searched from the previous one on), else the
/// previous CPU. Wake-affine pulls towards the waker are not modelled:
/// the wakers here are timers and the driver, not tasks.
pub fn select_idle_sibling(ctx: &Ctx, prev: usize) -> usize {
    let n = ctx.nr_cpus();
    (0..n)
        .map(|i| (prev + i) % n)
        .find(|&c| ctx.idle(c))
        .unwrap_or(prev)
}

/// The queued (not running) fair tasks of `cpu`, oldest enqueue first.
fn queued_tasks(f: &FairCore, ctx: &Ctx, cpu: usize) -> Vec<TaskId> {
    let mut v: Vec<(u64, TaskId)> = f
        .task_se
        .iter()
        .enumerate()
        .filter_map(|(i, &se)| {
            let e = &f.ents[se];
            let t = TaskId(i as u32);
            let queued = e.on_rq && f.rqs[e.rq].cpu == cpu && ctx.curr[cpu] != Some(t);
            (queued && !ctx.tasks[i].policy.is_rt()).then_some((e.seq, t))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, t)| t).collect()
}

/// `load_balance()` reduced to two CPUs' worth of logic applied to the
/// busiest CPU: newly idle CPUs pull any waiting task; the periodic pass
/// moves a task if the busiest CPU's load exceeds this one's by
/// `IMBALANCE_PCT` and the task's load is at most twice the imbalance
/// (`detach_tasks()`: `load/2 > imbalance` skips a task).
pub fn find_task_to_pull(
    f: &FairCore,
    ctx: &Ctx,
    cpu: usize,
    why: Balance,
) -> Option<(TaskId, usize)> {
    let load = |c: usize| f.rqs[f.root[c]].load;
    let this = load(cpu);
    let busiest = (0..f.ncpus)
        .filter(|&c| c != cpu && !queued_tasks(f, ctx, c).is_empty())
        .max_by_key(|&c| (load(c), std::cmp::Reverse(c)))?;
    let tasks = queued_tasks(f, ctx, busiest);
    match why {
        Balance::NewlyIdle => {
            if !ctx.idle(cpu) {
                return None;
            }
            tasks.first().map(|&t| (t, busiest))
        }
        Balance::Periodic => {
            let b = load(busiest);
            if b * 100 <= this * IMBALANCE_PCT {
                return None;
            }
            let imbalance = (b - this) / 2;
            tasks
                .into_iter()
                .find(|&t| f.task_h_load(t) / 2 <= imbalance)
                .map(|t| (t, busiest))
        }
    }
}
