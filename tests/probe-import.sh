#!/bin/bash
# tests/probe-import.sh - stands in for skopeo (through the HOSTPULL_SKOPEO test hook).
# Where the rig's registry is reachable (the fetch worker), it is skopeo. Where it is
# not (the skopeo of the ostree import), it reports what it can reach and fails, so
# that hostpull shows the report. The registry's port is in the file `port` beside
# this script's copy.
here=$(dirname "$(readlink -f "$0")")
if (exec 3<>"/dev/tcp/127.0.0.1/$(cat "$here/port")") 2>/dev/null; then
    exec skopeo "$@"
fi
layout=none
if [ -r /tmp/layout/index.json ]; then
    layout=readable
    if touch /tmp/layout/probe 2>/dev/null; then layout=writable; fi
fi
# policy: the scheduling policy (field 41 of stat, 39th after the command's name).
echo "probe-import: uid=$(id -u) layout=$layout" \
    "capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)" \
    "policy=$(sed 's/.*) //' "/proc/$$/stat" | cut -d' ' -f39)" \
    "args=$*" >&2
exit 3
