//! Text tables of results (`table.txt`).

use crate::naming::format_g;
use crate::other_vms::NO_OTHER_VMS;
use crate::result::{CellResult, Metric};
use crate::vocab::CoordMode;

/// Key of one table: results sharing it go into the same table. VM cells are keyed by
/// everything but the guest scheduler and both workloads (the paper's layout); native
/// cells by everything but the host scheduler, workload and coordination (S's layout).
#[derive(Clone, Debug, PartialEq, Eq)]
struct TableKey {
    runner: String,
    device: String,
    benchmark: String,
    app: String,
    metric: Metric,
    other_vms: String,
    /// `Some((host scheduler, coordination))` for VM cells.
    vm: Option<(String, String)>,
}

fn key_of(r: &CellResult) -> TableKey {
    let c = &r.cell;
    TableKey {
        runner: r.runner.clone(),
        device: c.device.to_string(),
        benchmark: c.benchmark.as_str().to_string(),
        app: c.app.clone(),
        metric: r.metric,
        other_vms: c.other_vms.name(),
        vm: (!c.is_native()).then(|| (c.host_sched.to_string(), c.coordination.to_string())),
    }
}

fn push_unique<T: PartialEq + Clone>(v: &mut Vec<T>, x: &T) {
    if !v.contains(x) {
        v.push(x.clone());
    }
}

/// The text of a cell in a table: the mean with 2 decimals (e.g. `2.31`), `X` when
/// the cell has any timeout, `-` when it has no value.
pub fn cell_text(r: &CellResult) -> String {
    if r.timeouts() > 0 {
        return "X".to_string();
    }
    let s = r.summary();
    if s.n == 0 || !s.mean.is_finite() {
        "-".to_string()
    } else {
        format!("{:.2}", s.mean)
    }
}

/// The title and note lines of a table.
fn table_head(key: &TableKey, members: &[&CellResult], layout: &str) -> String {
    let mut setup = match &key.vm {
        Some((hs, coord)) => {
            let mut s = format!("VM on host {hs}");
            if coord != CoordMode::Off.name() {
                s.push_str(&format!(", coordination {coord}"));
            }
            s
        }
        None => "native".to_string(),
    };
    if key.other_vms != NO_OTHER_VMS {
        setup.push_str(&format!(", other VMs {}", key.other_vms));
    }
    let what = if key.benchmark == "startup" {
        format!("startup of {}", key.app)
    } else {
        key.benchmark.clone()
    };
    let mut note = format!("{}, mean over repetitions; {layout}", key.metric.label());
    if key.metric == Metric::StartupS {
        let max_timeout = members
            .iter()
            .map(|r| r.cell.timeout_s)
            .fold(0.0_f64, f64::max);
        note.push_str(&format!(
            "; X: a start hit the {} s timeout",
            format_g(max_timeout)
        ));
    }
    format!(
        "== {} | {} | {} | {} ==\n{note}\n",
        key.device, what, setup, key.runner
    )
}

/// The host's load as a table row names it: its workload, and its busy
/// loops when it has some (`host_cpu_load` beside a guest's I/O).
fn host_load(c: &crate::Cell) -> String {
    match c.cpu.host_cpu_load {
        0 => c.host_workload.name(),
        n => format!("{} + {n} loops", c.host_workload.name()),
    }
}

/// A VM table in the layout of Figure 1 of the CLOUD 2014 paper: rows are the host
/// workloads, each with one line per guest scheduler (the paper's series); columns
/// are the guest workloads (the paper's x axis).
fn vm_table(members: &[&CellResult]) -> Vec<Vec<String>> {
    let (mut host_wls, mut guest_scheds, mut guest_wls) = (Vec::new(), Vec::new(), Vec::new());
    for r in members {
        push_unique(&mut host_wls, &host_load(&r.cell));
        push_unique(
            &mut guest_scheds,
            &r.cell.get("guest_sched").unwrap_or_default(),
        );
        push_unique(
            &mut guest_wls,
            &r.cell.get("guest_workload").unwrap_or_default(),
        );
    }
    let mut header = vec!["host workload".to_string(), "guest sched".to_string()];
    header.extend(guest_wls.iter().cloned());
    let mut grid = vec![header];
    for hw in &host_wls {
        for (i, gs) in guest_scheds.iter().enumerate() {
            let mut line = vec![if i == 0 { hw.clone() } else { String::new() }, gs.clone()];
            for gw in &guest_wls {
                let text = members
                    .iter()
                    .find(|r| {
                        host_load(&r.cell) == *hw
                            && r.cell.guest_sched.map(|g| g.name()) == Some(gs.as_str())
                            && r.cell.guest_workload.map(|w| w.name()).as_ref() == Some(gw)
                    })
                    .map(|r| cell_text(r))
                    .unwrap_or_default();
                line.push(text);
            }
            grid.push(line);
        }
    }
    grid
}

