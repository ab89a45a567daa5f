//! The processes part: the process table (each process's kernel, I/O
//! context, role, RNG and timer), and what the background readers and
//! writers and the applications being started do. It owns the processes'
//! timers ([`ProcEv`]), and routes each completed bio to the part its
//! issuer belongs to: write-back for the flusher, QEMU for its threads.

use super::kernel::{KernelId, Submitter};
use super::readahead::READAHEAD_BYTES;
use super::{Ev, Machine};
use crate::engine::{EventQueue, Rng};
use crate::fs::{FileId, PAGE, PAGE_SECTORS};
use crate::iosched::SEC;
use crate::request::{BioOwner, CgroupId, IoContext, IoPrio, Pid};
use crate::workload::AppTrace;
use devmodel::{Direction, Nanos};
use std::sync::Arc;

/// Time from a readahead window arriving to the next window's submission.
/// The reader's `read()` wakes up, touches the `PG_readahead` marker page
/// at the start of the window it waited for, and async readahead submits
/// the next window right away, before the data is copied to user space:
/// a page-cache lookup and a bio submission, a couple of microseconds.
const READER_CPU_NS: Nanos = 2_000;
/// CPU time of a random reader between reads (one 4 KiB pread).
const RAND_READER_CPU_NS: Nanos = 5_000;
/// Write size of sequential writers (64 KiB `write()` calls).
const WRITER_CHUNK: u64 = 64 << 10;

/// The processes part's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum ProcEv {
    /// A process's own timer (think time, rate cap), with its generation:
    /// a later wake-up or a kill makes it stale.
    Wake(Pid, u64),
}

/// What a process is.
#[derive(Clone)]
pub enum Role {
    /// Buffered sequential reader of one file.
    SeqReader { file: FileId, pos: u64 },
    /// 4 KiB random reader of one file.
    RandReader { file: FileId },
    /// Buffered writer of one file, sequential or random, at most `rate`
    /// bytes per second (0 = no cap).
    Writer {
        file: FileId,
        pos: u64,
        random: bool,
        rate: f64,
        blocked: bool,
    },
    /// The write-back flusher thread (its progress is the page cache's).
    Flusher,
    /// An application being started: a replayed start-up trace.
    App(AppRun),
    /// A worker of a VM's QEMU thread pool (`aio=threads`), on the host,
    /// with the request it is performing.
    QemuWorker { vm: usize, job: Option<usize> },
    /// A VM's QEMU iothread (`aio=native`/`io_uring`), on the host, or a
    /// submitter thread of its vhost-user-blk backend (`vhost-ioprio`).
    QemuIoThread { vm: usize },
    /// Finished or stopped.
    Gone,
}

/// State of one application start.
#[derive(Clone)]
pub struct AppRun {
    pub trace: Arc<AppTrace>,
    pub files: Vec<FileId>,
    pub next: usize,
    pub pending: u32,
    pub started: Nanos,
    pub finished: Option<Nanos>,
}

struct Proc {
    kernel: KernelId,
    ioc: IoContext,
    role: Role,
    rng: Rng,
    /// Generation of the process's timer: only the latest wake-up counts.
    gen: u64,
}

/// The process table.
pub(super) struct Procs {
    table: Vec<Proc>,
    /// Forked into each new process's own RNG.
    rng: Rng,
}

impl Procs {
    pub(super) fn new(seed: u64) -> Procs {
        Procs {
            table: Vec::new(),
            rng: Rng::new(seed),
        }
    }

    /// A new process of kernel `kernel`; it does nothing until woken.
    pub(super) fn spawn(
        &mut self,
        kernel: KernelId,
        role: Role,
        prio: IoPrio,
        cgroup: CgroupId,
    ) -> Pid {
        let pid = self.table.len() as Pid;
        let rng = self.rng.fork();
        self.table.push(Proc {
            kernel,
            ioc: IoContext { pid, prio, cgroup },
            role,
            rng,
            gen: 0,
        });
        pid
    }

    pub(super) fn kernel_of(&self, pid: Pid) -> KernelId {
        self.table[pid as usize].kernel
    }

