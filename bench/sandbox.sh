#!/bin/bash
# bench/sandbox.sh - P8 and issue 28's item 3: what the sandbox costs, and which unit property
# it is. The P1 pull (RIG_IMG_BIG, 8 x 64 MiB, into a fresh oci: layout) with `--sandbox none`,
# with `--sandbox systemd` as shipped, and with `--sandbox systemd` minus one group of the
# worker unit's properties at a time, interleaved, one warm-up then RUNS; medians of wall and
# CPU seconds.
#
#   bench/sandbox.sh [-n RUNS]
#
# A group is left out by a `systemd-run` wrapper that drops the matching `--property`
# arguments, bind-mounted over /usr/bin/systemd-run in a mount namespace of the pull's own
# (hostpull itself is the release build, unchanged). `-nothing` is the wrapper dropping
# nothing, the control: compare each group with it, not with `systemd` (the wrapper and
# the namespace cost a few ms of their own). Groups (BENCH_GROUPS= to choose, a regex):
#   firewall     IPAddressDeny= IPAddressAllow= (systemd's cgroup BPF programs)
#   seccomp      SystemCallFilter= SystemCallArchitectures= SystemCallErrorNumber=
#   mdwe         MemoryDenyWriteExecute= (another seccomp filter)
#   memory, tasks, io   MemoryMax=, TasksMax=, IOWeight= (each, and the accounting it turns on)
#   dynamicuser  DynamicUser=
#   root         RootDirectory= MountAPIVFS= TemporaryFileSystem= (the worker's own root)
#   namespaces   Private{Tmp,Devices,Users,IPC}= Protect*= ProcSubset= (mount and other namespaces)
# CPU: user + system of hostpull and the children it reaped, plus the systemd's cgroup
# (cpuacct.usage: the worker units). The registry is not counted. Runs inside systemd
# (tests/sysd.sh if PID 1 is not). Raw rows: $BENCH_DIR/sandbox.tsv.
# Knobs: RIG_DIR (/tmp/hostpull-rig), HOSTPULL (target/release/hostpull), SKOPEO
# (/usr/bin/skopeo), BENCH_DIR (/tmp/hostpull-bench).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
# shellcheck source=tests/cargo-target.sh
. "$ROOT/tests/cargo-target.sh"
TARGET=$(cargo_target_dir "$ROOT")
RUNS=5
[ "${1:-}" = -n ] && RUNS=${2:?}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "-n wants a positive number"
export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig} BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
[ -f "$RIG_DIR/env" ] || die "no rig at $RIG_DIR: bash tests/rig.sh up"
HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
[ -x "$HOSTPULL" ] || (cd "$ROOT" && cargo build --release --locked >&2)
command -v /usr/bin/time >/dev/null || die "GNU time missing: apt-get install -y time"
mkdir -p "$BENCH_DIR"
bench_systemd_for bash "$0" "$@"   # returns only if PID 1 is systemd
# shellcheck disable=SC1091
. "$RIG_DIR/env"
[ -n "${RIG_IMG_BIG:-}" ] || die "no RIG_IMG_BIG in $RIG_DIR/env"
SKOPEO=${SKOPEO:-/usr/bin/skopeo}
REAL=$(command -v systemd-run)

declare -A DROP=(
    [nothing]='^hostpull-bench-matches-nothing='
    [firewall]='^IPAddress(Deny|Allow)='
    [seccomp]='^SystemCall(Filter|Architectures|ErrorNumber)='
    [mdwe]='^MemoryDenyWriteExecute='
    [memory]='^MemoryMax='
    [tasks]='^TasksMax='
    [io]='^IOWeight='
    [dynamicuser]='^DynamicUser='
    [root]='^(RootDirectory|MountAPIVFS|TemporaryFileSystem)='
    [namespaces]='^(Private(Tmp|Devices|Users|IPC)|Protect[A-Za-z]*|ProcSubset)='
)
# Properties to try adding (+NAME), one per line.
declare -A ADD=(
    [batch]='CPUSchedulingPolicy=batch'
)
VARIANTS=(none systemd -nothing)
for g in firewall seccomp mdwe memory tasks io dynamicuser root namespaces; do
    [[ $g =~ ${BENCH_GROUPS:-.} ]] && VARIANTS+=("-$g")
done
for g in "${!ADD[@]}"; do [[ $g =~ ${BENCH_GROUPS:-.} ]] && VARIANTS+=("+$g"); done

