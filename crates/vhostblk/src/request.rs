//! The virtio-blk request parser: from a descriptor chain to a request the
//! backend can issue, or to the reason it is refused. Pure: it sees guest
//! memory only through [`GuestBytes`], so tests and the fuzzer drive it with
//! made-up chains and memory.
//!
//! Layout (virtio 1.2, 5.2.6 "Device Operation"): a driver-readable header
//! `{type: le32, ioprio: le32, sector: le64}`, the data, and a
//! driver-writable status byte at the very end. The spec forbids devices to
//! assume any framing, so the header may share its descriptor with data
//! that follows it, and the status byte may share its descriptor with data
//! before it; Linux gives each its own descriptor. The header must sit
//! whole in the first descriptor (every driver we know does so; a header
//! split across descriptors is refused as malformed).

use crate::ioprio::{BadClass, Ioprio};
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD,
    VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
    VIRTIO_BLK_T_WRITE_ZEROES,
};

/// virtio-blk counts in 512-byte sectors whatever the block size
/// (virtio 1.2, 5.2.6: "sector ... in 512-byte units").
pub const SECTOR: u64 = 512;
/// Size of `struct virtio_blk_outhdr`.
pub const HEADER_LEN: u32 = 16;
/// Size of `struct virtio_blk_discard_write_zeroes`.
pub const SEGMENT_LEN: u32 = 16;
/// `VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP` (the only flag the spec defines).
pub const FLAG_UNMAP: u32 = 1;
/// The most data segments one request may have: `IOV_MAX` (1024) is the
/// most a `preadv`/`pwritev` takes.
pub const MAX_DATA_SEGMENTS: usize = 1024;

/// One descriptor of a chain, as the queue hands it over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    /// Driver-writable (`VIRTQ_DESC_F_WRITE`).
    pub writable: bool,
}

/// A guest buffer: `len` bytes at guest address `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub addr: u64,
    pub len: u32,
}

/// Reads from guest memory: false when the range is not all mapped.
pub trait GuestBytes {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// What the device offers, against which requests are checked.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Image size in 512-byte sectors.
    pub capacity: u64,
    pub read_only: bool,
    /// `max_discard_seg` = `max_write_zeroes_seg` in the config space.
    pub max_zero_segments: u32,
}

/// One range of a discard or write-zeroes request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub sector: u64,
    pub sectors: u32,
    /// Write zeroes may deallocate (`VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP`).
    pub unmap: bool,
}

/// What a request asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read `len` bytes at `sector` into the segments.
    Read {
        sector: u64,
        data: Vec<Seg>,
    },
    /// Write the segments at `sector`.
    Write {
        sector: u64,
        data: Vec<Seg>,
    },
    Flush,
    /// Write the device id (up to 20 bytes) into the segments.
    GetId {
        data: Vec<Seg>,
    },
    Discard(Vec<Range>),
    WriteZeroes(Vec<Range>),
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Flush => "flush",
            Op::GetId { .. } => "get_id",
            Op::Discard(_) => "discard",
            Op::WriteZeroes(_) => "write_zeroes",
        }
    }
}

/// A request that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    /// The guest's I/O priority for this request.
    pub ioprio: Ioprio,
}

/// Why a request is refused. Each maps to the status the guest sees and a
/// counter of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The chain's shape is wrong: no header, header or data in the wrong
    /// direction, data not a whole number of sectors, too many segments,
    /// unreadable discard ranges.
    Malformed,
    /// Sectors beyond the image, or an overflowing range.
    OutOfRange,
    /// A write, discard or write-zeroes on a read-only image.
    ReadOnly,
    /// An I/O priority class no kernel defines.
    BadIoprio,
    /// A request type this device does not offer, or flags it does not know.
    Unsupported,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::Malformed,
        Refusal::OutOfRange,
        Refusal::ReadOnly,
        Refusal::BadIoprio,
        Refusal::Unsupported,
    ];

    /// The status byte: UNSUPP for what the device does not do, IOERR for
    /// the rest (virtio 1.2, 5.2.6.1: a write to a read-only device "MUST"
    /// fail with IOERR).
    pub fn status(self) -> u8 {
        match self {
            Refusal::Unsupported => VIRTIO_BLK_S_UNSUPP as u8,
            _ => VIRTIO_BLK_S_IOERR as u8,
        }
    }
}

