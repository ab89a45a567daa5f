//! Running the backend: checks the socket path and the image, serves QEMU
//! connections one after another until told to stop, writes the counters
//! to a stats file, and removes its socket when it leaves.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

use crate::backend::BlkBackend;
use crate::classmap::ClassPolicy;
use crate::config::DeviceConfig;
use crate::image::{Image, ImageError};
use crate::stats::Stats;
use crate::vmpolicy::{VmGroup, VmPolicy};

/// How often the stats file is rewritten.
const STATS_PERIOD: Duration = Duration::from_millis(200);

/// What `tandem vhost-blk` was asked.
#[derive(Clone, Debug)]
pub struct Options {
    pub socket: PathBuf,
    pub image: PathBuf,
    pub read_only: bool,
    pub queues: u16,
    pub allow_rt: bool,
    /// The logical block size offered to the guest.
    pub blk_size: u32,
    /// Where to keep the counters (JSON), if anywhere.
    pub stats: Option<PathBuf>,
    /// The longest a queue thread polls before it sleeps (`crate::poll`).
    pub poll_max_ns: u64,
    /// The VM's share and RT budget ([`VmPolicy`]).
    pub vm: VmPolicy,
}

/// Errors, split as the CLI reports them.
#[derive(Debug)]
pub enum Error {
    /// Bad input (exit code 2).
    Usage(String),
    /// Something failed while running (exit code 1).
    Run(String),
}

impl Options {
    pub fn validate(&self) -> Result<(), Error> {
        if self.queues == 0 || self.queues > 64 {
            return Err(Error::Usage(format!(
                "--queues {}: between 1 and 64 (one thread per queue)",
                self.queues
            )));
        }
        if ![512, 1024, 2048, 4096].contains(&self.blk_size) {
            return Err(Error::Usage(format!(
                "--blk-size {}: one of 512, 1024, 2048, 4096",
                self.blk_size
            )));
        }
        self.vm.validate().map_err(Error::Usage)?;
        if self.allow_rt && !is_root() {
            return Err(Error::Usage(
                "--allow-rt needs root: issuing I/O in the RT class takes CAP_SYS_ADMIN (ioprio_set(2))"
                    .into(),
            ));
        }
        check_socket_path(&self.socket)
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The socket path must be free, or a stale socket nobody listens on
/// (which is removed). Anything else there is refused, never deleted.
pub fn check_socket_path(path: &Path) -> Result<(), Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::Usage(format!("--socket {}: {e}", path.display()))),
        Ok(m) => m,
    };
    if !meta.file_type().is_socket() {
        return Err(Error::Usage(format!(
            "--socket {}: exists and is not a socket; not touching it",
            path.display()
        )));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(Error::Usage(format!(
            "--socket {}: another process is listening on it",
            path.display()
        )));
    }
    std::fs::remove_file(path)
        .map_err(|e| Error::Run(format!("removing the stale socket {}: {e}", path.display())))
}

/// Serves until `stop` is set: a QEMU that disconnects may connect again
/// (a guest reboot or a QEMU restart). Removes the socket on the way out.
pub fn run(opts: &Options, stop: Arc<AtomicBool>) -> Result<Arc<Stats>, Error> {
    opts.validate()?;
    let image = Image::open(&opts.image, opts.read_only, u64::from(opts.blk_size)).map_err(
        |e| match e {
            ImageError::Missing(m) => Error::Usage(m),
            ImageError::Other(m) => Error::Run(m),
        },
    )?;
    if image.direct.is_none() {
        eprintln!(
            "tandem vhost-blk: {} does not take O_DIRECT: requests go through the page cache, \
             and their priority reaches the host scheduler only for reads",
            opts.image.display()
        );
    }
    let cfg = DeviceConfig {
        capacity: image.capacity,
        blk_size: opts.blk_size,
        num_queues: opts.queues,
        read_only: opts.read_only,
    };
    let stats = Arc::new(Stats::default());
    let budget = opts.vm.policy_config().map_err(Error::Usage)?;
    let policy = ClassPolicy::new(opts.allow_rt, &budget).with_classless(opts.vm.classless());
    // Joined before any thread starts, so that every submitter (and its
    // io_uring workers) begins in the VM's group.
    let group = match &opts.vm.cgroup {
        Some(d) => Some(VmGroup::join(d, opts.vm.weight).map_err(Error::Run)?),
        None => None,
    };
    let mut backend = BlkBackend::new(Arc::new(image), cfg, policy, stats.clone())
        .with_poll_max(Duration::from_nanos(opts.poll_max_ns));
    if let Some(g) = &group {
        backend = backend.with_thread_start(Arc::new(g.placement()));
    }
    let backend = Arc::new(backend);
    let mut listener = Listener::new(&opts.socket, false)
        .map_err(|e| Error::Run(format!("listening on {}: {e}", opts.socket.display())))?;
    let _socket = RemoveOnDrop(opts.socket.clone());
    let stats_thread = spawn_stats_writer(opts.stats.clone(), stats.clone(), stop.clone());
    let result = serve(&backend, &mut listener, &stop);
    backend.shutdown();
    stop.store(true, Ordering::Release);
    if let Some(t) = stats_thread {
        let _ = t.join();
    }
    if let Some(p) = &opts.stats {
        let _ = stats.write_to(p);
    }
    result.map(|()| stats)
}

