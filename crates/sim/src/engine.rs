//! Deterministic discrete-event core: an integer-nanosecond clock, an event
//! queue ordered by (time, insertion sequence), and a seeded RNG.
//!
//! Ties are broken by insertion order, never by memory addresses or hash
//! order, so a run is a pure function of its inputs and seed.

use devmodel::Nanos;

/// A min-heap of timed events.
///
/// Hand-written rather than `std`'s `BinaryHeap`: the queue holds only a
/// few events at a time (1 to 4 nearly always on the benchmark cell), so
/// a plain sift-down beats `BinaryHeap::pop`'s sift-to-bottom-then-up,
/// which pays off only for deep heaps. Keys are unique, so the order in
/// which events come out does not depend on how the heap is laid out.
pub struct EventQueue<E> {
    heap: Vec<Slot<E>>,
    seq: u64,
    now: Nanos,
    processed: u64,
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
    fn key(&self) -> u128 {
        (self.at as u128) << 64 | self.seq as u128
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: Vec::with_capacity(256),
            seq: 0,
            now: 0,
            processed: 0,
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `ev` at absolute time `at` (not earlier than now).
    pub fn push(&mut self, at: Nanos, ev: E) {
        let at = at.max(self.now);
        self.seq += 1;
        let slot = Slot {
            at,
            seq: self.seq,
            ev,
        };
        let key = slot.key();
        let h = &mut self.heap;
        h.push(slot);
        // Sift up.
        let mut i = h.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if h[parent].key() <= key {
                break;
            }
            h.swap(i, parent);
            i = parent;
        }
    }

    /// Pops the next event and advances the clock to its time.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let h = &mut self.heap;
        let last = h.pop()?;
        let top = if h.is_empty() {
            last
        } else {
            // The last event takes the root's place and sifts down.
            let top = std::mem::replace(&mut h[0], last);
            let n = h.len();
            let mut i = 0;
            loop {
                let mut child = 2 * i + 1;
                if child >= n {
                    break;
                }
                if child + 1 < n && h[child + 1].key() < h[child].key() {
                    child += 1;
                }
                if h[i].key() <= h[child].key() {
                    break;
                }
                h.swap(i, child);
                i = child;
            }
            top
        };
        self.now = top.at;
        self.processed += 1;
        Some((top.at, top.ev))
    }

    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.first().map(|s| s.at)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events popped so far (for the events-per-second benchmark).
    pub fn processed(&self) -> u64 {
        self.processed
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

/// xoshiro256** seeded through splitmix64: small, fast, and its output
/// sequence is fixed by its published definition, so results stay
/// byte-identical across Rust versions and platforms.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let mut next = || {
            sm = sm.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// An independent stream derived from this one (for one process).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (n > 0), by Lemire's multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pop_in_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(30, 'c');
        q.push(10, 'a');
        q.push(10, 'b');
        q.push(20, 'x');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!['a', 'b', 'x', 'c']);
        assert_eq!(q.now(), 30);
    }

    #[test]
    fn events_pop_as_from_a_sorted_set() {
        // Random interleavings of pushes and pops, many of them at equal
        // times, checked against an ordered set of (time, sequence).
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeSet::new();
        let mut r = Rng::new(3);
        let mut seq = 0u64;
        for _ in 0..5000 {
            for _ in 0..r.below(4) {
                let at = q.now() + r.below(8) * 10;
                seq += 1;
                q.push(at, seq);
                reference.insert((at, seq));
            }
            for _ in 0..r.below(4) {
                assert_eq!(q.peek_time(), reference.first().map(|&(t, _)| t));
                assert_eq!(q.pop(), reference.pop_first());
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(e) = q.pop() {
            assert_eq!(Some(e), reference.pop_first());
        }
        assert!(reference.is_empty() && q.is_empty());
    }

    #[test]
    fn rng_is_reproducible_and_seed_sensitive() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..5)
            .scan(Rng::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
