#!/bin/bash
# bench/workers.sh [-n RUNS]: bench/suite.sh's P1 and P3 once per worker the rig installs
# (tests/rig.sh workers: Debian 12's skopeo 1.9.3, 13's 1.18, unstable's 1.22), each against
# `skopeo copy` of the same version in the same block. Summaries: $BENCH_DIR/suite-VERSION.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export BENCH_DIR=${BENCH_DIR:-/tmp/hostpull-bench}
bash "$ROOT/tests/rig.sh" install
while read -r worker version protocol; do
    echo "bench: worker skopeo $version (protocol $protocol)" >&2
    SKOPEO=$worker bash "$ROOT/bench/suite.sh" --only P1,P3 "$@" </dev/null   # it must not eat the list
    cp "$BENCH_DIR/suite.txt" "$BENCH_DIR/suite-$version.txt"
    cp "$BENCH_DIR/suite.tsv" "$BENCH_DIR/suite-$version.tsv"
done < <(bash "$ROOT/tests/rig.sh" workers)
