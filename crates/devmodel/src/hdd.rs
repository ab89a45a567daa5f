//! Hard disk model: seek curve, time-based rotational position, media transfer,
//! command overhead, and a segmented read-ahead buffer.
//!
//! # The model
//!
//! The disk has `heads` surfaces of `sectors_per_track` sectors each; logical
//! sectors fill a track, then the next head of the same cylinder, then the next
//! cylinder. `sectors_per_track` follows from the media rate: one track passes
//! under the head per revolution.
//!
//! A request that misses the buffer costs
//! `command overhead + seek(distance) + rotational wait + transfer`:
//!
//! - **Seek** (Ruemmler & Wilkes, "An introduction to disk drive modeling",
//!   IEEE Computer 27(3), 1994): `a + b*sqrt(d)` for short seeks and linear for
//!   long ones. The curve passes through the track-to-track time at `d = 1`, the
//!   datasheet average at one third of the stroke (the mean distance between two
//!   uniformly random cylinders), and the full-stroke time at the last cylinder.
//!   Writes add a settle time.
//! - **Rotation**: the platter angle is `now mod rotation_period`, and a sector's
//!   angle is its index in the track. The wait is the angle still to turn when
//!   the seek ends. No random draw: over random requests it averages half a
//!   revolution because the arrival phases are spread out.
//! - **Transfer** at the media rate.
//!
//! After a read the drive keeps reading ahead into a buffer segment (up to the
//! segment size) until the next command arrives, as ATA drives do. A read that
//! starts inside a segment is a hit: served from the buffer if the data is
//! already there, or, when it continues the stream the drive is reading right
//! now, or starts a little ahead of it (within a track), by just waiting for
//! the media to get there (no seek, no rotational wait). This is the "request that continues the previous one sequentially"
//! case, and it also absorbs small host gaps between sequential requests.
//! Several segments keep several interleaved streams, but only the most recent
//! one grows. A sequential write that continues the previous write streams
//! likewise (the drive's write cache merges it into the running transfer).
//!
//! All positions, phases and durations are integers; the only floating point
//! is the seek curve, evaluated with IEEE operations that give the same result
//! on every run.

use crate::{xfer_ns, DeviceInfo, Direction, IoRequest, Nanos, ServiceModel, SECTOR_BYTES};

/// Most buffer segments a model can have (fixed array, no allocation).
pub const MAX_CACHE_SEGMENTS: usize = 8;

// ---------------------------------------------------------------------------
// Preset `hdd-1.8in`: Toshiba MK6006GAH class. Every calibration knob of this
// preset is one of the constants below.
// ---------------------------------------------------------------------------

/// 60 GB drive: IDEMA LBA1-03 capacity formula,
/// `97,696,368 + 1,953,504 * (60 - 50)` sectors.
pub const MK6006GAH_CAPACITY_SECTORS: u64 = 117_231_408;

/// 4200 rpm: Toshiba's 1.8-inch drives of this generation (ZDNet, "'Biggest
/// ever' 1.8-in drive launched by Toshiba", 2004; Tom's Hardware, "1.8" Hard
/// Drives: Small is Beautiful", 2006: "4,200 RPM spindle speed and 2 MB cache").
/// Rotation period 60 s / 4200 = 14.29 ms.
pub const MK6006GAH_RPM: u32 = 4200;

/// Two 30 GB platters, so four surfaces (ZDNet 2004 launch article: "two 30GB
/// platters"; PC World / simmtester.com, Aug 2004: 93.5 Gbit/in², 30 GB per
/// platter).
pub const MK6006GAH_HEADS: u32 = 4;

/// Media (sequential streaming) rate: 10 MB/s, the read peak measured on this
/// drive in Spyridakis & Raho, CLOUD COMPUTING 2014, Table I (see
/// `reference/cloud2014-hdd.toml`). Calibration target, not a datasheet value;
/// it sets the track length (279 sectors per track).
pub const MK6006GAH_MEDIA_BYTES_PER_S: f64 = 10.0e6;

/// Average seek 15 ms: Toshiba's published average seek time for its 1.8-inch
/// 4200 rpm family (MK1011GAH: Digital Trends 2005, "average seek time of 15
/// ms"; also 15 ms for the MK1626GCB/MK8022GAA, NordicHardware 2007, and
/// MK1216GSG/MK8016GSG, DailyTech 2008). The MK6006GAH datasheet itself was
/// not found; this is the family value.
pub const MK6006GAH_AVG_SEEK_NS: Nanos = 15_000_000;

/// Track-to-track seek 1.4 ms. Not found for the Toshiba 1.8-inch family; taken
/// from the ratio in the published Hitachi Travelstar 5K160 specification
/// (single track 1.0 ms, average 11 ms), scaled to the 15 ms average.
pub const MK6006GAH_TRACK_TO_TRACK_NS: Nanos = 1_400_000;

/// Full-stroke seek 27 ms. Not found for the Toshiba 1.8-inch family; taken from
/// the ratio in the Hitachi Travelstar 5K160 specification (full stroke 20 ms,
/// average 11 ms), scaled to the 15 ms average.
pub const MK6006GAH_FULL_STROKE_NS: Nanos = 27_000_000;

/// Extra settle time of a write seek: 2 ms, the read/write difference of the
/// average seek in the IBM Travelstar 30GN/48GH specification (4200 rpm mobile
/// drives: 12 ms read, 14 ms write) and the Hitachi Travelstar 5K160 (11/13 ms).
pub const MK6006GAH_WRITE_SETTLE_NS: Nanos = 2_000_000;

