use super::*;
use crate::ioprio::Class;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Guest memory made of byte runs at addresses.
#[derive(Default)]
struct Mem(BTreeMap<u64, Vec<u8>>);

impl Mem {
    fn put(&mut self, addr: u64, bytes: &[u8]) {
        self.0.insert(addr, bytes.to_vec());
    }
}

impl GuestBytes for Mem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some((&base, bytes)) = self.0.range(..=addr).next_back() else {
            return false;
        };
        let off = (addr - base) as usize;
        match bytes.get(off..off + buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

fn header(kind: u32, ioprio: u32, sector: u64) -> Vec<u8> {
    let mut h = kind.to_le_bytes().to_vec();
    h.extend(ioprio.to_le_bytes());
    h.extend(sector.to_le_bytes());
    h
}

const LIMITS: Limits = Limits {
    capacity: 2048,
    read_only: false,
    max_zero_segments: 4,
};

fn d(addr: u64, len: u32, writable: bool) -> Desc {
    Desc {
        addr,
        len,
        writable,
    }
}

/// A Linux-shaped chain: header, data, status, each in its own descriptor.
fn linux_chain(
    mem: &mut Mem,
    kind: u32,
    ioprio: u32,
    sector: u64,
    data: &[(u32, bool)],
) -> Vec<Desc> {
    mem.put(0x1000, &header(kind, ioprio, sector));
    let mut chain = vec![d(0x1000, 16, false)];
    for (i, &(len, w)) in data.iter().enumerate() {
        chain.push(d(0x10_0000 * (i as u64 + 1), len, w));
    }
    chain.push(d(0x2000, 1, true));
    chain
}

#[test]
fn a_read_carries_its_sector_data_and_ioprio() {
    let mut mem = Mem::default();
    let chain = linux_chain(
        &mut mem,
        VIRTIO_BLK_T_IN,
        0x2000,
        8,
        &[(4096, true), (512, true)],
    );
    let p = parse(&chain, &mem, &LIMITS);
    assert_eq!(p.status, Some(0x2000));
    let r = p.request.unwrap();
    assert_eq!(r.ioprio, Ioprio::new(Class::Rt, 0));
    match r.op {
        Op::Read { sector, data } => {
            assert_eq!(sector, 8);
            assert_eq!(data.len(), 2);
            assert_eq!(
                data[0],
                Seg {
                    addr: 0x10_0000,
                    len: 4096
                }
            );
        }
        op => panic!("{op:?}"),
    }
}

#[test]
fn header_and_status_may_share_descriptors_with_data() {
    let mut mem = Mem::default();
    let mut bytes = header(VIRTIO_BLK_T_OUT, 0x4004, 0);
    bytes.extend([0u8; 512]);
    mem.put(0x1000, &bytes);
    let chain = [d(0x1000, 16 + 512, false), d(0x5000, 1, true)];
    let r = parse(&chain, &mem, &LIMITS).request.unwrap();
    assert_eq!(
        r.op,
        Op::Write {
            sector: 0,
            data: vec![Seg {
                addr: 0x1010,
                len: 512
            }]
        }
    );
    // A read whose last descriptor holds data and the status byte.
    mem.put(0x1000, &header(VIRTIO_BLK_T_IN, 0, 0));
    let chain = [d(0x1000, 16, false), d(0x8000, 513, true)];
    let p = parse(&chain, &mem, &LIMITS);
    assert_eq!(p.status, Some(0x8000 + 512));
    assert!(matches!(p.request.unwrap().op, Op::Read { ref data, .. } if data[0].len == 512));
}

#[test]
fn requests_beyond_the_image_are_refused() {
    let mut mem = Mem::default();
    // The last sector is fine, one more is not.
    let ok = linux_chain(&mut mem, VIRTIO_BLK_T_IN, 0, 2047, &[(512, true)]);
    assert!(parse(&ok, &mem, &LIMITS).request.is_ok());
    let over = linux_chain(&mut mem, VIRTIO_BLK_T_IN, 0, 2047, &[(1024, true)]);
    assert_eq!(
        parse(&over, &mem, &LIMITS).request,
        Err(Refusal::OutOfRange)
    );
    let wrap = linux_chain(&mut mem, VIRTIO_BLK_T_OUT, 0, u64::MAX, &[(512, false)]);
    assert_eq!(
        parse(&wrap, &mem, &LIMITS).request,
        Err(Refusal::OutOfRange)
    );
}

#[test]
fn malformed_chains_are_refused() {
    let mut mem = Mem::default();
    // Data in the wrong direction.
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_IN, 0, 0, &[(512, false)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    // Not a whole sector.
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_OUT, 0, 0, &[(100, false)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    // A header shorter than 16 bytes, or writable.
    let c = [d(0x1000, 8, false), d(0x2000, 1, true)];
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    let c = [d(0x1000, 16, true), d(0x2000, 1, true)];
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    // A header in unmapped memory.
    let c = [d(0x9_0000_0000, 16, false), d(0x2000, 1, true)];
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    // No status byte: nothing to answer with.
    let c = [d(0x1000, 16, false)];
    assert_eq!(parse(&c, &mem, &LIMITS).status, None);
    let c = [d(0x1000, 16, false), d(0x2000, 1, false)];
    assert_eq!(parse(&c, &mem, &LIMITS).status, None);
    assert_eq!(parse(&[], &mem, &LIMITS).status, None);
}

#[test]
fn writes_to_a_read_only_image_fail_with_ioerr() {
    let ro = Limits {
        read_only: true,
        ..LIMITS
    };
    let mut mem = Mem::default();
    for kind in [
        VIRTIO_BLK_T_OUT,
        VIRTIO_BLK_T_DISCARD,
        VIRTIO_BLK_T_WRITE_ZEROES,
    ] {
        let c = linux_chain(&mut mem, kind, 0, 0, &[(512, false)]);
        let p = parse(&c, &mem, &ro);
        assert_eq!(p.request, Err(Refusal::ReadOnly));
        assert_eq!(Refusal::ReadOnly.status(), VIRTIO_BLK_S_IOERR as u8);
    }
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_IN, 0, 0, &[(512, true)]);
    assert!(parse(&c, &mem, &ro).request.is_ok());
}

#[test]
fn unknown_types_and_classes_are_refused() {
    let mut mem = Mem::default();
    let c = linux_chain(&mut mem, 2 /* SCSI_CMD */, 0, 0, &[]);
    let p = parse(&c, &mem, &LIMITS);
    assert_eq!(p.request, Err(Refusal::Unsupported));
    assert_eq!(Refusal::Unsupported.status(), VIRTIO_BLK_S_UNSUPP as u8);
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_IN, 5 << 13, 0, &[(512, true)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::BadIoprio));
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_FLUSH, 0x6000, 0, &[]);
    let r = parse(&c, &mem, &LIMITS).request.unwrap();
    assert_eq!((r.op, r.ioprio.class), (Op::Flush, Class::Idle));
}

