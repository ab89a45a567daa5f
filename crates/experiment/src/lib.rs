//! Everything about experiments that does not depend on who runs them (the simulator,
//! the real runner, or published reference numbers): the scenario schema and its
//! validation, cell expansion, `--only` filters, workload names, the S suite's procedure
//! (one repetition of a cell, generic over the runner's host), the result schema,
//! statistics, S-style stat file names, text tables, plots (SVG and PNG), the output directory
//! and the comparison with published reference numbers. A pure library: it never
//! prints.
//!
//! See the crate's README.md for the scenario keys, the naming scheme and the outputs.

pub mod advise;
pub mod apptrace;
pub mod cell;
pub mod cpu;
pub mod cpu_table;
pub mod estimate;
pub mod incremental;
pub mod latency;
pub mod naming;
pub mod other_vms;
pub mod output;
pub mod paper;
pub mod plot;
pub mod procedure;
pub mod profile;
pub mod provenance;
pub mod readers_hashers;
pub mod result;
pub mod s_suite;
pub mod scenario;
pub mod side_by_side;
pub mod stats;
pub mod suite;
pub mod table;
pub mod vocab;
pub mod workload;

pub use cell::{cell_seed, fnv1a64, splitmix64, Cell, Filter};
pub use cpu::{Caches, CpuCell, CpuSched, VmLayout, ACCEPTED_VM_LAYOUTS};
pub use incremental::{first_slots, planned, prepare_out_dir, IncrementalWriter};
pub use naming::{
    format_g, sanitize_component, stat_file_contents, stat_file_header, stat_file_name,
};
pub use other_vms::{OtherVm, OtherVms, ACCEPTED_OTHER_VMS, MAX_OTHER_VMS, NO_OTHER_VMS};
pub use output::{
    parse_results_csv, parse_results_json, read_results_json, results_csv, results_json,
    stat_file_paths, write_outputs, CsvRow, CSV_COLUMNS, CSV_EXTRA_COLUMNS, RESULTS_JSON_SCHEMA,
};
pub use paper::{
    check_comparable, compare_with_reference, device_summary_line, parse_reference, read_reference,
    render_comparison, Comparison, ComparisonRow, ComparisonSummary, PaperValue, Reference,
    ReferenceCell, TandemValue,
};
pub use plot::{build_chart, idle_reference, plot_files, write_plots, Chart};
pub use profile::{Profile, ProfileCell};
pub use provenance::{Host, Provenance, OPTIONS_KEY, PROVENANCE_KEY};
pub use result::{CellResult, Finished, Metric, RunMeta, RunResult, READERS_HASHERS_METRICS};
pub use scenario::{
    Accepted, Benchmark, Matrix, Scenario, ScenarioError, MATRIX_KEYS, SCENARIO_KEYS,
};
pub use stats::{percentiles, summarize, t_quantile, IntervalNote, Percentiles, Summary};
pub use table::{cell_text, render_coordination_tables, render_tables};
pub use vocab::{CoordMode, Device, Hypervisor, IoSched};
pub use workload::{Pattern, WorkloadSpec, ACCEPTED_WORKLOADS};
