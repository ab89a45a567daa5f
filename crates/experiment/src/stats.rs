//! Descriptive statistics, percentiles and Student's t confidence intervals (the
//! distributions and order statistics from `statrs`).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::statistics::{Data, Median, OrderStatistics};

/// Summary statistics of a sample.
///
/// `std` is the sample standard deviation (n-1 denominator). The 95% confidence
/// interval of the mean is `mean ± t(0.975, n-1) · std / sqrt(n)`, with the exact
/// Student's t quantile. With n = 1, `std` is 0 and the interval is the mean itself.
/// With n = 0 every field except `n` is NaN.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
}

impl Summary {
    /// Half width of the 95% confidence interval.
    pub fn ci95_half_width(&self) -> f64 {
        self.ci95_high - self.mean
    }
}

/// Summarizes `values` (see [`Summary`]). Values are used in the given order, so the
/// result is bit-for-bit reproducible.
pub fn summarize(values: &[f64]) -> Summary {
    let n = values.len();
    if n == 0 {
        return Summary {
            n,
            mean: f64::NAN,
            std: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            ci95_low: f64::NAN,
            ci95_high: f64::NAN,
        };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if n == 1 {
        return Summary {
            n,
            mean,
            std: 0.0,
            min,
            max,
            ci95_low: mean,
            ci95_high: mean,
        };
    }
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    let std = (ss / (n - 1) as f64).sqrt();
    let half = t_quantile(0.975, (n - 1) as f64) * std / (n as f64).sqrt();
    Summary {
        n,
        mean,
        std,
        min,
        max,
        ci95_low: mean - half,
        ci95_high: mean + half,
    }
}

/// The `p` quantile of Student's t distribution with `df` degrees of freedom
/// (`0 < p < 1`, `df > 0`), e.g. `t_quantile(0.975, 9.0)` ≈ 2.2622, from `statrs`.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0 && df > 0.0, "t_quantile({p}, {df})");
    StudentsT::new(0.0, 1.0, df)
        .expect("df > 0 and a unit scale make a valid distribution")
        .inverse_cdf(p)
}

/// Median and upper percentiles of a sample (R's type 8 quantiles, as `statrs`
/// computes them: median-unbiased whatever the distribution). NaN when empty.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
}

/// The median, 90th and 99th percentiles of `values`.
pub fn percentiles(values: &[f64]) -> Percentiles {
    let mut data = Data::new(values.to_vec());
    Percentiles {
        median: data.median(),
        p90: data.quantile(0.90),
        p99: data.quantile(0.99),
    }
}

/// What a cell's 95% interval is worth, so that readers are not misled by an
/// interval that is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntervalNote {
    /// A t-interval over two or more differing run means.
    Interval,
    /// Two or more runs, all with the same mean (the simulator's repetitions can be
    /// deterministic): a width of zero says nothing about precision.
    ZeroWidth,
    /// One run: no spread to estimate.
    SingleRun,
    /// A start timed out (X): the runs' means are lower bounds and get no interval.
    Timeouts,
    /// No value at all.
    NoData,
}

impl IntervalNote {
    /// Classifies a summary; `timeouts` is the cell's count of timed-out starts.
    pub fn of(s: &Summary, timeouts: u32) -> IntervalNote {
        if timeouts > 0 {
            IntervalNote::Timeouts
        } else if s.n == 0 || !s.mean.is_finite() {
            IntervalNote::NoData
        } else if s.n == 1 {
            IntervalNote::SingleRun
        } else if s.std == 0.0 {
            IntervalNote::ZeroWidth
        } else {
            IntervalNote::Interval
        }
    }

