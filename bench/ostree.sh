#!/bin/bash
# bench/ostree.sh - `--dest ostree:` full pull vs update pull of a 512 MiB derived image.
#
#   bench/ostree.sh [-n RUNS] [--sandbox none|systemd]
#
# The image, built once in $BENCH_DIR/ostree (cached) and pushed to the rig as
# hostpull/ostree-bench:v1 and :v2: an ostree-encapsulated base of $BASE_MIB MiB (random
# 16 MiB files, ostree-ext's encapsulate) plus one derived layer of $LAYER_MIB MiB (random);
# v2 changes only the derived layer. Each run: v1 into a fresh bare repository ("full"),
# then v2 into that repository ("update"). Reported: median wall time of each, their ratio
# (goal <= 0.2), and bytes fetched by the update against the bytes that changed (the new
# layer and config). With --sandbox systemd on a host whose PID 1 is not systemd it runs
# inside tests/sysd.sh (see bench/lib.sh).
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull, built with
# --features ostree if missing), ENCAPSULATE (its example fixture maker), BENCH_DIR (/tmp/hostpull-bench), BASE_MIB (448), LAYER_MIB (64).
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
BASE_MIB=${BASE_MIB:-448} LAYER_MIB=${LAYER_MIB:-64}
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
FIX=$BENCH_DIR/ostree
IMAGE=$REGISTRY/hostpull/ostree-bench
for n in ostree jq tar gzip; do command -v $n >/dev/null || die "$n missing"; done

HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
ENCAPSULATE=${ENCAPSULATE:-$TARGET/release/examples/ostree-encapsulate}
if [ ! -x "$HOSTPULL" ] || [ ! -x "$ENCAPSULATE" ]; then
    echo "bench: building hostpull and the fixture maker (release, --features ostree)" >&2
    (cd "$ROOT" && cargo build --release --features ostree --bin hostpull --example ostree-encapsulate)
fi
mkdir -p "$BENCH_DIR"

# ---- the fixture (outside systemd: it is only built and pushed once)
if [ -z "${BENCH_IN_SYSD:-}" ]; then
    stamp="$BASE_MIB/$LAYER_MIB"
    if [ "$(cat "$FIX/.built" 2>/dev/null)" != "$stamp" ]; then
        echo "bench: building the fixture ($BASE_MIB MiB encapsulated base + $LAYER_MIB MiB layer)" >&2
        rm -rf "$FIX"; mkdir -p "$FIX"
        random_tree "$FIX/rootfs" "$BASE_MIB"
        mkdir -p "$FIX/rootfs/usr/lib"; echo "ID=hostpull-bench" >"$FIX/rootfs/usr/lib/os-release"
        ostree --repo="$FIX/src" init --mode=archive
        ostree --repo="$FIX/src" commit --branch=bench --tree=dir="$FIX/rootfs" >/dev/null
        "$ENCAPSULATE" "$FIX/src" bench "$FIX/base" v1 >/dev/null
        rm -rf "$FIX/rootfs" "$FIX/src"
        for t in v1 v2; do random_tree "$FIX/tree-$t" "$LAYER_MIB"; derive "$FIX/base" "$FIX/$t" "$t" "$FIX/tree-$t"; rm -rf "$FIX/tree-$t"; done
        echo "$stamp" >"$FIX/.built"
    fi
    for t in v1 v2; do
        skopeo copy -q --dest-authfile "$AUTH" --dest-cert-dir "$CERTS" "oci:$FIX/$t:$t" "docker://$IMAGE:$t"
    done
fi
if [ "$MODE" = systemd ]; then
    bench_systemd_for "$ROOT/bench/ostree.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

RESULTS=$BENCH_DIR/ostree.tsv
printf 'kind\twall_s\tbytes_fetched\tlayers_fetched\n' >"$RESULTS"
HP=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --sandbox "$MODE" --json)
measure() {   # measure KIND TAG REPO
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$("${HP[@]}" "docker://$IMAGE:$2" --dest "ostree:$3:bench" 2>"$BENCH_DIR/ostree.err") \
        || { tail -n 5 "$BENCH_DIR/ostree.err" >&2; die "$1 pull failed"; }
    t1=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s\n' "$1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
        "$(jq .bytes_fetched <<<"$out")" "$(jq .layers_fetched <<<"$out")" >>"$RESULTS"
}
REPO=$BENCH_DIR/ostree-repo
echo "bench: $IMAGE:v1 then :v2 into ostree, $RUNS runs, --sandbox $MODE ($HOSTPULL)" >&2
for i in $(seq 0 "$RUNS"); do   # run 0 is the warm-up
    echo "bench: run $i/$RUNS" >&2
    rm -rf "$REPO"; ostree --repo="$REPO" init --mode=bare
    measure full v1 "$REPO"
    measure update v2 "$REPO"
    [ "$i" = 0 ] && sed -i '2,$d' "$RESULTS"
done
rm -rf "$REPO"

med() {   # med KIND COLUMN
    awk -F'\t' -v k="$1" -v c="$2" '$1 == k { print $c }' "$RESULTS" | median '%s\n'
}
# What changed from v1 to v2: the derived layer and the config (per the registry's manifests).
changed=$(skopeo inspect --raw --authfile "$AUTH" --cert-dir "$CERTS" "docker://$IMAGE:v2" |
    jq '.config.size + .layers[-1].size')
total=$(skopeo inspect --raw --authfile "$AUTH" --cert-dir "$CERTS" "docker://$IMAGE:v2" |
    jq '.config.size + ([.layers[].size] | add)')
F=$(med full 2) U=$(med update 2) FB=$(med full 3) UB=$(med update 3)
echo
printf 'image %.0f MiB (%s layers of v2 changed: %.1f MiB)\n' "$(awk -v t="$total" 'BEGIN{print t/1048576}')" 1 \
    "$(awk -v c="$changed" 'BEGIN{print c/1048576}')"
printf 'full   median %6.2f s   fetched %s bytes\n' "$F" "$FB"
printf 'update median %6.2f s   fetched %s bytes (changed: %s bytes)\n' "$U" "$UB" "$changed"
awk -v u="$U" -v f="$F" 'BEGIN { printf "ratio update/full (median wall) = %.2f   (goal <= 0.20)\n", u / f }'
[ "$UB" = "$changed" ] && echo "update fetched exactly the changed bytes" ||
    echo "bench: WARNING: update fetched $UB bytes, $changed changed" >&2
echo "raw: $RESULTS"
