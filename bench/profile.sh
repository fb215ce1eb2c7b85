#!/bin/bash
# bench/profile.sh - where the time of a pull goes (docs/benchmarks.md), against the rig of
# bench/suite.sh (RIG_DIR, default $BENCH_DIR/rig, brought up by suite.sh).
#
#   bench/profile.sh [-n RUNS] [--no-perf]
#
# 1. On the host, big:v1 (512 MiB): CPU seconds per pull (user+sys of the process tree, and the
#    registry's) for hostpull --sandbox none and skopeo copy; then one `perf record` of each,
#    broken down by process and function. skopeo is stripped: its Go functions are named from
#    .gopclntab by bench/gosym.py.
# 2. Inside a real systemd (tests/sysd.sh unless PID 1 is systemd): CPU seconds per pull with
#    --sandbox systemd and none (hostpull's process tree + the worker units' cgroups), and
#    the phases of a pull, from
#    `perf trace` of execve/syncfs/exit_group (tracepoints: unlike strace's ptrace, they do not
#    slow Go's signals and threads), for a full pull with --sandbox systemd and none and for
#    the update pull big:v1 -> big:v2:
#      setup  start -> the proxy worker is started (includes the `skopeo inspect` worker)
#      data   -> syncfs starts (proxy Initialize, all blobs, worker stopped)
#      sync   syncfs(2) of the layout's filesystem before index.json is written
#      tail   -> exit
# Each part waits for a 1-minute load average below QUIET_LOAD (1.0), at most QUIET_MAX s.
# Output: $BENCH_DIR/profile/*.
set -euo pipefail

die() { echo "profile: $*" >&2; exit 1; }
note() { echo "profile: $*" >&2; }

ARGS=("$@")
RUNS=5 PERF=1 INNER=0
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --no-perf) PERF=0; shift ;;
        --phases) INNER=1; shift ;;    # internal: only part 2 (inside systemd)
        *) echo "usage: $0 [-n RUNS] [--no-perf]" >&2; exit 2 ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
export RIG_DIR=${RIG_DIR:-$BENCH_DIR/rig}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
P=$BENCH_DIR/profile D=$BENCH_DIR/dest-profile
mkdir -p "$P"
[ -f "$RIG_DIR/env" ] || die "no rig in $RIG_DIR: run bench/suite.sh first (or RIG_BENCH=1 tests/rig.sh up)"
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR) BIG=$(rig RIG_IMG_BIG) BIG2=$(rig RIG_IMG_BIG2)
export HOSTPULL=${HOSTPULL:-$BENCH_DIR/bin/hostpull}
[ -x "$HOSTPULL" ] || die "no $HOSTPULL: run bench/suite.sh first (or set HOSTPULL)"
HP=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --json)
SK=(skopeo copy --quiet --authfile "$AUTH" --src-cert-dir "$CERTS")
med() { median %.2f; }

# ---------------------------------------------------------------- 1. CPU and perf (host)
if [ $INNER = 0 ]; then
    REG=$(cat "$RIG_DIR/registry.pid")
    regcpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$REG/stat"; }
    one() {   # one TOOL: "wall user sys registry" of one pull of big:v1 into a fresh layout
        local r0 r1; rm -rf "$D"; r0=$(regcpu)
        if [ "$1" = hostpull ]; then
            /usr/bin/time -f '%e %U %S' -o "$P/time.txt" "${HP[@]}" "docker://$BIG" --dest "oci:$D:x" --sandbox none >/dev/null 2>&1
        else
            /usr/bin/time -f '%e %U %S' -o "$P/time.txt" "${SK[@]}" "docker://$BIG" "oci:$D:x"
        fi
        r1=$(regcpu); rm -rf "$D"
        echo "$(tail -n1 "$P/time.txt") $(awk -v a="$r0" -v b="$r1" 'BEGIN { print b - a }')"
    }
    note "CPU per pull: waiting for load < ${QUIET_LOAD:-1.0}"
    read -r load _ < <(wait_quiet)
    : >"$P/cpu.txt"
    one hostpull >/dev/null; one skopeo >/dev/null    # warm-up
    for i in $(seq "$RUNS"); do
        echo "hostpull $(one hostpull)" >>"$P/cpu.txt"; echo "skopeo $(one skopeo)" >>"$P/cpu.txt"
    done
    {
        echo "CPU seconds per pull of big:v1 (512 MiB), medians of $RUNS, load $load before"
        printf '  %-24s %6s %6s %6s %6s %9s\n' tool wall user sys tree registry
        for t in hostpull skopeo; do
            printf '  %-24s %6s %6s %6s %6s %9s\n' "$([ $t = hostpull ] && echo 'hostpull --sandbox none' || echo 'skopeo copy')" \
                "$(awk -v t=$t '$1 == t { print $2 }' "$P/cpu.txt" | med)" \
                "$(awk -v t=$t '$1 == t { print $3 }' "$P/cpu.txt" | med)" \
                "$(awk -v t=$t '$1 == t { print $4 }' "$P/cpu.txt" | med)" \
                "$(awk -v t=$t '$1 == t { print $3 + $4 }' "$P/cpu.txt" | med)" \
                "$(awk -v t=$t '$1 == t { print $5 }' "$P/cpu.txt" | med)"
        done
    } | tee "$P/cpu-summary.txt"
    if [ $PERF = 1 ]; then
        command -v perf >/dev/null || die "perf missing (--no-perf to skip)"
        objcopy --dump-section .gopclntab="$P/skopeo.gopclntab" "$(command -v skopeo)" /dev/null
        note "perf: waiting for load < ${QUIET_LOAD:-1.0}"
        read -r load _ < <(wait_quiet)
        rm -rf "$D"
        perf record -q -g -F 1999 -o "$P/hostpull.perf" -- "${HP[@]}" "docker://$BIG" --dest "oci:$D:x" --sandbox none >/dev/null 2>&1
        rm -rf "$D"
        perf record -q -g -F 1999 -o "$P/skopeo.perf" -- "${SK[@]}" "docker://$BIG" "oci:$D:x"
        rm -rf "$D"
        for t in hostpull skopeo; do
            echo "== perf, $([ $t = hostpull ] && echo 'hostpull --sandbox none (with its skopeo)' || echo 'skopeo copy'), load $load before"
            perf script -i "$P/$t.perf" -G -F comm,ip,sym,dso 2>/dev/null | python3 "$ROOT/bench/gosym.py" "$P/skopeo.gopclntab" 12
            echo
        done | tee "$P/perf-summary.txt"
    fi
    bench_in_systemd "$ROOT/bench/profile.sh" --phases -n "$RUNS"   # part 2
