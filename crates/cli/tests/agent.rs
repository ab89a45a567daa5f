//! The coordination daemons on the real kernel, without a VM.
//!
//! - End to end: on an emulated `hdd-1.8in` disk with BFQ, a VM-like process
//!   (reads through a pool of worker threads, O_DIRECT, as QEMU does)
//!   competes with 5 sequential readers; a start-up-like burst runs once with
//!   hostd off and once with hostd and guestd (unix transport; guestd sees the
//!   burst program's exec through the process connector); the test asserts
//!   the speed-up and that every thread's I/O priority is back afterwards.
//! - Robustness: malformed, truncated, oversized frames and an unknown
//!   version; a flood from one guest while another VM is served; a guest that
//!   never sends NO-HELP; a guest that disconnects mid-boost; SIGKILL of
//!   hostd while a boost holds.
//! - vsock: hostd's listener binds and shows in `status` (no guest can
//!   connect on this machine).
//!
//! Needs root (and /dev/fuse and loop devices for the end-to-end test): the
//! tests that do are `#[ignore]`d with the reason, and run with
//! `cargo test -p tandem --test agent -- --include-ignored` (as root).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent::sys;
use policy::{HelpReason, Message, Resource};

mod common;
use common::{processes_with, Proc, Scratch};

static SERIAL: Mutex<()> = Mutex::new(());

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

fn wait_until(what: &str, secs: f64, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed().as_secs_f64() < secs,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rt4() -> u32 {
    sys::ioprio_value(sys::IOPRIO_CLASS_RT, 4)
}

/// This test binary's tandem under QEMU's name (hostd serves only QEMU
/// processes: `agent::testkit::fake_qemu_command`), in `dir`.
fn fake_qemu(dir: &Scratch) -> Command {
    agent::testkit::fake_qemu_command(&dir.0, Path::new(EXE)).expect("a stand-in QEMU")
}

/// A stand-in for QEMU: an idle process under QEMU's name.
fn sleeper(dir: &Scratch) -> Proc {
    let p = Proc::spawn(fake_qemu(dir).args(["hostd", "fake-qemu"]));
    agent::testkit::wait_exec(p.pid());
    p
}

/// A stand-in for QEMU with three threads (main, and two that could be an
/// iothread and a vCPU), returned once all three exist.
fn three_threads(dir: &Scratch) -> Proc {
    let vm = Proc::spawn(fake_qemu(dir).args(["hostd", "fake-qemu", "--threads", "2"]));
    agent::testkit::wait_exec(vm.pid());
    wait_until("the threads", 10.0, || {
        sys::threads(vm.pid()).map(|t| t.len()).unwrap_or(0) == 3
    });
    vm
}

/// A child group of the cgroup v1 blkio hierarchy, removed when dropped
/// (once its processes are gone).
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let cg = PathBuf::from(BLKIO_ROOT).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&cg).unwrap();
        TestCgroup(cg)
    }

    fn wait_empty(&self) {
        wait_until("an empty cgroup", 5.0, || {
            std::fs::read_to_string(self.0.join("cgroup.procs"))
                .map(|s| s.trim().is_empty())
                .unwrap_or(true)
        });
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

const BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";

fn hostd(dir: &Scratch, vms: &[(&str, u32)], extra: &[&str]) -> Proc {
    let mut c = Command::new(EXE);
    c.args(["hostd", "run"]);
    for (name, pid) in vms {
        c.arg("--vm").arg(format!(
            "name={name},socket={},pid={pid}",
            dir.p(&format!("{name}.sock")).display()
        ));
    }
    c.arg("--control")
        .arg(dir.p("control.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd.state"))
        .args(extra);
    let p = Proc::spawn(&mut c);
    let ctl = dir.p("control.sock");
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(&ctl).is_ok()
    });
    p
}

fn status(dir: &Scratch) -> String {
    agent::hostd::query(&dir.p("control.sock"), "status").unwrap()
}

fn boosted(dir: &Scratch, vm: &str) -> bool {
    agent::hostd::boosted_from_status(&status(dir))
        .get(vm)
        .copied()
        .unwrap_or(false)
}

/// A guest speaking the protocol by hand.
struct Guest(UnixStream);
impl Guest {
    fn connect(dir: &Scratch, vm: &str) -> Guest {
        Guest::hello(
            UnixStream::connect(dir.p(&format!("{vm}.sock"))).unwrap(),
            vm,
        )
    }
    /// Says Hello on a channel already open and checks the answer.
    fn hello(mut s: UnixStream, vm: &str) -> Guest {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            &Message::Hello {
                version: 1,
                vm_name: vm.into(),
            }
            .encode(),
        )
        .unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(
            policy::decode(&b).unwrap().0,
            Message::HelloAck { version: 1 }
        );
        Guest(s)
    }
    fn help(&mut self, ms: u32) {
        let m = Message::Help {
            resource: Resource::Io,
            reason: HelpReason::Explicit,
            duration_hint_ms: ms,
        };
        self.0.write_all(&m.encode()).unwrap();
    }
    fn no_help(&mut self) {
        let m = Message::NoHelp {
            resource: Resource::Io,
        };
        self.0.write_all(&m.encode()).unwrap();
    }
    /// A HELP for `resource`.
    fn ask(&mut self, resource: Resource, ms: u32) {
        let m = Message::Help {
            resource,
            reason: HelpReason::Explicit,
            duration_hint_ms: ms,
        };
        self.0.write_all(&m.encode()).unwrap();
    }
    fn no_help_for(&mut self, resource: Resource) {
        self.0
            .write_all(&Message::NoHelp { resource }.encode())
            .unwrap();
    }
}

/// Sends raw bytes, returns what hostd answered before closing.
fn raw_exchange(dir: &Scratch, vm: &str, bytes: &[u8], close_write: bool) -> Vec<u8> {
    let mut s = UnixStream::connect(dir.p(&format!("{vm}.sock"))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    if close_write {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn refusal(bytes: &[u8]) -> Option<String> {
    // Skip a HelloAck if the exchange started with a valid Hello.
    let mut b = bytes;
    while !b.is_empty() {
        let (m, n) = policy::decode(b).ok()?;
        if let Message::Refuse { reason } = m {
            return Some(reason);
        }
        b = &b[n..];
    }
    None
}

fn hello_bytes(vm: &str) -> Vec<u8> {
    Message::Hello {
        version: 1,
        vm_name: vm.into(),
    }
    .encode()
}

#[test]
#[ignore = "needs root: runs hostd"]
fn malformed_truncated_oversized_and_unknown_version() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-malformed");
    let vm = sleeper(&dir);
    let orig = sys::ioprio_get(vm.pid()).unwrap();
    let mut h = hostd(&dir, &[("a", vm.pid())], &[]);
    // Oversized: a length prefix beyond 256 bytes.
    let r = refusal(&raw_exchange(&dir, "a", &[0xff, 0xff, 1, 4, 0, 0], false));
    assert!(r.unwrap().contains("longer than the limit"));
    // Unknown frame version.
    let r = refusal(&raw_exchange(&dir, "a", &[2, 0, 9, 6], false)).unwrap();
    assert!(r.contains("version 9 is not supported"), "{r}");
    // Hello with an unknown protocol version.
    let hello9 = Message::Hello {
        version: 9,
        vm_name: "a".into(),
    };
    let r = refusal(&raw_exchange(&dir, "a", &hello9.encode(), false)).unwrap();
    assert!(r.contains("not supported"), "{r}");
    // Unknown type, bad field, garbage.
    for bad in [&[2u8, 0, 1, 77][..], &[3, 0, 1, 5, 9], &[0, 0]] {
        let mut b = hello_bytes("a");
        b.extend_from_slice(bad);
        assert!(
            refusal(&raw_exchange(&dir, "a", &b, false)).is_some(),
            "{bad:?}"
        );
    }
    // Help before Hello.
    let help = Message::Help {
        resource: Resource::Io,
        reason: HelpReason::Exec,
        duration_hint_ms: 1000,
    };
    let r = refusal(&raw_exchange(&dir, "a", &help.encode(), false)).unwrap();
    assert!(r.contains("Hello first"), "{r}");
    // Truncated: half a Help, then the guest closes.
    let mut b = hello_bytes("a");
    b.extend_from_slice(&help.encode()[..5]);
    raw_exchange(&dir, "a", &b, true);
    // Random bytes.
    let mut x = 0x1234_5678_9abc_def1u64;
    for _ in 0..50 {
        let n = (x % 300) as usize;
        let mut b = Vec::with_capacity(n);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        raw_exchange(&dir, "a", &b, true);
    }
    // Still serving: a proper guest gets its boost.
    let mut g = Guest::connect(&dir, "a");
    g.help(3000);
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    assert!(status(&dir).contains("running"));
    g.no_help();
    wait_until("the unboost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == orig
    });
    assert!(h.stop(), "hostd exited with an error");
    assert!(!dir.p("hostd.state").exists());
}

/// One of hostd's Prometheus counters for a VM, through the control socket.
fn vm_metric(dir: &Scratch, name: &str, vm: &str) -> f64 {
    let m = agent::hostd::query(&dir.p("control.sock"), "metrics").unwrap();
    let key = format!("tandem_hostd_{name}{{vm=\"{vm}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in\n{m}"))
}

