//! The readers-hashers benchmark's scenario keys (`scenarios/cfsv.toml`):
//! `vm_layout`, `host_cpu_sched = "cfs-v"`, its cells and result rows.

use experiment::*;

fn accepted() -> Accepted {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    Accepted {
        devices: v(&["ssd-sata"]),
        host_scheds: v(&["noop"]),
        guest_scheds: v(&["none"]),
        coordination: v(&["off"]),
        apps: v(&["xterm"]),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

const MATRIX: &str = r#"
[matrix]
device = ["ssd-sata"]
guest_sched = ["none"]
guest_workload = ["none"]
host_sched = ["noop"]
host_workload = ["none"]
coordination = ["off"]
"#;

fn scenario(head: &str, extra: &str) -> Result<Scenario, String> {
    Scenario::from_toml_str(&format!("{head}\n{MATRIX}{extra}"), &accepted())
        .map_err(|e| e.to_string())
}

const HEAD: &str = "benchmark = \"readers-hashers\"\nplatform = \"i7-2600\"\nvcpus = 8";

#[test]
fn the_layouts_cross_the_host_schedulers_with_their_own_ids_and_seeds() {
    let s = scenario(
        HEAD,
        "vm_layout = [\"separate\", \"mixed\"]\nhost_cpu_sched = [\"cfs\", \"cfs-v\"]\n",
    )
    .unwrap();
    assert!(s.runs_on_cpu_model());
    let cells = s.cells();
    assert_eq!(cells.len(), 4);
    let keys: Vec<String> = cells.iter().map(Cell::key).collect();
    assert!(keys[0].contains("host_cpu_sched=cfs ") && keys[0].contains("vm_layout=separate"));
    assert!(keys[3].contains("host_cpu_sched=cfs-v") && keys[3].contains("vm_layout=mixed"));
    let mut seeds: Vec<u64> = cells.iter().map(|c| c.seed).collect();
    seeds.dedup();
    assert_eq!(seeds.len(), 4, "each cell its own seed");
    assert_eq!(cells[3].cpu.host_sched(), CpuSched::CfsV);
    assert_eq!(cells[3].cpu.vm_layout, Some(VmLayout::Mixed));
    assert_eq!(cells[1].get("vm_layout").as_deref(), Some("mixed"));
}

#[test]
fn vm_layout_belongs_to_the_readers_hashers_benchmark() {
    let e = scenario(HEAD, "host_cpu_sched = [\"cfs\"]\n").unwrap_err();
    assert!(e.contains("matrix.vm_layout: missing"), "{e}");
    let e = scenario(
        "benchmark = \"latency\"\nplatform = \"i7-2600\"",
        "vm_layout = [\"mixed\"]\n",
    )
    .unwrap_err();
    assert!(e.contains("only the readers-hashers benchmark"), "{e}");
    let e = scenario(HEAD, "vm_layout = [\"apart\"]\n").unwrap_err();
    assert!(
        e.contains("unknown value \"apart\"; accepted: separate, mixed"),
        "{e}"
    );
    let e = scenario(HEAD, "vm_layout = [\"mixed\"]\nhost_cpu_load = [\"1\"]\n").unwrap_err();
    assert!(e.contains("matrix.host_cpu_load"), "{e}");
}

#[test]
fn a_cell_gives_a_row_per_vm_and_metric_from_its_counters() {
    let s = scenario(HEAD, "vm_layout = [\"separate\"]\n").unwrap();
    let cell = &s.cells()[0];
    let run = |k: f64| RunResult {
        values: vec![k],
        counters: READERS_HASHERS_METRICS
            .iter()
            .enumerate()
            .map(|(i, m)| (m.as_str().to_string(), k * 10.0 + i as f64))
            .collect(),
        ..RunResult::default()
    };
    let rows = latency::cell_results(cell, "sim", vec![run(1.0), run(2.0)]);
    assert_eq!(rows.len(), 8);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.metric, READERS_HASHERS_METRICS[i]);
        assert_eq!(r.run_means(), vec![10.0 + i as f64, 20.0 + i as f64]);
    }
    let names: Vec<String> = rows
        .iter()
        .map(|r| naming::result_stat_file_name(&r.cell, r.metric))
        .collect();
    assert!(
        names[2].ends_with("-separate-readers-hashers-vm1_hash_mb_s_stat.txt"),
        "{names:?}"
    );
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique.len(), 8, "a stat file per metric");
    let means = readers_hashers::vm_means(&rows, VmLayout::Separate, CpuSched::Cfs).unwrap();
    // Each metric's mean over the two runs is 15 + its index.
    assert_eq!(means, [(15.0, 17.0, 18.0), (19.0, 21.0, 22.0)]);
    assert!(readers_hashers::vm_means(&rows, VmLayout::Mixed, CpuSched::Cfs).is_none());
}