fi

# ---------------------------------------------------------------- 2. phases (inside systemd)
# trace NAME IMAGE DEST MODE: one pull under `perf trace` (tracepoints, no ptrace stops) of
# execve/syncfs/exit_group; appends "NAME setup data sync tail total startup_ms"
trace() {
    local name=$1 img=$2 dest=$3 mode=$4 s=$P/trace.txt
    perf trace -o "$s" -e execve,syncfs,exit_group -- \
        "${HP[@]}" "docker://$img" --dest "$dest" --sandbox "$mode" >"$P/trace.json" 2>/dev/null
    awk -v name="$name" -v su="$(jq -r .worker.startup_ms "$P/trace.json")" '
        { match($0, /\): [^ ]*\/([0-9]+) /, m); pid = m[1]; t = $1 + 0 }
        NR == 1 { main = pid }
        /execve\(/ && $1 != "?" && pid != main && !(pid in first) { first[pid] = t; order[++n] = t }
        /syncfs\(/ { s0 = t; match($0, /\( *([0-9.]+) ms\)/, m); d = m[1] }
        pid == main && /exit_group\(/ { end = t }
        END { asort(order); proxy = order[2]   # the 2nd child exec: the proxy worker
              printf "%s %.3f %.3f %.3f %.3f %.3f %s\n", name, proxy / 1e3, (s0 - proxy) / 1e3, d / 1e3,
                     (end - s0 - d) / 1e3, end / 1e3, su }
    ' "$s" >>"$P/phases.txt"
}
# units_cpu: CPU seconds of everything this systemd runs (the worker units), if measurable
units_cpu() { cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null | awk '{ printf "%.3f", $1 / 1e9 }' || true; }
note "CPU per pull, systemd vs none: waiting for load < ${QUIET_LOAD:-1.0}"
read -r load _ < <(wait_quiet)
: >"$P/cpu-sandbox.txt"
for i in $(seq 0 "$RUNS"); do      # run 0 is a warm-up
    for mode in systemd none; do
        rm -rf "$D"; u0=$(units_cpu)
        /usr/bin/time -f '%e %U %S' -o "$P/time.txt" "${HP[@]}" "docker://$BIG" --dest "oci:$D:x" --sandbox "$mode" >/dev/null 2>&1
        u1=$(units_cpu); rm -rf "$D"
        [ "$i" = 0 ] || echo "$mode $(tail -n1 "$P/time.txt") ${u0:+$(awk -v a="$u0" -v b="$u1" 'BEGIN { print b - a }')}" >>"$P/cpu-sandbox.txt"
    done
done
{
    echo "CPU seconds per pull of big:v1 under systemd, medians of $RUNS, load $load before"
    echo "  (tree = user+sys of hostpull and its children; units = the worker units' cgroups)"
    printf '  %-24s %6s %6s %6s %6s\n' pull wall tree units sum
    for m in systemd none; do
        printf '  %-24s %6s %6s %6s %6s\n' "hostpull --sandbox $m" \
            "$(awk -v m=$m '$1 == m { print $2 }' "$P/cpu-sandbox.txt" | med)" \
            "$(awk -v m=$m '$1 == m { print $3 + $4 }' "$P/cpu-sandbox.txt" | med)" \
            "$(awk -v m=$m '$1 == m && $5 != "" { print $5 }' "$P/cpu-sandbox.txt" | med)" \
            "$(awk -v m=$m '$1 == m { print $3 + $4 + $5 }' "$P/cpu-sandbox.txt" | med)"
    done
} | tee "$P/cpu-sandbox-summary.txt"

note "phases: waiting for load < ${QUIET_LOAD:-1.0}"
read -r load _ < <(wait_quiet)
: >"$P/phases.txt"
for i in $(seq 0 "$RUNS"); do      # run 0 is a warm-up
    for mode in systemd none; do
        rm -rf "$D"; trace "full-$mode" "$BIG" "oci:$D:app" "$mode"
    done
    trace update-systemd "$BIG2" "oci:$D:app" systemd   # into the layout that has big:v1
    rm -rf "$D"
    [ "$i" = 0 ] && : >"$P/phases.txt"
done
{
    echo "Phases of a pull in seconds, medians of $RUNS (perf trace: execve/syncfs/exit_group), load $load before"
    printf '  %-16s %6s %6s %6s %6s %6s %10s\n' pull setup data sync tail total startup_ms
    for n in full-systemd full-none update-systemd; do
        printf '  %-16s' "$n"
        for c in 2 3 4 5 6 7; do printf ' %6s' "$(awk -v n=$n -v c=$c '$1 == n { print $c }' "$P/phases.txt" | med)"; done
        echo
    done
} | tee "$P/phases-summary.txt"
