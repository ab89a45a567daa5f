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
/// Completed commands are kept until [`Device::pop_completed`] returns them and
/// count in [`Device::in_flight`] until then. No allocation happens after
/// construction: the queues are fixed-capacity vectors sized by the queue depth.
pub struct Device {
    model: Box<dyn ServiceModel>,
    rotational: bool,
    queue_depth: usize,
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
        let queue_depth = queue_depth.max(1);
        let units = model.parallelism().max(1);
        Device {
            rotational: model.info().rotational,
            model,
            queue_depth,
            slots: vec![None; units],
            ends: BinaryHeap::with_capacity(units),
            waiting: Vec::with_capacity(queue_depth),
            done: VecDeque::with_capacity(queue_depth),
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

    /// Command slots.
    pub fn queue_depth(&self) -> usize {
        self.queue_depth
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
    /// unit is free, otherwise waits in the device's internal queue. `now` must
    /// not go backwards between calls.
    pub fn submit(&mut self, now: Nanos, tag: u64, req: IoRequest) {
        self.advance(now);
        self.in_flight += 1;
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
