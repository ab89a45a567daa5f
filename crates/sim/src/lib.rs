//! tandem's deterministic simulator of storage I/O scheduling.
//!
//! Layers, bottom up: [`engine`] (event queue and RNG), the device models of
//! the `devmodel` crate, [`block`] (requests, merging, dispatch), [`sched`]
//! (the elevators), [`fs`] (file placement and page cache), [`system`] (a
//! machine with its processes) and [`bench`] (the S-suite benchmarks run on
//! a simulated machine).

pub mod bench;
pub mod block;
pub mod coord;
pub mod cpu_bench;
pub mod engine;
pub mod fs;
pub mod kernel;
pub mod request;
pub mod sched;
pub mod system;
pub mod virtio;
pub mod vm;
pub mod workload;
