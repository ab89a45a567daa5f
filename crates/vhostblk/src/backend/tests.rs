//! The device with a split virtqueue laid out by hand in guest memory (no
//! QEMU): bad requests from the guest get an error status in their status
//! byte, are counted by reason, and never touch the image; good ones do.

use super::*;
use policy::PolicyConfig;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use vm_memory::{Address, Bytes, GuestMemoryAtomic};

/// Queue size: room for every descriptor of the test's requests (3 each).
const QUEUE: u16 = 64;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
/// Headers, data and status bytes from here on, 0x1000 apart per request.
const BUFS: u64 = 0x10000;
/// `VIRTQ_DESC_F_NEXT`, `VIRTQ_DESC_F_WRITE` (virtio 1.2, 2.7.5).
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const IMAGE_BYTES: u64 = 64 * 1024;

/// One request as the guest lays it out.
struct Req {
    kind: u32,
    ioprio: u32,
    sector: u64,
    /// Data: (bytes, device-writable); `None` for none.
    data: Option<(u32, bool)>,
    /// The data's guest address, when not the request's own buffer.
    data_addr: Option<u64>,
    /// Without the status descriptor.
    no_status: bool,
}

impl Req {
    fn rw(kind: u32, sector: u64, len: u32, writable: bool) -> Req {
        Req {
            kind,
            ioprio: 0,
            sector,
            data: Some((len, writable)),
            data_addr: None,
            no_status: false,
        }
    }
}

struct Guest {
    mem: GuestMemoryMmap<()>,
    next_desc: u16,
    queued: u16,
}

impl Guest {
    fn write_desc(&mut self, addr: u64, len: u32, flags: u16) -> u16 {
        let i = self.next_desc;
        let at = GuestAddress(DESC + 16 * u64::from(i));
        self.mem.write_obj(addr, at).unwrap();
        self.mem.write_obj(len, at.unchecked_add(8)).unwrap();
        let more = if flags & F_NEXT != 0 { i + 1 } else { 0 };
        self.mem.write_obj(flags, at.unchecked_add(12)).unwrap();
        self.mem.write_obj(more, at.unchecked_add(14)).unwrap();
        self.next_desc += 1;
        i
    }

    /// Lays `r` out as request number `n` and makes it available; returns
    /// the status byte's address and the chain's head.
    fn push(&mut self, n: u64, r: &Req) -> (u64, u16) {
        let base = BUFS + 0x1000 * n;
        let mut hdr = r.kind.to_le_bytes().to_vec();
        hdr.extend(r.ioprio.to_le_bytes());
        hdr.extend(r.sector.to_le_bytes());
        self.mem.write_slice(&hdr, GuestAddress(base)).unwrap();
        let status = base + 0xfff;
        self.mem.write_obj(0xffu8, GuestAddress(status)).unwrap();
        let last = r.data.is_none() && r.no_status;
        let head = self.write_desc(base, 16, if last { 0 } else { F_NEXT });
        if let Some((len, w)) = r.data {
            let addr = r.data_addr.unwrap_or(base + 0x100);
            let f = if w { F_WRITE } else { 0 } | if r.no_status { 0 } else { F_NEXT };
            self.write_desc(addr, len, f);
        }
        if !r.no_status {
            self.write_desc(status, 1, F_WRITE);
        }
        self.make_available(head);
        (status, head)
    }

    /// Puts the chain at `head` on the available ring.
    fn make_available(&mut self, head: u16) {
        let slot = AVAIL + 4 + 2 * u64::from(self.queued % QUEUE);
        self.mem.write_obj(head, GuestAddress(slot)).unwrap();
        // Wrapping, as the ring's index does (the share test runs long).
        self.queued = self.queued.wrapping_add(1);
        self.mem
            .write_obj(self.queued, GuestAddress(AVAIL + 2))
            .unwrap();
    }

    /// The length the device put on the used ring for chain `head`.
    fn used_len(&self, head: u16) -> Option<u32> {
        (0..u64::from(self.used_idx())).find_map(|i| {
            let at = GuestAddress(USED + 4 + 8 * i);
            let id: u32 = self.mem.read_obj(at).unwrap();
            (id == u32::from(head)).then(|| self.mem.read_obj(at.unchecked_add(4)).unwrap())
        })
    }

    fn used_idx(&self) -> u16 {
        self.mem.read_obj(GuestAddress(USED + 2)).unwrap()
    }
}