    pub(super) fn ioc(&self, pid: Pid) -> IoContext {
        self.table[pid as usize].ioc
    }

    /// Sets the ioprio the process issues its next I/O with.
    pub(super) fn set_prio(&mut self, pid: Pid, prio: IoPrio) {
        self.table[pid as usize].ioc.prio = prio;
    }

    pub(super) fn role(&self, pid: Pid) -> &Role {
        &self.table[pid as usize].role
    }

    pub(super) fn role_mut(&mut self, pid: Pid) -> &mut Role {
        &mut self.table[pid as usize].role
    }

    pub(super) fn is_gone(&self, pid: Pid) -> bool {
        matches!(self.role(pid), Role::Gone)
    }

    /// The process issues nothing more; its pending timer is void.
    fn kill(&mut self, pid: Pid) {
        let p = &mut self.table[pid as usize];
        p.role = Role::Gone;
        p.gen += 1;
    }

    /// Wakes process `pid` after `delay`; an earlier pending wake-up is
    /// void.
    pub(super) fn wake_in(&mut self, q: &mut EventQueue<Ev>, pid: Pid, delay: Nanos) {
        let p = &mut self.table[pid as usize];
        p.gen += 1;
        let at = q.now() + delay;
        q.push(at, Ev::Proc(ProcEv::Wake(pid, p.gen)));
    }

    /// Voids process `pid`'s pending wake-up and returns the generation a
    /// new one must carry (a wake-up at the end of a CPU burst).
    pub(super) fn arm(&mut self, pid: Pid) -> u64 {
        let p = &mut self.table[pid as usize];
        p.gen += 1;
        p.gen
    }

    /// Lets kernel `k`'s throttled writers go; returns them in pid order.
    pub(super) fn unblock_writers(&mut self, k: KernelId) -> Vec<Pid> {
        let mut woken = Vec::new();
        for (i, p) in self.table.iter_mut().enumerate() {
            if p.kernel != k {
                continue;
            }
            if let Role::Writer { blocked, .. } = &mut p.role {
                if *blocked {
                    *blocked = false;
                    woken.push(i as Pid);
                }
            }
        }
        woken
    }
}

