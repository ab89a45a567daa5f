//! Application models. The trace format and the shipped presets live in the
//! `experiment` crate, shared with the real runner, so that both replay the
//! same start-up.

pub use experiment::apptrace::{app_of, preset, preset_names, AppTrace, TraceFile, TraceRead};
