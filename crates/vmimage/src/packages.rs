//! Debian packages: what apt knows about them, fetching their `.deb` files
//! (reusing copies whose SHA-256 is the one apt expects) and unpacking them.
//!
//! Everything goes through apt's own tools (`apt-cache show`, `apt-get
//! download`, `dpkg-deb -x`), so the guest is made of what the machine's
//! configured Debian archive serves, checked against its signed index.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{run, sha256_file};
use crate::{progress, Error, Result};

/// A package version as apt describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// SHA-256 of the `.deb`, from the archive's index.
    pub sha256: String,
    /// `Filename:` (the path in the archive's pool).
    pub filename: String,
    /// `Depends:` names, first alternative of each, without version constraints.
    pub depends: Vec<String>,
}

impl Package {
    /// The names a `.deb` of this version may have: apt-get download's and the
    /// apt cache's (`name_version_arch.deb`, `:` of an epoch written `%3a`),
    /// and the pool's (no epoch).
    pub fn deb_names(&self) -> Vec<String> {
        let mut v = vec![format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.architecture
        )];
        if let Some(pool) = self.filename.rsplit('/').next() {
            if !pool.is_empty() && !v.iter().any(|n| n == pool) {
                v.push(pool.to_string());
            }
        }
        v
    }
}

/// Parse the first stanza of `apt-cache show` output.
pub fn parse_show(text: &str) -> std::result::Result<Package, String> {
    let stanza = text
        .split("\n\n")
        .find(|s| !s.trim().is_empty())
        .unwrap_or("");
    let field = |key: &str| -> Option<String> {
        // Fields may continue on lines starting with a space.
        let mut val: Option<String> = None;
        for line in stanza.lines() {
            if let Some(v) = &mut val {
                if line.starts_with(' ') || line.starts_with('\t') {
                    v.push(' ');
                    v.push_str(line.trim());
                    continue;
                }
                break;
            }
            if let Some(rest) = line.strip_prefix(key).and_then(|r| r.strip_prefix(':')) {
                val = Some(rest.trim().to_string());
            }
        }
        val
    };
    let need =
        |v: Option<String>, k: &str| v.ok_or_else(|| format!("apt-cache show: no {k} field"));
    let name = need(field("Package"), "Package")?;
    let version = need(field("Version"), "Version")?;
    let architecture = need(field("Architecture"), "Architecture")?;
    let sha256 = need(field("SHA256"), "SHA256")?.to_ascii_lowercase();
    let filename = need(field("Filename"), "Filename")?;
    let depends = field("Depends")
        .map(|d| parse_depends(&d))
        .unwrap_or_default();
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("apt-cache show {name}: bad SHA256 {sha256:?}"));
    }
    Ok(Package {
        name,
        version,
        architecture,
        sha256,
        filename,
        depends,
    })
}

/// `a (>= 1), b | c, d:any` -> `[a, b, d]`.
pub fn parse_depends(d: &str) -> Vec<String> {
    d.split(',')
        .filter_map(|group| {
            let first = group.split('|').next()?.trim();
            let name = first.split([' ', '(', ':']).next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Package names are lower-case letters, digits and `+-.`; refusing anything
/// else keeps a bad `--kernel-package` from reaching apt as an option or a
/// version pin.
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.len() >= 2
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "bad package name {name:?}: Debian package names are lower-case letters, digits and + - ."
        )))
    }
}

