#!/bin/bash
# tests/rig.sh - hostpull's test rig: a real TLS + htpasswd registry on 127.0.0.1
# (Debian's docker-registry = distribution 2.8) filled with test images built offline.
#
#   rig.sh install           apt-get install the tools that are missing (needs root), and
#                            the newer skopeo workers (tests/skopeo-versions.sh)
#   rig.sh workers           print the workers: PATH VERSION PROTOCOL, one a line
#   rig.sh up                (re)create certs/credentials, start the registry, push images,
#                            write $RIG_DIR/env (KEY='VALUE' lines, shell-quoted)
#   rig.sh env               print $RIG_DIR/env; fails if the rig is not up
#   rig.sh restart-registry  stop and start the registry again (same config, port, storage)
#   rig.sh start             start the three registries of a rig made by `up` (tests/vm.sh's
#                            guest: the rig is made on the host and moved in)
#   rig.sh down              stop the registry
#
# Knobs: RIG_DIR (default /tmp/hostpull-rig), RIG_WORKERS_PREFIX (default
# /opt/hostpull-skopeo: Debian 13's and unstable's skopeo), RIG_BIG=0 to skip the 8x64 MiB image,
# RIG_BENCH=1 to add the benchmark images (bench/suite.sh; off by default, needs jq):
# hostpull/big:v2 (big:v1 with its last layer replaced) and hostpull/huge:v1 (8 x 256 MiB).
# Built images are cached in $RIG_DIR/images/v$IMAGES_VERSION: bump IMAGES_VERSION when
# the image recipes (tests/rig/images.sh) change.  Registry storage is wiped and re-pushed
# on every `up`.
set -Eeuo pipefail
trap 'echo "rig: error at line $LINENO: $BASH_COMMAND" >&2' ERR   # no silent set -e exits

RIG_DIR=${RIG_DIR:-/tmp/hostpull-rig}
RIG_BIG=${RIG_BIG:-1}
RIG_BENCH=${RIG_BENCH:-0}
RIG_WORKERS_PREFIX=${RIG_WORKERS_PREFIX:-/opt/hostpull-skopeo}
# The workers the suite runs against: Debian 12's, 13's (1.18, protocol 0.2.6) and
# unstable's (1.22, 0.2.8), the last two with their own release's libc.
WORKERS=(/usr/bin/skopeo "$RIG_WORKERS_PREFIX/trixie/skopeo" "$RIG_WORKERS_PREFIX/sid/skopeo")
IMAGES_VERSION=1
RIG_USER=hostpull
# A name only a worker's own /etc/hosts or DNS resolves (tests: --add-host, --dns);
# the server certificate carries it, as an in-cluster registry's would.
CLUSTER_NAME=image-registry.openshift-image-registry.svc
# A name only the test's proxy resolves (squid's hosts_file, tests/worker/proxy.rs): a pull
# that does not go through the proxy cannot reach it.
PROXIED_NAME=registry.corp.test
REGISTRY_BIN=/usr/bin/docker-registry
# bsdutils: script(1), the pty of tests/once/tty.rs and tests/sysd.sh (Essential, listed to be sure)
PACKAGES=(skopeo docker-registry apache2-utils openssl umoci curl python3 python3-jsonschema dnsmasq-base bsdutils
          gnupg gpgv
          python3-dbus python3-gi                       # tests/stand-ins/networkmanager.py
          ostree libostree-dev libzstd-dev pkg-config    # ostree: the `ostree` feature and its tests
          make bzip2 man-db selinux-policy-dev rpm rpmlint # make install, contrib/packaging/check.sh
          squid                                          # tests/worker/proxy.rs: a real HTTP(S) proxy
          podman)                                        # tests/once/cstorage.rs: reads what containers-storage holds
TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/sign.sh
source "$TESTS/sign.sh"

LOGS=$RIG_DIR/logs
IMAGES=$RIG_DIR/images/v$IMAGES_VERSION

