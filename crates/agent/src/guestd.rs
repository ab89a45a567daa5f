//! `tandem guestd`: the guest daemon. It watches what a stock guest kernel
//! shows (execs from the process connector, per-process I/O from
//! `/proc/PID/io`, explicit hints on a local socket), lets
//! [`policy::GuestSignalDetector`] judge the urgency and
//! [`policy::HelpClient`] turn it into HELP / renewals / NO-HELP, and sends
//! those to the host. It reconnects when the channel goes away (the host
//! restarted, the VM migrated), and then asks again for what is still needed.
//!
//! With `--cpu` it asks for CPU help too ([`policy::detect::cpu`]'s rules):
//! a thread wakes every 10 ms and reports its own lateness, the steal time
//! of `/proc/stat` and the runnable tasks of an RT class; execs and
//! `tandem hint --cpu` count as well. CPU needs go through a client of
//! their own (one per resource), as HELP / NO-HELP for `Resource::Cpu`.
//!
//! With `--mark-ioprio CLASS` it also raises each urgent process's I/O
//! priority inside the guest for a lease ([`crate::iomark`]), so that a
//! host backend that honours the virtio-blk request's priority
//! (`tandem vhost-blk`) favours that process's requests, with no message
//! to the host; the channel (`--connect`) is then optional.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use policy::detect::cpu::{CpuDetector, CpuEvent, CpuRules, CpuTimes};
use policy::mark::{MarkEnd, MarkRule};
use policy::{
    GuestEvent, GuestSignalConfig, GuestSignalDetector, HelpClient, Message, Nanos, Resource, MS,
    PROTOCOL_VERSION,
};

use crate::iomark::{self, MarkClass, MarkEvent, Marker, SysIoprio};
use crate::sys::{self, ProcEvent};
use crate::transport::{write_message, Endpoint, FrameReader, ReadError, Stream};
use crate::{err, now_ns, Result};

pub const DEFAULT_HINT_SOCKET: &str = "/run/tandem/guestd.sock";

/// What guestd needs to know.
#[derive(Clone, Debug)]
pub struct GuestdOptions {
    /// The channel to the host; none when only marking in the guest.
    pub endpoint: Option<Endpoint>,
    /// The VM's name in Hello.
    pub name: String,
    /// Local socket for explicit hints (`tandem hint`).
    pub hint_socket: PathBuf,
    /// How often to sample `/proc/*/io`.
    pub sample_ms: u64,
    /// Listen to the process connector for execs (needs root).
    pub netlink: bool,
    /// The lease a HELP asks for (the host caps it with its own).
    pub lease_ms: u64,
    /// Log every change between HELP and NO-HELP, with the reason and the
    /// event behind it.
    pub verbose: bool,
    /// Ask for CPU help too (the CPU rules of `policy::detect::cpu`).
    pub cpu: bool,
    /// Mark urgent processes' I/O priority in the guest with this class.
    pub mark: Option<MarkClass>,
    /// How much I/O time one need's mark covers at most (ms; the policy
    /// crate's [`MarkRule`] with this lease).
    pub mark_lease_ms: u64,
    /// Mark only the processes of this user (real uid): a desktop guest's
    /// user, never the system's services.
    pub mark_uid: Option<u32>,
}

/// The guest's decisions: detector and client, driven by events.
pub struct GuestCore {
    pub detector: GuestSignalDetector,
    pub client: HelpClient,
    /// The CPU rules, and their own client (one per resource).
    pub cpu: CpuDetector,
    pub cpu_client: HelpClient,
    lease_ns: Nanos,
}

impl GuestCore {
    /// `sample_ns`: how often the daemon samples each process's I/O.
    pub fn new(lease_ns: Nanos, sample_ns: Nanos) -> Self {
        GuestCore {
            detector: GuestSignalDetector::new(GuestSignalConfig::for_sampling(sample_ns)),
            client: HelpClient::new(lease_ns),
            cpu: CpuDetector::new(CpuRules::default()),
            cpu_client: HelpClient::new(lease_ns),
            lease_ns,
        }
    }

    /// Takes in a CPU observation and returns the message to send, if any.
    pub fn cpu_event(&mut self, now: Nanos, ev: CpuEvent) -> Option<Message> {
        let u = self.cpu.observe(now, ev);
        self.cpu_client.step(now, &u)
    }

    /// The CPU message due at `now`, if any.
    pub fn cpu_tick(&mut self, now: Nanos) -> Option<Message> {
        let u = self.cpu.poll(now);
        self.cpu_client.step(now, &u)
    }

