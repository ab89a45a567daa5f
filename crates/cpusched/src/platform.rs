//! Platforms: the machine a scenario runs on (cores, speed, HZ, the
//! preemption model) and the costs of switching and of virtualisation.

use crate::kernel::KernelCfg;
use crate::Nanos;

/// The kernel's preemption model (`CONFIG_PREEMPT*`). The busy loops and
/// benchmark threads modelled here run in user space, where every model
/// preempts on return from the interrupt, so the choice is recorded but
/// does not change the model's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    None,
    Voluntary,
    Preempt,
}

#[derive(Clone, Debug)]
pub struct Platform {
    pub name: &'static str,
    pub cores: usize,
    pub mhz: u32,
    /// CPU speed relative to the machine the app traces in `apps/` were
    /// recorded on (an AMD EPYC server core of the 2020s, x86-64, 2026): a
    /// recorded CPU burst of `t` takes `t / speed` here
    /// ([`Platform::scale_cpu`]).
    pub speed: f64,
    /// Host `CONFIG_HZ`.
    pub hz: u32,
    /// Guest `CONFIG_HZ`.
    pub guest_hz: u32,
    pub preemption: Preemption,
    /// Host context switch (`__schedule()` to the next task's first
    /// instruction).
    pub switch_ns: Nanos,
    /// A guest's context switch.
    pub guest_switch_ns: Nanos,
    /// From a timer's expiry to `try_to_wake_up()` of its sleeper (the
    /// hrtimer interrupt path).
    pub timer_irq_ns: Nanos,
    /// Delivering an interrupt to a running vCPU: VM exit, virtual
    /// interrupt injection, VM entry.
    pub vm_exit_ns: Nanos,
    /// Entering a vCPU after the host ran something else on its core
    /// (world switch, restoring the virtual timer and interrupt state).
    pub vm_entry_ns: Nanos,
    /// The most vCPUs one VM may have.
    pub max_vcpus: usize,
    /// `RT_RUNTIME_SHARE`: on in the 3.x kernels, off from 5.17.
    pub rt_runtime_share: bool,
    /// The fair class's loads are 3.x's tracked averages (group shares,
    /// balancer loads, and the balancer's cache-hot rule: see
    /// `fair/pelt.rs`) rather than instantaneous weights. Off on the two
    /// presets, whose study findings were established on instantaneous
    /// weights (see the README: turning it on moves them).
    pub load_tracking: bool,
    /// CFS picks the next buddy a wake-up preemption sets (3.x
    /// `set_next_buddy()`); off on the two presets, as above.
    pub next_buddy: bool,
    /// Hardware threads per core of the host (SMT siblings: CPU `c` and
    /// `c + cores / smt` share a core, Linux's enumeration on Intel). 1:
    /// no SMT. 3.x `select_idle_sibling()` then takes an idle CPU of
    /// another core only if the whole core is idle.
    pub smt: usize,
}

/// `chromebook-2014`'s CPU speed relative to one core of the machine the app
/// traces were recorded on (an AMD EPYC server core, 2026): 0.17.
///
/// From published ratios, not from a fit to a start-up table:
/// - the Exynos 5250's Cortex-A15 at 1.7 GHz did 1.4 to 1.65 times the work
///   of an Atom N570 (Bonnell, 1.66 GHz) in CPU-bound benchmarks (AnandTech,
///   "Samsung Chromebook (XE303) Review: Testing ARM's Cortex A15", 2012);
/// - a Bonnell Atom at 1.6 GHz scores 653 in SPECint2000 against about 1900
///   for a Core 2 Duo E6300 at 1.86 GHz (Intel's figures, Tom's Hardware,
///   "Intel Fires Up New Atom Processors", 2008);
///
/// so the A15 does 0.50 to 0.59 of a 2006 Core 2 core's integer work. The last
/// link is an estimate, not a published figure: a 2020s EPYC core at 2.5 to
/// 3.7 GHz does 3 to 4 times a 1.86 GHz Core 2's (1.5 to 2 times the clock,
/// about twice the work per cycle), which gives 0.13 to 0.20. 0.17 is the
/// middle. The earlier preset, 0.3, came from DMIPS/MHz, which favours small
/// cores on code (such as a start-up's dynamic linking and font loading) that
/// misses in the caches and branch predictors.
pub const CHROMEBOOK_2014_SPEED: f64 = 0.17;

