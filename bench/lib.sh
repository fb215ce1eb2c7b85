# bench/lib.sh - helpers every bench script sources first (not run by itself).
# The caller sets ROOT (repo root), BENCH_DIR and RIG_DIR before it calls them. A die() or
# rig() of the caller's own, defined before, is kept.

declare -F die >/dev/null || die() { echo "bench: $*" >&2; exit 1; }
# rig NAME: the rig's NAME (RIG_AUTHFILE, ...) from $RIG_DIR/env, shell-quoted as
# tests/rig.sh env_line writes it.
# shellcheck disable=SC1091 # the rig's, written by tests/rig.sh up
declare -F rig >/dev/null || rig() { (. "$RIG_DIR/env" && printf '%s\n' "${!1:-}"); }

# bench_checks: -n RUNS and --sandbox MODE as the scripts take them, checked; TARGET (cargo's
# target directory) and RIG_DIR (default /tmp/hostpull-rig, its env there) set.
bench_checks() {
    [[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "-n wants a positive number"
    case $MODE in none|systemd) ;; *) die "--sandbox wants none or systemd" ;; esac
    # shellcheck source=tests/cargo-target.sh
    . "$ROOT/tests/cargo-target.sh"
    TARGET=$(cargo_target_dir "$ROOT")
    RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
    [ -f "$RIG_DIR/env" ] || die "no rig env at $RIG_DIR/env; bring the rig up first: tests/rig.sh up"
}

