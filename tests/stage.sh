# tests/stage.sh - sourced by .ci/run and tests/run.sh. `stage NAME CMD...` runs CMD under
# a "== NAME" header and appends its wall time and its processes' CPU time (user +
# system, of every child it waited for: not what another parent reaps, such as the
# units of the systemd a pass runs in) to $STAGE_TIMES, which `stage_table` prints.
# A stage run in the background (`stage … &`) has its own row, and its CPU is counted
# again in the row of the stage during which it ended; its wall time is not part of
# the total, which is the foreground's.
# CMD's exit status is stage's. .ci/run exports STAGE_TIMES, so tests/run.sh adds to
# the same table; run alone, it keeps its own.
if [ -z "${STAGE_TIMES:-}" ]; then
    STAGE_TIMES=$(mktemp /tmp/hostpull-stages.XXXXXX)
    export STAGE_TIMES
fi
stage() {
    local name=$1 rc=0 t wall user sys beside=
    # In a subshell of the script (`stage … &`): beside the foreground.
    [ "$BASHPID" = "$$" ] || beside=' [beside]'
    shift
    echo "== $name" >&2
    t=$(mktemp)
    # The time keyword reports on the group's stderr (t); CMD's stderr goes on to 3.
    { TIMEFORMAT='%0R %0U %0S'; time "$@" 2>&3 3>&-; } 3>&2 2>"$t" || rc=$?
    read -r wall user sys <"$t" || true
    rm -f "$t"
    printf '%6s s %6s s  %s%s\n' "$wall" "$((user + sys))" "$name" \
        "$([ "$rc" = 0 ] || echo " (exit $rc)")$beside" >>"$STAGE_TIMES"
    return "$rc"
}
# stage_table: every stage so far, and the sum.
stage_table() {
    echo "== stages (wall, CPU of what they ran; 2 cores)" >&2
    awk '{ print; if ($0 !~ /\[beside\]$/) w += $1; c += $3 }
         END { printf "%6d s %6d s  total (wall: the foreground stages)\n", w, c }' "$STAGE_TIMES" >&2
}
