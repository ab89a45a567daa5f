//! Every shipped scenario's simulated `results.csv`, byte for byte.
//!
//! Structural changes to the simulator must not move a number. This test runs
//! `tandem sim run` on every file in `scenarios/` and compares the SHA-256 of
//! its `results.csv` with the digest recorded in `tests/data/results-digests.txt`.
//! A change that is meant to move a number updates that file on purpose, in the
//! same commit, and says why.

mod common;

use common::{tandem, Scratch};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

const DIGESTS: &str = include_str!("data/results-digests.txt");

fn recorded() -> BTreeMap<String, String> {
    DIGESTS
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, digest) = l.split_once(' ').expect("NAME DIGEST");
            (name.to_string(), digest.trim().to_string())
        })
        .collect()
}

fn shipped_scenarios() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

#[test]
fn every_shipped_scenario_gives_its_recorded_results_csv() {
    let want = recorded();
    let scratch = Scratch::new("digests");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut wrong = Vec::new();
    let names = shipped_scenarios();
    assert!(names.len() >= 10, "scenarios/ lists {names:?}");
    for name in &names {
        let Some(digest) = want.get(name) else {
            wrong.push(format!("{name}: no digest recorded"));
            continue;
        };
        let out = scratch.p(name);
        let scenario = dir.join(format!("{name}.toml"));
        let o = tandem(&[
            "sim",
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let csv = std::fs::read(out.join("results.csv")).expect("results.csv");
        let got = format!("{:x}", Sha256::digest(&csv));
        if &got != digest {
            wrong.push(format!("{name}: recorded {digest}, got {got}"));
        }
    }
    for name in want.keys() {
        if !names.contains(name) {
            wrong.push(format!("{name}: recorded but not in scenarios/"));
        }
    }
    assert!(wrong.is_empty(), "results.csv moved:\n{}", wrong.join("\n"));
}
