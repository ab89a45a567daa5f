//! `vhost-ioprio`: the guest marks its starting task's ioprio for a lease,
//! the virtio-blk header carries it, and the VM's vhost-user-blk backend
//! issues each request with the mapped ioprio (RT only for a VM allowed
//! it). Only the marked requests are favoured, not the VM's other readers.

use experiment::{Cell, Scenario};
use sim::bench::{accepted, setup, SimOptions};
use sim::coord::{CoordStats, BOOST_IOPRIO};
use sim::machine::{secs, Machine, HOST};
use sim::request::IoPrio;

/// eMMC, five sequential readers on the host and five in the guest: the
/// cell where `help-rt` boosts the whole VM, the guest's readers along.
const SCENARIO: &str = r#"
benchmark = "startup"
app = "xterm-2014"
iterations = 1
repetitions = 1
[matrix]
device = ["emmc"]
guest_sched = ["bfq"]
guest_workload = ["5r-seq"]
host_sched = ["bfq"]
host_workload = ["5r-seq"]
coordination = ["off", "help-rt", "vhost-ioprio"]
"#;

fn cell(mode: &str) -> Cell {
    Scenario::from_toml_str(SCENARIO, &accepted())
        .unwrap()
        .cells()
        .into_iter()
        .find(|c| c.get("coordination").as_deref() == Some(mode))
        .unwrap()
}

/// Past the readers' own start (BFQ raises every new queue, and the guest
/// marks them as it would any start; their raising and leases are over by
/// then).
const SETTLE_S: f64 = 20.0;

/// One start-up of the app in VM 1 after [`SETTLE_S`].
struct StartUp {
    secs: f64,
    /// The guest's readers' MB/s during the start-up.
    guest_readers: f64,
    /// The host's readers' MB/s during the start-up.
    host_readers: f64,
    /// The coordination counters of the start-up alone.
    stats: CoordStats,
}

/// Bytes the host's disk moved for anyone but VM 1's QEMU (or backend)
/// threads: the host's readers'.
fn host_reader_bytes(m: &Machine) -> u64 {
    let (r, w) = m.sectors_done(HOST);
    let vm: u64 = m.qemu_threads(0).iter().map(|&p| m.bytes_done_by(p)).sum();
    (r + w) * 512 - vm
}

/// One start-up of the app in VM 1 after [`SETTLE_S`], with `allow_rt` for
/// the VM's backend. Checks, every 10 ms of the start-up, that the guest
/// marked no reader.
fn start_up(mode: &str, allow_rt: bool) -> StartUp {
    let s = setup(&cell(mode), &SimOptions::default(), 1).unwrap();
    let mut m: Machine = s.machine;
    m.set_vhost_allow_rt(0, allow_rt);
    let guest = s.app_kernel;
    m.run_until(secs(SETTLE_S), |_| false);
    let before = m.coord_stats(0);
    let sectors0 = m.sectors_done(guest);
    let host0 = host_reader_bytes(&m);
    let t0 = m.now();
    let (trace, files) = s.app.unwrap();
    let app = m.start_app(guest, trace, files, IoPrio::DEFAULT);
    let mut marked = false;
    while m.app_finished(app).is_none() {
        assert!(m.now() < t0 + secs(60.0), "{mode}: start-up timed out");
        let next = m.now() + secs(0.01);
        m.run_until(next, |m| m.app_finished(app).is_some());
        marked |= m.ioprio(app) == BOOST_IOPRIO;
        // Every other guest task is a reader: none is marked.
        let readers_marked = m.pids_with_ioprio(guest, BOOST_IOPRIO);
        assert!(
            readers_marked.iter().all(|&p| p == app),
            "{mode}: readers {readers_marked:?} marked during the start-up"
        );
    }
    let t = m.app_finished(app).unwrap() - t0;
    let sectors = m.sectors_done(guest);
    let reader_bytes =
        ((sectors.0 + sectors.1) - (sectors0.0 + sectors0.1)) * 512 - m.bytes_done_by(app);
    let after = m.coord_stats(0);
    let delta = CoordStats {
        marks: after.marks - before.marks,
        backend_requests: after.backend_requests - before.backend_requests,
        guest_rt_requests: after.guest_rt_requests - before.guest_rt_requests,
        host_rt_requests: after.host_rt_requests - before.host_rt_requests,
        rt_demoted: after.rt_demoted - before.rt_demoted,
        ..after
    };
    assert_eq!(marked, mode == "vhost-ioprio", "{mode}: app marked");
    let secs_t = t as f64 / 1e9;
    StartUp {
        secs: secs_t,
        guest_readers: reader_bytes as f64 / 1e6 / secs_t,
        host_readers: (host_reader_bytes(&m) - host0) as f64 / 1e6 / secs_t,
        stats: delta,
    }
}

/// The marked app's requests reach the host with RT; the readers' do not:
/// the start-up's backend requests are split, RT only for the app's. A VM
/// not allowed RT gets them as best-effort level 0 instead.
#[test]
fn the_marked_apps_requests_reach_the_host_as_rt_and_the_readers_do_not() {
    let c = start_up("vhost-ioprio", true).stats;
    assert!(c.marks >= 1, "{c:?}");
    assert!(c.host_rt_requests > 0, "{c:?}");
    assert_eq!(c.host_rt_requests, c.guest_rt_requests, "{c:?}");
    assert_eq!(c.rt_demoted, 0, "{c:?}");
    // The readers' requests went on as best effort.
    assert!(c.backend_requests > c.host_rt_requests, "{c:?}");

    let c = start_up("vhost-ioprio", false).stats;
    assert!(c.guest_rt_requests > 0, "{c:?}");
    assert_eq!(c.host_rt_requests, 0, "{c:?}");
    assert_eq!(c.rt_demoted, c.guest_rt_requests, "{c:?}");

    // No backend, no marks, in the other modes.
    let c = start_up("help-rt", true).stats;
    assert_eq!((c.marks, c.backend_requests), (0, 0), "{c:?}");
}

/// On the eMMC under five host readers and five guest readers, the
/// start-up under `vhost-ioprio` is faster than without coordination.
/// `help-rt` favours the whole VM while the app starts: the guest's
/// readers get several times their `off` share, taken from the host's
/// readers. `vhost-ioprio` favours only the app's requests: the guest's
/// readers get no more than under `off`. (The host's readers get next to
/// nothing during the short start-up in both: an RT queue on the host's BFQ
/// is served before any best-effort one.)
#[test]
fn vhost_ioprio_speeds_the_start_up_and_favours_only_the_app() {
    let off = start_up("off", true);
    let rt = start_up("help-rt", true);
    let vh = start_up("vhost-ioprio", true);
    for (name, r) in [("off", &off), ("help-rt", &rt), ("vhost-ioprio", &vh)] {
        eprintln!(
            "{name}: start-up {:.2} s, guest readers {:.2} MB/s, host readers {:.2} MB/s",
            r.secs, r.guest_readers, r.host_readers
        );
    }
    assert!(
        vh.secs < off.secs,
        "vhost-ioprio {} s, off {} s",
        vh.secs,
        off.secs
    );
    assert!(
        rt.guest_readers > 2.0 * off.guest_readers,
        "help-rt favours the guest's readers too"
    );
    assert!(
        vh.guest_readers <= off.guest_readers,
        "vhost-ioprio favours only the app"
    );
}
