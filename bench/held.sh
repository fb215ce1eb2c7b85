#!/bin/bash
# bench/held.sh [-n RUNS] - P6, the timer's common case: a sandboxed pull of an image the
# destination already holds (`--sandbox systemd`, into oci:) against `skopeo inspect --raw` of
# the same image in a transient unit with the worker unit's sandbox (unit.rs's hardening, its
# address rules and limits, a root of its own; the credential by LoadCredential=, the CA by
# --cert-dir), the same skopeo (SKOPEO=, default Debian 12's), interleaved, medians of wall
# time. Also counts the worker units each pull started (the report's unit number). Needs the
# rig (tests/rig.sh up; RIG_DIR) and systemd (booted with tests/sysd.sh if PID 1 is not).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/cargo-target.sh
. "$ROOT/tests/cargo-target.sh"
TARGET=$(cargo_target_dir "$ROOT")
export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig} BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
RUNS=9
[ "${1:-}" = -n ] && RUNS=$2
[ -f "$RIG_DIR/env" ] || die "no rig at $RIG_DIR: bash tests/rig.sh up"
HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}   # HOSTPULL=: another build, for an A/B
bench_systemd_for bash "$0" "$@"   # shares HOSTPULL's directory with that systemd
# shellcheck disable=SC1091
. "$RIG_DIR/env"
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
HP=$HOSTPULL
[ -x "$HP" ] || (cd "$ROOT" && cargo build --release --locked >&2)
mkdir -p "$BENCH_DIR"
mkdir -p "$BENCH_DIR/state"
pull() {   # IMAGE DEST; a state directory as the timer's service has (the kept skopeo version)
    STATE_DIRECTORY=$BENCH_DIR/state HOSTPULL_SKOPEO=$SKOPEO "$HP" pull "$1" --dest "oci:$2:v1" --authfile "$RIG_AUTHFILE" \
        --ca "$RIG_REGISTRY=$RIG_CA" --sandbox systemd --json 2>/dev/null
}
# The worker unit's own sandbox for the peer: unit.rs's HARDENING, its address families, the
# default limits, IPAddressDeny= and a root of its own like prepare::worker_root's.
mapfile -t hardening < <(sed -n '/^const HARDENING/,/^];/p' "$ROOT/src/sandbox/unit.rs" | grep -o '^ *"[^"]*"' | tr -d ' "')
[ ${#hardening[@]} -gt 20 ] || die "cannot read HARDENING from src/sandbox/unit.rs"
peer_root=$BENCH_DIR/peer-root
rm -rf "$peer_root"
mkdir -p "$peer_root"/{tmp,var/tmp,run,dev,proc,sys}
props=()
for top in usr etc opt bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$top" ]; then ln -s "$(readlink "/$top")" "$peer_root/$top"
    elif [ -d "/$top" ]; then mkdir "$peer_root/$top"; props+=(-p "BindReadOnlyPaths=/$top:/$top"); fi
done
case $SKOPEO in /usr/*) ;; *) props+=(-p "BindReadOnlyPaths=$(dirname "$SKOPEO")") ;; esac
for h in "${hardening[@]}"; do props+=(-p "$h"); done
props+=(-p "RestrictAddressFamilies=AF_INET AF_INET6" -p MemoryMax=512M -p TasksMax=256
        -p "IPAddressDeny=169.254.0.0/16 fe80::/10 fd00:ec2::254/128"
        -p "RootDirectory=$peer_root" -p MountAPIVFS=yes -p TemporaryFileSystem=/run)
peer() {   # IMAGE
    systemd-run --pipe --wait --quiet --collect --unit=hostpull-peer.service \
        --slice=hostpull.slice "${props[@]}" \
        -p "LoadCredential=auth.json:$RIG_AUTHFILE" -p "LoadCredential=ca.crt:$RIG_CA" -- \
        "$SKOPEO" inspect --raw --authfile "/run/credentials/hostpull-peer.service/auth.json" \
        --cert-dir /run/credentials/hostpull-peer.service "$1" >/dev/null </dev/null
}
ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null; echo $(( ($(date +%s%N) - t0) / 1000000 )); }
version=$($SKOPEO --version | cut -d' ' -f3)
# small:v1 is one manifest; multi:v1 an index, whose platform's manifest is a second inspect
# for hostpull (the peer reads the index alone); pinned is small:v1 by its digest (the
# machine-config daemon's pull), which hostpull reads from the layout that holds it.
for name in small multi pinned; do
    case $name in
        pinned) image=docker://${RIG_IMG_SMALL%:*}@$("$SKOPEO" inspect --format '{{.Digest}}' \
                    --authfile "$RIG_AUTHFILE" --cert-dir "$RIG_CERT_DIR" "docker://$RIG_IMG_SMALL") ;;
        *) var=RIG_IMG_${name^^}; image=docker://${!var} ;;
    esac
    dest=$BENCH_DIR/held-$name
    rm -rf "$dest"
    pull "$image" "$dest" >/dev/null   # the layout holds the image from here on
    peer "$image"
    read -r load _ </proc/loadavg
    tsv=$BENCH_DIR/held-$name.tsv
    : >"$tsv"
    for _ in $(seq "$RUNS"); do
        printf '%s\t%s\n' "$(ms pull "$image" "$dest")" "$(ms peer "$image")" >>"$tsv"
    done
    unit=$(pull "$image" "$dest" | sed -n 's/.*"unit":"hostpull-worker-[^"]*-\([0-9]*\)\.service".*/\1/p')
    units=$((${unit:--1} + 1))   # no unit: none started
    a=$(cut -f1 "$tsv" | median)
    b=$(cut -f2 "$tsv" | median)
    echo "P6 $version $name, load $load, $RUNS runs: hostpull (image held) ${a} ms," \
         "skopeo inspect --raw in a unit ${b} ms, ratio $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}');" \
         "worker units started: $units"
done
