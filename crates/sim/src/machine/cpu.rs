//! The CPU part: the seam where a CPU model plugs into the machine. It
//! owns nothing yet. Today every process has a core to itself, so a CPU
//! burst takes exactly its own length; the parts that spend CPU time ask
//! this part how long a burst takes instead of assuming it:
//!
//! - a buffered sequential reader between readahead windows, and a random
//!   reader between reads ([`super::procs`]);
//! - a writer copying a chunk into the page cache ([`super::procs`]);
//! - a QEMU thread copying a request that needed no disk I/O
//!   ([`super::qemu`]).
//!
//! The CPU model itself is the `cpusched` crate (CFS and RT run queues,
//! vCPUs as host tasks with a guest scheduler of their own;
//! `crate::cpu_bench` drives it alone for the latency benchmarks). It
//! keeps its own clock and events, and a driver advances it. Joining it to
//! the machine means: this part owns a `cpusched::CpuModel`; the event
//! loop (`Machine::run_until`) runs whichever comes first, the machine's
//! next event or the model's `next_event_time()`, advancing the model with
//! `advance_to()`; `burst` becomes `set_burst` on the process's task, and
//! the `BurstDone` completion, routed here, wakes the process instead of a
//! timer. The I/O schedulers are in `crate::iosched`; the CPU schedulers
//! stay in the `cpusched` crate.

use crate::request::Pid;
use devmodel::Nanos;

/// The machine's CPUs (no model yet: see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cpu;

impl Cpu {
    /// How long a CPU burst of `ns` by process `pid` takes: `ns`, each
    /// process running on a core of its own.
    #[inline]
    pub(super) fn burst(&self, pid: Pid, ns: Nanos) -> Nanos {
        let _ = pid;
        ns
    }
}
