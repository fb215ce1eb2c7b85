#!/bin/bash
# tests/vm-guest.sh - the guest tests of tests/vm.sh, run inside the enforcing guest by
# hostpull-vm-tests.service from the second disk (/vm). Each test has its own verdict:
# it passes when its commands succeed AND the audit log gained no denial whose source
# or target is a hostpull type (kernel AVCs and user-space USER_AVCs from systemd and
# the bus alike). Other daemons' denials are listed, not counted.
#
# /vm holds: guest.sh (this), tests/rig.sh and sign.sh, rig/ (the host's rig, moved here),
# rig-dir (the path the rig was made at), filter (a regex of the tests to run under the
# installed policy; none when it is empty), and mutants/ (optional): NAME/policy.33 (the
# policy without one rule) and NAME/tests (the tests to run under it), in the order of
# mutants/order. The mutants come after the tests, in the same boot: each loads its
# policy with load_policy, after the tests' state is reset (reset_state).
# It writes /vm/results: verdicts (one "PASS|FAIL NAME ..." line per test), NAME.log,
# NAME.denials, NAME.other-denials, audit.log, journal.txt; and for each mutant the same
# in results/mutant-NAME/, with `loaded` when its policy was.
set -uo pipefail
V=/vm
R=$V/results
rm -rf "$R"; mkdir -p "$R"
exec > >(tee -a "$R/console.log") 2>&1
echo "VMTEST-BEGIN $(uname -r) $(getenforce) $(id -Z)"

RIG_DIR=$(cat "$V/rig-dir")
mkdir -p "$(dirname "$RIG_DIR")"
cp -a "$V/rig" "$RIG_DIR"
# shellcheck disable=SC1091
source "$RIG_DIR/env"
FILTER=$(cat "$V/filter" 2>/dev/null)
AUDIT=/var/log/audit/audit.log

