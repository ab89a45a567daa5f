//! Measure an emulated device through its block device with O_DIRECT and set
//! the figures against what the model predicts for the same requests.
//!
//! The prediction replays the exact request sequence on a fresh
//! `devmodel::Device` of the same preset, back to back (each request submitted
//! when the previous one completes), as one process at queue depth 1 issues
//! them.

use std::fs::{File, OpenOptions};
use std::io::Seek;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use devmodel::{Device, Direction, IoRequest, Nanos, SECTOR_BYTES};

use crate::engine::CalibrationDelays;
use crate::{run_err, Error, Result};

/// What to measure.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Model to predict with (default: the one the device was brought up with).
    pub model: Option<String>,
    /// Bytes read sequentially (128 KiB requests).
    pub seq_bytes: u64,
    /// Number of random 4 KiB reads.
    pub rand_reads: u64,
    /// Seed of the random offsets.
    pub seed: u64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            model: None,
            seq_bytes: 64 << 20,
            rand_reads: 400,
            seed: 1,
        }
    }
}

/// The figures.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// Device probed.
    pub device: String,
    /// Model used for the prediction.
    pub model: String,
    /// Sequential read rate measured, MB/s (10^6 bytes).
    pub seq_mb_s: f64,
    /// Predicted by the model.
    pub seq_model_mb_s: Option<f64>,
    /// Random 4 KiB read IOPS measured.
    pub rand_iops: f64,
    /// Predicted by the model.
    pub rand_model_iops: Option<f64>,
    /// Daemon CPU seconds over the probe (user + system), if the daemon is known.
    pub cpu_s: Option<f64>,
    /// Bytes served over the probe.
    pub bytes: u64,
    /// Share of the machine's CPU time the hypervisor gave to others over the
    /// probe (`steal` in /proc/stat), when the machine is a virtual one.
    pub steal_share: Option<f64>,
}

/// Share of CPU time above which the probe warns that its figures reflect
/// the hypervisor's load: while a vCPU is descheduled the emulator's threads
/// and the loop driver cannot run, and every request it delays comes late.
/// Measured on this project's machine (`emmc`, 256 MiB and 3000 reads): with
/// 1% steal the probe missed the model by -1.4% sequential and -6.3% random;
/// with 4% to 5%, by -4% to -9% and -8% to -14%; with 12% to 24%, by -18% to
/// -31% and -22% to -49%.
pub const STEAL_WARN_SHARE: f64 = 0.01;

/// Measures the share of the machine's CPU time stolen by the hypervisor
/// between its start and each reading (`steal` over all ticks, /proc/stat).
pub struct StealMeter {
    start: Option<(u64, u64)>,
}

impl StealMeter {
    pub fn start() -> StealMeter {
        StealMeter { start: cpu_ticks() }
    }

    /// The stolen share since the start; `None` where /proc/stat has no
    /// steal column or no time has passed.
    pub fn share(&self) -> Option<f64> {
        let ((s0, t0), (s1, t1)) = self.start.zip(cpu_ticks())?;
        (t1 > t0).then(|| s1.saturating_sub(s0) as f64 / (t1 - t0) as f64)
    }
}

/// (steal, total) CPU ticks of the whole machine so far.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]; the
    // guest times are already counted in user and nice.
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 8).then(|| (v[7], v.iter().sum()))
}

impl ProbeReport {
    /// Relative deviation of the sequential rate from the model.
    pub fn seq_error(&self) -> Option<f64> {
        self.seq_model_mb_s.map(|m| self.seq_mb_s / m - 1.0)
    }

    /// Relative deviation of the random IOPS from the model.
    pub fn rand_error(&self) -> Option<f64> {
        self.rand_model_iops.map(|m| self.rand_iops / m - 1.0)
    }

    /// Text report.
    pub fn render(&self, o: &ProbeOptions) -> String {
        let pct = |e: Option<f64>| e.map_or(String::new(), |e| format!(" ({:+.1}%)", e * 100.0));
        let mut s = format!("device {} (model {})\n", self.device, self.model);
        s += &format!(
            "sequential read, 128 KiB O_DIRECT QD1, {} MiB: measured {:.2} MB/s, model {}{}\n",
            o.seq_bytes >> 20,
            self.seq_mb_s,
            self.seq_model_mb_s
                .map_or("-".into(), |m| format!("{m:.2} MB/s")),
            pct(self.seq_error())
        );
        s += &format!(
            "random read, 4 KiB O_DIRECT QD1, {} reads: measured {:.1} IOPS, model {}{}\n",
            o.rand_reads,
            self.rand_iops,
            self.rand_model_iops
                .map_or("-".into(), |m| format!("{m:.1} IOPS")),
            pct(self.rand_error())
        );
        if let Some(steal) = self.steal_share {
            s += &format!("CPU steal during the probe: {:.1}%", steal * 100.0);
            if steal > STEAL_WARN_SHARE {
                s += " (the hypervisor ran other guests on this machine's CPUs: the figures above include their delays)";
            }
            s += "\n";
        }
        if let Some(cpu) = self.cpu_s {
            let mb = self.bytes as f64 / 1e6;
            s += &format!(
                "emulator CPU: {:.3} s for {:.1} MB served, {:.2} ms per MB\n",
                cpu,
                mb,
                cpu * 1e3 / mb.max(1e-9)
            );
        }
        s
    }
}

