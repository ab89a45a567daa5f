//! Application models. The trace format and the shipped presets live in the
//! `experiment` crate, shared with the real runner, so that both replay the
//! same start-up.

pub use experiment::apptrace::{
    preset, preset_names, preset_with_metadata_share, AppTrace, TraceFile, TraceRead,
};
