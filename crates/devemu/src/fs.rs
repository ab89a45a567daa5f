//! The FUSE filesystem: a root directory holding one file, `image`, whose
//! bytes are those of the backing file. Reads and writes go to the backing file
//! at once and are answered when the timing engine says the emulated device
//! would have completed them.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::time::{Duration, SystemTime};

use devmodel::{Direction, IoRequest, SECTOR_BYTES};
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
};
use nix::fcntl::{fallocate, posix_fadvise, FallocateFlags, PosixFadviseAdvice};

use crate::engine::{Calibration, Engine, Job, Timing};
use std::sync::{Arc, Mutex};

/// Name of the one file in the filesystem.
pub const IMAGE_NAME: &str = "image";

const ROOT_INO: u64 = fuser::FUSE_ROOT_ID;
const IMAGE_INO: u64 = 2;
/// Attributes never change behind the kernel's back: cache them for long.
const TTL: Duration = Duration::from_secs(3600);

/// The filesystem.
pub struct ImageFs {
    backing: File,
    size: u64,
    /// None: the zero-cost mode (answer at once, no model).
    engine: Option<Engine>,
    calibration: Arc<Calibration>,
    /// Read buffers for reuse: a fresh large buffer per request would cost a
    /// mapping and page faults each time.
    pool: Arc<Mutex<Vec<Vec<u8>>>>,
    created: SystemTime,
}

impl ImageFs {
    /// A filesystem over `backing` (of `size` bytes), timed by `engine`.
    pub fn new(
        backing: File,
        size: u64,
        engine: Option<Engine>,
        calibration: Arc<Calibration>,
    ) -> ImageFs {
        // No read-ahead on the backing file. The loop device above already
        // asks for exactly what the model times, so read-ahead here only
        // fills memory; worse, on a fresh sparse backing file its batches of
        // zeroed pages stalled a request now and then for up to 30 ms
        // (measured on this machine, first-touch 128 KiB reads: mean 389 us,
        // 99th percentile 24 ms with read-ahead; 50 us and 220 us without),
        // far longer than a fast preset's service time.
        // A hint: a kernel that ignores it only costs the stalls above.
        let _ = posix_fadvise(
            backing.as_raw_fd(),
            0,
            0,
            PosixFadviseAdvice::POSIX_FADV_RANDOM,
        );
        ImageFs {
            backing,
            size,
            engine,
            calibration,
            pool: Arc::new(Mutex::new(Vec::new())),
            created: SystemTime::now(),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT_INO => (FileType::Directory, 0o755, 0, 2),
            IMAGE_INO => (FileType::RegularFile, 0o600, self.size, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Hand a request to the engine (or complete it at once in zero-cost mode).
    fn timed(
        &self,
        arrival: u64,
        offset: u64,
        len: u64,
        dir: Direction,
        done: Box<dyn FnOnce() + Send>,
    ) {
        let engine = match &self.engine {
            Some(e) => e,
            // Zero-cost mode: answer at once.
            None => return done(),
        };
        let first = offset / SECTOR_BYTES;
        let last = (offset + len.max(1)).div_ceil(SECTOR_BYTES);
        let req = IoRequest {
            sector: first,
            sectors: (last - first).min(u32::MAX as u64) as u32,
            dir,
        };
        let (arrival, fixed_ns) = match self.calibration.timing(len) {
            Timing::Immediate => return done(),
            Timing::Calibrating { delay_ns } => (arrival, Some(delay_ns)),
            // The kernel's own path (application -> loop -> FUSE -> engine
            // thread and back) takes time the real device would not add:
            // start the request on the model that much earlier, so that the
            // application sees the modelled latency.
            Timing::Model { overhead_ns } => (arrival.saturating_sub(overhead_ns), None),
        };
        engine.submit(Job {
            arrival,
            req,
            done,
            fixed_ns,
        });
    }

    fn clock(&self) -> u64 {
        self.engine.as_ref().map_or(0, Engine::now)
    }
}

impl Filesystem for ImageFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // Direct I/O from the loop device is submitted asynchronously, so that a
        // device with internal parallelism sees several requests at once.
        let _ = config.add_capabilities(fuser::consts::FUSE_ASYNC_DIO);
        let _ = config.set_max_background(256);
        let _ = config.set_congestion_threshold(192);
        // Requests up to 1 MiB (the kernel caps max_pages at 256).
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT_INO && name == IMAGE_NAME {
            let attr = self.attr(IMAGE_INO).expect("image attributes");
            reply.entry(&TTL, &attr, 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == IMAGE_INO {
            reply.opened(0, 0);
        } else {
            reply.error(libc::EISDIR);
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let arrival = self.clock();
        if ino != IMAGE_INO || offset < 0 {
            reply.error(libc::EINVAL);
            return;
        }
        let offset = offset as u64;
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let mut buf = self
            .pool
            .lock()
            .map(|mut p| p.pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        buf.resize(len, 0);
        let mut got = 0;
        while got < len {
            match self.backing.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break, // past the backing file's end: zeros
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    reply.error(e.raw_os_error().unwrap_or(libc::EIO));
                    return;
                }
            }
        }
        if len == 0 {
            reply.data(&[]);
            return;
        }
        let pool = self.pool.clone();
        self.timed(
            arrival,
            offset,
            len as u64,
            Direction::Read,
            Box::new(move || {
                reply.data(&buf);
                if let Ok(mut p) = pool.lock() {
                    if p.len() < 256 {
                        p.push(buf);
                    }
                }
            }),
        );
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let arrival = self.clock();
        if ino != IMAGE_INO || offset < 0 {
            reply.error(libc::EINVAL);
            return;
        }
        let offset = offset as u64;
        if offset + data.len() as u64 > self.size {
            // The emulated device has a fixed size.
            reply.error(libc::ENOSPC);
            return;
        }
        if let Err(e) = self.backing.write_all_at(data, offset) {
            reply.error(e.raw_os_error().unwrap_or(libc::EIO));
            return;
        }
        let n = data.len() as u32;
        self.timed(
            arrival,
            offset,
            n as u64,
            Direction::Write,
            Box::new(move || reply.written(n)),
        );
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The models write through (no volatile write cache): a flush costs
        // nothing. The backing file is not synced: the emulated device's
        // contents need not survive a crash of the host.
        reply.ok();
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Discard (the loop device punches holes): pass it to the backing
        // file, which stays sparse. Free of device time.
        if ino != IMAGE_INO {
            reply.error(libc::EINVAL);
            return;
        }
        // The kernel's flags pass through unchanged (punch hole, keep size).
        let mode = FallocateFlags::from_bits_retain(mode);
        match fallocate(self.backing.as_raw_fd(), mode, offset, length) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e as i32),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT_INO {
            reply.error(libc::ENOTDIR);
            return;
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (IMAGE_INO, FileType::RegularFile, IMAGE_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let blocks = self.size / 4096;
        reply.statfs(blocks, 0, 0, 2, 0, 4096, 255, 4096);
    }
}
