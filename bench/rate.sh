#!/bin/bash
# bench/rate.sh - `--max-rate`: the rate the registry sends at, measured by a byte-counting
# forwarder in front of the rig's registry (bench/countfwd.py), against the cap.
#
#   bench/rate.sh [-n RUNS] [--sandbox none|systemd] [--image big|paced] [CAP...]
#
# CAPs default to 16M 32M 64M; an uncapped pull through the same forwarder comes first.
# Each pull is of the rig's image into a fresh layout: big (the default, $RIG_IMG_BIG,
# 8 x 64 MiB) or paced ($RIG_IMG_PACED, 3 MiB + 1 MiB + 256 KiB, for caps of about 1 MiB/s
# and below). The forwarder counts what the client acknowledged (bench/countfwd.py). Per
# run: the mean rate at the forwarder after the first second (until the last byte), the
# highest rate over any 1 s and 2 s window after the first second, the wall time against
# size / cap, and the peak RSS of hostpull (GNU time %M). Medians over RUNS (3) are
# printed; raw numbers in $BENCH_DIR/rate.tsv. Knobs as bench/pull.sh: RIG_DIR, HOSTPULL,
# BENCH_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"   # die, rig and the helpers below
usage() { echo "usage: $0 [-n RUNS] [--sandbox none|systemd] [--image big|paced] [CAP...]" >&2; exit 2; }

ARGS=("$@")
RUNS=3 MODE=none CAPS=() IMG=big
while [ $# -gt 0 ]; do
    case $1 in
        -n) RUNS=${2:?}; shift 2 ;;
        --sandbox) MODE=${2:?}; shift 2 ;;
        --sandbox=*) MODE=${1#*=}; shift ;;
        --image) IMG=${2:?}; shift 2 ;;
        -h|--help|-*) usage ;;
        *) CAPS+=("$1"); shift ;;
    esac
done
[ ${#CAPS[@]} -gt 0 ] || CAPS=(16M 32M 64M)
case $IMG in big|paced) ;; *) die "--image wants big or paced" ;; esac
bench_checks   # RUNS and MODE checked; TARGET and RIG_DIR set (bench/lib.sh)
REGISTRY=$(rig RIG_REGISTRY) AUTH=$(rig RIG_AUTHFILE) CERTS=$(rig RIG_CERT_DIR)
IMAGE=$(rig "RIG_IMG_${IMG^^}")
[ -n "$IMAGE" ] || die "no RIG_IMG_${IMG^^} in $RIG_DIR/env (rig brought up with RIG_BIG=0, or before it had $IMG?)"

HOSTPULL=${HOSTPULL:-$TARGET/release/hostpull}
if [ ! -x "$HOSTPULL" ]; then
    echo "bench: building $HOSTPULL" >&2
    (cd "$ROOT" && cargo build --release)
fi
[ -x /usr/bin/time ] || die "GNU time is needed for peak RSS: apt-get install -y time"
BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
mkdir -p "$BENCH_DIR"
if [ "$MODE" = systemd ]; then
    bench_systemd_for "$ROOT/bench/rate.sh" "${ARGS[@]}"   # returns only if PID 1 is systemd
fi

W=$BENCH_DIR/rate
rm -rf "$W"; mkdir -p "$W"
TSV=$BENCH_DIR/rate.tsv
printf 'cap\trun\tcap_mib_s\tmean_mib_s\tpeak1_mib_s\tpeak2_mib_s\twall_s\tideal_s\trss_mib\n' >"$TSV"
FWD=
trap '[ -z "$FWD" ] || kill "$FWD" 2>/dev/null || true' EXIT

