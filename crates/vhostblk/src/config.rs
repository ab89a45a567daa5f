//! The device's features and its config space (`struct virtio_blk_config`,
//! virtio 1.2, 5.2.4; offsets below are from that layout).

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// `seg_max`: the most data segments a request may have. 128 - 2 is what
/// QEMU's vhost-user-blk and virtio-blk offer for a 128-entry queue (the
/// header and the status take two descriptors).
pub const SEG_MAX: u32 = 126;
/// `max_discard_seg` and `max_write_zeroes_seg`: ranges per request.
pub const MAX_ZERO_SEGMENTS: u32 = 1;
/// `max_discard_sectors` and `max_write_zeroes_sectors`: a range's
/// largest size, 1 GiB in 512-byte sectors (the field is a u32; QEMU's
/// default is the largest value that fits, Linux splits anything larger).
pub const MAX_ZERO_SECTORS: u32 = 1 << 21;
/// Size of the config space.
pub const CONFIG_LEN: usize = 60;

/// What the device is.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// Image size in 512-byte sectors.
    pub capacity: u64,
    /// The logical block size the guest should use (512 or 4096).
    pub blk_size: u32,
    pub num_queues: u16,
    pub read_only: bool,
}

impl DeviceConfig {
    /// The virtio features the device offers (the transport's and
    /// virtio-blk's; vhost-user's own bit is added by the backend).
    pub fn features(&self) -> u64 {
        let mut f = [
            VIRTIO_F_VERSION_1,
            VIRTIO_RING_F_INDIRECT_DESC,
            VIRTIO_RING_F_EVENT_IDX,
            VIRTIO_BLK_F_SEG_MAX,
            VIRTIO_BLK_F_BLK_SIZE,
            VIRTIO_BLK_F_FLUSH,
            VIRTIO_BLK_F_MQ,
        ]
        .iter()
        .fold(0u64, |f, b| f | 1 << b);
        if self.read_only {
            f |= 1 << VIRTIO_BLK_F_RO;
        } else {
            f |= 1 << VIRTIO_BLK_F_DISCARD | 1 << VIRTIO_BLK_F_WRITE_ZEROES;
        }
        f
    }

    /// The config space, little-endian as virtio 1.x has it.
    pub fn bytes(&self) -> [u8; CONFIG_LEN] {
        let mut b = [0u8; CONFIG_LEN];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(0, &self.capacity.to_le_bytes()); // capacity
        put(12, &SEG_MAX.to_le_bytes()); // seg_max
        put(20, &self.blk_size.to_le_bytes()); // blk_size
        put(34, &self.num_queues.to_le_bytes()); // num_queues
        let align = self.blk_size / 512;
        put(36, &MAX_ZERO_SECTORS.to_le_bytes()); // max_discard_sectors
        put(40, &MAX_ZERO_SEGMENTS.to_le_bytes()); // max_discard_seg
        put(44, &align.to_le_bytes()); // discard_sector_alignment
        put(48, &MAX_ZERO_SECTORS.to_le_bytes()); // max_write_zeroes_sectors
        put(52, &MAX_ZERO_SEGMENTS.to_le_bytes()); // max_write_zeroes_seg
        put(56, &[1]); // write_zeroes_may_unmap
        b
    }

    /// `size` bytes of the config space from `offset`, as GET_CONFIG asks;
    /// empty when the range lies outside it.
    pub fn read(&self, offset: u32, size: u32) -> Vec<u8> {
        let (o, n) = (offset as usize, size as usize);
        self.bytes()
            .get(o..o.saturating_add(n))
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_space_has_the_capacity_and_block_size_where_linux_reads_them() {
        let c = DeviceConfig {
            capacity: 0x1_0000_0001,
            blk_size: 4096,
            num_queues: 2,
            read_only: false,
        };
        let b = c.bytes();
        assert_eq!(
            u64::from_le_bytes(b[0..8].try_into().unwrap()),
            0x1_0000_0001
        );
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 4096);
        assert_eq!(u16::from_le_bytes(b[34..36].try_into().unwrap()), 2);
        assert_eq!(c.read(20, 4), 4096u32.to_le_bytes());
        assert!(c.read(58, 4).is_empty());
        assert_ne!(c.features() & 1 << VIRTIO_BLK_F_DISCARD, 0);
        let ro = DeviceConfig {
            read_only: true,
            ..c
        };
        assert_ne!(ro.features() & 1 << VIRTIO_BLK_F_RO, 0);
        assert_eq!(ro.features() & 1 << VIRTIO_BLK_F_WRITE_ZEROES, 0);
    }
}
