//! The `vhost-ioprio` steps of a VM cell ([`crate::vhost`] has the
//! backend): its backend started before QEMU, guestd's marking in the
//! guest, and a cell failed cleanly when the backend dies.

use policy::CoordMode;
use serde_json::json;

use crate::cells::CellCtx;
use crate::cleanup::Cleanup;
use crate::vhost::{Backend, BackendSpec, MARK_CLASS};
use crate::{progress, vm, Result};

/// The cell's backend for `vhost-ioprio` (none otherwise), on the guest's
/// disk image, with its socket and counters in the cell's directory `dir`.
/// With `--vm-group own` it issues from a blkio group of the VM's own (as
/// QEMU does in the other modes), and its RT thread from the root group
/// (`vhostblk::vmpolicy`).
pub(crate) fn backend_for(
    x: &CellCtx,
    disk: &std::path::Path,
    dir: &std::path::Path,
    cleanup: &mut Cleanup,
) -> Result<Option<Backend>> {
    if x.c.coordination != CoordMode::VhostIoprio {
        return Ok(None);
    }
    let o = x.d.o;
    let cgroup = if o.vm.own_group {
        agent::sys::cgroup_v1_mount("blkio").map(|root| {
            root.join(format!(
                "tandem-bench-{}-{}-disk",
                std::process::id(),
                vm::VM_NAME
            ))
        })
    } else {
        None
    };
    progress(
        o,
        &format!(
            "cell {}/{} [{}]: starting tandem vhost-blk",
            x.ci + 1,
            x.d.cells.len(),
            x.c.key()
        ),
    );
    Backend::start(
        &BackendSpec {
            exe: &o.exe,
            image: disk,
            dir,
            cgroup,
        },
        cleanup,
    )
    .map(Some)
}

/// `vhost-ioprio` in the guest: guestd marks each starting process's I/O
/// priority with [`MARK_CLASS`] while its rules judge it urgent, up to the
/// cell's start timeout: a start slowed by the host's load outlasts
/// guestd's default lease (5 s), and a mark that ends mid-start leaves the
/// rest of the start unfavoured (first run here, 2026-11-26: about 180 of
/// xterm's requests per start arrived as RT). It talks to no host daemon.
pub(crate) fn start_marking(guest: &mut vm::Guest, timeout_s: f64) -> Result<()> {
    let lease_ms = (timeout_s * 1000.0).ceil() as u64;
    guest
        .call(
            json!({"op": "guestd", "lease_ms": 1000, "mark": MARK_CLASS, "mark_lease_ms": lease_ms}),
            None,
        )
        .map(drop)
}

/// The backend died during repetition `rep`: the guest's disk has stalled,
/// so the cell ends here with the repetitions done before, marked in
/// results.json (`meta.extra.failed_cells`, with the reason); the guest and
/// the workers are stopped and the run goes on with the next cell.
pub(crate) fn fail_cell(
    x: &CellCtx,
    guest: vm::Guest,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
    why: &str,
    rep: u32,
) {
    tracing::warn!(
        "cell [{}] failed in repetition {}: {why}",
        x.c.key(),
        rep + 1
    );
    cleanup.stop_workers();
    let _ = cleanup.restore_threads();
    // QEMU is killed (its disk no longer answers, so no clean shutdown).
    drop(guest);
    let entry = json!({
        "cell": x.c.key(),
        "repetition": rep + 1,
        "repetitions_kept": rep,
        "reason": why,
    });
    match extra
        .entry("failed_cells")
        .or_insert_with(|| json!([]))
        .as_array_mut()
    {
        Some(a) => a.push(entry),
        None => {
            extra.insert("failed_cells".into(), json!([entry]));
        }
    }
}
