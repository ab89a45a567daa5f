//! The profile benchmark (`benchmark = "profile"`, issue 29) on the
//! simulator: FFSB-style threads doing `O_DIRECT` I/O on their files, natively
//! (on the host's block layer) or in a Xen PV guest ([`crate::xen`]: the
//! guest's block layer, blkfront's ring, blkback in Dom0, Dom0's block
//! layer). `O_DIRECT` bypasses the page cache, so no page cache, read-ahead
//! or write-back is involved: each operation is one or more bios of the
//! thread's, sync (reads are sync; 2.6.32 submits `O_DIRECT` writes as
//! `WRITE_ODIRECT`, which is `WRITE_SYNC`).
//!
//! Its own event loop: the next event is the earliest of the threads'
//! next operations, the block layers' completions and timers and blkback's
//! next step. KVM guests run profiles on the same mechanics with a virtqueue
//! of QEMU's depth and no segment cap (see `build_stack`), an approximation
//! of the machine's QEMU part, which profiles do not run on yet.

use devmodel::{Device, Direction, Nanos};
use experiment::profile::{IO_LATENCY_P50_MS, IO_LATENCY_P99_MS};
use experiment::{Cell, Hypervisor, ProfileCell, RunResult};

use crate::block::{Backend, Bio, BlockLayer};
use crate::engine::Rng;
use crate::iosched::{by_name, Cgroups, SchedConfig, TickSource};
use crate::kernel::KernelName;
use crate::request::{BioOwner, IoContext, IoPrio};
use crate::virtio::Virtqueue;
use crate::xen::{self, Blkback, BLKBACK_PID};
use crate::xen_cpu::{Then, Who, XenCpu, ON_CPU};

/// Files of the fileset: 8, each thread of a sequential profile on its own
/// (thread `i` on file `i % 8`), the random profiles over all of them.
/// Assumption: FFSB's example profiles create a fileset per thread group;
/// the study does not give its own.
pub const FILES: u64 = 8;

/// Bytes per file: 1 GiB, so the fileset (8 GiB) is far beyond the disk's
/// buffer. Assumption, as [`FILES`].
pub const FILE_BYTES: u64 = 1 << 30;

/// Where the fileset starts on the disk (natively) or the guest's disk
/// (its `phy:` backend, a partition) starts: 64 GiB in, in sectors.
pub const DATA_START_SECTOR: u64 = (64 << 30) / 512;

/// A thread's time between the end of one operation and the issue of the
/// next: FFSB's loop and the `read`/`write` system call down to
/// `submit_bio`. Assumption: 10 us.
pub const THREAD_OVERHEAD_NS: Nanos = 10_000;

/// Warm-up before the measurement (the threads start together; the first
/// operations all miss): 0.5 s, not counted.
pub const WARMUP_NS: Nanos = 500_000_000;

/// The largest bio a thread submits natively: 512 KiB (2.6.32's
/// `BLK_DEF_MAX_SECTORS` is 1024 sectors).
const NATIVE_MAX_BIO_SECTORS: u32 = 1024;

/// One FFSB thread.
struct Thread {
    /// File of a sequential thread, and its next offset (bytes).
    file: u64,
    offset: u64,
    /// When it issues its next operation (`None`: waiting for one).
    issue_at: Option<Nanos>,
    /// Bios of the current operation still outstanding, its issue time.
    pending: u32,
    started: Nanos,
}

/// The block layers a cell's threads run on.
struct Stack {
    /// The guest's (DomU) block layer and blkback, in a VM cell.
    guest: Option<(BlockLayer, Blkback)>,
    /// The host's (Dom0's, or the native machine's) block layer.
    host: BlockLayer,
}

fn elevator(sched: experiment::IoSched, backend: Backend) -> Result<BlockLayer, String> {
    let profile = KernelName::Linux2632.profile();
    let mut cfg = SchedConfig::default();
    profile.apply(&mut cfg);
    let s = by_name(sched.name(), &cfg)?;
    Ok(BlockLayer::new(
        s,
        backend,
        Cgroups::new(),
        TickSource::new(profile.hz),
    ))
}

