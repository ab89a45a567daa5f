//! `agent::transport::FrameReader`, the code that reads hostd's and
//! guestd's channels, over a stream that hands the input out in pieces of
//! the sizes the input itself chooses (a first byte per piece), as a socket
//! may: never a panic, never more than one frame buffered, and the same
//! messages as decoding the whole stream at once.
#![no_main]

use std::io::Read;

use agent::transport::{FrameReader, ReadError};
use libfuzzer_sys::fuzz_target;
use policy::{decode, Message, MAX_MESSAGE_BYTES};

/// The bytes after the first `split` bytes, handed out in pieces whose
/// sizes the first `split` bytes give (1 to 256 each, round robin).
struct Pieces<'a> {
    sizes: &'a [u8],
    data: &'a [u8],
    next: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let size = match self.sizes.len() {
            0 => buf.len(),
            n => self.sizes[self.next % n] as usize + 1,
        };
        self.next += 1;
        let k = size.min(buf.len()).min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

/// What decoding the whole stream at once gives: the messages up to the
/// first error.
fn at_once(mut data: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    while let Ok((m, n)) = decode(data) {
        out.push(m);
        data = &data[n..];
    }
    out
}

fuzz_target!(|input: &[u8]| {
    let split = input.first().map_or(0, |b| (*b % 8) as usize).min(input.len().saturating_sub(1));
    let (sizes, data) = input.get(1..).unwrap_or(&[]).split_at(split);
    let mut r = FrameReader::new(Pieces { sizes, data, next: 0 });
    let mut got = Vec::new();
    let end = loop {
        match r.read_message() {
            Ok(m) => got.push(m),
            Err(e) => break e,
        }
    };
    let want = at_once(data);
    assert_eq!(got, want);
    match end {
        ReadError::Eof { partial } => assert!(partial < MAX_MESSAGE_BYTES),
        ReadError::Decode(_) => {}
        ReadError::Timeout | ReadError::Io(_) => panic!("no such error from a slice"),
    }
});