fn zero_range(sector: u64, sectors: u32, flags: u32) -> Vec<u8> {
    let mut v = sector.to_le_bytes().to_vec();
    v.extend(sectors.to_le_bytes());
    v.extend(flags.to_le_bytes());
    v
}

#[test]
fn discard_and_write_zeroes_ranges_are_read_and_checked() {
    let mut mem = Mem::default();
    let mut seg = zero_range(0, 8, 0);
    seg.extend(zero_range(100, 1948, 0));
    mem.put(0x10_0000, &seg);
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_DISCARD, 0, 0, &[(32, false)]);
    assert_eq!(
        parse(&c, &mem, &LIMITS).request.unwrap().op,
        Op::Discard(vec![
            Range {
                sector: 0,
                sectors: 8,
                unmap: false
            },
            Range {
                sector: 100,
                sectors: 1948,
                unmap: false
            }
        ])
    );
    // One sector too many.
    mem.put(0x10_0000, &zero_range(100, 1949, 0));
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_DISCARD, 0, 0, &[(16, false)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::OutOfRange));
    // Unmap is a write-zeroes flag only.
    mem.put(0x10_0000, &zero_range(0, 8, FLAG_UNMAP));
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Unsupported));
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_WRITE_ZEROES, 0, 0, &[(16, false)]);
    assert_eq!(
        parse(&c, &mem, &LIMITS).request.unwrap().op,
        Op::WriteZeroes(vec![Range {
            sector: 0,
            sectors: 8,
            unmap: true
        }])
    );
    // More ranges than max_discard_seg, or a partial range.
    mem.put(0x10_0000, &[0u8; 80]);
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_DISCARD, 0, 0, &[(80, false)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
    let c = linux_chain(&mut mem, VIRTIO_BLK_T_DISCARD, 0, 0, &[(20, false)]);
    assert_eq!(parse(&c, &mem, &LIMITS).request, Err(Refusal::Malformed));
}