# ------------------------------------------------------------------- setup
setup() {
    RIG_DIR=$RIG_DIR bash "$V/tests/rig.sh" start
    install -d -m 0755 /etc/hostpull /etc/hostpull/pulls.d /etc/containers/registries.conf.d /etc/pki/hostpull
    install -m 0644 "$RIG_CA" /etc/hostpull/rig-ca.crt
    install -m 0600 "$RIG_AUTHFILE" /etc/hostpull/auth.json
    install -m 0600 "$RIG_MIRROR_AUTHFILE" /etc/hostpull/mirror-auth.json
    # The small image has a mirror with its own credential.
    cat >/etc/containers/registries.conf.d/50-rig-mirror.conf <<EOF
[[registry]]
prefix = "$RIG_REGISTRY/hostpull/small"
location = "$RIG_REGISTRY/hostpull/small"
[[registry.mirror]]
location = "$RIG_MIRROR_REGISTRY/hostpull/small"
EOF
    # Signatures: keys under /etc/pki, the lookaside where containers keep it.
    install -m 0644 "$RIG_SIG_DIR/signer.asc" "$RIG_SIG_DIR/cosign.pub" /etc/pki/hostpull/
    mkdir -p /var/lib/containers/sigstore /etc/containers/registries.d
    cp -a "$RIG_SIG_DIR/lookaside/." /var/lib/containers/sigstore/
    cat >/etc/containers/registries.d/rig.yaml <<EOF
docker:
  $RIG_REGISTRY:
    lookaside: file:///var/lib/containers/sigstore
    use-sigstore-attachments: true
EOF
    local scope=$RIG_REGISTRY/hostpull
    printf '{"default":[{"type":"reject"}],"transports":{"docker":{"%s":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/etc/pki/hostpull/signer.asc"}]}}}\n' \
        "$scope" >/etc/hostpull/policy-gpg.json
    printf '{"default":[{"type":"reject"}],"transports":{"docker":{"%s":[{"type":"sigstoreSigned","keyPath":"/etc/pki/hostpull/cosign.pub"}]}}}\n' \
        "$scope" >/etc/hostpull/policy-sigstore.json
    local ca="ca = [\"$RIG_REGISTRY=/etc/hostpull/rig-ca.crt\", \"$RIG_MIRROR_REGISTRY=/etc/hostpull/rig-ca.crt\"]"
    profile mirror "docker://$RIG_IMG_SMALL" oci:/var/lib/hostpull/images/mirror \
        'authfile = ["/etc/hostpull/mirror-auth.json"]' "$ca"
    profile paced "docker://$RIG_IMG_PACED" oci:/var/lib/hostpull/images/paced \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca" 'max-rate = "1M"'
    profile slow "docker://$RIG_IMG_PACED" oci:/var/lib/hostpull/images/slow \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca" 'max-rate = "64K"'
    profile timer "docker://$RIG_IMG_SMALL2" oci:/var/lib/hostpull/images/timer \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    profile gpg "docker://$RIG_IMG_SIGNED" oci:/var/lib/hostpull/images/gpg \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca" 'policy = "/etc/hostpull/policy-gpg.json"' \
        '"registries.d" = "/etc/containers/registries.d"' 'require-signature = true'
    profile sigstore "docker://$RIG_IMG_COSIGNED" oci:/var/lib/hostpull/images/sigstore \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca" 'policy = "/etc/hostpull/policy-sigstore.json"' \
        '"registries.d" = "/etc/containers/registries.d"' 'require-signature = true'
    profile oom "docker://$RIG_IMG_SMALL2" oci:/var/lib/hostpull/images/oom \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    profile rebase "docker://$RIG_IMG_SMALL2" oci:/var/lib/hostpull/images/rebase \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    profile cstorage "docker://$RIG_IMG_SMALL2" containers-storage:hostpull/cstorage:v1 \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    profile ostree-base "docker://$RIG_REGISTRY/hostpull/ostree:v1" ostree:/ostree/repo:hostpull-test \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    profile ostree-update "docker://$RIG_REGISTRY/hostpull/ostree:v2" ostree:/ostree/repo:hostpull-test \
        'authfile = ["/etc/hostpull/auth.json"]' "$ca"
    # The small image under the name only t_proxy's squid resolves: the registry's
    # credential and CA under that name.
    local proxied=$RIG_PROXIED_NAME:$RIG_PORT
    printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$proxied" \
        "$(printf '%s:%s' "$RIG_USER" "$(cat "$RIG_PASSWORD_FILE")" | base64 -w0)" >/etc/hostpull/proxied-auth.json
    chmod 0600 /etc/hostpull/proxied-auth.json
    profile proxy "docker://$proxied/hostpull/small:v1" oci:/var/lib/hostpull/images/proxy \
        'authfile = ["/etc/hostpull/proxied-auth.json"]' "ca = [\"$proxied=/etc/hostpull/rig-ca.crt\"]"
    mkdir -p /ostree && ostree --repo=/ostree/repo init --mode=bare
    # The overlay driver needs the module, which a node's container engine has loaded:
    # hostpull_storage_t loads no kernel module.
    modprobe overlay
    restorecon -R /etc/hostpull /etc/containers /etc/pki/hostpull /var/lib/containers /ostree
    systemctl daemon-reload
}

# profile NAME IMAGE DEST [TOML LINE...]
profile() {
    local name=$1 image=$2 dest=$3
    shift 3
    { printf 'image = "%s"\ndest = "%s"\n' "$image" "$dest"; printf '%s\n' "$@"; } \
        >"/etc/hostpull/pulls.d/$name.toml"
}

# ------------------------------------------------------------------- helpers
fail() { echo "FAILED: $*"; exit 1; }
# pull_service NAME: the installed hostpull-pull@NAME.service, to completion.
pull_service() {
    systemctl start "hostpull-pull@$1.service" || {
        journalctl -b -u "hostpull-pull@$1.service" --no-pager | tail -20
        fail "hostpull-pull@$1.service failed"
    }
    journalctl -b -u "hostpull-pull@$1.service" --no-pager -o cat | tail -5
}
layout_has() { # DIR TAG
    grep -q "\"org.opencontainers.image.ref.name\":\"$2\"" "$1/index.json" 2>/dev/null ||
        fail "$1 has no tag $2: $(cat "$1/index.json" 2>&1)"
}
worker_units() { systemctl list-units --no-legend --plain 'hostpull-worker-*' | awk '{print $1}'; }
# wait_for SECS DESC CMD...: poll CMD every 0.1 s.
wait_for() {
    local n=$(($1 * 10)) what=$2
    shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || fail "timed out waiting for $what"
        sleep 0.1
    done
}
# The domains of the running skopeo and hostpull processes, sampled until UNIT ends.
sample_domains() { # UNIT OUT
    : >"$2"
    while systemctl is-active -q "$1" || [ "$(systemctl show -P ActiveState "$1")" = activating ]; do
        ps -eo label=,comm=,args= | grep -E '^[^ ]+ (skopeo|hostpull) ' >>"$2" || true
        sleep 0.1
    done
}

