//! The `other_vms` matrix key: which VMs run besides VM 1 (the VM that runs the app and
//! the guest workload).
//!
//! A value is `none` (only VM 1) or a comma-separated list of entries for VMs 2..N, in
//! VM order. Each entry is a role, optionally prefixed by a repeat count `Kx`:
//! `5r-seq`, `3x5r-seq`, `1r-seq,2x5r-rand`. Roles:
//! - a background workload (a [`WorkloadSpec`] name other than `none`);
//! - `greedy-<workload>`: the same workload in a guest that misbehaves, asking its
//!   host for help all the time (coordinated scenarios);
//! - `app`: the VM starts the cell's app at the same moments as VM 1, and runs nothing
//!   else.
//!
//! New roles are new [`OtherVm`] variants parsed in [`OtherVm::parse`], the one place
//! that reads an entry.

use std::fmt;

use crate::workload::WorkloadSpec;

/// The value meaning "no VM besides VM 1".
pub const NO_OTHER_VMS: &str = "none";

/// At most this many VMs besides VM 1. Guards runners against values such as
/// `100000x5r-seq` that would exhaust memory long before they ran.
pub const MAX_OTHER_VMS: usize = 64;

/// What [`OtherVms::parse`] accepts, for error messages.
pub const ACCEPTED_OTHER_VMS: &str = "\"none\" (only VM 1), or a comma-separated list of \
roles for VMs 2..N, each optionally prefixed by a repeat count Kx (K >= 1), e.g. \
\"5r-seq\", \"3x5r-seq\", \"1r-seq,2x5r-rand\", \"greedy-5r-seq,2x5r-seq\", \"app,2x5r-seq\"; \
roles: a workload (Nr-seq, Nr-rand, NrMw-seq, NrMw-rand, Mw-seq, Mw-rand), greedy-<workload> \
(a guest asking for help all the time), app (starts the app with VM 1)";

/// What one VM besides VM 1 does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OtherVm {
    /// Runs a background workload (never [`WorkloadSpec::NONE`]) under the guest
    /// scheduler of the cell.
    Workload(WorkloadSpec),
    /// Runs a background workload in a guest that asks its host for help all the
    /// time, whatever its elevator says.
    Greedy(WorkloadSpec),
    /// Starts the cell's app at the same moments as VM 1 (and runs no workload).
    App,
}

/// Prefix of the greedy role.
const GREEDY_PREFIX: &str = "greedy-";
/// The app role.
const APP_ROLE: &str = "app";

impl OtherVm {
    /// Parses one entry without its repeat count, e.g. `5r-seq` or `5r0w-seq`.
    pub fn parse(s: &str) -> Result<OtherVm, String> {
        if s == APP_ROLE {
            return Ok(OtherVm::App);
        }
        let (greedy, s) = match s.strip_prefix(GREEDY_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let w = WorkloadSpec::parse(s)?;
        if w.is_none() {
            return Err(format!(
                "\"{s}\": a VM besides VM 1 needs a workload (an idle VM does no I/O); \
                 \"none\" alone means no other VMs"
            ));
        }
        Ok(if greedy {
            OtherVm::Greedy(w)
        } else {
            OtherVm::Workload(w)
        })
    }

    /// Canonical name of the entry (`5r-seq`).
    pub fn name(&self) -> String {
        match self {
            OtherVm::Workload(w) => w.name(),
            OtherVm::Greedy(w) => format!("{GREEDY_PREFIX}{}", w.name()),
            OtherVm::App => APP_ROLE.to_string(),
        }
    }
}

impl fmt::Display for OtherVm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The VMs besides VM 1, one entry per VM, in VM order (VM 2 first).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct OtherVms {
    pub vms: Vec<OtherVm>,
}

impl OtherVms {
    /// No VM besides VM 1.
    pub fn none() -> OtherVms {
        OtherVms { vms: Vec::new() }
    }

    /// Parses an `other_vms` value (see the module docs). Spaces around entries are
    /// ignored. Errors name the value, the bad entry and the accepted forms, without the
    /// key (callers add it: the same value comes from scenarios, filters and CSV files).
    pub fn parse(s: &str) -> Result<OtherVms, String> {
        let bad = |why: String| {
            format!("invalid other VMs \"{s}\": {why}; accepted: {ACCEPTED_OTHER_VMS}")
        };
        if s.trim() == NO_OTHER_VMS {
            return Ok(OtherVms::none());
        }
        let mut vms = Vec::new();
        for entry in s.split(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(bad("empty entry".to_string()));
            }
            // Workload names never contain 'x', so a leading "<digits>x" is a count.
            let (count, role) = match entry.split_once('x') {
                Some((k, rest)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => {
                    let k = parse_repeat(k).ok_or_else(|| {
                        bad(format!(
                            "repeat count \"{k}x\" in \"{entry}\" must be an integer from 1 \
                             to {MAX_OTHER_VMS} without leading zeros"
                        ))
                    })?;
                    (k, rest)
                }
                _ => (1, entry),
            };
            let vm = OtherVm::parse(role).map_err(bad)?;
            if vms.len() + count > MAX_OTHER_VMS {
                return Err(bad(format!("more than {MAX_OTHER_VMS} VMs besides VM 1")));
            }
            vms.resize(vms.len() + count, vm);
        }
        Ok(OtherVms { vms })
    }

