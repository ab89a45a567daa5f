//! The `other_vms` matrix key: validation, expansion, filters, ids, seeds, file names
//! and the result files.

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
        devices: v(&["hdd-1.8in"]),
        host_scheds: v(&["bfq", "cfq"]),
        guest_scheds: v(&["bfq", "cfq"]),
        coordination: v(&["off", "help-wr"]),
        apps: v(&["xterm"]),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

const VM: &str = "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\", \"1r-seq\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"5r-seq\"]\n";
const NATIVE: &str =
    "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\", \"1r-seq\"]\n";

fn scenario(matrix: &str) -> Result<Scenario, String> {
    Scenario::from_toml_str(
        &format!("benchmark = \"startup\"\nseed = 42\n[matrix]\n{matrix}"),
        &accepted(),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn default_is_none_everywhere() {
    for m in [VM, NATIVE] {
        let s = scenario(m).unwrap();
        assert_eq!(names(&s.matrix.other_vms), vec!["none"]);
        assert!(s.cells().iter().all(|c| c.other_vms.to_string() == "none"));
        assert!(s.cells().iter().all(|c| !c.has_other_vms()));
        assert_eq!(s.cells()[0].other_vms.count(), 0);
    }
    // explicit "none" is fine in a native scenario
    let s = scenario(&format!("{NATIVE}other_vms = [\"none\"]\n")).unwrap();
    assert_eq!(s.cells().len(), 2);
}

#[test]
fn values_are_canonical_and_expanded_before_coordination() {
    let s = scenario(&format!(
        "{VM}other_vms = [\"none\", \"1x5r0w-seq\", \"3x5r-seq\", \"1r-seq, 2x5r-rand\"]\ncoordination = [\"off\", \"help-wr\"]\n"
    ))
    .unwrap();
    assert_eq!(
        names(&s.matrix.other_vms),
        vec!["none", "5r-seq", "3x5r-seq", "1r-seq,2x5r-rand"]
    );
    let cells = s.cells();
    assert_eq!(cells.len(), s.cell_count());
    assert_eq!(cells.len(), 2 * 4 * 2);
    // innermost: coordination, then other_vms, then host_workload
    let names: Vec<(String, String, &str)> = cells
        .iter()
        .map(|c| {
            (
                c.host_workload.name(),
                c.other_vms.name(),
                c.coordination.name(),
            )
        })
        .collect();
    let order: Vec<(&str, &str, &str)> = names
        .iter()
        .map(|(w, o, c)| (w.as_str(), o.as_str(), *c))
        .collect();
    assert_eq!(order[0], ("none", "none", "off"));
    assert_eq!(order[1], ("none", "none", "help-wr"));
    assert_eq!(order[2], ("none", "5r-seq", "off"));
    assert_eq!(order[7], ("none", "1r-seq,2x5r-rand", "help-wr"));
    assert_eq!(order[8], ("1r-seq", "none", "off"));
    let c = &cells[7];
    let vms = c.other_vms.clone();
    assert_eq!(vms.count(), 3);
    assert_eq!(
        vms.vms,
        vec![
            OtherVm::Workload(WorkloadSpec::parse("1r-seq").unwrap()),
            OtherVm::Workload(WorkloadSpec::parse("5r-rand").unwrap()),
            OtherVm::Workload(WorkloadSpec::parse("5r-rand").unwrap()),
        ]
    );
    // seeds are distinct across other_vms values
    let mut seeds: Vec<u64> = cells.iter().map(|c| c.seed).collect();
    seeds.sort();
    seeds.dedup();
    assert_eq!(seeds.len(), cells.len());
}

#[test]
fn validation_errors_name_key_value_and_accepted_forms() {
    let e = scenario(&format!("{VM}other_vms = [\"3x5rseq\"]\n")).unwrap_err();
    assert!(
        e.starts_with(
            "matrix.other_vms: invalid other VMs \"3x5rseq\": unknown workload \"5rseq\""
        ),
        "{e}"
    );
    assert!(e.contains("accepted: \"none\" (only VM 1)"), "{e}");
    assert!(e.contains("\"1r-seq,2x5r-rand\""), "{e}");

    let e = scenario(&format!("{VM}other_vms = [\"0x5r-seq\"]\n")).unwrap_err();
    assert!(e.contains("repeat count \"0x\""), "{e}");

    let e = scenario(&format!("{VM}other_vms = []\n")).unwrap_err();
    assert!(e.starts_with("matrix.other_vms: empty list"), "{e}");

    let e = scenario(&format!("{VM}other_vms = [\"5r-seq\", \"1x5r0w-seq\"]\n")).unwrap_err();
    assert_eq!(
        e,
        "matrix.other_vms: duplicate value \"5r-seq\" (each value may appear once)"
    );

    let e = scenario(&format!("{VM}other_vms = [1]\n")).unwrap_err();
    assert!(
        e.starts_with("matrix.other_vms: expected a list of strings"),
        "{e}"
    );

    let e = scenario(&format!("{NATIVE}other_vms = [\"none\", \"3x5r-seq\"]\n")).unwrap_err();
    assert!(
        e.starts_with("matrix.other_vms: \"3x5r-seq\" needs VM cells"),
        "{e}"
    );
    assert!(e.contains("matrix.guest_sched is missing or empty"), "{e}");

    // a bare string is a one-element list, as for every matrix key
    let s = scenario(&format!("{VM}other_vms = \"2x1r-rand\"\n")).unwrap();
    assert_eq!(names(&s.matrix.other_vms), vec!["2x1r-rand"]);

    let e = scenario(&format!("{VM}other_vm = [\"none\"]\n")).unwrap_err();
    assert!(e.contains("other_vms"), "{e}");
}

#[test]
fn filters_select_by_canonical_value() {
    let s = scenario(&format!(
        "{VM}other_vms = [\"none\", \"3x5r-seq\", \"1r-seq,2x5r-rand\"]\n"
    ))
    .unwrap();
    let cells = s.cells();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let f = Filter::parse(&args(&["other_vms=3x5r-seq"])).unwrap();
    let sel = f.apply(&cells);
    assert_eq!(sel.len(), 2);
    assert!(sel.iter().all(|c| c.other_vms.to_string() == "3x5r-seq"));
    // other spellings of the same VMs
    for v in ["5r-seq,5r0w-seq,5r-seq", "2x5r-seq,1x5r-seq"] {
        let g = Filter::parse(&args(&[&format!("other_vms={v}")])).unwrap();
        assert_eq!(g, f, "{v}");
    }
    let f = Filter::parse(&args(&["other_vms=none", "other_vms=1r-seq,2x5r-rand"])).unwrap();
    assert_eq!(f.apply(&cells).len(), 4);
    assert!(f.check(&cells).is_ok());
    let f = Filter::parse(&args(&["other_vms=2x5r-seq"])).unwrap();
    let e = f.check(&cells).unwrap_err();
    assert_eq!(
        e,
        "filter other_vms=2x5r-seq matches no cell; values of other_vms in this scenario: none, 3x5r-seq, 1r-seq,2x5r-rand"
    );
    let e = Filter::parse(&args(&["other_vms=3x"])).unwrap_err();
    assert!(
        e.starts_with("invalid filter \"other_vms=3x\": invalid other VMs"),
        "{e}"
    );
    let e = Filter::parse(&args(&["other_vms="])).unwrap_err();
    assert!(e.contains("empty value"), "{e}");
    // a native cell has no other VMs
    let native = scenario(NATIVE).unwrap().cells();
    assert_eq!(native[0].get("other_vms").as_deref(), Some("none"));
    assert!(Filter::parse(&args(&["other_vms=none"]))
        .unwrap()
        .matches(&native[0]));
    // every pair of a key is a valid filter; keys stay unique. A key without other VMs
    // leaves other_vms out (ids from before the key existed), so its filter also
    // selects the same cell with other VMs; other_vms=none narrows it to the cell.
    let mut keys: Vec<String> = cells.iter().map(Cell::key).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cells.len());
    for c in &cells {
        let mut pairs: Vec<String> = c.key().split(' ').map(str::to_string).collect();
        if !c.has_other_vms() {
            pairs.push("other_vms=none".into());
        }
        let f = Filter::parse(&pairs).unwrap();
        assert_eq!(f.apply(&cells), vec![c.clone()]);
    }
}

#[test]
fn keys_and_seeds_of_cells_without_other_vms_are_unchanged() {
    // Seeds computed before other_vms existed: they must never change.
    let native = scenario(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"5r-seq\"]\n",
    )
    .unwrap()
    .cells()
    .remove(0);
    assert_eq!(native.seed, 2608783717110285135);
    assert_eq!(
        native.key(),
        "device=hdd-1.8in host_sched=bfq host_workload=5r-seq coordination=off"
    );
    let vm = scenario(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"1r-seq\"]\nguest_sched = [\"cfq\"]\nguest_workload = [\"5r-rand\"]\nother_vms = [\"none\", \"3x5r-seq\"]\n",
    )
    .unwrap()
    .cells();
    assert_eq!(vm[0].seed, 10140118921936439113);
    assert_eq!(
        vm[0].key(),
        "device=hdd-1.8in guest_sched=cfq guest_workload=5r-rand host_sched=bfq host_workload=1r-seq coordination=off"
    );
    assert_eq!(
        vm[1].key(),
        "device=hdd-1.8in guest_sched=cfq guest_workload=5r-rand host_sched=bfq host_workload=1r-seq other_vms=3x5r-seq coordination=off"
    );
    // the documented formula, with other_vms appended
    let bytes = b"hdd-1.8in\x1fbfq\x1f1r-seq\x1fcfq\x1f5r-rand\x1foff\x1f3x5r-seq";
    assert_eq!(vm[1].seed, splitmix64(42 ^ splitmix64(fnv1a64(bytes))));
    assert_eq!(vm[1].seed, cell_seed(42, &vm[1]));
}

fn vm_cell(other_vms: &str, coordination: &str, benchmark: &str) -> Cell {
    Scenario::from_toml_str(
        &format!(
            "benchmark = \"{benchmark}\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"cfq\"]\nhost_workload = [\"1r-seq\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"5r-seq\"]\nother_vms = [\"{other_vms}\"]\ncoordination = [\"{coordination}\"]\n"
        ),
        &accepted(),
    )
    .unwrap()
    .cells()
    .remove(0)
}

#[test]
fn stat_file_names_and_headers() {
    assert_eq!(
        stat_file_name(&vm_cell("none", "off", "startup")),
        "bfq-5r0w-seq-host-cfq-1r0w-seq-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&vm_cell("3x5r0w-seq", "off", "startup")),
        "bfq-5r0w-seq-host-cfq-1r0w-seq-vms-3x5r-seq-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&vm_cell("1r-seq,2x5r-rand", "help-wr", "startup")),
        "bfq-5r0w-seq-host-cfq-1r0w-seq-vms-1r-seq+2x5r-rand-coord-help-wr-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&vm_cell("2w-seq", "off", "throughput")),
        "bfq-5r0w-seq-host-cfq-1r0w-seq-vms-2w-seq-60sec-aggthr_stat.txt"
    );
    assert_eq!(
        stat_file_header(&vm_cell("3x5r-seq", "help-wr", "startup")),
        "Results for bfq, 5 xterm, 5 seq readers and 0 seq writers, in a VM on host scheduler cfq with 1 seq readers and 0 seq writers in the host, beside 3 other VMs (3x5r-seq), coordination help-wr"
    );
    assert!(stat_file_header(&vm_cell("1r-rand", "off", "startup"))
        .ends_with(", beside 1 other VM (1r-rand)"));
}

fn result(cell: Cell, mean: f64) -> CellResult {
    CellResult {
        cell,
        runner: "sim".into(),
        metric: Metric::StartupS,
        runs: vec![RunResult {
            values: vec![mean],
            timeouts: 0,
            ..Default::default()
        }],
    }
}

#[test]
fn csv_json_and_tables_carry_other_vms() {
    let results = vec![
        result(vm_cell("none", "off", "startup"), 2.0),
        result(vm_cell("1r-seq,2x5r-rand", "off", "startup"), 5.0),
    ];
    let csv = results_csv(&results);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(&header[..CSV_COLUMNS.len()], CSV_COLUMNS);
    let col = header.iter().position(|h| *h == "other_vms").unwrap();
    assert_eq!(col, CSV_COLUMNS.len());
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(row[col], "none");
    // the comma in the value is quoted
    assert!(
        csv.lines()
            .nth(2)
            .unwrap()
            .contains(",\"1r-seq,2x5r-rand\","),
        "{csv}"
    );
    let parsed = parse_results_csv(&csv).unwrap();
    assert_eq!(parsed[0].other_vms, "none");
    assert_eq!(parsed[1].other_vms, "1r-seq,2x5r-rand");
    // missing column: none; other spellings: canonical; bad values: an error
    let rows = parse_results_csv(
        "runner,device,host_sched,host_workload,benchmark,metric,other_vms\npaper,hdd,bfq,none,startup,startup_s,\npaper,hdd,bfq,none,startup,startup_s,5r-seq;5r-seq\n",
    );
    let e = rows.unwrap_err();
    assert!(
        e.starts_with("row 3: column other_vms: invalid other VMs"),
        "{e}"
    );
    let rows = parse_results_csv(
        "runner,device,host_sched,host_workload,benchmark,metric,other_vms\npaper,hdd,bfq,none,startup,startup_s,\npaper,hdd,bfq,none,startup,startup_s,\"5r-seq,5r-seq\"\n",
    )
    .unwrap();
    assert_eq!(rows[0].other_vms, "none");
    assert_eq!(rows[1].other_vms, "2x5r-seq");
    let rows = parse_results_csv(
        "runner,device,host_sched,host_workload,benchmark,metric\npaper,hdd,bfq,none,startup,startup_s\n",
    )
    .unwrap();
    assert_eq!(rows[0].other_vms, "none");

    let meta = RunMeta::default();
    let json = results_json(&meta, &results);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["cells"][1]["cell"]["other_vms"], "1r-seq,2x5r-rand");
    assert_eq!(
        v["cells"][1]["stat_file"],
        "bfq-5r0w-seq-host-cfq-1r0w-seq-vms-1r-seq+2x5r-rand-lat_thr_stat.txt"
    );
    let (_, back) = parse_results_json(&json).unwrap();
    assert_eq!(back, results);

    // results.json written before other_vms existed still reads, as "none"
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    for c in old["cells"].as_array_mut().unwrap() {
        c["cell"].as_object_mut().unwrap().remove("other_vms");
    }
    let (_, back) = parse_results_json(&old.to_string()).unwrap();
    assert!(back.iter().all(|r| r.cell.other_vms.to_string() == "none"));

    // cells differing only by other_vms get separate tables
    let t = render_tables(&results);
    assert_eq!(t.matches("== ").count(), 2, "{t}");
    assert!(
        t.contains("== hdd-1.8in | startup of xterm | VM on host cfq | sim ==\n"),
        "{t}"
    );
    assert!(t.contains(
        "== hdd-1.8in | startup of xterm | VM on host cfq, other VMs 1r-seq,2x5r-rand | sim ==\n"
    ));
}

/// The greedy and app roles parse, print canonically and keep their order; a greedy
/// VM without a workload is refused.
#[test]
fn greedy_and_app_roles() {
    let v = OtherVms::parse("greedy-5r-seq, app,2x5r-seq").unwrap();
    assert_eq!(
        v.vms,
        vec![
            OtherVm::Greedy(WorkloadSpec::parse("5r-seq").unwrap()),
            OtherVm::App,
            OtherVm::Workload(WorkloadSpec::parse("5r-seq").unwrap()),
            OtherVm::Workload(WorkloadSpec::parse("5r-seq").unwrap()),
        ]
    );
    assert_eq!(v.name(), "greedy-5r-seq,app,2x5r-seq");
    assert_eq!(OtherVms::canonical("2xapp").unwrap(), "2xapp");
    let e = OtherVms::parse("greedy-none").unwrap_err();
    assert!(
        e.contains("greedy-none") && e.contains("greedy-<workload>"),
        "{e}"
    );
    assert!(OtherVms::parse("greedy").is_err());
}
