//! Transports and framing. The three channels the daemons speak over are all
//! byte streams, so one framing code serves them all:
//!
//! - `unix:PATH`: a plain unix stream socket (tests, containers, and the host
//!   side of a virtio-serial port: QEMU's chardev socket);
//! - `virtio:NAME`: in the guest, the virtio-serial port `/dev/virtio-ports/NAME`;
//! - `vsock:CID:PORT`: an `AF_VSOCK` stream (host CID 2), where the kernel has it;
//!   hostd listens on one port for all guests ([`VsockListener`]) and tells
//!   them apart by the peer CID the kernel reports at accept.
//!
//! Frames are [`policy::protocol`]'s; this module only moves bytes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::socket::{
    accept4, bind, connect, getpeername, listen, send, setsockopt, shutdown, socket, sockopt,
    AddressFamily, Backlog, MsgFlags, Shutdown, SockFlag, SockType, VsockAddr,
};
use nix::sys::time::TimeVal;

use policy::{decode, DecodeError, Message, MAX_MESSAGE_BYTES};

use crate::{err, Result};

/// Where a guest daemon reaches its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Virtio(String),
    Vsock { cid: u32, port: u32 },
}

impl Endpoint {
    /// `unix:PATH`, `virtio:NAME` or `vsock:CID:PORT`.
    pub fn parse(s: &str) -> Result<Endpoint> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(err(
                    "unix: needs a socket path, e.g. unix:/run/tandem/vm1.sock",
                ));
            }
            return Ok(Endpoint::Unix(PathBuf::from(p)));
        }
        if let Some(n) = s.strip_prefix("virtio:") {
            if n.is_empty() || n.contains('/') {
                return Err(err(format!(
                    "virtio:{n}: a port name without '/' is needed, e.g. virtio:org.tandem.0"
                )));
            }
            return Ok(Endpoint::Virtio(n.to_string()));
        }
        if let Some(r) = s.strip_prefix("vsock:") {
            let mut it = r.split(':');
            let cid = it.next().and_then(|c| c.parse().ok());
            let port = it.next().and_then(|c| c.parse().ok());
            if let (Some(cid), Some(port), None) = (cid, port, it.next()) {
                return Ok(Endpoint::Vsock { cid, port });
            }
            return Err(err(format!(
                "vsock:{r}: expected vsock:CID:PORT, e.g. vsock:2:5000"
            )));
        }
        Err(err(format!(
            "{s:?}: unknown transport; accepted: unix:PATH, virtio:NAME, vsock:CID:PORT"
        )))
    }

    /// Open the channel.
    pub fn connect(&self) -> io::Result<Stream> {
        match self {
            Endpoint::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
            Endpoint::Virtio(n) => OpenOptions::new()
                .read(true)
                .write(true)
                .open(format!("/dev/virtio-ports/{n}"))
                .map(Stream::File),
            Endpoint::Vsock { cid, port } => vsock_connect(*cid, *port).map(Stream::Socket),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Virtio(n) => write!(f, "virtio:{n}"),
            Endpoint::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
        }
    }
}

/// A new `AF_VSOCK` stream socket.
fn vsock_socket() -> io::Result<OwnedFd> {
    Ok(socket(
        AddressFamily::Vsock,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

fn vsock_connect(cid: u32, port: u32) -> io::Result<SocketStream> {
    let fd = vsock_socket()?;
    connect(fd.as_raw_fd(), &VsockAddr::new(cid, port))?;
    Ok(SocketStream(fd))
}

/// `VMADDR_CID_ANY`: a listener bound to it accepts from every guest.
pub const VMADDR_CID_ANY: u32 = u32::MAX;
/// `VMADDR_PORT_ANY`: not a port one can ask for.
pub const VMADDR_PORT_ANY: u32 = u32::MAX;
/// CIDs that are not guests': the hypervisor (0), local loopback (1), the host (2).
pub const VMADDR_CID_HOST: u32 = 2;

/// hostd's listening `AF_VSOCK` socket: one port, any CID.
#[derive(Debug)]
pub struct VsockListener {
    fd: OwnedFd,
    port: u32,
}

impl VsockListener {
    /// Bind `port` on `VMADDR_CID_ANY` and listen.
    pub fn bind(port: u32) -> io::Result<VsockListener> {
        let fd = vsock_socket()?;
        bind(fd.as_raw_fd(), &VsockAddr::new(VMADDR_CID_ANY, port))?;
        listen(&fd, Backlog::new(16)?)?;
        Ok(VsockListener { fd, port })
    }

    pub fn port(&self) -> u32 {
        self.port
    }

    /// The next connection and its peer's CID and port, as the kernel gives
    /// them (a guest cannot choose its CID: the VMM sets it).
    pub fn accept(&self) -> io::Result<(SocketStream, u32, u32)> {
        let fd = accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC)?;
        // SAFETY: accept4 returned a new descriptor that nothing else owns
        // (nix 0.29's accept4 gives a RawFd, not an OwnedFd).
        let s = SocketStream(unsafe { OwnedFd::from_raw_fd(fd) });
        let peer: VsockAddr = getpeername(s.0.as_raw_fd())?;
        Ok((s, peer.cid(), peer.port()))
    }
}

/// A connected stream socket of any family, by its descriptor: a vsock
/// connection (std has no type for them). Read timeouts and shutdown work
/// as on a `UnixStream`.
#[derive(Debug)]
pub struct SocketStream(OwnedFd);

impl SocketStream {
    pub fn try_clone(&self) -> io::Result<SocketStream> {
        self.0.try_clone().map(SocketStream)
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        let tv = match t {
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a zero read timeout",
                ))
            }
            Some(d) => TimeVal::from(libc::timeval {
                tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                tv_usec: d.subsec_micros() as libc::suseconds_t,
            }),
            None => TimeVal::new(0, 0),
        };
        Ok(setsockopt(&self.0, sockopt::ReceiveTimeout, &tv)?)
    }

    pub fn shutdown(&self) -> io::Result<()> {
        Ok(shutdown(self.0.as_raw_fd(), Shutdown::Both)?)
    }
}

