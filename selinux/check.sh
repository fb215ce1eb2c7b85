#!/bin/bash
# Static check of the hostpull SELinux module on Debian 12. Needs no
# SELinux-enabled kernel and does not touch the host's policy store (it
# only reads it).
#
#   bash selinux/check.sh
#
#  1. installs the SELinux tools if any is missing (apt, as root);
#  2. builds hostpull.pp against the refpolicy headers;
#  3. links it with every enabled module of the installed policy store
#     using secilc, which checks all neverallow rules (semodule on Debian
#     does not: semanage.conf has expand-check=0);
#  4. checks file contexts with matchpathcon against the linked
#     file_contexts;
#  5. checks access decisions of the linked kernel policy
#     (check-access.py: audit2why, so TE rules, booleans, MCS
#     constraints and RBAC);
#  6. mutation check: with one required rule deleted from a copy of
#     hostpull.te, step 5 must fail, on the rows that rule is for (the fd
#     passing, the worker's network, the import's domain and its
#     repository rules).
#
# Last line: "selinux: N passed, N failed". Exit status 1 on any failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
packages=(checkpolicy policycoreutils semodule-utils selinux-policy-dev selinux-policy-default
          secilc setools python3-setools python3-selinux)
devel_makefile=/usr/share/selinux/devel/Makefile
store=/var/lib/selinux/default/active/modules
python=/usr/bin/python3 # python3-selinux and python3-setools are Debian's

pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
summary() {
    echo "selinux: $pass passed, $fail failed"
    [[ $fail -eq 0 ]]
    exit
}
now() { date +%s%N; }
since() { # START-NS -> seconds, one decimal
    local ms=$((($(now) - $1) / 1000000))
    printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100))
}

# --- 1. tools ---------------------------------------------------------------
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $EUID -ne 0 ]]; then
        bad "missing packages (${missing[*]}) and not root to install them"
        summary
    fi
    t=$(now)
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/hostpull-selinux-apt.log 2>&1; then
        apt-get update -qq >>/tmp/hostpull-selinux-apt.log 2>&1
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/hostpull-selinux-apt.log 2>&1 ||
            { tail -20 /tmp/hostpull-selinux-apt.log; bad "apt-get install ${missing[*]}"; summary; }
    fi
    echo "apt install took $(since "$t") (not counted below)"
