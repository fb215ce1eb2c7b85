#!/bin/bash
# bench/suite.sh - hostpull's benchmark suite P1-P5 (docs/benchmarks.md), against the test rig
# brought up with the benchmark images (RIG_BENCH=1 tests/rig.sh up), under a real systemd.
#
#   bench/suite.sh [-n RUNS] [--only P1,P3,P5]
#
#   P1  full pull of big:v1 (512 MiB, 8 layers): hostpull --sandbox systemd vs skopeo copy
#       (and hostpull --sandbox none for reference), interleaved, fresh destination each run
#   P2  worker.startup_ms (systemd-run -> proxy Initialize) of the P1 systemd pulls
#   P3  update pull: big:v1 into a fresh layout (full), then big:v2 (last layer differs) into
#       the same tag; the same with skopeo copy, interleaved
#   P4  peak RSS of the hostpull process (its systemd-run children included) in P1 and P5
#   P5  full pull of huge:v1 (2 GiB, 8 layers) with --memory-max 128M vs skopeo copy
#   (--only P2 implies P1, P4 implies P1 and P5.)
#
# Before each block it waits until the 1-minute load average is below QUIET_LOAD (1.0),
# polling every 10 s for at most QUIET_MAX s (600), and records the load.
# If PID 1 is not systemd, the measurements run inside a private one (tests/sysd.sh, state
# in SYSD_DIR=/tmp/hostpull-bench-sysd), booted and powered off by this script.
#
# Knobs: SKOPEO (/usr/bin/skopeo): the worker, and the `skopeo copy` it is compared with
# (bench/workers.sh runs the suite once per worker the rig installs);
# BENCH_DIR (/tmp/hostpull-bench): results, destinations; RIG_DIR ($BENCH_DIR/rig):
# brought up with RIG_BENCH=1 if it is not up or lacks the benchmark images; HOSTPULL (default:
# `cargo build --release`, copied to $BENCH_DIR/bin so a rebuild during the run changes
# nothing). Raw rows: $BENCH_DIR/suite.tsv; summary: $BENCH_DIR/suite.txt.
# The rig stays up for the next run (building its 2 GiB image takes a while); stop it with
# RIG_DIR=$BENCH_DIR/rig tests/rig.sh down.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
note() { echo "bench: $*" >&2; }
usage() { echo "usage: $0 [-n RUNS] [--only P1,P2,P3,P4,P5]" >&2; exit 2; }

ARGS=("$@")
RUNS=5 ONLY=P1,P2,P3,P4,P5
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --only) ONLY=${2:?}; shift 2 ;;
        --only=*) ONLY=${1#*=}; shift ;;
        *) usage ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "-n wants a positive number"
want() { [[ ,$ONLY, == *,$1,* ]]; }
want P2 && ONLY=$ONLY,P1
want P4 && ONLY=$ONLY,P1,P5

# shellcheck source=tests/cargo-target.sh
. "$ROOT/tests/cargo-target.sh"
TARGET=$(cargo_target_dir "$ROOT")
export BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
export RIG_DIR=${RIG_DIR:-$BENCH_DIR/rig}
mkdir -p "$BENCH_DIR/bin"

# ---------------------------------------------------------------- host side: build, rig, systemd
if [ -z "${BENCH_IN_SYSD:-}" ]; then
    for t in jq skopeo; do command -v $t >/dev/null || die "$t missing"; done
    if [ ! -x /usr/bin/time ]; then   # GNU time, for %M (peak RSS)
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null || die "install GNU time"
    fi
    if [ -z "${HOSTPULL:-}" ]; then
        for i in 1 2 3 4 5; do   # someone else may be building in the same target dir
            (cd "$ROOT" && cargo build --release --quiet) && break
            [ $i = 5 ] && die "cargo build --release failed"
            note "cargo build --release failed, retrying"; sleep 10
        done
        cp "$TARGET/release/hostpull" "$BENCH_DIR/bin/hostpull.tmp"
        mv "$BENCH_DIR/bin/hostpull.tmp" "$BENCH_DIR/bin/hostpull"
        export HOSTPULL=$BENCH_DIR/bin/hostpull
    fi
    if ! RIG_DIR=$RIG_DIR "$ROOT/tests/rig.sh" env 2>/dev/null | grep -q '^RIG_IMG_HUGE='; then
        note "bringing up the rig with the benchmark images in $RIG_DIR"
        RIG_DIR=$RIG_DIR RIG_BENCH=1 "$ROOT/tests/rig.sh" up
    fi
    export BENCH_SHARE=$(dirname "$HOSTPULL")
    bench_in_systemd "$ROOT/bench/suite.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