/// Command overhead when the drive must go to the media: 1.0 ms, the value in
/// the IBM Travelstar 48GH/30GN/15GN specification (4200 rpm mobile drives,
/// "Command overhead (ms) 1.0").
pub const MK6006GAH_MISS_OVERHEAD_NS: Nanos = 1_000_000;

/// Command overhead for a buffer hit or a streaming continuation: 0.1 ms.
/// Assumption: the IBM Ultrastar 146Z10 specification gives < 30 µs for a cache
/// hit; we allow more for a PATA mobile drive and its host path.
pub const MK6006GAH_HIT_OVERHEAD_NS: Nanos = 100_000;

/// Rate of moving buffered data to the host: 33 MB/s. Assumption: the test
/// machine (a Chromebook) has no PATA port, so the drive sat behind a USB 2.0
/// bridge, which moves about 30-35 MB/s in bulk-only mass-storage transfers.
pub const MK6006GAH_HOST_BYTES_PER_S: f64 = 33.0e6;

/// 2 MB buffer (Tom's Hardware 2006: Toshiba's 1.8-inch 4200 rpm drives carry a
/// 2 MB cache), split into 4 read segments of 512 KB. The split is an
/// assumption: ATA drives segment their buffer adaptively and do not publish it.
pub const MK6006GAH_CACHE_SEGMENTS: usize = 4;
/// See [`MK6006GAH_CACHE_SEGMENTS`].
pub const MK6006GAH_SEGMENT_BYTES: u64 = 512 * 1024;

/// Parameters of a disk.
#[derive(Clone, Debug)]
pub struct HddParams {
    /// Preset name.
    pub name: &'static str,
    /// Human description.
    pub description: &'static str,
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Spindle speed.
    pub rpm: u32,
    /// Recording surfaces.
    pub heads: u32,
    /// Media transfer rate (bytes/s); sets sectors per track.
    pub media_bytes_per_s: f64,
    /// Seek of one cylinder.
    pub track_to_track_ns: Nanos,
    /// Seek of one third of the stroke (the datasheet average).
    pub avg_seek_ns: Nanos,
    /// Seek across the whole stroke.
    pub full_stroke_ns: Nanos,
    /// Added to every non-sequential write seek.
    pub write_settle_ns: Nanos,
    /// Command overhead when the media must be accessed.
    pub miss_overhead_ns: Nanos,
    /// Command overhead for a buffer hit or streaming continuation.
    pub hit_overhead_ns: Nanos,
    /// Buffer-to-host rate (bytes/s).
    pub host_bytes_per_s: f64,
    /// Read-ahead segments (1..=[`MAX_CACHE_SEGMENTS`]).
    pub cache_segments: usize,
    /// Bytes per segment; also the read-ahead limit.
    pub segment_bytes: u64,
    /// Command queue depth (1 = no NCQ/TCQ).
    pub queue_depth: usize,
    /// Per-stream read-ahead and write gathering in the buffer segments
    /// (see [`Streams`]); [`Streams::OFF`] keeps the one-stream buffer.
    pub streams: Streams,
}

/// How the drive's buffer segments follow several interleaved sequential
/// streams (SCSI drives of the `sas-10k` class; an ATA drive of the
/// `hdd-1.8in` class has it off).
///
/// - **Read** (`read_ahead`): a read that starts where a segment's data
///   ends continues that segment's stream. The drive serves it and keeps
///   prefetching into that segment until the segment holds `segment_bytes`
///   past the request's start, even if other commands are queued: the
///   following reads of the stream are buffer hits. Seagate's Adaptive Read
///   Look-Ahead: "as long as sequential read operations request contiguous
///   blocks of data, ARLA keeps prefetch enabled" (Savvio 10K.1/10K.4
///   product manuals, section 4.5.2 "Prefetch operation"). That a queued
///   command does not cut a detected stream's prefetch short is an
///   assumption: the manual does not say (mode page 08h's minimum
///   prefetch is the SCSI way to ask for it).
/// - **Write** (`write_gather`): with the write cache on (WCE=1), a write
///   that continues one of the segments' write streams is gathered in that
///   segment and written with the stream's earlier data: it costs its
///   media transfer, and one positioning (seek, settle, rotation) for every
///   `segment_bytes` of the stream, not one per write. "The same buffer
///   space and segmentation is used as set up for read functions" (the same
///   manuals, 4.5.1 "Caching write data"). Random writes are not reordered
///   by this model (each still costs its positioning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streams {
    /// Per-segment read-ahead of a detected sequential stream.
    pub read_ahead: bool,
    /// Gathering of interleaved sequential writes in their segments.
    pub write_gather: bool,
}

impl Streams {
    /// One stream at a time (the model before per-segment streams).
    pub const OFF: Streams = Streams {
        read_ahead: false,
        write_gather: false,
    };
}

