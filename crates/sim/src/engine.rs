//! Deterministic discrete-event core: an integer-nanosecond clock, an event
//! queue ordered by (time, insertion sequence), and a seeded RNG.
//!
//! Ties are broken by insertion order, never by memory addresses or hash
//! order, so a run is a pure function of its inputs and seed.

use devmodel::heap::TimedHeap;
use devmodel::Nanos;

/// The simulator's event queue: the shared heap of timed events
/// ([`devmodel::heap::TimedHeap`]) with the clock it advances.
pub struct EventQueue<E> {
    heap: TimedHeap<E>,
    now: Nanos,
    processed: u64,
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: TimedHeap::new(),
            now: 0,
            processed: 0,
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `ev` at absolute time `at` (not earlier than now).
    #[inline]
    pub fn push(&mut self, at: Nanos, ev: E) {
        self.heap.push(at.max(self.now), ev);
    }

    /// Pops the next event and advances the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let (at, ev) = self.heap.pop()?;
        self.now = at;
        self.processed += 1;
        Some((at, ev))
    }

    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|(at, _)| at)
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
