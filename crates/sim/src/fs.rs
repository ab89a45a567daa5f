//! Where files live on the device, and which of their pages are in memory.
//!
//! The layout follows ext4's allocator in broad strokes: the disk is cut
//! into 128 MiB block groups (32768 blocks of 4 KiB, the mke2fs default);
//! each top-level directory gets a group spread across the disk (the Orlov
//! allocator spreads top-level directories), sub-directories stay near
//! their parent, and files of one directory are allocated one after the
//! other, in name order, in their directory's group. Files are contiguous
//! (ext4 extents and delayed allocation keep most files in one extent).
//! That gives application start-up the mix of short seeks (libraries in
//! one directory) and long ones (/etc, /usr/share/fonts, the home) that a
//! real installed system has.
//!
//! A VM's image is the one file that is not contiguous: it is sparse, as
//! raw and qcow2 images are, and takes room on the host only where the
//! guest has put data (see [`Layout::add_sparse_file`]).

use std::collections::BTreeMap;

/// Bytes per page and per filesystem block.
pub const PAGE: u64 = 4096;
/// Sectors per page.
pub const PAGE_SECTORS: u64 = PAGE / 512;
/// ext4 block group: 32768 blocks of 4 KiB (`mke2fs` default).
pub const GROUP_BYTES: u64 = 128 << 20;

pub type FileId = usize;

/// One contiguous run of a file on the device: `sectors` sectors from the
/// file's sector `file_sector` on, at device sector `dev_sector`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub file_sector: u64,
    pub dev_sector: u64,
    pub sectors: u64,
}

/// Where the start of a range of a file lies: on the device, or in a hole
/// of a sparse file (which reads as zeros without any I/O).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// `sectors` sectors, contiguous on the device from `dev_sector`.
    Mapped { dev_sector: u64, sectors: u64 },
    /// `sectors` sectors with no blocks on the device.
    Hole { sectors: u64 },
}

#[derive(Clone, Debug)]
pub struct File {
    pub path: String,
    /// Apparent size in bytes.
    pub size: u64,
    /// The file's blocks, sorted by `file_sector`, never overlapping. An
    /// ordinary file is one extent (ext4 extents and delayed allocation
    /// keep most files in one); a sparse image has one per run of guest
    /// data.
    extents: Vec<Extent>,
}

impl File {
    /// Device sector of the file's first sector, for files of one extent.
    pub fn start_sector(&self) -> u64 {
        self.extents.first().map_or(0, |e| e.dev_sector)
    }

    /// Device sector holding byte `offset` of an ordinary (one-extent)
    /// file.
    pub fn sector_of(&self, offset: u64) -> u64 {
        self.start_sector() + offset / 512
    }

    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// The first piece of the file's sectors `[file_sector, file_sector +
    /// sectors)`: how many of them are contiguous on the device, and
    /// where, or how many lie in a hole. Callers walk a range piece by
    /// piece.
    pub fn piece(&self, file_sector: u64, sectors: u64) -> Piece {
        // The last extent starting at or before file_sector.
        let i = self
            .extents
            .partition_point(|e| e.file_sector <= file_sector);
        if i > 0 {
            let e = &self.extents[i - 1];
            let end = e.file_sector + e.sectors;
            if file_sector < end {
                return Piece::Mapped {
                    dev_sector: e.dev_sector + (file_sector - e.file_sector),
                    sectors: sectors.min(end - file_sector),
                };
            }
        }
        let next = self
            .extents
            .get(i)
            .map_or(u64::MAX, |e| e.file_sector - file_sector);
        Piece::Hole {
            sectors: sectors.min(next),
        }
    }
}

/// Files placed on one device.
pub struct Layout {
    pub files: Vec<File>,
    capacity_bytes: u64,
    /// Free space: byte ranges `start -> end`, disjoint and not touching.
    free: BTreeMap<u64, u64>,
    /// Bytes of files placed over others because the device had no room
    /// left for them (see [`Layout::overlapping_bytes`]).
    overlapping: u64,
}

