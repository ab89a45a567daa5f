//! The lease and restore state machine, on a fake kernel.

use std::cell::RefCell;
use std::collections::HashMap;

use policy::{GuestEvent, MS, SEC};

use super::*;

/// The policy crate's rule with lease `ns` (and BFQ's service bound).
fn lease(ns: Nanos) -> MarkRule {
    MarkRule {
        lease_ns: ns,
        ..MarkRule::default()
    }
}

/// A fake process: its threads, start time and parent.
type FakeProc = (Vec<u32>, u64, u32);

/// A fake kernel: processes, and each thread's priority.
#[derive(Default)]
struct Fake {
    procs: RefCell<HashMap<u32, FakeProc>>,
    prio: RefCell<HashMap<u32, u32>>,
    /// `ioprio_set` to anything but the default fails with EPERM.
    eperm: bool,
}

impl Fake {
    fn spawn(&self, pid: u32, tids: &[u32], parent: u32) {
        self.procs
            .borrow_mut()
            .insert(pid, (tids.to_vec(), u64::from(pid) * 10, parent));
        for &t in tids {
            self.prio.borrow_mut().entry(t).or_insert(DEFAULT);
        }
    }
    fn prio(&self, tid: u32) -> u32 {
        self.prio.borrow()[&tid]
    }
}

