//! `tandem advise`'s decision: which host and which guest I/O scheduler to
//! run for a workload, from the figures of the host x guest pairs measured
//! (simulated or real), with how sure the choice is and whether the
//! two-tier study's old advice (noop or deadline in the guest; the host's
//! choice matters little) holds for them.
//!
//! The figures of a pair are its runs' (repetitions'): the rate (tps or MB/s)
//! and the p50 and p99 latencies of each run, summarized with their 95%
//! t-intervals ([`crate::stats::summarize`]). A pair is *significantly*
//! worse than another on a figure when their intervals do not overlap and
//! it is on the bad side; pairs not significantly worse than the best on
//! the objective's figures are *tied* with it, and the advice says so.
//!
//! The objectives:
//! - `throughput`: the highest mean rate;
//! - `latency`: the lowest mean p99 latency;
//! - `fair`: the best balance of the two, the geometric mean of the rate
//!   against the best rate and the best p99 against the pair's p99 (1 for
//!   a pair best on both); tied when worse on neither figure.

use std::fmt::Write as _;

use crate::profile::Profile;
use crate::scenario::Benchmark;
use crate::stats::{summarize, Summary};
use crate::{Cell, CellResult, Device, IoSched, Metric};

/// What the advice optimizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    Throughput,
    Latency,
    Fair,
}

impl Objective {
    /// Every objective, as the command line names them.
    pub const ALL: [Objective; 3] = [Objective::Throughput, Objective::Latency, Objective::Fair];

    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::Latency => "latency",
            Objective::Fair => "fair",
        }
    }
}

impl std::str::FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Objective, String> {
        Objective::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown objective {s:?}; accepted: {}",
                    Objective::ALL.map(Objective::as_str).join(", ")
                )
            })
    }
}

/// Where a pair's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `tandem sim run` (or advise's own sweep).
    Simulated,
    /// `tandem bench run`.
    Real,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Simulated => "sim",
            Source::Real => "real",
        }
    }
}

/// One run's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunFigures {
    /// tps (random and mixed profiles) or MB/s (sequential ones).
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One host x guest pair, its figures over its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub host: IoSched,
    pub guest: IoSched,
    pub source: Source,
    pub rate: Summary,
    pub p50_ms: Summary,
    pub p99_ms: Summary,
}

impl Row {
    /// A pair's row from its runs (at least one).
    pub fn from_runs(host: IoSched, guest: IoSched, source: Source, runs: &[RunFigures]) -> Row {
        let of = |f: fn(&RunFigures) -> f64| summarize(&runs.iter().map(f).collect::<Vec<_>>());
        Row {
            host,
            guest,
            source,
            rate: of(|r| r.rate),
            p50_ms: of(|r| r.p50_ms),
            p99_ms: of(|r| r.p99_ms),
        }
    }
}

/// `a` is significantly below `b`: its interval lies wholly under `b`'s.
fn below(a: &Summary, b: &Summary) -> bool {
    a.ci95_high < b.ci95_low
}

/// Whether row `r` is significantly worse than `best` for `objective`.
fn worse(objective: Objective, r: &Row, best: &Row) -> bool {
    let rate = below(&r.rate, &best.rate);
    let lat = below(&best.p99_ms, &r.p99_ms);
    match objective {
        Objective::Throughput => rate,
        Objective::Latency => lat,
        Objective::Fair => rate || lat,
    }
}

/// How sure the advice is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confidence {
    /// The best pair is significantly better than every other.
    Clear,
    /// These other pairs (indices into [`Advice::table`]) are not
    /// significantly worse: any of them would do as well, as far as the runs
    /// tell.
    Tied(Vec<usize>),
    /// The pairs have one run each: no interval, the ranking is by the means
    /// alone.
    SingleRuns,
}

/// The study's old advice against these figures.
#[derive(Clone, Debug, PartialEq)]
pub struct OldAdvice {
    /// The best pair with `none`/`noop` or `mq-deadline`/`deadline` in the
    /// guest, when the best pair has another guest scheduler and that pair
    /// is significantly worse: its index and how much it loses on the
    /// objective's figure (percent).
    pub guest_wrong: Option<(usize, f64)>,
    /// For the best pair's guest scheduler, the host schedulers' spread on the
    /// objective's figure: (worst pair's index, percent from the best),
    /// when above [`HOST_MATTERS_PCT`] and significant.
    pub host_matters: Option<(usize, f64)>,
}

