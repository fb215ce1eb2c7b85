#!/bin/bash
# bench/held.sh [-n RUNS] - P6, the timer's common case: a sandboxed pull of an image the
# destination already holds (`--sandbox systemd`, into oci:) against `skopeo inspect --raw` of
# the same image run in a transient unit with the worker's identity (DynamicUser=yes, the
# credential by LoadCredential=, the CA by --cert-dir), the same skopeo (SKOPEO=, default
# Debian 12's), interleaved, medians of wall time. Also counts the worker units each pull
# started (the report's unit number). Needs the rig (tests/rig.sh up; RIG_DIR) and systemd
# (booted with tests/sysd.sh if PID 1 is not).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig} BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
die() { echo "bench: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
RUNS=9
[ "${1:-}" = -n ] && RUNS=$2
[ -f "$RIG_DIR/env" ] || die "no rig at $RIG_DIR: bash tests/rig.sh up"
bench_in_systemd bash "$0" "$@"
# shellcheck disable=SC1091
. "$RIG_DIR/env"
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
HP=$ROOT/target/release/hostpull
[ -x "$HP" ] || (cd "$ROOT" && cargo build --release --locked >&2)
mkdir -p "$BENCH_DIR"
dest=$BENCH_DIR/held
rm -rf "$dest"
image=docker://$RIG_IMG_MULTI
pull() {
    HOSTPULL_SKOPEO=$SKOPEO "$HP" pull "$image" --dest "oci:$dest" --authfile "$RIG_AUTHFILE" \
        --ca "$RIG_REGISTRY=$RIG_CA" --sandbox systemd --json 2>/dev/null
}
peer() {
    systemd-run --pipe --wait --quiet --collect -p DynamicUser=yes -p PrivateTmp=yes \
        -p Environment=HOME=/tmp -p "LoadCredential=auth.json:$RIG_AUTHFILE" \
        -p "LoadCredential=ca.crt:$RIG_CA" -p "BindReadOnlyPaths=$(dirname "$SKOPEO")" -- \
        /bin/sh -c "exec $SKOPEO inspect --raw --authfile \"\$CREDENTIALS_DIRECTORY/auth.json\" \
            --cert-dir \"\$CREDENTIALS_DIRECTORY\" $image" >/dev/null </dev/null
}
ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null; echo $(( ($(date +%s%N) - t0) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
pull >/dev/null   # the layout holds the image from here on
peer
read -r load _ </proc/loadavg
: >"$BENCH_DIR/held.tsv"
for _ in $(seq "$RUNS"); do
    printf '%s\t%s\n' "$(ms pull)" "$(ms peer)" >>"$BENCH_DIR/held.tsv"
done
units=$(pull | sed -n 's/.*"unit":"hostpull-worker-[^"]*-\([0-9]*\)\.service".*/\1/p')
a=$(cut -f1 "$BENCH_DIR/held.tsv" | median)
b=$(cut -f2 "$BENCH_DIR/held.tsv" | median)
echo "P6 $($SKOPEO --version | cut -d' ' -f3), load $load, $RUNS runs: hostpull (image held) ${a} ms," \
     "skopeo inspect --raw in a unit ${b} ms, ratio $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}');" \
     "worker units started: $((units + 1))"
