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

use std::collections::BTreeMap;

/// Bytes per page and per filesystem block.
pub const PAGE: u64 = 4096;
/// Sectors per page.
pub const PAGE_SECTORS: u64 = PAGE / 512;
/// ext4 block group: 32768 blocks of 4 KiB (`mke2fs` default).
pub const GROUP_BYTES: u64 = 128 << 20;

pub type FileId = usize;

#[derive(Clone, Debug)]
pub struct File {
    pub path: String,
    pub size: u64,
    /// First sector of the file's single extent.
    pub start_sector: u64,
}

impl File {
    /// Sector holding byte `offset` of the file.
    pub fn sector_of(&self, offset: u64) -> u64 {
        self.start_sector + offset / 512
    }
}

/// Files placed on one device.
pub struct Layout {
    pub files: Vec<File>,
    capacity_bytes: u64,
    /// Next free byte inside each used group.
    group_fill: BTreeMap<u64, u64>,
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
            group_fill: BTreeMap::new(),
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

    /// Allocates `size` bytes contiguously, in `group` or the first group
    /// after it with room; a file larger than what is left of a group takes
    /// the following groups, which must be free.
    fn allocate(&mut self, group: u64, size: u64) -> u64 {
        let size = size.div_ceil(PAGE).max(1) * PAGE;
        let n = self.groups();
        let fill = |m: &BTreeMap<u64, u64>, g: u64| *m.get(&g).unwrap_or(&0);
        for step in 0..n {
            let g = (group + step) % n;
            let start = g * GROUP_BYTES + fill(&self.group_fill, g);
            let end = start + size;
            if end > self.capacity_bytes {
                continue;
            }
            let last = (end - 1) / GROUP_BYTES;
            if (g + 1..=last).all(|x| fill(&self.group_fill, x) == 0) {
                for x in g..=last {
                    let used = (end - x * GROUP_BYTES).min(GROUP_BYTES);
                    self.group_fill.insert(x, used);
                }
                return start;
            }
        }
        // The disk is full: overlap at the start rather than fail, and
        // count it, so that a run can say its layout is not physical.
        self.overlapping += size;
        0
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
        let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("/");
        let group = self.dir_group(if dir.is_empty() { "/" } else { dir });
        let start = self.allocate(group, size);
        self.files.push(File {
            path: path.to_string(),
            size,
            start_sector: start / 512,
        });
        self.files.len() - 1
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
        assert_eq!(fb.start_sector, fa.start_sector + (1 << 20) / 512);
        let dist = fe.start_sector.abs_diff(fa.start_sector);
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
                    l.file(f).start_sector,
                    l.file(f).start_sector + (4 << 30) / 512,
                )
            })
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap: {w:?}");
        }
    }
}
