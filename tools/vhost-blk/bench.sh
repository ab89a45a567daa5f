#!/bin/sh
# Reruns the comparison of `tandem vhost-blk` with QEMU's built-in
# virtio-blk (same image, same run, TCG guest): 4 KiB random reads at
# depth 1 and 32, 1 MiB sequential reads and writes, measured in the guest
# by `tandem vm disk-io load`, and the backend's CPU per request. Prints
# the Markdown table docs/measurements.md records.
#
#   tools/vhost-blk/bench.sh
#   TANDEM_BENCH_BACKEND_ARGS="--poll-max-ns 0" tools/vhost-blk/bench.sh  # the backend without polling
#
# Needs qemu-system-x86_64 and apt access to Debian's packages (the guest
# image); about 2 minutes. The numbers move with the machine's load: note
# `uptime` beside them.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
uptime
log=$(mktemp)
trap 'rm -f "$log"' EXIT INT TERM
status=0
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} cargo test --release -p tandem --test vhost_blk -- \
    --ignored --exact the_backend_against_qemus_builtin_virtio_blk --nocapture >"$log" 2>&1 ||
    status=$?
sed -n 's/^bench: //p' "$log"
if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
fi
exit "$status"
