//! A run against a baseline run, cell by cell (the simulator against the real runner,
//! or two settings of one runner): `tandem report RUN --baseline BASELINE`.
//!
//! The ratio is always RUN / BASELINE. Whether a cell agrees within a tolerance does
//! not depend on which side is the baseline: the larger value over the smaller must
//! be at most `1 + tolerance` ([`within`]).

use crate::result::CellResult;

/// Ratios within this factor either way count as agreeing, by default (±25%).
pub const DEFAULT_TOLERANCE: f64 = 0.25;

/// Whether two positive values agree within `tolerance`: the larger over the
/// smaller is at most `1 + tolerance`, so that `a` against `b` and `b` against `a`
/// agree (a ratio `q` is within when `1 / (1 + tolerance) <= q <= 1 + tolerance`).
pub fn within(ratio: f64, tolerance: f64) -> bool {
    ratio > 0.0 && ratio.max(1.0 / ratio) <= 1.0 + tolerance * (1.0 + 1e-12)
}

/// One cell both runs measured.
#[derive(Clone, Debug)]
pub struct Row {
    /// The cell's key (its matrix values).
    pub key: String,
    /// The run's mean (None: a start timed out, X).
    pub run: Option<f64>,
    /// The baseline's mean (None: X).
    pub baseline: Option<f64>,
}

impl Row {
    /// `run / baseline` when both are numbers.
    pub fn ratio(&self) -> Option<f64> {
        match (self.run, self.baseline) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    }
}

/// A run set against a baseline.
#[derive(Clone, Debug)]
pub struct SideBySide {
    /// Cells both measured, in the run's order.
    pub rows: Vec<Row>,
    /// Keys of the run's cells the baseline lacks.
    pub only_run: Vec<String>,
    /// Keys of the baseline's cells the run lacks.
    pub only_baseline: Vec<String>,
}

fn value(r: &CellResult) -> Option<f64> {
    (r.timeouts() == 0).then(|| r.summary().mean)
}

fn find<'a>(results: &'a [CellResult], r: &CellResult) -> Option<&'a CellResult> {
    let key = r.cell.key();
    results
        .iter()
        .find(|o| o.metric == r.metric && o.cell.key() == key)
}

