//! The tandem binary for the guest: debug info stripped (a release build
//! carries line tables that would triple the initramfs), plus the shared
//! libraries it needs, at the paths the host's loader found them, so that it
//! runs in a guest that has no other userland than busybox.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
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

/// `EM_X86_64`: the guest's kernel is Debian's amd64 one.
const EM_X86_64: u16 = 62;

/// Refuses (as a usage error) what cannot be the guest's `/bin/tandem`: a
/// missing path, a directory, a file without execute permission, or one
/// that is not a 64-bit little-endian x86-64 ELF executable (type `EXEC`,
/// or `DYN` for position-independent and static-pie executables).
pub fn check(exe: &Path) -> Result<()> {
    let usage = |why: &str| Error::Usage(format!("tandem executable {}: {why}", exe.display()));
    let meta = std::fs::metadata(exe).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            usage("no such file")
        } else {
            usage(&e.to_string())
        }
    })?;
    if !meta.is_file() {
        return Err(usage("not a regular file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(usage("not executable (no x permission)"));
    }
    let mut head = [0u8; 20];
    let n = std::fs::File::open(exe)
        .and_then(|mut f| {
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..])? {
                    0 => break,
                    k => n += k,
                }
            }
            Ok(n)
        })
        .map_err(|e| usage(&e.to_string()))?;
    check_elf_header(&head[..n]).map_err(|why| usage(&why))
}

/// The checks of [`check`] on the first bytes of the file.
fn check_elf_header(h: &[u8]) -> std::result::Result<(), String> {
    if h.len() < 20 || &h[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if h[4] != 2 || h[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let e_type = u16::from_le_bytes([h[16], h[17]]);
    let e_machine = u16::from_le_bytes([h[18], h[19]]);
    if e_machine != EM_X86_64 {
        return Err(format!(
            "ELF for machine {e_machine}, not x86-64 (the guest is amd64)"
        ));
    }
    // ET_EXEC, or ET_DYN: PIE and static-pie executables.
    if e_type != 2 && e_type != 3 {
        return Err(format!("ELF type {e_type} is not an executable"));
    }
    Ok(())
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
    let paths = shared_libraries(exe, &[])?;
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

/// The shared libraries `exe` needs, the dynamic loader included, as `ldd`
/// finds them: first in `search` (`LD_LIBRARY_PATH`: libraries unpacked
/// from a package rather than installed), then where the host's loader
/// looks. Empty for a static binary; a library not found is an error.
pub fn shared_libraries(exe: &Path, search: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut cmd = Command::new("ldd");
    cmd.arg(exe);
    if !search.is_empty() {
        let joined = std::env::join_paths(search)
            .map_err(|e| Error::Run(format!("library search path: {e}")))?;
        cmd.env("LD_LIBRARY_PATH", joined);
    }
    let ldd = cmd.output().map_err(|e| {
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
    Ok(paths)
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
    fn only_x86_64_elf_executables_are_accepted() {
        let d = TempDir::new("tandem-vmimage-exe").unwrap();
        let me = std::env::current_exe().unwrap();
        check(&me).unwrap();
        let write = |name: &str, bytes: &[u8], mode: u32| {
            let p = d.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let msg = |p: &Path| match check(p) {
            Err(Error::Usage(m)) => m,
            other => panic!("{}: {other:?}", p.display()),
        };
        assert!(msg(&d.path().join("none")).contains("no such file"));
        assert!(msg(d.path()).contains("not a regular file"));
        let script = write("script", b"#!/bin/sh\necho tandem\n", 0o755);
        assert!(msg(&script).contains("not an ELF file"));
        let elf = std::fs::read(&me).unwrap();
        let noexec = write("noexec", &elf[..4096], 0o644);
        assert!(msg(&noexec).contains("not executable"));
        let mut h = elf[..64].to_vec();
        h[18] = 183; // EM_AARCH64
        assert!(msg(&write("arm", &h, 0o755)).contains("not x86-64"));
        let mut h = elf[..64].to_vec();
        h[16] = 1; // ET_REL: an object file
        assert!(msg(&write("obj", &h, 0o755)).contains("not an executable"));
        let mut h = elf[..64].to_vec();
        h[4] = 1; // ELFCLASS32
        assert!(msg(&write("elf32", &h, 0o755)).contains("64-bit"));
        assert!(msg(&write("short", &elf[..10], 0o755)).contains("not an ELF file"));
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
