//! What runs inside a guest to test and measure a disk (`tandem vm
//! disk-io`, the guest image's `/bin/tandem`): a checksummed block pattern
//! written with `O_DIRECT`, each block reported once the device has
//! acknowledged it, and verified later; and a direct-I/O load (random or
//! sequential, at a queue depth) through io_uring, which gives IOPS and
//! MB/s the way fio's `ioengine=io_uring direct=1` does. Hand-written
//! because the guest is busybox and Debian's fio needs librados, libgfapi
//! and a dozen more libraries (`readelf -d /usr/bin/fio`, fio 3.33-3).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

/// The first bytes of every pattern block.
pub const MAGIC: &[u8; 8] = b"TNDMBLK1";
/// Buffer alignment for `O_DIRECT` (the largest logical block size a Linux
/// block device has, the page size).
const ALIGN: usize = 4096;

/// A page-aligned buffer for direct I/O (a `Vec<u8>` is not aligned).
pub struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    /// `len` zero bytes; `len` must be a non-zero multiple of 512.
    pub fn new(len: usize) -> Aligned {
        let layout = Layout::from_size_align(len.max(ALIGN), ALIGN).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {len}-byte buffer");
        Aligned { ptr, layout }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in new().
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Block `index` of the pattern `seed`: [`MAGIC`], the seed, the index,
/// then xorshift64* bytes seeded from both, so a block written at the wrong
/// place, a stale block and a torn one all differ from what is expected.
pub fn fill_block(seed: u64, index: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(MAGIC);
    buf[8..16].copy_from_slice(&seed.to_le_bytes());
    buf[16..24].copy_from_slice(&index.to_le_bytes());
    // xorshift64* (Vigna, "An experimental exploration of Marsaglia's
    // xorshift generators, scrambled", 2016); the state must not be 0.
    let mut x = (seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
    for chunk in buf[24..].chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Where a pattern lives: blocks `first .. first + count` of `block` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub seed: u64,
    pub first: u64,
    pub count: u64,
    pub block: usize,
}

fn open_direct(dev: &Path, write: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
}

/// Writes the pattern's blocks in order with `O_DIRECT | O_DSYNC` (each
/// write returns once the device holds it, a flush included when the
/// device has a write cache) and prints `acked INDEX` after each to `out`.
pub fn write_pattern(dev: &Path, span: Span, out: &mut impl Write) -> std::io::Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(dev)?;
    let mut buf = Aligned::new(span.block);
    for i in span.first..span.first + span.count {
        fill_block(span.seed, i, &mut buf.bytes_mut()[..span.block]);
        f.write_all_at(&buf.bytes()[..span.block], i * span.block as u64)?;
        writeln!(out, "acked {i}")?;
        out.flush()?;
    }
    Ok(())
}

/// What [`verify_pattern`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub good: u64,
    pub bad: u64,
    pub first_bad: Option<u64>,
}

/// Reads the pattern's blocks back (`O_DIRECT` on a device, or a plain
/// image file when `direct` is false) and compares each with what
/// [`fill_block`] makes.
pub fn verify_pattern(dev: &Path, span: Span, direct: bool) -> std::io::Result<Verified> {
    let f = if direct {
        open_direct(dev, false)?
    } else {
        File::open(dev)?
    };
    let mut got = Aligned::new(span.block);
    let mut want = vec![0u8; span.block];
    let mut v = Verified {
        good: 0,
        bad: 0,
        first_bad: None,
    };
    for i in span.first..span.first + span.count {
        fill_block(span.seed, i, &mut want);
        f.read_exact_at(&mut got.bytes_mut()[..span.block], i * span.block as u64)?;
        if got.bytes()[..span.block] == want[..] {
            v.good += 1;
        } else {
            v.bad += 1;
            v.first_bad.get_or_insert(i);
        }
    }
    Ok(v)
}

/// The access pattern of a load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    RandRead,
    SeqRead,
    SeqWrite,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::RandRead => "randread",
            Mode::SeqRead => "seqread",
            Mode::SeqWrite => "seqwrite",
        }
    }
}

/// A load to run.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub mode: Mode,
    pub block: usize,
    pub depth: u32,
    pub time: Duration,
}

/// What a load did.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct LoadResult {
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub iops: f64,
    pub mb_s: f64,
}

