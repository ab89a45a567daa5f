//! tandem's guest image for the real VM benchmark runner: a Debian kernel and
//! an initramfs holding busybox, the kernel modules the guest needs, the
//! tandem binary (which runs the guest's benchmark agent), the programs the
//! guest's benchmarks run ([`tools`]: cyclictest) and an `/init` script,
//! plus an optional raw ext4 data disk.
//!
//! Everything comes from Debian packages through apt ([`packages`]): nothing
//! is fetched from anywhere else. The build is reproducible: the same packages,
//! the same tandem binary and the same host libraries give byte-identical
//! `vmlinuz`, `initramfs.img`, `manifest.json` and data disk ([`cpio`] writes
//! sorted entries with fixed metadata; gzip gets a zero mtime and no name).
//!
//! - [`build`] makes an image in a directory;
//! - [`open`] finds one built earlier;
//! - [`make_data_disk`] makes a reproducible ext4 disk image file.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod cpio;
mod disk;
pub mod exe;
pub mod init;
pub mod modules;
pub mod packages;
pub mod tools;
mod util;

pub use disk::{make_data_disk, MIN_BYTES as MIN_DATA_DISK_BYTES};
pub use init::{parse_ready, Ready, BENCH_PORT, READY_PREFIX};

/// The kernel command line the guest is booted with (tandem.* keys go after it).
///
/// `no_timer_check` skips the kernel's boot-time test that the timer
/// interrupt arrives through the IO-APIC (`check_timer()` in
/// `arch/x86/kernel/apic/io_apic.c`; the parameter is documented in the
/// kernel's `Documentation/admin-guide/kernel-parameters.txt`): it waits a
/// few timer ticks of busy-looped time, and a TCG guest whose host is loaded
/// gets too little CPU to see them. The guest then panics ("IO-APIC + timer
/// doesn't work!"), `panic=-1` reboots it at once and QEMU's `-no-reboot`
/// exits: on this machine at load average 17 to 20 (2026-11-26) that ended
/// a cell's boot, seen by the runner as "control port: Connection reset by
/// peer". A KVM guest skips the test already (`paravirt_ops_setup()` in
/// `arch/x86/kernel/kvm.c` sets `no_timer_check`).
pub const KERNEL_CMDLINE: &str = "console=ttyS0 quiet panic=-1 no_timer_check";
/// The kernel package (a metapackage, followed to the real one) by default.
pub const DEFAULT_KERNEL_PACKAGE: &str = "linux-image-amd64";
/// The package busybox comes from (statically linked: it needs no libraries).
pub const BUSYBOX_PACKAGE: &str = "busybox-static";

/// File names in an image directory.
pub const KERNEL_FILE: &str = "vmlinuz";
pub const INITRAMFS_FILE: &str = "initramfs.img";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const DATA_DISK_FILE: &str = "data.img";

/// A failure, split as the command line reports it. Either shows as its
/// message alone: the command line adds `tandem: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Bad input (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Something failed while running (exit code 1).
    #[error("{0}")]
    Run(String),
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, Error>;

/// What to build.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// Output directory (created if missing).
    pub out: PathBuf,
    /// The tandem binary to put in the guest as /bin/tandem.
    pub tandem_exe: PathBuf,
    /// Kernel package or metapackage ([`DEFAULT_KERNEL_PACKAGE`]).
    pub kernel_package: String,
    /// Where `.deb` files are kept between builds (default: a temporary
    /// directory removed afterwards).
    pub cache_dir: Option<PathBuf>,
    /// Size of a data disk to make as `data.img` (none by default).
    pub data_disk_bytes: Option<u64>,
    /// No progress lines.
    pub quiet: bool,
}

impl ImageOptions {
    /// Options with the defaults: [`DEFAULT_KERNEL_PACKAGE`], no cache, no data disk.
    pub fn new(out: impl Into<PathBuf>, tandem_exe: impl Into<PathBuf>) -> ImageOptions {
        ImageOptions {
            out: out.into(),
            tandem_exe: tandem_exe.into(),
            kernel_package: DEFAULT_KERNEL_PACKAGE.into(),
            cache_dir: None,
            data_disk_bytes: None,
            quiet: false,
        }
    }
}

/// A built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub kernel_version: String,
    pub data_disk: Option<PathBuf>,
    pub manifest: PathBuf,
}

