//! The daemons' logs (`tandem hostd run`, `tandem guestd`) are `tracing`
//! events. Their targets name the daemon (`hostd`, `guestd`), or `listen`
//! for a listener's trouble (its message names the daemon and the socket).
//! How they are written (text, or JSON lines with `--log-format json`) and
//! filtered (`RUST_LOG`) is decided once for every subcommand, by the one
//! subscriber in `crates/cli/src/logging.rs`.

/// A warning about hostd's configuration (a deprecated name), for the
/// command line's code.
pub fn config_warning(m: &str) {
    tracing::warn!(target: "hostd", "{m}");
}
