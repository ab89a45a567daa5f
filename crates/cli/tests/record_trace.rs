//! `tandem bench record-trace -- CMD`: a real command's cold start-up I/O recorded with
//! ftrace into the app trace format that the simulator and the real runner replay.

use std::path::PathBuf;

mod common;
use common::tandem;

#[test]
fn records_a_commands_start_up_into_a_replayable_trace() {
    if !devemu::is_root() || !PathBuf::from("/sys/kernel").exists() {
        eprintln!("skipped: needs root and tracefs");
        return;
    }
    let out = std::env::temp_dir().join(format!("tandem-record-test-{}", std::process::id()));
    let o = tandem(&[
        "bench",
        "record-trace",
        "--name",
        "true-cmd",
        "--runs",
        "1",
        "--quiet-timeout-s",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = out.join("true-cmd.trace");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        path.to_str().unwrap()
    );
    let trace = experiment::apptrace::AppTrace::parse(&std::fs::read_to_string(&path).unwrap())
        .expect("the recorded trace parses");
    assert_eq!(trace.name, "true-cmd");
    // A cold /bin/true reads at least its binary and the C library.
    assert!(!trace.reads.is_empty() && trace.total_bytes() > 0);
    assert!(trace.files.iter().any(|f| f.path.contains("libc")));
    // The recorder's scratch directories (`tandem-record-<pid>`) are gone.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.strip_prefix("tandem-record-")
                .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir_all(&out);

    // Usage errors: no command, a bad name.
    let o = tandem(&["bench", "record-trace", "--name", "a b", "--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(2));
}