/// What `manifest.json` records: where every byte of the image came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub kernel_version: String,
    pub kernel_cmdline: String,
    /// The package asked for (e.g. the metapackage).
    pub kernel_package_requested: String,
    /// The kernel package, busybox's and the guest tools' ([`tools`]), as
    /// fetched.
    pub packages: Vec<PackageRecord>,
    /// In load order.
    pub modules: Vec<ModuleRecord>,
    /// Optional modules that could not be used, with the reason.
    pub optional_modules_left_out: Vec<String>,
    /// `vmlinuz` and `initramfs.img`.
    pub files: Vec<FileRecord>,
    pub tandem: TandemRecord,
    /// The programs from [`tools::GUEST_TOOLS`].
    pub tools: Vec<ToolRecord>,
    pub data_disk: Option<DataDiskRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRecord {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// Of the `.deb`.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRecord {
    pub name: String,
    /// Relative to `/lib/modules/<version>`.
    pub path: String,
    pub optional: bool,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TandemRecord {
    /// Of the binary given to the build.
    pub sha256: String,
    /// Of `/bin/tandem` in the guest (debug info stripped).
    pub guest_sha256: String,
    /// The shared libraries copied with it (absolute paths in the guest).
    pub libraries: Vec<FileRecord>,
}

/// A program of [`tools::GUEST_TOOLS`] in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// Absolute path in the guest (`/usr/bin/cyclictest`).
    pub path: String,
    /// The package it comes from.
    pub package: String,
    pub sha256: String,
    /// The shared libraries copied with it (absolute paths in the guest).
    pub libraries: Vec<FileRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataDiskRecord {
    pub file: String,
    pub bytes: u64,
    /// The ext4 filesystem's UUID. The disk's bytes are not hashed: it
    /// changes as soon as a guest mounts it.
    pub uuid: String,
}

/// 2: the guest tools (an image without them cannot run the latency
/// benchmark, so format 1 images are refused and rebuilt).
const MANIFEST_FORMAT: u32 = 2;

/// Progress lines on stderr, when it is a terminal and not `quiet`.
pub(crate) fn progress(quiet: bool, msg: &str) {
    use std::io::IsTerminal;
    if !quiet && std::io::stderr().is_terminal() {
        eprintln!("tandem vm image: {msg}");
    }
}

fn run_err(m: impl Into<String>) -> Error {
    Error::Run(m.into())
}

/// Build the image described by `o` (see the crate documentation).
pub fn build(o: &ImageOptions) -> Result<Image> {
    let manifest_path = prepare_output(o)?;

    let work = util::TempDir::new("tandem-vmimage")?;
    let own_cache;
    let cache: &Path = match &o.cache_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| run_err(format!("creating cache {}: {e}", d.display())))?;
            d
        }
        None => {
            own_cache = util::TempDir::new("tandem-vmimage-debs")?;
            own_cache.path()
        }
    };

    // 1. Packages.
    let kpkg = packages::resolve_kernel(&o.kernel_package)?;
    let bpkg = packages::show(BUSYBOX_PACKAGE).map_err(|e| run_err(e.to_string()))?;
    progress(
        o.quiet,
        &format!(
            "{} -> {} {}; {} {}",
            o.kernel_package, kpkg.name, kpkg.version, bpkg.name, bpkg.version
        ),
    );
    let (tools, tool_packages) = guest_tools(cache, &work, o.quiet)?;
    let kdeb = packages::fetch(&kpkg, cache, o.quiet)?;
    let bdeb = packages::fetch(&bpkg, cache, o.quiet)?;
    let kroot = work.path().join("kernel");
    let broot = work.path().join("busybox");
    progress(o.quiet, "unpacking");
    packages::extract(&kdeb, &kroot)?;
    packages::extract(&bdeb, &broot)?;

    // 2. Kernel.
    let (version, vmlinuz) = find_kernel(&kroot, &kpkg.name)?;
    let mod_root = module_root(&kroot, &version, &kpkg.name)?;

    // 3. Modules.
    let tree = modules::Tree::scan(&mod_root, &version).map_err(run_err)?;
    let plan = tree
        .plan(modules::REQUIRED, modules::OPTIONAL)
        .map_err(|e| run_err(format!("{} {}: {e}", kpkg.name, kpkg.version)))?;
    for (m, why) in &plan.left_out {
        progress(o.quiet, &format!("optional module {m} left out: {why}"));
    }

    // 4. The initramfs.
    progress(o.quiet, "stripping tandem and collecting its libraries");
    let guest_exe = exe::prepare(&o.tandem_exe, &work)?;
    let busybox = ["bin/busybox", "usr/bin/busybox"]
        .iter()
        .map(|p| broot.join(p))
        .find(|p| p.is_file())
        .ok_or_else(|| run_err(format!("{}: no bin/busybox", bpkg.name)))?;
    let applets = busybox_applets(&busybox)?;
    let archive = initramfs(
        &version,
        &plan,
        &guest_exe,
        &util::read(&busybox)?,
        &applets,
        &tools,
    )
    .map_err(|e| run_err(format!("assembling the initramfs: {e}")))?;
    progress(
        o.quiet,
        &format!("compressing the initramfs ({} entries)", archive.len()),
    );
    let initramfs_bytes = gzip(&archive.to_bytes())?;
    let kernel_bytes = util::read(&vmlinuz)?;
    let kernel_path = o.out.join(KERNEL_FILE);
    let initramfs_path = o.out.join(INITRAMFS_FILE);
    util::write_atomic(&kernel_path, &kernel_bytes)?;
    util::write_atomic(&initramfs_path, &initramfs_bytes)?;

    // 6. The data disk.
    let data_disk = data_disk(o)?;

    // 5. The manifest, last: its presence means the image is complete.
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        kernel_version: version.clone(),
        kernel_cmdline: KERNEL_CMDLINE.into(),
        kernel_package_requested: o.kernel_package.clone(),
        packages: [&kpkg, &bpkg]
            .into_iter()
            .chain(&tool_packages)
            .map(package_record)
            .collect(),
        modules: module_records(&plan),
        optional_modules_left_out: plan
            .left_out
            .iter()
            .map(|(m, why)| format!("{m}: {why}"))
            .collect(),
        files: vec![
            file_record(KERNEL_FILE, &kernel_bytes),
            file_record(INITRAMFS_FILE, &initramfs_bytes),
        ],
        tandem: tandem_record(&o.tandem_exe, &guest_exe)?,
        tools: tools.iter().map(tool_record).collect(),
        data_disk: o.data_disk_bytes.map(|bytes| DataDiskRecord {
            file: DATA_DISK_FILE.into(),
            bytes,
            uuid: disk::UUID.into(),
        }),
    };
    write_manifest(&manifest_path, &manifest)?;
    Ok(Image {
        kernel: kernel_path,
        initramfs: initramfs_path,
        kernel_version: version,
        data_disk,
        manifest: manifest_path,
    })
}

