//! Two runs side by side, cell by cell (the simulator against the real runner, or any
//! two result sets): `tandem report A B` and `tandem bench compare A B`.

use crate::result::CellResult;

/// One compared cell.
#[derive(Clone, Debug)]
pub struct Row {
    /// The cell's key (its matrix values).
    pub key: String,
    /// The first results' mean (None: any start timed out, X).
    pub a: Option<f64>,
    /// The second results' mean (None: X; missing cells are not rows).
    pub b: Option<f64>,
}

impl Row {
    /// `a / b` when both are numbers.
    pub fn ratio(&self) -> Option<f64> {
        match (self.a, self.b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    }
}

fn value(r: &CellResult) -> Option<f64> {
    (r.timeouts() == 0).then(|| r.summary().mean)
}

/// Match the cells of `a` with those of `b` by key (runner aside), in `a`'s
/// order; cells of `a` that `b` lacks are returned apart.
pub fn compare(a: &[CellResult], b: &[CellResult]) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for ra in a {
        let key = ra.cell.key();
        match b
            .iter()
            .find(|rb| rb.cell.key() == key && rb.metric == ra.metric)
        {
            Some(rb) => rows.push(Row {
                key,
                a: value(ra),
                b: value(rb),
            }),
            None => missing.push(key),
        }
    }
    (rows, missing)
}

/// Text table: one line per cell, `X` for a cell with a timed-out start.
pub fn render(a_name: &str, b_name: &str, rows: &[Row], missing: &[String]) -> String {
    let show = |v: Option<f64>| v.map_or("X".to_string(), |v| format!("{v:.2}"));
    let width = rows.iter().map(|r| r.key.len()).max().unwrap_or(4).max(4);
    let mut s = format!(
        "{:<width$}  {:>8}  {:>8}  {:>6}\n",
        "cell", a_name, b_name, "ratio"
    );
    for r in rows {
        s += &format!(
            "{:<width$}  {:>8}  {:>8}  {:>6}\n",
            r.key,
            show(r.a),
            show(r.b),
            r.ratio().map_or("-".to_string(), |x| format!("{x:.2}"))
        );
    }
    for m in missing {
        s += &format!("{m:<width$}  only in {a_name}\n");
    }
    let ratios: Vec<f64> = rows.iter().filter_map(Row::ratio).collect();
    let agree_x = rows
        .iter()
        .filter(|r| r.a.is_none() == r.b.is_none())
        .count();
    s += &format!(
        "{} cells compared; {} with numbers on both sides, {} within ±25%; X agrees in {} of {}\n",
        rows.len(),
        ratios.len(),
        ratios.iter().filter(|x| (0.75..=1.25).contains(*x)).count(),
        agree_x,
        rows.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Metric, RunResult, Scenario};

    fn results(runner: &str, values: &[(f64, u32)]) -> Vec<CellResult> {
        let s = Scenario::from_toml_str(
            "name = \"t\"\nbenchmark = \"startup\"\napp = \"bash\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"noop\"]\nhost_workload = [\"5r-seq\"]\n",
            &crate::Accepted {
                devices: vec!["hdd-1.8in".into()],
                host_scheds: vec!["bfq".into(), "noop".into()],
                guest_scheds: Vec::new(),
                coordination: vec!["off".into()],
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
        let (rows, missing) = compare(&real, &sim);
        assert!(missing.is_empty());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].ratio(), Some(0.75));
        assert_eq!(rows[1].a, None);
        let text = render("real", "sim", &rows, &missing);
        assert!(text.contains("X") && text.contains("0.75"), "{text}");
        assert!(text.contains("X agrees in 1 of 2"), "{text}");
        let (_, missing) = compare(&real, &sim[..1]);
        assert_eq!(missing.len(), 1);
    }
}
