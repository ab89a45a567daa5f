//! The daemons' listening sockets, made to keep serving whatever their
//! clients do:
//!
//! - [`bind_unix`] never replaces a file that is not a socket (a mistyped
//!   `socket=` or `--control` must not delete a user's file), and says that
//!   root is needed where a path is root's;
//! - [`serve`] accepts at most `accept_rate` connections a second (beyond
//!   that the kernel's backlog holds them, and then the clients wait: no
//!   work for the daemon), holds at most `max_open` at once (more are
//!   closed at once), serves each in a thread of its own, and backs off when
//!   accept fails (out of descriptors) instead of spinning or giving up.
//!   An error on one connection ends that connection only.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use policy::ratelimit::TokenBucket;

use crate::transport::{SocketStream, VsockListener};
use crate::{err, is_root, now_ns, Result};

/// Why an error on `path` may be a matter of privileges: said when not root.
pub fn root_hint(e: &io::Error, path: &Path) -> String {
    if is_root() {
        return String::new();
    }
    let missing_dir = e.kind() == io::ErrorKind::NotFound
        && path
            .parent()
            .is_some_and(|d| !d.as_os_str().is_empty() && !d.exists());
    if e.kind() == io::ErrorKind::PermissionDenied || missing_dir {
        " (this needs root: run it as root, or give a path of your own)".into()
    } else {
        String::new()
    }
}

/// Binds a unix socket at `path` for `what` (e.g. "control socket"). A
/// socket left by a daemon that died is replaced; a live one (another
/// daemon) or anything that is not a socket is refused.
pub fn bind_unix(path: &Path, what: &str) -> Result<UnixListener> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // An error shows at bind, with the hint.
        let _ = std::fs::create_dir_all(d);
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(err(format!(
                "{what} {}: exists and is not a socket; refusing to replace it (choose another path, or remove the file if it is not needed)",
                path.display()
            )));
        }
        Ok(_) => {
            if UnixStream::connect(path).is_ok() {
                return Err(err(format!(
                    "{what} {}: in use by another process (another daemon?)",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(|e| {
                err(format!(
                    "{what} {}: removing a stale socket: {e}{}",
                    path.display(),
                    root_hint(&e, path)
                ))
            })?;
        }
        Err(_) => {}
    }
    UnixListener::bind(path).map_err(|e| {
        err(format!(
            "{what} {}: {e}{}",
            path.display(),
            root_hint(&e, path)
        ))
    })
}

/// A connection whose read and write timeouts can be set.
pub trait Timed {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()>;
}

impl Timed for UnixStream {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, d)
    }
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, d)
    }
}

impl Timed for TcpStream {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, d)
    }
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, d)
    }
}

/// A client connection with one deadline for a whole request (or a whole
/// answer): each read or write gets the time left as its timeout, and none
/// is left after the deadline, so a client that trickles a byte at a time
/// cannot hold its slot longer than that.
pub struct Deadline<S> {
    inner: S,
    until: Instant,
}

impl<S: Timed> Deadline<S> {
    pub fn new(inner: S, d: Duration) -> Deadline<S> {
        Deadline {
            inner,
            until: Instant::now() + d,
        }
    }

    /// A new deadline, `d` from now (e.g. for the answer, once the request
    /// is in).
    pub fn restart(&mut self, d: Duration) {
        self.until = Instant::now() + d;
    }

    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl<S: Read + Timed> Read for Deadline<S> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.inner.set_read_timeout(Some(left))?;
        self.inner.read(b)
    }
}

impl<S: Write + Timed> Write for Deadline<S> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.inner.set_write_timeout(Some(left))?;
        self.inner.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Something that accepts connections.
pub trait Accept: Send + 'static {
    type Conn: Send + 'static;
    fn accept_one(&self) -> io::Result<Self::Conn>;
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    fn accept_one(&self) -> io::Result<UnixStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    fn accept_one(&self) -> io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Accept for VsockListener {
    /// The connection and its peer's CID.
    type Conn = (SocketStream, u32);
    fn accept_one(&self) -> io::Result<(SocketStream, u32)> {
        self.accept().map(|(s, cid, _)| (s, cid))
    }
}

/// How much a listener may take on.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Connections served at once; more are closed as they come.
    pub max_open: usize,
    /// Connections accepted per second.
    pub accept_rate: f64,
    /// Connections accepted at once above the rate.
    pub accept_burst: f64,
}

/// A control or metrics socket: a handful of clients at a time (status,
/// a Prometheus scraper); 100 accepts a second is far above any of them.
pub const CLIENT_LIMITS: ConnLimits = ConnLimits {
    max_open: 16,
    accept_rate: 100.0,
    accept_burst: 100.0,
};

/// A VM's channel socket: one guest (a reconnecting guest daemon, QEMU's
/// chardev); the new connection replaces the old, so a few at once suffice.
pub const CHANNEL_LIMITS: ConnLimits = ConnLimits {
    max_open: 4,
    accept_rate: 50.0,
    accept_burst: 50.0,
};

/// Decrements the open count when a connection's thread ends (or when the
/// thread could not be started).
struct Open(Arc<AtomicUsize>);
impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Logs a recurring condition at most once every 10 s.
struct Throttled {
    last: Option<u64>,
    missed: u64,
}