/// The `hdd-1.8in` preset.
pub const MK6006GAH: HddParams = HddParams {
    name: "hdd-1.8in",
    description: "Toshiba MK6006GAH class 1.8-inch 60 GB 4200 rpm disk",
    capacity_sectors: MK6006GAH_CAPACITY_SECTORS,
    rpm: MK6006GAH_RPM,
    heads: MK6006GAH_HEADS,
    media_bytes_per_s: MK6006GAH_MEDIA_BYTES_PER_S,
    track_to_track_ns: MK6006GAH_TRACK_TO_TRACK_NS,
    avg_seek_ns: MK6006GAH_AVG_SEEK_NS,
    full_stroke_ns: MK6006GAH_FULL_STROKE_NS,
    write_settle_ns: MK6006GAH_WRITE_SETTLE_NS,
    miss_overhead_ns: MK6006GAH_MISS_OVERHEAD_NS,
    hit_overhead_ns: MK6006GAH_HIT_OVERHEAD_NS,
    host_bytes_per_s: MK6006GAH_HOST_BYTES_PER_S,
    cache_segments: MK6006GAH_CACHE_SEGMENTS,
    segment_bytes: MK6006GAH_SEGMENT_BYTES,
    // PATA/ZIF drive, no command queueing used.
    queue_depth: 1,
    // An ATA drive: its read-ahead stops at the next command (see the
    // module doc); not a SCSI drive's ARLA.
    streams: Streams::OFF,
};

// ---------------------------------------------------------------------------
// Preset `sas-10k`: a 2.5-inch 450 GB 10,000 rpm SAS disk, the local disk of
// the two-tier I/O scheduler study's HP DL380 G7 (HP ships it as "450GB 6G
// SAS 10K rpm SFF", a Seagate Savvio 10K.4 class drive, ST9450404SS).
// Values from the Savvio 10K.4 product manual/datasheet (Seagate publication
// 100549220) where it gives them; the rest are marked as assumptions.
// ---------------------------------------------------------------------------

/// 450 GB: IDEMA LBA1-03, `97,696,368 + 1,953,504 * (450 - 50)` sectors.
pub const SAS10K_CAPACITY_SECTORS: u64 = 879_097_968;

/// 10,000 rpm (Savvio 10K.4 datasheet: "Spindle speed 10K rpm"; average
/// latency 2.9 ms, half a 6 ms revolution).
pub const SAS10K_RPM: u32 = 10_000;

/// Recording surfaces: 6 (three platters of 150 GB). Assumption: Seagate's
/// datasheet gives disks/heads only for the 600 GB model (3 disks, 6 heads);
/// the 450 GB model may use fewer heads with the same zoning.
pub const SAS10K_HEADS: u32 = 6;

/// Sustained media rate 141 MB/s at the outer zone (Savvio 10K.4
/// datasheet, "Sustained transfer rate, OD 141 MB/s").
pub const SAS10K_MEDIA_BYTES_PER_S: f64 = 141.0e6;

/// Average read seek 3.9 ms (Savvio 10K.4 datasheet, "Average seek read
/// 3.9 ms, write 4.5 ms").
pub const SAS10K_AVG_SEEK_NS: Nanos = 3_900_000;

/// Track-to-track read seek 0.2 ms (Savvio 10K.4 datasheet, "Track-to-track
/// seek read 0.2 ms, write 0.4 ms").
pub const SAS10K_TRACK_TO_TRACK_NS: Nanos = 200_000;

/// Full-stroke seek 8 ms. Assumption: the datasheet does not give it; twice
/// the average, the ratio of the Savvio 15K.2 manual (2.9 ms average, 6.2 ms
/// full stroke, rounded).
pub const SAS10K_FULL_STROKE_NS: Nanos = 8_000_000;

/// Write settle 0.6 ms: the datasheet's write minus read average seek
/// (4.5 - 3.9 ms).
pub const SAS10K_WRITE_SETTLE_NS: Nanos = 600_000;

/// Command overhead to the media: 0.2 ms. Assumption: SCSI/SAS drives of
/// the period quote 0.1-0.3 ms (IBM Ultrastar 146Z10 specification: "command
/// overhead < 0.3 ms").
pub const SAS10K_MISS_OVERHEAD_NS: Nanos = 200_000;

/// Command overhead for a buffer hit: 30 us (IBM Ultrastar 146Z10
/// specification: "< 30 us" for a cache hit, the same value the `hdd-1.8in`
/// preset cites as a lower bound).
pub const SAS10K_HIT_OVERHEAD_NS: Nanos = 30_000;

/// Buffer-to-host rate: 6 Gb/s SAS, 600 MB/s after 8b/10b coding
/// (datasheet, "Interface 6Gb/s SAS").
pub const SAS10K_HOST_BYTES_PER_S: f64 = 600.0e6;

/// 16 MB buffer (datasheet, "Cache 16 MB"), of which "approximately
/// 13,000KB can be used as a cache" (Savvio 10K.4 product manual, section
/// 4.5 "Cache operation"; the same figure in the Cheetah 15K.7 SAS manual,
/// 100516226), as 8 segments of 1,625 KB. The count of 8 is an assumption:
/// the manual's mode page 08h default table was not found, and 8 is this
/// model's most ([`MAX_CACHE_SEGMENTS`]), one per thread of the study's
/// 8-thread runs.
pub const SAS10K_CACHE_SEGMENTS: usize = 8;
/// See [`SAS10K_CACHE_SEGMENTS`]: 13,000 KB / 8.
pub const SAS10K_SEGMENT_BYTES: u64 = 13_000 * 1024 / 8;

/// A SCSI drive's per-segment streams: Adaptive Read Look-Ahead (Savvio
/// product manuals, 4.5.2) and write caching, which uses the read segments
/// (4.5.1). That the write cache is on (WCE=1) is an assumption: the
/// default mode page 08h values are a hex table in the Savvio 10K.4 SAS
/// manual (100539221, 12.3.2) that was not read here, and an HP Smart
/// Array controller may turn the drive's cache off. See [`Streams`].
pub const SAS10K_STREAMS: Streams = Streams {
    read_ahead: true,
    write_gather: true,
};

