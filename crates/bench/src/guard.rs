//! Consent before a run writes to a real device (`--device /dev/X`).
//!
//! A run formats an unmounted device with ext4, and fills a directory on a
//! mounted one. Before either, [`inspect`] looks at what the device holds:
//! - every signature libblkid knows, through `wipefs --no-act`, which lists
//!   them all (partition tables, file systems, RAID and LVM members, crypto
//!   headers), at any offset; `blkid -p` stops at the first superblock and
//!   reports a partitioned disk's table only as PTTYPE. A missing `wipefs`
//!   is an error, never a pass;
//! - non-zero bytes in the first and the last MiB (data without a known
//!   signature: a raw image, a database, a wiped table's remains);
//! - its mounts, its partitions' mounts, and holders (device-mapper, md),
//!   and an exclusive open that fails (another program holds it). A mounted
//!   device is not probed further: the mount says it holds data, and a run
//!   does not format it.
//!
//! [`consent`] then lets the run go ahead only when nothing was found, when
//! `--force` names the same device again, or when the user, asked on a
//! terminal, types the device's path. A device in use by the system
//! (holders, mounted partitions) is refused even then.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::{run_err, Error, Result};

/// How much of each end of the device is read for data: the first MiB holds
/// the partition tables and most superblocks, the last the backup GPT and
/// end-of-device RAID superblocks (md 0.90 and 1.0).
pub const EDGE_BYTES: u64 = 1 << 20;

/// One thing found on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Mounted at these mount points.
    Mounted(Vec<String>),
    /// A signature `wipefs` reports: its type (`dos`, `gpt`, `ext4`,
    /// `linux_raid_member`, ...), what it is (`partition-table`,
    /// `filesystem`, `raid`, `crypto`, `other`) and where.
    Signature {
        kind: String,
        usage: String,
        offset: String,
        label: Option<String>,
    },
    /// A non-zero byte at this offset in the first or last MiB.
    Data { offset: u64, at_end: bool },
    /// In use by the system: why (holders, mounted partitions, busy).
    InUse(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Mounted(m) => write!(f, "mounted on {}", m.join(", ")),
            Finding::Signature {
                kind,
                usage,
                offset,
                label,
            } => {
                let what = match usage.as_str() {
                    "partition-table" => "partition table",
                    "filesystem" => "file system",
                    "raid" => "RAID member",
                    "crypto" => "encrypted volume",
                    _ => "signature",
                };
                let a = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                write!(f, "{a} {kind} {what} (at offset {offset}")?;
                if let Some(l) = label {
                    write!(f, ", label {l:?}")?;
                }
                write!(f, ")")
            }
            Finding::Data { offset, at_end } => write!(
                f,
                "non-zero data in its {} MiB (first at byte {offset})",
                if *at_end { "last" } else { "first" }
            ),
            Finding::InUse(why) => write!(f, "in use: {why}"),
        }
    }
}

/// What the run will do with a device it may have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceUse {
    /// Not mounted: format it with ext4 and mount it in the run directory.
    Format,
    /// Mounted: work in a directory of its own on the first mount point
    /// (or `--workdir`).
    Mounted(Vec<String>),
}

#[derive(Deserialize)]
struct WipefsOut {
    #[serde(default)]
    signatures: Vec<WipefsSig>,
}

#[derive(Deserialize)]
struct WipefsSig {
    #[serde(default)]
    offset: Option<String>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    usage: Option<String>,
    #[serde(default)]
    label: Option<String>,
}

