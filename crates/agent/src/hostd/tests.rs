//! hostd's unit tests: configuration, channels, vsock routing, metrics.

use super::channel::{SharedLimiter, VsockCtx};
use super::control::http_answer;
use super::*;
use crate::transport::{write_message, FrameReader, SocketStream};
use policy::{IoprioBoost, PROTOCOL_VERSION};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;

#[test]
fn vm_args_and_config() {
    let v = parse_vm_arg("name=a,socket=/tmp/a.sock,pid=12").unwrap();
    assert_eq!(v.pid, Some(12));
    // QEMU's pid may come from its QMP socket instead; one of them is needed.
    let q = parse_vm_arg("name=a,socket=/tmp/a.sock,qmp=/tmp/q.sock").unwrap();
    assert_eq!(q.pid, None);
    assert!(config(vec![q.clone()], None).validate().is_ok());
    let none = VmConfig { qmp: None, ..q };
    let e = config(vec![none], None).validate().unwrap_err().0;
    assert!(e.contains("give pid=PID or qmp=PATH"), "{e}");
    assert!(parse_vm_arg("name=a,pid=1").is_err());
    assert!(parse_vm_arg("name=a,socket=/x,pid=x").is_err());
    assert!(parse_vm_arg("name=a,socket=/x,pid=1,colour=red").is_err());
    let c = HostdConfig::from_toml(
        "metrics = \"127.0.0.1:9120\"\n[[vm]]\nname = \"a\"\nsocket = \"/tmp/a\"\npid = 5\n",
    )
    .unwrap();
    assert_eq!(c.vms.len(), 1);
    c.validate().unwrap();
    assert!(HostdConfig::from_toml("bogus = 1").is_err());
    // The budget knobs reach the policy, and bad ones are refused.
    let mut b = c.clone();
    b.budget_fraction = 0.75;
    b.budget_window_s = 30.0;
    let p = b.policy().unwrap();
    assert_eq!(p.budget_window_ns, 30_000_000_000);
    assert_eq!(p.budget_ns(), 22_500_000_000);
    for (f, w) in [(0.0, 60.0), (1.5, 60.0), (0.5, 0.0), (0.5, f64::NAN)] {
        b.budget_fraction = f;
        b.budget_window_s = w;
        let e = b.validate().unwrap_err().0;
        assert!(e.contains("budget"), "{f} {w}: {e}");
    }
    assert!(HostdConfig::default().validate().is_err());
}

/// A key under its old name is read, with a warning; old and new
/// together are refused.
#[test]
fn deprecated_keys_are_read_with_a_warning() {
    let vm = "[[vm]]\nname = \"a\"\nsocket = \"/tmp/a\"\npid = 5\n";
    let (c, w) =
        HostdConfig::from_toml_warnings(&format!("max_lease_ms = 700\nbfq_strict = true\n{vm}"))
            .unwrap();
    assert_eq!((c.lease_ms, c.bfq_idling), (700, true));
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("max_lease_ms is deprecated") && w[0].contains("lease_ms"),
        "{w:?}"
    );
    let (c, w) = HostdConfig::from_toml_warnings(&format!("lease_ms = 800\n{vm}")).unwrap();
    assert_eq!((c.lease_ms, w.len()), (800, 0));
    let e = HostdConfig::from_toml("lease_ms = 1\nmax_lease_ms = 2\n")
        .unwrap_err()
        .0;
    assert!(e.contains("both given"), "{e}");
    assert!(HostdConfig::keys().contains(&"lease_ms".to_string()));
}

/// The example configuration shipped in dist/ is valid as it is.
#[test]
fn the_example_configuration_is_valid() {
    let c = HostdConfig::from_toml(include_str!("../../../../dist/hostd.toml")).unwrap();
    assert_eq!(c.vm_dir.as_deref(), Some(Path::new("/run/tandem/vms")));
    c.validate().unwrap();
}

fn vm(name: &str, socket: Option<&str>, cid: Option<u32>) -> VmConfig {
    VmConfig {
        name: name.into(),
        socket: socket.map(PathBuf::from),
        cid,
        pid: Some(1),
        connect: false,
        cgroup: None,
        qmp: None,
        weight: 1,
    }
}