/// Tagged command queueing depth 32: the queue depth Linux's `hpsa` and
/// `mpt2sas` drivers give a SAS disk by default (`sdev->queue_depth`); the
/// drive itself accepts up to 64 tags.
pub const SAS10K_QUEUE_DEPTH: usize = 32;

/// The `sas-10k` preset.
pub const SAS10K: HddParams = HddParams {
    name: "sas-10k",
    description: "Seagate Savvio 10K.4 class 2.5-inch 450 GB 10,000 rpm SAS disk",
    capacity_sectors: SAS10K_CAPACITY_SECTORS,
    rpm: SAS10K_RPM,
    heads: SAS10K_HEADS,
    media_bytes_per_s: SAS10K_MEDIA_BYTES_PER_S,
    track_to_track_ns: SAS10K_TRACK_TO_TRACK_NS,
    avg_seek_ns: SAS10K_AVG_SEEK_NS,
    full_stroke_ns: SAS10K_FULL_STROKE_NS,
    write_settle_ns: SAS10K_WRITE_SETTLE_NS,
    miss_overhead_ns: SAS10K_MISS_OVERHEAD_NS,
    hit_overhead_ns: SAS10K_HIT_OVERHEAD_NS,
    host_bytes_per_s: SAS10K_HOST_BYTES_PER_S,
    cache_segments: SAS10K_CACHE_SEGMENTS,
    segment_bytes: SAS10K_SEGMENT_BYTES,
    queue_depth: SAS10K_QUEUE_DEPTH,
    streams: SAS10K_STREAMS,
};

/// The parameters of an HDD preset that a calibration may set
/// ([`HddParams::set`]; `tandem sim run --hdd-param NAME=VALUE`), with
/// their units. Capacity and surfaces are left out: they place files, and a
/// calibration against published start-up times should not move them.
pub const HDD_PARAM_NAMES: &[(&str, &str)] = &[
    ("rpm", "revolutions per minute"),
    (
        "media_mb_s",
        "MB/s streamed from the platter; sets sectors per track",
    ),
    ("track_to_track_ms", "ms, seek of one cylinder"),
    ("avg_seek_ms", "ms, seek of a third of the stroke"),
    ("full_stroke_ms", "ms, seek across the stroke"),
    ("write_settle_ms", "ms added to a write seek"),
    (
        "miss_overhead_ms",
        "ms of command overhead when the media is read",
    ),
    ("hit_overhead_ms", "ms of command overhead for a buffer hit"),
    ("host_mb_s", "MB/s from the drive's buffer to the host"),
    ("cache_segments", "read-ahead buffer segments, 1 to 8"),
    ("segment_kib", "KiB per buffer segment"),
];

fn ms_to_ns(v: f64) -> Nanos {
    (v * 1e6).round() as Nanos
}

impl HddParams {
    /// Sets one parameter by its name in [`HDD_PARAM_NAMES`]. The error
    /// names the parameter, the value and what is accepted.
    pub fn set(&mut self, name: &str, value: f64) -> Result<(), String> {
        if !value.is_finite() || value <= 0.0 {
            return Err(format!(
                "{name}={value}: the value must be a positive number"
            ));
        }
        let whole = |max: f64| -> Result<f64, String> {
            if value.fract() != 0.0 || value > max {
                Err(format!(
                    "{name}={value}: a whole number from 1 to {max} is accepted"
                ))
            } else {
                Ok(value)
            }
        };
        match name {
            "rpm" => self.rpm = whole(100_000.0)? as u32,
            "media_mb_s" => self.media_bytes_per_s = value * 1e6,
            "track_to_track_ms" => self.track_to_track_ns = ms_to_ns(value),
            "avg_seek_ms" => self.avg_seek_ns = ms_to_ns(value),
            "full_stroke_ms" => self.full_stroke_ns = ms_to_ns(value),
            "write_settle_ms" => self.write_settle_ns = ms_to_ns(value),
            "miss_overhead_ms" => self.miss_overhead_ns = ms_to_ns(value),
            "hit_overhead_ms" => self.hit_overhead_ns = ms_to_ns(value),
            "host_mb_s" => self.host_bytes_per_s = value * 1e6,
            "cache_segments" => self.cache_segments = whole(MAX_CACHE_SEGMENTS as f64)? as usize,
            "segment_kib" => self.segment_bytes = whole(1024.0 * 1024.0)? as u64 * 1024,
            _ => {
                let names: Vec<&str> = HDD_PARAM_NAMES.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unknown HDD parameter \"{name}\"; known: {}",
                    names.join(", ")
                ));
            }
        }
        self.validate()
    }

    /// Checks what the seek curve needs: track-to-track <= average <=
    /// full stroke, as every datasheet has them.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.track_to_track_ns <= self.avg_seek_ns && self.avg_seek_ns <= self.full_stroke_ns)
        {
            return Err(format!(
                "seek times out of order: track_to_track_ms {} <= avg_seek_ms {} <= \
                 full_stroke_ms {} is needed",
                self.track_to_track_ns as f64 / 1e6,
                self.avg_seek_ns as f64 / 1e6,
                self.full_stroke_ns as f64 / 1e6
            ));
        }
        Ok(())
    }
}

