//! VMs found in a directory (`vm_dir`) instead of declared one by one: a VM
//! started after hostd is served without a restart, and one that goes away
//! is dropped (its boosts undone).
//!
//! Two layouts are read, both at once:
//!
//! - **tandem's own** (e.g. `vm_dir = "/run/tandem/vms"`): per VM, a QMP
//!   socket `<vm_dir>/<name>.qmp` (QEMU: `-qmp unix:<vm_dir>/<name>.qmp,
//!   server=on,wait=off`) and the channel's socket `<vm_dir>/<name>.sock`,
//!   QEMU's chardev as the server (`-chardev socket,id=tandem0,
//!   path=<vm_dir>/<name>.sock,server=on,wait=off`); hostd connects to it.
//!   hostd asks the QMP socket for the vCPU threads.
//! - **libvirt's** (`vm_dir = "/var/lib/libvirt/qemu"`): the monitor socket
//!   `<vm_dir>/domain-<id>-<name>/monitor.sock`, and the channel where
//!   libvirt puts a `<channel type='unix'><source mode='bind'/><target
//!   type='virtio' name='org.tandem.0'/></channel>` without a path:
//!   `<vm_dir>/channel/target/domain-<id>-<name>/org.tandem.0`. libvirt holds
//!   the monitor's one QMP connection, so hostd only takes QEMU's pid from the
//!   socket (its peer credentials) and boosts all of the VM's threads.
//!
//! Either way QEMU's pid is the QMP socket's peer (`SO_PEERCRED`, see
//! [`crate::qmp::peer_pid`]), checked to be a QEMU process; a socket left by
//! a QEMU that was killed has no listener and is skipped. inotify wakes hostd
//! when the directory (or a libvirt domain directory in it) changes; hostd
//! also reads it again at each rescan, so an event lost to a full inotify
//! queue delays a VM by one rescan at most.

use std::path::{Path, PathBuf};
use std::thread;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::{err, Result};

/// The channel's name in libvirt's layout (the virtio-serial port's name,
/// which `tandem guestd --connect virtio:org.tandem.0` opens in the guest).
pub const LIBVIRT_CHANNEL: &str = "org.tandem.0";

/// The most VMs taken from one directory: bounds hostd's memory and threads
/// against a directory filled by mistake. Design choice: far above the VMs
/// one host runs.
pub const MAX_DIR_VMS: usize = 1024;

/// A VM's sockets, as the directory lays them out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundVm {
    pub name: String,
    /// The QMP socket: whose peer is QEMU, and the VM's key.
    pub qmp: PathBuf,
    /// The channel's socket (QEMU's chardev server; hostd connects).
    pub channel: PathBuf,
    /// libvirt holds the QMP connection: ask it nothing but the peer.
    pub libvirt: bool,
}

/// The VMs in `dir` (both layouts), sorted by QMP socket, at most
/// [`MAX_DIR_VMS`]. A directory that cannot be read gives none.
pub fn scan(dir: &Path) -> Vec<FoundVm> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(file) = file.to_str() else { continue };
        if let Some(name) = file.strip_suffix(".qmp") {
            if !name.is_empty() {
                out.push(FoundVm {
                    name: name.to_string(),
                    qmp: e.path(),
                    channel: dir.join(format!("{name}.sock")),
                    libvirt: false,
                });
            }
        } else if let Some(name) = libvirt_name(file) {
            let qmp = e.path().join("monitor.sock");
            if qmp.exists() {
                out.push(FoundVm {
                    name: name.to_string(),
                    qmp,
                    channel: dir.join("channel/target").join(file).join(LIBVIRT_CHANNEL),
                    libvirt: true,
                });
            }
        }
        if out.len() >= MAX_DIR_VMS {
            break;
        }
    }
    out.sort();
    out
}

/// The domain's name in a libvirt domain directory's name,
/// `domain-<id>-<name>` (libvirt's `virDomainDefGetShortName`).
pub fn libvirt_name(dir_name: &str) -> Option<&str> {
    let rest = dir_name.strip_prefix("domain-")?;
    let (id, name) = rest.split_once('-')?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && !name.is_empty()).then_some(name)
}

/// Watches `dir` (and its libvirt domain directories) with inotify and
/// calls `wake` after each batch of changes, from a thread of its own.
pub fn watch(dir: &Path, wake: impl Fn() + Send + 'static) -> Result<()> {
    let what = |e| err(format!("vm_dir {}: {e}", dir.display()));
    if !dir.is_dir() {
        return Err(err(format!(
            "vm_dir {}: not a directory (create it, e.g. systemd's RuntimeDirectory=tandem tandem/vms)",
            dir.display()
        )));
    }
    let ino = Inotify::init(InitFlags::IN_CLOEXEC).map_err(what)?;
    let flags = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM;
    ino.add_watch(dir, flags).map_err(what)?;
    let dir = dir.to_path_buf();
    let watch_domains = move |ino: &Inotify| {
        // A domain directory appears before its monitor socket: watch it
        // too (adding a watch twice keeps one).
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_name().to_str().and_then(libvirt_name).is_some() {
                let _ = ino.add_watch(&e.path(), flags);
            }
        }
    };
    watch_domains(&ino);
    thread::Builder::new()
        .name("vm-dir".into())
        .spawn(move || loop {
            match ino.read_events() {
                Ok(_) => {
                    watch_domains(&ino);
                    wake();
                }
                // Interrupted by a signal; anything else: the rescan still
                // reads the directory, so wait instead of spinning.
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => thread::sleep(std::time::Duration::from_secs(1)),
            }
        })
        .map_err(|e| err(format!("vm_dir: starting its thread: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirt_names() {
        assert_eq!(libvirt_name("domain-3-web"), Some("web"));
        assert_eq!(libvirt_name("domain-12-a-b"), Some("a-b"));
        for bad in [
            "domain-x-web",
            "domain--web",
            "domain-3-",
            "domain-3",
            "web",
        ] {
            assert_eq!(libvirt_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn both_layouts_are_read() {
        let dir = std::env::temp_dir().join(format!("tandem-vmdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("domain-7-web")).unwrap();
        std::fs::create_dir_all(dir.join("domain-8-empty")).unwrap();
        std::fs::write(dir.join("domain-7-web/monitor.sock"), "").unwrap();
        std::fs::write(dir.join("a.qmp"), "").unwrap();
        std::fs::write(dir.join("a.sock"), "").unwrap();
        std::fs::write(dir.join("b.sock"), "").unwrap();
        let found = scan(&dir);
        assert_eq!(
            found,
            vec![
                FoundVm {
                    name: "a".into(),
                    qmp: dir.join("a.qmp"),
                    channel: dir.join("a.sock"),
                    libvirt: false,
                },
                FoundVm {
                    name: "web".into(),
                    qmp: dir.join("domain-7-web/monitor.sock"),
                    channel: dir.join("channel/target/domain-7-web/org.tandem.0"),
                    libvirt: true,
                },
            ]
        );
        assert!(scan(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_watch_wakes_on_a_new_socket_file() {
        let dir = std::env::temp_dir().join(format!("tandem-vmdir-w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        watch(&dir, move || {
            let _ = tx.send(());
        })
        .unwrap();
        std::fs::write(dir.join("a.qmp"), "").unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("a wake-up");
        assert!(watch(&dir.join("missing"), || {}).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
