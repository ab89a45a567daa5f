//! Storage device models for tandem: the service time of a request given the
//! device state.
//!
//! The crate has two layers:
//!
//! - [`ServiceModel`]: the medium. Given the current state (head position and
//!   rotational phase for a disk, read-ahead streams, open erase blocks and a
//!   shared data path for flash) it says how long a request takes, and updates
//!   the state. Models are deterministic: the same sequence of calls gives the
//!   same answers. There is no random number generator anywhere; a disk's
//!   rotational position is computed from the time.
//! - [`Device`]: a model plus the device's own command queue (NCQ/TCQ) of a
//!   given depth. It starts commands on free internal units, queues the others,
//!   and reports completions in time order.
//!
//! Presets ([`PRESETS`], [`preset`]) give the six devices tandem uses. Each
//! parameter is a named constant in [`hdd`] or [`flash`] with a comment naming
//! its source.
//!
//! # Using a `Device` from a discrete-event simulator
//!
//! ```
//! use devmodel::{preset, Device, Direction, IoRequest};
//!
//! let model = preset("hdd-1.8in").unwrap();
//! let depth = model.info().default_queue_depth;
//! let mut dev = Device::new(model, depth);
//! dev.submit(0, 7, IoRequest { sector: 0, sectors: 256, dir: Direction::Read });
//! let t = dev.next_completion().unwrap();       // schedule an event at t
//! assert_eq!(dev.pop_completed(t), Some(7));    // ... and at t collect it
//! ```
//!
//! # Using a `Device` in real time (device emulator)
//!
//! An emulator maps wall-clock time to the model's nanoseconds, submits each
//! request when it arrives, and sleeps until the next modelled completion. See
//! `examples/realtime.rs` for a runnable version.
//!
//! ```no_run
//! use devmodel::{preset, Device, Direction, IoRequest, Nanos};
//! use std::time::{Duration, Instant};
//!
//! let model = preset("microsd-class6").unwrap();
//! let mut dev = Device::new(model, 1);
//! let epoch = Instant::now();
//! let now = |e: Instant| e.elapsed().as_nanos() as Nanos;
//!
//! // A request arrives (from FUSE, say): hand it to the model.
//! dev.submit(now(epoch), 1, IoRequest { sector: 2048, sectors: 8, dir: Direction::Read });
//! // Serve the data from the backing file, then sleep until the modelled completion
//! // before answering the caller.
//! while let Some(t) = dev.next_completion() {
//!     let n = now(epoch);
//!     if t > n {
//!         std::thread::sleep(Duration::from_nanos(t - n));
//!     }
//!     while let Some(tag) = dev.pop_completed(now(epoch)) {
//!         println!("request {tag} done"); // reply to the caller here
//!     }
//! }
//! ```

use std::fmt;

mod device;
pub mod flash;
pub mod hdd;
pub mod heap;

pub use device::{Device, LOOP_TAG_DEPTH, SPTF_AGE_DIVISOR};
pub use flash::{FlashModel, FlashParams};
pub use hdd::{AccessKind, Breakdown, HddModel, HddParams, Streams, HDD_PARAM_NAMES};

/// Time in nanoseconds (the simulator's clock).
pub type Nanos = u64;

/// Bytes per logical sector. All request addresses and sizes are in these units.
pub const SECTOR_BYTES: u64 = 512;

/// Request size used to define [`DeviceInfo::peak_read_bytes_per_s`]: 128 KiB,
/// Linux's default read-ahead window (`VM_READAHEAD_PAGES`, 128 KiB).
pub const PEAK_REQUEST_BYTES: u64 = 128 * 1024;

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Read from the device.
    Read,
    /// Write to the device.
    Write,
}

/// A command as the device sees it: a range of 512-byte sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// First sector.
    pub sector: u64,
    /// Length in sectors.
    pub sectors: u32,
    /// Read or write.
    pub dir: Direction,
}

impl IoRequest {
    /// One past the last sector.
    #[inline]
    pub fn end(&self) -> u64 {
        self.sector.saturating_add(self.sectors as u64)
    }

    /// Length in bytes.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.sectors as u64 * SECTOR_BYTES
    }
}

/// What a device is, as the rest of tandem needs to know it.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Preset name, e.g. "hdd-1.8in".
    pub name: String,
    /// e.g. "Toshiba MK6006GAH class 1.8-inch 4200 rpm disk".
    pub description: String,
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// True for spinning disks (Linux's `queue/rotational`).
    pub rotational: bool,
    /// The sequential read rate (bytes/s, MB = 10^6 bytes) that one reader
    /// issuing back-to-back 128 KiB reads at queue depth 1 reaches on this model,
    /// with no host-side gap between a completion and the next submission.
    pub peak_read_bytes_per_s: f64,
    /// The device's own command queue (NCQ/TCQ depth; 1 = no command queueing).
    pub default_queue_depth: usize,
}

