//! The CPU model's benchmarks through the scenario machinery (`sim::bench::
//! run_repetition` on cells of a scenario), as `tandem sim run` runs them:
//! the coordinated task scheduling study's findings on latency and hot
//! start-up, and determinism.

use experiment::{Cell, Scenario};
use sim::bench::{accepted, run_repetition, SimOptions};

/// The study's matrix (scenarios/fanguede2014*.toml) with fewer loops and
/// starts, so that debug builds stay quick.
fn scenario(bench: &str, extra: &str) -> Vec<Cell> {
    let text = format!(
        r#"
benchmark = "{bench}"
platform = "chromebook-2014"
repetitions = 1
{extra}
[matrix]
device = ["emmc"]
guest_sched = ["", "cfq"]
guest_workload = ["none"]
host_sched = ["cfq"]
host_workload = ["none"]
host_cpu_sched = ["cfs"]
host_cpu_load = ["0", "1", "2", "3", "4"]
guest_cpu_load = ["0", "1", "2"]
coordination = ["off", "static-cpu", "help-cpu"]
"#
    );
    let s = Scenario::from_toml_str(&text, &accepted()).unwrap();
    sim::cpu_bench::check(&s).unwrap();
    s.cells()
}

fn find<'a>(cells: &'a [Cell], host: u8, guest: Option<u8>, coord: &str) -> &'a Cell {
    cells
        .iter()
        .find(|c| {
            c.cpu.host_cpu_load == host
                && c.coordination.to_string() == coord
                && match guest {
                    None => c.is_native(),
                    Some(g) => !c.is_native() && c.cpu.guest_cpu_load == g,
                }
        })
        .unwrap_or_else(|| panic!("no cell host {host} guest {guest:?} {coord}"))
}

fn mean(cell: &Cell) -> f64 {
    run_repetition(cell, &SimOptions::default(), 0)
        .unwrap()
        .mean()
        .unwrap()
}

#[test]
fn help_cpu_keeps_latency_near_no_guest_where_off_does_not() {
    let cells = scenario("latency", "loops = 4000");
    // The same total (4 loops): the benchmark on the host with host loops + 1.
    let no_guest = mean(find(&cells, 4, None, "off"));
    let off = mean(find(&cells, 3, Some(1), "off"));
    let help = mean(find(&cells, 3, Some(1), "help-cpu"));
    let stat = mean(find(&cells, 3, Some(1), "static-cpu"));
    assert!(
        off >= 10.0 * no_guest,
        "off {off} us, no guest {no_guest} us"
    );
    assert!(
        help <= 3.0 * no_guest,
        "help-cpu {help} us, no guest {no_guest} us"
    );
    assert!(
        stat <= 3.0 * no_guest,
        "static-cpu {stat} us, no guest {no_guest} us"
    );
}

#[test]
fn latency_runs_carry_average_and_maximum() {
    let cells = scenario("latency", "loops = 2000");
    let c = find(&cells, 2, Some(1), "off");
    let (run, hist) = sim::cpu_bench::run_latency_rep(c, 0).unwrap();
    assert_eq!(hist.count, 2000);
    let max = run.counters[sim::cpu_bench::LATENCY_MAX_US];
    assert!(max >= run.values[0], "max {max} < avg {}", run.values[0]);
    let rows = sim::cpu_bench::cell_results(c, vec![run.clone(), run]);
    let metrics: Vec<&str> = rows.iter().map(|r| r.metric.as_str()).collect();
    assert_eq!(metrics, ["latency_avg_us", "latency_max_us"]);
    assert_eq!(rows[1].summary().mean, max);
}

#[test]
fn hot_startup_follows_no_guest_without_guest_loops_and_rises_with_them() {
    let cells = scenario(
        "startup",
        "caches = \"hot\"\napp = \"xterm\"\niterations = 5",
    );
    for host in [0, 2, 3, 4] {
        let no_guest = mean(find(&cells, host, None, "off"));
        let g0 = mean(find(&cells, host, Some(0), "off"));
        let g1 = mean(find(&cells, host, Some(1), "off"));
        let g2 = mean(find(&cells, host, Some(2), "off"));
        // "0 guest loops" follows "no guest".
        assert!(
            (g0 / no_guest - 1.0).abs() <= 0.15,
            "host {host}: 0 guest loops {g0} s, no guest {no_guest} s"
        );
        if host >= 2 {
            // Steep rise with guest loops once the host loops fill the cores.
            assert!(
                g1 >= 2.0 * g0,
                "host {host}: 1 guest loop {g1} s, 0: {g0} s"
            );
            assert!(g2 > g1, "host {host}: 2 guest loops {g2} s, 1: {g1} s");
        }
    }
}

#[test]
fn cpu_cells_are_deterministic() {
    let cells = scenario("latency", "loops = 1000");
    let c = find(&cells, 3, Some(1), "help-cpu");
    let a = sim::cpu_bench::run_latency_rep(c, 1).unwrap();
    let b = sim::cpu_bench::run_latency_rep(c, 1).unwrap();
    assert_eq!(a.0, b.0);
    assert_eq!(a.1.to_cyclictest_text(), b.1.to_cyclictest_text());
    let hot = scenario(
        "startup",
        "caches = \"hot\"\napp = \"xterm\"\niterations = 3",
    );
    let c = find(&hot, 2, Some(1), "off");
    let o = SimOptions::default();
    assert_eq!(
        run_repetition(c, &o, 0).unwrap(),
        run_repetition(c, &o, 0).unwrap()
    );
}

#[test]
fn the_study_scenarios_expand_to_their_matrix() {
    for text in [
        include_str!("../../../scenarios/fanguede2014.toml"),
        include_str!("../../../scenarios/fanguede2014-startup.toml"),
    ] {
        let s = Scenario::from_toml_str(text, &accepted()).unwrap();
        sim::cpu_bench::check(&s).unwrap();
        let cells = s.cells();
        // CFS and BFS x 9 host loads x (no guest + 3 guest loads) x 3 modes.
        assert_eq!(cells.len(), 2 * 9 * 4 * 3);
        assert_eq!(s.cell_count(), cells.len());
        assert_eq!(cells.iter().filter(|c| c.is_native()).count(), 2 * 9 * 3);
        let mut seeds: Vec<u64> = cells.iter().map(|c| c.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), cells.len(), "every cell its own seed");
    }
}
