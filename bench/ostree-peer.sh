#!/bin/bash
# bench/ostree-peer.sh - `hostpull pull --dest ostree:REPO` against the path it replaces:
# rpm-ostree's and bootc's own pull, ostree-ext's ImageImporter (prepare(), then import())
# through one skopeo proxy, as root, unsandboxed (examples/ostree-peer.rs: the same
# ostree-ext as Cargo.lock, the same skopeo as hostpull's worker).
#
#   bench/ostree-peer.sh [-n RUNS] [--sandbox none|systemd]
#
# Two images, built once in $BENCH_DIR/ostree-peer (cached) and pushed to the rig:
#   two:  an ostree-encapsulated base of $BASE_MIB MiB + 1 derived layer of $LAYER_MIB MiB
#   many: the same base + $MANY derived layers of $LAYER_MIB MiB (17 layers by default)
# :v2 of each changes only its last derived layer. Each run, for each image and each
# variant, one after another (interleaved): v1 into a fresh bare repository ("full"), then
# v2 into it ("update"). Variants: the peer and `hostpull --sandbox none`; with --sandbox
# systemd, inside one systemd (tests/sysd.sh if PID 1 is not systemd), those two and
# `hostpull --sandbox systemd`. One warm-up run, then RUNS; medians of wall and CPU time.
# CPU: user + system of the command and the children it reaped (GNU time: the peer's
# skopeo, hostpull's with --sandbox none) plus, inside tests/sysd.sh, what that systemd's
# cgroup used meanwhile (cpuacct.usage: the worker units). The registry is not counted.
# Raw rows: $BENCH_DIR/ostree-peer.tsv.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull), PEER and
# ENCAPSULATE (target/release/examples/, built with --features ostree if missing), SKOPEO
# (/usr/bin/skopeo), BENCH_DIR (/tmp/hostpull-bench), BASE_MIB (32), LAYER_MIB (8), MANY (16).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
usage() { echo "usage: $0 [-n RUNS] [--sandbox none|systemd]" >&2; exit 2; }

ARGS=("$@")
RUNS=5 MODE=none
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        --sandbox=*) MODE=${1#*=}; shift ;;
        *) usage ;;
    esac
done
bench_checks   # RUNS and MODE checked; TARGET and RIG_DIR set (bench/lib.sh)
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR) REGISTRY=$(rig RIG_REGISTRY)
BASE_MIB=${BASE_MIB:-32} LAYER_MIB=${LAYER_MIB:-8} MANY=${MANY:-16}
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
FIX=$BENCH_DIR/ostree-peer
for n in ostree jq tar gzip /usr/bin/time; do command -v $n >/dev/null || die "$n missing"; done

HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
PEER=${PEER:-$TARGET/release/examples/ostree-peer}
ENCAPSULATE=${ENCAPSULATE:-$TARGET/release/examples/ostree-encapsulate}
IMPORTER=$(dirname "$HOSTPULL")/hostpull-ostree-import   # beside it, as src/store/import.rs finds it
if [ ! -x "$HOSTPULL" ] || [ ! -x "$IMPORTER" ] || [ ! -x "$PEER" ] || [ ! -x "$ENCAPSULATE" ]; then
    echo "bench: building hostpull, its import, the peer and the fixture maker (release, --features ostree)" >&2
    (cd "$ROOT" && cargo build --release --features ostree --bin hostpull --bin hostpull-ostree-import \
        --example ostree-peer --example ostree-encapsulate)
fi
mkdir -p "$BENCH_DIR"

