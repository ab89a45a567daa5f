//! A small writer (and reader, for the tests and for checking an image) of
//! cpio archives in the "newc" format, the one the kernel unpacks as an
//! initramfs.
//!
//! Everything that could vary between two builds of the same inputs is fixed:
//! entries are written sorted by path, every mtime is 0, owners are root,
//! inode numbers count up from 1 in write order. Parent directories are
//! written explicitly (the kernel creates nothing implicitly while unpacking).

use std::collections::BTreeMap;
use std::io::{self, Write};

const MAGIC: &[u8; 6] = b"070701";
const TRAILER: &str = "TRAILER!!!";
const HEADER_LEN: usize = 110;

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    /// A symbolic link to the given target.
    Symlink(String),
    /// A character device node (major, minor).
    CharDev(u32, u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: Kind,
    perm: u32,
}

/// The archive's contents, keyed by path (relative, no leading `/`).
#[derive(Debug, Default)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

/// Normalise `/a/b/` to `a/b`; refuse empty paths and `.`/`..` components, which
/// would let an entry land outside the place its name says.
fn clean(path: &str) -> Result<String, String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err(format!("cpio: empty path {path:?}"));
    }
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(format!("cpio: path {path:?} has a . or .. component"));
    }
    Ok(parts.join("/"))
}

impl Archive {
    pub fn new() -> Archive {
        Archive::default()
    }

    /// A directory (mode `perm`), with its parents.
    pub fn dir(&mut self, path: &str, perm: u32) -> Result<(), String> {
        self.insert(path, Kind::Dir, perm)
    }

    /// A regular file with its parents.
    pub fn file(&mut self, path: &str, perm: u32, data: Vec<u8>) -> Result<(), String> {
        self.insert(path, Kind::File(data), perm)
    }

    /// A symbolic link with its parents.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), String> {
        if target.is_empty() {
            return Err(format!("cpio: symlink {path:?} has an empty target"));
        }
        self.insert(path, Kind::Symlink(target.to_string()), 0o777)
    }

    /// A character device node with its parents.
    pub fn char_dev(
        &mut self,
        path: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), String> {
        self.insert(path, Kind::CharDev(major, minor), perm)
    }

    /// True when `path` is in the archive.
    pub fn contains(&self, path: &str) -> bool {
        clean(path).is_ok_and(|p| self.entries.contains_key(&p))
    }

    /// Number of entries (not counting the trailer).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn insert(&mut self, path: &str, kind: Kind, perm: u32) -> Result<(), String> {
        let path = clean(path)?;
        // Parents first: each must be a directory (made 0755 when missing).
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let parent = &path[..at + i];
            match self.entries.get(parent) {
                None => {
                    self.entries.insert(
                        parent.to_string(),
                        Entry {
                            kind: Kind::Dir,
                            perm: 0o755,
                        },
                    );
                }
                Some(e) if e.kind == Kind::Dir => {}
                Some(_) => {
                    return Err(format!(
                        "cpio: {path:?} would go under {parent:?}, which is not a directory"
                    ))
                }
            }
            at += i + 1;
        }
        let new = Entry {
            kind,
            perm: perm & 0o7777,
        };
        match self.entries.get_mut(&path) {
            None => {
                self.entries.insert(path, new);
                Ok(())
            }
            // Asking again for a directory only sets its mode.
            Some(old) if old.kind == Kind::Dir && new.kind == Kind::Dir => {
                old.perm = new.perm;
                Ok(())
            }
            Some(_) => Err(format!("cpio: {path:?} is already in the archive")),
        }
    }

    /// Write the archive, sorted by path, ending with the trailer.
    pub fn write_to<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let mut out = CountingWriter { inner: w, n: 0 };
        let mut ino = 0u32;
        for (path, e) in &self.entries {
            ino += 1;
            let (mode, nlink, data, rdev): (u32, u32, &[u8], (u32, u32)) = match &e.kind {
                Kind::Dir => (S_IFDIR | e.perm, 2, &[], (0, 0)),
                Kind::File(d) => (S_IFREG | e.perm, 1, d, (0, 0)),
                Kind::Symlink(t) => (S_IFLNK | e.perm, 1, t.as_bytes(), (0, 0)),
                Kind::CharDev(ma, mi) => (S_IFCHR | e.perm, 1, &[], (*ma, *mi)),
            };
            write_entry(&mut out, ino, mode, nlink, rdev, path, data)?;
        }
        write_entry(&mut out, 0, 0, 1, (0, 0), TRAILER, &[])
    }

    /// The archive as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    n: usize,
}

