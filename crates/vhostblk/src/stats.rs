//! The backend's counters: requests per guest class and per host class,
//! demotions, refusals by reason, errors. Lock-free (atomics), shared by
//! every queue thread and submitter; [`Stats::snapshot`] gives JSON for the
//! stats file.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde_json::{json, Value};

use crate::classmap::Demotion;
use crate::ioprio::Class;
use crate::request::Refusal;

#[derive(Debug, Default)]
pub struct Stats {
    guest_class: [AtomicU64; 4],
    host_class: [AtomicU64; 4],
    rt_not_allowed: AtomicU64,
    rt_over_budget: AtomicU64,
    refused: [AtomicU64; 5],
    /// Chains without a status byte: returned unused.
    unanswerable: AtomicU64,
    /// Guest buffers outside guest memory.
    bad_memory: AtomicU64,
    completed: AtomicU64,
    io_errors: AtomicU64,
    /// Requests the queue thread issued itself (the fast path,
    /// `submit::LocalRing`), not through a submitter thread.
    by_queue_thread: AtomicU64,
    /// Requests the direct file refused (EINVAL) or could not take
    /// (unaligned), issued through the page cache instead.
    buffered: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Events a queue thread caught by polling (`crate::poll`) instead of
    /// sleeping in epoll: I/O completions, and guest requests.
    polled_completions: AtomicU64,
    polled_requests: AtomicU64,
    /// Times a queue thread went to sleep after polling in vain.
    poll_misses: AtomicU64,
    /// Nanoseconds spent polling, caught or not: the polling's CPU cost.
    poll_ns: AtomicU64,
    /// 1 when the guest's driver took `VIRTIO_RING_F_EVENT_IDX` (the
    /// notification suppression of both sides), else 0.
    event_idx: AtomicU64,
    flushes: AtomicU64,
    discards: AtomicU64,
    write_zeroes: AtomicU64,
}

fn refusal_index(r: Refusal) -> usize {
    Refusal::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

impl Stats {
    pub fn accepted(&self, guest: Class, host: Class, demoted: Option<Demotion>) {
        self.guest_class[guest.index()].fetch_add(1, Relaxed);
        self.host_class[host.index()].fetch_add(1, Relaxed);
        match demoted {
            Some(Demotion::NotAllowed) => self.rt_not_allowed.fetch_add(1, Relaxed),
            Some(Demotion::Budget) => self.rt_over_budget.fetch_add(1, Relaxed),
            None => 0,
        };
    }

    pub fn refused(&self, r: Refusal) {
        self.refused[refusal_index(r)].fetch_add(1, Relaxed);
    }

    pub fn unanswerable(&self) {
        self.unanswerable.fetch_add(1, Relaxed);
    }

    pub fn bad_memory(&self) {
        self.bad_memory.fetch_add(1, Relaxed);
    }

    pub fn buffered(&self) {
        self.buffered.fetch_add(1, Relaxed);
    }

    pub fn by_queue_thread(&self) {
        self.by_queue_thread.fetch_add(1, Relaxed);
    }

    /// A request finished; `ok` false for an I/O error.
    pub fn completed(&self, ok: bool) {
        self.completed.fetch_add(1, Relaxed);
        if !ok {
            self.io_errors.fetch_add(1, Relaxed);
        }
    }

    pub fn read(&self, bytes: u64) {
        self.bytes_read.fetch_add(bytes, Relaxed);
    }

    pub fn written(&self, bytes: u64) {
        self.bytes_written.fetch_add(bytes, Relaxed);
    }

    /// A queue thread polled for `ns` and caught a completion (`requests`
    /// false) or a guest request; `None`: it found nothing and the thread
    /// sleeps.
    pub fn polled(&self, requests: Option<bool>, ns: u64) {
        self.poll_ns.fetch_add(ns, Relaxed);
        let c = match requests {
            Some(false) => &self.polled_completions,
            Some(true) => &self.polled_requests,
            None => &self.poll_misses,
        };
        c.fetch_add(1, Relaxed);
    }

    pub fn set_event_idx(&self, enabled: bool) {
        self.event_idx.store(u64::from(enabled), Relaxed);
    }

    pub fn flush(&self) {
        self.flushes.fetch_add(1, Relaxed);
    }

    pub fn discard(&self, zeroes: bool) {
        let c = if zeroes {
            &self.write_zeroes
        } else {
            &self.discards
        };
        c.fetch_add(1, Relaxed);
    }

    /// Requests the guest sent with class `c`.
    pub fn guest(&self, c: Class) -> u64 {
        self.guest_class[c.index()].load(Relaxed)
    }

    /// Requests issued to the host with class `c`.
    pub fn host(&self, c: Class) -> u64 {
        self.host_class[c.index()].load(Relaxed)
    }

    pub fn refusals(&self, r: Refusal) -> u64 {
        self.refused[refusal_index(r)].load(Relaxed)
    }

    pub fn snapshot(&self) -> Value {
        let per_class = |a: &[AtomicU64; 4]| {
            Class::ALL
                .iter()
                .map(|c| (c.name().to_string(), json!(a[c.index()].load(Relaxed))))
                .collect::<serde_json::Map<_, _>>()
        };
        let refused: serde_json::Map<_, _> = Refusal::ALL
            .iter()
            .map(|r| {
                let name = serde_json::to_value(r)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from));
                (name.unwrap_or_default(), json!(self.refusals(*r)))
            })
            .collect();
        let g = |a: &AtomicU64| a.load(Relaxed);
        json!({
            "guest_class": per_class(&self.guest_class),
            "host_class": per_class(&self.host_class),
            "rt_demoted": {"not_allowed": g(&self.rt_not_allowed), "over_budget": g(&self.rt_over_budget)},
            "refused": refused,
            "unanswerable": g(&self.unanswerable),
            "bad_memory": g(&self.bad_memory),
            "completed": g(&self.completed),
            "io_errors": g(&self.io_errors),
            "buffered": g(&self.buffered),
            "by_queue_thread": g(&self.by_queue_thread),
            "bytes_read": g(&self.bytes_read),
            "bytes_written": g(&self.bytes_written),
            "polled": {"completions": g(&self.polled_completions), "requests": g(&self.polled_requests), "misses": g(&self.poll_misses), "ns": g(&self.poll_ns)},
            "event_idx": g(&self.event_idx) == 1,
            "flushes": g(&self.flushes),
            "discards": g(&self.discards),
            "write_zeroes": g(&self.write_zeroes),
        })
    }

    /// Writes the snapshot to `path` through a temporary file and a rename,
    /// so a reader never sees half a file.
    pub fn write_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{:#}\n", self.snapshot()))?;
        std::fs::rename(&tmp, path)
    }
}
