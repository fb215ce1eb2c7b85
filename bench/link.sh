#!/bin/bash
# bench/link.sh - pulls across a link with latency (issue 46: P9u, P9f, P9p), hostpull against
# the path it replaces, side by side in one run.
#
#   bench/link.sh [-n RUNS] [--large] [--index] [--sandbox none|systemd]
#
# Every pull goes through bench/relay.py, a TCP relay in front of the rig's TLS registry
# (TLS passes through untouched) that delays every chunk by RTT_MS/2 each way (pipelined:
# the link holds its bandwidth-delay product), charges each new connection its TCP
# handshake's round trip, paces each connection's download to FLOW_RATE and all of them
# together to LINK_RATE, and counts the connections it accepts. The registry speaks TLS and
# no client here resumes a TLS session: TLS handshakes = connections.
#
# The image, built once in $BENCH_DIR/link-IMAGE (cached) and pushed to the rig: an
# ostree-encapsulated base plus derived layers (bench/lib.sh: ostree_base, layered), :v2
# differing from :v1 in its last layer ($LAYER_MIB MiB) only.
#   quick (default): a $BASE_MIB MiB base + $LAYERS layers of $LAYER_MIB MiB (17, 160 MiB).
#   --large (P9f):   a $LARGE_BASE_MIB MiB base + $LARGE_LAYERS layers, sizes cycling through
#                    $LARGE_SIZES MiB, the last $LAYER_MIB MiB (45 layers, 514 MiB).
#   --index:         each tag names a one-entry image index (linux/amd64) of that image, as a
#                    multi-arch image's tag does (fedora-bootc's, centos-bootc's); "pinned"
#                    pins the index's digest.
# Per run, for each destination and each variant, one after another (interleaved): v1 into
# an empty destination ("full"); a copy of it made; v2 by tag into it ("update"); v2 pinned
# by digest (IMAGE@sha256:...) into the copy ("pinned").
#   oci:    `skopeo copy docker://... oci:DIR:bench` (the peer), `hostpull pull --dest oci:DIR:bench`
#   ostree: examples/ostree-peer (ostree-ext's ImageImporter, as rpm-ostree and bootc pull; the
#           peer), `hostpull pull --dest ostree:REPO:bench`, into a fresh bare repository
#   cstorage: `skopeo copy docker://... containers-storage:[overlay@D/graph+D/run]localhost/link:bench`
#           (the peer), `hostpull pull --dest` the same, into a fresh overlay store (issue 47)
# LINK_DESTS chooses them (default "oci ostree").
# hostpull with --sandbox none and, unless `--sandbox none` is given, --sandbox systemd: then
# everything runs inside one systemd (tests/sysd.sh if PID 1 is not systemd). One warm-up
# run, then RUNS (5); medians (min-max) of wall and CPU time. The same skopeo ($SKOPEO) for
# the peers and hostpull's worker. CPU: the command and the children it reaped, plus, inside
# tests/sysd.sh, what its cgroup used meanwhile (the worker units); neither the registry nor
# the relay is counted. The link's limit is the pull's bytes (manifest, config, layers) /
# LINK_RATE. Raw rows: $BENCH_DIR/link.tsv; the relay's connections: $BENCH_DIR/link-relay.log.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull), PEER and ENCAPSULATE
# (target/release/examples/; all built with --features ostree if missing), SKOPEO
# (/usr/bin/skopeo), BENCH_DIR (/tmp/hostpull-bench), RTT_MS (40), FLOW_RATE (16M), LINK_RATE
# (64M; rates in bytes/s, K/M/G powers of 1000, Ki/Mi/Gi of 1024, 0: none), INIT_CWND (0: no
# TCP slow start; 10: Linux's initial window, see bench/relay.py), BASE_MIB (32), LAYER_MIB (8),
# LAYERS (16), LARGE_BASE_MIB (64), LARGE_LAYERS (44), LARGE_SIZES ("1 2 4 8 16 32"), LINK_DESTS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
usage() { echo "usage: $0 [-n RUNS] [--large] [--index] [--sandbox none|systemd]" >&2; exit 2; }

ARGS=("$@")
RUNS=5 MODE=systemd IMG=quick INDEX=
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --large) IMG=large; shift ;;
        --index) INDEX=-index; shift ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        --sandbox=*) MODE=${1#*=}; shift ;;
        *) usage ;;
    esac