die() { echo "rig: $*" >&2; exit 1; }
note() { echo "rig: $*" >&2; }

# run_logged LOG CMD...: append CMD's output to LOG; on failure show the log tail and die.
# CMD runs as a background subshell + wait: run inside `if !`/`||`, a shell function would
# have `set -e` silently disabled.
run_logged() {
    local log=$1 rc=0; shift
    ( "$@" ) >>"$log" 2>&1 &
    wait $! || rc=$?
    if [ "$rc" != 0 ]; then
        echo "rig: failed ($rc): $* (tail of $log):" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
}

# ---------------------------------------------------------------- install
cmd_install() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] \
            || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        note "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # squid's postinst starts it as a service (port 3128) where PID 1 is not
        # systemd: a policy-rc.d that refuses, for the install only, keeps it
        # stopped. The tests run their own squid in the foreground.
        local policy=/usr/sbin/policy-rc.d ours=
        if [ ! -e $policy ]; then
            printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && ours=1
        fi
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        [ -z "$ours" ] || rm -f $policy
    fi
    bash "$TESTS/skopeo-versions.sh" "$RIG_WORKERS_PREFIX" >/dev/null
}

cmd_workers() {
    local w version protocol
    for w in "${WORKERS[@]}"; do
        version=$("$w" --version) || die "worker $w does not run: run '$0 install'"
        protocol=$(python3 "$TESTS/proxy-protocol.py" "$w") || die "worker $w: no proxy protocol"
        echo "$w ${version#skopeo version } $protocol"
    done
}

# The registries (tests/rig/registry.sh), their certificates and credentials
# (tests/rig/pki.sh), the images (tests/rig/images.sh).
# shellcheck source=tests/rig/registry.sh
source "$TESTS/rig/registry.sh"
# shellcheck source=tests/rig/pki.sh
source "$TESTS/rig/pki.sh"
# shellcheck source=tests/rig/images.sh
source "$TESTS/rig/images.sh"