/// How a disk request was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AccessKind {
    /// Entirely from the read-ahead buffer.
    CacheHit,
    /// Continued the stream the drive was reading: no seek, no rotational wait.
    Stream,
    /// Started in a buffer segment, the rest needed a seek.
    PartialHit,
    /// Seek + rotational wait + transfer.
    #[default]
    Miss,
    /// Continued the previous write.
    SeqWrite,
    /// Continued an earlier write stream, gathered in its buffer segment
    /// ([`Streams::write_gather`]).
    GatheredWrite,
}

/// Where the time of the last started request went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    /// How it was served.
    pub kind: AccessKind,
    /// Command overhead.
    pub overhead: Nanos,
    /// Seek (including write settle).
    pub seek: Nanos,
    /// Rotational wait.
    pub rotation: Nanos,
    /// Media or buffer transfer.
    pub transfer: Nanos,
    /// Seek distance in cylinders.
    pub distance: u64,
}

const NO_SEG: usize = usize::MAX;
const NO_SECTOR: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u64,
    end: u64,
    stamp: u64,
    valid: bool,
}

const EMPTY_SEGMENT: Segment = Segment {
    start: 0,
    end: 0,
    stamp: 0,
    valid: false,
};

/// A sequential write stream the buffer gathers ([`Streams::write_gather`]).
#[derive(Clone, Copy, Debug)]
struct WriteStream {
    /// Sector after the stream's last write.
    end: u64,
    /// Sectors gathered since the stream last paid a positioning.
    gathered: u64,
    stamp: u64,
    valid: bool,
}

const NO_WRITE_STREAM: WriteStream = WriteStream {
    end: NO_SECTOR,
    gathered: 0,
    stamp: 0,
    valid: false,
};

struct Plan {
    service: Nanos,
    seg: usize,
    bd: Breakdown,
    /// The read continues segment `seg`'s stream: its prefetch is kept
    /// ([`Streams::read_ahead`]).
    stream: bool,
}

/// A disk model built from [`HddParams`].
pub struct HddModel {
    info: DeviceInfo,
    // geometry and timing (derived)
    rotation_ns: Nanos,
    sectors_per_track: u64,
    sectors_per_cyl: u64,
    cylinders: u64,
    ns_per_sector: Nanos,
    host_ps_per_byte: u64,
    seg_sectors: u64,
    nsegs: usize,
    seek_t2t: f64,
    seek_avg: f64,
    seek_full: f64,
    seek_boundary: f64,
    seek_sqrt_boundary: f64,
    write_settle_ns: Nanos,
    miss_overhead_ns: Nanos,
    hit_overhead_ns: Nanos,
    streams: Streams,
    // state
    head_cyl: u64,
    segs: [Segment; MAX_CACHE_SEGMENTS],
    stamp: u64,
    active: usize,
    active_t0: Nanos,
    active_e0: u64,
    write_end: u64,
    /// Until when the active read-ahead runs whatever comes (a detected
    /// stream's prefetch, [`Streams::read_ahead`]); 0: none.
    prefetch_until: Nanos,
    wstreams: [WriteStream; MAX_CACHE_SEGMENTS],
    last: Breakdown,
}

impl HddModel {
    /// Build a disk from its parameters.
    pub fn new(p: &HddParams) -> HddModel {
        let rotation_ns = (60_000_000_000u64 / p.rpm.max(1) as u64).max(1);
        let spt = ((p.media_bytes_per_s * rotation_ns as f64 / 1e9) / SECTOR_BYTES as f64)
            .round()
            .max(1.0) as u64;
        let ns_per_sector = (rotation_ns / spt).max(1);
        let sectors_per_cyl = spt * p.heads.max(1) as u64;
        let cylinders = p.capacity_sectors.div_ceil(sectors_per_cyl).max(2);
        let nsegs = p.cache_segments.clamp(1, MAX_CACHE_SEGMENTS);
        let seg_sectors = (p.segment_bytes / SECTOR_BYTES).max(1);
        let seek_boundary = ((cylinders - 1) as f64 / 3.0).max(2.0);
        let host_ps_per_byte = crate::ps_per_byte(p.host_bytes_per_s);
        let mut m = HddModel {
            info: DeviceInfo {
                name: p.name.to_string(),
                description: p.description.to_string(),
                capacity_sectors: p.capacity_sectors,
                rotational: true,
                peak_read_bytes_per_s: 0.0,
                default_queue_depth: p.queue_depth.max(1),
            },
            rotation_ns,
            sectors_per_track: spt,
            sectors_per_cyl,
            cylinders,
            ns_per_sector,
            host_ps_per_byte,
            seg_sectors,
            nsegs,
            seek_t2t: p.track_to_track_ns as f64,
            seek_avg: p.avg_seek_ns as f64,
            seek_full: p.full_stroke_ns as f64,
            seek_boundary,
            seek_sqrt_boundary: seek_boundary.sqrt(),
            write_settle_ns: p.write_settle_ns,
            miss_overhead_ns: p.miss_overhead_ns,
            hit_overhead_ns: p.hit_overhead_ns,
            streams: p.streams,
            head_cyl: 0,
            segs: [EMPTY_SEGMENT; MAX_CACHE_SEGMENTS],
            stamp: 0,
            active: NO_SEG,
            active_t0: 0,
            active_e0: 0,
            write_end: NO_SECTOR,
            prefetch_until: 0,
            wstreams: [NO_WRITE_STREAM; MAX_CACHE_SEGMENTS],
            last: Breakdown::default(),
        };
        // Steady state of one reader streaming 128 KiB requests: each request
        // takes the longer of (hit overhead + host transfer) and media time.
        let n = crate::PEAK_REQUEST_BYTES;
        let media = (n / SECTOR_BYTES) * ns_per_sector;
        let host = m.hit_overhead_ns + xfer_ns(n, host_ps_per_byte);
        m.info.peak_read_bytes_per_s = n as f64 * 1e9 / media.max(host) as f64;
        m
    }