fi
start=$(now)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Build and convert one variant of the module: variant NAME [LINE-TO-DELETE...]
# Deleted lines must exist exactly once, or the mutation would prove nothing.
variant() {
    local name=$1 line
    shift
    mkdir -p "$work/$name"
    cp "$here"/hostpull.{te,if,fc} "$work/$name/"
    for line in "$@"; do
        if [[ $(grep -cxF "$line" "$work/$name/hostpull.te") != 1 ]]; then
            echo "  the line '$line' is not in hostpull.te exactly once"
            return 1
        fi
        grep -vxF "$line" "$work/$name/hostpull.te" >"$work/$name/te" && mv "$work/$name/te" "$work/$name/hostpull.te"
    done
    # The Makefile's rule, which `make install` uses too.
    make -s -C "$here/.." selinux-pp SELINUX_SRC="$work/$name" OUT="$work/$name/out" \
        SELINUX_DEVEL="$devel_makefile" >"$work/$name/build.log" 2>&1 ||
        { sed 's/^/  /' "$work/$name/build.log"; return 1; }
    /usr/libexec/selinux/hll/pp <"$work/$name/out/selinux/hostpull.pp" >"$work/$name/hostpull.cil"
}
link() {
    secilc --mls=true -c 33 -o "$work/$1/policy.33" -f "$work/$1/file_contexts" \
        "$work"/store/*.cil "$work"/standin-*.cil "$work/$1/hostpull.cil" >"$work/$1/link.log" 2>&1
}
# What Fedora has and refpolicy lacks: install_t and install_exec_t, and
# container-selinux's file types. Without them the optional blocks of the rebase
# and containers-storage rules would be left out of every link.
standin() {
    local d=$work/standin m
    mkdir -p "$d" || return 1
    for m in fedora_install fedora_container; do
        cp "$here/../tests/stand-ins/$m".{te,fc} "$d/" && : >"$d/$m.if" &&
            make -s -C "$d" -f "$devel_makefile" "$m.pp" >>"$d/build.log" 2>&1 &&
            /usr/libexec/selinux/hll/pp <"$d/$m.pp" >"$work/standin-$m.cil" || return 1
    done
}

# --- 2. build ---------------------------------------------------------------
# Mutants for step 6: each deletes one rule that the access table depends
# on, as "NAME|LINE OF hostpull.te|ROW OF check-access.py THAT MUST FAIL".
# Each costs a build, a link and a table check: about 18 s of CPU; step 6
# runs one per CPU at a time.
mutants=(
    'fds|hostpull_fds_via_systemd(hostpull_t)|allow @dbusd @orch fd '
    'net|corenet_tcp_connect_all_ports(hostpull_worker_t)|allow @worker http_port_t tcp_socket '
    'agent|domain_entry_file(hostpull_worker_t, hostpull_exec_t)|allow @worker hostpull_exec_t file '
    'enforce|selinux_get_enforce_mode(hostpull_t)|always:hostpull_import_ostree @orch security_t file '
    # --dest ostree: hostpull_t enters the import's domain (under hostpull_import_ostree)
    # and stages the layout; the import's proxy, the binary policy, the repository rules.
    $'import|\tdomtrans_pattern(hostpull_t, hostpull_ostree_exec_t, hostpull_ostree_t)|tunable:hostpull_import_ostree @orch @import process '
    $'staging|\ttype_transition hostpull_t hostpull_ostree_repo_t:dir hostpull_staging_t;|filetrans:hostpull_staging_t if hostpull_import_ostree @orch hostpull_ostree_repo_t dir '
    'proxy|can_exec(hostpull_ostree_t, hostpull_exec_t)|allow @import hostpull_exec_t file '
    'binpolicy|seutil_relabelto_bin_policy(hostpull_ostree_t)|allow @import policy_config_t file '
    'repo|manage_files_pattern(hostpull_ostree_t, hostpull_ostree_repo_t, hostpull_ostree_repo_t)|allow @import hostpull_ostree_repo_t file '
    'objects|allow hostpull_ostree_t { hostpull_object_types shadow_t }:file { getattr open read link rename unlink setattr relabelto };|allow @import bin_t file '
    'checkout|allow hostpull_ostree_t { hostpull_object_dirs }:dir { write add_name remove_name };|allow @import etc_t dir '
    'filetrans|type_transition hostpull_ostree_t { hostpull_object_dirs }:{ dir file lnk_file } hostpull_ostree_repo_t;|filetrans:hostpull_ostree_repo_t @import etc_t dir '
    'caps|allow hostpull_ostree_t self:capability { chown fowner fsetid setfcap dac_read_search };|allow @import @import capability '
    # --dest containers-storage: root's skopeo in hostpull_storage_t, which gives the
    # overlay directories container-selinux's type and may make / private.
    'storage|allow hostpull_t hostpull_storage_t:process { transition signal sigkill };|allow @orch @storage process '
    $'storage-overlay|\tfiletrans_pattern(hostpull_storage_t, container_var_lib_t, container_ro_file_t, dir, "overlay")|filetrans:container_ro_file_t @storage container_var_lib_t dir:overlay '
    'storage-mount|allow hostpull_storage_t root_t:dir mounton;|allow @storage root_t dir '
    # hostpull rebase from a unit: the consumer runs in install_t.
    $'rebase|\t\tdomtrans_pattern(hostpull_t, install_exec_t, install_t)|tunable:hostpull_rebase @orch @install process '
    $'rebase-nnp|\t\tallow hostpull_t install_t:process2 nnp_transition;|tunable:hostpull_rebase @orch @install process2 '
)
if variant main; then ok "build hostpull.pp (refpolicy headers)"; else bad "build hostpull.pp"; summary; fi
if standin; then ok "build the stand-ins for Fedora's install_t and container-selinux's types (tests/stand-ins)"; else
    sed 's/^/  /' "$work/standin/build.log"; bad "build the stand-in modules"; summary; fi

# --- 3. link with the installed store ----------------------------------------
# The enabled modules as libsemanage would link them: highest priority
# wins, disabled ones are left out.
if [[ ! -d $store ]]; then
    bad "no policy store at $store (is selinux-policy-default installed?)"
    summary
fi
mkdir -p "$work/store"
declare -A seen=()
for prio in $(ls "$store" | grep -E '^[0-9]+$' | sort -rn); do
    for d in "$store/$prio"/*/; do
        n=$(basename "$d")
        [[ -n ${seen[$n]:-} || -e $store/disabled/$n ]] && continue
        seen[$n]=$d
    done
done
# shellcheck disable=SC2016 # expanded by sh, not here
printf '%s\n' "${seen[@]}" |
    xargs -P 2 -n 32 sh -c 'for d; do bzcat -f "$d/cil" >"$0/$(basename "$d").cil"; done' "$work/store"
echo "linking against ${#seen[@]} enabled modules of $store"

if link main; then
    ok "link with secilc (neverallow checks on)"
else
    sed 's/^/  /' "$work/main/link.log" | head -40
    bad "link with secilc: see above (a neverallow or a missing type)"
    summary
fi

# --- 4. file contexts -----------------------------------------------------------
fc() { # MODE PATH EXPECTED-TYPE (or <<none>>: never relabelled)
    local got want=$3
    got=$(matchpathcon -m "$1" -f "$work/main/file_contexts" "$2" 2>&1 | awk '{print $2}')
    [[ $want == '<<none>>' ]] || want=system_u:object_r:$3:s0
    if [[ $got == "$want" ]]; then ok "file context $2 is $3"; else bad "file context $2 is '$got', expected $3"; fi
}
fc file /usr/bin/hostpull hostpull_exec_t
fc file /usr/local/bin/hostpull hostpull_exec_t
fc file /usr/libexec/hostpull-ostree-import hostpull_ostree_exec_t
fc file /usr/local/libexec/hostpull-ostree-import hostpull_ostree_exec_t
fc dir /var/lib/hostpull hostpull_var_lib_t
fc file /var/lib/hostpull/images/fedora/blobs/sha256/0123abcd hostpull_var_lib_t
fc file /var/lib/hostpull/images/fedora/index.json hostpull_var_lib_t
fc dir /run/hostpull hostpull_runtime_t
fc file /run/hostpull/1234-0badf00d/auth.json hostpull_runtime_t
fc file /usr/bin/skopeo bin_t     # the worker's entrypoint
fc file /usr/bin/systemd-run bin_t # run by hostpull_t without a transition
# an ostree repository where hosts keep it: its own files are hostpull_ostree_repo_t,
# its content objects and tmp/ (checkouts: hard links of the objects) keep their labels
obj=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
for repo in /ostree/repo /sysroot/ostree/repo; do
    fc dir $repo hostpull_ostree_repo_t
    fc file $repo/config hostpull_ostree_repo_t
    fc file $repo/refs/heads/ostree/container/image/x hostpull_ostree_repo_t
    fc dir $repo/objects/01 hostpull_ostree_repo_t
    fc file $repo/objects/01/${obj:2}.commit hostpull_ostree_repo_t
    fc file $repo/objects/01/${obj:2}.dirtree hostpull_ostree_repo_t
    fc dir $repo/tmp hostpull_ostree_repo_t
    fc file $repo/objects/01/${obj:2}.file '<<none>>'
    fc dir $repo/tmp/.tmpAbCdEf '<<none>>'
    fc file $repo/tmp/.tmpAbCdEf/root/usr/bin/bash '<<none>>'
done
# nothing else changed
fc dir /sysroot/ostree default_t
fc dir /sysroot default_t
fc dir /var/lib var_lib_t
fc dir /run var_run_t

# --- 5. access decisions --------------------------------------------------------
access() { # NAME [--table-only] -> output in $work/NAME/access.out, status returned
    "$python" "$here/check-access.py" ${2:-} "$work/$1/policy.33" >"$work/$1/access.out" 2>&1
}
access main
rc=$?
grep -v '^access:' "$work/main/access.out" | sed 's/^/  /'
line=$(grep -E '^access: [0-9]+ passed, [0-9]+ failed$' "$work/main/access.out")
if [[ -z $line ]]; then
    bad "check-access.py did not finish (exit $rc)"
else
    read -r _ p _ f _ <<<"$line"
    pass=$((pass + p))
    fail=$((fail + f))
    if [[ $f -eq 0 ]]; then tag="ok  "; else tag=FAIL; fi
    echo "$tag access table and structure: $p checks passed, $f failed (check-access.py)"
    [[ $rc -ne 0 && $f -eq 0 ]] && bad "check-access.py exited $rc"
fi

# --- 6. mutation check ----------------------------------------------------------
# One mutant per CPU at a time (each is a build, a link and a table check); the
# results are printed in order. mutant NAME LINE ROW writes "ok|bad MESSAGE" to
# $work/NAME/verdict, and prints the details.
mutant() {
    local name=$1 line=$2 row=$3 v=$work/$1/verdict
    if ! variant "$name" "$line"; then
        echo "bad build mutant without $line" >"$v"
    elif ! link "$name"; then
        echo "bad mutant without $line did not link" >"$v"
        sed 's/^/  /' "$work/$name/link.log" | head -20
    elif access "$name" --table-only; then
        echo "bad mutant without $line: the access check still passes, so it does not test that rule" >"$v"
    elif grep -qF "FAIL $row" "$work/$name/access.out"; then
        echo "ok mutant without $line fails the access check ($(grep -c '^FAIL' "$work/$name/access.out") rows), e.g.:" >"$v"
        grep -F "FAIL $row" "$work/$name/access.out" | head -1 | sed 's/^/       /'
    else
        echo "bad mutant without $line fails, but not on '$row'" >"$v"
        sed 's/^/  /' "$work/$name/access.out"
    fi
}
for m in "${mutants[@]}"; do
    IFS='|' read -r name line row <<<"$m"
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n; done
    mkdir -p "$work/$name"
    mutant "$name" "$line" "$row" >"$work/$name/details" 2>&1 &
done
wait
for m in "${mutants[@]}"; do
    IFS='|' read -r name _ <<<"$m"
    read -r verdict message <"$work/$name/verdict"
    if [[ $verdict == ok ]]; then ok "$message"; else bad "$message"; fi
    cat "$work/$name/details"
done

# --- optional: the same against Fedora's policy -----------------------------------
# FEDORA_INCLUDE: a Fedora selinux-policy devel header tree (with Makefile);
# FEDORA_CIL: a directory with the CIL of Fedora's modules. Both can be
# made from fedora-selinux/selinux-policy sources (docs/selinux.md). There
# init_t is confined, so the init_t rows test something.
if [[ -n ${FEDORA_INCLUDE:-} && -n ${FEDORA_CIL:-} ]]; then
    fedora() { # NAME [LINE-TO-DELETE]
        mkdir -p "$work/$1" && cp "$here"/hostpull.{te,if,fc} "$work/$1/" || return 1
        [[ -z ${2:-} ]] || { grep -vxF "$2" "$work/$1/hostpull.te" >"$work/$1/te" && mv "$work/$1/te" "$work/$1/hostpull.te"; }
        make -s -C "$work/$1" -f "$FEDORA_INCLUDE/Makefile" HEADERDIR="$FEDORA_INCLUDE" NAME=targeted hostpull.pp \
            >"$work/$1/build.log" 2>&1 || { sed 's/^/  /' "$work/$1/build.log"; return 1; }
        /usr/libexec/selinux/hll/pp <"$work/$1/hostpull.pp" >"$work/$1/hostpull.cil" &&
            secilc --mls=true -c 33 -o "$work/$1/policy.33" -f /dev/null "$FEDORA_CIL"/*.cil "$work/$1/hostpull.cil" \
                >"$work/$1/link.log" 2>&1 || { sed 's/^/  /' "$work/$1/link.log" | head -20; return 1; }
    }
    if fedora fedora; then
        ok "Fedora: build and link (neverallow checks on)"
        if access fedora; then ok "Fedora: $(tail -1 "$work/fedora/access.out")"; else
            sed 's/^/  /' "$work/fedora/access.out"; bad "Fedora: access check"; fi
    else
        bad "Fedora: build and link"
    fi
    IFS='|' read -r _ line row <<<"${mutants[0]}"
    if fedora fedora-mutant "$line" && ! access fedora-mutant --table-only; then
        ok "Fedora: mutant without $line fails ($(grep -c '^FAIL' "$work/fedora-mutant/access.out") rows)"
        grep '^FAIL' "$work/fedora-mutant/access.out" | sed 's/^/       /'
    else
        bad "Fedora: mutant without $line does not fail the access check"
    fi
fi

echo "check took $(since "$start")"
summary
