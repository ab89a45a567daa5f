//! The QEMU part: for each VM, the drain of its virtqueue, its thread pool
//! (`aio=threads`) or iothread (`aio=native`/`io_uring`), the requests
//! waiting for a thread, and the guest requests being performed on the
//! image file (see [`crate::vm`] for the model). It owns the kicks (QEMU
//! drains a virtqueue after the guest's notification) and the completion
//! of requests that needed no disk I/O.
//!
//! In `vhost-ioprio` a VM's disk is served by a vhost-user-blk backend
//! (`tandem vhost-blk`) instead: one thread per virtqueue takes the
//! requests, always `O_DIRECT` (as `aio=native`), and each request is
//! issued from the submitter thread of the host ioprio its header maps to
//! (host BFQ takes the class from the issuing task's I/O context).

use super::kernel::{FileRange, Kernel, KernelId, Submitter, HOST};
use super::readahead::ReadaheadState;
use super::{Ev, Machine, Role};
use crate::fs::{FileId, PAGE};
use crate::request::{BioOwner, CgroupId, IoPrio, IoPrioClass, Pid};
use crate::virtio::VirtioReq;
use crate::vm::{
    Aio, VmConfig, COPY_NS_PER_BYTE, IRQ_INJECT_NS, THREAD_POOL_IDLE_NS, THREAD_POOL_MAX,
    VIRTQUEUE_NOTIFY_NS, WORKER_HANDOFF_NS,
};
use devmodel::{Direction, IoRequest, Nanos};
use std::collections::VecDeque;

/// The QEMU part's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum QemuEv {
    /// QEMU drains VM `vm`'s virtqueue after the guest's notification.
    Kick(usize),
    /// A request that needed no disk I/O (page-cache hit, buffered write,
    /// holes of the image) is done copying.
    JobDone(usize),
    /// On a CPU model: the QEMU thread has popped request `.0` off the
    /// virtqueue and submits it.
    Issue(usize),
    /// On a CPU model: the QEMU thread has reaped request `.0`; it fills
    /// the used ring and interrupts the guest.
    Finish(usize),
}

/// What the host saw of a VM's QEMU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QemuStats {
    /// Threads created so far (pool workers or the iothread).
    pub threads_created: usize,
    /// Threads alive now.
    pub threads_alive: usize,
    /// Weight-raising periods the host's elevator gave those threads:
    /// (interactive, soft real-time).
    pub host_raisings: (u32, u32),
}

/// One VM's QEMU: its guest kernel, its image file on the host, and the
/// requests taken from the virtqueue that wait for a thread.
struct Vm {
    guest: KernelId,
    image: FileId,
    aio: Aio,
    /// Host cgroup of the VM's QEMU threads.
    cgroup: CgroupId,
    kick_scheduled: bool,
    waiting: VecDeque<VirtioReq>,
    /// Idle pool workers, longest idle first: the pool's semaphore wakes
    /// its waiters in FIFO order (futex wake-ups are FIFO among waiters of
    /// one priority).
    idle_workers: VecDeque<Pid>,
    workers: usize,
    /// The host's readahead on the image file (buffered reads only).
    image_ra: ReadaheadState,
    iothread: Option<Pid>,
    /// `vhost-ioprio`: the backend's submitter threads besides the iothread
    /// (which submits the default ioprio), one per host ioprio in use.
    submitters: Vec<(IoPrio, Pid)>,
    /// Every QEMU thread the VM ever had.
    threads: Vec<Pid>,
}

/// A guest request being performed by QEMU.
struct Job {
    vm: usize,
    tag: u64,
    /// The guest's request, in guest sectors (= sectors of the image).
    req: IoRequest,
    /// Host bios not yet completed.
    pending: u32,
    /// The QEMU thread performing it.
    thread: Pid,
    /// The ioprio of its virtio-blk header.
    ioprio: IoPrio,
    /// `vhost-ioprio`: the backend issued it as RT (its budget counts it).
    host_rt: bool,
}

/// Every VM's QEMU, and the guest requests in progress.
#[derive(Default)]
pub(super) struct Qemu {
    vms: Vec<Vm>,
    jobs: Vec<Option<Job>>,
    free_jobs: Vec<usize>,
}

impl Qemu {
    /// How many VMs there are.
    pub(super) fn len(&self) -> usize {
        self.vms.len()
    }

    pub(super) fn guest_of(&self, vm: usize) -> KernelId {
        self.vms[vm].guest
    }

    /// The image file of the VM whose guest is kernel `k`, if any.
    pub(super) fn image_of_guest(&self, k: KernelId) -> Option<FileId> {
        self.vms.iter().find(|v| v.guest == k).map(|v| v.image)
    }

