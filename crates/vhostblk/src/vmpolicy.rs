//! Per-VM policy beyond the class mapping ([`crate::classmap`]): how much of
//! the host disk this VM gets against other VMs, and how much RT service it
//! may take.
//!
//! - **Weight.** The backend (one process per VM) joins a cgroup v1 blkio
//!   group of the VM's own (`--cgroup DIR`, made if missing) and sets its BFQ
//!   weight (`--weight N`, `blkio.bfq.weight`): BFQ shares the disk between
//!   groups by weight (`bfq_entity` weights of the groups' entities,
//!   block/bfq-cgroup.c), so several VMs, each behind its own backend, share
//!   in proportion to their weights whatever their guests send.
//! - **RT outside the group.** BFQ schedules a child group as one
//!   best-effort entity: an RT queue inside it does not beat a host process
//!   in the root group (the same finding as hostd's `--boost-cgroup`, see
//!   `agent::actuator::CgroupMoveActuator`). So the submitter thread that
//!   issues the RT class leaves the VM's group for the hierarchy's root when
//!   it starts (cgroup v1 moves single threads through `tasks`); the RT
//!   budget bounds what it takes there.
//! - **A level of its own.** Without cgroups, `--be-level L` issues the
//!   VM's requests that carry no class at best-effort level `L`: BFQ weighs
//!   a BE queue by its level (`bfq_ioprio_to_weight()`:
//!   `(IOPRIO_NR_LEVELS - level) * BFQ_WEIGHT_CONVERSION_COEFF`, i.e. 80 for
//!   level 0 down to 10 for level 7), so VMs at different levels share in
//!   that ratio.
//! - **RT budget.** `--rt-budget F` and `--rt-budget-window-s S`: the
//!   `policy` crate's [`policy::PolicyConfig`] budget (the one hostd uses),
//!   at most `F` of any `S`-second window with an RT request in flight.

use std::path::{Path, PathBuf};

use policy::PolicyConfig;

use crate::ioprio::{Class, Ioprio, LEVEL_MASK};

/// BFQ's weight range (`BFQ_MIN_WEIGHT`, `BFQ_MAX_WEIGHT` in
/// block/bfq-iosched.h).
pub const WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 1..=1000;

/// What the VM's policy asks beyond `--allow-rt`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmPolicy {
    /// The blkio group the backend joins (`--cgroup`).
    pub cgroup: Option<PathBuf>,
    /// The group's BFQ weight (`--weight`; needs a group).
    pub weight: Option<u32>,
    /// The best-effort level for requests without a class (`--be-level`).
    pub be_level: Option<u8>,
    /// The share of each window the VM may have RT requests in flight
    /// (`--rt-budget`; default: the policy crate's).
    pub rt_budget: Option<f64>,
    /// The budget's window in seconds (`--rt-budget-window-s`).
    pub rt_budget_window_s: Option<f64>,
}

impl VmPolicy {
    /// The RT budget as the policy crate's configuration, checked by it.
    pub fn policy_config(&self) -> Result<PolicyConfig, String> {
        let mut c = PolicyConfig::default();
        if let Some(f) = self.rt_budget {
            c.budget_fraction = f;
        }
        if let Some(s) = self.rt_budget_window_s {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!("--rt-budget-window-s {s}: must be above 0"));
            }
            c.budget_window_ns = (s * 1e9) as policy::Nanos;
        }
        c.validate().map_err(|e| {
            format!(
                "--rt-budget {} / --rt-budget-window-s {}: {e}",
                c.budget_fraction,
                c.budget_window_ns as f64 / 1e9
            )
        })?;
        Ok(c)
    }

    /// Checks every option, before anything is made.
    pub fn validate(&self) -> Result<(), String> {
        self.policy_config()?;
        if let Some(w) = self.weight {
            if !WEIGHT_RANGE.contains(&w) {
                return Err(format!(
                    "--weight {w}: BFQ takes {} to {}",
                    WEIGHT_RANGE.start(),
                    WEIGHT_RANGE.end()
                ));
            }
            if self.cgroup.is_none() {
                return Err("--weight needs --cgroup DIR (the VM's blkio group)".into());
            }
        }
        if let Some(l) = self.be_level {
            if u32::from(l) > LEVEL_MASK {
                return Err(format!("--be-level {l}: 0 (highest) to 7"));
            }
        }
        if let Some(d) = &self.cgroup {
            group_root(d)?;
        }
        Ok(())
    }

    /// The host priority of a request that carries no class.
    pub fn classless(&self) -> Ioprio {
        self.be_level
            .map_or(Ioprio::NONE, |l| Ioprio::new(Class::Be, l))
    }
}

/// The blkio hierarchy's root `dir` must be under: a child of the cgroup
/// v1 blkio mount.
fn group_root(dir: &Path) -> Result<PathBuf, String> {
    let root = agent::sys::cgroup_v1_mount("blkio").ok_or_else(|| {
        "--cgroup: no cgroup v1 blkio hierarchy is mounted (BFQ's group weights are read there)"
            .to_string()
    })?;
    if dir.parent() != Some(root.as_path()) {
        return Err(format!(
            "--cgroup {}: must be a group directly under {}",
            dir.display(),
            root.display()
        ));
    }
    Ok(root)
}

/// The VM's blkio group, joined by the whole backend process; left (and
/// removed, when the backend made it) on drop.
#[derive(Debug)]
pub struct VmGroup {
    pub dir: PathBuf,
    pub root: PathBuf,
    made: bool,
}