    /// Takes in an event and returns the message to send, if any.
    pub fn event(&mut self, now: Nanos, ev: GuestEvent) -> Option<Message> {
        self.detector.observe(now, ev);
        self.tick(now)
    }

    /// The message due at `now`, if any.
    pub fn tick(&mut self, now: Nanos) -> Option<Message> {
        let u = self.detector.poll(now);
        self.client.step(now, &u)
    }

    /// When [`GuestCore::tick`] must run next.
    pub fn next_deadline(&self) -> Option<Nanos> {
        [
            self.detector.next_deadline(),
            self.client.next_deadline(),
            self.cpu.next_deadline(),
            self.cpu_client.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A new channel: the host knows nothing of what was asked before.
    pub fn reset_channel(&mut self) {
        self.client = HelpClient::new(self.lease_ns);
        self.cpu_client = HelpClient::new(self.lease_ns);
    }
}

enum Ev {
    Guest(GuestEvent),
    Cpu(CpuEvent),
    HostClosed(u64, Option<String>),
}

/// One line of guestd's log (see [`crate::logging`]).
fn log(m: &str) {
    tracing::info!(target: "guestd", "{m}");
}

/// Starts a named thread; an error (no memory, a thread limit) instead of
/// std's panic.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| err(format!("starting the {name} thread: {e}")))
}

fn spawn_netlink(tx: Sender<Ev>) -> Result<()> {
    let c = sys::ProcConnector::open().map_err(|e| {
        err(format!(
            "process connector (netlink): {e}; it needs root (CAP_NET_ADMIN) and CONFIG_PROC_EVENTS"
        ))
    })?;
    let me = std::process::id();
    spawn("netlink", move || loop {
        match c.recv() {
            Ok(evs) => {
                for e in evs {
                    let ev = match e {
                        ProcEvent::Exec { pid } if pid != me => GuestEvent::Exec { pid },
                        ProcEvent::Exit { pid } => GuestEvent::ProcessExit { pid },
                        _ => continue,
                    };
                    if tx.send(Ev::Guest(ev)).is_err() {
                        return;
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {} // overrun: events lost, go on
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                log(&format!("process connector: {e}; execs are no longer seen"));
                return;
            }
        }
    })
}

/// The processes whose use of the CPU the sampler reads at each look: the
/// ones still starting ([`GuestSignalDetector::starting`]), set by the main
/// loop. A few at a time, so three more `/proc` files each cost little.
type Starting = std::sync::Arc<std::sync::Mutex<Vec<u32>>>;

/// The sampler: every `period`, a look at every process. It says where each
/// look begins ([`GuestEvent::Look`]), reports the processes whose I/O
/// progressed (new bytes read) or that wait on I/O (state D), and reads the
/// CPU use of the processes still starting ([`GuestEvent::Cpu`]).
fn spawn_sampler(tx: Sender<Ev>, period: Duration, starting: Starting) -> Result<()> {
    let me = std::process::id();
    spawn("sampler", move || {
        let mut last: std::collections::HashMap<u32, u64> = Default::default();
        loop {
            if tx.send(Ev::Guest(GuestEvent::Look)).is_err() {
                return;
            }
            let mut seen = std::collections::HashMap::with_capacity(last.len());
            for pid in sys::pids() {
                if pid == me {
                    continue;
                }
                let Some(b) = sys::read_bytes(pid) else {
                    continue;
                };
                if let Some(&prev) = last.get(&pid) {
                    let ev = if b > prev {
                        Some(GuestEvent::IoActivity {
                            pid,
                            bytes: b - prev,
                        })
                    } else if sys::proc_state(pid) == Some('D') {
                        Some(GuestEvent::IoWait { pid })
                    } else {
                        None
                    };
                    if let Some(ev) = ev {
                        if tx.send(Ev::Guest(ev)).is_err() {
                            return;
                        }
                    }
                }
                seen.insert(pid, b);
            }
            let watched = starting.lock().map(|s| s.clone()).unwrap_or_default();
            for pid in watched {
                if let Some(reading) = sys::cpu_reading(pid, now_ns()) {
                    if tx
                        .send(Ev::Guest(GuestEvent::Cpu { pid, reading }))
                        .is_err()
                    {
                        return;
                    }
                }
            }
            for pid in last.keys() {
                if !seen.contains_key(pid)
                    && tx
                        .send(Ev::Guest(GuestEvent::ProcessExit { pid: *pid }))
                        .is_err()
                {
                    return;
                }
            }
            last = seen;
            thread::sleep(period);
        }
    })
}

/// The CPU watcher: wakes every `timer_period_ns` of the rules and reports
/// its lateness; every tenth time also the steal time (`/proc/stat`) and the
/// runnable RT tasks (every task's `/proc/.../stat`: the scan costs a few
/// ms of CPU on a busy guest, so 10 a second at most).
fn spawn_cpu_watch(tx: Sender<Ev>, rules: &CpuRules) -> Result<()> {
    let period = Duration::from_nanos(rules.timer_period_ns);
    let me = std::process::id();
    spawn("cpu-watch", move || {
        let mut due = std::time::Instant::now() + period;
        for k in 0u64.. {
            thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            let late = std::time::Instant::now().saturating_duration_since(due);
            let mut evs = vec![CpuEvent::TimerWake {
                late_ns: late.as_nanos() as u64,
            }];
            if k % 10 == 0 {
                if let Some(t) = std::fs::read_to_string("/proc/stat")
                    .ok()
                    .and_then(|s| CpuTimes::from_proc_stat(&s))
                {
                    evs.push(CpuEvent::Stat(t));
                }
                evs.push(CpuEvent::RtRunnable {
                    tasks: sys::rt_runnable_tasks(me),
                });
            }
            if evs.into_iter().any(|e| tx.send(Ev::Cpu(e)).is_err()) {
                return;
            }
            // The next due time from now: a late wake-up is not made up for
            // by wake-ups in a row.
            due = std::time::Instant::now() + period;
        }
    })
}

/// An explicit request on the hint socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    pub ms: u64,
    /// On behalf of this process (I/O hints).
    pub pid: Option<u32>,
    /// For the CPU (`hint-cpu MS`) rather than I/O (`hint MS [PID]`).
    pub cpu: bool,
}

/// Parses a hint request: `hint MS [PID]` (I/O) or `hint-cpu MS`.
pub fn parse_hint(line: &str) -> Option<Hint> {
    let mut f = line.split_whitespace();
    let cpu = match f.next()? {
        "hint" => false,
        "hint-cpu" => true,
        _ => return None,
    };
    let ms: u64 = f.next()?.parse().ok()?;
    let pid = match f.next() {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    if f.next().is_some() || ms == 0 || ms > 600_000 || (cpu && pid.is_some()) {
        return None;
    }
    Some(Hint { ms, pid, cpu })
}

fn spawn_hint_socket(path: &Path, tx: Sender<Ev>) -> Result<()> {
    let l = crate::listen::bind_unix(path, "hint socket")?;
    // A sender per connection thread: Sender is Send but not Sync.
    let tx = std::sync::Mutex::new(tx);
    crate::listen::serve(
        "tandem guestd: hint socket".into(),
        "hint",
        l,
        crate::listen::CLIENT_LIMITS,
        move |s: UnixStream| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let mut line = String::new();
            let _ = BufReader::new(&s).take(128).read_line(&mut line);
            let mut s = s;
            match parse_hint(&line) {
                Some(h) => {
                    let tx = tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let duration_ns = h.ms * MS;
                    let _ = tx.send(if h.cpu {
                        Ev::Cpu(CpuEvent::Explicit { duration_ns })
                    } else {
                        Ev::Guest(GuestEvent::Explicit {
                            duration_ns,
                            pid: h.pid,
                        })
                    });
                    let _ = s.write_all(b"ok\n");
                }
                None => {
                    let _ = s.write_all(
                        b"error: expected `hint MS [PID]` or `hint-cpu MS` with MS from 1 to 600000\n",
                    );
                }
            }
        },
    )
}

/// `tandem hint`: asks the local guestd for help for `h.ms` milliseconds.
pub fn send_hint(socket: &Path, h: Hint) -> Result<()> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied && !crate::is_root() {
            return err(format!(
                "{}: permission denied: guestd's hint socket is root's; run this as root",
                socket.display()
            ));
        }
        err(format!(
            "{}: {e} (is tandem guestd running? --socket gives another path)",
            socket.display()
        ))
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let line = match (h.cpu, h.pid) {
        (true, _) => format!("hint-cpu {}\n", h.ms),
        (false, Some(p)) => format!("hint {} {p}\n", h.ms),
        (false, None) => format!("hint {}\n", h.ms),
    };
    s.write_all(line.as_bytes())
        .map_err(|e| err(e.to_string()))?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    if answer.trim() == "ok" {
        Ok(())
    } else {
        Err(err(format!("guestd: {}", answer.trim())))
    }
}

struct Channel {
    id: u64,
    w: Stream,
}

fn open_channel(o: &GuestdOptions, id: u64, tx: Sender<Ev>) -> Option<Channel> {
    let s = o.endpoint.as_ref()?.connect().ok()?;
    let mut w = s.try_clone().ok()?;
    write_message(
        &mut w,
        &Message::Hello {
            version: PROTOCOL_VERSION,
            vm_name: o.name.clone(),
        },
    )
    .ok()?;
    spawn("channel", move || {
        let mut r = FrameReader::new(s);
        let why = loop {
            match r.read_message() {
                Ok(Message::Refuse { reason }) => break Some(reason),
                Ok(_) => {}
                Err(ReadError::Timeout) => {}
                Err(_) => break None,
            }
        };
        let _ = tx.send(Ev::HostClosed(id, why));
    })
    .ok()?;
    Some(Channel { id, w })
}

/// The daemon's running state: the channel and its reconnection, and the
/// guest's decisions.
struct Daemon {
    o: GuestdOptions,
    core: GuestCore,
    tx: Sender<Ev>,
    chan: Option<Channel>,
    next_id: u64,
    retry_at: u64,
    backoff: u64,
    /// The reason last logged (`verbose`).
    logged: Option<policy::HelpReason>,
    /// The in-guest marks (`--mark-ioprio`).
    marker: Option<Marker<SysIoprio>>,
    /// The processes still starting, for the sampler.
    starting: Starting,
}

impl Daemon {
    /// Opens the channel if it is closed and the retry time has come.
    fn connect_if_due(&mut self, now: u64) {
        if self.chan.is_some() || now < self.retry_at || self.o.endpoint.is_none() {
            return;
        }
        self.chan = open_channel(&self.o, self.next_id, self.tx.clone());
        self.next_id += 1;
        match &self.chan {
            Some(_) => {
                if let Some(e) = &self.o.endpoint {
                    log(&format!("connected to {e}"));
                }
                self.core.reset_channel();
                self.backoff = 200 * MS;
            }
            None => {
                self.retry_at = now + self.backoff;
                self.backoff = (self.backoff * 2).min(5000 * MS);
            }
        }
    }