/// O_DIRECT's alignment of buffers (the logical block size of every device
/// this probes is at most a page).
const DIRECT_ALIGN: usize = 4096;

/// A zeroed buffer aligned for O_DIRECT: a Vec one alignment longer than
/// needed, used from its first aligned byte on (no allocator calls of our own).
struct Aligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let buf = vec![0u8; len + DIRECT_ALIGN];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
        Aligned { buf, start, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

fn read_exact_at(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let n = f.read_at(&mut buf[got..], off + got as u64)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "end of device",
            ));
        }
        got += n;
    }
    Ok(())
}

/// CPU seconds (user + system) of a process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    use nix::unistd::{sysconf, SysconfVar};
    let hz = sysconf(SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1) as f64;
    Some(ticks as f64 / hz)
}

/// Random offsets (4 KiB aligned) over `size` bytes: xorshift64*, seeded.
fn offsets(n: u64, size: u64, seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let blocks = (size / 4096).max(1);
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % blocks) * 4096
        })
        .collect()
}

/// Model time (ns) for `reqs` issued back to back at queue depth 1.
fn model_time(model: &str, reqs: &[IoRequest]) -> Option<Nanos> {
    let m = devmodel::preset(model).ok()?;
    let mut dev = Device::new(m, 1);
    let mut t: Nanos = 0;
    for (i, r) in reqs.iter().enumerate() {
        dev.submit(t, i as u64, *r);
        t = dev.next_completion().expect("a running command");
        dev.pop_completed(t);
    }
    Some(t)
}

/// Probe `dev`. Needs root (O_DIRECT on a block device).
pub fn probe(dev: &str, o: &ProbeOptions) -> Result<ProbeReport> {
    crate::need_root(
        "tandem devemu probe",
        "it reads the block device directly, with O_DIRECT",
    )?;
    let inst = crate::control::find(dev).ok();
    let model = match (&o.model, &inst) {
        (Some(m), _) => {
            crate::check_model(m)?;
            m.clone()
        }
        (None, Some(i)) => i.model.clone(),
        (None, None) => {
            return Err(Error::Usage(format!(
                "{dev} is not a tandem devemu device: name the model to compare with (--model)"
            )))
        }
    };
    let path = if dev.starts_with('/') {
        dev.to_string()
    } else {
        format!("/dev/{dev}")
    };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Usage(format!("{path}: no such device"))
            } else {
                run_err(format!("opening {path} with O_DIRECT: {e}"))
            }
        })?;
    // A block device's size is where a seek to its end lands (a file's, too).
    let size = (&f)
        .seek(std::io::SeekFrom::End(0))
        .unwrap_or_else(|_| std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0));
    let chunk: u64 = 128 * 1024;
    let seq_bytes = (o.seq_bytes / chunk * chunk).clamp(chunk, size / chunk * chunk);
    if size < chunk * 2 {
        return Err(run_err(format!(
            "{path}: too small to probe ({size} bytes)"
        )));
    }
    let pid = inst.as_ref().map(|i| i.pid);
    let cpu0 = pid.and_then(cpu_seconds);
    let steal = StealMeter::start();

    // Sequential: from the start of the device, 128 KiB at a time.
    let mut buf = Aligned::new(chunk as usize);
    let t0 = Instant::now();
    let mut off = 0;
    while off < seq_bytes {
        read_exact_at(&f, buf.as_mut(), off)
            .map_err(|e| run_err(format!("reading {path}: {e}")))?;
        off += chunk;
    }
    let seq_s = t0.elapsed().as_secs_f64();
    let seq_reqs: Vec<IoRequest> = (0..seq_bytes / chunk)
        .map(|i| IoRequest {
            sector: i * chunk / SECTOR_BYTES,
            sectors: (chunk / SECTOR_BYTES) as u32,
            dir: Direction::Read,
        })
        .collect();
    let seq_model =
        model_time(&model, &seq_reqs).map(|t| seq_bytes as f64 / 1e6 / (t as f64 / 1e9));

    // Random 4 KiB reads over the whole device.
    let offs = offsets(o.rand_reads.max(1), size, o.seed);
    let mut small = Aligned::new(4096);
    let t0 = Instant::now();
    for &off in &offs {
        read_exact_at(&f, small.as_mut(), off)
            .map_err(|e| run_err(format!("reading {path}: {e}")))?;
    }
    let rand_s = t0.elapsed().as_secs_f64();
    let rand_reqs: Vec<IoRequest> = offs
        .iter()
        .map(|&o| IoRequest {
            sector: o / SECTOR_BYTES,
            sectors: 8,
            dir: Direction::Read,
        })
        .collect();
    let rand_model = model_time(&model, &rand_reqs).map(|t| offs.len() as f64 / (t as f64 / 1e9));
    let cpu1 = pid.and_then(cpu_seconds);
    let steal_share = steal.share();
    Ok(ProbeReport {
        device: path,
        model,
        seq_mb_s: seq_bytes as f64 / 1e6 / seq_s,
        seq_model_mb_s: seq_model,
        rand_iops: offs.len() as f64 / rand_s,
        rand_model_iops: rand_model,
        cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a),
        bytes: seq_bytes + offs.len() as u64 * 4096,
        steal_share,
    })
}