/// The parser's verdict. Without a writable status byte the request cannot
/// be answered at all (`status` is `None`); the backend then returns the
/// chain unused and counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Guest address of the status byte.
    pub status: Option<u64>,
    pub request: Result<Request, Refusal>,
}

/// Parses one chain.
pub fn parse(chain: &[Desc], mem: &impl GuestBytes, limits: &Limits) -> Parsed {
    let Some(last) = chain
        .last()
        .filter(|d| d.writable && d.len > 0 && chain.len() >= 2)
    else {
        return Parsed {
            status: None,
            request: Err(Refusal::Malformed),
        };
    };
    let status_addr = last.addr.checked_add(u64::from(last.len) - 1);
    let request = status_addr
        .ok_or(Refusal::Malformed)
        .and_then(|_| parse_body(chain, mem, limits));
    Parsed {
        status: status_addr,
        request,
    }
}

fn parse_body(chain: &[Desc], mem: &impl GuestBytes, limits: &Limits) -> Result<Request, Refusal> {
    let first = chain[0];
    if first.writable || first.len < HEADER_LEN {
        return Err(Refusal::Malformed);
    }
    let mut hdr = [0u8; HEADER_LEN as usize];
    if !mem.read(first.addr, &mut hdr) {
        return Err(Refusal::Malformed);
    }
    let kind = u32::from_le_bytes(hdr[0..4].try_into().unwrap_or_default());
    let raw_prio = u32::from_le_bytes(hdr[4..8].try_into().unwrap_or_default());
    let sector = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or_default());
    let data = data_segments(chain)?;
    let ioprio = Ioprio::decode(raw_prio).map_err(|BadClass(_)| Refusal::BadIoprio)?;
    let op = match kind {
        VIRTIO_BLK_T_IN => {
            let len = rw_len(&data, true)?;
            check_range(sector, len / SECTOR, limits)?;
            Op::Read {
                sector,
                data: data.into_iter().map(|(s, _)| s).collect(),
            }
        }
        VIRTIO_BLK_T_OUT => {
            let len = rw_len(&data, false)?;
            writable_image(limits)?;
            check_range(sector, len / SECTOR, limits)?;
            Op::Write {
                sector,
                data: data.into_iter().map(|(s, _)| s).collect(),
            }
        }
        VIRTIO_BLK_T_FLUSH => Op::Flush,
        VIRTIO_BLK_T_GET_ID => {
            if data.iter().any(|(_, w)| !w) {
                return Err(Refusal::Malformed);
            }
            Op::GetId {
                data: data.into_iter().map(|(s, _)| s).collect(),
            }
        }
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
            let zeroes = kind == VIRTIO_BLK_T_WRITE_ZEROES;
            writable_image(limits)?;
            let ranges = zero_ranges(&data, mem, limits, zeroes)?;
            if zeroes {
                Op::WriteZeroes(ranges)
            } else {
                Op::Discard(ranges)
            }
        }
        _ => return Err(Refusal::Unsupported),
    };
    Ok(Request { op, ioprio })
}

/// The data between the header and the status byte, with each segment's
/// direction: the tail of the first descriptor after the header, the middle
/// descriptors, the head of the last before its final byte.
fn data_segments(chain: &[Desc]) -> Result<Vec<(Seg, bool)>, Refusal> {
    let mut out = Vec::new();
    let n = chain.len();
    for (i, d) in chain.iter().enumerate() {
        let (skip, cut) = match (i == 0, i == n - 1) {
            (true, _) => (HEADER_LEN, 0),
            (false, true) => (0, 1),
            (false, false) => (0, 0),
        };
        let len = d.len - skip - cut;
        if len == 0 {
            continue;
        }
        let addr = d
            .addr
            .checked_add(u64::from(skip))
            .ok_or(Refusal::Malformed)?;
        addr.checked_add(u64::from(len)).ok_or(Refusal::Malformed)?;
        out.push((Seg { addr, len }, d.writable));
    }
    if out.len() > MAX_DATA_SEGMENTS {
        return Err(Refusal::Malformed);
    }
    Ok(out)
}

