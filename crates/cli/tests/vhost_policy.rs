//! `tandem vhost-blk`'s per-VM policy options: the VM's blkio group and
//! weight (`--cgroup`, `--weight`), its own best-effort level
//! (`--be-level`) and its RT budget (`--rt-budget`, `--rt-budget-window-s`):
//! bad values refused before anything is made, and the group joined with
//! its weight and removed at exit (root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{tandem, Scratch};

const MIB: u64 = 1 << 20;

fn run(sock: &Path, image: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "vhost-blk",
        "--socket",
        sock.to_str().unwrap(),
        "--image",
        image.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    tandem(&args)
}

#[test]
fn bad_vm_policies_are_refused_with_code_2_naming_the_option() {
    let s = Scratch::new("vhost-policy-usage");
    let disk = s.p("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(MIB).unwrap();
    let sock = s.p("sock");
    for (extra, says) in [
        (&["--weight", "100"][..], "--cgroup"),
        (&["--rt-budget", "1.5"][..], "--rt-budget 1.5"),
        (&["--rt-budget", "0"][..], "(0, 1]"),
        (&["--rt-budget-window-s", "0"][..], "above 0"),
        (&["--be-level", "8"][..], "--be-level 8"),
        (&["--cgroup", "/tmp/not-a-blkio-group"][..], "--cgroup"),
        (
            &["--cgroup", "/sys/fs/cgroup/blkio/x", "--weight", "2000"][..],
            "1 to 1000",
        ),
    ] {
        let o = run(&sock, &disk, extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!sock.exists(), "{extra:?} made its socket");
    }
    assert!(!Path::new("/sys/fs/cgroup/blkio/x").exists());
}

/// The blkio group of `pid`'s thread `tid` (cgroup v1), from the
/// hierarchy's root.
fn blkio_group(pid: u32, tid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, c, p) = (f.next()?, f.next()?, f.next()?);
            c.split(',').any(|x| x == "blkio").then(|| p.to_string())
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs root: a cgroup v1 blkio group for the backend"]
fn the_backend_issues_from_its_vm_group_with_its_weight_and_removes_the_group_at_exit() {
    let root = PathBuf::from("/sys/fs/cgroup/blkio");
    assert!(
        root.join("cgroup.procs").exists(),
        "no cgroup v1 blkio hierarchy"
    );
    let s = Scratch::new("vhost-policy-group");
    let disk = s.p("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(MIB).unwrap();
    let sock = s.p("vhost.sock");
    let name = format!("tandem-vhost-policy-test-{}", std::process::id());
    let group = root.join(&name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["vhost-blk", "--socket"])
        .arg(&sock)
        .arg("--image")
        .arg(&disk)
        .arg("--cgroup")
        .arg(&group)
        .args(["--weight", "300", "--be-level", "6", "--rt-budget", "0.25"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    while !sock.exists() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir(&group);
            panic!("no socket in 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let weight = std::fs::read_to_string(group.join("blkio.bfq.weight")).unwrap_or_default();
    let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .collect();
    let groups: Vec<String> = threads.iter().map(|t| blkio_group(pid, t)).collect();
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    let left = group.exists();
    let _ = std::fs::remove_dir(&group);
    assert_eq!(weight.trim(), "300");
    assert!(
        procs.split_whitespace().any(|p| p == pid.to_string()),
        "{procs}"
    );
    assert!(
        groups.iter().all(|g| *g == format!("/{name}")),
        "{threads:?} in {groups:?}"
    );
    assert!(st.success(), "{st}");
    assert!(!left, "the group the backend made is removed at exit");
}
