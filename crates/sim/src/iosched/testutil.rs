//! Test harness shared by the scheduler unit tests.
//!
//! It plays the block layer and a device in the smallest form that still
//! exercises an elevator: a [`RequestTable`], a device that serves up to
//! `queue_depth` commands, each in a fixed service time, the scheduler's one
//! timer, and a few "processes" (streams) that issue the next request once
//! the previous one completed, after a think time. Events run in time order;
//! events at the same instant run in the order they were scheduled, and a
//! process woken by a completion submits after the block layer has tried to
//! dispatch again, as a process woken by an interrupt would.
#![cfg(test)]

use super::{Cgroups, IoScheduler, SchedCtx, TickSource};
use crate::request::{BioOwner, IoContext, IoPrio, IoPrioClass, Pid, Request, RequestTable, RqId};
use devmodel::{Direction, Nanos};
use std::collections::BTreeMap;

/// What a request looks like when it is submitted.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub pid: Pid,
    pub prio: IoPrio,
    pub sector: u64,
    pub sectors: u32,
    pub dir: Direction,
    pub sync: bool,
}

impl Spec {
    /// A 4 KiB sync read.
    pub fn read(pid: Pid, sector: u64) -> Spec {
        Spec {
            pid,
            prio: IoPrio::DEFAULT,
            sector,
            sectors: 8,
            dir: Direction::Read,
            sync: true,
        }
    }

    /// A 4 KiB async (write-back) write.
    pub fn write(pid: Pid, sector: u64) -> Spec {
        Spec {
            dir: Direction::Write,
            sync: false,
            ..Spec::read(pid, sector)
        }
    }

    pub fn prio(self, class: IoPrioClass, level: u8) -> Spec {
        Spec {
            prio: IoPrio::new(class, level),
            ..self
        }
    }
}

/// One dispatch, as the device saw it.
#[derive(Clone, Copy, Debug)]
pub struct Dispatch {
    pub at: Nanos,
    pub pid: Pid,
    pub sector: u64,
    pub dir: Direction,
    pub sync: bool,
    pub inserted_at: Nanos,
}

/// A process that keeps `depth` requests outstanding: each completion
/// makes it submit the next request `think` later, `stride` sectors after
/// the previous one, until `until`.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    pub spec: Spec,
    pub stride: u64,
    pub think: Nanos,
    pub depth: usize,
    pub until: Nanos,
}

impl Stream {
    /// A greedy sequential process: depth 1, no think time, forever.
    pub fn greedy(spec: Spec) -> Stream {
        Stream {
            spec,
            stride: spec.sectors as u64,
            think: 0,
            depth: 1,
            until: Nanos::MAX,
        }
    }
}

enum Event {
    Complete(RqId),
    Timer(u64),
    Submit(Spec),
    StreamNext(usize),
}

pub struct Harness<S: IoScheduler> {
    pub sched: S,
    pub rqs: RequestTable,
    pub cgroups: Cgroups,
    pub ticks: TickSource,
    pub now: Nanos,
    /// Fixed device service time per request.
    pub service: Nanos,
    pub queue_depth: usize,
    pub rotational: bool,
    in_driver: usize,
    events: BTreeMap<(Nanos, u64), Event>,
    seq: u64,
    timer: Option<(Nanos, u64)>,
    timer_gen: u64,
    /// Every arm of the scheduler timer: (when armed, when due).
    pub timer_log: Vec<(Nanos, Nanos)>,
    /// Every dispatch, in order.
    pub log: Vec<Dispatch>,
    streams: Vec<(Stream, u64)>,
}

impl<S: IoScheduler> Harness<S> {
    pub fn new(sched: S, service: Nanos) -> Harness<S> {
        Harness {
            sched,
            rqs: RequestTable::default(),
            cgroups: Cgroups::new(),
            ticks: TickSource::new(250),
            now: 0,
            service,
            queue_depth: 1,
            rotational: true,
            in_driver: 0,
            events: BTreeMap::new(),
            seq: 0,
            timer: None,
            timer_gen: 0,
            timer_log: Vec::new(),
            log: Vec::new(),
            streams: Vec::new(),
        }
    }

    /// Runs one scheduler hook with a fresh context and applies its timer
    /// request.
    fn hook<T>(&mut self, f: impl FnOnce(&mut S, &mut SchedCtx) -> T) -> T {
        let mut ctx = SchedCtx {
            now: self.now,
            rqs: &self.rqs,
            in_driver: self.in_driver,
            queue_depth: self.queue_depth,
            rotational: self.rotational,
            cgroups: &self.cgroups,
            ticks: self.ticks,
            timer_request: None,
        };
        let out = f(&mut self.sched, &mut ctx);
        match ctx.timer_request {
            Some(Some(at)) => {
                self.timer_gen += 1;
                self.timer = Some((at, self.timer_gen));
                self.timer_log.push((self.now, at));
                let gen = self.timer_gen;
                self.schedule(at.max(self.now), Event::Timer(gen));
            }
            Some(None) => self.timer = None,
            None => {}
        }
        out
    }

