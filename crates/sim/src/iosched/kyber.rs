//! Kyber (`block/kyber-iosched.c`, Linux 4.12 and later): latency targets met
//! by throttling how many requests of each kind may be in the device.
//!
//! - **Domains.** Requests are split by operation into scheduling domains
//!   (`kyber_sched_domain()`): reads, writes, discards, other. The simulator
//!   issues reads and writes only, so two domains are live here.
//! - **Tokens.** A request leaves the scheduler only with one of its domain's
//!   tokens (`kyber_get_domain_token()`), given back when it completes
//!   (`kyber_finish_request()`). A domain's token count is its device-wide
//!   depth, at most `kyber_depth[]`.
//! - **Batches, round robin.** Dispatch keeps to the current domain for up to
//!   `kyber_batch_size[]` requests, then moves to the next domain that has
//!   requests and a token (`kyber_dispatch_request()`); inside a domain the
//!   order is arrival order (one FIFO per domain, the per-CPU lists being
//!   spliced in order).
//! - **Depths from latencies.** Every completion records the request's total
//!   latency (from entering the scheduler) and its I/O latency (in the
//!   device) in a histogram of 8 buckets, a quarter of the domain's target
//!   wide (`add_latency_sample()`). 100 ms after a completion the timer
//!   (`kyber_timer_fn()`) reads the histograms (once a domain has 500
//!   samples or a second has passed, `calculate_percentile()`): when some
//!   domain's p90 I/O latency is beyond its target the device is congested,
//!   and every domain is scaled by its p99 total latency against its target
//!   (a domain within target is throttled, one beyond is given more depth);
//!   without congestion only the domains beyond target grow.
//!
//! Left out: the async depth limit on scheduler tags (`kyber_limit_depth()`,
//! 75% of the tags for async requests; the simulator has no tag allocation),
//! the discard and other domains (no such requests), and the per-hardware-
//! queue contexts (one queue).

use super::{IoScheduler, SchedCtx, MSEC};
use crate::request::RqId;
use devmodel::Nanos;
use std::collections::VecDeque;

/// The domains the simulator's requests fall into (`KYBER_READ`,
/// `KYBER_WRITE`).
const DOMAINS: usize = 2;
const READ: usize = 0;
const WRITE: usize = 1;

/// `kyber_depth[]`: the maximum device-wide depth of each domain (READ 256,
/// WRITE 128).
pub const MAX_DEPTH: [u32; DOMAINS] = [256, 128];
/// `kyber_latency_targets[]`: READ 2 ms, WRITE 10 ms (the `read_lat_nsec`
/// and `write_lat_nsec` defaults).
pub const TARGET: [Nanos; DOMAINS] = [2 * MSEC, 10 * MSEC];
/// `kyber_batch_size[]`: READ 16, WRITE 8 requests in a row.
pub const BATCH: [u32; DOMAINS] = [16, 8];
/// `KYBER_LATENCY_SHIFT`: buckets are a quarter of the target wide.
const LATENCY_SHIFT: u32 = 2;
/// `KYBER_GOOD_BUCKETS`: the buckets within the target.
const GOOD_BUCKETS: usize = 1 << LATENCY_SHIFT;
/// `KYBER_LATENCY_BUCKETS`.
const BUCKETS: usize = 2 << LATENCY_SHIFT;
/// `calculate_percentile()`: a percentile is taken once there are this many
/// samples, or a second (`HZ` jiffies) after the first try.
const MIN_SAMPLES: u32 = 500;
/// `kyber_completed_request()`: `timer_reduce(&kqd->timer, jiffies + HZ / 10)`.
const TIMER_DIVISOR: u64 = 10;

/// `KYBER_TOTAL_LATENCY` and `KYBER_IO_LATENCY`.
#[derive(Clone, Copy)]
enum Lat {
    Total = 0,
    Io = 1,
}

/// The Kyber elevator (`struct kyber_queue_data` and `struct
/// kyber_hctx_data` of the one hardware queue).
#[derive(Debug)]
pub struct Kyber {
    queues: [VecDeque<RqId>; DOMAINS],
    /// Tokens each domain may hand out (`domain_tokens[].sb.depth`).
    depth: [u32; DOMAINS],
    /// Tokens held by dispatched requests.
    in_flight: [u32; DOMAINS],
    cur_domain: usize,
    batching: u32,
    /// `latency_buckets[domain][type][bucket]`.
    buckets: [[[u32; BUCKETS]; 2]; DOMAINS],
    /// `latency_timeout[domain]`, in jiffies (0: not started).
    latency_timeout: [u64; DOMAINS],
    /// `domain_p99[domain]`: the last p99 bucket, for the next congestion.
    domain_p99: [Option<usize>; DOMAINS],
    /// When the armed timer is due (`timer_reduce` only brings it forward).
    timer_at: Option<Nanos>,
}

impl Default for Kyber {
    fn default() -> Self {
        Kyber::new()
    }
}

