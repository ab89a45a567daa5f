use std::path::Path;

use experiment::*;

fn names<T: ToString>(values: &[T]) -> Vec<String> {
    values.iter().map(ToString::to_string).collect()
}

fn accepted() -> Accepted {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    Accepted {
        devices: v(&["hdd-1.8in", "microsd-class6", "emmc"]),
        host_scheds: v(&["noop", "deadline", "anticipatory", "cfq", "bfq"]),
        guest_scheds: v(&["noop", "deadline", "cfq", "bfq"]),
        coordination: v(&["off", "help-wr"]),
        apps: v(&["bash", "xterm", "konsole"]),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

const GOOD: &str = r#"
name = "missing-link"
benchmark = "startup"
app = "xterm"
iterations = 5
repetitions = 10
timeout_s = 60
duration_s = 60.0
sample_s = 2
seed = 42

[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq", "cfq"]
host_workload = ["none", "1r-seq", "5r0w-seq"]
guest_sched = ["bfq"]
guest_workload = ["none", "5r-seq"]
"#;

fn err(text: &str) -> String {
    Scenario::from_toml_str(text, &accepted())
        .expect_err("expected an error")
        .to_string()
}

fn with_matrix(top: &str, matrix: &str) -> String {
    format!("benchmark = \"startup\"\n{top}\n[matrix]\n{matrix}\n")
}

const M: &str = "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]";

#[test]
fn parses_good_scenario() {
    let s = Scenario::from_toml_str(GOOD, &accepted()).unwrap();
    assert_eq!(s.name, "missing-link");
    assert_eq!(s.benchmark, Benchmark::Startup);
    assert_eq!((s.iterations, s.repetitions, s.seed), (5, 10, 42));
    assert_eq!((s.timeout_s, s.duration_s, s.sample_s), (60.0, 60.0, 2.0));
    // canonical workload names
    assert_eq!(
        names(&s.matrix.host_workload),
        vec!["none", "1r-seq", "5r-seq"]
    );
    assert_eq!(names(&s.matrix.coordination), vec!["off"]);
    assert!(s.is_vm());
    let cells = s.cells();
    assert_eq!(cells.len(), 2 * 3 * 2);
    assert_eq!(cells.len(), s.cell_count());
    // stable order: device, guest_sched, guest_workload, host_sched, host_workload, coord
    let order: Vec<(String, String, String)> = cells
        .iter()
        .map(|c| {
            (
                c.guest_workload.unwrap().name(),
                c.host_sched.to_string(),
                c.host_workload.name(),
            )
        })
        .collect();
    assert_eq!(order[0], ("none".into(), "bfq".into(), "none".into()));
    assert_eq!(order[1], ("none".into(), "bfq".into(), "1r-seq".into()));
    assert_eq!(order[3], ("none".into(), "cfq".into(), "none".into()));
    assert_eq!(order[6], ("5r-seq".into(), "bfq".into(), "none".into()));
    assert!(cells
        .iter()
        .all(|c| !c.is_native() && c.scenario == "missing-link"));
    // per-cell seeds are distinct and independent of the order
    let mut seeds: Vec<u64> = cells.iter().map(|c| c.seed).collect();
    seeds.sort();
    seeds.dedup();
    assert_eq!(seeds.len(), cells.len());
    for c in &cells {
        assert_eq!(c.seed, cell_seed(42, c));
    }
}

#[test]
fn defaults_and_native() {
    let s = Scenario::from_toml_str(&with_matrix("", M), &accepted()).unwrap();
    assert_eq!(s.name, "scenario");
    assert_eq!(s.app, "xterm");
    assert_eq!((s.iterations, s.repetitions, s.seed), (5, 10, 1));
    assert_eq!((s.timeout_s, s.duration_s, s.sample_s), (60.0, 60.0, 2.0));
    let cells = s.cells();
    assert_eq!(cells.len(), 1);
    assert!(cells[0].is_native());
    assert_eq!(cells[0].guest_sched, None);
    assert_eq!(cells[0].coordination.name(), "off");
    // empty guest lists mean native too
    let s = Scenario::from_toml_str(
        &with_matrix("", &format!("{M}\nguest_sched = []\nguest_workload = []")),
        &accepted(),
    )
    .unwrap();
    assert!(s.cells()[0].is_native());
    // a bare string is a one-element list
    let s = Scenario::from_toml_str(
        &with_matrix(
            "",
            "device = \"hdd-1.8in\"\nhost_sched = \"bfq\"\nhost_workload = \"none\"",
        ),
        &accepted(),
    )
    .unwrap();
    assert_eq!(names(&s.matrix.device), vec!["hdd-1.8in"]);
}

#[test]
fn seeds_are_stable_across_subsets() {
    let s = Scenario::from_toml_str(GOOD, &accepted()).unwrap();
    let all = s.cells();
    let f = Filter::parse(&["host_sched=cfq".to_string()]).unwrap();
    for c in f.apply(&all) {
        assert_eq!(c.seed, cell_seed(42, &c));
    }
    // pinned value: the documented hash must never change
    let c = &all[0];
    assert_eq!(c.key(), "device=hdd-1.8in guest_sched=bfq guest_workload=none host_sched=bfq host_workload=none coordination=off");
    let bytes = b"hdd-1.8in\x1fbfq\x1fnone\x1fbfq\x1fnone\x1foff";
    assert_eq!(c.seed, splitmix64(42 ^ splitmix64(fnv1a64(bytes))));
    // FNV-1a and SplitMix64 reference values
    assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
    assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    assert_eq!(splitmix64(0), 0xe220a8397b1dcdaf);
}

#[test]
fn malformed_toml_has_line_and_column() {
    let e = err("benchmark = \"startup\"\nname = \n");
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("column"), "{e}");
}

#[test]
fn unknown_keys() {
    let e = err(&with_matrix("foo = 1", M));
    assert!(e.contains("unknown key \"foo\""), "{e}");
    assert!(e.contains("accepted keys: name, benchmark, app"), "{e}");
    let e = err(&with_matrix("", &format!("{M}\nhost_schd = [\"bfq\"]")));
    assert!(e.contains("unknown key \"matrix.host_schd\""), "{e}");
    assert!(
        e.contains("device, host_sched, host_workload, guest_sched"),
        "{e}"
    );
}

#[test]
fn unknown_values_name_key_value_and_accepted() {
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfqq\"]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.host_sched: unknown scheduler \"bfqq\"; accepted: noop, deadline, anticipatory, cfq, bfq"
    );
    let e = err(&with_matrix(
        "",
        "device = [\"floppy\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.device: unknown device \"floppy\"; accepted: hdd-1.8in, microsd-class6, emmc"
    );
    let e = err(&with_matrix(
        "",
        &format!("{M}\nguest_sched = [\"anticipatory\"]\nguest_workload = [\"none\"]"),
    ));
    assert!(e.starts_with("matrix.guest_sched: unknown scheduler \"anticipatory\"; accepted: noop, deadline, cfq, bfq"), "{e}");
    let e = err(&with_matrix("", &format!("{M}\ncoordination = [\"on\"]")));
    assert_eq!(
        e,
        "matrix.coordination: unknown coordination mode \"on\"; accepted: off, help-wr"
    );
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"5rseq\"]",
    ));
    assert!(
        e.starts_with("matrix.host_workload: unknown workload \"5rseq\"; accepted: none, Nr-seq"),
        "{e}"
    );
    let e = err("benchmark = \"jitter\"\n[matrix]\n");
    assert_eq!(
        e,
        "benchmark: unknown benchmark \"jitter\"; accepted: startup, throughput, latency, profile, readers-hashers"
    );
    let e = err(&with_matrix("app = \"firefox\"", M));
    assert_eq!(
        e,
        "app: unknown app \"firefox\"; accepted: bash, xterm, konsole"
    );
}

