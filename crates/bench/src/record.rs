//! `tandem bench record-trace -- CMD`: records a command's cold start-up I/O as a
//! `tandem app trace v1`, the format the simulator's app presets and the real runner's
//! replay use (`apps/README.md`).
//!
//! The recorder is `tools/record-app-trace/record-app-trace.py` (ftrace events,
//! FIEMAP placement, think times from the scheduler events; python3 standard library
//! only). It is embedded in the binary, so the command works from any directory, and
//! run with its scratch files in a temporary directory that is removed afterwards.
//! The recorder itself restores the tracefs state and the disk's read-ahead.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

/// The recorder, as shipped in the repository.
const RECORDER: &str = include_str!("../../../tools/record-app-trace/record-app-trace.py");

/// What to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Name of the app (the trace's file name and `app` line).
    pub name: String,
    /// The command line to start.
    pub command: Vec<String>,
    /// Traced cold runs; the most typical one becomes `<out>/<name>.trace`.
    pub runs: u32,
    /// Where the traces go.
    pub out: PathBuf,
    /// The command needs an X display (an Xvfb is started and stopped).
    pub needs_x: bool,
    /// How long to wait, at most, for the machine to be quiet before each run.
    pub quiet_timeout_s: f64,
}

/// Records the trace; returns the path of `<out>/<name>.trace`.
pub fn record_trace(o: &RecordOptions) -> Result<PathBuf> {
    if o.command.is_empty() {
        return Err(Error::Usage(
            "record-trace: no command given; usage: tandem bench record-trace [--name NAME] -- CMD [ARGS...]".into(),
        ));
    }
    if o.name.is_empty()
        || !o
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Error::Usage(format!(
            "record-trace: --name {:?}: use letters, digits, '-', '_' and '.'",
            o.name
        )));
    }
    if o.runs == 0 {
        return Err(Error::Usage(
            "record-trace: --runs must be at least 1".into(),
        ));
    }
    devemu::need_root(
        "tandem bench record-trace",
        "it traces block I/O with ftrace and drops the page cache",
    )?;
    fs::create_dir_all(&o.out)
        .map_err(|e| Error::Run(format!("creating {}: {e}", o.out.display())))?;
    let scratch = Scratch::new()?;
    let script = scratch.0.join("record-app-trace.py");
    fs::write(&script, RECORDER)
        .map_err(|e| Error::Run(format!("writing {}: {e}", script.display())))?;
    let command_line = o
        .command
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .args(["--app", &o.name, "--command", &command_line])
        .args(["--runs", &o.runs.to_string()])
        .args(["--timing-runs", "1"])
        .args(["--quiet-timeout", &o.quiet_timeout_s.to_string()])
        .arg("--out")
        .arg(&o.out)
        .arg("--raw")
        .arg(scratch.0.join("raw"))
        .stdin(Stdio::null());
    if o.needs_x {
        cmd.arg("--needs-x");
    } else {
        cmd.arg("--no-xserver");
    }
    let status = cmd.status().map_err(|e| {
        Error::Run(format!(
            "running python3 (the trace recorder needs it; apt-get install python3): {e}"
        ))
    })?;
    if !status.success() {
        return Err(Error::Run(format!(
            "the trace recorder failed ({status}); see its messages above"
        )));
    }
    let trace = o.out.join(format!("{}.trace", o.name));
    if !trace.exists() {
        return Err(Error::Run(format!(
            "the trace recorder wrote no {}",
            trace.display()
        )));
    }
    Ok(trace)
}

/// Quotes an argument for the recorder's shell (`bash -c`).
fn shell_quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// A temporary directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        let base = std::env::temp_dir().join(format!("tandem-record-{}", std::process::id()));
        fs::create_dir_all(&base)
            .map_err(|e| Error::Run(format!("creating {}: {e}", base.display())))?;
        Ok(Scratch(base))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(Path::new(&self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("/bin/true"), "/bin/true");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn bad_options_are_usage_errors() {
        let o = RecordOptions {
            name: "x y".into(),
            command: vec!["/bin/true".into()],
            runs: 1,
            out: PathBuf::from("/nonexistent"),
            needs_x: false,
            quiet_timeout_s: 1.0,
        };
        assert!(matches!(record_trace(&o), Err(Error::Usage(_))));
        let o = RecordOptions {
            command: vec![],
            name: "x".into(),
            ..o
        };
        assert!(matches!(record_trace(&o), Err(Error::Usage(_))));
    }
}
