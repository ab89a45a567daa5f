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

/// `vhost-ioprio` on the host disk, for the whole cell: BFQ's
/// `strict_guarantees` 1 and `slice_idle_us` at least
/// [`agent::actuator::BOOST_SLICE_IDLE_US`], the values hostd's
/// `--bfq-idling` sets while it boosts a VM in `help-rt`
/// (`agent::actuator::BfqIdlingActuator`). Without them BFQ injects the
/// host readers' requests while it idles for the backend's RT queue, and
/// the guest's RT reads wait behind them: measured here (2026-11-26,
/// cloud2014-real, host and guest 5r-seq, load 17 to 21), xterm's mean
/// start-up under vhost-ioprio was 10.5 s and a timeout without them, 4.9 s
/// and 4.7 s with them (`--host-tunable strict_guarantees=1 --host-tunable
/// slice_idle_us=32000`). There is no daemon in this mode to set them only
/// while the guest marks a start, so they hold for the cell; the
/// scheduler's switch at the next cell and the run's journal (the
/// scheduler's record) put them back. Not BFQ (no such files): nothing.
pub(crate) fn host_idling(x: &CellCtx) -> Result<()> {
    if x.c.coordination != CoordMode::VhostIoprio {
        return Ok(());
    }
    let dir = x.ready.sb.queue.join("iosched");
    let strict = dir.join("strict_guarantees");
    let idle = dir.join("slice_idle_us");
    if !strict.exists() || !idle.exists() {
        return Ok(());
    }
    let cur: u64 = std::fs::read_to_string(&idle)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let want = cur.max(agent::actuator::BOOST_SLICE_IDLE_US);
    for (f, v) in [(&strict, 1), (&idle, want)] {
        std::fs::write(f, v.to_string())
            .map_err(|e| crate::run_err(format!("{}: {e}", f.display())))?;
    }
    Ok(())
}

/// `vhost-ioprio` in the guest: guestd marks each starting process's I/O
/// priority with [`MARK_CLASS`] while its rules judge it urgent, for at most
/// its default lease, the policy crate's mark rule
/// ([`policy::mark::MarkRule`], which the simulator's `vhost-ioprio`
/// applies too). It talks to no host daemon.
///
/// The lease used to be the cell's start timeout (60 s), because guestd's
/// earlier default (5 s) ended marks mid-start (first run here, 2026-11-26:
/// about 180 of xterm's requests per start arrived as RT). But the guest's
/// own readers, new programs started before the app, were then marked for
/// as long as their need lasted (their exec's need is extended while they
/// wait on I/O, up to 25 s), and spent the VM's RT budget before the app's
/// starts (`cloud2014-real`, guest and host 5r-seq: 21 RT requests demoted
/// for the budget, a start timed out).
pub(crate) fn start_marking(guest: &mut vm::Guest) -> Result<()> {
    guest
        .call(
            json!({"op": "guestd", "lease_ms": 1000, "mark": MARK_CLASS}),
            None,
        )
        .map(drop)
}

/// The backend died during repetition `rep` (the guest's disk has stalled),
/// or the guest itself did (QEMU exited: the guest powered off or crashed,
/// in a repetition or while it booted, `guest` then `None`), so the cell
/// ends here with the repetitions done before, marked in results.json
/// (`meta.extra.failed_cells`, with the reason); the guest and the workers
/// are stopped and the run goes on with the next cell.
pub(crate) fn fail_cell(
    x: &CellCtx,
    guest: Option<vm::Guest>,
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
    push_failed_cell(extra, entry);
}

/// Adds `entry` to results.json's `meta.extra.failed_cells`.
pub(crate) fn push_failed_cell(
    extra: &mut serde_json::Map<String, serde_json::Value>,
    entry: serde_json::Value,
) {
    let key = crate::cells::FAILED_CELLS_KEY;
    match extra.entry(key).or_insert_with(|| json!([])).as_array_mut() {
        Some(a) => a.push(entry),
        None => {
            extra.insert(key.into(), json!([entry]));
        }
    }
}