/// Writes `chunk` (whole frames) over and over for `secs`, as fast as the
/// socket takes it, never cutting a frame; returns the bytes written.
fn flood(s: &mut UnixStream, chunk: &[u8], secs: f64) -> u64 {
    s.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let off = (sent % chunk.len() as u64) as usize;
        match s.write(&chunk[off..]) {
            Ok(n) => sent += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    // Finish the frame under way.
    let off = (sent % chunk.len() as u64) as usize;
    let end = chunk.len() - off;
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    if s.write_all(&chunk[off..off + end]).is_ok() {
        sent += end as u64;
    }
    sent
}

/// A guest writing HELP / NO-HELP as fast as it can: hostd reads its
/// channel no faster than the byte rate (the guest's writes back up),
/// coalesces what is past the message rate, and serves another VM.
#[test]
#[ignore = "needs root: runs hostd and boosts stand-in QEMU processes"]
fn flood_is_throttled_and_another_vm_is_served() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-flood");
    let (va, vb) = (sleeper(&dir), sleeper(&dir));
    let (oa, ob) = (
        sys::ioprio_get(va.pid()).unwrap(),
        sys::ioprio_get(vb.pid()).unwrap(),
    );
    let mut h = hostd(&dir, &[("a", va.pid()), ("b", vb.pid())], &[]);
    let mut flooder = Guest::connect(&dir, "a");
    let connected = Instant::now();
    // NO-HELP, HELP, NO-HELP, ... ending in a NO-HELP.
    let mut chunk = Vec::new();
    for i in 0..1000 {
        let m = if i % 2 == 0 {
            Message::Help {
                resource: Resource::Io,
                reason: HelpReason::Other(9),
                duration_hint_ms: 1000,
            }
        } else {
            Message::NoHelp {
                resource: Resource::Io,
            }
        };
        chunk.extend(m.encode());
    }
    let flood_t = std::thread::spawn(move || {
        let sent = flood(&mut flooder.0, &chunk, 3.0);
        (sent, flooder)
    });
    std::thread::sleep(Duration::from_millis(300));
    // VM b asks for help and renews; it must get the boost while a floods.
    let mut gb = Guest::connect(&dir, "b");
    let t = Instant::now();
    let mut got = false;
    while t.elapsed() < Duration::from_secs(2) && !got {
        gb.help(1000);
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until && !got {
            got = sys::ioprio_get(vb.pid()).unwrap() == rt4();
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let (sent, flooder) = flood_t.join().unwrap();
    assert!(
        got,
        "VM b was not boosted while VM a flooded\n{}",
        status(&dir)
    );
    // A channel reports its counts once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let read = vm_metric(&dir, "channel_bytes_total", "a");
    let secs = connected.elapsed().as_secs_f64();
    let limited = vm_metric(&dir, "rate_limited_total", "a");
    eprintln!(
        "flood: {sent} bytes written, {read} read by hostd in {secs:.2} s; {limited} coalesced\n{}",
        status(&dir)
    );
    // hostd's defaults: 8192 bytes/s and a burst of 4096 (Hello included).
    let bound = 4096.0 + 8192.0 * secs;
    assert!(read <= bound, "hostd read {read} bytes, more than {bound}");
    assert!(
        read > 8192.0 * 2.0,
        "hostd read only {read} bytes: the flood did not run"
    );
    assert!(
        sent as f64 > read + 50_000.0,
        "the guest's writes did not back up"
    );
    // ~1100 messages a second were read against a rate of 200.
    assert!(limited > 1000.0, "{limited}");
    // What the flood left in its socket is never read: stopping hostd
    // undoes both VMs' boosts.
    gb.no_help();
    drop(flooder);
    assert!(h.stop());
    assert_eq!(sys::ioprio_get(va.pid()).unwrap(), oa);
    assert_eq!(sys::ioprio_get(vb.pid()).unwrap(), ob);
}

/// Hello counts toward the rate limit: a guest that sends nothing but
/// Hellos gets no more answers than the rate allows.
#[test]
#[ignore = "needs root: runs hostd"]
fn a_hello_flood_is_rate_limited() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-hello-flood");
    let vm = sleeper(&dir);
    let mut h = hostd(
        &dir,
        &[("a", vm.pid())],
        &[
            "--rate-limit",
            "10",
            "--rate-burst",
            "5",
            "--rate-burst-bytes",
            "100000",
        ],
    );
    let mut s = UnixStream::connect(dir.p("a.sock")).unwrap();
    let hellos: Vec<u8> = (0..2000).flat_map(|_| hello_bytes("a")).collect();
    let t0 = Instant::now();
    s.write_all(&hellos).unwrap();
    // Count the answers for 2 s.
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < Duration::from_secs(2) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut acks = 0;
    let mut b = &got[..];
    while let Ok((m, n)) = policy::decode(b) {
        assert_eq!(m, Message::HelloAck { version: 1 });
        acks += 1;
        b = &b[n..];
    }
    drop(s);
    let bound = 5.0 + 10.0 * (secs + 0.2);
    assert!(
        acks as f64 <= bound,
        "{acks} HelloAcks in {secs:.2} s, more than {bound}"
    );
    assert!(acks >= 5, "{acks}: not even the burst was answered");
    wait_until("the counts", 5.0, || {
        vm_metric(&dir, "rate_limited_total", "a") > 1000.0
    });
    assert!(h.stop());
}

/// Runs out of descriptors: hostd under `nofile` 32 with two VMs; hundreds
/// of idle connections to every socket it serves; a rescan every 50 ms
/// meanwhile. After the storm, both VMs are still served and boosted.
#[test]
#[ignore = "needs root: runs hostd and boosts stand-in QEMU processes"]
fn hostd_keeps_serving_after_running_out_of_descriptors() {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::unix::process::CommandExt;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-nofile");
    let (va, vb) = (sleeper(&dir), sleeper(&dir));
    let mut c = Command::new(EXE);
    c.args(["hostd", "run", "--rescan-ms", "50"]);
    for (name, pid) in [("a", va.pid()), ("b", vb.pid())] {
        c.arg("--vm").arg(format!(
            "name={name},socket={},pid={pid}",
            dir.p(&format!("{name}.sock")).display()
        ));
    }
    c.arg("--control")
        .arg(dir.p("control.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd.state"));
    // SAFETY: setrlimit(2) in the child before exec.
    unsafe {
        c.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 32, 32)
                .map_err(std::io::Error::from)
        });
    }
    let mut h = Proc::spawn(&mut c);
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(dir.p("control.sock")).is_ok()
    });
    let (ga, gb) = (Guest::connect(&dir, "a"), Guest::connect(&dir, "b"));
    // The storm: non-blocking connects, so a full backlog is skipped, not waited on.
    let targets = ["control.sock", "hostd-metrics.sock", "a.sock", "b.sock"];
    let mut held = Vec::new();
    for i in 0..800 {
        let p = dir.p(targets[i % targets.len()]);
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK,
            None,
        )
        .unwrap();
        use std::os::fd::AsRawFd;
        if connect(fd.as_raw_fd(), &UnixAddr::new(&p).unwrap()).is_ok() {
            held.push(fd);
        }
    }
    eprintln!("{} idle connections held", held.len());
    assert!(held.len() > 100, "the storm did not happen");
    // Rescans run while hostd has no descriptor to spare.
    std::thread::sleep(Duration::from_millis(1500));
    let hostd_fds = std::fs::read_dir(format!("/proc/{}/fd", h.pid()))
        .unwrap()
        .count();
    eprintln!("hostd holds {hostd_fds} descriptors (limit 32)");
    assert!(h.0.try_wait().unwrap().is_none(), "hostd died in the storm");
    drop(held);
    drop((ga, gb));
    // After the storm: both VMs are running and get their boost.
    wait_until("hostd to answer", 10.0, || {
        agent::hostd::query(&dir.p("control.sock"), "status").is_ok_and(|s| s.contains("VM "))
    });
    let st = status(&dir);
    assert!(!st.contains("exited"), "a VM was taken for exited:\n{st}");
    for (name, vm) in [("a", &va), ("b", &vb)] {
        let orig = sys::ioprio_get(vm.pid()).unwrap();
        let mut g = Guest::connect(&dir, name);
        g.help(3000);
        wait_until(&format!("VM {name}'s boost"), 10.0, || {
            sys::ioprio_get(vm.pid()).unwrap() == rt4()
        });
        assert!(boosted(&dir, name), "{}", status(&dir));
        g.no_help();
        wait_until(&format!("VM {name}'s unboost"), 10.0, || {
            sys::ioprio_get(vm.pid()).unwrap() == orig
        });
    }
    assert!(h.stop(), "hostd exited with an error");
    assert!(!dir.p("hostd.state").exists());
}

#[test]
#[ignore = "needs root: runs hostd"]
fn silent_guest_loses_its_lease_and_a_disconnect_unboosts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-lease");
    let vm = sleeper(&dir);
    let orig = sys::ioprio_get(vm.pid()).unwrap();
    let mut h = hostd(&dir, &[("a", vm.pid())], &[]);
    // Never sends NO-HELP: the 1 s lease ends the boost while the channel stays open.
    let mut g = Guest::connect(&dir, "a");
    g.help(60_000);
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    let t = Instant::now();
    wait_until("the lease's end", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == orig
    });
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "unboosted too early"
    );
    assert!(!boosted(&dir, "a"));
    // Disconnect mid-boost: the boost ends at once, not at the lease's end.
    // Wait for the budget's minimum boost to be available again.
    std::thread::sleep(Duration::from_millis(200));
    g.help(1000);
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    g.help(1000);
    drop(g);
    wait_until("unboost after the disconnect", 0.9, || {
        sys::ioprio_get(vm.pid()).unwrap() == orig
    });
    assert!(h.stop());
    assert!(!dir.p("hostd.state").exists());
}

#[test]
#[ignore = "needs root: runs hostd"]
fn sigkill_of_hostd_is_reverted_at_the_next_start() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-sigkill");
    let vm = sleeper(&dir);
    let orig = sys::ioprio_get(vm.pid()).unwrap();
    let mut h = hostd(&dir, &[("a", vm.pid())], &[]);
    let mut g = Guest::connect(&dir, "a");
    g.help(60_000);
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    h.signal(libc::SIGKILL);
    let _ = h.0.wait();
    drop(g);
    // The boost outlives the killed daemon; the state file records it.
    assert_eq!(sys::ioprio_get(vm.pid()).unwrap(), rt4());
    let state = std::fs::read_to_string(dir.p("hostd.state")).unwrap();
    assert!(state.contains(&format!("\"tid\": {}", vm.pid())), "{state}");
    // The next start restores it before serving.
    let mut h2 = hostd(&dir, &[("a", vm.pid())], &[]);
    assert_eq!(sys::ioprio_get(vm.pid()).unwrap(), orig);
    assert!(!dir.p("hostd.state").exists());
    assert!(h2.stop());
    // Nothing of ours left running but the stand-in QEMU.
    let left: Vec<u32> = processes_with(&[dir.0.to_str().unwrap()])
        .into_iter()
        .filter(|p| *p != vm.pid())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// hostd's vsock listener on this machine: it binds (VMADDR_CID_ANY) and