# The wrapper: the real systemd-run, copied aside (the bind mount hides it), without the
# properties that match the regex in the file DROP beside it.
W=$BENCH_DIR/sandbox-wrapper
rm -rf "$W"; mkdir -p "$W"
cp "$REAL" "$W/systemd-run.real"
cat >"$W/systemd-run" <<EOF
#!/bin/bash
drop=\$(cat "$W/DROP")
args=()
while [ \$# -gt 0 ]; do
    if [ "\$1" = --property ] && [[ \$2 =~ \$drop ]]; then shift 2; continue; fi
    if [ "\$1" = -- ]; then while read -r p; do args+=(--property "\$p"); done <"$W/ADD"; fi
    args+=("\$1"); shift
done
exec "$W/systemd-run.real" "\${args[@]}"
EOF
chmod 755 "$W/systemd-run"

CGROUP_CPU=
[ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ] && CGROUP_CPU=/sys/fs/cgroup/cpuacct/cpuacct.usage
RESULTS=$BENCH_DIR/sandbox.tsv
printf 'run\tvariant\twall_s\tcpu_s\tload\n' >"$RESULTS"
DEST=$BENCH_DIR/sandbox-dest
# measure RUN VARIANT [IMAGE]: one pull into a fresh layout, one row. Variants `small-none`
# and `small-systemd` pull RIG_IMG_SMALL: the fixed part of the cost.
measure() {
    local mode=systemd cmd image=$RIG_IMG_BIG
    case $2 in none|small-none) mode=none ;; esac
    [[ $2 == small-* ]] && image=$RIG_IMG_SMALL
    rm -rf "$DEST"
    cmd=("$HOSTPULL" pull "docker://$image" --dest "oci:$DEST" --authfile "$RIG_AUTHFILE"
         --ca "$RIG_REGISTRY=$RIG_CA" --skopeo "$SKOPEO" --sandbox "$mode")
    if [[ $2 == [-+]* ]]; then
        if [[ $2 == -* ]]; then echo "${DROP[${2#-}]}" >"$W/DROP"; else echo '^$' >"$W/DROP"; fi
        if [[ $2 == +* ]]; then echo "${ADD[${2#+}]}" >"$W/ADD"; else : >"$W/ADD"; fi
        cmd=(unshare -m --propagation private sh -c
             "mount --bind '$W/systemd-run' '$REAL' && exec \"\$@\"" sh "${cmd[@]}")
    fi
    timed_row sandbox "$1"$'\t'"$2" "${cmd[@]}"
}
version=$($SKOPEO --version | cut -d' ' -f3)
echo "bench: $RIG_IMG_BIG, ${VARIANTS[*]}, $RUNS runs + 1 warm-up, skopeo $version" >&2
for i in $(seq 0 "$RUNS"); do   # run 0 is the warm-up
    for v in "${VARIANTS[@]}" small-none small-systemd; do measure "$i" "$v"; done
done
rm -rf "$DEST"

# stat VARIANT COLUMN: "median (min-max)" over runs 1..RUNS; med: the median alone.
stat() {
    awk -F'\t' -v v="$1" -v c="$2" 'NR > 1 && $1 > 0 && $2 == v { print $c }' "$RESULTS" | spread
}
med() { stat "$@" | cut -d' ' -f1; }
size() {
    skopeo inspect --raw --authfile "$RIG_AUTHFILE" --cert-dir "$RIG_CERT_DIR" "docker://$1" |
        jq '[.layers[].size, .config.size] | add'
}
gib=$(awk -v m="$(size "$RIG_IMG_BIG")" 'BEGIN { printf "%.4f", m / 2^30 }')
small=$(awk -v m="$(size "$RIG_IMG_SMALL")" 'BEGIN { printf "%.4f", m / 2^30 }')
echo
echo "sandbox cost, $(date -u '+%F %H:%M UTC'), skopeo $version, $RUNS runs, $gib GiB," \
    "load $(awk -F'\t' 'NR > 1 { print $5 }' "$RESULTS" | sort -g | sed -n '1p;$p' | paste -sd-)"
printf '| variant | wall s | CPU s | wall - none | CPU-s/GiB - none | wall - control | CPU - control |\n'
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
nw=$(med none 3) nc=$(med none 4) sw=$(med -nothing 3) sc=$(med -nothing 4)
for v in "${VARIANTS[@]}"; do
    w=$(med "$v" 3) c=$(med "$v" 4)
    awk -v v="$v" -v sw_="$(stat "$v" 3)" -v sc_="$(stat "$v" 4)" -v w="$w" -v c="$c" -v nw="$nw" \
        -v nc="$nc" -v sw="$sw" -v sc="$sc" -v g="$gib" \
        'BEGIN { printf "| %s | %s | %s | %+.2f | %+.2f | %+.2f | %+.2f |\n", v, sw_, sc_, w - nw, (c - nc) / g, w - sw, c - sc }'
done
# The sandbox's cost split: fixed (the small image's difference) and per GiB (the rest).
awk -v bw="$(med systemd 3)" -v bn="$nw" -v bc="$(med systemd 4)" -v bnc="$nc" \
    -v sw="$(med small-systemd 3)" -v sn="$(med small-none 3)" -v sc="$(med small-systemd 4)" \
    -v snc="$(med small-none 4)" -v g="$gib" -v s="$small" 'BEGIN {
    fw = sw - sn; fc = sc - snc
    printf "small (%.4f GiB): none %.2f s, systemd %.2f s: fixed cost %+.2f s wall, %+.2f CPU-s\n", s, sn, sw, fw, fc
    printf "per GiB beyond it: %+.2f s wall, %+.2f CPU-s\n", ((bw - bn) - fw) / (g - s), ((bc - bnc) - fc) / (g - s) }'
echo "raw: $RESULTS"