fn domain(is_read: bool) -> usize {
    if is_read {
        READ
    } else {
        WRITE
    }
}

impl Kyber {
    pub fn new() -> Kyber {
        Kyber {
            queues: [VecDeque::new(), VecDeque::new()],
            depth: MAX_DEPTH,
            in_flight: [0; DOMAINS],
            cur_domain: READ,
            batching: 0,
            buckets: [[[0; BUCKETS]; 2]; DOMAINS],
            latency_timeout: [0; DOMAINS],
            domain_p99: [None; DOMAINS],
            timer_at: None,
        }
    }

    /// The current depth of the read and write domains (the debugfs
    /// `read_tokens` and `write_tokens` depths), for tests and reports.
    pub fn depths(&self) -> (u32, u32) {
        (self.depth[READ], self.depth[WRITE])
    }

    /// `add_latency_sample()`: bucket `(latency - 1) / (target / 4)`, at most
    /// the last.
    fn add_sample(&mut self, d: usize, kind: Lat, latency: Nanos) {
        let bucket = if latency > 0 {
            let divisor = (TARGET[d] >> LATENCY_SHIFT).max(1);
            (((latency - 1) / divisor) as usize).min(BUCKETS - 1)
        } else {
            0
        };
        self.buckets[d][kind as usize][bucket] += 1;
    }

    /// `calculate_percentile()`: the bucket holding the `percentile`, or
    /// `None` until there are enough samples; the histogram is cleared once
    /// it is read.
    fn percentile(
        &mut self,
        ctx: &SchedCtx,
        d: usize,
        kind: Lat,
        percentile: u32,
    ) -> Option<usize> {
        let buckets = &mut self.buckets[d][kind as usize];
        let samples: u32 = buckets.iter().sum();
        if samples == 0 {
            return None;
        }
        let jiffies = ctx.jiffies();
        if self.latency_timeout[d] == 0 {
            self.latency_timeout[d] = (jiffies + ctx.ticks.hz as u64).max(1);
        }
        if samples < MIN_SAMPLES && self.latency_timeout[d] > jiffies {
            return None;
        }
        self.latency_timeout[d] = 0;
        let mut want = (samples * percentile).div_ceil(100);
        let mut bucket = 0;
        while bucket < BUCKETS - 1 {
            if buckets[bucket] >= want {
                break;
            }
            want -= buckets[bucket];
            bucket += 1;
        }
        *buckets = [0; BUCKETS];
        Some(bucket)
    }

    /// `kyber_timer_fn()`: congestion from the p90 I/O latencies, then each
    /// domain's depth scaled by its p99 total latency.
    fn adjust_depths(&mut self, ctx: &SchedCtx) {
        let mut bad = false;
        for d in 0..DOMAINS {
            if self
                .percentile(ctx, d, Lat::Io, 90)
                .is_some_and(|p90| p90 >= GOOD_BUCKETS)
            {
                bad = true;
            }
        }
        for (d, max_depth) in MAX_DEPTH.into_iter().enumerate() {
            let mut p99 = self.percentile(ctx, d, Lat::Total, 99);
            if bad {
                p99 = p99.or(self.domain_p99[d]);
                self.domain_p99[d] = None;
            } else if p99.is_some() {
                self.domain_p99[d] = p99;
            }
            let Some(p99) = p99 else { continue };
            if bad || p99 >= GOOD_BUCKETS {
                let depth = (self.depth[d] * (p99 as u32 + 1)) >> LATENCY_SHIFT;
                // `kyber_resize_domain()`: clamped to [1, kyber_depth].
                self.depth[d] = depth.clamp(1, max_depth);
            }
        }
    }

    /// `kyber_dispatch_cur_domain()`: the head of the current domain, if it
    /// has one and a token is free.
    fn dispatch_cur(&mut self) -> Option<RqId> {
        let d = self.cur_domain;
        if self.queues[d].is_empty() || self.in_flight[d] >= self.depth[d] {
            return None;
        }
        self.in_flight[d] += 1;
        self.batching += 1;
        self.queues[d].pop_front()
    }
}

