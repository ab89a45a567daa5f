//! Block-layer requests and the identity of whoever issued them.
//!
//! A request is what an elevator sees: a contiguous run of sectors in one
//! direction, sync or async, tagged with the io context of the process that
//! issued its first bio (the kernel's `rq->elv.icq`), that process's ioprio
//! and its cgroup. Merged bios keep their own owners so that every waiting
//! process is woken when the request completes.

use devmodel::{Direction, Nanos};

/// Index of a request in the [`RequestTable`].
pub type RqId = usize;

/// Process id inside the simulation.
pub type Pid = u32;

/// cgroup id; 0 is the root group.
pub type CgroupId = u32;

/// ioprio classes, ordered as in `include/uapi/linux/ioprio.h`
/// (`IOPRIO_CLASS_RT` = 1, `IOPRIO_CLASS_BE` = 2, `IOPRIO_CLASS_IDLE` = 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoPrioClass {
    Rt = 1,
    Be = 2,
    Idle = 3,
}

/// An ioprio: class plus level 0 (highest) to 7 (lowest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoPrio {
    pub class: IoPrioClass,
    pub level: u8,
}

impl IoPrio {
    /// Number of levels per class (`IOPRIO_NR_LEVELS`).
    pub const NR_LEVELS: u8 = 8;
    /// The kernel's default for a process that never called ioprio_set:
    /// best effort, level derived from nice 0, i.e. 4 (`IOPRIO_NORM`).
    pub const DEFAULT: IoPrio = IoPrio {
        class: IoPrioClass::Be,
        level: 4,
    };

    pub fn new(class: IoPrioClass, level: u8) -> IoPrio {
        IoPrio {
            class,
            level: level.min(Self::NR_LEVELS - 1),
        }
    }
}

impl Default for IoPrio {
    fn default() -> Self {
        IoPrio::DEFAULT
    }
}

/// Who issued a request: the io context of the kernel (one per process
/// unless shared), its ioprio and its cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoContext {
    pub pid: Pid,
    pub prio: IoPrio,
    pub cgroup: CgroupId,
}

/// A bio's owner, woken when the request that carries the bio completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BioOwner {
    pub pid: Pid,
    /// Opaque value the owner uses to recognise the completion.
    pub token: u64,
}

/// A request as the elevator sees it.
#[derive(Clone, Debug)]
pub struct Request {
    pub sector: u64,
    pub sectors: u32,
    pub dir: Direction,
    /// Reads and O_DIRECT/fsync writes are sync; write-back is async
    /// (`op_is_sync()` in `include/linux/blk_types.h`).
    pub sync: bool,
    pub ioc: IoContext,
    /// When the request entered the elevator.
    pub inserted_at: Nanos,
    /// When it was handed to the device (0 until dispatched).
    pub dispatched_at: Nanos,
    /// Every bio merged into this request, in merge order.
    pub owners: Vec<BioOwner>,
}

impl Request {
    pub fn end_sector(&self) -> u64 {
        self.sector + self.sectors as u64
    }
    pub fn is_read(&self) -> bool {
        self.dir == Direction::Read
    }
}

/// Slab of live requests, indexed by [`RqId`]. Slots are reused, so a
/// scheduler must forget an id once the request completes.
#[derive(Default)]
pub struct RequestTable {
    slots: Vec<Option<Request>>,
    free: Vec<RqId>,
}

impl RequestTable {
    pub fn insert(&mut self, rq: Request) -> RqId {
        if let Some(id) = self.free.pop() {
            self.slots[id] = Some(rq);
            id
        } else {
            self.slots.push(Some(rq));
            self.slots.len() - 1
        }
    }

    pub fn remove(&mut self, id: RqId) -> Request {
        let rq = self.slots[id].take().expect("request id is live");
        self.free.push(id);
        rq
    }

    pub fn get(&self, id: RqId) -> &Request {
        self.slots[id].as_ref().expect("request id is live")
    }

    pub fn get_mut(&mut self, id: RqId) -> &mut Request {
        self.slots[id].as_mut().expect("request id is live")
    }

    pub fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}