/// listens, `status` and the metrics show it, the port stays taken while
/// hostd runs (a second hostd is refused with a clear error) and is free
/// after it stops; the configuration errors are usage errors (exit code 2).
/// No guest connects: this machine has no vsock loopback transport and no
/// /dev/vhost-vsock; routing by peer CID is tested in `agent::hostd`.
#[test]
#[ignore = "needs root: runs hostd on a vsock port"]
fn hostd_listens_on_vsock_and_status_shows_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Usage errors come before anything else (no root needed for them).
    let usage = |args: &[&str], want: &str| {
        let o = Command::new(EXE)
            .args(["hostd", "run"])
            .args(args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
    };
    usage(
        &["--vm", "name=g1,cid=5,pid=1"],
        "cid=5 needs hostd's vsock listener: give --vsock-port PORT",
    );
    usage(
        &[
            "--vsock-port",
            "5000",
            "--vm",
            "name=g1,cid=5,pid=1",
            "--vm",
            "name=g2,cid=5,pid=1",
        ],
        "VM g2: cid=5 is VM g1's too",
    );
    usage(
        &["--vsock-port", "5000", "--vm", "name=g1,cid=2,pid=1"],
        "cid=2 is not a guest's CID",
    );
    usage(
        &[
            "--vsock-port",
            "5000",
            "--vm",
            "name=g1,socket=/tmp/x,cid=5,pid=1",
        ],
        "socket= and cid= both given",
    );
    usage(
        &["--vsock-port", "5000", "--vm", "name=u,socket=/tmp/x,pid=1"],
        "no VM has cid=N",
    );
    usage(
        &["--vm", "name=g1,pid=1"],
        "socket=PATH or cid=N (vsock) is missing",
    );

    assert!(
        devemu::is_root(),
        "hostd runs as root (this test starts one)"
    );
    let dir = Scratch::new("agent-vsock");
    let vm = sleeper(&dir);
    let port = 50_000 + std::process::id() % 10_000;
    let port_s = port.to_string();
    let guest = format!("name=g1,cid=5,pid={}", vm.pid());
    let mut h = hostd(
        &dir,
        &[("u1", vm.pid())],
        &["--vm", &guest, "--vsock-port", &port_s],
    );
    let o = Command::new(EXE)
        .args(["hostd", "status", "--control"])
        .arg(dir.p("control.sock"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let st = String::from_utf8_lossy(&o.stdout).to_string();
    eprintln!("{st}");
    assert!(
        st.contains(&format!(
            "vsock port {port} (any CID): listening; cid 5 = g1; 0 connection(s) from other CIDs closed"
        )),
        "{st}"
    );
    let boosted = agent::hostd::boosted_from_status(&st);
    assert_eq!(boosted.keys().collect::<Vec<_>>(), ["g1", "u1"], "{st}");
    let m = agent::hostd::query(&dir.p("control.sock"), "metrics").unwrap();
    assert!(m.contains("\ntandem_hostd_vsock_refused_total 0\n"), "{m}");
    // hostd holds the port.
    let e = agent::transport::VsockListener::bind(port).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    // A second hostd on the same port says why it cannot start.
    let o = Command::new(EXE)
        .args(["hostd", "run", "--vm", &guest, "--vsock-port", &port_s])
        .arg("--control")
        .arg(dir.p("control2.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd2.state"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&format!("vsock port {port}")) && e.contains("another hostd?"),
        "{e}"
    );
    assert!(
        !dir.p("control2.sock").exists(),
        "the second hostd cleaned up"
    );
    assert!(h.stop(), "hostd exited with an error");
    agent::transport::VsockListener::bind(port).expect("the port is free after hostd stops");
}

// ---------------------------------------------------------------- end to end

/// The emulated disk, its filesystem and its scheduler; undone on drop.
struct Disk {
    dev: String,
    mnt: PathBuf,
    sched_file: PathBuf,
    sched_orig: String,
    low_latency_orig: Option<String>,
}

impl Drop for Disk {
    fn drop(&mut self) {
        if let Some(v) = &self.low_latency_orig {
            let f = self.sched_file.with_file_name("iosched/low_latency");
            let _ = std::fs::write(f, v);
        }
        let _ = std::fs::write(&self.sched_file, &self.sched_orig);
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new(EXE)
            .args(["devemu", "down", &self.dev])
            .status();
    }
}

struct Readers(Vec<Child>);
impl Drop for Readers {
    fn drop(&mut self) {
        for r in self.0.iter_mut() {
            bench::workers::kill(r);
        }
    }
}

fn run_ok(cmd: &str, args: &[&str]) {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn burst(dir: &Scratch, reads: u64, run: u64) -> f64 {
    // Wall time of the burst program, from its exec to its exit.
    let t = Instant::now();
    let o = Command::new(EXE)
        .args(["hostd", "fake-burst", "--control"])
        .arg(dir.p("vm.ctl"))
        .args(["--reads", &reads.to_string(), "--kib", "64", "--seed", "7"])
        .args(["--run", &run.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    t.elapsed().as_secs_f64()
}

fn thread_prios(pid: u32) -> Vec<(u32, u32)> {
    sys::threads(pid)
        .unwrap()
        .into_iter()
        .filter_map(|t| sys::ioprio_get(t).ok().map(|p| (t, p)))
        .collect()
}

#[test]
#[ignore = "needs root, /dev/fuse and loop devices: an emulated disk"]
#[allow(clippy::too_many_lines)] // a test that reads top to bottom
fn hostd_speeds_up_a_vm_burst_under_5_sequential_readers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    assert!(
        Path::new("/dev/fuse").exists() && Path::new("/dev/loop-control").exists(),
        "needs /dev/fuse and loop devices"
    );
    let reads: u64 = std::env::var("TANDEM_E2E_READS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    // Reads per file: a start-up reads files of a few hundred KiB whole.
    let run: u64 = std::env::var("TANDEM_E2E_RUN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let dir = Scratch::new("agent-e2e");
    let o = Command::new(EXE)
        .args(["devemu", "up", "--model", "hdd-1.8in", "--size", "1G"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dev = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let name = dev.trim_start_matches("/dev/").to_string();
    let sched_file = PathBuf::from(format!("/sys/block/{name}/queue/scheduler"));
    let sched_orig = std::fs::read_to_string(&sched_file)
        .unwrap()
        .split_whitespace()
        .find(|s| s.starts_with('['))
        .unwrap()
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let mut disk = Disk {
        dev: dev.clone(),
        mnt: dir.p("mnt"),
        sched_file: sched_file.clone(),
        sched_orig,
        low_latency_orig: None,
    };
    std::fs::create_dir_all(&disk.mnt).unwrap();
    let inst = devemu::control::find(&dev).unwrap();
    devemu::control::set_timed(&inst, false).unwrap();
    run_ok("mkfs.ext4", &["-q", "-F", &dev]);
    run_ok("mount", &[&dev, disk.mnt.to_str().unwrap()]);
    let mut files = Vec::new();
    for i in 0..5 {
        let f = disk.mnt.join(format!("r{i}"));
        bench::workers::fill_file(&f, 32 << 20, i + 1).unwrap();
        files.push(f);
    }
    let image = disk.mnt.join("vm.img");
    bench::workers::fill_file(&image, 64 << 20, 99).unwrap();
    run_ok("sync", &[]);
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    devemu::control::set_timed(&inst, true).unwrap();
    std::fs::write(&sched_file, "bfq").unwrap();
    let ll = sched_file.with_file_name("iosched/low_latency");
    disk.low_latency_orig = std::fs::read_to_string(&ll).ok();
    if std::env::var("TANDEM_E2E_LOW_LATENCY").as_deref() != Ok("1") {
        // See the README: the VM's threads are long-lived; BFQ's own raising
        // of a queue that resumes after idling is off, so the measurement is
        // the actuator's, as for a VM whose threads never idle long.
        std::fs::write(&ll, "0").unwrap();
    }

    let exe = Path::new(EXE);
    let mut readers = Readers(
        files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                bench::workers::spawn_worker(
                    exe,
                    bench::workers::Kind::SeqRead,
                    Some(f),
                    0.0,
                    i as u64,
                )
                .unwrap()
            })
            .collect(),
    );
    let vm = Proc::spawn(
        fake_qemu(&dir)
            .args(["hostd", "fake-vm", "--threads", "4", "--image"])
            .arg(&image)
            .arg("--control")
            .arg(dir.p("vm.ctl")),
    );
    wait_until("the fake VM", 10.0, || dir.p("vm.ctl").exists());
    std::thread::sleep(Duration::from_secs(3));
    let before = thread_prios(vm.pid());
    assert!(before.len() >= 5, "{before:?}");

    let off = burst(&dir, reads, run);
    let mut h = hostd(&dir, &[("vm", vm.pid())], &["--rescan-ms", "100"]);
    let mut gd = Proc::spawn(
        Command::new(EXE)
            .args(["guestd", "--name", "vm", "--connect"])
            .arg(format!("unix:{}", dir.p("vm.sock").display()))
            .arg("--hint-socket")
            .arg(dir.p("hint.sock")),
    );
    wait_until("guestd's channel", 10.0, || {
        status(&dir).contains("connected")
    });
    // Wait for a quiet moment: no help asked (other execs on the machine
    // may trigger help; their lease is short).
    let _ = (0..100).find(|_| {
        std::thread::sleep(Duration::from_millis(50));
        !boosted(&dir, "vm")
    });
    let on = burst(&dir, reads, run);
    let st = status(&dir);
    assert!(gd.stop(), "guestd exited with an error");
    wait_until("the unboost after guestd left", 5.0, || {
        !boosted(&dir, "vm")
    });
    assert!(h.stop(), "hostd exited with an error");
    let after = thread_prios(vm.pid());
    for (tid, p) in &before {
        let now = after.iter().find(|(t, _)| t == tid).map(|&(_, p)| p);
        assert_eq!(now, Some(*p), "thread {tid}: I/O priority not restored");
    }
    for r in readers.0.iter_mut() {
        bench::workers::kill(r);
    }
    drop(vm);
    drop(disk);
    eprintln!(
        "burst of {reads} x 64 KiB in runs of {run}: hostd off {off:.2} s, on {on:.2} s, speed-up {:.2}x\n{st}",
        off / on
    );
    assert!(!dir.p("hostd.state").exists());
    assert!(
        off / on >= 3.0,
        "speed-up {:.2}x is below 3x (off {off:.2} s, on {on:.2} s)",
        off / on
    );
    let losetup =
        String::from_utf8_lossy(&Command::new("losetup").arg("-a").output().unwrap().stdout)
            .to_string();
    assert!(!losetup.contains(&format!("{dev}:")), "{losetup}");
}

#[test]
#[ignore = "needs root and a cgroup v1 blkio hierarchy with BFQ"]
fn cgroup_bfq_weight_is_boosted_and_restored() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    // A child cgroup of the v1 blkio hierarchy (the root has no weight file).
    assert!(
        Path::new(BLKIO_ROOT).join("blkio.bfq.io_serviced").exists(),
        "needs a cgroup v1 blkio hierarchy with BFQ"
    );
    let dir = Scratch::new("agent-cgroup");
    let group = TestCgroup::new("tandem-test");
    let cg = group.0.clone();
    let file = agent::actuator::bfq_weight_file(&cg).expect("a BFQ weight file in the cgroup");
    let orig = agent::actuator::read_weight(&file).unwrap();
    {
        let vm = sleeper(&dir);
        std::fs::write(cg.join("cgroup.procs"), vm.pid().to_string()).unwrap();
        let mut c = Command::new(EXE);
        c.args(["hostd", "run", "--ioprio", "none", "--vm"])
            .arg(format!(
                "name=a,socket={},pid={},cgroup={}",
                dir.p("a.sock").display(),
                vm.pid(),
                cg.display()
            ))
            .arg("--control")
            .arg(dir.p("control.sock"))
            .arg("--state-file")
            .arg(dir.p("hostd.state"));
        let mut h = Proc::spawn(&mut c);
        wait_until("hostd", 10.0, || {
            UnixStream::connect(dir.p("control.sock")).is_ok()
        });
        let weight = || agent::actuator::read_weight(&file).unwrap();
        let mut g = Guest::connect(&dir, "a");
        g.help(3000);
        wait_until("the weight boost", 5.0, || weight() == 1000);
        g.no_help();
        wait_until("the weight restored", 5.0, || weight() == orig);
        // SIGKILL while boosted: the next start restores the weight.
        g.help(3000);
        wait_until("the weight boost", 5.0, || weight() == 1000);
        h.signal(libc::SIGKILL);
        let _ = h.0.wait();
        drop(g);
        assert_eq!(weight(), 1000);
        let mut h2 = Proc::spawn(&mut c);
        wait_until("the weight restored at start", 10.0, || weight() == orig);
        assert!(h2.stop());
    }
    // The sleeper is gone; the cgroup can go.
    group.wait_empty();
}

/// `--boost-cgroup`: a boosted VM's threads leave their own blkio group for
/// the hierarchy's root, with the RT class, and go back at NO-HELP, and after
/// a SIGKILL of hostd, at its next start.
#[test]
#[ignore = "needs root and a cgroup v1 blkio hierarchy"]
fn boost_cgroup_moves_the_threads_to_the_root_group_and_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cgmove");
    let group = TestCgroup::new("tandem-test-move");
    let cg = group.0.clone();
    let rel = format!("/{}", cg.file_name().unwrap().to_string_lossy());
    {
        let vm = three_threads(&dir);
        std::fs::write(cg.join("cgroup.procs"), vm.pid().to_string()).unwrap();
        let groups = || -> Vec<String> {
            sys::threads(vm.pid())
                .unwrap()
                .into_iter()
                .map(|t| sys::thread_cgroup(t, "blkio").unwrap())
                .collect()
        };
        assert_eq!(groups(), vec![rel.clone(); 3]);
        let boost_cgroup = ["--boost-cgroup", BLKIO_ROOT];
        let mut h = hostd(&dir, &[("a", vm.pid())], &boost_cgroup);
        assert!(
            status(&dir).contains("blkio-cgroup-move"),
            "{}",
            status(&dir)
        );
        let mut g = Guest::connect(&dir, "a");
        g.help(3000);
        wait_until("the move to the root group", 5.0, || {
            groups() == vec!["/".to_string(); 3]
        });
        assert!(thread_prios(vm.pid()).iter().all(|&(_, p)| p == rt4()));
        g.no_help();
        wait_until("the move back", 5.0, || groups() == vec![rel.clone(); 3]);
        // SIGKILL while boosted: the next start moves the threads back.
        g.help(3000);
        wait_until("the move to the root group", 5.0, || {
            groups() == vec!["/".to_string(); 3]
        });
        h.signal(libc::SIGKILL);
        let _ = h.0.wait();
        drop(g);
        let mut h2 = hostd(&dir, &[("a", vm.pid())], &boost_cgroup);
        wait_until("the move back at start", 10.0, || {
            groups() == vec![rel.clone(); 3]
        });
        assert!(h2.stop());
    }
    group.wait_empty();
    // A directory that is not a blkio group is refused at start.
    let vm = sleeper(&dir);
    let out = Command::new(EXE)
        .args(["hostd", "run", "--boost-cgroup", "/tmp", "--vm"])
        .arg(format!(
            "name=a,socket={},pid={}",
            dir.p("b.sock").display(),
            vm.pid()
        ))
        .arg("--control")
        .arg(dir.p("control2.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd2.state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("not a group of the cgroup v1 blkio hierarchy"),
        "{e}"
    );
}

#[test]
#[ignore = "needs root: runs hostd"]
fn guestd_hints_and_reconnects_after_hostd_restarts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-reconnect");
    let vm = sleeper(&dir);
    let orig = sys::ioprio_get(vm.pid()).unwrap();
    let mut h = hostd(&dir, &[("a", vm.pid())], &[]);
    // No process connector: only explicit hints ask for help here.
    let mut gd = Proc::spawn(
        Command::new(EXE)
            .args(["guestd", "--name", "a", "--no-netlink", "--connect"])
            .arg(format!("unix:{}", dir.p("a.sock").display()))
            .arg("--hint-socket")
            .arg(dir.p("hint.sock")),
    );
    wait_until("guestd's channel", 10.0, || {
        status(&dir).contains("connected")
    });
    let hint = |ms: &str| {
        let o = Command::new(EXE)
            .args(["hint", "--for", ms, "--socket"])
            .arg(dir.p("hint.sock"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    hint("1500ms");
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    // The hint lasts 1.5 s, more than one lease: guestd renews, then NO-HELP.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(sys::ioprio_get(vm.pid()).unwrap(), rt4(), "not renewed");
    wait_until("the end of the hint", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == orig
    });
    // The host restarts; guestd reconnects and is served again.
    assert!(h.stop());
    let mut h = hostd(&dir, &[("a", vm.pid())], &[]);
    wait_until("guestd's new channel", 10.0, || {
        status(&dir).contains("connected")
    });
    hint("1s");
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    wait_until("the unboost", 5.0, || {
        sys::ioprio_get(vm.pid()).unwrap() == orig
    });
    // Bad hint durations are usage errors.
    let o = Command::new(EXE)
        .args(["hint", "--for", "0s", "--socket"])
        .arg(dir.p("hint.sock"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(gd.stop());
    assert!(h.stop());
    assert!(!dir.p("hint.sock").exists());
}

/// With `qmp=` hostd asks QEMU which threads are vCPUs and boosts the others
/// only. QEMU is played by a process with three threads and a QMP server in
/// this test that names one of them a vCPU and another an iothread.
#[test]
#[ignore = "needs root: runs hostd"]
fn qmp_names_the_vcpu_threads_and_the_boost_leaves_them_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    use std::io::BufRead;
    let dir = Scratch::new("agent-qmp");
    let vm = three_threads(&dir);
    let mut tids = sys::threads(vm.pid()).unwrap();
    tids.sort();
    let (iothread, vcpu) = (tids[1], tids[2]);
    let orig: Vec<(u32, u32)> = thread_prios(vm.pid());
    let qmp = dir.p("qmp.sock");
    let listener = std::os::unix::net::UnixListener::bind(&qmp).unwrap();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let asked2 = asked.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { return };
            asked2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut w = s.try_clone().unwrap();
            let mut r = std::io::BufReader::new(s);
            let _ = writeln!(w, r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                let reply = if line.contains("query-iothreads") {
                    format!(r#"{{"return": [{{"id": "io0", "thread-id": {iothread}}}]}}"#)
                } else if line.contains("query-cpus-fast") {
                    format!(r#"{{"return": [{{"cpu-index": 0, "thread-id": {vcpu}}}]}}"#)
                } else {
                    r#"{"return": {}}"#.to_string()
                };
                let _ = writeln!(w, "{reply}");
                line.clear();
            }
        }
    });
    let mut c = Command::new(EXE);
    c.args(["hostd", "run", "--vm"])
        .arg(format!(
            "name=a,socket={},pid={},qmp={}",
            dir.p("a.sock").display(),
            vm.pid(),
            qmp.display()
        ))
        .arg("--control")
        .arg(dir.p("control.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd.state"));
    let mut h = Proc::spawn(&mut c);
    let ctl = dir.p("control.sock");
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(&ctl).is_ok()
    });
    let mut g = Guest::connect(&dir, "a");
    g.help(5000);
    wait_until("the boost", 5.0, || {
        sys::ioprio_get(iothread).unwrap() == rt4()
    });
    // Every thread but the vCPU, which keeps its priority.
    for (tid, p) in thread_prios(vm.pid()) {
        if tid == vcpu {
            let o = orig.iter().find(|(t, _)| *t == tid).unwrap().1;
            assert_eq!(p, o, "the vCPU thread was boosted");
        } else {
            assert_eq!(p, rt4(), "thread {tid} not boosted");
        }
    }
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    g.no_help();
    wait_until("the unboost", 5.0, || thread_prios(vm.pid()) == orig);
    assert!(h.stop());
}

/// A loop device over a sparse file, detached when dropped.
struct LoopDev(String);

impl LoopDev {
    fn new(dir: &Scratch) -> LoopDev {
        let f = dir.p("loop.img");
        std::fs::File::create(&f)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let o = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let d = LoopDev(String::from_utf8_lossy(&o.stdout).trim().to_string());
        // A loop device's queue outlives its attachment: start from the loop
        // driver's default scheduler, whatever an earlier run left on it.
        std::fs::write(d.iosched("scheduler"), "none").unwrap();
        d
    }

    fn iosched(&self, file: &str) -> PathBuf {
        PathBuf::from(format!(
            "/sys/block/{}/queue/{file}",
            self.0.trim_start_matches("/dev/")
        ))
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        // Back to the loop driver's default scheduler (and so BFQ's tunables
        // gone with it): the free device keeps its queue after the detach.
        let _ = std::fs::write(self.iosched("scheduler"), "none");
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// `--bfq-idling`: while the VM is boosted, BFQ's strict_guarantees is 1 and
/// its slice_idle at least 32 ms on the disk the VM reads (here a loop device
/// QEMU's stand-in holds open), and the old values come back at unboost and
/// after a SIGKILL of hostd. A longer slice_idle chosen by the administrator
/// stays; a device the VM only writes to (a log) is left alone.
#[test]
#[ignore = "needs root: loop devices with BFQ"]
fn bfq_idling_is_set_on_the_vm_disk_while_boosted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-idling");
    let disk = LoopDev::new(&dir);
    let log_disk = LoopDev::new(&dir);
    for d in [&disk, &log_disk] {
        std::fs::write(d.iosched("scheduler"), "bfq").unwrap();
    }
    let knobs = |d: &LoopDev| {
        let read = |f: &str| {
            std::fs::read_to_string(d.iosched(&format!("iosched/{f}")))
                .unwrap()
                .trim()
                .to_string()
        };
        (read("strict_guarantees"), read("slice_idle_us"))
    };
    let kernel_default = ("0".to_string(), "8000".to_string());
    let boosted = ("1".to_string(), "32000".to_string());
    assert_eq!(knobs(&disk), kernel_default);
    let vm = Proc::spawn(fake_qemu(&dir).args([
        "hostd",
        "fake-qemu",
        "--read",
        &disk.0,
        "--write",
        &log_disk.0,
    ]));
    wait_until("the stand-in's descriptors", 10.0, || {
        std::fs::read_dir(format!("/proc/{}/fd", vm.pid()))
            .map(|d| d.count() >= 5)
            .unwrap_or(false)
    });
    let flag = ["--bfq-idling"];
    let mut h = hostd(&dir, &[("a", vm.pid())], &flag);
    assert!(status(&dir).contains("bfq-idling"), "{}", status(&dir));
    let mut g = Guest::connect(&dir, "a");
    g.help(3000);
    wait_until("idling knobs while boosted", 5.0, || {
        knobs(&disk) == boosted
    });
    assert_eq!(
        knobs(&log_disk),
        kernel_default,
        "a disk the VM only writes to"
    );
    g.no_help();
    wait_until("idling knobs restored", 5.0, || {
        knobs(&disk) == kernel_default
    });
    // An administrator's longer idle window is kept; strict_guarantees is
    // still set. SIGKILL while boosted: the next hostd restores at start.
    std::fs::write(disk.iosched("iosched/slice_idle_us"), "50000").unwrap();
    let admin = ("0".to_string(), "50000".to_string());
    g.help(3000);
    wait_until("strict_guarantees while boosted", 5.0, || {
        knobs(&disk) == ("1".to_string(), "50000".to_string())
    });
    h.signal(libc::SIGKILL);
    let _ = h.0.wait();
    drop(g);
    let mut h2 = hostd(&dir, &[("a", vm.pid())], &flag);
    wait_until("idling knobs restored at start", 10.0, || {
        knobs(&disk) == admin
    });
    assert!(h2.stop());
    drop(vm);
}

// ------------------------------------------------------------ bad input

fn hostd_run(args: &[&str]) -> std::process::Output {
    Command::new(EXE)
        .args(["hostd", "run"])
        .args(args)
        .output()
        .unwrap()
}

/// Numbers out of range are usage errors that name the setting and the
/// value, on the command line and in the file, before anything starts: a
/// NaN burst would give a hostd that never boosts, a lease in ms that
/// overflows in ns would wrap to 0.45 ms.
#[test]
fn numeric_settings_out_of_range_are_refused() {
    let dir = Scratch::new("agent-numbers");
    let vm = format!("name=a,socket={},pid=1", dir.p("a.sock").display());
    for (args, want) in [
        (&["--rate-burst", "nan"][..], "rate_burst = NaN"),
        (&["--rate-limit", "inf"], "rate_limit = inf"),
        (&["--rate-limit", "0"], "rate_limit = 0"),
        (&["--rate-burst-bytes", "10"], "rate_burst_bytes = 10"),
        (&["--rate-limit-bytes=-1"], "rate_limit_bytes = -1"),
        (
            &["--lease-ms", "18446744073710"],
            "lease_ms = 18446744073710: it must be from 1 to 3600000",
        ),
        (&["--lease-ms", "0"], "lease_ms = 0"),
        (
            &["--budget-window-s", "1e6"],
            "budget_window_s = 1000000: it must be at most 86400",
        ),
        (&["--budget-fraction", "nan"], "budget_fraction"),
        (&["--rescan-ms", "0"], "rescan_ms = 0"),
        (&["--metrics", "nonsense"], "metrics = \"nonsense\""),
    ] {
        let o = hostd_run(&[&["--vm", &vm][..], args].concat());
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // The same in a configuration file.
    let conf = dir.p("hostd.toml");
    for (line, want) in [
        ("rate_burst = nan", "rate_burst = NaN"),
        ("lease_ms = 18446744073710", "lease_ms = 18446744073710"),
    ] {
        std::fs::write(
            &conf,
            format!("{line}\n[[vm]]\nname = \"a\"\nsocket = \"/tmp/a\"\npid = 1\n"),
        )
        .unwrap();
        let o = hostd_run(&["--config", conf.to_str().unwrap()]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{line}: {e}");
        assert!(e.contains(want), "{line}: {e}");
    }
}

/// A `socket=` or `--control` that names a file which is not a socket is
/// refused and the file left as it was; a pid that is not a QEMU process
/// is refused.
#[test]
#[ignore = "needs root: hostd run gets as far as binding its sockets"]
fn a_file_in_a_sockets_place_is_kept_and_a_pid_must_be_qemu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-not-a-socket");
    let vm = sleeper(&dir);
    wait_until("the stand-in", 5.0, || {
        std::fs::read_link(format!("/proc/{}/exe", vm.pid()))
            .is_ok_and(|p| p.ends_with("qemu-system-x86_64"))
    });
    let precious = dir.p("precious.txt");
    std::fs::write(&precious, "a user's data\n").unwrap();
    let state = dir.p("hostd.state");
    let sock = |p: &Path| format!("name=a,socket={},pid={}", p.display(), vm.pid());
    let ok_sock = dir.p("a.sock");
    for args in [
        vec![
            "--vm".to_string(),
            sock(&precious),
            "--control".into(),
            dir.p("c.sock").to_string_lossy().into(),
        ],
        vec![
            "--vm".to_string(),
            sock(&ok_sock),
            "--control".into(),
            precious.to_string_lossy().into(),
        ],
    ] {
        let o = Command::new(EXE)
            .args(["hostd", "run", "--state-file"])
            .arg(&state)
            .args(&args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {e}");
        assert!(e.contains("exists and is not a socket"), "{args:?}: {e}");
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "a user's data\n"
        );
    }
    // pid=1, or any process that is not QEMU: a usage error.
    let sleep = Proc::spawn(Command::new("sleep").arg("60"));
    for pid in [1, sleep.pid(), std::process::id()] {
        let o = Command::new(EXE)
            .args(["hostd", "run", "--state-file"])
            .arg(&state)
            .arg("--control")
            .arg(dir.p("c.sock"))
            .arg("--vm")
            .arg(format!("name=a,socket={},pid={pid}", ok_sock.display()))
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "pid {pid}: {e}");
        // (This machine's pid 1 may not even let root read its /proc/1/exe.)
        assert!(
            e.contains(&format!("pid={pid} is not a QEMU process"))
                || e.contains(&format!("pid={pid} cannot be checked to be a QEMU process")),
            "{e}"
        );
        assert!(!dir.p("c.sock").exists() && !ok_sock.exists());
    }
}

/// The commands that need root say so to another user, rather than that a
/// socket is missing or that hostd may not run.
#[test]
#[ignore = "needs root: runs commands as the user nobody"]
fn commands_that_need_root_say_so() {
    use std::os::unix::process::CommandExt;
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-nonroot");
    // A control socket of root's (srwxr-xr-x: others may not connect).
    let ctl = dir.p("control.sock");
    let _l = std::os::unix::net::UnixListener::bind(&ctl).unwrap();
    let as_nobody = |args: &[&str]| {
        let o = Command::new(EXE)
            .args(args)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let e = as_nobody(&["hostd", "status", "--control", ctl.to_str().unwrap()]);
    assert!(
        e.contains("permission denied") && e.contains("run this as root"),
        "{e}"
    );
    assert!(!e.contains("is hostd running"), "{e}");
    let e = as_nobody(&["guestd", "--connect", "unix:/nonexistent.sock"]);
    assert!(e.contains("guestd needs root"), "{e}");
    // Without the process connector, its hint socket under /run/tandem.
    let e = as_nobody(&[
        "guestd",
        "--no-netlink",
        "--connect",
        "unix:/nonexistent.sock",
    ]);
    assert!(e.contains("this needs root"), "{e}");
    let vm = format!("name=a,socket={},pid=1", dir.p("a.sock").display());
    let e = as_nobody(&["hostd", "run", "--vm", &vm]);
    assert!(e.contains("hostd needs root"), "{e}");
}

/// `tandem hostd bench-hostile` with short windows: under every hostile
/// input hostd's CPU stays bounded, the quiet VM is still boosted in
/// reasonable time and the metrics are answered. The bounds are generous
/// (this machine is shared): the measured figures and the target bounds
/// are in docs/hostile-inputs.md.
#[test]
#[ignore = "needs root: runs hostd and boosts stand-in QEMU processes"]
fn hostile_inputs_cost_hostd_a_bounded_amount() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let o = Command::new(EXE)
        .args(["hostd", "bench-hostile", "--window-s", "2", "--trials", "6"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{out}");
    let rows: Vec<Vec<f64>> = out
        .lines()
        .skip(2)
        .map(|l| {
            l.split('|')
                .skip(2)
                .flat_map(|c| c.split('/'))
                .map(|v| v.trim().parse::<f64>().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), agent::hostile::INPUTS.len(), "{out}");
    let quiet_p50 = rows[0][1];
    for (r, input) in rows.iter().zip(agent::hostile::INPUTS) {
        let (cpu, p50, metrics_ms) = (r[0], r[1], r[4]);
        assert!(cpu < 25.0, "{input}: hostd used {cpu}% of a core\n{out}");
        let bound = (4.0 * quiet_p50).max(quiet_p50 + 10.0);
        assert!(
            p50 < bound,
            "{input}: boost latency {p50} ms, quiet {quiet_p50} ms\n{out}"
        );
        assert!(
            metrics_ms < 5000.0,
            "{input}: metrics took {metrics_ms} ms\n{out}"
        );
    }
}

/// A VM's QEMU is checked (pid and start time) before each boost, not only
/// at the rescan: a HELP for a VM whose process is gone marks it exited at
/// once and boosts nothing.
#[test]
#[ignore = "needs root: runs hostd"]
fn the_qemu_process_is_checked_before_each_boost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-recheck");
    let mut vm = sleeper(&dir);
    // Rescans a minute apart: only the check at the boost can see the exit.
    let mut h = hostd(&dir, &[("a", vm.pid())], &["--rescan-ms", "60000"]);
    let mut g = Guest::connect(&dir, "a");
    assert!(status(&dir).contains("running"), "{}", status(&dir));
    let _ = vm.0.kill();
    let _ = vm.0.wait();
    g.help(3000);
    wait_until("the VM taken for exited at its HELP", 5.0, || {
        status(&dir).contains("exited")
    });
    assert!(!boosted(&dir, "a"), "{}", status(&dir));
    assert!(h.stop());
}

/// hostd as a `Type=notify` service, against a notify socket of the test's
/// own (systemd is not PID 1 here): READY=1 once its sockets are bound,
/// WATCHDOG=1 at half of WATCHDOG_USEC, RELOADING=1 and READY=1 around a
/// SIGHUP that applies the new rate limit (and says which changes need a
/// restart), an invalid file refused on SIGHUP with the running
/// configuration kept, STOPPING=1 at SIGTERM.
#[test]
#[ignore = "needs root: runs hostd"]
fn hostd_speaks_the_notify_protocol_and_reloads_on_sighup() {
    use std::os::unix::net::UnixDatagram;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-notify");
    let vm = sleeper(&dir);
    let sock = UnixDatagram::bind(dir.p("notify.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let next = || {
        let mut b = [0u8; 512];
        let n = sock.recv(&mut b).expect("a notification");
        String::from_utf8_lossy(&b[..n]).trim().to_string()
    };
    // Until a message with `want`, skipping watchdog pings; returns what came.
    let until = |want: &str| {
        let mut seen = Vec::new();
        loop {
            let m = next();
            let done = m.lines().any(|l| l == want);
            if m != "WATCHDOG=1" {
                seen.push(m);
            }
            if done {
                return seen;
            }
        }
    };
    let conf = dir.p("hostd.toml");
    std::fs::write(&conf, "rate_limit = 200\n").unwrap();
    let log = std::fs::File::create(dir.p("hostd.log")).unwrap();
    // systemd sets WATCHDOG_PID to the service's pid: a shell that execs
    // hostd knows it.
    let mut c = Command::new("sh");
    c.args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", EXE])
        .args(["hostd", "run", "--config"])
        .arg(&conf)
        .arg("--vm")
        .arg(format!(
            "name=a,socket={},pid={}",
            dir.p("a.sock").display(),
            vm.pid()
        ))
        .arg("--control")
        .arg(dir.p("control.sock"))
        .arg("--state-file")
        .arg(dir.p("hostd.state"))
        .env("NOTIFY_SOCKET", dir.p("notify.sock"))
        .env("WATCHDOG_USEC", "200000")
        .stderr(log);
    let mut h = Proc::spawn(&mut c);
    let first = until("READY=1");
    assert!(first[0].contains("STATUS=serving 1 VM(s)"), "{first:?}");
    assert!(dir.p("control.sock").exists() && dir.p("a.sock").exists());
    // Watchdog pings every 100 ms.
    let t = Instant::now();
    let pings = (0..5).filter(|_| next() == "WATCHDOG=1").count();
    assert!(
        pings >= 4 && t.elapsed() < Duration::from_secs(2),
        "{pings} pings in {:?}",
        t.elapsed()
    );
    assert!(status(&dir).contains("rate 200 msgs/s"), "{}", status(&dir));

    std::fs::write(&conf, "rate_limit = 5\nlease_ms = 500\n").unwrap();
    h.signal(libc::SIGHUP);
    let seen = until("READY=1");
    assert!(seen.iter().any(|m| m == "RELOADING=1"), "{seen:?}");
    assert!(status(&dir).contains("rate 5 msgs/s"), "{}", status(&dir));
    // An invalid file: refused, the running configuration stays.
    std::fs::write(&conf, "rate_burst = nan\n").unwrap();
    h.signal(libc::SIGHUP);
    until("READY=1");
    assert!(status(&dir).contains("rate 5 msgs/s"), "{}", status(&dir));
    assert!(h.0.try_wait().unwrap().is_none(), "SIGHUP stopped hostd");
    assert!(h.stop(), "hostd exited with an error");
    until("STOPPING=1");
    let log = std::fs::read_to_string(dir.p("hostd.log")).unwrap();
    assert!(
        log.contains("kept as they were until a restart: the lease and budget"),
        "{log}"
    );
    assert!(
        log.contains("configuration not reloaded") && log.contains("rate_burst = NaN"),
        "{log}"
    );
}

/// hostd started on an empty VM directory serves a stand-in QEMU whose QMP
/// socket appears there later (QEMU's pid from the socket's peer), connects
/// to its channel `<name>.sock`, boosts it on HELP; when the QMP socket goes,
/// the VM is dropped: its boost undone, its channel closed, gone from status.
#[test]
#[ignore = "needs root: runs hostd and boosts a stand-in QEMU found in its VM directory"]
fn a_vm_in_the_vm_dir_is_served_without_a_restart_and_dropped_when_gone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-vmdir");
    let vms = dir.p("vms");
    std::fs::create_dir(&vms).unwrap();
    let mut c = Command::new(EXE);
    c.args([
        "hostd",
        "run",
        "--log-format",
        "json",
        "--log-boosts",
        "--vm-dir",
    ])
    .arg(&vms)
    .arg("--control")
    .arg(dir.p("control.sock"))
    .arg("--state-file")
    .arg(dir.p("hostd.state"))
    .stderr(Stdio::piped());
    let mut h = Proc::spawn(&mut c);
    let ctl = dir.p("control.sock");
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(&ctl).is_ok()
    });
    let listed = |d: &Scratch| status(d).lines().any(|l| l.starts_with("vm1 "));
    assert!(!listed(&dir), "{}", status(&dir));
    assert!(
        status(&dir).contains(&format!(
            "vm_dir {}: watching; 0 VM(s) found there",
            vms.display()
        )),
        "{}",
        status(&dir)
    );
    // QEMU's chardev server (server=on), played by the test: hostd connects.
    let chan = std::os::unix::net::UnixListener::bind(vms.join("vm1.sock")).unwrap();
    chan.set_nonblocking(true).unwrap();
    let q = Proc::spawn(
        fake_qemu(&dir)
            .args(["hostd", "fake-qemu", "--threads", "2", "--qmp"])
            .arg(vms.join("vm1.qmp")),
    );
    agent::testkit::wait_exec(q.pid());
    // Main, two idle threads and the QMP server's.
    wait_until("the threads", 10.0, || {
        sys::threads(q.pid()).map(|t| t.len()).unwrap_or(0) == 4
    });
    let orig = thread_prios(q.pid());
    wait_until("hostd to serve vm1", 10.0, || listed(&dir));
    assert!(
        status(&dir).contains(&format!("vm1              {}", q.pid())),
        "{}",
        status(&dir)
    );
    let mut conn = None;
    wait_until("hostd to connect to vm1's channel", 10.0, || {
        conn = chan.accept().ok().map(|(s, _)| s);
        conn.is_some()
    });
    let s = conn.unwrap();
    s.set_nonblocking(false).unwrap();
    let mut g = Guest::hello(s, "vm1");
    g.help(5000);
    wait_until("the boost", 5.0, || {
        thread_prios(q.pid()).iter().all(|&(_, p)| p == rt4())
    });
    assert!(boosted(&dir, "vm1"));
    // The VM goes away from the directory while boosted.
    std::fs::remove_file(vms.join("vm1.qmp")).unwrap();
    wait_until("vm1 dropped", 5.0, || !listed(&dir));
    wait_until("the boost undone", 5.0, || thread_prios(q.pid()) == orig);
    let mut b = [0u8; 8];
    assert_eq!(g.0.read(&mut b).unwrap_or(0), 0, "the channel is closed");
    drop(q);
    // Another VM takes the freed slot; its QEMU killed (its QMP socket file
    // left behind, as after a crash), it is dropped too.
    let q2 = Proc::spawn(
        fake_qemu(&dir)
            .args(["hostd", "fake-qemu", "--qmp"])
            .arg(vms.join("vm2.qmp")),
    );
    let row = |d: &Scratch| {
        status(d)
            .lines()
            .find(|l| l.starts_with("vm2 "))
            .map(str::to_string)
    };
    wait_until("hostd to serve vm2", 10.0, || row(&dir).is_some());
    assert!(row(&dir).unwrap().contains(&q2.pid().to_string()));
    assert!(!listed(&dir), "{}", status(&dir));
    drop(q2);
    wait_until("vm2 dropped", 5.0, || row(&dir).is_none());
    assert!(vms.join("vm2.qmp").exists());
    // Its socket is left, with no QEMU behind it: counted, not served.
    wait_until("the stale socket counted", 5.0, || {
        status(&dir).contains("0 VM(s) found there, 1 socket(s) not served")
    });
    assert!(h.stop());
    // --log-format json: every line a JSON object; the boost log's fields.
    let mut err = String::new();
    h.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let field = |v: &serde_json::Value, k: &str| v["fields"][k].as_str().map(str::to_string);
    assert!(
        lines.iter().any(|v| v["target"] == "hostd"
            && field(v, "message").is_some_and(|m| m.contains("vm1") && m.contains("serving it"))),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|v| field(v, "vm").as_deref() == Some("vm1")
                && field(v, "event").as_deref() == Some("boost")),
        "{err}"
    );
}

/// guestd's `--log-format json`: each line on stderr parses as a JSON
/// object with a level, a target and a message.
#[test]
fn guestd_logs_json_lines() {
    let dir = Scratch::new("agent-guestd-json");
    let mut c = Command::new(EXE);
    c.args([
        "guestd",
        "--no-netlink",
        "--log-format",
        "json",
        "--connect",
    ])
    .arg(format!("unix:{}", dir.p("none.sock").display()))
    .arg("--hint-socket")
    .arg(dir.p("hint.sock"))
    .stderr(Stdio::piped());
    let mut g = Proc::spawn(&mut c);
    let mut r = std::io::BufReader::new(g.0.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut r, &mut line).unwrap();
    g.stop();
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert_eq!(v["target"], "guestd", "{line}");
    assert_eq!(v["level"], "INFO", "{line}");
    assert!(
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("connecting to unix:")),
        "{line}"
    );
    let o = Command::new(EXE)
        .args(["guestd", "--log-format", "xml", "--connect", "unix:/x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("xml") && e.contains("text, json"), "{e}");
}

/// A stand-in QEMU with one idle thread beside the main one and the QMP
/// server's, and `vcpus` vCPU threads ("CPU N/KVM"), whose QMP socket (`qmp.sock` in `dir`) names
/// those and the `foreign` thread ids as vCPUs; returned with its vCPU
/// threads' ids once they all exist.
fn cpu_vm(dir: &Scratch, vcpus: usize, foreign: &[u32]) -> (Proc, Vec<u32>) {
    cpu_vm_with(dir, vcpus, foreign, false)
}

/// [`cpu_vm`], whose QMP says TCG runs it (`--tcg`) if `tcg`.
fn cpu_vm_with(dir: &Scratch, vcpus: usize, foreign: &[u32], tcg: bool) -> (Proc, Vec<u32>) {
    let mut c = fake_qemu(dir);
    c.args(["hostd", "fake-qemu", "--threads", "1", "--vcpus"])
        .arg(vcpus.to_string())
        .arg("--qmp")
        .arg(dir.p("qmp.sock"));
    if tcg {
        c.arg("--tcg");
    }
    for t in foreign {
        c.arg("--foreign-vcpu").arg(t.to_string());
    }
    let vm = Proc::spawn(&mut c);
    agent::testkit::wait_exec(vm.pid());
    wait_until("the threads and QMP", 10.0, || {
        sys::threads(vm.pid()).map(|t| t.len()).unwrap_or(0) == 3 + vcpus
            && dir.p("qmp.sock").exists()
    });
    let tids = sys::threads(vm.pid())
        .unwrap()
        .into_iter()
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{}/task/{t}/comm", vm.pid()))
                .is_ok_and(|c| c.starts_with("CPU "))
        })
        .collect::<Vec<_>>();
    assert_eq!(tids.len(), vcpus);
    (vm, tids)
}

/// hostd serving VM `a` (pid, QMP socket in `dir`) with the CPU boost.
fn cpu_hostd(dir: &Scratch, pid: u32, extra: &[&str]) -> Proc {
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
        .args(extra);
    let p = Proc::spawn(&mut c);
    let ctl = dir.p("control.sock");
    wait_until("hostd's control socket", 10.0, || {
        UnixStream::connect(&ctl).is_ok()
    });
    p
}

fn sched(tid: u32) -> sys::SchedState {
    sys::sched_get(tid).unwrap()
}

fn is_rr(tid: u32, prio: i32) -> bool {
    sys::sched_get(tid).is_ok_and(|s| s.policy == libc::SCHED_RR && s.priority == prio)
}

/// Every thread's scheduling and I/O priority, by thread.
fn thread_sched(pid: u32) -> Vec<(u32, sys::SchedState, u32)> {
    sys::threads(pid)
        .unwrap()
        .into_iter()
        .map(|t| (t, sched(t), sys::ioprio_get(t).unwrap()))
        .collect()
}

/// The CPU boost on a VM whose guest keeps asking: its vCPU threads (and
/// only they) go to SCHED_RR 8; after 1 s the cap takes the boost away for
/// the throttle time (1 s), then gives it back; SIGTERM of hostd restores
/// every thread's policy, priority and nice.
#[test]
#[ignore = "needs root: runs hostd and sets SCHED_RR on a stand-in QEMU's threads"]
fn cpu_boost_is_applied_to_the_vcpus_capped_after_1s_and_restored_on_exit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-cap");
    let (vm, vcpus) = cpu_vm(&dir, 2, &[]);
    let before = thread_sched(vm.pid());
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "rr"]);
    let mut g = Guest::connect(&dir, "a");
    g.ask(Resource::Cpu, 1000);
    wait_until("the vCPU boost", 5.0, || vcpus.iter().all(|&t| is_rr(t, 8)));
    let on = Instant::now();
    // The other threads keep their scheduling and I/O priority.
    for (tid, s, io) in thread_sched(vm.pid()) {
        if !vcpus.contains(&tid) {
            assert!(before.contains(&(tid, s, io)), "thread {tid} changed");
        }
    }
    // The guest keeps asking (renewals every 200 ms); the cap ends the boost.
    let renew = |g: &mut Guest, until: &dyn Fn() -> bool, secs: f64, what: &str| {
        let t = Instant::now();
        while !until() {
            assert!(t.elapsed().as_secs_f64() < secs, "timed out: {what}");
            g.ask(Resource::Cpu, 1000);
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    renew(
        &mut g,
        &|| vcpus.iter().all(|&t| !is_rr(t, 8)),
        3.0,
        "the cap",
    );
    let capped = on.elapsed().as_secs_f64();
    assert!((0.9..1.5).contains(&capped), "capped after {capped} s");
    assert!(status(&dir).contains("throttles 1"), "{}", status(&dir));
    // Still asked for: boosted again once the throttle (1 s) is over.
    let off = Instant::now();
    renew(
        &mut g,
        &|| vcpus.iter().all(|&t| is_rr(t, 8)),
        3.0,
        "the boost after the throttle",
    );
    let throttled = off.elapsed().as_secs_f64();
    assert!((0.9..1.5).contains(&throttled), "throttled {throttled} s");
    // hostd stops while boosted: everything is back.
    assert!(h.stop());
    assert_eq!(thread_sched(vm.pid()), before);
    assert!(!dir.p("hostd.state").exists());
}

/// A CPU boost (nice) left by a hostd killed with SIGKILL is in the state
/// file and restored by the next start, nice value and policy both.
#[test]
#[ignore = "needs root: runs hostd and renices a stand-in QEMU's threads"]
fn cpu_boost_is_restored_after_sigkill_and_restart() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-kill");
    let (vm, vcpus) = cpu_vm(&dir, 1, &[]);
    // A nice value of its own, to be found again.
    sys::set_nice(vcpus[0], 3).unwrap();
    let before = thread_sched(vm.pid());
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "nice"]);
    let mut g = Guest::connect(&dir, "a");
    g.ask(Resource::Cpu, 1000);
    wait_until("the vCPU boost", 5.0, || sched(vcpus[0]).nice == -10);
    h.signal(libc::SIGKILL);
    let _ = h.0.wait();
    drop(g);
    assert_eq!(sched(vcpus[0]).nice, -10, "the boost outlives the daemon");
    let state = std::fs::read_to_string(dir.p("hostd.state")).unwrap();
    assert!(
        state.contains("\"sched\"") && state.contains(&format!("\"tid\": {}", vcpus[0])),
        "{state}"
    );
    let mut h2 = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "nice"]);
    assert_eq!(thread_sched(vm.pid()), before);
    assert!(!dir.p("hostd.state").exists());
    assert!(h2.stop());
}

