#!/bin/bash
# bench/pull.sh - wall time and peak RSS of `hostpull pull` vs `skopeo copy` against the
# test rig (tests/rig.sh), plus the "update pull" (re-pull into a layout that has it all).
#
#   bench/pull.sh [-n RUNS] [--sandbox none|systemd] [IMAGE]
#
# IMAGE defaults to $RIG_IMG_BIG (8 x 64 MiB). With --sandbox systemd on a host whose PID 1
# is not systemd, it runs itself inside a private systemd (tests/sysd.sh, SYSD_DIR
# /tmp/hostpull-bench-sysd) that it boots and powers off. The P1-P5 suite: bench/suite.sh.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull, built if missing),
# BENCH_DIR (/tmp/hostpull-bench).
# Runs alternate hostpull / skopeo after one warm-up of each; every run gets a fresh
# destination.  Raw numbers: $BENCH_DIR/results.tsv; last run's output: $BENCH_DIR/*.out|err.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
usage() { echo "usage: $0 [-n RUNS] [--sandbox none|systemd] [IMAGE]" >&2; exit 2; }

ARGS=("$@")
RUNS=5 MODE=none IMAGE=
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        --sandbox=*) MODE=${1#*=}; shift ;;
        -h|--help) usage ;;
        -*) usage ;;
        *) IMAGE=$1; shift ;;
    esac
