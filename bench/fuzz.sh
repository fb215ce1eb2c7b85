#!/usr/bin/env bash
# bench/fuzz.sh - coverage-guided fuzzing of every parser of untrusted input.
#
#   bash bench/fuzz.sh [MINUTES] [TARGET...]     # default: 2 minutes, every target
#
# Builds fuzz/ (a crate of its own, never part of the main build) as a libFuzzer
# binary on the stable toolchain: rustc's SanitizerCoverage pass
# (-Cpasses=sancov-module, as cargo-fuzz passes it) with libfuzzer-sys's
# libFuzzer, optimized, with debug assertions and overflow checks. Then runs
# each target (fuzz/src/contract.rs: TARGETS) for MINUTES on one core, starting
# from the committed corpus fuzz/corpus/TARGET, and prints one line per target:
# executions, executions per second, coverage (libFuzzer's `cov`: edges hit,
# and `ft`: features), the size of the corpus it grew, and crashes.
#
# A crash (a panic: the contract broken) is saved in fuzz/artifacts/TARGET/;
# once fixed, copy it into fuzz/corpus/TARGET/ as crash-NAME, and the test
# suite (tests/once/robust.rs, fuzz_corpus_replays_clean) replays it from then on.
# The grown corpus stays in fuzz/target/corpus/TARGET (not committed).
# FUZZ_JOBS=N runs N targets at once (default 1: the box is shared).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=${1:-2}
shift || true
[[ $MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: MINUTES must be a whole number >= 1" >&2; exit 2; }
FUZZ=$ROOT/fuzz
HOST=$(rustc -vV | sed -n 's/^host: //p')
# shellcheck source=tests/cargo-target.sh
. "$ROOT/tests/cargo-target.sh"
BIN=$(cargo_target_dir "$FUZZ")/$HOST/release/fuzz   # CARGO_TARGET_DIR too

# --target: RUSTFLAGS then reach only the fuzzed code, not build scripts or proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
echo "fuzz: building $BIN" >&2
(cd "$FUZZ" && cargo build --release --target "$HOST" --bin fuzz) >&2

if [ $# -gt 0 ]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(sed -n 's/^    ("\([a-z_0-9]*\)", [a-z_0-9]*),$/\1/p' "$FUZZ/src/contract.rs")
fi
[ ${#TARGETS[@]} -gt 0 ] || { echo "fuzz: no targets found" >&2; exit 1; }

run_one() {   # run_one TARGET: fuzz it for MINUTES, print its line
    local t=$1 work=$FUZZ/target/corpus/$1 art=$FUZZ/artifacts/$1/ log=$FUZZ/target/log/$1.log
    mkdir -p "$work" "$art" "$(dirname "$log")"
    local rc=0
    HOSTPULL_FUZZ_TARGET=$t "$BIN" "$work" "$FUZZ/corpus/$t" \
        -max_total_time=$((MINUTES * 60)) -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$art" >"$log" 2>&1 || rc=$?
    local execs cov ft corp crashes
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(find "$work" -type f | wc -l)
    crashes=$(find "$art" -type f | wc -l)
    printf '%-18s execs %10s  %7s/s  cov %5s  ft %6s  corpus %5s  crashes %s%s\n' \
        "$t" "${execs:-?}" "$(( ${execs:-0} / (MINUTES * 60) ))" "${cov:-?}" "${ft:-?}" \
        "$corp" "$crashes" "$([ $rc = 0 ] || echo "  (exit $rc: see $log)")"
}

echo "fuzz: ${#TARGETS[@]} targets, $MINUTES min each, on $(nproc) cores ($(uptime | sed 's/.*load/load/'))"
export -f run_one
export FUZZ BIN MINUTES
printf '%s\n' "${TARGETS[@]}" | xargs -P "${FUZZ_JOBS:-1}" -I{} bash -c 'run_one {}'
