//! `tandem advise`: a host and a guest I/O scheduler for an FFSB-style
//! profile, from a simulated sweep it runs itself, from a scenario run in the
//! simulator, or from results directories (real or simulated). The decision
//! is `experiment::advise`'s; this file gathers the figures and prints.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use experiment::advise::{self, Objective, Query, Row, Source};
use experiment::{Cell, CellResult, Device, Scenario};

use crate::Failure;

#[derive(Args)]
pub struct AdviseArgs {
    /// The profile: randread, randwrite, seqread, seqwrite or mixed (with or
    /// without the ffsb- prefix).
    #[arg(long)]
    profile: Option<String>,
    /// The profile's threads (1 to 64).
    #[arg(long, default_value_t = 8)]
    threads: i64,
    /// The device preset the workload runs on.
    #[arg(long, default_value = "hdd-1.8in")]
    device: String,
    /// What to optimize: the rate, the p99 latency, or the balance of both.
    #[arg(long, default_value = "throughput", value_parser = ["throughput", "latency", "fair"])]
    objective: String,
    /// A scenario of profile cells: each of its profile x threads x device
    /// queries is run in the simulator (its own host and guest schedulers)
    /// and advised on.
    #[arg(long, conflicts_with = "results")]
    scenario: Option<PathBuf>,
    /// Results directories (of `tandem bench run` or `tandem sim run`) to
    /// decide from instead of a sweep; real results are preferred over
    /// simulated ones for the same query.
    #[arg(long, num_args = 1..)]
    results: Vec<PathBuf>,
    /// Repetitions of each simulated cell (their t-intervals make the
    /// confidence).
    #[arg(long, default_value_t = 3)]
    repetitions: u32,
    /// Simulated seconds of each repetition (default: 10 on a rotational
    /// device, 0.5 on flash, where 0.5 s is already tens of thousands of
    /// operations and 10 s would take minutes to simulate).
    #[arg(long)]
    duration_s: Option<f64>,
}

/// `tandem advise`.
pub fn run(a: AdviseArgs) -> Result<(), Failure> {
    let objective: Objective = a.objective.parse().map_err(Failure::Usage)?;
    let started = Instant::now();
    let (queries, results) = if !a.results.is_empty() {
        from_results(&a)?
    } else if let Some(path) = &a.scenario {
        from_scenario(&a, path)?
    } else {
        let q = query_of(&a)?;
        let rotational = devmodel::preset(q.device.name())
            .map(|m| m.info().rotational)
            .unwrap_or(true);
        let duration = a.duration_s.unwrap_or(if rotational { 10.0 } else { 0.5 });
        let text = advise::sweep_scenario(&q, a.repetitions.max(1), duration);
        let s = Scenario::from_toml_str(&text, &sim::bench::accepted())
            .map_err(|e| Failure::Usage(format!("the sweep's scenario: {e}")))?;
        (vec![q], simulate(&s.cells())?)
    };
    if queries.is_empty() {
        return Err(Failure::Usage(
            "no VM profile cells to advise from (benchmark = \"profile\" with guest schedulers)"
                .into(),
        ));
    }
    for q in &queries {
        let rows = rows_for(&results, q);
        if rows.is_empty() {
            println!("{}: no host x guest figures\n", q.describe());
            continue;
        }
        let advice = advise::decide(rows, objective).map_err(Failure::Run)?;
        println!("{}", advise::render(&advice, &q.describe(), q.unit()));
    }
    eprintln!(
        "tandem advise: {} quer{} in {:.1} s",
        queries.len(),
        if queries.len() == 1 { "y" } else { "ies" },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The rows of `q`: the real ones when there are any, else the simulated.
fn rows_for(results: &[CellResult], q: &Query) -> Vec<Row> {
    let rows = advise::rows_from_results(results, q);
    if rows.iter().any(|r| r.source == Source::Real) {
        rows.into_iter()
            .filter(|r| r.source == Source::Real)
            .collect()
    } else {
        rows
    }
}

/// The query of `--profile`, `--threads` and `--device`, checked.
fn query_of(a: &AdviseArgs) -> Result<Query, Failure> {
    let name = a.profile.as_deref().ok_or_else(|| {
        Failure::Usage(
            "--profile is needed (or --scenario, or --results); e.g. --profile randread".into(),
        )
    })?;
    let profile = advise::parse_profile(name).map_err(Failure::Usage)?;
    let threads = experiment::profile::check_threads(a.threads)
        .map_err(|e| Failure::Usage(format!("--threads: {e}")))?;
    let device: Device = a
        .device
        .parse()
        .map_err(|e| Failure::Usage(format!("--device: {e}")))?;
    Ok(Query {
        profile,
        threads,
        device,
    })
}

/// `--results`: every results.json; the queries are `--profile`'s, or all
/// that the results hold.
fn from_results(a: &AdviseArgs) -> Result<(Vec<Query>, Vec<CellResult>), Failure> {
    let mut all = Vec::new();
    for dir in &a.results {
        let path = if dir.is_dir() {
            dir.join("results.json")
        } else {
            dir.clone()
        };
        let (_, cells) = experiment::read_results_json(&path).map_err(Failure::Usage)?;
        all.extend(cells);
    }
    let queries = if a.profile.is_some() {
        vec![query_of(a)?]
    } else {
        advise::queries_in(&all)
    };
    Ok((queries, all))
}

/// `--scenario`: its profile cells in the simulator, every query advised.
fn from_scenario(
    a: &AdviseArgs,
    path: &std::path::Path,
) -> Result<(Vec<Query>, Vec<CellResult>), Failure> {
    let s = Scenario::load(path, &sim::bench::accepted())
        .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
    let mut cells: Vec<Cell> = s
        .cells()
        .into_iter()
        .filter(|c| !c.is_native() && c.host_workload.is_none())
        .collect();
    if a.profile.is_some() {
        let q = query_of(a)?;
        cells.retain(|c| {
            c.device == q.device
                && c.profile
                    .is_some_and(|p| p.profile == q.profile && p.threads == q.threads)
        });
    }
    let results = simulate(&cells)?;
    Ok((advise::queries_in(&results), results))
}

/// A worker's cells: their indices and results.
type Done = Vec<(usize, Vec<CellResult>)>;

/// The cells in the simulator, one worker per core, each cell's results as
/// `tandem sim run` makes them.
fn simulate(cells: &[Cell]) -> Result<Vec<CellResult>, Failure> {
    let opts = sim::bench::SimOptions::default();
    let jobs = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, cells.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outs: Vec<Result<Done, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(c) = cells.get(i) else { break };
                        let runs = (0..c.repetitions)
                            .map(|rep| sim::bench::run_repetition(c, &opts, rep))
                            .collect::<Result<Vec<_>, String>>()
                            .map_err(|e| format!("cell {}: {e}", c.key()))?;
                        mine.push((i, experiment::latency::cell_results(c, "sim", runs)));
                    }
                    Ok(mine)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect()
    });
    let mut done = Vec::new();
    for o in outs {
        done.extend(o.map_err(Failure::Run)?);
    }
    // In the cells' order, whatever worker ran them.
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().flat_map(|(_, r)| r).collect())
}