impl Throttled {
    fn log(&mut self, who: &str, m: &str) {
        let now = now_ns();
        if self.last.is_some_and(|t| now - t < 10 * policy::SEC) {
            self.missed += 1;
            return;
        }
        let more = match self.missed {
            0 => String::new(),
            n => format!(" ({n} more since the last message)"),
        };
        tracing::warn!(target: "listen", "{who}: {m}{more}");
        self.last = Some(now);
        self.missed = 0;
    }
}

/// Serves `l` in a thread of its own until the process ends: each accepted
/// connection goes to `handle` in a thread named `name`, within `limits`.
/// `who` prefixes the log lines (e.g. "tandem hostd: control socket").
pub fn serve<L, F>(who: String, name: &str, l: L, limits: ConnLimits, handle: F) -> Result<()>
where
    L: Accept,
    F: Fn(L::Conn) + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let name = name.to_string();
    let thread_name = name.clone();
    thread::Builder::new()
        .name(format!("{name}-accept"))
        .spawn(move || accept_loop(&who, &thread_name, l, limits, handle))
        .map(|_| ())
        .map_err(|e| err(format!("{name}: starting its thread: {e}")))
}

fn accept_loop<L, F>(who: &str, name: &str, l: L, limits: ConnLimits, handle: Arc<F>)
where
    L: Accept,
    F: Fn(L::Conn) + Send + Sync + 'static,
{
    let open = Arc::new(AtomicUsize::new(0));
    let mut bucket = TokenBucket::new(limits.accept_rate, limits.accept_burst, now_ns());
    let (mut failing, mut full) = (
        Throttled {
            last: None,
            missed: 0,
        },
        Throttled {
            last: None,
            missed: 0,
        },
    );
    loop {
        let now = now_ns();
        if !bucket.take(now, 1.0) {
            thread::sleep(Duration::from_nanos(bucket.wait_for(now, 1.0).max(1)));
            continue;
        }
        let c = match l.accept_one() {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM: wait for descriptors or
                // memory to come back; the connection waits in the backlog.
                failing.log(who, &format!("accept: {e}; retrying"));
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if open.load(Ordering::SeqCst) >= limits.max_open {
            drop(c);
            full.log(
                who,
                &format!(
                    "{} connections open already: closed a new one",
                    limits.max_open
                ),
            );
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let guard = Open(open.clone());
        let h = handle.clone();
        let spawned = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _guard = guard;
                h(c)
            });
        if let Err(e) = spawned {
            // The closure, its connection and its guard are dropped.
            failing.log(
                who,
                &format!("starting a thread: {e}; closed the connection"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that sends a byte every 50 ms never ends its request: the
    /// deadline ends it after 300 ms all told, not 300 ms after its last byte.
    #[test]
    fn a_trickling_client_is_cut_at_the_deadline() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            for _ in 0..40 {
                if b.write_all(b"x").is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        let mut d = Deadline::new(a, Duration::from_millis(300));
        let t0 = Instant::now();
        let mut got = 0;
        let mut buf = [0u8; 16];
        let e = loop {
            match d.read(&mut buf) {
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        let took = t0.elapsed();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(took < Duration::from_millis(600), "{took:?}");
        assert!(got >= 3, "{got}");
        drop(d);
        t.join().unwrap();
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-listen-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_never_replaced() {
        let d = scratch("file");
        let f = d.join("precious");
        std::fs::write(&f, "data").unwrap();
        let e = bind_unix(&f, "control socket").unwrap_err().0;
        assert!(e.contains("exists and is not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "data");
        // A directory or a symbolic link neither.
        let e = bind_unix(&d, "control socket").unwrap_err().0;
        assert!(e.contains("not a socket"), "{e}");
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(bind_unix(&link, "x").is_err());
        assert!(link.exists() && f.exists());
        // A stale socket is replaced; a live one is refused.
        let s = d.join("s.sock");
        drop(UnixListener::bind(&s).unwrap());
        let l = bind_unix(&s, "x").unwrap();
        let e = bind_unix(&s, "x").unwrap_err().0;
        assert!(e.contains("in use"), "{e}");
        drop(l);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn connections_over_the_cap_are_closed_and_the_rest_served() {
        let d = scratch("cap");
        let p = d.join("s.sock");
        let l = bind_unix(&p, "x").unwrap();
        let limits = ConnLimits {
            max_open: 2,
            accept_rate: 1000.0,
            accept_burst: 1000.0,
        };
        serve(
            "test".into(),
            "test-conn",
            l,
            limits,
            |mut s: UnixStream| {
                // Echo one line, then hold the connection until the peer closes.
                let mut b = [0u8; 16];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 || s.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            },
        )
        .unwrap();
        let echo = |s: &mut UnixStream| -> bool {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 2];
            s.write_all(b"hi").is_ok() && s.read_exact(&mut b).is_ok()
        };
        let mut a = UnixStream::connect(&p).unwrap();
        let mut b = UnixStream::connect(&p).unwrap();
        assert!(echo(&mut a) && echo(&mut b));
        let mut c = UnixStream::connect(&p).unwrap();
        assert!(!echo(&mut c), "a third connection is closed");
        drop((a, c));
        // A slot is free again once a connection ends.
        let t = std::time::Instant::now();
        loop {
            let mut n = UnixStream::connect(&p).unwrap();
            if echo(&mut n) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "no slot came back");
            thread::sleep(Duration::from_millis(10));
        }
        drop(b);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
