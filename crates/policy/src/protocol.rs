//! The messages between a guest and its host, and their wire format.
//!
//! The guest opens a channel (a virtio-serial port, a vsock, a socket in the
//! simulator) and sends `Hello`; the host answers `HelloAck` or `Refuse`. After
//! that the guest sends `Help` / `NoHelp` as its needs change and either side
//! may send `Heartbeat`s to show it is alive.
//!
//! # Frame layout
//!
//! All integers are little-endian. A frame is:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | `len`: length of the body in bytes (u16), *not* counting these 2 bytes |
//! | 2 | 1 | `version`: frame version, [`PROTOCOL_VERSION`] |
//! | 3 | 1 | `type`: message type (table below) |
//! | 4 | `len - 2` | fields of the message type |
//!
//! A whole frame (`2 + len` bytes) is at most [`MAX_MESSAGE_BYTES`]; a longer
//! one is refused as soon as its length prefix is read, so a broken or
//! hostile peer cannot make the receiver buffer much. The body must hold
//! exactly the fields of its type: missing or extra bytes are an error.
//!
//! | type | message | fields |
//! |---|---|---|
//! | 1 | `Hello` | `version` u8, `name_len` u8, `vm_name` (`name_len` bytes of UTF-8, at most 64) |
//! | 2 | `HelloAck` | `version` u8 |
//! | 3 | `Refuse` | `reason_len` u8, `reason` (`reason_len` bytes of UTF-8, at most 128) |
//! | 4 | `Help` | `resource` u8, `reason` u8 (+ `code` u8 when `reason` is 0), `duration_hint_ms` u32 |
//! | 5 | `NoHelp` | `resource` u8 |
//! | 6 | `Heartbeat` | `seq` u64 |
//!
//! `resource`: 0 = I/O, 1 = CPU. `reason`: 1 = exec, 2 = I/O resume,
//! 3 = soft real-time, 4 = interactive, 5 = explicit, 0 = other, followed by a
//! one-byte code the two ends agree on.
//!
//! The `version` byte of the frame says how to read the frame; the `version`
//! field of `Hello` is the protocol version the guest speaks and the one of
//! `HelloAck` the version the host accepted. A receiver that meets a frame
//! version it does not know gets [`DecodeError::UnknownVersion`]; a host should
//! answer `Refuse` and close the channel.
//!
//! Decoding never panics: any input gives either a message or a
//! [`DecodeError`]. [`DecodeError::Truncated`] means "wait for more bytes"; any
//! other error means the stream is broken and should be closed.

use std::fmt;

/// The frame version this crate writes and reads.
pub const PROTOCOL_VERSION: u8 = 1;

/// The largest frame, length prefix included. Design choice: the largest
/// message (`Refuse` with a 128-byte reason) takes 133 bytes; 256 leaves room
/// for a later version without letting a peer make the other side buffer much.
pub const MAX_MESSAGE_BYTES: usize = 256;

/// The longest VM name in `Hello`, in bytes of UTF-8. Design choice: enough
/// for a libvirt domain name, short enough for a log line.
pub const MAX_VM_NAME_BYTES: usize = 64;

/// The longest reason in `Refuse`, in bytes of UTF-8. Design choice: one
/// sentence for a log line.
pub const MAX_REFUSE_REASON_BYTES: usize = 128;

/// Bytes of the length prefix.
const LEN_PREFIX_BYTES: usize = 2;
/// Bytes of the body header: version and type.
const BODY_HEADER_BYTES: usize = 2;

/// What the guest needs help with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// Storage I/O: the host should favour the VM's I/O threads.
    Io,
    /// CPU time: the host should favour the VM's vCPU threads.
    Cpu,
}

/// Why the guest asks for help. The host does not treat reasons differently
/// today; they are carried for logs, statistics and later policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HelpReason {
    /// A new program started (the guest saw an exec).
    Exec,
    /// A process issued I/O again after a long idle time.
    IoResume,
    /// A process does I/O in regular, low-rate bursts (audio, video).
    SoftRealTime,
    /// The guest's I/O scheduler raised an interactive queue's weight.
    Interactive,
    /// A user or a program asked for help explicitly.
    Explicit,
    /// A reason this version does not name, with a code the two ends agree on.
    Other(u8),
}