impl OldAdvice {
    /// True when neither half of the old advice is contradicted.
    pub fn holds(&self) -> bool {
        self.guest_wrong.is_none() && self.host_matters.is_none()
    }
}

/// The study's "little" for the host's effect: within 10% (the issue's
/// reading of "the Dom0 scheduler changes the DomU's results little").
pub const HOST_MATTERS_PCT: f64 = 10.0;

/// The smallest loss that makes the old guest advice wrong: 1% (below it,
/// a significant difference is still no reason to change a scheduler).
pub const MIN_LOSS_PCT: f64 = 1.0;

/// The schedulers of the old advice, as old and blk-mq kernels name them.
pub const OLD_GUEST_ADVICE: [IoSched; 4] = [
    IoSched::Noop,
    IoSched::None,
    IoSched::Deadline,
    IoSched::MqDeadline,
];

/// The decision and what it was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub objective: Objective,
    /// Every pair, best first.
    pub table: Vec<Row>,
    pub confidence: Confidence,
    pub old: OldAdvice,
}

impl Advice {
    /// The recommended pair.
    pub fn best(&self) -> &Row {
        &self.table[0]
    }
}

/// The objective's score of `r` (higher is better); `best_rate` and
/// `best_p99` are the table's best figures (for `fair`).
fn score(objective: Objective, r: &Row, best_rate: f64, best_p99: f64) -> f64 {
    match objective {
        Objective::Throughput => r.rate.mean,
        Objective::Latency => -r.p99_ms.mean,
        Objective::Fair => {
            let a = r.rate.mean / best_rate.max(f64::MIN_POSITIVE);
            let b = best_p99 / r.p99_ms.mean.max(f64::MIN_POSITIVE);
            (a * b).sqrt()
        }
    }
}

/// The figure an objective's losses are told in: the rate, or the p99 for
/// `latency`. Percent lost by `r` against `best` (positive: worse).
fn loss_pct(objective: Objective, r: &Row, best: &Row) -> f64 {
    match objective {
        Objective::Latency => (r.p99_ms.mean / best.p99_ms.mean - 1.0) * 100.0,
        _ => (1.0 - r.rate.mean / best.rate.mean) * 100.0,
    }
}

/// Decide from `rows` (one per pair). An error when there is nothing to
/// decide from, or a pair has no finite figures.
pub fn decide(mut rows: Vec<Row>, objective: Objective) -> Result<Advice, String> {
    if rows.is_empty() {
        return Err("no host x guest pair to decide from".into());
    }
    if let Some(r) = rows
        .iter()
        .find(|r| !(r.rate.mean.is_finite() && r.p99_ms.mean.is_finite()))
    {
        return Err(format!(
            "host {} x guest {}: no figures (a pair without runs?)",
            r.host, r.guest
        ));
    }
    let best_rate = rows.iter().map(|r| r.rate.mean).fold(0.0, f64::max);
    let best_p99 = rows
        .iter()
        .map(|r| r.p99_ms.mean)
        .fold(f64::INFINITY, f64::min);
    // Best first; equal scores keep the input's order (stable sort).
    rows.sort_by(|a, b| {
        score(objective, b, best_rate, best_p99)
            .total_cmp(&score(objective, a, best_rate, best_p99))
    });
    let best = &rows[0];
    let confidence = if rows.iter().all(|r| r.rate.n <= 1) {
        Confidence::SingleRuns
    } else {
        let tied: Vec<usize> = (1..rows.len())
            .filter(|&i| !worse(objective, &rows[i], best))
            .collect();
        if tied.is_empty() {
            Confidence::Clear
        } else {
            Confidence::Tied(tied)
        }
    };
    let old = old_advice(objective, &rows);
    Ok(Advice {
        objective,
        table: rows,
        confidence,
        old,
    })
}