/// The one trait: service time of a request from the device state
/// (head position, last access, internal parallel units).
pub trait ServiceModel: Send {
    /// Static description of the device.
    fn info(&self) -> &DeviceInfo;
    /// How many requests the medium serves at once (1 for a disk head;
    /// channels/dies/planes for flash).
    fn parallelism(&self) -> usize;
    /// Which unit must serve this request (flash striping), or None if any free unit can.
    fn unit_for(&self, req: &IoRequest) -> Option<usize>;
    /// Estimated cost of serving `req` next on `unit` from the current state,
    /// without changing state. Used to pick among queued commands
    /// (shortest-positioning-time-first for disks with NCQ).
    fn access_cost(&self, unit: usize, req: &IoRequest, now: Nanos) -> Nanos;
    /// Start serving `req` on `unit` at `now`; returns the service duration (ns)
    /// and updates the state. Calls must come in non-decreasing `now` order.
    fn start(&mut self, unit: usize, req: &IoRequest, now: Nanos) -> Nanos;
    /// Return to the initial state (head at sector 0, caches and streams empty).
    /// The default does nothing; every model in this crate overrides it.
    fn reset(&mut self) {}
}

/// The preset names [`preset`] accepts.
pub const PRESETS: &[&str] = &[
    "hdd-1.8in",
    "microsd-class6",
    "emmc",
    "ssd-sata",
    "nvme",
    "sas-10k",
];

/// A device preset name that is not in [`PRESETS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPreset {
    /// The name that was asked for.
    pub name: String,
}

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown device preset {:?}; accepted: {}",
            self.name,
            PRESETS.join(", ")
        )
    }
}

impl std::error::Error for UnknownPreset {}

/// Build the model for a preset name (see [`PRESETS`]).
pub fn preset(name: &str) -> Result<Box<dyn ServiceModel>, UnknownPreset> {
    if let Some(p) = hdd_preset_params(name) {
        return Ok(Box::new(HddModel::new(&p)));
    }
    match name {
        "microsd-class6" => Ok(Box::new(FlashModel::new(&flash::MICROSD_CLASS6))),
        "emmc" => Ok(Box::new(FlashModel::new(&flash::EMMC_SEM16G))),
        "ssd-sata" => Ok(Box::new(FlashModel::new(&flash::SSD_850EVO))),
        "nvme" => Ok(Box::new(FlashModel::new(&flash::NVME_970EVO))),
        _ => Err(UnknownPreset {
            name: name.to_string(),
        }),
    }
}

/// The parameters of an HDD preset, for calibration (see
/// [`HddParams::set`]); `None` for the flash presets and unknown names.
pub fn hdd_preset_params(name: &str) -> Option<HddParams> {
    match name {
        "hdd-1.8in" => Some(hdd::MK6006GAH),
        "sas-10k" => Some(hdd::SAS10K),
        _ => None,
    }
}

/// Parses one `NAME=VALUE` HDD parameter setting (`--hdd-param`) and
/// checks it on every HDD preset.
pub fn parse_hdd_param(s: &str) -> Result<(String, f64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("\"{s}\": NAME=VALUE expected, e.g. avg_seek_ms=18"))?;
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("\"{s}\": \"{value}\" is not a number"))?;
    let setting = (name.trim().to_string(), v);
    check_on_hdd_presets(std::slice::from_ref(&setting))?;
    Ok(setting)
}

/// Parses `NAME=VALUE` HDD parameter settings, in order, and checks them
/// together on every HDD preset (one may put the seek times out of order
/// only with another).
pub fn parse_hdd_params<S: AsRef<str>>(list: &[S]) -> Result<Vec<(String, f64)>, String> {
    let settings = list
        .iter()
        .map(|s| parse_hdd_param(s.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    check_on_hdd_presets(&settings)?;
    Ok(settings)
}

/// Settings are accepted when some HDD preset takes them all: the HDD
/// presets differ by far (a 4200 rpm 1.8-inch disk, a 10k rpm SAS disk), so
/// seeks that fit one may be out of order on the other; building that
/// preset with them ([`preset_with_hdd_params`]) is then the error.
fn check_on_hdd_presets(settings: &[(String, f64)]) -> Result<(), String> {
    let mut first_err = None;
    for name in PRESETS {
        if let Some(mut p) = hdd_preset_params(name) {
            match settings.iter().try_for_each(|(k, v)| p.set(k, *v)) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// The model of a preset with HDD parameters set, in order. The settings
/// apply to HDD presets only; a flash preset is built as it is.
pub fn preset_with_hdd_params(
    name: &str,
    settings: &[(String, f64)],
) -> Result<Box<dyn ServiceModel>, String> {
    match hdd_preset_params(name) {
        Some(mut p) if !settings.is_empty() => {
            for (k, v) in settings {
                p.set(k, *v)?;
            }
            Ok(Box::new(HddModel::new(&p)))
        }
        _ => preset(name).map_err(|e| e.to_string()),
    }
}

/// Time (ns) to move `bytes` at `ps_per_byte` picoseconds per byte.
#[inline]
pub(crate) fn xfer_ns(bytes: u64, ps_per_byte: u64) -> Nanos {
    (bytes.saturating_mul(ps_per_byte) + 500) / 1000
}

/// Picoseconds per byte for a rate in bytes/s (rounded).
pub(crate) fn ps_per_byte(bytes_per_s: f64) -> u64 {
    if bytes_per_s <= 0.0 || !bytes_per_s.is_finite() {
        return 0;
    }
    (1e12 / bytes_per_s).round().max(1.0) as u64
}
