#!/bin/bash
# tests/probe-import.sh - stands in for skopeo (through the HOSTPULL_SKOPEO test hook).
# Where the rig's registry is reachable (the fetch worker), it is skopeo. Where it is
# not (a skopeo without network, as the ostree import's used to be), it reports what
# it was started with and fails, so that hostpull shows the report. The registry's
# port is in the file `port` beside this script's copy.
here=$(dirname "$(readlink -f "$0")")
if (exec 3<>"/dev/tcp/127.0.0.1/$(cat "$here/port")") 2>/dev/null; then
    exec skopeo "$@"
fi
echo "probe-import: uid=$(id -u) args=$*" >&2
exit 3
