//! A device: a [`ServiceModel`] plus its own command queue (NCQ/TCQ).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::{DeviceInfo, IoRequest, Nanos, ServiceModel};

/// Aging of the rotational reordering: a waiting command's positioning cost is
/// reduced by its waiting time divided by this ("aged shortest access time
/// first", Jacobson & Wilkes, HP Labs HPL-CSP-91-7, 1991), so no command starves.
/// With 64 a command that has waited 1 s gains 15.6 ms, about a long seek plus a
/// revolution. Assumption: drive firmwares age NCQ reordering with undisclosed
/// weights.
pub const SPTF_AGE_DIVISOR: u64 = 64;

/// The tag depth of the real runner's loop device, the transport in front of
/// its emulated disk (crates/devemu): writing `nr_requests` clamps it to the
/// kernel's floor `BLKDEV_MIN_RQ`, 4 (include/linux/blkdev.h; the clamp is in
/// `queue_requests_store`, block/blk-sysfs.c), and with no scheduler attached
/// the write shrinks the driver's tags to it. The block layer hands the loop
/// driver up to this many requests, which wait in the emulator in arrival
/// order: `Device::behind_fifo(model, 1, LOOP_TAG_DEPTH)` in the simulator.
pub const LOOP_TAG_DEPTH: usize = 4;

/// Marks a waiting command that any unit may serve.
const ANY_UNIT: usize = usize::MAX;

#[derive(Clone, Copy, Debug)]
struct Waiting {
    tag: u64,
    req: IoRequest,
    since: Nanos,
    /// `unit_for(req)` (a pure function of the request), or [`ANY_UNIT`].
    unit: usize,
}

/// A device = a model + its own command queue of configurable depth (NCQ).
///
/// Commands start at once on a free unit, otherwise wait in the device's queue.
/// When a unit frees, the next command for it is chosen by [`ServiceModel::access_cost`]
/// (shortest positioning time first, with aging, see [`SPTF_AGE_DIVISOR`]) on
/// rotational devices, and in arrival order otherwise. The next command starts
/// at the completion time of the previous one, whenever the caller collects it.
///
/// In front of the command queue there may be a transport of a greater depth
/// ([`Device::behind_fifo`]): the host hands it up to that many commands, and
/// those the device's own queue has no room for wait in arrival order, each
/// entering the device when a command of the device completes (at that
/// completion time). This is the real runner's emulated disk: a loop device
/// whose tag depth is the kernel's floor of 4 hands requests to the emulator,
/// where they wait in arrival order for the model (crates/devemu).
///
/// Completed commands are kept until [`Device::pop_completed`] returns them and
/// count in [`Device::in_flight`] until then. No allocation happens after
/// construction: the queues are fixed-capacity vectors sized by the queue depth.
pub struct Device {
    model: Box<dyn ServiceModel>,
    rotational: bool,
    /// The device's own command slots (NCQ/TCQ depth).
    own_depth: usize,
    /// Commands the host may have outstanding: `own_depth`, or the
    /// transport's depth when greater.
    queue_depth: usize,
    /// Commands accepted beyond the device's own queue, in arrival order.
    fifo: VecDeque<(u64, IoRequest)>,
    /// Tag of the command each unit is serving.
    slots: Vec<Option<u64>>,
    /// (end, unit) of every running command, earliest first (ties: lowest unit).
    ends: BinaryHeap<Reverse<(Nanos, usize)>>,
    waiting: Vec<Waiting>,
    done: VecDeque<(Nanos, u64)>,
    in_flight: usize,
}

impl Device {
    /// A device with `queue_depth` command slots (values below 1 count as 1).
    pub fn new(model: Box<dyn ServiceModel>, queue_depth: usize) -> Device {
        Device::behind_fifo(model, queue_depth, queue_depth)
    }

    /// A device with `queue_depth` command slots behind a transport that
    /// accepts up to `dispatch_depth` commands (at least `queue_depth`) and
    /// hands the device those beyond its own queue in arrival order.
    pub fn behind_fifo(
        model: Box<dyn ServiceModel>,
        queue_depth: usize,
        dispatch_depth: usize,
    ) -> Device {
        let queue_depth = queue_depth.max(1);
        let accept_depth = dispatch_depth.max(queue_depth);
        let units = model.parallelism().max(1);
        Device {
            rotational: model.info().rotational,
            model,
            own_depth: queue_depth,
            queue_depth: accept_depth,
            fifo: VecDeque::with_capacity(accept_depth - queue_depth),
            slots: vec![None; units],
            ends: BinaryHeap::with_capacity(units),
            waiting: Vec::with_capacity(queue_depth),
            done: VecDeque::with_capacity(accept_depth),
            in_flight: 0,
        }
    }

    /// The model's description.
    pub fn info(&self) -> &DeviceInfo {
        self.model.info()
    }

    /// The model (for inspection).
    pub fn model(&self) -> &dyn ServiceModel {
        self.model.as_ref()
    }

    /// Commands the host may have outstanding: the device's command slots,
    /// or the depth of the transport in front of them ([`Device::behind_fifo`]).
    pub fn queue_depth(&self) -> usize {
        self.queue_depth
    }

