//! Kernel profiles: the kernel a simulated host or guest runs, as the
//! handful of build and version choices the simulator models (CONFIG_HZ, the
//! BFQ release, whether `slice_idle` counts whole jiffies, BFQ's soft
//! real-time slack, how `sync` writes back). One profile says them at once,
//! for the host and for the guests separately (`tandem sim run --host-kernel
//! / --guest-kernel`), and single fields are overridden by `KEY=VALUE`
//! ([`KernelProfile::set`]).

use std::fmt;
use std::str::FromStr;

use crate::iosched::{BfqVersion, SchedConfig};

/// A named kernel profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelName {
    /// A current distribution kernel (Debian 12's 6.1): HZ=250, mainline
    /// BFQ, `slice_idle` in nanoseconds, `sync` write-back REQ_SYNC (since
    /// Linux 4.15). The hosts' default.
    Linux61,
    /// Linux 3.12 on ARM with BFQ v7r2, the CLOUD 2014 kernel (host and
    /// guests, D3.6 section 8.1) as its sources say: HZ=100 ("on an ARM
    /// system, the HZ parameter ... is typically set to 100", D3.6 on its
    /// KVM-on-ARM port), `slice_idle` in whole
    /// jiffies (HZ / 125 is 0 at HZ=100, which `bfq_init()` and
    /// `cfq_init()` raise to one jiffy: 10 ms), `sync` write-back async.
    /// The host of the paper's scenarios (`host_kernel` in
    /// `scenarios/cloud2014.toml`).
    Linux312Arm,
    /// [`KernelName::Linux312Arm`] with an 8 ms `slice_idle` in nanoseconds
    /// (a later kernel's), calibrated on the published guests' figures
    /// before the one-jiffy floor above was modelled: the guests' default.
    Linux312ArmIdling,
    /// Linux 2.6.32 (x86-64, Xen pvops), the Dom0 and DomU kernel of the
    /// two-tier I/O scheduler study: the legacy elevators noop, deadline,
    /// anticipatory and cfq, `CONFIG_HZ=250` (Debian squeeze's
    /// `linux-image-2.6.32-5-xen-amd64` config), CFQ's `slice_idle` in
    /// jiffies (`cfq_slice_idle = HZ / 125`, block/cfq-iosched.c of 2.6.32).
    Linux2632,
}

impl KernelName {
    pub const ALL: [KernelName; 4] = [
        KernelName::Linux61,
        KernelName::Linux312Arm,
        KernelName::Linux312ArmIdling,
        KernelName::Linux2632,
    ];

    /// The hosts' default profile.
    pub const HOST_DEFAULT: KernelName = KernelName::Linux61;
    /// The guests' default profile.
    pub const GUEST_DEFAULT: KernelName = KernelName::Linux312ArmIdling;

    pub fn name(self) -> &'static str {
        match self {
            KernelName::Linux61 => "linux-6.1",
            KernelName::Linux312Arm => "linux-3.12-arm",
            KernelName::Linux312ArmIdling => "linux-3.12-arm-idling",
            KernelName::Linux2632 => "linux-2.6.32",
        }
    }

    /// The profile's settings.
    pub fn profile(self) -> KernelProfile {
        match self {
            KernelName::Linux61 => KernelProfile {
                name: self,
                hz: 250,
                bfq: BfqVersion::Mainline,
                slice_idle_jiffies: false,
                softrt_slack: true,
                sync_writes_sync: true,
            },
            KernelName::Linux312Arm => KernelProfile {
                name: self,
                hz: crate::vm::DEFAULT_GUEST_HZ,
                bfq: BfqVersion::V7r2,
                slice_idle_jiffies: true,
                softrt_slack: true,
                sync_writes_sync: false,
            },
            KernelName::Linux312ArmIdling => KernelProfile {
                slice_idle_jiffies: false,
                name: self,
                ..KernelName::Linux312Arm.profile()
            },
            // BFQ did not exist for 2.6.32 (its first release was for
            // 2.6.33); the field is left at the 3.12 guests' value, unused.
            KernelName::Linux2632 => KernelProfile {
                name: self,
                hz: 250,
                bfq: BfqVersion::V7r2,
                slice_idle_jiffies: true,
                softrt_slack: true,
                sync_writes_sync: false,
            },
        }
    }
}

impl fmt::Display for KernelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelName {
    type Err = String;
    fn from_str(s: &str) -> Result<KernelName, String> {
        KernelName::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = KernelName::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown kernel profile \"{s}\"; accepted: {}",
                    names.join(", ")
                )
            })
    }
}