    /// When the loop must wake next without an event.
    fn wake(&self, now: u64) -> u64 {
        let mut wake = now + 100 * MS;
        if let Some(d) = self.core.next_deadline() {
            wake = wake.min(d);
        }
        if self.chan.is_none() && self.o.endpoint.is_some() {
            wake = wake.min(self.retry_at.max(now));
        }
        if let Some(d) = self.marker.as_ref().and_then(Marker::next_deadline) {
            wake = wake.min(d);
        }
        wake
    }

    /// Brings the in-guest marks in line with the detector's urgent
    /// processes (after every event and timeout).
    /// `exited`: a process that has just exited.
    fn sync_marks(&mut self, exited: Option<u32>) {
        let now = now_ns();
        if let Ok(mut s) = self.starting.lock() {
            *s = self.core.detector.starting(now);
        }
        let Some(m) = self.marker.as_mut() else {
            return;
        };
        if let Some(pid) = exited {
            if let Some(e) = m.exited(pid) {
                log_mark(&e, now, self.o.verbose);
            }
        }
        let detector = &self.core.detector;
        let needs: Vec<(u32, Nanos)> = iomark::needs_to_mark(detector, now)
            .into_iter()
            .filter(|(pid, _)| self.o.mark_uid.is_none() || sys::real_uid(*pid) == self.o.mark_uid)
            .collect();
        for e in m.update_with(now, &needs, |pid| iomark::usage(detector, pid)) {
            log_mark(&e, now, self.o.verbose);
        }
    }

