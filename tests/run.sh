#!/bin/bash
# tests/run.sh - the whole test suite, rig included, on a fresh Debian 12 machine:
# installs what is missing, brings up the registry rig, runs every test, tears down.
#
# Knobs: RIG_DIR (default /tmp/hostpull-rig).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/rig.sh install
cargo build --locked --all-targets

export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
trap 'bash tests/rig.sh down' EXIT
bash tests/rig.sh up

if cargo nextest --version >/dev/null 2>&1; then
    run_tests() { cargo nextest run --locked --no-fail-fast "$@"; }
else
    run_tests() { cargo test --locked --no-fail-fast "$@"; }
fi

echo "== unit and integration tests, --sandbox none" >&2
HOSTPULL_TEST_SANDBOX=none run_tests
