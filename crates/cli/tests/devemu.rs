//! `tandem devemu`: lifecycle, data path, timing against the model, teardown.
//!
//! Most tests need root, /dev/fuse and loop devices: they are ignored by
//! default, and CI runs them as root with `-- --include-ignored`.
//! The tests run one at a time: they measure timing.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

mod common;
use common::tandem;

static SERIAL: Mutex<()> = Mutex::new(());

fn can_run() -> bool {
    devemu::is_root() && Path::new("/dev/fuse").exists() && Path::new("/dev/loop-control").exists()
}

fn up(model: &str, size: &str) -> String {
    let out = tandem(&["devemu", "up", "--model", model, "--size", size]);
    assert!(
        out.status.success(),
        "devemu up failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(dev.starts_with("/dev/loop"), "{dev}");
    dev
}

/// Tears an emulated device down when a test ends before its own `down`
/// (a failed assertion): a panicking test must not leave a loop device, a
/// FUSE mount and a daemon behind. After a successful `down` it finds
/// nothing to do.
struct DownOnDrop(String);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if devemu::control::find(&self.0).is_ok() {
            let _ = tandem(&["devemu", "down", &self.0]);
        }
    }
}

fn loop_attached(dev: &str) -> bool {
    let name = dev.trim_start_matches("/dev/");
    Path::new(&format!("/sys/block/{name}/loop/backing_file")).exists()
}

fn fuse_mounted(mp: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(mp.to_str().unwrap()))
}

struct Aligned(Vec<u8>, usize);
impl Aligned {
    fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + 4096];
        let off = (4096 - (v.as_ptr() as usize % 4096)) % 4096;
        Aligned(v, off)
    }
    fn buf(&mut self, len: usize) -> &mut [u8] {
        &mut self.0[self.1..self.1 + len]
    }
}

#[test]
#[ignore = "needs root: FUSE and a loop device"]
fn up_data_timing_status_down() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(can_run(), "needs root, /dev/fuse and /dev/loop-control");
    let dev = up("hdd-1.8in", "2G");
    let _down = DownOnDrop(dev.clone());
    let inst = devemu::control::find(&dev).expect("recorded");
    assert!(loop_attached(&dev));
    assert!(fuse_mounted(&inst.mountpoint));
    assert!(inst.daemon_alive());
    assert_eq!(std::fs::metadata(&inst.backing).unwrap().len(), 2 << 30);

    // status lists it
    let st = tandem(&["devemu", "status"]);
    assert!(String::from_utf8_lossy(&st.stdout).contains(&dev));

    // Reads through the loop device return the backing file's bytes.
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&inst.backing)
        .unwrap();
    backing.write_all_at(&pattern, 1 << 20).unwrap();
    let blk = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&dev)
        .unwrap();
    let mut a = Aligned::new(8192);
    blk.read_exact_at(a.buf(8192), 1 << 20).unwrap();
    assert_eq!(a.buf(8192), &pattern[..]);
    // ... and writes land in the backing file.
    let mut w = Aligned::new(4096);
    w.buf(4096)
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8);
    blk.write_all_at(w.buf(4096), 3 << 20).unwrap();
    let mut back = vec![0u8; 4096];
    backing.read_exact_at(&mut back, 3 << 20).unwrap();
    assert_eq!(&back[..], w.buf(4096));
    drop(blk);
    drop(backing);

    // Timing against the model on a small probe: sequential within 5%,
    // random 4 KiB IOPS within 10%. This machine is a virtual one, and while
    // the hypervisor runs other guests on its CPUs (steal) every request
    // comes late (`devemu::probe::STEAL_WARN_SHARE`): a probe that misses
    // under steal is taken again, up to three in all. The tests run before
    // this one leave write-back behind on the host's disk, where the backing
    // file lives: it is flushed first, and a first miss without steal gets
    // one more probe (a full `cargo test` run missed once here, 1 time in
    // 2; alone, the test passed 5 times out of 5). Two misses without steal
    // fail.
    let _ = std::process::Command::new("sync").status();
    let mut attempts = Vec::new();
    let mut within = false;
    let mut stolen = true;
    while !within && (stolen || attempts.len() == 1) && attempts.len() < 3 {
        let r = devemu::probe(
            &dev,
            &devemu::ProbeOptions {
                model: None,
                seq_bytes: 16 << 20,
                rand_reads: 300,
                seed: 3,
            },
        )
        .expect("probe");
        let (se, re) = (r.seq_error().unwrap(), r.rand_error().unwrap());
        within = se.abs() <= 0.05 && re.abs() <= 0.10;
        stolen = r.steal_share.unwrap_or(0.0) > devemu::probe::STEAL_WARN_SHARE;
        attempts.push(format!(
            "sequential {:.2} MB/s vs model {:.2}, random {:.1} IOPS vs model {:.1}, CPU steal {:.1}%",
            r.seq_mb_s,
            r.seq_model_mb_s.unwrap(),
            r.rand_iops,
            r.rand_model_iops.unwrap(),
            r.steal_share.unwrap_or(0.0) * 100.0
        ));
    }
    assert!(
        within,
        "no probe within the tolerances:\n{}",
        attempts.join("\n")
    );

    // down leaves nothing.
    let out = tandem(&["devemu", "down", &dev]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!loop_attached(&dev));
    assert!(!Path::new(&dev).exists(), "the loop device node is removed");
    assert!(!fuse_mounted(&inst.mountpoint));
    assert!(!inst.daemon_alive());
    assert!(!inst.backing.exists());
    assert!(!inst.state_dir().exists());
    let st = tandem(&["devemu", "status"]);
    assert!(!String::from_utf8_lossy(&st.stdout).contains(&dev));
}