    /// What an event (or a timeout, `None`) gives to send.
    fn on_event(&mut self, ev: Option<Ev>) -> Vec<Message> {
        let now = now_ns();
        match ev {
            Some(Ev::Guest(ev)) => {
                let m = self.core.event(now, ev);
                if self.o.verbose {
                    if let Some(Message::Help { reason, .. }) = &m {
                        if self.logged != Some(*reason) {
                            log(&format!("HELP {reason:?} after {ev:?}"));
                            self.logged = Some(*reason);
                        }
                    }
                }
                // A program that starts needs the CPU as well.
                let cpu = match ev {
                    GuestEvent::Exec { .. } if self.o.cpu => {
                        self.core.cpu_event(now, CpuEvent::Exec)
                    }
                    _ => None,
                };
                m.into_iter().chain(cpu).collect()
            }
            Some(Ev::Cpu(ev)) => self.core.cpu_event(now, ev).into_iter().collect(),
            Some(Ev::HostClosed(id, why)) => {
                if self.chan.as_ref().map(|c| c.id) == Some(id) {
                    self.chan = None;
                    match why {
                        Some(r) => {
                            log(&format!("host refused the channel: {r}"));
                            self.retry_at = now + 5000 * MS;
                        }
                        None => {
                            log("channel closed; reconnecting");
                            self.retry_at = now;
                        }
                    }
                }
                Vec::new()
            }
            None => [self.core.tick(now), self.core.cpu_tick(now)]
                .into_iter()
                .flatten()
                .collect(),
        }
    }

