//! The daemons' logs (`tandem hostd run`, `tandem guestd`): `tracing`
//! events written to stderr by `tracing-subscriber`, one line per event,
//! as text for people and journald, or as JSON lines (`--log-format json`)
//! for a log pipeline. The events' target names the daemon (`hostd`,
//! `guestd`), or `listen` for a listener's trouble (its message names the
//! daemon and the socket).

use std::str::FromStr;

use crate::{err, Error};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-11-25T23:49:41.123456Z  INFO hostd: serving 1 VM(s); ...`
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target` and
    /// `fields` (`message` and the event's own fields, e.g. `vm`).
    Json,
}

impl FromStr for LogFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<LogFormat, Error> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(err(format!("--log-format {s:?}: accepted: text, json"))),
        }
    }
}

/// Installs the process's subscriber (once; a second call, e.g. from a
/// test that already has one, leaves the first in place). Everything from
/// INFO up is written: the daemons log only what an operator wants to see.
pub fn init(format: LogFormat) {
    let b = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO);
    let _ = match format {
        LogFormat::Text => b.with_ansi(false).try_init(),
        LogFormat::Json => b.json().try_init(),
    };
}

/// A warning about hostd's configuration (a deprecated name), for the
/// command line's code, which has no `tracing` of its own.
pub fn config_warning(m: &str) {
    tracing::warn!(target: "hostd", "{m}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_name() {
        assert_eq!("text".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert!("xml"
            .parse::<LogFormat>()
            .unwrap_err()
            .0
            .contains("text, json"));
    }
}
