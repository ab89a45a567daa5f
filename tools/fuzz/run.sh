#!/bin/sh
# Runs each cargo-fuzz target in fuzz/ for a bounded time (CI).
#
#   tools/fuzz/run.sh [SECONDS]    # per target; default 60
#
# Needs the nightly toolchain (rustup toolchain install nightly); installs
# cargo-fuzz with `cargo install cargo-fuzz --locked` if it is missing. The
# seed corpus in fuzz/corpus/TARGET is read only: what libFuzzer finds goes
# to a temporary directory, removed at the end. A crash fails the script and
# leaves its input in fuzz/artifacts/TARGET/.
set -eu
secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
cd "$root/fuzz"
for target in $(cargo +nightly fuzz list); do
    mkdir -p "$work/$target"
    echo "fuzzing $target for $secs s" >&2
    cargo +nightly fuzz run "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$secs" -rss_limit_mb=512 -print_final_stats=1
done