/// apt's candidate version of `name` (`apt-cache show --no-all-versions`).
pub fn show(name: &str) -> Result<Package> {
    check_name(name)?;
    let out = Command::new("apt-cache")
        .args(["show", "--no-all-versions", name])
        .output()
        .map_err(|e| {
            Error::Run(format!(
                "running apt-cache: {e} (is this a Debian machine?)"
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.trim().is_empty() {
        return Err(Error::Usage(format!(
            "package {name}: apt knows no installable version ({}); check the name, or run apt-get update",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse_show(&text).map_err(Error::Run)
}

/// True for a package that holds a kernel (`linux-image-6.1.0-56-amd64`,
/// `...-unsigned`), false for metapackages (`linux-image-amd64`,
/// `linux-image-cloud-amd64`), which only depend on one.
fn is_kernel(name: &str) -> bool {
    name.strip_prefix("linux-image-")
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
}

/// Follow a kernel metapackage to the package that holds the kernel.
pub fn resolve_kernel(name: &str) -> Result<Package> {
    let mut p = show(name)?;
    // linux-image-amd64 -> linux-image-6.1.0-56-amd64; allow a short chain.
    for _ in 0..4 {
        if is_kernel(&p.name) {
            return Ok(p);
        }
        let Some(dep) = p.depends.iter().find(|d| d.starts_with("linux-image-")) else {
            return Err(Error::Usage(format!(
                "package {} is not a kernel (linux-image-<version>-<flavour>) and does not depend on one",
                p.name
            )));
        };
        p = show(dep).map_err(|e| Error::Run(format!("{} depends on {dep}: {e}", p.name)))?;
    }
    Err(Error::Usage(format!(
        "package {name}: no kernel package within four dependencies"
    )))
}

/// Where a usable `.deb` of `p` is: an existing one in `cache` or in apt's own
/// cache whose SHA-256 matches the index, or a fresh download into `cache`.
pub fn fetch(p: &Package, cache: &Path, quiet: bool) -> Result<PathBuf> {
    for dir in [cache, Path::new("/var/cache/apt/archives")] {
        for n in p.deb_names() {
            let f = dir.join(&n);
            if f.is_file() && sha256_file(&f)? == p.sha256 {
                progress(
                    quiet,
                    &format!("{} {}: using {}", p.name, p.version, f.display()),
                );
                return Ok(f);
            }
        }
    }
    progress(
        quiet,
        &format!("{} {}: apt-get download", p.name, p.version),
    );
    run(Command::new("apt-get")
        .args(["download", "-q"])
        .arg(format!("{}={}", p.name, p.version))
        .current_dir(cache))?;
    for n in p.deb_names() {
        let f = cache.join(&n);
        if f.is_file() {
            let got = sha256_file(&f)?;
            if got != p.sha256 {
                return Err(Error::Run(format!(
                    "{}: SHA-256 {got} is not the archive's {}",
                    f.display(),
                    p.sha256
                )));
            }
            return Ok(f);
        }
    }
    Err(Error::Run(format!(
        "apt-get download {}={} left none of {} in {}",
        p.name,
        p.version,
        p.deb_names().join(", "),
        cache.display()
    )))
}

/// Unpack a `.deb`'s files into `dir`.
pub fn extract(deb: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Run(format!("creating {}: {e}", dir.display())))?;
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "Package: linux-image-amd64
Source: linux-signed-amd64 (6.1.192+2)
Version: 6.1.192-2
Installed-Size: 13
Maintainer: Debian Kernel Team <debian-kernel@lists.debian.org>
Architecture: amd64
Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)
Description: Linux for 64-bit PCs (meta-package)
 This package depends on the latest Linux kernel
 and modules for use on PCs.
Filename: pool/updates/main/l/linux-signed-amd64/linux-image-amd64_6.1.192-2_amd64.deb
Size: 1480
SHA256: 45457BCFC86C87585800B5656BDF2773B063A3BB95486B0E820D51E870491F8D

Package: linux-image-amd64
Version: 6.1.176-1
";

    #[test]
    fn parses_apt_cache_show() {
        let p = parse_show(META).unwrap();
        assert_eq!(p.name, "linux-image-amd64");
        assert_eq!(p.version, "6.1.192-2");
        assert_eq!(p.architecture, "amd64");
        assert_eq!(p.depends, ["linux-image-6.1.0-56-amd64"]);
        assert_eq!(
            p.sha256,
            "45457bcfc86c87585800b5656bdf2773b063a3bb95486b0e820d51e870491f8d"
        );
        assert_eq!(p.deb_names(), ["linux-image-amd64_6.1.192-2_amd64.deb"]);
        assert!(parse_show("Package: x\nVersion: 1\n").is_err());
        let bad = META.replace("SHA256: 45457", "SHA256: z5457");
        assert!(parse_show(&bad).is_err());
    }

    #[test]
    fn epochs_and_dependency_lists() {
        let p = Package {
            name: "busybox-static".into(),
            version: "1:1.35.0-4+deb12u1+b1".into(),
            architecture: "amd64".into(),
            sha256: String::new(),
            filename: "pool/main/b/busybox/busybox-static_1.35.0-4+deb12u1+b1_amd64.deb".into(),
            depends: vec![],
        };
        assert_eq!(
            p.deb_names(),
            [
                "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb",
                "busybox-static_1.35.0-4+deb12u1+b1_amd64.deb"
            ]
        );
        assert_eq!(
            parse_depends("kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, perl:any"),
            ["kmod", "linux-base", "initramfs-tools", "perl"]
        );
        assert!(is_kernel("linux-image-6.1.0-56-amd64"));
        assert!(is_kernel("linux-image-6.1.0-56-amd64-unsigned"));
        assert!(!is_kernel("linux-image-amd64"));
        assert!(!is_kernel("linux-image-cloud-amd64"));
    }

    #[test]
    fn package_names_are_checked() {
        assert!(check_name("linux-image-amd64").is_ok());
        assert!(check_name("linux-image-6.1.0-56-amd64").is_ok());
        for bad in ["", "-o", "a=1", "A", "x y", "a/b", "x"] {
            assert!(matches!(check_name(bad), Err(Error::Usage(_))), "{bad:?}");
        }
    }
}