/// FNV-1a, 64 bits: a stable hash for placing directories.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Layout {
    pub fn new(capacity_bytes: u64) -> Layout {
        Layout {
            files: Vec::new(),
            capacity_bytes,
            free: BTreeMap::from([(0, capacity_bytes)]),
            overlapping: 0,
        }
    }

    fn groups(&self) -> u64 {
        (self.capacity_bytes / GROUP_BYTES).max(1)
    }

    /// The group a directory starts in: top-level directories are spread
    /// over the disk by hash; deeper directories sit within 16 groups of
    /// their top-level parent.
    fn dir_group(&self, dir: &str) -> u64 {
        let mut parts = dir.trim_start_matches('/').split('/');
        let top = parts.next().unwrap_or("");
        let base = fnv1a(top) % self.groups();
        if dir.trim_start_matches('/').contains('/') {
            (base + fnv1a(dir) % 16) % self.groups()
        } else {
            base
        }
    }

    /// The first free byte at or after `goal` from which `size` bytes are
    /// free, or the first one on the device if there is none after `goal`.
    fn find_free(&self, goal: u64, size: u64) -> Option<u64> {
        let containing = self
            .free
            .range(..=goal)
            .next_back()
            .filter(|(_, &e)| e > goal)
            .map(|(_, &e)| (goal, e));
        let after = self.free.range(goal + 1..).map(|(&s, &e)| (s, e));
        let before = self.free.range(..=goal).map(|(&s, &e)| (s, e));
        containing
            .into_iter()
            .chain(after)
            .chain(before)
            .find(|&(s, e)| e - s >= size)
            .map(|(s, _)| s)
    }

    /// Marks `[start, start + size)`, which is free, used.
    fn take(&mut self, start: u64, size: u64) {
        let (&s, &e) = self.free.range(..=start).next_back().expect("free");
        debug_assert!(e >= start + size);
        self.free.remove(&s);
        if s < start {
            self.free.insert(s, start);
        }
        if start + size < e {
            self.free.insert(start + size, e);
        }
    }

    /// The group of the directory holding `path`.
    fn file_group(&self, path: &str) -> u64 {
        let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("/");
        self.dir_group(if dir.is_empty() { "/" } else { dir })
    }

    /// Allocates `size` bytes contiguously from the start of `group`, or
    /// after what that group already holds, or in the first group after it
    /// with room (wrapping around); a file larger than what is left of a
    /// group takes the following groups, which must be free.
    fn allocate(&mut self, group: u64, size: u64) -> u64 {
        let size = size.div_ceil(PAGE).max(1) * PAGE;
        match self.find_free(group * GROUP_BYTES, size) {
            Some(start) => {
                self.take(start, size);
                start
            }
            None => {
                // The disk is full: overlap at the start rather than fail,
                // and count it, so that a run can say its layout is not
                // physical.
                self.overlapping += size;
                0
            }
        }
    }

    /// Allocates up to `size` bytes from `goal` on: at `goal` if it is
    /// free, else in the first free space after it (wrapping around), and
    /// only as much as is free there. Returns where, and how much.
    fn allocate_near(&mut self, goal: u64, size: u64) -> (u64, u64) {
        let goal = goal.min(self.capacity_bytes.saturating_sub(PAGE)) / PAGE * PAGE;
        match self
            .find_free(goal, size)
            .or_else(|| self.find_free(goal, PAGE))
        {
            Some(start) => {
                let end = *self.free.range(..=start).next_back().expect("free").1;
                let got = size.min(end - start);
                self.take(start, got);
                (start, got)
            }
            None => {
                self.overlapping += size;
                (0, size)
            }
        }
    }

    /// Bytes of files that did not fit and were placed over others: a
    /// scenario that asks more of the device than its capacity (VM images
    /// and workload files larger than the disk).
    pub fn overlapping_bytes(&self) -> u64 {
        self.overlapping
    }

    /// Places system files (an application's libraries, fonts, ...), in
    /// the order given: callers pass them sorted by path so that files of
    /// one directory end up next to each other.
    pub fn add_file(&mut self, path: &str, size: u64) -> FileId {
        let start = self.allocate(self.file_group(path), size);
        self.files.push(File {
            path: path.to_string(),
            size,
            extents: vec![Extent {
                file_sector: 0,
                dev_sector: start / 512,
                sectors: size.div_ceil(PAGE).max(1) * PAGE_SECTORS,
            }],
        });
        self.files.len() - 1
    }

    /// Creates a sparse file of apparent size `size` that takes no room
    /// yet: a VM's image, as `qemu-img create` makes it (raw images are
    /// sparse files; qcow2 allocates clusters on first write). Its blocks
    /// come with [`Layout::fill_sparse`].
    pub fn add_sparse_file(&mut self, path: &str, size: u64) -> FileId {
        self.files.push(File {
            path: path.to_string(),
            size,
            extents: Vec::new(),
        });
        self.files.len() - 1
    }

    /// Gives blocks to the holes of sparse file `id` in sectors
    /// `[file_sector, file_sector + sectors)`, as the guest's first write
    /// there does. Where, follows ext4 (`ext4_ext_find_goal()`): the goal
    /// is the block that keeps the file's offsets, counted from its extent
    /// nearest before the hole (or its first one), so that on a roomy disk
    /// a sparse image lies as a fully allocated one would; a file with no
    /// blocks yet starts in its directory's group. Taken space around the
    /// goal sends the blocks to the first free space after it, in as many
    /// pieces as it takes (the multi-block allocator).
    pub fn fill_sparse(&mut self, id: FileId, file_sector: u64, sectors: u64) {
        let end = file_sector + sectors;
        let mut at = file_sector;
        while at < end {
            match self.files[id].piece(at, end - at) {
                Piece::Mapped { sectors, .. } => at += sectors,
                Piece::Hole { sectors } => {
                    let goal = self.goal_sector(id, at) * 512;
                    let (dev, got) = self.allocate_near(goal, sectors * 512);
                    let got = got / 512;
                    self.insert_extent(id, at, dev / 512, got);
                    at += got;
                }
            }
        }
    }

    /// The device sector ext4 aims at for sector `file_sector` of file
    /// `id` (`ext4_ext_find_goal()`).
    fn goal_sector(&self, id: FileId, file_sector: u64) -> u64 {
        let ext = &self.files[id].extents;
        let i = ext.partition_point(|e| e.file_sector <= file_sector);
        match ext.get(i.saturating_sub(1)) {
            Some(e) if e.file_sector <= file_sector => e.dev_sector + (file_sector - e.file_sector),
            Some(e) => e.dev_sector.saturating_sub(e.file_sector - file_sector),
            None => self.file_group(&self.files[id].path) * GROUP_BYTES / 512,
        }
    }

    /// Adds an extent to a file, merging it with the extent before it when
    /// the two follow each other both in the file and on the device.
    fn insert_extent(&mut self, id: FileId, file_sector: u64, dev_sector: u64, sectors: u64) {
        let ext = &mut self.files[id].extents;
        let i = ext.partition_point(|e| e.file_sector < file_sector);
        if i > 0 {
            let prev = &mut ext[i - 1];
            if prev.file_sector + prev.sectors == file_sector
                && prev.dev_sector + prev.sectors == dev_sector
            {
                prev.sectors += sectors;
                return;
            }
        }
        ext.insert(
            i,
            Extent {
                file_sector,
                dev_sector,
                sectors,
            },
        );
    }

    /// Bytes a file takes on the device.
    pub fn allocated_bytes(&self, id: FileId) -> u64 {
        self.files[id].extents.iter().map(|e| e.sectors * 512).sum()
    }

    pub fn file(&self, id: FileId) -> &File {
        &self.files[id]
    }
}

