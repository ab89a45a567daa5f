//! Workload names: `none`, `Nr-seq`, `Nr-rand`, `NrMw-seq`, `NrMw-rand`, `Mw-seq`, `Mw-rand`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Access pattern of a background workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential readers/writers (S: `seq`).
    Seq,
    /// Random readers/writers (S: `rand`).
    Rand,
}

impl Pattern {
    /// The name used in workload names: `seq` or `rand`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`WorkloadSpec::parse`] accepts, for error messages.
pub const ACCEPTED_WORKLOADS: &str = "none, Nr-seq, Nr-rand, NrMw-seq, NrMw-rand, Mw-seq, Mw-rand \
(N, M >= 1 integers, e.g. 5r-seq, 2r2w-rand)";

/// A background workload: `readers` readers and `writers` writers, all with the same
/// access pattern. `none` is zero readers, zero writers and no pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WorkloadSpec {
    pub readers: u32,
    pub writers: u32,
    pub pattern: Option<Pattern>,
}

impl WorkloadSpec {
    /// The idle workload (`none`).
    pub const NONE: WorkloadSpec = WorkloadSpec {
        readers: 0,
        writers: 0,
        pattern: None,
    };

    /// Parses a workload name.
    ///
    /// Accepted: `none`, `Nr-seq`, `Nr-rand`, `NrMw-seq`, `NrMw-rand`, `Mw-seq`,
    /// `Mw-rand` with N, M >= 1. The S suite's explicit-zero spellings are accepted
    /// too (`5r0w-seq` = `5r-seq`, `0r2w-rand` = `2w-rand`, `0r0w-seq` = `none`), so
    /// that S result names can be read back.
    pub fn parse(s: &str) -> Result<WorkloadSpec, String> {
        let err = || format!("unknown workload \"{s}\"; accepted: {ACCEPTED_WORKLOADS}");
        if s == "none" {
            return Ok(WorkloadSpec::NONE);
        }
        let (counts, pat) = s.rsplit_once('-').ok_or_else(err)?;
        let pattern = match pat {
            "seq" => Pattern::Seq,
            "rand" => Pattern::Rand,
            _ => return Err(err()),
        };
        // counts: "Nr", "Mw" or "NrMw"
        let (readers, writers, explicit_both) = if let Some(rpos) = counts.find('r') {
            let r = parse_count(&counts[..rpos]).ok_or_else(err)?;
            let rest = &counts[rpos + 1..];
            if rest.is_empty() {
                (r, 0, false)
            } else {
                let w_str = rest.strip_suffix('w').ok_or_else(err)?;
                let w = parse_count(w_str).ok_or_else(err)?;
                (r, w, true)
            }
        } else {
            let w_str = counts.strip_suffix('w').ok_or_else(err)?;
            (0, parse_count(w_str).ok_or_else(err)?, false)
        };
        // Zero counts only in the explicit S form "NrMw".
        if !explicit_both && readers == 0 && writers == 0 {
            return Err(err());
        }
        if readers == 0 && writers == 0 {
            return Ok(WorkloadSpec::NONE);
        }
        Ok(WorkloadSpec {
            readers,
            writers,
            pattern: Some(pattern),
        })
    }

    /// Canonical tandem name: `none`, `5r-seq`, `2w-rand`, `2r2w-seq`.
    pub fn name(&self) -> String {
        match (self.readers, self.writers, self.pattern) {
            (0, 0, _) | (_, _, None) => "none".to_string(),
            (r, 0, Some(p)) => format!("{r}r-{p}"),
            (0, w, Some(p)) => format!("{w}w-{p}"),
            (r, w, Some(p)) => format!("{r}r{w}w-{p}"),
        }
    }

    /// The S suite's infix: always `NrMw-pattern`; `none` is `0r0w-seq` as in S.
    pub fn s_name(&self) -> String {
        let p = self.pattern.unwrap_or(Pattern::Seq);
        if self.is_none() {
            return "0r0w-seq".to_string();
        }
        format!("{}r{}w-{}", self.readers, self.writers, p)
    }

    /// True for the idle workload.
    pub fn is_none(&self) -> bool {
        (self.readers == 0 && self.writers == 0) || self.pattern.is_none()
    }

