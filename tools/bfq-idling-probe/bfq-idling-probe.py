#!/usr/bin/env python3
"""How well BFQ keeps a disk for one chain of dependent reads against five
sequential readers, under the BFQ tunables hostd's `--bfq-idling` sets.

The chain stands for a boosted VM: QEMU's thread issues one guest read at a
time, 1-2 ms after the previous one completed (what a guest program starting
under TCG looks like in a host trace), in the RT I/O class (hostd's
`--ioprio rt`), with a longer pause now and then. The readers stand for the
host workload `5r-seq`: buffered sequential `dd` readers.

Everything runs on an emulated 1.8-inch disk (`tandem devemu up --model
hdd-1.8in`) with BFQ and ext4, created here and torn down on every exit path.
Needs root. About 2 minutes to write the files, then `--seconds` + 3 s per
variant.

    tools/bfq-idling-probe/bfq-idling-probe.py [--tandem target/release/tandem] [--seconds 20]

Prints, per variant, the chain's reads per second and their mean, median and
90th-percentile latency; `--json FILE` writes the same.
"""
import argparse
import json
import mmap
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

READERS = 5
READER_MB = 150
CHAIN_MB = 64
# The chain's think time between reads, and the longer pause every 20th read:
# a guest under TCG computes between its reads.
THINK_S = 0.0015
PAUSE_S = 0.030

# (label, number of readers, tunables written just before the chain starts)
VARIANTS = [
    ("no readers", 0, {}),
    ("default tunables", READERS, {}),
    ("strict_guarantees=1", READERS, {"strict_guarantees": "1"}),
    ("slice_idle_us=32000", READERS, {"slice_idle_us": "32000"}),
    ("both (--bfq-idling)", READERS, {"strict_guarantees": "1", "slice_idle_us": "32000"}),
]


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def chain(path, seconds, iosched, tunables):
    """Child process: RT class, an old queue (sparse reads give it BFQ's
    "long think time" first, as QEMU's queue has between start-ups), then
    the tunables, then dependent reads for `seconds`. Returns latencies."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 1
        try:
            sh("ionice", "-c1", "-n4", "-p", str(os.getpid()))
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 65536)
            rng = random.Random(1)
            blocks = os.fstat(fd).st_size // 4096 - 16
            until = time.time() + 3
            while time.time() < until:
                os.preadv(fd, [memoryview(buf)[:4096]], rng.randrange(blocks) * 4096)
                time.sleep(0.1)
            for k, v in tunables.items():
                with open(os.path.join(iosched, k), "w") as f:
                    f.write(v)
            lat = []
            until = time.time() + seconds
            while time.time() < until:
                n = rng.choice([4096, 8192, 16384, 32768])
                t = time.perf_counter()
                os.preadv(fd, [memoryview(buf)[:n]], rng.randrange(blocks) * 4096)
                lat.append(time.perf_counter() - t)
                gap = PAUSE_S if len(lat) % 20 == 0 else THINK_S
                end = time.perf_counter() + gap
                while time.perf_counter() < end:  # a busy guest vCPU, not a sleep
                    pass
            os.write(w, json.dumps(lat).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError("the chain process failed")
    return json.loads(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default="target/release/tandem")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bfq-idling-probe: needs root (loop devices, FUSE, mount, ioprio RT)")
    if not os.access(a.tandem, os.X_OK):
        sys.exit(f"bfq-idling-probe: {a.tandem}: not an executable (cargo build --release)")
    if a.seconds <= 0:
        sys.exit("bfq-idling-probe: --seconds must be positive")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    dev = mnt = None
    readers = []
    try:
        out = sh(a.tandem, "devemu", "up", "--model", "hdd-1.8in", "--size", "2G",
                 stdout=subprocess.PIPE, text=True).stdout.split()
        dev = out[-1]
        name = os.path.basename(dev)
        queue = f"/sys/block/{name}/queue"
        with open(f"{queue}/scheduler", "w") as f:
            f.write("bfq")
        iosched = f"{queue}/iosched"
        defaults = {k: open(f"{iosched}/{k}").read().strip()
                    for k in ("strict_guarantees", "slice_idle_us")}
        sh("mkfs.ext4", "-q", "-F", dev)
        mnt = tempfile.mkdtemp(prefix="tandem-bfq-probe-")
        sh("mount", dev, mnt)
        print(f"{dev}: writing {READERS} x {READER_MB} MB + {CHAIN_MB} MB at the disk's speed...",
              flush=True)
        for i in range(READERS):
            sh("dd", "if=/dev/zero", f"of={mnt}/r{i}", "bs=1M", f"count={READER_MB}",
               "status=none")
        sh("dd", "if=/dev/zero", f"of={mnt}/chain", "bs=1M", f"count={CHAIN_MB}", "status=none")
        sh("sync")
        results = []
        for label, n, tunables in VARIANTS:
            for k, v in defaults.items():
                with open(f"{iosched}/{k}", "w") as f:
                    f.write(v)
            sh("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches")
            readers = [subprocess.Popen(["dd", f"if={mnt}/r{i}", "of=/dev/null", "bs=1M"],
                                        stderr=subprocess.DEVNULL) for i in range(n)]
            lat = sorted(chain(f"{mnt}/chain", a.seconds, iosched, tunables))
            for p in readers:
                p.kill()
                p.wait()
            readers = []
            ms = [x * 1000 for x in lat]
            row = {
                "variant": label,
                "readers": n,
                "reads_per_s": len(ms) / a.seconds,
                "mean_ms": sum(ms) / len(ms),
                "p50_ms": ms[len(ms) // 2],
                "p90_ms": ms[int(0.9 * len(ms))],
            }
            results.append(row)
            print(f"{label:24} {row['reads_per_s']:6.1f} reads/s  mean {row['mean_ms']:5.1f} ms"
                  f"  p50 {row['p50_ms']:5.1f}  p90 {row['p90_ms']:6.1f} ms", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": "hdd-1.8in", "seconds": a.seconds, "results": results}, f,
                          indent=1)
    finally:
        for p in readers:
            p.kill()
            p.wait()
        if mnt:
            subprocess.run(["umount", mnt])
            os.rmdir(mnt)
        if dev:
            subprocess.run([a.tandem, "devemu", "down", dev])


if __name__ == "__main__":
    main()