/// The optional ext4 data disk of step 6, in the output directory.
fn data_disk(o: &ImageOptions) -> Result<Option<PathBuf>> {
    let Some(bytes) = o.data_disk_bytes else {
        return Ok(None);
    };
    progress(o.quiet, &format!("data disk: {} MiB", bytes >> 20));
    let p = o.out.join(DATA_DISK_FILE);
    make_data_disk(&p, bytes)?;
    Ok(Some(p))
}

/// The kernel package's module directory for `version` (Debian moved it
/// under /usr with the merged-/usr layout).
fn module_root(kroot: &Path, version: &str, package: &str) -> Result<PathBuf> {
    ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| kroot.join(d).join(version))
        .find(|p| p.is_dir())
        .ok_or_else(|| run_err(format!("{package}: no lib/modules/{version}")))
}

/// Writes the manifest, atomically: its presence means the image is complete.
fn write_manifest(path: &Path, manifest: &Manifest) -> Result<()> {
    let mut json = serde_json::to_string_pretty(manifest)
        .map_err(|e| run_err(format!("writing the manifest: {e}")))?;
    json.push('\n');
    util::write_atomic(path, json.as_bytes())
}

/// Refuses bad options before anything is fetched, creates the output
/// directory and removes an old manifest from it, so that until the new one
/// is written the directory holds no image that `open` would accept. Returns
/// the manifest's path.
fn prepare_output(o: &ImageOptions) -> Result<PathBuf> {
    exe::check(&o.tandem_exe)?;
    packages::check_name(&o.kernel_package)?;
    if let Some(b) = o.data_disk_bytes {
        disk::check_size(b)?;
    }
    if o.out.exists() && !o.out.is_dir() {
        return Err(Error::Usage(format!(
            "output {}: exists and is not a directory",
            o.out.display()
        )));
    }
    std::fs::create_dir_all(&o.out)
        .map_err(|e| run_err(format!("creating {}: {e}", o.out.display())))?;
    let manifest_path = o.out.join(MANIFEST_FILE);
    match std::fs::remove_file(&manifest_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(run_err(format!(
                "removing {}: {e}",
                manifest_path.display()
            )))
        }
    }
    Ok(manifest_path)
}

