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
            let r = sim::bench::run_repetition(cell, &sim::bench::SimOptions::default(), rep)
                .unwrap();
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
        let guest = c.guest_sched.map_or("native".to_string(), |g| g.to_string());
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

#[test]
fn the_studys_findings_come_out_of_the_xen_pv_model() {
    let t = table();
    let mut gaps = Vec::new();
    // 1. The VM's loss against the real machine, 1 thread, Dom0 cfq (the
    // 2.6.32 default), averaged over the guest schedulers; within 15 points.
    let expected = [
        (Profile::RandRead, 30.0),
        (Profile::RandWrite, 30.0),
        (Profile::SeqRead, 52.5),
        (Profile::SeqWrite, 52.5),
        (Profile::Mixed, 57.5),
    ];
    for (p, want) in expected {
        let native = get(&t, "cfq", "native", p, 1);
        let vm: f64 = ["noop", "deadline", "anticipatory", "cfq"]
            .iter()
            .map(|g| get(&t, "cfq", g, p, 1))
            .sum::<f64>()
            / 4.0;
        let loss = 100.0 * (1.0 - vm / native);
        eprintln!("{p}: VM loses {loss:.1}% (study: about {want}%)");
        if (loss - want).abs() > 15.0 {
            gaps.push(format!("{p}: loss {loss:.1}%, study {want}% +- 15"));
        }
    }
    // 2. Dom0's scheduler changes little (within 10% of the mean over Dom0
    // schedulers) for each DomU scheduler and profile, 8 threads; DomU's more.
    let scheds = ["noop", "deadline", "anticipatory", "cfq"];
    for p in Profile::ALL {
        let mut dom0_spread: f64 = 0.0;
        let mut domu_spread: f64 = 0.0;
        for g in scheds {
            let v: Vec<f64> = scheds.iter().map(|h| get(&t, h, g, p, 8)).collect();
            let m = v.iter().sum::<f64>() / 4.0;
            let spread = v.iter().map(|x| (x - m).abs() / m).fold(0.0, f64::max);
            dom0_spread = dom0_spread.max(spread);
        }
        for h in scheds {
            let v: Vec<f64> = scheds.iter().map(|g| get(&t, h, g, p, 8)).collect();
            let m = v.iter().sum::<f64>() / 4.0;
            let spread = v.iter().map(|x| (x - m).abs() / m).fold(0.0, f64::max);
            domu_spread = domu_spread.max(spread);
        }
        eprintln!(
            "{p}: Dom0 spread {:.1}%, DomU spread {:.1}%",
            100.0 * dom0_spread,
            100.0 * domu_spread
        );
        if dom0_spread > 0.10 {
            gaps.push(format!("{p}: Dom0 scheduler moves results by {:.1}%", 100.0 * dom0_spread));
        }
        if p != Profile::RandWrite && domu_spread <= dom0_spread {
            gaps.push(format!("{p}: DomU scheduler matters no more than Dom0's"));
        }
    }
    // 3. noop and deadline best in DomU, anticipatory worst (Dom0 cfq, 8
    // threads), except random write, where no scheduler differs by more
    // than 10%.
    for p in Profile::ALL {
        let v = |g: &str| get(&t, "cfq", g, p, 8);
        if p == Profile::RandWrite {
            let all: Vec<f64> = scheds.iter().map(|g| v(g)).collect();
            let (lo, hi) = all.iter().fold((f64::MAX, 0.0_f64), |(l, h), x| (l.min(*x), h.max(*x)));
            if (hi - lo) / hi > 0.10 {
                gaps.push(format!("{p}: DomU schedulers differ by {:.1}%", 100.0 * (hi - lo) / hi));
            }
            continue;
        }
        let best = v("noop").min(v("deadline"));
        if best < v("cfq") || best < v("anticipatory") {
            gaps.push(format!("{p}: noop/deadline not best"));
        }
        if v("anticipatory") > v("cfq") {
            gaps.push(format!("{p}: anticipatory not worst"));
        }
    }
    assert!(gaps.is_empty(), "findings that do not come out:\n{}", gaps.join("\n"));
}