# one CAP RUN: one pull through a fresh forwarder; appends a row to $TSV.
one() {
    local cap=$1 run=$2 port dest=$W/layout
    rm -rf "$dest"
    coproc FW { exec python3 "$ROOT/bench/countfwd.py" "$REGISTRY" "$W/samples"; }
    FWD=$FW_PID
    read -r port _ <&"${FW[0]}"
    sed "s/$REGISTRY/127.0.0.1:$port/g" "$AUTH" >"$W/auth.json"
    local opts=()
    [ "$cap" = none ] || opts=(--max-rate "$cap")
    local t0=$EPOCHREALTIME
    /usr/bin/time -f %M -o "$W/rss" "$HOSTPULL" pull "${IMAGE/$REGISTRY/127.0.0.1:$port}" \
        --dest "oci:$dest" --json --sandbox "$MODE" --authfile "$W/auth.json" --cert-dir "$CERTS" \
        "${opts[@]}" >"$W/out.json" 2>"$W/err" || die "pull failed: $(cat "$W/err")"
    local t1=$EPOCHREALTIME
    kill "$FWD"; wait "$FWD" 2>/dev/null || true; FWD=
    python3 - "$cap" "$run" "$W/samples" "$W/out.json" "$W/rss" "$t0" "$t1" >>"$TSV" <<'EOF'
import bisect, json, sys
cap, run, samples, out, rss, t0, t1 = sys.argv[1:]
mib = 1 << 20
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
rate = None if cap == "none" else int(cap[:-1]) * units[cap[-1]] if cap[-1] in units else int(cap)
s = [tuple(map(float, l.split())) for l in open(samples) if len(l.split()) == 2]
ts = [t for t, _ in s]
total = s[-1][1]
first = next(t for t, b in s if b > 0)
end = next(t for t, b in s if b >= total)
start = first + 1.0 if end - first > 2.0 else first   # a short pull: all of it
i0 = bisect.bisect_left(ts, start)
mean = (total - s[i0][1]) / (end - s[i0][0])
def peak(length):
    best = 0.0
    for i in range(i0, len(s)):
        if s[i][1] >= total:
            break
        j = bisect.bisect_left(ts, s[i][0] + length)
        if j >= len(s):
            break
        best = max(best, (s[j][1] - s[i][1]) / (s[j][0] - s[i][0]))
    return best
fetched = json.load(open(out))["bytes_fetched"]
ideal = fetched / rate if rate else 0
print("\t".join([cap, run, f"{rate / mib:.2f}" if rate else "-", f"{mean / mib:.2f}",
                 f"{peak(1.0) / mib:.2f}", f"{peak(2.0) / mib:.2f}",
                 f"{float(t1) - float(t0):.2f}", f"{ideal:.2f}",
                 f"{int(open(rss).read().split()[-1]) / 1024:.1f}"]))
EOF
}

read -r load _ </proc/loadavg
echo "bench: $IMAGE, --sandbox $MODE, $RUNS runs per cap, load $load" >&2
for cap in none "${CAPS[@]}"; do
    for run in $(seq "$RUNS"); do
        one "$cap" "$run"
        tail -n 1 "$TSV" >&2
    done
done

# Medians per cap.
python3 - "$TSV" "$MODE" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"--sandbox {sys.argv[2]}, medians of {max(int(r['run']) for r in rows)}")
print("| cap | at the registry: mean after 1 s | peak 1 s window | peak 2 s window | wall | size / cap | hostpull peak RSS |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for cap in dict.fromkeys(r["cap"] for r in rows):
    rs = [r for r in rows if r["cap"] == cap]
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    c = rs[0]["cap_mib_s"]
    ratio = lambda k: f" ({med(k) / float(c):.2f}x)" if c != "-" else ""
    ideal = f"{med('ideal_s'):.2f} s" if c != "-" else "-"
    print(f"| {'none' if c == '-' else c + ' MiB/s'} | {med('mean_mib_s'):.2f} MiB/s{ratio('mean_mib_s')} "
          f"| {med('peak1_mib_s'):.2f} MiB/s{ratio('peak1_mib_s')} | {med('peak2_mib_s'):.2f} MiB/s{ratio('peak2_mib_s')} "
          f"| {med('wall_s'):.2f} s | {ideal} | {med('rss_mib'):.1f} MiB |")
EOF
