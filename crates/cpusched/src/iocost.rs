//! The CPU cost of one I/O request, step by step: the one home of the
//! figures that the simulator's I/O machine (`sim::machine::cpu`, the
//! `cloud2014`, `vbfq` and `multi-vm` scenarios) and the CFS-v study
//! ([`crate::cfsv_study`]) charge.
//!
//! Each constant is CPU time on this machine: an AMD EPYC 7003 ("Milan",
//! Zen 3; `/proc/cpuinfo` family 25 model 1), the machine the app traces in
//! `apps/` were recorded on. A platform turns it into its own with its one
//! speed factor ([`crate::Platform::scale_cpu`]). Measured where this
//! machine can measure it, with the command that reruns it, on
//! 2026-11-26 with the machine shared by other builds (load average 12 to
//! 19 on 2 cores: every figure includes the cache refills of a busy
//! machine, and is likely above an idle one's). The guest kernel's steps
//! cannot be measured under TCG: they are the host's figures for the same
//! kernel code (the block layer, the syscall).
//!
//! Rerun: `tools/iocost/block.sh` (the host block layer, root and perf),
//! `tools/iocost/qemu.sh IMAGE_DIR` (QEMU's threads, a TCG guest of
//! `tandem vm image`). docs/cpu-model.md records the runs.

use crate::Nanos;

/// A system call's entry and exit (`read`, `pread`, `write`, `io_submit`,
/// `io_getevents`): 0.79 us per `read`+`write` pair of `dd` with 512-byte
/// blocks from the page cache, less the per-byte part (2026-11-26:
/// `head -c 64M /dev/urandom >f; cat f >/dev/null;
/// perf stat -e task-clock dd if=f of=/dev/null bs=512` and `bs=4096`:
/// 108.5 and 18.2 ms for 131072 and 16384 pairs; the difference is
/// 0.787 us per pair). One call of the pair is counted: 0.4 us.
pub const SYSCALL_NS: Nanos = 400;

/// Copying a byte between the page cache and user space
/// (`copy_to_user`, `copy_from_user`): the same two `dd` runs give
/// 0.079 ns per byte (64 MiB in 5.3 ms once the calls are taken out).
pub const COPY_PS_PER_BYTE: Nanos = 79;

/// The block layer's submission of one 4 KiB `O_DIRECT` read, from the
/// file's `read_iter` to the driver's `queue_rq` (bio set-up,
/// `submit_bio()`, blk-mq's tag and dispatch, the driver's command):
/// `tools/iocost/block.sh` ("submit"), 5.41, 4.88 and 4.23 us in three
/// runs of 32768 reads (median 4.9). The driver there is the loop
/// device's, whose `queue_rq` queues work for its worker where a
/// disk's writes a doorbell; without an elevator (`none`).
pub const BLOCK_SUBMIT_NS: Nanos = 4_900;

/// The completion's interrupt: `blk_mq_complete_request()` (the
/// driver's completion, and the IPI or softirq raise towards the
/// submitting CPU): `tools/iocost/block.sh` ("irq"), 1.49, 1.29 and
/// 1.35 us (median 1.35).
pub const BLOCK_IRQ_NS: Nanos = 1_350;

/// The block softirq's completion of one request (`blk_done_softirq()`:
/// `blk_mq_end_request()`, the bio's and the direct I/O's end, the
/// waiter's wake-up): `tools/iocost/block.sh` ("softirq"), 2.81, 2.79
/// and 3.35 us (median 2.81).
pub const BLOCK_SOFTIRQ_NS: Nanos = 2_810;

/// A request's whole completion: [`BLOCK_IRQ_NS`] and
/// [`BLOCK_SOFTIRQ_NS`] (4.30, 4.08 and 4.71 us as measured together).
pub const BLOCK_COMPLETE_NS: Nanos = BLOCK_IRQ_NS + BLOCK_SOFTIRQ_NS;

/// A context switch's share of a thread's measured run time: the
/// sleeping reader's `wait_for_completion_io_timeout()` (its switch out
/// and back in), `tools/iocost/block.sh` ("switch"), 2.16, 2.68 and
/// 2.23 us (median 2.23). Schedstat's run time of a thread includes it;
/// the CPU model charges switches itself (`Platform::switch_ns`), so it
/// is taken out of the QEMU threads' per-activation figures below.
pub const SWITCH_NS: Nanos = 2_230;