    /// Sends messages on the channel, if open; a failed write closes it.
    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if self.o.verbose
                && self.logged.is_some()
                && matches!(
                    m,
                    Message::NoHelp {
                        resource: Resource::Io
                    }
                )
            {
                log("NO-HELP");
                self.logged = None;
            }
            if self.o.verbose
                && matches!(
                    m,
                    Message::Help {
                        resource: Resource::Cpu,
                        ..
                    } | Message::NoHelp {
                        resource: Resource::Cpu
                    }
                )
            {
                log(&format!("{m:?}"));
            }
            if let Some(c) = self.chan.as_mut() {
                if write_message(&mut c.w, &m).is_err() {
                    self.chan = None;
                    self.retry_at = now_ns();
                }
            }
        }
    }

    /// Leaving: the host's lease would end the boosts anyway; say so at once.
    fn leave(mut self) {
        if let Some(mut c) = self.chan.take() {
            for (client, resource) in [
                (&self.core.client, Resource::Io),
                (&self.core.cpu_client, Resource::Cpu),
            ] {
                if client.is_helping() {
                    let _ = write_message(&mut c.w, &Message::NoHelp { resource });
                }
            }
        }
        if let Some(m) = self.marker.as_mut() {
            for e in m.restore_all() {
                log_mark(&e, now_ns(), self.o.verbose);
            }
        }
        let _ = std::fs::remove_file(&self.o.hint_socket);
    }
}

/// Logs what the marker did at `now` (guestd's clock, seconds since it
/// started): a failure always, the rest with `verbose`. A mark names its
/// program (the first words of its command line), so that a log tells a
/// starting app from a background reader.
fn log_mark(e: &MarkEvent, now: Nanos, verbose: bool) {
    let at = now as f64 / 1e9;
    match e {
        MarkEvent::Failed { pid, error } => {
            log(&format!(
                "could not mark process {pid}'s I/O priority: {error}"
            ));
        }
        MarkEvent::Marked { pid, threads } if verbose => {
            let what = sys::command_head(*pid, 4).unwrap_or_default();
            log(&format!(
                "marked process {pid} ({threads} threads; {what}) at {at:.2} s"
            ));
        }
        MarkEvent::Restored { pid, threads, why } if verbose => {
            let why = match why {
                Some(MarkEnd::NeedOver) => ": its need ended",
                Some(MarkEnd::LeaseOver) => ": its lease ran out",
                Some(MarkEnd::Greedy) => ": a greedy reader (read the rule's limit under its mark)",
                None => "",
            };
            log(&format!(
                "restored process {pid} ({threads} threads) at {at:.2} s{why}"
            ));
        }
        MarkEvent::LeftAlone { pid, tid, value } if verbose => log(&format!(
            "left process {pid} alone: its thread {tid} has I/O priority {}",
            sys::ioprio_show(*value)
        )),
        _ => {}
    }
}

