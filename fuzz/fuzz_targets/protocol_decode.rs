//! `policy::decode` on any bytes: never a panic; a decoded message is
//! canonical (encoding it gives back exactly the bytes it took); a
//! truncated frame asks for more bytes than it has, within the frame limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use policy::{decode, DecodeError, MAX_MESSAGE_BYTES};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok((m, used)) => {
            assert!(used <= data.len() && used <= MAX_MESSAGE_BYTES);
            assert_eq!(m.encode(), &data[..used], "not canonical: {m:?}");
        }
        Err(DecodeError::Truncated { needed }) => {
            assert!(needed > data.len(), "needed {needed} of {}", data.len());
            assert!(needed <= MAX_MESSAGE_BYTES);
        }
        Err(_) => {}
    }
});