    /// Revolution time.
    pub fn rotation_ns(&self) -> Nanos {
        self.rotation_ns
    }

    /// Sectors per track.
    pub fn sectors_per_track(&self) -> u64 {
        self.sectors_per_track
    }

    /// Number of cylinders.
    pub fn cylinders(&self) -> u64 {
        self.cylinders
    }

    /// Cylinder holding `sector` (clamped to the last cylinder).
    #[inline]
    pub fn cylinder_of(&self, sector: u64) -> u64 {
        (sector / self.sectors_per_cyl).min(self.cylinders - 1)
    }

    /// Seek time for a distance of `d` cylinders (0 for no movement).
    pub fn seek_time(&self, d: u64) -> Nanos {
        if d == 0 {
            return 0;
        }
        let x = d as f64;
        let t = if x <= self.seek_boundary {
            // a + b*sqrt(d): t2t at d = 1, average at the boundary.
            self.seek_t2t
                + (self.seek_avg - self.seek_t2t) * (x.sqrt() - 1.0)
                    / (self.seek_sqrt_boundary - 1.0)
        } else {
            // linear from the average at the boundary to the full stroke.
            let span = ((self.cylinders - 1) as f64 - self.seek_boundary).max(1.0);
            self.seek_avg + (self.seek_full - self.seek_avg) * (x - self.seek_boundary) / span
        };
        t.round().max(0.0) as Nanos
    }

    /// Time from `t` until `sector` passes under the head.
    #[inline]
    pub fn rotational_wait(&self, sector: u64, t: Nanos) -> Nanos {
        let target = (sector % self.sectors_per_track) * self.ns_per_sector;
        let phase = t % self.rotation_ns;
        (target + self.rotation_ns - phase) % self.rotation_ns
    }

    /// Where the time of the last started request went.
    pub fn last_breakdown(&self) -> Breakdown {
        self.last
    }

    /// End of the active read-ahead stream at `now`, and whether it stopped
    /// because the segment is full (or the disk ended).
    #[inline]
    fn active_end(&self, now: Nanos) -> (u64, bool) {
        let room = self
            .seg_sectors
            .min(self.info.capacity_sectors.saturating_sub(self.active_e0));
        let grown = now.saturating_sub(self.active_t0) / self.ns_per_sector;
        if grown >= room {
            (self.active_e0 + room, true)
        } else {
            (self.active_e0 + grown, false)
        }
    }

    /// Cached range of segment `i` at `now`.
    #[inline]
    fn window(&self, i: usize, now: Nanos) -> (u64, u64) {
        let s = &self.segs[i];
        if i == self.active {
            let (end, _) = self.active_end(now);
            (s.start.max(end.saturating_sub(self.seg_sectors)), end)
        } else {
            (s.start, s.end)
        }
    }

    #[inline]
    fn head_now(&self, now: Nanos) -> u64 {
        if self.active != NO_SEG {
            let (end, _) = self.active_end(now);
            self.cylinder_of(end.saturating_sub(1))
        } else {
            self.head_cyl
        }
    }

    /// Seek + rotational wait to reach `target`, leaving at `t`.
    #[inline]
    fn position(&self, from_cyl: u64, target: u64, t: Nanos, write: bool) -> (Nanos, Nanos, u64) {
        let to = self.cylinder_of(target);
        let d = from_cyl.abs_diff(to);
        let mut seek = self.seek_time(d);
        if write {
            seek += self.write_settle_ns;
        }
        let rot = self.rotational_wait(target, t + seek);
        (seek, rot, d)
    }

    /// When the head can leave for another position: at `now`, or when a
    /// detected stream's prefetch ends ([`Streams::read_ahead`]).
    #[inline]
    fn head_free(&self, now: Nanos) -> Nanos {
        if self.active != NO_SEG {
            now.max(self.prefetch_until)
        } else {
            now
        }
    }

    /// A read or write that needs the media at `from`; `stream`: it continues
    /// segment `seg`'s read stream. The wait for a running prefetch counts
    /// as overhead.
    fn miss(&self, req: &IoRequest, from: u64, now: Nanos, seg: usize, stream: bool) -> Plan {
        let write = req.dir == Direction::Write;
        let t = self.head_free(now);
        let oh = self.miss_overhead_ns + (t - now);
        let (seek, rot, d) = self.position(self.head_now(t), from, now + oh, write);
        let transfer = req.end().saturating_sub(from) * self.ns_per_sector;
        let kind = if from == req.sector {
            AccessKind::Miss
        } else {
            AccessKind::PartialHit
        };
        Plan {
            service: oh + seek + rot + transfer,
            seg,
            bd: Breakdown {
                kind,
                overhead: oh,
                seek,
                rotation: rot,
                transfer,
                distance: d,
            },
            stream,
        }
    }

