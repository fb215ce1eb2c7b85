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
# the image recipes below change.  Registry storage is wiped and re-pushed on every `up`.
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
REGISTRY_BIN=/usr/bin/docker-registry
# bsdutils: script(1), the pty of tests/tty.rs and tests/sysd.sh (Essential, listed to be sure)
PACKAGES=(skopeo docker-registry apache2-utils openssl umoci curl python3 python3-jsonschema dnsmasq-base bsdutils
          gnupg gpgv
          python3-dbus python3-gi                       # tests/stand-ins/networkmanager.py
          ostree libostree-dev libzstd-dev pkg-config    # ostree: the `ostree` feature and its tests
          make bzip2 man-db selinux-policy-dev rpm rpmlint) # make install, contrib/packaging/check.sh
TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/sign.sh
source "$TESTS/sign.sh"

LOGS=$RIG_DIR/logs
CONFIG=$RIG_DIR/registry/config.yml
PIDFILE=$RIG_DIR/registry.pid
PORTFILE=$RIG_DIR/port
CURL_CLIENT=()   # client certificate options for the readiness check
STORAGE=$RIG_DIR/registry/data
HTPASSWD=$RIG_DIR/registry/htpasswd
CURL_USER=       # user:password for the readiness check; the rig's by default
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
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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

# ---------------------------------------------------------------- registry process
registry_pid() {   # prints the PID if OUR registry (this RIG_DIR's config) is running
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # guard against PID reuse: the process must be docker-registry with our config
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "serve $CONFIG" || return 1
    echo "$pid"
}

stop_registry() {
    local pid i
    if pid=$(registry_pid); then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            note "registry $pid ignored SIGTERM, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$PIDFILE"
}

