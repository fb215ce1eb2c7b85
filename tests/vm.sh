#!/bin/bash
# tests/vm.sh - the SELinux pass: a Debian 12 guest that boots with SELinux enforcing
# (refpolicy "default") under qemu TCG, with hostpull installed the way README says
# (make install PREFIX=/usr, the module with semodule -i, the tree relabelled) and the
# rig (TLS + htpasswd registry, mirror) inside; it runs tests/vm-guest.sh there and
# reads each guest test's verdict and the denials back from the guest's disk.
#
#   vm.sh [run]      build what is missing, boot, run the guest tests; exit 1 if one fails
#                    or the guest does not come up (default); $VM_DIR/failures says which
#   vm.sh mutants    the same guest with a rule of selinux/hostpull.te deleted, once per
#                    mutant below: the matching guest test must fail with a denial. The
#                    guest loads each mutant's policy in turn (load_policy), in one boot
#   vm.sh all        run, then mutants, in one boot (tests/run.sh)
#   vm.sh build      only build the cached images
#   vm.sh tools      only install the host's tools (qemu, debootstrap: apt-get)
#   vm.sh base       only build the base root (debootstrap; no apt-get on the host: the
#                    tools must be there), which tests/run.sh starts in the background
#
# Knobs: VM_DIR (default /var/tmp/hostpull-vm: big artefacts, never in git), VM_BIN (the
# hostpull binary to install; default: the dev build, as tests/run.sh makes it), VM_TIMEOUT (seconds a boot
# may take, default 1800), VM_SMP (default 2), VM_TESTS (a regex of guest test names),
# VM_MUTANTS (a regex of mutant names, for `mutants` and `all`), VM_DONTAUDIT=0 (the policy without its dontaudit rules: silent denials logged too).
#
# Never KVM: /dev/kvm answers on these machines, but a nested guest hangs after the
# kernel's boot stub. Under TCG, with 2 vCPUs, boot to power-off takes about 25 s idle.
#
# Images are cached by what makes them:
#   $VM_DIR/base-KEY/root    debootstrap of PACKAGES (KEY: the package list and the
#                            build_base recipe); ~2 min, ~1 GB
#   $VM_DIR/image-KEY.img    base + hostpull installed + the module + relabelled
#                            (KEY: the base key, the binary, selinux/, systemd/, the
#                            Makefile, the stand-ins and the install_hostpull recipe)
# The rig and the guest tests are a second disk made fresh on every run (the rig's
# certificates and passwords are new each time); the guest writes its results there.
set -Eeuo pipefail
trap 'echo "vm: error at line $LINENO: $BASH_COMMAND" >&2; echo "error at line $LINENO: $BASH_COMMAND" >>"$VM_DIR/failures"' ERR
cd "$(dirname "$0")/.."
SRC=$PWD

VM_DIR=${VM_DIR:-/var/tmp/hostpull-vm}
VM_TIMEOUT=${VM_TIMEOUT:-1800}
VM_SMP=${VM_SMP:-2}
VM_TESTS=${VM_TESTS:-.}
VM_MUTANTS=${VM_MUTANTS:-.}
# What the guest has, besides minbase. skopeo needs containernetworking-plugins spelled
# out (debootstrap does not resolve the virtual container-network-stack).
PACKAGES=(systemd systemd-sysv udev dbus selinux-basics selinux-policy-default auditd
          policycoreutils linux-image-amd64 kmod iproute2 procps
          skopeo containernetworking-plugins docker-registry curl ca-certificates
          ostree gpgv util-linux attr   # attr: setfattr (vm-guest.sh t_labels)
          squid)                        # t_proxy: a real proxy in front of the rig
HOST_PACKAGES=(qemu-system-x86 qemu-utils debootstrap policycoreutils semodule-utils e2fsprogs
               selinux-policy-default selinux-policy-dev make bzip2 jq)   # jq: bench/lib.sh derive

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f s", b-a}'; }
note() { echo "vm: $*" >&2; }
# What failed goes to $VM_DIR/failures too, which tests/run.sh repeats at the end of its
# long log (CI shows only that log's ends).
failure() { echo "$*"; echo "$*" >>"$VM_DIR/failures"; }
die() { echo "vm: $*" >&2; echo "$*" >>"$VM_DIR/failures"; exit 1; }
hash_of() { sha256sum | cut -c1-16; }