#[test]
#[ignore = "needs root: FUSE and a loop device"]
fn down_after_the_daemon_died() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(can_run(), "needs root, /dev/fuse and /dev/loop-control");
    let dev = up("emmc", "64M");
    let _down = DownOnDrop(dev.clone());
    let inst = devemu::control::find(&dev).unwrap();
    common::send_signal(inst.pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let out = tandem(&["devemu", "down", &dev]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!loop_attached(&dev));
    assert!(!fuse_mounted(&inst.mountpoint));
    assert!(!inst.backing.exists());
}

#[test]
fn bad_input_is_refused_with_code_2() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = tandem(&["devemu", "up", "--model", "floppy", "--size", "1G"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("floppy") && err.contains("hdd-1.8in") && err.contains("emmc"),
        "{err}"
    );

    let out = tandem(&["devemu", "up", "--model", "emmc", "--size", "12X"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad size"));

    // Below what the calibration at bring-up reads (its first 64 MiB): it
    // could never come up.
    for size in ["1M", "63M", "67108860"] {
        let out = tandem(&["devemu", "up", "--model", "emmc", "--size", size]);
        assert_eq!(out.status.code(), Some(2), "{size}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains("at least 64M") && e.contains("calibration"),
            "{e}"
        );
    }

    let out = tandem(&["devemu", "up", "--model", "emmc", "--size", "100G"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("capacity"));

    if devemu::is_root() {
        let out = tandem(&["devemu", "down", "/dev/loop7"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr)
            .contains("not a device brought up by tandem devemu"));
    } else {
        let out = tandem(&["devemu", "up", "--model", "emmc", "--size", "1G"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("root"));
    }
}

#[test]
#[ignore = "needs root: FUSE and a loop device"]
fn the_smallest_device_comes_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(can_run(), "needs root, /dev/fuse and /dev/loop-control");
    for model in ["instant", "hdd-1.8in"] {
        let dev = up(model, "64M");
        let _down = DownOnDrop(dev.clone());
        let name = dev.trim_start_matches("/dev/");
        let sectors: u64 = std::fs::read_to_string(format!("/sys/block/{name}/size"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(sectors * 512, 64 << 20);
        let out = tandem(&["devemu", "down", &dev]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