/// QEMU's main loop, once per activation however many requests it
/// serves: the return from `ppoll()`, the glib dispatch, the event
/// notifier reads. `tools/iocost/qemu.sh` (QEMU 7.2, `aio=threads`, TCG
/// guest reading at depth 1, 4, 16 and 32) gives the main loop's CPU per
/// activation: 17.5, 17.6, 14.2 and 14.4 us at 0.3, 0.9, 1.8 and 3.0
/// requests per activation. `perf record -g -t MAIN_TID -e cpu-clock`
/// during the depth-16 load splits it: 47.7% waking pool workers
/// (`pthread_cond_signal` of `qemu_sem_post`, per request: see
/// [`MAIN_SUBMIT_NS`]), 23.5% `schedule()` (3.3 us), 11% `ppoll()` (1.6
/// us), 18% the rest (2.5 us). The activation's part: 7.4 us less
/// [`SWITCH_NS`], which the CPU model charges itself. At depth 1 and 4
/// activations cost more (cold caches on a loaded machine); the batched
/// figure is kept, so a request served alone is cheaper here than
/// measured (below).
pub const MAIN_WAKE_NS: Nanos = 5_200;

/// QEMU's main loop, per request submitted: `virtqueue_pop()`, the AIO
/// request and above all the wake-up of a pool worker (`qemu_sem_post()`,
/// a futex wake: 47.7% of the main loop's 14.2 us per activation at
/// 1.8 requests per activation, above).
pub const MAIN_SUBMIT_NS: Nanos = 3_700;

/// QEMU's main loop, per request completed: the completion callback,
/// `virtqueue_push()` and the `irqfd` write. ASSUMPTION: 0.5 us, within
/// what the measurement does not separate from the activation's rest.
pub const MAIN_COMPLETE_NS: Nanos = 500;

/// A pool worker's activation: its wake-up in `qemu_sem_timedwait()`,
/// the request's `preadv` (on the tmpfs image, no block layer) and the
/// completion's event notifier write. `tools/iocost/qemu.sh`: per
/// activation 9.3 us at depth 4 (0.97 requests each) and 10.6 at depth
/// 32 (1.92 each): 8.0 us for the activation, less [`SWITCH_NS`].
pub const WORKER_WAKE_NS: Nanos = 5_800;

/// A pool worker's further cost per request in the same activation
/// (the next request's `preadv` on tmpfs and notifier write): the slope
/// of the same two runs, 1.4 us.
pub const WORKER_REQUEST_NS: Nanos = 1_400;

/// QEMU's share of a request when one thread does all of it (the I/O
/// machine's iothread or pool worker, which has no separate main loop),
/// at submission: the main loop's activation and the worker's, with the
/// request's part of each. Served alone, a request costs QEMU two
/// main-loop activations and one worker activation here (24 us with the
/// two calls, and the model's switches); `tools/iocost/qemu.sh` at depth
/// 1 measured 65 us, in 3.1 main-loop and 1.1 worker activations per
/// request (switches included): a lower figure for requests served one
/// at a time, the batched regime's.
pub const QEMU_SUBMIT_NS: Nanos = MAIN_WAKE_NS + MAIN_SUBMIT_NS + WORKER_WAKE_NS;

/// QEMU's share of a request at completion in the same one-thread view:
/// the main loop's second activation, its completion, and the worker's
/// return.
pub const QEMU_COMPLETE_NS: Nanos = MAIN_WAKE_NS + MAIN_COMPLETE_NS + WORKER_REQUEST_NS;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Platform;

    /// A platform half as fast takes twice the time of each step, and the
    /// machine the figures were measured on takes them as they are.
    #[test]
    fn the_costs_scale_with_the_platforms_one_speed_factor() {
        let mut p = Platform::default_platform();
        assert_eq!(p.scale_cpu(BLOCK_SUBMIT_NS), BLOCK_SUBMIT_NS);
        p.speed = 0.5;
        assert_eq!(p.scale_cpu(QEMU_SUBMIT_NS), 2 * QEMU_SUBMIT_NS);
    }
}