/// QMP names a thread of another process as a vCPU: hostd boosts the real
/// vCPU and refuses that one, which keeps its scheduling; the refusal shows
/// in `status`.
#[test]
#[ignore = "needs root: runs hostd and sets SCHED_RR on a stand-in QEMU's threads"]
fn cpu_boost_refuses_a_thread_that_is_not_a_vcpu_of_the_vm() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-refuse");
    let other = sleeper(&Scratch::new("agent-cpu-other"));
    let other_before = sched(other.pid());
    let (vm, vcpus) = cpu_vm(&dir, 1, &[other.pid()]);
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "rr"]);
    let mut g = Guest::connect(&dir, "a");
    g.ask(Resource::Cpu, 1000);
    wait_until("the vCPU boost", 5.0, || is_rr(vcpus[0], 8));
    wait_until("the refusal in status", 5.0, || {
        status(&dir).contains(&format!(
            "thread {} is not a thread of VM a's QEMU",
            other.pid()
        ))
    });
    assert_eq!(sched(other.pid()), other_before);
    g.no_help_for(Resource::Cpu);
    wait_until("the unboost", 5.0, || !is_rr(vcpus[0], 8));
    assert!(h.stop());
    assert_eq!(sched(other.pid()), other_before);
}

/// Under TCG (QMP's `query-kvm`: KVM off) the CPU boost takes QEMU's main
/// loop, which fires the guest's timers, with the vCPU; the other threads
/// keep their scheduling; a thread of another process named as a vCPU is
/// still refused; the NO-HELP puts both back, and so does hostd's exit.
#[test]
#[ignore = "needs root: runs hostd and sets SCHED_RR on a stand-in QEMU's threads"]
fn cpu_boost_under_tcg_takes_the_main_loop_with_the_vcpus() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-tcg");
    let other = sleeper(&Scratch::new("agent-cpu-tcg-other"));
    let other_before = sched(other.pid());
    let (vm, vcpus) = cpu_vm_with(&dir, 1, &[other.pid()], true);
    let main = vm.pid();
    let before = thread_sched(main);
    let mut h = cpu_hostd(&dir, main, &["--cpu-boost", "rr"]);
    let mut g = Guest::connect(&dir, "a");
    g.ask(Resource::Cpu, 1000);
    wait_until("the vCPU and main-loop boost", 5.0, || {
        is_rr(vcpus[0], 8) && is_rr(main, 8)
    });
    for (tid, s, io) in thread_sched(main) {
        if tid != main && !vcpus.contains(&tid) {
            assert!(before.contains(&(tid, s, io)), "thread {tid} changed");
        }
    }
    wait_until("the counts and the refusal in status", 5.0, || {
        let s = status(&dir);
        s.contains("vcpus_boosted 1")
            && s.contains("timer_threads_boosted 1")
            && s.contains(&format!(
                "thread {} is not a thread of VM a's QEMU",
                other.pid()
            ))
    });
    assert_eq!(sched(other.pid()), other_before);
    g.no_help_for(Resource::Cpu);
    wait_until("the unboost", 5.0, || {
        !is_rr(vcpus[0], 8) && !is_rr(main, 8)
    });
    assert_eq!(thread_sched(main), before);
    // Boosted again, then hostd exits: both restored.
    g.ask(Resource::Cpu, 1000);
    wait_until("the boost again", 5.0, || is_rr(main, 8));
    assert!(h.stop());
    assert_eq!(thread_sched(main), before);
    assert_eq!(sched(other.pid()), other_before);
}