# Prints the samples of sample_domains that no rule allows; fails if there are any.
# Root's domain runs hostpull and, for the report, `skopeo --version` (unless the
# state directory keeps it; by the path PATH gives, /usr/bin/skopeo); the worker's runs the worker agent (the unit's program)
# and every other skopeo (by the path the plan found on PATH). A process is sampled mid-change now and then: between
# execve(2)'s new arguments and its new comm (`hostpull skopeo …`, CI caught it
# once), or exiting or inside execve with no readable arguments (`[hostpull]`, also
# caught once). So the comm and the arguments are each judged against the domain's
# programs, apart.
stray_domains() { # FILE
    awk '{
        split($1, label, ":"); d = label[3]; comm = $2
        args = $0; sub(/^[^ ]+ +[^ ]+ +/, "", args)
        root = d == "hostpull_t"; worker = d == "hostpull_worker_t"
        ok = (root || worker) && (comm == "hostpull" || comm == "skopeo")
        if (args ~ /^\[(hostpull|skopeo)\]$/) {}
        else if (root) ok = ok && (args ~ /^([^ ]*\/)?skopeo --version$/ ||
            (args ~ /^[^ ]*hostpull / && args !~ /^[^ ]*hostpull __worker-agent /))
        else ok = ok && (args ~ /^[^ ]*hostpull __worker-agent / ||
            (args ~ /^([^ ]*\/)?skopeo / && args !~ /^([^ ]*\/)?skopeo --version$/))
        if (!ok) { print; bad = 1 }
    } END { exit bad }' "$1"
}

# ------------------------------------------------------------------- tests
# A sandboxed pull into oci: through the mirror, with the mirror's credential only (the
# primary would refuse the pull, so success proves the mirror served it) and a CA per
# registry, from the installed hostpull-pull@.service.
t_pull_mirror() {
    pull_service mirror
    layout_has /var/lib/hostpull/images/mirror v1
    journalctl -b -u hostpull-pull@mirror.service -o json --no-pager | grep -q '"IMAGE"' ||
        fail "no result entry in the journal"
    # The worker's version, kept for the next pull, in the state directory's type.
    grep -qx "[0-9:.]* $(skopeo --version | awk '{print $3}')" /var/lib/hostpull/skopeo-version ||
        fail "the worker's version was not kept: $(cat /var/lib/hostpull/skopeo-version)"
    [ "$(stat -c %C /var/lib/hostpull/skopeo-version)" = system_u:object_r:hostpull_var_lib_t:s0 ] ||
        fail "the kept version is labelled $(stat -c %C /var/lib/hostpull/skopeo-version)"
}

# While a paced pull runs: root's side is hostpull_t, every skopeo hostpull_worker_t.
t_domains() {
    systemctl start --no-block hostpull-pull@paced.service
    sample_domains hostpull-pull@paced.service "$R/domains.txt"
    [ "$(systemctl show -P Result hostpull-pull@paced.service)" = success ] ||
        fail "the paced pull failed: $(journalctl -b -u hostpull-pull@paced.service -o cat --no-pager | tail -5)"
    sort -u "$R/domains.txt"
    grep -q ':hostpull_t:s0 hostpull ' "$R/domains.txt" || fail "hostpull never seen in hostpull_t"
    grep -q ':hostpull_worker_t:s0 skopeo .*experimental-image-proxy' "$R/domains.txt" ||
        fail "the proxy never seen in hostpull_worker_t"
    grep -q ':hostpull_worker_t:s0 hostpull .*__worker-agent' "$R/domains.txt" ||
        fail "the worker agent never seen in hostpull_worker_t"
    stray_domains "$R/domains.txt" || fail "a process in another domain (above)"
    layout_has /var/lib/hostpull/images/paced v1
}

