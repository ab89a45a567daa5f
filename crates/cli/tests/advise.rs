//! `tandem advise`: its errors, and a short simulated sweep from nothing.

mod common;
use common::{tandem, Scratch};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn unknown_profiles_and_threads_out_of_range_are_refused() {
    let r = tandem(&["advise", "--profile", "randrw"]);
    assert_eq!(r.status.code(), Some(2));
    let e = stderr(&r);
    assert!(e.contains("unknown profile \"randrw\""), "{e}");
    assert!(
        e.contains("ffsb-mixed"),
        "the accepted ones are listed: {e}"
    );
    for t in ["0", "65"] {
        let r = tandem(&["advise", "--profile", "randread", "--threads", t]);
        assert_eq!(r.status.code(), Some(2), "threads {t}");
        let e = stderr(&r);
        assert!(e.contains("--threads") && e.contains("1 to 64"), "{e}");
    }
    let r = tandem(&["advise", "--profile", "seqread", "--device", "floppy"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("floppy"));
    let r = tandem(&["advise", "--profile", "seqread", "--objective", "speed"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("throughput"), "{}", stderr(&r));
    let r = tandem(&["advise"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("--profile"), "{}", stderr(&r));
    let d = Scratch::new("advise-empty");
    let r = tandem(&["advise", "--results", d.0.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("results.json"), "{}", stderr(&r));
}

/// From nothing: 16 host x guest pairs simulated, one recommended, the
/// table printed with every pair.
#[test]
fn a_sweep_from_nothing_recommends_a_pair_and_prints_its_table() {
    let r = tandem(&[
        "advise",
        "--profile",
        "ffsb-randread",
        "--threads",
        "8",
        "--device",
        "hdd-1.8in",
        "--repetitions",
        "2",
        "--duration-s",
        "2",
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.starts_with("ffsb-randread, 8 threads, hdd-1.8in, objective throughput: host "),
        "{out}"
    );
    assert!(out.contains("expected: ") && out.contains(" tps"), "{out}");
    assert!(out.contains("confidence: "), "{out}");
    assert!(out.contains("old advice"), "{out}");
    // The table: a header and the 16 pairs, two simulated runs each.
    let pairs = out
        .lines()
        .filter(|l| l.trim_end().ends_with(" 2s"))
        .count();
    assert_eq!(pairs, 16, "{out}");
}
