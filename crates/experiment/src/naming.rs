//! S-style per-cell stat files: names and contents.
//!
//! Native cells get exactly the names of Paolo Valente's S suite:
//! `comm_startup_lat.sh` writes `<sched>-<N>r<M>w-<pattern>-lat_thr_stat.txt` and
//! `throughput-sync.sh` writes `<sched>-<N>r<M>w-<pattern>-<D>sec-aggthr_stat.txt`.
//! VM cells extend them backward-compatibly (the guest part comes first, so S's
//! `*<sched>-<workload>*` globs still find them; other VMs and coordination go right
//! before the suffix); see [`stat_file_name`].

use crate::cell::Cell;
use crate::result::{CellResult, Metric, RunResult};
use crate::s_suite::{sections, COLUMNS_NOTE};
use crate::scenario::Benchmark;
use crate::workload::WorkloadSpec;

/// Formats seconds for file names as S does for integers (`60`), else shortest (`0.5`).
pub(crate) fn secs(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Makes a string safe as one path component: characters other than ASCII letters,
/// digits, `.`, `_`, `-`, `+` become `_`; leading `/` are dropped (`/dev/sdb` ->
/// `dev_sdb`); `.`/`..`/empty become `_`.
pub fn sanitize_component(s: &str) -> String {
    let t = s.trim_start_matches('/');
    let out: String = t
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out == "." || out == ".." {
        "_".to_string()
    } else {
        out
    }
}

/// The stat file name of a cell.
///
/// ```text
/// native start-up:    <host_sched>-<hw>-lat_thr_stat.txt                 (S, exactly)
/// native throughput:  <host_sched>-<hw>-<D>sec-aggthr_stat.txt           (S, exactly)
/// VM start-up:        <guest_sched>-<gw>-host-<host_sched>-<hw>-lat_thr_stat.txt
/// VM throughput:      <guest_sched>-<gw>-host-<host_sched>-<hw>-<D>sec-aggthr_stat.txt
/// ```
///
/// `<hw>`/`<gw>` are the host/guest workloads in S form `<N>r<M>w-<seq|rand>` (idle is
/// `0r0w-seq`, as in S); `<D>` is `duration_s` (an integer when whole). Then, in this
/// order, right before the `-lat_thr_stat.txt` / `-<D>sec-aggthr_stat.txt` suffix (so
/// S's `*stat.txt` globs still match):
///
/// - when `other_vms` is not `none`: `-vms-<other_vms>`, the canonical value with its
///   commas written as `+` (`-vms-3x5r-seq`, `-vms-1r-seq+2x5r-rand`). The workloads
///   keep tandem's names, not S's, so S's `*<sched>-<NrMw-pattern>*` globs never match
///   inside this part;
/// - when `coordination` is not `off`: `-coord-<mode>`.
///
/// e.g. `bfq-5r0w-seq-host-bfq-1r0w-seq-vms-3x5r-seq-coord-vbfq-lat_thr_stat.txt`.
/// Cells without other VMs keep the names they had before `other_vms` existed. Every
/// component is passed through [`sanitize_component`] (a no-op for kernel scheduler
/// names, tandem workload names and `+`).
pub fn stat_file_name(cell: &Cell) -> String {
    let mut name = String::new();
    if let (Some(gs), Some(gw)) = (cell.guest_sched, cell.guest_workload) {
        name.push_str(&sanitize_component(gs.name()));
        name.push('-');
        name.push_str(&gw.s_name());
        name.push_str("-host-");
    }
    name.push_str(&sanitize_component(cell.host_sched.name()));
    name.push('-');
    name.push_str(&cell.host_workload.s_name());
    if cell.has_other_vms() {
        name.push_str("-vms-");
        name.push_str(&sanitize_component(
            &cell.other_vms.name().replace(',', "+"),
        ));
    }
    // CPU model cells (latency, hot start-up): platform, CPU schedulers and
    // busy loops; nothing for other cells.
    let cpu = cell.cpu.file_part(!cell.is_native());
    if !cpu.is_empty() {
        name.push_str(&sanitize_component(&cpu));
    }
    if !cell.coordination.is_off() {
        name.push_str("-coord-");
        name.push_str(&sanitize_component(cell.coordination.name()));
    }
    if !cell.hypervisor.is_default() {
        name.push('-');
        name.push_str(cell.hypervisor.name());
    }
    match cell.benchmark {
        Benchmark::Profile => {
            if let Some(p) = cell.profile {
                name.push_str(&p.file_part());
            }
            name.push('-');
            name.push_str(&secs(cell.duration_s));
            name.push_str("sec-");
            name.push_str(crate::Metric::for_cell(cell).as_str());
            name.push_str("_stat.txt");
        }
        Benchmark::Startup => name.push_str("-lat_thr_stat.txt"),
        Benchmark::Latency => name.push_str("-cyclictest-avg_stat.txt"),
        Benchmark::Throughput => {
            name.push('-');
            name.push_str(&secs(cell.duration_s));
            name.push_str("sec-aggthr_stat.txt");
        }
    }
    name
}

/// The stat file name of one result: [`stat_file_name`], with the latency
/// benchmark's second metric (`latency_max_us`) in a file of its own
/// (`-cyclictest-max_stat.txt`).
pub fn result_stat_file_name(cell: &Cell, metric: Metric) -> String {
    let name = stat_file_name(cell);
    match metric {
        Metric::LatencyMaxUs => {
            name.replace("-cyclictest-avg_stat.txt", "-cyclictest-max_stat.txt")
        }
        Metric::IoLatencyP50Ms | Metric::IoLatencyP99Ms => {
            let main = format!("sec-{}_stat.txt", Metric::for_cell(cell).as_str());
            name.replace(&main, &format!("sec-{}_stat.txt", metric.as_str()))
        }
        _ => name,
    }
}

/// C's `printf("%g", x)` (6 significant digits, trailing zeros removed), which the S
/// suite's awk scripts use for their statistics.
pub fn format_g(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Round to 6 significant digits first, to learn the decimal exponent after rounding.
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if !(-4..6).contains(&exp) {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp) as usize;
        strip_zeros(&format!("{x:.decimals$}"))
    }
}

