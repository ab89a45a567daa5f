use experiment::*;

fn accepted() -> Accepted {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    Accepted {
        devices: v(&["hdd-1.8in", "ssd-sata"]),
        host_scheds: v(&["cfq", "bfq"]),
        guest_scheds: v(&["cfq", "bfq"]),
        coordination: v(&["off", "help-wr"]),
        apps: v(&["xterm"]),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

fn cells() -> Vec<Cell> {
    Scenario::from_toml_str(
        r#"
benchmark = "startup"
[matrix]
device = ["hdd-1.8in", "ssd-sata"]
host_sched = ["bfq", "cfq"]
host_workload = ["none", "1r-seq", "5r-seq"]
guest_sched = ["bfq", "cfq"]
guest_workload = ["none", "2r2w-rand"]
coordination = ["off", "help-wr"]
"#,
        &accepted(),
    )
    .unwrap()
    .cells()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn empty_filter_matches_all() {
    let f = Filter::parse(&[]).unwrap();
    assert!(f.is_empty());
    let c = cells();
    assert_eq!(c.len(), 2 * 2 * 3 * 2 * 2 * 2);
    assert_eq!(f.apply(&c).len(), c.len());
}

#[test]
fn same_key_ors_different_keys_and() {
    let c = cells();
    let f = Filter::parse(&args(&["host_sched=bfq"])).unwrap();
    assert_eq!(f.apply(&c).len(), c.len() / 2);
    let f = Filter::parse(&args(&["host_workload=1r-seq", "host_workload=5r-seq"])).unwrap();
    let sel = f.apply(&c);
    assert_eq!(sel.len(), c.len() * 2 / 3);
    assert!(sel.iter().all(|x| x.host_workload.to_string() != "none"));
    let f = Filter::parse(&args(&[
        "host_workload=1r-seq",
        "device=ssd-sata",
        "host_workload=5r-seq",
        "guest_sched=cfq",
    ]))
    .unwrap();
    let sel = f.apply(&c);
    assert_eq!(sel.len(), c.len() * 2 / 3 / 2 / 2);
    assert!(sel
        .iter()
        .all(|x| x.device.to_string() == "ssd-sata"
            && x.guest_sched.map(|g| g.name()) == Some("cfq")));
    assert_eq!(f.clauses().len(), 3);
    assert!(f.check(&c).is_ok());
}

#[test]
fn workload_values_are_canonicalized() {
    let c = cells();
    let a = Filter::parse(&args(&["host_workload=5r0w-seq"])).unwrap();
    let b = Filter::parse(&args(&["host_workload=5r-seq"])).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.apply(&c).len(), c.len() / 3);
    let g = Filter::parse(&args(&["guest_workload=2r2w-rand"])).unwrap();
    assert_eq!(g.apply(&c).len(), c.len() / 2);
    let e = Filter::parse(&args(&["host_workload=5rseq"])).unwrap_err();
    assert!(e.contains("unknown workload \"5rseq\""), "{e}");
}

#[test]
fn native_cells_and_empty_guest_values() {
    let native = Scenario::from_toml_str(
        "benchmark = \"startup\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]\n",
        &accepted(),
    )
    .unwrap()
    .cells();
    let f = Filter::parse(&args(&["guest_sched="])).unwrap();
    assert!(f.matches(&native[0]));
    assert!(!cells().iter().any(|c| f.matches(c)));
    let f = Filter::parse(&args(&["guest_sched=bfq"])).unwrap();
    assert!(!f.matches(&native[0]));
    assert_eq!(native[0].get("guest_sched").as_deref(), Some(""));
    assert_eq!(native[0].get("nope"), None);
    assert_eq!(
        native[0].key(),
        "device=hdd-1.8in host_sched=bfq host_workload=none coordination=off"
    );
}

#[test]
fn parse_errors() {
    let e = Filter::parse(&args(&["host_sched"])).unwrap_err();
    assert!(
        e.contains("\"host_sched\"") && e.contains("expected KEY=VALUE"),
        "{e}"
    );
    let e = Filter::parse(&args(&["sched=bfq"])).unwrap_err();
    assert!(e.contains("unknown key \"sched\""), "{e}");
    assert!(
        e.contains("accepted keys: device, host_sched, host_workload, guest_sched, guest_workload, coordination"),
        "{e}"
    );
    let e = Filter::parse(&args(&["device="])).unwrap_err();
    assert!(e.contains("empty value"), "{e}");
    let e = Filter::parse(&args(&["host_workload="])).unwrap_err();
    assert!(e.contains("empty value"), "{e}");
}

#[test]
fn check_reports_values_matching_nothing() {
    let c = cells();
    let f = Filter::parse(&args(&["host_sched=noop"])).unwrap();
    let e = f.check(&c).unwrap_err();
    assert_eq!(
        e,
        "filter host_sched=noop matches no cell; values of host_sched in this scenario: bfq, cfq"
    );
    let f = Filter::parse(&args(&["guest_sched="])).unwrap();
    assert!(f.check(&c).is_err());
}
