//! How long and how much memory a run will take, from a measured calibration: the
//! wall time of a few real runs (one repetition each of cells spread over the
//! matrix) and the process's peak resident memory while they ran. The estimate
//! scales them to every run of the matrix on the given number of jobs.

use std::time::Duration;

/// What the calibration measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    /// Wall time of each calibration run that finished.
    pub finished: Vec<Duration>,
    /// Time spent so far in calibration runs that had not finished when the
    /// estimate was made (the estimate is then a lower bound).
    pub unfinished: Vec<Duration>,
    /// Cells the calibration runs belong to.
    pub cells_sampled: usize,
    /// Resident memory of the process before the calibration, in bytes.
    pub resident_before: u64,
    /// Peak resident memory (VmHWM) during the calibration, in bytes.
    pub peak_during: u64,
    /// Runs that ran at once during the calibration.
    pub concurrent: usize,
    /// Bytes a finished run's result keeps in memory until the end (its copies and its
    /// text in results.json), on average.
    pub kept_per_run: u64,
}

/// The estimate of a whole run.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Mean wall time of a calibration run, in seconds.
    pub per_run_s: f64,
    /// Wall time of every run on `jobs` jobs, in seconds.
    pub wall_s: f64,
    /// True when some calibration runs had not finished: the times are at least
    /// these.
    pub lower_bound: bool,
    /// Peak resident memory of one run, in bytes.
    pub per_run_bytes: u64,
    /// Peak resident memory of the whole run, in bytes.
    pub memory_bytes: u64,
    pub runs: u64,
    pub jobs: usize,
}

/// The most a run may take without `--yes`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub wall_s: f64,
    pub memory_bytes: u64,
}

/// The mean wall time of a calibration run, and whether it is a lower bound: the
/// finished runs, with those still running that have already taken longer than
/// that mean (at their time so far: then a lower bound); the running ones alone
/// when none finished.
fn mean_run_time(cal: &Calibration) -> (f64, bool) {
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let done: Vec<f64> = cal.finished.iter().map(Duration::as_secs_f64).collect();
    let running = cal.unfinished.iter().map(Duration::as_secs_f64);
    if done.is_empty() {
        let running: Vec<f64> = running.collect();
        return (mean(&running), !running.is_empty());
    }
    let base = mean(&done);
    let long: Vec<f64> = running.filter(|&t| t > base).collect();
    let all: Vec<f64> = done.iter().copied().chain(long.iter().copied()).collect();
    (mean(&all), !long.is_empty())
}

/// Scales a calibration to `runs` runs on `jobs` jobs: time = mean run time ×
/// runs / jobs (the runs are handed out one at a time, so the jobs stay busy
/// to the end); memory = resident before + the jobs' runs at their measured peak +
/// every run's kept result.
pub fn estimate(cal: &Calibration, runs: u64, jobs: usize) -> Estimate {
    let (per_run_s, lower_bound) = mean_run_time(cal);
    let jobs = jobs.max(1).min(runs.max(1) as usize);
    let per_run_bytes =
        cal.peak_during.saturating_sub(cal.resident_before) / cal.concurrent.max(1) as u64;
    let memory_bytes =
        cal.resident_before + jobs as u64 * per_run_bytes + runs.saturating_mul(cal.kept_per_run);
    Estimate {
        per_run_s,
        wall_s: per_run_s * runs as f64 / jobs as f64,
        lower_bound,
        per_run_bytes,
        memory_bytes,
        runs,
        jobs,
    }
}

impl Estimate {
    /// Why the estimate is over `limits`, one reason per limit; empty when within.
    pub fn exceeds(&self, limits: &Limits) -> Vec<String> {
        let mut why = Vec::new();
        if self.wall_s > limits.wall_s {
            why.push(format!(
                "{} {} exceeds the time limit of {}",
                self.at_least(),
                human_s(self.wall_s),
                human_s(limits.wall_s)
            ));
        }
        if self.memory_bytes > limits.memory_bytes {
            why.push(format!(
                "{} {} MB of memory exceeds the limit of {} MB",
                self.at_least(),
                mb(self.memory_bytes),
                mb(limits.memory_bytes)
            ));
        }
        why
    }