start_registry() {
    local port user pass i code= log=$LOGS/registry.log lines
    port=$(cat "$PORTFILE") || die "no port recorded; run 'up' first"
    user=$RIG_USER; pass=$(cat "$RIG_DIR/password")
    if [ -n "$CURL_USER" ]; then user=${CURL_USER%%:*}; pass=${CURL_USER#*:}; fi
    lines=0; [ -f "$log" ] && lines=$(wc -l <"$log")   # on failure show only this start's lines
    # env -i: distribution reads every REGISTRY_* variable as a config override.
    # setsid: own session, so a ^C in the caller's terminal does not kill it.
    setsid env -i "$REGISTRY_BIN" serve "$CONFIG" >>"$log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for i in $(seq 200); do   # ~20 s
        code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$RIG_DIR/ca/ca.crt" "${CURL_CLIENT[@]}" \
            -u "$user:$pass" "https://127.0.0.1:$port/v2/" 2>/dev/null || true)
        [ "$code" = 200 ] && return 0
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break   # (may not have exec'd yet)
        sleep 0.1
    done
    echo "rig: registry did not come up on 127.0.0.1:$port (last HTTP code '$code'); log:" >&2
    tail -n "+$((lines + 1))" "$log" | tail -n 30 >&2
    stop_registry
    exit 1
}

# with_mtls CMD...: run a registry function on the second registry, which shares
# the storage and requires a client certificate (http.tls.clientcas).
with_mtls() {
    local CONFIG=$RIG_DIR/registry/config-mtls.yml PIDFILE=$RIG_DIR/registry-mtls.pid \
        PORTFILE=$RIG_DIR/port-mtls
    local CURL_CLIENT=(--cert "$RIG_DIR/client/client.cert" --key "$RIG_DIR/client/client.key")
    "$@"
}

# with_mirror CMD...: run a registry function on the mirror: its own storage,
# filled by skopeo copy from the primary, and its own user and password.
with_mirror() {
    local CONFIG=$RIG_DIR/registry/config-mirror.yml PIDFILE=$RIG_DIR/registry-mirror.pid \
        PORTFILE=$RIG_DIR/port-mirror STORAGE=$RIG_DIR/registry/mirror-data \
        HTPASSWD=$RIG_DIR/registry/htpasswd-mirror
    local CURL_USER
    CURL_USER=mirror:$(cat "$RIG_DIR/mirror-password" 2>/dev/null || true)
    "$@"
}

# make_mirror_auth PORT: the mirror's user, and an authfile holding only it.
make_mirror_auth() {
    local port=$1 pass
    pass=$(openssl rand -hex 16)
    (umask 077
     printf '%s' "$pass" >"$RIG_DIR/mirror-password"
     htpasswd -Bbn mirror "$pass" >"$RIG_DIR/registry/htpasswd-mirror"
     printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$port" \
         "$(printf 'mirror:%s' "$pass" | base64 -w0)" >"$RIG_DIR/mirror-auth.json")
}

# ---------------------------------------------------------------- setup pieces
make_certs() {
    local d=$RIG_DIR/ca port=$1
    mkdir -p "$d" "$RIG_DIR/certs" "$RIG_DIR/certs.d/127.0.0.1:$port"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
        -subj "/CN=hostpull test rig CA" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=localhost" -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
    # 127.0.0.2 stands for a CDN at another address that a registry redirects
    # blob GETs to (tests/hostile_registry.py's redirect-addr).
    printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost,DNS:$CLUSTER_NAME" "basicConstraints=CA:FALSE" \
        "keyUsage=digitalSignature" "extendedKeyUsage=serverAuth" >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 7 -extfile "$d/server.ext" -out "$d/server.crt" 2>/dev/null
    chmod 600 "$d/ca.key" "$d/server.key"
    # A client CA and a client certificate for the mTLS registry; the key is root-only.
    mkdir -p "$RIG_DIR/client"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
        -subj "/CN=hostpull test client CA" -keyout "$RIG_DIR/client/ca.key" \
        -out "$RIG_DIR/client/ca.crt" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=hostpull-node" \
        -keyout "$RIG_DIR/client/client.key" -out "$RIG_DIR/client/client.csr" 2>/dev/null
    printf '%s\n' "extendedKeyUsage=clientAuth" >"$RIG_DIR/client/client.ext"
    openssl x509 -req -in "$RIG_DIR/client/client.csr" -CA "$RIG_DIR/client/ca.crt" \
        -CAkey "$RIG_DIR/client/ca.key" -CAcreateserial -days 7 \
        -extfile "$RIG_DIR/client/client.ext" -out "$RIG_DIR/client/client.cert" 2>/dev/null
    chmod 600 "$RIG_DIR/client/ca.key" "$RIG_DIR/client/client.key"
    cp "$d/ca.crt" "$RIG_DIR/certs/ca.crt"                      # skopeo --cert-dir
    cp "$d/ca.crt" "$RIG_DIR/certs.d/127.0.0.1:$port/ca.crt"    # containers-certs.d layout
}

make_auth() {
    local port=$1 pass b64 bad
    pass=$(openssl rand -hex 16)
    (umask 077
     printf '%s' "$pass" >"$RIG_DIR/password"
     htpasswd -Bbn "$RIG_USER" "$pass" >"$RIG_DIR/registry/htpasswd"
     b64=$(printf '%s:%s' "$RIG_USER" "$pass" | base64 -w0)
     bad=$(printf '%s:%s' "$RIG_USER" "wrong-$pass" | base64 -w0)
     printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$port" "$b64" >"$RIG_DIR/auth.json"
     printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$port" "$bad" >"$RIG_DIR/bad-auth.json")
}

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
        return
    fi
    local p i
    for i in $(seq 100); do   # no python: random port nobody answers on
        p=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    die "no free port found"
}

write_config() {   # write_config PORT [CLIENT-CA]
    local port=$1 clientcas=
    [ -n "${2:-}" ] && clientcas=$(printf '    clientcas:\n      - %s' "$2")
    # No blobdescriptor cache: tests tamper with the storage and must see the result.
    # The access log (one combined-format line per request, in RIG_REGISTRY_LOG)
    # is how tests/ostree.rs sees which blobs a pull really asked for.
    cat >"$CONFIG" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $STORAGE
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(openssl rand -hex 16)
  tls:
    certificate: $RIG_DIR/ca/server.crt
    key: $RIG_DIR/ca/server.key
$clientcas
auth:
  htpasswd:
    realm: hostpull-rig
    path: $HTPASSWD
EOF
}

# ---------------------------------------------------------------- test images (offline)
# Layers are made with GNU tar and added by `umoci raw add-layer` (umoci gzips them).
# Not `umoci insert`: umoci 0.4.7's insert writes tars without the final padding and
# end-of-archive blocks (GNU tar: "Unexpected EOF in archive").

# add_layer LAYOUT:TAG SRCDIR [--tag NEW]: one layer holding SRCDIR's contents at /
add_layer() {
    local ref=$1 src=$2; shift 2
    local tarf; tarf=$(mktemp "$RIG_DIR/tmp/layer.XXXXXX")
    (cd "$src" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tarf" -- *)
    umoci raw add-layer --image "$ref" "$@" "$tarf"
    rm -f "$tarf"
}

# gen_text DIR NAME SIZE: DIR/NAME/data.txt with SIZE bytes of text unique to NAME
gen_text() {
    mkdir -p "$1/$2"
    yes "hostpull rig content $2" | head -c "$3" >"$1/$2/data.txt" || true
}

# every gzip layer must be a complete tar, and skopeo must read every tag
verify_layout() {
    local dir=$1 b; shift
    for b in "$dir"/blobs/sha256/*; do
        [ "$(head -c2 "$b" | od -An -tx1 | tr -d ' \n')" = 1f8b ] || continue
        tar -tzf "$b" >/dev/null || die "broken layer tar $b"
    done
    for b in "$@"; do skopeo inspect "oci:$dir:$b" >/dev/null; done
}

build_small() {   # v1 = L1 L2 L3a, v2 = L1 L2 L3b
    local d=$1 s=$RIG_DIR/tmp/small
    umoci init --layout "$d"
    umoci new --image "$d:base"
    rm -rf "$s"; gen_text "$s/1" layer1 3000; add_layer "$d:base" "$s/1"
    gen_text "$s/2" layer2 5000; add_layer "$d:base" "$s/2"
    gen_text "$s/3a" layer3-v1 4000; add_layer "$d:base" "$s/3a" --tag v1
    gen_text "$s/3b" layer3-v2 4500; add_layer "$d:base" "$s/3b" --tag v2
    umoci config --image "$d:v1" --config.label org.hostpull.rig=small-v1
    umoci config --image "$d:v2" --config.label org.hostpull.rig=small-v2
    umoci rm --image "$d:base"
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d" v1 v2
}

build_multi() {   # OCI index v1 -> linux/amd64 + linux/arm64 manifests
    local d=$1 s=$RIG_DIR/tmp/multi arch mdig entries=() idx dig
    umoci init --layout "$d"
    for arch in amd64 arm64; do
        umoci new --image "$d:$arch"
        umoci config --image "$d:$arch" --os linux --architecture "$arch" \
            --config.label "org.hostpull.rig=multi-$arch"
        rm -rf "$s"; mkdir -p "$s/etc"; echo "$arch" >"$s/etc/hostpull-arch"
        gen_text "$s" "multi-$arch" 2000
        add_layer "$d:$arch" "$s"
        mdig=$(skopeo inspect --format '{{.Digest}}' "oci:$d:$arch")   # sha256:...
        grep -q "\"architecture\":\"$arch\"" <(skopeo inspect --config --raw "oci:$d:$arch") \
            || die "multi: config of $arch lacks architecture"
        entries+=("$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%d,"platform":{"architecture":"%s","os":"linux"}}' \
            "$mdig" "$(stat -c %s "$d/blobs/sha256/${mdig#sha256:}")" "$arch")")
    done
    idx=$(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s,%s]}' \
        "${entries[0]}" "${entries[1]}")
    dig=$(printf '%s' "$idx" | sha256sum | cut -d' ' -f1)
    printf '%s' "$idx" >"$d/blobs/sha256/$dig"
    # the layout's index.json now names only the index, as tag v1
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:%s","size":%d,"annotations":{"org.opencontainers.image.ref.name":"v1"}}]}' \
        "$dig" "${#idx}" >"$d/index.json"
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d"
    [ "$(skopeo inspect --raw "oci:$d:v1" | grep -o '"platform"' | wc -l)" = 2 ] || die "multi: bad index"
}

build_tamper() {  # random bytes: no other image shares these blobs
    local d=$1 s=$RIG_DIR/tmp/tamper
    umoci init --layout "$d"; umoci new --image "$d:v1"
    rm -rf "$s"; mkdir -p "$s/1/tamper" "$s/2/tamper"
    head -c 256K /dev/urandom >"$s/1/tamper/a.bin"; add_layer "$d:v1" "$s/1"
    head -c 512K /dev/urandom >"$s/2/tamper/b.bin"; add_layer "$d:v1" "$s/2"
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d" v1
}

# build_random DIR NAME SIZE: 8 layers of SIZE random bytes each
build_random() {
    local d=$1 name=$2 size=$3 s=$RIG_DIR/tmp/$2 i
    umoci init --layout "$d"; umoci new --image "$d:v1"
    for i in $(seq 8); do
        rm -rf "$s"; mkdir -p "$s/$name"
        head -c "$size" /dev/urandom >"$s/$name/layer$i.bin"
        add_layer "$d:v1" "$s"
    done
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d" v1
}

build_big() { build_random "$1" big 64M; }   # 8 layers x 64 MiB

build_paced() {   # 3 MiB, 1 MiB and 256 KiB of random bytes: seconds at tests/rate.rs's low caps
    local d=$1 s=$RIG_DIR/tmp/paced size i=0
    umoci init --layout "$d"; umoci new --image "$d:v1"
    for size in 3M 1M 256K; do
        i=$((i + 1)); rm -rf "$s"; mkdir -p "$s/paced"
        head -c "$size" /dev/urandom >"$s/paced/layer$i.bin"
        add_layer "$d:v1" "$s"
    done
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d" v1
}

build_big2() {    # v2 = big:v1's first 7 layers (the same blobs) + a new random 64 MiB layer
    local d=$1 b=$IMAGES/big s=$RIG_DIR/tmp/big2 m c f dig
    mkdir -p "$d"
    cp -al "$b/blobs" "$d/blobs"               # blobs are immutable: share them
    cp "$b/oci-layout" "$b/index.json" "$d/"   # rewritten by umoci: real copies
    # tag base7 = v1 less its last layer: the same manifest and config, one entry shorter
    m=$(jq -r '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == "v1") | .digest' "$d/index.json")
    c=$(jq -r .config.digest "$d/blobs/sha256/${m#sha256:}")
    f=$(mktemp "$RIG_DIR/tmp/blob.XXXXXX")
    jq -c '.rootfs.diff_ids |= .[:-1] | .history |= .[:-1]' "$d/blobs/sha256/${c#sha256:}" >"$f"
    c=$(sha256sum "$f" | cut -d' ' -f1)
    jq -c --arg c "sha256:$c" --argjson n "$(stat -c %s "$f")" '.config.digest = $c | .config.size = $n | .layers |= .[:-1]' \
        "$d/blobs/sha256/${m#sha256:}" >"$f.m"
    mv "$f" "$d/blobs/sha256/$c"
    dig=$(sha256sum "$f.m" | cut -d' ' -f1)
    jq -c --arg m "sha256:$dig" --argjson n "$(stat -c %s "$f.m")" \
        '.manifests += [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $n, annotations: {"org.opencontainers.image.ref.name": "base7"}}]' \
        "$d/index.json" >"$f"
    mv "$f.m" "$d/blobs/sha256/$dig"
    mv "$f" "$d/index.json"
    echo "$m" >"$d/.from"                   # stale once big is rebuilt (ensure_image)
    rm -rf "$s"; mkdir -p "$s/big"
    head -c 64M /dev/urandom >"$s/big/layer8-v2.bin"
    add_layer "$d:base7" "$s" --tag v2
    umoci rm --image "$d:base7"; umoci rm --image "$d:v1"
    umoci gc --layout "$d"
    rm -rf "$s"
    verify_layout "$d" v2
    [ "$(skopeo inspect --raw "oci:$d:v2" | jq -r '.layers[:7][].digest')" = \
      "$(skopeo inspect --raw "oci:$b:v1" | jq -r '.layers[:7][].digest')" ] \
        || die "big2: v2 does not share big:v1's first 7 layers"
}

build_huge() { build_random "$1" huge 256M; }   # 8 layers x 256 MiB (2 GiB)

# ensure_image NAME: build $IMAGES/NAME once (marker file .built), reuse afterwards
ensure_image() {
    local name=$1 d=$IMAGES/$1
    if [ "$name" = big2 ] && [ "$(cat "$d/.from" 2>/dev/null)" != "$(jq -r ".manifests[0].digest" "$IMAGES/big/index.json")" ]; then
        rm -f "$d/.built"               # made from another build of big: remake
    fi
    [ -f "$d/.built" ] && return 0
    note "building image $name"
    rm -rf "$d" "$d.tmp"
    run_logged "$LOGS/build-$name.log" "build_$name" "$d.tmp"
    touch "$d.tmp/.built"
    mv "$d.tmp" "$d"
}

push() {   # push LAYOUT TAG REPO [skopeo args]
    local layout=$1 tag=$2 repo=$3; shift 3
    run_logged "$LOGS/push.log" skopeo copy --quiet --preserve-digests "$@" \
        --dest-cert-dir "$RIG_DIR/certs" --dest-authfile "$RIG_DIR/auth.json" \
        "oci:$layout:$tag" "docker://$REGISTRY/$repo:$tag"
}

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

    stop_registry
    with_mtls stop_registry
    with_mirror stop_registry
    rm -rf "$RIG_DIR/ca" "$RIG_DIR/certs" "$RIG_DIR/certs.d" "$RIG_DIR/registry" "$RIG_DIR/tmp" \
        "$RIG_DIR/client" "$RIG_DIR/env" "$LOGS"
    mkdir -p "$RIG_DIR/registry/data" "$RIG_DIR/tmp" "$LOGS" "$IMAGES"

    for n in "${names[@]}"; do ensure_image "$n"; done

    port=$(free_port); echo "$port" >"$RIG_DIR/port"
    REGISTRY=127.0.0.1:$port
    make_certs "$port"
    make_auth "$port"
    write_config "$port"
    start_registry
    # A mirror with its own credentials; it gets the small image below.
    mirror_port=$(free_port); echo "$mirror_port" >"$RIG_DIR/port-mirror"
    mkdir -p "$RIG_DIR/registry/mirror-data"
    make_mirror_auth "$mirror_port"
    with_mirror write_config "$mirror_port"
    with_mirror start_registry
    # The same storage again, behind a client-certificate check.
    mtls_port=$(free_port); echo "$mtls_port" >"$RIG_DIR/port-mtls"
    with_mtls write_config "$mtls_port" "$RIG_DIR/client/ca.crt"
    with_mtls start_registry

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
    note "up: registry $REGISTRY pid $(cat "$PIDFILE"), images ${names[*]}, env $RIG_DIR/env ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s)"
}

# env_line KEY VALUE: a line of $RIG_DIR/env, KEY='VALUE' with each ' of VALUE written '\''
# (POSIX shell quoting). Its readers take it the same way: `.` (tests/demo.sh), a
# subshell that sources it (bench's rig()), tests/util.rs's rig(); tests/rig_env.rs holds
# them together.
env_line() {
    [[ $2 != *$'\n'* ]] || die "env: $1 has a newline in its value"
    local q="'\\''"
    printf "%s='%s'\n" "$1" "${2//\'/$q}"
}

cmd_env() {
    registry_pid >/dev/null && [ -f "$RIG_DIR/env" ] || die "rig in $RIG_DIR is not up"
    cat "$RIG_DIR/env"
}

cmd_restart_registry() {
    [ -f "$CONFIG" ] || die "rig in $RIG_DIR was never set up"
    stop_registry
    start_registry
    note "registry restarted, pid $(cat "$PIDFILE")"
}

cmd_start() {
    [ -f "$CONFIG" ] || die "rig in $RIG_DIR was never set up"
    mkdir -p "$LOGS"
    start_registry
    with_mirror start_registry
    with_mtls start_registry
    note "started: registry, mirror and mTLS registry"
}

cmd_down() {
    stop_registry
    with_mtls stop_registry
    with_mirror stop_registry
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
