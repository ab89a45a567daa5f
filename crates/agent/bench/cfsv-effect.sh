#!/bin/sh
# The effect of hostd's cfsv mode on a 2-core host: a stand-in QEMU whose
# 4 "worker" threads each do 50 us of CPU work then sleep 200 us (I/O-ish),
# next to 4 CPU hogs on the host. For each boost (off = hostd without
# cfsv), RUNS runs of SECS seconds: the workers' completed operations per
# second, the hogs' loop iterations per second and the CPUs they got.
# Usage (root): crates/agent/bench/cfsv-effect.sh [TANDEM] [RUNS] [SECS]
#
# Measured on the 2-core development VM, 3 runs of 10 s, with other work
# (about 0.7 CPU of niced compiles) on the machine:
#   off       worker ops/s 8126 8098 8474     hog CPUs 1.37 1.36 1.37
#   nice      worker ops/s 11547 11544 11853  hog CPUs 1.32 1.26 1.33
#   shares    worker ops/s 12386 11928 11957  hog CPUs 0.67 0.45 0.38
#   rr        worker ops/s 14751 14731 14714  hog CPUs 0.38 0.38 0.38
#   deadline  worker ops/s 12691 12657 9283   hog CPUs 0.42 0.43 0.68
# nice (the default): +41% operations for -4% of the hogs' CPU.
set -eu
TANDEM=$(realpath "${1:-target/release/tandem}")
RUNS=${2:-3}
SECS=${3:-10}
D=$(mktemp -d /tmp/cfsv-effect.XXXXXX)
# The counts in memory: a write to a busy disk's file system may block
# for seconds, and the count with it.
R=$(mktemp -d /dev/shm/cfsv-effect.XXXXXX)
trap 'kill $(cat "$D"/pids 2>/dev/null) 2>/dev/null; rm -rf "$D" "$R"' EXIT
ln "$TANDEM" "$D/qemu-system-x86_64" 2>/dev/null || cp "$TANDEM" "$D/qemu-system-x86_64"
hog='import sys,time
n=0; end=time.time()+float(sys.argv[1])
while time.time()<end: n+=1
print(n, time.process_time())'
echo "boost run worker_ops_per_s hog_iters_per_s hog_cpus"
for boost in ${BOOSTS:-off nice shares rr deadline}; do
  for run in $(seq "$RUNS"); do
    rm -f "$D/qmp.sock" "$R/ops" "$D/st" "$D/c.sock" "$R"/hog.*
    "$D/qemu-system-x86_64" hostd fake-qemu --vcpus 2 --workers 4 --work-us 50 \
      --sleep-us 200 --qmp "$D/qmp.sock" --report "$R/ops" & Q=$!
    echo $Q >> "$D/pids"
    sleep 1
    flags=""
    [ "$boost" = off ] || flags="--cfsv --cfsv-boost $boost"
    # shellcheck disable=SC2086
    "$TANDEM" hostd run --vm "name=a,socket=$D/a.sock,pid=$Q,qmp=$D/qmp.sock" \
      --control "$D/c.sock" --state-file "$D/st" $flags 2>"$D/hostd.log" & H=$!
    echo $H >> "$D/pids"
    hogs=""
    for k in 1 2 3 4; do
      python3 -c "$hog" $((SECS + 1)) > "$R/hog.$k" & hogs="$hogs $!"
    done
    sleep 1
    a=$(cat "$R/ops")
    sleep "$SECS"
    b=$(cat "$R/ops")
    # shellcheck disable=SC2086
    wait $hogs
    hogs=$(cat "$R"/hog.* | awk -v s=$((SECS + 1)) '{t+=$1; c+=$2} END {printf "%.0f %.2f", t/s, c/s}')
    kill $H; wait $H 2>/dev/null || true
    kill $Q; wait $Q 2>/dev/null || true
    echo "$boost $run $(( (b - a) / SECS )) $hogs"
  done
done