impl IoScheduler for Kyber {
    fn name(&self) -> &'static str {
        "kyber"
    }

    fn insert(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        let d = domain(ctx.rq(rq).is_read());
        self.queues[d].push_back(rq);
    }

    fn dispatch(&mut self, _ctx: &mut SchedCtx) -> Option<RqId> {
        if self.batching < BATCH[self.cur_domain] {
            if let Some(rq) = self.dispatch_cur() {
                return Some(rq);
            }
        }
        // A new batch, in the next domain that can dispatch (wrapping back to
        // the current one).
        self.batching = 0;
        for _ in 0..DOMAINS {
            self.cur_domain = (self.cur_domain + 1) % DOMAINS;
            if let Some(rq) = self.dispatch_cur() {
                return Some(rq);
            }
        }
        None
    }

    fn completed(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        let r = ctx.rq(rq);
        let d = domain(r.is_read());
        let total = ctx.now.saturating_sub(r.inserted_at);
        let io = ctx.now.saturating_sub(r.dispatched_at);
        self.in_flight[d] = self.in_flight[d].saturating_sub(1);
        self.add_sample(d, Lat::Total, total);
        self.add_sample(d, Lat::Io, io);
        let due =
            (ctx.jiffies() + (ctx.ticks.hz as u64 / TIMER_DIVISOR).max(1)) * ctx.ticks.tick_ns();
        if self.timer_at.is_none_or(|at| due < at) {
            self.timer_at = Some(due);
            ctx.arm_timer(due);
        }
    }

    fn timer(&mut self, ctx: &mut SchedCtx) {
        self.timer_at = None;
        self.adjust_depths(ctx);
    }

    fn queued(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Harness, Spec, Stream};
    use super::super::SEC;
    use super::*;

    /// Reads and writes queued together go out in batches of 16 reads and
    /// 8 writes, each domain in arrival order.
    #[test]
    fn alternates_batches_of_16_reads_and_8_writes() {
        let mut h = Harness::new(Kyber::new(), MSEC);
        for i in 0..40u64 {
            h.insert(Spec::read(1, 1_000_000 - i * 8));
            h.insert(Spec {
                sync: true,
                ..Spec::write(2, i * 8)
            });
        }
        h.kick();
        h.run_until(SEC);
        let dirs: Vec<bool> = h.log.iter().map(|d| d.pid == 1).collect();
        let mut runs = Vec::new();
        for &r in &dirs {
            match runs.last_mut() {
                Some((last, n)) if *last == r => *n += 1,
                _ => runs.push((r, 1)),
            }
        }
        // The first batch is a read one (cur_domain starts at READ).
        assert_eq!(runs[0], (true, 16), "{runs:?}");
        assert_eq!(runs[1], (false, 8), "{runs:?}");
        assert_eq!(runs[2], (true, 16), "{runs:?}");
        let reads: Vec<u64> = h.dispatches_of(1).iter().map(|d| d.sector).collect();
        assert!(reads.windows(2).all(|w| w[0] > w[1]), "FIFO, not sorted");
    }

    /// On a slow device (20 ms per request, far beyond the 2 ms read target)
    /// with many readers queued, Kyber finds the device congested and the
    /// reads beyond target: it grows the read depth (already at its
    /// maximum, so it stays there), while a write domain within target is
    /// throttled.
    #[test]
    fn congestion_throttles_the_domain_within_target() {
        let mut h = Harness::new(Kyber::new(), 20 * MSEC);
        h.queue_depth = 32;
        for pid in 1..=8 {
            h.add_stream(Stream {
                depth: 4,
                ..Stream::greedy(Spec::read(pid, pid as u64 * 10_000_000))
            });
        }
        h.run_until(3 * SEC);
        let (r, w) = h.sched.depths();
        assert_eq!(r, MAX_DEPTH[READ], "reads beyond target keep full depth");
        assert_eq!(w, MAX_DEPTH[WRITE], "no write samples, no write resize");
        // Now fast writes only: a write domain within target, and reads too
        // slow; the write depth must shrink when congestion is seen.
        let mut k = Kyber::new();
        for _ in 0..600 {
            k.add_sample(READ, Lat::Io, 20 * MSEC);
            k.add_sample(READ, Lat::Total, 20 * MSEC);
            k.add_sample(WRITE, Lat::Io, MSEC);
            k.add_sample(WRITE, Lat::Total, MSEC);
        }
        let rqs = crate::request::RequestTable::default();
        let cg = super::super::Cgroups::new();
        let ctx = SchedCtx {
            now: 0,
            rqs: &rqs,
            in_driver: 0,
            queue_depth: 1,
            rotational: true,
            cgroups: &cg,
            ticks: super::super::TickSource::new(250),
            timer_request: None,
        };
        k.adjust_depths(&ctx);
        // p99 of 1 ms against 10 ms is bucket 0: depth x 1/4.
        assert_eq!(k.depths(), (MAX_DEPTH[READ], MAX_DEPTH[WRITE] / 4));
    }

    /// A token per request in the device: with the read depth cut to 1,
    /// never more than one read is dispatched at a time.
    #[test]
    fn tokens_bound_the_requests_in_the_device() {
        let mut k = Kyber::new();
        k.depth[READ] = 1;
        let mut h = Harness::new(k, MSEC);
        h.queue_depth = 8;
        for pid in 1..=4 {
            h.add_stream(Stream::greedy(Spec::read(pid, pid as u64 * 1_000_000)));
        }
        h.run_until(100 * MSEC);
        // One request at a time, 1 ms each: about 100 in 100 ms, not 400.
        assert!(
            (90..=101).contains(&h.log.len()),
            "{} dispatches",
            h.log.len()
        );
    }
}