/// help-all: one I/O HELP boosts the VM's I/O threads (ioprio RT 4) and its
/// vCPUs (SCHED_RR); the NO-HELP ends both.
#[test]
#[ignore = "needs root: runs hostd and boosts a stand-in QEMU's threads"]
fn help_all_boosts_the_io_threads_and_the_vcpus() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-help-all");
    let (vm, vcpus) = cpu_vm(&dir, 1, &[]);
    let before = thread_sched(vm.pid());
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "rr", "--help-all"]);
    let mut g = Guest::connect(&dir, "a");
    g.help(1000);
    wait_until("both boosts", 5.0, || {
        is_rr(vcpus[0], 8) && sys::ioprio_get(vm.pid()).unwrap() == rt4()
    });
    g.no_help();
    wait_until("both unboosts", 5.0, || thread_sched(vm.pid()) == before);
    assert!(h.stop());
}

/// `cpu.shares`: a VM's QEMU in a cgroup v1 cpu group of its own gets the
/// boost's shares while boosted, and its own back after.
#[test]
#[ignore = "needs root and a cgroup v1 cpu hierarchy"]
fn cpu_shares_are_raised_and_restored() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let mount = sys::cgroup_v1_mount("cpu").expect("a cgroup v1 cpu hierarchy");
    let dir = Scratch::new("agent-cpu-shares");
    let (vm, _) = cpu_vm(&dir, 1, &[]);
    let cg = mount.join(format!("tandem-test-shares-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _rm = Rm(cg.clone());
    std::fs::write(cg.join("cpu.shares"), "512").unwrap();
    for t in sys::threads(vm.pid()).unwrap() {
        std::fs::write(cg.join("tasks"), t.to_string()).unwrap();
    }
    let shares = || std::fs::read_to_string(cg.join("cpu.shares")).unwrap();
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "shares"]);
    let mut g = Guest::connect(&dir, "a");
    g.ask(Resource::Cpu, 1000);
    wait_until("the shares", 5.0, || shares().trim() == "8192");
    g.no_help_for(Resource::Cpu);
    wait_until("the shares restored", 5.0, || shares().trim() == "512");
    assert!(h.stop());
    // The group goes (`_rm`) once the stand-in is gone from it.
    drop(vm);
    wait_until("an empty group", 5.0, || {
        std::fs::read_to_string(cg.join("cgroup.procs")).is_ok_and(|s| s.trim().is_empty())
    });
}

