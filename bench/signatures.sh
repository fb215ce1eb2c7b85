#!/bin/bash
# bench/signatures.sh - what signature verification costs: `hostpull pull` of the rig's
# signed images under an accept-anything, a GPG (signedBy, file:// lookaside) and a
# sigstore (sigstoreSigned) policy, against `skopeo copy` of the same image under the
# accept-anything and the GPG policy (Debian's skopeo cannot verify sigstore).
#
#   bench/signatures.sh [-n RUNS] [--sandbox none|systemd]
#
# Needs the rig (tests/rig.sh up: hostpull/signed:v1, hostpull/cosigned:v1, their keys).
# Runs are interleaved after one warm-up of each; medians of wall time are reported.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull), BENCH_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
ARGS=("$@")
RUNS=7 MODE=none
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        *) echo "usage: $0 [-n RUNS] [--sandbox none|systemd]" >&2; exit 2 ;;
    esac
done
case $MODE in none|systemd) ;; *) die "--sandbox wants none or systemd" ;; esac

# shellcheck source=tests/cargo-target.sh
. "$ROOT/tests/cargo-target.sh"
TARGET=$(cargo_target_dir "$ROOT")
RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
[ -f "$RIG_DIR/env" ] || die "no rig env at $RIG_DIR/env; bring the rig up first: tests/rig.sh up"
HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
[ -x "$HOSTPULL" ] || (cd "$ROOT" && cargo build --release)
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
mkdir -p "$BENCH_DIR"
if [ "$MODE" = systemd ]; then
    bench_systemd_for "$ROOT/bench/signatures.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

REG=$(rig RIG_REGISTRY) SIG=$(rig RIG_SIG_DIR) AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR)
D=$BENCH_DIR/signatures
rm -rf "$D"; mkdir -p "$D/registries.d"
printf 'docker:\n  %s:\n    lookaside: file://%s/lookaside\n    use-sigstore-attachments: true\n' \
    "$REG" "$SIG" >"$D/registries.d/rig.yaml"
policy() {   # policy NAME REQUIREMENT-JSON
    printf '{"default":[{"type":"reject"}],"transports":{"docker":{"%s/hostpull":[%s]}}}\n' \
        "$REG" "$2" >"$D/$1.json"
}
policy accept '{"type":"insecureAcceptAnything"}'
policy gpg "{\"type\":\"signedBy\",\"keyType\":\"GPGKeys\",\"keyPath\":\"$SIG/signer.asc\"}"
policy sigstore "{\"type\":\"sigstoreSigned\",\"keyPath\":\"$SIG/cosign.pub\"}"

# run CASE: one timed run into a fresh destination; appends "CASE SECONDS" to results.
run() {
    local case=$1 dest=$D/dest t0
    local tool=${case%%-*} pol=${case#*-}
    local image=$(rig RIG_IMG_SIGNED)
    [ "$pol" = sigstore ] && image=$(rig RIG_IMG_COSIGNED)
    rm -rf "$dest"
    t0=$(date +%s.%N)
    if [ "$tool" = hostpull ]; then
        "$HOSTPULL" pull "docker://$image" --dest "oci:$dest:bench" --sandbox "$MODE" \
            --authfile "$AUTH" --cert-dir "$CERTS" --policy "$D/$pol.json" \
            --registries.d "$D/registries.d" >/dev/null 2>"$D/err" || { cat "$D/err" >&2; die "$case failed"; }
    else
        skopeo --policy "$D/$pol.json" --registries.d "$D/registries.d" copy --quiet --remove-signatures \
            --authfile "$AUTH" --src-cert-dir "$CERTS" "docker://$image" "oci:$dest:bench" \
            2>"$D/err" || { cat "$D/err" >&2; die "$case failed"; }
    fi
    echo "$case $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')" >>"$D/results"
}

CASES=(hostpull-accept hostpull-gpg hostpull-sigstore skopeo-accept skopeo-gpg)
echo "bench: signatures, $RUNS runs, hostpull --sandbox $MODE" >&2
for c in "${CASES[@]}"; do run "$c"; done
: >"$D/results"                                 # warm-ups are not counted
for i in $(seq "$RUNS"); do for c in "${CASES[@]}"; do run "$c"; done; done

case_median() { awk -v c="$1" '$1 == c { print $2 }' "$D/results" | median %.3f; }
printf '%-18s %9s\n' case median_s
for c in "${CASES[@]}"; do printf '%-18s %9s\n' "$c" "$(case_median "$c")"; done
awk -v ha="$(median hostpull-accept)" -v hg="$(median hostpull-gpg)" \
    -v hs="$(median hostpull-sigstore)" -v sa="$(median skopeo-accept)" \
    -v sg="$(median skopeo-gpg)" 'BEGIN {
    printf "\nratio hostpull/skopeo, accept-anything = %.2f\n", ha / sa
    printf "ratio hostpull/skopeo, GPG signedBy    = %.2f\n", hg / sg
    printf "verification cost: GPG %+.0f ms (skopeo %+.0f ms), sigstore %+.0f ms\n",
        (hg - ha) * 1000, (sg - sa) * 1000, (hs - ha) * 1000 }'
echo "raw: $D/results"
