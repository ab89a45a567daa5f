#!/bin/sh
# Measures the host block layer's CPU per 4 KiB O_DIRECT read on this
# machine: `dd iflag=direct bs=4k` at queue depth 1 on a loop device over a
# tmpfs file (no elevator), sampled system-wide by `perf record` (cpu-clock,
# call graphs), and prints each part's CPU time per request from
# `perf report --children`:
#
#   submit   the reader's path into the block layer: __blkdev_direct_IO_simple
#            less its wait (bio set-up, submit_bio() down to the driver's
#            queue_rq); the system call's entry and exit are not in it
#   switch   the reader's sleep and wake-up (wait_for_completion_io_timeout)
#   complete blk_mq_complete_request() in the loop worker (the "interrupt")
#            plus blk_done_softirq() (request and bio completion, the
#            waiter's wake-up)
#   device   the loop worker's read of the tmpfs page (shmem_file_read_iter),
#            the stand-in for the device, for reference
#
#   tools/iocost/block.sh [REQUESTS] [RUNS]
#
# Needs root and perf. Attribution is by sampling: time in regions with
# interrupts off lands on the instruction that turns them back on, which
# stays inside the same function here. Note `uptime` beside the numbers.
set -eu
n=${1:-32768}
runs=${2:-3}
dir=$(mktemp -d /dev/shm/iocost.XXXXXX)
loop=
cleanup() {
    if [ -n "$loop" ]; then losetup -d "$loop"; fi
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
dd if=/dev/zero of="$dir/disk.img" bs=1M count=256 status=none
loop=$(losetup -f --show "$dir/disk.img")
echo none >"/sys/block/$(basename "$loop")/queue/scheduler"
uptime
# pct SYMBOL [COMM]: the symbol's share with children, in % of all samples.
pct() {
    perf report -i "$dir/perf.data" ${2:+--comm "$2"} --children --sort sym --stdio \
        -g none --percent-limit 0 2>/dev/null |
        awk -v s="$1" '$4 == s { gsub("%", "", $1); v += $1 } END { printf "%.4f", v + 0 }'
}
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    perf record -q -a -g -e cpu-clock -F 10000 -o "$dir/perf.data" -- \
        dd if="$loop" of=/dev/null bs=4k iflag=direct count="$n" 2>/dev/null
    total=$(perf report -i "$dir/perf.data" --stdio --header-only 2>/dev/null |
        awk '/Event count/ { print $NF }')
    [ -n "$total" ] ||
        total=$(perf report -i "$dir/perf.data" --stdio -g none 2>/dev/null |
            awk '/Event count/ { print $NF }')
    dio=$(pct __blkdev_direct_IO_simple dd)
    wait=$(pct submit_bio_wait dd)
    sub=$(pct __submit_bio dd)
    sw=$(pct wait_for_completion_io_timeout dd)
    irq=$(pct blk_mq_complete_request)
    soft=$(pct blk_done_softirq)
    dev=$(pct shmem_file_read_iter)
    awk -v t="$total" -v n="$n" -v dio="$dio" -v wait="$wait" -v sb="$sub" -v sw="$sw" \
        -v irq="$irq" -v soft="$soft" -v dev="$dev" 'BEGIN {
        us = t / 1e3 / n / 100
        printf "run: submit %.2f us (bio set-up %.2f, __submit_bio %.2f), switch %.2f us, complete %.2f us (irq %.2f, softirq %.2f), device %.2f us per request\n",
            (dio - wait + sb) * us, (dio - wait) * us, sb * us, sw * us,
            (irq + soft) * us, irq * us, soft * us, dev * us
    }'
done
uptime
