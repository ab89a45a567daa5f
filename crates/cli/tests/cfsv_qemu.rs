//! hostd's `cfsv` mode on a real QEMU (TCG, no guest kernel: SeaBIOS looks
//! for a boot disk on a virtio-blk disk served by an iothread with
//! `aio=threads`, so QEMU's thread pool starts workers while hostd runs).
//! With each precedence option, every thread's policy, nice value and cpu
//! cgroup are back after hostd stops, and after hostd is killed with
//! SIGKILL and started again; a thread QEMU creates from a boosted one
//! (born with the boost) is not left boosted either.
//!
//! The same QEMU serves `help-all` (hostd `--help-all`): one guest hint
//! boosts its I/O threads' ioprio and its vCPU's policy, and every thread
//! is back after the hint, SIGTERM, and SIGKILL with a restart.

mod common;

use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent::sys;
use common::{require, wait_until, Need, Proc, Scratch};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const KINDS: [&str; 4] = ["nice", "shares", "rr", "deadline"];

/// A real QEMU with a virtio-blk disk on an iothread, QMP on `qmp.sock`.
fn qemu(dir: &Scratch) -> Proc {
    let disk = dir.p("disk.img");
    std::fs::write(&disk, vec![0u8; 8 << 20]).unwrap();
    let c = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "64",
            "-nodefaults",
            "-no-user-config",
        ])
        .args(["-display", "none", "-object", "iothread,id=io0"])
        .arg("-qmp")
        .arg(format!(
            "unix:{},server=on,wait=off",
            dir.p("qmp.sock").display()
        ))
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d0,format=raw,cache=none,aio=threads",
            disk.display()
        ))
        .args(["-device", "virtio-blk-pci,drive=d0,iothread=io0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("qemu-system-x86_64");
    let p = Proc(c);
    wait_until("QEMU's QMP socket and threads", 20.0, || {
        dir.p("qmp.sock").exists() && sys::threads(p.pid()).is_ok_and(|t| t.len() >= 3)
    });
    p
}

fn hostd(dir: &Scratch, pid: u32, extra: &[&str]) -> Proc {
    let mut c = Command::new(EXE);
    c.args(["hostd", "run", "--vm"])
        .arg(format!(
            "name=a,socket={},pid={pid},qmp={}",
            dir.p("a.sock").display(),
            dir.p("qmp.sock").display()
        ))
        .arg("--control")
        .arg(dir.p("control.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd.state"))
        .args(extra)
        .stdin(Stdio::null());
    let p = Proc(c.spawn().expect("tandem hostd"));
    let ctl = dir.p("control.sock");
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(&ctl).is_ok()
    });
    p
}

/// A thread's policy (without reset-on-fork), priority, nice and cpu group.
type ThreadState = (i32, i32, i32, Option<String>);

fn state(tid: u32) -> Option<ThreadState> {
    let s = sys::sched_get(tid).ok()?;
    Some((
        s.policy & !libc::SCHED_RESET_ON_FORK,
        s.priority,
        s.nice,
        sys::thread_cgroup(tid, "cpu"),
    ))
}

/// Whether thread `tid` has `kind`'s boost (hostd's defaults).
fn boosted(kind: &str, tid: u32) -> bool {
    let Some((policy, prio, nice, group)) = state(tid) else {
        return false;
    };
    match kind {
        "nice" => nice == -20,
        "rr" => policy == libc::SCHED_RR && prio == 1,
        "deadline" => policy == sys::SCHED_DEADLINE,
        "shares" => group.as_deref() == Some("/tandem-cfsv"),
        _ => unreachable!("{kind}"),
    }
}

/// Every thread of QEMU now is as QEMU's threads were before hostd: the
/// state of each thread alive before, and for threads born since (pool
/// workers) the main thread's original state (no boost left on them).
fn assert_restored(kind: &str, pid: u32, before: &[(u32, ThreadState)], when: &str) {
    let main = before.iter().find(|(t, _)| *t == pid).unwrap().1.clone();
    for tid in sys::threads(pid).unwrap() {
        let Some(now) = state(tid) else { continue };
        let want = before
            .iter()
            .find(|(t, _)| *t == tid)
            .map_or(&main, |(_, s)| s);
        assert_eq!(&now, want, "{kind}, {when}: thread {tid}");
    }
    let group = sys::cgroup_v1_mount("cpu").map(|m| m.join("tandem-cfsv"));
    assert!(
        !group.is_some_and(|g| g.exists()),
        "{kind}, {when}: the group is left"
    );
}

#[test]
#[ignore = "needs root and qemu-system-x86_64: runs hostd --cfsv on a real QEMU's threads"]
fn cfsv_on_a_real_qemu_restores_every_thread_after_stop_and_after_sigkill() {
    require(&[
        Need::Root,
        Need::Tool("qemu-system-x86_64", "qemu-system-x86"),
    ]);
    for kind in KINDS {
        let dir = Scratch::new(&format!("cfsv-qemu-{kind}"));
        let vm = qemu(&dir);
        let pid = vm.pid();
        let before: Vec<(u32, ThreadState)> = sys::threads(pid)
            .unwrap()
            .into_iter()
            .filter_map(|t| Some((t, state(t)?)))
            .collect();
        let flags = ["--cfsv", "--cfsv-boost", kind];
        // Stopped with SIGTERM.
        let mut h = hostd(&dir, pid, &flags);
        wait_until(&format!("{kind}: QEMU's main thread boosted"), 10.0, || {
            boosted(kind, pid)
        });
        // A second of sampling, the pool's workers starting meanwhile.
        std::thread::sleep(Duration::from_secs(1));
        assert!(h.stop(), "{kind}: hostd failed");
        assert_restored(kind, pid, &before, "after SIGTERM");
        assert!(!dir.p("hostd.state").exists());
        // Killed with SIGKILL: the boost outlives hostd, the next start
        // (without cfsv) takes it back.
        let h = hostd(&dir, pid, &flags);
        wait_until(&format!("{kind}: the boost again"), 10.0, || {
            boosted(kind, pid)
        });
        std::thread::sleep(Duration::from_millis(500));
        h.signal(libc::SIGKILL);
        drop(h);
        assert!(boosted(kind, pid), "{kind}: the boost outlives hostd");
        assert!(dir.p("hostd.state").exists());
        let mut h2 = hostd(&dir, pid, &[]);
        assert_restored(kind, pid, &before, "after SIGKILL and restart");
        assert!(!dir.p("hostd.state").exists());
        assert!(h2.stop());
    }
}

