//! `tandem vm agent`: the bench runner's hands inside a guest. The image's
//! init starts it on the virtio-serial port `tandem.bench`; the host side
//! ([`crate::vm`]) sends one JSON request per line and reads one JSON answer
//! per line. The agent uses the same workers, app replay and start timing as
//! the native runner, so a start is measured the same way in a guest and on
//! a host.
//!
//! Requests (`op`):
//! - `sched {name, dev?}`: the guest disk's I/O scheduler (default dev `vda`);
//! - `workload {spec, seed, rotational}`: start an S workload on the data
//!   disk's files `file0`, `file1`, ...; `stop`: kill it;
//! - `workload_sched`: the workload's threads' schedstat now, `{threads:
//!   [[tid, run_ns, wait_ns, slices], ...]}` ([`crate::cputime`]);
//! - `drop_caches`: `sync; echo 3 > /proc/sys/vm/drop_caches`;
//! - `start {app, timeout_s, work_per_us?}`: one start of the app (a trace
//!   preset replayed from `app/`, or `cmd:...`): `{secs}` or `{timeout: true}`,
//!   with the app process's schedstat in the guest, `sched: [run_ns, wait_ns,
//!   slices]` (null when it could not be read); with `work_per_us` a hot
//!   start, its CPU time done as that much work (`workers::replay_main`);
//! - `sectors {dev?}`: sectors read and written on the disk (throughput);
//! - `guestd {lease_ms, cpu?, mark?}`: start `tandem guestd` on the port
//!   `tandem.help`, or with `mark` (a class) marking urgent processes' I/O
//!   priority in the guest instead (`--mark-ioprio`, no host channel; its
//!   lease `mark_lease_ms`);
//! - `greedy_cpu {on}`: a greedy guest (issue 26): while on, ask guestd
//!   for CPU help all the time (a 1 s `hint-cpu` on its hint socket every
//!   [`GREEDY_PERIOD`]), whatever the guest needs;
//! - `quit`: stop everything and leave (init powers the guest off).
//!
//! Every answer has `ok`; a failed request has `ok: false` and `error`, and
//! the agent goes on.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use crate::cputime::Role;
use crate::{run_err, workers, Error, Result};

/// The agent's state: what it started.
struct Agent {
    exe: PathBuf,
    data: PathBuf,
    workers: Vec<Child>,
    guestd: Option<Child>,
    /// The latency benchmark's busy loops and cyclictest
    /// ([`crate::latency::GuestLatency`]: `cpu_load`, `cpu_load_sample`,
    /// `cyclictest`).
    latency: crate::latency::GuestLatency,
    /// The greedy asker (`greedy_cpu`), while on.
    greedy: Option<Greedy>,
}

/// How often a greedy guest renews its CPU hint: half the hint's 1 s, so
/// that its need never lapses between two hints (guestd's lease is renewed
/// before it ends).
pub const GREEDY_PERIOD: std::time::Duration = std::time::Duration::from_millis(500);

