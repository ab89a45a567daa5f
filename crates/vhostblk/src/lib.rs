//! `tandem vhost-blk`: a vhost-user-blk backend that issues each guest
//! request with the I/O priority the guest wrote in its virtio-blk header,
//! mapped through a per-VM policy. See README.md beside this crate for what
//! the host kernel's schedulers honour and how to run it with QEMU.

pub mod backend;
pub mod classmap;
pub mod config;
pub mod diskio;
pub mod image;
pub mod ioprio;
pub mod poll;
pub mod request;
pub mod server;
pub mod stats;
pub mod submit;
pub mod vmpolicy;
