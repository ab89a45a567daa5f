//! The guest's data disk: a raw file holding an empty ext4 filesystem.
//!
//! mkfs.ext4 normally puts random UUIDs, a random directory hash seed and the
//! current time into the filesystem; here all three are fixed, and discard
//! and lazy initialisation are off so that every block mkfs owns is written,
//! so the same size always gives the same bytes.

use std::path::Path;
use std::process::Command;

use crate::util::run;
use crate::{Error, Result};

/// The filesystem's UUID (fixed, so that two disks of one size are identical).
pub const UUID: &str = "5d1b6c4e-7a2f-4c1e-9b3a-2f6e8d0c1a47";
/// The directory hash seed.
const HASH_SEED: &str = "0c9e7f3a-1b2d-4e5f-8a6b-7c8d9e0f1a2b";
/// The time mkfs records (2024-01-01 00:00:00 UTC).
const FAKE_TIME: &str = "1704067200";
/// The filesystem label.
pub const LABEL: &str = "tandem-data";

/// Smallest disk: below this an ext4 journal barely fits.
pub const MIN_BYTES: u64 = 8 << 20;

/// Refuse sizes mkfs.ext4 cannot use well (a usage error).
pub fn check_size(bytes: u64) -> Result<()> {
    if bytes < MIN_BYTES || !bytes.is_multiple_of(4096) {
        return Err(Error::Usage(format!(
            "data disk of {bytes} bytes: it must be at least {} MiB and a multiple of 4096 bytes",
            MIN_BYTES >> 20
        )));
    }
    Ok(())
}

/// Make `path` a raw disk image of `bytes` holding an empty ext4 filesystem
/// (replacing any file there). On failure the file is removed.
pub fn make_data_disk(path: &Path, bytes: u64) -> Result<()> {
    check_size(bytes)?;
    if path.is_dir() {
        return Err(Error::Usage(format!(
            "data disk {}: is a directory",
            path.display()
        )));
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::Run(format!("removing {}: {e}", path.display()))),
    }
    let made = (|| {
        let f = std::fs::File::create(path)
            .map_err(|e| Error::Run(format!("creating {}: {e}", path.display())))?;
        // A sparse file: mkfs writes the blocks it owns, the rest reads as zeros.
        f.set_len(bytes)
            .map_err(|e| Error::Run(format!("sizing {}: {e}", path.display())))?;
        drop(f);
        run(Command::new("mkfs.ext4")
            .env("E2FSPROGS_FAKE_TIME", FAKE_TIME)
            .args(["-q", "-F", "-b", "4096", "-U", UUID, "-L", LABEL, "-E"])
            .arg(format!(
                "hash_seed={HASH_SEED},nodiscard,lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0"
            ))
            .arg(path))
        .map(|_| ())
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made
}
