//! Property: the wire format is robust. Every message round-trips through
//! encode and decode, every truncation of a frame asks for more bytes, and no
//! input whatever makes the decoder panic.

use policy::protocol::{MAX_REFUSE_REASON_BYTES, MAX_VM_NAME_BYTES};
use policy::{decode, DecodeError, HelpReason, Message, Resource, MAX_MESSAGE_BYTES};
use proptest::prelude::*;

fn resource() -> impl Strategy<Value = Resource> {
    prop_oneof![Just(Resource::Io), Just(Resource::Cpu)]
}

fn reason() -> impl Strategy<Value = HelpReason> {
    prop_oneof![
        Just(HelpReason::Exec),
        Just(HelpReason::IoResume),
        Just(HelpReason::SoftRealTime),
        Just(HelpReason::Interactive),
        Just(HelpReason::Explicit),
        any::<u8>().prop_map(HelpReason::Other),
    ]
}

/// A string of at most `max` bytes of UTF-8, multi-byte characters included.
fn short_string(max: usize) -> impl Strategy<Value = String> {
    any::<String>().prop_map(move |s| {
        let mut end = s.len().min(max);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_owned()
    })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (any::<u8>(), short_string(MAX_VM_NAME_BYTES))
            .prop_map(|(version, vm_name)| Message::Hello { version, vm_name }),
        any::<u8>().prop_map(|version| Message::HelloAck { version }),
        short_string(MAX_REFUSE_REASON_BYTES).prop_map(|reason| Message::Refuse { reason }),
        (resource(), reason(), any::<u32>()).prop_map(|(resource, reason, duration_hint_ms)| {
            Message::Help {
                resource,
                reason,
                duration_hint_ms,
            }
        }),
        resource().prop_map(|resource| Message::NoHelp { resource }),
        any::<u64>().prop_map(|seq| Message::Heartbeat { seq }),
    ]
}

/// The properties, at a number of cases: 2,000 in every `cargo test`, and
/// 100,000 in the slow run CI makes (`--include-ignored`).
macro_rules! properties {
    ($cases:expr $(, #[$attr:meta])*) => {
proptest! {
    #![proptest_config(ProptestConfig::with_cases($cases))]

    #[test]
    $(#[$attr])*
    fn every_message_round_trips(m in message()) {
        let frame = m.encode();
        prop_assert!(frame.len() <= MAX_MESSAGE_BYTES);
        prop_assert_eq!(decode(&frame), Ok((m, frame.len())));
    }

    #[test]
    $(#[$attr])*
    fn every_truncation_asks_for_more(m in message()) {
        let frame = m.encode();
        for cut in 0..frame.len() {
            match decode(&frame[..cut]) {
                Err(DecodeError::Truncated { needed }) => {
                    prop_assert!(needed > cut && needed <= frame.len(), "cut {} needed {}", cut, needed);
                }
                other => prop_assert!(false, "cut {} of {:?} gave {:?}", cut, m, other),
            }
        }
    }

    #[test]
    $(#[$attr])*
    fn streams_of_frames_decode_in_order(ms in proptest::collection::vec(message(), 0..20)) {
        let stream: Vec<u8> = ms.iter().flat_map(Message::encode).collect();
        let mut rest = &stream[..];
        for m in &ms {
            let (got, n) = decode(rest).unwrap();
            prop_assert_eq!(&got, m);
            rest = &rest[n..];
        }
        prop_assert!(rest.is_empty());
    }

    /// Arbitrary bytes: an error or a message, never a panic; and what decodes
    /// is canonical (encoding it gives back exactly the bytes it took).
    #[test]
    $(#[$attr])*
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok((m, n)) = decode(&bytes) {
            prop_assert!(n <= bytes.len());
            prop_assert_eq!(m.encode(), bytes[..n].to_vec());
        }
    }

    /// Near-valid frames (a valid header with random fields and lengths)
    /// reach deeper into the decoder than random bytes do.
    #[test]
    $(#[$attr])*
    fn mangled_frames_never_panic(
        m in message(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        len_delta in -3i32..=3,
    ) {
        let mut frame = m.encode();
        for (at, byte) in flips {
            let i = 2 + at % (frame.len() - 2);
            frame[i] = byte;
        }
        let body = (frame.len() as i32 - 2 + len_delta).max(0) as u16;
        frame[..2].copy_from_slice(&body.to_le_bytes());
        if let Ok((m2, n)) = decode(&frame) {
            prop_assert_eq!(m2.encode(), frame[..n].to_vec());
        }
    }
}
    };
}

mod quick {
    use super::*;
    properties!(2000);
}

mod thorough {
    use super::*;
    properties!(100_000, #[ignore = "slow: 100k cases"]);
}