/// The old advice against a table sorted best first.
fn old_advice(objective: Objective, rows: &[Row]) -> OldAdvice {
    let best = &rows[0];
    let guest_wrong = if OLD_GUEST_ADVICE.contains(&best.guest) {
        None
    } else {
        rows.iter()
            .position(|r| OLD_GUEST_ADVICE.contains(&r.guest))
            .filter(|&i| worse(objective, &rows[i], best))
            .map(|i| (i, loss_pct(objective, &rows[i], best)))
            // Deterministic runs have zero-width intervals: a difference
            // must also be one that matters.
            .filter(|&(_, pct)| pct > MIN_LOSS_PCT)
    };
    // The host's effect under the best guest scheduler: its worst host.
    let host_matters = rows
        .iter()
        .enumerate()
        .rfind(|(_, r)| r.guest == best.guest)
        .map(|(i, r)| (i, loss_pct(objective, r, best)))
        .filter(|&(i, pct)| pct > HOST_MATTERS_PCT && worse(objective, &rows[i], best));
    OldAdvice {
        guest_wrong,
        host_matters,
    }
}

/// The unit of a profile's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateUnit {
    /// Transactions (operations) per second: random and mixed profiles.
    Tps,
    /// MB/s (10^6 bytes): sequential profiles.
    MbS,
}

impl RateUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            RateUnit::Tps => "tps",
            RateUnit::MbS => "MB/s",
        }
    }
}

/// `mean ±half` with the interval's half width, or the mean alone for one run.
fn with_ci(s: &Summary, digits: usize) -> String {
    if s.n > 1 {
        format!("{:.*} ±{:.*}", digits, s.mean, digits, s.ci95_half_width())
    } else {
        format!("{:.*}", digits, s.mean)
    }
}

/// The advice in words, then the table it was decided from. `what` names
/// the workload and device (e.g. `ffsb-randread, 8 threads, hdd-1.8in`).
pub fn render(a: &Advice, what: &str, unit: RateUnit) -> String {
    let mut s = String::new();
    let b = a.best();
    let _ = writeln!(
        s,
        "{what}, objective {}: host {}, guest {}",
        a.objective.as_str(),
        b.host,
        b.guest
    );
    let _ = writeln!(
        s,
        "  expected: {} {}, p50 {} ms, p99 {} ms (95% intervals over {} {} run(s))",
        with_ci(&b.rate, 1),
        unit.as_str(),
        with_ci(&b.p50_ms, 2),
        with_ci(&b.p99_ms, 2),
        b.rate.n,
        b.source.as_str()
    );
    let conf = match &a.confidence {
        Confidence::Clear => "clear: every other pair is significantly worse".to_string(),
        Confidence::SingleRuns => "unknown: one run per pair, no interval".to_string(),
        Confidence::Tied(t) => format!(
            "tied with {} other pair(s) ({}): not significantly worse",
            t.len(),
            t.iter()
                .take(6)
                .map(|&i| format!("{}/{}", a.table[i].host, a.table[i].guest))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let _ = writeln!(s, "  confidence: {conf}");
    s.push_str(&old_words(a));
    let _ = writeln!(
        s,
        "\n  {:<12} {:<12} {:>20} {:>14} {:>16} {:>5}",
        "host",
        "guest",
        unit.as_str(),
        "p50 ms",
        "p99 ms",
        "runs"
    );
    for r in &a.table {
        let _ = writeln!(
            s,
            "  {:<12} {:<12} {:>20} {:>14} {:>16} {:>5}",
            r.host.to_string(),
            r.guest.to_string(),
            with_ci(&r.rate, 1),
            with_ci(&r.p50_ms, 2),
            with_ci(&r.p99_ms, 2),
            format!(
                "{}{}",
                r.rate.n,
                if r.source == Source::Real { "r" } else { "s" }
            )
        );
    }
    s
}

/// What the advice says of the old advice.
fn old_words(a: &Advice) -> String {
    let mut s = String::new();
    let figure = match a.objective {
        Objective::Latency => "p99",
        _ => "rate",
    };
    if a.old.holds() {
        s.push_str("  old advice (noop/deadline in the guest, host matters little): holds here\n");
    }
    if let Some((i, pct)) = a.old.guest_wrong {
        let r = &a.table[i];
        let _ = writeln!(
            s,
            "  old advice is wrong here: the best noop/deadline guest (host {}, guest {}) is {pct:.0}% worse on {figure}",
            r.host, r.guest
        );
    }
    if let Some((i, pct)) = a.old.host_matters {
        let r = &a.table[i];
        let _ = writeln!(
            s,
            "  old advice is wrong here: the host's choice matters: host {} with guest {} is {pct:.0}% worse on {figure}",
            r.host, r.guest
        );
    }
    s
}

/// What advice is asked for: a profile with its threads, on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Query {
    pub profile: Profile,
    pub threads: u32,
    pub device: Device,
}

impl Query {
    /// `ffsb-randread, 8 threads, hdd-1.8in`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} thread{}, {}",
            self.profile,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.device
        )
    }

    /// The unit of the profile's rate.
    pub fn unit(&self) -> RateUnit {
        if self.profile.is_sequential() {
            RateUnit::MbS
        } else {
            RateUnit::Tps
        }
    }

    fn matches(&self, c: &Cell) -> bool {
        c.benchmark == Benchmark::Profile
            && c.device == self.device
            && c.profile
                .is_some_and(|p| p.profile == self.profile && p.threads == self.threads)
    }
}