    /// A write that continues gathered stream `k`: its transfer, and a
    /// positioning when the stream has gathered a segment's worth.
    fn gathered_write(&self, req: &IoRequest, k: usize, now: Nanos) -> Plan {
        let n = req.sectors as u64;
        let transfer = n * self.ns_per_sector;
        let oh = self.hit_overhead_ns;
        let (seek, rot, d) = if self.wstreams[k].gathered + n > self.seg_sectors {
            let t = self.head_free(now);
            let (seek, rot, d) = self.position(self.head_now(t), req.sector, t + oh, true);
            (seek + (t - now), rot, d)
        } else {
            (0, 0, 0)
        };
        Plan {
            service: oh + seek + rot + transfer,
            seg: k,
            bd: Breakdown {
                kind: AccessKind::GatheredWrite,
                overhead: oh,
                seek,
                rotation: rot,
                transfer,
                distance: d,
            },
            stream: false,
        }
    }

    fn plan(&self, req: &IoRequest, now: Nanos) -> Plan {
        let s = req.sector;
        let e = req.end();
        let n = req.sectors as u64;
        if req.dir == Direction::Write {
            if s == self.write_end {
                let transfer = n * self.ns_per_sector;
                return Plan {
                    service: self.hit_overhead_ns + transfer,
                    seg: NO_SEG,
                    bd: Breakdown {
                        kind: AccessKind::SeqWrite,
                        overhead: self.hit_overhead_ns,
                        transfer,
                        ..Breakdown::default()
                    },
                    stream: false,
                };
            }
            if self.streams.write_gather {
                if let Some(k) = self.wstreams[..self.nsegs]
                    .iter()
                    .position(|w| w.valid && w.end == s)
                {
                    return self.gathered_write(req, k, now);
                }
            }
            return self.miss(req, s, now, NO_SEG, false);
        }
        let host = xfer_ns(n * SECTOR_BYTES, self.host_ps_per_byte);
        let capped = self.active == NO_SEG || self.active_end(now).1;
        for i in 0..self.nsegs {
            if !self.segs[i].valid {
                continue;
            }
            let (ws, we) = self.window(i, now);
            if s < ws {
                continue;
            }
            if e <= we && (s < we || n == 0) {
                return Plan {
                    service: self.hit_overhead_ns + host,
                    seg: i,
                    bd: Breakdown {
                        kind: AccessKind::CacheHit,
                        overhead: self.hit_overhead_ns,
                        transfer: host,
                        ..Breakdown::default()
                    },
                    stream: false,
                };
            }
            // The stream the drive is reading right now serves a request that
            // starts in its buffer, at its front, or a little ahead of it (within
            // a track): the drive just keeps reading until the data is there.
            if i == self.active && !capped && s <= we + self.sectors_per_track {
                let media = (e - we) * self.ns_per_sector;
                let service = media.max(self.hit_overhead_ns + host);
                return Plan {
                    service,
                    seg: i,
                    bd: Breakdown {
                        kind: AccessKind::Stream,
                        overhead: service - media,
                        transfer: media,
                        ..Breakdown::default()
                    },
                    stream: false,
                };
            }
            let ra = self.streams.read_ahead;
            if s < we {
                return self.miss(req, we, now, i, ra);
            }
            // Starts where the segment's data ends: the segment's stream goes
            // on (ARLA); without per-stream read-ahead, a plain miss below.
            if ra && s == we {
                return self.miss(req, s, now, i, true);
            }
        }
        self.miss(req, s, now, NO_SEG, false)
    }

    /// Stop the running read-ahead at `now`, keeping what it has read.
    fn freeze_active(&mut self, now: Nanos) {
        if self.active != NO_SEG {
            let (end, _) = self.active_end(now);
            let seg = &mut self.segs[self.active];
            seg.end = end;
            seg.start = seg.start.max(end.saturating_sub(self.seg_sectors));
            self.head_cyl = self.cylinder_of(end.saturating_sub(1));
            self.active = NO_SEG;
        }
    }

    fn invalidate_overlaps(&mut self, s: u64, e: u64, keep: usize) {
        for (i, seg) in self.segs[..self.nsegs].iter_mut().enumerate() {
            if i != keep && seg.valid && seg.start < e && s < seg.end {
                seg.valid = false;
            }
        }
    }

    /// Record the write ending at `e` as a gathered write stream: the one it
    /// continues (a [`AccessKind::SeqWrite`]), or a new one in the least
    /// recently used slot.
    fn track_write_stream(&mut self, e: u64, n: u64) {
        let ws = &mut self.wstreams[..self.nsegs];
        let k = match ws.iter().position(|w| w.valid && w.end + n == e) {
            Some(k) => k,
            None => {
                let k = (0..ws.len())
                    .find(|&k| !ws[k].valid)
                    .unwrap_or_else(|| (0..ws.len()).min_by_key(|&k| ws[k].stamp).unwrap_or(0));
                ws[k].gathered = 0;
                k
            }
        };
        ws[k].end = e;
        ws[k].gathered += n;
        ws[k].stamp = self.stamp;
        ws[k].valid = true;
    }

    fn victim(&self) -> usize {
        let mut best = 0;
        for i in 0..self.nsegs {
            if !self.segs[i].valid {
                return i;
            }
            if self.segs[i].stamp < self.segs[best].stamp {
                best = i;
            }
        }
        best
    }
}

impl ServiceModel for HddModel {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn parallelism(&self) -> usize {
        1
    }

    fn unit_for(&self, _req: &IoRequest) -> Option<usize> {
        None
    }

    fn access_cost(&self, _unit: usize, req: &IoRequest, now: Nanos) -> Nanos {
        self.plan(req, now).service
    }

