//! The stop signals of a run (SIGINT, SIGTERM, SIGHUP): every wait of the
//! runner checks them, so that a run stops within one wait step and its
//! [`crate::Cleanup`] undoes what it changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crate::{run_err, Result};

/// Set on SIGINT, SIGTERM or SIGHUP; every wait checks it.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Default::default);

/// Route the stop signals to [`INTERRUPTED`] (once per process: a second
/// run in the same process keeps the first registration).
pub(crate) fn install_signal_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&INTERRUPTED)) {
                tracing::warn!("no handler for signal {sig}: {e}");
            }
        }
    });
}

/// An error once the run was asked to stop.
pub(crate) fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
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