# ---- the fixtures (outside systemd: built and pushed once)
if [ -z "${BENCH_IN_SYSD:-}" ]; then
    stamp="$BASE_MIB/$LAYER_MIB/$MANY"
    if [ "$(cat "$FIX/.built" 2>/dev/null)" != "$stamp" ]; then
        echo "bench: building the fixtures ($BASE_MIB MiB base, 1 and $MANY layers of $LAYER_MIB MiB)" >&2
        rm -rf "$FIX"; mkdir -p "$FIX"
        ostree_base "$FIX/base" "$BASE_MIB" "$ENCAPSULATE"
        layered "$FIX/base" "$FIX/two" "$LAYER_MIB"
        # shellcheck disable=SC2046 # MANY times LAYER_MIB, one word each
        layered "$FIX/base" "$FIX/many" $(yes "$LAYER_MIB" | head -n "$MANY")
        echo "$stamp" >"$FIX/.built"
    fi
    for img in two many; do
        for t in v1 v2; do
            skopeo copy -q --dest-authfile "$AUTH" --dest-cert-dir "$CERTS" \
                "oci:$FIX/$img-$t:$t" "docker://$REGISTRY/hostpull/ostree-peer-$img:$t"
        done
    done
fi
if [ "$MODE" = systemd ]; then
    bench_systemd_for "$ROOT/bench/ostree-peer.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

VARIANTS=(peer none)
[ "$MODE" = systemd ] && VARIANTS+=(systemd)
CGROUP_CPU=
[ -n "${BENCH_IN_SYSD:-}" ] && [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ] && CGROUP_CPU=/sys/fs/cgroup/cpuacct/cpuacct.usage
RESULTS=$BENCH_DIR/ostree-peer.tsv
printf 'run\timage\tkind\tvariant\twall_s\tcpu_s\tload\n' >"$RESULTS"
# measure RUN IMAGE KIND VARIANT TAG REPO: one pull, one row.
measure() {
    local img=$REGISTRY/hostpull/ostree-peer-$2:$5 cmd
    case $4 in
        peer) cmd=("$PEER" "$img" "$6" "$AUTH" "$CERTS" "$SKOPEO") ;;
        *) cmd=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --skopeo "$SKOPEO"
                --sandbox "$4" "docker://$img" --dest "ostree:$6:bench") ;;
    esac
    timed_row ostree-peer "$1"$'\t'"$2"$'\t'"$3"$'\t'"$4" "${cmd[@]}"
}
REPO=$BENCH_DIR/ostree-peer-repo
echo "bench: ostree-peer-{two,many} full and update, ${VARIANTS[*]}, $RUNS runs + 1 warm-up, skopeo $SKOPEO" >&2
for i in $(seq 0 "$RUNS"); do   # run 0 is the warm-up
    for img in two many; do
        for v in "${VARIANTS[@]}"; do
            rm -rf "$REPO"; ostree --repo="$REPO" init --mode=bare
            measure "$i" $img full "$v" v1 "$REPO"
            measure "$i" $img update "$v" v2 "$REPO"
        done
    done
done
rm -rf "$REPO"

# stat IMAGE KIND VARIANT COLUMN: "median (min-max)" over runs 1..RUNS
stat() {
    awk -F'\t' -v i="$1" -v k="$2" -v v="$3" -v c="$4" 'NR > 1 && $1 > 0 && $2 == i && $3 == k && $4 == v { print $c }' "$RESULTS" | spread
}
med() { stat "$@" | cut -d' ' -f1; }
echo
echo "hostpull/peer, $(date -u '+%F %H:%M UTC'), $RUNS runs, load $(awk -F'\t' 'NR > 1 { print $7 }' "$RESULTS" | sort -g | sed -n '1p;$p' | paste -sd-) (1-min, before each pull)"
echo "CPU: the command and its reaped children$([ -n "$CGROUP_CPU" ] && echo ", plus the systemd's cgroup (worker units)")"
printf '| image | pull | variant | wall s | ratio | CPU s | ratio |\n| --- | --- | --- | --- | --- | --- | --- |\n'
for img in two many; do
    for k in full update; do
        pw=$(med $img $k peer 5) pc=$(med $img $k peer 6)
        for v in "${VARIANTS[@]}"; do
            w=$(med $img $k "$v" 5) c=$(med $img $k "$v" 6)
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$img" "$k" "$v" "$(stat $img $k "$v" 5)" \
                "$(awk -v a="$w" -v b="$pw" 'BEGIN { printf "%.2f", a / b }')" "$(stat $img $k "$v" 6)" \
                "$(awk -v a="$c" -v b="$pc" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
        done
    done
done
echo "raw: $RESULTS"
