//! Coordinated scheduling between guests and host: the modes of the
//! `coordination` key, the policy crate's leases and budgets at work in the
//! simulator, and what coordination buys and costs (scenarios/vbfq.toml,
//! scenarios/vbfq-throughput.toml, scenarios/multi-vm.toml).

use experiment::{Cell, Scenario};
use sim::bench::{accepted, guest_defaults, run_startup, run_throughput, SimOptions};
use sim::coord::{CoordConfig, Coordination, BOOST_IOPRIO};
use sim::iosched::BfqVersion;
use sim::machine::{secs, Machine, MachineConfig};
use sim::request::IoPrio;
use sim::vm::{Aio, VmConfig};

fn cells(text: &str) -> Vec<Cell> {
    Scenario::from_toml_str(text, &accepted()).unwrap().cells()
}

fn find(cells: &[Cell], filters: &[(&str, &str)]) -> Cell {
    cells
        .iter()
        .find(|c| filters.iter().all(|(k, v)| c.get(k).as_deref() == Some(*v)))
        .cloned()
        .unwrap_or_else(|| panic!("no cell {filters:?}"))
}

/// Mean start-up over `reps` repetitions.
fn startup(cell: &Cell, reps: u32) -> (f64, u32) {
    let opts = SimOptions::default();
    let mut sum = 0.0;
    let mut n = 0;
    let mut timeouts = 0;
    for rep in 0..reps {
        let r = run_startup(cell, &opts, rep).unwrap();
        sum += r.values.iter().sum::<f64>();
        n += r.values.len();
        timeouts += r.timeouts;
    }
    (sum / n as f64, timeouts)
}