#[test]
fn cmd_apps() {
    let e = err(&with_matrix("app = \"cmd:xterm /bin/true\"", M));
    assert!(
        e.starts_with("app: \"cmd:xterm /bin/true\": cmd: apps"),
        "{e}"
    );
    assert!(e.contains("accepted: bash, xterm, konsole"), "{e}");
    let mut a = accepted();
    a.allow_cmd_apps = true;
    let s = Scenario::from_toml_str(&with_matrix("app = \"cmd:xterm /bin/true\"", M), &a).unwrap();
    assert_eq!(s.app, "cmd:xterm /bin/true");
    let e = Scenario::from_toml_str(&with_matrix("app = \"cmd:  \"", M), &a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty command line"), "{e}");
    let e = Scenario::from_toml_str(&with_matrix("app = \"firefox\"", M), &a)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("accepted: bash, xterm, konsole, or cmd:<command line>"),
        "{e}"
    );
}

#[test]
fn default_app_only_checked_for_startup() {
    let mut a = accepted();
    a.apps.clear();
    let text = format!("benchmark = \"throughput\"\n[matrix]\n{M}\n");
    assert!(Scenario::from_toml_str(&text, &a).is_ok());
    let e = Scenario::from_toml_str(&with_matrix("", M), &a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown app \"xterm\" (the default)"), "{e}");
}