done
bench_checks   # RUNS and MODE checked; TARGET and RIG_DIR set (bench/lib.sh)
AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR) REGISTRY=$(rig RIG_REGISTRY)
export RTT_MS=${RTT_MS:-40} FLOW_RATE=${FLOW_RATE:-16M} LINK_RATE=${LINK_RATE:-64M} INIT_CWND=${INIT_CWND:-0}
BASE_MIB=${BASE_MIB:-32} LAYER_MIB=${LAYER_MIB:-8} LAYERS=${LAYERS:-16}
LARGE_BASE_MIB=${LARGE_BASE_MIB:-64} LARGE_LAYERS=${LARGE_LAYERS:-44} LARGE_SIZES=${LARGE_SIZES:-1 2 4 8 16 32}
export SKOPEO=${SKOPEO:-/usr/bin/skopeo}
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
read -ra DESTS <<<"${LINK_DESTS:-oci ostree}"
FIX=$BENCH_DIR/link-$IMG
for n in ostree jq tar gzip python3 /usr/bin/time "$SKOPEO"; do command -v "$n" >/dev/null || die "$n missing"; done

HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
export PEER=${PEER:-$TARGET/release/examples/ostree-peer}
export ENCAPSULATE=${ENCAPSULATE:-$TARGET/release/examples/ostree-encapsulate}
IMPORTER=$(dirname "$HOSTPULL")/hostpull-ostree-import   # beside it, as src/store/import.rs finds it
if [ ! -x "$HOSTPULL" ] || [ ! -x "$IMPORTER" ] || [ ! -x "$PEER" ] || [ ! -x "$ENCAPSULATE" ]; then
    echo "bench: building hostpull, its import, the peer and the fixture maker (release, --features ostree)" >&2
    (cd "$ROOT" && cargo build --release --features ostree --bin hostpull --bin hostpull-ostree-import \
        --example ostree-peer --example ostree-encapsulate)
fi
mkdir -p "$BENCH_DIR"

# The image's layers (MiB, the base's excluded), the last one the one v2 changes.
if [ $IMG = quick ]; then
    BASE=$BASE_MIB
    read -ra SIZES <<<"$(yes "$LAYER_MIB" | head -n "$LAYERS" | paste -sd' ')"
else
    BASE=$LARGE_BASE_MIB SIZES=()
    read -ra cycle <<<"$LARGE_SIZES"
    for ((i = 0; i < LARGE_LAYERS - 1; i++)); do SIZES+=("${cycle[i % ${#cycle[@]}]}"); done
    SIZES+=("$LAYER_MIB")
fi
NAME=hostpull/link-$IMG$INDEX

# index_layout SRC DST: a copy of layout SRC whose tag names a one-entry image index
# (linux/amd64) of SRC's manifest.
index_layout() {
    local m idx d
    rm -rf "$2"; cp -a "$1" "$2"
    m=$(jq -c '.manifests[0] | {mediaType, digest, size, platform: {architecture: "amd64", os: "linux"}}' "$1/index.json")
    idx=$(jq -cn --argjson m "$m" '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [$m]}')
    d=$(printf %s "$idx" | sha256sum | cut -d' ' -f1)
    printf %s "$idx" >"$2/blobs/sha256/$d"
    rm "$2/index.json"
    jq -c --arg d "sha256:$d" --argjson s "${#idx}" \
        '.manifests[0] |= (.digest = $d | .size = $s | .mediaType = "application/vnd.oci.image.index.v1+json")' \
        "$1/index.json" >"$2/index.json"
}

# ---- the image (outside systemd: built and pushed once)
if [ -z "${BENCH_IN_SYSD:-}" ]; then
    stamp="$BASE/${SIZES[*]}"
    if [ "$(cat "$FIX/.built" 2>/dev/null)" != "$stamp" ]; then
        echo "bench: building $IMG: a $BASE MiB base + ${#SIZES[@]} layers ($(IFS=+; echo $((${SIZES[*]}))) MiB)" >&2
        rm -rf "$FIX"; mkdir -p "$FIX"
        ostree_base "$FIX/base" "$BASE" "$ENCAPSULATE"
        layered "$FIX/base" "$FIX/img" "${SIZES[@]}"
        rm -rf "$FIX/base"
        echo "$stamp" >"$FIX/.built"
    fi
    for t in v1 v2; do
        src=$FIX/img-$t
        if [ -n "$INDEX" ]; then index_layout "$src" "$FIX/idx-$t"; src=$FIX/idx-$t; fi
        skopeo copy -q --all --dest-authfile "$AUTH" --dest-cert-dir "$CERTS" "oci:$src:$t" "docker://$REGISTRY/$NAME:$t"
        served=sha256:$(skopeo inspect --raw --authfile "$AUTH" --cert-dir "$CERTS" "docker://$REGISTRY/$NAME:$t" | sha256sum | cut -d' ' -f1)
        [ "$served" = "$(layout_digest "$src")" ] || die "$NAME:$t: the registry serves $served, not the layout's manifest"
    done
fi
if [ "$MODE" = systemd ]; then
    export BENCH_SHARE
    bench_systemd_for "$ROOT/bench/link.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

