//! Loop devices of tandem's own: created with an index no other user picks
//! first, attached to the emulator's image, detached and removed again.
//!
//! Every step from choosing an index to attaching the file happens under an
//! exclusive `flock` on `/dev/loop-control` ([`LoopControl::lock`]), and so
//! does the removal of a device that is not attached. An index is recorded
//! (by the caller's `record`) before the device is created, so that a kill at
//! any moment leaves a record of it; and a device found unattached under the
//! lock cannot be one that another tandem is between creating and attaching,
//! so removing it never takes another instance's device.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::{run_err, Result};

/// `LOOP_CTL_ADD` and `LOOP_CTL_REMOVE` (include/uapi/linux/loop.h).
const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;

/// The first index tandem tries: away from the ones `losetup -f` hands out
/// first (the lowest free).
const FIRST_INDEX: u32 = 64;
/// One past the last index tried.
const END_INDEX: u32 = 1024;

/// How long to wait for another tandem holding the lock (it holds it for
/// the few milliseconds of a `losetup`, or while retrying a busy removal).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// What a loop device index is now.
#[derive(Debug, PartialEq, Eq)]
pub enum LoopState {
    /// No such device.
    Absent,
    /// The device exists with no file attached.
    Unbound,
    /// Attached to this file.
    Bound(PathBuf),
}

/// The state of `/dev/loop<n>`, from sysfs.
pub fn state(n: u32) -> LoopState {
    let sys = PathBuf::from(format!("/sys/block/loop{n}"));
    if !sys.exists() {
        return LoopState::Absent;
    }
    match std::fs::read_to_string(sys.join("loop/backing_file")) {
        Ok(b) => LoopState::Bound(PathBuf::from(b.trim())),
        Err(_) => LoopState::Unbound,
    }
}

/// `/dev/loop-control`, locked.
pub struct LoopControl(Flock<File>);

impl LoopControl {
    /// Opens `/dev/loop-control` and takes its lock, waiting for another
    /// tandem that holds it.
    pub fn lock() -> Result<LoopControl> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/loop-control")
                .map_err(|e| {
                    run_err(format!(
                        "/dev/loop-control: {e} (is the loop module loaded?)"
                    ))
                })?;
            match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(l) => return Ok(LoopControl(l)),
                Err((_, e)) if e == nix::errno::Errno::EWOULDBLOCK => {
                    if Instant::now() > deadline {
                        return Err(run_err(
                            "/dev/loop-control: another tandem held its lock for 30 s",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err((_, e)) => return Err(run_err(format!("locking /dev/loop-control: {e}"))),
            }
        }
    }

    fn ioctl(&self, req: libc::c_ulong, n: u32) -> std::io::Result<()> {
        // SAFETY: LOOP_CTL_ADD and LOOP_CTL_REMOVE take the index as their
        // integer argument and touch no memory of ours.
        // Why no crate: neither nix nor rustix wraps these two requests (nix's
        // ioctl macros generate this same unsafe call); `loopdev-3` has
        // LOOP_CTL_ADD but no LOOP_CTL_REMOVE, and needs libclang to build
        // (bindgen); `loopdev` is unmaintained since 2022.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), req as _, n as libc::c_ulong) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Creates a loop device with a free index from [`FIRST_INDEX`] up and
    /// returns its index. `record` is called with each index before it is
    /// created, and must keep it where a later cleanup finds it.
    pub fn add(&self, mut record: impl FnMut(u32) -> Result<()>) -> Result<u32> {
        for n in FIRST_INDEX..END_INDEX {
            if state(n) != LoopState::Absent {
                continue;
            }
            record(n)?;
            if let Err(e) = self.ioctl(LOOP_CTL_ADD, n) {
                if e.raw_os_error() == Some(libc::EEXIST) {
                    continue;
                }
                return Err(run_err(format!("creating /dev/loop{n}: {e}")));
            }
            let node = PathBuf::from(format!("/dev/loop{n}"));
            let deadline = Instant::now() + Duration::from_secs(5);
            while !node.exists() {
                if Instant::now() > deadline {
                    let _ = self.remove_unbound(n);
                    return Err(run_err(format!("{} did not appear", node.display())));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            return Ok(n);
        }
        Err(run_err(format!(
            "no free loop device index below {END_INDEX}"
        )))
    }

    /// Removes `/dev/loop<n>` if it exists with no file attached (retrying
    /// while a brief opener such as udev's probe holds it). A device bound to
    /// a file is left alone: whoever attached it owns it.
    pub fn remove_unbound(&self, n: u32) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match state(n) {
                LoopState::Absent | LoopState::Bound(_) => return Ok(()),
                LoopState::Unbound => {}
            }
            match self.ioctl(LOOP_CTL_REMOVE, n) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(run_err(format!(
                        "/dev/loop{n}: could not remove the loop device: {e}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Whether `/dev/loop<n>` is attached to `file`.
pub fn bound_to(n: u32, file: &Path) -> bool {
    matches!(state(n), LoopState::Bound(b) if b == file)
}

/// The index of a loop device path (`/dev/loop7` -> 7).
pub fn index_of(dev: &str) -> Option<u32> {
    dev.strip_prefix("/dev/loop")?.parse().ok()
}