#[test]
fn wrong_types() {
    let e = err(&with_matrix("iterations = \"5\"", M));
    assert_eq!(
        e,
        "iterations: expected a positive integer, found string \"5\""
    );
    let e = err(&with_matrix("repetitions = 2.5", M));
    assert_eq!(
        e,
        "repetitions: expected a positive integer, found float 2.5"
    );
    let e = err(&with_matrix("timeout_s = \"60\"", M));
    assert_eq!(
        e,
        "timeout_s: expected a number of seconds, found string \"60\""
    );
    let e = err(&with_matrix("name = 3", M));
    assert_eq!(e, "name: expected a string, found integer 3");
    let e = err(&with_matrix("seed = 1.5", M));
    assert!(
        e.starts_with("seed: expected a non-negative integer"),
        "{e}"
    );
    let e = err("benchmark = \"startup\"\nmatrix = 3\n");
    assert!(e.starts_with("matrix: expected a table"), "{e}");
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", 3]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.host_sched: expected a list of strings, but item 2 is integer 3"
    );
    let e = err(&with_matrix(
        "",
        "device = 1\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.device: expected a list of strings, found integer 1"
    );
}

#[test]
fn bad_numbers() {
    for (top, key, needle) in [
        (
            "iterations = 0",
            "iterations",
            "must be at least 1, found 0",
        ),
        (
            "repetitions = 0",
            "repetitions",
            "must be at least 1, found 0",
        ),
        (
            "repetitions = -3",
            "repetitions",
            "must be at least 1, found -3",
        ),
        (
            "iterations = 5000000000",
            "iterations",
            "too large: 5000000000",
        ),
        ("timeout_s = 0", "timeout_s", "found 0"),
        ("timeout_s = -1.5", "timeout_s", "found -1.5"),
        ("duration_s = 0.0", "duration_s", "found 0"),
        ("sample_s = -2", "sample_s", "found -2"),
        ("timeout_s = nan", "timeout_s", "found NaN"),
        ("timeout_s = inf", "timeout_s", "found inf"),
        (
            "seed = -1",
            "seed",
            "must be a non-negative integer, found -1",
        ),
    ] {
        let e = err(&with_matrix(top, M));
        assert!(e.starts_with(&format!("{key}: ")), "{top}: {e}");
        assert!(e.contains(needle), "{top}: {e}");
    }
}

#[test]
fn sample_longer_than_duration() {
    let e = err(&with_matrix("duration_s = 10\nsample_s = 20", M));
    assert_eq!(e, "sample_s: sample_s (20) must not exceed duration_s (10)");
    let e = err(&with_matrix("duration_s = 1", M));
    assert_eq!(
        e,
        "sample_s: sample_s (2, the default) must not exceed duration_s (1)"
    );
}

