//! A VM's channel: the unix socket or vsock connection a guest talks on,
//! its rate and byte limits, and the per-connection reader that hands
//! messages to the event loop.

use super::{Event, VmConfig};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use policy::{Message, MS, PROTOCOL_VERSION};

use crate::listen::{self, CHANNEL_LIMITS};
use crate::transport::{
    write_message, FrameReader, ReadError, SocketStream, Stream, VsockListener,
};
use crate::{err, now_ns, Result};
use policy::ratelimit::ChannelLimiter;
use std::sync::atomic::{AtomicBool, Ordering};

/// A VM's channel limits, shared by all of its connections (a guest that
/// reconnects does not get a fresh bucket).
pub(super) type SharedLimiter = Arc<Mutex<ChannelLimiter>>;

pub(super) fn lock(l: &SharedLimiter) -> std::sync::MutexGuard<'_, ChannelLimiter> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// A channel's read side: reads no more bytes than the VM's byte bucket
/// holds. When it is empty the reader waits (at most 50 ms at a time, so a
/// coalesced message still goes out on time), and the guest's writes back
/// up into its own socket buffer.
pub(super) struct Metered {
    inner: Stream,
    limiter: SharedLimiter,
    bytes: u64,
}

impl Read for Metered {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let slice = 50 * MS;
        let mut waited = 0;
        loop {
            let now = now_ns();
            let (n, wait) = {
                let mut l = lock(&self.limiter);
                (l.readable(now).min(buf.len()), l.read_wait(now))
            };
            if n > 0 {
                let r = self.inner.read(&mut buf[..n])?;
                lock(&self.limiter).bytes_read(now_ns(), r);
                self.bytes += r as u64;
                return Ok(r);
            }
            if waited >= slice {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let w = wait.clamp(MS, slice - waited);
            thread::sleep(Duration::from_nanos(w));
            waited += w;
        }
    }
}

/// What one connection has to tell the event loop about its counters.
#[derive(Default)]
pub(super) struct Tally {
    limited: u64,
    malformed: u64,
    reported_bytes: u64,
    at: u64,
}

impl Tally {
    /// Sends the counters (at most once a second unless `force`).
    pub(super) fn report(&mut self, vm: usize, bytes: u64, tx: &Sender<Event>, force: bool) {
        let now = now_ns();
        let news = self.limited + self.malformed > 0 || bytes > self.reported_bytes;
        if !news || (!force && now.saturating_sub(self.at) < policy::SEC) {
            return;
        }
        let _ = tx.send(Event::Counted {
            vm,
            limited: self.limited,
            malformed: self.malformed,
            bytes: bytes - self.reported_bytes,
        });
        self.reported_bytes = bytes;
        self.limited = 0;
        self.malformed = 0;
        self.at = now;
    }
}

/// A channel's stream ended or broke: refuses a malformed frame with the
/// reason, and counts it.
pub(super) fn close_on(e: ReadError, w: &mut Stream, tally: &mut Tally) {
    let reason = match e {
        ReadError::Eof { partial } => {
            tally.malformed += (partial > 0) as u64;
            return;
        }
        ReadError::Timeout | ReadError::Io(_) => return,
        ReadError::Decode(policy::DecodeError::UnknownVersion(v)) => {
            format!("protocol version {v} is not supported; this host speaks {PROTOCOL_VERSION}")
        }
        ReadError::Decode(e) => format!("malformed frame: {e}"),
    };
    let _ = write_message(w, &Message::Refuse { reason });
    tally.malformed += 1;
}

/// What the code serving VM `vm`'s channel needs: the event loop's sender
/// and the VM's limiter (shared by all of its connections).
#[derive(Clone)]
pub(super) struct ChannelCtx {
    pub(super) vm: usize,
    pub(super) tx: Sender<Event>,
    pub(super) limiter: SharedLimiter,
}

impl ChannelCtx {
    /// Serves one connection of the VM's channel until it closes.
    pub(super) fn serve(&self, stream: Stream) {
        serve_channel(self.clone(), next_conn(), stream);
    }
}

