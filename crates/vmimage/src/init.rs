//! The guest's `/init`: a busybox shell script, the only process the kernel
//! starts. It brings up what the benchmark guest needs (filesystems, the
//! modules, the data disk, the virtio-serial ports) and then runs one of three
//! things, chosen on the kernel command line and by the ports QEMU offers:
//!
//! - `tandem.smoke=1`: prints one [`READY_PREFIX`] line describing the guest,
//!   then powers off (the image's own boot test);
//! - a port named [`BENCH_PORT`]: the benchmark agent (`tandem vm agent`);
//! - otherwise a shell on the console.
//!
//! It always ends with `poweroff -f`, so QEMU exits when the guest is done.

/// The virtio-serial port over which the host's runner talks to the guest agent.
pub const BENCH_PORT: &str = "tandem.bench";

/// The line a smoke boot prints: `tandem-guest-ready kernel=<uname -r>
/// vda_sched=<contents of /sys/block/vda/queue/scheduler, or none>
/// ports=<comma-separated port names> data=<yes|no>`.
pub const READY_PREFIX: &str = "tandem-guest-ready";

/// The script. devtmpfs makes `/dev/vportNpM` but not the
/// `/dev/virtio-ports/NAME` links (udev's job), so the script makes them.
pub const SCRIPT: &str = r#"#!/bin/sh
# /init of tandem's benchmark guest (written by `tandem vm image`).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
exec </dev/console >/dev/console 2>&1

say() { echo "tandem-init: $*"; }

# Modules in dependency order; failures of the optional ones (vsock) are
# expected when QEMU has no such device.
while read -r ko flag; do
    [ -n "$ko" ] || continue
    if ! err=$(insmod "$ko" 2>&1); then
        [ "$flag" = optional ] || say "insmod $ko failed: $err"
    fi
done </etc/tandem/modules

# The data disk: up to 10 s for virtio-blk to show it, then mounted if it
# holds an ext4 filesystem.
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
data=no
if [ -b /dev/vda ]; then
    if mount -t ext4 -o noatime /dev/vda /data 2>/dev/null; then
        data=yes
    else
        say "/dev/vda holds no ext4 filesystem; /data is not mounted"
    fi
fi

mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup 2>/dev/null ||
    mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null

# virtio-serial ports appear and get their names from QEMU shortly after
# virtio_console binds: wait up to 2 s for every port to have one.
if ls /sys/bus/virtio/drivers/virtio_console/ 2>/dev/null | grep -q '^virtio'; then
    i=0
    while [ $i -lt 20 ]; do
        n=0
        unnamed=0
        for f in /sys/class/virtio-ports/*/name; do
            [ -e "$f" ] || continue
            n=$((n + 1))
            [ -n "$(cat "$f")" ] || unnamed=$((unnamed + 1))
        done
        [ $n -gt 0 ] && [ $unnamed -eq 0 ] && break
        sleep 0.1
        i=$((i + 1))
    done
fi
ports=
mkdir -p /dev/virtio-ports
for f in /sys/class/virtio-ports/*/name; do
    [ -e "$f" ] || continue
    name=$(cat "$f")
    [ -n "$name" ] || continue
    dev=$(basename "$(dirname "$f")")
    ln -sf "../$dev" "/dev/virtio-ports/$name"
    ports="${ports:+$ports,}$name"
done

case " $(cat /proc/cmdline) " in
*" tandem.smoke=1 "*)
    sched=$(cat /sys/block/vda/queue/scheduler 2>/dev/null)
    echo "tandem-guest-exe: $(/bin/tandem --version 2>&1 || echo failed)"
    echo "tandem-guest-ready kernel=$(uname -r) vda_sched=${sched:-none} ports=$ports data=$data"
    ;;
*)
    if [ -e /dev/virtio-ports/tandem.bench ]; then
        /bin/tandem vm agent --port tandem.bench --data /data ||
            say "tandem vm agent exited with status $?"
    else
        say "no tandem.bench port: shell on the console; exit to power off"
        setsid cttyhack sh || sh
    fi
    ;;
esac

sync
umount /data 2>/dev/null
poweroff -f
"#;

/// What a smoke boot's ready line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// `uname -r` in the guest.
    pub kernel: String,
    /// The schedulers vda offers (the active one in brackets, as sysfs shows
    /// it), empty when there is no vda.
    pub vda_schedulers: Vec<String>,
    pub ports: Vec<String>,
    /// /dev/vda was mounted on /data.
    pub data: bool,
}

impl Ready {
    /// True when `sched` is among vda's schedulers (active or not).
    pub fn has_scheduler(&self, sched: &str) -> bool {
        self.vda_schedulers
            .iter()
            .any(|s| s.trim_matches(|c| c == '[' || c == ']') == sched)
    }
}

/// The ready line in a guest's console output, if there is one. The scheduler
/// list holds spaces (it is sysfs's text), so the fields are cut at the next
/// key rather than at whitespace.
pub fn parse_ready(console: &str) -> Option<Ready> {
    let line = console
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .find_map(|l| l.find(READY_PREFIX).map(|i| &l[i + READY_PREFIX.len()..]))?;
    let rest = line.strip_prefix(" kernel=")?;
    let (kernel, rest) = rest.split_once(" vda_sched=")?;
    let (sched, rest) = rest.split_once(" ports=")?;
    let (ports, data) = rest.split_once(" data=")?;
    let sched = sched.trim();
    Some(Ready {
        kernel: kernel.trim().to_string(),
        vda_schedulers: if sched == "none" {
            vec![]
        } else {
            sched.split_whitespace().map(String::from).collect()
        },
        ports: ports
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect(),
        data: match data.trim() {
            "yes" => true,
            "no" => false,
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_are_parsed() {
        let log = "noise\r\ntandem-guest-exe: tandem 0.1.0\r\n\
                   tandem-guest-ready kernel=6.1.0-56-amd64 vda_sched=[mq-deadline] kyber bfq none ports=tandem.bench,other data=yes\r\n";
        let r = parse_ready(log).unwrap();
        assert_eq!(r.kernel, "6.1.0-56-amd64");
        assert_eq!(r.vda_schedulers, ["[mq-deadline]", "kyber", "bfq", "none"]);
        assert!(r.has_scheduler("bfq") && r.has_scheduler("mq-deadline"));
        assert!(!r.has_scheduler("cfq"));
        assert_eq!(r.ports, ["tandem.bench", "other"]);
        assert!(r.data);
        let r = parse_ready("tandem-guest-ready kernel=6.1 vda_sched=none ports= data=no").unwrap();
        assert!(r.vda_schedulers.is_empty() && r.ports.is_empty() && !r.data);
        assert_eq!(parse_ready("tandem-guest-ready kernel=6.1 data=yes"), None);
        assert_eq!(
            parse_ready("tandem-guest-ready kernel=6.1 vda_sched=none ports= data=maybe"),
            None
        );
        assert_eq!(parse_ready("booting"), None);
    }

    #[test]
    fn the_script_names_the_port_and_the_ready_line() {
        assert!(SCRIPT.starts_with("#!/bin/sh\n"));
        assert!(SCRIPT.contains(&format!("-e /dev/virtio-ports/{BENCH_PORT} ]")));
        assert!(SCRIPT.contains(&format!("--port {BENCH_PORT} --data /data")));
        assert!(SCRIPT.contains(&format!("echo \"{READY_PREFIX} kernel=")));
        assert!(SCRIPT.contains("poweroff -f"));
    }

    /// The script parses (`sh -n`) under the host's shell.
    #[test]
    fn the_script_is_valid_shell() {
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", SCRIPT])
            .output()
            .expect("run sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