/// `tandem hint --cpu` in the guest: guestd sends a HELP for the CPU and
/// hostd puts the VM's vCPU (only it) at SCHED_RR; the hint's end (400 ms)
/// sends the NO-HELP and everything is back. guestd runs without --cpu (no
/// watcher, whose late wake-ups on a loaded machine would ask too), so the
/// hint is the only CPU signal.
#[test]
#[ignore = "needs root: runs hostd and sets SCHED_RR on a stand-in QEMU's threads"]
fn a_cpu_hint_in_the_guest_boosts_the_vcpus() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-hint");
    let (vm, vcpus) = cpu_vm(&dir, 1, &[]);
    let before = thread_sched(vm.pid());
    let mut h = cpu_hostd(&dir, vm.pid(), &["--cpu-boost", "rr"]);
    let _gd = Proc::spawn(
        Command::new(EXE)
            .args(["guestd", "--name", "a", "--no-netlink", "--connect"])
            .arg(format!("unix:{}", dir.p("a.sock").display()))
            .arg("--hint-socket")
            .arg(dir.p("hint.sock")),
    );
    wait_until("guestd's channel", 10.0, || {
        status(&dir).contains("connected")
    });
    assert!(!is_rr(vcpus[0], 8));
    let o = Command::new(EXE)
        .args(["hint", "--cpu", "--for", "400ms", "--socket"])
        .arg(dir.p("hint.sock"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_until("the vCPU boost", 5.0, || is_rr(vcpus[0], 8));
    // An I/O boost it is not: the other threads keep their I/O priority.
    for (tid, s, io) in thread_sched(vm.pid()) {
        if tid != vcpus[0] {
            assert!(before.contains(&(tid, s, io)), "thread {tid} changed");
        }
    }
    wait_until("the end of the hint", 5.0, || {
        thread_sched(vm.pid()) == before
    });
    assert!(h.stop());
}

/// A guest that asks for CPU help all the time gets no more than its
/// budget: with 20% of a 5 s window (1 s) and a cap that throttles only
/// 10 ms, 3 s of asking give about 1 s of SCHED_RR, sampled every 2 ms.
#[test]
#[ignore = "needs root: runs hostd and sets SCHED_RR on a stand-in QEMU's threads"]
fn a_greedy_guest_gets_no_more_cpu_boost_than_its_budget() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    let dir = Scratch::new("agent-cpu-budget");
    let (vm, vcpus) = cpu_vm(&dir, 1, &[]);
    let mut h = cpu_hostd(
        &dir,
        vm.pid(),
        &[
            "--cpu-boost",
            "rr",
            "--cpu-throttle-ms",
            "10",
            "--budget-fraction",
            "0.2",
            "--budget-window-s",
            "5",
        ],
    );
    let mut g = Guest::connect(&dir, "a");
    let t0 = Instant::now();
    let (mut on, mut samples, mut last_ask) = (0u32, 0u32, None::<Instant>);
    while t0.elapsed() < Duration::from_secs(3) {
        if last_ask.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
            g.ask(Resource::Cpu, 1000);
            last_ask = Some(Instant::now());
        }
        samples += 1;
        on += is_rr(vcpus[0], 8) as u32;
        std::thread::sleep(Duration::from_millis(2));
    }
    let boosted_s = 3.0 * on as f64 / samples as f64;
    assert!(
        (0.6..1.4).contains(&boosted_s),
        "boosted {boosted_s:.2} s of 3 s with a 1 s budget"
    );
    assert!(h.stop());
    assert!(!is_rr(vcpus[0], 8));
}