/// The mean over a cell's runs of run counter `name` (e.g. `app_cpu_s`), over the
/// runs that have it; `None` when none has.
pub fn counter_mean(r: &CellResult, name: &str) -> Option<f64> {
    let v: Vec<f64> = r
        .runs
        .iter()
        .filter_map(|run| run.counters.get(name).copied())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Matches the cells of `run` with those of `baseline` by key and metric (runner
/// aside).
pub fn compare(run: &[CellResult], baseline: &[CellResult]) -> SideBySide {
    compare_by(run, baseline, value)
}

/// As [`compare`], with each cell's mean of run counter `name` ([`counter_mean`])
/// for its value (`X` where a side lacks the counter): the two runners' CPU times
/// (`app_cpu_s`, ...) cell by cell.
pub fn compare_counter(run: &[CellResult], baseline: &[CellResult], name: &str) -> SideBySide {
    compare_by(run, baseline, |r| counter_mean(r, name))
}

fn compare_by(
    run: &[CellResult],
    baseline: &[CellResult],
    value: impl Fn(&CellResult) -> Option<f64>,
) -> SideBySide {
    let mut rows = Vec::new();
    let mut only_run = Vec::new();
    for r in run {
        match find(baseline, r) {
            Some(b) => rows.push(Row {
                key: r.cell.key(),
                run: value(r),
                baseline: value(b),
            }),
            None => only_run.push(r.cell.key()),
        }
    }
    let only_baseline = baseline
        .iter()
        .filter(|b| find(run, b).is_none())
        .map(|b| b.cell.key())
        .collect();
    SideBySide {
        rows,
        only_run,
        only_baseline,
    }
}

impl SideBySide {
    /// Keys of the cells with numbers on both sides that agree within `tolerance`.
    pub fn agreeing(&self, tolerance: f64) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.ratio().is_some_and(|q| within(q, tolerance)))
            .map(|r| r.key.as_str())
            .collect()
    }

    /// Text table: one line per cell, `X` for a cell with a timed-out start, the
    /// columns named after the runs; then the cells only one side has, and a
    /// summary.
    pub fn render(&self, run_name: &str, baseline_name: &str, tolerance: f64) -> String {
        let show = |v: Option<f64>| v.map_or("X".to_string(), |v| format!("{v:.2}"));
        let width = self
            .rows
            .iter()
            .map(|r| r.key.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let (wa, wb) = (run_name.len().max(8), baseline_name.len().max(8));
        let mut s = format!(
            "ratio = {run_name} / {baseline_name} (the baseline); within ±{}%: the larger \
             over the smaller at most {:.2}\n",
            (tolerance * 100.0).round(),
            1.0 + tolerance
        );
        s += &format!(
            "{:<width$}  {run_name:>wa$}  {baseline_name:>wb$}  {:>6}  within\n",
            "cell", "ratio"
        );
        for r in &self.rows {
            let agrees = match r.ratio() {
                Some(q) if within(q, tolerance) => "yes",
                Some(_) => "no",
                None => "",
            };
            let line = format!(
                "{:<width$}  {:>wa$}  {:>wb$}  {:>6}  {agrees}",
                r.key,
                show(r.run),
                show(r.baseline),
                r.ratio().map_or("-".to_string(), |x| format!("{x:.2}"))
            );
            s += line.trim_end();
            s.push('\n');
        }
        for m in &self.only_run {
            s += &format!("{m:<width$}  only in {run_name}\n");
        }
        for m in &self.only_baseline {
            s += &format!("{m:<width$}  only in {baseline_name}\n");
        }
        let numeric = self.rows.iter().filter(|r| r.ratio().is_some()).count();
        let agree_x = self
            .rows
            .iter()
            .filter(|r| r.run.is_none() == r.baseline.is_none())
            .count();
        s += &format!(
            "{} cells compared; {numeric} with numbers on both sides, {} within ±{}%; X agrees \
             in {agree_x} of {}; {} only in {run_name}, {} only in {baseline_name}\n",
            self.rows.len(),
            self.agreeing(tolerance).len(),
            (tolerance * 100.0).round(),
            self.rows.len(),
            self.only_run.len(),
            self.only_baseline.len()
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Metric, RunResult, Scenario};

    fn results(runner: &str, values: &[(f64, u32)]) -> Vec<CellResult> {
        let s = Scenario::from_toml_str(
            "name = \"t\"\nbenchmark = \"startup\"\napp = \"bash\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"noop\", \"cfq\", \"deadline\"]\nhost_workload = [\"5r-seq\"]\n",
            &crate::Accepted {
                devices: vec!["hdd-1.8in".parse().unwrap()],
                host_scheds: vec!["bfq".parse().unwrap(), "noop".parse().unwrap(), "cfq".parse().unwrap(), "deadline".parse().unwrap()],
                guest_scheds: Vec::new(),
                coordination: vec!["off".parse().unwrap()],
                apps: vec!["bash".into()],
                allow_cmd_apps: false,
                allow_vm: false,
            },
        )
        .unwrap();
        s.cells()
            .into_iter()
            .zip(values)
            .map(|(cell, &(v, t))| CellResult {
                cell,
                runner: runner.into(),
                metric: Metric::StartupS,
                runs: vec![RunResult {
                    values: vec![v],
                    timeouts: t,
                    ..Default::default()
                }],
            })
            .collect()
    }

    #[test]
    fn cells_match_by_key_and_x_is_kept() {
        let real = results("real", &[(3.0, 0), (60.0, 1)]);
        let sim = results("sim", &[(4.0, 0), (40.0, 0)]);
        let cmp = compare(&real, &sim);
        assert!(cmp.only_run.is_empty() && cmp.only_baseline.is_empty());
        assert_eq!(cmp.rows.len(), 2);
        assert_eq!(cmp.rows[0].ratio(), Some(0.75));
        assert_eq!(cmp.rows[1].run, None);
        let text = cmp.render("real-run", "sim-run", 0.25);
        assert!(text.contains("X") && text.contains("0.75"), "{text}");
        assert!(
            text.starts_with("ratio = real-run / sim-run (the baseline)"),
            "{text}"
        );
        assert!(text.contains("X agrees in 1 of 2"), "{text}");
        let cmp = compare(&real, &sim[..1]);
        assert_eq!(cmp.only_run.len(), 1);
        let cmp = compare(&real[..1], &sim);
        assert_eq!(cmp.only_baseline.len(), 1);
        assert!(cmp.render("a", "b", 0.25).contains("1 only in b"));
    }

    /// A counter's mean over the runs that have it, cell by cell; a side without it
    /// is X.
    #[test]
    fn counters_are_compared_by_their_mean() {
        let mut real = results("real", &[(3.0, 0), (4.0, 0)]);
        let sim = results("sim", &[(3.0, 0), (4.0, 0)]);
        let mut sim_cpu = sim.clone();
        for (r, cpu) in real.iter_mut().zip([0.02, 0.03]) {
            let mut second = r.runs[0].clone();
            r.runs[0].counters.insert("app_cpu_s".into(), cpu);
            second.counters.insert("app_cpu_s".into(), cpu * 2.0);
            r.runs.push(second);
            r.runs.push(RunResult::default());
        }
        sim_cpu[0].runs[0].counters.insert("app_cpu_s".into(), 0.03);
        assert_eq!(counter_mean(&real[0], "app_cpu_s"), Some(0.03));
        assert_eq!(counter_mean(&sim[0], "app_cpu_s"), None);
        let cmp = compare_counter(&real, &sim_cpu, "app_cpu_s");
        assert_eq!(cmp.rows[0].ratio(), Some(1.0));
        assert_eq!((cmp.rows[1].run, cmp.rows[1].baseline), (Some(0.045), None));
    }

    /// The case that made `report A B` and `report B A` disagree: 0.78 is within
    /// ±25% one way (0.75..1.25) and 1.28 is not the other way.
    #[test]
    fn agreement_does_not_depend_on_the_baseline() {
        let a = results("sim", &[(3.9, 0), (5.0, 0), (1.0, 0), (2.0, 1)]);
        let b = results("sim", &[(5.0, 0), (4.0, 0), (1.3, 0), (2.0, 0)]);
        let ab = compare(&a, &b);
        let ba = compare(&b, &a);
        for tol in [0.1, 0.25, 0.3] {
            assert_eq!(ab.agreeing(tol), ba.agreeing(tol), "tolerance {tol}");
        }
        // 5.0 / 4.0 = 1.25 is within ±25% both ways; 3.9 / 5.0 = 0.78 (1.28) is not
        let noop = ab.rows.iter().find(|r| r.run == Some(5.0)).unwrap();
        assert_eq!(ab.agreeing(0.25), vec![noop.key.as_str()]);
        assert!(within(1.25, 0.25) && within(0.8, 0.25));
        assert!(!within(0.78, 0.25) && !within(1.28, 0.25));
    }
}
