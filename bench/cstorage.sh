#!/bin/bash
# bench/cstorage.sh - `hostpull pull --dest containers-storage:` (issue 47, item 4) against the
# paths it stands beside: `skopeo copy docker://… containers-storage:…` and `podman pull`, both
# as root and unsandboxed, the same skopeo (containers/image) for the copy and hostpull's worker.
#
#   bench/cstorage.sh [-n RUNS] [--sandbox none|systemd]
#
# One image, built once in $BENCH_DIR/cstorage (cached) and pushed to the rig: the rig's small
# image plus $LAYERS layers of $LAYER_MIB MiB of random data; :v2 changes only the last layer.
# Each run, for each variant, one after another (interleaved): v1 into a fresh store ("full"),
# then v2 into it under the same name ("update"). The store is overlay (ext4 here; the tests
# use vfs), in $BENCH_DIR/cstorage-store. Variants: copy, podman, hostpull --sandbox none, and
# with --sandbox systemd (inside one systemd: tests/sysd.sh if PID 1 is not) hostpull --sandbox
# systemd. One warm-up run, then RUNS; medians of wall and CPU time. CPU: user + system of the
# command and the children it reaped, plus, inside tests/sysd.sh, what that systemd's cgroup used
# meanwhile (the worker units). The registry is not counted. Raw rows: $BENCH_DIR/cstorage.tsv.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull), SKOPEO
# (/usr/bin/skopeo), BENCH_DIR (/tmp/hostpull-bench), LAYERS (16), LAYER_MIB (8).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
usage() { echo "usage: $0 [-n RUNS] [--sandbox none|systemd]" >&2; exit 2; }

ARGS=("$@")
RUNS=5 MODE=none
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        *) usage ;;
    esac
done
bench_checks   # RUNS and MODE checked; TARGET and RIG_DIR set (bench/lib.sh)
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR) REGISTRY=$(rig RIG_REGISTRY) SMALL=$(rig RIG_IMG_SMALL)
LAYERS=${LAYERS:-16} LAYER_MIB=${LAYER_MIB:-8}
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
FIX=$BENCH_DIR/cstorage
for n in podman jq tar gzip /usr/bin/time; do command -v $n >/dev/null || die "$n missing"; done
HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
[ -x "$HOSTPULL" ] || (cd "$ROOT" && cargo build --release --locked --bin hostpull >&2)
mkdir -p "$BENCH_DIR"

IMAGE=$REGISTRY/hostpull/cstorage-bench
if [ -z "${BENCH_IN_SYSD:-}" ]; then
    stamp="$LAYERS/$LAYER_MIB"
    if [ "$(cat "$FIX/.built" 2>/dev/null)" != "$stamp" ]; then
        echo "bench: building the image ($LAYERS layers of $LAYER_MIB MiB on the rig's small one)" >&2
        rm -rf "$FIX"; mkdir -p "$FIX"
        "$SKOPEO" copy -q --src-authfile "$AUTH" --src-cert-dir "$CERTS" "docker://$SMALL" "oci:$FIX/base:v1"
        # shellcheck disable=SC2046 # LAYERS times LAYER_MIB, one word each
        layered "$FIX/base" "$FIX/img" $(yes "$LAYER_MIB" | head -n "$LAYERS")
        echo "$stamp" >"$FIX/.built"
    fi
    for t in v1 v2; do
        "$SKOPEO" copy -q --dest-authfile "$AUTH" --dest-cert-dir "$CERTS" "oci:$FIX/img-$t:$t" "docker://$IMAGE:$t"
    done
fi
[ "$MODE" = systemd ] && bench_systemd_for "$ROOT/bench/cstorage.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd

VARIANTS=(copy podman none)
[ "$MODE" = systemd ] && VARIANTS+=(systemd)
CGROUP_CPU=
[ -n "${BENCH_IN_SYSD:-}" ] && [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ] && CGROUP_CPU=/sys/fs/cgroup/cpuacct/cpuacct.usage
STORE=$BENCH_DIR/cstorage-store
SPEC="overlay@$STORE/graph+$STORE/run"
NAME=localhost/cstorage-bench:stable
RESULTS=$BENCH_DIR/cstorage.tsv
printf 'run\tkind\tvariant\twall_s\tcpu_s\tload\n' >"$RESULTS"
# measure RUN KIND VARIANT TAG: one pull into the store, one row.
measure() {
    local cmd
    case $3 in
        copy) cmd=("$SKOPEO" copy -q --src-authfile "$AUTH" --src-cert-dir "$CERTS"
                   "docker://$IMAGE:$4" "containers-storage:[$SPEC]$NAME") ;;
        podman) cmd=(podman --root "$STORE/graph" --runroot "$STORE/run" --storage-driver overlay
                     pull -q --authfile "$AUTH" --cert-dir "$CERTS" "docker://$IMAGE:$4") ;;
        *) cmd=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --skopeo "$SKOPEO"
                --sandbox "$3" "docker://$IMAGE:$4" --dest "containers-storage:[$SPEC]$NAME") ;;
    esac
    timed_row cstorage "$1"$'\t'"$2"$'\t'"$3" "${cmd[@]}"
}
fresh() {   # an empty store (overlay mounts nothing to store images; unmount what a crash left)
    grep -o " $STORE/[^ ]*" /proc/mounts | xargs -r umount 2>/dev/null || true
    rm -rf "$STORE"; mkdir -p "$STORE"
}
echo "bench: $IMAGE full and update, ${VARIANTS[*]}, $RUNS runs + 1 warm-up, skopeo $SKOPEO" >&2
for i in $(seq 0 "$RUNS"); do   # run 0 is the warm-up
    for v in "${VARIANTS[@]}"; do
        fresh
        measure "$i" full "$v" v1
        measure "$i" update "$v" v2
    done
done
fresh; rm -rf "$STORE"

# stat KIND VARIANT COLUMN: "median (min-max)" over runs 1..RUNS
stat() {
    awk -F'\t' -v k="$1" -v v="$2" -v c="$3" 'NR > 1 && $1 > 0 && $2 == k && $3 == v { print $c }' "$RESULTS" | spread
}
med() { stat "$@" | cut -d' ' -f1; }
echo
echo "into containers-storage, $(date -u '+%F %H:%M UTC'), $RUNS runs, load $(awk -F'\t' 'NR > 1 { print $6 }' "$RESULTS" | sort -g | sed -n '1p;$p' | paste -sd-) (1-min, before each pull)"
echo "CPU: the command and its reaped children$([ -n "$CGROUP_CPU" ] && echo ", plus the systemd's cgroup (worker units)")"
printf '| pull | variant | wall s | vs copy | vs podman | CPU s | vs copy |\n| --- | --- | --- | --- | --- | --- | --- |\n'
for k in full update; do
    cw=$(med $k copy 4) pw=$(med $k podman 4) cc=$(med $k copy 5)
    for v in "${VARIANTS[@]}"; do
        w=$(med $k "$v" 4) c=$(med $k "$v" 5)
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$k" "$v" "$(stat $k "$v" 4)" "$(ratio "$w" "$cw")" \
            "$(ratio "$w" "$pw")" "$(stat $k "$v" 5)" "$(ratio "$c" "$cc")"
    done
done
echo "raw: $RESULTS"
