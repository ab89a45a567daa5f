//! A virtio-blk request's path through host tasks (QEMU 2.1, `aio=threads`,
//! no dataplane), each hop a task that must get a CPU:
//!
//! 1. the guest's reader thread, on a vCPU, issues the read and kicks the
//!    virtqueue (a VM exit; `ioeventfd` signals QEMU);
//! 2. QEMU's main loop wakes, pops the request and hands it to a worker
//!    of its thread pool;
//! 3. the worker wakes and issues `preadv` (`O_DIRECT`) to the host's
//!    block layer, then blocks in it;
//! 4. the device serves it (`devmodel`);
//! 5. the completion's block softirq runs on the CPU that submitted
//!    (`rq_affinity=1`, block/blk-softirq.c), here as that CPU's
//!    `ksoftirqd`, and wakes the worker;
//! 6. the worker returns from `preadv` and signals the main loop (the
//!    thread pool's event notifier);
//! 7. the main loop completes the request and injects the virtqueue's
//!    interrupt (`irqfd`) into the guest's interrupt vCPU (vCPU 0);
//! 8. that vCPU takes the interrupt (woken if it halted); its handler sends
//!    blk-mq's function-call IPI to the vCPU the reader submitted from
//!    (`blk_mq_ipi_complete_request()`), which completes the request and
//!    wakes the reader, which loops to its next read (a reader on vCPU 0
//!    completes there).
//!
//! Simplified: a worker per
//! in-flight request exists from the start (QEMU spawns them on demand,
//! up to 64); libvirt's `emulator`/`vcpuN` sub-groups are one VM group.

use std::collections::VecDeque;

use crate::model::{CpuModel, KernelId};
use crate::task::TaskId;
use crate::Nanos;

/// A read in flight: its VM, its reader (a guest task), its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    pub vm: usize,
    pub reader: TaskId,
    pub worker: usize,
}

/// What a host service task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// Main loop: hand a new request to a worker. Worker: issue it.
    Submit(Req),
    /// Softirq: complete it. Worker: return it to the main loop. Main
    /// loop: complete it to the guest.
    Complete(Req),
}

impl Job {
    /// The request the job is about.
    pub fn req(&self) -> &Req {
        match self {
            Job::Submit(r) | Job::Complete(r) => r,
        }
    }
}

/// A host thread that serves jobs one at a time from a FIFO and blocks
/// when it has none: QEMU's main loop, a worker, a `ksoftirqd`.
#[derive(Clone, Debug)]
pub struct Server {
    pub task: TaskId,
    /// The kernel the task is in: the host's, or a guest's for the
    /// virtio interrupt's handler ([`Server::guest_irq`]).
    k: KernelId,
    /// Woken by a virtual interrupt into its vCPU (taken when the vCPU
    /// runs, a partial boost for it under CFS-v), not by a host wake-up.
    irq: bool,
    /// What an activation costs besides its jobs: the thread's return from
    /// its wait and its loop's own work before the first job (QEMU's
    /// `main_loop_wait()` with its `ppoll()` and event notifier reads, a
    /// softirq's entry). Jobs queued while it runs share it: they are
    /// served in the same pass (QEMU's `virtio_blk_handle_output()` pops
    /// every request of the ring; its thread pool's completion bottom half
    /// completes every finished request; `blk_done_softirq()` every
    /// request on its CPU's list).
    wake_ns: Nanos,
    current: Option<Job>,
    queue: VecDeque<Job>,
    busy: bool,
}

impl Server {
    pub fn new(task: TaskId) -> Server {
        Server::with_wake_cost(task, 0)
    }

    /// A server whose activations cost `wake_ns` besides their jobs.
    pub fn with_wake_cost(task: TaskId, wake_ns: Nanos) -> Server {
        Server {
            task,
            k: KernelId::HOST,
            irq: false,
            wake_ns,
            current: None,
            queue: VecDeque::new(),
            // Spawned with a token burst: its first BurstDone blocks it.
            busy: true,
        }
    }

    /// The guest's handler of a VM's virtio-blk interrupt on one vCPU
    /// (task `task` of guest `k`): woken by the interrupt, it serves every
    /// completed request the interrupt finds, and those that complete
    /// while it waits for its vCPU or runs (`virtblk_done()` loops over
    /// the used ring with callbacks off, and with `VIRTIO_RING_F_EVENT_IDX`
    /// QEMU raises no further interrupt until the guest has caught up).
    pub fn guest_irq(k: KernelId, task: TaskId) -> Server {
        Server {
            k,
            irq: true,
            ..Server::new(task)
        }
    }

    /// The job it serves after the current one.
    pub fn next_job(&self) -> Option<&Job> {
        self.queue.front()
    }

    /// Whether it has a job being served or queued.
    pub fn has_jobs(&self) -> bool {
        self.current.is_some()
    }

    /// A job arrives: run it now if idle, else queue it.
    pub fn arrive(&mut self, m: &mut CpuModel, job: Job, cost: Nanos) {
        if self.busy {
            self.queue.push_back(job);
            return;
        }
        self.busy = true;
        self.current = Some(job);
        m.set_burst(self.k, self.task, self.wake_ns + cost);
        if self.irq {
            m.interrupt_wake(self.k, self.task);
        } else {
            m.wake(self.k, self.task);
        }
    }

    /// Where the first job that `pred` matches is: 0 being served, `n`
    /// the n-th queued behind it (for [`super::breakdown`]).
    pub fn position(&self, pred: impl Fn(&Job) -> bool) -> Option<usize> {
        let cur = self.current.iter();
        cur.chain(self.queue.iter()).position(pred)
    }

    /// The task finished its burst: returns the finished job, and starts
    /// the next one (`cost` gives its CPU cost) or blocks the task.
    pub fn done(&mut self, m: &mut CpuModel, cost: impl Fn(&Job) -> Nanos) -> Option<Job> {
        let finished = self.current.take();
        match self.queue.pop_front() {
            Some(next) => {
                m.set_burst(self.k, self.task, cost(&next));
                self.current = Some(next);
            }
            None => {
                self.busy = false;
                m.block(self.k, self.task);
            }
        }
        finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CompletionKind, CpuModel};
    use crate::{FairKind, Platform, TaskSpec, US};

    /// Jobs queued while the server runs share its activation's cost.
    #[test]
    fn an_activation_costs_its_wake_cost_once_however_many_jobs() {
        let mut m = CpuModel::new(Platform::default_platform(), FairKind::Cfs);
        let spec = TaskSpec {
            burst: Some(1),
            ..TaskSpec::busy_loop("server")
        };
        let t = m.spawn(KernelId::HOST, spec);
        let mut s = Server::with_wake_cost(t, 5 * US);
        let req = |w| Req {
            vm: 0,
            reader: TaskId(0),
            worker: w,
        };
        let mut served = 0;
        let mut first = true;
        while let Some(at) = m.next_event_time() {
            for c in m.advance_to(at).to_vec() {
                if c.kind != CompletionKind::BurstDone || c.task != t {
                    continue;
                }
                if first {
                    // The token burst: block, then three jobs arrive at once.
                    s.done(&mut m, |_| 3 * US);
                    for w in 0..3 {
                        s.arrive(&mut m, Job::Submit(req(w)), 3 * US);
                    }
                    first = false;
                } else if s.done(&mut m, |_| 3 * US).is_some() {
                    served += 1;
                }
            }
        }
        assert_eq!(served, 3);
        let cpu = m.progress(KernelId::HOST, t);
        // 1 ns token + 5 us once + 3 x 3 us.
        assert_eq!(cpu, 1 + 5 * US + 9 * US);
    }
}