    /// The canonical form of an `other_vms` value, or the parse error.
    pub fn canonical(s: &str) -> Result<String, String> {
        OtherVms::parse(s).map(|v| v.name())
    }

    /// Canonical name: `none`, or runs of equal adjacent VMs as `Kx<entry>` (`K` > 1)
    /// or `<entry>` joined by commas, e.g. `1r-seq,2x5r-rand`. Equal lists of VMs get
    /// the same name however they were written (`5r-seq,5r0w-seq` is `2x5r-seq`), so
    /// seeds, file names and filters agree.
    pub fn name(&self) -> String {
        if self.vms.is_empty() {
            return NO_OTHER_VMS.to_string();
        }
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.vms.len() {
            let run = self.vms[i..]
                .iter()
                .take_while(|v| **v == self.vms[i])
                .count();
            if run > 1 {
                parts.push(format!("{run}x{}", self.vms[i]));
            } else {
                parts.push(self.vms[i].name());
            }
            i += run;
        }
        parts.join(",")
    }

    /// Number of VMs besides VM 1.
    pub fn count(&self) -> usize {
        self.vms.len()
    }

    /// True when only VM 1 runs.
    pub fn is_none(&self) -> bool {
        self.vms.is_empty()
    }
}

impl std::str::FromStr for OtherVms {
    type Err = String;
    fn from_str(s: &str) -> Result<OtherVms, String> {
        OtherVms::parse(s)
    }
}

crate::vocab::serde_by_name!(OtherVms);

impl fmt::Display for OtherVms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A repeat count: decimal, no leading zeros, 1..=MAX_OTHER_VMS.
fn parse_repeat(s: &str) -> Option<usize> {
    if s.starts_with('0') || s.len() > 3 {
        return None;
    }
    let k: usize = s.parse().ok()?;
    (1..=MAX_OTHER_VMS).contains(&k).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        OtherVms::canonical(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn accepted_forms_and_canonical_names() {
        assert_eq!(canon("none"), "none");
        assert_eq!(canon("5r-seq"), "5r-seq");
        assert_eq!(canon("5r0w-seq"), "5r-seq");
        assert_eq!(canon("1x5r-seq"), "5r-seq");
        assert_eq!(canon("3x5r-seq"), "3x5r-seq");
        assert_eq!(canon("3x5r0w-seq"), "3x5r-seq");
        assert_eq!(canon("1r-seq,2x5r-rand"), "1r-seq,2x5r-rand");
        assert_eq!(canon(" 1r-seq , 2x5r-rand "), "1r-seq,2x5r-rand");
        assert_eq!(canon("5r-seq,5r0w-seq"), "2x5r-seq");
        assert_eq!(canon("2x5r-seq,5r-seq,1r-seq"), "3x5r-seq,1r-seq");
        assert_eq!(canon("1r-seq,5r-seq,1r-seq"), "1r-seq,5r-seq,1r-seq");
        assert_eq!(canon("2r2w-rand,3w-seq"), "2r2w-rand,3w-seq");
        assert_eq!(canon("64x1r-seq"), "64x1r-seq");
    }

    #[test]
    fn counts_and_order() {
        assert_eq!(OtherVms::parse("none").unwrap().count(), 0);
        assert!(OtherVms::parse("none").unwrap().is_none());
        let v = OtherVms::parse("1r-seq,2x5r-rand").unwrap();
        assert_eq!(v.count(), 3);
        let w = |s: &str| OtherVm::Workload(WorkloadSpec::parse(s).unwrap());
        assert_eq!(v.vms, vec![w("1r-seq"), w("5r-rand"), w("5r-rand")]);
        assert_eq!(v.to_string(), "1r-seq,2x5r-rand");
        // the canonical name parses back to the same VMs
        assert_eq!(OtherVms::parse(&v.name()).unwrap(), v);
    }

    #[test]
    fn rejects_bad_values() {
        for (s, why) in [
            ("", "empty entry"),
            ("5r-seq,", "empty entry"),
            (",5r-seq", "empty entry"),
            ("5r-seq,,1r-seq", "empty entry"),
            ("5rseq", "unknown workload \"5rseq\""),
            ("3x", "unknown workload \"\""),
            ("x5r-seq", "unknown workload \"x5r-seq\""),
            ("0x5r-seq", "repeat count \"0x\""),
            ("03x5r-seq", "repeat count \"03x\""),
            ("65x5r-seq", "repeat count \"65x\""),
            ("99999999999999999999x5r-seq", "repeat count"),
            ("3X5r-seq", "unknown workload \"3X5r-seq\""),
            ("2x3x5r-seq", "unknown workload \"3x5r-seq\""),
            ("none,5r-seq", "needs a workload"),
            ("2xnone", "needs a workload"),
            ("0r0w-seq", "needs a workload"),
            ("None", "unknown workload \"None\""),
            ("60x1r-seq,5x1r-rand", "more than 64 VMs"),
        ] {
            let e = OtherVms::parse(s).unwrap_err();
            assert!(e.contains(&format!("\"{s}\"")), "{s}: {e}");
            assert!(e.contains(why), "{s}: {e}");
            assert!(e.contains("accepted: \"none\""), "{s}: {e}");
            assert!(e.contains("3x5r-seq"), "{s}: {e}");
        }
    }
}