struct Device {
    backend: BlkBackend,
    vring: Vring,
    image: PathBuf,
    _dir: TempDir,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn device(guest: &Guest, allow_rt: bool) -> Device {
    // One directory per device: the tests run in parallel.
    static DEVICES: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vhostblk-backend-{}-{}",
        std::process::id(),
        DEVICES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(IMAGE_BYTES)
        .unwrap();
    let img = Arc::new(Image::open(&image, false, 512).unwrap());
    let cfg = DeviceConfig {
        capacity: IMAGE_BYTES / SECTOR,
        blk_size: 512,
        num_queues: 1,
        read_only: false,
    };
    let policy = ClassPolicy::new(allow_rt, &PolicyConfig::default());
    let backend = BlkBackend::new(img, cfg, policy, Arc::new(Stats::default()));
    let atomic = GuestMemoryAtomic::new(guest.mem.clone());
    backend.update_memory(atomic.clone()).unwrap();
    let vring = Vring::new(atomic, QUEUE).unwrap();
    vring.set_queue_size(QUEUE);
    vring.set_queue_info(DESC, AVAIL, USED).unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    Device {
        backend,
        vring,
        image,
        _dir: TempDir(dir),
    }
}

fn guest() -> Guest {
    Guest {
        mem: GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap(),
        next_desc: 0,
        queued: 0,
    }
}

/// Runs the requests through the device; returns each one's status byte
/// (0xff when untouched) and chain head.
fn serve(guest: &mut Guest, dev: &Device, reqs: &[Req]) -> Vec<(u8, u16)> {
    let status: Vec<(u64, u16)> = reqs
        .iter()
        .enumerate()
        .map(|(n, r)| guest.push(n as u64, r))
        .collect();
    dev.backend
        .handle_event(0, EventSet::IN, std::slice::from_ref(&dev.vring), 0)
        .unwrap();
    let t0 = Instant::now();
    while guest.used_idx() < guest.queued {
        reap(dev);
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "requests not answered: used {} of {}, stats {}",
            guest.used_idx(),
            guest.queued,
            dev.backend.stats().snapshot()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    status
        .iter()
        .map(|&(a, head)| (guest.mem.read_obj(GuestAddress(a)).unwrap(), head))
        .collect()
}

/// What the queue thread's epoll loop does when its ring has completions.
fn reap(dev: &Device) {
    let (_, event) = dev.backend.completion_source(0).unwrap();
    dev.backend
        .handle_event(event, EventSet::IN, std::slice::from_ref(&dev.vring), 0)
        .unwrap();
}

const IOERR: u8 = VIRTIO_BLK_S_IOERR as u8;
const OK: u8 = VIRTIO_BLK_S_OK as u8;

#[test]
fn bad_requests_get_an_error_status_are_counted_and_leave_the_image_alone() {
    use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
    let mut g = guest();
    let dev = device(&g, false);
    // Every data buffer holds 0xab: a write that lands shows.
    for n in 0..8u64 {
        g.mem
            .write_slice(&[0xab; 0x800], GuestAddress(BUFS + 0x1000 * n + 0x100))
            .unwrap();
    }
    let last = IMAGE_BYTES / SECTOR - 1;
    let reqs = [
        // 0: a good write of the last sector.
        Req::rw(VIRTIO_BLK_T_OUT, last, 512, false),
        // 1: one sector beyond the image.
        Req::rw(VIRTIO_BLK_T_OUT, last + 1, 512, false),
        // 2: two sectors from the last one: half outside.
        Req::rw(VIRTIO_BLK_T_OUT, last, 1024, false),
        // 3: a read whose buffer the device may not write (malformed).
        Req::rw(VIRTIO_BLK_T_IN, 0, 512, false),
        // 4: not a whole sector.
        Req::rw(VIRTIO_BLK_T_OUT, 0, 100, false),
        // 5: a request type the device does not offer (SCSI).
        Req::rw(2, 0, 512, false),
        // 6: an I/O priority class no kernel defines (7).
        Req {
            ioprio: 7 << 13,
            ..Req::rw(VIRTIO_BLK_T_OUT, 0, 512, false)
        },
        // 7: data outside guest memory.
        Req {
            data_addr: Some(0x4000_0000),
            ..Req::rw(VIRTIO_BLK_T_OUT, 0, 512, false)
        },
        // 8: RT, which this VM may not use: served, as BE/0.
        Req {
            ioprio: 1 << 13,
            ..Req::rw(VIRTIO_BLK_T_IN, 0, 512, true)
        },
        // 9: no status byte: nothing to answer with, returned unused.
        Req {
            no_status: true,
            ..Req::rw(VIRTIO_BLK_T_OUT, 0, 512, false)
        },
    ];
    let answers = serve(&mut g, &dev, &reqs);
    let st: Vec<u8> = answers.iter().map(|a| a.0).collect();
    let unsupp = VIRTIO_BLK_S_UNSUPP as u8;
    assert_eq!(
        st,
        [OK, IOERR, IOERR, IOERR, IOERR, unsupp, IOERR, IOERR, OK, 0xff]
    );
    let s = dev.backend.stats();
    assert_eq!(s.refusals(Refusal::OutOfRange), 2);
    // Wrong direction, not a whole sector, and data outside memory.
    assert_eq!(s.refusals(Refusal::Malformed), 3);
    assert_eq!(s.refusals(Refusal::Unsupported), 1);
    assert_eq!(s.refusals(Refusal::BadIoprio), 1);
    let snap = s.snapshot();
    assert_eq!(snap["bad_memory"], 1, "{snap}");
    assert_eq!(snap["unanswerable"], 1, "{snap}");
    assert_eq!(snap["rt_demoted"]["not_allowed"], 1, "{snap}");
    assert_eq!(s.host(Class::Rt), 0);
    // The used ring says how many bytes each request wrote to the guest:
    // 0 for the unanswerable one.
    assert_eq!(g.used_len(answers[9].1), Some(0));
    assert_eq!(g.used_len(answers[1].1), Some(1), "status byte only");
    assert_eq!(g.used_len(answers[8].1), Some(513), "data and status");
    // Only the good write reached the image: its last sector, and the
    // file did not grow.
    dev.backend.shutdown();
    let bytes = std::fs::read(&dev.image).unwrap();
    assert_eq!(bytes.len() as u64, IMAGE_BYTES);
    let (before, last_sector) = bytes.split_at((IMAGE_BYTES - SECTOR) as usize);
    assert!(before.iter().all(|&b| b == 0), "a refused write landed");
    assert!(last_sector.iter().all(|&b| b == 0xab));
    let mut one = [0u8; 1];
    let f = std::fs::File::open(&dev.image).unwrap();
    assert_eq!(f.read_at(&mut one, IMAGE_BYTES).unwrap(), 0);
}

/// The fast path: requests of the VM's default priority, as a guest sends
/// them (none from an old guest, the effective BE/4 at nice 0 from a 6.x
/// guest), are issued by the queue thread itself; another class goes to
/// its submitter thread. Either way the data is right.
#[test]
fn default_priority_requests_are_issued_by_the_queue_thread_itself() {
    use virtio_bindings::virtio_blk::VIRTIO_BLK_T_OUT;
    let mut g = guest();
    let dev = device(&g, false);
    let own = crate::submit::effective_none();
    // A BE level the test thread (the queue thread here) does not have.
    let other = Ioprio::new(Class::Be, if own.level == 7 { 6 } else { 7 });
    let data = |n: u64| 0x10000 + 0x1000 * n + 0x100;
    for n in 0..3 {
        g.mem
            .write_slice(&[0x40 + n as u8; 512], GuestAddress(data(n)))
            .unwrap();
    }
    let reqs = [
        Req::rw(VIRTIO_BLK_T_OUT, 0, 512, false),
        Req {
            ioprio: u32::from(own.encode()),
            ..Req::rw(VIRTIO_BLK_T_OUT, 1, 512, false)
        },
        Req {
            ioprio: u32::from(other.encode()),
            ..Req::rw(VIRTIO_BLK_T_OUT, 2, 512, false)
        },
    ];
    let answers = serve(&mut g, &dev, &reqs);
    assert!(answers.iter().all(|a| a.0 == OK), "{answers:?}");
    let snap = dev.backend.stats().snapshot();
    assert_eq!(snap["by_queue_thread"], 2, "{snap}");
    assert_eq!(snap["completed"], 3, "{snap}");
    dev.backend.shutdown();
    let bytes = std::fs::read(&dev.image).unwrap();
    for n in 0..3usize {
        assert!(bytes[512 * n..512 * (n + 1)]
            .iter()
            .all(|&b| b == 0x40 + n as u8));
    }
}

mod share;