/// Reads one channel until it closes. Every message takes a token of the
/// VM's message bucket and its bytes of the byte bucket (see [`Metered`]).
/// Answers Hello itself; passes Help and NoHelp on, keeping only the
/// latest of those past the rate; drops Hellos and Heartbeats past it.
fn serve_channel(ctx: ChannelCtx, conn: u64, stream: Stream) {
    let ChannelCtx { vm, tx, limiter } = ctx;
    let (Ok(mut w), Ok(reg)) = (stream.try_clone(), stream.try_clone()) else {
        // Out of descriptors: this connection closes, nothing else.
        return;
    };
    if tx
        .send(Event::Opened {
            vm,
            conn,
            stream: reg,
        })
        .is_err()
    {
        return;
    }
    stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut r = FrameReader::new(Metered {
        inner: stream,
        limiter: limiter.clone(),
        bytes: 0,
    });
    let mut hello = false;
    let mut pending: Option<Message> = None;
    let mut tally = Tally::default();
    let refuse = |w: &mut Stream, reason: String| {
        let _ = write_message(w, &Message::Refuse { reason });
    };
    loop {
        let res = r.read_message();
        // Flush a coalesced message when the bucket allows.
        if pending.is_some() && lock(&limiter).message(now_ns()) {
            if let Some(msg) = pending.take() {
                if tx.send(Event::Msg { vm, conn, msg }).is_err() {
                    return;
                }
            }
        }
        tally.report(vm, r.get_ref().bytes, &tx, false);
        let msg = match res {
            Ok(m) => m,
            Err(ReadError::Timeout) => continue,
            Err(e) => {
                close_on(e, &mut w, &mut tally);
                break;
            }
        };
        let within = lock(&limiter).message(now_ns());
        match msg {
            Message::Hello { version, .. } => {
                if !within {
                    // A Hello flood: not answered, counted.
                    tally.limited += 1;
                    continue;
                }
                if version != PROTOCOL_VERSION {
                    refuse(
                        &mut w,
                        format!(
                            "protocol version {version} is not supported; this host speaks {PROTOCOL_VERSION}"
                        ),
                    );
                    break;
                }
                hello = true;
                let ack = Message::HelloAck {
                    version: PROTOCOL_VERSION,
                };
                if write_message(&mut w, &ack).is_err() {
                    break;
                }
            }
            Message::Heartbeat { seq } => {
                // Echoed within the rate limit; a flood of them is dropped.
                if within {
                    let _ = write_message(&mut w, &Message::Heartbeat { seq });
                } else {
                    tally.limited += 1;
                }
            }
            Message::Help { .. } | Message::NoHelp { .. } if hello => {
                if within {
                    // The newest message supersedes a coalesced one.
                    tally.limited += pending.take().is_some() as u64;
                    if tx.send(Event::Msg { vm, conn, msg }).is_err() {
                        return;
                    }
                } else {
                    tally.limited += pending.replace(msg).is_some() as u64;
                }
            }
            Message::Help { .. } | Message::NoHelp { .. } => {
                refuse(&mut w, "Hello first".into());
                tally.malformed += 1;
                break;
            }
            Message::HelloAck { .. } | Message::Refuse { .. } => {
                refuse(&mut w, "host-to-guest message sent by a guest".into());
                tally.malformed += 1;
                break;
            }
        }
    }
    tally.report(vm, r.get_ref().bytes, &tx, true);
    let _ = tx.send(Event::Closed { vm, conn });
}

static CONN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A new connection's number: the event loop tells an old connection's
/// late events from the new one's by it.
fn next_conn() -> u64 {
    CONN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Serves the unix socket of VM `ctx.vm`, if it has one (a VM with `cid`
/// is served by the vsock listener). Returns the socket file it created,
/// if any.
pub(super) fn start_channel(
    ctx: ChannelCtx,
    cfg: &VmConfig,
    stop: Arc<AtomicBool>,
) -> Result<Option<PathBuf>> {
    let vm = ctx.vm;
    let Some(path) = cfg.socket.clone() else {
        return Ok(None);
    };
    if cfg.connect {
        thread::Builder::new()
            .name(format!("vm{vm}-connect"))
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    connect_once(&ctx, &path, &stop);
                    thread::sleep(Duration::from_millis(500));
                }
            })
            .map_err(|e| err(format!("VM {}: starting its thread: {e}", cfg.name)))?;
        Ok(None)
    } else {
        let l = listen::bind_unix(&path, &format!("VM {} socket", cfg.name))?;
        listen::serve(
            format!("tandem hostd: VM {} socket", cfg.name),
            &format!("vm{vm}-channel"),
            l,
            CHANNEL_LIMITS,
            move |s: UnixStream| ctx.serve(Stream::Unix(s)),
        )?;
        Ok(Some(path))
    }
}

