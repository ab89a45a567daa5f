#!/usr/bin/env python3
"""Sweep the platform's and the app's parameters against both CLOUD 2014 tables.

Issue 27: one parameter set for the platform (`chromebook-2014`'s CPU speed,
`--cpu-speed`) and the app (`--app-metadata-share` of xterm-2014), and the
hard disk's settings (`--hdd-param`, as the former calibrate-hdd swept), set
against the hard disk's table (reference/cloud2014-hdd.toml) and the
microSDHC card's (cloud2014-microsd.toml) at once. For every combination it
runs the cloud2014 cells of the two devices on the CPU model and prints, per
device, the numeric cells within +-25% of the paper and the X statuses
matched (from `tandem report --paper HDD CARD`).

Everything it reports comes from `tandem sim run` and `tandem report`; it
leaves nothing behind but the table it prints (and --csv, if given).
"""

import argparse
import csv
import itertools
import os
import re
import subprocess
import sys
import tempfile

# The former preset (0.3), the preset's speed (0.17, CHROMEBOOK_2014_SPEED in
# crates/cpusched/src/platform.rs, from published ratios) and a slower one.
DEFAULT_SPEEDS = [0.3, 0.17, 0.1]
# xterm-2014's own share (None: the preset's) and the recorded trace's.
DEFAULT_SHARES = [None, 1.0]
DEVICES = ["hdd-1.8in", "microsd-class6"]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"calibrate: {' '.join(cmd)} failed:\n{p.stderr.strip()}")
    return p.stdout


def one(a, tmp, speed, share, hdd, kernel):
    out = os.path.join(tmp, "cloud2014")
    cmd = [a.tandem, "sim", "run", a.scenario, "--quiet", "--yes", "--out", out,
           "--platform", "chromebook-2014", "--cpu-speed", str(speed)]
    if kernel is not None:
        cmd += ["--host-kernel", kernel]
    for d in DEVICES:
        cmd += ["--only", f"device={d}"]
    if share is not None:
        cmd += ["--app-metadata-share", str(share)]
    for s in hdd:
        cmd += ["--hdd-param", s]
    run(cmd)
    text = run([a.tandem, "report", out, "--paper", a.hdd_reference, a.card_reference])
    found = {}
    for m in re.finditer(r"^(\S+): (\d+) of (\d+) numeric cells within .25%; "
                         r"X statuses matched in (\d+) of (\d+) cells", text, re.M):
        found[m.group(1)] = (f"{m.group(2)}/{m.group(3)}", f"{m.group(4)}/{m.group(5)}")
    if sorted(found) != sorted(DEVICES):
        sys.exit(f"calibrate: unexpected report output:\n{text}")
    return found


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(root, "target", "release", "tandem"),
                    help="the tandem binary (default: target/release/tandem)")
    ap.add_argument("--scenario", default=os.path.join(root, "scenarios", "cloud2014.toml"))
    ap.add_argument("--hdd-reference", default=os.path.join(root, "reference", "cloud2014-hdd.toml"))
    ap.add_argument("--card-reference",
                    default=os.path.join(root, "reference", "cloud2014-microsd.toml"),
                    help="the card's table (default: reference/cloud2014-microsd.toml)")
    ap.add_argument("--speeds", default=",".join(str(s) for s in DEFAULT_SPEEDS),
                    help="CPU speeds of chromebook-2014 to try, comma-separated")
    ap.add_argument("--shares", default="preset,1",
                    help="app metadata shares to try, comma-separated ('preset': the app's own)")
    ap.add_argument("--hdd", action="append", metavar="NAME=VALUE[,NAME=VALUE]",
                    help="a hard disk setting to try (repeatable; default: the preset only)")
    ap.add_argument("--host-kernels", default="default",
                    help="host kernel profiles to try, comma-separated ('default': tandem's own; "
                         "linux-3.12-arm-idling is the paper's host, D3.6 section 8)")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    a = ap.parse_args()
    if not os.access(a.tandem, os.X_OK):
        sys.exit(f"calibrate: no tandem binary at {a.tandem} (cargo build --release)")
    for f in (a.hdd_reference, a.card_reference):
        if not os.path.exists(f):
            sys.exit(f"calibrate: no reference file {f}")
    try:
        speeds = [float(s) for s in a.speeds.split(",")]
        shares = [None if s == "preset" else float(s) for s in a.shares.split(",")]
    except ValueError:
        sys.exit("calibrate: --speeds and --shares take comma-separated numbers")
    hdds = [s.split(",") for s in a.hdd] if a.hdd else [[]]
    kernels = [None if k == "default" else k for k in a.host_kernels.split(",")]
    combos = list(itertools.product(speeds, shares, hdds, kernels))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tandem-calibrate-") as tmp:
        for i, (speed, share, hdd, kernel) in enumerate(combos, 1):
            name = ",".join(hdd) or "(preset)"
            print(f"[{i}/{len(combos)}] speed {speed} share {share} hdd {name} host {kernel}",
                  file=sys.stderr, flush=True)
            r = one(a, tmp, speed, share, hdd, kernel)
            rows.append([f"{speed:g}", "preset" if share is None else f"{share:g}", name,
                         kernel or "default",
                         r["hdd-1.8in"][0], r["hdd-1.8in"][1],
                         r["microsd-class6"][0], r["microsd-class6"][1]])
    head = ["CPU speed", "app share", "hdd setting", "host kernel", "hdd within ±25%", "hdd X",
            "card within ±25%", "card X"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(head)
            w.writerows(rows)


if __name__ == "__main__":
    main()