impl From<OwnedFd> for SocketStream {
    /// `fd` must be a connected stream socket.
    fn from(fd: OwnedFd) -> SocketStream {
        SocketStream(fd)
    }
}

impl Read for SocketStream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        Ok(nix::unistd::read(self.0.as_raw_fd(), b)?)
    }
}

impl Write for SocketStream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        // MSG_NOSIGNAL: a peer that went away is an error, not SIGPIPE.
        Ok(send(self.0.as_raw_fd(), b, MsgFlags::MSG_NOSIGNAL)?)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One open channel: a socket or a character device, all byte streams.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    /// A vsock connection.
    Socket(SocketStream),
    /// A virtio-serial port in the guest.
    File(File),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
            Stream::Socket(s) => s.try_clone().map(Stream::Socket),
            Stream::File(f) => f.try_clone().map(Stream::File),
        }
    }

    /// A read timeout, where the stream supports one (sockets).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        match self {
            Stream::Unix(s) => {
                let _ = s.set_read_timeout(t);
            }
            Stream::Socket(s) => {
                let _ = s.set_read_timeout(t);
            }
            Stream::File(_) => {}
        }
    }

    /// Close both directions (sockets); wakes a reader blocked on it.
    pub fn shutdown(&self) {
        match self {
            Stream::Unix(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            Stream::Socket(s) => {
                let _ = s.shutdown();
            }
            Stream::File(_) => {}
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Socket(s) => s.read(b),
            Stream::File(f) => f.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Socket(s) => s.write(b),
            Stream::File(f) => f.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Socket(s) => s.flush(),
            Stream::File(f) => f.flush(),
        }
    }
}

/// Why no message came out of a stream.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the stream (with `partial` bytes of an unfinished frame).
    Eof {
        partial: usize,
    },
    /// The read timed out with nothing complete (try again).
    Timeout,
    /// The bytes are not a frame: the stream is broken and must be closed.
    Decode(DecodeError),
    Io(io::Error),
}

