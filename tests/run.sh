#!/bin/bash
# tests/run.sh - the whole test suite, rig included, on a fresh Debian 12 machine:
# installs what is missing, checks the SELinux module, brings up the registry rig,
# runs every test without systemd, then what a worker can change under a real systemd
# once per skopeo worker (Debian 12's 1.9.3, 13's 1.18 and unstable's 1.22), tears down,
# and runs the pulls in an enforcing SELinux guest (tests/vm.sh). The table at the end
# gives each stage's wall and CPU time.
#
# Knobs: RIG_DIR (default /tmp/hostpull-rig).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/stage.sh
. tests/stage.sh
trap stage_table EXIT

stage "tests/rig.sh install" bash tests/rig.sh install
# The enforcing guest comes last, but its base root (debootstrap: minutes on a fresh
# machine, cached after) is built from now on, beside the builds and the host's tests;
# tests/vm.sh waits for it. Its host tools first: apt-get, which runs one at a time.
vm_dir=${VM_DIR:-/var/tmp/hostpull-vm}
stage "tests/vm.sh tools" bash tests/vm.sh tools
mkdir -p "$vm_dir"
bash tests/vm.sh base >>"$vm_dir/base.log" 2>&1 &
# With --dest ostree: (libostree-dev and friends come with the rig's packages).
FEATURES=(--features ostree)
stage "cargo build --all-targets" cargo build --locked --all-targets "${FEATURES[@]}"

# The enforcing guest and its mutants (tests/vm.sh all), from here on beside what follows:
# the host's tests wait on the network, systemd and sleeps about half the time, the
# guest on the CPU. Its log and verdicts come at the end.
stage "tests/vm.sh all: the enforcing SELinux guest and its mutants (beside the rest)" \
    bash tests/vm.sh all >"$vm_dir/all.log" 2>&1 &
vm_pid=$!

# The SELinux module: built and linked against the installed policy, file
# contexts and an access table checked, and mutants that must fail (one per
# rule the table depends on, the ostree import's included).
stage "selinux/check.sh" bash selinux/check.sh

# Installing on a host: make install into a DESTDIR, the spec's %files against
# it, rpmbuild -bs, rpmlint. (The installed units run in the systemd pass.)
stage "contrib/packaging/check.sh" bash contrib/packaging/check.sh

export RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
trap 'bash tests/rig.sh down; stage_table' EXIT
stage "tests/rig.sh up" bash tests/rig.sh up

# What each test depends on decides where it runs (tests/tests.rs). The host pass runs
# everything but `systemd::` (which needs systemd), with --sandbox none and Debian 12's
# skopeo: the unit tests and `once::` only here. Each systemd pass runs, once per worker
# the rig installed (tests/rig.sh workers, as HOSTPULL_SKOPEO), what a worker or its
# sandbox can change: `worker::` and `systemd::`, but not a `host_pass_` test, which
# needs the orchestrator's own mount namespace to reach the worker.
if cargo nextest --version >/dev/null 2>&1; then
    host_tests() { cargo nextest run --locked --no-fail-fast "${FEATURES[@]}" -E 'not test(/^systemd::/)'; }
    # Four at a time: a pull through a unit waits on systemd and the registry more than
    # on the CPU (a pass with 1.22, alone on the machine: 143 s with two, 107 s with four).
    worker_tests() {
        cargo nextest run --locked --no-fail-fast "${FEATURES[@]}" --test-threads 4 \
            -E 'binary_id(hostpull::integration) & test(/^(worker|systemd)::/) & not test(/host_pass_/)'
    }
else
    host_tests() { cargo test --locked --no-fail-fast "${FEATURES[@]}" -- --skip systemd::; }
    worker_tests() { cargo test --locked --no-fail-fast "${FEATURES[@]}" --test integration -- worker:: systemd:: --skip host_pass_; }
fi

failed=()
HOSTPULL_TEST_SANDBOX=none stage "the host pass: unit and integration tests, --sandbox none" host_tests ||
    failed+=("the host pass")
# The build without ostree support refuses an ostree destination (exit 2).
HOSTPULL_TEST_SANDBOX=none stage "the ostree tests of a --no-default-features build" \
    cargo test --locked --no-default-features -- ostree || failed+=("the --no-default-features build")

# What a worker can change again, with every worker in a transient unit, plus the
# systemd tests, inside a real systemd (booted by tests/sysd.sh unless it is PID 1),
# once per worker.
mapfile -t workers < <(bash tests/rig.sh workers)
systemd_pass() {   # systemd_pass PATH VERSION PROTOCOL
    if [ "$(cat /proc/1/comm)" = systemd ]; then
        HOSTPULL_TEST_SANDBOX=systemd HOSTPULL_SKOPEO=$1 worker_tests
    else
        bash tests/sysd.sh exec env HOSTPULL_TEST_SANDBOX=systemd HOSTPULL_SKOPEO="$1" \
            bash -c "$(declare -p FEATURES); $(declare -f worker_tests); worker_tests"
    fi
}
if [ "$(cat /proc/1/comm)" != systemd ]; then
    trap 'bash tests/sysd.sh down; bash tests/rig.sh down; stage_table' EXIT
    stage "tests/sysd.sh up" bash tests/sysd.sh up
fi
for w in "${workers[@]}"; do
    # shellcheck disable=SC2086
    set -- $w
    stage "a systemd pass: --sandbox systemd, worker skopeo $2 (protocol $3)" systemd_pass "$@" ||
        failed+=("the systemd pass with $1")
done
# Last, the SELinux module in an enforcing kernel: tests/vm.sh boots a Debian 12 guest
# (refpolicy, enforcing=1) under qemu TCG with hostpull installed by make install and
# semodule -i, and runs the guest tests there (tests/vm-guest.sh TESTS); a failed guest
# test, a denial on a hostpull type or a guest that does not come up fails the suite
# (docs/selinux.md). Then, in the same boot, the mutants (tests/vm.sh MUTANTS: one rule
# of hostpull.te deleted each, the policy loaded with load_policy): each mutant's guest
# tests must fail with the matching denial. It started after the build (above).
echo "== tests/vm.sh all (started after the build): its log" >&2
wait "$vm_pid" && vm_rc=0 || vm_rc=$?
cat "$vm_dir/all.log" >&2
# What failed in the guest is repeated at the end, where CI's excerpt of this log shows it.
if [ "$vm_rc" != 0 ]; then
    failed+=("the enforcing SELinux guest (tests/vm.sh all):")
    while read -r l; do failed+=("  $l"); done 2>/dev/null <"$vm_dir/failures"
fi
if [ ${#failed[@]} -gt 0 ]; then
    printf 'run.sh: failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