    /// Canonical name of a workload name, or the parse error.
    pub fn canonical(s: &str) -> Result<String, String> {
        WorkloadSpec::parse(s).map(|w| w.name())
    }
}

/// Parses a decimal count without sign or leading zeros ("0" itself is fine).
fn parse_count(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for WorkloadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

crate::vocab::serde_by_name!(WorkloadSpec);

impl FromStr for WorkloadSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkloadSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(r: u32, wr: u32, p: Pattern) -> WorkloadSpec {
        WorkloadSpec {
            readers: r,
            writers: wr,
            pattern: Some(p),
        }
    }

    #[test]
    fn parses_accepted_forms() {
        assert_eq!(WorkloadSpec::parse("none").unwrap(), WorkloadSpec::NONE);
        assert!(WorkloadSpec::parse("none").unwrap().is_none());
        assert_eq!(
            WorkloadSpec::parse("5r-seq").unwrap(),
            w(5, 0, Pattern::Seq)
        );
        assert_eq!(
            WorkloadSpec::parse("1r-rand").unwrap(),
            w(1, 0, Pattern::Rand)
        );
        assert_eq!(
            WorkloadSpec::parse("2r2w-seq").unwrap(),
            w(2, 2, Pattern::Seq)
        );
        assert_eq!(
            WorkloadSpec::parse("2r2w-rand").unwrap(),
            w(2, 2, Pattern::Rand)
        );
        assert_eq!(
            WorkloadSpec::parse("3w-seq").unwrap(),
            w(0, 3, Pattern::Seq)
        );
        assert_eq!(
            WorkloadSpec::parse("10r-seq").unwrap(),
            w(10, 0, Pattern::Seq)
        );
        // S spellings
        assert_eq!(
            WorkloadSpec::parse("5r0w-seq").unwrap(),
            w(5, 0, Pattern::Seq)
        );
        assert_eq!(
            WorkloadSpec::parse("0r2w-rand").unwrap(),
            w(0, 2, Pattern::Rand)
        );
        assert_eq!(WorkloadSpec::parse("0r0w-seq").unwrap(), WorkloadSpec::NONE);
    }

    #[test]
    fn names_round_trip() {
        for s in [
            "none",
            "5r-seq",
            "1r-rand",
            "2r2w-seq",
            "2r2w-rand",
            "3w-seq",
            "7w-rand",
        ] {
            let spec = WorkloadSpec::parse(s).unwrap();
            assert_eq!(spec.name(), s);
            assert_eq!(spec.to_string(), s);
            assert_eq!(WorkloadSpec::parse(&spec.name()).unwrap(), spec);
            assert_eq!(WorkloadSpec::parse(&spec.s_name()).unwrap(), spec);
        }
        assert_eq!(WorkloadSpec::canonical("5r0w-seq").unwrap(), "5r-seq");
    }

    #[test]
    fn s_names() {
        assert_eq!(WorkloadSpec::parse("5r-seq").unwrap().s_name(), "5r0w-seq");
        assert_eq!(
            WorkloadSpec::parse("2r2w-rand").unwrap().s_name(),
            "2r2w-rand"
        );
        assert_eq!(WorkloadSpec::parse("3w-seq").unwrap().s_name(), "0r3w-seq");
        assert_eq!(WorkloadSpec::NONE.s_name(), "0r0w-seq");
    }

    #[test]
    fn rejects_bad_names() {
        for s in [
            "",
            "None",
            "5r",
            "5rseq",
            "5r-",
            "-seq",
            "r-seq",
            "w-seq",
            "5r-sequential",
            "0r-seq",
            "0w-seq",
            "05r-seq",
            "5r2-seq",
            "5w2r-seq",
            "+5r-seq",
            "-5r-seq",
            "5r 2w-seq",
            "99999999999r-seq",
            "2r2w-raw_seq",
            "5R-seq",
        ] {
            let e = WorkloadSpec::parse(s).unwrap_err();
            assert!(e.contains(&format!("\"{s}\"")), "{e}");
            assert!(e.contains("Nr-seq") && e.contains("NrMw-rand"), "{e}");
        }
    }
}
