//! The tandem binary for the guest: debug info stripped (a release build
//! carries line tables that would triple the initramfs), plus the shared
//! libraries it needs, at the paths the host's loader found them, so that it
//! runs in a guest that has no other userland than busybox.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{read, run, TempDir};
use crate::{Error, Result};

/// The guest's copy of the binary and what it needs.
pub struct GuestExe {
    pub stripped: Vec<u8>,
    /// (absolute path, contents), the dynamic loader included; empty for a
    /// static binary.
    pub libraries: Vec<(PathBuf, Vec<u8>)>,
}

/// Strip `exe`'s debug info and collect its libraries.
pub fn prepare(exe: &Path, scratch: &TempDir) -> Result<GuestExe> {
    let out = scratch.path().join("tandem.stripped");
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(exe)
        .arg(&out))?;
    let stripped = read(&out)?;
    let _ = std::fs::remove_file(&out);
    let ldd = Command::new("ldd").arg(exe).output().map_err(|e| {
        Error::Run(format!(
            "running ldd: {e} (Debian: apt-get install libc-bin)"
        ))
    })?;
    // ldd exits 1 for static binaries, saying so on stdout or stderr.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    let paths = parse_ldd(&text).map_err(|e| Error::Run(format!("ldd {}: {e}", exe.display())))?;
    if !ldd.status.success() && !paths.is_empty() {
        return Err(Error::Run(format!(
            "ldd {} failed: {}",
            exe.display(),
            text.trim()
        )));
    }
    let mut libraries = Vec::new();
    for p in paths {
        // fs::read follows symlinks: the guest gets the library's contents
        // at the name the loader asks for.
        libraries.push((p.clone(), read(&p)?));
    }
    Ok(GuestExe {
        stripped,
        libraries,
    })
}

/// The libraries in `ldd` output, as absolute paths, sorted. The vDSO has no
/// file and is skipped; a library that was not found is an error.
pub fn parse_ldd(text: &str) -> std::result::Result<Vec<PathBuf>, String> {
    let mut v = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.contains("not a dynamic executable") || l.contains("statically linked")
        {
            continue;
        }
        if l.contains("=> not found") {
            return Err(format!("a library is missing: {l}"));
        }
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)" or "linux-vdso.so.1 (0x...)".
        let target = match l.split_once("=>") {
            Some((_, t)) => t.trim(),
            None => l,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            v.push(PathBuf::from(path));
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libraries_and_the_loader() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd6b5f2000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f0a1c000000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0a1bf00000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0a1bd00000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0a1c400000)
";
        let v = parse_ldd(out).unwrap();
        let s: Vec<&str> = v.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            s,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libm.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }

    #[test]
    fn static_binaries_and_missing_libraries() {
        assert!(parse_ldd("\tnot a dynamic executable\n")
            .unwrap()
            .is_empty());
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
        let e = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(e.contains("libfoo"), "{e}");
    }
}