    fn at_least(&self) -> &'static str {
        if self.lower_bound {
            "at least"
        } else {
            "about"
        }
    }

    /// Two lines: the time and the memory, and what they come from.
    pub fn describe(&self, cal: &Calibration) -> String {
        let measured = cal.finished.len();
        let pending = if cal.unfinished.is_empty() {
            String::new()
        } else {
            format!(", {} more still running", cal.unfinished.len())
        };
        let secs = || cal.finished.iter().map(Duration::as_secs_f64);
        let spread = match (secs().min_by(f64::total_cmp), secs().max_by(f64::total_cmp)) {
            (Some(lo), Some(hi)) => format!("; they took {lo:.3} to {hi:.3} s"),
            _ => String::new(),
        };
        format!(
            "time: {} {} on {} jobs ({} runs x {:.3} s per run, the mean of {measured} calibration \
             runs, one repetition of each of {} cells drawn from the matrix{pending}{spread})\n\
             memory: {} {} MB at the peak ({} MB resident before, {} MB per running job \
             from the peak resident size (VmHWM) during calibration, results kept to the end)\n",
            self.at_least(),
            human_s(self.wall_s),
            self.jobs,
            self.runs,
            self.per_run_s,
            cal.cells_sampled,
            self.at_least(),
            mb(self.memory_bytes),
            mb(cal.resident_before),
            mb(self.per_run_bytes),
        )
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

/// Seconds as `12.3 s`, `4.5 min` or `2.1 h`.
pub fn human_s(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// This process's resident memory and its peak so far (VmRSS, VmHWM), in bytes,
/// from /proc/self/status; `None` where there is no such file.
pub fn process_memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Half of the memory the kernel reports available (MemAvailable), in bytes: the
/// default memory limit, leaving the rest to the machine's other work.
pub fn default_memory_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line["MemAvailable:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024 / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal() -> Calibration {
        Calibration {
            finished: vec![Duration::from_millis(200), Duration::from_millis(400)],
            unfinished: Vec::new(),
            cells_sampled: 2,
            resident_before: 10_000_000,
            peak_during: 30_000_000,
            concurrent: 2,
            kept_per_run: 1_000,
        }
    }

    #[test]
    fn scales_the_calibration() {
        let e = estimate(&cal(), 100, 4);
        assert!((e.per_run_s - 0.3).abs() < 1e-12);
        assert!((e.wall_s - 0.3 * 100.0 / 4.0).abs() < 1e-9);
        assert_eq!(e.per_run_bytes, 10_000_000);
        assert_eq!(e.memory_bytes, 10_000_000 + 4 * 10_000_000 + 100 * 1_000);
        assert!(!e.lower_bound);
        // fewer runs than jobs: the extra jobs do nothing
        let e = estimate(&cal(), 2, 8);
        assert_eq!(e.jobs, 2);
        assert!((e.wall_s - 0.3).abs() < 1e-12);
    }

    #[test]
    fn unfinished_runs_make_a_lower_bound() {
        let mut c = cal();
        c.unfinished.push(Duration::from_secs(10));
        let e = estimate(&c, 10, 1);
        assert!(e.lower_bound);
        assert!(e.wall_s > 30.0);
        let why = e.exceeds(&Limits {
            wall_s: 5.0,
            memory_bytes: u64::MAX,
        });
        assert_eq!(why.len(), 1);
        assert!(why[0].starts_with("at least"), "{why:?}");
        assert!(e.describe(&c).contains("1 more still running"));
    }

    #[test]
    fn short_unfinished_runs_say_nothing() {
        // a calibration cut off by its wait: a run that has taken less than the
        // mean so far is left out, and the estimate is no lower bound
        let mut c = cal();
        c.unfinished.push(Duration::from_millis(100));
        let e = estimate(&c, 10, 1);
        assert!(!e.lower_bound);
        assert!((e.per_run_s - 0.3).abs() < 1e-12);
        // nothing finished: the running ones, as a lower bound
        let c = Calibration {
            finished: Vec::new(),
            unfinished: vec![Duration::from_secs(2)],
            ..cal()
        };
        let e = estimate(&c, 10, 1);
        assert!(e.lower_bound && (e.per_run_s - 2.0).abs() < 1e-12);
    }

    #[test]
    fn limits_name_what_is_over() {
        let e = estimate(&cal(), 100, 4);
        let none = e.exceeds(&Limits {
            wall_s: 3600.0,
            memory_bytes: 1 << 40,
        });
        assert!(none.is_empty());
        let both = e.exceeds(&Limits {
            wall_s: 1.0,
            memory_bytes: 1_000_000,
        });
        assert_eq!(both.len(), 2);
        assert!(
            both[1].contains("MB of memory exceeds the limit of 1.0 MB"),
            "{both:?}"
        );
    }

    #[test]
    fn reads_this_process_memory() {
        let (rss, hwm) = process_memory().unwrap();
        assert!(rss > 0 && hwm >= rss);
        assert!(default_memory_limit().unwrap() > 0);
    }
}
