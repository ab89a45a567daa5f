//! The two-tier I/O scheduler study's findings (issue 29), from
//! `scenarios/xen2tier.toml` on the simulator's Xen PV path. Each finding is
//! checked with the margin; the table of means is printed
//! (`cargo test --release -p sim --test xen2tier -- --nocapture`).

use std::collections::BTreeMap;

use experiment::{Cell, Profile, Scenario};

/// Mean of the main metric (tps or MB/s) over the cell's repetitions.
fn mean(cell: &Cell) -> f64 {
    let runs: Vec<f64> = (0..cell.repetitions)
        .map(|rep| {
            let r =
                sim::bench::run_repetition(cell, &sim::bench::SimOptions::default(), rep).unwrap();
            r.mean().unwrap()
        })
        .collect();
    runs.iter().sum::<f64>() / runs.len() as f64
}

type Key = (String, String, Profile, u32);

/// Means by (Dom0 or native scheduler, DomU scheduler or "native", profile,
/// threads).
fn table() -> BTreeMap<Key, f64> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/xen2tier.toml");
    let s = Scenario::load(std::path::Path::new(path), &sim::bench::accepted()).unwrap();
    let mut out = BTreeMap::new();
    for c in s.cells() {
        let p = c.profile.unwrap();
        let guest = c
            .guest_sched
            .map_or("native".to_string(), |g| g.to_string());
        let v = mean(&c);
        eprintln!(
            "{:>13} host {:<12} guest {:<12} {:>2}t {v:10.1}",
            p.profile, c.host_sched, guest, p.threads
        );
        out.insert((c.host_sched.to_string(), guest, p.profile, p.threads), v);
    }
    out
}

fn get(t: &BTreeMap<Key, f64>, host: &str, guest: &str, p: Profile, threads: u32) -> f64 {
    t[&(host.to_string(), guest.to_string(), p, threads)]
}

/// The VM's loss (%) against the real machine, 1 thread, Dom0 cfq (the
/// 2.6.32 default), averaged over the guest schedulers.
fn vm_loss(t: &BTreeMap<Key, f64>, p: Profile) -> f64 {
    let native = get(t, "cfq", "native", p, 1);
    let vm: f64 = SCHEDS.iter().map(|g| get(t, "cfq", g, p, 1)).sum::<f64>() / 4.0;
    100.0 * (1.0 - vm / native)
}

const SCHEDS: [&str; 4] = ["noop", "deadline", "anticipatory", "cfq"];

/// The largest relative distance from the mean of `v`.
fn spread(v: &[f64]) -> f64 {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| (x - m).abs() / m).fold(0.0, f64::max)
}

/// How much Dom0's scheduler moves the results (the largest spread over
/// Dom0 schedulers, for any DomU scheduler), and DomU's (over DomU
/// schedulers, for any Dom0 scheduler), 8 threads.
fn spreads(t: &BTreeMap<Key, f64>, p: Profile) -> (f64, f64) {
    let dom0 = SCHEDS
        .iter()
        .map(|g| spread(&SCHEDS.map(|h| get(t, h, g, p, 8))))
        .fold(0.0, f64::max);
    let domu = SCHEDS
        .iter()
        .map(|h| spread(&SCHEDS.map(|g| get(t, h, g, p, 8))))
        .fold(0.0, f64::max);
    (dom0, domu)
}

