//! I/O priorities as Linux encodes them (`include/uapi/linux/ioprio.h`): a
//! 16-bit value, the class in the top 3 bits (`IOPRIO_CLASS_SHIFT` = 13),
//! the level in the low 3 bits and, since Linux 6.5, hints in bits 3..12.
//! The virtio-blk request header carries the same value in its 32-bit
//! `ioprio` field (`virtblk_setup_cmd` writes `req_get_ioprio(req)`).

use std::fmt;

/// `IOPRIO_CLASS_SHIFT` in include/uapi/linux/ioprio.h.
pub const CLASS_SHIFT: u32 = 13;
/// `IOPRIO_LEVEL_MASK`: levels 0 (highest) to 7 (`IOPRIO_NR_LEVELS` = 8).
pub const LEVEL_MASK: u32 = 0x7;
/// The highest best-effort level, where RT lands when a VM may not use RT.
pub const BE_HIGHEST: u8 = 0;
/// `IOPRIO_BE_NORM` (= 4): what a task without an I/O priority gets.
pub const BE_NORM: u8 = 4;

/// An I/O scheduling class (`IOPRIO_CLASS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// `IOPRIO_CLASS_NONE` (0): no priority set; the scheduler derives one
    /// from the submitting task's nice value.
    None,
    /// `IOPRIO_CLASS_RT` (1).
    Rt,
    /// `IOPRIO_CLASS_BE` (2).
    Be,
    /// `IOPRIO_CLASS_IDLE` (3).
    Idle,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::None, Class::Rt, Class::Be, Class::Idle];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Class::None => "none",
            Class::Rt => "rt",
            Class::Be => "be",
            Class::Idle => "idle",
        }
    }
}

/// A class and a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ioprio {
    pub class: Class,
    /// 0..=7; 0 for `None` and `Idle`, which have no levels.
    pub level: u8,
}

/// The class bits hold 4..=7, which no kernel defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadClass(pub u32);

impl fmt::Display for BadClass {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "I/O priority class {} is not defined", self.0)
    }
}

impl Ioprio {
    pub const NONE: Ioprio = Ioprio {
        class: Class::None,
        level: 0,
    };

    pub fn new(class: Class, level: u8) -> Ioprio {
        let level = match class {
            Class::Rt | Class::Be => level.min(LEVEL_MASK as u8),
            Class::None | Class::Idle => 0,
        };
        Ioprio { class, level }
    }

    /// Decodes the header's field. The hint bits are dropped (no host
    /// scheduler in Linux 6.18 reads them for ordering); bits above the
    /// 16 of the kernel's value make the class undefined.
    pub fn decode(raw: u32) -> Result<Ioprio, BadClass> {
        let class = raw >> CLASS_SHIFT;
        let level = (raw & LEVEL_MASK) as u8;
        let class = match class {
            0 => Class::None,
            1 => Class::Rt,
            2 => Class::Be,
            3 => Class::Idle,
            c => return Err(BadClass(c)),
        };
        Ok(Ioprio::new(class, level))
    }

    /// The kernel's 16-bit value (`IOPRIO_PRIO_VALUE(class, level)`), as an
    /// io_uring SQE's `ioprio` and `ioprio_set(2)` take it.
    pub fn encode(self) -> u16 {
        ((self.class as u16) << CLASS_SHIFT) | self.level as u16
    }
}

impl fmt::Display for Ioprio {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.class {
            Class::Rt | Class::Be => write!(f, "{}/{}", self.class.name(), self.level),
            _ => f.write_str(self.class.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_as_the_kernel_encodes_them() {
        // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_RT, 0) = 1 << 13 = 0x2000.
        assert_eq!(Ioprio::decode(0x2000), Ok(Ioprio::new(Class::Rt, 0)));
        assert_eq!(Ioprio::new(Class::Rt, 0).encode(), 0x2000);
        // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 4) = 0x4004.
        assert_eq!(Ioprio::decode(0x4004), Ok(Ioprio::new(Class::Be, 4)));
        assert_eq!(Ioprio::decode(0x6000), Ok(Ioprio::new(Class::Idle, 0)));
        assert_eq!(Ioprio::decode(0), Ok(Ioprio::NONE));
        // A hint (bits 3..12) is dropped, the level kept.
        assert_eq!(Ioprio::decode(0x4000 | (1 << 3) | 2).unwrap().level, 2);
        assert_eq!(Ioprio::decode(4 << 13), Err(BadClass(4)));
        assert_eq!(Ioprio::decode(u32::MAX), Err(BadClass(u32::MAX >> 13)));
    }
}
