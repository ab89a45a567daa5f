//! Text tables of results (`table.txt`).

use crate::naming::format_g;
use crate::other_vms::NO_OTHER_VMS;
use crate::result::{CellResult, Metric};

/// Key of one table: results sharing it go into the same table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TableKey {
    runner: String,
    device: String,
    benchmark: String,
    app: String,
    metric: Metric,
    guest_sched: Option<String>,
    guest_workload: Option<String>,
    other_vms: String,
}

fn key_of(r: &CellResult) -> TableKey {
    TableKey {
        runner: r.runner.clone(),
        device: r.cell.device.clone(),
        benchmark: r.cell.benchmark.as_str().to_string(),
        app: r.cell.app.clone(),
        metric: r.metric,
        guest_sched: r.cell.guest_sched.clone(),
        guest_workload: r.cell.guest_workload.clone(),
        other_vms: r.cell.other_vms.clone(),
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

/// Renders the tables: one per (runner, device, benchmark, app, guest scheduler, guest
/// workload, other VMs), in order of first appearance; the title names the other VMs
/// only when there are some. Rows are host workloads, columns host
/// schedulers (`sched/coordination` when there is more than one coordination mode in
/// the table), both in order of first appearance; cells per [`cell_text`]; a missing
/// combination is blank.
pub fn render_tables(all: &[CellResult]) -> String {
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
        let mut rows: Vec<String> = Vec::new();
        let mut scheds: Vec<String> = Vec::new();
        let mut coords: Vec<String> = Vec::new();
        for r in &members {
            push_unique(&mut rows, &r.cell.host_workload);
            push_unique(&mut scheds, &r.cell.host_sched);
            push_unique(&mut coords, &r.cell.coordination);
        }
        let mut cols: Vec<(String, String)> = Vec::new();
        for r in &members {
            push_unique(
                &mut cols,
                &(r.cell.host_sched.clone(), r.cell.coordination.clone()),
            );
        }
        // Columns grouped by scheduler, then coordination, in first-appearance order.
        cols.sort_by_key(|(s, c)| {
            (
                scheds.iter().position(|x| x == s),
                coords.iter().position(|x| x == c),
            )
        });
        let col_label = |(s, c): &(String, String)| {
            if coords.len() > 1 {
                format!("{s}/{c}")
            } else {
                s.clone()
            }
        };

        if ti > 0 {
            out.push('\n');
        }
        let mut guest = match (&key.guest_sched, &key.guest_workload) {
            (Some(gs), Some(gw)) => format!("guest {gs}, guest workload {gw}"),
            _ => "native".to_string(),
        };
        if key.other_vms != NO_OTHER_VMS {
            guest.push_str(&format!(", other VMs {}", key.other_vms));
        }
        let what = if key.benchmark == "startup" {
            format!("startup of {}", key.app)
        } else {
            key.benchmark.clone()
        };
        out.push_str(&format!(
            "== {} | {} | {} | {} ==\n",
            key.device, what, guest, key.runner
        ));
        let max_timeout = members
            .iter()
            .map(|r| r.cell.timeout_s)
            .fold(0.0_f64, f64::max);
        let mut note = format!(
            "{}, mean over repetitions; rows: host workload; columns: host scheduler",
            key.metric.label()
        );
        if coords.len() > 1 {
            note.push_str("/coordination");
        }
        if key.metric == Metric::StartupS {
            note.push_str(&format!(
                "; X: a start hit the {} s timeout",
                format_g(max_timeout)
            ));
        }
        out.push_str(&note);
        out.push('\n');

        let mut grid: Vec<Vec<String>> = Vec::new();
        let mut header = vec!["host workload".to_string()];
        header.extend(cols.iter().map(col_label));
        grid.push(header);
        for row in &rows {
            let mut line = vec![row.clone()];
            for (s, c) in &cols {
                let text = members
                    .iter()
                    .find(|r| {
                        r.cell.host_workload == *row
                            && r.cell.host_sched == *s
                            && r.cell.coordination == *c
                    })
                    .map(|r| cell_text(r))
                    .unwrap_or_default();
                line.push(text);
            }
            grid.push(line);
        }
        out.push_str(&render_grid(&grid));
    }
    out.push_str(&render_coordination_tables(results));
    out
}

/// Aligned text of a grid: the first column left-aligned, the others right-aligned.
pub(crate) fn render_grid(grid: &[Vec<String>]) -> String {
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
        push_unique(&mut modes, &r.cell.coordination);
    }
    if modes.len() < 2 {
        return String::new();
    }
    type Key = (String, String, String, String, Metric);
    let key = |r: &CellResult| -> Key {
        (
            r.runner.clone(),
            r.cell.device.clone(),
            r.cell.benchmark.as_str().to_string(),
            r.cell.app.clone(),
            r.metric,
        )
    };
    let row_of = |r: &CellResult| {
        let c = &r.cell;
        let mut row = match (&c.guest_sched, &c.guest_workload) {
            (Some(gs), Some(gw)) => format!("{gs} / {gw} / {} {}", c.host_sched, c.host_workload),
            _ => format!("native / {} {}", c.host_sched, c.host_workload),
        };
        if c.other_vms != NO_OTHER_VMS {
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
                    .find(|r| row_of(r) == *row && r.cell.coordination == *m)
                    .map(|r| cell_text(r))
                    .unwrap_or_default();
                line.push(text);
            }
            grid.push(line);
        }
        out.push_str(&render_grid(&grid));
    }
    out
}