    fn new_job(&mut self, job: Job) -> usize {
        match self.free_jobs.pop() {
            Some(i) => {
                self.jobs[i] = Some(job);
                i
            }
            None => {
                self.jobs.push(Some(job));
                self.jobs.len() - 1
            }
        }
    }

    fn job(&self, job: usize) -> &Job {
        self.jobs[job].as_ref().expect("live job")
    }

    fn job_mut(&mut self, job: usize) -> &mut Job {
        self.jobs[job].as_mut().expect("live job")
    }
}

impl Machine {
    /// Adds a virtual machine: its image file is placed on the host at
    /// `image_path`, its guest kernel gets the elevator and tunables of
    /// `cfg`. Returns the guest kernel and the VM's index.
    pub fn add_vm(
        &mut self,
        cfg: &VmConfig,
        image_path: &str,
    ) -> Result<(KernelId, usize), String> {
        let guest = Kernel::guest(cfg, self.now())?;
        let k = self.kernels.len();
        self.cpu.add_guest(k)?;
        self.kernels.push(guest);
        let image = self.kernels[HOST].add_sparse_file(image_path, cfg.image_bytes);
        let vm = self.qemu.vms.len();
        // The vhost-user-blk backend always does direct I/O from a thread
        // of its own, whatever QEMU's `aio` would have been.
        let aio = if self.coord.marks_requests() {
            Aio::IoThread
        } else {
            cfg.aio
        };
        self.qemu.vms.push(Vm {
            guest: k,
            image,
            aio,
            cgroup: 0,
            kick_scheduled: false,
            waiting: VecDeque::new(),
            idle_workers: VecDeque::new(),
            workers: 0,
            image_ra: ReadaheadState::default(),
            iothread: None,
            submitters: Vec::new(),
            threads: Vec::new(),
        });
        self.coord.add_vm(vm);
        if aio == Aio::IoThread {
            let role = Role::QemuIoThread { vm };
            let pid = self.procs.spawn(HOST, role, IoPrio::DEFAULT, 0);
            self.qemu.vms[vm].iothread = Some(pid);
            self.qemu.vms[vm].threads.push(pid);
            self.actuate_thread(vm, pid);
        } else {
            // Write-back of the image's dirty pages.
            self.ensure_flusher(HOST);
        }
        Ok((k, vm))
    }

    /// Bytes VM `vm`'s image takes on the host.
    pub fn image_allocated_bytes(&self, vm: usize) -> u64 {
        self.kernels[HOST]
            .layout
            .allocated_bytes(self.qemu.vms[vm].image)
    }

    /// VM `vm`'s live QEMU threads (pool workers or the iothread).
    pub fn qemu_threads(&self, vm: usize) -> Vec<Pid> {
        self.qemu.vms[vm]
            .threads
            .iter()
            .copied()
            .filter(|&p| !self.procs.is_gone(p))
            .collect()
    }

    /// What the host saw of VM `vm`'s QEMU threads.
    pub fn qemu_stats(&self, vm: usize) -> QemuStats {
        let v = &self.qemu.vms[vm];
        let sched = self.kernels[HOST].block.scheduler();
        let host_raisings = v.threads.iter().fold((0, 0), |acc, &pid| {
            let (i, s) = sched.as_bfq().map_or((0, 0), |b| b.raisings(pid));
            (acc.0 + i, acc.1 + s)
        });
        QemuStats {
            threads_created: v.threads.len(),
            threads_alive: v.workers + v.iothread.is_some() as usize + v.submitters.len(),
            host_raisings,
        }
    }

    /// The QEMU part's events.
    pub(super) fn on_qemu(&mut self, ev: QemuEv) {
        match ev {
            QemuEv::Kick(vm) => {
                self.qemu.vms[vm].kick_scheduled = false;
                let guest = self.qemu.vms[vm].guest;
                if let Some(vq) = self.kernels[guest].virtqueue_mut() {
                    let reqs = vq.take_avail();
                    self.qemu.vms[vm].waiting.extend(reqs);
                }
                self.qemu_dispatch(vm);
            }
            QemuEv::JobDone(job) => self.finish_job(job),
            QemuEv::Issue(job) => self.issue_job(job),
            QemuEv::Finish(job) => self.finish_job_now(job),
        }
    }

    /// Schedules a kick for each guest that added requests to its
    /// virtqueue.
    pub(super) fn schedule_kicks(&mut self) {
        let now = self.q.now();
        for (i, vm) in self.qemu.vms.iter_mut().enumerate() {
            if vm.kick_scheduled {
                continue;
            }
            if self.kernels[vm.guest]
                .virtqueue()
                .is_some_and(|vq| vq.has_avail())
            {
                vm.kick_scheduled = true;
                self.q
                    .push(now + VIRTQUEUE_NOTIFY_NS, Ev::Qemu(QemuEv::Kick(i)));
            }
        }
    }