impl IoprioOps for &Fake {
    fn threads(&self, pid: u32) -> io::Result<Vec<u32>> {
        self.procs
            .borrow()
            .get(&pid)
            .map(|p| p.0.clone())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }
    fn get(&self, tid: u32) -> io::Result<u32> {
        self.prio
            .borrow()
            .get(&tid)
            .copied()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }
    fn set(&self, tid: u32, value: u32) -> io::Result<()> {
        if self.eperm && value != DEFAULT {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        self.prio.borrow_mut().insert(tid, value);
        Ok(())
    }
    fn start_time(&self, pid: u32) -> Option<u64> {
        self.procs.borrow().get(&pid).map(|p| p.1)
    }
    fn parent(&self, pid: u32) -> Option<u32> {
        self.procs.borrow().get(&pid).map(|p| p.2)
    }
}

const BE0: u32 = 2 << 13;
const RT0: u32 = 1 << 13;

/// Every thread is marked; the mark ends with the lease although the need
/// lasts on, and comes back only with a new need.
#[test]
fn lease_ends_and_a_new_need_marks_again() {
    let k = Fake::default();
    k.spawn(10, &[10, 11, 12], 1);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(500 * MS));
    let ev = m.update(0, &[(10, 3000 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::Marked {
            pid: 10,
            threads: 3
        }]
    );
    assert!([10, 11, 12].iter().all(|&t| k.prio(t) == BE0));
    assert_eq!(m.next_deadline(), Some(500 * MS));
    assert!(m.update(499 * MS, &[(10, 3000 * MS)]).is_empty());
    let ev = m.update(500 * MS, &[(10, 3000 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::Restored {
            pid: 10,
            threads: 3,
            why: Some(MarkEnd::LeaseOver)
        }]
    );
    assert!([10, 11, 12].iter().all(|&t| k.prio(t) == DEFAULT));
    // The same need still live: not marked again.
    assert!(m.update(1000 * MS, &[(10, 3000 * MS)]).is_empty());
    assert_eq!(m.next_deadline(), None);
    // The need ended; a new start marks again.
    assert!(m.update(3000 * MS, &[]).is_empty());
    let ev = m.update(4000 * MS, &[(10, 7000 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::Marked {
            pid: 10,
            threads: 3
        }]
    );
}

/// A need that ends before the lease ends the mark with it.
#[test]
fn need_end_restores_before_the_lease() {
    let k = Fake::default();
    k.spawn(10, &[10], 1);
    let mut m = Marker::new(&k, MarkClass::Rt, lease(5000 * MS));
    m.update(0, &[(10, 300 * MS)]);
    assert_eq!(k.prio(10), RT0);
    assert_eq!(m.next_deadline(), Some(300 * MS));
    let ev = m.update(300 * MS, &[]);
    assert_eq!(
        ev,
        vec![MarkEvent::Restored {
            pid: 10,
            threads: 1,
            why: Some(MarkEnd::NeedOver)
        }]
    );
    assert_eq!(k.prio(10), DEFAULT);
    assert!(!m.is_marked(10));
}

/// A process with one thread the user set is left alone entirely, and
/// stays so while its need lasts.
#[test]
fn user_set_process_left_alone() {
    let k = Fake::default();
    k.spawn(20, &[20, 21], 1);
    let idle = 3 << 13;
    k.prio.borrow_mut().insert(21, idle);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(500 * MS));
    let ev = m.update(0, &[(20, 3000 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::LeftAlone {
            pid: 20,
            tid: 21,
            value: idle
        }]
    );
    assert_eq!((k.prio(20), k.prio(21)), (DEFAULT, idle));
    assert!(m.update(100 * MS, &[(20, 3000 * MS)]).is_empty());
    assert!(m.update(3000 * MS, &[]).is_empty());
    assert_eq!((k.prio(20), k.prio(21)), (DEFAULT, idle));
}

/// A thread the user re-prioritised during the lease keeps the user's
/// value; a thread created during the lease (inheriting the mark) is put
/// back with the others.
#[test]
fn restore_touches_only_the_mark() {
    let k = Fake::default();
    k.spawn(30, &[30, 31], 1);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(500 * MS));
    m.update(0, &[(30, 3000 * MS)]);
    let be3 = (2 << 13) | 3;
    k.prio.borrow_mut().insert(31, be3);
    k.procs.borrow_mut().get_mut(&30).unwrap().0.push(32);
    k.prio.borrow_mut().insert(32, BE0);
    let ev = m.update(500 * MS, &[(30, 3000 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::Restored {
            pid: 30,
            threads: 2,
            why: Some(MarkEnd::LeaseOver)
        }]
    );
    assert_eq!(
        (k.prio(30), k.prio(31), k.prio(32)),
        (DEFAULT, be3, DEFAULT)
    );
}

/// An exited process is forgotten; a process that reuses its pid (another
/// start time) is never restored as if it were the one marked.
#[test]
fn exit_and_reused_pid() {
    let k = Fake::default();
    k.spawn(40, &[40], 1);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(500 * MS));
    m.update(0, &[(40, 3000 * MS)]);
    // Gone, and pid 40 reused by a process that someone set to BE/0 itself.
    k.procs.borrow_mut().insert(40, (vec![40], 999, 1));
    let ev = m.update(100 * MS, &[]);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(k.prio(40), BE0);
    // exited() forgets; a process still there (an exit inferred from a
    // /proc read that failed for a moment) is restored all the same.
    k.spawn(41, &[41], 1);
    m.update(0, &[(41, 3000 * MS)]);
    assert_eq!(
        m.exited(41),
        Some(MarkEvent::Restored {
            pid: 41,
            threads: 1,
            why: None
        })
    );
    assert_eq!(k.prio(41), DEFAULT);
    assert!(!m.is_marked(41));
    k.spawn(43, &[43], 1);
    m.update(0, &[(43, 3000 * MS)]);
    k.procs.borrow_mut().remove(&43);
    assert_eq!(m.exited(43), None);
    assert_eq!(m.next_deadline(), None);
    // A process gone before it could be marked: nothing to say.
    assert!(m.update(0, &[(42, 3000 * MS)]).is_empty());
    assert!(!m.is_marked(42));
}

/// A child of a marked process that execs during the lease carries the
/// mark it inherited: taken as guestd's, restored at its own lease end.
/// The same value in a child of an unmarked parent is the user's.
#[test]
fn inherited_mark_adopted_only_from_a_marked_parent() {
    let k = Fake::default();
    k.spawn(50, &[50], 1);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(500 * MS));
    m.update(0, &[(50, 3000 * MS)]);
    k.spawn(51, &[51], 50);
    k.prio.borrow_mut().insert(51, BE0);
    let ev = m.update(100 * MS, &[(50, 3000 * MS), (51, 3100 * MS)]);
    assert_eq!(
        ev,
        vec![MarkEvent::Marked {
            pid: 51,
            threads: 1
        }]
    );
    m.update(600 * MS, &[(50, 3000 * MS), (51, 3100 * MS)]);
    assert_eq!((k.prio(50), k.prio(51)), (DEFAULT, DEFAULT));

    k.spawn(60, &[60], 1);
    k.prio.borrow_mut().insert(60, BE0);
    let ev = m.update(700 * MS, &[(60, 3000 * MS)]);
    assert!(matches!(ev[..], [MarkEvent::LeftAlone { pid: 60, .. }]));
}

/// Not permitted (RT without CAP_SYS_ADMIN): nothing is left changed, and
/// the process is not tried again for the same need.
#[test]
fn refused_mark_rolls_back() {
    let k = Fake {
        eperm: true,
        ..Fake::default()
    };
    k.spawn(70, &[70, 71], 1);
    let mut m = Marker::new(&k, MarkClass::Rt, lease(500 * MS));
    let ev = m.update(0, &[(70, 3000 * MS)]);
    assert!(
        matches!(ev[..], [MarkEvent::Failed { pid: 70, .. }]),
        "{ev:?}"
    );
    assert_eq!((k.prio(70), k.prio(71)), (DEFAULT, DEFAULT));
    assert!(m.update(100 * MS, &[(70, 3000 * MS)]).is_empty());
}

/// Leaving restores every mark.
#[test]
fn restore_all_on_leave() {
    let k = Fake::default();
    k.spawn(80, &[80], 1);
    k.spawn(81, &[81, 82], 1);
    let mut m = Marker::new(&k, MarkClass::Be0, lease(5000 * MS));
    m.update(0, &[(80, 3000 * MS), (81, 3000 * MS)]);
    let mut ev = m.restore_all();
    ev.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(ev.len(), 2);
    assert!([80, 81, 82].iter().all(|&t| k.prio(t) == DEFAULT));
    assert_eq!(m.next_deadline(), None);
}

/// A marked process that reads the rule's greedy amount under its mark is
/// restored at once (a greedy reader), and stays unmarked while the same
/// need lasts; the bytes it read before the mark do not count.
#[test]
fn a_greedy_reader_is_restored_and_not_marked_again_for_the_same_need() {
    let k = Fake::default();
    k.spawn(90, &[90], 1);
    let mut m = Marker::new(&k, MarkClass::Rt, MarkRule::default());
    let before = 1 << 30;
    let read = std::cell::Cell::new(before);
    let need = [(90, 20_000 * MS)];
    let ev = m.update_with(0, &need, |_| Usage {
        read: Some(read.get()),
        io_ns: None,
    });
    assert!(matches!(ev[..], [MarkEvent::Marked { pid: 90, .. }]));
    read.set(before + policy::mark::MAX_SERVICE_FROM_WR_BYTES - 1);
    assert!(m
        .update_with(SEC, &need, |_| Usage {
            read: Some(read.get()),
            io_ns: None
        })
        .is_empty());
    assert_eq!(k.prio(90), RT0);
    read.set(before + policy::mark::MAX_SERVICE_FROM_WR_BYTES);
    let ev = m.update_with(2 * SEC, &need, |_| Usage {
        read: Some(read.get()),
        io_ns: None,
    });
    assert_eq!(
        ev,
        vec![MarkEvent::Restored {
            pid: 90,
            threads: 1,
            why: Some(MarkEnd::Greedy)
        }]
    );
    assert_eq!(k.prio(90), DEFAULT);
    assert!(m
        .update_with(3 * SEC, &need, |_| Usage {
            read: Some(read.get()),
            io_ns: None
        })
        .is_empty());
    assert!(!m.is_marked(90));
}

/// The case that spent the VM's RT budget in the real cell: five readers
/// start (new programs: each an exec's need, extended while they wait on
/// I/O up to 25 s), then the app starts 17 s later (the 13 s settle and
/// the 4 s pause). Under the default rule the readers carry the mark for
/// the lease (8 s) only, not for their needs' 25 s, and the app, whose
/// need is shorter than the lease, carries it for its whole start.
#[test]
fn background_readers_lose_the_mark_after_the_lease_and_the_app_keeps_it() {
    let k = Fake::default();
    let readers = [100, 101, 102, 103, 104];
    for r in readers {
        k.spawn(r, &[r], 1);
    }
    k.spawn(110, &[110], 1);
    let mut m = Marker::new(&k, MarkClass::Rt, MarkRule::default());
    let reader_needs: Vec<(u32, Nanos)> = readers.iter().map(|&r| (r, 25 * SEC)).collect();
    // Every 250 ms (guestd's look) for 25 s; the app from 17 s to 23 s.
    let mut marked_ns = HashMap::<u32, Nanos>::new();
    for step in 0..100u64 {
        let now = step * 250 * MS;
        let mut needs = reader_needs.clone();
        if (17 * SEC..23 * SEC).contains(&now) {
            needs.push((110, 23 * SEC));
        }
        m.update(now, &needs);
        for pid in readers.iter().chain(&[110]) {
            if m.is_marked(*pid) {
                *marked_ns.entry(*pid).or_default() += 250 * MS;
            }
        }
    }
    for r in readers {
        assert_eq!(marked_ns[&r], 8 * SEC, "reader {r}");
        assert_eq!(k.prio(r), DEFAULT);
    }
    assert_eq!(marked_ns[&110], 6 * SEC, "the app, its whole start");
}

/// Counted in I/O time (what guestd's detector reports): a start that
/// computes half of the time keeps its mark past the lease's wall time,
/// while a reader doing I/O all the time loses it at the lease's end.
#[test]
fn the_lease_counts_io_time() {
    let k = Fake::default();
    k.spawn(120, &[120], 1);
    k.spawn(121, &[121], 1);
    let mut m = Marker::new(&k, MarkClass::Rt, MarkRule::default());
    let needs = [(120, 30 * SEC), (121, 30 * SEC)];
    // 120 reads all the time, 121 half of the time.
    let used = |now: Nanos| {
        move |pid: u32| Usage {
            read: None,
            io_ns: Some(if pid == 120 { now } else { now / 2 }),
        }
    };
    m.update_with(0, &needs, used(0));
    assert!(m
        .update_with(8 * SEC - MS, &needs, used(8 * SEC - MS))
        .is_empty());
    let ev = m.update_with(8 * SEC, &needs, used(8 * SEC));
    assert_eq!(
        ev,
        vec![MarkEvent::Restored {
            pid: 120,
            threads: 1,
            why: Some(MarkEnd::LeaseOver)
        }]
    );
    assert!(m.is_marked(121));
    let ev = m.update_with(16 * SEC, &needs, used(16 * SEC));
    assert!(matches!(ev[..], [MarkEvent::Restored { pid: 121, .. }]));
}

/// What guestd reads of a fake process at one look: its I/O event for the
/// detector, and the texts of its `/proc/PID/stat`, `schedstat` and
/// `status` (state letter, run and wait times in ns).
struct Look {
    io: Option<GuestEvent>,
    state: char,
    run_ns: Nanos,
    wait_ns: Nanos,
}

/// The real cell of `cloud2014-real` (guest and host 5r-seq), look by
/// look, through the detector and the marker as guestd drives them
/// (`guestd::Daemon::sync_marks`): five readers exec'd at 0, reading at
/// every look; the app exec'd at 17 s (the 13 s settle and the 4 s pause),
/// which reads for two looks, then waits for a CPU for four (2.4 s, more
/// than the exec's 1 s grace), then reads until it exits at 22.5 s. The
/// guest is starved of CPU: guestd's looks come every 600 ms instead of
/// 250. `guestd_sends_looks_and_cpu`: guestd as now (it says where each
/// look begins and reads the CPU use of the processes still starting), or
/// as before. Returns, per pid, the looks at which it was marked, and how
/// each mark ended.
fn starved_cell(guestd_sends_looks_and_cpu: bool) -> (HashMap<u32, Vec<u64>>, Vec<MarkEvent>) {
    use policy::GuestSignalConfig;
    let k = Fake::default();
    let readers = [100, 101, 102, 103, 104];
    let app = 110;
    for p in readers.iter().chain(&[app]) {
        k.spawn(*p, &[*p], 1);
    }
    let mut d = GuestSignalDetector::new(GuestSignalConfig::for_sampling(250 * MS));
    let mut m = Marker::new(&k, MarkClass::Rt, MarkRule::default());
    for r in readers {
        d.observe(0, GuestEvent::Exec { pid: r });
    }
    let look_at = |n: u64| n * 600 * MS;
    let app_look = |n: u64| -> Option<Look> {
        let reads = |state| Look {
            io: Some(GuestEvent::IoActivity {
                pid: app,
                bytes: 64 << 10,
            }),
            state,
            run_ns: n * 10 * MS,
            wait_ns: n * 10 * MS,
        };
        match n {
            29 | 30 | 35..=37 => Some(reads('D')),
            // Waiting for a CPU: runnable at two looks; at the other two
            // asleep for a moment at the reading, but its run and wait
            // times grew by 400 ms of the 600 since the look before.
            31 | 33 => Some(Look {
                io: None,
                state: 'R',
                run_ns: n * 10 * MS,
                wait_ns: n * 10 * MS,
            }),
            32 | 34 => Some(Look {
                io: None,
                state: 'S',
                run_ns: n * 10 * MS + 200 * MS,
                wait_ns: n * 10 * MS + 200 * MS,
            }),
            _ => None,
        }
    };
    let mut marked: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut ends = Vec::new();
    for n in 0..45u64 {
        let now = look_at(n);
        if n == 29 {
            d.observe(now - 400 * MS, GuestEvent::Exec { pid: app });
        }
        if guestd_sends_looks_and_cpu {
            d.observe(now, GuestEvent::Look);
        }
        let mut looks: Vec<(u32, Look)> = readers
            .iter()
            .map(|&r| {
                let io = if n % 2 == 0 {
                    GuestEvent::IoActivity {
                        pid: r,
                        bytes: 128 << 10,
                    }
                } else {
                    GuestEvent::IoWait { pid: r }
                };
                let l = Look {
                    io: Some(io),
                    state: 'D',
                    run_ns: n * MS,
                    wait_ns: n * MS,
                };
                (r, l)
            })
            .collect();
        looks.extend(app_look(n).map(|l| (app, l)));
        let starting = d.starting(now);
        for (pid, l) in &looks {
            if let Some(io) = l.io {
                d.observe(now, io);
            }
            if guestd_sends_looks_and_cpu && starting.contains(pid) {
                let stat = format!("{pid} (tandem) {} 1 {pid} {pid} 0 -1", l.state);
                let sched = format!("{} {} {n}\n", l.run_ns, l.wait_ns);
                let reading = crate::sys::cpu_reading_of(now, &stat, Some(&sched), None).unwrap();
                d.observe(now, GuestEvent::Cpu { pid: *pid, reading });
            }
        }
        if n == 38 {
            // The app exits at 22.5 s, between looks 37 and 38.
            d.observe(now, GuestEvent::ProcessExit { pid: app });
            ends.extend(m.exited(app));
        }
        d.poll(now);
        let needs = needs_to_mark(&d, now);
        ends.extend(
            m.update_with(now, &needs, |pid| usage(&d, pid))
                .into_iter()
                .filter(|e| matches!(e, MarkEvent::Restored { .. })),
        );
        for pid in readers.iter().chain(&[app]) {
            if m.is_marked(*pid) {
                marked.entry(*pid).or_default().push(n);
            }
        }
    }
    (marked, ends)
}

/// Both measured defects and their fix, on fake `/proc` readings. Before:
/// the readers' I/O time was not counted across late looks, so their
/// marks outlived the I/O-time lease and were still on when the app
/// started (at look 29, 17.4 s); and the app lost its mark while it waited
/// for a CPU. Now: each reader's mark ends by the lease (8 s of I/O time:
/// 14 looks of 600 ms) long before the app starts, and the app keeps its
/// mark at every look from its exec to its exit.
#[test]
fn a_starved_guest_marks_its_readers_for_the_lease_and_its_start_throughout() {
    let (marked, ends) = starved_cell(true);
    for r in [100, 101, 102, 103, 104] {
        assert_eq!(marked[&r], (0..=13).collect::<Vec<_>>(), "reader {r}");
        assert!(ends.contains(&MarkEvent::Restored {
            pid: r,
            threads: 1,
            why: Some(MarkEnd::LeaseOver)
        }));
    }
    assert_eq!(marked[&110], (29..=37).collect::<Vec<_>>(), "the app");
    assert!(ends.contains(&MarkEvent::Restored {
        pid: 110,
        threads: 1,
        why: None
    }));

    let (before, _) = starved_cell(false);
    assert!(
        before[&100].contains(&29),
        "before: a reader still marked when the app started: {:?}",
        before[&100]
    );
    assert!(
        (29..=37).any(|n| !before[&110].contains(&n)),
        "before: the app lost its mark mid-start: {:?}",
        before[&110]
    );
}
