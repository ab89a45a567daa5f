//! The control socket (`tandem hostd status`) and the HTTP metrics
//! endpoint: their listeners and answers, and the client side of the
//! control socket.

use super::{Event, MetricsEndpoint};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use crate::listen::{self, CLIENT_LIMITS};
use crate::{err, Result};

pub(super) fn ask(tx: &Sender<Event>, req: &str) -> String {
    let (rtx, rrx) = mpsc::channel();
    if tx
        .send(Event::Control {
            req: req.to_string(),
            reply: rtx,
        })
        .is_err()
    {
        return "hostd is stopping\n".into();
    }
    rrx.recv_timeout(Duration::from_secs(2))
        .unwrap_or_else(|_| "hostd did not answer\n".into())
}

/// How long a control or metrics client may take to send its whole request,
/// and then to read the whole answer (a client that stalls or trickles loses
/// its connection, and its slot).
pub(super) const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Answers one control connection: one request line, one answer.
pub(super) fn control_answer(s: UnixStream, tx: &Sender<Event>) {
    let mut s = listen::Deadline::new(s, CLIENT_TIMEOUT);
    let mut line = String::new();
    let _ = BufReader::new(&mut s).take(256).read_line(&mut line);
    let answer = ask(tx, line.trim());
    s.restart(CLIENT_TIMEOUT);
    let _ = s.write_all(answer.as_bytes());
}

pub(super) fn start_control(path: &Path, tx: Sender<Event>) -> Result<()> {
    let l = listen::bind_unix(path, "control socket")?;
    listen::serve(
        "tandem hostd: control socket".into(),
        "control",
        l,
        CLIENT_LIMITS,
        move |s: UnixStream| control_answer(s, &tx),
    )
}

/// The request line of an HTTP request head, if complete.
pub(super) fn request_line(head: &[u8]) -> Option<(String, String)> {
    let end = head.iter().position(|&b| b == b'\n')?;
    let line = String::from_utf8_lossy(&head[..end]);
    let mut f = line.split_whitespace();
    Some((f.next()?.to_string(), f.next()?.to_string()))
}

/// Answers one HTTP request: `GET /metrics` gets the metrics, another path
/// 404, another method 405. The request head may take at most
/// [`CLIENT_TIMEOUT`] and 8 KiB, the answer [`CLIENT_TIMEOUT`].
pub(super) fn http_answer<S: Read + Write + listen::Timed>(s: S, tx: &Sender<Event>) {
    let mut s = listen::Deadline::new(s, CLIENT_TIMEOUT);
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    while got.len() < 8192 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") || got.windows(2).any(|w| w == b"\n\n")
                {
                    break;
                }
            }
        }
    }
    let (status, body) = match request_line(&got) {
        Some((m, p)) if m == "GET" && (p == "/metrics" || p.starts_with("/metrics?")) => {
            ("200 OK", ask(tx, "metrics"))
        }
        Some((m, _)) if m != "GET" => ("405 Method Not Allowed", "GET only\n".to_string()),
        Some(_) => ("404 Not Found", "the metrics are at /metrics\n".to_string()),
        None => ("400 Bad Request", "no request line\n".to_string()),
    };
    s.restart(CLIENT_TIMEOUT);
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let _ = write!(
        s,
        "HTTP/1.0 {status}\r\n{allow}Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        body
    );
}

/// Serves the metrics where `ep` says; returns the socket file it created.
pub(super) fn start_metrics(ep: &MetricsEndpoint, tx: Sender<Event>) -> Result<Option<PathBuf>> {
    match ep {
        MetricsEndpoint::Off => Ok(None),
        MetricsEndpoint::Unix(path) => {
            let l = listen::bind_unix(path, "metrics socket")?;
            listen::serve(
                "tandem hostd: metrics socket".into(),
                "metrics",
                l,
                CLIENT_LIMITS,
                move |s: UnixStream| http_answer(s, &tx),
            )?;
            Ok(Some(path.clone()))
        }
        MetricsEndpoint::Tcp(addr) => {
            let l = TcpListener::bind(addr).map_err(|e| err(format!("metrics {addr}: {e}")))?;
            listen::serve(
                format!("tandem hostd: metrics {addr}"),
                "metrics",
                l,
                CLIENT_LIMITS,
                move |s: std::net::TcpStream| http_answer(s, &tx),
            )?;
            Ok(None)
        }
    }
}

/// `tandem hostd status`: asks a running hostd over its control socket.
pub fn query(control: &Path, req: &str) -> Result<String> {
    let mut s = UnixStream::connect(control).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied && !crate::is_root() {
            return err(format!(
                "{}: permission denied: hostd's control socket is root's; run this as root (e.g. sudo tandem hostd status)",
                control.display()
            ));
        }
        err(format!(
            "{}: {e} (is tandem hostd running? --control gives another socket)",
            control.display()
        ))
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| err(e.to_string()))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| err(e.to_string()))?;
    Ok(out)
}

/// Per-VM boosted flag from a status text (for tests and scripts).
pub fn boosted_from_status(status: &str) -> BTreeMap<String, bool> {
    status
        .lines()
        .skip_while(|l| !l.starts_with("VM "))
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.to_string(), *f.get(4)? == "yes"))
        })
        .collect()
}
