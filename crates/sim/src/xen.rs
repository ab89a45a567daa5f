//! The Xen paravirtual block path (`hypervisor = "xen-pv"`), beside the
//! QEMU/virtio one: blkfront in the guest (DomU) puts requests on a ring
//! shared with Dom0, notifies blkback through an event channel; blkback, one
//! kernel thread per virtual disk in Dom0, grant-maps each request's pages,
//! submits it to Dom0's block layer as that one thread, and on completion
//! unmaps, answers on the ring and notifies the guest.
//!
//! The ring is a [`Virtqueue`] of [`BLK_RING_SIZE`] slots (the shared ring
//! is what a virtqueue models: a bounded set of outstanding requests the
//! other side takes and answers); the guest's block layer builds requests
//! of at most [`BLKIF_MAX_SEGMENTS_PER_REQUEST`] pages. The CPU costs of
//! the path are delays here (the CPU model does not run this path).

use std::collections::VecDeque;

use devmodel::{IoRequest, Nanos};

use crate::virtio::{VirtioReq, Virtqueue};

/// Slots of blkfront's shared ring: `__CONST_RING_SIZE(blkif, PAGE_SIZE)`,
/// 32 for a 4 KiB page (`BLK_RING_SIZE` in Linux 2.6.32's
/// drivers/block/xen-blkfront.c; `xen/include/public/io/blkif.h`).
pub const BLK_RING_SIZE: usize = 32;

/// Pages per ring request: `BLKIF_MAX_SEGMENTS_PER_REQUEST` = 11
/// (`xen/include/public/io/blkif.h`; blkfront sets
/// `blk_queue_max_phys_segments(rq, BLKIF_MAX_SEGMENTS_PER_REQUEST)` with
/// one page per segment in `xlvbd_init_blk_queue`).
pub const BLKIF_MAX_SEGMENTS_PER_REQUEST: u32 = 11;

/// The largest request the guest builds: 11 pages of 4 KiB, in sectors.
pub const MAX_REQUEST_SECTORS: u32 = BLKIF_MAX_SEGMENTS_PER_REQUEST * 8;

/// Delivery of an event-channel notification to the other domain:
/// `notify_remote_via_irq` is one `EVTCHNOP_send` hypercall, then Xen marks
/// the port pending and, the other domain's vCPU being blocked, wakes and
/// schedules it (credit's BOOST) and it takes the upcall. Assumption: 10 us,
/// the order of a hypercall plus a cross-domain wake-up on 2010 Xeons; not
/// measured here (no Xen on this machine).
pub const EVTCHN_NOTIFY_NS: Nanos = 10_000;

/// Wake-up of blkback's kernel thread (`blkif_schedule` sleeping in
/// `wait_event_interruptible`, woken by `blkif_notify_work` from the event
/// channel's interrupt handler; drivers/xen/blkback/blkback.c of the 2.6.32
/// pvops tree). Assumption: 10 us, a Linux kthread wake-up and context
/// switch in a PV Dom0 (every switch of page tables is a hypercall there).
pub const BLKBACK_WAKE_NS: Nanos = 10_000;

/// Grant-mapping a request's pages: blkback maps all segments of one
/// request with one `GNTTABOP_map_grant_ref` hypercall
/// (`dispatch_rw_block_io`). Assumption: 3 us per request plus
/// [`GRANT_MAP_SEGMENT_NS`] per page.
pub const GRANT_MAP_REQUEST_NS: Nanos = 3_000;

/// The per-page part of the grant mapping (one page-table update each).
/// Assumption: 0.5 us.
pub const GRANT_MAP_SEGMENT_NS: Nanos = 500;

/// Unmapping a completed request's pages: one `GNTTABOP_unmap_grant_ref`
/// hypercall with a TLB flush (`fast_flush_area`). Assumption: 5 us.
pub const GRANT_UNMAP_NS: Nanos = 5_000;

/// The guest's interrupt handler for a response (`blkif_interrupt`: take
/// the responses, end the requests, end foreign access to the grants).
/// Assumption: 5 us.
pub const BLKFRONT_IRQ_NS: Nanos = 5_000;

/// The process id blkback's requests carry in Dom0's elevator: one kernel
/// thread per virtual disk, so one io context (`blkif->xenblkd`).
pub const BLKBACK_PID: u32 = 0xB1C;

/// The time blkback spends mapping `req` before it can submit it.
pub fn map_cost(req: &IoRequest) -> Nanos {
    let pages = (req.sectors as u64).div_ceil(8).max(1);
    GRANT_MAP_REQUEST_NS + pages * GRANT_MAP_SEGMENT_NS
}

/// The delay from a Dom0 completion to the guest seeing it: unmap, answer
/// on the ring, notify, the guest's interrupt.
pub const RESPONSE_NS: Nanos = GRANT_UNMAP_NS + EVTCHN_NOTIFY_NS + BLKFRONT_IRQ_NS;

/// blkback's state: the requests it took off the ring and has not yet
/// submitted, and when it submits the next one (`None`: asleep).
#[derive(Debug, Default)]
pub struct Blkback {
    queue: VecDeque<VirtioReq>,
    /// When the head of `queue` is mapped and submitted.
    pub next_at: Option<Nanos>,
}

impl Blkback {
    /// The guest put requests on the ring at `now`: blkfront notifies a
    /// sleeping blkback (a running one finds them when it checks the ring
    /// again, `RING_FINAL_CHECK_FOR_REQUESTS`, without a notification).
    pub fn notify(&mut self, now: Nanos, ring: &mut Virtqueue) {
        if self.next_at.is_some() || !ring.has_avail() {
            return;
        }
        self.queue.extend(ring.take_avail());
        let head = self.queue.front().expect("took at least one");
        self.next_at = Some(now + EVTCHN_NOTIFY_NS + BLKBACK_WAKE_NS + map_cost(&head.req));
    }

    /// At `next_at`: the head request is mapped; return it for submission to
    /// Dom0's block layer, and plan the next (taking new ring requests) or
    /// sleep.
    pub fn step(&mut self, now: Nanos, ring: &mut Virtqueue) -> Option<VirtioReq> {
        let head = self.queue.pop_front()?;
        if self.queue.is_empty() {
            self.queue.extend(ring.take_avail());
        }
        self.next_at = self.queue.front().map(|r| now + map_cost(&r.req));
        Some(head)
    }
}