# The installed timer starts the installed service (a drop-in brings the elapse near).
t_timer() {
    mkdir -p /run/systemd/system/hostpull-pull@timer.timer.d
    printf '[Timer]\nOnActiveSec=1s\nRandomizedDelaySec=0\n' \
        >/run/systemd/system/hostpull-pull@timer.timer.d/soon.conf
    systemctl daemon-reload
    systemctl start hostpull-pull@timer.timer
    wait_for 300 "the timer's pull to end" sh -c \
        '[ "$(systemctl show -P ExecMainExitTimestampMonotonic hostpull-pull@timer.service)" -gt 0 ]'
    [ "$(systemctl show -P Result hostpull-pull@timer.service)" = success ] || fail "timer's service failed"
    layout_has /var/lib/hostpull/images/timer v2
}

# SIGTERM while the worker streams: hostpull stops the worker unit and publishes nothing.
t_sigterm() {
    systemctl start --no-block hostpull-pull@slow.service
    wait_for 120 "the proxy" pgrep -f '^[^ ]*skopeo .*experimental-image-proxy'
    sleep 1
    kill -TERM "$(systemctl show -P MainPID hostpull-pull@slow.service)"
    wait_for 30 "the pull to end" sh -c \
        '! systemctl is-active -q hostpull-pull@slow.service && [ "$(systemctl show -P ActiveState hostpull-pull@slow.service)" != deactivating ]'
    wait_for 10 "the worker units to go" sh -c "[ -z \"\$(systemctl list-units --no-legend 'hostpull-worker-*')\" ]"
    [ "$(systemctl show -P ExecMainStatus hostpull-pull@slow.service)" = 143 ] ||
        fail "exit status $(systemctl show -P ExecMainStatus hostpull-pull@slow.service), expected 143"
    [ ! -e /var/lib/hostpull/images/slow/index.json ] || fail "a cancelled pull published index.json"
    ! ls /run/hostpull/* >/dev/null 2>&1 || fail "staging left: $(ls /run/hostpull)"
}

# The OOM case: a worker memory limit skopeo cannot live in is reported as such.
t_oom() {
    mkdir -p /run/systemd/system/hostpull-pull@oom.service.d
    printf '[Service]\nExecStart=\nExecStart=/usr/bin/hostpull pull --profile %%i --memory-max 8M\n' \
        >/run/systemd/system/hostpull-pull@oom.service.d/oom.conf
    systemctl daemon-reload
    ! systemctl start hostpull-pull@oom.service || fail "the pull succeeded in 8M"
    journalctl -b -u hostpull-pull@oom.service -o cat --no-pager | tail -5
    journalctl -b -u hostpull-pull@oom.service -o cat --no-pager |
        grep -q '^error: worker killed: out of memory (MemoryMax=8M)' || fail "no out-of-memory error"
    [ "$(systemctl show -P ExecMainStatus hostpull-pull@oom.service)" = 8 ] || fail "exit status is not 8"
    [ ! -e /var/lib/hostpull/images/oom ] || fail "the failed pull left its destination"
}

t_gpg() {
    pull_service gpg
    journalctl -b -u hostpull-pull@gpg.service -o json --no-pager | grep -q "\"SIGNED_BY\":\"gpg $RIG_SIGNER_FPR\"" ||
        fail "not verified by the signer's key"
    layout_has /var/lib/hostpull/images/gpg v1
}

t_sigstore() {
    pull_service sigstore
    journalctl -b -u hostpull-pull@sigstore.service -o json --no-pager | grep -q '"SIGNED_BY":"sigstore /etc/pki/hostpull/cosign.pub"' ||
        fail "not verified by cosign.pub"
    layout_has /var/lib/hostpull/images/sigstore v1
}

# systemd-analyze security of the running worker unit: the exposure README states.
t_security() {
    systemctl start --no-block hostpull-pull@slow.service
    wait_for 120 "the proxy" pgrep -f '^[^ ]*skopeo .*experimental-image-proxy'
    local unit score
    unit=$(worker_units | grep -- '-0.service$' | head -1)
    systemd-analyze security --no-pager "$unit" >"$R/security.txt" 2>&1 || true
    systemctl stop hostpull-pull@slow.service
    score=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' "$R/security.txt")
    echo "exposure of $unit: $score"
    [ -n "$score" ] || fail "no exposure level: $(tail -3 "$R/security.txt")"
    awk -v s="$score" 'BEGIN{exit !(s <= 1.0)}' || fail "exposure $score > 1.0"
}

# ostree: the base image imported into /ostree/repo (hostpull_ostree_repo_t), its objects
# carrying the image's own labels, the binary policy's included, then the derived image
# as an update of the same ref, its layer labelled by the base's policy.
t_ostree() {
    local repo=/ostree/repo
    pull_service ostree-base
    object_label $repo /usr/bin/hostpull-hello bin_t
    object_label $repo /usr/etc/hostpull-fixture.conf etc_t
    object_label $repo /usr/etc/selinux/default/policy/policy.33 policy_config_t
    object_label $repo /usr/etc/selinux/default/contexts/files/file_contexts file_context_t
    [ "$(stat -c %C $repo/config)" = system_u:object_r:hostpull_ostree_repo_t:s0 ] ||
        fail "the repository's config is $(stat -c %C $repo/config)"
    # In a bare repository an object's checksum covers its xattrs: fsck reads back the
    # label the import set on every object.
    ostree --repo=$repo fsck -q || fail "ostree fsck failed after the base import"
    pull_service ostree-update
    [ "$(ostree --repo=$repo cat hostpull-test /usr/share/hostpull-fixture/derived)" = derived ] ||
        fail "the update's layer is not in hostpull-test"
    object_label $repo /usr/bin/hostpull-hello bin_t
    object_label $repo /usr/share/hostpull-fixture/derived usr_t
    ! ls -d $repo/tmp/hostpull-staging-* 2>/dev/null || fail "a staging layout was left in $repo/tmp"
    ostree --repo=$repo fsck -q || fail "ostree fsck failed after the update"
}
# containers-storage: the installed hostpull-pull@.service pulls into the host's own store
# (no storage.conf: overlay in /var/lib/containers/storage, run root /run/containers),
# which carries container-selinux's types (tests/stand-ins/fedora_container.te). Root's
# skopeo writes it in hostpull_storage_t, which alone makes the overlay directories
# container_ro_file_t by name; the store then holds the registry's digest, and a second
# pull finds it there and copies nothing.
t_cstorage() {
    local ref=containers-storage:hostpull/cstorage:v1 want got
    pull_service cstorage | tee "$R/cstorage.out"
    want=$(grep -o 'containers-storage:[^ ]*hostpull/cstorage@sha256:[0-9a-f]*' "$R/cstorage.out" | head -1)
    [ -n "$want" ] || fail "the summary names no image in containers-storage"
    got=$(skopeo inspect --format '{{.Digest}}' "$ref") || fail "skopeo cannot read $ref back"
    [ "${want#*@}" = "$got" ] || fail "the store holds $got, the pull reported ${want#*@}"
    skopeo inspect --format '{{len .Layers}}' "$ref"
    label_is /var/lib/containers/storage container_var_lib_t
    label_is /var/lib/containers/storage/overlay container_ro_file_t
    label_is /var/lib/containers/storage/overlay-images container_ro_file_t
    label_is /run/containers container_var_run_t
    pull_service cstorage
    [ "$(skopeo inspect --format '{{.Digest}}' "$ref")" = "$got" ] || fail "the second pull changed the image"
}
label_is() { # PATH TYPE
    [ "$(stat -c %C "$1" | cut -d: -f3)" = "$2" ] || fail "$1 is $(stat -c %C "$1"), not $2"
}

# rebase from a unit: hostpull, in hostpull_t, pulls and then runs each consumer (the
# stand-ins, labelled install_exec_t as Fedora labels rpm-ostree and bootc), which runs
# in install_t, the domain that may change the host; NoNewPrivileges=yes, as in
# hostpull-pull@.service. The stand-ins log their argv, their domain and their parent's.
t_rebase() {
    local c log=/run/hostpull-standin.log
    for c in rpm-ostree bootc; do
        rm -f $log
        systemd-run --quiet --wait --collect -u "hostpull-rebase-$c" -p NoNewPrivileges=yes \
            -p StateDirectory="hostpull hostpull/images" -p StateDirectoryMode=0755 -E STANDIN_LOG=$log \
            /usr/bin/hostpull rebase --profile rebase --consumer $c ||
            fail "hostpull rebase --consumer $c: $(journalctl -b -u "hostpull-rebase-$c" -o cat --no-pager | tail -5)"
        cat $log
        grep -q "^$c .*/var/lib/hostpull/images/rebase:v2" $log || fail "$c was not run on the layout"
        grep -qx "context system_u:system_r:install_t:s0 parent system_u:system_r:hostpull_t:s0" $log ||
            fail "$c did not run in install_t, started by hostpull_t"
    done
    layout_has /var/lib/hostpull/images/rebase v2
}