impl VmGroup {
    /// Makes `dir` if missing, sets its weight, and moves this process (all
    /// its threads, and the threads it starts later) into it.
    pub fn join(dir: &Path, weight: Option<u32>) -> Result<VmGroup, String> {
        let root = group_root(dir)?;
        let made = match std::fs::create_dir(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(format!("--cgroup {}: {e}", dir.display())),
        };
        let g = VmGroup {
            dir: dir.to_path_buf(),
            root,
            made,
        };
        if let Some(w) = weight {
            let file = agent::actuator::bfq_weight_file(dir).ok_or_else(|| {
                format!(
                    "--weight: {} has no blkio.bfq.weight (is BFQ built into this kernel?)",
                    dir.display()
                )
            })?;
            std::fs::write(&file, format!("{w}\n"))
                .map_err(|e| format!("{}: {e}", file.display()))?;
        }
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, std::process::id().to_string())
            .map_err(|e| format!("{}: {e}", procs.display()))?;
        Ok(g)
    }

    /// Moves the calling thread to the hierarchy's root (cgroup v1 moves a
    /// single thread when its id, or 0 for the caller, goes to `tasks`).
    pub fn leave_for_root(root: &Path) -> Result<(), String> {
        let tasks = root.join("tasks");
        std::fs::write(&tasks, "0").map_err(|e| format!("{}: {e}", tasks.display()))
    }

    /// What to run at the start of each submitter thread: the RT one
    /// leaves the group for the root.
    pub fn placement(&self) -> impl Fn(Ioprio) -> Result<(), String> + Send + Sync + 'static {
        let root = self.root.clone();
        move |prio| {
            if prio.class == Class::Rt {
                VmGroup::leave_for_root(&root)
            } else {
                Ok(())
            }
        }
    }
}

impl Drop for VmGroup {
    /// Moves the process back to the root, then removes the group if it was
    /// made here (a group the caller made is the caller's to remove).
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        if self.made {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_policies_are_refused_with_the_option_named() {
        let ok = VmPolicy::default();
        assert!(ok.validate().is_ok());
        let e = |p: VmPolicy| p.validate().unwrap_err();
        assert!(e(VmPolicy {
            rt_budget: Some(1.5),
            ..ok.clone()
        })
        .contains("--rt-budget 1.5"));
        assert!(e(VmPolicy {
            rt_budget: Some(0.0),
            ..ok.clone()
        })
        .contains("(0, 1]"));
        assert!(e(VmPolicy {
            rt_budget_window_s: Some(0.0),
            ..ok.clone()
        })
        .contains("above 0"));
        assert!(e(VmPolicy {
            weight: Some(0),
            cgroup: Some("/x/y".into()),
            ..ok.clone()
        })
        .contains("1 to 1000"));
        assert!(e(VmPolicy {
            weight: Some(200),
            ..ok.clone()
        })
        .contains("needs --cgroup"));
        assert!(e(VmPolicy {
            be_level: Some(8),
            ..ok.clone()
        })
        .contains("0 (highest) to 7"));
        assert!(e(VmPolicy {
            cgroup: Some("/tmp/not-a-group".into()),
            ..ok.clone()
        })
        .contains("--cgroup"));
    }

    #[test]
    fn the_budget_options_size_the_policy_crates_budget() {
        let p = VmPolicy {
            rt_budget: Some(0.25),
            rt_budget_window_s: Some(8.0),
            ..VmPolicy::default()
        };
        let c = p.policy_config().unwrap();
        assert_eq!(c.budget_window_ns, 8 * policy::SEC);
        assert_eq!(c.budget_fraction, 0.25);
        let d = VmPolicy::default().policy_config().unwrap();
        assert_eq!(d.budget_fraction, PolicyConfig::default().budget_fraction);
    }

    #[test]
    fn classless_requests_take_the_vms_own_level_when_it_has_one() {
        assert_eq!(VmPolicy::default().classless(), Ioprio::NONE);
        let p = VmPolicy {
            be_level: Some(6),
            ..VmPolicy::default()
        };
        assert_eq!(p.classless(), Ioprio::new(Class::Be, 6));
    }

    #[test]
    #[ignore = "needs root: a cgroup v1 blkio group"]
    fn the_rt_submitter_leaves_the_vms_group_for_the_root_and_the_others_stay() {
        let root = agent::sys::cgroup_v1_mount("blkio").expect("a cgroup v1 blkio hierarchy");
        let dir = root.join(format!("tandem-vmpolicy-test-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let g = VmGroup {
            dir: dir.clone(),
            root: root.clone(),
            made: false,
        };
        let place = g.placement();
        // The calling thread's blkio group (/proc/thread-self/cgroup).
        let here = || {
            std::fs::read_to_string("/proc/thread-self/cgroup")
                .unwrap()
                .lines()
                .find_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, c, p) = (f.next()?, f.next()?, f.next()?);
                    c.split(',').any(|x| x == "blkio").then(|| p.to_string())
                })
                .unwrap()
        };
        let name = format!("/{}", dir.file_name().unwrap().to_string_lossy());
        let seen = std::thread::scope(|s| {
            s.spawn(|| {
                // This thread alone joins the group (v1: `tasks` takes a thread).
                std::fs::write(dir.join("tasks"), "0").unwrap();
                let joined = here();
                place(Ioprio::new(Class::Be, 0)).unwrap();
                let after_be = here();
                place(Ioprio::new(Class::Rt, 0)).unwrap();
                (joined, after_be, here())
            })
            .join()
            .unwrap()
        });
        drop(g);
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(seen.0, name);
        assert_eq!(seen.1, name);
        assert_eq!(seen.2, "/");
    }
}
