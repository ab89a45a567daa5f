//! The parser of real cyclictest output, on outputs captured from Debian's
//! rt-tests 2.4 (`cyclictest -q -l 2000 -h 5000` as root on an idle 2-core
//! host, and `-h 60` for overflows) and on hostile inputs.

use cpusched::cyclictest::{Histogram, HIST_BUCKETS};
use cpusched::cyclictest_output::parse_histogram;

const REAL: &str = include_str!("data/cyclictest-h5000-l2000.txt");
const REAL_H60: &str = include_str!("data/cyclictest-h60-overflows.txt");

/// The rows' samples recounted independently of the parser.
fn rows(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

#[test]
fn real_output_gives_the_rows_and_the_summary() {
    let h = parse_histogram(REAL).unwrap();
    let r = rows(REAL);
    assert_eq!(r.len(), HIST_BUCKETS);
    let n: u64 = r.iter().map(|&(_, c)| c).sum();
    let sum: u64 = r.iter().map(|&(b, c)| b * c).sum();
    assert_eq!(h.count, 2000);
    assert_eq!(n, 2000);
    assert_eq!(h.overflow, 0);
    assert_eq!(h.buckets[16], 1, "the minimum's row");
    assert_eq!(h.buckets[4345], 1, "the maximum's row");
    assert_eq!(h.min_ns, 16_000);
    assert_eq!(h.max_us(), 4345.0);
    // No overflow: the exact mean of the rows, which the Avg line (92)
    // truncates.
    assert_eq!(h.avg_us(), sum as f64 / 2000.0);
    assert!(h.avg_us() >= 92.0 && h.avg_us() < 93.0, "{}", h.avg_us());
}

#[test]
fn the_written_file_is_the_simulators_format() {
    let h = parse_histogram(REAL).unwrap();
    let text = h.to_cyclictest_text();
    // Same rows as cyclictest printed them, then the simulator's summary.
    let row = |l: &&str| !l.starts_with('#') && !l.is_empty();
    let real_rows: Vec<&str> = REAL.lines().filter(row).collect();
    let ours: Vec<&str> = text.lines().filter(row).collect();
    assert!(real_rows == ours, "the rows differ");
    assert!(text.starts_with("# Histogram\n000000 000000\n"));
    assert!(text.contains("# Total: 000002000\n# Min Latencies: 00016\n"));
    assert!(text.contains("# Max Latencies: 04345\n# Histogram Overflows: 00000\n"));
    // Parsing what was written gives the same file again.
    assert_eq!(parse_histogram(&text).unwrap().to_cyclictest_text(), text);
}

/// A `-h 5000` output from rows and a summary.
fn output(rows: &[(usize, u64)], summary: &str) -> String {
    let mut b = vec![0u64; HIST_BUCKETS];
    for &(i, n) in rows {
        b[i] = n;
    }
    let mut s = String::from("# /dev/cpu_dma_latency set to 0us\n# Histogram\n");
    for (i, n) in b.iter().enumerate() {
        s.push_str(&format!("{i:06} {n:06}\n"));
    }
    s + summary
}

#[test]
fn overflow_only_output_takes_its_sum_from_the_avg_line() {
    let text = output(
        &[],
        "# Total: 000000000\n# Min Latencies: 06000\n# Avg Latencies: 07000\n\
         # Max Latencies: 09000\n# Histogram Overflows: 00004\n\
         # Histogram Overflow at cycle number:\n# Thread 0: 00001 00002 00003 00004\n",
    );
    let h = parse_histogram(&text).unwrap();
    assert_eq!((h.count, h.overflow), (4, 4));
    assert!(h.buckets.iter().all(|&n| n == 0));
    assert_eq!(
        h.avg_us(),
        7000.5,
        "the middle of what truncation leaves open"
    );
    assert_eq!((h.min_ns, h.max_ns), (6_000_000, 9_000_000));
    assert_eq!(h.share_between(5000, 5001), 1.0);
    // An average the overflowed samples cannot give (all are >= 5000 us).
    let bad = text.replace("Avg Latencies: 07000", "Avg Latencies: 00100");
    assert!(parse_histogram(&bad).unwrap_err().contains("Avg"));
}

#[test]
fn mixed_rows_and_overflows() {
    // 3 samples at 10 us, one beyond the rows; mean truncated to 1257.
    let text = output(
        &[(10, 3)],
        "# Total: 000000003\n# Min Latencies: 00010\n# Avg Latencies: 01257\n\
         # Max Latencies: 05000\n# Histogram Overflows: 00001\n",
    );
    let h = parse_histogram(&text).unwrap();
    assert_eq!(h.count, 4);
    // Held at what the overflowed sample can add: exactly 5000 us.
    assert_eq!(h.avg_us(), (30.0 + 5000.0) / 4.0);
}

#[test]
fn an_empty_run_parses_as_an_empty_histogram() {
    let text = output(
        &[],
        "# Total: 000000000\n# Min Latencies: 00000\n# Avg Latencies: 00000\n\
         # Max Latencies: 00000\n# Histogram Overflows: 00000\n",
    );
    let h = parse_histogram(&text).unwrap();
    assert_eq!(h.count, 0);
    assert_eq!(h.avg_us(), 0.0);
    assert_eq!(
        h.to_cyclictest_text(),
        Histogram::default().to_cyclictest_text()
    );
}

fn err(text: &str) -> String {
    match parse_histogram(text) {
        Err(e) => e,
        Ok(h) => panic!("accepted: {} samples", h.count),
    }
}

#[test]
fn truncated_output_is_refused() {
    // Cut in the rows, and cut in the summary.
    let cut = &REAL[..REAL.len() / 2];
    let cut = &cut[..cut.rfind('\n').unwrap() + 1];
    assert!(err(cut).contains("rows"), "{}", err(cut));
    let no_max = REAL.split("# Max Latencies").next().unwrap();
    assert!(err(no_max).contains("Max Latencies"), "{}", err(no_max));
    assert!(err("").contains("# Histogram"));
    // A line cut in the middle.
    let half_row = REAL.replacen("000016 000001", "000016", 1);
    assert!(err(&half_row).contains("line 19"), "{}", err(&half_row));
}

#[test]
fn garbage_is_refused_with_its_line() {
    assert!(err("hello\nworld\n").contains("# Histogram"));
    let g = REAL.replacen("000016 000001", "000016 0x0001", 1);
    assert!(
        err(&g).contains("line 19") && err(&g).contains("0x0001"),
        "{}",
        err(&g)
    );
    let neg = REAL.replacen("000016 000001", "000016 -00001", 1);
    assert!(err(&neg).contains("not a count"));
    let shuffled = REAL.replacen("000016 000001", "000017 000001", 1);
    assert!(
        err(&shuffled).contains("row 17 where row 16"),
        "{}",
        err(&shuffled)
    );
    let two_threads = REAL.replacen("000016 000001", "000016 000001 000000", 1);
    assert!(err(&two_threads).contains("one measurement thread"));
    let not_num = REAL.replace("# Avg Latencies: 00092", "# Avg Latencies: lots");
    assert!(err(&not_num).contains("not a number"));
    let twice = REAL.replace(
        "# Total: 000002000",
        "# Total: 000002000\n# Total: 000002000",
    );
    assert!(err(&twice).contains("twice"));
}

#[test]
fn summaries_that_contradict_the_rows_are_refused() {
    let total = REAL.replace("# Total: 000002000", "# Total: 000002001");
    assert!(err(&total).contains("Total"), "{}", err(&total));
    let min = REAL.replace("# Min Latencies: 00016", "# Min Latencies: 00015");
    assert!(err(&min).contains("disagree"));
    let max = REAL.replace("# Max Latencies: 04345", "# Max Latencies: 09999");
    assert!(err(&max).contains("disagree"));
    let avg = REAL.replace("# Avg Latencies: 00092", "# Avg Latencies: 00500");
    assert!(err(&avg).contains("Avg"));
}

#[test]
fn another_bucket_count_is_refused() {
    // A real -h 60 output (298 of its 300 samples overflowed).
    let e = err(REAL_H60);
    assert!(
        e.contains("60 histogram rows") && e.contains("-h 5000"),
        "{e}"
    );
    let more = REAL.replace("# Total: 000002000", "005000 000000\n# Total: 000002000");
    assert!(err(&more).contains("more than 5000 rows"));
}