# ---------------------------------------------------------------- measurements
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR)
BIG=$(rig RIG_IMG_BIG) BIG2=$(rig RIG_IMG_BIG2) HUGE=$(rig RIG_IMG_HUGE)
[ -n "$HUGE" ] && [ -n "$BIG2" ] || die "rig in $RIG_DIR lacks the benchmark images (RIG_BENCH=1)"
HOSTPULL=${HOSTPULL:-$BENCH_DIR/bin/hostpull}
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
HP=("$HOSTPULL" pull --skopeo "$SKOPEO" --authfile "$AUTH" --cert-dir "$CERTS" --json)
SK=("$SKOPEO" copy --quiet --authfile "$AUTH" --src-cert-dir "$CERTS")
D=$BENCH_DIR/dest
TSV=$BENCH_DIR/suite.tsv BLOCKS=$BENCH_DIR/blocks.tsv OUT=$BENCH_DIR/suite.txt
printf 'block\tvariant\trun\trc\twall_s\tmaxrss_kib\tself_hwm_kib\telapsed_ms\tstartup_ms\tworker_peak_b\tfetched\treused\tbytes\tcpu_s\n' >"$TSV"
printf 'block\tload_before\twaited_s\tload_after\tseconds\tbusy_cpu_s\tother_cpu_s\n' >"$BLOCKS"

