//! The stop signals of a run (SIGINT, SIGTERM, SIGHUP): every wait of the
//! runner checks them, so that a run stops within one wait step and its
//! [`crate::Cleanup`] undoes what it changed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crate::{run_err, Result};

/// The number of the last stop signal received (SIGINT, SIGTERM or SIGHUP),
/// 0 before any; every wait checks it.
static INTERRUPTED: LazyLock<Arc<AtomicUsize>> = LazyLock::new(Default::default);

/// Route the stop signals to [`INTERRUPTED`] (once per process: a second
/// run in the same process keeps the first registration).
pub(crate) fn install_signal_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            if let Err(e) =
                signal_hook::flag::register_usize(sig, Arc::clone(&INTERRUPTED), sig as usize)
            {
                tracing::warn!("no handler for signal {sig}: {e}");
            }
        }
    });
}

/// The name of the stop signal received (`SIGINT`...), if any: what
/// results.json records as having ended the run.
pub(crate) fn received() -> Option<&'static str> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(signal_hook::low_level::signal_name(sig as i32).unwrap_or("a signal")),
    }
}

/// An error once the run was asked to stop.
pub(crate) fn check_interrupted() -> Result<()> {
    if received().is_some() {
        Err(run_err("interrupted; cleaned up"))
    } else {
        Ok(())
    }
}

/// Sleep, waking early (with an error) if the run is interrupted.
pub(crate) fn sleep(secs: f64) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    loop {
        check_interrupted()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}
