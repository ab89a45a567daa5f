//! The kernel's block-layer files of a device (its request queue's
//! scheduler and tunables, its stats) and the page cache drop: what both
//! native and VM cells read and switch on the host.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use experiment::Cell;

use crate::options::Options;
use crate::{run_err, Error, Result};

/// The sysfs directory of a block device's request queue, and of its stats.
pub struct SysBlock {
    pub queue: PathBuf,
    pub stat: PathBuf,
}

pub fn sys_block(dev: &str) -> Result<SysBlock> {
    let name = Path::new(dev)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let class = PathBuf::from("/sys/class/block").join(&name);
    let real = fs::canonicalize(&class)
        .map_err(|_| Error::Usage(format!("{dev}: no such block device")))?;
    let queue = if real.join("queue").is_dir() {
        real.join("queue")
    } else {
        // A partition: the queue is its disk's.
        real.parent().map(|p| p.join("queue")).unwrap_or_default()
    };
    Ok(SysBlock {
        queue,
        stat: real.join("stat"),
    })
}

/// Schedulers a device offers and the current one.
pub(crate) fn schedulers(q: &Path) -> (Vec<String>, String) {
    let text = fs::read_to_string(q.join("scheduler")).unwrap_or_default();
    let mut cur = String::new();
    let list = text
        .split_whitespace()
        .map(|s| {
            if let Some(n) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                cur = n.to_string();
                n.to_string()
            } else {
                s.to_string()
            }
        })
        .collect();
    (list, cur)
}

/// Sectors read and written (fields 3 and 7 of the stat file).
pub fn sectors_done(stat: &Path) -> u64 {
    let s = fs::read_to_string(stat).unwrap_or_default();
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    f.get(2).copied().unwrap_or(0) + f.get(6).copied().unwrap_or(0)
}

/// Write back what is dirty and drop the page cache, dentries and inodes
/// (`sync; echo 3 > /proc/sys/vm/drop_caches`).
pub fn drop_caches() -> Result<()> {
    nix::unistd::sync();
    fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| run_err(format!("dropping caches: {e}")))
}

/// The device a path's file system is on.
pub(crate) fn dev_of(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| m.dev())
}

/// The device number of a block device node.
pub(crate) fn rdev_of(dev: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(dev).ok().map(|m| m.rdev())
}

/// Every scheduler the cells need must be on `dev` before anything runs.
/// Returns the device's current one.
pub(crate) fn check_schedulers(cells: &[&Cell], dev: &str, sb: &SysBlock) -> Result<String> {
    let (available, original) = schedulers(&sb.queue);
    for c in cells {
        let k = c.host_sched.kernel_name();
        if !available.iter().any(|a| a == k) {
            return Err(Error::Usage(format!(
                "host_sched {:?}: {dev} has no {k} scheduler; it offers: {} (run a subset with --only host_sched=...)",
                c.host_sched,
                available.join(", ")
            )));
        }
    }
    Ok(original)
}

/// Sets a cell's scheduler and the `--host-tunable`s on the device.
pub(crate) fn set_cell_sched(o: &Options, k: &str, dev: &str, sb: &SysBlock) -> Result<()> {
    fs::write(sb.queue.join("scheduler"), k)
        .map_err(|e| run_err(format!("setting the {k} scheduler on {dev}: {e}")))?;
    for (key, value) in &o.host_tunables {
        let f = sb.queue.join("iosched").join(key);
        fs::write(&f, value).map_err(|e| {
            Error::Usage(format!(
                "--host-tunable {key}={value}: {k} on {dev}: {e} (its tunables: {})",
                read_tunables(&sb.queue)
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    }
    Ok(())
}

/// The current scheduler's tunables (`queue/iosched/*`).
pub fn read_tunables(q: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(q.join("iosched")) {
        for e in rd.flatten() {
            if let Ok(v) = fs::read_to_string(e.path()) {
                m.insert(
                    e.file_name().to_string_lossy().to_string(),
                    v.trim().to_string(),
                );
            }
        }
    }
    m
}