fn config(vms: Vec<VmConfig>, vsock_port: Option<u32>) -> HostdConfig {
    HostdConfig {
        vms,
        vsock_port,
        ..HostdConfig::default()
    }
}

fn config_error(c: &HostdConfig) -> String {
    c.validate().expect_err("an invalid configuration").0
}

#[test]
fn vsock_vms_in_arguments_and_config() {
    let v = parse_vm_arg("name=a,cid=7,pid=12").unwrap();
    assert_eq!((v.cid, v.socket), (Some(7), None));
    assert!(parse_vm_arg("name=a,cid=x,pid=1")
        .unwrap_err()
        .0
        .contains("cid=\"x\""));
    assert!(parse_vm_arg("name=a,pid=1")
        .unwrap_err()
        .0
        .contains("socket=PATH or cid=N"));
    let c = HostdConfig::from_toml(
        "vsock_port = 5000\n[[vm]]\nname = \"a\"\ncid = 3\npid = 5\n[[vm]]\nname = \"b\"\nsocket = \"/tmp/b\"\npid = 6\n",
    )
    .unwrap();
    assert_eq!(c.vsock_port, Some(5000));
    assert_eq!(c.vms[0].cid, Some(3));
    c.validate().unwrap();
}

#[test]
fn vsock_configuration_errors_are_clear() {
    let ok = config(vec![vm("a", None, Some(5))], Some(5000));
    ok.validate().unwrap();
    let e = config_error(&config(vec![vm("a", None, Some(5))], None));
    assert!(
        e.contains("cid=5 needs hostd's vsock listener") && e.contains("--vsock-port"),
        "{e}"
    );
    let e = config_error(&config(
        vec![vm("a", None, Some(5)), vm("b", None, Some(5))],
        Some(5000),
    ));
    assert!(e.contains("VM b: cid=5 is VM a's too"), "{e}");
    let e = config_error(&config(vec![vm("a", Some("/tmp/a"), Some(5))], Some(5000)));
    assert!(e.contains("socket= and cid= both given"), "{e}");
    let e = config_error(&config(vec![vm("a", None, None)], None));
    assert!(e.contains("VM a: no channel"), "{e}");
    for cid in [0, 1, 2, u32::MAX] {
        let e = config_error(&config(vec![vm("a", None, Some(cid))], Some(5000)));
        assert!(
            e.contains(&format!("cid={cid} is not a guest's CID")),
            "{e}"
        );
    }
    let mut c = config(vec![vm("a", None, Some(5))], Some(5000));
    c.vms[0].connect = true;
    assert!(config_error(&c).contains("connect= is for socket="));
    for port in [0, u32::MAX] {
        let e = config_error(&config(vec![vm("a", None, Some(5))], Some(port)));
        assert!(e.contains(&format!("vsock_port {port}: 1 to")), "{e}");
    }
    let e = config_error(&config(vec![vm("a", Some("/tmp/a"), None)], Some(5000)));
    assert!(e.contains("no VM has cid=N"), "{e}");
    let e = config_error(&config(
        vec![vm("a", Some("/tmp/a"), None), vm("b", Some("/tmp/a"), None)],
        None,
    ));
    assert!(e.contains("socket /tmp/a is VM a's too"), "{e}");
}

#[test]
fn vsock_connections_are_routed_by_peer_cid() {
    let vms = vec![
        vm("unix", Some("/tmp/u"), None),
        vm("five", None, Some(5)),
        vm("seven", None, Some(7)),
    ];
    let r = VsockRoutes::new(&vms);
    assert_eq!(r.route(5), Some(1));
    assert_eq!(r.route(7), Some(2));
    for unknown in [0, 1, 2, 3, 6, 8, u32::MAX] {
        assert_eq!(r.route(unknown), None, "CID {unknown}");
    }
    assert_eq!(r.iter().collect::<Vec<_>>(), [(5, 1), (7, 2)]);
    assert_eq!(VsockRoutes::new(&vms[..1]), VsockRoutes::default());
}

