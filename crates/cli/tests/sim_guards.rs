//! `tandem sim run`'s guards and provenance: the dry run's estimate, the limits that
//! ask for --yes, oversized scenarios, --out checked before any work, a run stopped
//! by a signal keeping what it measured, and every option in results.json.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{tandem, Scratch};
use nix::sys::signal::Signal;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// 4 cells x 3 repetitions, quick.
const SMALL: &str = r#"
name = "small"
benchmark = "startup"
app = "xterm"
iterations = 1
repetitions = 3
[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq", "noop"]
host_workload = ["none", "1r-seq"]
"#;

/// 24 cells x 6 repetitions of busy disks: 7 s of work in a release build on a
/// loaded 2-core machine, seconds on a fast idle one; the first cell is done after
/// a tenth of it.
const SLOW: &str = r#"
name = "slow"
benchmark = "startup"
app = "xterm"
iterations = 5
repetitions = 6
timeout_s = 20
[matrix]
device = ["hdd-1.8in", "emmc"]
host_sched = ["bfq", "noop", "cfq", "deadline"]
host_workload = ["5r-seq", "2r2w-rand", "5r-rand"]
"#;

fn write(d: &Scratch, name: &str, text: &str) -> String {
    let p = d.p(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// The number after `prefix` in `text` (up to the next space).
fn number_after(text: &str, prefix: &str) -> f64 {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {text}"));
    let rest = &text[at + prefix.len()..];
    let end = rest.find(' ').unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("not a number after {prefix:?}: {rest}"))
}

#[test]
fn dry_run_prints_the_plan_and_a_measured_estimate() {
    let d = Scratch::new("dry");
    let sc = write(&d, "s.toml", SMALL);
    let out = d.p("out");
    let o = tandem(&[
        "sim",
        "run",
        &sc,
        "--out",
        out.to_str().unwrap(),
        "--dry-run",
        "--jobs",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("cells: 4 (of 4 in the matrix)\nruns: 12\njobs: 1\n"),
        "{text}"
    );
    // time = runs x the measured mean run time / jobs
    let per_run = number_after(&text, "12 runs x ");
    assert!(per_run > 0.0, "{text}");
    let total = number_after(&text, "time: about ");
    assert!(
        (total - 12.0 * per_run).abs() <= 0.05 + 12.0 * 0.0005,
        "{total} vs 12 x {per_run}: {text}"
    );
    assert!(
        text.contains("calibration runs, one repetition of each of 3 cells drawn"),
        "{text}"
    );
    let mb = number_after(&text, "memory: about ");
    let before = number_after(&text, "MB at the peak (");
    assert!(mb >= before && before > 0.0, "{text}");
    assert!(text.contains("limits: within"), "{text}");
    assert!(!out.exists(), "a dry run writes nothing");
    // --only shrinks the plan
    let o = tandem(&["sim", "run", &sc, "--dry-run", "--only", "host_sched=bfq"]);
    assert!(stdout(&o).contains("cells: 2 (of 4 in the matrix)\nruns: 6\n"));
}

#[test]
fn a_run_over_the_limits_needs_yes() {
    let d = Scratch::new("limits");
    let sc = write(&d, "s.toml", SMALL);
    let out = d.p("out");
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "run", &sc, "--out", out.to_str().unwrap(), "--quiet"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // no terminal to ask: refused
    let o = run(&["--time-limit-s", "0.000001"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("exceeds the time limit") && e.contains("--yes"),
        "{e}"
    );
    assert!(
        !out.join("results.csv").exists(),
        "a refused run writes no results"
    );
    let o = run(&["--memory-limit-mb", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("MB of memory exceeds the limit of 1.0 MB"));
    // --yes runs it
    let o = run(&["--time-limit-s", "0.000001", "--yes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    let o = run(&["--time-limit-s", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn oversized_scenarios_are_refused_at_once() {
    let d = Scratch::new("big");
    let out = d.p("out");
    let o = tandem(&["sim", "run", "/dev/zero", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/dev/zero: not a scenario: longer than 1024 KiB"),
        "{}",
        stderr(&o)
    );
    let sc = write(
        &d,
        "reps.toml",
        &SMALL.replace("repetitions = 3", "repetitions = 1000000000"),
    );
    let o = tandem(&["sim", "run", &sc, "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("repetitions: too large: 1000000000; at most 10000"));
    assert!(!out.exists());
}

/// --out that cannot take the outputs is an error before any work: with a
/// scenario of 10,000 repetitions of busy cells (hours of simulation), the test
/// finishes only if nothing ran.
#[test]
fn out_is_checked_before_any_work() {
    let d = Scratch::new("out");
    let sc = write(
        &d,
        "slow.toml",
        &SLOW.replace("repetitions = 6", "repetitions = 10000"),
    );
    let file = d.p("a-file");
    std::fs::write(&file, "keep me").unwrap();
    let o = tandem(&["sim", "run", &sc, "--out", file.to_str().unwrap(), "--yes"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--out: ") && stderr(&o).contains("exists and is not a directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // a place nobody can write to, root included
    let o = tandem(&["sim", "run", &sc, "--out", "/proc/tandem-out", "--yes"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("/proc/tandem-out"), "{}", stderr(&o));
}

/// Starts `tandem sim run SLOW`, waits for the first finished cell in results.csv,
/// sends `signal` and returns the exit code and the output directory's results.
fn interrupt(d: &Scratch, signal: Signal) -> (Option<i32>, String, serde_json::Value) {
    let sc = write(d, "slow.toml", SLOW);
    let out = d.p(&format!("out-{signal}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "sim",
            "run",
            &sc,
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--jobs",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let csv = out.join("results.csv");
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_to_string(&csv).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "no cell finished");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before a signal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    common::send_signal(child.id(), signal).unwrap();
    let o = child.wait_with_output().unwrap();
    let json: serde_json::Value = common::results_json(&out);
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("results.json says the run is incomplete"));
    (o.status.code(), csv, json)
}

fn check_incomplete(csv: &str, json: &serde_json::Value, signal: &str) {
    let p = &json["meta"]["extra"]["provenance"];
    assert_eq!(p["complete"], false, "{p}");
    assert_eq!(p["interrupted_by"], signal);
    assert_eq!(p["cells_planned"], 24);
    let done = p["cells_done"].as_u64().unwrap() as usize;
    assert!((1..24).contains(&done), "{p}");
    assert_eq!(json["cells"].as_array().unwrap().len(), done);
    assert_eq!(csv.lines().count(), done + 1, "a row per measured cell");
    assert!(p["finished"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn sigint_keeps_the_finished_cells() {
    let d = Scratch::new("sigint");
    let (code, csv, json) = interrupt(&d, Signal::SIGINT);
    assert_eq!(code, Some(130));
    check_incomplete(&csv, &json, "SIGINT");
}

#[test]
fn sigterm_keeps_the_finished_cells() {
    let d = Scratch::new("sigterm");
    let (code, csv, json) = interrupt(&d, Signal::SIGTERM);
    assert_eq!(code, Some(143));
    check_incomplete(&csv, &json, "SIGTERM");
}

/// Every flag `sim run --help` lists is in `knobs` or is one of the options that do
/// not change a result.
fn assert_help_covers(knobs: Vec<&str>) {
    // options that do not change a result
    let not_knobs = [
        "out",
        "only",
        "jobs",
        "quiet",
        "dry-run",
        "yes",
        "time-limit-s",
        "memory-limit-mb",
        "log-format",
        "help",
    ];
    let help = stdout(&tandem(&["sim", "run", "--help"]));
    for word in help.split_whitespace() {
        let Some(flag) = word.strip_prefix("--") else {
            continue;
        };
        let flag = flag.trim_end_matches([',', '.']);
        assert!(
            not_knobs.contains(&flag) || knobs.contains(&flag),
            "--{flag} is not covered by this test"
        );
    }
}

/// Every option of `sim run` that can change a result, given a value other than its
/// default, appears with that value in results.json; and the options `--help` lists
/// are all covered, so that a new one cannot be left out silently.
#[test]
fn results_json_records_every_option_and_the_provenance() {
    use serde_json::json;
    let given: &[(&str, Option<&str>, serde_json::Value)] = &[
        (
            "host-kernel",
            Some("linux-3.12-arm"),
            "linux-3.12-arm".into(),
        ),
        ("host-kernel-set", Some("hz=300"), json!(["hz=300"])),
        ("no-low-latency", None, true.into()),
        ("queue-depth", Some("4"), 4.into()),
        ("dispatch-depth", Some("4"), 4.into()),
        (
            "hdd-param",
            Some("rpm=5400"),
            serde_json::json!(["rpm=5400"]),
        ),
        ("guest-kernel", Some("linux-6.1"), "linux-6.1".into()),
        (
            "guest-kernel-set",
            Some("softrt_slack=0"),
            json!(["softrt_slack=0"]),
        ),
        ("guest-exact-ticks", None, true.into()),
        ("aio", Some("threads"), "threads".into()),
        ("virtqueue-depth", Some("64"), 64.into()),
        ("channel", Some("hypercall"), "hypercall".into()),
        ("lease-ms", Some("500"), 500.into()),
        ("budget-fraction", Some("0.5"), 0.5.into()),
        ("budget-window-s", Some("20"), 20.0.into()),
        ("quantum-ms", Some("50"), 50.into()),
        ("max-boosted", Some("2"), 2.into()),
        ("help-per-raising-s", Some("1.5"), 1.5.into()),
        ("no-help-delay-ms", Some("30"), 30.into()),
        ("weight-factor", Some("5"), 5.into()),
        ("app-metadata-share", Some("0.5"), 0.5.into()),
        (
            "platform",
            Some("chromebook-2014"),
            "chromebook-2014".into(),
        ),
        ("cpu-speed", Some("0.2"), 0.2.into()),
        ("no-cpu-io-costs", None, true.into()),
    ];
    assert_help_covers(given.iter().map(|(f, _, _)| *f).collect());
    let d = Scratch::new("prov");
    let sc = write(
        &d,
        "s.toml",
        &SMALL.replace("repetitions = 3", "repetitions = 1"),
    );
    let out = d.p("out");
    let mut args: Vec<String> = ["sim", "run", &sc, "--out", out.to_str().unwrap(), "--quiet"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--only".into(), "host_sched=bfq".into()]);
    for (flag, value, _) in given {
        args.push(format!("--{flag}"));
        if let Some(v) = value {
            args.push(v.to_string());
        }
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = tandem(&argv);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = common::results_json(&out);
    let extra = &json["meta"]["extra"];
    let options = &extra["options"];
    for (flag, _, want) in given {
        let key = flag.replace('-', "_");
        assert_eq!(&options[&key], want, "--{flag} in {options}");
    }
    assert_eq!(options["only"], serde_json::json!(["host_sched=bfq"]));
    // The host's kernel as it ran: the profile with its override.
    assert_eq!(
        extra["host_kernel"],
        serde_json::json!({"profile": "linux-3.12-arm", "hz": 300, "bfq": "v7r2",
            "slice_idle_jiffies": true, "softrt_slack": true, "sync_writes_sync": false})
    );
    let policy = &extra["coordination_policy"];
    assert_eq!(policy["max_lease_ns"], 500_000_000u64);
    assert_eq!(policy["weight_factor"], 5);
    let p = &extra["provenance"];
    assert_eq!(p["complete"], true);
    assert_eq!(p["tandem_version"], env!("CARGO_PKG_VERSION"));
    let commit = p["git_commit"].as_str().unwrap();
    assert!(
        commit == "unknown"
            || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    let argv_back: Vec<String> = p["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        argv_back[1..],
        args[..],
        "the command line, argument by argument"
    );
    for t in ["started", "finished"] {
        let s = p[t].as_str().unwrap();
        assert!(
            s.len() == 20 && s.ends_with('Z') && &s[10..11] == "T",
            "{t}: {s}"
        );
    }
    assert!(p["started"].as_str() <= p["finished"].as_str());
    assert!(!p["host"]["kernel"].as_str().unwrap().is_empty());
    assert!(!p["host"]["cpu_model"].as_str().unwrap().is_empty());
    assert!(p["host"]["cores"].as_u64().unwrap() >= 1);
    assert!(Path::new(&out).join("table.txt").is_file());
}

/// A scenario's `host_kernel` is the simulated host's kernel unless
/// `--host-kernel` says otherwise; results.json records the one that ran, the
/// kernel changes the results, and a name the simulator does not know is a
/// usage error naming the key and the accepted profiles.
#[test]
fn a_scenarios_host_kernel_runs_unless_the_option_overrides_it() {
    let d = Scratch::new("host-kernel");
    let text = SMALL
        .replace("repetitions = 3", "repetitions = 1")
        .replace("[matrix]", "host_kernel = \"linux-3.12-arm\"\n[matrix]");
    let sc = write(&d, "s.toml", &text);
    let run = |out: &str, extra: &[&str]| {
        let out = d.p(out);
        let mut args = vec![
            "sim",
            "run",
            &sc,
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--only",
            "host_sched=bfq",
            "--only",
            "host_workload=1r-seq",
        ];
        args.extend_from_slice(extra);
        let o = tandem(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let json: serde_json::Value = common::results_json(&out);
        let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
        (json["meta"]["extra"]["host_kernel"]["profile"].clone(), csv)
    };
    let (scenario_kernel, scenario_csv) = run("a", &[]);
    assert_eq!(scenario_kernel, "linux-3.12-arm");
    let (option_kernel, option_csv) = run("b", &["--host-kernel", "linux-6.1"]);
    assert_eq!(option_kernel, "linux-6.1");
    assert_ne!(scenario_csv, option_csv, "the host kernel changed nothing");

    let bad = write(&d, "bad.toml", &text.replace("linux-3.12-arm", "linux-9.9"));
    let out = d.p("c");
    let o = tandem(&[
        "sim",
        "run",
        &bad,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("host_kernel") && e.contains("linux-9.9") && e.contains("linux-3.12-arm"),
        "{e}"
    );
}