/// The study's findings that the model reproduces, each with the issue's
/// margin. Those it does not reproduce are printed, not asserted (see
/// docs/status.md for the gaps and their causes, with numbers): the random
/// profiles' 30% loss (the model's per-request Xen cost is tens of
/// microseconds against milliseconds of disk time, and the sequential
/// profiles' loss allows no more: a per-request cost that gave random reads
/// 30% would give sequential ones 97%), the mixed profile's
/// loss and Dom0 independence (blkback's writes are async in Dom0, so
/// Dom0's CFQ idles on blkback's reads), and no difference between DomU
/// schedulers on random writes (anticipatory idles on O_DIRECT writes,
/// which 2.6.32 submits sync).
#[test]
fn the_studys_findings_that_the_xen_pv_model_reproduces() {
    let t = table();
    for p in Profile::ALL {
        let (dom0, domu) = spreads(&t, p);
        eprintln!(
            "{p}: VM loses {:.1}%; Dom0 spread {:.1}%, DomU spread {:.1}%",
            vm_loss(&t, p),
            100.0 * dom0,
            100.0 * domu
        );
    }
    // The VM loses 50 to 55% on sequential reads and writes (within 15
    // points of 52.5%).
    for p in [Profile::SeqRead, Profile::SeqWrite] {
        let loss = vm_loss(&t, p);
        assert!((loss - 52.5).abs() <= 15.0, "{p}: the VM loses {loss:.1}%");
    }
    // Dom0's scheduler changes DomU's results little (within 10%), DomU's
    // much more, for the random and sequential profiles.
    for p in [Profile::RandRead, Profile::SeqRead, Profile::SeqWrite] {
        let (dom0, domu) = spreads(&t, p);
        assert!(
            dom0 <= 0.10,
            "{p}: Dom0's scheduler moves results by {:.1}%",
            100.0 * dom0
        );
        assert!(
            domu > 2.0 * dom0,
            "{p}: DomU {domu:.3} against Dom0 {dom0:.3}"
        );
    }
    let (dom0, _) = spreads(&t, Profile::RandWrite);
    assert!(
        dom0 <= 0.10,
        "ffsb-randwrite: Dom0 moves results by {dom0:.3}"
    );
    // With 8 sequential threads, noop and deadline in DomU are the best for
    // every Dom0 scheduler: the disk's buffer segments follow the 8
    // interleaved streams they pass down (`sas-10k`'s per-segment streams),
    // while cfq and anticipatory serve one thread at a time and idle
    // between its requests. Margin: 10% above the better of the other two.
    for p in [Profile::SeqRead, Profile::SeqWrite] {
        for h in SCHEDS {
            let v = |g: &str| get(&t, h, g, p, 8);
            let others = v("cfq").max(v("anticipatory"));
            for g in ["noop", "deadline"] {
                assert!(
                    v(g) > 1.1 * others,
                    "{p}, Dom0 {h}: {g} {} against cfq {} and anticipatory {}",
                    v(g),
                    v("cfq"),
                    v("anticipatory")
                );
            }
        }
    }
    // noop and deadline in DomU are the best (the study: "both noop and
    // deadline have the better performance") for random reads, sequential
    // reads and writes and the mixed profile, under every Dom0 scheduler:
    // each within 2% of the best DomU scheduler (cfq ties with them on the
    // random profiles, where the study saw it slightly behind).
    for p in [
        Profile::RandRead,
        Profile::SeqRead,
        Profile::SeqWrite,
        Profile::Mixed,
    ] {
        for h in SCHEDS {
            let v = |g: &str| get(&t, h, g, p, 8);
            let best = SCHEDS.map(v).into_iter().fold(0.0, f64::max);
            for g in ["noop", "deadline"] {
                assert!(
                    v(g) >= 0.98 * best,
                    "{p}, Dom0 {h}: {g} {} against the best {best}",
                    v(g)
                );
            }
        }
    }
    // Anticipatory in DomU is the worst on random reads, sequential reads
    // and the mixed profile, under every Dom0 scheduler: at least 3% below
    // each of the others. (On sequential writes it ties with cfq: both
    // serve one thread at a time; printed, not asserted.)
    for p in [Profile::RandRead, Profile::SeqRead, Profile::Mixed] {
        for h in SCHEDS {
            let v = |g: &str| get(&t, h, g, p, 8);
            for g in ["noop", "deadline", "cfq"] {
                assert!(
                    v("anticipatory") < 0.97 * v(g),
                    "{p}, Dom0 {h}: anticipatory {} against {g} {}",
                    v("anticipatory"),
                    v(g)
                );
            }
        }
    }
}