impl<W: Write> CountingWriter<'_, W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.inner.write_all(b)?;
        self.n += b.len();
        Ok(())
    }
    fn pad4(&mut self) -> io::Result<()> {
        let pad = (4 - self.n % 4) % 4;
        self.put(&[0u8; 3][..pad])
    }
}

fn write_entry<W: Write>(
    out: &mut CountingWriter<'_, W>,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    name: &str,
    data: &[u8],
) -> io::Result<()> {
    let size = u32::try_from(data.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cpio: {name} is larger than 4 GiB, which newc cannot hold"),
        )
    })?;
    // c_ino c_mode c_uid c_gid c_nlink c_mtime c_filesize c_devmajor c_devminor
    // c_rdevmajor c_rdevminor c_namesize c_check
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        0,
        size,
        0,
        0,
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0,
    ];
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    for f in fields {
        h.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.put(&h)?;
    out.put(name.as_bytes())?;
    out.put(&[0])?;
    out.pad4()?;
    out.put(data)?;
    out.pad4()
}

/// One entry as read back by [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub name: String,
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub mtime: u32,
    pub rdev: (u32, u32),
    pub data: Vec<u8>,
}

impl Parsed {
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170000 == S_IFDIR
    }
    pub fn is_file(&self) -> bool {
        self.mode & 0o170000 == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & 0o170000 == S_IFLNK
    }
}