fn package_record(p: &packages::Package) -> PackageRecord {
    PackageRecord {
        name: p.name.clone(),
        version: p.version.clone(),
        architecture: p.architecture.clone(),
        sha256: p.sha256.clone(),
    }
}

fn module_records(plan: &modules::Plan) -> Vec<ModuleRecord> {
    plan.modules
        .iter()
        .map(|m| ModuleRecord {
            name: m.name.clone(),
            path: m.path.clone(),
            optional: m.optional,
            sha256: util::sha256_hex(&m.data),
        })
        .collect()
}

fn file_record(name: &str, data: &[u8]) -> FileRecord {
    FileRecord {
        name: name.into(),
        bytes: data.len() as u64,
        sha256: util::sha256_hex(data),
    }
}

/// The tandem binary given (`exe`), the one put in the guest and its
/// libraries.
fn tandem_record(exe: &Path, guest_exe: &exe::GuestExe) -> Result<TandemRecord> {
    Ok(TandemRecord {
        sha256: util::sha256_file(exe)?,
        guest_sha256: util::sha256_hex(&guest_exe.stripped),
        libraries: library_records(&guest_exe.libraries),
    })
}

/// Shared libraries (path in the guest, contents) as the manifest lists them.
fn library_records(libs: &[(PathBuf, Vec<u8>)]) -> Vec<FileRecord> {
    libs.iter()
        .map(|(p, d)| file_record(&p.to_string_lossy(), d))
        .collect()
}

/// The guest tools ([`tools::GUEST_TOOLS`]) and the packages they came from.
fn guest_tools(
    cache: &Path,
    work: &util::TempDir,
    quiet: bool,
) -> Result<(Vec<tools::Prepared>, Vec<packages::Package>)> {
    let mut prepared = Vec::new();
    let mut used = Vec::new();
    for t in tools::GUEST_TOOLS {
        progress(
            quiet,
            &format!("{}: {} and its libraries", t.package, t.path),
        );
        let (p, pkgs) = tools::prepare(t, cache, work, quiet)?;
        prepared.push(p);
        used.extend(pkgs);
    }
    Ok((prepared, used))
}

fn tool_record(t: &tools::Prepared) -> ToolRecord {
    ToolRecord {
        path: t.path.to_string_lossy().into_owned(),
        package: t.package.clone(),
        sha256: util::sha256_hex(&t.data),
        libraries: library_records(&t.libraries),
    }
}

/// Find an image built earlier in `dir` without rebuilding: the manifest must
/// be there and the kernel and initramfs must match its hashes.
pub fn open(dir: &Path) -> Result<Image> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let m = read_manifest(dir)?;
    let check = |name: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        let rec =
            m.files.iter().find(|f| f.name == name).ok_or_else(|| {
                Error::Usage(format!("{}: lists no {name}", manifest_path.display()))
            })?;
        if !p.is_file() {
            return Err(Error::Usage(format!(
                "{}: missing (rebuild with tandem vm image --out {})",
                p.display(),
                dir.display()
            )));
        }
        if util::sha256_file(&p)? != rec.sha256 {
            return Err(Error::Usage(format!(
                "{}: does not match {} (rebuild with tandem vm image --out {})",
                p.display(),
                manifest_path.display(),
                dir.display()
            )));
        }
        Ok(p)
    };
    let kernel = check(KERNEL_FILE)?;
    let initramfs = check(INITRAMFS_FILE)?;
    let data_disk = match &m.data_disk {
        Some(d) => {
            let p = dir.join(&d.file);
            if !p.is_file() {
                return Err(Error::Usage(format!(
                    "{}: missing (the manifest lists a data disk)",
                    p.display()
                )));
            }
            Some(p)
        }
        None => None,
    };
    Ok(Image {
        kernel,
        initramfs,
        kernel_version: m.kernel_version,
        data_disk,
        manifest: manifest_path,
    })
}

