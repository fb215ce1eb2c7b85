#!/bin/bash
# tests/sysd.sh - a private, real systemd for hostpull's tests on a host whose PID 1 is not
# systemd. The distro's /lib/systemd/systemd runs as PID 1 of new pid, mount, uts, ipc and
# cgroup namespaces. It needs root and nothing beyond systemd and util-linux.
#
#   sysd.sh up            boot it (basic.target), wait until it is running, print boot time
#   sysd.sh exec CMD...   run CMD inside (all its namespaces; env and cwd kept; exit code kept)
#   sysd.sh pid           print the host PID of the inner PID 1 (fails if not up)
#   sysd.sh down          power it off, remove its cgroups (fine when it is not up)
#
# Root filesystem inside = overlay(lower = host /, upper = tmpfs): what the host has installed
# is visible; writes stay inside except in SYSD_SHARE dirs (bound read-write, same path).
# The network is the host's (127.0.0.1 works). Paths given to units (ExecStart=,
# LoadCredential=, Bind*Paths=) resolve inside: keep such files under a shared directory.
#
# Knobs:
#   SYSD_DIR      state: PID file, console log (default /tmp/hostpull-sysd)
#   SYSD_SHARE    space-separated directories to share (default: the repo root, which holds
#                 target/, and $RIG_DIR or /tmp/hostpull-rig)
#   SYSD_TIMEOUT  boot timeout in seconds (default 60)
# Supported cgroup layout: the v1/v2 hybrid (tmpfs /sys/fs/cgroup, v1 controllers,
# name=systemd, cgroup2 at /sys/fs/cgroup/unified).
set -euo pipefail

SELF=$(readlink -f "$0")
SYSD_DIR=$(realpath -m "${SYSD_DIR:-/tmp/hostpull-sysd}")
SYSD_SHARE=${SYSD_SHARE:-"$(dirname "$(dirname "$SELF")") ${RIG_DIR:-/tmp/hostpull-rig}"}
SYSD_TIMEOUT=${SYSD_TIMEOUT:-60}
export SYSD_DIR SYSD_SHARE                 # the inner stages read them from the environment
CGNAME=$(basename "$SYSD_DIR")             # a cgroup per state dir, so two rigs can coexist
PIDFILE=$SYSD_DIR/pid1
CGFILE=$SYSD_DIR/cgroups                   # lines "HIERARCHY HOST-DIR" made by `up`

die() { echo "sysd: $*" >&2; exit 1; }

# alive PID [COMM]: the process exists, is not a zombie (and is named COMM)
alive() {
    local st
    read -r st 2>/dev/null <"/proc/$1/stat" || return 1
    [ -z "${2:-}" ] || [[ $st == "$1 ($2) "* ]] || return 1
    st=${st##*) }; [ "${st%% *}" != Z ]
}

# pid1: print the inner PID 1's host PID if it is up. It must live in a pid namespace other
# than ours, so a stale PID file whose PID was reused by a host process does not count.
pid1() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) && [ -n "$pid" ] && alive "$pid" &&
        [ "$(readlink "/proc/$pid/ns/pid")" != "$(readlink /proc/self/ns/pid)" ] && echo "$pid"
}

# ------------------------------------------------------------------ inside (PID 1 stages)
# Stage 1: PID 1 of the new pid/mount/uts/ipc namespaces, still in the host cgroup namespace.
stage1() {
    local pid _ h dir
    # /proc is still the host's procfs, so /proc/self/stat (opened by bash itself for the
    # builtin `read`) gives our HOST PID.
    read -r pid _ </proc/self/stat
    # Only PID 1 joins the prepared cgroups; the cgroup namespace unshared afterwards makes
    # them the roots the inner systemd sees (`exec` keeps the PID).
    while read -r h dir; do echo 0 >"$dir/cgroup.procs"; done <"$CGFILE"
    echo "$pid" >"$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"
    exec unshare --cgroup "$SELF" __stage2
}