    fn schedule(&mut self, at: Nanos, ev: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), ev);
    }

    /// Puts a request into the scheduler without dispatching.
    pub fn insert(&mut self, spec: Spec) -> RqId {
        self.insert_tagged(spec, 0)
    }

    fn insert_tagged(&mut self, spec: Spec, token: u64) -> RqId {
        let rq = Request {
            sector: spec.sector,
            sectors: spec.sectors,
            dir: spec.dir,
            sync: spec.sync,
            ioc: IoContext {
                pid: spec.pid,
                prio: spec.prio,
                cgroup: 0,
            },
            inserted_at: self.now,
            dispatched_at: 0,
            owners: vec![BioOwner {
                pid: spec.pid,
                token,
            }],
        };
        let id = self.rqs.insert(rq);
        self.hook(|s, ctx| s.insert(ctx, id));
        id
    }

    /// Submits a request now and lets the device take what it can.
    pub fn submit(&mut self, spec: Spec) -> RqId {
        let id = self.insert(spec);
        self.kick();
        id
    }

    /// Submits a request at time `at` (>= now).
    pub fn submit_at(&mut self, at: Nanos, spec: Spec) {
        self.schedule(at, Event::Submit(spec));
    }

    /// Starts a stream now: it submits `depth` requests at once.
    pub fn add_stream(&mut self, stream: Stream) -> usize {
        self.streams.push((stream, stream.spec.sector));
        let idx = self.streams.len() - 1;
        for _ in 0..stream.depth {
            self.stream_next(idx);
        }
        idx
    }

    /// Stops a stream: it submits nothing more.
    pub fn stop_stream(&mut self, idx: usize) {
        self.streams[idx].0.until = self.now;
    }

    fn stream_next(&mut self, idx: usize) {
        let (stream, next) = &mut self.streams[idx];
        if self.now >= stream.until {
            return;
        }
        let spec = Spec {
            sector: *next,
            ..stream.spec
        };
        *next += stream.stride;
        self.insert_tagged(spec, idx as u64 + 1);
        self.kick();
    }

    /// Dispatches while the device has room and the scheduler gives
    /// requests.
    pub fn kick(&mut self) {
        while self.in_driver < self.queue_depth {
            let Some(id) = self.hook(|s, ctx| s.dispatch(ctx)) else {
                break;
            };
            let now = self.now;
            let rq = self.rqs.get_mut(id);
            rq.dispatched_at = now;
            self.log.push(Dispatch {
                at: now,
                pid: rq.ioc.pid,
                sector: rq.sector,
                dir: rq.dir,
                sync: rq.sync,
                inserted_at: rq.inserted_at,
            });
            self.in_driver += 1;
            self.schedule(now + self.service, Event::Complete(id));
        }
    }

    /// Runs events up to and including time `t`; then the clock reads `t`.
    pub fn run_until(&mut self, t: Nanos) {
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 > t {
                break;
            }
            let ((at, _), ev) = entry.remove_entry();
            self.now = at;
            match ev {
                Event::Complete(id) => {
                    self.in_driver -= 1;
                    self.hook(|s, ctx| s.completed(ctx, id));
                    let rq = self.rqs.remove(id);
                    self.kick();
                    for owner in rq.owners {
                        if owner.token > 0 {
                            let idx = owner.token as usize - 1;
                            let think = self.streams[idx].0.think;
                            let at = self.now + think;
                            self.schedule(at, Event::StreamNext(idx));
                        }
                    }
                }
                Event::Timer(gen) => {
                    if self.timer.map(|(_, g)| g) == Some(gen) {
                        self.timer = None;
                        self.hook(|s, ctx| s.timer(ctx));
                        self.kick();
                    }
                }
                Event::Submit(spec) => {
                    self.submit(spec);
                }
                Event::StreamNext(idx) => self.stream_next(idx),
            }
        }
        self.now = self.now.max(t);
    }

    /// Dispatches by `pid`, in order.
    pub fn dispatches_of(&self, pid: Pid) -> Vec<Dispatch> {
        self.log.iter().filter(|d| d.pid == pid).copied().collect()
    }

    /// Number of dispatches by `pid` in `[from, to)`.
    pub fn count_between(&self, pid: Pid, from: Nanos, to: Nanos) -> usize {
        self.log
            .iter()
            .filter(|d| d.pid == pid && d.at >= from && d.at < to)
            .count()
    }

    /// The dispatch log cut into runs of consecutive dispatches by the same
    /// pid: (pid, first dispatch time, last dispatch time, count).
    pub fn runs(&self) -> Vec<(Pid, Nanos, Nanos, usize)> {
        let mut out: Vec<(Pid, Nanos, Nanos, usize)> = Vec::new();
        for d in &self.log {
            match out.last_mut() {
                Some(run) if run.0 == d.pid => {
                    run.2 = d.at;
                    run.3 += 1;
                }
                _ => out.push((d.pid, d.at, d.at, 1)),
            }
        }
        out
    }
}