/// A thread's CPU state ([`state`]) and its raw ioprio.
type FullState = (Option<ThreadState>, u32);

/// Every thread of QEMU with its [`FullState`].
fn all_state(pid: u32) -> Vec<(u32, FullState)> {
    sys::threads(pid)
        .unwrap()
        .into_iter()
        .map(|t| (t, (state(t), sys::ioprio_get(t).unwrap_or(0))))
        .collect()
}

/// Whether every thread of QEMU is as before hostd (threads born since,
/// the pool's workers, as the main thread was: none left boosted).
fn restored(pid: u32, before: &[(u32, FullState)]) -> bool {
    let main = &before.iter().find(|(t, _)| *t == pid).unwrap().1;
    all_state(pid).iter().all(|(t, now)| {
        let want = before.iter().find(|(b, _)| b == t).map_or(main, |(_, s)| s);
        now.0.is_none() || now == want
    })
}

/// `help-all` (hostd `--ioprio ioprio-rt --cpu-boost rr --help-all`, as
/// the real runner starts it) on a real QEMU: one CPU hint in the guest
/// (guestd on a unix channel, `tandem hint --cpu`) puts the vCPU thread at
/// `SCHED_RR` 8 and QEMU's other threads in the RT I/O class; the hint's
/// end, SIGTERM of hostd, and SIGKILL of hostd with its restart each put
/// every thread's policy, priority, nice and ioprio back.
#[test]
#[ignore = "needs root and qemu-system-x86_64: runs hostd --help-all on a real QEMU's threads"]
fn help_all_on_a_real_qemu_boosts_io_threads_and_vcpus_and_restores_them() {
    require(&[
        Need::Root,
        Need::Tool("qemu-system-x86_64", "qemu-system-x86"),
    ]);
    let dir = Scratch::new("help-all-qemu");
    let vm = qemu(&dir);
    let pid = vm.pid();
    let vcpus: Vec<u32> = agent::qmp::query_threads(&dir.p("qmp.sock"))
        .unwrap()
        .vcpus
        .iter()
        .map(|v| v.1)
        .collect();
    assert!(!vcpus.is_empty(), "QMP names the vCPU");
    let before = all_state(pid);
    let flags = [
        "--ioprio",
        "ioprio-rt",
        "--cpu-boost",
        "rr",
        "--help-all",
        "--log-boosts",
    ];
    let both = || {
        let rt_io = |t: u32| sys::ioprio_get(t).is_ok_and(|p| p >> 13 == 1);
        let rr = |t: u32| state(t).is_some_and(|s| s.0 == libc::SCHED_RR && s.1 == 8);
        vcpus.iter().all(|&t| rr(t))
            && sys::threads(pid)
                .unwrap()
                .into_iter()
                .any(|t| !vcpus.contains(&t) && rt_io(t))
    };
    let mut h = hostd(&dir, pid, &flags);
    // guestd reconnects to each hostd started below.
    let _gd = Proc::spawn(
        Command::new(EXE)
            .args(["guestd", "--name", "a", "--no-netlink", "--connect"])
            .arg(format!("unix:{}", dir.p("a.sock").display()))
            .arg("--hint-socket")
            .arg(dir.p("hint.sock"))
            // guestd runs on the host here: its I/O-resume rule would see
            // the host's processes; an hour between samples keeps the hint
            // the only signal.
            .args(["--sample-ms", "3600000"]),
    );
    let hint = |ms: u32| {
        let o = Command::new(EXE)
            .args(["hint", "--cpu", "--for", &format!("{ms}ms"), "--socket"])
            .arg(dir.p("hint.sock"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    wait_until("guestd's hint socket", 10.0, || dir.p("hint.sock").exists());
    // One hint, both boosts; its end, both back.
    hint(600);
    wait_until("the I/O and vCPU boosts", 10.0, both);
    let t = std::time::Instant::now();
    while !restored(pid, &before) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        restored(pid, &before),
        "after the hint: {:?}\nbefore: {before:?}\nvcpus {vcpus:?}",
        all_state(pid)
    );
    // SIGTERM while boosted.
    hint(5000);
    wait_until("both boosts again", 10.0, both);
    assert!(h.stop(), "hostd failed");
    assert!(
        restored(pid, &before),
        "after SIGTERM: {:?}",
        all_state(pid)
    );
    // SIGKILL while boosted: the next start takes the boosts back.
    let h = hostd(&dir, pid, &flags);
    hint(5000);
    wait_until("both boosts a third time", 10.0, both);
    h.signal(libc::SIGKILL);
    drop(h);
    assert!(both(), "the boosts outlive a killed hostd");
    let mut h2 = hostd(&dir, pid, &[]);
    assert!(
        restored(pid, &before),
        "after SIGKILL and restart: {:?}",
        all_state(pid)
    );
    assert!(h2.stop());
}
