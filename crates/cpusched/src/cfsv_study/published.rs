//! The published CFS-v figures (`reference/cfsv2014.toml`) and the
//! model's changes set against them.

use std::fmt::Write as _;

use super::{run, Case, StudyResult, StudySetup};
use crate::cfsv::CfsvOptions;
use crate::{FairKind, Nanos, MS};

/// The reference file, shipped inside the crate.
pub const REFERENCE_TOML: &str = include_str!("../../../../reference/cfsv2014.toml");

/// The slides' figures (changes are CFS-v against CFS, in %).
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub separate_io_pct: f64,
    pub separate_compute_pct: f64,
    pub separate_vm1_cpu_cfs: f64,
    pub separate_vm1_cpu_cfsv: f64,
    pub mixed_io_pct: f64,
    pub mixed_compute_pct: f64,
}

impl Published {
    /// Reads the figures from a reference file's text; the error names
    /// the missing key.
    pub fn from_toml(text: &str) -> Result<Published, String> {
        let t: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let get = |sec: &str, key: &str| -> Result<f64, String> {
            let v = t.get(sec).and_then(|s| s.get(key));
            v.and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
                .ok_or_else(|| format!("reference: [{sec}] {key} missing or not a number"))
        };
        Ok(Published {
            separate_io_pct: get("separate", "io_change_pct")?,
            separate_compute_pct: get("separate", "compute_change_pct")?,
            separate_vm1_cpu_cfs: get("separate", "vm1_cpu_pct_cfs")?,
            separate_vm1_cpu_cfsv: get("separate", "vm1_cpu_pct_cfsv")?,
            mixed_io_pct: get("mixed", "io_change_pct")?,
            mixed_compute_pct: get("mixed", "compute_change_pct")?,
        })
    }

    /// The shipped reference.
    pub fn shipped() -> Published {
        Self::from_toml(REFERENCE_TOML).expect("reference/cfsv2014.toml is valid")
    }
}

/// A change in percent.
pub fn change_pct(before: f64, after: f64) -> f64 {
    (after / before - 1.0) * 100.0
}

/// Both cases under `cfs` and `cfs-v`.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub separate: (StudyResult, StudyResult),
    pub mixed: (StudyResult, StudyResult),
    pub measure_ns: Nanos,
}

/// Runs the four cells, `measure_ns` each.
pub fn compare(opts: CfsvOptions, measure_ns: Nanos) -> Result<Comparison, String> {
    let cell = |case, host| {
        let mut s = StudySetup::new(case, host);
        s.measure_ns = measure_ns;
        run(&s)
    };
    let v = FairKind::CfsV(opts);
    Ok(Comparison {
        separate: (
            cell(Case::Separate, FairKind::Cfs)?,
            cell(Case::Separate, v)?,
        ),
        mixed: (cell(Case::Mixed, FairKind::Cfs)?, cell(Case::Mixed, v)?),
        measure_ns,
    })
}

impl Comparison {
    /// Separate: VM 1's I/O change, VM 2's hashing change (%).
    pub fn separate_changes(&self) -> (f64, f64) {
        let (a, b) = &self.separate;
        (
            change_pct(a.vms[0].iops, b.vms[0].iops),
            change_pct(a.vms[1].hash_mb_s, b.vms[1].hash_mb_s),
        )
    }

    /// Mixed: both VMs' I/O change, both VMs' hashing change (%).
    pub fn mixed_changes(&self) -> (f64, f64) {
        let (a, b) = &self.mixed;
        (
            change_pct(a.iops(), b.iops()),
            change_pct(a.hash_mb_s(), b.hash_mb_s()),
        )
    }

    /// The model's figures next to the published ones.
    pub fn table(&self, p: &Published) -> String {
        let (s_io, s_hash) = self.separate_changes();
        let (m_io, m_hash) = self.mixed_changes();
        let (a, b) = &self.separate;
        let mut out =
            String::from("CFS-v against CFS: the model and the slides (Shim and Lee 2014)\n");
        let _ = writeln!(
            out,
            "{:<9} {:<24} {:>16} {:>16}",
            "case", "figure", "model", "published"
        );
        let row = |out: &mut String, case: &str, what: &str, m: f64, p: f64| {
            let _ = writeln!(out, "{case:<9} {what:<24} {m:>+15.1}% {p:>+15.1}%");
        };
        row(
            &mut out,
            "separate",
            "VM 1 I/O rate",
            s_io,
            p.separate_io_pct,
        );
        row(
            &mut out,
            "separate",
            "VM 2 hashing",
            s_hash,
            p.separate_compute_pct,
        );
        let _ = writeln!(
            out,
            "{:<9} {:<24} {:>16} {:>16}",
            "separate",
            "VM 1 CPU use (%)",
            format!("{:.0} -> {:.0}", a.vms[0].cpu_pct, b.vms[0].cpu_pct),
            format!(
                "{:.0} -> {:.0}",
                p.separate_vm1_cpu_cfs, p.separate_vm1_cpu_cfsv
            )
        );
        row(&mut out, "mixed", "I/O rate", m_io, p.mixed_io_pct);
        row(&mut out, "mixed", "hashing", m_hash, p.mixed_compute_pct);
        let _ = writeln!(
            out,
            "(absolute, model: separate VM 1 {:.0} -> {:.0} IOPS, VM 2 {:.0} -> {:.0} MD5 MB/s; mixed {:.0} -> {:.0} IOPS, {:.0} -> {:.0} MD5 MB/s; {} ms per cell)",
            a.vms[0].iops,
            b.vms[0].iops,
            a.vms[1].hash_mb_s,
            b.vms[1].hash_mb_s,
            self.mixed.0.iops(),
            self.mixed.1.iops(),
            self.mixed.0.hash_mb_s(),
            self.mixed.1.hash_mb_s(),
            self.measure_ns / MS,
        );
        out
    }
}