/// A stand-in QEMU for `cfsv`: two spinning vCPU threads (a guest
/// computing) and two I/O-ish "worker" threads (50 us of work, 200 us
/// asleep), QMP on `qmp.sock` in `dir`; returned with the vCPUs' and the
/// workers' thread ids once they all exist.
fn cfsv_vm(dir: &Scratch) -> (Proc, Vec<u32>, Vec<u32>) {
    let mut c = fake_qemu(dir);
    c.args([
        "hostd",
        "fake-qemu",
        "--vcpus",
        "2",
        "--busy-vcpus",
        "--workers",
        "2",
        "--qmp",
    ])
    .arg(dir.p("qmp.sock"));
    let vm = Proc::spawn(&mut c);
    agent::testkit::wait_exec(vm.pid());
    let named = |prefix: &str| {
        sys::threads(vm.pid())
            .unwrap()
            .into_iter()
            .filter(|t| {
                std::fs::read_to_string(format!("/proc/{}/task/{t}/comm", vm.pid()))
                    .is_ok_and(|c| c.starts_with(prefix))
            })
            .collect::<Vec<_>>()
    };
    // The main thread, QMP's, 2 vCPUs, 2 workers, named.
    wait_until("the threads and QMP", 10.0, || {
        named("CPU ").len() == 2 && named("worker").len() == 2 && dir.p("qmp.sock").exists()
    });
    let (vcpus, workers) = (named("CPU "), named("worker"));
    assert_eq!((vcpus.len(), workers.len()), (2, 2));
    (vm, vcpus, workers)
}

