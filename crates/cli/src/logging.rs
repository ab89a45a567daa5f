//! Diagnostics on stderr: one `tracing` subscriber for every subcommand, the
//! daemons included.
//!
//! The crates log with `tracing` (`warn!`, `info!`, `debug!`, `trace!`);
//! this module decides how those lines look and which ones show.
//! User-facing output (results, tables, progress bars and the final error of
//! a failed command) is not logging and is printed directly.
//!
//! - `--log-format text` (the default) writes a line as tandem always has:
//!   `tandem bench: warning: ...`, `tandem devemu: ...` for info.
//! - `--log-format json` writes one JSON object a line (`timestamp`, `level`,
//!   `target`, `fields.message` and any other fields), for a log collector.
//! - `RUST_LOG` filters, with `tracing-subscriber`'s `EnvFilter` syntax
//!   (`RUST_LOG=debug`, `RUST_LOG=devemu=trace`); without it, `info` and
//!   above show, which is what tandem printed before it used `tracing`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// What shows when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text: `tandem CRATE: LEVEL: message`.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// The filter from `RUST_LOG`, or [`DEFAULT_FILTER`] without it. A
/// `RUST_LOG` that does not parse is an error that names it.
pub fn filter_from_env() -> Result<EnvFilter, String> {
    filter_from(std::env::var("RUST_LOG").ok().as_deref())
}

/// The filter for a value of `RUST_LOG` (`None`: not set).
fn filter_from(rust_log: Option<&str>) -> Result<EnvFilter, String> {
    match rust_log {
        Some(v) if !v.trim().is_empty() => EnvFilter::try_new(v)
            .map_err(|e| format!("RUST_LOG={v:?} is not a valid log filter: {e}")),
        _ => Ok(EnvFilter::new(DEFAULT_FILTER)),
    }
}

/// Installs the process's subscriber: `format` to stderr, filtered by
/// `RUST_LOG`. Call once, first thing in `main`.
pub fn init(format: LogFormat) -> Result<(), String> {
    let subscriber = subscriber(format, filter_from_env()?, std::io::stderr);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("setting up logging: {e}"))
}

/// The subscriber [`init`] installs, writing to `writer` (tests pass a
/// buffer).
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer)
                    .with_ansi(false)
                    .event_format(TandemText),
            ),
        ),
        LogFormat::Json => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer)
                    .with_ansi(false)
                    .json(),
            ),
        ),
    }
}

/// tandem's line: `tandem CRATE: LEVEL: message field=value`, with no level
/// for info and no crate for the CLI's own lines.
struct TandemText;

impl<S, N> FormatEvent<S, N> for TandemText
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        // The crate is the first path segment of the target (`bench::cleanup`).
        let krate = meta.target().split("::").next().unwrap_or_default();
        match krate {
            "tandem" | "" => write!(w, "tandem: ")?,
            k => write!(w, "tandem {k}: ")?,
        }
        if let Some(level) = level_word(*meta.level()) {
            write!(w, "{level}: ")?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// The word a text line shows for a level; none for info, the level of
/// ordinary messages.
fn level_word(level: Level) -> Option<&'static str> {
    match level {
        Level::ERROR => Some("error"),
        Level::WARN => Some("warning"),
        Level::INFO => None,
        Level::DEBUG => Some("debug"),
        Level::TRACE => Some("trace"),
    }
}

/// A writer into a shared buffer, for the tests.
#[cfg(test)]
#[derive(Clone, Default)]
struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl std::io::Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'w> MakeWriter<'w> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'w self) -> Buffer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs what the crates log, through `format` and `filter`, and returns
    /// the lines written.
    fn lines(format: LogFormat, filter: &str) -> Vec<String> {
        let buf = Buffer::default();
        let sub = subscriber(format, EnvFilter::new(filter), buf.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "bench::cleanup", "could not undo it");
            tracing::info!(target: "devemu::control", "device up");
            tracing::info!(target: "tandem::sim_cmd", "wrote x");
            tracing::debug!(target: "devemu::engine", slot = 3, "submit");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn text_lines_read_as_before() {
        assert_eq!(
            lines(LogFormat::Text, DEFAULT_FILTER),
            [
                "tandem bench: warning: could not undo it",
                "tandem devemu: device up",
                "tandem: wrote x",
            ]
        );
    }

    #[test]
    fn the_filter_lets_one_crate_say_more() {
        let got = lines(LogFormat::Text, "warn,devemu=debug");
        assert_eq!(
            got,
            [
                "tandem bench: warning: could not undo it",
                "tandem devemu: device up",
                "tandem devemu: debug: submit slot=3",
            ]
        );
    }

    #[test]
    fn json_lines_are_objects_with_level_target_and_message() {
        let got = lines(LogFormat::Json, "warn");
        assert_eq!(got.len(), 1, "{got:?}");
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["target"], "bench::cleanup");
        assert_eq!(v["fields"]["message"], "could not undo it");
        assert!(v["timestamp"].is_string());
    }

    #[test]
    fn rust_log_is_read_and_a_bad_one_refused_by_name() {
        assert!(filter_from(None).is_ok());
        assert!(filter_from(Some("")).is_ok());
        assert!(filter_from(Some("warn,devemu=trace")).is_ok());
        let e = filter_from(Some("devemu=loud")).unwrap_err();
        assert!(e.contains("RUST_LOG=\"devemu=loud\""), "{e}");
    }
}