# Stage 2: build the root filesystem, pivot into it, exec systemd.
stage2() {
    local R=$SYSD_DIR/root O=$SYSD_DIR/ovl h dir d
    mkdir -p "$R" "$O"
    mount -t tmpfs -o mode=755 sysd-ovl "$O"
    mkdir "$O/upper" "$O/work"
    mount -t overlay sysd-root -o "lowerdir=/,upperdir=$O/upper,workdir=$O/work" "$R"

    # Boot basic.target (it has dbus.socket, which systemd-run --pipe needs) without the
    # units the host enabled (postgresql, docker-registry, apt timers, timesyncd, getty...).
    find "$R/etc/systemd/system" -maxdepth 1 -type d \( -name '*.wants' -o -name '*.requires' \) \
        -exec rm -rf {} +
    mkdir -p "$R/etc/tmpfiles.d" "$R/etc/systemd/system.conf.d"
    echo hostpull-sysd >"$R/etc/hostname" # systemd sets the (private) hostname from it
    : >"$R/etc/tmpfiles.d/tmp.conf"        # masks "D /tmp": it would wipe the shared /tmp dirs
    printf '[Manager]\nDefaultTimeoutStopSec=5s\n' >"$R/etc/systemd/system.conf.d/sysd.conf"

    # API filesystems, shaped like systemd-nspawn's. /proc/sys and /sys are read-only: the
    # kernel settings are the host's (systemd skips sysctl etc. when they are read-only).
    mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
    for d in sys sysrq-trigger; do
        [ -e "$R/proc/$d" ] || continue    # no sysrq-trigger without CONFIG_MAGIC_SYSRQ
        mount --bind "$R/proc/$d" "$R/proc/$d"; mount -o remount,bind,ro "$R/proc/$d"
    done
    mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
    mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup-root "$R/sys/fs/cgroup"
    # The hierarchies must be READ-WRITE, or the inner systemd cannot apply MemoryMax= etc.
    # and limits silently do nothing (this is why nspawn, which mounts them ro, is not used).
    while read -r h dir; do
        case $h in
            unified) mkdir "$R/sys/fs/cgroup/unified"
                     mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup/unified" ;;
            name=*)  mkdir "$R/sys/fs/cgroup/${h#name=}"
                     mount -t cgroup -o "nosuid,nodev,noexec,none,$h" cgroup "$R/sys/fs/cgroup/${h#name=}" ;;
            *)       mkdir "$R/sys/fs/cgroup/$h"
                     mount -t cgroup -o "nosuid,nodev,noexec,$h" cgroup "$R/sys/fs/cgroup/$h" ;;
        esac
    done <"$CGFILE"
    mount -o remount,ro,nosuid,nodev,noexec,mode=755 cgroup-root "$R/sys/fs/cgroup"

    mount -t tmpfs -o mode=755,nosuid dev "$R/dev"
    for d in null zero full random urandom tty; do
        touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"
    done
    mkdir "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$R/dev/shm"
    mount -t mqueue mqueue "$R/dev/mqueue"
    ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
    ln -s fd/0 "$R/dev/stdin"; ln -s fd/1 "$R/dev/stdout"; ln -s fd/2 "$R/dev/stderr"
    # systemd needs a terminal as /dev/console: the pty that script(1) gave us as stdin.
    touch "$R/dev/console"; mount --bind "$(tty)" "$R/dev/console"

    mount -t tmpfs -o mode=755,nosuid,nodev run "$R/run"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$R/tmp"
    for d in $SYSD_SHARE; do               # after /tmp, so shares under /tmp land on top
        mkdir -p "$R$d"; mount --rbind "$d" "$R$d"
    done

    cd "$R"; mkdir -p .oldroot; pivot_root . .oldroot; cd /; umount -l /.oldroot; rmdir /.oldroot
    # systemd makes / shared only when it does NOT think it is in a container. Without this,
    # services' private mount namespaces break (LoadCredential= fails: Permission denied).
    mount --make-rshared /

    # Clean environment; $container tells systemd it is in a container. Bounding set as
    # systemd-nspawn gives it: no module loading, clock setting, or (shared!) network admin.
    exec env -i container=hostpull-sysd PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        setpriv --bounding-set -sys_module,-sys_rawio,-sys_time,-sys_pacct,-net_admin,-ipc_lock,-mac_admin,-mac_override,-syslog,-wake_alarm,-block_suspend,-audit_read,-bpf,-perfmon,-checkpoint_restore \
        /lib/systemd/systemd --unit=basic.target --show-status=yes
}

# ------------------------------------------------------------------ host side
# remove_cgroups: remove our cgroups (deepest first); they empty once the namespace is dead.
remove_cgroups() {
    local h dir i left
    [ -f "$CGFILE" ] || return 0
    for i in $(seq 50); do
        left=0
        while read -r h dir; do
            [ -d "$dir" ] || continue
            find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
            [ -d "$dir" ] && left=1
        done <"$CGFILE"
        [ $left = 0 ] && { rm -f "$CGFILE"; return 0; }
        sleep 0.1
    done
    echo "sysd: could not remove cgroups listed in $CGFILE" >&2; return 1
}