/// A thread that asks guestd for CPU help all the time (`greedy_cpu`);
/// dropping it stops the asking.
struct Greedy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Greedy {
    fn start() -> Greedy {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let socket = Path::new(agent::guestd::DEFAULT_HINT_SOCKET);
            let hint = agent::guestd::Hint {
                ms: 1000,
                pid: None,
                cpu: true,
            };
            while !flag.load(Ordering::Relaxed) {
                // guestd may not be up yet: the next round asks again.
                let _ = agent::guestd::send_hint(socket, hint);
                std::thread::sleep(GREEDY_PERIOD);
            }
        });
        Greedy {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Greedy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Agent {
    fn stop_workers(&mut self) {
        for mut c in self.workers.drain(..) {
            workers::kill(&mut c);
        }
    }

    fn stop_all(&mut self) {
        self.stop_workers();
        self.greedy = None;
        self.latency.stop();
        if let Some(mut g) = self.guestd.take() {
            // SIGTERM: guestd says NO-HELP before it leaves.
            workers::terminate(&mut g, std::time::Duration::from_secs(3));
        }
    }

    fn handle(&mut self, req: &Value) -> Result<Value> {
        let op = req.get("op").and_then(Value::as_str).unwrap_or("");
        let str_of = |k: &str| req.get(k).and_then(Value::as_str);
        match op {
            "hello" => Ok(hello()),
            "sched" => {
                let name = str_of("name").ok_or_else(|| Error::Usage("sched: no name".into()))?;
                let dev = str_of("dev").unwrap_or("vda");
                let file = PathBuf::from("/sys/block").join(dev).join("queue/scheduler");
                fs::write(&file, name).map_err(|e| {
                    run_err(format!(
                        "{dev} has no scheduler {name} ({e}); it offers: {}",
                        fs::read_to_string(&file).unwrap_or_default().trim()
                    ))
                })?;
                Ok(json!({"ok": true, "scheduler": fs::read_to_string(&file).unwrap_or_default().trim()}))
            }
            "workload" => {
                let spec = str_of("spec").ok_or_else(|| Error::Usage("workload: no spec".into()))?;
                let w = experiment::WorkloadSpec::parse(spec).map_err(Error::Usage)?;
                let seed = req.get("seed").and_then(Value::as_u64).unwrap_or(0);
                let rotational = req.get("rotational").and_then(Value::as_bool).unwrap_or(true);
                self.stop_workers();
                let files: Vec<PathBuf> = (0..(w.readers + w.writers))
                    .map(|i| self.data.join(format!("file{i}")))
                    .collect();
                crate::start_workload(&self.exe, &w, &files, seed, rotational, &mut self.workers)?;
                Ok(json!({"ok": true, "processes": self.workers.len()}))
            }
            "workload_sched" => {
                let s = crate::native::workers_snapshot(&self.workers, Role::GuestWorkload);
                Ok(json!({"ok": true, "threads": s.rows(Role::GuestWorkload)}))
            }
            "stop" => {
                self.stop_workers();
                self.latency.stop();
                Ok(json!({"ok": true}))
            }
            "drop_caches" => {
                crate::drop_caches()?;
                Ok(json!({"ok": true}))
            }
            "start" => {
                let name = str_of("app").ok_or_else(|| Error::Usage("start: no app".into()))?;
                let timeout = req.get("timeout_s").and_then(Value::as_f64).unwrap_or(60.0);
                let app = crate::app_of(name)?;
                crate::workers_alive(&mut self.workers, "a guest worker")?;
                let app_dir = self.data.join("app");
                // A hot start: the host's work rate for its CPU time.
                let work = req.get("work_per_us").and_then(Value::as_f64);
                let s = crate::time_start(&self.exe, &app, &app_dir, &self.data, timeout, work)?;
                // The app's schedstat in the guest (its CPU time there).
                let sched = s.sched.map(crate::cputime::sched_json);
                match s.secs {
                    Some(secs) => Ok(json!({"ok": true, "secs": secs, "sched": sched})),
                    None => Ok(json!({"ok": true, "timeout": true, "sched": sched})),
                }
            }
            "sectors" => {
                let dev = str_of("dev").unwrap_or("vda");
                let stat = PathBuf::from("/sys/block").join(dev).join("stat");
                Ok(json!({"ok": true, "sectors": crate::sectors_done(&stat)}))
            }
            "guestd" => {
                let lease = req.get("lease_ms").and_then(Value::as_u64).unwrap_or(1000);
                // `cpu`: guestd's CPU detection too (`help-cpu`).
                let cpu = req.get("cpu").and_then(Value::as_bool).unwrap_or(false);
                // `mark`: mark urgent processes' I/O priority in the guest
                // with this class instead of asking the host
                // (`vhost-ioprio`): no channel to the host.
                let mark = str_of("mark");
                if self.guestd.is_none() {
                    // guestd speaks on the guest's console, which the host
                    // keeps as console.log.
                    let log = fs::OpenOptions::new()
                        .write(true)
                        .open("/dev/console")
                        .map_err(|e| run_err(format!("/dev/console: {e}")))?;
                    let log2 = log.try_clone().map_err(|e| run_err(e.to_string()))?;
                    let mut cmd = Command::new(&self.exe);
                    cmd.arg("guestd");
                    // `mark_lease_ms`: the longest a mark lasts (guestd's
                    // rules end it sooner when the need ends).
                    let mark_lease = req.get("mark_lease_ms").and_then(Value::as_u64);
                    match mark {
                        Some(class) => cmd
                            .args(["--mark-ioprio", class])
                            .args(mark_lease.map(|ms| format!("--mark-lease-ms={ms}"))),
                        None => cmd
                            .arg("--connect")
                            .arg(format!("virtio:{}", crate::vm::HELP_PORT)),
                    };
                    let child = cmd
                        .args(["--name", crate::vm::VM_NAME])
                        .args(["--lease-ms", &lease.to_string(), "--verbose"])
                        .args(cpu.then_some("--cpu"))
                        .stdin(Stdio::null())
                        .stdout(log)
                        .stderr(log2)
                        .spawn()
                        .map_err(|e| run_err(format!("starting tandem guestd: {e}")))?;
                    self.guestd = Some(child);
                }
                Ok(json!({"ok": true}))
            }
            "profile" => crate::profile::agent_op(&self.data, req),
            "greedy_cpu" => {
                let on = req.get("on").and_then(Value::as_bool).unwrap_or(false);
                self.greedy = None;
                if on {
                    self.greedy = Some(Greedy::start());
                }
                Ok(json!({"ok": true}))
            }
            "quit" => Ok(json!({"ok": true})),
            other if crate::latency::GuestLatency::OPS.contains(&other) => self
                .latency
                .handle(other, req)
                .unwrap_or_else(|| Err(run_err(format!("{other}: not a latency op")))),
            other => Err(Error::Usage(format!(
                "unknown op {other:?}; accepted: hello, sched, workload, workload_sched, stop, drop_caches, start, sectors, profile, guestd, greedy_cpu, quit, {}",
                crate::latency::GuestLatency::OPS.join(", ")
            ))),
        }
    }
}

/// What the agent tells the host when it comes up and on `hello`.
fn hello() -> Value {
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let scheds = fs::read_to_string("/sys/block/vda/queue/scheduler").unwrap_or_default();
    json!({
        "ok": true,
        "ready": true,
        "kernel": kernel.trim(),
        "vda_schedulers": scheds.trim(),
    })
}

/// The device file of a virtio-serial port: `/dev/virtio-ports/NAME` where
/// udev (or the image's init) made it, else found through sysfs.
pub fn port_path(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let link = Path::new("/dev/virtio-ports").join(name);
    if link.exists() {
        return Ok(link);
    }
    if let Ok(rd) = fs::read_dir("/sys/class/virtio-ports") {
        for e in rd.flatten() {
            let n = fs::read_to_string(e.path().join("name")).unwrap_or_default();
            if n.trim() == name {
                return Ok(Path::new("/dev").join(e.file_name()));
            }
        }
    }
    Err(Error::Usage(format!(
        "virtio-serial port {name:?}: not found (no /dev/virtio-ports/{name}, nothing in /sys/class/virtio-ports)"
    )))
}

/// Serve the host over `port` until it says `quit` or the port closes.
pub fn agent_main(port: &str, data: &Path) -> Result<()> {
    let path = port_path(port)?;
    let dev = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| run_err(format!("{}: {e}", path.display())))?;
    let mut out = dev.try_clone().map_err(|e| run_err(e.to_string()))?;
    let mut agent = Agent {
        exe: std::env::current_exe().map_err(|e| run_err(e.to_string()))?,
        data: data.to_path_buf(),
        workers: Vec::new(),
        guestd: None,
        latency: Default::default(),
        greedy: None,
    };
    let send = |out: &mut fs::File, v: &Value| -> Result<()> {
        let mut line = v.to_string();
        line.push('\n');
        out.write_all(line.as_bytes())
            .map_err(|e| run_err(format!("{}: {e}", path.display())))
    };
    send(&mut out, &hello())?;
    let mut reader = BufReader::new(dev);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            // No host on the other end: a virtio-serial port reads 0 bytes
            // while the host side is closed; wait for it to connect again.
            Ok(0) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                agent.stop_all();
                return Err(run_err(format!("{}: {e}", path.display())));
            }
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Value>(t) {
            Ok(req) => {
                let quit = req.get("op").and_then(Value::as_str) == Some("quit");
                if quit {
                    agent.stop_all();
                }
                let mut a = agent
                    .handle(&req)
                    .unwrap_or_else(|e| json!({"ok": false, "error": e.to_string()}));
                // The host matches answers to requests by id (answers to
                // hellos sent while the guest booted may still be queued).
                if let (Some(id), Some(m)) = (req.get("id"), a.as_object_mut()) {
                    m.insert("id".into(), id.clone());
                }
                if quit {
                    send(&mut out, &a)?;
                    return Ok(());
                }
                a
            }
            Err(e) => json!({"ok": false, "error": format!("not JSON: {e}")}),
        };
        send(&mut out, &answer)?;
    }
}
