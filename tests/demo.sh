#!/bin/bash
# tests/demo.sh - the main job, end to end, on a fresh Debian 12 machine: install what
# is missing, build hostpull, start a local TLS + htpasswd registry with a sample image,
# and pull it through the sandboxed worker (a transient systemd unit with a dynamic
# user). Where PID 1 is not systemd, a real systemd is booted for it (tests/sysd.sh).
#
# Knobs: RIG_DIR (default /tmp/hostpull-demo), SYSD_DIR (the state of the systemd it boots,
# default $RIG_DIR-sysd: tests/sysd.sh names its cgroups after the directory's name, so
# no two rigs share them), SANDBOX (systemd or none; default systemd). The defaults are
# apart from tests/run.sh's (/tmp/hostpull-rig, /tmp/hostpull-sysd): .ci/run runs both.
set -euo pipefail
cd "$(dirname "$0")/.."

export RIG_DIR=${RIG_DIR:-/tmp/hostpull-demo} RIG_BIG=0
SYSD_DIR=${SYSD_DIR:-${RIG_DIR%/}-sysd}
SANDBOX=${SANDBOX:-systemd}

bash tests/rig.sh install
# The build tests/run.sh makes (the dev profile, every target), so that the suite starts
# from it; `make` builds the release that is installed.
cargo build --locked --all-targets
# shellcheck source=tests/cargo-target.sh
. tests/cargo-target.sh
hostpull=$(cargo_target_dir)/debug/hostpull   # CARGO_TARGET_DIR too
cleanup() { bash tests/rig.sh down; }
trap cleanup EXIT
bash tests/rig.sh up
# shellcheck disable=SC1091
. "$RIG_DIR/env"

dest=$RIG_DIR/demo-layout
rm -rf "$dest"
pull=("$hostpull" pull "docker://$RIG_IMG_SMALL" --dest "oci:$dest"
      --authfile "$RIG_AUTHFILE" --cert-dir "$RIG_CERT_DIR" --sandbox "$SANDBOX" --json)
echo "+ ${pull[*]}" >&2
if [ "$SANDBOX" = systemd ] && [ "$(cat /proc/1/comm)" != systemd ]; then
    export SYSD_DIR SYSD_SHARE="$PWD $RIG_DIR"
    trap 'bash tests/sysd.sh down; cleanup' EXIT
    bash tests/sysd.sh up
    bash tests/sysd.sh exec "${pull[@]}"
else
    "${pull[@]}"
fi
echo "+ skopeo inspect oci:$dest:v1" >&2
skopeo inspect "oci:$dest:v1"