/// A connected socket pair standing for an accepted vsock connection
/// (this machine cannot connect over vsock: no loopback transport) and
/// the guest's end.
fn pair() -> (SocketStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (SocketStream::from(std::os::fd::OwnedFd::from(a)), b)
}

fn hello(name: &str) -> Message {
    Message::Hello {
        version: PROTOCOL_VERSION,
        vm_name: name.into(),
    }
}

#[test]
fn an_accepted_vsock_connection_is_served_as_its_vms_channel() {
    let routes = VsockRoutes::new(&[vm("unix", Some("/tmp/u"), None), vm("seven", None, Some(7))]);
    let (tx, rx) = mpsc::channel();
    let (host, mut guest) = pair();
    let ctx = VsockCtx {
        routes,
        tx,
        limiters: test_limiters(2),
    };
    let t = {
        let ctx = ctx.clone();
        thread::spawn(move || ctx.dispatch(7, host))
    };
    let conn = match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
        Event::Opened { vm: 1, conn, .. } => conn,
        _ => panic!("expected VM 1's channel to open"),
    };
    write_message(&mut guest, &hello("seven")).unwrap();
    let mut r = FrameReader::new(guest.try_clone().unwrap());
    assert_eq!(
        r.read_message().unwrap(),
        Message::HelloAck {
            version: PROTOCOL_VERSION
        }
    );
    let help = Message::Help {
        resource: policy::Resource::Io,
        reason: policy::HelpReason::Exec,
        duration_hint_ms: 500,
    };
    write_message(&mut guest, &help).unwrap();
    match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
        Event::Msg {
            vm: 1,
            conn: c,
            msg,
        } => {
            assert_eq!((c, msg), (conn, help));
        }
        _ => panic!("expected the Help on VM 1's channel"),
    }
    // The guest goes away (both of its descriptors).
    drop((r, guest));
    loop {
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            Event::Closed { vm: 1, conn: c } if c == conn => break,
            Event::Counted { vm: 1, .. } => {}
            _ => panic!("expected VM 1's channel to close"),
        }
    }
    assert_eq!(t.join().unwrap(), Some(1));

    // A CID that is no VM's: closed at once, reported.
    let (host, mut guest) = pair();
    assert_eq!(ctx.dispatch(9, host), None);
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Event::VsockRefused { cid: 9 }
    ));
    let mut buf = [0u8; 8];
    assert_eq!(guest.read(&mut buf).unwrap(), 0, "closed");
}

#[test]
fn a_new_vsock_connection_replaces_the_old_and_unknown_cids_are_counted() {
    let dir = std::env::temp_dir().join(format!("tandem-hostd-vsock-{}", std::process::id()));
    let qemu = crate::testkit::FakeQemu::spawn(&dir, Path::new("/bin/sleep"), &["60"]).unwrap();
    let mut c = config(vec![vm("a", None, Some(5))], Some(5000));
    c.vms[0].pid = Some(qemu.pid());
    c.ioprio = IoprioBoost::None;
    c.state_file = dir.join("state");
    c.control = dir.join("control");
    let mut h = Hostd::new(c).unwrap();
    let (s1, mut g1) = pair();
    let (s2, g2) = pair();
    h.handle(
        Event::Opened {
            vm: 0,
            conn: 1,
            stream: Stream::Socket(s1),
        },
        now_ns(),
    );
    h.handle(
        Event::Opened {
            vm: 0,
            conn: 2,
            stream: Stream::Socket(s2),
        },
        now_ns(),
    );
    let mut buf = [0u8; 8];
    assert_eq!(
        g1.read(&mut buf).unwrap(),
        0,
        "the old channel is shut down"
    );
    // The old channel's reader ends: the new one stays.
    h.handle(Event::Closed { vm: 0, conn: 1 }, now_ns());
    assert_eq!(h.rt[0].conn.as_ref().map(|c| c.0), Some(2));
    h.handle(Event::VsockRefused { cid: 9 }, now_ns());
    h.handle(Event::VsockRefused { cid: 9 }, now_ns());
    let st = h.status_text(now_ns());
    assert!(
        st.contains("vsock port 5000 (any CID): listening; cid 5 = a; 2 connection(s) from other CIDs closed"),
        "{st}"
    );
    assert!(
        st.lines()
            .any(|l| l.starts_with("a ") && l.contains("connected")),
        "{st}"
    );
    assert_eq!(boosted_from_status(&st).get("a"), Some(&false), "{st}");
    assert_eq!(boosted_from_status(&st).len(), 1, "{st}");
    assert!(h
        .metrics_text(now_ns())
        .contains("\ntandem_hostd_vsock_refused_total 2\n"));
    drop(g2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A label value unescaped as a Prometheus parser does (`\\`, `\"`,
/// `\n`); panics on anything the format does not allow.
fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut it = v.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('n') => out.push('\n'),
                other => panic!("bad escape {other:?} in {v:?}"),
            },
            '"' | '\n' => panic!("unescaped {c:?} in {v:?}"),
            c => out.push(c),
        }
    }
    out
}