/// Reads frames off a byte stream. It never holds more than one frame's worth
/// of bytes ([`MAX_MESSAGE_BYTES`]): a longer length prefix is refused at once.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            buf: Vec::with_capacity(MAX_MESSAGE_BYTES),
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The next message. Bytes past it stay buffered for the next call.
    pub fn read_message(&mut self) -> std::result::Result<Message, ReadError> {
        loop {
            if !self.buf.is_empty() {
                match decode(&self.buf) {
                    Ok((m, used)) => {
                        self.buf.drain(..used);
                        return Ok(m);
                    }
                    Err(DecodeError::Truncated { .. }) => {}
                    Err(e) => return Err(ReadError::Decode(e)),
                }
            }
            // Read at most up to the frame limit: decode refuses longer frames
            // from their prefix, so a frame always fits.
            let mut tmp = [0u8; MAX_MESSAGE_BYTES];
            let room = MAX_MESSAGE_BYTES - self.buf.len();
            match self.inner.read(&mut tmp[..room]) {
                Ok(0) => {
                    return Err(ReadError::Eof {
                        partial: self.buf.len(),
                    })
                }
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Err(ReadError::Timeout)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }
}

/// Writes one message as one frame.
pub fn write_message<W: Write>(w: &mut W, m: &Message) -> io::Result<()> {
    w.write_all(&m.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{HelpReason, Resource};

    #[test]
    fn frames_split_and_joined() {
        let a = Message::Hello {
            version: 1,
            vm_name: "vm1".into(),
        };
        let b = Message::Help {
            resource: Resource::Io,
            reason: HelpReason::Exec,
            duration_hint_ms: 1000,
        };
        let mut bytes = a.encode();
        bytes.extend(b.encode());
        // One byte at a time.
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.1 >= self.0.len() || buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0[self.1];
                self.1 += 1;
                Ok(1)
            }
        }
        let mut r = FrameReader::new(Trickle(bytes.clone(), 0));
        assert_eq!(r.read_message().unwrap(), a);
        assert_eq!(r.read_message().unwrap(), b);
        assert!(matches!(
            r.read_message(),
            Err(ReadError::Eof { partial: 0 })
        ));
        let mut r = FrameReader::new(&bytes[..]);
        assert_eq!(r.read_message().unwrap(), a);
        assert_eq!(r.read_message().unwrap(), b);
        let mut r = FrameReader::new(&bytes[..bytes.len() - 1]);
        r.read_message().unwrap();
        assert!(matches!(r.read_message(), Err(ReadError::Eof { partial: p }) if p > 0));
    }

    #[test]
    fn oversized_and_bad_version_refused() {
        let mut r = FrameReader::new(&[0xff, 0xff, 1, 4][..]);
        assert!(matches!(
            r.read_message(),
            Err(ReadError::Decode(DecodeError::TooLong(_)))
        ));
        let mut r = FrameReader::new(&[2, 0, 9, 6][..]);
        assert!(matches!(
            r.read_message(),
            Err(ReadError::Decode(DecodeError::UnknownVersion(9)))
        ));
    }

    /// The examples in docs/protocol.md.
    #[test]
    fn documented_examples() {
        let hello = Message::Hello {
            version: 1,
            vm_name: "vm1".into(),
        };
        assert_eq!(hello.encode(), [7, 0, 1, 1, 1, 3, b'v', b'm', b'1']);
        let help = Message::Help {
            resource: Resource::Io,
            reason: HelpReason::Exec,
            duration_hint_ms: 1000,
        };
        assert_eq!(help.encode(), [8, 0, 1, 4, 0, 1, 0xe8, 3, 0, 0]);
        let no = Message::NoHelp {
            resource: Resource::Io,
        };
        assert_eq!(no.encode(), [3, 0, 1, 5, 0]);
    }

    /// SocketStream's own code (timeouts, shutdown, clones) on a unix
    /// socket pair: the same calls a vsock connection gets.
    #[test]
    fn socket_stream_times_out_shuts_down_and_clones() {
        let (a, b) = UnixStream::pair().unwrap();
        let a = SocketStream::from(OwnedFd::from(a));
        let mut b = b;
        a.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        assert!(a.set_read_timeout(Some(Duration::ZERO)).is_err());
        let mut r = FrameReader::new(Stream::Socket(a.try_clone().unwrap()));
        let t = std::time::Instant::now();
        assert!(matches!(r.read_message(), Err(ReadError::Timeout)));
        assert!(t.elapsed() >= Duration::from_millis(25));
        let hello = Message::Hello {
            version: 1,
            vm_name: "vm1".into(),
        };
        write_message(&mut b, &hello).unwrap();
        assert_eq!(r.read_message().unwrap(), hello);
        let mut w = Stream::Socket(a.try_clone().unwrap());
        write_message(&mut w, &Message::HelloAck { version: 1 }).unwrap();
        assert_eq!(
            FrameReader::new(&mut b).read_message().unwrap(),
            Message::HelloAck { version: 1 }
        );
        // Shutdown wakes the other end, and a write afterwards is an error
        // (EPIPE), not SIGPIPE.
        Stream::Socket(a.try_clone().unwrap()).shutdown();
        let mut buf = [0u8; 4];
        assert_eq!(b.read(&mut buf).unwrap(), 0);
        assert!(w.write(b"x").is_err());
        a.set_read_timeout(None).unwrap();
        assert!(matches!(
            r.read_message(),
            Err(ReadError::Eof { partial: 0 })
        ));
    }

    /// This machine's kernel has AF_VSOCK (hostd's listener binds on any
    /// CID); a second listener on the same port is refused.
    #[test]
    fn vsock_listener_binds_on_any_cid() {
        let port = 40_000 + std::process::id() % 20_000;
        let l = VsockListener::bind(port).expect("AF_VSOCK bind on VMADDR_CID_ANY");
        assert_eq!(l.port(), port);
        let e = VsockListener::bind(port).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        drop(l);
        VsockListener::bind(port).expect("the port is free again");
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            Endpoint::parse("unix:/tmp/x").unwrap(),
            Endpoint::Unix("/tmp/x".into())
        );
        assert_eq!(
            Endpoint::parse("vsock:2:5000").unwrap(),
            Endpoint::Vsock { cid: 2, port: 5000 }
        );
        assert!(Endpoint::parse("tcp:x").is_err());
        assert!(Endpoint::parse("virtio:a/b").is_err());
    }
}
