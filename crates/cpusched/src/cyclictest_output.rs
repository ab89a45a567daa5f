//! Reading the output of the real `cyclictest -q -h 5000` (Debian's
//! `rt-tests`) into the simulator's [`Histogram`], so that the real
//! runners and the simulator give the same results (`latency_avg_us`,
//! `latency_max_us`) and write the same histogram file
//! ([`Histogram::to_cyclictest_text`]).
//!
//! The format, from rt-tests 2.x `print_hist()` (one measurement thread):
//!
//! ```text
//! # /dev/cpu_dma_latency set to 0us      (any '#' line before the histogram)
//! # Histogram
//! 000000 000000                           (one row per microsecond, 0..N-1)
//! ...
//! # Total: 000002000                      (samples in the rows; overflows not counted)
//! # Min Latencies: 00016
//! # Avg Latencies: 00092                  (mean of all samples, truncated to 1 us)
//! # Max Latencies: 04345
//! # Histogram Overflows: 00000
//! # Histogram Overflow at cycle number:
//! # Thread 0: 00017 00018 ... # 00238 others
//! ```
//!
//! cyclictest measures in whole microseconds (without `-N`), so a row's
//! samples are exactly that many microseconds and the mean of the
//! in-range samples is exact. Samples beyond the last row are only
//! counted; their sum is recovered from the `Avg` line (see
//! [`parse_histogram`]).

use crate::cyclictest::{Histogram, HIST_BUCKETS};
use crate::{Nanos, US};

/// The summary lines' values.
#[derive(Default)]
struct Summary {
    total: Option<u64>,
    min: Option<u64>,
    avg: Option<u64>,
    max: Option<u64>,
    overflows: Option<u64>,
}

/// Parses the output of `cyclictest -q -h 5000` (one thread, microseconds)
/// into a [`Histogram`].
///
/// Refused, with the line at fault: no `# Histogram` line, rows that are
/// not `bucket count` pairs numbered 0, 1, 2, ... (several threads, `-H`'s
/// extra column, garbage), a number of rows other than [`HIST_BUCKETS`]
/// (another `-h`), a missing summary line (truncated output), and
/// summaries that contradict the rows (the total, a minimum or maximum
/// outside the rows' range, an average no sample mix could give).
///
/// The sum of the samples: the rows' exact sum when nothing overflowed;
/// otherwise the overflowed samples' share is taken from the `Avg` line,
/// which is the mean of all samples truncated to 1 us, so the sum is
/// `(avg + 0.5) * count` (the middle of what the truncation leaves open),
/// held between what the overflowed samples can add (each at least
/// [`HIST_BUCKETS`] us and at most the maximum).
pub fn parse_histogram(text: &str) -> Result<Histogram, String> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end()));
    lines
        .by_ref()
        .find(|(_, l)| *l == "# Histogram")
        .ok_or("no '# Histogram' line: not the output of cyclictest -h")?;
    let mut h = Histogram::default();
    let mut rows = 0usize;
    let mut in_rows: u64 = 0;
    let mut sum_us: u128 = 0;
    let mut summary = Summary::default();
    for (n, line) in lines {
        // cyclictest ends with an empty line after the overflow list.
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            read_summary_line(rest.trim(), &mut summary).map_err(|e| format!("line {n}: {e}"))?;
            continue;
        }
        if summary.total.is_some() {
            return Err(format!("line {n}: a histogram row after the summary"));
        }
        let (bucket, count) = read_row(line).map_err(|e| format!("line {n}: {e}"))?;
        if bucket != rows as u64 {
            return Err(format!(
                "line {n}: row {bucket} where row {rows} was expected"
            ));
        }
        let slot = h.buckets.get_mut(rows).ok_or_else(|| {
            format!(
                "line {n}: more than {HIST_BUCKETS} rows (run cyclictest with -h {HIST_BUCKETS})"
            )
        })?;
        *slot = count;
        in_rows += count;
        sum_us += u128::from(bucket) * u128::from(count);
        rows += 1;
    }
    if rows != HIST_BUCKETS {
        return Err(format!(
            "{rows} histogram rows, not {HIST_BUCKETS} (truncated output, or not -h {HIST_BUCKETS})"
        ));
    }
    let need = |v: Option<u64>, what: &str| {
        v.ok_or_else(|| format!("no '# {what}' line (truncated output?)"))
    };
    let total = need(summary.total, "Total")?;
    let (min, avg, max) = (
        need(summary.min, "Min Latencies")?,
        need(summary.avg, "Avg Latencies")?,
        need(summary.max, "Max Latencies")?,
    );
    h.overflow = need(summary.overflows, "Histogram Overflows")?;
    if total != in_rows {
        return Err(format!(
            "'# Total: {total}' but the rows hold {in_rows} samples"
        ));
    }
    h.count = in_rows + h.overflow;
    check_extremes(&h, min, max)?;
    h.sum_ns = sum_with_overflows(&h, sum_us, avg, max)? * u128::from(US);
    if h.count > 0 {
        h.min_ns = min * US as Nanos;
        h.max_ns = max * US as Nanos;
    }
    Ok(h)
}