# ---- the relay
W=$BENCH_DIR/link
rm -rf "$W"; mkdir -p "$W"
COUNTS=$W/counts RELAY=
trap '[ -z "$RELAY" ] || kill "$RELAY" 2>/dev/null || true' EXIT
coproc RL {
    exec python3 "$ROOT/bench/relay.py" "$REGISTRY" "$COUNTS" --log "$BENCH_DIR/link-relay.log" \
        --delay-ms "$(awk -v r="$RTT_MS" 'BEGIN { print r / 2 }')" --flow-rate "$FLOW_RATE" \
        --link-rate "$LINK_RATE" --init-cwnd "$INIT_CWND"
}
RELAY=$RL_PID
read -r PORT _ _ _ RATE _ <&"${RL[0]}" || die "the relay did not start"
RATE=${RATE#link_rate=}   # bytes/s, as the relay parsed LINK_RATE
: >"$BENCH_DIR/link-relay.log"
LINK=127.0.0.1:$PORT
sed "s/$REGISTRY/$LINK/g" "$AUTH" >"$W/auth.json"   # auth.json is keyed by HOST:PORT
AUTH=$W/auth.json   # --cert-dir holds a bare ca.crt: it serves any HOST:PORT
PIN=$(layout_digest "$FIX/img-v2")
[ -z "$INDEX" ] || PIN=$(layout_digest "$FIX/idx-v2")
FULL_BYTES=$(layout_bytes "$FIX/img-v1")
UPDATE_BYTES=$(layout_bytes "$FIX/img-v2" last)   # the manifest, the config, the changed layer

VARIANTS=(peer none)
[ "$MODE" = systemd ] && VARIANTS+=(systemd)
CGROUP_CPU=
[ -n "${BENCH_IN_SYSD:-}" ] && [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ] && CGROUP_CPU=/sys/fs/cgroup/cpuacct/cpuacct.usage
RESULTS=$BENCH_DIR/link.tsv
printf 'run\tdest\tpull\tvariant\twall_s\tcpu_s\tload\tconnections\tdown_bytes\n' >"$RESULTS"

# measure RUN DEST PULL VARIANT REF D: one pull of $LINK/$NAME REF (:TAG or @DIGEST) into D,
# one row: timed_row's columns, then the connections the relay accepted and the bytes it
# sent to the client meanwhile.
measure() {
    local img=$LINK/$NAME$5 cmd c0 d0 c1 d1 _
    case $2/$4 in
        oci/peer) cmd=("$SKOPEO" copy -q --src-authfile "$AUTH" --src-cert-dir "$CERTS" "docker://$img" "oci:$6:bench") ;;
        ostree/peer) cmd=("$PEER" "$img" "$6" "$AUTH" "$CERTS" "$SKOPEO") ;;
        cstorage/peer) cmd=("$SKOPEO" copy -q --src-authfile "$AUTH" --src-cert-dir "$CERTS" "docker://$img"
                            "containers-storage:[overlay@$6/graph+$6/run]localhost/link:bench") ;;
        cstorage/*) cmd=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --skopeo "$SKOPEO" --sandbox "$4"
                         "docker://$img" --dest "containers-storage:[overlay@$6/graph+$6/run]localhost/link:bench") ;;
        *) cmd=("$HOSTPULL" pull --authfile "$AUTH" --cert-dir "$CERTS" --skopeo "$SKOPEO"
                --sandbox "$4" "docker://$img" --dest "$2:$6:bench") ;;
    esac
    sync
    read -r c0 d0 _ <"$COUNTS"
    timed_row link "$1"$'\t'"$2"$'\t'"$3"$'\t'"$4" "${cmd[@]}"
    sleep 0.3   # the relay writes its counters every 100 ms
    read -r c1 d1 _ <"$COUNTS"
    sed -i "\$s/\$/\t$((c1 - c0))\t$((d1 - d0))/" "$RESULTS"
}
# unmount D: what containers/storage's overlay driver left mounted under D.
unmount() { grep -o " $1[/.][^ ]*" /proc/mounts | sort -r | xargs -r umount 2>/dev/null || true; }
# fresh DEST D: an empty destination at D.
fresh() {
    unmount "$2"; rm -rf "$2"
    if [ "$1" = ostree ]; then ostree --repo="$2" init --mode=bare; else mkdir -p "$2"; fi
}

D=$W/dest
echo "bench: $LINK -> $REGISTRY: RTT $RTT_MS ms, $FLOW_RATE/connection, $LINK_RATE in all; $NAME" \
    "(${#SIZES[@]} + 1 layers); ${VARIANTS[*]}; $RUNS runs + 1 warm-up; skopeo $SKOPEO" >&2
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg) T0=$(date -u '+%F %H:%M')
for i in $(seq 0 "$RUNS"); do   # run 0 is the warm-up
    echo "bench: run $i/$RUNS" >&2
    for dest in "${DESTS[@]}"; do
        for v in "${VARIANTS[@]}"; do
            fresh $dest "$D"
            measure "$i" $dest full "$v" :v1 "$D"
            unmount "$D"; fresh $dest "$D.pin"; cp -a "$D/." "$D.pin"; rm -rf "$D.pin/run"
            measure "$i" $dest update "$v" :v2 "$D"
            measure "$i" $dest pinned "$v" "@$PIN" "$D.pin"
            unmount "$D"; rm -rf "$D" "$D.pin"
        done
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
RELAY_CPU=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$RELAY/stat")
kill "$RELAY"; wait "$RELAY" 2>/dev/null || true; RELAY=

# stat DEST PULL VARIANT COLUMN: "median (min-max)" over runs 1..RUNS; med: the median alone.
stat() {
    awk -F'\t' -v d="$1" -v p="$2" -v v="$3" -v c="$4" 'NR > 1 && $1 > 0 && $2 == d && $3 == p && $4 == v { print $c }' "$RESULTS" | spread
}
med() { stat "$@" | cut -d' ' -f1; }
conns() {   # the median, and the range if it varied
    stat "$@" 8 | awk '{ m = $1 + 0; r = $2; gsub(/[()]/, "", r); split(r, a, "-")
                          if (a[1] == a[2]) printf "%d", m; else printf "%g (%d-%d)", m, a[1], a[2] }'
}
limit() { awk -v b="$1" -v r="$RATE" 'BEGIN { printf "%.2f", (r > 0 ? b / r : 0) }'; }

echo
echo "bench/link.sh, $T0 UTC, $NAME: ${#SIZES[@]} + 1 layers, $(awk -v b="$FULL_BYTES" 'BEGIN { printf "%.0f", b / 1048576 }') MiB;" \
    "RTT $RTT_MS ms, $FLOW_RATE/s per connection, $LINK_RATE/s in all$([ "$INIT_CWND" = 0 ] || echo ", slow start from $INIT_CWND segments");" \
    "skopeo $("$SKOPEO" --version | awk '{ print $3 }') ($SKOPEO); $RUNS runs after a warm-up, medians (min-max)"
echo "load (1/5/15 min): $LOAD0 before, $LOAD1 after; 1-min before each pull: $(awk -F'\t' 'NR > 1 { print $7 }' "$RESULTS" | sort -g | sed -n '1p;$p' | paste -sd-);" \
    "nproc $(nproc); the relay used $RELAY_CPU CPU-s in all (not counted below)"
echo "CPU: the command and its reaped children$([ -n "$CGROUP_CPU" ] && echo ", plus the systemd's cgroup (worker units)")." \
    "peer: skopeo copy (oci, cstorage), ImageImporter (ostree). Link limit: bytes / $LINK_RATE/s."
echo
hdr="| dest | pull | link limit | peer wall s | hostpull \`none\` wall s |"
sep="| --- | --- | --- | --- | --- |"
if [ "$MODE" = systemd ]; then hdr="$hdr hostpull \`systemd\` wall s |"; sep="$sep --- |"; fi
names=$(IFS=/; echo "${VARIANTS[*]}"); names=${names//\// \/ }
echo "$hdr CPU s: $names | connections: $names |"
echo "$sep --- | --- |"
for dest in "${DESTS[@]}"; do
    for k in full update pinned; do
        if [ $k = full ]; then bytes=$FULL_BYTES; else bytes=$UPDATE_BYTES; fi
        lim=$(limit "$bytes")
        pw=$(med $dest $k peer 5)
        row="| $dest | $k | $lim s | $(stat $dest $k peer 5) = $(ratio "$pw" "$lim")× limit |"
        cpu='' cn=''
        for v in "${VARIANTS[@]}"; do
            cpu="$cpu / $(med $dest $k "$v" 6)" cn="$cn / $(conns $dest $k "$v")"
            [ "$v" = peer ] && continue
            w=$(med $dest $k "$v" 5)
            row="$row $(stat $dest $k "$v" 5): **$(ratio "$w" "$pw")×** = $(ratio "$w" "$lim")× limit |"
        done
        echo "$row ${cpu# / } | ${cn# / } |"
    done
done
echo
echo "ratios: hostpull / the peer (goals, issue 46: P9u update ≤ 1.0×, P9p pinned ≤ 0.8×, P9f full of --large ≤ 0.5× and ≤ 1.5× limit)"
echo "connections: TCP connections the relay accepted per pull; each is a TLS handshake (the registry is TLS, no client resumes)."
echo "raw: $RESULTS; the relay's connections (accept, close, bytes down, up): $BENCH_DIR/link-relay.log"