# labels: giving an object the binary policy's label is the import's right
# (hostpull_ostree_t, which the ostree test exercises), not the orchestrator's. The same
# setfattr command that labels a repository file policy_config_t from this shell fails
# when it runs as hostpull_t (a copy labelled as that domain's entry point, in a unit
# with SELinuxContext=), with the one denial this test expects.
t_labels() {
    local d=/ostree/repo/tmp/hostpull-vm-labels label=system_u:object_r:policy_config_t:s0
    mkdir -p $d
    echo x >$d/control; echo x >$d/as-orch
    cp /usr/bin/setfattr $d/orch; chcon -t hostpull_exec_t $d/orch
    echo 'denied  \{ relabelfrom \} .*comm="orch" .*scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:object_r:hostpull_ostree_repo_t:s0 tclass=file' >"$R/labels.expect"
    setfattr -n security.selinux -v $label $d/control
    [ "$(stat -c %C $d/control)" = $label ] || fail "control is $(stat -c %C $d/control)"
    ! systemd-run --quiet --wait --collect -p SELinuxContext=system_u:system_r:hostpull_t:s0 \
        $d/orch -n security.selinux -v $label $d/as-orch || fail "hostpull_t labelled a file policy_config_t"
    [ "$(stat -c %C $d/as-orch)" = system_u:object_r:hostpull_ostree_repo_t:s0 ] ||
        fail "as-orch is $(stat -c %C $d/as-orch)"
    rm -rf $d
}
# object_label REPO PATH TYPE: PATH in the ref hostpull-test is an object whose file on
# disk has TYPE (libostree set it from the commit, in hostpull_ostree_t).
object_label() {
    local sum obj label
    sum=$(ostree --repo="$1" ls -C hostpull-test "$2" | awk '{print $5}')
    obj=$1/objects/${sum:0:2}/${sum:2}.file
    label=$(stat -c %C "$obj") || fail "no object for $2 ($obj)"
    [[ $label == *:$3:s0 ]] || fail "$2's object is $label, not $3"
}

