//! Programs the guest's benchmarks run besides tandem, taken from Debian
//! packages with the shared libraries they need: `cyclictest` (rt-tests)
//! for `benchmark = "latency"`, the same program the native runner runs on
//! the host.
//!
//! A tool's package and its library packages are unpacked together; `ldd`
//! resolves the tool's libraries there first (`LD_LIBRARY_PATH`), then on
//! the build host, as for tandem ([`crate::exe`]). A library unpacked from
//! a package goes to the guest at its path in the package; one of the host
//! (libc, the loader: the same files tandem brings) at its path on the host.

use std::path::{Path, PathBuf};

use crate::packages::{self, Package};
use crate::util::{read, TempDir};
use crate::{exe, Error, Result};

/// A program for the guest.
#[derive(Debug, Clone, Copy)]
pub struct GuestTool {
    /// The package it comes from.
    pub package: &'static str,
    /// Its path in the package and in the guest.
    pub path: &'static str,
    /// Packages its libraries come from, besides libc (rt-tests' `Depends`
    /// without `libc6`, whose libraries are the host's, and without
    /// `python3`, which only rt-tests' scripts need).
    pub library_packages: &'static [&'static str],
}

/// Where the guest's cyclictest is.
pub const CYCLICTEST: &str = "/usr/bin/cyclictest";

/// The tools every image carries.
pub const GUEST_TOOLS: &[GuestTool] = &[GuestTool {
    package: "rt-tests",
    path: "usr/bin/cyclictest",
    library_packages: &["libnuma1"],
}];

/// A tool ready for the initramfs.
pub struct Prepared {
    /// Its absolute path in the guest.
    pub path: PathBuf,
    pub package: String,
    pub data: Vec<u8>,
    /// (absolute path in the guest, contents), the loader included.
    pub libraries: Vec<(PathBuf, Vec<u8>)>,
}

/// Unpacks `tool`'s packages (fetched into `cache`) under `scratch` and
/// collects the tool and its libraries. Returns them with the packages
/// used, for the manifest.
pub fn prepare(
    tool: &GuestTool,
    cache: &Path,
    scratch: &TempDir,
    quiet: bool,
) -> Result<(Prepared, Vec<Package>)> {
    let root = scratch.path().join(format!("tool-{}", tool.package));
    let mut used = Vec::new();
    for name in std::iter::once(&tool.package).chain(tool.library_packages) {
        let p = packages::show(name)?;
        let deb = packages::fetch(&p, cache, quiet)?;
        packages::extract(&deb, &root)?;
        used.push(p);
    }
    let bin = root.join(tool.path);
    if !bin.is_file() {
        return Err(Error::Run(format!(
            "{} {}: no {}",
            used[0].name, used[0].version, tool.path
        )));
    }
    let search: Vec<PathBuf> = [
        "lib/x86_64-linux-gnu",
        "usr/lib/x86_64-linux-gnu",
        "lib",
        "usr/lib",
    ]
    .iter()
    .map(|d| root.join(d))
    .filter(|d| d.is_dir())
    .collect();
    let mut libraries = Vec::new();
    for found in exe::shared_libraries(&bin, &search)? {
        let guest = match found.strip_prefix(&root) {
            Ok(rel) => Path::new("/").join(rel),
            Err(_) => found.clone(),
        };
        libraries.push((guest, read(&found)?));
    }
    libraries.sort();
    Ok((
        Prepared {
            path: Path::new("/").join(tool.path),
            package: tool.package.to_string(),
            data: read(&bin)?,
            libraries,
        },
        used,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cyclictest_is_a_guest_tool() {
        let t = GUEST_TOOLS
            .iter()
            .find(|t| Path::new("/").join(t.path) == Path::new(CYCLICTEST))
            .unwrap();
        assert_eq!(t.package, "rt-tests");
        for p in std::iter::once(&t.package).chain(t.library_packages) {
            packages::check_name(p).unwrap();
        }
    }

    #[test]
    #[ignore = "needs network/apt: fetches rt-tests and libnuma1 with apt-get download"]
    fn cyclictest_comes_with_its_libraries() {
        let scratch = TempDir::new("tandem-vmimage-tools").unwrap();
        let cache = scratch.path().join("debs");
        std::fs::create_dir(&cache).unwrap();
        let (p, pkgs) = prepare(&GUEST_TOOLS[0], &cache, &scratch, true).unwrap();
        assert_eq!(p.path, Path::new(CYCLICTEST));
        assert_eq!(&p.data[..4], b"\x7fELF");
        let names: Vec<&str> = pkgs.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["rt-tests", "libnuma1"]);
        let libs: Vec<String> = p
            .libraries
            .iter()
            .map(|(l, _)| l.to_string_lossy().into_owned())
            .collect();
        // libnuma from its package, at its path there (not the scratch
        // directory's); libc and the loader from the host.
        assert!(
            libs.iter()
                .any(|l| l.starts_with("/usr/lib/") && l.contains("libnuma.so.1")),
            "{libs:?}"
        );
        assert!(libs.iter().any(|l| l.contains("libc.so.6")), "{libs:?}");
        assert!(libs.iter().any(|l| l.contains("ld-linux")), "{libs:?}");
        assert!(
            libs.iter().all(|l| !l.contains("tandem-vmimage-tools")),
            "{libs:?}"
        );
        assert!(p.libraries.iter().all(|(_, d)| d.starts_with(b"\x7fELF")));
    }
}