/// A message between guest and host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Guest to host, first message on a channel: the protocol version the
    /// guest speaks and the VM's name (at most [`MAX_VM_NAME_BYTES`]).
    Hello { version: u8, vm_name: String },
    /// Host to guest: the host accepts the channel and speaks `version`.
    HelloAck { version: u8 },
    /// Host to guest: the host will not serve this channel (unsupported
    /// version, policy); at most [`MAX_REFUSE_REASON_BYTES`].
    Refuse { reason: String },
    /// Guest to host: please favour this VM for `resource` for about
    /// `duration_hint_ms` (the host caps it with its own lease). Sending it
    /// again renews the lease.
    Help {
        resource: Resource,
        reason: HelpReason,
        duration_hint_ms: u32,
    },
    /// Guest to host: no more help needed for `resource`.
    NoHelp { resource: Resource },
    /// Either way: I am alive. `seq` lets the other side spot gaps.
    Heartbeat { seq: u64 },
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer holds only the start of a frame; the frame needs at least
    /// `needed` bytes in total. Read more and try again.
    Truncated { needed: usize },
    /// The length prefix announces a frame of this many bytes (prefix
    /// included), more than [`MAX_MESSAGE_BYTES`].
    TooLong(usize),
    /// The frame version is not [`PROTOCOL_VERSION`].
    UnknownVersion(u8),
    /// The message type byte names no message.
    UnknownType(u8),
    /// A field is malformed; the name says which.
    BadField(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { needed } => {
                write!(f, "truncated frame: {needed} bytes needed")
            }
            DecodeError::TooLong(n) => write!(
                f,
                "frame of {n} bytes is longer than the limit of {MAX_MESSAGE_BYTES}"
            ),
            DecodeError::UnknownVersion(v) => write!(
                f,
                "unknown protocol version {v} (this side speaks {PROTOCOL_VERSION})"
            ),
            DecodeError::UnknownType(t) => write!(f, "unknown message type {t}"),
            DecodeError::BadField(name) => write!(f, "malformed field `{name}`"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Message type bytes.
mod msg_type {
    pub const HELLO: u8 = 1;
    pub const HELLO_ACK: u8 = 2;
    pub const REFUSE: u8 = 3;
    pub const HELP: u8 = 4;
    pub const NO_HELP: u8 = 5;
    pub const HEARTBEAT: u8 = 6;
}

impl Resource {
    fn to_wire(self) -> u8 {
        match self {
            Resource::Io => 0,
            Resource::Cpu => 1,
        }
    }

    fn from_wire(b: u8) -> Result<Self, DecodeError> {
        match b {
            0 => Ok(Resource::Io),
            1 => Ok(Resource::Cpu),
            _ => Err(DecodeError::BadField("resource")),
        }
    }
}

/// Wire byte of [`HelpReason::Other`]; a code byte follows it.
const REASON_OTHER: u8 = 0;

impl HelpReason {
    /// Whether the need is a start: a program starting or coming back to
    /// the disk, what BFQ's interactive weight raising is for, or a user's
    /// explicit request. Such a need is short and wants a head start; the
    /// host's arbiter raises a VM that starts asking for one after a quiet
    /// spell ([`crate::PolicyConfig::newcomer_factor`]). A soft real-time
    /// stream wants steady service instead, not a head start; and a guest's
    /// BFQ deems a background reader soft real-time when the host starves it
    /// (the reader's rate drops below the soft real-time limit), so a raise
    /// for that reason would go to the VMs the host load slows most rather
    /// than to the ones starting programs.
    pub fn is_start(self) -> bool {
        matches!(
            self,
            HelpReason::Exec
                | HelpReason::IoResume
                | HelpReason::Interactive
                | HelpReason::Explicit
        )
    }

    fn write(self, out: &mut Vec<u8>) {
        match self {
            HelpReason::Exec => out.push(1),
            HelpReason::IoResume => out.push(2),
            HelpReason::SoftRealTime => out.push(3),
            HelpReason::Interactive => out.push(4),
            HelpReason::Explicit => out.push(5),
            HelpReason::Other(code) => out.extend_from_slice(&[REASON_OTHER, code]),
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match r.u8("reason")? {
            REASON_OTHER => Ok(HelpReason::Other(r.u8("reason code")?)),
            1 => Ok(HelpReason::Exec),
            2 => Ok(HelpReason::IoResume),
            3 => Ok(HelpReason::SoftRealTime),
            4 => Ok(HelpReason::Interactive),
            5 => Ok(HelpReason::Explicit),
            _ => Err(DecodeError::BadField("reason")),
        }
    }
}

impl Message {
    /// The whole frame of this message: length prefix, version, type, fields.
    ///
    /// A `vm_name` or `reason` longer than its limit is cut at the last
    /// character boundary within the limit, so every encoded frame decodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0, 0, PROTOCOL_VERSION];
        match self {
            Message::Hello { version, vm_name } => {
                out.push(msg_type::HELLO);
                out.push(*version);
                write_short_str(&mut out, vm_name, MAX_VM_NAME_BYTES);
            }
            Message::HelloAck { version } => {
                out.push(msg_type::HELLO_ACK);
                out.push(*version);
            }
            Message::Refuse { reason } => {
                out.push(msg_type::REFUSE);
                write_short_str(&mut out, reason, MAX_REFUSE_REASON_BYTES);
            }
            Message::Help {
                resource,
                reason,
                duration_hint_ms,
            } => {
                out.push(msg_type::HELP);
                out.push(resource.to_wire());
                reason.write(&mut out);
                out.extend_from_slice(&duration_hint_ms.to_le_bytes());
            }
            Message::NoHelp { resource } => {
                out.push(msg_type::NO_HELP);
                out.push(resource.to_wire());
            }
            Message::Heartbeat { seq } => {
                out.push(msg_type::HEARTBEAT);
                out.extend_from_slice(&seq.to_le_bytes());
            }
        }
        let body = out.len() - LEN_PREFIX_BYTES;
        debug_assert!(out.len() <= MAX_MESSAGE_BYTES);
        out[..LEN_PREFIX_BYTES].copy_from_slice(&(body as u16).to_le_bytes());
        out
    }
}

/// Writes a one-byte length and the string, cut to at most `max` bytes at a
/// character boundary.
fn write_short_str(out: &mut Vec<u8>, s: &str, max: usize) {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push(end as u8);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

/// Decodes one frame from the front of `buf`; returns the message and the
/// number of bytes it took.
///
/// `Err(Truncated)` when `buf` holds only part of a frame (read more from the
/// stream and call again); any other error means the stream cannot be read
/// further. Never panics, whatever `buf` holds.
pub fn decode(buf: &[u8]) -> Result<(Message, usize), DecodeError> {
    if buf.len() < LEN_PREFIX_BYTES {
        return Err(DecodeError::Truncated {
            needed: LEN_PREFIX_BYTES,
        });
    }
    let body_len = u16::from_le_bytes([buf[0], buf[1]]) as usize;
    let frame_len = LEN_PREFIX_BYTES + body_len;
    if frame_len > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLong(frame_len));
    }
    if body_len < BODY_HEADER_BYTES {
        return Err(DecodeError::BadField("length"));
    }
    if buf.len() < frame_len {
        return Err(DecodeError::Truncated { needed: frame_len });
    }
    let body = &buf[LEN_PREFIX_BYTES..frame_len];
    if body[0] != PROTOCOL_VERSION {
        return Err(DecodeError::UnknownVersion(body[0]));
    }
    let mut r = Reader {
        rest: &body[BODY_HEADER_BYTES..],
    };
    let msg = match body[1] {
        msg_type::HELLO => Message::Hello {
            version: r.u8("version")?,
            vm_name: r.short_str("vm_name", MAX_VM_NAME_BYTES)?,
        },
        msg_type::HELLO_ACK => Message::HelloAck {
            version: r.u8("version")?,
        },
        msg_type::REFUSE => Message::Refuse {
            reason: r.short_str("reason", MAX_REFUSE_REASON_BYTES)?,
        },
        msg_type::HELP => Message::Help {
            resource: Resource::from_wire(r.u8("resource")?)?,
            reason: HelpReason::read(&mut r)?,
            duration_hint_ms: u32::from_le_bytes(r.array("duration_hint_ms")?),
        },
        msg_type::NO_HELP => Message::NoHelp {
            resource: Resource::from_wire(r.u8("resource")?)?,
        },
        msg_type::HEARTBEAT => Message::Heartbeat {
            seq: u64::from_le_bytes(r.array("seq")?),
        },
        t => return Err(DecodeError::UnknownType(t)),
    };
    if !r.rest.is_empty() {
        return Err(DecodeError::BadField("length"));
    }
    Ok((msg, frame_len))
}

/// Reads fields from the front of a frame body. Running out of bytes inside a
/// complete frame is a malformed field, not a truncation: the length prefix
/// already said where the frame ends.
struct Reader<'a> {
    rest: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&[u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::BadField(field));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, field)?[0])
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn short_str(&mut self, field: &'static str, max: usize) -> Result<String, DecodeError> {
        let len = self.u8(field)? as usize;
        if len > max {
            return Err(DecodeError::BadField(field));
        }
        let bytes = self.take(len, field)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadField(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help() -> Message {
        Message::Help {
            resource: Resource::Io,
            reason: HelpReason::Exec,
            duration_hint_ms: 1000,
        }
    }

    #[test]
    fn help_frame_layout_is_as_documented() {
        let f = help().encode();
        assert_eq!(f, vec![8, 0, 1, 4, 0, 1, 0xe8, 0x03, 0, 0]);
    }

    #[test]
    fn other_reason_carries_its_code() {
        let m = Message::Help {
            resource: Resource::Cpu,
            reason: HelpReason::Other(1),
            duration_hint_ms: 5,
        };
        let f = m.encode();
        assert_eq!(&f[4..7], &[1, 0, 1]);
        assert_eq!(decode(&f).unwrap(), (m, f.len()));
    }

    #[test]
    fn decodes_back_to_back_frames() {
        let mut buf = help().encode();
        buf.extend(Message::Heartbeat { seq: 7 }.encode());
        let (a, n) = decode(&buf).unwrap();
        assert_eq!(a, help());
        let (b, m) = decode(&buf[n..]).unwrap();
        assert_eq!(b, Message::Heartbeat { seq: 7 });
        assert_eq!(n + m, buf.len());
    }

    #[test]
    fn short_buffers_ask_for_the_whole_frame() {
        let f = help().encode();
        assert_eq!(decode(&f[..1]), Err(DecodeError::Truncated { needed: 2 }));
        assert_eq!(
            decode(&f[..5]),
            Err(DecodeError::Truncated { needed: f.len() })
        );
    }

    #[test]
    fn long_frames_are_refused_from_the_prefix_alone() {
        assert_eq!(decode(&[0xff, 0xff]), Err(DecodeError::TooLong(65537)));
        assert_eq!(decode(&[255, 0]), Err(DecodeError::TooLong(257)));
    }

    #[test]
    fn bad_headers_and_fields_are_named() {
        assert_eq!(decode(&[1, 0, 1]), Err(DecodeError::BadField("length")));
        assert_eq!(decode(&[2, 0, 9, 1]), Err(DecodeError::UnknownVersion(9)));
        assert_eq!(decode(&[2, 0, 1, 77]), Err(DecodeError::UnknownType(77)));
        assert_eq!(
            decode(&[3, 0, 1, 5, 2]),
            Err(DecodeError::BadField("resource"))
        );
        // NoHelp with a trailing byte.
        assert_eq!(
            decode(&[4, 0, 1, 5, 0, 0]),
            Err(DecodeError::BadField("length"))
        );
        // Hello whose name is not UTF-8.
        assert_eq!(
            decode(&[5, 0, 1, 1, 1, 1, 0xff]),
            Err(DecodeError::BadField("vm_name"))
        );
        // Heartbeat with a short seq.
        assert_eq!(
            decode(&[4, 0, 1, 6, 1, 2]),
            Err(DecodeError::BadField("seq"))
        );
    }

    #[test]
    fn over_long_strings_are_cut_at_a_char_boundary() {
        let name = "é".repeat(40); // 80 bytes
        let f = Message::Hello {
            version: 1,
            vm_name: name,
        }
        .encode();
        match decode(&f).unwrap().0 {
            Message::Hello { vm_name, .. } => assert_eq!(vm_name, "é".repeat(32)),
            m => panic!("unexpected {m:?}"),
        }
        let f = Message::Refuse {
            reason: "x".repeat(500),
        }
        .encode();
        assert!(f.len() <= MAX_MESSAGE_BYTES);
        match decode(&f).unwrap().0 {
            Message::Refuse { reason } => assert_eq!(reason.len(), MAX_REFUSE_REASON_BYTES),
            m => panic!("unexpected {m:?}"),
        }
    }

    #[test]
    fn a_name_length_over_the_limit_is_refused() {
        let mut f = vec![0, 0, 1, 1, 1, 65];
        f.extend(std::iter::repeat_n(b'a', 65));
        let body = (f.len() - 2) as u16;
        f[..2].copy_from_slice(&body.to_le_bytes());
        assert_eq!(decode(&f), Err(DecodeError::BadField("vm_name")));
    }

    #[test]
    fn errors_display_their_cause() {
        assert!(DecodeError::TooLong(300).to_string().contains("300"));
        assert!(DecodeError::BadField("seq").to_string().contains("seq"));
    }
}
