//! Application start-up I/O traces (`apps/<name>.trace`).
//!
//! A trace lists the files an application reads while it starts, the byte
//! ranges the page cache had to fill from the disk, in order, and the CPU
//! time between them. The simulator replays it on its device model and the
//! real runner replays it on a real disk, so both measure the same start-up.
//! The format is documented in `apps/README.md`:
//!
//! ```text
//! # tandem app trace v1
//! app xterm
//! command xterm /bin/true
//! recorded 2026-11-21 <how>
//! file <id> <size_bytes> <path>
//! read <file_id> <offset_bytes> <len_bytes> <think_us>
//! end <think_us>            (optional: CPU time after the last read)
//! ```

use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub struct TraceFile {
    pub path: String,
    pub size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceRead {
    /// Index into [`AppTrace::files`].
    pub file: usize,
    pub offset: u64,
    pub len: u64,
    /// CPU time before this read is issued, after the previous one
    /// completed.
    pub think_ns: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AppTrace {
    pub name: String,
    pub command: String,
    pub recorded: String,
    pub files: Vec<TraceFile>,
    pub reads: Vec<TraceRead>,
    /// CPU time after the last read until the application is up.
    pub tail_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

/// App presets shipped in the project: name and trace text.
pub const PRESETS: &[(&str, &str)] = &[
    ("bash", include_str!("../../../apps/bash.trace")),
    ("xterm", include_str!("../../../apps/xterm.trace")),
    ("konsole", include_str!("../../../apps/konsole.trace")),
];

/// Names of the app presets.
pub fn preset_names() -> Vec<String> {
    PRESETS.iter().map(|(n, _)| n.to_string()).collect()
}

/// Parses a shipped preset.
pub fn preset(name: &str) -> Option<AppTrace> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| AppTrace::parse(text).expect("shipped traces parse"))
}

impl AppTrace {
    pub fn parse(text: &str) -> Result<AppTrace, TraceError> {
        let mut t = AppTrace {
            name: String::new(),
            command: String::new(),
            recorded: String::new(),
            files: Vec::new(),
            reads: Vec::new(),
            tail_ns: 0,
        };
        let mut seen_header = false;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let err = |m: String| TraceError {
                line: line_no,
                message: m,
            };
            let line = raw.split('#').next().unwrap_or("").trim();
            if raw.trim_start().starts_with("# tandem app trace v") {
                if !raw.contains("v1") {
                    return Err(err(format!("unsupported trace version: {raw}")));
                }
                seen_header = true;
                continue;
            }
            if line.is_empty() {
                continue;
            }
            let (kw, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            let num = |s: Option<&str>, what: &str| -> Result<u64, TraceError> {
                s.ok_or_else(|| err(format!("missing {what}")))?
                    .parse::<u64>()
                    .map_err(|_| err(format!("{what} is not a non-negative integer")))
            };
            match kw {
                "app" => t.name = rest.to_string(),
                "command" => t.command = rest.to_string(),
                "recorded" => t.recorded = rest.to_string(),
                "file" => {
                    let mut it = rest.splitn(3, char::is_whitespace);
                    let id = num(it.next(), "file id")? as usize;
                    let size = num(it.next(), "file size")?;
                    let path = it.next().unwrap_or("").trim();
                    if path.is_empty() {
                        return Err(err("missing file path".into()));
                    }
                    if id != t.files.len() {
                        return Err(err(format!(
                            "file ids must be 0, 1, 2, ... in order; expected {}, got {id}",
                            t.files.len()
                        )));
                    }
                    t.files.push(TraceFile {
                        path: path.to_string(),
                        size,
                    });
                }
                "read" => {
                    let mut it = rest.split_whitespace();
                    let file = num(it.next(), "file id")? as usize;
                    let offset = num(it.next(), "offset")?;
                    let len = num(it.next(), "length")?;
                    let think_us = num(it.next(), "think time")?;
                    if file >= t.files.len() {
                        return Err(err(format!("read of undeclared file {file}")));
                    }
                    if len == 0 {
                        return Err(err("read of length 0".into()));
                    }
                    t.reads.push(TraceRead {
                        file,
                        offset,
                        len,
                        think_ns: think_us * 1000,
                    });
                }
                "end" => t.tail_ns = num(Some(rest), "end think time")? * 1000,
                other => return Err(err(format!("unknown keyword \"{other}\""))),
            }
        }
        if !seen_header {
            return Err(TraceError {
                line: 1,
                message: "missing header \"# tandem app trace v1\"".into(),
            });
        }
        if t.name.is_empty() {
            return Err(TraceError {
                line: 1,
                message: "missing \"app <name>\" line".into(),
            });
        }
        Ok(t)
    }

    /// Bytes read from disk by a cold start.
    pub fn total_bytes(&self) -> u64 {
        self.reads.iter().map(|r| r.len).sum()
    }

    /// CPU time of the whole start.
    pub fn total_think_ns(&self) -> u64 {
        self.reads.iter().map(|r| r.think_ns).sum::<u64>() + self.tail_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let t = AppTrace::parse(
            "# tandem app trace v1\napp x\ncommand x\nfile 0 8192 /usr/bin/x\nread 0 0 4096 10\nend 5\n",
        )
        .unwrap();
        assert_eq!(t.reads[0].think_ns, 10_000);
        assert_eq!(t.tail_ns, 5_000);
        assert_eq!(t.total_bytes(), 4096);
        let e = AppTrace::parse("# tandem app trace v1\napp x\nread 3 0 4096 1\n").unwrap_err();
        assert!(e.to_string().contains("undeclared file 3"), "{e}");
        let e = AppTrace::parse("app x\n").unwrap_err();
        assert!(e.to_string().contains("header"), "{e}");
    }

    #[test]
    fn shipped_presets_parse() {
        for (name, _) in PRESETS {
            let t = preset(name).unwrap();
            assert!(!t.reads.is_empty(), "{name} has reads");
        }
    }
}