# ---------------------------------------------------------------- commands
cmd_up() {
    local port mtls_port mirror_port t0 names=(small multi tamper paced) n tamper_layer
    t0=$(date +%s.%N)
    case $RIG_DIR in *[[:space:]]*) die "RIG_DIR must not contain whitespace" ;; esac
    for n in skopeo umoci openssl htpasswd curl gpg gpgv python3 "$REGISTRY_BIN" "${WORKERS[@]}"; do
        command -v "$n" >/dev/null || die "$n missing: run '$0 install'"
    done
    [ "$RIG_BIG" = 0 ] || names+=(big)
    if [ "$RIG_BENCH" = 1 ]; then
        [ "$RIG_BIG" != 0 ] || die "RIG_BENCH=1 needs the big image: unset RIG_BIG=0"
        command -v jq >/dev/null || die "RIG_BENCH=1 needs jq: apt-get install jq"
        names+=(big2 huge)                 # after big: big2 is made from it
    fi

    for n in main mtls mirror; do stop_registry $n; done
    rm -rf "$RIG_DIR/ca" "$RIG_DIR/certs" "$RIG_DIR/certs.d" "$RIG_DIR/registry" "$RIG_DIR/tmp" \
        "$RIG_DIR/client" "$RIG_DIR/env" "$LOGS"
    mkdir -p "$RIG_DIR/registry/data" "$RIG_DIR/tmp" "$LOGS" "$IMAGES"

    for n in "${names[@]}"; do ensure_image "$n"; done

    port=$(free_port)
    REGISTRY=127.0.0.1:$port
    make_certs "$port"
    make_auth "$port"
    write_config main "$port"
    start_registry main
    # A mirror with its own credentials; it gets the small image below.
    mirror_port=$(free_port)
    mkdir -p "$RIG_DIR/registry/mirror-data"
    make_mirror_auth "$mirror_port"
    write_config mirror "$mirror_port"
    start_registry mirror
    # The same storage again, behind a client-certificate check.
    mtls_port=$(free_port)
    write_config mtls "$mtls_port" "$RIG_DIR/client/ca.crt"
    start_registry mtls

    note "pushing images to $REGISTRY"
    push "$IMAGES/small" v1 hostpull/small
    push "$IMAGES/small" v2 hostpull/small
    push "$IMAGES/multi" v1 hostpull/multi --all
    push "$IMAGES/tamper" v1 hostpull/tamper
    push "$IMAGES/paced" v1 hostpull/paced
    note "copying hostpull/small:v1 to the mirror 127.0.0.1:$mirror_port"
    run_logged "$LOGS/push.log" skopeo copy --quiet --preserve-digests \
        --src-cert-dir "$RIG_DIR/certs" --src-authfile "$RIG_DIR/auth.json" \
        --dest-cert-dir "$RIG_DIR/certs" --dest-authfile "$RIG_DIR/mirror-auth.json" \
        "docker://$REGISTRY/hostpull/small:v1" "docker://127.0.0.1:$mirror_port/hostpull/small:v1"
    make_signatures
    [ "$RIG_BIG" = 0 ] || push "$IMAGES/big" v1 hostpull/big
    if [ "$RIG_BENCH" = 1 ]; then
        push "$IMAGES/big2" v2 hostpull/big
        push "$IMAGES/huge" v1 hostpull/huge
    fi
    skopeo inspect --raw --cert-dir "$RIG_DIR/certs" --authfile "$RIG_DIR/auth.json" \
        "docker://$REGISTRY/hostpull/multi:v1" | grep -q 'image.index.v1+json' \
        || die "registry does not serve hostpull/multi:v1 as an OCI index"
    # last layer of the tamper image = the blob a test may corrupt in storage
    tamper_layer=$(skopeo inspect --raw "oci:$IMAGES/tamper:v1" | grep -o 'sha256:[0-9a-f]*' | tail -n1)
    tamper_layer=${tamper_layer#sha256:}

    {
        env_line RIG_DIR "$RIG_DIR"
        env_line RIG_REGISTRY "$REGISTRY"
        env_line RIG_CLUSTER_NAME "$CLUSTER_NAME"
        env_line RIG_PROXIED_NAME "$PROXIED_NAME"
        env_line RIG_MTLS_REGISTRY "127.0.0.1:$mtls_port"
        env_line RIG_MIRROR_REGISTRY "127.0.0.1:$mirror_port"
        env_line RIG_MIRROR_AUTHFILE "$RIG_DIR/mirror-auth.json"
        env_line RIG_CLIENT_CERT "$RIG_DIR/client/client.cert"
        env_line RIG_CLIENT_KEY "$RIG_DIR/client/client.key"
        env_line RIG_PORT "$port"
        env_line RIG_CA "$RIG_DIR/ca/ca.crt"
        env_line RIG_CERT_DIR "$RIG_DIR/certs"
        env_line RIG_CERTS_D "$RIG_DIR/certs.d"
        env_line RIG_AUTHFILE "$RIG_DIR/auth.json"
        env_line RIG_BAD_AUTHFILE "$RIG_DIR/bad-auth.json"
        env_line RIG_USER "$RIG_USER"
        env_line RIG_WORKERS "${WORKERS[*]}"
        env_line RIG_PASSWORD_FILE "$RIG_DIR/password"
        env_line RIG_STORAGE "$RIG_DIR/registry/data"
        env_line RIG_REGISTRY_LOG "$LOGS/registry.log"
        env_line RIG_IMG_SMALL "$REGISTRY/hostpull/small:v1"
        env_line RIG_IMG_SMALL2 "$REGISTRY/hostpull/small:v2"
        env_line RIG_IMG_MULTI "$REGISTRY/hostpull/multi:v1"
        env_line RIG_IMG_TAMPER "$REGISTRY/hostpull/tamper:v1"
        env_line RIG_IMG_PACED "$REGISTRY/hostpull/paced:v1"
        env_line RIG_SIG_DIR "$RIG_DIR/sig"
        env_line RIG_SIGNER_FPR "$(cat "$RIG_DIR/sig/signer.fpr")"
        env_line RIG_IMG_SIGNED "$REGISTRY/hostpull/signed:v1"
        env_line RIG_IMG_COPIED "$REGISTRY/hostpull/copied:v2"
        env_line RIG_IMG_COSIGNED "$REGISTRY/hostpull/cosigned:v1"
        env_line RIG_IMG_COSIGN_COPIED "$REGISTRY/hostpull/cosign-copied:v2"
        env_line RIG_IMG_KEYLESS "$REGISTRY/hostpull/keyless:v1"
        env_line RIG_IMG_KEYLESS_EARLY "$REGISTRY/hostpull/keyless-early:v1"
        env_line RIG_BUNDLED_DIGEST "sha256:$(manifest_hex small v1)"
        env_line RIG_TAMPER_BLOB "$RIG_DIR/registry/data/docker/registry/v2/blobs/sha256/${tamper_layer:0:2}/$tamper_layer/data"
        if [ "$RIG_BIG" != 0 ]; then
            env_line RIG_IMG_BIG "$REGISTRY/hostpull/big:v1"
            env_line RIG_LAYOUT_BIG "$IMAGES/big"
        fi
        if [ "$RIG_BENCH" = 1 ]; then
            env_line RIG_IMG_BIG2 "$REGISTRY/hostpull/big:v2"
            env_line RIG_IMG_HUGE "$REGISTRY/hostpull/huge:v1"
        fi
    } >"$RIG_DIR/env.tmp"
    mv "$RIG_DIR/env.tmp" "$RIG_DIR/env"
    rm -rf "$RIG_DIR/tmp"
    cmd_workers | while read -r n version protocol; do note "worker $n: skopeo $version, protocol $protocol"; done
    note "up: registry $REGISTRY pid $(registry_pid main), images ${names[*]}, env $RIG_DIR/env ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s)"
}