const VBFQ_HDD: &str = r#"
benchmark = "startup"
app = "xterm"
iterations = 5
repetitions = 3
[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["none", "1r-seq", "5r-seq", "1r-rand"]
host_sched = ["bfq"]
host_workload = ["none", "5r-seq"]
coordination = ["off", "static-rt", "help-rt", "help-weight", "help-wr"]
"#;

/// The missing link and its closing, on the 1.8-inch disk under five host
/// readers: without coordination the guest's start-up is at least 3x its
/// idle time; with the guest asking for help and the host putting the VM's
/// QEMU thread in the RT class while it lasts, it comes back close to idle.
#[test]
fn help_brings_the_guests_start_up_back_near_idle_under_host_load() {
    assert_help_near_idle("xterm", "help-rt", 1.35);
}

/// The issue's goal on the shipped scenario's app (`scenarios/vbfq.toml`
/// starts the calibrated `xterm-2014`): with the host treating the VM's
/// queues as weight-raised while it is helped (Virtual-BFQ's own mode), the
/// start-up under five host readers is at most 1.3x idle for one and five
/// sequential guest readers and one random one.
#[test]
fn help_wr_keeps_the_calibrated_xterm_within_1_3x_idle_under_host_load() {
    assert_help_near_idle("xterm-2014", "help-wr", 1.3);
}

/// Repetitions of [`assert_help_near_idle`]: the scenario's 10. The first
/// start of a run can take 2.5x the others (`help-wr`, 1r-rand in the
/// guest: 5.1 to 5.2 s in two runs of three; the guest's BFQ raised the
/// random reader the host had starved, and its seeks take most of the disk
/// time), so three repetitions measure the luck of the draw more than the
/// mode.
const REPS: u32 = 10;

/// `app`'s start-up in a `bfq` guest under five host readers: at least 3x
/// idle without coordination, at most `bound` x idle with `mode`.
fn assert_help_near_idle(app: &str, mode: &str, bound: f64) {
    let cs = cells(&VBFQ_HDD.replace("app = \"xterm\"", &format!("app = \"{app}\"")));
    let base = [("guest_sched", "bfq"), ("host_sched", "bfq")];
    let idle = startup(
        &find(
            &cs,
            &[
                &base[..],
                &[
                    ("guest_workload", "none"),
                    ("host_workload", "none"),
                    ("coordination", "off"),
                ],
            ]
            .concat(),
        ),
        REPS,
    )
    .0;
    for gw in ["1r-seq", "5r-seq", "1r-rand"] {
        let cell = |mode: &str| {
            find(
                &cs,
                &[
                    &base[..],
                    &[
                        ("guest_workload", gw),
                        ("host_workload", "5r-seq"),
                        ("coordination", mode),
                    ],
                ]
                .concat(),
            )
        };
        let (off, off_timeouts) = startup(&cell("off"), REPS);
        let (help, help_timeouts) = startup(&cell(mode), REPS);
        eprintln!(
            "{app} {gw}: idle {idle:.2} s, off {off:.2} s ({off_timeouts} timeouts), \
             {mode} {help:.2} s ({:.2}x idle)",
            help / idle
        );
        assert!(
            off >= 3.0 * idle || off_timeouts > 0,
            "{gw}: without coordination the host's load should cost at least 3x ({off:.2} s)"
        );
        assert_eq!(help_timeouts, 0, "{gw}: {mode} start timed out");
        assert!(
            help <= bound * idle,
            "{gw}: with {mode} the start-up should be within {bound}x idle \
             ({help:.2} s vs {idle:.2} s)"
        );
    }
}

/// What coordination costs: helping the VM costs at most 10% of what the
/// disk delivers to everyone, sequential or random guest readers alike (the
/// guest does not ask for help for greedy random readers that its HZ=100
/// ticks make look soft real-time).
#[test]
fn help_costs_little_aggregate_throughput() {
    let text = r#"
benchmark = "throughput"
repetitions = 1
duration_s = 30
[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["1r-seq", "5r-seq", "5r-rand"]
host_sched = ["bfq"]
host_workload = ["5r-seq"]
coordination = ["off", "help-rt"]
"#;
    let cs = cells(text);
    for gw in ["1r-seq", "5r-seq", "5r-rand"] {
        let agg = |mode: &str| {
            let c = find(&cs, &[("guest_workload", gw), ("coordination", mode)]);
            run_throughput(&c, &SimOptions::default(), 0)
                .unwrap()
                .counters["aggregate_mb_s"]
        };
        let (off, help) = (agg("off"), agg("help-rt"));
        eprintln!("{gw}: aggregate off {off:.2} MB/s, help-rt {help:.2} MB/s");
        assert!(off > 1.0);
        assert!(
            help >= 0.9 * off,
            "{gw}: help-rt costs more than 10% ({off:.2} -> {help:.2} MB/s)"
        );
    }
}

/// The published guests write back async (Linux 3.12's `sync`), and their
/// BFQ raises the flusher's async queue whenever it comes back after a
/// pause. No one waits for write-back, so the guest does not ask for help
/// for it: with random writers on the card under five host readers,
/// `help-wr` leaves the host's aggregate where it is (11.78 and 11.79 MB/s)
/// and boosts the VM only while its readers and writers start (8.1 s, in
/// the settle time). When the guest asked for its write-back too, the VM
/// was boosted 24.8 s of the run's 43, its random writes went ahead on the
/// card, and the host's aggregate fell to 7.25 MB/s.
#[test]
fn the_guest_does_not_ask_for_help_for_write_back() {
    let text = r#"
benchmark = "throughput"
repetitions = 1
duration_s = 30
[matrix]
device = ["microsd-class6"]
guest_sched = ["bfq"]
guest_workload = ["2r2w-rand"]
host_sched = ["bfq"]
host_workload = ["5r-seq"]
coordination = ["off", "help-wr"]
"#;
    let cs = cells(text);
    let run = |mode: &str| {
        let c = find(&cs, &[("coordination", mode)]);
        run_throughput(&c, &SimOptions::default(), 0).unwrap()
    };
    let (off, help) = (run("off"), run("help-wr"));
    let agg = |r: &experiment::RunResult| r.counters["aggregate_mb_s"];
    let boosted = help.counters["vm1_boosted_s"];
    eprintln!(
        "2r2w-rand on the card: aggregate off {:.2} MB/s, help-wr {:.2} MB/s, boosted {boosted:.2} s",
        agg(&off),
        agg(&help)
    );
    assert!(agg(&off) > 1.0);
    assert!(
        boosted < 12.0,
        "the VM was boosted {boosted:.2} s: for its write-back too?"
    );
    assert!(
        agg(&help) >= 0.9 * agg(&off),
        "help-wr costs more than 10% ({:.2} -> {:.2} MB/s)",
        agg(&off),
        agg(&help)
    );
}

fn machine() -> Machine {
    Machine::new(&MachineConfig::default(), 3).unwrap()
}

fn coord(mode: Coordination) -> CoordConfig {
    CoordConfig {
        mode,
        ..CoordConfig::default()
    }
}

/// Static prioritization puts every QEMU thread of the VM in the RT class,
/// pool workers created later included; help modes do it only while helped
/// and revert it when the help ends.
#[test]
fn static_rt_privileges_every_qemu_thread_and_help_reverts() {
    let mut m = machine();
    m.set_coordination(coord(Coordination::StaticRt)).unwrap();
    let cfg = VmConfig {
        aio: Aio::Threads,
        ..guest_defaults()
    };
    let (g, vm) = m.add_vm(&cfg, "/images/vm1.img").unwrap();
    m.set_static_boost(vm);
    for i in 0..8 {
        let f = m.add_file(g, &format!("/S/file{i}"), 500 << 20);
        m.start_rand_reader(g, f, IoPrio::DEFAULT, 0);
    }
    m.run_until(secs(2.0), |_| false);
    let threads = m.qemu_threads(vm);
    assert!(threads.len() > 1, "the pool grew: {}", threads.len());
    for t in threads {
        assert_eq!(m.ioprio(t), BOOST_IOPRIO);
    }
    assert!(m.vm_boosted(vm));

    // help-rt: a guest app start raises a queue, the guest asks, the host
    // boosts; once the guest is quiet again the boost is gone and the
    // threads are back to the default ioprio.
    let mut m = machine();
    m.set_coordination(coord(Coordination::HelpRt)).unwrap();
    let (g, vm) = m.add_vm(&guest_defaults(), "/images/vm1.img").unwrap();
    let f = m.add_file(g, "/S/file0", 500 << 20);
    let reader = m.start_seq_reader(g, f, IoPrio::DEFAULT, 0);
    m.run_until(secs(1.0), |_| false);
    assert!(
        m.vm_boosted(vm),
        "a new reader is raised: the guest asks for help"
    );
    let t = m.qemu_threads(vm)[0];
    m.run_until(secs(2.0), |_| false);
    assert_eq!(m.ioprio(t), BOOST_IOPRIO);
    m.kill(reader);
    m.run_until(secs(4.0), |_| false);
    assert!(!m.vm_boosted(vm), "NO-HELP ended the boost");
    assert_eq!(m.ioprio(t), IoPrio::DEFAULT);
    let s = m.coord_stats(vm);
    assert!(s.helps_sent >= 1 && s.no_helps_sent == 1, "{s:?}");
    assert!(
        s.boosted_ns > secs(0.5) && s.boosted_ns < secs(4.0),
        "{s:?}"
    );
}

/// A greedy guest asks for help all the time; the budget caps what it
/// gets: at most `budget_fraction` of the run.
#[test]
fn a_greedy_vm_gains_at_most_its_budget() {
    let text = r#"
benchmark = "startup"
app = "xterm"
iterations = 5
repetitions = 1
[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["none"]
host_sched = ["bfq"]
host_workload = ["none"]
other_vms = ["greedy-5r-seq,2x5r-seq"]
coordination = ["help-rt"]
"#;
    let cell = &cells(text)[0];
    let opts = SimOptions::default();
    let budget = opts.coord.policy.budget_fraction;
    let r = run_startup(cell, &opts, 0).unwrap();
    let run = r.counters["run_s"];
    let greedy = r.counters["vm2_boosted_s"];
    let others = r.counters["vm3_boosted_s"] + r.counters["vm4_boosted_s"];
    eprintln!(
        "run {run:.1} s: greedy VM boosted {greedy:.1} s ({:.0}%), VM 1 {:.1} s, others {others:.1} s",
        100.0 * greedy / run,
        r.counters["vm1_boosted_s"]
    );
    assert!(
        greedy > 0.2 * run,
        "the greedy VM did get help: {greedy:.1} s"
    );
    // The budget holds over every window; over the whole run the share can
    // only exceed it by less than one window's worth of budget.
    let window = opts.coord.policy.budget_window_ns as f64 / 1e9;
    let bound = budget * run + budget * window;
    assert!(
        greedy <= bound,
        "greedy VM boosted {greedy:.1} s, more than its budget allows ({bound:.1} s)"
    );
}

/// Coordination is deterministic: the same seed gives the same start-ups
/// and the same boosted time.
#[test]
fn coordinated_cells_are_deterministic() {
    let cs = cells(VBFQ_HDD);
    let cell = find(
        &cs,
        &[
            ("guest_workload", "5r-seq"),
            ("host_workload", "5r-seq"),
            ("coordination", "help-wr"),
        ],
    );
    let opts = SimOptions::default();
    let a = run_startup(&cell, &opts, 0).unwrap();
    let b = run_startup(&cell, &opts, 0).unwrap();
    assert_eq!(a, b);
}

/// Coordination needs VMs, and unknown modes are refused with the list.
#[test]
fn coordination_errors_are_clear() {
    let native = r#"
benchmark = "startup"
[matrix]
device = ["hdd-1.8in"]
host_sched = ["bfq"]
host_workload = ["none"]
coordination = ["help-rt"]
"#;
    let c = &cells(native)[0];
    let e = run_startup(c, &SimOptions::default(), 0).unwrap_err();
    assert!(e.contains("help-rt") && e.contains("guest_sched"), "{e}");
    let bad = r#"
benchmark = "startup"
[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["none"]
host_sched = ["bfq"]
host_workload = ["none"]
coordination = ["help-me"]
"#;
    let e = Scenario::from_toml_str(bad, &accepted())
        .unwrap_err()
        .to_string();
    assert!(e.contains("help-me") && e.contains("help-wr"), "{e}");
}

const MULTI_VM: &str = r#"
benchmark = "startup"
app = "xterm"
iterations = 5
repetitions = 1
[matrix]
device = ["hdd-1.8in", "emmc"]
guest_sched = ["bfq"]
guest_workload = ["none"]
host_sched = ["bfq"]
host_workload = ["none"]
other_vms = ["3x5r-seq", "greedy-5r-seq,2x5r-seq", "app,2x5r-seq"]
coordination = ["off", "help-rt"]
"#;

/// Four VMs on one disk. A greedy VM (asking for help all the time) costs VM 1
/// at most 1.5x of its start-up without it: the budget caps the greedy VM, and
/// VM 1, asking after a quiet spell, is raised in the arbitration. Two VMs
/// starting xterm together are both up within 2x of VM 1 starting alone
/// without coordination, and sooner than without coordination.
#[test]
fn many_vms_a_greedy_one_and_two_start_ups_at_once() {
    let cs = cells(MULTI_VM);
    for dev in ["hdd-1.8in", "emmc"] {
        let run = |other: &str, mode: &str| {
            startup(
                &find(
                    &cs,
                    &[
                        ("device", dev),
                        ("other_vms", other),
                        ("coordination", mode),
                    ],
                ),
                1,
            )
        };
        let (plain, _) = run("3x5r-seq", "help-rt");
        let (greedy, greedy_timeouts) = run("greedy-5r-seq,2x5r-seq", "help-rt");
        let (alone_off, _) = run("3x5r-seq", "off");
        let (two, two_timeouts) = run("app,2x5r-seq", "help-rt");
        let (two_off, _) = run("app,2x5r-seq", "off");
        eprintln!(
            "{dev}: VM 1 {plain:.2} s, with a greedy VM {greedy:.2} s; two start-ups \
             {two:.2} s (off {two_off:.2} s, one alone off {alone_off:.2} s)"
        );
        assert_eq!(greedy_timeouts + two_timeouts, 0);
        assert!(
            greedy <= 1.5 * plain,
            "{dev}: the greedy VM costs VM 1 {:.2}x",
            greedy / plain
        );
        assert!(two <= 2.0 * alone_off, "{dev}: two start-ups {two:.2} s");
        assert!(two < two_off, "{dev}: help should speed up two start-ups");
    }
}

/// Two VMs starting xterm at once among four on the eMMC, `help-wr`: both
/// are raised as newcomers and boosted together, and the host does not idle
/// for one's start-up while the other's waits, so each one's I/O fills the
/// other's CPU gaps. Both are up within 2x of one VM starting alone with the
/// same help (1.59x over 5 repetitions; 2.13x when the arbiter's one slot
/// and the host's idling served them one after the other).
#[test]
fn two_start_ups_at_once_share_the_flash_device_under_help_wr() {
    let cs = cells(
        &MULTI_VM
            .replace("app = \"xterm\"", "app = \"xterm-2014\"")
            .replace(r#"device = ["hdd-1.8in", "emmc"]"#, r#"device = ["emmc"]"#)
            .replace(
                r#"coordination = ["off", "help-rt"]"#,
                r#"coordination = ["help-wr"]"#,
            ),
    );
    let run = |other: &str| startup(&find(&cs, &[("other_vms", other)]), 3);
    let (alone, _) = run("3x5r-seq");
    let (two, timeouts) = run("app,2x5r-seq");
    eprintln!(
        "emmc, 4 VMs, help-wr: one start-up {alone:.3} s, two at once {two:.3} s ({:.2}x)",
        two / alone
    );
    assert_eq!(timeouts, 0);
    assert!(
        two <= 2.0 * alone,
        "two start-ups took {:.2}x one alone",
        two / alone
    );
}

/// Eight VMs on the eMMC, `help-wr`: the greedy VM, raised by the host
/// whenever it holds the boost, must not cost VM 1 more than 1.5x either.
/// Before BFQ's push-up of backshifted timestamps was modelled
/// (`bfq_update_fin_time_enqueue()`), the other VMs' queues, which go idle
/// for an instant between requests, kept finish times far behind the
/// virtual time the raised greedy VM had pushed up, and they held the disk
/// for about 300 ms against VM 1's raised queue: 1.63x.
#[test]
fn a_greedy_vm_costs_little_with_eight_vms_under_help_wr() {
    let cs = cells(
        &MULTI_VM
            .replace("app = \"xterm\"", "app = \"xterm-2014\"")
            .replace(
                r#"other_vms = ["3x5r-seq", "greedy-5r-seq,2x5r-seq", "app,2x5r-seq"]"#,
                r#"other_vms = ["7x5r-seq", "greedy-5r-seq,6x5r-seq"]"#,
            )
            .replace(
                r#"coordination = ["off", "help-rt"]"#,
                r#"coordination = ["help-wr"]"#,
            ),
    );
    let run = |other: &str| {
        startup(
            &find(
                &cs,
                &[
                    ("device", "emmc"),
                    ("other_vms", other),
                    ("coordination", "help-wr"),
                ],
            ),
            2,
        )
    };
    let (plain, _) = run("7x5r-seq");
    let (greedy, timeouts) = run("greedy-5r-seq,6x5r-seq");
    eprintln!("emmc, 8 VMs, help-wr: VM 1 {plain:.3} s, with a greedy VM {greedy:.3} s");
    assert_eq!(timeouts, 0);
    assert!(
        greedy <= 1.5 * plain,
        "the greedy VM costs VM 1 {:.2}x",
        greedy / plain
    );
}

/// Seven VMs with five sequential readers each on the 1.8" disk, one of
/// them greedy: while the host boosts the greedy VM (`help-rt`: its QEMU
/// thread in the RT class), it serves the others' readers so seldom that a reader's next request comes more than 2 s after
/// its queue was last served, and the guest's BFQ raises it as if it were a
/// program starting (`bfq_bfqq_idle_for_long_time()` looks at the queue,
/// not at why it was empty). Its previous request had just completed,
/// though: the guest does not count such a raising as a start, so these
/// VMs never ask the host for a start, which would earn them the arbiter's
/// raise against VMs really starting programs (with eight VMs, two of them
/// starting xterm at once, such starts held the slot for seconds).
#[test]
fn readers_the_host_starves_are_not_taken_for_starts() {
    let mut m = machine();
    m.set_coordination(coord(Coordination::HelpRt)).unwrap();
    // Mainline guests: in this setup they show the
    // raisings; the v7r2 guests of the published runs show none.
    let mut guest = guest_defaults();
    guest.sched_cfg.bfq.version = BfqVersion::Mainline;
    let mut readers = Vec::new();
    let mut vms = Vec::new();
    for v in 0..7 {
        let (g, vm) = m
            .add_vm(&guest, &format!("/images/vm{}.img", v + 1))
            .unwrap();
        if v == 0 {
            m.set_greedy(vm);
        } else {
            vms.push(vm);
        }
        for i in 0..5 {
            let f = m.add_file(g, &format!("/S/file{i}"), 500 << 20);
            let pid = m.start_seq_reader(g, f, IoPrio::DEFAULT, 0);
            if v > 0 {
                readers.push(pid);
            }
        }
    }
    // The readers' first raisings (new queues) are starts, asked for in
    // the first seconds; after 15 s only the host's slowness raises them.
    m.run_until(secs(15.0), |_| false);
    let raised = |m: &Machine| readers.iter().map(|&p| m.raisings(p).0).sum::<u32>();
    let starts = |m: &Machine| {
        vms.iter()
            .map(|&v| m.coord_stats(v).start_helps_sent)
            .sum::<u64>()
    };
    let (raised0, starts0) = (raised(&m), starts(&m));
    m.run_until(secs(75.0), |_| false);
    let (raised1, starts1) = (raised(&m), starts(&m));
    eprintln!(
        "15-75 s: {} interactive raisings of starved readers, {} start HELPs",
        raised1 - raised0,
        starts1 - starts0
    );
    assert!(
        raised1 > raised0,
        "the host should starve the readers into raisings: {}",
        raised1 - raised0
    );
    assert_eq!(starts1, starts0, "a starved reader was taken for a start");
}