/// A profile as the command line may name it: `randread` or `ffsb-randread`.
pub fn parse_profile(s: &str) -> Result<Profile, String> {
    let full = if s.starts_with("ffsb-") {
        s.to_string()
    } else {
        format!("ffsb-{s}")
    };
    full.parse::<Profile>().map_err(|_| {
        format!(
            "unknown profile {s:?}; accepted: {} (or without the ffsb- prefix)",
            crate::profile::accepted_profiles()
        )
    })
}

/// Every query the results hold (VM profile cells), in order.
pub fn queries_in(results: &[CellResult]) -> Vec<Query> {
    let mut out: Vec<Query> = results
        .iter()
        .filter(|r| !r.cell.is_native() && r.cell.benchmark == Benchmark::Profile)
        .filter_map(|r| {
            r.cell.profile.map(|p| Query {
                profile: p.profile,
                threads: p.threads,
                device: r.cell.device,
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rows of `q` in `results` (simulated and real alike; the runner of
/// each result names its source): one per host x guest pair and runner, its
/// runs' rates from the profile's metric and their latencies from the p50
/// and p99 rows of the same cell. Native cells and cells with background
/// workloads or other VMs are left out (the advice is for the profile
/// alone).
pub fn rows_from_results(results: &[CellResult], q: &Query) -> Vec<Row> {
    let metric = q.profile.metric();
    let mut rows = Vec::new();
    for main in results.iter().filter(|r| {
        r.metric == metric
            && q.matches(&r.cell)
            && !r.cell.is_native()
            && r.cell.host_workload.is_none()
            && r.cell.guest_workload.is_none_or(|w| w.is_none())
            && !r.cell.has_other_vms()
    }) {
        let Some(guest) = main.cell.guest_sched else {
            continue;
        };
        let lat = |m: Metric| {
            results
                .iter()
                .find(|r| r.metric == m && r.runner == main.runner && r.cell == main.cell)
        };
        let (Some(p50), Some(p99)) = (lat(Metric::IoLatencyP50Ms), lat(Metric::IoLatencyP99Ms))
        else {
            continue;
        };
        let runs: Vec<RunFigures> = main
            .runs
            .iter()
            .zip(p50.runs.iter().zip(&p99.runs))
            .filter_map(|(m, (a, b))| {
                Some(RunFigures {
                    rate: m.mean()?,
                    p50_ms: a.mean()?,
                    p99_ms: b.mean()?,
                })
            })
            .collect();
        if runs.is_empty() {
            continue;
        }
        let source = if main.runner == "real" {
            Source::Real
        } else {
            Source::Simulated
        };
        rows.push(Row::from_runs(main.cell.host_sched, guest, source, &runs));
    }
    rows
}

/// The schedulers advise sweeps in the host and the guest: today's blk-mq
/// ones.
pub const MODERN: [IoSched; 4] = [
    IoSched::None,
    IoSched::MqDeadline,
    IoSched::Bfq,
    IoSched::Kyber,
];

/// The scenario of advise's own simulated sweep for `q`: host x guest over
/// [`MODERN`], `repetitions` runs of `duration_s` each, sampled in halves.
pub fn sweep_scenario(q: &Query, repetitions: u32, duration_s: f64) -> String {
    let list = |v: &[IoSched]| {
        v.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "name = \"advise\"\nbenchmark = \"profile\"\nrepetitions = {repetitions}\n\
         duration_s = {duration_s}\nsample_s = {}\nseed = 1\n\n[matrix]\n\
         device = [\"{}\"]\nhost_sched = [{}]\nhost_workload = [\"none\"]\n\
         guest_sched = [{}]\nguest_workload = [\"none\"]\n\
         profile = [\"{}\"]\nthreads = [{}]\n",
        duration_s / 2.0,
        q.device,
        list(&MODERN),
        list(&MODERN),
        q.profile,
        q.threads
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use IoSched::*;

    fn runs(rate: &[f64], p99: f64) -> Vec<RunFigures> {
        rate.iter()
            .enumerate()
            .map(|(i, &r)| RunFigures {
                rate: r,
                p50_ms: p99 / 4.0,
                p99_ms: p99 + i as f64,
            })
            .collect()
    }

    fn row(host: IoSched, guest: IoSched, rate: &[f64], p99: f64) -> Row {
        Row::from_runs(host, guest, Source::Simulated, &runs(rate, p99))
    }

    #[test]
    fn throughput_picks_the_highest_rate_and_latency_the_lowest_p99() {
        let rows = vec![
            row(None, MqDeadline, &[100.0, 101.0, 99.0], 9000.0),
            row(Bfq, Bfq, &[150.0, 151.0, 149.0], 20000.0),
            row(None, Kyber, &[120.0, 121.0, 119.0], 3000.0),
        ];
        let t = decide(rows.clone(), Objective::Throughput).unwrap();
        assert_eq!((t.best().host, t.best().guest), (Bfq, Bfq));
        assert_eq!(t.confidence, Confidence::Clear);
        let l = decide(rows.clone(), Objective::Latency).unwrap();
        assert_eq!((l.best().host, l.best().guest), (None, Kyber));
        // fair: kyber has 0.8 of the rate at a p99 6.7 times lower than bfq's.
        let f = decide(rows, Objective::Fair).unwrap();
        assert_eq!(f.best().guest, Kyber);
    }

    #[test]
    fn overlapping_intervals_are_a_tie() {
        let rows = vec![
            row(None, None, &[100.0, 110.0, 90.0], 5000.0),
            row(Bfq, None, &[102.0, 112.0, 92.0], 5000.0),
            row(Kyber, None, &[50.0, 51.0, 49.0], 5000.0),
        ];
        let a = decide(rows, Objective::Throughput).unwrap();
        assert_eq!(a.best().host, Bfq);
        assert_eq!(a.confidence, Confidence::Tied(vec![1]));
        // Kyber in the host loses 50%, significantly: the host matters.
        let (i, pct) = a.old.host_matters.expect("host matters");
        assert_eq!(a.table[i].host, Kyber);
        assert!((pct - 50.0).abs() < 1.0, "{pct}");
        assert!(
            a.old.guest_wrong.is_none(),
            "none in the guest is old advice"
        );
    }

    #[test]
    fn a_better_modern_guest_scheduler_makes_the_old_advice_wrong() {
        let rows = vec![
            row(MqDeadline, MqDeadline, &[80.0, 81.0, 79.0], 5000.0),
            row(MqDeadline, None, &[70.0, 71.0, 69.0], 5000.0),
            row(MqDeadline, Bfq, &[100.0, 101.0, 99.0], 5000.0),
            row(None, Bfq, &[98.0, 99.0, 97.0], 5000.0),
        ];
        let a = decide(rows, Objective::Throughput).unwrap();
        assert_eq!(a.best().guest, Bfq);
        let (i, pct) = a.old.guest_wrong.expect("old guest advice loses");
        assert_eq!(a.table[i].guest, MqDeadline);
        assert!((pct - 20.0).abs() < 0.5, "{pct}");
        // The host spread under bfq is 2%: little.
        assert!(a.old.host_matters.is_none());
        assert!(!a.old.holds());
        let text = render(&a, "ffsb-randread, 8 threads, hdd-1.8in", RateUnit::Tps);
        assert!(text.contains("host mq-deadline, guest bfq"), "{text}");
        assert!(text.contains("20% worse"), "{text}");
    }

    #[test]
    fn a_modern_best_within_the_noise_leaves_the_old_advice_standing() {
        let rows = vec![
            row(None, Bfq, &[100.0, 120.0, 80.0], 5000.0),
            row(None, None, &[99.0, 119.0, 79.0], 5000.0),
        ];
        let a = decide(rows, Objective::Throughput).unwrap();
        assert_eq!(a.best().guest, Bfq);
        assert!(a.old.holds(), "{:?}", a.old);
        assert_eq!(a.confidence, Confidence::Tied(vec![1]));
    }

    #[test]
    fn single_runs_are_ranked_but_say_so() {
        let rows = vec![
            row(None, None, &[10.0], 100.0),
            row(None, Bfq, &[12.0], 100.0),
        ];
        let a = decide(rows, Objective::Throughput).unwrap();
        assert_eq!(a.best().guest, Bfq);
        assert_eq!(a.confidence, Confidence::SingleRuns);
        assert!(render(&a, "x", RateUnit::MbS).contains("one run per pair"));
    }

    #[test]
    fn nothing_to_decide_from_is_an_error() {
        assert!(decide(Vec::new(), Objective::Fair).is_err());
        let empty = Row::from_runs(None, None, Source::Real, &[]);
        let e = decide(vec![empty], Objective::Latency).unwrap_err();
        assert!(e.contains("no figures"), "{e}");
        assert!("speed"
            .parse::<Objective>()
            .unwrap_err()
            .contains("throughput, latency, fair"));
    }

    fn accepted() -> crate::Accepted {
        crate::Accepted {
            devices: crate::Device::all().collect(),
            host_scheds: IoSched::ALL.to_vec(),
            guest_scheds: IoSched::ALL.to_vec(),
            coordination: vec!["off".parse().unwrap()],
            apps: vec!["bash".into()],
            allow_cmd_apps: false,
            allow_vm: true,
        }
    }

    /// The sweep's scenario parses into the 16 pairs of the query; the rows
    /// come out of results as the runners write them (main metric, p50 and
    /// p99 rows), one per pair and runner, with the runs paired up.
    #[test]
    fn results_give_one_row_per_pair_and_runner() {
        let q = Query {
            profile: Profile::SeqWrite,
            threads: 8,
            device: "hdd-1.8in".parse().unwrap(),
        };
        let s = crate::Scenario::from_toml_str(&sweep_scenario(&q, 2, 3.0), &accepted()).unwrap();
        let cells = s.cells();
        assert_eq!(cells.len(), 16);
        assert!(cells.iter().all(|c| q.matches(c) && c.repetitions == 2));
        let mut results = Vec::new();
        for (i, c) in cells.iter().enumerate() {
            let runs: Vec<crate::RunResult> = (0..2)
                .map(|r| {
                    let mut run = crate::RunResult {
                        values: vec![10.0 + i as f64, 12.0 + i as f64 + r as f64],
                        ..Default::default()
                    };
                    run.counters
                        .insert(crate::profile::IO_LATENCY_P50_MS.into(), 1.0 + r as f64);
                    run.counters
                        .insert(crate::profile::IO_LATENCY_P99_MS.into(), 9.0);
                    run
                })
                .collect();
            // The first pair measured for real too.
            if i == 0 {
                results.extend(crate::latency::cell_results(c, "real", runs.clone()));
            }
            results.extend(crate::latency::cell_results(c, "sim", runs));
        }
        assert_eq!(queries_in(&results), vec![q]);
        let rows = rows_from_results(&results, &q);
        assert_eq!(rows.len(), 17);
        assert_eq!(rows.iter().filter(|r| r.source == Source::Real).count(), 1);
        let first = &rows[0];
        assert_eq!(
            (first.host, first.guest),
            (cells[0].host_sched, cells[0].guest_sched.unwrap())
        );
        // Run means 11 and 11.5 (MB/s: a sequential profile's metric).
        assert_eq!(first.rate.n, 2);
        assert!((first.rate.mean - 11.25).abs() < 1e-9, "{:?}", first.rate);
        assert!((first.p50_ms.mean - 1.5).abs() < 1e-9);
        assert_eq!(q.unit(), RateUnit::MbS);
        // Another query finds nothing.
        let other = Query { threads: 1, ..q };
        assert!(rows_from_results(&results, &other).is_empty());
    }

    #[test]
    fn profiles_are_named_with_or_without_their_prefix() {
        assert_eq!(parse_profile("randread"), Ok(Profile::RandRead));
        assert_eq!(parse_profile("ffsb-mixed"), Ok(Profile::Mixed));
        let e = parse_profile("randrw").unwrap_err();
        assert!(
            e.contains("unknown profile \"randrw\"") && e.contains("ffsb-seqwrite"),
            "{e}"
        );
    }
}