/// The names [`Platform::preset`] knows.
pub const PRESETS: &[&str] = &["default", "chromebook-2014", "i7-2600"];

impl Platform {
    /// The coordinated scheduling study's machine: Samsung Chromebook,
    /// Exynos 5250, 2 Cortex-A15 cores at 1.7 GHz, host and guest Linux
    /// 3.17 with `CONFIG_PREEMPT` (Fanguède et al. 2014, section V), HZ=100
    /// as the 3.x ARM kernels of the vIrtical experiments ran (D3.6).
    ///
    /// The costs are assumptions of the right order for this core, not
    /// measurements of it: a few microseconds for a context switch and an
    /// interrupt, and a VM exit/entry of a few thousand cycles (the
    /// study's 2000-cycle HVC; Dall and Nieh's KVM/ARM paper measures
    /// world switches of several thousand cycles on Cortex-A15).
    pub fn chromebook_2014() -> Platform {
        Platform {
            name: "chromebook-2014",
            cores: 2,
            mhz: 1700,
            // CHROMEBOOK_2014_SPEED: a chain of published ratios, with its
            // last link an estimate (see the constant).
            speed: CHROMEBOOK_2014_SPEED,
            hz: 100,
            guest_hz: 100,
            preemption: Preemption::Preempt,
            switch_ns: 3_000,
            guest_switch_ns: 3_000,
            timer_irq_ns: 5_000,
            vm_exit_ns: 4_000,
            vm_entry_ns: 5_000,
            max_vcpus: 2,
            rt_runtime_share: true,
            load_tracking: false,
            next_buddy: false,
            smt: 1,
        }
    }

    /// A generic modern machine: 4 cores, HZ=1000, voluntary preemption,
    /// cheaper switches (same caveat on the costs).
    pub fn default_platform() -> Platform {
        Platform {
            name: "default",
            cores: 4,
            mhz: 3000,
            speed: 1.0,
            hz: 1000,
            guest_hz: 1000,
            preemption: Preemption::Voluntary,
            switch_ns: 1_500,
            guest_switch_ns: 1_500,
            timer_irq_ns: 2_000,
            vm_exit_ns: 1_500,
            vm_entry_ns: 2_000,
            max_vcpus: 4,
            rt_runtime_share: false,
            load_tracking: false,
            next_buddy: false,
            smt: 1,
        }
    }

    /// A preset by name; the error lists the known ones.
    pub fn preset(name: &str) -> Result<Platform, String> {
        match name {
            "default" => Ok(Self::default_platform()),
            "chromebook-2014" => Ok(Self::chromebook_2014()),
            "i7-2600" => Ok(crate::cfsv_study::host_i7_2600()),
            _ => Err(format!(
                "unknown platform '{name}' (accepted: {})",
                PRESETS.join(", ")
            )),
        }
    }

    /// CPU time on this platform of work that took `recorded` on the
    /// machine the app traces were recorded on.
    pub fn scale_cpu(&self, recorded: Nanos) -> Nanos {
        (recorded as f64 / self.speed).round() as Nanos
    }

    /// The host kernel's configuration.
    pub fn host_cfg(&self) -> KernelCfg {
        KernelCfg {
            cpus: self.cores,
            hz: self.hz,
            switch_ns: self.switch_ns,
            smt: self.smt.max(1),
            ..self.kernel_cfg(self.cores)
        }
    }

    /// A guest kernel's configuration for `vcpus` vCPUs.
    pub fn guest_cfg(&self, vcpus: usize) -> KernelCfg {
        KernelCfg {
            cpus: vcpus,
            hz: self.guest_hz,
            switch_ns: self.guest_switch_ns,
            ..self.kernel_cfg(vcpus)
        }
    }

    /// What host and guest kernels share, for a kernel of `cpus` CPUs.
    fn kernel_cfg(&self, cpus: usize) -> KernelCfg {
        KernelCfg {
            cpus,
            hz: self.hz,
            switch_ns: self.switch_ns,
            // MC domain: min_interval = span weight in ms, busy_factor 32.
            balance_busy_ns: cpus as Nanos * 32 * crate::MS,
            rt_runtime_share: self.rt_runtime_share,
            load_tracking: self.load_tracking,
            next_buddy: self.next_buddy,
            smt: 1,
        }
    }
}
