//! Which process is a VM's QEMU, and whether it still runs.
//!
//! hostd changes the I/O priority, cgroup and BFQ knobs of the process a
//! configuration names, so that process must be a QEMU: its executable
//! (`/proc/PID/exe`) and its command line's first word both name a QEMU
//! system emulator (`qemu-system-ARCH`, or `qemu-kvm` as some distributions
//! call it). A process id names the same process only with its start time
//! (field 22 of `/proc/PID/stat`): hostd checks both before each boost, so a
//! reused id is never boosted.
//!
//! A VM has exited only when the kernel says its process is gone (`kill(pid,
//! 0)` fails with `ESRCH`) or the id now names a process started at another
//! time. Any other failure (out of descriptors, `EMFILE`, while reading
//! `/proc`) says nothing about the VM: it is asked again later.

use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::{err, Result};

/// Whether a file name is a QEMU system emulator's.
pub fn is_qemu_name(name: &str) -> bool {
    name.strip_prefix("qemu-system-")
        .is_some_and(|arch| !arch.is_empty())
        || name == "qemu-kvm"
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// A process id and its start time: one process, never another that reuses
/// the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: u32,
    pub start: u64,
}

/// What the kernel says of a [`ProcessId`] now.
#[derive(Debug)]
pub enum Liveness {
    /// The same process runs.
    Running,
    /// It exited (`ESRCH`), or its id names another process now.
    Gone,
    /// No answer (an error reading `/proc`): ask again later.
    Unknown(io::Error),
}

/// Field 22 of `/proc/PID/stat` (start time in clock ticks after boot), or
/// the error that kept it from being read.
pub fn read_start_time(pid: u32) -> io::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&s).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no start time"),
        )
    })
}

/// The start time in a `/proc/PID/stat` line. The command name may hold
/// spaces and parentheses: the fields start after the last ')'.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split(' ').nth(19)?.parse().ok()
}

impl ProcessId {
    /// Whether the process still runs (see the module's documentation).
    pub fn liveness(&self) -> Liveness {
        // Any other answer (EPERM included: hostd runs as root, a test may
        // not) means the id names a process: its start time says which.
        if let Err(Errno::ESRCH) = kill(Pid::from_raw(self.pid as i32), None) {
            return Liveness::Gone;
        }
        match read_start_time(self.pid) {
            Ok(s) if s == self.start => Liveness::Running,
            Ok(_) => Liveness::Gone,
            // Gone between the two calls.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Liveness::Gone,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Liveness::Gone,
            Err(e) => Liveness::Unknown(e),
        }
    }
}

/// The executable of process `pid`, as the kernel names it (without the
/// " (deleted)" an upgraded QEMU binary shows).
fn exe(pid: u32) -> io::Result<PathBuf> {
    let p = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let s = p.to_string_lossy();
    Ok(PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s)))
}

/// The first word of process `pid`'s command line.
fn argv0(pid: u32) -> io::Result<String> {
    let c = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let first = c.split(|b| *b == 0).next().unwrap_or(&[]);
    Ok(String::from_utf8_lossy(first).into_owned())
}

/// Checks that `pid` is a running QEMU (executable and command line) and
/// returns it with its start time. `what` names it in errors (e.g. "VM vm1").
pub fn check_qemu(pid: u32, what: &str) -> Result<ProcessId> {
    if pid == 0 {
        return Err(err(format!("{what}: pid=0 is no process")));
    }
    let start = read_start_time(pid).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::NotFound {
            "no such process".to_string()
        } else {
            e.to_string()
        };
        err(format!("{what}: QEMU process {pid}: {why}"))
    })?;
    let exe = exe(pid).map_err(|e| {
        err(format!(
            "{what}: pid={pid} cannot be checked to be a QEMU process: /proc/{pid}/exe: {e}{}",
            crate::listen::root_hint(&e, Path::new("/proc"))
        ))
    })?;
    let argv0 = argv0(pid).map_err(|e| err(format!("{what}: /proc/{pid}/cmdline: {e}")))?;
    let exe_name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !is_qemu_name(exe_name) || !is_qemu_name(file_name(&argv0)) {
        return Err(err(format!(
            "{what}: pid={pid} is not a QEMU process (its executable is {}, its command {argv0:?}); give the pid of the VM's qemu-system-* process (e.g. from its -pidfile)",
            exe.display()
        )));
    }
    Ok(ProcessId { pid, start })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_names() {
        for n in ["qemu-system-x86_64", "qemu-system-aarch64", "qemu-kvm"] {
            assert!(is_qemu_name(n), "{n}");
        }
        for n in [
            "qemu-system-",
            "qemu-img",
            "sleep",
            "systemd",
            "",
            "xqemu-kvm",
        ] {
            assert!(!is_qemu_name(n), "{n}");
        }
    }

    #[test]
    fn start_time_parsing_survives_odd_command_names() {
        let stat = "12 (a) b (c)) S 1 12 12 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 1000 10";
        assert_eq!(parse_start_time(stat), Some(4242));
        assert_eq!(parse_start_time("12 (x"), None);
        assert_eq!(parse_start_time("12 (x)"), None);
    }

    #[test]
    fn this_process_is_not_qemu_and_is_running() {
        let me = std::process::id();
        let e = check_qemu(me, "VM t").unwrap_err().0;
        assert!(e.contains("is not a QEMU process"), "{e}");
        assert!(check_qemu(1, "VM t").is_err());
        assert!(check_qemu(0, "VM t").unwrap_err().0.contains("pid=0"));
        let id = ProcessId {
            pid: me,
            start: read_start_time(me).unwrap(),
        };
        assert!(matches!(id.liveness(), Liveness::Running));
        // The same id with another start time is another process.
        let other = ProcessId {
            start: id.start + 1,
            ..id
        };
        assert!(matches!(other.liveness(), Liveness::Gone));
    }

    #[test]
    fn an_exited_process_is_gone() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        let start = read_start_time(pid).unwrap_or(0);
        c.wait().unwrap();
        assert!(matches!(
            ProcessId { pid, start }.liveness(),
            Liveness::Gone
        ));
    }
}