# proxy: the installed service pulls through squid with basic auth on 127.0.0.1:3128
# (http_cache_port_t), given as a node is given it (/etc/hostpull/proxy.env), the
# image named by a host only squid resolves (its hosts_file); the proxy's password
# is in no unit's properties, no argv and not in the journal.
t_proxy() {
    local host=$RIG_PROXIED_NAME:$RIG_PORT pw enc sq=/etc/squid/hostpull.conf show=$R/proxy-show.txt
    ! getent hosts "$RIG_PROXIED_NAME" || fail "$RIG_PROXIED_NAME resolves outside squid"
    # A password of this run, with what a URL must encode (@ and :).
    pw="pw@$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n'):3128"
    enc=${pw//@/%40}; enc=${enc//:/%3A}
    echo "127.0.0.1 $RIG_PROXIED_NAME" >/etc/squid/hostpull-hosts
    printf 'proxyuser:%s\n' "$(printf '%s\n' "$pw" | openssl passwd -apr1 -stdin)" >/etc/squid/hostpull-passwd
    chown root:proxy /etc/squid/hostpull-passwd; chmod 0640 /etc/squid/hostpull-passwd
    # As tests/worker/proxy.rs configures it: basic auth, CONNECT only to the rig's port.
    cat >$sq <<SQUID
http_port 127.0.0.1:3128
pid_filename none
visible_hostname hostpull-vm
cache deny all
access_log stdio:/var/log/squid/access.log
cache_log /var/log/squid/cache.log
hosts_file /etc/squid/hostpull-hosts
auth_param basic program /usr/lib/squid/basic_ncsa_auth /etc/squid/hostpull-passwd
acl authed proxy_auth REQUIRED
acl regport port $RIG_PORT
acl CONNECT method CONNECT
http_access deny CONNECT !regport
http_access allow authed
http_access deny all
SQUID
    # restorecon's setfiles_t may not write to this test's log on /vm (unlabeled_t).
    restorecon -R /etc/squid /var/log/squid >/dev/null 2>&1
    # squid_t may connect only to web, cache, ftp and gopher ports; the rig's is random.
    setsebool squid_connect_any 1
    systemd-run --quiet --unit=hostpull-vm-squid /usr/sbin/squid -N -f $sq
    wait_for 60 "squid on 127.0.0.1:3128" sh -c 'ss -tln | grep -q "127.0.0.1:3128 "'
    ps -eo label=,args= | grep '[s]quid -N' || true
    # The proxy as a node is given it; only this test's pulls see it.
    trap 'rm -f /etc/hostpull/proxy.env; systemctl stop hostpull-vm-squid; cp /var/log/squid/access.log /var/log/squid/cache.log "$R/" 2>/dev/null' EXIT
    printf 'HTTPS_PROXY=http://proxyuser:%s@127.0.0.1:3128\n' "$enc" >/etc/hostpull/proxy.env
    chmod 0600 /etc/hostpull/proxy.env; restorecon /etc/hostpull/proxy.env >/dev/null 2>&1
    # The pull; every unit's properties and every argv sampled while it runs.
    : >"$show"
    systemctl start --no-block hostpull-pull@proxy.service
    while systemctl is-active -q hostpull-pull@proxy.service ||
        [ "$(systemctl show -P ActiveState hostpull-pull@proxy.service)" = activating ]; do
        { systemctl show '*'; ps -eo args=; } >>"$show" 2>&1 || true
        sleep 0.2
    done
    journalctl -b -u hostpull-pull@proxy.service --no-pager -o cat | tail -5
    [ "$(systemctl show -P Result hostpull-pull@proxy.service)" = success ] || fail "the proxied pull failed"
    layout_has /var/lib/hostpull/images/proxy v1
    grep -E "TCP_TUNNEL/200 [0-9]+ CONNECT $host proxyuser " /var/log/squid/access.log ||
        fail "no tunnel to $host for proxyuser in squid's access log: $(tail -3 /var/log/squid/access.log)"
    grep -q 'hostpull-worker-' "$show" || fail "no worker unit was sampled"
    { systemctl show '*'; journalctl -b --no-pager -o verbose; } >>"$show" 2>&1
    ! grep -qF -e "$pw" -e "$enc" "$show" || fail "the proxy's password is in a unit's properties, an argv or the journal"
    ! grep -rqF -e "$pw" -e "$enc" /run/hostpull /var/lib/hostpull 2>/dev/null || fail "the proxy's password was left in a file"
    echo "squid tunnelled $host for proxyuser; the password in no unit's properties, argv or journal"
}

TESTS=(pull_mirror domains timer sigterm oom gpg sigstore security ostree labels rebase proxy cstorage)

# ------------------------------------------------------------------- runner
# Audit records of hostpull types since line N of the audit log (AVC and USER_AVC).
denials_since() { # N HOSTPULL-OUT OTHER-OUT
    tail -n "+$(($1 + 1))" "$AUDIT" | grep -E 'type=(USER_)?AVC .*avc: +denied' >"$R/.new" || true
    grep -E '(s|t)context=[^ ]*:hostpull_' "$R/.new" >"$2" || true
    grep -vE '(s|t)context=[^ ]*:hostpull_' "$R/.new" >"$3" || true
}
run_test() {
    local name=$1 mark t0 rc=0 n o
    mark=$(wc -l <"$AUDIT")
    t0=$(date +%s.%N)
    echo "VMTEST-START $name"
    # A background subshell keeps set -e on (inside || it would be off).
    (set -e; "t_$name") >"$R/$name.log" 2>&1 &
    wait $! || rc=$?
    sleep 2 # auditd writes asynchronously
    denials_since "$mark" "$R/$name.denials" "$R/$name.other-denials"
    # A test that provokes a denial names it in $R/NAME.expect (regexes): those are
    # set aside, and each regex must have matched.
    local missing=0
    if [ -s "$R/$name.expect" ]; then
        grep -Ef "$R/$name.expect" "$R/$name.denials" >"$R/$name.expected-denials" || true
        grep -vEf "$R/$name.expect" "$R/$name.denials" >"$R/.rest" || true
        mv "$R/.rest" "$R/$name.denials"
        while read -r re; do
            grep -qE "$re" "$R/$name.expected-denials" || { missing=$((missing + 1)); echo "expected denial missing: $re" >>"$R/$name.log"; }
        done <"$R/$name.expect"
    fi
    n=$(wc -l <"$R/$name.denials")
    o=$(wc -l <"$R/$name.other-denials")
    local verdict=PASS
    [ "$rc" = 0 ] && [ "$n" = 0 ] && [ "$missing" = 0 ] || verdict=FAIL
    local line
    line="$verdict $name rc=$rc hostpull-denials=$n expected-missing=$missing other-denials=$o time=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}')"
    echo "$line" >>"$R/verdicts"
    echo "VMTEST $line"
    if [ "$verdict" = FAIL ]; then tail -15 "$R/$name.log"; head -10 "$R/$name.denials"; fi
}

# reset_state: what the tests wrote, gone, so that a test run again (under a mutant)
# fetches and imports again rather than finding its image held.
reset_state() {
    systemctl reset-failed
    rm -rf /var/lib/hostpull/images/* /ostree/repo /var/lib/containers/storage /run/containers
    ostree --repo=/ostree/repo init --mode=bare
    restorecon -R /ostree /var/lib/hostpull
}
# mutant NAME: its policy loaded in place of the installed one, then its tests, with
# their results in results/mutant-NAME.
mutant() {
    local name=$1 t
    R=$V/results/mutant-$name
    mkdir -p "$R"
    reset_state >"$R/reset.log" 2>&1 || echo "VMTEST-MUTANT $name: reset_state failed (reset.log)"
    cp "$V/mutants/$name/policy.33" /etc/selinux/default/policy/policy.33
    if load_policy; then
        echo "VMTEST-MUTANT $name loaded" | tee "$R/loaded"
        for t in $(cat "$V/mutants/$name/tests"); do run_test "$t"; done
    else
        echo "VMTEST-MUTANT $name: load_policy failed"
    fi
    R=$V/results
}

if ! systemctl is-active -q auditd; then
    echo "FAIL setup rc=1 auditd is not running" >>"$R/verdicts"
else
    # In the background, outside any `!` or `||`: set -e stays on in it (a failed
    # `ostree init` went unnoticed when it ran inside `! { ...; }`).
    (set -e; setup) >"$R/setup.log" 2>&1 &
    if ! wait $!; then
        echo "FAIL setup rc=1 (setup.log)" >>"$R/verdicts"
        tail -20 "$R/setup.log"
    else
        if [ -n "$FILTER" ]; then
            for t in "${TESTS[@]}"; do
                [[ $t =~ $FILTER ]] && run_test "$t"
            done
        fi
        for m in $(cat "$V/mutants/order" 2>/dev/null); do
            mutant "$m"
        done
    fi
fi
cp "$AUDIT" "$R/audit.log"
cp -a "$RIG_DIR/logs" "$R/rig-logs" 2>/dev/null || true
ss -tlnp >"$R/listening.txt" 2>&1 || true
journalctl -b --no-pager >"$R/journal.txt"
# The registries run in this unit's cgroup: stop them, or the unit waits for its stop
# timeout before SuccessAction= powers the guest off.
RIG_DIR=$RIG_DIR bash "$V/tests/rig.sh" down >/dev/null 2>&1 || true
sync
echo "VMTEST-END"