/// Every signature libblkid finds on `dev`, through `wipefs --no-act`.
pub fn signatures(dev: &str) -> Result<Vec<Finding>> {
    let out = Command::new("wipefs")
        .args([
            "--no-act",
            "--json",
            "--output",
            "DEVICE,OFFSET,TYPE,USAGE,LABEL",
            dev,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            run_err(format!(
                "running wipefs to look for partition tables, file systems and RAID members on {dev}: {e} (it is in util-linux; without it the run does not touch the device)"
            ))
        })?;
    if !out.status.success() {
        return Err(run_err(format!(
            "wipefs could not probe {dev}: {} (without the probe the run does not touch the device)",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // Older wipefs print nothing at all when there is nothing.
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let parsed: WipefsOut = serde_json::from_str(&text)
        .map_err(|e| run_err(format!("wipefs's report on {dev}: {e}")))?;
    Ok(parsed
        .signatures
        .into_iter()
        .map(|s| Finding::Signature {
            kind: s.kind.unwrap_or_else(|| "unknown".into()),
            usage: s.usage.unwrap_or_default(),
            offset: s.offset.unwrap_or_default(),
            label: s.label,
        })
        .collect())
}

/// The first non-zero byte in the first and in the last [`EDGE_BYTES`].
pub fn edge_data(dev: &str) -> Result<Vec<Finding>> {
    let mut f = File::open(dev).map_err(|e| run_err(format!("reading {dev}: {e}")))?;
    let size = f
        .seek(SeekFrom::End(0))
        .map_err(|e| run_err(format!("sizing {dev}: {e}")))?;
    let mut found = Vec::new();
    let head = EDGE_BYTES.min(size);
    let tail_start = size.saturating_sub(EDGE_BYTES).max(head);
    for (start, len, at_end) in [(0, head, false), (tail_start, size - tail_start, true)] {
        if len == 0 {
            continue;
        }
        let mut buf = vec![0u8; len as usize];
        f.seek(SeekFrom::Start(start))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| run_err(format!("reading {dev} at byte {start}: {e}")))?;
        if let Some(i) = buf.iter().position(|b| *b != 0) {
            found.push(Finding::Data {
                offset: start + i as u64,
                at_end,
            });
        }
    }
    Ok(found)
}

/// The block device's name in sysfs (`/dev/sdb` -> `sdb`), following
/// symbolic links such as `/dev/disk/by-id/...`.
fn sys_name(dev: &str) -> Option<String> {
    let real = std::fs::canonicalize(dev).ok()?;
    Some(real.file_name()?.to_string_lossy().into_owned())
}

/// Holders, mounted partitions and exclusive openers of `dev`.
fn in_use(dev: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    let Some(name) = sys_name(dev) else {
        return found;
    };
    let sys = PathBuf::from("/sys/class/block").join(&name);
    let holders: Vec<String> = std::fs::read_dir(sys.join("holders"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !holders.is_empty() {
        found.push(Finding::InUse(format!(
            "held by {} (device-mapper, md or LVM)",
            holders.join(", ")
        )));
    }
    // Partitions are the directories of the disk's that name a partition.
    if let Ok(rd) = std::fs::read_dir(&sys) {
        for e in rd.flatten() {
            if !e.path().join("partition").exists() {
                continue;
            }
            let part = format!("/dev/{}", e.file_name().to_string_lossy());
            let m = devemu::control::mounts_of(&part);
            if !m.is_empty() {
                found.push(Finding::InUse(format!(
                    "its partition {part} is mounted on {}",
                    m.join(", ")
                )));
            }
        }
    }
    found
}

/// Whether another program holds `dev` open exclusively (a mount, md,
/// device-mapper, a `mkfs` in progress): an `O_EXCL` open fails with EBUSY.
fn held_exclusively(dev: &str) -> bool {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(dev)
        .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
}

/// What `dev` holds and how it is used (empty: nothing found).
pub fn inspect(dev: &str) -> Result<Vec<Finding>> {
    let meta = std::fs::metadata(dev)
        .map_err(|_| Error::Usage(format!("--device {dev}: no such device")))?;
    if !meta.file_type().is_block_device() {
        return Err(Error::Usage(format!("--device {dev}: not a block device")));
    }
    let mut found = Vec::new();
    let mounts = devemu::control::mounts_of(dev);
    if !mounts.is_empty() {
        found.push(Finding::Mounted(mounts));
    }
    found.extend(in_use(dev));
    if !found.is_empty() {
        // Mounted or in use: it holds data, and a run never formats it, so
        // that is what is reported (reading it may not even be allowed).
        return Ok(found);
    }
    found.extend(signatures(dev)?);
    found.extend(edge_data(dev)?);
    if held_exclusively(dev) {
        found.push(Finding::InUse(
            "another program holds it open exclusively".into(),
        ));
    }
    Ok(found)
}

/// Whether `a` and `b` name the same block device (`/dev/disk/by-id/...`
/// names the disk it links to).
pub fn same_device(a: &str, b: &str) -> bool {
    let rdev = |p: &str| {
        std::fs::metadata(p)
            .ok()
            .filter(|m| m.file_type().is_block_device())
            .map(|m| m.rdev())
    };
    matches!((rdev(a), rdev(b)), (Some(x), Some(y)) if x == y)
}

/// Asks the user, on a terminal, to confirm by typing the device's path.
pub trait Ask {
    /// Shows `text` and reads one answer; `None` without a terminal.
    fn ask(&mut self, text: &str) -> Option<String>;
}

/// The terminal on stdin, with the question on stderr.
pub struct Terminal;

impl Ask for Terminal {
    fn ask(&mut self, text: &str) -> Option<String> {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return None;
        }
        ask_on(text, &mut std::io::stdin().lock(), &mut std::io::stderr())
    }
}

/// Writes `text` to `out` and reads a line from `input` (trimmed).
pub fn ask_on(text: &str, input: &mut impl BufRead, out: &mut impl Write) -> Option<String> {
    let _ = write!(out, "{text}");
    let _ = out.flush();
    let mut line = String::new();
    input.read_line(&mut line).ok()?;
    Some(line.trim().to_string())
}

/// What a run writes to the device, for the question and the refusal.
fn plan(dev: &str, usage: &DeviceUse) -> String {
    match usage {
        DeviceUse::Format => format!(
            "A run formats {dev} with ext4 (mkfs.ext4 over the whole device: everything on it is lost), writes its workload files there and removes them afterwards; the new file system stays"
        ),
        DeviceUse::Mounted(m) => format!(
            "A run creates a directory tandem-bench-<pid> in --workdir or on {} and its workload files there, switches the device's I/O scheduler, and removes the directory and restores the scheduler afterwards",
            m[0]
        ),
    }
}

/// Whether the run may write to `dev`, given what [`inspect`] found there:
/// yes when nothing was found, when `force` names `dev`, or when the user
/// types its path on a terminal. Returns how the run will use it.
pub fn consent(
    dev: &str,
    found: &[Finding],
    force: Option<&str>,
    ask: &mut dyn Ask,
) -> Result<DeviceUse> {
    let usage = match found.iter().find_map(|f| match f {
        Finding::Mounted(m) => Some(m.clone()),
        _ => None,
    }) {
        Some(m) => DeviceUse::Mounted(m),
        None => DeviceUse::Format,
    };
    if found.is_empty() {
        return Ok(usage);
    }
    let list: Vec<String> = found.iter().map(|f| format!("  - {f}")).collect();
    let list = list.join("\n");
    if let Some(why) = found.iter().find_map(|f| match f {
        Finding::InUse(w) => Some(w),
        _ => None,
    }) {
        return Err(Error::Usage(format!(
            "{dev} is {}; a run can not have it, even with --force. Found:\n{list}",
            Finding::InUse(why.clone())
        )));
    }
    match force {
        Some(f) if same_device(f, dev) => {
            tracing::warn!("--force {f}: going ahead on {dev}, which holds:\n{list}");
            return Ok(usage);
        }
        Some(f) => {
            return Err(Error::Usage(format!(
            "--force {f} does not name --device {dev}; nothing was written. {dev} holds:\n{list}"
        )))
        }
        None => {}
    }
    let plan = plan(dev, &usage);
    let question =
        format!("{dev} holds:\n{list}\n{plan}.\nType {dev} to go ahead, anything else to stop: ");
    match ask.ask(&question) {
        Some(answer) if answer == dev => Ok(usage),
        Some(_) => Err(Error::Usage(format!(
            "not confirmed; nothing was written to {dev}"
        ))),
        None => Err(Error::Usage(format!(
            "{dev} holds data; refused, nothing was written. Found:\n{list}\n{plan}. If that is what you want, run again with --force {dev} (or on a terminal, to be asked)."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Answers(Vec<Option<String>>);
    impl Ask for Answers {
        fn ask(&mut self, _: &str) -> Option<String> {
            self.0.remove(0)
        }
    }

    fn ext4() -> Finding {
        Finding::Signature {
            kind: "ext4".into(),
            usage: "filesystem".into(),
            offset: "0x438".into(),
            label: None,
        }
    }

    #[test]
    fn nothing_found_goes_ahead_without_asking() {
        let mut a = Answers(vec![]);
        assert_eq!(consent("/dev/x", &[], None, &mut a), Ok(DeviceUse::Format));
    }

    #[test]
    fn without_a_terminal_or_force_it_refuses() {
        let mut a = Answers(vec![None]);
        let e = consent("/dev/x", &[ext4()], None, &mut a).unwrap_err();
        let Error::Usage(m) = e else { panic!() };
        assert!(
            m.contains("ext4 file system") && m.contains("--force /dev/x"),
            "{m}"
        );
    }

    #[test]
    fn the_user_must_type_the_device() {
        let mut a = Answers(vec![Some("y".into())]);
        assert!(consent("/dev/x", &[ext4()], None, &mut a).is_err());
        let mut a = Answers(vec![Some("/dev/x".into())]);
        assert_eq!(
            consent("/dev/x", &[ext4()], None, &mut a),
            Ok(DeviceUse::Format)
        );
        let mut input = std::io::Cursor::new(b"/dev/x\n".to_vec());
        let mut out = Vec::new();
        assert_eq!(
            ask_on("Q? ", &mut input, &mut out).as_deref(),
            Some("/dev/x")
        );
        assert_eq!(out, b"Q? ");
    }

    #[test]
    fn force_must_name_the_device() {
        // /dev/null is not a block device: it names no device.
        let mut a = Answers(vec![]);
        let e = consent("/dev/null", &[ext4()], Some("/dev/null"), &mut a).unwrap_err();
        assert!(
            matches!(&e, Error::Usage(m) if m.contains("does not name")),
            "{e}"
        );
    }

    #[test]
    fn a_device_in_use_is_refused_even_when_forced() {
        let mut a = Answers(vec![Some("/dev/x".into())]);
        let f = [Finding::InUse("held by dm-0".into())];
        assert!(consent("/dev/x", &f, Some("/dev/x"), &mut a).is_err());
    }

    #[test]
    fn mounted_devices_are_used_in_place() {
        let mut a = Answers(vec![Some("/dev/x".into())]);
        let f = [Finding::Mounted(vec!["/mnt".into()]), ext4()];
        assert_eq!(
            consent("/dev/x", &f, None, &mut a),
            Ok(DeviceUse::Mounted(vec!["/mnt".into()]))
        );
    }

    #[test]
    fn edges_of_a_file_are_read() {
        let p = std::env::temp_dir().join(format!("tandem-edges-{}", std::process::id()));
        let mut data = vec![0u8; 3 << 20];
        assert!(edge_data(p.to_str().unwrap()).is_err()); // not there
        std::fs::write(&p, &data).unwrap();
        assert_eq!(edge_data(p.to_str().unwrap()).unwrap(), vec![]);
        data[(3 << 20) - 10] = 1;
        data[1 << 20] = 1; // in the middle: not looked at
        std::fs::write(&p, &data).unwrap();
        assert_eq!(
            edge_data(p.to_str().unwrap()).unwrap(),
            vec![Finding::Data {
                offset: (3 << 20) - 10,
                at_end: true
            }]
        );
        std::fs::remove_file(&p).unwrap();
    }
}
