//! `coordination = "vhost-ioprio"` in VM cells: the guest's disk is served
//! by `tandem vhost-blk` (one process per VM, on the guest's disk image on
//! the emulated device), which issues each guest request with the I/O
//! priority the guest wrote in its virtio-blk header; QEMU attaches it with
//! `-device vhost-user-blk-pci` and shares the guest's memory with it (a
//! memfd). In the guest, `tandem guestd --mark-ioprio rt` raises the
//! starting app's I/O priority; nothing is asked of the host.
//!
//! The backend dies with the run (`PR_SET_PDEATHSIG`, SIGTERM so that it
//! removes its socket and leaves its blkio group); its socket and counters
//! are in the cell's directory under the run directory, and its blkio group
//! is in the run's journal before it is made, so a SIGKILL of the run at any
//! point leaves nothing. A backend that dies during a cell stalls the
//! guest's disk: [`Backend::check`] turns that into an error at the runner's
//! next look (every request to the guest agent polls it), and the cell is
//! failed with the reason (`vm_cell`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cleanup::Cleanup;
use crate::{run_err, Result};

/// How long the backend may take to listen on its socket. It opens the
/// image and binds at once (milliseconds); the margin is for a loaded host.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The class guestd marks a starting app with in the guest: RT, the class
/// `help-rt` gives the whole VM, so that the two modes differ only in what
/// is favoured (one task's requests against all of the VM's threads).
pub const MARK_CLASS: &str = "rt";

/// The cell's backend, and where its files are.
pub struct Backend {
    child: Child,
    pub socket: PathBuf,
    pub stats: PathBuf,
    log: PathBuf,
    /// Why it stopped, once seen dead while the cell ran.
    died: Option<String>,
}

/// How the runner starts the backend.
pub struct BackendSpec<'a> {
    pub exe: &'a Path,
    /// The guest's disk image.
    pub image: &'a Path,
    /// The cell's directory (socket, stats, log).
    pub dir: &'a Path,
    /// The VM's blkio group for the backend (`--cgroup`), recorded in the
    /// run's journal here before the backend makes it.
    pub cgroup: Option<PathBuf>,
}

impl Backend {
    /// Starts `tandem vhost-blk --allow-rt` on the image and waits until it
    /// listens.
    pub fn start(spec: &BackendSpec, cleanup: &mut Cleanup) -> Result<Backend> {
        std::fs::create_dir_all(spec.dir)
            .map_err(|e| run_err(format!("{}: {e}", spec.dir.display())))?;
        let socket = spec.dir.join("vhost-blk.sock");
        let stats = spec.dir.join("vhost-blk.json");
        let log = spec.dir.join("vhost-blk.log");
        let out =
            std::fs::File::create(&log).map_err(|e| run_err(format!("vhost-blk.log: {e}")))?;
        let err = out.try_clone().map_err(|e| run_err(e.to_string()))?;
        let mut cmd = Command::new(spec.exe);
        cmd.arg("vhost-blk")
            .arg("--socket")
            .arg(&socket)
            .arg("--image")
            .arg(spec.image)
            .arg("--stats")
            .arg(&stats)
            // The runner is root: the VM may keep RT, within the backend's
            // budget (the policy crate's default, as hostd's for help-rt).
            .arg("--allow-rt");
        if let Some(g) = &spec.cgroup {
            cleanup.push_cgroup(g.clone())?;
            cmd.arg("--cgroup").arg(g);
        }
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        devemu::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGTERM);
        let child = cmd
            .spawn()
            .map_err(|e| run_err(format!("starting tandem vhost-blk: {e}")))?;
        let mut b = Backend {
            child,
            socket,
            stats,
            log,
            died: None,
        };
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&b.socket).is_err() {
            crate::check_interrupted()?;
            b.check()?;
            if t0.elapsed() > START_TIMEOUT {
                return Err(run_err(format!(
                    "tandem vhost-blk did not listen on {} in {} s",
                    b.socket.display(),
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(b)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error when the backend has exited: the guest's disk has stopped
    /// answering, so nothing the guest does from now on is a measurement.
    pub fn check(&mut self) -> Result<()> {
        if self.died.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                self.died = Some(format!(
                    "the vhost-user-blk backend (tandem vhost-blk, pid {}) exited ({st}) during the cell; the guest's disk stalled{}",
                    self.child.id(),
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", tail.join(" | "))
                    }
                ));
            }
        }
        match &self.died {
            Some(why) => Err(run_err(why.clone())),
            None => Ok(()),
        }
    }

    /// Why the backend died, if it did.
    pub fn died(&mut self) -> Option<String> {
        let _ = self.check();
        self.died.clone()
    }

    /// The backend's counters (its stats file), flattened to
    /// `section.key` numbers, e.g. `guest_class.rt`, `rt_demoted.over_budget`.
    pub fn counters(&self) -> std::collections::BTreeMap<String, f64> {
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let mut m = std::collections::BTreeMap::new();
        flatten("", &v, &mut m);
        m
    }

    /// SIGTERM (it finishes its requests, removes its socket and leaves its
    /// group), SIGKILL after 10 s.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        use crate::workers::Stopped;
        match crate::workers::terminate(&mut self.child, Duration::from_secs(10)) {
            Stopped::Before | Stopped::OnTerm(_) => Ok(()),
            Stopped::Killed => Err(run_err("tandem vhost-blk did not stop on SIGTERM")),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut std::collections::BTreeMap<String, f64>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.insert(prefix.to_string(), x);
            }
        }
        _ => {}
    }
}

/// The backend's counters over a repetition, into its result: requests the
/// guest sent as RT, issued as RT on the host, and RT demoted (budget or not
/// allowed), as `vm1_*` like hostd's.
pub fn counters_into(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    out: &mut experiment::RunResult,
) {
    for (k, name) in COUNTERS {
        if let Some(a) = after.get(*k) {
            let b = before.get(*k).copied().unwrap_or(0.0);
            out.counters.insert((*name).into(), a - b);
        }
    }
}

/// The stats file's keys the run records (`vhostblk::stats`), and their
/// names in results.
const COUNTERS: &[(&str, &str)] = &[
    ("completed", "vm1_backend_requests"),
    ("guest_class.rt", "vm1_guest_rt_requests"),
    ("host_class.rt", "vm1_host_rt_requests"),
    ("rt_demoted.over_budget", "vm1_rt_demoted_budget"),
    ("rt_demoted.not_allowed", "vm1_rt_demoted"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_the_repetitions_difference() {
        let mut before = std::collections::BTreeMap::new();
        let mut after = std::collections::BTreeMap::new();
        flatten(
            "",
            &serde_json::json!({"completed": 10, "guest_class": {"rt": 2}}),
            &mut before,
        );
        flatten(
            "",
            &serde_json::json!({"completed": 25, "guest_class": {"rt": 7}, "host_class": {"rt": 7}, "x": "y"}),
            &mut after,
        );
        assert_eq!(after.get("guest_class.rt"), Some(&7.0));
        assert!(!after.contains_key("x"));
        let mut r = experiment::RunResult::default();
        counters_into(&before, &after, &mut r);
        assert_eq!(r.counters["vm1_backend_requests"], 15.0);
        assert_eq!(r.counters["vm1_guest_rt_requests"], 5.0);
        assert_eq!(r.counters["vm1_host_rt_requests"], 7.0);
        assert!(!r.counters.contains_key("vm1_rt_demoted"));
    }
}