/// The length of a read's or write's data: all in the direction the
/// request needs (device-writable for a read), a whole number of sectors.
fn rw_len(data: &[(Seg, bool)], read: bool) -> Result<u64, Refusal> {
    if data.iter().any(|&(_, w)| w != read) {
        return Err(Refusal::Malformed);
    }
    let len: u64 = data.iter().map(|(s, _)| u64::from(s.len)).sum();
    if !len.is_multiple_of(SECTOR) {
        return Err(Refusal::Malformed);
    }
    Ok(len)
}

fn writable_image(limits: &Limits) -> Result<(), Refusal> {
    if limits.read_only {
        Err(Refusal::ReadOnly)
    } else {
        Ok(())
    }
}

/// `sectors` sectors from `sector` lie inside the image.
fn check_range(sector: u64, sectors: u64, limits: &Limits) -> Result<(), Refusal> {
    match sector.checked_add(sectors) {
        Some(end) if end <= limits.capacity => Ok(()),
        _ => Err(Refusal::OutOfRange),
    }
}

/// The ranges of a discard or write-zeroes request (`struct
/// virtio_blk_discard_write_zeroes {le64 sector; le32 num_sectors; le32
/// flags}`), each checked against the image.
fn zero_ranges(
    data: &[(Seg, bool)],
    mem: &impl GuestBytes,
    limits: &Limits,
    zeroes: bool,
) -> Result<Vec<Range>, Refusal> {
    if data.iter().any(|&(_, w)| w) {
        return Err(Refusal::Malformed);
    }
    let len: u64 = data.iter().map(|(s, _)| u64::from(s.len)).sum();
    let count = len / u64::from(SEGMENT_LEN);
    if len == 0
        || !len.is_multiple_of(u64::from(SEGMENT_LEN))
        || count > u64::from(limits.max_zero_segments)
    {
        return Err(Refusal::Malformed);
    }
    // The ranges may straddle descriptors: gather the bytes first (at most
    // max_zero_segments * 16 bytes).
    let mut bytes = Vec::with_capacity(len as usize);
    for (s, _) in data {
        let start = bytes.len();
        bytes.resize(start + s.len as usize, 0);
        if !mem.read(s.addr, &mut bytes[start..]) {
            return Err(Refusal::Malformed);
        }
    }
    let mut ranges = Vec::with_capacity(count as usize);
    for raw in bytes.chunks_exact(SEGMENT_LEN as usize) {
        let sector = u64::from_le_bytes(raw[0..8].try_into().unwrap_or_default());
        let sectors = u32::from_le_bytes(raw[8..12].try_into().unwrap_or_default());
        let flags = u32::from_le_bytes(raw[12..16].try_into().unwrap_or_default());
        // virtio 1.2, 5.2.6.2: the device MUST set UNSUPP for a discard
        // with the unmap flag, or any flag it does not know.
        let known = if zeroes { FLAG_UNMAP } else { 0 };
        if flags & !known != 0 {
            return Err(Refusal::Unsupported);
        }
        check_range(sector, u64::from(sectors), limits)?;
        ranges.push(Range {
            sector,
            sectors,
            unmap: flags & FLAG_UNMAP != 0,
        });
    }
    Ok(ranges)
}

/// The id GET_ID returns: up to `VIRTIO_BLK_ID_BYTES` bytes, zero-padded
/// (not NUL-terminated when all 20 are used).
pub fn device_id(name: &str) -> [u8; VIRTIO_BLK_ID_BYTES as usize] {
    let mut id = [0u8; VIRTIO_BLK_ID_BYTES as usize];
    let b = name.as_bytes();
    let n = b.len().min(id.len());
    id[..n].copy_from_slice(&b[..n]);
    id
}

pub mod fuzz;

#[cfg(test)]
mod tests;
