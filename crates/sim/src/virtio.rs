//! The guest's side of a virtio-blk disk: the virtqueue between the guest's
//! block layer and QEMU.
//!
//! The guest driver (`virtio_queue_rq()`) places a request in the
//! available ring and notifies the device; QEMU takes it from the ring,
//! performs it on the image file, and puts it in the used ring with an
//! interrupt. The queue's size bounds how many requests the guest can have
//! outstanding, which is what the guest's block layer sees as the device's
//! queue depth.

use crate::request::IoPrio;
use devmodel::{IoRequest, Nanos};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// QEMU's virtio-blk `queue-size` default: 128 descriptors per virtqueue
/// (`VIRTIO_BLK_QUEUE_SIZE`, hw/block/virtio-blk.c, before QEMU 5.0 raised
/// it to 256). The published runs used QEMU of 2014.
pub const DEFAULT_VIRTQUEUE_DEPTH: usize = 128;

/// A request in the available ring: the guest's tag, the request, and the
/// ioprio of its header (`out_hdr.ioprio`, which the Linux driver fills
/// from `req_get_ioprio()` in `virtblk_setup_cmd()`). QEMU's own
/// virtio-blk ignores the ioprio; the `vhost-ioprio` backend honours it.
#[derive(Clone, Copy, Debug)]
pub struct VirtioReq {
    pub tag: u64,
    pub req: IoRequest,
    pub ioprio: IoPrio,
}

/// A virtqueue seen from the guest.
#[derive(Debug)]
pub struct Virtqueue {
    depth: usize,
    /// Requests in the available ring that QEMU has not taken yet.
    avail: Vec<VirtioReq>,
    /// Requests QEMU finished, with the time their interrupt reaches the
    /// guest, earliest first.
    used: BinaryHeap<Reverse<(Nanos, u64)>>,
    in_flight: usize,
}

impl Virtqueue {
    pub fn new(depth: usize) -> Virtqueue {
        Virtqueue {
            depth: depth.max(1),
            avail: Vec::new(),
            used: BinaryHeap::new(),
            in_flight: 0,
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Room for another request (`virtqueue_add_sgs()` fails when the ring
    /// is full, and blk-mq stops the queue).
    pub fn can_accept(&self) -> bool {
        self.in_flight < self.depth
    }

    /// The guest adds a request to the available ring.
    pub fn submit(&mut self, tag: u64, req: IoRequest, ioprio: IoPrio) {
        self.in_flight += 1;
        self.avail.push(VirtioReq { tag, req, ioprio });
    }

    /// Whether the guest has added requests QEMU has not taken yet.
    pub fn has_avail(&self) -> bool {
        !self.avail.is_empty()
    }

    /// QEMU drains the available ring (`virtio_blk_handle_vq()`).
    pub fn take_avail(&mut self) -> Vec<VirtioReq> {
        std::mem::take(&mut self.avail)
    }

    /// QEMU completes a request; the guest sees it at `at`.
    pub fn complete(&mut self, tag: u64, at: Nanos) {
        self.used.push(Reverse((at, tag)));
    }

    /// When the next completion reaches the guest.
    pub fn next_completion(&self) -> Option<Nanos> {
        self.used.peek().map(|Reverse((t, _))| *t)
    }

    /// A completion due at `now`, if any (`virtblk_done()`).
    pub fn pop_completed(&mut self, now: Nanos) -> Option<u64> {
        match self.used.peek() {
            Some(Reverse((t, _))) if *t <= now => {
                let Reverse((_, tag)) = self.used.pop().expect("peeked");
                self.in_flight -= 1;
                Some(tag)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devmodel::Direction;

    #[test]
    fn depth_bounds_outstanding_requests_and_completions_come_in_time_order() {
        let mut vq = Virtqueue::new(2);
        let rq = IoRequest {
            sector: 0,
            sectors: 8,
            dir: Direction::Read,
        };
        vq.submit(1, rq, IoPrio::DEFAULT);
        vq.submit(2, rq, IoPrio::DEFAULT);
        assert!(!vq.can_accept());
        assert_eq!(vq.take_avail().len(), 2);
        assert!(!vq.has_avail());
        vq.complete(2, 50);
        vq.complete(1, 70);
        assert_eq!(vq.next_completion(), Some(50));
        assert_eq!(vq.pop_completed(40), None);
        assert_eq!(vq.pop_completed(60), Some(2));
        assert!(vq.can_accept());
        assert_eq!(vq.pop_completed(60), None);
        assert_eq!(vq.pop_completed(70), Some(1));
    }
}