cmd_up() {
    local pid h dir d state= t0 spid
    [ "$(id -u)" = 0 ] || die "must be root"
    [ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] && [ -d /sys/fs/cgroup/unified ] &&
        [ -d /sys/fs/cgroup/systemd ] || die "unsupported cgroup layout (expected the v1/v2 hybrid)"
    if pid=$(pid1); then die "already up (pid $pid)"; fi
    for d in $SYSD_SHARE; do [[ $d == /* ]] || die "SYSD_SHARE: $d is not absolute"; done
    remove_cgroups || die "leftover cgroups from an earlier run"
    mkdir -p "$SYSD_DIR" $SYSD_SHARE
    rm -f "$PIDFILE" "$SYSD_DIR/console.log" "$SYSD_DIR/script.pid"
    t0=$EPOCHREALTIME

    # A child cgroup of the caller's in every hierarchy ("0::" = cgroup2 at unified/).
    while IFS=: read -r _ h dir; do
        h=${h:-unified}; dir=/sys/fs/cgroup/${h#name=}${dir%/}/$CGNAME
        mkdir -p "$dir"; echo "$h $dir"
        if [ "$h" = cpuset ]; then        # a new v1 cpuset is empty: nobody could join it
            cat "${dir%/*}/cpuset.cpus" >"$dir/cpuset.cpus"
            cat "${dir%/*}/cpuset.mems" >"$dir/cpuset.mems"
        fi
    done </proc/self/cgroup >"$CGFILE"

    # script(1) gives the console pty and logs it; setsid + closed fds: fully detached.
    # --kill-child: if unshare dies, so does the whole namespace (no orphaned systemd).
    setsid script -qfec "exec unshare --kill-child --pid --fork --mount --uts --ipc --propagation private $(printf %q "$SELF") __stage1" \
        "$SYSD_DIR/console.log" </dev/null >/dev/null 2>"$SYSD_DIR/script.log" &
    spid=$!; echo "$spid" >"$SYSD_DIR/script.pid"

    while (( EPOCHSECONDS < ${t0%.*} + SYSD_TIMEOUT )); do
        if pid=$(pid1); then
            # ask only once systemd runs; before that systemctl would look at the wrong /run
            if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ]; then
                state=$(nsenter -t "$pid" -a systemctl is-system-running 2>/dev/null || true)
                case $state in running|degraded) break ;; esac
            fi
        elif ! alive "$spid"; then
            break                          # died during boot
        fi
        sleep 0.05
    done
    case $state in
        running|degraded)
            echo "sysd: up, pid $pid, $state, boot $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s" ;;
        *)
            echo "sysd: boot failed (state '${state:-none}'); console log:" >&2
            cat "$SYSD_DIR/console.log" "$SYSD_DIR/script.log" >&2 2>/dev/null || true
            [ -n "${pid:-}" ] && nsenter -t "$pid" -a systemctl --failed --no-pager >&2 2>/dev/null || true
            cmd_down >&2 || true
            die "boot failed" ;;
    esac
}

cmd_exec() {
    local pid wd=/
    [ $# -gt 0 ] || die "usage: sysd.sh exec CMD..."
    pid=$(pid1) || die "not up"
    if [ -d "/proc/$pid/root$PWD" ]; then wd=$PWD; else echo "sysd: $PWD not visible inside, cwd /" >&2; fi
    # `nsenter --wd` would resolve the directory in the HOST mount namespace: cd inside instead.
    exec nsenter -t "$pid" -a /bin/sh -c 'cd "$0" && exec "$@"' "$wd" "$@"
}

# thaw PID1: SIGCONT stopped `nsenter -t PID1` processes. At poweroff, systemd-shutdown does
# kill(-1, SIGSTOP) inside; nsenter (the host-side parent of an `exec` command) sees its child
# stop and SIGSTOPs itself, waiting for a shell's `fg`. Frozen, it never reaps the child
# once that is killed, and the namespace's PID 1 cannot finish exiting: down would hang.
thaw() {
    local p st
    for p in /proc/[0-9]*; do
        read -r st 2>/dev/null <"$p/stat" || continue
        case $st in *" (nsenter) T "*) ;; *) continue ;; esac
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "-t $1 " && kill -CONT "${p#/proc/}" 2>/dev/null
    done
    return 0
}

cmd_down() {
    local pid spid i
    if pid=$(pid1); then
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ]; then
            kill -s RTMIN+4 "$pid"         # systemd: poweroff; in a container PID 1 then exits
            for i in $(seq 300); do alive "$pid" || break; thaw "$pid"; sleep 0.05; done
        fi
        if alive "$pid"; then              # hung, or still in a boot stage
            echo "sysd: PID 1 did not power off, SIGKILL" >&2
            kill -9 "$pid"                 # the kernel then kills the whole pid namespace
            for i in $(seq 100); do alive "$pid" || break; thaw "$pid"; sleep 0.05; done
        fi
    fi
    # script(1) exits once PID 1 is gone. If not (down during boot, before the PID file
    # exists), SIGTERM it: it passes that on to unshare, whose --kill-child SIGKILLs the
    # namespace's PID 1. (Never kill script alone: systemd on a dead console crawls.)
    if spid=$(cat "$SYSD_DIR/script.pid" 2>/dev/null) && [ -n "$spid" ]; then
        for i in $(seq 40); do alive "$spid" script || break; sleep 0.05; done
        if alive "$spid" script; then kill "$spid"; sleep 1; fi
        if alive "$spid" script; then kill -9 "$spid"; fi
    fi
    rm -f "$PIDFILE" "$SYSD_DIR/script.pid"
    remove_cgroups || { echo "sysd: down: cgroups left behind" >&2; return 1; }
    echo "sysd: down"
}

case ${1:-} in
    __stage1) stage1 ;;
    __stage2) stage2 ;;
    up)       cmd_up ;;
    exec)     shift; cmd_exec "$@" ;;
    pid)      pid1 || die "not up" ;;
    down)     cmd_down ;;
    *)        echo "usage: $0 up | exec CMD... | pid | down" >&2; exit 2 ;;
esac