fn strip_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

fn rw_text(w: WorkloadSpec) -> String {
    let p = w.pattern.map(|p| p.as_str()).unwrap_or("seq");
    format!("{} {p} readers and {} {p} writers", w.readers, w.writers)
}

fn app_text(app: &str) -> &str {
    app.strip_prefix("cmd:").unwrap_or(app)
}

/// The first line of a stat file, S-style: `Results for bfq, 5 xterm, 5 seq readers
/// and 0 seq writers` (start-up) or `Results for bfq, 5 seq readers and 0 seq writers`
/// (throughput). VM cells continue with `, in a VM on host scheduler cfq with 1 seq
/// readers and 0 seq writers in the host`, then `, beside 3 other VMs (3x5r-seq)` when
/// other VMs run, then `, coordination vbfq` when not off.
pub fn stat_file_header(cell: &Cell) -> String {
    let mut h = format!("Results for {}", cell.app_side_sched());
    if cell.benchmark == Benchmark::Startup {
        h.push_str(&format!(", {} {}", cell.iterations, app_text(&cell.app)));
    }
    h.push_str(&format!(", {}", rw_text(cell.app_side_workload())));
    if !cell.is_native() {
        h.push_str(&format!(
            ", in a VM on host scheduler {} with {} in the host",
            cell.host_sched,
            rw_text(cell.host_workload)
        ));
    }
    if cell.has_other_vms() {
        let n = cell.other_vms.count();
        let vms = if n == 1 { "VM" } else { "VMs" };
        h.push_str(&format!(", beside {n} other {vms} ({})", cell.other_vms));
    }
    if !cell.coordination.is_off() {
        h.push_str(&format!(", coordination {}", cell.coordination));
    }
    h
}

/// The contents of a cell's stat file, in S's layout: the header line, then 3-line
/// sections (title, column header, values), as `comm_startup_lat.sh` (4 sections:
/// latency, aggregated/read/write throughput) and `throughput-sync.sh` (3 sections:
/// aggregated/read/write throughput) write them, with the columns of
/// [`crate::s_suite::stat_lines`]. Statistics are over the per-repetition means, as in
/// the `overall_stats` file of S's `calc_overall_stats.sh`; the per-repetition files
/// are in the S tree ([`crate::s_suite::s_tree`]). The throughput sections come from
/// the runs' read and write counters ([`crate::s_suite::READ_MB_S`]) and are X
/// without them. A cell with timeouts has an X latency line (S writes no result for a
/// start that times out). Trailing lines give the number of repetitions, what the
/// columns are and, if any, the timeouts with the mean counting them as `timeout_s`.
pub fn stat_file_contents(result: &CellResult) -> String {
    let cell = &result.cell;
    let summary = result.summary();
    let timeouts = result.timeouts();
    let means = result.run_means();
    let runs: Vec<&RunResult> = result.runs.iter().collect();
    let mut out = stat_file_header(cell);
    out.push('\n');
    let latency = (timeouts == 0).then_some(means.as_slice());
    out.push_str(&sections(result.metric, latency, &means, &runs));
    out.push_str(&format!(
        "{} repetitions, statistics over the per-repetition means\n",
        summary.n
    ));
    out.push_str(COLUMNS_NOTE);
    if timeouts > 0 {
        out.push_str(&format!(
            "X: {timeouts} of {} starts hit the {} s timeout; with them counted as {} s: \
             avg {} min {} max {}\n",
            result.value_count(),
            format_g(cell.timeout_s),
            format_g(cell.timeout_s),
            format_g(summary.mean),
            format_g(summary.min),
            format_g(summary.max)
        ));
    }
    out
}
