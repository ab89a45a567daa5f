//! Descriptive statistics and Student's t confidence intervals.

use serde::{Deserialize, Serialize};

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
/// (`0 < p < 1`, `df > 0`), e.g. `t_quantile(0.975, 9.0)` ≈ 2.2622.
///
/// Computed by bisection on the CDF, which is evaluated through the regularized
/// incomplete beta function; accurate to about 1e-12.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0 && df > 0.0, "t_quantile({p}, {df})");
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let mut lo = 0.0_f64;
    let mut hi = 1.0_f64;
    while student_t_cdf(hi, df) < p {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if student_t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// CDF of Student's t distribution with `df` degrees of freedom.
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * reg_inc_beta(df / 2.0, 0.5, x);
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, 9 coefficients).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // reflection
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized incomplete beta function I_x(a, b).
fn reg_inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast for x < (a+1)/(a+b+2); use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// Continued fraction for the incomplete beta function (modified Lentz method).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=1000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        // even step
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        // odd step
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
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
        assert!(close(t_quantile(0.975, 1e6), 1.959_966, 1e-5));
    }

    #[test]
    fn cdf_symmetry() {
        for df in [1.0, 3.0, 9.0, 50.0] {
            assert!(close(student_t_cdf(0.0, df), 0.5, 1e-14));
            for t in [0.3, 1.0, 2.5, 7.0] {
                let s = student_t_cdf(t, df) + student_t_cdf(-t, df);
                assert!(close(s, 1.0, 1e-13));
            }
        }
        // df = 1 is Cauchy: F(1) = 0.75
        assert!(close(student_t_cdf(1.0, 1.0), 0.75, 1e-13));
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
}