# median [FORMAT]: the median of the numbers on stdin, printf'd with FORMAT
# (default %s); nothing when there are none.
median() {
    sort -g | awk -v f="${1:-%s}" '{ x[NR] = $1 }
        END { if (NR) printf f, (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'
}
# spread: the numbers on stdin as "MEDIAN (MIN-MAX)", two decimals each.
spread() {
    sort -g | awk '{ a[NR] = $1 } END { m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
                                       printf "%.2f (%.2f-%.2f)", m, a[1], a[NR] }'
}
# ratio A B: A / B, two decimals (0 when B is not above 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# bench_in_systemd SCRIPT ARGS...: return if systemd is PID 1 (directly or because we already
# run inside tests/sysd.sh). Otherwise boot a private systemd with tests/sysd.sh (state in
# $SYSD_DIR, default /tmp/hostpull-bench-sysd, so a test run's /tmp/hostpull-sysd is left
# alone), run SCRIPT ARGS inside it with the environment kept, power it off again (unless it
# was already up) and exit with SCRIPT's code. Shared into it: the repo, $BENCH_DIR, $RIG_DIR.
bench_in_systemd() {
    local rc=0 booted=0 d shares=
    [ "$(cat /proc/1/comm)" = systemd ] && return 0
    [ -z "${BENCH_IN_SYSD:-}" ] || die "inside tests/sysd.sh, yet PID 1 is not systemd"
    export SYSD_DIR=${SYSD_DIR:-/tmp/hostpull-bench-sysd}
    for d in "$ROOT" "$BENCH_DIR" "$RIG_DIR" ${BENCH_SHARE:-}; do   # skip dirs under another
        case " $shares " in *" $d "*) continue ;; esac
        [[ $d == "$BENCH_DIR"/* || $d == "$ROOT"/* ]] && continue
        shares="$shares $d"
    done
    export SYSD_SHARE=${shares# }
    if ! "$ROOT/tests/sysd.sh" pid >/dev/null 2>&1; then
        echo "bench: PID 1 is not systemd: booting one (tests/sysd.sh, SYSD_DIR=$SYSD_DIR)" >&2
        "$ROOT/tests/sysd.sh" up >&2
        booted=1
        trap '"$ROOT/tests/sysd.sh" down >&2' EXIT
    fi
    BENCH_IN_SYSD=1 "$ROOT/tests/sysd.sh" exec "$@" || rc=$?
    if [ $booted = 1 ]; then trap - EXIT; "$ROOT/tests/sysd.sh" down >&2 || true; fi
    exit $rc
}

# wait_quiet: wait until the 1-minute load average is below $QUIET_LOAD (1.0), polling every
# 10 s for at most $QUIET_MAX s (600), then go on anyway. Prints "LOAD WAITED_S".
wait_quiet() {
    local t0=$SECONDS l _
    while :; do
        read -r l _ </proc/loadavg
        awk -v l="$l" -v m="${QUIET_LOAD:-1.0}" 'BEGIN { exit !(l < m) }' && break
        if (( SECONDS - t0 >= ${QUIET_MAX:-600} )); then
            echo "bench: load $l still >= ${QUIET_LOAD:-1.0} after $((SECONDS - t0)) s: measuring anyway" >&2
            break
        fi
        sleep 10
    done
    echo "$l $((SECONDS - t0))"
}

# hwm PID: VmHWM (peak RSS, KiB) of PID, 0 if gone. alive PID: exists, not a zombie.
hwm() {
    local k v _
    while read -r k v _; do [ "$k" = VmHWM: ] && { echo "$v"; return; }; done 2>/dev/null <"/proc/$1/status"
    echo 0
}
alive() {
    local k v _
    while read -r k v _; do [ "$k" = State: ] && { [ "$v" != Z ]; return; }; done 2>/dev/null <"/proc/$1/status"
    return 1
}
# kids PID: children of every thread of PID (tokio spawns its children from worker threads)
kids() { local f; for f in /proc/"$1"/task/*/children; do echo $(<"$f"); done 2>/dev/null || true; }

# bench_systemd_for SCRIPT ARGS...: bench_in_systemd, with BENCH_DIR, RIG_DIR and HOSTPULL
# exported and hostpull's own directory shared too.
bench_systemd_for() {
    export BENCH_DIR RIG_DIR HOSTPULL BENCH_SHARE
    BENCH_SHARE=$(dirname "$HOSTPULL")
    bench_in_systemd "$@"
}

# timed_row NAME COLUMNS CMD...: run CMD (stdout dropped, stderr in $BENCH_DIR/NAME.err) and
# append a row to $RESULTS: COLUMNS (tab-separated), wall s, CPU s, the 1-min load before.
# CPU: user + system of CMD and the children it reaped, plus what $CGROUP_CPU (a cpuacct.usage
# file, if set: a systemd's units) grew by meanwhile.
timed_row() {
    local name=$1 cols=$2 c0=0 c1=0 load _
    shift 2
    read -r load _ </proc/loadavg
    [ -n "${CGROUP_CPU:-}" ] && c0=$(cat "$CGROUP_CPU")
    /usr/bin/time -f '%e %U %S' -o "$BENCH_DIR/$name.time" "$@" >/dev/null 2>"$BENCH_DIR/$name.err" ||
        { tail -n 5 "$BENCH_DIR/$name.err" >&2; die "${cols//$'\t'/ } failed"; }
    [ -n "${CGROUP_CPU:-}" ] && c1=$(cat "$CGROUP_CPU")
    awk -v p="$cols" -v c="$((c1 - c0))" -v l="$load" \
        '{ printf "%s\t%.3f\t%.3f\t%s\n", p, $1, $2 + $3 + c / 1e9, l }' "$BENCH_DIR/$name.time" >>"$RESULTS"
}

# ---- ostree fixtures (bench/ostree.sh, bench/ostree-peer.sh; need jq, tar, gzip, sha256sum)
# derive BASE OUT TAG TREE: BASE (an OCI layout) plus TREE as one gzip layer, as the layout OUT.
derive() {
    local base=$1 out=$2 tag=$3 tree=$4 b m c diff layer cfg man
    # hard links: blobs are never written to, and index.json is replaced, not rewritten
    rm -rf "$out"; cp -al "$base" "$out"; rm "$out/index.json"; b=$out/blobs/sha256
    put() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$b/$d"; echo "sha256:$d"; }
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$tree" -cf "$out/l.tar" usr
    diff=sha256:$(sha256sum "$out/l.tar" | cut -d' ' -f1)
    gzip -n -1 "$out/l.tar"; local size; size=$(stat -c %s "$out/l.tar.gz"); layer=$(put "$out/l.tar.gz")
    m=$(jq -r '.manifests[0].digest' "$base/index.json"); m=$b/${m#sha256:}
    c=$(jq -r '.config.digest' "$m"); c=$b/${c#sha256:}
    jq -c --arg d "$diff" '.rootfs.diff_ids += [$d] | .history += [{"created_by": "bench: derived layer"}]' "$c" >"$out/c.json"
    local csize; csize=$(stat -c %s "$out/c.json"); cfg=$(put "$out/c.json")
    jq -c --arg c "$cfg" --argjson cs "$csize" --arg l "$layer" --argjson ls "$size" \
        '.config.digest = $c | .config.size = $cs
         | .layers += [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": $l, "size": $ls}]' \
        "$m" >"$out/m.json"
    local msize; msize=$(stat -c %s "$out/m.json"); man=$(put "$out/m.json")
    jq -nc --arg d "$man" --argjson s "$msize" --arg t "$tag" \
        '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json",
          digest: $d, size: $s, annotations: {"org.opencontainers.image.ref.name": $t}}]}' >"$out/index.json"
}
# random_tree DIR MIB [FILE_MIB [NAME]]: MIB MiB of random data in FILE_MIB (16) MiB files
# DIR/usr/share/bench/NAMEi (NAME: f).
random_tree() {
    local i f=${3:-16}; mkdir -p "$1/usr/share/bench"
    for i in $(seq $(($2 / f))); do head -c "${f}M" /dev/urandom >"$1/usr/share/bench/${4:-f}$i"; done
}

# ostree_base OUT MIB ENCAPSULATE: an ostree commit of MIB MiB of random files (16 MiB each)
# and an os-release, made an OCI layout OUT (tag v1) by ENCAPSULATE (examples/ostree-encapsulate).
ostree_base() {
    local out=$1 tmp=$1.tmp
    rm -rf "$out" "$tmp"; mkdir -p "$tmp/rootfs/usr/lib"
    random_tree "$tmp/rootfs" "$2"
    echo "ID=hostpull-bench" >"$tmp/rootfs/usr/lib/os-release"
    ostree --repo="$tmp/src" init --mode=archive
    ostree --repo="$tmp/src" commit --branch=bench --tree=dir="$tmp/rootfs" >/dev/null
    "$3" "$tmp/src" bench "$out" v1 >/dev/null
    rm -rf "$tmp"
}
# layered BASE OUT MIB...: BASE plus one layer of random data per MIB (one file each, named
# lI- and, in the last layer, last-TAG-), the last layer in two versions: the layouts OUT-v1
# and OUT-v2 (tags v1 and v2), which differ only in it.
layered() {
    local base=$1 out=$2 prev=$1 i=0 t
    shift 2
    [ $# -gt 0 ] || return 1
    # add LAYOUT OUT TAG MIB NAME: LAYOUT plus one random layer (files NAME*), as OUT.
    add() { random_tree "$2.tree" "$4" "$4" "$5"; derive "$1" "$2" "$3" "$2.tree"; rm -rf "$2.tree"; }
    while [ $# -gt 1 ]; do
        i=$((i + 1))
        add "$prev" "$out-$i" v1 "$1" "l$i-"
        [ "$prev" = "$base" ] || rm -rf "$prev"
        prev=$out-$i; shift
    done
    for t in v1 v2; do add "$prev" "$out-$t" "$t" "$1" "last-$t-"; done
    [ "$prev" = "$base" ] || rm -rf "$prev"
}
# layout_bytes LAYOUT [last]: the bytes a full pull of LAYOUT's image fetches (manifest,
# config, layers), or with `last` an update that finds all but the last layer.
layout_bytes() {
    local m; m=$(jq -r '.manifests[0].digest' "$1/index.json"); m=$1/blobs/sha256/${m#sha256:}
    jq --argjson ms "$(stat -c %s "$m")" --arg last "${2:-}" \
        '$ms + .config.size + (if $last == "" then [.layers[].size] | add else .layers[-1].size end)' "$m"
}
# layout_digest LAYOUT: the digest of its (first) manifest.
layout_digest() { jq -r '.manifests[0].digest' "$1/index.json"; }