fn build_stack(cell: &Cell) -> Result<Stack, String> {
    let model = devmodel::preset(cell.device.name()).map_err(|e| e.to_string())?;
    let depth = model.info().default_queue_depth;
    let host = elevator(cell.host_sched, Backend::Disk(Device::new(model, depth)))?;
    let guest = match (cell.guest_sched, cell.hypervisor) {
        (None, _) => None,
        (Some(gs), Hypervisor::XenPv) => {
            let ring = Backend::Virtio(Virtqueue::new(xen::BLK_RING_SIZE));
            let mut g = elevator(gs, ring)?;
            g.set_max_sectors(xen::MAX_REQUEST_SECTORS);
            Some((g, Blkback::default()))
        }
        // KVM's virtio-blk path by the same mechanics: the guest's requests
        // on a virtqueue of QEMU's default depth, without blkfront's 11-page
        // cap, taken by one host thread (QEMU's iothread with aio=native
        // stands where blkback does) and submitted to the host's block layer.
        // Approximation: the per-request costs are the PV path's (tens of
        // microseconds, `crate::xen`), small against a disk's milliseconds;
        // QEMU's own costs are the machine's QEMU part, which profiles do not
        // run on yet.
        (Some(gs), Hypervisor::Kvm) => {
            let ring = Backend::Virtio(Virtqueue::new(crate::virtio::DEFAULT_VIRTQUEUE_DEPTH));
            Some((elevator(gs, ring)?, Blkback::default()))
        }
    };
    Ok(Stack { guest, host })
}

/// What a run counts.
#[derive(Default)]
struct Counts {
    /// Operations and bytes done in each sample.
    ops: Vec<u64>,
    bytes: Vec<u64>,
    latencies_ms: Vec<f64>,
}

/// One repetition of a profile cell.
pub fn run(cell: &Cell, rep: u32) -> Result<RunResult, String> {
    let p = cell
        .profile
        .ok_or_else(|| "benchmark = \"profile\" cell without a profile".to_string())?;
    let mut sim = ProfileSim::new(cell, p, rep)?;
    sim.run()?;
    Ok(sim.result(cell, &p))
}

struct ProfileSim {
    p: ProfileCell,
    stack: Stack,
    threads: Vec<Thread>,
    rng: Rng,
    sample_ns: Nanos,
    end: Nanos,
    counts: Counts,
    woken: Vec<BioOwner>,
    /// The CPU model of a Xen PV cell on a named platform
    /// ([`crate::xen_cpu`]); `None`: the path's CPU work is delays.
    xcpu: Option<XenCpu>,
}

impl ProfileSim {
    fn new(cell: &Cell, p: ProfileCell, rep: u32) -> Result<ProfileSim, String> {
        let stack = build_stack(cell)?;
        let xcpu = XenCpu::new(cell, p.threads as usize)?;
        let threads = (0..u64::from(p.threads))
            .map(|i| Thread {
                file: i % FILES,
                offset: 0,
                issue_at: Some(i * 1_000),
                pending: 0,
                started: 0,
            })
            .collect();
        let sample_ns = (cell.sample_s * 1e9) as Nanos;
        let samples = experiment::procedure::samples(cell);
        Ok(ProfileSim {
            p,
            stack,
            threads,
            rng: Rng::new(cell.seed ^ crate::engine::Rng::new(u64::from(rep)).next_u64()),
            sample_ns,
            end: WARMUP_NS + sample_ns * samples as Nanos,
            counts: Counts {
                ops: vec![0; samples],
                bytes: vec![0; samples],
                latencies_ms: Vec::new(),
            },
            woken: Vec::new(),
            xcpu,
        })
    }

    /// The earliest pending event.
    fn next_time(&self) -> Option<Nanos> {
        let threads = self.threads.iter().filter_map(|t| t.issue_at);
        let host = [
            self.stack.host.next_completion(),
            self.stack.host.timer_at(),
        ];
        let guest = self.stack.guest.as_ref().map_or([None; 3], |(g, b)| {
            [g.next_completion(), g.timer_at(), b.next_at]
        });
        let cpu = self.xcpu.as_ref().and_then(XenCpu::next_event_time);
        threads
            .chain(host.into_iter().flatten())
            .chain(guest.into_iter().flatten())
            .chain(cpu)
            .min()
    }

    fn run(&mut self) -> Result<(), String> {
        // Bounded: every event moves time or finishes work; a run of
        // `duration_s` at most a few hundred thousand operations.
        while let Some(now) = self.next_time() {
            if now >= self.end {
                break;
            }
            self.step(now);
        }
        Ok(())
    }

