//! Where a run's results come from: the tandem build, the command line, when it ran,
//! on which host, and whether it finished. Written into `results.json` (under
//! `meta.extra.provenance`) so that a result can be traced back to what made it.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::result::RunMeta;

/// The key of [`Provenance`] in [`RunMeta::extra`].
pub const PROVENANCE_KEY: &str = "provenance";

/// The key of the options that can change a result in [`RunMeta::extra`].
pub const OPTIONS_KEY: &str = "options";

/// The machine a run ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU model as /proc/cpuinfo names it.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cores: usize,
}

impl Host {
    /// Reads the kernel release and CPU model from /proc; `unknown` where it cannot.
    pub fn detect() -> Host {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| cpu_model(&text))
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Host {
            kernel,
            cpu_model,
            cores,
        }
    }
}

/// The CPU model in /proc/cpuinfo text: `model name` on x86, else `Hardware` or
/// `cpu model` (ARM and MIPS kernels name it so).
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Hardware", "cpu model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// UTC time in RFC 3339, to the second, e.g. `2026-11-25T22:30:00Z`.
pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The record of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub tandem_version: String,
    /// `git rev-parse HEAD` of the build (with `-dirty` for uncommitted changes), or
    /// `unknown` when built outside a git checkout.
    pub git_commit: String,
    /// The command line, one argument per element.
    pub command_line: Vec<String>,
    /// When the run started, UTC, RFC 3339.
    pub started: String,
    /// When the run ended (or was interrupted), UTC, RFC 3339; `None` while running.
    pub finished: Option<String>,
    pub host: Host,
    /// False while the run goes on, or when it was interrupted: then only the
    /// cells in the file were measured.
    pub complete: bool,
    /// Cells the run set out to measure.
    pub cells_planned: usize,
    /// Cells measured (those in the file).
    pub cells_done: usize,
    /// The signal that stopped the run, if one did (`SIGINT`, `SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
}

impl Provenance {
    /// A run starting now on this host, planning `cells_planned` cells.
    pub fn start(
        tandem_version: &str,
        git_commit: &str,
        command_line: Vec<String>,
        cells_planned: usize,
    ) -> Provenance {
        Provenance {
            tandem_version: tandem_version.into(),
            git_commit: git_commit.into(),
            command_line,
            started: utc_now(),
            finished: None,
            host: Host::detect(),
            complete: false,
            cells_planned,
            cells_done: 0,
            interrupted_by: None,
        }
    }
}

impl RunMeta {
    /// Records `p` in `extra` (replacing an earlier record).
    pub fn set_provenance(&mut self, p: &Provenance) {
        let v = serde_json::to_value(p).expect("provenance serializes");
        self.extra.insert(PROVENANCE_KEY.into(), v);
    }

    /// The provenance recorded by [`RunMeta::set_provenance`], if any.
    pub fn provenance(&self) -> Option<Provenance> {
        serde_json::from_value(self.extra.get(PROVENANCE_KEY)?.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_from_x86_and_arm_text() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 48.00\nHardware\t: BCM2835\n";
        assert_eq!(cpu_model(arm).as_deref(), Some("BCM2835"));
        assert_eq!(cpu_model("processor: 0\n"), None);
    }

    #[test]
    fn round_trips_through_meta() {
        let mut p = Provenance::start("0.1.0", "abc", vec!["tandem".into()], 4);
        assert!(
            p.started.ends_with('Z') && p.started.contains('T'),
            "{}",
            p.started
        );
        assert!(p.host.cores >= 1);
        p.cells_done = 2;
        let mut meta = RunMeta::default();
        meta.set_provenance(&p);
        assert_eq!(meta.provenance(), Some(p));
    }
}
