//! `tandem vm image`: two builds from one .deb cache give byte-identical
//! images, and the image boots under QEMU (TCG, no KVM needed) to the guest's
//! ready line with BFQ available on the data disk, the benchmark port named
//! and the data disk mounted.
//!
//! Needs apt (it fetches linux-image-amd64 and busybox-static with apt-get
//! download), objcopy, mkfs.ext4 and qemu-system-x86_64; `.ci/run` installs
//! the last three when missing.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::Scratch;

/// A QEMU process, killed and reaped on drop (a failed assertion or a
/// timeout leaves no QEMU behind).
struct Qemu(Child);
impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .expect("run tandem")
}

fn build(out: &Path, cache: &Path) {
    let started = Instant::now();
    let o = tandem(&[
        "vm",
        "image",
        "--out",
        out.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--data-mib",
        "64",
        "--quiet",
    ]);
    assert!(
        o.status.success(),
        "tandem vm image: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!(
        "built {} in {:.1} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    for f in ["vmlinuz", "initramfs.img", "data.img", "manifest.json"] {
        assert!(
            stdout.contains(out.join(f).to_str().unwrap()),
            "output paths: {stdout}"
        );
    }
}

#[test]
fn two_builds_are_identical_and_the_guest_boots_to_ready() {
    let s = Scratch::new("vm-image");
    let cache = s.0.join("cache");
    let (a, b) = (s.0.join("a"), s.0.join("b"));
    build(&a, &cache);
    build(&b, &cache);
    for f in ["vmlinuz", "initramfs.img", "manifest.json", "data.img"] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(x == y, "{f} differs between two builds");
    }
    // The second build used the cached .debs: one of each package.
    let debs = std::fs::read_dir(&cache).unwrap().count();
    assert_eq!(debs, 2, "cache holds the kernel's and busybox's .deb");

    let img = vmimage::open(&a).unwrap();
    let manifest = vmimage::read_manifest(&a).unwrap();
    assert_eq!(img.kernel_version, manifest.kernel_version);
    assert_eq!(img.data_disk.as_deref(), Some(a.join("data.img").as_path()));
    let names: Vec<&str> = manifest.modules.iter().map(|m| m.name.as_str()).collect();
    for m in ["virtio_pci", "virtio_blk", "virtio_console", "bfq", "ext4"] {
        assert!(names.contains(&m), "{m} in {names:?}");
    }
    let pos = |m: &str| names.iter().position(|n| *n == m).unwrap();
    assert!(pos("virtio_ring") < pos("virtio") && pos("virtio") < pos("virtio_pci"));
    assert!(pos("jbd2") < pos("ext4") && pos("mbcache") < pos("ext4"));

    // What the initramfs holds.
    let entries = vmimage::read_initramfs(&img.initramfs).unwrap();
    let get = |n: &str| entries.iter().find(|e| e.name == n);
    for n in [
        "init",
        "bin/busybox",
        "bin/tandem",
        "etc/tandem/modules",
        "dev/console",
    ] {
        assert!(get(n).is_some(), "{n} in the initramfs");
    }
    assert!(get("bin/sh").unwrap().is_symlink());
    assert!(get("sbin/insmod").is_some() || get("bin/insmod").is_some());
    for lib in &manifest.tandem.libraries {
        let e = get(lib.name.trim_start_matches('/')).unwrap();
        assert!(e.is_file(), "{}", lib.name);
    }
    assert!(
        manifest
            .tandem
            .libraries
            .iter()
            .any(|l| l.name.contains("ld-linux")),
        "the dynamic loader goes with tandem"
    );
    let list = String::from_utf8_lossy(&get("etc/tandem/modules").unwrap().data).to_string();
    assert!(list.contains("/bfq.ko\n"), "{list}");
    assert!(
        list.contains("vmw_vsock_virtio_transport.ko optional"),
        "{list}"
    );

    // Boot it.
    let log = s.0.join("console.log");
    let sock = s.0.join("bench.sock");
    let started = Instant::now();
    let child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "512",
            "-nodefaults",
            "-display",
            "none",
        ])
        .args(["-no-reboot", "-serial"])
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&img.kernel)
        .arg("-initrd")
        .arg(&img.initramfs)
        .arg("-append")
        .arg(format!("{} tandem.smoke=1", vmimage::KERNEL_CMDLINE))
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d0,format=raw,cache=none,aio=native",
            img.data_disk.as_ref().unwrap().display()
        ))
        .args(["-device", "virtio-blk-pci,drive=d0"])
        .args(["-device", "virtio-serial-pci", "-chardev"])
        .arg(format!(
            "socket,id=c0,path={},server=on,wait=off",
            sock.display()
        ))
        .args(["-device", "virtserialport,chardev=c0,name=tandem.bench"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("qemu-system-x86_64 (Debian: apt-get install qemu-system-x86)");
    let mut qemu = Qemu(child);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut ready_at = None;
    let timeout = Duration::from_secs(120);
    let exited = loop {
        if ready_at.is_none() && vmimage::parse_ready(&read_log()).is_some() {
            ready_at = Some(started.elapsed());
        }
        if let Some(st) = qemu.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < timeout,
            "no power-off within {timeout:?}; console:\n{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut qemu_err = String::new();
    if let Some(e) = qemu.0.stderr.as_mut() {
        let _ = e.read_to_string(&mut qemu_err);
    }
    let console = read_log();
    assert!(
        exited.success(),
        "QEMU: {exited}: {qemu_err}\nconsole:\n{console}"
    );
    let ready = vmimage::parse_ready(&console)
        .unwrap_or_else(|| panic!("no ready line; console:\n{console}"));
    eprintln!(
        "boot to ready line: {:.1} s (TCG); to power-off: {:.1} s\n{}",
        ready_at.unwrap().as_secs_f64(),
        started.elapsed().as_secs_f64(),
        console.trim()
    );
    assert_eq!(ready.kernel, manifest.kernel_version);
    assert!(
        ready.has_scheduler("bfq"),
        "bfq among vda's schedulers: {:?}",
        ready.vda_schedulers
    );
    assert!(
        ready.ports.iter().any(|p| p == vmimage::BENCH_PORT),
        "ports: {:?}",
        ready.ports
    );
    assert!(ready.data, "data disk mounted");
    assert!(
        console.contains("tandem-guest-exe: tandem "),
        "tandem runs in the guest:\n{console}"
    );
    assert!(!console.contains("insmod"), "no module failed:\n{console}");
}

#[test]
fn usage_errors_exit_with_code_2() {
    let s = Scratch::new("vm-image-usage");
    let out = s.0.join("out");
    let o = tandem(&[
        "vm",
        "image",
        "--out",
        out.to_str().unwrap(),
        "--data-mib",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--data-mib"));
    let o = tandem(&[
        "vm",
        "image",
        "--out",
        out.to_str().unwrap(),
        "--kernel-package",
        "Bad/Name",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("package name"));
    let o = tandem(&[
        "vm",
        "image",
        "--out",
        out.to_str().unwrap(),
        "--kernel-package",
        "tandem-no-such-package",
        "--quiet",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("tandem-no-such-package"));
    let o = tandem(&["vm", "image"]);
    assert_eq!(o.status.code(), Some(2), "--out is required");
}