/// Sequential read throughput of `dev` with `jobs` threads reading disjoint
/// ranges of `bytes` each in `block`-byte O_DIRECT requests: the highest rate
/// the emulator sustains. Returns MB/s and daemon CPU seconds.
pub fn throughput(dev: &str, jobs: usize, block: u64, bytes: u64) -> Result<(f64, Option<f64>)> {
    crate::need_root(
        "tandem devemu probe",
        "it reads the block device directly, with O_DIRECT",
    )?;
    let path = if dev.starts_with('/') {
        dev.to_string()
    } else {
        format!("/dev/{dev}")
    };
    let pid = crate::control::find(dev).ok().map(|i| i.pid);
    let cpu0 = pid.and_then(cpu_seconds);
    let block = block.max(4096) / 4096 * 4096;
    let per = bytes / block * block;
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..jobs.max(1))
            .map(|j| {
                let path = path.clone();
                s.spawn(move || -> Result<()> {
                    let f = OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(&path)
                        .map_err(|e| run_err(format!("opening {path}: {e}")))?;
                    let mut buf = Aligned::new(block as usize);
                    let base = j as u64 * per;
                    let mut off = 0;
                    while off < per {
                        read_exact_at(&f, buf.as_mut(), base + off)
                            .map_err(|e| run_err(format!("reading {path}: {e}")))?;
                        off += block;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(run_err("reader thread panicked")))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = pid.and_then(cpu_seconds);
    Ok((
        (per * jobs.max(1) as u64) as f64 / 1e6 / secs,
        cpu0.zip(cpu1).map(|(a, b)| b - a),
    ))
}

/// How much of the device the calibration's reads spread over: its first
/// 64 MiB (far enough apart that a disk model seeks between them, as it
/// will in a run). The last read ends at this offset, so it is also the
/// smallest device that can be calibrated ([`crate::MIN_SIZE`]).
pub const CALIBRATION_SPAN: u64 = 64 << 20;

/// Offsets of the calibration's `n` reads of `bytes` over the first
/// [`CALIBRATION_SPAN`] bytes.
fn calibration_offsets(bytes: u64, n: usize) -> Vec<u64> {
    offsets(n as u64, CALIBRATION_SPAN, 7)
        .into_iter()
        .map(|off| off / bytes * bytes)
        .collect()
}

/// The calibration's request sizes and counts: `(bytes, reads)`, small then
/// large.
pub const CALIBRATION_READS: [(u64, usize); 2] = [(4096, 101), (128 * 1024, 41)];

/// The model's mean service time for the calibration's small and large
/// reads (see [`crate::engine::CalibrationDelays`]); zero for a name that is
/// not a model (`instant`).
pub fn calibration_delays(model: &str) -> CalibrationDelays {
    let mean = |(bytes, n): (u64, usize)| {
        let reqs: Vec<IoRequest> = calibration_offsets(bytes, n)
            .into_iter()
            .map(|off| IoRequest {
                sector: off / SECTOR_BYTES,
                sectors: (bytes / SECTOR_BYTES) as u32,
                dir: Direction::Read,
            })
            .collect();
        model_time(model, &reqs).map_or(0, |t| t / n as Nanos)
    };
    CalibrationDelays {
        small_ns: mean(CALIBRATION_READS[0]),
        large_ns: mean(CALIBRATION_READS[1]),
    }
}

/// Median latency (ns) of the calibration's `n` O_DIRECT reads of `bytes` on
/// `dev`, spread over its first 64 MiB.
pub fn median_latency_ns(dev: &str, bytes: usize, n: usize) -> Result<u64> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .map_err(|e| run_err(format!("opening {dev} with O_DIRECT: {e}")))?;
    let mut buf = Aligned::new(bytes);
    let mut lat = Vec::with_capacity(n);
    for off in calibration_offsets(bytes as u64, n) {
        let t = Instant::now();
        read_exact_at(&f, buf.as_mut(), off).map_err(|e| run_err(format!("reading {dev}: {e}")))?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    // The median: the typical cost of the path, which the model's requests
    // will meet (a low percentile left the typical request late by the
    // difference).
    lat.sort_unstable();
    Ok(lat[lat.len() / 2])
}