/// Read a newc archive back: every entry up to and including the trailer
/// (which must be there, and last). Checks magic, alignment and bounds.
pub fn parse(bytes: &[u8]) -> Result<Vec<Parsed>, String> {
    let mut at = 0usize;
    let mut out = Vec::new();
    loop {
        let h = bytes
            .get(at..at + HEADER_LEN)
            .ok_or_else(|| format!("cpio: truncated header at offset {at}"))?;
        if &h[..6] != MAGIC {
            return Err(format!("cpio: bad magic at offset {at}"));
        }
        let mut f = [0u32; 13];
        for (i, v) in f.iter_mut().enumerate() {
            let s = std::str::from_utf8(&h[6 + 8 * i..14 + 8 * i])
                .map_err(|_| format!("cpio: non-ASCII header field at offset {at}"))?;
            *v = u32::from_str_radix(s, 16)
                .map_err(|_| format!("cpio: bad hex field {s:?} at offset {at}"))?;
        }
        let namesize = f[11] as usize;
        if namesize == 0 {
            return Err(format!("cpio: zero name size at offset {at}"));
        }
        let name_at = at + HEADER_LEN;
        let name_bytes = bytes
            .get(name_at..name_at + namesize)
            .ok_or_else(|| format!("cpio: truncated name at offset {name_at}"))?;
        if name_bytes[namesize - 1] != 0 {
            return Err(format!(
                "cpio: name at offset {name_at} is not NUL-terminated"
            ));
        }
        let name = String::from_utf8(name_bytes[..namesize - 1].to_vec())
            .map_err(|_| format!("cpio: non-UTF-8 name at offset {name_at}"))?;
        let data_at = (name_at + namesize).next_multiple_of(4);
        let size = f[6] as usize;
        let data = bytes
            .get(data_at..data_at + size)
            .ok_or_else(|| format!("cpio: truncated data of {name}"))?
            .to_vec();
        at = (data_at + size).next_multiple_of(4);
        let p = Parsed {
            name,
            ino: f[0],
            mode: f[1],
            uid: f[2],
            gid: f[3],
            nlink: f[4],
            mtime: f[5],
            rdev: (f[9], f[10]),
            data,
        };
        let end = p.name == TRAILER;
        out.push(p);
        if end {
            if bytes[at.min(bytes.len())..].iter().any(|b| *b != 0) {
                return Err("cpio: data after the trailer".into());
            }
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Archive {
        let mut a = Archive::new();
        a.file("/bin/busybox", 0o755, b"BB".to_vec()).unwrap();
        a.symlink("bin/sh", "busybox").unwrap();
        a.dir("tmp", 0o1777).unwrap();
        a.char_dev("dev/console", 0o600, 5, 1).unwrap();
        a.file("etc/tandem/modules", 0o644, b"a\nb\n".to_vec())
            .unwrap();
        a.file("init", 0o755, b"#!/bin/sh\n".to_vec()).unwrap();
        a
    }

    #[test]
    fn writes_sorted_newc_entries_with_fixed_fields_and_a_trailer() {
        let bytes = sample().to_bytes();
        let e = parse(&bytes).unwrap();
        let names: Vec<&str> = e.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/busybox",
                "bin/sh",
                "dev",
                "dev/console",
                "etc",
                "etc/tandem",
                "etc/tandem/modules",
                "init",
                "tmp",
                TRAILER
            ]
        );
        for (i, p) in e.iter().enumerate() {
            assert_eq!(p.mtime, 0, "{}", p.name);
            assert_eq!((p.uid, p.gid), (0, 0), "{}", p.name);
            if p.name != TRAILER {
                assert_eq!(p.ino, i as u32 + 1, "sequential inodes");
            }
        }
        let get = |n: &str| e.iter().find(|p| p.name == n).unwrap();
        assert!(get("bin").is_dir());
        assert_eq!(get("bin").mode, 0o040755);
        assert_eq!(get("bin").nlink, 2);
        assert_eq!(get("tmp").mode, 0o041777);
        assert!(get("bin/busybox").is_file());
        assert_eq!(get("bin/busybox").mode, 0o100755);
        assert_eq!(get("bin/busybox").data, b"BB");
        assert_eq!(get("bin/busybox").nlink, 1);
        assert!(get("bin/sh").is_symlink());
        assert_eq!(get("bin/sh").data, b"busybox");
        assert_eq!(get("dev/console").mode, 0o020600);
        assert_eq!(get("dev/console").rdev, (5, 1));
        assert_eq!(get("etc/tandem/modules").data, b"a\nb\n");
        let t = e.last().unwrap();
        assert_eq!(
            (t.name.as_str(), t.ino, t.mode, t.data.len()),
            (TRAILER, 0, 0, 0)
        );
    }

    #[test]
    fn headers_and_data_are_aligned_and_literal() {
        let bytes = sample().to_bytes();
        assert_eq!(bytes.len() % 4, 0);
        // The first entry, "bin": header, name "bin\0" (110 + 4 = 114, padded to 116).
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(&bytes[6..14], b"00000001", "c_ino");
        assert_eq!(&bytes[14..22], b"000041ED", "c_mode");
        assert_eq!(&bytes[94..102], b"00000004", "c_namesize");
        assert_eq!(&bytes[110..114], b"bin\0");
        assert_eq!(&bytes[114..116], b"\0\0");
        assert_eq!(&bytes[116..122], b"070701", "the next header is 4-aligned");
        // The trailer's name is the last thing but padding.
        let tail = String::from_utf8_lossy(&bytes[bytes.len() - 16..]).to_string();
        assert!(tail.contains("TRAILER!!!"), "{tail:?}");
    }

    #[test]
    fn same_contents_in_any_insertion_order_give_the_same_bytes() {
        let mut b = Archive::new();
        b.file("init", 0o755, b"#!/bin/sh\n".to_vec()).unwrap();
        b.file("etc/tandem/modules", 0o644, b"a\nb\n".to_vec())
            .unwrap();
        b.char_dev("dev/console", 0o600, 5, 1).unwrap();
        b.dir("tmp", 0o1777).unwrap();
        b.symlink("bin/sh", "busybox").unwrap();
        b.file("bin/busybox", 0o755, b"BB".to_vec()).unwrap();
        assert_eq!(sample().to_bytes(), b.to_bytes());
    }

    #[test]
    fn refuses_duplicates_bad_paths_and_files_as_parents() {
        let mut a = sample();
        assert!(a.file("bin/busybox", 0o755, vec![]).is_err());
        assert!(a.file("init/x", 0o644, vec![]).is_err());
        assert!(a.file("../etc/passwd", 0o644, vec![]).is_err());
        assert!(a.file("/", 0o644, vec![]).is_err());
        assert!(a.symlink("bin/x", "").is_err());
        // A directory asked for twice is fine (its mode is updated).
        a.dir("bin", 0o700).unwrap();
        assert!(a.contains("/bin/sh"));
    }

    #[test]
    fn parse_rejects_damaged_archives() {
        let bytes = sample().to_bytes();
        assert!(parse(&bytes[..bytes.len() - 20]).is_err(), "no trailer");
        let mut bad = bytes.clone();
        bad[0] = b'1';
        assert!(parse(&bad).is_err(), "bad magic");
        let mut bad = bytes.clone();
        bad[60] = b'Z';
        assert!(parse(&bad).is_err(), "bad hex");
        let mut extra = bytes;
        extra.extend_from_slice(b"junk");
        assert!(parse(&extra).is_err(), "data after the trailer");
    }
}
