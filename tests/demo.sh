#!/bin/bash
# tests/demo.sh - the main job, end to end, on a fresh Debian 12 machine: install what
# is missing, build hostpull, start a local TLS + htpasswd registry with a sample image,
# pull it through the worker, and print the result.
#
# Knobs: RIG_DIR (default /tmp/hostpull-demo), SANDBOX (default none).
set -euo pipefail
cd "$(dirname "$0")/.."

export RIG_DIR=${RIG_DIR:-/tmp/hostpull-demo} RIG_BIG=0
SANDBOX=${SANDBOX:-none}

bash tests/rig.sh install
cargo build --locked --release
trap 'bash tests/rig.sh down' EXIT
bash tests/rig.sh up
# shellcheck disable=SC1091
. "$RIG_DIR/env"

dest=$RIG_DIR/demo-layout
rm -rf "$dest"
set -x
target/release/hostpull pull "docker://$RIG_IMG_SMALL" --dest "oci:$dest" \
    --authfile "$RIG_AUTHFILE" --cert-dir "$RIG_CERT_DIR" --sandbox "$SANDBOX" --json
skopeo inspect "oci:$dest:v1"
