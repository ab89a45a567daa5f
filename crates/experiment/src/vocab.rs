//! The typed names of a scenario's matrix values: device presets
//! ([`Device`]), I/O schedulers ([`IoSched`]), coordination modes
//! ([`CoordMode`], from `policy`); workloads and other VMs are
//! [`crate::WorkloadSpec`] and [`crate::OtherVms`]. Each is parsed once,
//! when the scenario is read, and written back by its canonical name
//! (results, file names, cell ids), so results read the same as when the
//! fields were strings.

use std::fmt;
use std::str::FromStr;

pub use policy::mode::CoordMode;

/// Serde by canonical name: `Display` out, `FromStr` in.
macro_rules! serde_by_name {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let s = String::deserialize(d)?;
                s.parse::<$t>().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_by_name;

/// A device preset: one of `devmodel::PRESETS`, where the names live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device(usize);

impl Device {
    /// Every preset, in `devmodel::PRESETS` order.
    pub fn all() -> impl Iterator<Item = Device> {
        (0..devmodel::PRESETS.len()).map(Device)
    }

    /// The preset's name (what `devmodel::preset` builds).
    pub fn name(self) -> &'static str {
        devmodel::PRESETS[self.0]
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        devmodel::PRESETS
            .iter()
            .position(|p| *p == s)
            .map(Device)
            .ok_or_else(|| {
                devmodel::UnknownPreset {
                    name: s.to_string(),
                }
                .to_string()
            })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

serde_by_name!(Device);

/// An I/O scheduler, as a scenario names it. The legacy names (`noop`,
/// `deadline`) are kept apart from the blk-mq ones (`none`,
/// `mq-deadline`): a scenario's spelling is what its results and file
/// names carry. Each runner says which it runs (`sim::iosched::SCHEDULERS`,
/// `bench::SCHEDULERS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoSched {
    Noop,
    None,
    Deadline,
    MqDeadline,
    Anticipatory,
    Cfq,
    Bfq,
    Kyber,
}

impl IoSched {
    /// Every scheduler tandem knows.
    pub const ALL: [IoSched; 8] = [
        IoSched::Noop,
        IoSched::None,
        IoSched::Deadline,
        IoSched::MqDeadline,
        IoSched::Anticipatory,
        IoSched::Cfq,
        IoSched::Bfq,
        IoSched::Kyber,
    ];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            IoSched::Noop => "noop",
            IoSched::None => "none",
            IoSched::Deadline => "deadline",
            IoSched::MqDeadline => "mq-deadline",
            IoSched::Anticipatory => "anticipatory",
            IoSched::Cfq => "cfq",
            IoSched::Bfq => "bfq",
            IoSched::Kyber => "kyber",
        }
    }

    /// The name a blk-mq kernel gives it in `/sys/block/*/queue/scheduler`:
    /// `noop` and `deadline` are the legacy names of `none` and
    /// `mq-deadline`; `cfq` and `anticipatory` exist only in legacy kernels.
    pub fn kernel_name(self) -> &'static str {
        match self {
            IoSched::Noop => "none",
            IoSched::Deadline => "mq-deadline",
            other => other.name(),
        }
    }
}

impl FromStr for IoSched {
    type Err = String;
    fn from_str(s: &str) -> Result<IoSched, String> {
        IoSched::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = IoSched::ALL.iter().map(|x| x.name()).collect();
                format!(
                    "unknown I/O scheduler \"{s}\"; accepted: {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for IoSched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

serde_by_name!(IoSched);

/// The hypervisor of a scenario's VM cells (`hypervisor`): QEMU/KVM with
/// virtio-blk (the default, every scenario before issue 29), or Xen with its
/// paravirtual block path (blkfront in the guest, blkback in Dom0). Each
/// runner says which it runs ([`crate::Scenario::check_hypervisor`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hypervisor {
    #[default]
    Kvm,
    XenPv,
}

impl Hypervisor {
    /// Every hypervisor tandem knows.
    pub const ALL: [Hypervisor; 2] = [Hypervisor::Kvm, Hypervisor::XenPv];

    /// The scenario's name.
    pub fn name(self) -> &'static str {
        match self {
            Hypervisor::Kvm => "kvm",
            Hypervisor::XenPv => "xen-pv",
        }
    }

    /// True for the default (left out of results and cell ids).
    pub fn is_default(&self) -> bool {
        *self == Hypervisor::default()
    }
}

impl FromStr for Hypervisor {
    type Err = String;
    fn from_str(s: &str) -> Result<Hypervisor, String> {
        Hypervisor::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown hypervisor \"{s}\"; accepted: kvm, xen-pv"))
    }
}

impl fmt::Display for Hypervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

serde_by_name!(Hypervisor);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in Device::all() {
            assert_eq!(d.name().parse::<Device>(), Ok(d));
        }
        for s in IoSched::ALL {
            assert_eq!(s.name().parse::<IoSched>(), Ok(s));
        }
        assert!("floppy"
            .parse::<Device>()
            .unwrap_err()
            .contains("accepted: hdd-1.8in"));
        assert!("bfqq".parse::<IoSched>().unwrap_err().contains("kyber"));
        assert_eq!(IoSched::Noop.kernel_name(), "none");
        assert_eq!(IoSched::Bfq.kernel_name(), "bfq");
        for h in Hypervisor::ALL {
            assert_eq!(h.name().parse::<Hypervisor>(), Ok(h));
        }
        assert!("xen-hvm"
            .parse::<Hypervisor>()
            .unwrap_err()
            .contains("xen-pv"));
    }
}
