//! tandem's deterministic simulator of storage I/O scheduling.
//!
//! Layers, bottom up: [`engine`] (event queue and RNG), the device models of
//! the `devmodel` crate, [`block`] (requests, merging, dispatch), [`iosched`]
//! (the elevators), [`fs`] (file placement and page cache), [`machine`] (a
//! machine made of parts: kernels, page cache, processes, QEMU,
//! coordination) and [`bench`] (the S-suite benchmarks run on
//! a simulated machine).

pub mod bench;
pub mod block;
pub mod coord;
pub mod cpu_bench;
pub mod engine;
pub mod fs;
pub mod iosched;
pub mod kernel;
pub mod machine;
pub mod profile_bench;
pub mod request;
pub mod virtio;
pub mod vm;
pub mod workload;
pub mod xen;
pub mod xen_cpu;