#[test]
fn the_device_id_is_zero_padded_to_20_bytes() {
    assert_eq!(&device_id("tandem")[..7], b"tandem\0");
    assert_eq!(
        device_id("0123456789012345678901234"),
        *b"01234567890123456789"
    );
}

/// Every byte a request would touch: the data segments and the status.
fn touched(p: &Parsed) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = p.status.map(|s| (s, 1)).into_iter().collect();
    if let Ok(r) = &p.request {
        let segs = match &r.op {
            Op::Read { data, .. } | Op::Write { data, .. } | Op::GetId { data } => data.clone(),
            _ => vec![],
        };
        v.extend(segs.iter().map(|s| (s.addr, u64::from(s.len))));
    }
    v
}

fn arb_desc() -> impl Strategy<Value = Desc> {
    (
        prop_oneof![
            Just(0x1000u64),
            Just(0x10_0000),
            any::<u64>(),
            0u64..0x20_0000
        ],
        prop_oneof![
            Just(16u32),
            Just(1),
            Just(512),
            Just(4096),
            any::<u32>(),
            0u32..600
        ],
        any::<bool>(),
    )
        .prop_map(|(addr, len, writable)| Desc {
            addr,
            len,
            writable,
        })
}

/// Cases of the random-chain test: 20 000 by default, more with
/// `TANDEM_FUZZ_CASES` (e.g. 1000000 in a release build).
fn fuzz_cases() -> u32 {
    std::env::var("TANDEM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    /// Random chains and headers: the parser never panics; an accepted
    /// request stays inside the image, its data lies inside the chain's
    /// descriptors, and the status byte is the chain's last byte.
    #[test]
    fn random_chains_never_escape_the_image(
        chain in prop::collection::vec(arb_desc(), 0..8),
        kind in prop_oneof![0u32..16, any::<u32>()],
        prio in prop_oneof![0u32..0x8000, any::<u32>()],
        sector in prop_oneof![0u64..4096, any::<u64>()],
        ranges in prop::collection::vec((0u64..4096, 0u32..4096, 0u32..3), 0..6),
        read_only in any::<bool>(),
    ) {
        let mut mem = Mem::default();
        mem.put(0x1000, &header(kind, prio, sector));
        let bytes: Vec<u8> = ranges.iter().flat_map(|&(s, n, f)| zero_range(s, n, f)).collect();
        mem.put(0x10_0000, &bytes);
        let limits = Limits { read_only, ..LIMITS };
        let p = parse(&chain, &mem, &limits);
        if let Some(s) = p.status {
            let last = chain.last().unwrap();
            prop_assert!(last.writable);
            prop_assert_eq!(s, last.addr + u64::from(last.len) - 1);
        }
        if p.status.is_none() {
            prop_assert!(p.request.is_err());
        }
        let inside = |a: u64, n: u64| chain.iter().any(|d| a >= d.addr && a.saturating_add(n) <= d.addr.saturating_add(u64::from(d.len)));
        for (a, n) in touched(&p) {
            prop_assert!(inside(a, n), "{a:#x}+{n} outside the chain {chain:?}");
        }
        if let Ok(r) = &p.request {
            let (first, count) = match &r.op {
                Op::Read { sector, data } | Op::Write { sector, data } => {
                    (*sector, data.iter().map(|s| u64::from(s.len)).sum::<u64>() / SECTOR)
                }
                _ => (0, 0),
            };
            prop_assert!(first + count <= limits.capacity);
            if let Op::Discard(rs) | Op::WriteZeroes(rs) = &r.op {
                for rg in rs {
                    prop_assert!(rg.sector + u64::from(rg.sectors) <= limits.capacity);
                }
            }
            if read_only {
                let reads_only = matches!(r.op, Op::Read { .. } | Op::Flush | Op::GetId { .. });
                prop_assert!(reads_only);
            }
        }
    }
}

/// The fuzz target's seed inputs, one per verdict: each is decoded and
/// checked by [`fuzz::run`] and gives the refusal (or request) named. With
/// `TANDEM_WRITE_FUZZ_SEEDS=DIR` they are also written to DIR (how
/// fuzz/corpus/vhost_request was made).
fn fuzz_seeds() -> Vec<(&'static str, Vec<u8>, Result<&'static str, Refusal>)> {
    use fuzz::{encode, MEM_BASE};
    let base = MEM_BASE;
    // Memory: header at base, a 16-byte discard range at base + 16, then
    // room for data.
    let mem = |kind: u32, prio: u32, sector: u64| {
        let mut m = header(kind, prio, sector);
        m.extend(zero_range(1, 2, 0));
        m.resize(16 + 16 + 1024 + 1, 0);
        m
    };
    let hdr = d(base, 16, false);
    let data = |w: bool| d(base + 32, 512, w);
    let status = d(base + 32 + 1024, 1, true);
    // Capacity choice 3 (2048 sectors): flags 3 << 1.
    let cap = 3 << 1;
    let rt = 1 << 13;
    vec![
        (
            "read_rt",
            encode(
                &[hdr, data(true), status],
                cap,
                &mem(VIRTIO_BLK_T_IN, rt, 7),
            ),
            Ok("read"),
        ),
        (
            "write",
            encode(
                &[hdr, data(false), status],
                cap,
                &mem(VIRTIO_BLK_T_OUT, 0, 2047),
            ),
            Ok("write"),
        ),
        (
            "write_beyond_image",
            encode(
                &[hdr, data(false), status],
                cap,
                &mem(VIRTIO_BLK_T_OUT, 0, 2048),
            ),
            Err(Refusal::OutOfRange),
        ),
        (
            "read_sector_wraps",
            encode(
                &[hdr, data(true), status],
                cap,
                &mem(VIRTIO_BLK_T_IN, 0, u64::MAX),
            ),
            Err(Refusal::OutOfRange),
        ),
        (
            "read_wrong_direction",
            encode(
                &[hdr, data(false), status],
                cap,
                &mem(VIRTIO_BLK_T_IN, 0, 0),
            ),
            Err(Refusal::Malformed),
        ),
        (
            "write_read_only",
            encode(
                &[hdr, data(false), status],
                cap | 1,
                &mem(VIRTIO_BLK_T_OUT, 0, 0),
            ),
            Err(Refusal::ReadOnly),
        ),
        (
            "class_7",
            encode(
                &[hdr, data(true), status],
                cap,
                &mem(VIRTIO_BLK_T_IN, 7 << 13, 0),
            ),
            Err(Refusal::BadIoprio),
        ),
        (
            "scsi_cmd",
            encode(&[hdr, status], cap, &mem(2, 0, 0)),
            Err(Refusal::Unsupported),
        ),
        (
            "discard",
            encode(
                &[hdr, d(base + 16, 16, false), status],
                cap,
                &mem(VIRTIO_BLK_T_DISCARD, 0, 0),
            ),
            Ok("discard"),
        ),
        (
            "flush_idle",
            encode(&[hdr, status], cap, &mem(VIRTIO_BLK_T_FLUSH, 3 << 13, 0)),
            Ok("flush"),
        ),
        (
            "get_id",
            encode(
                &[hdr, d(base + 32, 20, true), status],
                cap,
                &mem(VIRTIO_BLK_T_GET_ID, 0, 0),
            ),
            Ok("get_id"),
        ),
        (
            "header_unmapped",
            encode(&[d(0x10, 16, false), status], cap, &mem(0, 0, 0)),
            Err(Refusal::Malformed),
        ),
    ]
}

#[test]
fn each_fuzz_seed_gives_its_verdict_and_keeps_the_properties() {
    let out = std::env::var_os("TANDEM_WRITE_FUZZ_SEEDS").map(std::path::PathBuf::from);
    for (name, input, want) in fuzz_seeds() {
        let p = fuzz::run(&input);
        assert!(p.status.is_some(), "{name}");
        assert_eq!(
            p.request.as_ref().map(|r| r.op.name()),
            want.as_ref().copied(),
            "{name}"
        );
        if let Some(dir) = &out {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(name), &input).unwrap();
        }
    }
}

/// The seed corpus in fuzz/ is the one [`fuzz_seeds`] writes (so the
/// fuzzer starts from every verdict).
#[test]
fn the_checked_in_seed_corpus_matches_the_seeds() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/vhost_request");
    for (name, input, _) in fuzz_seeds() {
        let stored = std::fs::read(dir.join(name))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()));
        assert_eq!(stored, input, "{name}: rerun with TANDEM_WRITE_FUZZ_SEEDS");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    /// The fuzz target's harness on random bytes (the same checks as
    /// libFuzzer's runs, without nightly).
    #[test]
    fn the_fuzz_harness_holds_on_random_inputs(input in prop::collection::vec(any::<u8>(), 0..200)) {
        fuzz::run(&input);
    }
}