/// One `bucket count` row (one thread: exactly two numbers).
fn read_row(line: &str) -> Result<(u64, u64), String> {
    let mut it = line.split_whitespace();
    let num = |s: Option<&str>| -> Result<u64, String> {
        let s = s.ok_or_else(|| format!("'{line}' is not a 'bucket count' row"))?;
        s.parse()
            .map_err(|_| format!("'{s}' in '{line}' is not a count"))
    };
    let bucket = num(it.next())?;
    let count = num(it.next())?;
    if it.next().is_some() {
        return Err(format!(
            "'{line}' has more than one count (one measurement thread expected, no -H)"
        ));
    }
    Ok((bucket, count))
}

/// A `# Key: value` line of the summary; other comment lines (the
/// overflow cycle list, `/dev/cpu_dma_latency`) are skipped.
fn read_summary_line(line: &str, s: &mut Summary) -> Result<(), String> {
    let Some((key, value)) = line.split_once(':') else {
        return Ok(());
    };
    let slot = match key {
        "Total" => &mut s.total,
        "Min Latencies" => &mut s.min,
        "Avg Latencies" => &mut s.avg,
        "Max Latencies" => &mut s.max,
        "Histogram Overflows" => &mut s.overflows,
        _ => return Ok(()),
    };
    if slot.is_some() {
        return Err(format!("'# {key}' twice"));
    }
    let mut values = value.split_whitespace();
    let v = values
        .next()
        .ok_or_else(|| format!("'# {key}' without a value"))?;
    if values.next().is_some() {
        return Err(format!(
            "'# {key}' has several values (one measurement thread expected)"
        ));
    }
    *slot = Some(
        v.parse()
            .map_err(|_| format!("'# {key}: {v}': not a number"))?,
    );
    Ok(())
}

/// The minimum and maximum must agree with the rows: the lowest and
/// highest non-empty rows, or beyond the last row when samples overflowed.
fn check_extremes(h: &Histogram, min: u64, max: u64) -> Result<(), String> {
    if h.count == 0 {
        return Ok(());
    }
    let first = h.buckets.iter().position(|&n| n > 0);
    let last = h.buckets.iter().rposition(|&n| n > 0);
    let beyond = HIST_BUCKETS as u64;
    let min_ok = match first {
        Some(b) => min == b as u64,
        None => min >= beyond,
    };
    let max_ok = if h.overflow > 0 {
        max >= beyond
    } else {
        last.is_some_and(|b| max == b as u64)
    };
    if !min_ok || !max_ok {
        return Err(format!(
            "min {min} us / max {max} us disagree with the rows (non-empty from {first:?} to {last:?}, {} overflows)",
            h.overflow
        ));
    }
    Ok(())
}

/// The sum of all samples in microseconds (see [`parse_histogram`]).
fn sum_with_overflows(h: &Histogram, rows_sum: u128, avg: u64, max: u64) -> Result<u128, String> {
    let count = u128::from(h.count);
    if h.count == 0 {
        return Ok(0);
    }
    let over = u128::from(h.overflow);
    let lo = rows_sum + over * HIST_BUCKETS as u128;
    let hi = rows_sum + over * u128::from(max);
    // The Avg line is the truncated mean: the true sum lies in
    // [avg * count, (avg + 1) * count). Samples measured in nanoseconds
    // (the simulator's) are floored into their rows, so the rows may sum
    // to up to 1 us a sample less.
    let avg_lo = u128::from(avg) * count;
    let avg_hi = avg_lo + count;
    if hi + count <= avg_lo || lo >= avg_hi {
        return Err(format!(
            "'# Avg Latencies: {avg}' cannot come from these samples (their mean lies in [{}, {}] us)",
            lo / count,
            hi / count
        ));
    }
    if over == 0 {
        return Ok(rows_sum);
    }
    Ok((avg_lo + count / 2).clamp(lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_line_twice_is_refused() {
        let mut s = Summary::default();
        read_summary_line("Total: 000000001", &mut s).unwrap();
        assert!(read_summary_line("Total: 000000001", &mut s)
            .unwrap_err()
            .contains("twice"));
        read_summary_line("Histogram Overflow at cycle number:", &mut s).unwrap();
        read_summary_line("Thread 0: 00001 00002", &mut s).unwrap();
    }
}