    /// The device's own command slots (NCQ/TCQ depth), without the transport.
    pub fn device_queue_depth(&self) -> usize {
        self.own_depth
    }

    /// Accepted and not yet returned by [`Device::pop_completed`].
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// `in_flight() < queue_depth()`.
    pub fn can_accept(&self) -> bool {
        self.in_flight < self.queue_depth
    }

    /// Accept a command at `now` (the caller checks [`Device::can_accept`]; an
    /// extra command is still accepted, just over depth). It starts at once if a
    /// unit is free, otherwise waits in the device's internal queue, or, when
    /// that is full, in the transport's. `now` must not go backwards between
    /// calls.
    pub fn submit(&mut self, now: Nanos, tag: u64, req: IoRequest) {
        self.advance(now);
        self.in_flight += 1;
        // Without a transport every command enters the device (an extra one
        // over depth too, as before transports existed).
        if self.queue_depth == self.own_depth || self.in_device() < self.own_depth {
            self.admit(now, tag, req);
        } else {
            self.fifo.push_back((tag, req));
        }
    }

    /// Commands the device holds: running or in its own queue.
    fn in_device(&self) -> usize {
        self.ends.len() + self.waiting.len()
    }

    /// The device takes a command at `now`: on a free unit, or into its queue.
    fn admit(&mut self, now: Nanos, tag: u64, req: IoRequest) {
        let n = self.slots.len();
        let want = self.model.unit_for(&req).map(|u| u % n);
        let free = match want {
            Some(u) => self.slots[u].is_none().then_some(u),
            None => self.slots.iter().position(Option::is_none),
        };
        match free {
            Some(u) => self.start(u, tag, &req, now),
            None => self.waiting.push(Waiting {
                tag,
                req,
                since: now,
                unit: want.unwrap_or(ANY_UNIT),
            }),
        }
    }

    /// Earliest completion time among the commands in service (or completed
    /// and not yet collected), if any.
    pub fn next_completion(&self) -> Option<Nanos> {
        if let Some(&(t, _)) = self.done.front() {
            return Some(t);
        }
        self.ends.peek().map(|&Reverse((end, _))| end)
    }

    /// Remove and return the tag of one command whose completion time is
    /// `<= now` (earliest first), starting the next internally queued command on
    /// the freed unit at that completion time. None if none.
    pub fn pop_completed(&mut self, now: Nanos) -> Option<u64> {
        self.advance(now);
        let (_, tag) = self.done.pop_front()?;
        self.in_flight -= 1;
        Some(tag)
    }

    /// Head back to 0, caches empty. The queues must be empty (the caller has
    /// collected every command); anything left in them is dropped.
    pub fn reset_state(&mut self) {
        debug_assert!(
            self.in_flight == 0,
            "Device::reset_state with {} commands in flight",
            self.in_flight
        );
        self.slots.iter_mut().for_each(|s| *s = None);
        self.ends.clear();
        self.waiting.clear();
        self.fifo.clear();
        self.done.clear();
        self.in_flight = 0;
        self.model.reset();
    }

    fn start(&mut self, unit: usize, tag: u64, req: &IoRequest, now: Nanos) {
        let end = now + self.model.start(unit, req, now);
        self.slots[unit] = Some(tag);
        self.ends.push(Reverse((end, unit)));
    }

    /// Retire every command that ends by `now`, in completion order, starting
    /// queued commands on the freed units at the completion times.
    fn advance(&mut self, now: Nanos) {
        while let Some(&Reverse((end, u))) = self.ends.peek() {
            if end > now {
                break;
            }
            self.ends.pop();
            let tag = self.slots[u].take().expect("slot is running");
            self.done.push_back((end, tag));
            if let Some(i) = self.pick(u, end) {
                let w = self.waiting.remove(i);
                self.start(u, w.tag, &w.req, end);
            }
            // The transport's oldest commands enter the freed room.
            while self.in_device() < self.own_depth {
                let Some((tag, req)) = self.fifo.pop_front() else {
                    break;
                };
                self.admit(end, tag, req);
            }
        }
    }

    /// Index in `waiting` of the command to start on `unit` at `t`.
    fn pick(&self, unit: usize, t: Nanos) -> Option<usize> {
        if self.waiting.is_empty() {
            return None;
        }
        let fits = |w: &Waiting| w.unit == ANY_UNIT || w.unit == unit;
        if !self.rotational {
            return self.waiting.iter().position(fits);
        }
        // Lowest aged cost; ties go to the oldest.
        let (mut best, mut best_score) = (None, i64::MAX);
        for (i, w) in self.waiting.iter().enumerate() {
            if !fits(w) {
                continue;
            }
            let cost = self.model.access_cost(unit, &w.req, t) as i64;
            let age = (t.saturating_sub(w.since) / SPTF_AGE_DIVISOR) as i64;
            let score = cost - age;
            if best.is_none() || score < best_score {
                (best, best_score) = (Some(i), score);
            }
        }
        best
    }
}