/// The manifest of the image in `dir`.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&p).map_err(|e| {
        Error::Usage(format!(
            "{}: {e}; is {} an image directory (tandem vm image --out DIR)?",
            p.display(),
            dir.display()
        ))
    })?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::Usage(format!("{}: not a tandem image manifest: {e}", p.display())))?;
    if m.format != MANIFEST_FORMAT {
        return Err(Error::Usage(format!(
            "{}: format {} (this tandem reads {MANIFEST_FORMAT}); rebuild the image",
            p.display(),
            m.format
        )));
    }
    Ok(m)
}

/// The entries of an initramfs written by [`build`] (gunzipped and parsed),
/// to look inside an image.
pub fn read_initramfs(path: &Path) -> Result<Vec<cpio::Parsed>> {
    use std::io::Read;
    let gz = util::read(path)?;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .map_err(|e| run_err(format!("{}: not gzip: {e}", path.display())))?;
    cpio::parse(&raw).map_err(|e| run_err(format!("{}: {e}", path.display())))
}

/// The one `boot/vmlinuz-<version>` of an unpacked kernel package.
fn find_kernel(root: &Path, pkg: &str) -> Result<(String, PathBuf)> {
    let boot = root.join("boot");
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&boot)
        .map_err(|e| {
            run_err(format!(
                "{pkg}: no boot directory ({e}); is it a kernel package?"
            ))
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("vmlinuz-")
                .map(|v| (v.to_string(), e.path()))
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(run_err(format!("{pkg}: no boot/vmlinuz-*"))),
        _ => Err(run_err(format!(
            "{pkg}: several kernels: {}",
            found
                .iter()
                .map(|(v, _)| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// busybox's applets with their install paths (`bin/sh`, `sbin/insmod`, ...),
/// asked of the busybox binary itself (static, so it runs on the build host).
fn busybox_applets(busybox: &Path) -> Result<Vec<String>> {
    let out = util::run(Command::new(busybox).arg("--list-full"))?;
    let list: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().trim_start_matches('/').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if !list.iter().any(|l| l == "bin/sh") {
        return Err(run_err(format!(
            "{} --list-full names no bin/sh",
            busybox.display()
        )));
    }
    Ok(list)
}

/// The initramfs's entries.
fn initramfs(
    version: &str,
    plan: &modules::Plan,
    guest_exe: &exe::GuestExe,
    busybox: &[u8],
    applets: &[String],
    tools: &[tools::Prepared],
) -> std::result::Result<cpio::Archive, String> {
    let mut a = cpio::Archive::new();
    for d in [
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "run",
        "data",
        "etc/tandem",
    ] {
        a.dir(d, 0o755)?;
    }
    a.dir("tmp", 0o1777)?;
    a.dir("root", 0o700)?;
    // The kernel opens /dev/console for /init before devtmpfs is mounted.
    a.char_dev("dev/console", 0o600, 5, 1)?;
    a.file("init", 0o755, init::SCRIPT.as_bytes().to_vec())?;
    a.file("bin/busybox", 0o755, busybox.to_vec())?;
    a.file("bin/tandem", 0o755, guest_exe.stripped.clone())?;
    for (p, d) in &guest_exe.libraries {
        a.file(&p.to_string_lossy(), 0o755, d.clone())?;
    }
    for t in tools {
        a.file(&t.path.to_string_lossy(), 0o755, t.data.clone())?;
        for (p, d) in &t.libraries {
            let p = p.to_string_lossy();
            // libc and the loader come with tandem too (the same host
            // files); a different file at the same path is an error.
            match guest_exe
                .libraries
                .iter()
                .find(|(q, _)| q.to_string_lossy() == p)
            {
                Some((_, same)) if same == d => {}
                _ => a.file(&p, 0o755, d.clone())?,
            }
        }
    }
    for m in &plan.modules {
        a.file(
            &format!("lib/modules/{version}/{}", m.path),
            0o644,
            m.data.clone(),
        )?;
    }
    a.file(
        "etc/tandem/modules",
        0o644,
        modules::list_file(version, &plan.modules).into_bytes(),
    )?;
    for app in applets {
        // Never shadow a real file (an applet named like a library or tandem).
        if !a.contains(app) {
            a.symlink(app, "/bin/busybox")?;
        }
    }
    Ok(a)
}

/// gzip with a zero mtime and no file name, so equal input gives equal output.
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    enc.write_all(data)
        .and_then(|()| enc.finish())
        .map_err(|e| run_err(format!("compressing the initramfs: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_show_their_message_alone() {
        let e = Error::Usage("--size: not a size".into());
        assert_eq!(e.to_string(), "--size: not a size");
        let e: Box<dyn std::error::Error> = Box::new(Error::Run("mount failed".into()));
        assert_eq!(e.to_string(), "mount failed");
    }

    #[test]
    fn gzip_is_reproducible_and_carries_no_time() {
        let a = gzip(b"tandem tandem tandem").unwrap();
        assert_eq!(a, gzip(b"tandem tandem tandem").unwrap());
        assert_eq!(&a[..3], &[0x1f, 0x8b, 8]);
        assert_eq!(a[3] & 0x08, 0, "no file name");
        assert_eq!(&a[4..8], &[0, 0, 0, 0], "mtime 0");
        let mut back = Vec::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(&a[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, b"tandem tandem tandem");
    }

    #[test]
    fn bad_options_are_usage_errors() {
        let d = util::TempDir::new("tandem-vmimage-opt").unwrap();
        // An x86-64 ELF executable: the test binary.
        let exe = std::env::current_exe().unwrap();
        let mut o = ImageOptions::new(d.path().join("out"), d.path().join("none"));
        assert!(matches!(build(&o), Err(Error::Usage(m)) if m.contains("no such file")));
        o.tandem_exe = exe;
        o.kernel_package = "-o Dir=/".into();
        assert!(matches!(build(&o), Err(Error::Usage(m)) if m.contains("package name")));
        o.kernel_package = DEFAULT_KERNEL_PACKAGE.into();
        o.data_disk_bytes = Some(1 << 20);
        assert!(matches!(build(&o), Err(Error::Usage(m)) if m.contains("data disk")));
        o.data_disk_bytes = None;
        std::fs::write(d.path().join("file"), b"x").unwrap();
        o.out = d.path().join("file");
        assert!(matches!(build(&o), Err(Error::Usage(m)) if m.contains("not a directory")));
        assert!(!d.path().join("out").exists(), "nothing made on bad input");
    }

    #[test]
    fn open_refuses_what_is_not_a_complete_image() {
        let d = util::TempDir::new("tandem-vmimage-open").unwrap();
        assert!(matches!(open(d.path()), Err(Error::Usage(m)) if m.contains("manifest.json")));
        std::fs::write(d.path().join(MANIFEST_FILE), b"{}").unwrap();
        assert!(matches!(open(d.path()), Err(Error::Usage(m)) if m.contains("not a tandem image")));
        let kernel = b"kernel".to_vec();
        let m = Manifest {
            format: MANIFEST_FORMAT,
            kernel_version: "9.9".into(),
            kernel_cmdline: KERNEL_CMDLINE.into(),
            kernel_package_requested: DEFAULT_KERNEL_PACKAGE.into(),
            packages: vec![],
            modules: vec![],
            optional_modules_left_out: vec![],
            files: vec![
                FileRecord {
                    name: KERNEL_FILE.into(),
                    bytes: 6,
                    sha256: util::sha256_hex(&kernel),
                },
                FileRecord {
                    name: INITRAMFS_FILE.into(),
                    bytes: 2,
                    sha256: util::sha256_hex(b"ir"),
                },
            ],
            tandem: TandemRecord {
                sha256: String::new(),
                guest_sha256: String::new(),
                libraries: vec![],
            },
            tools: vec![],
            data_disk: None,
        };
        std::fs::write(
            d.path().join(MANIFEST_FILE),
            serde_json::to_string(&m).unwrap(),
        )
        .unwrap();
        std::fs::write(d.path().join(KERNEL_FILE), &kernel).unwrap();
        assert!(matches!(open(d.path()), Err(Error::Usage(m)) if m.contains("missing")));
        std::fs::write(d.path().join(INITRAMFS_FILE), b"XX").unwrap();
        assert!(matches!(open(d.path()), Err(Error::Usage(m)) if m.contains("does not match")));
        std::fs::write(d.path().join(INITRAMFS_FILE), b"ir").unwrap();
        let img = open(d.path()).unwrap();
        assert_eq!(img.kernel_version, "9.9");
        assert_eq!(img.kernel, d.path().join(KERNEL_FILE));
        assert_eq!(img.data_disk, None);
    }
}
