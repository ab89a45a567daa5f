//! The parser driven by arbitrary bytes, for the cargo-fuzz target
//! `vhost_request` (fuzz/) and for the seed-corpus unit test: the input is
//! decoded into a descriptor chain, the guest memory it points at and the
//! device's limits, [`parse`] runs on them, and every property the backend
//! relies on is checked (a violation panics, which libFuzzer reports).
//!
//! Input layout (all little-endian; a short input is padded with zeroes):
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | flags: bit 0 read-only; bits 1..3 capacity choice ([`CAPACITIES`]) |
//! | 1 | descriptors in the chain, 0..=[`MAX_DESCS`] (taken modulo 9) |
//! | 2.. | per descriptor 7 bytes: `addr: u32`, `len: u16`, `flags: u8` (bit 0 writable, bit 1 `len` taken as `len << 8`) |
//! | rest | guest memory, mapped from guest address [`MEM_BASE`] |
//!
//! The first 16 bytes of memory are typically the header (type, ioprio,
//! sector) when a descriptor points at [`MEM_BASE`], so the fuzzer reaches
//! every request type and class quickly from the seed corpus.

use super::{parse, Desc, GuestBytes, Limits, Op, Parsed, SECTOR};

/// Where the input's memory bytes start in guest address space.
pub const MEM_BASE: u64 = 0x1000;
/// The longest chain decoded from one input.
pub const MAX_DESCS: usize = 8;
/// Image sizes in sectors the first byte chooses from: empty, one sector,
/// a small odd size, 1 GiB, and the largest (every sector number valid).
pub const CAPACITIES: [u64; 8] = [0, 1, 7, 2048, 1 << 21, 1 << 40, u64::MAX - 1, u64::MAX];
/// Bytes per encoded descriptor.
const DESC_BYTES: usize = 7;

/// Guest memory: `bytes` at [`MEM_BASE`], nothing elsewhere.
struct FlatMem<'a>(&'a [u8]);

impl GuestBytes for FlatMem<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(off) = addr.checked_sub(MEM_BASE) else {
            return false;
        };
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        match off
            .checked_add(buf.len())
            .and_then(|end| self.0.get(off..end))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

fn byte(input: &[u8], i: usize) -> u8 {
    input.get(i).copied().unwrap_or(0)
}

/// The chain, the limits and the memory an input stands for.
pub fn decode(input: &[u8]) -> (Vec<Desc>, Limits, &[u8]) {
    let flags = byte(input, 0);
    let limits = Limits {
        capacity: CAPACITIES[usize::from((flags >> 1) & 7)],
        read_only: flags & 1 != 0,
        max_zero_segments: 4,
    };
    let n = usize::from(byte(input, 1)) % (MAX_DESCS + 1);
    let chain: Vec<Desc> = (0..n)
        .map(|k| {
            let b = |j: usize| byte(input, 2 + k * DESC_BYTES + j);
            let addr = u32::from_le_bytes([b(0), b(1), b(2), b(3)]);
            let len = u32::from(u16::from_le_bytes([b(4), b(5)]));
            let f = b(6);
            Desc {
                addr: u64::from(addr),
                len: if f & 2 != 0 { len << 8 } else { len },
                writable: f & 1 != 0,
            }
        })
        .collect();
    let mem = input.get(2 + n * DESC_BYTES..).unwrap_or(&[]);
    (chain, limits, mem)
}

/// Parses the request `input` stands for and checks it; panics with the
/// broken property.
pub fn run(input: &[u8]) -> Parsed {
    let (chain, limits, mem) = decode(input);
    let p = parse(&chain, &FlatMem(mem), &limits);
    check(&chain, &limits, &p);
    p
}

/// The properties the backend relies on: the status byte is the chain's
/// last byte and driver-writable; every byte the request touches in guest
/// memory lies inside one descriptor, in the direction the request uses it;
/// every sector it touches lies inside the image; nothing is written to a
/// read-only image; a chain without a status byte is never accepted.
pub fn check(chain: &[Desc], limits: &Limits, p: &Parsed) {
    if let Some(s) = p.status {
        let last = chain.last().expect("a status byte needs a descriptor");
        assert!(last.writable, "status in a read-only descriptor");
        assert_eq!(s, last.addr + u64::from(last.len) - 1, "status not last");
    } else {
        assert!(p.request.is_err(), "accepted without a status byte");
    }
    let Ok(r) = &p.request else {
        return;
    };
    let inside = |a: u64, n: u64, w: bool| {
        chain.iter().any(|d| {
            d.writable == w
                && a >= d.addr
                && a.checked_add(n)
                    .is_some_and(|end| end <= d.addr.saturating_add(u64::from(d.len)))
        })
    };
    let (sectors, segs, device_writes) = match &r.op {
        Op::Read { sector, data } => (Some((*sector, data)), data.as_slice(), true),
        Op::Write { sector, data } => (Some((*sector, data)), data.as_slice(), false),
        Op::GetId { data } => (None, data.as_slice(), true),
        Op::Flush | Op::Discard(_) | Op::WriteZeroes(_) => (None, &[][..], false),
    };
    for s in segs {
        assert!(
            inside(s.addr, u64::from(s.len), device_writes),
            "segment {s:?} outside the chain {chain:?}"
        );
    }
    if let Some((sector, data)) = sectors {
        let bytes: u64 = data.iter().map(|s| u64::from(s.len)).sum();
        assert_eq!(bytes % SECTOR, 0, "not whole sectors");
        let end = sector.checked_add(bytes / SECTOR).expect("sector overflow");
        assert!(end <= limits.capacity, "beyond the image: {r:?}");
    }
    if let Op::Discard(rs) | Op::WriteZeroes(rs) = &r.op {
        for rg in rs {
            let end = rg.sector.checked_add(u64::from(rg.sectors));
            assert!(end.is_some_and(|e| e <= limits.capacity), "range {rg:?}");
        }
    }
    if limits.read_only {
        assert!(
            matches!(r.op, Op::Read { .. } | Op::Flush | Op::GetId { .. }),
            "a write on a read-only image: {r:?}"
        );
    }
}

/// Builds an input for a chain, limits and memory (the seed corpus and the
/// unit tests write requests this way).
pub fn encode(chain: &[Desc], flags: u8, mem: &[u8]) -> Vec<u8> {
    let mut v = vec![flags, chain.len() as u8];
    for d in chain {
        let (len, big) = if d.len > u32::from(u16::MAX) {
            (d.len >> 8, 2)
        } else {
            (d.len, 0)
        };
        v.extend((d.addr as u32).to_le_bytes());
        v.extend((len as u16).to_le_bytes());
        v.push(u8::from(d.writable) | big);
    }
    v.extend_from_slice(mem);
    v
}