/// A kernel's settings: a profile, with any fields overridden.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelProfile {
    /// The profile it started from.
    pub name: KernelName,
    /// CONFIG_HZ: the tick, which BFQ's and CFQ's timers round to.
    pub hz: u32,
    /// The BFQ release ([`BfqVersion`]).
    pub bfq: BfqVersion,
    /// CFQ and BFQ count `slice_idle` in whole jiffies (HZ / 125), as Linux
    /// before 4.10 and BFQ v7 did.
    pub slice_idle_jiffies: bool,
    /// The "+4 ticks" slack of BFQ's soft real-time test.
    pub softrt_slack: bool,
    /// `sync` writes back with REQ_SYNC (Linux 4.15 and later); before, the
    /// write-back `sync` starts was async. Modelled for guests only: the
    /// hosts' page cache is written back by QEMU's I/O, not by `sync`.
    pub sync_writes_sync: bool,
}

/// The keys [`KernelProfile::set`] takes.
pub const KERNEL_KEYS: &[&str] = &[
    "hz",
    "bfq",
    "slice_idle_jiffies",
    "softrt_slack",
    "sync_writes_sync",
];

/// Accepted CONFIG_HZ values: 10 to 10000 (Linux offers 100 to 1000; the
/// range leaves room for studies of the tick's effect).
pub const HZ_RANGE: std::ops::RangeInclusive<u32> = 10..=10_000;

impl KernelProfile {
    /// Overrides one field: `KEY=VALUE`, KEY one of [`KERNEL_KEYS`].
    pub fn set(&mut self, setting: &str) -> Result<(), String> {
        let (k, v) = setting
            .split_once('=')
            .ok_or_else(|| format!("\"{setting}\": KEY=VALUE expected, e.g. hz=100"))?;
        let (k, v) = (k.trim(), v.trim());
        let flag = |v: &str| match v {
            "true" | "1" | "on" => Ok(true),
            "false" | "0" | "off" => Ok(false),
            _ => Err(format!("{k}={v}: true or false expected")),
        };
        match k {
            "hz" => {
                let hz: u32 = v
                    .parse()
                    .map_err(|_| format!("hz={v}: not a whole number"))?;
                if !HZ_RANGE.contains(&hz) {
                    return Err(format!("hz={v}: out of range; accepted: 10 to 10000"));
                }
                self.hz = hz;
            }
            "bfq" => self.bfq = BfqVersion::parse(v).map_err(|e| format!("bfq={v}: {e}"))?,
            "slice_idle_jiffies" => self.slice_idle_jiffies = flag(v)?,
            "softrt_slack" => self.softrt_slack = flag(v)?,
            "sync_writes_sync" => self.sync_writes_sync = flag(v)?,
            _ => {
                return Err(format!(
                    "\"{setting}\": unknown key \"{k}\"; accepted: {}",
                    KERNEL_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// The profile's part of an elevator's configuration.
    pub fn apply(&self, cfg: &mut SchedConfig) {
        cfg.hz = self.hz;
        cfg.bfq.version = self.bfq;
        cfg.slice_idle_in_jiffies = self.slice_idle_jiffies;
        cfg.bfq.softrt_tick_slack = self.softrt_slack;
    }

    /// `(key, value)` pairs in [`KERNEL_KEYS`] order, for records.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let bfq = match self.bfq {
            BfqVersion::V7r2 => "v7r2",
            BfqVersion::Mainline => "mainline",
        };
        vec![
            ("hz", self.hz.to_string()),
            ("bfq", bfq.to_string()),
            ("slice_idle_jiffies", self.slice_idle_jiffies.to_string()),
            ("softrt_slack", self.softrt_slack.to_string()),
            ("sync_writes_sync", self.sync_writes_sync.to_string()),
        ]
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for KernelName {
    fn value_variants<'a>() -> &'a [Self] {
        &KernelName::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_simulators_defaults() {
        // The host's elevators default to linux-6.1 ...
        let mut host = SchedConfig::default();
        let before = host.clone();
        KernelName::HOST_DEFAULT.profile().apply(&mut host);
        assert_eq!(format!("{host:?}"), format!("{before:?}"));
        // ... and the guests' HZ is the VM's default.
        assert_eq!(
            KernelName::GUEST_DEFAULT.profile().hz,
            crate::vm::DEFAULT_GUEST_HZ
        );
    }

    #[test]
    fn set_overrides_one_field_and_names_bad_input() {
        let mut p = KernelName::Linux61.profile();
        p.set("hz=100").unwrap();
        p.set("bfq=v7r2").unwrap();
        assert_eq!((p.hz, p.bfq), (100, BfqVersion::V7r2));
        assert_eq!(p.name, KernelName::Linux61);
        assert!(p.set("hz=0").unwrap_err().contains("out of range"));
        assert!(p.set("tick=100").unwrap_err().contains("accepted: hz, bfq"));
        assert!(p
            .set("softrt_slack=maybe")
            .unwrap_err()
            .contains("true or false"));
        assert!(p.set("hz").unwrap_err().contains("KEY=VALUE"));
        for k in KernelName::ALL {
            assert_eq!(k.name().parse::<KernelName>(), Ok(k));
        }
    }
}