/// A native table, as S's tables: rows are the workloads, columns the schedulers
/// (`sched/coordination` when the table holds several coordination modes).
fn native_table(members: &[&CellResult]) -> (Vec<Vec<String>>, bool) {
    let (mut rows, mut scheds, mut coords) = (Vec::new(), Vec::new(), Vec::new());
    let mut cols: Vec<(String, String)> = Vec::new();
    for r in members {
        push_unique(&mut rows, &r.cell.host_workload.name());
        push_unique(&mut scheds, &r.cell.host_sched.to_string());
        push_unique(&mut coords, &r.cell.coordination.to_string());
        push_unique(
            &mut cols,
            &(
                r.cell.host_sched.to_string(),
                r.cell.coordination.to_string(),
            ),
        );
    }
    // Columns grouped by scheduler, then coordination, in first-appearance order.
    cols.sort_by_key(|(s, c)| {
        (
            scheds.iter().position(|x| x == s),
            coords.iter().position(|x| x == c),
        )
    });
    let several = coords.len() > 1;
    let mut header = vec!["host workload".to_string()];
    header.extend(cols.iter().map(|(s, c)| {
        if several {
            format!("{s}/{c}")
        } else {
            s.clone()
        }
    }));
    let mut grid = vec![header];
    for row in &rows {
        let mut line = vec![row.clone()];
        for (s, c) in &cols {
            let text = members
                .iter()
                .find(|r| {
                    r.cell.host_workload.name() == *row
                        && r.cell.host_sched.name() == s
                        && r.cell.coordination.name() == c
                })
                .map(|r| cell_text(r))
                .unwrap_or_default();
            line.push(text);
        }
        grid.push(line);
    }
    (grid, several)
}

/// Renders the tables, in order of first appearance of their keys:
///
/// - VM cells: one table per (runner, device, benchmark, app, host scheduler,
///   coordination, other VMs) in the layout of the CLOUD 2014 paper's Figure 1 (guest
///   workload x host workload, guest scheduler as series; see `vm_table`);
/// - native cells: one table per (runner, device, benchmark, app, other VMs), rows host
///   workloads and columns host schedulers, as S's tables.
///
/// Cells per [`cell_text`]; a missing combination is blank. When the results hold
/// several coordination modes, [`render_coordination_tables`] follows.
///
/// The CPU model's cells (latency, hot start-up) get tables of their own
/// ([`crate::cpu_table`]), after the others.
pub fn render_tables(all: &[CellResult]) -> String {
    // The readers-hashers cells have a table of their own.
    let (rh, all): (Vec<&CellResult>, Vec<&CellResult>) = all
        .iter()
        .partition(|r| crate::readers_hashers::is_readers_hashers(r));
    let all: Vec<CellResult> = all.into_iter().cloned().collect();
    let mut out = render_other_tables(&all);
    if !rh.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&crate::readers_hashers::render_table(&rh));
    }
    out
}

fn render_other_tables(all: &[CellResult]) -> String {
    // The CPU model's cells get tables of their own (Figure 1 of the
    // coordinated task scheduling study), after the others.
    let (cpu, io): (Vec<&CellResult>, Vec<&CellResult>) =
        all.iter().partition(|r| r.cell.on_cpu_model());
    let mut out = if cpu.is_empty() {
        render_io_tables(all)
    } else {
        render_io_tables(&io.into_iter().cloned().collect::<Vec<_>>())
    };
    if !cpu.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&crate::cpu_table::render_cpu_tables(&cpu));
    }
    out
}

