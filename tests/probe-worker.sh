#!/bin/sh
# tests/probe-worker.sh - stands in for skopeo (through the HOSTPULL_SKOPEO test hook)
# to report what the worker can reach, then fails so that hostpull shows the report.
# The secret is a root-only file the test puts beside this script's copy.
secret="$(dirname "$(readlink -f "$0")")/secret"
# Opens the file and nothing else: /dev/null, which the worker agent runs this
# with later than a unit's start, is EPERM on cgroup v1 while a daemon-reload
# rewrites the unit's device list.
can_read() { if (: <"$1") 2>&-; then echo readable; else echo denied; fi; }
echo "probe: uid=$(id -u) secret=$(can_read "$secret")" \
    "creds=$(can_read "${CREDENTIALS_DIRECTORY:-/nonexistent}/auth.json")" \
    "capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)" \
    "nnp=$(awk '/^NoNewPrivs/ {print $2}' /proc/self/status)" \
    "home=$HOME" "top=$(ls -A / | tr '\n' ,)" "var=$(ls -A /var | tr '\n' ,)" >&2
exit 3