#[test]
fn missing_and_empty_required() {
    let e = err("[matrix]\n");
    assert!(e.starts_with("benchmark: missing required key"), "{e}");
    let e = err("benchmark = \"startup\"\n");
    assert!(
        e.starts_with("matrix: missing required table [matrix]"),
        "{e}"
    );
    let e = err(&with_matrix(
        "",
        "host_sched = [\"bfq\"]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.device: missing required list; accepted: hdd-1.8in, microsd-class6, emmc"
    );
    let e = err(&with_matrix(
        "",
        "device = []\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]",
    ));
    assert!(e.starts_with("matrix.device: empty list"), "{e}");
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = []\nhost_workload = [\"none\"]",
    ));
    assert!(e.starts_with("matrix.host_sched: empty list"), "{e}");
    assert!(e.contains("accepted: noop, deadline"), "{e}");
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = []",
    ));
    assert!(e.starts_with("matrix.host_workload: empty list"), "{e}");
    let e = err(&with_matrix("", &format!("{M}\ncoordination = []")));
    assert!(e.starts_with("matrix.coordination: empty list"), "{e}");
}

#[test]
fn guest_lists_go_together() {
    let e = err(&with_matrix("", &format!("{M}\nguest_sched = [\"bfq\"]")));
    assert!(
        e.starts_with("matrix.guest_workload: missing or empty, but matrix.guest_sched is set"),
        "{e}"
    );
    let e = err(&with_matrix(
        "",
        &format!("{M}\nguest_sched = [\"bfq\"]\nguest_workload = []"),
    ));
    assert!(
        e.starts_with("matrix.guest_workload: missing or empty"),
        "{e}"
    );
    let e = err(&with_matrix(
        "",
        &format!("{M}\nguest_workload = [\"5r-seq\"]"),
    ));
    assert!(
        e.starts_with(
            "matrix.guest_workload: set to \"5r-seq\", but matrix.guest_sched is missing or empty"
        ),
        "{e}"
    );
    assert!(e.contains("accepted: noop, deadline, cfq, bfq"), "{e}");
    let mut a = accepted();
    a.allow_vm = false;
    let e = Scenario::from_toml_str(
        &with_matrix(
            "",
            &format!("{M}\nguest_sched = [\"bfq\"]\nguest_workload = [\"none\"]"),
        ),
        &a,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(
            "matrix.guest_sched: this runner cannot run VM cells (guest_sched = \"bfq\")"
        ),
        "{e}"
    );
}

#[test]
fn duplicates_rejected() {
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"bfq\"]\nhost_workload = [\"none\"]",
    ));
    assert_eq!(
        e,
        "matrix.host_sched: duplicate value \"bfq\" (each value may appear once)"
    );
    let e = err(&with_matrix(
        "",
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"5r-seq\", \"5r0w-seq\"]",
    ));
    assert!(
        e.starts_with("matrix.host_workload: duplicate value \"5r-seq\""),
        "{e}"
    );
}