    /// A pool worker's timer: it performs the request it was handed, or,
    /// idle for the pool's timeout, exits.
    pub(super) fn qemu_worker_step(&mut self, pid: Pid, vm: usize, job: Option<usize>) {
        match job {
            Some(job) => self.issue_job(job),
            None => {
                let v = &mut self.qemu.vms[vm];
                v.idle_workers.retain(|&w| w != pid);
                v.workers -= 1;
                *self.procs.role_mut(pid) = Role::Gone;
            }
        }
    }

    /// One of the host bios of a QEMU thread's request completed.
    pub(super) fn qemu_io_done(&mut self, owner: BioOwner) {
        let job = owner.token as usize;
        let j = self.qemu.job_mut(job);
        j.pending -= 1;
        if j.pending == 0 {
            self.finish_job(job);
        }
    }

    /// Hands the VM's waiting requests to QEMU threads: to idle pool
    /// workers, or new ones up to the pool's limit (`thread_pool_submit_aio()`
    /// spawns a worker when none is idle); or all to the iothread.
    fn qemu_dispatch(&mut self, vm: usize) {
        loop {
            let v = &mut self.qemu.vms[vm];
            let Some(&VirtioReq { tag, req, ioprio }) = v.waiting.front() else {
                return;
            };
            let thread = match v.aio {
                Aio::IoThread => v.iothread.expect("iothread"),
                Aio::Threads => match self.pool_thread(vm) {
                    Some(pid) => pid,
                    None => return,
                },
            };
            self.qemu.vms[vm].waiting.pop_front();
            let job = self.qemu.new_job(Job {
                vm,
                tag,
                req,
                pending: 0,
                thread,
                ioprio,
                host_rt: false,
            });
            // On a CPU model, the thread pops the request and submits it
            // ([`cpusched::iocost::QEMU_SUBMIT_NS`]: the main loop's and the
            // worker's activations, which this machine runs on one
            // thread; and a system call); a pool worker's hand-off is its
            // wake-up on the model.
            let cost = cpusched::iocost::QEMU_SUBMIT_NS + cpusched::iocost::SYSCALL_NS;
            match self.qemu.vms[vm].aio {
                Aio::IoThread if self.cpu.io_costs() => {
                    self.cpu_then(thread, cost, Ev::Qemu(QemuEv::Issue(job)));
                }
                Aio::IoThread => self.issue_job(job),
                Aio::Threads => {
                    if let Role::QemuWorker { job: j, .. } = self.procs.role_mut(thread) {
                        *j = Some(job);
                    }
                    if self.cpu.io_costs() {
                        self.run_cpu(thread, cost);
                    } else {
                        self.wake_in(thread, WORKER_HANDOFF_NS);
                    }
                }
            }
        }
    }

    /// An idle pool worker of VM `vm`, or a new one if the pool has room.
    fn pool_thread(&mut self, vm: usize) -> Option<Pid> {
        let v = &mut self.qemu.vms[vm];
        if let Some(w) = v.idle_workers.pop_front() {
            return Some(w);
        }
        if v.workers >= THREAD_POOL_MAX {
            return None;
        }
        v.workers += 1;
        let cg = v.cgroup;
        let role = Role::QemuWorker { vm, job: None };
        let pid = self.procs.spawn(HOST, role, IoPrio::DEFAULT, cg);
        self.qemu.vms[vm].threads.push(pid);
        // A new worker of a helped VM is helped too.
        self.actuate_thread(vm, pid);
        Some(pid)
    }

    /// The `vhost-ioprio` backend's submitter thread for host ioprio
    /// `prio`: the iothread for the default, otherwise a thread made with
    /// that ioprio the first time it is needed.
    fn vhost_submitter(&mut self, vm: usize, prio: IoPrio) -> Pid {
        let v = &self.qemu.vms[vm];
        if prio == IoPrio::DEFAULT {
            return v.iothread.expect("iothread");
        }
        if let Some(&(_, pid)) = v.submitters.iter().find(|s| s.0 == prio) {
            return pid;
        }
        let cg = v.cgroup;
        let pid = self.procs.spawn(HOST, Role::QemuIoThread { vm }, prio, cg);
        let v = &mut self.qemu.vms[vm];
        v.submitters.push((prio, pid));
        v.threads.push(pid);
        pid
    }