missing_host_tools() {
    local p
    for p in "${HOST_PACKAGES[@]}"; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] \
            || echo "$p"
    done
}

# install_host_tools: HOST_PACKAGES, in two passes: a machine with a backported qemu-utils
# loses it when bookworm's qemu-system-x86 comes in (they break each other), and the
# second pass brings the matching one.
install_host_tools() {
    local pass missing
    export DEBIAN_FRONTEND=noninteractive
    for pass in 1 2; do
        mapfile -t missing < <(missing_host_tools)
        [ ${#missing[@]} -gt 0 ] || return 0
        note "installing ${missing[*]}"
        [ "$pass" = 2 ] || apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    done
    mapfile -t missing < <(missing_host_tools)
    [ ${#missing[@]} -eq 0 ] || die "could not install ${missing[*]}"
}

# build_base ROOT: Debian 12 minbase with PACKAGES, from the host's own apt source.
build_base() {
    local root=$1 uri
    uri=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" bookworm "$root" "$uri"
    printf 'SELINUX=enforcing\nSELINUXTYPE=default\n' >"$root/etc/selinux/config"
    echo '/dev/vda / ext4 rw 0 1' >"$root/etc/fstab"
    echo hostpull-vm >"$root/etc/hostname"
    # The guest tests run from a oneshot unit; nothing else needs the network.
    ln -sf /dev/null "$root/etc/systemd/system/systemd-networkd-wait-online.service"
    rm -f "$root"/var/cache/apt/archives/*.deb
}

base_key() { { printf '%s\n' "${PACKAGES[@]}"; declare -f build_base; } | hash_of; }

ensure_base() {
    local key d t
    key=$(base_key); d=$VM_DIR/base-$key
    BASE=$d/root
    [ -f "$d/.built" ] && return 0
    # One build at a time: tests/run.sh starts one early (`vm.sh base &`), and the
    # guest waits for it here.
    exec {lock}>"$VM_DIR/base.lock"
    flock "$lock"
    [ -f "$d/.built" ] && return 0
    t=$(now)
    note "building the base root $d (debootstrap; about 2 minutes)"
    rm -rf "$d"; mkdir -p "$d"
    build_base "$d/root" >"$d/debootstrap.log" 2>&1 || { tail -30 "$d/debootstrap.log" >&2; die "debootstrap failed"; }
    touch "$d/.built"
    note "base root built in $(since "$t")"
}

# ensure_bin: the binary to install (VM_BIN, or the build tests/run.sh and tests/demo.sh
# make: the dev profile, every target), and the fixture maker examples/ostree-encapsulate
# (the guest's ostree images) from the same build. Under TCG the dev build pulls as fast
# as the release (each guest test within the noise of the other, 2026-12-07: sha2, the
# hot path, is optimized in both), and a release build costs CI 790 CPU-seconds more.
ensure_bin() {
    cargo build --locked --all-targets --features ostree >&2
    # shellcheck source=tests/cargo-target.sh
    . tests/cargo-target.sh
    local target; target=$(cargo_target_dir)
    BIN=${VM_BIN:-$target/debug/hostpull}
    ENCAPSULATE=$target/debug/examples/ostree-encapsulate
    [ -x "$BIN" ] || die "no hostpull binary at $BIN"
}

image_key() {
    { base_key; echo "${VM_DONTAUDIT:-1}"; declare -f install_hostpull
      sha256sum "$BIN" "$(dirname "$BIN")/hostpull-ostree-import" selinux/hostpull.{te,if,fc} systemd/* Makefile tests/stand-ins/* | cut -d' ' -f1; } | hash_of
}

# install_hostpull ROOT: as README says, then what makes this guest a test machine.
install_hostpull() {
    local root=$1 out=$VM_DIR/dist
    make -s install DESTDIR="$root" PREFIX=/usr BIN="$BIN" OUT="$out" SELINUXTYPE=default >&2
    # The module into the guest's policy store (the binary policy is rebuilt there).
    semodule -p "$root" -s default -i "$root/usr/share/selinux/packages/default/hostpull.pp.bz2"
    # Fedora's install_t, where rpm-ostree and bootc run: the consumer stand-ins below
    # carry its install_exec_t (tests/stand-ins/fedora_install.te); and container-selinux's
    # types, which /var/lib/containers carries (tests/stand-ins/fedora_container.te).
    local s=$VM_DIR/standin m
    rm -rf "$s"; mkdir -p "$s"
    for m in fedora_install fedora_container; do
        cp tests/stand-ins/$m.{te,fc} "$s/"; : >"$s/$m.if"
        make -s -C "$s" -f /usr/share/selinux/devel/Makefile $m.pp >&2
        semodule -p "$root" -s default -i "$s/$m.pp"
    done
    # VM_DONTAUDIT=0: no dontaudit rules, so that silent denials are logged too (to
    # find what a failure hides; the counted denials then include dontaudit'ed ones).
    [ "${VM_DONTAUDIT:-1}" = 1 ] || semodule -p "$root" -s default -DB
    # Debian's docker-registry package enables a registry of its own on :5000; the
    # guest's registries are the rig's (the last guest run found only that one listening).
    ln -sf /dev/null "$root/etc/systemd/system/docker-registry.service"
    # Debian's squid package enables squid.service (3128, its default configuration);
    # the guest's proxy is t_proxy's own squid, on that port.
    ln -sf /dev/null "$root/etc/systemd/system/squid.service"
    # The guest tests print to ttyS0, where a login prompt's vhangup() would cut them
    # off (a run whose serial log ended at the prompt).
    ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
    # The consumers hostpull rebase hands over to; they cannot be installed here.
    install -m 0755 tests/stand-ins/rpm-ostree tests/stand-ins/bootc "$root/usr/bin/"
    # The guest tests: a oneshot unit running /vm/guest.sh from the second disk, which
    # powers the guest off when it is done (or fails to start).
    mkdir -p "$root/vm"
    echo '/dev/vdb /vm ext4 rw,nofail 0 2' >>"$root/etc/fstab"
    cat >"$root/etc/systemd/system/hostpull-vm-tests.service" <<'U'
[Unit]
Description=hostpull: the guest tests of tests/vm.sh
After=multi-user.target auditd.service dbus.service
RequiresMountsFor=/vm
SuccessAction=poweroff-force
FailureAction=poweroff-force
[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/bash /vm/guest.sh
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
U
    ln -sf /etc/systemd/system/hostpull-vm-tests.service \
        "$root/etc/systemd/system/multi-user.target.wants/hostpull-vm-tests.service"
    # Relabel the whole tree with the file contexts the module added.
    setfiles -F -r "$root" "$root/etc/selinux/default/contexts/files/file_contexts" "$root"
}

ensure_image() {
    local key t root
    key=$(image_key); IMAGE=$VM_DIR/image-$key.img
    [ -f "$IMAGE" ] && return 0
    t=$(now)
    root=$VM_DIR/root-$key
    rm -rf "$root"; cp -a "$BASE" "$root"
    install_hostpull "$root"
    rm -f "$IMAGE.tmp"
    mkfs.ext4 -q -d "$root" -F "$IMAGE.tmp" 4G
    mv "$IMAGE.tmp" "$IMAGE"
    # The policy store as installed: mutants are built against it.
    rm -rf "$VM_DIR/store" && mkdir -p "$VM_DIR/store/etc" "$VM_DIR/store/var/lib"
    cp -a "$root/etc/selinux" "$VM_DIR/store/etc/" && cp -a "$root/var/lib/selinux" "$VM_DIR/store/var/lib/"
    rm -rf "$root"
    # Keep only this image: older keys are stale.
    find "$VM_DIR" -maxdepth 1 -name 'image-*.img' ! -path "$IMAGE" -delete
    note "image $IMAGE built in $(since "$t")"
}

# make_rig: the rig, made on the host (images, certificates, signatures), its registries
# stopped again; the guest starts them from the same files (rig.sh start).
make_rig() {
    local t; t=$(now)
    RIG=$VM_DIR/rig
    RIG_DIR=$RIG RIG_BIG=0 bash tests/rig.sh up >"$VM_DIR/rig.log" 2>&1 ||
        { tail -20 "$VM_DIR/rig.log" >&2; die "rig.sh up failed"; }
    # In the background: set -e stays on in it (on the left of || it would be off).
    make_ostree_images >>"$VM_DIR/rig.log" 2>&1 &
    wait $! || { tail -20 "$VM_DIR/rig.log" >&2; die "the ostree images could not be made"; }
    RIG_DIR=$RIG bash tests/rig.sh down >>"$VM_DIR/rig.log" 2>&1
    note "rig made in $(since "$t")"
}

# make_ostree_images: hostpull/ostree:v1, an ostree-encapsulated base as FCOS and bootc
# base images are made: it carries the guest's own SELinux policy in /usr/etc/selinux,
# binary policy included, and its files are labelled by it (ostree commit
# --selinux-policy), with /usr/etc labelled as /etc (the equivalence Fedora's policy
# ships in file_contexts.subs_dist), so policy.33 is policy_config_t as on a Fedora or
# RHEL base; hostpull/ostree:v2, that base plus one plain layer, which the import labels
# with the base's policy. Pushed to the rig's registry (up).
make_ostree_images() (
    set -e
    local d=$VM_DIR/ostree-fixture
    # shellcheck source=bench/lib.sh
    source bench/lib.sh   # derive
    # shellcheck disable=SC1091
    source "$RIG/env"
    rm -rf "$d"; mkdir -p "$d/tree/usr/bin" "$d/tree/usr/etc" "$d/tree/usr/lib" "$d/layer/usr/share/hostpull-fixture"
    printf '#!/bin/sh\necho hello\n' >"$d/tree/usr/bin/hostpull-hello"
    chmod 0755 "$d/tree/usr/bin/hostpull-hello"
    echo 'ID=hostpull-vm-fixture' >"$d/tree/usr/lib/os-release"
    echo 'base' >"$d/tree/usr/etc/hostpull-fixture.conf"
    echo 'derived' >"$d/layer/usr/share/hostpull-fixture/derived"
    cp -a "$BASE/etc/selinux" "$d/tree/usr/etc/"
    echo '/usr/etc /etc' >>"$d/tree/usr/etc/selinux/default/contexts/files/file_contexts.subs_dist"
    ostree --repo="$d/src" init --mode=archive
    ostree --repo="$d/src" commit --branch=fixture --selinux-policy="$d/tree" --tree=dir="$d/tree" >/dev/null
    ostree --repo="$d/src" ls -X fixture /usr/etc/selinux/default/policy/policy.33 | grep -q ':policy_config_t:' ||
        { echo "the fixture's policy.33 is not policy_config_t" >&2; exit 1; }
    "$ENCAPSULATE" "$d/src" fixture "$d/v1" v1 >/dev/null
    derive "$d/v1" "$d/v2" v2 "$d/layer"
    for t in v1 v2; do
        skopeo copy -q --dest-authfile "$RIG_AUTHFILE" --dest-cert-dir "$RIG_CERT_DIR" \
            "oci:$d/$t:$t" "docker://$RIG_REGISTRY/hostpull/ostree:$t"
    done
    rm -rf "$d"
)

# make_disk DISK: the second disk: the guest tests, the rig, the filter (VM_TESTS, or
# none when it is empty) and the mutants' policies ($VM_DIR/mutants, made by
# mutant_policies).
make_disk() {
    local disk=$1 d=$VM_DIR/disk
    rm -rf "$d"; mkdir -p "$d/tests" "$d/rig"
    cp tests/vm-guest.sh "$d/guest.sh"
    cp -r tests/rig.sh tests/sign.sh tests/rig "$d/tests/"
    (cd "$RIG" && tar --exclude=./images --exclude=./logs --exclude=./sig/gnupg -cf - .) | tar -xf - -C "$d/rig"
    echo "$RIG" >"$d/rig-dir"
    echo "$VM_TESTS" >"$d/filter"
    [ ! -d "$VM_DIR/mutants" ] || cp -r "$VM_DIR/mutants" "$d/"
    rm -f "$disk"
    mkfs.ext4 -q -d "$d" -F "$disk" 512M
    rm -rf "$d"
}

# boot IMAGE DISK LOG: an enforcing boot; the guest powers itself off.
boot() {
    local image=$1 disk=$2 log=$3 overlay=$VM_DIR/overlay.qcow2 kernel initrd rc=0
    kernel=$(ls "$BASE"/boot/vmlinuz-* | head -1)
    initrd=$(ls "$BASE"/boot/initrd.img-* | head -1)
    # The image stays as built: the guest writes to an overlay.
    rm -f "$overlay"
    qemu-img create -q -f qcow2 -b "$image" -F raw "$overlay"
    timeout "$VM_TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -m 2048 -smp "$VM_SMP" \
        -kernel "$kernel" -initrd "$initrd" \
        -append "root=/dev/vda rw console=ttyS0 selinux=1 security=selinux enforcing=1 quiet" \
        -drive file="$overlay",format=qcow2,if=virtio -drive file="$disk",format=raw,if=virtio \
        -nic none -nographic -no-reboot </dev/null >"$log" 2>&1 || rc=$?
    rm -f "$overlay"
    [ "$rc" = 0 ] || note "qemu exited $rc (124: the guest did not power off within ${VM_TIMEOUT}s)"
    return 0
}

# results DISK DIR: the guest's results directory, read from its disk with debugfs.
results() {
    rm -rf "$2"; mkdir -p "$2"
    # debugfs does not replay the journal: a guest killed by the timeout may have left
    # its last writes only there.
    e2fsck -fp "$1" >/dev/null 2>&1 || true
    debugfs -R "rdump /results $2" "$1" >/dev/null 2>&1 || true
    [ -f "$2/results/verdicts" ]
}

# The guest tests, as tests/vm-guest.sh lists them (TESTS): each must report a verdict.
read -ra GUEST_TESTS <<<"$(sed -n 's/^TESTS=(\(.*\))$/\1/p' tests/vm-guest.sh)"
[ ${#GUEST_TESTS[@]} -gt 0 ] || die "no TESTS=(...) line in tests/vm-guest.sh"

# guest NAME: one boot; its results in $VM_DIR/NAME/results.
guest() {
    local name=$1 t disk=$VM_DIR/disk.img
    t=$(now)
    make_disk "$disk"
    boot "$IMAGE" "$disk" "$VM_DIR/$name.serial.log"
    note "$name: guest ran for $(since "$t")"
    OUT=$VM_DIR/$name
    if ! results "$disk" "$OUT"; then
        tr -d '\r' <"$VM_DIR/$name.serial.log" | tail -40 >&2
        die "$name: the guest did not come up or wrote no results (serial log above: $VM_DIR/$name.serial.log)"
    fi
    OUT=$OUT/results
}

prepare() {
    install_host_tools
    ensure_base
    ensure_bin
    ensure_image
    make_rig
}

# judge_run: the verdicts of the guest tests in $OUT (VM_TESTS of them).
judge_run() {
    local failed=0 t v
    echo "== guest tests (enforcing; details in $OUT)"
    cat "$OUT/verdicts"
    # A failed test's verdict, with the reason its log ends with.
    for t in $(awk '$1 == "FAIL" { print $2 }' "$OUT/verdicts"); do
        failure "$(grep "^FAIL $t " "$OUT/verdicts") $(grep -h '^FAILED: ' "$OUT/$t.log" 2>/dev/null | tail -1)" >/dev/null
        failed=1
    done
    if [ "$VM_TESTS" = . ]; then
        for t in "${GUEST_TESTS[@]}"; do
            grep -q "^[A-Z]* $t " "$OUT/verdicts" || { failure "FAIL $t: no verdict"; failed=1; }
        done
    fi
    for t in "$OUT"/*.denials; do
        [ -s "$t" ] || continue
        echo "-- denials on hostpull types in $(basename "$t" .denials):"
        sed 's/^/   /' "$t"
    done
    v=$(cat "$OUT"/*.other-denials 2>/dev/null | grep -o 'avc: *denied *{[^}]*} for .*' |
        sed -E 's/pid=[0-9]+ //; s/ino=[0-9]+ //' | sort | uniq -c | sort -rn || true)
    [ -z "$v" ] || { echo "-- other daemons' denials (not counted):"; echo "$v" | head -20; }
    [ "$failed" = 0 ] || { note "guest tests failed"; return 1; }
    note "all guest tests passed"
}

# Mutants: NAME|LINE OF hostpull.te|GUEST TESTS THAT MUST FAIL (space-separated; all in
# the same boot)|WHAT EACH ONE'S DENIALS MUST SHOW
MUTANTS=(
    'fds|hostpull_fds_via_systemd(hostpull_t)|pull_mirror|scontext=[^ ]*:(init|system_dbusd)_t:[^ ]* tcontext=[^ ]*:hostpull_t:[^ ]* tclass=(fd|unix_stream_socket|fifo_file)'
    # The registry's port (unreserved_port_t) in pull_mirror; squid's 3128
    # (http_cache_port_t) in proxy, where the registry's name resolves only in squid.
    'net|corenet_tcp_connect_all_ports(hostpull_worker_t)|pull_mirror proxy|denied  \{ name_connect \} .*scontext=system_u:system_r:hostpull_worker_t:s0 tcontext=system_u:object_r:(unreserved|http_cache)_port_t'
    'agent|domain_entry_file(hostpull_worker_t, hostpull_exec_t)|pull_mirror|denied  \{ [a-z ]*entrypoint[a-z ]* \} .*scontext=system_u:system_r:hostpull_worker_t:s0 tcontext=system_u:object_r:hostpull_exec_t'
    'relabel|allow hostpull_ostree_t { hostpull_object_types shadow_t }:file { getattr open read link rename unlink setattr relabelto };|ostree|denied  \{ [a-z ]*relabelto[a-z ]* \} .*scontext=system_u:system_r:hostpull_ostree_t:s0 tcontext=system_u:object_r:(bin|etc|lib|selinux_config|default_context|file_context)_t'
    'binpolicy|seutil_relabelto_bin_policy(hostpull_ostree_t)|ostree|denied  \{ [a-z ]*relabelto[a-z ]* \} .*scontext=system_u:system_r:hostpull_ostree_t:s0 tcontext=system_u:object_r:policy_config_t'
    'import|	domtrans_pattern(hostpull_t, hostpull_ostree_exec_t, hostpull_ostree_t)|ostree|denied  \{ [a-z_ ]*(getattr|execute)[a-z_ ]* \} .*scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:object_r:hostpull_ostree_exec_t'
    'proxy|can_exec(hostpull_ostree_t, hostpull_exec_t)|ostree|denied  \{ [a-z_ ]*execute[a-z_ ]* \} .*scontext=system_u:system_r:hostpull_ostree_t:s0 tcontext=system_u:object_r:hostpull_exec_t'
    'rebase|		domtrans_pattern(hostpull_t, install_exec_t, install_t)|rebase|denied  \{ [a-z_ ]*(execute|getattr)[a-z_ ]* \} .*scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:object_r:install_exec_t'
    'rebase-nnp|		allow hostpull_t install_t:process2 nnp_transition;|rebase|denied  \{ nnp_transition \} .*scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:system_r:install_t:s0 tclass=process2'
    # containers-storage: root's skopeo enters hostpull_storage_t by setexeccon(), whose
    # re-exec makes / private to unpack a layer.
    'storage|allow hostpull_t hostpull_storage_t:process { transition signal sigkill };|cstorage|denied  \{ [a-z ]*transition[a-z ]* \} .*scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:system_r:hostpull_storage_t:s0 tclass=process'
    'storage-mount|allow hostpull_storage_t root_t:dir mounton;|cstorage|denied  \{ mounton \} .*scontext=system_u:system_r:hostpull_storage_t:s0 tcontext=system_u:object_r:root_t'
    'root|filetrans_pattern(hostpull_t, hostpull_runtime_t, hostpull_worker_conf_t, dir, "root")|pull_mirror|denied  \{ create \} .*name="bin" scontext=system_u:system_r:hostpull_t:s0 tcontext=system_u:object_r:hostpull_runtime_t:s0 tclass=lnk_file'
)

# mutant_policy NAME LINE: the guest's policy with LINE deleted from hostpull.te, in
# $VM_DIR/mutant-NAME/root.
mutant_policy() {
    local name=$1 line=$2 d=$VM_DIR/mutant-$1
    rm -rf "$d"; mkdir -p "$d/src"
    cp selinux/hostpull.{te,if,fc} "$d/src/"
    [ "$(grep -cxF "$line" "$d/src/hostpull.te")" = 1 ] || { echo "mutant $name: '$line' is not in hostpull.te exactly once"; return 1; }
    grep -vxF "$line" selinux/hostpull.te >"$d/src/hostpull.te"
    make -s selinux-pp SELINUX_SRC="$d/src" OUT="$d/out" &&
        cp -a "$VM_DIR/store" "$d/root" &&
        semodule -p "$d/root" -s default -i "$d/out/selinux/hostpull.pp"
}

# mutant_policies: the chosen mutants (VM_MUTANTS) into $VM_DIR/mutants for the guest
# (make_disk): NAME/policy.33, NAME/tests and order. Built one per CPU at a time (each
# is mostly secilc's link: about 18 s of CPU).
mutant_policies() {
    local m name line tests want
    CHOSEN=()
    for m in "${MUTANTS[@]}"; do if [[ ${m%%|*} =~ $VM_MUTANTS ]]; then CHOSEN+=("$m"); fi; done
    [ ${#CHOSEN[@]} -gt 0 ] || die "no mutant matches VM_MUTANTS='$VM_MUTANTS'"
    rm -rf "$VM_DIR/mutants"; mkdir -p "$VM_DIR/mutants"
    for m in "${CHOSEN[@]}"; do
        IFS='|' read -r name line tests want <<<"$m"
        while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
        mutant_policy "$name" "$line" >"$VM_DIR/mutant-$name.log" 2>&1 &
    done
    wait
    for m in "${CHOSEN[@]}"; do
        IFS='|' read -r name line tests want <<<"$m"
        [ -f "$VM_DIR/mutant-$name/root/etc/selinux/default/policy/policy.33" ] ||
            { cat "$VM_DIR/mutant-$name.log" >&2; die "mutant $name: its policy could not be built"; }
        mkdir -p "$VM_DIR/mutants/$name"
        cp "$VM_DIR/mutant-$name/root/etc/selinux/default/policy/policy.33" "$VM_DIR/mutants/$name/"
        echo "$tests" >"$VM_DIR/mutants/$name/tests"
        echo "$name" >>"$VM_DIR/mutants/order"
        rm -rf "$VM_DIR/mutant-$name"
    done
}

# judge_mutants RESULTS: each chosen mutant's tests failed, with its denial.
judge_mutants() {
    local m name line tests want test out failed=0
    for m in "${CHOSEN[@]}"; do
        IFS='|' read -r name line tests want <<<"$m"
        out=$1/mutant-$name
        [ -f "$out/loaded" ] || { failure "FAIL mutant $name: not loaded"; failed=1; continue; }
        for test in $tests; do
            if ! grep -q "^FAIL $test " "$out/verdicts"; then
                failure "FAIL mutant $name: $test still passes without '$line'"; failed=1
            elif ! grep -qE "$want" "$out/$test.denials"; then
                failure "FAIL mutant $name: $test fails, but no denial matches '$want'"; failed=1
                sed 's/^/   /' "$out/$test.denials" | head
            else
                echo "ok   mutant $name: $test fails without '$line', with:"
                grep -E "$want" "$out/$test.denials" | head -2 | sed 's/^/       /'
            fi
        done
    done
    [ "$failed" = 0 ] || { note "a mutant was not caught by the guest tests"; return 1; }
}

# cmd MODE: run (the guest tests), mutants, or all (both, in one boot).
cmd() {
    local failed=0
    rm -rf "$VM_DIR/mutants"
    [ "$1" != mutants ] || VM_TESTS=
    prepare
    [ "$1" = run ] || mutant_policies
    guest "$1"
    if [ "$1" != mutants ]; then judge_run || failed=1; fi
    if [ "$1" != run ]; then judge_mutants "$OUT" || failed=1; fi
    [ "$failed" = 0 ] || die "$1: failed (above; $VM_DIR/failures)"
}

t0=$(now)
mkdir -p "$VM_DIR"; rm -f "$VM_DIR/failures"
case ${1:-run} in
    run|mutants|all) cmd "${1:-run}" ;;
    build) prepare ;;
    tools) install_host_tools ;;
    base) ensure_base ;;
    *) echo "usage: $0 [run|mutants|all|build|tools|base]" >&2; exit 2 ;;
esac
note "${1:-run} took $(since "$t0")"