# env_line KEY VALUE: a line of $RIG_DIR/env, KEY='VALUE' with each ' of VALUE written '\''
# (POSIX shell quoting). Its readers take it the same way: `.` (tests/demo.sh), a
# subshell that sources it (bench's rig()), tests/util.rs's rig(); tests/once/rig_env.rs holds
# them together.
env_line() {
    [[ $2 != *$'\n'* ]] || die "env: $1 has a newline in its value"
    local q="'\\''"
    printf "%s='%s'\n" "$1" "${2//\'/$q}"
}

cmd_env() {
    registry_pid main >/dev/null && [ -f "$RIG_DIR/env" ] || die "rig in $RIG_DIR is not up"
    cat "$RIG_DIR/env"
}

cmd_restart_registry() {
    [ -f "$(reg main config)" ] || die "rig in $RIG_DIR was never set up"
    stop_registry main
    start_registry main
    note "registry restarted, pid $(registry_pid main)"
}

cmd_start() {
    [ -f "$(reg main config)" ] || die "rig in $RIG_DIR was never set up"
    local n
    mkdir -p "$LOGS"
    for n in main mirror mtls; do start_registry $n; done
    note "started: registry, mirror and mTLS registry"
}

cmd_down() {
    local n
    for n in main mtls mirror; do stop_registry $n; done
    stop_gpg_agent
    note "down"
}

case ${1:-} in
    install) cmd_install ;;
    workers) cmd_workers ;;
    up) cmd_up ;;
    env) cmd_env ;;
    restart-registry) cmd_restart_registry ;;
    start) cmd_start ;;
    down) cmd_down ;;
    *) echo "usage: $0 install|workers|up|env|restart-registry|start|down" >&2; exit 2 ;;
esac