    /// A QEMU thread performs a guest request on the image file.
    fn issue_job(&mut self, job: usize) {
        let (vm, req, mut thread) = {
            let j = self.qemu.job(job);
            (j.vm, j.req, j.thread)
        };
        if self.coord.marks_requests() {
            let header = self.qemu.job(job).ioprio;
            let host = self.vhost_map(vm, header);
            thread = self.vhost_submitter(vm, host);
            let j = self.qemu.job_mut(job);
            j.thread = thread;
            j.host_rt = host.class == IoPrioClass::Rt;
        }
        let image = self.qemu.vms[vm].image;
        if self.qemu.vms[vm].aio == Aio::IoThread {
            // O_DIRECT: the request itself goes to the host's block layer,
            // one bio per contiguous piece of the image. Direct I/O is
            // REQ_SYNC in both directions (`dio_bio_write_op()`).
            let by = Submitter {
                pid: thread,
                sync: true,
                token: job as u64,
            };
            let range = FileRange {
                file: image,
                first: req.sector,
                sectors: req.sectors as u64,
            };
            let bios = self.submit_file_range(by, range, req.dir);
            self.qemu.job_mut(job).pending = bios;
            if bios == 0 {
                // All in holes of the image: zeros, no host I/O.
                let now = self.now();
                self.q.push(now, Ev::Qemu(QemuEv::JobDone(job)));
            }
            return;
        }
        self.issue_buffered_job(job, vm, req, thread);
    }

    /// A request through the host page cache of the image file.
    fn issue_buffered_job(&mut self, job: usize, vm: usize, req: IoRequest, thread: Pid) {
        let image = self.qemu.vms[vm].image;
        let first = req.sector * 512 / PAGE;
        let last = (req.sector * 512 + req.sectors as u64 * 512).div_ceil(PAGE);
        let bytes = req.sectors as u64 * 512;
        let copy = if self.cpu.io_costs() {
            // The measured copy, scaled by the platform's speed.
            bytes * cpusched::iocost::COPY_PS_PER_BYTE / 1000
        } else {
            (bytes as f64 * COPY_NS_PER_BYTE) as Nanos
        };
        let done = Ev::Qemu(QemuEv::JobDone(job));
        match req.dir {
            Direction::Read => {
                let host = &self.kernels[HOST];
                if host.pages().missing(image, first, last).is_empty() {
                    self.cpu_then(thread, copy, done);
                    return;
                }
                // A miss reads ahead in the image, as the host kernel does
                // for any buffered reader; the pages beyond the request go
                // in the same bios, and the request waits for them all.
                let image_pages = host.layout.file(image).size.div_ceil(PAGE);
                let window = self.qemu.vms[vm].image_ra.window(first, last);
                let ra_last = (first + window).min(image_pages).max(last);
                let holes = self.kernels[HOST].pages().missing(image, first, ra_last);
                let mut bios = 0;
                for (s, e) in holes {
                    self.kernels[HOST].pages_mut().insert(image, s, e);
                    bios += self.submit_pages(thread, image, s, e, job as u64);
                }
                self.qemu.job_mut(job).pending = bios;
                if bios == 0 {
                    self.cpu_then(thread, copy, done);
                }
            }
            Direction::Write => {
                self.dirty_pages_of(HOST, image, first, last);
                self.cpu_then(thread, copy, done);
            }
        }
    }

    /// QEMU finished a guest request: it fills the used ring and interrupts
    /// the guest; a pool worker then takes the next waiting request or
    /// idles.
    fn finish_job(&mut self, job: usize) {
        if self.cpu.io_costs() {
            // QEMU reaps the request first
            // ([`cpusched::iocost::QEMU_COMPLETE_NS`]).
            let thread = self.qemu.job(job).thread;
            let cost = cpusched::iocost::QEMU_COMPLETE_NS + cpusched::iocost::SYSCALL_NS;
            self.cpu_then(thread, cost, Ev::Qemu(QemuEv::Finish(job)));
            return;
        }
        self.finish_job_now(job);
    }

    /// [`Self::finish_job`] once QEMU has reaped the request.
    fn finish_job_now(&mut self, job: usize) {
        let now = self.now();
        let j = self.qemu.jobs[job].take().expect("live job");
        self.qemu.free_jobs.push(job);
        if j.host_rt {
            self.vhost_rt_done(j.vm);
        }
        let guest = self.qemu.vms[j.vm].guest;
        if let Some(vq) = self.kernels[guest].virtqueue_mut() {
            vq.complete(j.tag, now + IRQ_INJECT_NS);
        }
        if let Role::QemuWorker { job: current, .. } = self.procs.role_mut(j.thread) {
            *current = None;
            // A worker back from a request finds the semaphore already
            // posted when requests wait, and takes one without sleeping;
            // otherwise it sleeps behind the workers already waiting.
            let v = &mut self.qemu.vms[j.vm];
            if v.waiting.is_empty() {
                v.idle_workers.push_back(j.thread);
            } else {
                v.idle_workers.push_front(j.thread);
            }
            self.wake_in(j.thread, THREAD_POOL_IDLE_NS);
            self.qemu_dispatch(j.vm);
        }
    }
}