done
bench_checks   # RUNS and MODE checked; TARGET and RIG_DIR set (bench/lib.sh)
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR)
IMAGE=${IMAGE:-$(rig RIG_IMG_BIG)}
[ -n "$IMAGE" ] || die "no RIG_IMG_BIG in $RIG_DIR/env (rig brought up with RIG_BIG=0?); name an IMAGE"
IMAGE=${IMAGE#docker://}

HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
if [ ! -x "$HOSTPULL" ]; then
    echo "bench: building $HOSTPULL" >&2
    (cd "$ROOT" && cargo build --release)
fi
if [ ! -x /usr/bin/time ]; then   # GNU time, for %M (peak RSS)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null || die "install GNU time: apt-get install -y time"
fi

BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
mkdir -p "$BENCH_DIR"
if [ "$MODE" = systemd ]; then
    bench_systemd_for "$ROOT/bench/pull.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi
RESULTS=$BENCH_DIR/results.tsv
printf 'tool\twall_s\tmaxrss_kib\tself_hwm_kib\tchild_hwm_kib\n' >"$RESULTS"

# Both commands, less the destination (appended per run).
HP_CMD=("$HOSTPULL" pull "docker://$IMAGE" --authfile "$AUTH" --cert-dir "$CERTS" --sandbox "$MODE" --json)
SK_CMD=(skopeo copy --authfile "$AUTH" --src-cert-dir "$CERTS" "docker://$IMAGE")

# measure TOOL CMD...: run CMD under /usr/bin/time; append wall, %M and the sampled peaks
# of the tool process itself and of its direct children (hostpull's skopeo) to $RESULTS.
# %M comes from wait4(): the max (not sum) over the process and its reaped descendants.
measure() {
    local tool=$1 tpid p c h self=0 child=0 wall rss; shift
    /usr/bin/time -f '%e %M' -o "$BENCH_DIR/time.txt" "$@" \
        >"$BENCH_DIR/$tool.out" 2>"$BENCH_DIR/$tool.err" &
    tpid=$!
    # sample every 50 ms until `time` exits (VmHWM only grows; misses only the last 50 ms)
    while alive "$tpid"; do
        for p in $(kids "$tpid"); do
            h=$(hwm "$p"); [ "$h" -gt "$self" ] && self=$h
            for c in $(kids "$p"); do h=$(hwm "$c"); [ "$h" -gt "$child" ] && child=$h; done
        done
        sleep 0.05
    done
    wait "$tpid" || { tail -n 20 "$BENCH_DIR/$tool.err" >&2; die "$tool failed: $*"; }
    read -r wall rss <"$BENCH_DIR/time.txt"
    printf '%s\t%s\t%s\t%s\t%s\n' "$tool" "$wall" "$rss" "$self" "$child" >>"$RESULTS"
}

# run TOOL: one run into a fresh destination, removed afterwards
run() {
    local d=$BENCH_DIR/dest-$1
    rm -rf "$d"
    if [ "$1" = hostpull ]; then measure hostpull "${HP_CMD[@]}" --dest "oci:$d:bench"
    else measure skopeo "${SK_CMD[@]}" "oci:$d:bench"; fi
    rm -rf "$d"
}

echo "bench: $IMAGE, $RUNS runs, hostpull --sandbox $MODE ($HOSTPULL)" >&2
echo "bench: warm-up" >&2
run hostpull; run skopeo
sed -i '2,$d' "$RESULTS"                      # warm-ups are not counted
for i in $(seq "$RUNS"); do                    # interleaved: A B A B ...
    echo "bench: run $i/$RUNS" >&2
    run hostpull
    run skopeo
done

# P3 "update pull": the same tag again into the same layout; everything is reused
echo "bench: repull" >&2
REPULL=$BENCH_DIR/repull-layout
rm -rf "$REPULL"
"${HP_CMD[@]}" --dest "oci:$REPULL:bench" >/dev/null 2>&1 || die "initial pull for the repull measure failed"
for i in $(seq "$RUNS"); do
    measure repull "${HP_CMD[@]}" --dest "oci:$REPULL:bench"
    grep -q '"layers_fetched":0[,}]' "$BENCH_DIR/repull.out" \
        || echo "bench: WARNING: repull fetched layers: $(cat "$BENCH_DIR/repull.out")" >&2
done
rm -rf "$REPULL"

# ---- report: median/min/max wall, median peak RSS (MiB) per tool
stats() {   # stats TOOL COLUMN -> "median min max" of that column (numeric)
    awk -F'\t' -v t="$1" -v c="$2" '$1 == t { print $c }' "$RESULTS" | sort -g | awk '
        { v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                             printf "%s %s %s\n", m, v[1], v[NR] }'
}
mib() { awk -v k="$1" 'BEGIN { if (k > 0) printf "%.0f", k / 1024; else printf "n/a" }'; }
echo
printf '%-12s %5s %9s %7s %7s %13s %13s %13s\n' tool runs median_s min_s max_s \
    peak_MiB self_MiB child_MiB
for t in hostpull skopeo repull; do
    read -r med min max < <(stats "$t" 2)
    read -r rss _ < <(stats "$t" 3); read -r self _ < <(stats "$t" 4); read -r child _ < <(stats "$t" 5)
    [ "$t" = skopeo ] && child=-    # skopeo copy's own children: none of interest
    [ "$t" != skopeo ] && [ "$MODE" = systemd ] && child=-   # worker runs under systemd, not ours
    printf '%-12s %5d %9.2f %7.2f %7.2f %13s %13s %13s\n' "$t" "$RUNS" "$med" "$min" "$max" \
        "$(mib "$rss")" "$(mib "$self")" "$([ "$child" = - ] && echo - || mib "$child")"
done
H=$(stats hostpull 2 | cut -d' ' -f1) S=$(stats skopeo 2 | cut -d' ' -f1)
R=$(stats repull 2 | cut -d' ' -f1)
echo
awk -v h="$H" -v s="$S" 'BEGIN { printf "ratio hostpull/skopeo (median wall) = %.2f   (goal <= 0.90)\n", h / s }'
printf 'repull median = %.2f s   (same tag into the same layout, all layers reused)\n' "$R"
cat <<EOF

peak_MiB  = /usr/bin/time %M (median): max over the process and the children it reaped,
            NOT their sum. For skopeo copy that is skopeo itself.
self_MiB  = hostpull's own VmHWM only (sampled every 50 ms); child_MiB = peak of hostpull's
            child skopeo (inspect + image proxy; '-' if not our child, e.g. --sandbox systemd;
            n/a: run too short to sample).
raw: $RESULTS
EOF
