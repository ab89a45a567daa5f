#!/bin/bash
# Measures QEMU's host-side CPU per virtio-blk request on this machine: a
# TCG guest (the benchmark image of `tandem vm image`) reads its disk with
# `tandem vm disk-io load --mode randread --bs 4096` (O_DIRECT) while the
# disk is QEMU's built-in virtio-blk on a raw file in tmpfs,
# `cache=none,aio=threads` (QEMU's default AIO: the thread pool, as in the
# QEMU 2.1 of the CFS-v slides). Each QEMU thread's CPU time comes from
# /proc/PID/task/TID/schedstat (first field) before and after the load;
# an idle window of the same length (the guest sleeping) is subtracted, and
# the difference is divided by the requests the guest completed. QEMU's
# threads other than the vCPUs run native code under TCG, so their
# figures are what they would be beside a KVM guest (less the VM exits,
# which TCG does not have).
#
#   tools/iocost/qemu.sh IMAGE_DIR [SECONDS] [DEPTHS]
#
# IMAGE_DIR: the output of `tandem vm image --out IMAGE_DIR`. Needs
# qemu-system-x86_64; about a minute plus 2 x SECONDS per depth. Note the
# machine's load (`uptime`, printed) beside the numbers.
set -euo pipefail
img=$1
secs=${2:-10}
depths=${3:-"1 8"}
dir=$(mktemp -d /dev/shm/iocost-qemu.XXXXXX)
qpid=
cleanup() {
    if [ -n "$qpid" ]; then
        kill "$qpid" 2>/dev/null || true
        wait "$qpid" 2>/dev/null || true
    fi
    exec 3>&- || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
dd if=/dev/urandom of="$dir/disk.img" bs=1M count=256 status=none
mkfifo "$dir/in"
qemu-system-x86_64 -name iocost,debug-threads=on -accel tcg -m 256 -smp 2 \
    -nodefaults -display none -no-reboot -serial stdio \
    -drive "file=$dir/disk.img,if=none,id=d0,format=raw,cache=none,aio=threads" \
    -device virtio-blk-pci,drive=d0 \
    -kernel "$img/vmlinuz" -initrd "$img/initramfs.img" \
    -append "console=ttyS0 quiet panic=-1" <"$dir/in" >"$dir/out" 2>&1 &
qpid=$!
exec 3>"$dir/in"
for _ in $(seq 1800); do
    grep -q "shell on the console" "$dir/out" && break
    sleep 0.1
done
grep -q "shell on the console" "$dir/out" || { tail "$dir/out" >&2; exit 1; }
sleep 1
# snap: CPU ns of the main loop, the vCPUs, the pool workers and the
# other threads, then the times the main loop and the workers were
# scheduled in (schedstat's third field: their activations).
snap() {
    for t in /proc/"$qpid"/task/*; do
        local tid=${t##*/} comm st
        comm=$(cat "$t/comm" 2>/dev/null) || continue
        st=$(cat "$t/schedstat" 2>/dev/null) || continue
        case "$comm" in
        */TCG) echo "vcpu $st" ;;
        worker) echo "worker $st" ;;
        *) if [ "$tid" = "$qpid" ]; then echo "main $st"; else echo "other $st"; fi ;;
        esac
    done | awk '{ s[$1] += $2; c[$1] += $4 } END {
        printf "%.0f %.0f %.0f %.0f %.0f %.0f\n", s["main"], s["vcpu"], s["worker"], s["other"], c["main"], c["worker"] }'
}
# run CMD: runs CMD in the guest, waits for its end marker; prints the
# CPU deltas "main vcpu worker other" (ns) over the command.
run() {
    local mark="IOCOST-END-$(date +%s%N)" a b
    a=$(snap)
    echo "$1; echo $mark-\$?" >&3
    for _ in $(seq $((secs * 20 + 600))); do
        grep -q "^$mark-[0-9]" <(tr -d '\r' <"$dir/out") && break
        sleep 0.05
    done
    b=$(snap)
    echo "$a $b" | awk '{ printf "%.0f %.0f %.0f %.0f %.0f %.0f\n", $7 - $1, $8 - $2, $9 - $3, $10 - $4, $11 - $5, $12 - $6 }'
}
uptime
# Workers linger 10 s after their last job (QEMU's thread pool): the
# idle window comes first, so it holds none of the load's.
idle=$(run "sleep $secs")
for d in $depths; do
    before=$(wc -c <"$dir/out")
    load=$(run "/bin/tandem vm disk-io load --mode randread --bs 4096 --depth $d --seconds $secs")
    ops=$(tail -c +"$((before + 1))" "$dir/out" | tr -d '\r' | sed -n 's/^disk-io .*"ops":\([0-9]*\).*/\1/p' | head -1)
    [ -n "$ops" ] || { tail -c +"$((before + 1))" "$dir/out" >&2; exit 1; }
    echo "$idle $load $ops $d" | awk '{
        n = $13; printf "depth %d: %d requests (%.0f IOPS); per request: main loop %.2f us in %.2f activations, pool workers %.2f us in %.2f activations, other %.2f us (vCPUs, TCG: %.1f us); idle main loop %.1f ms in %d activations\n",
            $14, n, n / '"$secs"', ($7 - $1) / n / 1e3, ($11 - $5) / n, ($9 - $3) / n / 1e3, ($12 - $6) / n,
            ($10 - $4) / n / 1e3, ($8 - $2) / n / 1e3, $1 / 1e6, $5 }'
    idle=$(run "sleep $secs")
done
uptime
echo "exit" >&3