fn render_io_tables(results: &[CellResult]) -> String {
    let mut keys: Vec<TableKey> = Vec::new();
    for r in results {
        push_unique(&mut keys, &key_of(r));
    }
    let mut out = String::new();
    for (ti, key) in keys.iter().enumerate() {
        let members: Vec<&CellResult> = results.iter().filter(|r| key_of(r) == *key).collect();
        if ti > 0 {
            out.push('\n');
        }
        let (grid, left) = if key.vm.is_some() {
            let layout = "rows: host workload and guest scheduler; columns: guest workload";
            out.push_str(&table_head(key, &members, layout));
            (vm_table(&members), 2)
        } else {
            let (grid, several) = native_table(&members);
            let layout = if several {
                "rows: host workload; columns: host scheduler/coordination"
            } else {
                "rows: host workload; columns: host scheduler"
            };
            out.push_str(&table_head(key, &members, layout));
            (grid, 1)
        };
        out.push_str(&render_grid(&grid, left));
    }
    out.push_str(&render_coordination_tables(results));
    out
}

/// Aligned text of a grid: the first `left` columns (labels) left-aligned, the others
/// (numbers) right-aligned.
pub(crate) fn render_grid(grid: &[Vec<String>], left: usize) -> String {
    let mut out = String::new();
    let ncols = grid.first().map_or(0, |l| l.len());
    let widths: Vec<usize> = (0..ncols)
        .map(|i| grid.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
        .collect();
    for line in grid {
        let mut text = String::new();
        for (i, field) in line.iter().enumerate() {
            if i == 0 {
                text.push_str(&format!("{:<w$}", field, w = widths[0]));
            } else if i < left {
                text.push_str(&format!("  {:<w$}", field, w = widths[i]));
            } else {
                text.push_str(&format!("  {:>w$}", field, w = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// When the results hold more than one coordination mode: one more table per (runner,
/// device, benchmark, app), with every mode side by side. Rows are the VM setups
/// (`guest sched / guest workload / host sched host workload`, plus the other VMs when
/// there are some), columns the coordination modes, in order of first appearance. Empty
/// when there is a single mode.
pub fn render_coordination_tables(results: &[CellResult]) -> String {
    let mut modes: Vec<String> = Vec::new();
    for r in results {
        push_unique(&mut modes, &r.cell.coordination.to_string());
    }
    if modes.len() < 2 {
        return String::new();
    }
    type Key = (String, String, String, String, Metric);
    let key = |r: &CellResult| -> Key {
        (
            r.runner.clone(),
            r.cell.device.to_string(),
            r.cell.benchmark.as_str().to_string(),
            r.cell.app.clone(),
            r.metric,
        )
    };
    let row_of = |r: &CellResult| {
        let c = &r.cell;
        let mut row = match (&c.guest_sched, &c.guest_workload) {
            (Some(gs), Some(gw)) => format!("{gs} / {gw} / {} {}", c.host_sched, host_load(c)),
            _ => format!("native / {} {}", c.host_sched, c.host_workload),
        };
        if c.has_other_vms() {
            row.push_str(&format!(" / VMs {}", c.other_vms));
        }
        row
    };
    let mut keys: Vec<Key> = Vec::new();
    for r in results {
        push_unique(&mut keys, &key(r));
    }
    let mut out = String::new();
    for k in &keys {
        let members: Vec<&CellResult> = results.iter().filter(|r| key(r) == *k).collect();
        let mut rows: Vec<String> = Vec::new();
        for r in &members {
            push_unique(&mut rows, &row_of(r));
        }
        let what = if k.2 == "startup" {
            format!("startup of {}", k.3)
        } else {
            k.2.clone()
        };
        out.push_str(&format!(
            "\n== {} | {} | coordination modes side by side | {} ==\n",
            k.1, what, k.0
        ));
        out.push_str(&format!(
            "{}, mean over repetitions; rows: guest scheduler / guest workload / host \
             scheduler and workload; columns: coordination mode; X: a start timed out\n",
            k.4.label()
        ));
        let mut grid = vec![std::iter::once("VM setup".to_string())
            .chain(modes.iter().cloned())
            .collect::<Vec<_>>()];
        for row in &rows {
            let mut line = vec![row.clone()];
            for m in &modes {
                let text = members
                    .iter()
                    .find(|r| row_of(r) == *row && r.cell.coordination.name() == m)
                    .map(|r| cell_text(r))
                    .unwrap_or_default();
                line.push(text);
            }
            grid.push(line);
        }
        out.push_str(&render_grid(&grid, 1));
    }
    out
}