/// Runs the guest daemon until SIGINT/SIGTERM/SIGHUP.
pub fn run(o: GuestdOptions) -> Result<()> {
    if o.name.is_empty() || o.name.len() > policy::protocol::MAX_VM_NAME_BYTES {
        return Err(err("--name: 1 to 64 bytes"));
    }
    if o.endpoint.is_none() && o.mark.is_none() {
        return Err(err(
            "nothing to do: give --connect (ask the host for help) or --mark-ioprio (mark urgent processes in the guest), or both",
        ));
    }
    if o.netlink && !crate::is_root() {
        return Err(err(
            "guestd needs root: it listens to the process connector for execs (CAP_NET_ADMIN) and reads every process's /proc/PID/io; run it as root (or, to try it without, --no-netlink and a --hint-socket of your own)",
        ));
    }
    sys::install_stop_handlers();
    let (tx, rx) = mpsc::channel();
    if o.netlink {
        spawn_netlink(tx.clone())?;
    }
    let starting = Starting::default();
    spawn_sampler(
        tx.clone(),
        Duration::from_millis(o.sample_ms.max(10)),
        starting.clone(),
    )?;
    spawn_hint_socket(&o.hint_socket, tx.clone())?;
    let core = GuestCore::new(o.lease_ms.max(1) * MS, o.sample_ms.max(10) * MS);
    if o.cpu {
        spawn_cpu_watch(tx.clone(), core.cpu.rules())?;
    }
    match &o.endpoint {
        Some(e) => log(&format!("connecting to {e} as {:?}", o.name)),
        None => log("no channel to the host: marking in the guest only"),
    }
    let marker = o.mark.map(|class| {
        log(&format!(
            "marking urgent processes with I/O priority {} for at most {} ms of their I/O",
            sys::ioprio_show(class.value()),
            o.mark_lease_ms
        ));
        let rule = MarkRule {
            lease_ns: o.mark_lease_ms.max(1) * MS,
            ..MarkRule::default()
        };
        Marker::new(SysIoprio, class, rule)
    });
    let mut d = Daemon {
        marker,
        o,
        core,
        tx,
        chan: None,
        next_id: 1,
        retry_at: 0,
        backoff: 200 * MS,
        logged: None,
        starting,
    };
    while !sys::stop_requested() {
        let now = now_ns();
        d.connect_if_due(now);
        let wake = d.wake(now);
        let ev = match rx.recv_timeout(Duration::from_nanos(wake.saturating_sub(now))) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let exited = match ev {
            Some(Ev::Guest(GuestEvent::ProcessExit { pid })) => Some(pid),
            _ => None,
        };
        let msgs = d.on_event(ev);
        d.send(msgs);
        d.sync_marks(exited);
    }
    d.leave();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        let h = |ms, pid, cpu| Some(Hint { ms, pid, cpu });
        assert_eq!(parse_hint("hint 3000\n"), h(3000, None, false));
        assert_eq!(parse_hint("hint 3000 42"), h(3000, Some(42), false));
        assert_eq!(parse_hint("hint-cpu 500\n"), h(500, None, true));
        assert_eq!(parse_hint("hint-cpu 500 42"), None);
        assert_eq!(parse_hint("hint 0"), None);
        assert_eq!(parse_hint("hint x"), None);
        assert_eq!(parse_hint("hint 5 6 7"), None);
        assert_eq!(parse_hint("help"), None);
    }

    /// A CPU hint goes out as a HELP for the CPU, through its own client,
    /// and ends with a NO-HELP for the CPU; the I/O side stays quiet.
    #[test]
    fn cpu_hint_to_help_and_back() {
        let mut c = GuestCore::new(1000 * MS, 250 * MS);
        let m = c.cpu_event(
            0,
            CpuEvent::Explicit {
                duration_ns: 300 * MS,
            },
        );
        assert!(
            matches!(
                m,
                Some(Message::Help {
                    resource: Resource::Cpu,
                    ..
                })
            ),
            "{m:?}"
        );
        assert!(c.client.next_deadline().is_none());
        let mut last = None;
        let mut t = 0;
        while let Some(d) = c.next_deadline() {
            t = d;
            if let Some(m) = c.cpu_tick(t) {
                last = Some(m);
            }
            if t > 10_000 * MS {
                break;
            }
        }
        assert_eq!(
            last,
            Some(Message::NoHelp {
                resource: Resource::Cpu
            })
        );
        assert!(t >= 300 * MS);
    }

    #[test]
    fn exec_to_help_and_back() {
        let mut c = GuestCore::new(1000 * MS, 250 * MS);
        let m = c.event(0, GuestEvent::Exec { pid: 5 });
        assert!(matches!(m, Some(Message::Help { .. })));
        // The exec's need ends after 3 s: NO-HELP then.
        let mut t = 0;
        let mut last = None;
        while let Some(d) = c.next_deadline() {
            t = d;
            if let Some(m) = c.tick(t) {
                last = Some(m);
            }
            if t > 10_000 * MS {
                break;
            }
        }
        assert!(matches!(last, Some(Message::NoHelp { .. })));
        assert!(t >= 3000 * MS);
    }
}