/// Connects to a VM's chardev server socket and serves it until it closes;
/// not once the VM is dropped (its slot may be another VM's by then).
fn connect_once(ctx: &ChannelCtx, path: &Path, stop: &AtomicBool) {
    if let Ok(s) = UnixStream::connect(path) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        ctx.serve(Stream::Unix(s));
    }
}

/// Which VM an accepted vsock connection belongs to: the one declared with
/// the peer's CID. The host kernel reports that CID at accept, and a guest
/// cannot choose it (QEMU's `vhost-vsock-pci,guest-cid=N` sets it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VsockRoutes {
    by_cid: BTreeMap<u32, usize>,
}

impl VsockRoutes {
    /// The VMs declared with `cid`, by their index in `vms` (a validated
    /// configuration has no CID twice; the first would win).
    pub fn new(vms: &[VmConfig]) -> VsockRoutes {
        let mut by_cid = BTreeMap::new();
        for (i, v) in vms.iter().enumerate() {
            if let Some(cid) = v.cid {
                by_cid.entry(cid).or_insert(i);
            }
        }
        VsockRoutes { by_cid }
    }

    /// The VM whose guest has CID `peer_cid`; `None`: close the connection.
    pub fn route(&self, peer_cid: u32) -> Option<usize> {
        self.by_cid.get(&peer_cid).copied()
    }

    /// (CID, VM index), by CID.
    pub fn iter(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.by_cid.iter().map(|(c, v)| (*c, *v))
    }
}

/// What the vsock listener needs: whose each CID is, the event loop's
/// sender and every VM's limiter (by slot).
#[derive(Clone)]
pub(super) struct VsockCtx {
    pub(super) routes: VsockRoutes,
    pub(super) tx: Sender<Event>,
    pub(super) limiters: Vec<SharedLimiter>,
}

impl VsockCtx {
    /// Hands a connection accepted on the vsock port to its VM's channel
    /// code (the caller runs it in a thread of its own, as for a connection
    /// on a VM's unix socket), or closes it and reports the unknown CID.
    /// Returns the VM.
    pub(super) fn dispatch(&self, peer_cid: u32, s: SocketStream) -> Option<usize> {
        match self.routes.route(peer_cid) {
            Some(vm) => {
                let ctx = ChannelCtx {
                    vm,
                    tx: self.tx.clone(),
                    limiter: self.limiters.get(vm)?.clone(),
                };
                ctx.serve(Stream::Socket(s));
                Some(vm)
            }
            None => {
                let _ = s.shutdown();
                drop(s);
                let _ = self.tx.send(Event::VsockRefused { cid: peer_cid });
                None
            }
        }
    }
}

/// Binds the vsock port on any CID and serves it: each VM with `cid` may
/// hold [`CHANNEL_LIMITS`] connections at once.
pub(super) fn start_vsock(port: u32, ctx: VsockCtx) -> Result<()> {
    let l = VsockListener::bind(port).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EAFNOSUPPORT) => {
                " (this kernel has no vsock: modprobe vhost_vsock on a host)"
            }
            Some(libc::EADDRINUSE) => " (in use by another process: another hostd?)",
            _ => "",
        };
        err(format!("vsock port {port}: {e}{hint}"))
    })?;
    let vms = ctx.routes.iter().count().max(1);
    let limits = listen::ConnLimits {
        max_open: CHANNEL_LIMITS.max_open * vms,
        accept_rate: CHANNEL_LIMITS.accept_rate * vms as f64,
        accept_burst: CHANNEL_LIMITS.accept_burst * vms as f64,
    };
    listen::serve(
        format!("tandem hostd: vsock port {port}"),
        "vsock-channel",
        l,
        limits,
        move |(s, cid): (SocketStream, u32)| {
            ctx.dispatch(cid, s);
        },
    )
}