    fn step(&mut self, now: Nanos) {
        self.cpu_continuations(now);
        for i in 0..self.threads.len() {
            if self.threads[i].issue_at.is_some_and(|t| t <= now) {
                self.issue(i, now);
            }
        }
        if let Some((g, bb)) = self.stack.guest.as_mut() {
            if g.timer_at().is_some_and(|t| t <= now) {
                g.fire_timer(now);
            }
            if bb.next_at.is_some_and(|t| t <= now) {
                if let Backend::Virtio(ring) = g.backend_mut() {
                    if let Some(r) = bb.step(now, ring) {
                        let bio = Bio {
                            sector: xen_host_sector(r.req.sector),
                            sectors: r.req.sectors,
                            dir: r.req.dir,
                            // blkback submits reads as READ (sync) and writes
                            // as WRITE (async) in 2.6.32's dispatch_rw_block_io.
                            sync: r.req.dir == Direction::Read,
                            ioc: ioc(BLKBACK_PID),
                            owner: BioOwner {
                                pid: BLKBACK_PID,
                                token: r.tag,
                            },
                        };
                        self.stack.host.submit(now, bio);
                    }
                }
            }
        }
        self.blkback_on_cpu(now);
        if self.stack.host.timer_at().is_some_and(|t| t <= now) {
            self.stack.host.fire_timer(now);
        }
        let mut woken = std::mem::take(&mut self.woken);
        woken.clear();
        self.stack.host.complete_due(now, &mut woken);
        for o in woken.drain(..) {
            if o.pid == BLKBACK_PID {
                if let Some(xc) = self.xcpu.as_mut() {
                    xc.run(Who::Blkback, xen::GRANT_UNMAP_NS, Then::Respond(o.token));
                } else if let Some((g, _)) = self.stack.guest.as_mut() {
                    if let Backend::Virtio(ring) = g.backend_mut() {
                        ring.complete(o.token, now + xen::RESPONSE_NS);
                    }
                }
            } else {
                self.bio_done(o, now);
            }
        }
        if let Some((g, _)) = self.stack.guest.as_mut() {
            g.complete_due(now, &mut woken);
        }
        for o in woken.drain(..) {
            self.bio_done(o, now);
        }
        self.woken = woken;
        if let Some((g, bb)) = self.stack.guest.as_mut() {
            if let Backend::Virtio(ring) = g.backend_mut() {
                bb.notify(now, ring);
            }
        }
        self.blkback_on_cpu(now);
        if let Some(xc) = self.xcpu.as_mut() {
            xc.block_idle();
        }
    }

    /// Runs the continuations of the CPU work that ended by `now`.
    fn cpu_continuations(&mut self, now: Nanos) {
        let Some(xc) = self.xcpu.as_mut() else {
            return;
        };
        let done = xc.advance_to(now).to_vec();
        for (_, then) in done {
            match then {
                Then::BlkbackStep => {
                    if let Some((_, bb)) = self.stack.guest.as_mut() {
                        bb.next_at = Some(now);
                    }
                }
                Then::Respond(token) => {
                    if let Some((g, _)) = self.stack.guest.as_mut() {
                        if let Backend::Virtio(ring) = g.backend_mut() {
                            ring.complete(token, now + xen::EVTCHN_NOTIFY_NS);
                        }
                    }
                }
                Then::Complete(i) => {
                    self.op_done(i, now);
                    if let Some(xc) = self.xcpu.as_mut() {
                        xc.run(Who::Thread(i), THREAD_OVERHEAD_NS, Then::Issue(i));
                    }
                }
                Then::Issue(i) => self.issue(i, now),
            }
        }
    }

    /// On the CPU model, blkback's planned delay (its wake-up and the
    /// grant mapping of the head request) is CPU work of Dom0's blkback.
    fn blkback_on_cpu(&mut self, now: Nanos) {
        let (Some(xc), Some((_, bb))) = (self.xcpu.as_mut(), self.stack.guest.as_mut()) else {
            return;
        };
        if let Some(at) = bb.next_at.filter(|&at| at != ON_CPU && at > now) {
            bb.next_at = Some(ON_CPU);
            xc.run(Who::Blkback, at - now, Then::BlkbackStep);
        }
    }

