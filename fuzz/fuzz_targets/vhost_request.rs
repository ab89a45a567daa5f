//! `vhostblk::request::parse`, the vhost-user-blk backend's parser of what
//! a guest puts on its virtqueue, on any chain of descriptors and any guest
//! memory: never a panic; an accepted request touches guest memory only
//! inside its descriptors (in the right direction), sectors only inside the
//! image, and never writes a read-only image; a chain without a status byte
//! is never accepted. The input layout and the checks are in
//! `crates/vhostblk/src/request/fuzz.rs`, shared with its unit tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vhostblk::request::fuzz::run(data);
});
