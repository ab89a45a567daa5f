//! Small helpers: scratch directories removed on drop, running tools with
//! readable errors, hashing, writing files so that a failed build leaves no
//! half-written output.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{Error, Result};

/// A directory under the system's temporary directory, removed with its
/// contents when dropped (also when a build fails half-way).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Result<TempDir> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir();
        // create_dir (not _all) fails if the name is taken: try the next one.
        for _ in 0..100 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let d = base.join(format!("{prefix}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&d) {
                Ok(()) => return Ok(TempDir(d)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::Run(format!(
                        "creating a scratch directory in {}: {e}",
                        base.display()
                    )))
                }
            }
        }
        Err(Error::Run(format!(
            "creating a scratch directory in {}: every name taken",
            base.display()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Debian package that provides each tool this crate runs.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "apt-get" | "apt-cache" => "apt",
        "dpkg-deb" => "dpkg",
        "objcopy" => "binutils",
        "ldd" => "libc-bin",
        "mkfs.ext4" => "e2fsprogs",
        _ => "its package",
    }
}

/// Run `cmd` to completion; a tool that is missing or fails is a `Run` error
/// naming the command and quoting its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let shown = std::iter::once(prog.clone())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Run(format!(
                "{prog} not found; it is needed to build the guest image (Debian: apt-get install {})",
                package_of(&prog)
            ))
        } else {
            Error::Run(format!("running {shown}: {e}"))
        }
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        return Err(Error::Run(format!(
            "{shown} failed ({}){}{}",
            out.status,
            if err.is_empty() { "" } else { ": " },
            err
        )));
    }
    Ok(out)
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// SHA-256 of a file, streamed (kernel packages are tens of MB).
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::Run(format!("reading {}: {e}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::Run(format!("reading {}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write `data` to `path` through a temporary name and a rename, so that the
/// file is either the old one or the whole new one.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = tmp_name(path);
    std::fs::write(&tmp, data)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::Run(format!("writing {}: {e}", path.display()))
        })
}

/// `dir/.name.tmp` for `dir/name`.
pub fn tmp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Run(format!("reading {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_distinct_and_removed() {
        let a = TempDir::new("tandem-utiltest").unwrap();
        let b = TempDir::new("tandem-utiltest").unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), b"x").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
    }

    #[test]
    fn sha256_of_known_input_and_missing_tools() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let e = run(&mut Command::new("tandem-no-such-tool")).unwrap_err();
        assert!(e.to_string().contains("not found"), "{e}");
        let e = run(Command::new("sh").args(["-c", "echo oops >&2; exit 3"])).unwrap_err();
        assert!(e.to_string().contains("oops"), "{e}");
    }
}