#[test]
fn load_names_the_path() {
    let dir = std::env::temp_dir().join(format!("tandem-exp-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("my-scen.toml");
    std::fs::write(&p, with_matrix("", M)).unwrap();
    let s = Scenario::load(&p, &accepted()).unwrap();
    assert_eq!(s.name, "my-scen");
    std::fs::write(
        &p,
        with_matrix(
            "",
            "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfqq\"]\nhost_workload = [\"none\"]",
        ),
    )
    .unwrap();
    let e = Scenario::load(&p, &accepted()).unwrap_err();
    assert_eq!(e.path.as_deref(), Some(p.as_path()));
    assert_eq!(e.key.as_deref(), Some("matrix.host_sched"));
    assert_eq!(
        e.to_string(),
        format!(
            "{}: matrix.host_sched: unknown scheduler \"bfqq\"; accepted: noop, deadline, anticipatory, cfq, bfq",
            p.display()
        )
    );
    let missing = dir.join("nope.toml");
    let e = Scenario::load(&missing, &accepted())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read scenario", missing.display())),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = Path::new("");
}

/// Sizes that would exhaust the memory are refused before any cell is made, and
/// the error names the key, the value and the limit.
#[test]
fn absurd_sizes_are_refused() {
    let e = err(&with_matrix("repetitions = 1000000000", M));
    assert!(
        e.contains("repetitions") && e.contains("1000000000") && e.contains("at most 10000"),
        "{e}"
    );
    let e = err(&with_matrix("iterations = 20000", M));
    assert!(e.contains("iterations: too large: 20000"), "{e}");
    let e = err(&with_matrix("timeout_s = 1e9", M));
    assert!(e.contains("timeout_s: too long"), "{e}");
    // 500 host x 500 guest workloads: 250,000 cells
    let many = |suffix: &str| {
        (1..=500)
            .map(|n| format!("\"{n}r-{suffix}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let matrix = format!(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [{}]\nguest_sched = [\"bfq\"]\nguest_workload = [{}]",
        many("seq"),
        many("rand")
    );
    let e = err(&with_matrix("", &matrix));
    assert!(e.contains("matrix: 250000 cells; at most 100000"), "{e}");
    // within the cell limit, but too many runs
    let e = err(&with_matrix(
        "repetitions = 10000",
        &matrix.replace(&many("rand"), "\"1r-rand\", \"2r-rand\""),
    ));
    assert!(
        e.contains("1000 cells x 10000 repetitions = 10000000 runs; at most 1000000"),
        "{e}"
    );
}

/// A file longer than the limit is refused after reading just past the limit:
/// `/dev/zero` (endless) fails at once instead of filling the memory.
#[test]
fn oversized_scenario_files_are_refused() {
    let e = Scenario::load(Path::new("/dev/zero"), &accepted())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/dev/zero: not a scenario: longer than 1024 KiB"),
        "{e}"
    );
    let big = std::env::temp_dir().join(format!("tandem-big-{}.toml", std::process::id()));
    let mut text = with_matrix("", M);
    text.push_str(&"# padding\n".repeat(120_000));
    std::fs::write(&big, &text).unwrap();
    let e = Scenario::load(&big, &accepted()).unwrap_err().to_string();
    std::fs::remove_file(&big).unwrap();
    assert!(e.contains("not a scenario: longer than 1024 KiB"), "{e}");
}

/// Host busy loops beside a guest's I/O (CFS-v's case) are accepted in
/// throughput cells, and refused in cold start-up cells as before.
#[test]
fn host_cpu_load_is_accepted_in_throughput_cells_only_beside_the_cpu_model() {
    let mut a = accepted();
    a.coordination = vec!["off".parse().unwrap(), "cfsv".parse().unwrap()];
    let matrix = format!("{M}\nguest_sched = [\"bfq\"]\nguest_workload = [\"4r-rand\"]\nhost_cpu_load = [\"3\"]\ncoordination = [\"off\", \"cfsv\"]");
    let throughput =
        format!("benchmark = \"throughput\"\nduration_s = 20\nsample_s = 2\n[matrix]\n{matrix}\n");
    let s = Scenario::from_toml_str(&throughput, &a).unwrap();
    let cells = s.cells();
    assert_eq!(cells.len(), 2);
    assert!(cells
        .iter()
        .all(|c| c.cpu.host_cpu_load == 3 && !c.on_cpu_model()));
    let startup = with_matrix("", &matrix);
    let e = Scenario::from_toml_str(&startup, &a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("matrix.host_cpu_load"), "{e}");
}

/// `host_kernel` names the simulated host's kernel profile: kept as written
/// (the simulator checks the name), absent by default, never empty, and left
/// out of the scenario's JSON when absent.
#[test]
fn host_kernel_is_an_optional_profile_name() {
    let s = Scenario::from_toml_str(&with_matrix("", M), &accepted()).unwrap();
    assert_eq!(s.host_kernel, None);
    assert!(!serde_json::to_string(&s).unwrap().contains("host_kernel"));
    let top = "host_kernel = \"linux-3.12-arm\"";
    let s = Scenario::from_toml_str(&with_matrix(top, M), &accepted()).unwrap();
    assert_eq!(s.host_kernel.as_deref(), Some("linux-3.12-arm"));
    let e = err(&with_matrix("host_kernel = \" \"", M));
    assert!(e.contains("host_kernel") && e.contains("empty"), "{e}");
    let e = err(&with_matrix("host_kernel = 3", M));
    assert!(e.contains("host_kernel"), "{e}");
}