# measure BLOCK VARIANT RUN CMD...: run CMD under GNU time; sample the VmHWM of CMD's process
# every 50 ms; append a row (JSON fields if CMD printed hostpull's --json; cpu_s: the CPU
# seconds the whole machine spent meanwhile, worker units and registry included, the same
# for both sides of a comparison). rc kept, not fatal.
measure() {
    local block=$1 var=$2 run=$3 tpid p h self=0 rc=0 wall rss js busy0; shift 3
    cpu_now; busy0=$BUSY
    /usr/bin/time -f '%e %M' -o "$BENCH_DIR/time.txt" "$@" >"$BENCH_DIR/last.out" 2>"$BENCH_DIR/last.err" &
    tpid=$!
    while alive "$tpid"; do
        for p in $(kids "$tpid"); do h=$(hwm "$p"); [ "$h" -gt "$self" ] && self=$h; done
        sleep 0.05
    done
    wait "$tpid" || rc=$?
    read -r wall rss < <(tail -n1 "$BENCH_DIR/time.txt")
    js=$(jq -r '[.elapsed_ms, .worker.startup_ms, .worker.memory_peak_bytes, .layers_fetched,
                 .layers_reused, .bytes_fetched] | map(. // "") | @tsv' "$BENCH_DIR/last.out" 2>/dev/null) \
        || js=
    [ -n "$js" ] || js=$'\t\t\t\t\t'   # not hostpull's JSON (skopeo, or a failure)
    cpu_now
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$block" "$var" "$run" "$rc" "$wall" "$rss" "$self" "$js" \
        "$(calc "$BUSY - $busy0")" >>"$TSV"
    if [ "$rc" != 0 ]; then
        note "$block $var run $run failed (exit $rc):"; tail -n 5 "$BENCH_DIR/last.err" >&2
        cp "$BENCH_DIR/last.err" "$BENCH_DIR/failed-$block-$var-$run.err"
    fi
    return 0
}
# expect BLOCK VARIANT RUN FETCHED [REUSED]: the last hostpull row fetched/reused that many layers
expect() {
    local f r
    read -r f r < <(tail -n1 "$TSV" | cut -f11,12)
    [ "$f" = "$4" ] && { [ -z "${5:-}" ] || [ "$r" = "$5" ]; } \
        || note "WARNING: $1 $2 run $3: layers fetched/reused $f/$r, expected $4/${5:-any}"
}

# cpu_now: set BUSY, OURS: CPU seconds used by the whole machine (/proc/stat, all CPUs; iowait
# and steal not counted) and by the benchmark: this shell and everything it has reaped (bash
# `times`) plus, inside tests/sysd.sh, the cgroup of that systemd (the worker units); "-" when
# the latter is not available (e.g. under a host systemd).
cpu_now() {
    local _ u n s idle iow irq sirq ours=-
    read -r _ u n s idle iow irq sirq _ </proc/stat
    times >"$BENCH_DIR/times.txt"          # not in $(...): a subshell's times start at zero
    if [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ] && [ -n "${BENCH_IN_SYSD:-}" ]; then
        ours=$(awk -v u="$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage)" '
            { for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } }
            END { printf "%.2f", t + u / 1e9 }' "$BENCH_DIR/times.txt")
    fi
    BUSY=$(awk -v b="$((u + n + s + irq + sirq))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", b / hz }')
    OURS=$ours
}
begin_block() {
    note "$1: waiting for load < ${QUIET_LOAD:-1.0}"
    read -r LOAD0 WAITED < <(wait_quiet)
    cpu_now; BUSY0=$BUSY OURS0=$OURS
    T0=$EPOCHREALTIME
    note "$1: load $LOAD0 (waited ${WAITED}s), $RUNS runs"
}
# end_block: one row in $BLOCKS; other_cpu_s = CPU seconds of everything outside the
# benchmark's processes during the block, the registry's included.
end_block() {
    local l _
    read -r l _ </proc/loadavg
    cpu_now
    awk -v n="$1" -v l0="$LOAD0" -v w="$WAITED" -v l="$l" -v t0="$T0" -v t="$EPOCHREALTIME" \
        -v b0="$BUSY0" -v b="$BUSY" -v o0="$OURS0" -v o="$OURS" 'BEGIN {
        other = o == "-" ? "-" : sprintf("%.1f", (b - b0) - (o - o0))
        printf "%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\n", n, l0, w, l, t - t0, b - b0, other }' >>"$BLOCKS"
}

# full BLOCK VARIANT RUN IMAGE [hostpull args]: one pull into a fresh destination
full() {
    local block=$1 var=$2 run=$3 img=$4; shift 4
    rm -rf "$D"
    case $var in
        skopeo) measure "$block" "$var" "$run" "${SK[@]}" "docker://$img" "oci:$D:bench" ;;
        *)      measure "$block" "$var" "$run" "${HP[@]}" "docker://$img" --dest "oci:$D:bench" "$@"
                [ "$run" = warm ] || expect "$block" "$var" "$run" 8 0 ;;
    esac
    rm -rf "$D"
}

# update VARIANT RUN: v1 into a fresh layout (full), then v2 into the same tag (update)
update() {
    local var=$1 run=$2
    rm -rf "$D"
    if [ "$var" = skopeo ]; then
        measure P3 skopeo-full "$run" "${SK[@]}" "docker://$BIG" "oci:$D:app"
        measure P3 skopeo-update "$run" "${SK[@]}" "docker://$BIG2" "oci:$D:app"
    else
        measure P3 hostpull-full "$run" "${HP[@]}" "docker://$BIG" --dest "oci:$D:app" --sandbox systemd
        [ "$run" = warm ] || expect P3 hostpull-full "$run" 8 0
        measure P3 hostpull-update "$run" "${HP[@]}" "docker://$BIG2" --dest "oci:$D:app" --sandbox systemd
        [ "$run" = warm ] || expect P3 hostpull-update "$run" 1 7
    fi
    rm -rf "$D"
}

calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }" 2>/dev/null || echo n/a; }
note "hostpull $("$HOSTPULL" --version 2>/dev/null || echo '?') ($HOSTPULL), $("$SKOPEO" --version) ($SKOPEO), $(nproc) CPUs"
if want P1; then
    begin_block P1
    for v in systemd none skopeo; do full P1 "$v" warm "$BIG" --sandbox "$v"; done
    for i in $(seq "$RUNS"); do
        full P1 systemd "$i" "$BIG" --sandbox systemd
        full P1 none "$i" "$BIG" --sandbox none
        full P1 skopeo "$i" "$BIG"
    done
    end_block P1
fi
if want P3; then
    begin_block P3
    update hostpull warm; update skopeo warm
    for i in $(seq "$RUNS"); do update hostpull "$i"; update skopeo "$i"; done
    end_block P3
fi
if want P5; then
    begin_block P5
    full P5 systemd-128M warm "$HUGE" --sandbox systemd --memory-max 128M
    full P5 skopeo warm "$HUGE"
    for i in $(seq "$RUNS"); do
        full P5 systemd-128M "$i" "$HUGE" --sandbox systemd --memory-max 128M
        full P5 skopeo "$i" "$HUGE"
    done
    end_block P5
fi

# ---------------------------------------------------------------- report
# med BLOCK VARIANT COLUMN: median of COLUMN over the successful measured runs ("" if none)
med() {
    awk -F'\t' -v b="$1" -v v="$2" -v c="$3" '$1 == b && $2 == v && $3 != "warm" && $4 == 0 && $c != "" { print $c }' "$TSV" |
        median '%s\n'
}
# range BLOCK VARIANT COLUMN: "min-max"; ok BLOCK VARIANT: "successful/measured" runs
range() {
    awk -F'\t' -v b="$1" -v v="$2" -v c="$3" '$1 == b && $2 == v && $3 != "warm" && $4 == 0 && $c != "" { print $c }' "$TSV" |
        sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s-%s", lo, hi }'
}
ok() { awk -F'\t' -v b="$1" -v v="$2" '$1 == b && $2 == v && $3 != "warm" { n++; if ($4 == 0) k++ } END { printf "%d/%d", k, n }' "$TSV"; }
verdict() { awk "BEGIN { exit !($1) }" && echo met || echo MISSED; }
load() {   # the block's load line
    awk -F'\t' -v b="$1" '$1 == b { printf "load %s before (waited %s s), %s after; %s s, CPU busy %s s, of which outside the benchmark (registry included) %s s", $2, $3, $4, $5, $6, $7 }' "$BLOCKS"
}

