# bench/lib.sh - helpers sourced by bench/pull.sh and bench/suite.sh (not run by itself).
# The caller sets ROOT (repo root), BENCH_DIR and RIG_DIR and defines die().

# bench_in_systemd SCRIPT ARGS...: return if systemd is PID 1 (directly or because we already
# run inside tests/sysd.sh). Otherwise boot a private systemd with tests/sysd.sh (state in
# $SYSD_DIR, default /tmp/hostpull-bench-sysd, so a test run's /tmp/hostpull-sysd is left
# alone), run SCRIPT ARGS inside it with the environment kept, power it off again (unless it
# was already up) and exit with SCRIPT's code. Shared into it: the repo, $BENCH_DIR, $RIG_DIR.
bench_in_systemd() {
    local rc=0 booted=0 d shares=
    [ "$(cat /proc/1/comm)" = systemd ] && return 0
    [ -z "${BENCH_IN_SYSD:-}" ] || die "inside tests/sysd.sh, yet PID 1 is not systemd"
    export SYSD_DIR=${SYSD_DIR:-/tmp/hostpull-bench-sysd}
    for d in "$ROOT" "$BENCH_DIR" "$RIG_DIR" ${BENCH_SHARE:-}; do   # skip dirs under another
        case " $shares " in *" $d "*) continue ;; esac
        [[ $d == "$BENCH_DIR"/* || $d == "$ROOT"/* ]] && continue
        shares="$shares $d"
    done
    export SYSD_SHARE=${shares# }
    if ! "$ROOT/tests/sysd.sh" pid >/dev/null 2>&1; then
        echo "bench: PID 1 is not systemd: booting one (tests/sysd.sh, SYSD_DIR=$SYSD_DIR)" >&2
        "$ROOT/tests/sysd.sh" up >&2
        booted=1
        trap '"$ROOT/tests/sysd.sh" down >&2' EXIT
    fi
    BENCH_IN_SYSD=1 "$ROOT/tests/sysd.sh" exec "$@" || rc=$?
    if [ $booted = 1 ]; then trap - EXIT; "$ROOT/tests/sysd.sh" down >&2 || true; fi
    exit $rc
}

# wait_quiet: wait until the 1-minute load average is below $QUIET_LOAD (1.0), polling every
# 10 s for at most $QUIET_MAX s (600), then go on anyway. Prints "LOAD WAITED_S".
wait_quiet() {
    local t0=$SECONDS l _
    while :; do
        read -r l _ </proc/loadavg
        awk -v l="$l" -v m="${QUIET_LOAD:-1.0}" 'BEGIN { exit !(l < m) }' && break
        if (( SECONDS - t0 >= ${QUIET_MAX:-600} )); then
            echo "bench: load $l still >= ${QUIET_LOAD:-1.0} after $((SECONDS - t0)) s: measuring anyway" >&2
            break
        fi
        sleep 10
    done
    echo "$l $((SECONDS - t0))"
}

# hwm PID: VmHWM (peak RSS, KiB) of PID, 0 if gone. alive PID: exists, not a zombie.
hwm() {
    local k v _
    while read -r k v _; do [ "$k" = VmHWM: ] && { echo "$v"; return; }; done 2>/dev/null <"/proc/$1/status"
    echo 0
}
alive() {
    local k v _
    while read -r k v _; do [ "$k" = State: ] && { [ "$v" != Z ]; return; }; done 2>/dev/null <"/proc/$1/status"
    return 1
}
# kids PID: children of every thread of PID (tokio spawns its children from worker threads)
kids() { local f; for f in /proc/"$1"/task/*/children; do echo $(<"$f"); done 2>/dev/null || true; }

# bench_systemd_for SCRIPT ARGS...: bench_in_systemd, with BENCH_DIR, RIG_DIR and HOSTPULL
# exported and hostpull's own directory shared too.
bench_systemd_for() {
    export BENCH_DIR RIG_DIR HOSTPULL BENCH_SHARE
    BENCH_SHARE=$(dirname "$HOSTPULL")
    bench_in_systemd "$@"
}
