//! The min-heap of timed events that the I/O simulator's event queue
//! (`sim::engine::EventQueue`) and the CPU model (`cpusched::model`) both
//! run on: events come out in (time, insertion) order.
//!
//! Hand-written rather than `std`'s `BinaryHeap`: the queues hold only a
//! few events at a time (1 to 4 nearly always on the I/O benchmark cell, a
//! dozen on the CPU-contended one), so a plain sift-down beats
//! `BinaryHeap::pop`'s sift-to-bottom-then-up, which pays off only for deep
//! heaps. Keys are unique, so the order in which events come out does not
//! depend on how the heap is laid out.

use crate::Nanos;

pub struct TimedHeap<E> {
    heap: Vec<Slot<E>>,
    seq: u64,
}

/// A queued event with its time and insertion sequence.
struct Slot<E> {
    at: Nanos,
    seq: u64,
    ev: E,
}

impl<E> Slot<E> {
    /// The ordering key: time in the high 64 bits, insertion sequence in
    /// the low 64, so that (time, sequence) order is one branch-free
    /// 128-bit comparison. (Stored as two `u64`s: a `u128` field would
    /// align, and pad, every slot to 16 bytes.)
    #[inline]
    fn key(&self) -> u128 {
        (self.at as u128) << 64 | self.seq as u128
    }
}

impl<E> TimedHeap<E> {
    pub fn new() -> Self {
        TimedHeap {
            heap: Vec::with_capacity(256),
            seq: 0,
        }
    }

    /// Queues `ev` at time `at`, after every event already queued at `at`.
    #[inline]
    pub fn push(&mut self, at: Nanos, ev: E) {
        self.seq += 1;
        let slot = Slot {
            at,
            seq: self.seq,
            ev,
        };
        let key = slot.key();
        let h = &mut self.heap;
        // Sift up without swaps: find where the event goes, then move the
        // ancestors below that place down one level each, carrying them in
        // a local (swapping copied the new event at every level, and those
        // copies showed in the CPU model's profile).
        let n = h.len();
        let mut i = n;
        while i > 0 {
            let parent = (i - 1) / 2;
            if h[parent].key() <= key {
                break;
            }
            i = parent;
        }
        let mut carry = slot;
        if i < n {
            // In 1-based numbering the ancestor of node m at level d is
            // m >> (level(m) - d).
            let level = |m: usize| usize::BITS - 1 - m.leading_zeros();
            let (top, bottom) = (level(i + 1), level(n + 1));
            for d in top..bottom {
                let node = ((n + 1) >> (bottom - d)) - 1;
                carry = std::mem::replace(&mut h[node], carry);
            }
        }
        h.push(carry);
    }

    /// Takes the earliest event out.
    #[inline]
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let h = &mut self.heap;
        let last = h.pop()?;
        if h.is_empty() {
            return Some((last.at, last.ev));
        }
        // Sift the last event down from the root without swaps: find where
        // it goes (the smaller child at each level, until it is no larger),
        // then move that path up one level, carrying it in a local; the
        // root comes out at the top.
        let n = h.len();
        let key = last.key();
        let mut i = 0;
        loop {
            let mut child = 2 * i + 1;
            if child >= n {
                break;
            }
            let mut ck = h[child].key();
            if child + 1 < n {
                let rk = h[child + 1].key();
                if rk < ck {
                    child += 1;
                    ck = rk;
                }
            }
            if key <= ck {
                break;
            }
            i = child;
        }
        let mut carry = last;
        loop {
            carry = std::mem::replace(&mut h[i], carry);
            if i == 0 {
                break;
            }
            i = (i - 1) / 2;
        }
        Some((carry.at, carry.ev))
    }

    /// The earliest event's time and the event.
    #[inline]
    pub fn peek(&self) -> Option<(Nanos, &E)> {
        self.heap.first().map(|s| (s.at, &s.ev))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl<E> Default for TimedHeap<E> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiny deterministic generator (splitmix64) for the interleavings.
    fn next(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn events_come_out_as_from_a_sorted_set() {
        // Random interleavings of pushes and pops, many at equal times and
        // at heap sizes up to a few hundred (several levels of sifting),
        // checked against an ordered set of (time, sequence).
        let mut h = TimedHeap::new();
        let mut reference = std::collections::BTreeSet::new();
        let (mut s, mut seq, mut now) = (7u64, 0u64, 0u64);
        for round in 0..20_000 {
            let pushes = next(&mut s) % if round % 1000 < 500 { 6 } else { 3 };
            for _ in 0..pushes {
                let at = now + next(&mut s) % 8 * 10;
                seq += 1;
                h.push(at, seq);
                reference.insert((at, seq));
            }
            for _ in 0..next(&mut s) % 4 {
                assert_eq!(h.peek().map(|(t, _)| t), reference.first().map(|&(t, _)| t));
                let got = h.pop();
                assert_eq!(got, reference.pop_first());
                if let Some((t, _)) = got {
                    now = t;
                }
            }
            assert_eq!(h.len(), reference.len());
        }
        while let Some(e) = h.pop() {
            assert_eq!(Some(e), reference.pop_first());
        }
        assert!(reference.is_empty() && h.is_empty());
    }
}