    /// Thread `i` issues its next operation at `now`.
    fn issue(&mut self, i: usize, now: Nanos) {
        let bs = self.p.block_bytes();
        let read = match self.p.read_pct() {
            100 => true,
            0 => false,
            pct => self.rng.below(100) < u64::from(pct),
        };
        let offset = if self.p.profile.is_sequential() {
            let t = &mut self.threads[i];
            let o = t.file * FILE_BYTES + t.offset;
            t.offset = (t.offset + bs) % (FILE_BYTES - FILE_BYTES % bs);
            o
        } else {
            let file = self.rng.below(FILES);
            let block = self.rng.below(FILE_BYTES / bs);
            file * FILE_BYTES + block * bs
        };
        let max = if self.stack.guest.is_some() {
            xen::MAX_REQUEST_SECTORS
        } else {
            NATIVE_MAX_BIO_SECTORS
        };
        let total = (bs / 512) as u32;
        let t = &mut self.threads[i];
        t.issue_at = None;
        t.started = now;
        t.pending = total.div_ceil(max);
        let pid = i as u32 + 1;
        let mut done = 0;
        while done < total {
            let n = (total - done).min(max);
            let sector = offset / 512 + u64::from(done);
            let bio = Bio {
                sector,
                sectors: n,
                dir: if read {
                    Direction::Read
                } else {
                    Direction::Write
                },
                sync: true,
                ioc: ioc(pid),
                owner: BioOwner {
                    pid,
                    token: i as u64,
                },
            };
            match self.stack.guest.as_mut() {
                Some((g, _)) => g.submit(now, bio),
                None => self.stack.host.submit(
                    now,
                    Bio {
                        sector: DATA_START_SECTOR + sector,
                        ..bio
                    },
                ),
            }
            done += n;
        }
    }

    fn bio_done(&mut self, o: BioOwner, now: Nanos) {
        let i = o.token as usize;
        let t = &mut self.threads[i];
        t.pending = t.pending.saturating_sub(1);
        if t.pending > 0 {
            return;
        }
        if let Some(xc) = self.xcpu.as_mut() {
            // blkfront's interrupt handler on the DomU's vCPU takes it.
            xc.run(Who::Thread(i), xen::BLKFRONT_IRQ_NS, Then::Complete(i));
            return;
        }
        t.issue_at = Some(now + THREAD_OVERHEAD_NS);
        self.op_done(i, now);
    }

    /// Thread `i`'s operation is done at `now`: it counts.
    fn op_done(&mut self, i: usize, now: Nanos) {
        let t = &self.threads[i];
        if now < WARMUP_NS || now >= self.end {
            return;
        }
        let s = ((now - WARMUP_NS) / self.sample_ns) as usize;
        if let (Some(ops), Some(bytes)) = (self.counts.ops.get_mut(s), self.counts.bytes.get_mut(s))
        {
            *ops += 1;
            *bytes += self.p.block_bytes();
        }
        self.counts
            .latencies_ms
            .push((now - t.started) as f64 / 1e6);
    }

    fn result(&mut self, cell: &Cell, p: &ProfileCell) -> RunResult {
        let secs = cell.sample_s;
        let values = if p.profile.is_sequential() {
            self.counts
                .bytes
                .iter()
                .map(|b| *b as f64 / 1e6 / secs)
                .collect()
        } else {
            self.counts.ops.iter().map(|o| *o as f64 / secs).collect()
        };
        let pct = experiment::percentiles(&self.counts.latencies_ms);
        let spin = self.xcpu.as_mut().and_then(XenCpu::spinner_share);
        let mut r = RunResult {
            values,
            ..RunResult::default()
        };
        r.counters.insert(IO_LATENCY_P50_MS.into(), pct.median);
        r.counters.insert(IO_LATENCY_P99_MS.into(), pct.p99);
        if let Some(share) = spin {
            r.counters
                .insert(crate::xen_cpu::SPIN_DOMU_CPU_SHARE.into(), share);
        }
        r
    }
}

/// The Dom0 sector of a guest sector: the guest's disk is a partition
/// (`phy:` backend) starting at [`DATA_START_SECTOR`].
fn xen_host_sector(guest_sector: u64) -> u64 {
    DATA_START_SECTOR + guest_sector
}

fn ioc(pid: u32) -> IoContext {
    IoContext {
        pid,
        prio: IoPrio::DEFAULT,
        cgroup: 0,
    }
}
