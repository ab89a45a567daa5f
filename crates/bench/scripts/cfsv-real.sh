#!/bin/sh
# CFS-v on a real host, the runner's scenario (scenarios/cfsv-real.toml):
# RUNS rounds; in each, one `tandem bench run` per hostd boost kind, each
# with its `off` and `cfsv` cells one after the other (so every ratio
# compares cells a minute apart on the same loaded machine). Prints, per
# run, the guest's read IOPS and the host hogs' iterations/s of both cells,
# and the ratios; then the means per boost kind.
# Usage (root): crates/bench/scripts/cfsv-real.sh [TANDEM] [IMAGE] [RUNS] [BOOSTS]
set -eu
TANDEM=$(realpath "${1:-target/release/tandem}")
IMG=${2:-}
RUNS=${3:-3}
BOOSTS=${4:-nice shares rr deadline}
OUT=$(mktemp -d /tmp/cfsv-real.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
SCEN=$(dirname "$0")/../../../scenarios/cfsv-real.toml
if [ -z "$IMG" ]; then
  IMG="$OUT/img"
  "$TANDEM" vm image --out "$IMG" --quiet >/dev/null
fi
echo "boost run load1 off_iops cfsv_iops off_hog_iter_s cfsv_hog_iter_s io_ratio hog_ratio"
for run in $(seq "$RUNS"); do
  for b in $BOOSTS; do
    rm -rf "$OUT/r"
    "$TANDEM" bench run "$SCEN" --out "$OUT/r" --vm-image "$IMG" --vm-accel tcg \
      --file-mib 128 --settle-s 8 --vm-cfsv-boost "$b" --quiet >"$OUT/log" 2>&1 ||
      { cat "$OUT/log" >&2; exit 1; }
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 - "$OUT/r/results.json" "$b" "$run" "$load" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["cell"]["coordination"]: x["runs"][0]["counters"] for x in d["cells"]}
o, v = c["off"], c["cfsv"]
print(sys.argv[2], sys.argv[3], sys.argv[4],
      "%.0f %.0f %.0f %.0f %.2f %.3f" % (
          o["vm1_read_iops"], v["vm1_read_iops"], o["host_loops_iter_s"],
          v["host_loops_iter_s"], v["vm1_read_iops"] / o["vm1_read_iops"],
          v["host_loops_iter_s"] / o["host_loops_iter_s"]), flush=True)
PY
  done
done | tee "$OUT/table"
echo "boost mean_io_ratio mean_hog_ratio"
awk '{n[$1]++; io[$1]+=$8; h[$1]+=$9} END {for (b in n) printf "%s %.2f %.3f\n", b, io[b]/n[b], h[b]/n[b]}' "$OUT/table"