{
echo "hostpull benchmark suite, $(date -u '+%F %H:%M UTC'), $RUNS runs per variant, $(nproc) CPUs"
echo "hostpull: $HOSTPULL ($(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')); worker and copy: $("$SKOPEO" --version) ($SKOPEO)"
if want P1; then
    h=$(med P1 systemd 5) n=$(med P1 none 5) s=$(med P1 skopeo 5)
    echo
    echo "P1 full pull, big:v1 512 MiB / 8 layers"
    echo "  $(load P1)"
    printf '  %-26s median %6.2f s  (%s s, %s ok)\n' "hostpull --sandbox systemd" "$h" "$(range P1 systemd 5)" "$(ok P1 systemd)"
    printf '  %-26s median %6.2f s  (%s s, %s ok)\n' "hostpull --sandbox none" "$n" "$(range P1 none 5)" "$(ok P1 none)"
    printf '  %-26s median %6.2f s  (%s s, %s ok)\n' "skopeo copy" "$s" "$(range P1 skopeo 5)" "$(ok P1 skopeo)"
    r=$(calc "$h / $s"); echo "  ratio systemd/skopeo $r (none/skopeo $(calc "$n / $s"))   goal <= 0.90: $(verdict "$r <= 0.90")"
    # machine CPU seconds per GiB pulled (512 MiB each): worker, orchestrator and registry
    echo "  CPU-s per GiB (whole machine): systemd $(calc "$(med P1 systemd 14) * 2"), none $(calc "$(med P1 none 14) * 2"), skopeo copy $(calc "$(med P1 skopeo 14) * 2")"
    p=$(med P1 systemd 9)
    echo
    echo "P2 worker.startup_ms (systemd-run -> Initialize), P1 systemd pulls"
    echo "  median $p ms ($(range P1 systemd 9) ms); --sandbox none: $(med P1 none 9) ms   goal <= 100: $(verdict "$p <= 100")"
fi
if want P3; then
    hf=$(med P3 hostpull-full 5) hu=$(med P3 hostpull-update 5) sf=$(med P3 skopeo-full 5) su=$(med P3 skopeo-update 5)
    echo
    echo "P3 update pull: big:v1 into a fresh layout, then big:v2 (1 of 8 layers new), same tag"
    echo "  $(load P3)"
    printf '  %-22s full %6.2f s  update %6.2f s (%s s, %s ok)\n' "hostpull systemd" "$hf" "$hu" "$(range P3 hostpull-update 5)" "$(ok P3 hostpull-update)"
    printf '  %-22s full %6.2f s  update %6.2f s (%s s, %s ok)\n' "skopeo copy" "$sf" "$su" "$(range P3 skopeo-update 5)" "$(ok P3 skopeo-update)"
    r=$(calc "$hu / $hf"); echo "  ratio update/full (hostpull) $r; update vs skopeo update $(calc "$hu / $su")   goal <= 0.20: $(verdict "$r <= 0.20")"
    echo "  CPU-s: hostpull full $(med P3 hostpull-full 14), update $(med P3 hostpull-update 14); skopeo full $(med P3 skopeo-full 14), update $(med P3 skopeo-update 14)"
fi
if want P5; then
    h=$(med P5 systemd-128M 5) s=$(med P5 skopeo 5)
    echo
    echo "P5 huge:v1 2 GiB / 8 layers, --sandbox systemd --memory-max 128M"
    echo "  $(load P5)"
    printf '  %-22s median %6.2f s  (%s s, %s ok), worker peak %s MiB\n' "hostpull" "$h" "$(range P5 systemd-128M 5)" \
        "$(ok P5 systemd-128M)" "$(calc "$(med P5 systemd-128M 10) / 1048576" 0)"
    printf '  %-22s median %6.2f s  (%s s, %s ok)\n' "skopeo copy" "$s" "$(range P5 skopeo 5)" "$(ok P5 skopeo)"
    k=$(ok P5 systemd-128M)
    echo "  ratio hostpull/skopeo $(calc "$h / $s")   goal: succeeds: $(verdict "\"$k\" == \"$RUNS/$RUNS\"")"
fi
if want P4; then
    a=$(med P1 systemd 6) b=$(med P5 systemd-128M 6) as=$(med P1 systemd 7) bs=$(med P5 systemd-128M 7)
    echo
    echo "P4 hostpull process peak RSS (GNU time %M: hostpull and its systemd-run children, max not sum)"
    echo "  512 MiB: $(calc "$a / 1024" 1) MiB (own VmHWM $(calc "$as / 1024" 1));" \
         "2 GiB: $(calc "$b / 1024" 1) MiB (own VmHWM $(calc "$bs / 1024" 1)); skopeo copy: $(calc "$(med P1 skopeo 6) / 1024" 1) / $(calc "$(med P5 skopeo 6) / 1024" 1) MiB"
    echo "  goal <= 32 MiB and flat (2 GiB <= 512 MiB + 10%): $(verdict "$a <= 32768 && $b <= 32768 && $b <= $a * 1.1")"
fi
echo
echo "raw rows: $TSV; blocks and load: $BLOCKS"
} | tee "$OUT"