/// A set of page ranges `[start, end)` of one file.
#[derive(Clone, Debug, Default)]
pub struct PageSet {
    ranges: BTreeMap<u64, u64>,
    pages: u64,
}

impl PageSet {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    pub fn clear(&mut self) {
        self.ranges.clear();
        self.pages = 0;
    }

    /// Adds `[start, end)`, merging with neighbours.
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // Absorb every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> = self
            .ranges
            .range(..=end)
            .rev()
            .take_while(|(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            self.pages -= e - s;
            start = start.min(s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
        self.pages += end - start;
    }

    /// The parts of `[start, end)` not in the set, in order.
    pub fn missing(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cur = start;
        if let Some((_, &e)) = self.ranges.range(..=start).next_back() {
            cur = cur.max(e.min(end)).max(start);
        }
        for (&s, &e) in self.ranges.range(start..end) {
            if s > cur {
                out.push((cur, s.min(end)));
            }
            cur = cur.max(e);
            if cur >= end {
                break;
            }
        }
        if cur < end {
            out.push((cur, end));
        }
        out
    }

    /// Removes and returns the first range, at most `max_pages` long.
    pub fn take_first(&mut self, max_pages: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self.ranges.iter().next()?;
        self.ranges.remove(&s);
        let cut = e.min(s + max_pages);
        if cut < e {
            self.ranges.insert(cut, e);
        }
        self.pages -= cut - s;
        Some((s, cut))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pageset_merges_and_reports_holes() {
        let mut p = PageSet::default();
        p.insert(10, 20);
        p.insert(30, 40);
        p.insert(20, 25);
        assert_eq!(p.pages(), 25);
        assert_eq!(p.missing(0, 50), vec![(0, 10), (25, 30), (40, 50)]);
        assert_eq!(p.missing(12, 18), vec![]);
        assert_eq!(p.missing(22, 32), vec![(25, 30)]);
        assert_eq!(p.take_first(4), Some((10, 14)));
        assert_eq!(p.pages(), 21);
    }

    #[test]
    fn files_of_one_directory_are_adjacent_and_directories_spread() {
        let mut l = Layout::new(60_000_000_000);
        let a = l.add_file("/usr/lib/x86_64-linux-gnu/libA.so", 1 << 20);
        let b = l.add_file("/usr/lib/x86_64-linux-gnu/libB.so", 1 << 20);
        let e = l.add_file("/etc/fonts/fonts.conf", 8192);
        let (fa, fb, fe) = (l.file(a), l.file(b), l.file(e));
        assert_eq!(fb.start_sector(), fa.start_sector() + (1 << 20) / 512);
        let dist = fe.start_sector().abs_diff(fa.start_sector());
        assert!(
            dist > GROUP_BYTES / 512,
            "different top-level dirs are far apart"
        );
        // Large files take whole following groups and never overlap.
        let big: Vec<_> = (0..5)
            .map(|i| l.add_file(&format!("/S/file{i}"), 4 << 30))
            .collect();
        let mut spans: Vec<(u64, u64)> = big
            .iter()
            .map(|&f| {
                (
                    l.file(f).start_sector(),
                    l.file(f).start_sector() + (4 << 30) / 512,
                )
            })
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap: {w:?}");
        }
    }

    #[test]
    fn a_sparse_file_takes_room_only_where_written() {
        let mut l = Layout::new(16_000_000_000);
        let img = l.add_sparse_file("/var/lib/images/vm1.img", 8 << 30);
        assert_eq!(l.allocated_bytes(img), 0);
        assert_eq!(
            l.file(img).piece(100, 8),
            Piece::Hole { sectors: 8 },
            "nothing written yet"
        );
        // Two runs far apart in the file keep their distance on a roomy
        // device, as ext4's goal keeps it.
        l.fill_sparse(img, 1_000_000, 2048);
        l.fill_sparse(img, 9_000_000, 2048);
        assert_eq!(l.allocated_bytes(img), 2 * 2048 * 512);
        let dev = |l: &Layout, s: u64| match l.file(img).piece(s, 8) {
            Piece::Mapped { dev_sector, .. } => dev_sector,
            Piece::Hole { .. } => panic!("written range unmapped"),
        };
        let a = dev(&l, 1_000_000);
        assert_eq!(dev(&l, 9_000_000), a + 8_000_000);
        // A range across a run's end stops at the end; the hole after it
        // stops at the next run.
        assert_eq!(
            l.file(img).piece(1_002_040, 100),
            Piece::Mapped {
                dev_sector: a + 2040,
                sectors: 8
            }
        );
        assert_eq!(
            l.file(img).piece(1_002_048, 10_000_000),
            Piece::Hole {
                sectors: 9_000_000 - 1_002_048
            }
        );
        // Writing a range again allocates only its holes; a run that
        // follows the last one on both sides merges with it.
        l.fill_sparse(img, 9_000_000, 4096);
        assert_eq!(l.allocated_bytes(img), (2048 + 4096) * 512);
        assert_eq!(l.file(img).extents().len(), 2);
        // Where the goal is taken (another image's data), the blocks go
        // to the first free space after it.
        let other = l.add_sparse_file("/var/lib/images/vm2.img", 8 << 30);
        l.fill_sparse(other, 0, 2048);
        let o = match l.file(other).piece(0, 8) {
            Piece::Mapped { dev_sector, .. } => dev_sector,
            Piece::Hole { .. } => panic!("unmapped"),
        };
        assert!(
            o >= a + 2048 || o + 2048 <= a,
            "vm2 at {o} overlaps vm1 at {a}"
        );
        l.fill_sparse(other, 1_000_000, 2048);
        let o2 = match l.file(other).piece(1_000_000, 8) {
            Piece::Mapped { dev_sector, .. } => dev_sector,
            Piece::Hole { .. } => panic!("unmapped"),
        };
        let vm1: Vec<(u64, u64)> = l
            .file(img)
            .extents()
            .iter()
            .map(|e| (e.dev_sector, e.dev_sector + e.sectors))
            .collect();
        assert!(
            vm1.iter().all(|&(s, e)| o2 + 2048 <= s || o2 >= e),
            "vm2's run at {o2} lies over vm1's {vm1:?}"
        );
        assert_eq!(l.overlapping_bytes(), 0);
    }
}
