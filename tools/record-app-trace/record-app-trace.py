#!/usr/bin/python3
"""Record cold-cache application start-up I/O traces ("tandem app trace v1").

Run as root on Linux with tracefs.  For every application it:

  1. starts Xvfb (if the app needs X) with -noreset, so the X server is warm and
     does not reset (and reload its GLX driver) when the app disconnects, and
     sets the root disk's read_ahead_kb (default 128, restored afterwards);
  2. runs the app once warm (first-run effects: config files, font caches);
  3. N times: walks the root filesystem (inode -> name, size, ctime as before
     the start-up), waits for the machine to be quiet, forks a bash that waits
     on a pipe, enables the ftrace events
        filemap/mm_filemap_add_to_page_cache, block/block_rq_issue,
        block/block_rq_complete, sched/sched_process_fork|exec|exit,
        sched/sched_switch, sched/sched_wakeup[_new],
     syncs and drops caches (echo 3), releases the bash, which execs the
     command (as the S suite's bash does); the start-up ends when the command
     exits (`xterm /bin/true` exits once it has started and run /bin/true).
     A run during which unrelated tasks filled the page cache is retried;
  4. measures untraced cold and warm wall-clock start-up times;
  5. maps inodes to paths, file pages to disk sectors (FIEMAP), keeps only the
     page-cache fills of the app's process tree (and, by default, of the X
     server while the app runs) that a disk read request actually served,
     merges contiguous fills of one burst (gaps <= 100 us) into reads, and
     computes think times as
        think_i = CPU time of the app tree or X server in
                  [complete_{i-1}, issue_i]
     where issue_i is when the first page of read i entered the page cache,
     complete_{i-1} the completion of the last block request that served read
     i-1, and "CPU time" the time at least one of those tasks was on a CPU
     (from sched_switch/sched_wakeup), so time spent runnable behind
     unrelated load is not counted;
  6. writes <out>/<app>.trace (the most typical run: see medoid()),
     <out>/runs/<app>.runN.trace (every run) and <out>/runs/summary.json
     (per-run statistics, timings); raw ftrace text and the recording
     metadata go to --raw, from which --analyse-only re-derives the traces.

Filesystem metadata (inode tables, directories, extent blocks read through the
block device's page cache) is represented as one pseudo-file
"[fs-metadata:/dev/X]" whose offsets are the metadata blocks touched, in disk
order, compacted (one unused 4 KiB gap between non-adjacent disk blocks).
Comment lines "# extent <id> <file_offset> <disk_offset> <len>" give the real
on-disk placement of every file, so a simulator can use true positions.

Usage (as root):
  record-app-trace.py [--apps bash,xterm,konsole] [--runs 3] [--out DIR]
                      [--raw DIR] [--read-ahead-kb KB] [--no-xserver]
                      [--app NAME --command CMD [--needs-x]]
  record-app-trace.py --analyse-only [--out DIR] [--raw DIR]
  record-app-trace.py --check apps/*.trace
Only the Python 3 standard library is used.
"""

import argparse
import bisect
import datetime
import fcntl
import json
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import time

PAGE = 4096
MERGE_GAP_US = 100  # page fills further apart than this are separate reads
FALLBACK_WINDOW_S = 0.002

PRESETS = {
    # name: (command, needs X)
    "bash": ("bash -c exit", False),
    "xterm": ("xterm /bin/true", True),
    "konsole": ("konsole -e /bin/true", True),
}
PACKAGES = {  # Debian package whose version is quoted in the 'recorded' line
    "bash": "bash",
    "xterm": "xterm",
    "konsole": "konsole",
}

EVENTS = [
    "filemap/mm_filemap_add_to_page_cache",
    "block/block_rq_issue",
    "block/block_rq_complete",
    "sched/sched_process_fork",
    "sched/sched_process_exec",
    "sched/sched_process_exit",
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
]

LINE_RE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
    r"(?P<ts>\d+\.\d+):\s+(?P<ev>[\w]+):\s+(?P<body>.*)$")
ADD_RE = re.compile(
    r"dev (\d+):(\d+) ino ([0-9a-f]+) pfn=\S+ ofs=(\d+) order=(\d+)")
RQ_RE = re.compile(r"(\d+),(\d+) (\S+) (?:\d+ )?\(.*?\) (\d+) \+ (\d+)")
SWITCH_RE = re.compile(
    r"prev_pid=(\d+) prev_prio=\S+ prev_state=(\S+) ==> next_comm=.* next_pid=(\d+) next_prio=")
WAKE_RE = re.compile(r" pid=(\d+) prio=\S+ target_cpu=(\d+)")
FORK_RE = re.compile(r"comm=.* pid=(\d+) child_comm=.* child_pid=(\d+)")
EXEC_RE = re.compile(r"filename=(\S+) pid=(\d+)")


def die(msg, code=1):
    print(f"record-app-trace: error: {msg}", file=sys.stderr)
    sys.exit(code)


