//! noop (`block/noop-iosched.c`, removed in 5.0) and its blk-mq
//! counterpart `none`: one FIFO, nothing else.
//!
//! noop exists for devices that schedule better than the host can (RAID
//! controllers, SSDs with deep queues, virtual disks whose host reorders
//! anyway): it keeps arrival order and only lets the block layer merge
//! adjacent bios into the requests waiting in the queue, which costs nothing
//! and saves commands. The merging itself is done by the block layer
//! ([`crate::block`]); a front merge does not move a request in a FIFO, so
//! noop has nothing to do on [`IoScheduler::merged`].

use super::{IoScheduler, SchedCtx};
use crate::request::RqId;
use std::collections::VecDeque;

/// The noop elevator: FIFO dispatch (`noop_add_request` appends to
/// `nd->queue`, `noop_dispatch` takes the head).
#[derive(Debug, Default)]
pub struct Noop {
    queue: VecDeque<RqId>,
}

impl Noop {
    pub fn new() -> Noop {
        Noop::default()
    }
}

impl IoScheduler for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn insert(&mut self, _ctx: &mut SchedCtx, rq: RqId) {
        self.queue.push_back(rq);
    }

    fn dispatch(&mut self, _ctx: &mut SchedCtx) -> Option<RqId> {
        self.queue.pop_front()
    }

    fn completed(&mut self, _ctx: &mut SchedCtx, _rq: RqId) {}

    fn timer(&mut self, _ctx: &mut SchedCtx) {}

    fn queued(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Harness, Spec};
    use super::super::MSEC;
    use super::*;

    #[test]
    fn keeps_arrival_order_whatever_the_sectors() {
        let mut h = Harness::new(Noop::new(), MSEC);
        // Sectors far from sorted, several processes, reads and writes.
        let sectors = [9_000_000u64, 16, 4_000_000, 8, 123_456, 7_777_777, 0, 512];
        let mut ids = Vec::new();
        for (i, &s) in sectors.iter().enumerate() {
            let spec = if i % 3 == 2 {
                Spec::write(i as u32 + 1, s)
            } else {
                Spec::read(i as u32 + 1, s)
            };
            ids.push(h.insert(spec));
        }
        assert_eq!(h.sched.queued(), sectors.len());
        h.kick();
        h.run_until(100 * MSEC);
        let got: Vec<u64> = h.log.iter().map(|d| d.sector).collect();
        assert_eq!(got, sectors.to_vec());
        assert_eq!(h.sched.queued(), 0);
        // Never idles: each request goes out as soon as the device is free.
        for (i, d) in h.log.iter().enumerate() {
            assert_eq!(d.at, i as u64 * MSEC);
        }
        assert!(h.timer_log.is_empty());
    }

    #[test]
    fn later_arrivals_queue_behind_earlier_ones() {
        let mut h = Harness::new(Noop::new(), MSEC);
        h.submit(Spec::read(1, 1000));
        // While the first is on the device, a near and a far request arrive
        // in the "wrong" order for an elevator.
        h.submit(Spec::read(2, 50_000_000));
        h.submit(Spec::read(3, 1008));
        h.run_until(10 * MSEC);
        let pids: Vec<u32> = h.log.iter().map(|d| d.pid).collect();
        assert_eq!(pids, vec![1, 2, 3]);
    }
}