fn serve(
    backend: &Arc<BlkBackend>,
    listener: &mut Listener,
    stop: &Arc<AtomicBool>,
) -> Result<(), Error> {
    while !stop.load(Ordering::Acquire) {
        // Wait for a connection in slices, so a stop request is seen while
        // idle; the daemon's own accept would block (or spin, when the
        // socket is non-blocking).
        if !readable(listener.as_raw_fd(), 100)? {
            continue;
        }
        let mut daemon = VhostUserDaemon::new(
            "vhost-blk".into(),
            backend.clone(),
            GuestMemoryAtomic::new(GuestMemoryMmap::new()),
        )
        .map_err(|e| Error::Run(format!("vhost-user daemon: {e:?}")))?;
        watch_completions(backend, &daemon)?;
        daemon
            .start(listener)
            .map_err(|e| Error::Run(format!("vhost-user connection: {e:?}")))?;
        serve_one(&mut daemon, stop);
    }
    Ok(())
}

/// Puts each queue's own ring in the epoll set of the thread that serves
/// the queue (thread `i` serves queue `i`, `BlkBackend::queues_per_thread`),
/// so that thread reaps its completions itself.
fn watch_completions(
    backend: &Arc<BlkBackend>,
    daemon: &VhostUserDaemon<Arc<BlkBackend>>,
) -> Result<(), Error> {
    for (q, handler) in daemon.get_epoll_handlers().iter().enumerate() {
        let Some((fd, event)) = backend.completion_source(q) else {
            continue;
        };
        handler
            .register_listener(fd, EventSet::IN, u64::from(event))
            .map_err(|e| Error::Run(format!("watching queue {q}'s ring: {e}")))?;
    }
    Ok(())
}

/// poll(2) on one descriptor for `ms` milliseconds.
fn readable(fd: RawFd, ms: i32) -> Result<bool, Error> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(Error::Run(format!("poll on the socket: {e}")));
    }
    Ok(n > 0)
}

/// Serves one connection until QEMU leaves or `stop` is set.
fn serve_one(daemon: &mut VhostUserDaemon<Arc<BlkBackend>>, stop: &Arc<AtomicBool>) {
    let done = Arc::new(AtomicBool::new(false));
    let handle = daemon.shutdown_handle();
    let watcher = {
        let (stop, done) = (stop.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                if stop.load(Ordering::Acquire) {
                    if let Some(h) = &handle {
                        h.shutdown();
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let r = daemon.wait();
    // The queue threads of this connection leave with it.
    for h in daemon.get_epoll_handlers() {
        h.send_exit_event();
    }
    done.store(true, Ordering::Release);
    let _ = watcher.join();
    // QEMU leaving (a guest powering off) ends the connection this way.
    use vhost::vhost_user::Error as VuError;
    use vhost_user_backend::Error as DaemonError;
    match r {
        Ok(()) => {}
        Err(DaemonError::HandleRequest(VuError::Disconnected | VuError::PartialMessage)) => {}
        Err(_) if stop.load(Ordering::Acquire) => {}
        Err(e) => eprintln!("tandem vhost-blk: connection ended: {e:?}"),
    }
}

fn spawn_stats_writer(
    path: Option<PathBuf>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let path = path?;
    Some(std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            if let Err(e) = stats.write_to(&path) {
                eprintln!("tandem vhost-blk: stats file {}: {e}", path.display());
                return;
            }
            std::thread::sleep(STATS_PERIOD);
        }
    }))
}

/// Removes the socket file when the server leaves, however it leaves.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
