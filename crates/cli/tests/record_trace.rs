//! `tandem bench record-trace -- CMD`: a real command's cold start-up I/O recorded with
//! ftrace into the app trace format that the simulator and the real runner replay.
//!
//! Needs root (ftrace, dropping the page cache) and python3 (the recorder): the test
//! is `#[ignore = "needs root: ..."]`, run with `cargo test -- --include-ignored`
//! (as `tools/test` does), and fails there when one is missing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::{require, tandem, Need, Scratch, PYTHON3};

/// Bytes of the file the recorded command reads: a few read requests at the
/// default 128 KiB read-ahead.
const PAYLOAD: usize = 1 << 20;

#[test]
#[ignore = "needs root: ftrace and dropping the page cache; python3 runs the recorder"]
fn records_a_commands_start_up_into_a_replayable_trace() {
    require(&[Need::Root, PYTHON3]);
    let s = Scratch::new("record-trace");
    // The command reads a file of the test's own, which nothing else on the
    // machine has in its page cache once the recorder has dropped the caches:
    // its reads are in every trace, whatever other processes keep cached (a
    // shared library such as libc, mapped by running processes, usually is).
    // The recorder maps inodes to paths on the root filesystem only.
    assert_eq!(
        std::fs::metadata(&s.0).unwrap().dev(),
        std::fs::metadata("/").unwrap().dev(),
        "{} is not on the root filesystem, whose files the recorder names",
        s.0.display()
    );
    let payload = s.p("payload");
    let bytes: Vec<u8> = (0..PAYLOAD).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&payload, bytes).unwrap();
    let input = format!("if={}", payload.display());
    // The recorder's scratch directory (`tandem-record-<pid>`) goes in a
    // temporary directory of this test's own, so that the check below sees
    // only this run's.
    let tmp = s.p("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = s.p("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "record-trace", "--name", "dd-payload"])
        .args(["--runs", "1", "--quiet-timeout-s", "2", "--out"])
        .arg(&out)
        .args(["--", "dd", &input, "of=/dev/null", "bs=64k", "status=none"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = out.join("dd-payload.trace");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        path.to_str().unwrap()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let trace = experiment::apptrace::AppTrace::parse(&text).expect("the recorded trace parses");
    assert_eq!(trace.name, "dd-payload");
    assert!(
        trace.command.contains(payload.to_str().unwrap()),
        "{}",
        trace.command
    );
    // The exec of the command is traced.
    assert!(
        text.lines()
            .any(|l| l.starts_with("# execs: ") && l.contains("dd")),
        "{text}"
    );
    // All of the payload, cold, read from the disk.
    let id = trace
        .files
        .iter()
        .position(|f| Path::new(&f.path) == payload)
        .unwrap_or_else(|| panic!("{} not in the trace:\n{text}", payload.display()));
    let read: u64 = trace
        .reads
        .iter()
        .filter(|r| r.file == id)
        .map(|r| r.len)
        .sum();
    assert_eq!(read, PAYLOAD as u64, "{text}");
    // Nothing of the recorder's left in its temporary directory.
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bad_names_are_usage_errors() {
    // Checked before root and python3 are: runs anywhere.
    let o = tandem(&["bench", "record-trace", "--name", "a b", "--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(2));
}
