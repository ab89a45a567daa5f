//! The kernel interfaces the daemons use: `ioprio_get`/`ioprio_set`, the
//! threads of a process in `/proc`, per-process I/O accounting, the process
//! connector (netlink) for execs and exits, and signals.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// `IOPRIO_WHO_PROCESS` (include/uapi/linux/ioprio.h): `who` is a thread id.
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
/// include/uapi/linux/ioprio.h
pub const IOPRIO_CLASS_SHIFT: u32 = 13;
pub const IOPRIO_CLASS_NONE: u32 = 0;
pub const IOPRIO_CLASS_RT: u32 = 1;
pub const IOPRIO_CLASS_BE: u32 = 2;
pub const IOPRIO_CLASS_IDLE: u32 = 3;

/// An ioprio value from class and level.
pub fn ioprio_value(class: u32, level: u32) -> u32 {
    (class << IOPRIO_CLASS_SHIFT) | (level & 7)
}

/// Readable form of an ioprio value, e.g. `rt/4`.
pub fn ioprio_show(v: u32) -> String {
    let class = match v >> IOPRIO_CLASS_SHIFT {
        IOPRIO_CLASS_NONE => "none",
        IOPRIO_CLASS_RT => "rt",
        IOPRIO_CLASS_BE => "be",
        IOPRIO_CLASS_IDLE => "idle",
        _ => "?",
    };
    format!("{class}/{}", v & 7)
}

// ioprio_get/ioprio_set by raw syscall: neither nix (0.29) nor rustix
// wraps them, and glibc has no wrapper either.

