//! `tandem guestd`: the guest daemon. It watches what a stock guest kernel
//! shows (execs from the process connector, per-process I/O from
//! `/proc/PID/io`, explicit hints on a local socket), lets
//! [`policy::GuestSignalDetector`] judge the urgency and
//! [`policy::HelpClient`] turn it into HELP / renewals / NO-HELP, and sends
//! those to the host. It reconnects when the channel goes away (the host
//! restarted, the VM migrated), and then asks again for what is still needed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use policy::{
    GuestEvent, GuestSignalConfig, GuestSignalDetector, HelpClient, Message, Nanos, MS,
    PROTOCOL_VERSION,
};

use crate::sys::{self, ProcEvent};
use crate::transport::{write_message, Endpoint, FrameReader, ReadError, Stream};
use crate::{err, now_ns, Result};

pub const DEFAULT_HINT_SOCKET: &str = "/run/tandem/guestd.sock";

/// What guestd needs to know.
#[derive(Clone, Debug)]
pub struct GuestdOptions {
    pub endpoint: Endpoint,
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
}

/// The guest's decisions: detector and client, driven by events.
pub struct GuestCore {
    pub detector: GuestSignalDetector,
    pub client: HelpClient,
    lease_ns: Nanos,
}

impl GuestCore {
    /// `sample_ns`: how often the daemon samples each process's I/O.
    pub fn new(lease_ns: Nanos, sample_ns: Nanos) -> Self {
        GuestCore {
            detector: GuestSignalDetector::new(GuestSignalConfig::for_sampling(sample_ns)),
            client: HelpClient::new(lease_ns),
            lease_ns,
        }
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
        match (self.detector.next_deadline(), self.client.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A new channel: the host knows nothing of what was asked before.
    pub fn reset_channel(&mut self) {
        self.client = HelpClient::new(self.lease_ns);
    }
}

enum Ev {
    Guest(GuestEvent),
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

fn spawn_sampler(tx: Sender<Ev>, period: Duration) -> Result<()> {
    let me = std::process::id();
    spawn("sampler", move || {
        let mut last: std::collections::HashMap<u32, u64> = Default::default();
        loop {
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

/// Parses a hint request: `hint MS [PID]`.
pub fn parse_hint(line: &str) -> Option<(u64, Option<u32>)> {
    let mut f = line.split_whitespace();
    if f.next()? != "hint" {
        return None;
    }
    let ms: u64 = f.next()?.parse().ok()?;
    let pid = match f.next() {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    if f.next().is_some() || ms == 0 || ms > 600_000 {
        return None;
    }
    Some((ms, pid))
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
                Some((ms, pid)) => {
                    let tx = tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let _ = tx.send(Ev::Guest(GuestEvent::Explicit {
                        duration_ns: ms * MS,
                        pid,
                    }));
                    let _ = s.write_all(b"ok\n");
                }
                None => {
                    let _ =
                        s.write_all(b"error: expected `hint MS [PID]` with MS from 1 to 600000\n");
                }
            }
        },
    )
}

/// `tandem hint`: asks the local guestd for help for `ms` milliseconds.
pub fn send_hint(socket: &Path, ms: u64, pid: Option<u32>) -> Result<()> {
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
    let line = match pid {
        Some(p) => format!("hint {ms} {p}\n"),
        None => format!("hint {ms}\n"),
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
    let s = o.endpoint.connect().ok()?;
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

/// Runs the guest daemon until SIGINT/SIGTERM/SIGHUP.
pub fn run(o: GuestdOptions) -> Result<()> {
    if o.name.is_empty() || o.name.len() > policy::protocol::MAX_VM_NAME_BYTES {
        return Err(err("--name: 1 to 64 bytes"));
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
    spawn_sampler(tx.clone(), Duration::from_millis(o.sample_ms.max(10)))?;
    spawn_hint_socket(&o.hint_socket, tx.clone())?;
    log(&format!("connecting to {} as {:?}", o.endpoint, o.name));
    let mut core = GuestCore::new(o.lease_ms.max(1) * MS, o.sample_ms.max(10) * MS);
    let mut chan: Option<Channel> = None;
    let mut next_id = 1u64;
    let mut retry_at = 0u64;
    let mut backoff = 200 * MS;
    let mut logged: Option<policy::HelpReason> = None;
    while !sys::stop_requested() {
        let now = now_ns();
        if chan.is_none() && now >= retry_at {
            chan = open_channel(&o, next_id, tx.clone());
            next_id += 1;
            match &chan {
                Some(_) => {
                    log(&format!("connected to {}", o.endpoint));
                    core.reset_channel();
                    backoff = 200 * MS;
                }
                None => {
                    retry_at = now + backoff;
                    backoff = (backoff * 2).min(5000 * MS);
                }
            }
        }
        let mut wake = now + 100 * MS;
        if let Some(d) = core.next_deadline() {
            wake = wake.min(d);
        }
        if chan.is_none() {
            wake = wake.min(retry_at.max(now));
        }
        let msg = match rx.recv_timeout(Duration::from_nanos(wake.saturating_sub(now))) {
            Ok(Ev::Guest(ev)) => {
                let m = core.event(now_ns(), ev);
                if o.verbose {
                    if let Some(Message::Help { reason, .. }) = &m {
                        if logged != Some(*reason) {
                            log(&format!("HELP {reason:?} after {ev:?}"));
                            logged = Some(*reason);
                        }
                    }
                }
                m
            }
            Ok(Ev::HostClosed(id, why)) => {
                if chan.as_ref().map(|c| c.id) == Some(id) {
                    chan = None;
                    match why {
                        Some(r) => {
                            log(&format!("host refused the channel: {r}"));
                            retry_at = now_ns() + 5000 * MS;
                        }
                        None => {
                            log("channel closed; reconnecting");
                            retry_at = now_ns();
                        }
                    }
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => core.tick(now_ns()),
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if o.verbose && logged.is_some() && matches!(msg, Some(Message::NoHelp { .. })) {
            log("NO-HELP");
            logged = None;
        }
        if let (Some(m), Some(c)) = (msg, chan.as_mut()) {
            if write_message(&mut c.w, &m).is_err() {
                chan = None;
                retry_at = now_ns();
            }
        }
    }
    // Leaving: the host's lease would end the boost anyway; say so at once.
    if let Some(mut c) = chan {
        if core.client.is_helping() {
            let _ = write_message(
                &mut c.w,
                &Message::NoHelp {
                    resource: policy::Resource::Io,
                },
            );
        }
    }
    let _ = std::fs::remove_file(&o.hint_socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        assert_eq!(parse_hint("hint 3000\n"), Some((3000, None)));
        assert_eq!(parse_hint("hint 3000 42"), Some((3000, Some(42))));
        assert_eq!(parse_hint("hint 0"), None);
        assert_eq!(parse_hint("hint x"), None);
        assert_eq!(parse_hint("hint 5 6 7"), None);
        assert_eq!(parse_hint("help"), None);
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