/// A VM named with a quote, a backslash and a line feed: every sample
/// line of the metrics parses back (name, one label, a number) to that
/// name. prometheus-client has no parser; `unescape` follows the text
/// format's rules.
#[test]
fn metrics_escape_label_values() {
    let dir = std::env::temp_dir().join(format!("tandem-hostd-escape-{}", std::process::id()));
    let qemu = crate::testkit::FakeQemu::spawn(&dir, Path::new("/bin/sleep"), &["60"]).unwrap();
    let name = "a\"b\\c\nd";
    let sock = dir.join("s.sock");
    let mut c = config(vec![vm(name, sock.to_str(), None)], None);
    c.vms[0].pid = Some(qemu.pid());
    c.ioprio = IoprioBoost::None;
    c.state_file = dir.join("state");
    c.control = dir.join("control");
    let h = Hostd::new(c).unwrap();
    let m = h.metrics_text(now_ns());
    let mut samples = Vec::new();
    for l in m.lines().filter(|l| !l.starts_with('#')) {
        let (lhs, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}\n{m}"));
        value.parse::<f64>().unwrap_or_else(|_| panic!("{l:?}"));
        let (metric, rest) = lhs.split_once("{vm=\"").unwrap_or_else(|| panic!("{l:?}"));
        let v = rest.strip_suffix("\"}").unwrap_or_else(|| panic!("{l:?}"));
        assert_eq!(unescape(v), name, "{l:?}");
        samples.push(metric.to_string());
    }
    assert_eq!(samples.len(), 13, "{m}");
    assert!(
        samples.contains(&"tandem_hostd_boosted_seconds_total".to_string()),
        "{m}"
    );
    assert!(m.ends_with("# EOF\n"), "{m}");
    drop(qemu);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The metrics endpoint answers `GET /metrics` only.
#[test]
fn metrics_answer_get_metrics_only() {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        while let Ok(ev) = rx.recv() {
            if let Event::Control { reply, .. } = ev {
                let _ = reply.send("m 1\n".to_string());
            }
        }
    });
    for (req, want) in [
        ("GET /metrics HTTP/1.0\r\n\r\n", "200 OK"),
        ("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", "200 OK"),
        ("POST /metrics HTTP/1.0\r\n\r\n", "405 Method Not Allowed"),
        ("GET / HTTP/1.0\r\n\r\n", "404 Not Found"),
        ("\r\n\r\n", "400 Bad Request"),
    ] {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(req.as_bytes()).unwrap();
        let t = {
            let tx = tx.clone();
            thread::spawn(move || http_answer(a, &tx))
        };
        let mut out = String::new();
        b.read_to_string(&mut out).unwrap();
        t.join().unwrap();
        assert!(
            out.starts_with(&format!("HTTP/1.0 {want}\r\n")),
            "{req:?}: {out}"
        );
        assert_eq!(out.ends_with("\r\n\r\nm 1\n"), want == "200 OK", "{out}");
    }
}

fn test_limiters(n: usize) -> Vec<SharedLimiter> {
    let c = HostdConfig::default();
    (0..n)
        .map(|_| {
            Arc::new(Mutex::new(ChannelLimiter::new(
                &c.channel_limits(),
                now_ns(),
            )))
        })
        .collect()
}