/// The I/O priority of thread `tid`.
pub fn ioprio_get(tid: u32) -> io::Result<u32> {
    // SAFETY: ioprio_get takes two integers.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid as libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

/// Sets the I/O priority of thread `tid`.
pub fn ioprio_set(tid: u32, value: u32) -> io::Result<()> {
    // SAFETY: ioprio_set takes three integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_int,
            value as libc::c_int,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The thread ids of process `pid` (`/proc/PID/task`).
pub fn threads(pid: u32) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Field 22 of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`): the start
/// time in clock ticks after boot. With the id it names a task uniquely, so a
/// reused id is never mistaken for the task it replaced.
pub fn start_time(path_pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{path_pid}/stat")).ok()?;
    crate::vmproc::parse_start_time(&s)
}

/// The process (thread group) thread `tid` belongs to (`Tgid:` in
/// `/proc/TID/status`).
pub fn thread_group(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The parent of process `pid` (field 4 of `/proc/PID/stat`, after the
/// command name, which may hold spaces and parentheses).
pub fn parent_pid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.get(s.rfind(')')? + 2..)?;
    rest.split(' ').nth(1)?.parse().ok()
}

/// The real user id of process `pid` (the first field of `Uid:` in
/// `/proc/PID/status`).
pub fn real_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Start time of thread `tid` of any process.
pub fn thread_start_time(tid: u32) -> Option<u64> {
    start_time(&tid.to_string())
}

/// User + system CPU seconds and resident memory in KiB of process `pid`.
pub fn cpu_and_rss(pid: u32) -> Option<(f64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some(((utime + stime) / hz, rss))
}

/// Bytes the threads of a live process caused to be read from storage: the
/// sum of `read_bytes` over `/proc/PID/task/*/io`. Not `/proc/PID/io`: that
/// one also counts the children the process has reaped (wait_task_zombie
/// adds their I/O to the parent's), so a shell or a launcher would seem to
/// read, after an idle time, everything its finished child read.
pub fn read_bytes(pid: u32) -> Option<u64> {
    let rd = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0u64;
    let mut any = false;
    for e in rd.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("io")) else {
            continue;
        };
        if let Some(v) = s
            .lines()
            .find_map(|l| l.strip_prefix("read_bytes: "))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            sum += v;
            any = true;
        }
    }
    any.then_some(sum)
}

/// The state letter of `/proc/PID/stat` (R, S, D, ...): the field after
/// the command name, which is in parentheses and may hold spaces.
pub fn proc_state(pid: u32) -> Option<char> {
    stat_state(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state letter of a `/proc/PID/stat` line.
fn stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The voluntary and involuntary context switches of a `/proc/PID/status`
/// text (`voluntary_ctxt_switches`, `nonvoluntary_ctxt_switches`).
pub fn ctxt_switches(status: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    (
        field("voluntary_ctxt_switches"),
        field("nonvoluntary_ctxt_switches"),
    )
}

/// What process `pid`'s leader shows of its use of the CPU now, read at
/// `at`: its state (`/proc/PID/stat`), run and run-queue wait times
/// (`/proc/PID/schedstat`, absent without `CONFIG_SCHED_INFO`) and context
/// switches (`/proc/PID/status`). `None` once the process is gone. The
/// policy crate judges it ([`policy::detect::CpuReading::on_cpu_since`]).
pub fn cpu_reading(pid: u32, at: u64) -> Option<policy::detect::CpuReading> {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).ok();
    cpu_reading_of(
        at,
        &read("stat")?,
        read("schedstat").as_deref(),
        read("status").as_deref(),
    )
}

/// [`cpu_reading`] from the texts of the three files (the schedstat and
/// status ones if read).
pub fn cpu_reading_of(
    at: u64,
    stat: &str,
    schedstat: Option<&str>,
    status: Option<&str>,
) -> Option<policy::detect::CpuReading> {
    let state = stat_state(stat)?;
    let sched = schedstat.and_then(crate::cfsv::parse_schedstat);
    let (voluntary, involuntary) = status.map_or((None, None), ctxt_switches);
    Some(policy::detect::CpuReading {
        at,
        runnable: state == 'R',
        run_ns: sched.map(|s| s.run_ns),
        wait_ns: sched.map(|s| s.wait_ns),
        voluntary,
        involuntary,
    })
}

/// The first `words` words of process `pid`'s command line, for a log.
pub fn command_head(pid: u32, words: usize) -> Option<String> {
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let head: Vec<String> = argv
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .take(words)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!head.is_empty()).then(|| head.join(" "))
}

/// All process ids in `/proc`.
pub fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_reload_signal(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

fn handle(sig: nix::sys::signal::Signal, f: extern "C" fn(libc::c_int)) {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let sa = SigAction::new(SigHandler::Handler(f), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handlers only store an atomic.
    let _ = unsafe { sigaction(sig, &sa) };
}

fn ignore_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_IGN runs no code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// Turns SIGINT, SIGTERM and SIGHUP into a flag ([`stop_requested`]) and
/// ignores SIGPIPE (a closed channel is seen as a write error).
pub fn install_stop_handlers() {
    use nix::sys::signal::Signal;
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        handle(s, on_stop_signal);
    }
    ignore_sigpipe();
}

/// As [`install_stop_handlers`], but SIGHUP asks for a reload
/// ([`reload_requested`]) instead of a stop: a daemon's usual meaning.
pub fn install_daemon_handlers() {
    use nix::sys::signal::Signal;
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        handle(s, on_stop_signal);
    }
    handle(Signal::SIGHUP, on_reload_signal);
    ignore_sigpipe();
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Whether SIGHUP arrived since the last call (see [`install_daemon_handlers`]).
pub fn reload_requested() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}

/// What the process connector reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcEvent {
    Exec { pid: u32 },
    Exit { pid: u32 },
}

/// The kernel's process connector (`NETLINK_CONNECTOR`, `CN_IDX_PROC`):
/// exec and exit events of every process. Needs root (`CAP_NET_ADMIN`).
///
/// The socket is netlink-sys's; the messages are built and parsed here
/// (`cn_msg` and `proc_event`, from the kernel's connector.h and cn_proc.h):
/// no well-kept crate models the process connector's messages (the
/// rust-netlink `netlink-packet-*` crates cover route, generic, audit,
/// netfilter and sock_diag, not the connector).
pub struct ProcConnector {
    socket: netlink_sys::Socket,
}

// include/uapi/linux/connector.h and cn_proc.h
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
const NLMSG_HDR: usize = 16;
const CN_MSG_HDR: usize = 20;

impl ProcConnector {
    pub fn open() -> io::Result<ProcConnector> {
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_CONNECTOR)?;
        // Port 0: the kernel assigns ours; the group is the connector's
        // process-event index.
        socket.bind(&netlink_sys::SocketAddr::new(0, CN_IDX_PROC))?;
        // nlmsghdr + cn_msg + the op (u32).
        let total = NLMSG_HDR + CN_MSG_HDR + 4;
        let mut m = Vec::with_capacity(total);
        m.extend((total as u32).to_ne_bytes());
        m.extend((libc::NLMSG_DONE as u16).to_ne_bytes());
        m.extend(0u16.to_ne_bytes()); // flags
        m.extend(0u32.to_ne_bytes()); // seq
        m.extend(std::process::id().to_ne_bytes()); // pid
        m.extend(CN_IDX_PROC.to_ne_bytes());
        m.extend(CN_VAL_PROC.to_ne_bytes());
        m.extend(0u32.to_ne_bytes()); // seq
        m.extend(0u32.to_ne_bytes()); // ack
        m.extend(4u16.to_ne_bytes()); // len
        m.extend(0u16.to_ne_bytes()); // flags
        m.extend(PROC_CN_MCAST_LISTEN.to_ne_bytes());
        socket.send(&m, 0)?;
        Ok(ProcConnector { socket })
    }

    /// Blocks for the next datagram and returns the events in it.
    pub fn recv(&self) -> io::Result<Vec<ProcEvent>> {
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut &mut buf[..], 0)?;
        Ok(parse_proc_events(&buf[..n.min(buf.len())]))
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parses the netlink messages of one datagram from the process connector.
pub fn parse_proc_events(mut b: &[u8]) -> Vec<ProcEvent> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0).unwrap_or(0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            break;
        }
        let msg = &b[..len];
        // proc_event: what u32, cpu u32, timestamp u64, then the union.
        let ev = NLMSG_HDR + CN_MSG_HDR;
        if let Some(what) = u32_at(msg, ev) {
            let pid = u32_at(msg, ev + 16);
            let tgid = u32_at(msg, ev + 20);
            if let (Some(pid), Some(tgid)) = (pid, tgid) {
                // Only whole processes: a thread's exit is not the process's.
                if what == PROC_EVENT_EXEC {
                    out.push(ProcEvent::Exec { pid: tgid });
                } else if what == PROC_EVENT_EXIT && pid == tgid {
                    out.push(ProcEvent::Exit { pid: tgid });
                }
            }
        }
        let step = (len + 3) & !3;
        if step >= b.len() {
            break;
        }
        b = &b[step..];
    }
    out
}

/// Where the cgroup v1 hierarchy with `controller` is mounted.
pub fn cgroup_v1_mount(controller: &str) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    parse_cgroup_v1_mount(&mounts, controller)
}

fn parse_cgroup_v1_mount(mounts: &str, controller: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller))
            .then(|| PathBuf::from(f[1]))
    })
}

/// Thread `tid`'s group in the cgroup v1 hierarchy with `controller`, as a
/// path from the hierarchy's root (`/` for the root).
pub fn thread_cgroup(tid: u32, controller: &str) -> Option<String> {
    let t = std::fs::read_to_string(format!("/proc/{tid}/cgroup")).ok()?;
    parse_thread_cgroup(&t, controller)
}

fn parse_thread_cgroup(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        ctrls
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

/// Moves one thread into a cgroup v1 group (its `tasks` file).
pub fn move_thread(group: &Path, tid: u32) -> io::Result<()> {
    std::fs::write(group.join("tasks"), tid.to_string())
}

/// The block devices (`major:minor`) under the files a process reads: for
/// each descriptor above stderr opened for reading, the device of the file
/// system holding a regular file, or the device a block device node names.
/// For QEMU these are its disk images (its logs and consoles are opened
/// write-only, its sockets are neither files nor devices).
pub fn devices_read_by(pid: u32) -> io::Result<Vec<(u32, u32)>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut devs = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if fd <= 2 {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        let readable = fdinfo_flags(&info)
            .is_some_and(|f| f & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32);
        if !readable {
            continue;
        }
        let Ok(m) = std::fs::metadata(e.path()) else {
            continue;
        };
        let dev = if m.file_type().is_block_device() {
            m.rdev()
        } else if m.is_file() {
            m.dev()
        } else {
            continue;
        };
        let d = (libc::major(dev), libc::minor(dev));
        if !devs.contains(&d) {
            devs.push(d);
        }
    }
    Ok(devs)
}

/// The `flags:` line of a `/proc/PID/fdinfo/FD` (octal).
fn fdinfo_flags(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

/// The BFQ tunables directory (`queue/iosched`) of the disk holding block
/// device `major:minor` (a partition's whole disk), if that disk's I/O
/// scheduler is BFQ. Stacked devices (device-mapper, md) are not followed.
pub fn bfq_iosched_dir(major: u32, minor: u32) -> Option<PathBuf> {
    let mut dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let sched = std::fs::read_to_string(dir.join("queue/scheduler")).ok()?;
    sched
        .contains("[bfq]")
        .then(|| dir.join("queue/iosched"))
        .filter(|d| d.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_flags_are_octal_and_write_only_files_are_recognised() {
        let ro = "pos:\t0\nflags:\t0100000\nmnt_id:\t25\n";
        let wo = "pos:\t0\nflags:\t02102001\nmnt_id:\t25\n";
        assert_eq!(fdinfo_flags(ro), Some(0o100000));
        assert_eq!(
            fdinfo_flags(wo).unwrap() & libc::O_ACCMODE as u32,
            libc::O_WRONLY as u32
        );
        assert_eq!(fdinfo_flags("pos: 0\n"), None);
        // This process reads its own executable through a descriptor: its
        // file system's device is listed (when it is a block device).
        let f = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        use std::os::unix::fs::MetadataExt;
        let dev = f.metadata().unwrap().dev();
        let listed = devices_read_by(std::process::id()).unwrap();
        assert!(
            listed.contains(&(libc::major(dev), libc::minor(dev))),
            "{listed:?}"
        );
    }

    #[test]
    fn ioprio_values() {
        assert_eq!(ioprio_show(ioprio_value(IOPRIO_CLASS_RT, 4)), "rt/4");
        assert_eq!(ioprio_show(ioprio_value(IOPRIO_CLASS_BE, 0)), "be/0");
    }

    #[test]
    fn own_threads_and_start_time() {
        let me = std::process::id();
        assert!(threads(me).unwrap().contains(&me));
        assert!(start_time(&me.to_string()).is_some());
        assert_eq!(thread_group(me), Some(me));
        assert!(cpu_and_rss(me).is_some());
        assert!(ioprio_get(me).is_ok());
    }

    #[test]
    fn parse_garbage_does_not_panic() {
        assert!(parse_proc_events(&[0xff; 7]).is_empty());
        assert!(parse_proc_events(&[0xff; 64]).is_empty());
        let mut m = vec![0u8; 16 + 20 + 24];
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m[36..40].copy_from_slice(&PROC_EVENT_EXEC.to_ne_bytes());
        m[52..56].copy_from_slice(&7u32.to_ne_bytes());
        m[56..60].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(parse_proc_events(&m), vec![ProcEvent::Exec { pid: 7 }]);
    }

    #[test]
    fn cgroup_v1_mounts_and_thread_groups_are_parsed() {
        let mounts = "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                      cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        assert_eq!(
            parse_cgroup_v1_mount(mounts, "blkio"),
            Some(PathBuf::from("/sys/fs/cgroup/blkio"))
        );
        assert_eq!(parse_cgroup_v1_mount(mounts, "io"), None);
        let cg = "12:pids:/\n7:blkio,net_cls:/machine/vm1\n0::/user.slice\n";
        assert_eq!(
            parse_thread_cgroup(cg, "blkio").as_deref(),
            Some("/machine/vm1")
        );
        assert_eq!(parse_thread_cgroup(cg, "memory"), None);
    }
}

/// A thread's CPU scheduling: its policy (`SCHED_OTHER`, `SCHED_RR`, ...,
/// with `SCHED_RESET_ON_FORK` if set), its real-time priority (0 outside
/// the RT classes) and its nice value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SchedState {
    pub policy: i32,
    pub priority: i32,
    pub nice: i32,
}

/// Thread `tid`'s scheduling policy, RT priority and nice value.
pub fn sched_get(tid: u32) -> io::Result<SchedState> {
    let pid = tid as libc::pid_t;
    // SAFETY: plain system calls on a thread id; `param` is a valid
    // sched_param for the kernel to fill.
    unsafe {
        let policy = libc::sched_getscheduler(pid);
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        if libc::sched_getparam(pid, &mut param) < 0 {
            return Err(io::Error::last_os_error());
        }
        // getpriority may return -1 as a value: errno tells.
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SchedState {
            policy,
            priority: param.sched_priority,
            nice,
        })
    }
}

/// Sets thread `tid`'s scheduling policy and RT priority.
pub fn sched_set_policy(tid: u32, policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a plain system call; `param` outlives it.
    let r = unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &param) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets thread `tid`'s nice value (Linux applies `PRIO_PROCESS` to one thread).
pub fn set_nice(tid: u32, nice: i32) -> io::Result<()> {
    // SAFETY: a plain system call.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The kernel's `struct sched_attr` (`include/uapi/linux/sched/types.h`,
/// its first version, 48 bytes), which glibc does not wrap.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// `SCHED_DEADLINE` (`include/uapi/linux/sched.h`).
pub const SCHED_DEADLINE: i32 = 6;
/// `SCHED_FLAG_RESET_ON_FORK`: a deadline thread may not fork otherwise
/// (the kernel refuses with `EAGAIN`), and QEMU's threads start workers.
const SCHED_FLAG_RESET_ON_FORK: u64 = 1;

/// Puts thread `tid` in `SCHED_DEADLINE` with `runtime_ns` in each
/// `period_ns` (the deadline is the period). `EBUSY`: the kernel's
/// admission control refused the bandwidth.
pub fn sched_set_deadline(tid: u32, runtime_ns: u64, period_ns: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: SCHED_DEADLINE as u32,
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice: 0,
        priority: 0,
        runtime: runtime_ns,
        deadline: period_ns,
        period: period_ns,
    };
    // SAFETY: sched_setattr reads `attr.size` bytes of a valid struct that
    // outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, tid as libc::pid_t, &attr, 0u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Puts thread `tid`'s policy, priority and nice back to `s`.
pub fn sched_set(tid: u32, s: &SchedState) -> io::Result<()> {
    sched_set_policy(tid, s.policy, s.priority)?;
    set_nice(tid, s.nice)
}

/// `/proc/sys/kernel/sched_rt_runtime_us`: how much of each period the RT
/// classes may run (-1: RT throttling is off, and an RT task may hold a CPU
/// for ever).
pub fn rt_runtime_us() -> io::Result<i64> {
    let t = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us")?;
    t.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{t:?}")))
}

/// Whether a `/proc/PID/task/TID/stat` line is of a runnable task (state
/// R) in an RT class (policy, field 41, `SCHED_FIFO` or `SCHED_RR`).
pub fn stat_is_rt_runnable(stat: &str) -> bool {
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    // Fields from the state (field 3) on.
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let policy = f.get(41 - 3).and_then(|p| p.parse::<i32>().ok());
    f.first() == Some(&"R") && matches!(policy, Some(libc::SCHED_FIFO | libc::SCHED_RR))
}

/// Tasks (threads) of an RT class that are runnable now, but `me`'s own.
pub fn rt_runnable_tasks(me: u32) -> u32 {
    let mut n = 0;
    for pid in pids().into_iter().filter(|&p| p != me) {
        let Ok(tasks) = threads(pid) else { continue };
        for tid in tasks {
            let path = format!("/proc/{pid}/task/{tid}/stat");
            if std::fs::read_to_string(path).is_ok_and(|s| stat_is_rt_runnable(&s)) {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod rt_tests {
    #[test]
    fn rt_runnable_from_stat() {
        // A stat line with 52 fields: state R, policy 2 (SCHED_RR).
        let line = |state: &str, policy: u32| {
            let mut f: Vec<String> = vec!["7".into(), "(a b) c)".into(), state.into()];
            f.extend((4..=52).map(|i| {
                if i == 41 {
                    policy.to_string()
                } else {
                    "0".into()
                }
            }));
            f.join(" ")
        };
        assert!(super::stat_is_rt_runnable(&line("R", 2)));
        assert!(super::stat_is_rt_runnable(&line("R", 1)));
        assert!(!super::stat_is_rt_runnable(&line("S", 2)));
        assert!(!super::stat_is_rt_runnable(&line("R", 0)));
        assert!(!super::stat_is_rt_runnable("garbage"));
    }
}