/// A CPU hog on the host (not QEMU's): a shell's busy loop.
fn host_hog() -> Proc {
    Proc::spawn(Command::new("sh").args(["-c", "while :; do :; done"]))
}

/// Every thread's scheduling, I/O priority and cpu group, by thread.
fn thread_state(pid: u32) -> Vec<(u32, sys::SchedState, u32, Option<String>)> {
    thread_sched(pid)
        .into_iter()
        .map(|(t, s, io)| (t, s, io, sys::thread_cgroup(t, "cpu")))
        .collect()
}

/// Whether thread `tid` has `kind`'s boost (hostd's defaults).
fn cfsv_boosted(kind: &str, tid: u32) -> bool {
    let s = sched(tid);
    match kind {
        "nice" => s.nice == -20,
        "rr" => s.policy == libc::SCHED_RR && s.priority == 1,
        "deadline" => s.policy & !libc::SCHED_RESET_ON_FORK == sys::SCHED_DEADLINE,
        "shares" => sys::thread_cgroup(tid, "cpu").as_deref() == Some("/tandem-cfsv"),
        _ => unreachable!("{kind}"),
    }
}

/// `cfsv` with each boost: the workers (and QEMU's main thread) are
/// boosted, the spinning vCPUs and a host hog are not; `status` counts
/// them; SIGTERM of hostd puts every thread's policy, nice and cpu group
/// back, and removes the shares group.
#[test]
#[ignore = "needs root: runs hostd, which renices, moves and sets SCHED_RR/SCHED_DEADLINE on a stand-in QEMU's threads"]
fn cfsv_boosts_the_io_threads_not_the_vcpus_or_hogs_and_restores_on_exit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    for kind in ["nice", "shares", "rr", "deadline"] {
        let dir = Scratch::new(&format!("agent-cfsv-{kind}"));
        let (vm, vcpus, workers) = cfsv_vm(&dir);
        let hog = host_hog();
        let before = thread_state(vm.pid());
        let hog_before = sched(hog.pid());
        let mut h = cpu_hostd(&dir, vm.pid(), &["--cfsv", "--cfsv-boost", kind]);
        wait_until(&format!("{kind}: the workers' boost"), 5.0, || {
            workers.iter().all(|&t| cfsv_boosted(kind, t)) && cfsv_boosted(kind, vm.pid())
        });
        // A second of classification: the hog stays as it was, and the
        // spinning vCPUs are left alone most of the time. Not always:
        // preempted every few hundred us by the boosted workers on this
        // 2-core machine (and other load), a vCPU has been seen to pass for
        // I/O-related for a period or two (short runs, and a quarter of two
        // periods neither run nor waiting in schedstat, whose CPU time is
        // brought up to date only at ticks and switches and a wait only
        // when it ends): a known limit of the schedstat estimate. Not
        // checked with `deadline`, where it happens more often.
        let t = Instant::now();
        let (mut checks, mut boosted) = (0u32, 0u32);
        while t.elapsed() < Duration::from_secs(1) {
            for &v in vcpus.iter().filter(|_| kind != "deadline") {
                checks += 1;
                boosted += cfsv_boosted(kind, v) as u32;
            }
            assert_eq!(sched(hog.pid()), hog_before, "{kind}: the hog changed");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Seen up to a quarter of the checks under other load.
        assert!(
            boosted * 2 <= checks,
            "{kind}: vCPUs boosted in {boosted} of {checks} checks\n{}",
            status(&dir)
        );
        let st = status(&dir);
        assert!(
            st.contains(&format!("cfsv: {kind}  threads 6")) && st.contains("errors 0"),
            "{st}"
        );
        assert!(h.stop(), "{kind}: hostd failed");
        assert_eq!(thread_state(vm.pid()), before, "{kind}");
        assert!(!dir.p("hostd.state").exists());
        let group = sys::cgroup_v1_mount("cpu").map(|m| m.join("tandem-cfsv"));
        assert!(
            !group.is_some_and(|g| g.exists()),
            "{kind}: the group is left"
        );
    }
}

/// hostd killed (SIGKILL) while `cfsv` boosts: the boosts outlive it, are
/// in the state file, and the next start (without `cfsv`) restores every
/// thread's policy, nice and cpu group, and removes the shares group.
#[test]
#[ignore = "needs root: runs hostd, which renices, moves and sets SCHED_RR/SCHED_DEADLINE on a stand-in QEMU's threads"]
fn cfsv_boosts_are_restored_after_sigkill_and_restart() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "needs root");
    for kind in ["nice", "shares", "rr", "deadline"] {
        let dir = Scratch::new(&format!("agent-cfsv-kill-{kind}"));
        let (vm, _, workers) = cfsv_vm(&dir);
        let before = thread_state(vm.pid());
        let mut h = cpu_hostd(&dir, vm.pid(), &["--cfsv", "--cfsv-boost", kind]);
        wait_until(&format!("{kind}: the workers' boost"), 5.0, || {
            workers.iter().all(|&t| cfsv_boosted(kind, t))
        });
        h.signal(libc::SIGKILL);
        let _ = h.0.wait();
        assert!(
            workers.iter().all(|&t| cfsv_boosted(kind, t)),
            "{kind}: the boost outlives the daemon"
        );
        let state = std::fs::read_to_string(dir.p("hostd.state")).unwrap();
        assert!(
            state.contains(&format!("\"tid\": {}", workers[0])),
            "{state}"
        );
        let mut h2 = cpu_hostd(&dir, vm.pid(), &[]);
        assert_eq!(thread_state(vm.pid()), before, "{kind}");
        assert!(!dir.p("hostd.state").exists());
        let group = sys::cgroup_v1_mount("cpu").map(|m| m.join("tandem-cfsv"));
        assert!(
            !group.is_some_and(|g| g.exists()),
            "{kind}: the group is left"
        );
        assert!(h2.stop());
    }
}

/// `cfsv` and `cpu_boost` both set vCPU threads' scheduling: refused; and
/// the cfsv settings are checked.
#[test]
fn cfsv_settings_are_checked() {
    for (args, want) in [
        (&["--cfsv", "--cpu-boost", "nice"][..], "cfsv and cpu_boost"),
        (
            &["--cfsv", "--cfsv-period-ms", "0"][..],
            "cfsv_period_ms = 0",
        ),
        (&["--cfsv", "--cfsv-nice", "-21"][..], "cfsv_nice = -21"),
        (&["--cfsv", "--cfsv-shares", "1"][..], "cfsv_shares = 1"),
        (
            &["--cfsv", "--cfsv-dl-runtime-us", "1001"][..],
            "cfsv_dl_runtime_us = 1001",
        ),
        (
            &["--cfsv", "--cfsv-boost", "fifo"][..],
            "accepted: shares, nice, rr, deadline",
        ),
    ] {
        let mut a = vec!["--vm", "name=a,socket=/nonexistent/a.sock,pid=1"];
        a.extend_from_slice(args);
        let o = hostd_run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}
