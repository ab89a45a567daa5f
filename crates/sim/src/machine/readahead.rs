//! The read-ahead part: the window a buffered reader's misses read ahead
//! (`struct file_ra_state`, `ondemand_readahead()`), kept per open file by
//! its reader (QEMU's buffered reads of a VM's image, [`super::qemu`]).
//! The background sequential readers read one full window at a time
//! ([`READAHEAD_BYTES`]).

use crate::fs::PAGE;

/// The readahead window of buffered sequential readers: Linux's default
/// `read_ahead_kb` is 128 KiB (`VM_READAHEAD_PAGES`). A reader reading
/// 64 KiB at a time reaches it at once (`get_init_ra_size()` gives the
/// maximum for a first read of more than max/4), and async readahead then
/// issues the next 128 KiB window as soon as the reader touches the marker
/// page, i.e. right after the previous window arrives. So each reader has
/// one 128 KiB sync read in flight, re-issued right after completion.
pub const READAHEAD_BYTES: u64 = 128 << 10;

/// Readahead state of one open file (`struct file_ra_state`), for QEMU's
/// buffered reads of a VM's image (`aio=threads` through the host page
/// cache): where a sequential read would continue, and the last window.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ReadaheadState {
    next_page: u64,
    window_pages: u64,
}

impl ReadaheadState {
    /// Pages to read for a miss at `[first, last)` (`ondemand_readahead()`,
    /// without the async marker): a read that continues the previous one
    /// doubles the window (up to `read_ahead_kb`); any other starts one from
    /// the request's size (`get_init_ra_size()`: 4x a request of at most
    /// 1/32 of the maximum, 2x one of at most 1/4, else the maximum).
    pub(super) fn window(&mut self, first: u64, last: u64) -> u64 {
        let max = READAHEAD_BYTES / PAGE;
        let req = (last - first).max(1);
        let size = if first == self.next_page && self.window_pages > 0 {
            (self.window_pages * 2).min(max)
        } else {
            let pow = req.next_power_of_two();
            if pow <= max / 32 {
                pow * 4
            } else if pow <= max / 4 {
                pow * 2
            } else {
                max
            }
        };
        let size = size.max(req);
        self.next_page = first + size;
        self.window_pages = size;
        size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ondemand_readahead()`'s windows: a one-page miss reads 4 pages, a
    /// read that goes on where the window ended doubles it up to
    /// `read_ahead_kb` (32 pages), and a jump starts over from the request.
    #[test]
    fn readahead_windows_ramp_up_on_sequential_reads_and_restart_on_jumps() {
        let mut ra = ReadaheadState::default();
        assert_eq!(ra.window(100, 101), 4);
        assert_eq!(ra.window(104, 105), 8);
        assert_eq!(ra.window(112, 113), 16);
        assert_eq!(ra.window(128, 129), 32);
        assert_eq!(ra.window(160, 161), 32);
        assert_eq!(ra.window(5000, 5001), 4);
        // Larger requests: 2x up to a quarter of the maximum, then all of it.
        assert_eq!(ra.window(9000, 9008), 16);
        assert_eq!(ra.window(20000, 20016), 32);
        // A request larger than the maximum is read whole.
        assert_eq!(ra.window(30000, 30064), 64);
    }
}
