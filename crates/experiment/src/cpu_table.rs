//! Text tables of the CPU model's cells (latency, hot start-up), as the
//! coordinated task scheduling study's Figure 1: one table per (runner,
//! benchmark, metric, platform, CPU schedulers, coordination); rows are the
//! total number of busy loops (host + guest), columns "no guest" (native
//! cells) and each guest load.

use crate::result::CellResult;
use crate::table::{cell_text, render_grid};

/// Key of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) runner: String,
    pub(crate) benchmark: String,
    pub(crate) app: String,
    pub(crate) metric: String,
    pub(crate) platform: String,
    pub(crate) scheds: String,
    pub(crate) coordination: String,
}

pub(crate) fn key_of(r: &CellResult) -> Key {
    let c = &r.cell.cpu;
    let scheds = if c.guest_cpu_sched.is_some_and(|g| g != c.host_sched()) {
        format!("host {}, guest {}", c.host_sched(), c.guest_sched())
    } else {
        c.host_sched().to_string()
    };
    Key {
        runner: r.runner.clone(),
        benchmark: r.cell.benchmark.as_str().into(),
        app: r.cell.app.clone(),
        metric: r.metric.label().into(),
        platform: c.platform.clone(),
        scheds,
        coordination: r.cell.coordination.to_string(),
    }
}

/// The column of a result: `None` for "no guest", else the guest's loops.
pub(crate) fn column(r: &CellResult) -> Option<u8> {
    (!r.cell.is_native()).then_some(r.cell.cpu.guest_cpu_load)
}

pub(crate) fn total(r: &CellResult) -> u32 {
    u32::from(r.cell.cpu.host_cpu_load) + column(r).map_or(0, u32::from)
}

/// Renders the tables, in order of first appearance; a missing combination
/// is blank.
pub fn render_cpu_tables(results: &[&CellResult]) -> String {
    let mut keys: Vec<Key> = Vec::new();
    for r in results {
        let k = key_of(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out = String::new();
    for key in &keys {
        let members: Vec<&CellResult> = results
            .iter()
            .copied()
            .filter(|r| key_of(r) == *key)
            .collect();
        let mut cols: Vec<Option<u8>> = members.iter().map(|r| column(r)).collect();
        cols.sort();
        cols.dedup();
        let mut totals: Vec<u32> = members.iter().map(|r| total(r)).collect();
        totals.sort();
        totals.dedup();
        if !out.is_empty() {
            out.push('\n');
        }
        let what = if key.benchmark == "startup" {
            format!("hot startup of {}", key.app)
        } else {
            key.benchmark.clone()
        };
        out.push_str(&format!(
            "== {} | {what} | CPU {} | coordination {} | {} ==\n{}, mean over repetitions; \
             rows: busy loops in host and guest; columns: loops in the guest\n",
            key.platform, key.scheds, key.coordination, key.runner, key.metric
        ));
        let mut grid = vec![std::iter::once("total loops".to_string())
            .chain(cols.iter().map(|c| match c {
                None => "no guest".to_string(),
                Some(n) => format!("{n} guest"),
            }))
            .collect::<Vec<_>>()];
        for t in &totals {
            let mut row = vec![t.to_string()];
            for c in &cols {
                let cell = members
                    .iter()
                    .find(|r| total(r) == *t && column(r) == *c)
                    .map(|r| cell_text(r))
                    .unwrap_or_default();
                row.push(cell);
            }
            grid.push(row);
        }
        out.push_str(&render_grid(&grid, 1));
    }
    out
}
