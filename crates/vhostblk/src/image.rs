//! The disk image: a raw file (or block device) opened twice, once with
//! `O_DIRECT` (so the host scheduler sees each request with its priority:
//! the kernel copies an io_uring SQE's `ioprio` into the bio only for
//! direct I/O, `kiocb->ki_ioprio` → `bio->bi_ioprio` in the direct-I/O
//! paths, while buffered I/O goes through the page cache and writeback)
//! and once without, for the requests the direct file cannot take.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::request::SECTOR;

/// The open image.
#[derive(Debug)]
pub struct Image {
    /// `O_DIRECT`, when the filesystem takes it (tmpfs before Linux 6.6
    /// refuses it at open).
    pub direct: Option<File>,
    pub buffered: File,
    /// Size in 512-byte sectors (a partial last sector is not offered).
    pub capacity: u64,
    /// Buffer and offset alignment the direct file needs.
    pub align: u64,
}

/// Why the image could not be opened.
#[derive(Debug)]
pub enum ImageError {
    Missing(String),
    Other(String),
}

impl std::fmt::Display for ImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ImageError::Missing(m) | ImageError::Other(m) => f.write_str(m),
        }
    }
}

impl Image {
    /// Opens `path`; `align` is the guest's block size.
    pub fn open(path: &Path, read_only: bool, align: u64) -> Result<Image, ImageError> {
        let meta = std::fs::metadata(path).map_err(|e| {
            let m = format!("image {}: {e}", path.display());
            if e.kind() == io::ErrorKind::NotFound {
                ImageError::Missing(m)
            } else {
                ImageError::Other(m)
            }
        })?;
        let ft = meta.file_type();
        if !ft.is_file() && !ft.is_block_device() {
            return Err(ImageError::Other(format!(
                "image {}: not a regular file or block device",
                path.display()
            )));
        }
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(!read_only)
                .custom_flags(flags)
                .open(path)
        };
        let buffered =
            open(0).map_err(|e| ImageError::Other(format!("image {}: {e}", path.display())))?;
        let direct = open(libc::O_DIRECT).ok();
        let bytes = if ft.is_block_device() {
            use std::io::Seek;
            let mut f = &buffered;
            f.seek(io::SeekFrom::End(0))
                .map_err(|e| ImageError::Other(format!("image {}: size: {e}", path.display())))?
        } else {
            meta.len()
        };
        if bytes < SECTOR {
            return Err(ImageError::Other(format!(
                "image {}: {bytes} bytes, smaller than one 512-byte sector",
                path.display()
            )));
        }
        Ok(Image {
            direct,
            buffered,
            capacity: bytes / SECTOR,
            align: align.max(SECTOR),
        })
    }
}