def log(msg):
    print(f"[record-app-trace] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# tracefs handling, with everything restored on exit


class Tracefs:
    def __init__(self):
        self.path = None
        self.mounted_by_us = False
        self.saved = {}

    def setup(self):
        for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
            if os.path.exists(os.path.join(p, "trace")):
                self.path = p
                break
        if self.path is None:
            p = "/sys/kernel/tracing"
            r = subprocess.run(["mount", "-t", "tracefs", "nodev", p])
            if r.returncode != 0 or not os.path.exists(os.path.join(p, "trace")):
                die("tracefs is not available (mount -t tracefs nodev "
                    "/sys/kernel/tracing failed); this tool needs ftrace")
            self.path = p
            self.mounted_by_us = True
        for ev in EVENTS:
            if not os.path.exists(os.path.join(self.path, "events", ev)):
                die(f"ftrace event {ev} missing on this kernel")
        for f in ("tracing_on", "trace_clock", "buffer_size_kb"):
            self.saved[f] = self.read(f).strip()
        self.write("tracing_on", "0")
        self.write("set_event", "")
        self.write("trace_clock", "mono")
        self.write("buffer_size_kb", "65536")

    def read(self, f):
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def start(self):
        self.write("tracing_on", "0")
        self.write("trace", "")
        for ev in EVENTS:
            self.write(f"events/{ev}/enable", "1")
        self.write("tracing_on", "1")

    def marker(self, text):
        self.write("trace_marker", text)

    def stop(self):
        self.write("tracing_on", "0")
        for ev in EVENTS:
            self.write(f"events/{ev}/enable", "0")
        data = self.read("trace")
        overrun = 0
        for cpu in os.listdir(os.path.join(self.path, "per_cpu")):
            st = self.read(f"per_cpu/{cpu}/stats")
            m = re.search(r"^overrun: (\d+)", st, re.M)
            if m:
                overrun += int(m.group(1))
        self.write("trace", "")
        return data, overrun

    def restore(self):
        if self.path is None:
            return
        try:
            self.write("tracing_on", "0")
            self.write("set_event", "")
            self.write("trace", "")
            clock = re.search(r"\[(\w+)\]", self.saved.get("trace_clock", "[local]"))
            self.write("trace_clock", clock.group(1) if clock else "local")
            kb = re.match(r"(\d+)", self.saved.get("buffer_size_kb", "1408"))
            self.write("buffer_size_kb", kb.group(1) if kb else "1408")
            self.write("tracing_on", self.saved.get("tracing_on", "1"))
        except OSError as e:
            log(f"warning: could not restore tracefs state: {e}")
        if self.mounted_by_us:
            subprocess.run(["umount", self.path])


# --------------------------------------------------------------------------
# machine helpers


def drop_caches(settle=0.0):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    if settle:
        time.sleep(settle)


def _sample(dev):
    with open("/proc/stat") as f:
        st = f.read()
    cpu = [int(x) for x in st.splitlines()[0].split()[1:]]
    forks = int(re.search(r"^processes (\d+)", st, re.M).group(1))
    sect = 0
    with open("/proc/diskstats") as f:
        for line in f:
            w = line.split()
            if w[2] == dev:
                sect = int(w[5]) + int(w[9])  # sectors read + written
    return sum(cpu), cpu[3] + cpu[4], forks, sect


def wait_quiet(dev, timeout, interval=1.0):
    """Wait until the machine is quiet (other processes' I/O and process
    starts would refill the caches the app should find cold).  Returns the
    seconds waited, or None if it never got quiet within timeout."""
    t0 = time.monotonic()
    quiet_needed = 3  # consecutive quiet intervals
    streak = 0
    prev = _sample(dev)
    while True:
        time.sleep(interval)
        cur = _sample(dev)
        tot, idle, forks, sect = (c - p for c, p in zip(cur, prev))
        prev = cur
        busy = 1.0 - idle / tot if tot else 0.0
        if busy < 0.60 and forks <= 2 and sect < 2048:
            streak += 1
            if streak >= quiet_needed:
                return time.monotonic() - t0
        else:
            streak = 0
        if time.monotonic() - t0 > timeout:
            return None


def root_device():
    """(name, kernel-encoded dev_t, major, minor) of the root filesystem's device."""
    st = os.stat("/")
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    name = os.path.basename(os.path.realpath(f"/sys/dev/block/{major}:{minor}"))
    return name, (major << 20) | minor, major, minor


def read_ahead_path(dev):
    # partitions have no queue/; use the parent disk's
    p = f"/sys/class/block/{dev}/queue/read_ahead_kb"
    if os.path.exists(p):
        return p
    parent = os.path.basename(os.path.dirname(os.path.realpath(f"/sys/class/block/{dev}")))
    return f"/sys/class/block/{parent}/queue/read_ahead_kb"


def pkg_version(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


class Xserver:
    def __init__(self, display):
        self.display = display
        self.proc = None

    def start(self):
        sock = f"/tmp/.X11-unix/X{self.display}"
        if os.path.exists(sock) or os.path.exists(f"/tmp/.X{self.display}-lock"):
            die(f"display :{self.display} is in use; pick another with --display")
        self.proc = subprocess.Popen(
            ["Xvfb", f":{self.display}", "-noreset", "-nolisten", "tcp",
             "-screen", "0", "1280x1024x24"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(sock):
                break
            if self.proc.poll() is not None:
                die("Xvfb exited at start")
            time.sleep(0.1)
        else:
            die("Xvfb did not come up")
        time.sleep(0.5)
        return self.proc.pid

    def tids(self):
        try:
            return {int(t) for t in os.listdir(f"/proc/{self.proc.pid}/task")}
        except OSError:
            return set()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def app_env(display):
    """A clean, reproducible environment (the recorder's own PATH could make
    the command's PATH search touch unrelated directories)."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "xterm",
    }
    if display is not None:
        env["DISPLAY"] = f":{display}"
    return env


# The command is started the way the S suite starts it: by an already running
# bash, which does the PATH search and execs it.  The bash waits on fd 3 so
# that caches can be dropped and tracing started after the fork.
WAITER = 'read -r -u 3 _; exec 3<&-; exec "$@"'


LIVE = set()  # process groups of started commands not yet reaped (killed on error/Ctrl-C)


def kill_live():
    for pg in list(LIVE):
        try:
            os.killpg(pg, signal.SIGKILL)
            os.waitpid(pg, 0)
        except OSError:
            pass
        LIVE.discard(pg)


def spawn_waiting(argv, env):
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(wfd)
            os.setsid()
            if rfd != 3:
                os.dup2(rfd, 3)
            os.set_inheritable(3, True)
            devnull = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(4, 1024)
            os.execve("/bin/bash", ["bash", "-c", WAITER, "tandem-waiter"] + argv, env)
        finally:
            os._exit(127)
    os.close(rfd)
    LIVE.add(pid)
    time.sleep(0.05)  # let bash reach the read
    return pid, wfd


def wait_exit(pid, t0, timeout):
    """Block (no polling, so the recorder takes no CPU from the app) until
    pid exits or the timeout passes.  Returns (monotonic time, status|None)."""
    import select
    pfd = os.pidfd_open(pid)
    try:
        po = select.poll()
        po.register(pfd, select.POLLIN)
        left = t0 + timeout - time.monotonic()
        ready = po.poll(max(0, int(left * 1000)))
        t1 = time.monotonic()
    finally:
        os.close(pfd)
    if ready:
        _, status = os.waitpid(pid, 0)
        LIVE.discard(pid)
        # the command's own children (e.g. a daemon it started) must not outlive it
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        return t1, status
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)
    LIVE.discard(pid)
    return time.monotonic(), None


def run_timed(argv, env, cold=False, timeout=60.0):
    """Start argv (from a waiting bash), wait for exit; wall-clock seconds or None."""
    pid, wfd = spawn_waiting(argv, env)
    if cold:
        drop_caches()
    t0 = time.monotonic()
    os.write(wfd, b"x\n")
    os.close(wfd)
    t1, status = wait_exit(pid, t0, timeout)
    return None if status is None else t1 - t0


def traced_run(tr, argv, env, timeout=60.0):
    """Spawn the waiting bash, drop caches, start tracing, release it (exec of
    the command), wait for the command's exit.  Returns
    (raw trace text, pid, wall seconds, lost events)."""
    pid, wfd = spawn_waiting(argv, env)
    tr.start()
    drop_caches()
    tr.marker("tandem-start")
    t0 = time.monotonic()
    os.write(wfd, b"x\n")
    os.close(wfd)
    t1, status = wait_exit(pid, t0, timeout)
    tr.marker("tandem-end")
    time.sleep(0.3)  # let outstanding (async readahead) requests complete
    data, overrun = tr.stop()
    if status is None:
        raise RuntimeError(f"{argv} timed out after {timeout} s")
    return data, pid, t1 - t0, overrun


# --------------------------------------------------------------------------
# inode -> path, file layout


def walk_inodes(root_dev, wanted=None):
    """Map inode numbers on the root filesystem to paths (one walk).  With
    wanted=None, map every inode, to (path, size, ctime_ns)."""
    found = {}
    want = None if wanted is None else set(wanted)
    prefer = ("/usr/", "/etc/", "/var/")
    stack = ["/"]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != root_dev:
                    continue
                isdir = e.is_dir(follow_symlinks=False)
                if isdir:
                    stack.append(e.path)
                if want is None:
                    old = found.get(st.st_ino)
                    if (old is None or (e.path.startswith(prefer), old[0])
                            > (old[0].startswith(prefer), e.path)):
                        found[st.st_ino] = (e.path, st.st_size, st.st_ctime_ns)
                    continue
                if st.st_ino not in want:
                    continue
                if isdir:
                    found.setdefault(st.st_ino, e.path)
                    continue
                # hard links: prefer /usr, /etc, /var, then the smallest path
                old = found.get(st.st_ino)
                if (old is None or (e.path.startswith(prefer), old) > (old.startswith(prefer), e.path)):
                    found[st.st_ino] = e.path
                if st.st_nlink > 1:
                    LINKS.setdefault(st.st_ino, set()).add(e.path)
    return found


LINKS = {}  # inode -> all its names, for files with several hard links


FS_IOC_FIEMAP = 0xC020660B
FIEMAP_EXTENT_LAST = 0x1


def fiemap(path):
    """List of (logical, physical, length) extents of a file, in bytes."""
    out = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return out
    try:
        start = 0
        n = 256
        while True:
            hdr = struct.pack("=QQIIII", start, 0xFFFFFFFFFFFFFFFF, 0, 0, n, 0)
            buf = bytearray(hdr + b"\0" * (56 * n))
            fcntl.ioctl(fd, FS_IOC_FIEMAP, buf, True)
            mapped = struct.unpack_from("=I", buf, 20)[0]
            if mapped == 0:
                break
            last = False
            for i in range(mapped):
                lo, ph, ln, _, _, fl = struct.unpack_from("=QQQQQI", buf, 32 + 56 * i)
                out.append((lo, ph, ln))
                if fl & FIEMAP_EXTENT_LAST:
                    last = True
            if last:
                break
            start = out[-1][0] + out[-1][2]
    except OSError:
        pass
    finally:
        os.close(fd)
    return out


# --------------------------------------------------------------------------
# trace analysis


def parse_raw(text):
    ev = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = LINE_RE.match(line)
        if not m:
            continue
        ev.append((float(m.group("ts")), int(m.group("pid")), m.group("ev"),
                   m.group("body"), m.group("comm").strip(), int(m.group("cpu"))))
    return ev


def analyse(raw_text, root_pid, xserver_tids, rootdev, include_x):
    """Returns dict with page fills, requests, process info (no paths yet)."""
    events = parse_raw(raw_text)
    t_start = t_end = None
    app = {root_pid}
    xs = set(xserver_tids)
    execs = []
    adds = []        # (ts, pid, kind, key, offset, length)  kind 'f' file / 'm' metadata
    issues = []      # (ts, sector, nsect, rwbs, comm)
    completes = []   # (ts, sector, nsect)
    others = {}      # comm -> pages filled on the root device by unrelated tasks during the start-up
    me = os.getpid()
    sched = []       # (ts, pid, cpu, name, body) of every event, for the CPU timeline
    _, rd_kdev, rd_major, rd_minor = rootdev
    for ts, pid, name, body, comm, cpu in events:
        sched.append((ts, pid, cpu, name, body))
        if name == "tracing_mark_write" or name == "print":
            if "tandem-start" in body:
                t_start = ts
            elif "tandem-end" in body:
                t_end = ts
            continue
        if name in ("sched_switch", "sched_wakeup", "sched_wakeup_new"):
            continue
        if name == "sched_process_fork":
            m = FORK_RE.search(body)
            if m:
                parent, child = int(m.group(1)), int(m.group(2))
                if parent in app or pid in app:
                    app.add(child)
                elif parent in xs or pid in xs:
                    xs.add(child)
            continue
        if name == "sched_process_exec":
            m = EXEC_RE.search(body)
            if m and int(m.group(2)) in app:
                execs.append((ts, int(m.group(2)), m.group(1)))
            continue
        if name == "mm_filemap_add_to_page_cache":
            who = "app" if pid in app else ("x" if pid in xs else None)
            if who is None:
                if (pid != me and t_start is not None and t_end is None
                        and body.startswith(f"dev {rd_major}:{rd_minor} ")):
                    others[comm] = others.get(comm, 0) + 1
                continue
            if who == "x" and not include_x:
                continue
            if t_start is None or ts < t_start or (who == "x" and t_end is not None and ts > t_end):
                continue
            m = ADD_RE.match(body)
            if not m:
                continue
            ma, mi, ino, ofs, order = (int(m.group(1)), int(m.group(2)),
                                       int(m.group(3), 16), int(m.group(4)), int(m.group(5)))
            ln = PAGE << order
            if (ma, mi) == (rd_major, rd_minor):
                adds.append((ts, pid, "f", ino, ofs, ln, who))
            elif ma == 0 and ino == rd_kdev:
                adds.append((ts, pid, "m", 0, ofs, ln, who))
            continue
        if name == "block_rq_issue":
            m = RQ_RE.match(body)
            if m and (int(m.group(1)), int(m.group(2))) == (rd_major, rd_minor) and "R" in m.group(3):
                issues.append((ts, int(m.group(4)), int(m.group(5)), m.group(3), comm))
            continue
        if name == "block_rq_complete":
            m = RQ_RE.match(body)
            if m and (int(m.group(1)), int(m.group(2))) == (rd_major, rd_minor) and "R" in m.group(3):
                completes.append((ts, int(m.group(4)), int(m.group(5))))
            continue
    if t_start is None or t_end is None:
        raise RuntimeError("trace markers missing (buffer overrun?)")
    # pair issues with completions (same sector and size, first completion after issue)
    comp_by_key = {}
    for ts, sec, n in completes:
        comp_by_key.setdefault((sec, n), []).append(ts)
    reqs = []
    for ts, sec, n, rwbs, comm in issues:
        lst = comp_by_key.get((sec, n), [])
        c = None
        for i, cts in enumerate(lst):
            if cts >= ts:
                c = cts
                del lst[i]
                break
        reqs.append({"issue": ts, "sector": sec, "nsect": n, "complete": c, "rwbs": rwbs})
    reqs.sort(key=lambda r: r["issue"])
    crit = set(app) | (xs if include_x else set())
    timeline = CpuTimeline(sched, crit.__contains__, t_start, t_end)
    return {"t_start": t_start, "t_end": t_end, "adds": adds, "reqs": reqs, "timeline": timeline,
            "execs": execs, "app_pids": sorted(app), "x_pids": sorted(xs),
            "other_fills": others}


class CpuTimeline:
    """Where the start-up's critical path was, from sched_switch/wakeup events:
    'cpu' = some task of the app tree (or of the X server) is on a CPU;
    'runq' = none on a CPU but one is runnable (waiting for a CPU taken by an
    unrelated task: contention, not think time); 'D' = all asleep, one in
    uninterruptible sleep (I/O); 'S' = all asleep otherwise (waiting for a
    child, a timer, ...).

    On this kernel sched_switch is not reported when a CPU leaves the idle
    task, so a task woken onto an idle CPU is taken to run from its wakeup,
    and any event a task emits proves it is on a CPU."""

    def __init__(self, events, in_set, t_start, t_end):
        self.t_start, self.t_end = t_start, t_end
        state = {}   # pid -> run | runq | D | S
        cur = {}     # cpu -> pid on it (0 = idle)
        segs = []    # (t0, t1, cls)
        last = None

        def cls():
            vals = state.values()
            if "run" in vals:
                return "cpu"
            if "runq" in vals:
                return "runq"
            if "D" in vals:
                return "D"
            return "S"

        for ts, pid, cpu, name, body in events:
            if last is not None and ts > last and ts > t_start and last < t_end:
                a, b = max(last, t_start), min(ts, t_end)
                if b > a:
                    c = cls()
                    if segs and segs[-1][2] == c and segs[-1][1] == a:
                        segs[-1] = (segs[-1][0], b, c)
                    else:
                        segs.append((a, b, c))
            last = ts
            if name == "sched_switch":
                m = SWITCH_RE.search(body)
                if not m:
                    continue
                prev, pst, nxt = int(m.group(1)), m.group(2), int(m.group(3))
                if prev and in_set(prev):
                    state[prev] = "runq" if pst.startswith("R") else ("D" if "D" in pst else "S")
                if nxt and in_set(nxt):
                    state[nxt] = "run"
                cur[cpu] = nxt
                continue
            # the task that emitted an event is on this CPU (pid 0: idle)
            if cur.get(cpu) != pid:
                old = cur.get(cpu)
                if old and state.get(old) == "run":
                    state[old] = "runq"
                cur[cpu] = pid
            if pid and in_set(pid):
                state[pid] = "run"
            if name in ("sched_wakeup", "sched_wakeup_new"):
                m = WAKE_RE.search(body)
                if m:
                    p, tcpu = int(m.group(1)), int(m.group(2))
                    if cur.get(tcpu) == 0:  # idle CPU: p runs at once
                        cur[tcpu] = p
                        if in_set(p):
                            state[p] = "run"
                    elif in_set(p) and state.get(p) != "run":
                        state[p] = "runq"
        if last is not None and last < t_end:
            segs.append((max(last, t_start), t_end, cls()))
        self.segs = segs
        self.starts = [sg[0] for sg in segs]
        cum = [0.0]
        for a, b, c in segs:
            cum.append(cum[-1] + (b - a if c == "cpu" else 0.0))
        self.cum = cum

    def _cpu_upto(self, t):
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        a, b, c = self.segs[i]
        part = (min(t, b) - a) if c == "cpu" else 0.0
        return self.cum[i] + max(0.0, part)

    def cpu(self, a, b):
        """Seconds of 'cpu' class in [a, b]."""
        if b <= a:
            return 0.0
        return self._cpu_upto(b) - self._cpu_upto(a)

    def totals(self):
        t = {"cpu": 0.0, "runq": 0.0, "D": 0.0, "S": 0.0}
        for a, b, c in self.segs:
            t[c] += b - a
        return t


class ReqIndex:
    """Find the first read request issued at/after ts covering a sector."""

    WINDOW_S = 2.0  # a page's read request is issued right after the page is added

    def __init__(self, reqs):
        self.reqs = reqs
        self.issue_ts = [r["issue"] for r in reqs]

    def find(self, ts, sector_lo, sector_hi):
        i = bisect.bisect_left(self.issue_ts, ts - 1e-6)
        while i < len(self.reqs) and self.issue_ts[i] <= ts + self.WINDOW_S:
            r = self.reqs[i]
            if r["sector"] < sector_hi and sector_lo < r["sector"] + r["nsect"]:
                return r
            i += 1
        return None


def phys_of(extents, off):
    """Disk byte offset of file byte offset off, or None (hole)."""
    for lo, ph, ln in extents:
        if lo <= off < lo + ln:
            return ph + (off - lo)
    return None


def build_reads(an, layouts, changed=frozenset()):
    """From page fills to disk-backed page list, then merged reads.
    layouts: ino -> extents.  Returns list of reads:
    dict(kind, key, off, len, issue, end, who)."""
    idx = ReqIndex(an["reqs"])
    pages = []
    unmatched = []
    used = set()
    for ts, pid, kind, key, ofs, ln, who in sorted(an["adds"], key=lambda a: a[0]):
        # split folios into pages so partially-covered folios are handled
        for o in range(ofs, ofs + ln, PAGE):
            if kind == "m":
                ph = o
            else:
                ph = phys_of(layouts.get(key, []), o)
            r = idx.find(ts, ph // 512, (ph + PAGE) // 512) if ph is not None else None
            if r is None:
                # only files that existed before the start-up can have been read:
                # pages of files it created are writes
                unmatched.append((ts, kind, key, o, who, key in changed))
                continue
            used.add(id(r))
            pages.append((ts, kind, key, o, r, who))
    # Fallback for files whose blocks now may not be those read (replaced,
    # deleted or modified by the app, e.g. konsolerc): a read request issued right after the page
    # entered the cache, by a request no other page explains.
    spare = [r for r in an["reqs"] if id(r) not in used]
    cap = {id(r): r["nsect"] * 512 // PAGE for r in spare}
    fallback = set()
    for ts, kind, key, o, who, unknown in unmatched:
        if kind != "f" or not unknown:
            continue  # blocks known and not read: zero-fill, write, unwritten extent
        for r in spare:
            if ts - 1e-6 <= r["issue"] <= ts + FALLBACK_WINDOW_S and cap[id(r)] > 0:
                cap[id(r)] -= 1
                pages.append((ts, kind, key, o, r, who))
                fallback.add(key)
                break
    an["fallback_files"] = fallback
    pages.sort(key=lambda p: (p[0], p[3]))
    reads = []
    cur = None
    for ts, kind, key, o, r, who in pages:
        if (cur is not None and cur["kind"] == kind and cur["key"] == key
                and cur["off"] + cur["len"] == o and (ts - cur["last_ts"]) * 1e6 <= MERGE_GAP_US):
            cur["len"] += PAGE
            cur["last_ts"] = ts
            cur["reqs"].add(id(r))
            cur["reqobjs"].append(r)
            continue
        cur = {"kind": kind, "key": key, "off": o, "len": PAGE, "issue": ts,
               "last_ts": ts, "reqs": {id(r)}, "reqobjs": [r], "who": who}
        reads.append(cur)
    for rd in reads:
        comps = [r["complete"] for r in rd["reqobjs"] if r["complete"] is not None]
        issues = [r["issue"] for r in rd["reqobjs"]]
        rd["io_start"] = min(issues)
        rd["end"] = max(comps) if comps else rd["last_ts"]
        rd["nreq"] = len(rd["reqs"])
        del rd["reqobjs"], rd["reqs"]
    return reads


def io_union(reads):
    iv = sorted((min(r["issue"], r["io_start"]), r["end"]) for r in reads)
    tot, cs, ce = 0.0, None, None
    for s, e in iv:
        if cs is None or s > ce:
            if cs is not None:
                tot += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    if cs is not None:
        tot += ce - cs
    return tot


def make_trace(app, command, recorded, an, reads, paths, sizes, layouts, rootdev, extra_comments,
               changed=frozenset()):
    """Render the trace text and its stats."""
    # metadata pseudo-file: compacted disk blocks
    meta_pages = sorted({o for rd in reads if rd["kind"] == "m"
                         for o in range(rd["off"], rd["off"] + rd["len"], PAGE)})
    meta_map = {}
    meta_ext = []  # (pseudo, disk, len)
    pos = 0
    prev = None
    for o in meta_pages:
        if prev is not None and o != prev + PAGE:
            pos += PAGE  # gap: keep non-adjacent disk blocks non-adjacent
        meta_map[o] = pos
        if meta_ext and meta_ext[-1][1] + meta_ext[-1][2] == o and meta_ext[-1][0] + meta_ext[-1][2] == pos:
            meta_ext[-1] = (meta_ext[-1][0], meta_ext[-1][1], meta_ext[-1][2] + PAGE)
        else:
            meta_ext.append((pos, o, PAGE))
        pos += PAGE
        prev = o
    meta_size = pos
    ids = {}
    files = []
    lines = []
    prev_end = an["t_start"]
    think_total = 0
    think_wall = 0.0
    total = 0
    per_file = {}
    tl = an.get("timeline")
    for rd in reads:
        k = (rd["kind"], rd["key"])
        if k not in ids:
            ids[k] = len(files)
            if rd["kind"] == "m":
                files.append((meta_size, f"[fs-metadata:/dev/{rootdev[0]}]", k))
            else:
                files.append((sizes.get(rd["key"], 0), paths.get(rd["key"], f"[unknown-inode:{rd['key']}]"), k))
        off = meta_map[rd["off"]] if rd["kind"] == "m" else rd["off"]
        gap = max(0.0, rd["issue"] - prev_end)
        think_wall += gap
        think = int(round(tl.cpu(prev_end, rd["issue"]) * 1e6)) if tl else int(round(gap * 1e6))
        think_total += think
        total += rd["len"]
        per_file[ids[k]] = per_file.get(ids[k], 0) + rd["len"]
        lines.append(f"read {ids[k]} {off} {rd['len']} {think}")
        prev_end = rd["end"]
    end_think = (int(round(tl.cpu(prev_end, an["t_end"]) * 1e6)) if tl
                 else max(0, int(round((an["t_end"] - prev_end) * 1e6))))
    think_wall += max(0.0, an["t_end"] - prev_end)
    crit = {k: int(round(v * 1e6)) for k, v in tl.totals().items()} if tl else {}
    wall = an["t_end"] - an["t_start"]
    out = ["# tandem app trace v1"]
    out += [f"# {c}" for c in extra_comments]
    out.append(f"# stats: files={len(files)} bytes={total} reads={len(lines)} "
               f"think_us={think_total} end_think_us={end_think} "
               f"io_busy_us={int(round(io_union(reads) * 1e6))} "
               f"traced_wall_us={int(round(wall * 1e6))} gaps_wall_us={int(round(think_wall * 1e6))}")
    if crit:
        out.append("# critical path (app tree + X server) during the start-up, us: "
                   + " ".join(f"{k}={v}" for k, v in crit.items())
                   + " (cpu: on a CPU; runq: runnable, CPU taken by unrelated load; D/S: asleep)")
    out.append("# end_think_us: CPU time after the last read until the command exited "
               "(the final 'end' line)")
    nx = sum(1 for rd in reads if rd["who"] == "x")
    if nx:
        xb = sum(rd["len"] for rd in reads if rd["who"] == "x")
        xf = sorted({ids[(rd['kind'], rd['key'])] for rd in reads if rd["who"] == "x"})
        out.append(f"# {nx} reads ({xb} bytes) were done by the X server (Xvfb) on the "
                   f"app's behalf, in files {' '.join(map(str, xf))}")
    out.append("# extent <file_id> <file_offset> <disk_offset> <len>: on-disk placement "
               f"on /dev/{rootdev[0]} (FIEMAP; metadata: pseudo offset -> disk offset)")
    for i, (size, path, k) in enumerate(files):
        names = sorted(LINKS.get(k[1], ())) if k[0] == "f" else []
        if len(names) > 1:
            out.append(f"# file {i} has {len(names)} hard links: " + " ".join(names[:24])
                       + (" ..." if len(names) > 24 else ""))
    for i, (size, path, k) in enumerate(files):
        if k[0] == "f" and k[1] in changed:
            out.append(f"# extent {i} unknown: the start-up replaced or modified this file")
            continue
        ext = meta_ext if k[0] == "m" else [(lo, ph, ln) for lo, ph, ln in layouts.get(k[1], [])]
        for lo, ph, ln in ext[:64]:
            out.append(f"# extent {i} {lo} {ph} {ln}")
        if len(ext) > 64:
            out.append(f"# extent {i} ... {len(ext) - 64} more extents omitted")
    out.append(f"app {app}")
    out.append(f"command {command}")
    out.append(f"recorded {recorded}")
    for i, (size, path, k) in enumerate(files):
        out.append(f"file {i} {size} {path}")
    out += lines
    out.append(f"end {end_think}")
    stats = {"files": len(files), "bytes": total, "reads": len(lines),
             "think_us": think_total, "end_think_us": end_think,
             "io_busy_us": int(round(io_union(reads) * 1e6)),
             "gaps_wall_us": int(round(think_wall * 1e6)), "critical_path_us": crit,
             "traced_wall_s": wall, "xserver_reads": nx,
             "metadata_bytes": sum(rd["len"] for rd in reads if rd["kind"] == "m"),
             "per_file_bytes": {files[i][1]: b for i, b in per_file.items()}}
    return "\n".join(out) + "\n", stats


def check_trace(text):
    """Validate a trace against the v1 format; returns list of problems."""
    probs = []
    lines = text.splitlines()
    if not lines or lines[0] != "# tandem app trace v1":
        probs.append("first line is not '# tandem app trace v1'")
    nfiles = 0
    seen = set()
    sizes = {}
    for n, l in enumerate(lines, 1):
        if l.startswith("#") or not l.strip():
            continue
        w = l.split(" ")
        if w[0] in ("app", "command", "recorded"):
            if w[0] in seen:
                probs.append(f"line {n}: duplicate {w[0]}")
            seen.add(w[0])
        elif w[0] == "file":
            if len(w) < 4:
                probs.append(f"line {n}: file line needs id, size and path")
                continue
            fid, size = int(w[1]), int(w[2])
            if fid != nfiles:
                probs.append(f"line {n}: file id {fid} out of order")
            sizes[fid] = size
            nfiles += 1
        elif w[0] == "read":
            if len(w) != 5:
                probs.append(f"line {n}: read line needs 4 integers")
                continue
            fid, off, ln, th = map(int, w[1:5])
            if fid not in sizes:
                probs.append(f"line {n}: unknown file {fid}")
            if off % PAGE or ln % PAGE or ln <= 0 or th < 0:
                probs.append(f"line {n}: bad read {l}")
            if fid in sizes and off >= max(sizes[fid], 1) + PAGE:
                probs.append(f"line {n}: read beyond file size")
        elif w[0] == "end":
            if len(w) != 2 or not w[1].isdigit():
                probs.append(f"line {n}: end line needs one integer")
        else:
            probs.append(f"line {n}: unknown keyword {w[0]}")
    for k in ("app", "command", "recorded"):
        if k not in seen:
            probs.append(f"missing '{k}' line")
    return probs


# --------------------------------------------------------------------------


def record(args, apps, rootdev, raw):
    """Recording phase: returns the metadata dict also saved as raw/meta<suffix>.json."""
    kernel = os.uname().release
    ra_path = read_ahead_path(rootdev[0])
    with open(ra_path) as f:
        ra_saved = f.read().strip()
    tr = Tracefs()
    xs = None
    sched_path = f"/sys/class/block/{rootdev[0]}/queue/scheduler"
    meta = {"kernel": kernel, "device": rootdev[0], "date": datetime.date.today().isoformat(),
            "apps": {}}
    try:
        tr.setup()
        if args.read_ahead_kb is not None:
            with open(ra_path, "w") as f:
                f.write(str(args.read_ahead_kb))
        with open(ra_path) as f:
            meta["read_ahead_kb"] = int(f.read().strip())
        try:
            with open(sched_path) as f:
                meta["scheduler"] = re.search(r"\[(.*?)\]", f.read()).group(1)
        except (OSError, AttributeError):
            meta["scheduler"] = "unknown"
        log(f"kernel {kernel}, root device /dev/{rootdev[0]}, "
            f"read_ahead_kb={meta['read_ahead_kb']}, scheduler {meta['scheduler']}")
        if any(nx for _, _, nx in apps):
            xs = Xserver(args.display)
            xpid = xs.start()
            log(f"Xvfb :{args.display} pid {xpid}")
            # throw-away clients so the X server has initialised everything
            run_timed(["xdpyinfo"], app_env(args.display))
            run_timed(["xdpyinfo"], app_env(args.display))
        for name, command, needs_x in apps:
            argv = shlex.split(command)
            env = app_env(args.display if needs_x else None)
            log(f"{name}: warm-up run")
            run_timed(argv, env)
            m = meta["apps"][name] = {"command": command, "needs_x": needs_x, "env": env,
                                      "traced": [], "cold": [], "warm": []}
            for i in range(args.runs):
                for attempt in range(1, args.retries + 2):
                    # names and sizes of files as they are before the start-up:
                    # the app may replace some (e.g. konsole rewrites konsolerc)
                    prewalk = walk_inodes(os.stat("/").st_dev)
                    waited = wait_quiet(rootdev[0], args.quiet_timeout)
                    if waited is None:
                        log(f"warning: machine not quiet after {args.quiet_timeout} s; recording anyway")
                    xtids = sorted(xs.tids()) if (xs and needs_x) else []
                    data, pid, wall, overrun = traced_run(tr, argv, env)
                    if overrun:
                        log(f"warning: {overrun} events lost in run {i + 1}")
                    # unrelated tasks filling the page cache during the start-up may
                    # read files the app needs, hiding them from the trace: retry
                    an = analyse(data, pid, xtids, rootdev, needs_x)
                    if not an["other_fills"] or attempt > args.retries:
                        break
                    log(f"{name}: run {i + 1} disturbed by unrelated page-cache fills "
                        f"({', '.join(f'{c}={n}' for c, n in sorted(an['other_fills'].items()))}); retrying")
                fn = os.path.join(raw, f"{name}{args.suffix}.run{i + 1}.ftrace.txt")
                with open(fn, "w") as f:
                    f.write(data)
                seen = {int(x, 16) for x in re.findall(
                    rf"mm_filemap_add_to_page_cache: dev {rootdev[2]}:{rootdev[3]} ino ([0-9a-f]+)", data)}
                m["traced"].append({"raw": fn, "pid": pid, "wall_s": wall, "quiet_wait_s": waited,
                                    "attempts": attempt,
                                    "prewalk": {str(k): prewalk[k] for k in seen if k in prewalk},
                                    "overrun": overrun, "xtids": xtids})
                log(f"{name}: traced cold run {i + 1}: {wall:.3f} s (attempt {attempt})")
            for i in range(args.timing_runs):
                wait_quiet(rootdev[0], args.quiet_timeout)
                m["cold"].append(run_timed(argv, env, cold=True))
            run_timed(argv, env)
            for i in range(args.timing_runs):
                m["warm"].append(run_timed(argv, env))
            log(f"{name}: untraced cold " + " ".join(f"{t:.3f}" for t in m["cold"] if t)
                + " s; warm " + " ".join(f"{t:.3f}" for t in m["warm"] if t) + " s")
    finally:
        kill_live()
        if xs:
            xs.stop()
        tr.restore()
        try:
            with open(ra_path, "w") as f:
                f.write(ra_saved)
        except OSError as e:
            log(f"warning: could not restore read_ahead_kb: {e}")
    meta["versions"] = {name: pkg_version(PACKAGES[name]) for name, _, _ in apps if name in PACKAGES}
    with open(os.path.join(raw, f"meta{args.suffix}.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


MEDOID_KEYS = ("bytes", "reads", "think_us", "io_busy_us")


def medoid(stats):
    """Index of the most typical run: the smallest sum over MEDOID_KEYS of
    |value - median| / median."""
    def med(v):
        v = sorted(v)
        n = len(v)
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    meds = {k: med([s[k] for s in stats]) or 1 for k in MEDOID_KEYS}
    score = [sum(abs(s[k] - meds[k]) / meds[k] for k in MEDOID_KEYS) for s in stats]
    return min(range(len(stats)), key=lambda i: (score[i], i))


def analyse_all(args, meta, rootdev, out, runs_dir):
    analyses = {}
    inos = set()
    for name, m in meta["apps"].items():
        for r in m["traced"]:
            with open(r["raw"]) as f:
                an = analyse(f.read(), r["pid"], r["xtids"], rootdev,
                             m["needs_x"] and not args.no_xserver)
            analyses[name] = analyses.get(name, []) + [an]
            inos |= {a[3] for a in an["adds"] if a[2] == "f"}
    log(f"mapping {len(inos)} inodes to paths (walking /)")
    post = walk_inodes(os.stat("/").st_dev, inos)
    post_st, post_ct, post_layout = {}, {}, {}
    for ino, p in post.items():
        try:
            st = os.stat(p, follow_symlinks=False)
        except OSError:
            continue
        post_st[ino], post_ct[ino] = st.st_size, st.st_ctime_ns
        post_layout[ino] = fiemap(p)

    def file_info(run):
        """Per run: paths and sizes as before the start-up (prewalk), extents
        as now.  'changed': files the start-up replaced, deleted or modified
        (their extents now may not be those read); pages of these that no
        request explains by position are matched to requests by time."""
        pre = {int(k): tuple(v) for k, v in run.get("prewalk", {}).items()}
        paths, sizes, layouts, changed = {}, {}, {}, set()
        for ino in set(pre) | set(post):
            if ino in post:
                layouts[ino] = post_layout.get(ino, [])
            if ino in pre:
                paths[ino], sizes[ino] = pre[ino][0], pre[ino][1]
                if (ino not in post or post_st.get(ino) != pre[ino][1]
                        or (len(pre[ino]) > 2 and post_ct.get(ino) != pre[ino][2])):
                    changed.add(ino)
            else:
                paths[ino], sizes[ino] = post[ino], post_st.get(ino, 0)
        return paths, sizes, layouts, changed

    osrel = ("Debian " + open("/etc/debian_version").read().strip()
             if os.path.exists("/etc/debian_version") else "Linux")
    summary = {k: v for k, v in meta.items() if k != "apps"}
    summary["apps"] = {}
    for name, m in meta["apps"].items():
        ver = meta.get("versions", {}).get(name)
        pkg = f" {PACKAGES[name]} {ver}" if ver else ""
        recorded = (f"{meta['date']} ftrace filemap/mm_filemap_add_to_page_cache + block_rq_issue/complete "
                    f"+ sched_switch on Linux {meta['kernel']}, {osrel}{pkg}, cold caches (sync; drop_caches=3), "
                    f"/dev/{meta['device']} read_ahead_kb={meta['read_ahead_kb']} {meta['scheduler']}"
                    + (", Xvfb -noreset, X server fills included" if m["needs_x"] and not args.no_xserver else ""))
        texts, stats = [], []
        for i, an in enumerate(analyses[name]):
            paths, sizes, layouts, changed = file_info(m["traced"][i])
            reads = build_reads(an, layouts, changed)
            comments = [f"recorded by tools/record-app-trace/record-app-trace.py, run {i + 1} of {len(analyses[name])}",
                        "execs: " + ", ".join(p for _, _, p in an["execs"]),
                        "think_us = time the app tree or the X server was on a CPU between the completion of "
                        "read i-1 (block_rq_complete of its requests) and the issue of read i (its first page fill); "
                        "gaps_wall_us = the same gaps in wall-clock time",
                        "pages filled by unrelated tasks during this start-up: "
                        + (", ".join(f"{c}={n}" for c, n in sorted(an["other_fills"].items())) or "none")]
            gone = sorted(paths.get(k, f"[inode {k}]") for k in an["fallback_files"])
            if gone:
                comments.append("changed or replaced during the start-up (name and size from before it; "
                                "some reads matched to requests by time): " + " ".join(gone))
            text, st = make_trace(name, m["command"], recorded, an, reads, paths, sizes, layouts,
                                  rootdev, comments, changed)
            st["wall_s"] = m["traced"][i]["wall_s"]
            st["quiet_wait_s"] = m["traced"][i]["quiet_wait_s"]
            st["other_fills"] = an["other_fills"]
            texts.append(text)
            stats.append(st)
        clean = [i for i, x in enumerate(stats) if not x["other_fills"]] or list(range(len(stats)))
        keep = clean[medoid([stats[i] for i in clean])]
        probs = check_trace(texts[keep])
        if probs:
            log(f"{name}: trace check problems: {probs[:5]}")
        with open(os.path.join(out, f"{name}{args.suffix}.trace"), "w") as f:
            f.write(texts[keep])
        for i, t in enumerate(texts):
            with open(os.path.join(runs_dir, f"{name}{args.suffix}.run{i + 1}.trace"), "w") as f:
                f.write(t)
        summary["apps"][name] = {"command": m["command"], "kept_run": keep + 1, "runs": stats,
                                 "cold_untraced_s": m["cold"], "warm_s": m["warm"]}

        def rng(k):
            v = [x[k] for x in stats]
            return f"{min(v)}..{max(v)}"
        log(f"{name}: kept run {keep + 1}: files={stats[keep]['files']} bytes={stats[keep]['bytes']} "
            f"reads={stats[keep]['reads']} think_us={stats[keep]['think_us']} "
            f"(runs: files {rng('files')} bytes {rng('bytes')} reads {rng('reads')} "
            f"think {rng('think_us')})")
    with open(os.path.join(runs_dir, f"summary{args.suffix}.json"), "w") as f:
        json.dump(summary, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", default="bash,xterm,konsole",
                    help="comma-separated preset names (%s)" % ", ".join(PRESETS))
    ap.add_argument("--app", help="name of a custom app (with --command)")
    ap.add_argument("--command", help="command line of the custom app")
    ap.add_argument("--needs-x", action="store_true", help="custom app needs an X display")
    ap.add_argument("--runs", type=int, default=3, help="traced cold runs per app (default 3)")
    ap.add_argument("--timing-runs", type=int, default=5,
                    help="untraced cold and warm timing runs per app (default 5)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "apps"),
                    help="directory for <app>.trace (default: <repo>/apps)")
    ap.add_argument("--raw", default="/var/tmp/record-app-trace",
                    help="directory for the raw ftrace text (default: /var/tmp/record-app-trace)")
    ap.add_argument("--read-ahead-kb", type=int, default=128,
                    help="read_ahead_kb of the root disk during recording, restored after "
                         "(default 128, the kernel default VM_READAHEAD_PAGES; 0 = leave as is)")
    ap.add_argument("--no-xserver", action="store_true",
                    help="do not count the X server's own page-cache fills during the start-up")
    ap.add_argument("--display", type=int, default=91)
    ap.add_argument("--quiet-timeout", type=float, default=600.0,
                    help="before every cold start, wait up to this many seconds for the machine "
                         "to be quiet (CPU < 60%%, <= 2 process starts/s, < 1 MiB/s disk I/O) for 3 s")
    ap.add_argument("--retries", type=int, default=3,
                    help="re-record a run disturbed by unrelated page-cache fills up to this many times")
    ap.add_argument("--suffix", default="", help="suffix for output file names (e.g. .ra8192)")
    ap.add_argument("--analyse-only", action="store_true",
                    help="do not record; re-analyse the raw traces listed in <raw>/meta<suffix>.json")
    ap.add_argument("--check", nargs="+", metavar="TRACE",
                    help="only validate trace files against the v1 format and exit")
    args = ap.parse_args()

    if args.check:
        bad = 0
        for fn in args.check:
            try:
                with open(fn, encoding="utf-8") as f:
                    probs = check_trace(f.read())
            except (OSError, ValueError, IndexError) as e:
                probs = [str(e)]
            print(f"{fn}: {'ok' if not probs else '; '.join(probs[:5])}")
            bad += bool(probs)
        sys.exit(1 if bad else 0)
    if os.geteuid() != 0:
        die("must run as root (drops caches, uses ftrace, reads extents with FIEMAP)", 2)
    if args.runs < 1:
        die("--runs must be >= 1", 2)
    if args.read_ahead_kb == 0:
        args.read_ahead_kb = None
    apps = []
    if args.app:
        if not args.command:
            die("--app needs --command", 2)
        apps.append((args.app, args.command, args.needs_x))
    else:
        for a in args.apps.split(","):
            if a not in PRESETS:
                die(f"unknown app '{a}'; presets: {', '.join(PRESETS)} (or use --app/--command)", 2)
            apps.append((a, PRESETS[a][0], PRESETS[a][1]))
    if not args.analyse_only:
        import shutil
        need = {shlex.split(c)[0] for _, c, _ in apps}
        if any(nx for _, _, nx in apps):
            need |= {"Xvfb", "xdpyinfo"}
        missing = sorted(n for n in need if shutil.which(n) is None)
        if missing:
            die(f"not installed: {', '.join(missing)} "
                "(apt-get install -y xvfb x11-utils xterm konsole)", 2)
    out = os.path.abspath(args.out)
    raw = os.path.abspath(args.raw)
    runs_dir = os.path.join(out, "runs")
    for d in (out, raw, runs_dir):
        os.makedirs(d, exist_ok=True)
    rootdev = root_device()
    if args.analyse_only:
        fn = os.path.join(raw, f"meta{args.suffix}.json")
        try:
            with open(fn) as f:
                meta = json.load(f)
        except OSError as e:
            die(f"--analyse-only: cannot read {fn}: {e}", 2)
        wanted = {a for a, _, _ in apps}
        meta["apps"] = {k: v for k, v in meta["apps"].items() if k in wanted}
    else:
        def on_term(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, on_term)
        try:
            meta = record(args, apps, rootdev, raw)
        except KeyboardInterrupt:
            die("interrupted; machine state restored", 130)
    analyse_all(args, meta, rootdev, out, runs_dir)


if __name__ == "__main__":
    main()