/// Runs `load` on `dev` with `O_DIRECT` through io_uring, `depth` requests
/// always in flight, for its time. Random offsets are block-aligned and
/// uniform over the device (xorshift64*, fixed seed, so two runs read the
/// same blocks); sequential ones wrap at the end.
pub fn run_load(dev: &Path, load: Load) -> std::io::Result<LoadResult> {
    let write = load.mode == Mode::SeqWrite;
    let mut f = open_direct(dev, write)?;
    let size = f.seek(SeekFrom::End(0))?;
    let blocks = size / load.block as u64;
    if blocks == 0 || load.depth == 0 {
        return Err(std::io::Error::other("empty device or zero depth"));
    }
    let mut ring = IoUring::new(load.depth.next_power_of_two())?;
    let mut bufs: Vec<Aligned> = (0..load.depth).map(|_| Aligned::new(load.block)).collect();
    let (mut next, mut rng) = (0u64, 0x2545_F491_4F6C_DD1Du64);
    let mut offset = || match load.mode {
        Mode::RandRead => {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % blocks) * load.block as u64
        }
        Mode::SeqRead | Mode::SeqWrite => {
            let o = (next % blocks) * load.block as u64;
            next += 1;
            o
        }
    };
    let fd = types::Fd(f.as_raw_fd());
    let push = |ring: &mut IoUring, slot: u32, buf: &mut Aligned, off: u64| {
        let p = buf.bytes_mut().as_mut_ptr();
        let e = if write {
            opcode::Write::new(fd, p, load.block as u32)
                .offset(off)
                .build()
        } else {
            opcode::Read::new(fd, p, load.block as u32)
                .offset(off)
                .build()
        };
        // SAFETY: the buffer lives until its completion is reaped below.
        unsafe { ring.submission().push(&e.user_data(u64::from(slot))) }
            .map_err(|_| std::io::Error::other("submission queue full"))
    };
    for (slot, buf) in bufs.iter_mut().enumerate() {
        push(&mut ring, slot as u32, buf, offset())?;
    }
    let t0 = Instant::now();
    let (mut ops, mut in_flight) = (0u64, load.depth);
    while in_flight > 0 {
        ring.submit_and_wait(1)?;
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (slot, res) in done {
            if res < 0 {
                return Err(std::io::Error::from_raw_os_error(-res));
            }
            ops += 1;
            in_flight -= 1;
            if t0.elapsed() < load.time {
                push(&mut ring, slot as u32, &mut bufs[slot as usize], offset())?;
                in_flight += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let bytes = ops * load.block as u64;
    Ok(LoadResult {
        ops,
        bytes,
        secs,
        iops: ops as f64 / secs,
        mb_s: bytes as f64 / secs / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_differ_by_index_and_seed_and_start_with_their_header() {
        let (mut a, mut b, mut c) = (vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
        fill_block(1, 5, &mut a);
        fill_block(1, 6, &mut b);
        fill_block(2, 5, &mut c);
        assert_eq!(&a[..8], MAGIC);
        assert_eq!(u64::from_le_bytes(a[16..24].try_into().unwrap()), 5);
        assert_ne!(a[24..], b[24..]);
        assert_ne!(a[24..], c[24..]);
        let mut again = vec![0u8; 4096];
        fill_block(1, 5, &mut again);
        assert_eq!(a, again);
    }

    #[test]
    fn a_pattern_verifies_and_a_changed_block_is_found() {
        let dir = std::env::temp_dir().join(format!("vhostblk-diskio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("img");
        let span = Span {
            seed: 9,
            first: 2,
            count: 6,
            block: 8192,
        };
        std::fs::File::create(&img)
            .unwrap()
            .set_len(10 * 8192)
            .unwrap();
        let mut out = Vec::new();
        // tmpfs refuses O_DIRECT: write through the helper where it can,
        // else through a plain write of the same blocks.
        if write_pattern(&img, span, &mut out).is_err() {
            let f = OpenOptions::new().write(true).open(&img).unwrap();
            let mut b = vec![0u8; span.block];
            for i in span.first..span.first + span.count {
                fill_block(span.seed, i, &mut b);
                f.write_all_at(&b, i * 8192).unwrap();
            }
        } else {
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.lines().last(), Some("acked 7"));
        }
        let v = verify_pattern(&img, span, false).unwrap();
        assert_eq!((v.good, v.bad), (6, 0));
        let f = OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(b"x", 4 * 8192 + 100).unwrap();
        let v = verify_pattern(&img, span, false).unwrap();
        assert_eq!((v.good, v.bad, v.first_bad), (5, 1, Some(4)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
