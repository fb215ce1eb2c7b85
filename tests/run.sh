#!/bin/bash
# tests/run.sh - the whole test suite, rig included, on a fresh Debian 12 machine:
# installs what is missing, checks the SELinux module, brings up the registry rig,
# runs every test (without systemd, then under a real systemd), tears down.
#
# Knobs: RIG_DIR (default /tmp/hostpull-rig).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/rig.sh install
# With --dest ostree: (libostree-dev and friends come with the rig's packages).
FEATURES=(--features ostree)
cargo build --locked --all-targets "${FEATURES[@]}"

# The SELinux module: built and linked against the installed policy, file
# contexts and an access table checked, and a mutant that must fail.
echo "== selinux/check.sh" >&2
bash selinux/check.sh

export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
trap 'bash tests/rig.sh down' EXIT
bash tests/rig.sh up

if cargo nextest --version >/dev/null 2>&1; then
    host_tests() { cargo nextest run --locked --no-fail-fast "${FEATURES[@]}" -E 'not test(/^systemd::/)'; }
    all_tests() { cargo nextest run --locked --no-fail-fast "${FEATURES[@]}"; }
else
    host_tests() { cargo test --locked --no-fail-fast "${FEATURES[@]}" -- --skip systemd::; }
    all_tests() { cargo test --locked --no-fail-fast "${FEATURES[@]}"; }
fi

echo "== unit and integration tests, --sandbox none, on the host" >&2
HOSTPULL_TEST_SANDBOX=none host_tests
# The build without ostree support refuses an ostree destination (exit 2).
echo "== the ostree tests of a --no-default-features build" >&2
HOSTPULL_TEST_SANDBOX=none cargo test --locked --no-default-features -- ostree

# The same suite again with every worker in a transient unit, plus the systemd
# tests, inside a real systemd (booted by tests/sysd.sh unless it is PID 1).
echo "== the suite again, --sandbox systemd, under systemd" >&2
if [ "$(cat /proc/1/comm)" = systemd ]; then
    HOSTPULL_TEST_SANDBOX=systemd all_tests
else
    trap 'bash tests/sysd.sh down; bash tests/rig.sh down' EXIT
    bash tests/sysd.sh up
    bash tests/sysd.sh exec env HOSTPULL_TEST_SANDBOX=systemd bash -c "$(declare -p FEATURES); $(declare -f all_tests); all_tests"
fi
