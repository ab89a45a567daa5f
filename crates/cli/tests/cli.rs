//! The `tandem` binary end to end: outputs, determinism and bad input.

use std::path::{Path, PathBuf};

mod common;
use common::tandem;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const SMALL: &str = r#"
name = "small"
benchmark = "startup"
app = "xterm"
iterations = 2
repetitions = 2
timeout_s = 60
[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq", "noop"]
host_workload = ["none", "1r-seq"]
"#;

#[test]
fn run_writes_every_output_and_is_deterministic() {
    let d = tmpdir("run");
    let sc = write(&d, "small.toml", SMALL);
    let out1 = d.join("o1");
    let out2 = d.join("o2");
    for out in [&out1, &out2] {
        let o = tandem(&["sim", "run", &sc, "--out", out.to_str().unwrap(), "--quiet"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for f in ["results.csv", "results.json", "table.txt"] {
        assert!(out1.join(f).is_file(), "{f} missing");
    }
    let svgs = std::fs::read_dir(&out1)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count();
    assert!(svgs >= 1, "no SVG plot");
    // S-style per-cell stat files.
    let stat = out1.join("bfq-1r0w-seq-lat_thr_stat.txt");
    assert!(stat.is_file(), "missing {}", stat.display());
    let csv1 = std::fs::read(out1.join("results.csv")).unwrap();
    let csv2 = std::fs::read(out2.join("results.csv")).unwrap();
    assert_eq!(csv1, csv2, "same seed, different results.csv");
    let text = String::from_utf8(csv1).unwrap();
    assert!(text.starts_with(
        "runner,device,guest_sched,host_sched,guest_workload,host_workload,coordination,benchmark,app,metric,n,mean,std,min,max,ci95_low,ci95_high,timeouts"
    ));
    assert_eq!(text.lines().count(), 5, "header plus four cells");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn only_filters_cells() {
    let d = tmpdir("only");
    let sc = write(&d, "small.toml", SMALL);
    let out = d.join("o");
    let o = tandem(&[
        "sim",
        "run",
        &sc,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--only",
        "host_sched=bfq",
        "--only",
        "host_workload=none",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2);
    let o = tandem(&[
        "sim",
        "run",
        &sc,
        "--out",
        out.to_str().unwrap(),
        "--only",
        "colour=red",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("colour") && err.contains("host_sched"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Each bad scenario must fail with exit code 2, no panic, and a message
/// naming the key, the value and what is accepted.
#[test]
fn bad_input_is_named_and_refused() {
    let d = tmpdir("bad");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "device",
            &SMALL.replace("\"hdd-1.8in\"", "\"floppy\""),
            &["device", "floppy", "hdd-1.8in", "emmc"],
        ),
        (
            "sched",
            &SMALL.replace("\"noop\"", "\"bfqq\""),
            &["host_sched", "bfqq", "deadline", "cfq"],
        ),
        (
            "workload",
            &SMALL.replace("\"1r-seq\"", "\"3x-seq\""),
            &["host_workload", "3x-seq", "none"],
        ),
        (
            "key",
            &SMALL.replace("timeout_s = 60", "timeout_s = 60\nturbo = true"),
            &["turbo", "iterations"],
        ),
        (
            "toml",
            &SMALL.replace("host_sched = [", "host_sched = [[["),
            &["line"],
        ),
        (
            "app",
            &SMALL.replace("\"xterm\"", "\"emacs\""),
            &["app", "emacs", "xterm"],
        ),
    ];
    for (name, text, needles) in cases {
        let sc = write(&d, &format!("{name}.toml"), text);
        let o = tandem(&[
            "sim",
            "run",
            &sc,
            "--out",
            d.join("o").to_str().unwrap(),
            "--quiet",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{name}: error does not name {n:?}: {err}");
        }
    }
    let o = tandem(&["sim", "run", "/nonexistent/x.toml", "--out", "/tmp/x"]);
    assert_eq!(o.status.code(), Some(2));
    let o = tandem(&["sim", "run", "--host-kernel-set", "hz=0"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--host-kernel-set hz=0: out of range; accepted: 10 to 10000"),
        "{err}"
    );
    let o = tandem(&["sim", "run", "--guest-kernel", "linux-2.6"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("linux-3.12-arm"), "{err}");
    let o = tandem(&["sim", "run", "--app-metadata-share", "1.5"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--app-metadata-share 1.5: out of range"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_log_filter_or_format_is_a_usage_error() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["sim", "list"])
        .env("RUST_LOG", "devemu=loud")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("RUST_LOG=\"devemu=loud\""), "{err}");
    let o = tandem(&["--log-format", "yaml", "sim", "list"]);
    assert_eq!(o.status.code(), Some(2));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["sim", "list", "--log-format", "json"])
        .env("RUST_LOG", "warn,devemu=trace")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