    /// The note in `results.csv` (`ci95_note`): empty for a real interval.
    pub fn as_str(self) -> &'static str {
        match self {
            IntervalNote::Interval => "",
            IntervalNote::ZeroWidth => "zero-width",
            IntervalNote::SingleRun => "single-run",
            IntervalNote::Timeouts => "timeouts",
            IntervalNote::NoData => "no-data",
        }
    }

    /// Whether `ci95_low`/`ci95_high` should be shown at all.
    pub fn has_interval(self) -> bool {
        !matches!(self, IntervalNote::Timeouts | IntervalNote::NoData)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_tables() {
        // two-sided 95% (p = 0.975), from standard tables
        let table = [
            (1.0, 12.706),
            (2.0, 4.303),
            (3.0, 3.182),
            (4.0, 2.776),
            (5.0, 2.571),
            (9.0, 2.262),
            (10.0, 2.228),
            (29.0, 2.045),
            (30.0, 2.042),
            (120.0, 1.980),
        ];
        for (df, t) in table {
            let q = t_quantile(0.975, df);
            assert!(close(q, t, 0.0006), "df {df}: {q} vs {t}");
        }
        // More digits where they are well known.
        assert!(close(t_quantile(0.975, 9.0), 2.262_157_162_9, 1e-9));
        assert!(close(t_quantile(0.975, 1.0), 12.706_204_736_2, 1e-8));
        assert!(close(t_quantile(0.995, 9.0), 3.249_835_541_6, 1e-8));
        assert!(close(t_quantile(0.025, 9.0), -2.262_157_162_9, 1e-9));
        // statrs keeps 1e-6 up to df = 10^4 (the most repetitions a scenario may
        // ask for, scenario::MAX_REPETITIONS); it drifts by 1e-4 at 10^6.
        assert!(close(t_quantile(0.975, 1e4), 1.960_201_2, 1e-6));
    }

    #[test]
    fn summary_hand_computed() {
        // 1..=10: mean 5.5, sample variance 55/6, std 3.0276503540974917
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!(s.n, 10);
        assert!(close(s.mean, 5.5, 1e-12));
        assert!(close(s.std, 3.027_650_354_097_491_7, 1e-12));
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        // half width = 2.2621571628 * 3.0276503541 / sqrt(10) = 2.1658506
        let half = 2.262_157_162_9 * 3.027_650_354_097_491_7 / 10f64.sqrt();
        assert!(close(s.ci95_high - s.mean, half, 1e-8));
        assert!(close(s.ci95_low, 5.5 - half, 1e-8));
        assert!(close(s.ci95_half_width(), 2.165_85, 1e-5));

        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sum sq dev 32, std sqrt(32/7)
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!(close(s.mean, 5.0, 1e-12));
        assert!(close(s.std, (32.0f64 / 7.0).sqrt(), 1e-12));
        let half = 2.364_624_251_6 * (32.0f64 / 7.0).sqrt() / 8f64.sqrt();
        assert!(close(s.ci95_half_width(), half, 1e-8));
    }

    #[test]
    fn summary_edge_cases() {
        let s = summarize(&[2.5]);
        assert_eq!(s.n, 1);
        assert_eq!((s.mean, s.std, s.min, s.max), (2.5, 0.0, 2.5, 2.5));
        assert_eq!((s.ci95_low, s.ci95_high), (2.5, 2.5));
        let s = summarize(&[3.0, 3.0, 3.0]);
        assert_eq!(s.std, 0.0);
        assert_eq!((s.ci95_low, s.ci95_high), (3.0, 3.0));
        let s = summarize(&[]);
        assert_eq!(s.n, 0);
        assert!(s.mean.is_nan() && s.ci95_low.is_nan());
    }

    #[test]
    fn percentiles_follow_type_8() {
        // 1..=10, R: quantile(1:10, c(.5, .9, .99), type = 8)
        // = 5.5, 9.6333333, 10 (capped at the maximum)
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let p = percentiles(&v);
        assert!(close(p.median, 5.5, 1e-12));
        assert!(close(p.p90, 9.633_333_333_3, 1e-9), "{}", p.p90);
        assert_eq!(p.p99, 10.0);
        // the order of the values does not matter
        let mut r = v.clone();
        r.reverse();
        assert_eq!(percentiles(&r), p);
        assert!(percentiles(&[]).median.is_nan());
    }

    #[test]
    fn interval_notes() {
        let s = summarize(&[2.0, 3.0]);
        assert_eq!(IntervalNote::of(&s, 0), IntervalNote::Interval);
        assert_eq!(IntervalNote::of(&s, 1), IntervalNote::Timeouts);
        assert!(!IntervalNote::Timeouts.has_interval());
        let s = summarize(&[2.0, 2.0, 2.0]);
        assert_eq!(IntervalNote::of(&s, 0), IntervalNote::ZeroWidth);
        assert_eq!(IntervalNote::ZeroWidth.as_str(), "zero-width");
        assert_eq!(
            IntervalNote::of(&summarize(&[2.0]), 0),
            IntervalNote::SingleRun
        );
        assert_eq!(IntervalNote::of(&summarize(&[]), 0), IntervalNote::NoData);
    }
}