    fn start(&mut self, _unit: usize, req: &IoRequest, now: Nanos) -> Nanos {
        let plan = self.plan(req, now);
        let s = req.sector;
        let e = req.end();
        let done = now + plan.service;
        self.stamp += 1;
        match plan.bd.kind {
            AccessKind::CacheHit => {
                // Served from the buffer; any running read-ahead continues.
                self.segs[plan.seg].stamp = self.stamp;
            }
            AccessKind::Stream => {
                let seg = &mut self.segs[plan.seg];
                seg.end = e;
                seg.start = seg.start.max(e.saturating_sub(self.seg_sectors));
                seg.stamp = self.stamp;
                self.active_e0 = e;
                self.active_t0 = done;
                self.write_end = NO_SECTOR;
            }
            AccessKind::PartialHit | AccessKind::Miss if req.dir == Direction::Read => {
                // The running read-ahead stops when the head leaves (after a
                // detected stream's prefetch), keeping what it read.
                self.freeze_active(self.head_free(now));
                let i = if plan.seg != NO_SEG {
                    plan.seg
                } else {
                    self.victim()
                };
                let start = if plan.seg != NO_SEG {
                    self.segs[i].start
                } else {
                    s
                };
                self.segs[i] = Segment {
                    start: start.max(e.saturating_sub(self.seg_sectors)),
                    end: e,
                    stamp: self.stamp,
                    valid: true,
                };
                self.invalidate_overlaps(s, e, i);
                self.active = i;
                self.active_e0 = e;
                self.active_t0 = done;
                // A detected stream prefetches until its segment holds a
                // segment's worth from the request on.
                self.prefetch_until = if plan.stream {
                    done + (s + self.seg_sectors).saturating_sub(e) * self.ns_per_sector
                } else {
                    0
                };
                self.head_cyl = self.cylinder_of(e.saturating_sub(1));
                self.write_end = NO_SECTOR;
            }
            AccessKind::GatheredWrite => {
                // Gathered in the buffer: the drive writes it with its
                // stream, so the head moves only when the stream paid a
                // positioning; buffered copies of the range are dropped.
                let w = &mut self.wstreams[plan.seg];
                w.end = e;
                w.stamp = self.stamp;
                if plan.bd.seek + plan.bd.rotation > 0 {
                    w.gathered = req.sectors as u64;
                    self.freeze_active(self.head_free(now));
                    self.head_cyl = self.cylinder_of(e.saturating_sub(1));
                } else {
                    w.gathered += req.sectors as u64;
                }
                self.invalidate_overlaps(s, e, NO_SEG);
            }
            _ => {
                // Writes: the head goes to the written range; read-ahead stops
                // and buffered copies of the range are dropped.
                self.freeze_active(self.head_free(now));
                self.invalidate_overlaps(s, e, NO_SEG);
                self.head_cyl = self.cylinder_of(e.saturating_sub(1));
                self.write_end = e;
                if self.streams.write_gather {
                    self.track_write_stream(e, req.sectors as u64);
                }
            }
        }
        self.last = plan.bd;
        plan.service
    }

    fn reset(&mut self) {
        self.head_cyl = 0;
        self.segs = [EMPTY_SEGMENT; MAX_CACHE_SEGMENTS];
        self.stamp = 0;
        self.active = NO_SEG;
        self.active_t0 = 0;
        self.active_e0 = 0;
        self.write_end = NO_SECTOR;
        self.prefetch_until = 0;
        self.wstreams = [NO_WRITE_STREAM; MAX_CACHE_SEGMENTS];
        self.last = Breakdown::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> HddModel {
        HddModel::new(&MK6006GAH)
    }

    #[test]
    fn geometry_follows_media_rate() {
        let d = disk();
        assert_eq!(d.rotation_ns(), 14_285_714);
        assert_eq!(d.sectors_per_track(), 279);
        assert!(d.cylinders() > 100_000 && d.cylinders() < 110_000);
    }

    #[test]
    fn seek_curve_hits_its_anchors() {
        let d = disk();
        assert_eq!(d.seek_time(0), 0);
        assert_eq!(d.seek_time(1), MK6006GAH_TRACK_TO_TRACK_NS);
        let third = ((d.cylinders() - 1) as f64 / 3.0).round() as u64;
        let avg = d.seek_time(third) as i64;
        assert!((avg - MK6006GAH_AVG_SEEK_NS as i64).abs() < 10_000, "{avg}");
        assert_eq!(d.seek_time(d.cylinders() - 1), MK6006GAH_FULL_STROKE_NS);
        // monotone
        let mut prev = 0;
        for k in 0..2000u64 {
            let t = d.seek_time(k * (d.cylinders() / 2000));
            assert!(t >= prev);
            prev = t;
        }
    }

    #[test]
    fn rotational_wait_is_time_based() {
        let d = disk();
        let r = d.rotation_ns();
        let w0 = d.rotational_wait(100, 0);
        // one full revolution later, the same wait
        assert_eq!(d.rotational_wait(100, r), w0);
        // a little later, a little less wait (until wrap-around)
        assert_eq!(d.rotational_wait(100, 1000), w0 - 1000);
        assert!(w0 < r);
    }

    #[test]
    fn peak_is_the_paper_rate() {
        let d = disk();
        let p = d.info().peak_read_bytes_per_s;
        assert!((p - 10.0e6).abs() / 10.0e6 < 0.01, "{p}");
    }
}