impl Machine {
    /// Starts a buffered sequential reader of `file` in kernel `k` now.
    pub fn start_seq_reader(
        &mut self,
        k: KernelId,
        file: FileId,
        prio: IoPrio,
        cgroup: CgroupId,
    ) -> Pid {
        let pid = self
            .procs
            .spawn(k, Role::SeqReader { file, pos: 0 }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a 4 KiB random reader of `file` in kernel `k` now.
    pub fn start_rand_reader(
        &mut self,
        k: KernelId,
        file: FileId,
        prio: IoPrio,
        cgroup: CgroupId,
    ) -> Pid {
        let pid = self.procs.spawn(k, Role::RandReader { file }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a buffered writer of `file` in kernel `k`, capped at `rate`
    /// bytes/s (0: uncapped). Starts the kernel's flusher if needed.
    pub fn start_writer(
        &mut self,
        k: KernelId,
        file: FileId,
        random: bool,
        rate: f64,
        prio: IoPrio,
    ) -> Pid {
        self.ensure_flusher(k);
        let role = Role::Writer {
            file,
            pos: 0,
            random,
            rate,
            blocked: false,
        };
        let pid = self.procs.spawn(k, role, prio, 0);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts an application in kernel `k` now: `files` are the layout ids
    /// of the trace's files, in trace order.
    pub fn start_app(
        &mut self,
        k: KernelId,
        trace: Arc<AppTrace>,
        files: Vec<FileId>,
        prio: IoPrio,
    ) -> Pid {
        let now = self.now();
        let run = AppRun {
            trace,
            files,
            next: 0,
            pending: 0,
            started: now,
            finished: None,
        };
        let pid = self.procs.spawn(k, Role::App(run), prio, 0);
        let think = self.app_think(pid);
        self.run_cpu(pid, think);
        pid
    }

    /// When the application `pid` finished starting, if it has.
    pub fn app_finished(&self, pid: Pid) -> Option<Nanos> {
        match self.procs.role(pid) {
            Role::App(run) => run.finished,
            _ => None,
        }
    }

    /// Stops a process: it issues nothing more (its in-flight I/O still
    /// completes).
    pub fn kill(&mut self, pid: Pid) {
        self.procs.kill(pid);
    }

    /// The ioprio process `pid` issues its I/O with now.
    pub fn ioprio(&self, pid: Pid) -> IoPrio {
        self.procs.ioc(pid).prio
    }

    /// The live processes of kernel `k` whose ioprio is `prio`, in pid
    /// order (what `ionice -p` would show for each task there).
    pub fn pids_with_ioprio(&self, k: KernelId, prio: IoPrio) -> Vec<Pid> {
        (0..self.procs.table.len() as Pid)
            .filter(|&p| {
                self.procs.kernel_of(p) == k
                    && !self.procs.is_gone(p)
                    && self.procs.ioc(p).prio == prio
            })
            .collect()
    }

    pub(super) fn wake_in(&mut self, pid: Pid, delay: Nanos) {
        self.procs.wake_in(&mut self.q, pid, delay);
    }

    /// The processes part's events.
    pub(super) fn on_proc(&mut self, now: Nanos, ev: ProcEv) {
        match ev {
            ProcEv::Wake(pid, gen) => {
                let p = &self.procs.table[pid as usize];
                if p.gen == gen {
                    self.kernels[p.kernel].touch(now);
                    self.step(pid);
                }
            }
        }
    }

    /// A process's timer fired: it does its next piece of work.
    fn step(&mut self, pid: Pid) {
        match self.procs.role(pid) {
            &Role::SeqReader { file, pos } => self.seq_reader_step(pid, file, pos),
            &Role::RandReader { file } => self.rand_reader_step(pid, file),
            &Role::Writer {
                file,
                pos,
                random,
                rate,
                ..
            } => self.writer_step(pid, file, pos, random, rate),
            Role::App(_) => self.app_step(pid),
            &Role::QemuWorker { vm, job } => self.qemu_worker_step(pid, vm, job),
            Role::QemuIoThread { .. } | Role::Flusher | Role::Gone => {}
        }
    }

    /// One of `owner.pid`'s bios completed.
    pub(super) fn io_done(&mut self, owner: BioOwner) {
        let pid = owner.pid;
        match self.procs.role_mut(pid) {
            Role::SeqReader { .. } => {
                let cpu = READER_CPU_NS + self.read_cost(READAHEAD_BYTES);
                self.run_cpu(pid, cpu);
            }
            Role::RandReader { .. } => {
                let cpu = RAND_READER_CPU_NS + self.read_cost(PAGE);
                self.run_cpu(pid, cpu);
            }
            Role::Flusher => self.flusher_io_done(pid),
            Role::App(run) => {
                run.pending -= 1;
                if run.pending == 0 {
                    run.next += 1;
                    let think = self.app_think(pid);
                    self.run_cpu(pid, think);
                }
            }
            Role::QemuWorker { .. } | Role::QemuIoThread { .. } => self.qemu_io_done(owner),
            Role::Writer { .. } | Role::Gone => {}
        }
    }

    /// The sequential reader submits its next readahead window (one
    /// 128 KiB sync read, see [`READAHEAD_BYTES`]), wrapping around at the
    /// end of its file.
    fn seq_reader_step(&mut self, pid: Pid, file: FileId, pos: u64) {
        let k = self.procs.kernel_of(pid);
        let f = self.kernels[k].layout.file(file);
        let pos = if pos + READAHEAD_BYTES > f.size {
            0
        } else {
            pos
        };
        let sector = f.sector_of(pos);
        *self.procs.role_mut(pid) = Role::SeqReader {
            file,
            pos: pos + READAHEAD_BYTES,
        };
        let by = Submitter {
            pid,
            sync: true,
            token: 0,
        };
        self.submit(by, sector, (READAHEAD_BYTES / 512) as u32, Direction::Read);
    }

    /// The random reader reads one page at a random place of its file.
    fn rand_reader_step(&mut self, pid: Pid, file: FileId) {
        let k = self.procs.kernel_of(pid);
        let f = self.kernels[k].layout.file(file);
        let pages = (f.size / PAGE).max(1);
        let start = f.start_sector();
        let page = self.procs.table[pid as usize].rng.below(pages);
        let sector = start + page * PAGE_SECTORS;
        let by = Submitter {
            pid,
            sync: true,
            token: 0,
        };
        self.submit(by, sector, PAGE_SECTORS as u32, Direction::Read);
    }

    /// The writer dirties its next chunk (or a random page), then writes
    /// on unless the page cache throttles it.
    fn writer_step(&mut self, pid: Pid, file: FileId, pos: u64, random: bool, rate: f64) {
        let k = self.procs.kernel_of(pid);
        let size = self.kernels[k].layout.file(file).size;
        let (page, pages, next_pos) = if random {
            let pages = (size / PAGE).max(1);
            let page = self.procs.table[pid as usize].rng.below(pages);
            (page, 1, pos)
        } else {
            let pos = if pos + WRITER_CHUNK > size { 0 } else { pos };
            (pos / PAGE, WRITER_CHUNK / PAGE, pos + WRITER_CHUNK)
        };
        self.dirty_pages_of(k, file, page, page + pages);
        let blocked = self.kernels[k].pages().throttled();
        if let Role::Writer {
            pos: p, blocked: b, ..
        } = self.procs.role_mut(pid)
        {
            *p = next_pos;
            *b = blocked;
        }
        if !blocked {
            let bytes = pages * PAGE;
            // Copying into the page cache costs about 1 ns per byte of
            // CPU (the Cortex-A15's `memcpy`) without a CPU model, and
            // the system call and the measured copy on one; a rate cap
            // stretches the period.
            if rate > 0.0 {
                let delay = (bytes as f64 / rate * SEC as f64) as Nanos;
                self.wake_in(pid, delay.max(1));
            } else if self.cpu.io_costs() {
                let cpu = self.read_cost(bytes);
                self.run_cpu(pid, cpu);
            } else {
                self.run_cpu(pid, bytes.max(1));
            }
        }
    }

    /// Think time before the app's next read, or its final CPU time once
    /// all reads are done; with per-request CPU costs, the next read's
    /// system call and copy too.
    fn app_think(&self, pid: Pid) -> Nanos {
        match self.procs.role(pid) {
            Role::App(run) => match run.trace.reads.get(run.next) {
                Some(r) => r.think_ns + self.read_cost(r.len),
                None => run.trace.tail_ns,
            },
            _ => 0,
        }
    }

    /// CPU time (recorded machine's) of one `read` or `write` of `bytes`
    /// through the page cache: the system call and the copy; 0 without
    /// per-request CPU costs.
    pub(super) fn read_cost(&self, bytes: u64) -> Nanos {
        if !self.cpu.io_costs() {
            return 0;
        }
        cpusched::iocost::SYSCALL_NS + bytes * cpusched::iocost::COPY_PS_PER_BYTE / 1000
    }

    /// The application's next read: from the page cache if all of it is
    /// there, else it waits for the missing pages.
    fn app_step(&mut self, pid: Pid) {
        let now = self.now();
        let k = self.procs.kernel_of(pid);
        let (file, offset, len) = {
            let Role::App(run) = self.procs.role_mut(pid) else {
                return;
            };
            match run.trace.reads.get(run.next) {
                None => {
                    if run.finished.is_none() {
                        run.finished = Some(now);
                    }
                    return;
                }
                Some(r) => (run.files[r.file], r.offset, r.len),
            }
        };
        let first = offset / PAGE;
        let last = (offset + len).div_ceil(PAGE);
        let holes = self.kernels[k].pages().missing(file, first, last);
        if holes.is_empty() {
            // All in memory: go on after the next think time.
            if let Role::App(run) = self.procs.role_mut(pid) {
                run.next += 1;
            }
            let think = self.app_think(pid);
            self.run_cpu(pid, think);
            return;
        }
        let mut bios = 0;
        for (s, e) in holes {
            self.kernels[k].pages_mut().insert(file, s, e);
            bios += self.submit_pages(pid, file, s, e, 0);
        }
        if let Role::App(run) = self.procs.role_mut(pid) {
            run.pending += bios;
        }
    }
}
