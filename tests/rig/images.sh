# tests/rig/images.sh - the rig's test images, built offline; sourced by tests/rig.sh,
# which defines RIG_DIR, IMAGES, LOGS, REGISTRY, die, note and run_logged.
# Layers are made with GNU tar and added by `umoci raw add-layer` (umoci gzips them).
# Not `umoci insert`: umoci 0.4.7's insert writes tars without the final padding and
# end-of-archive blocks (GNU tar: "Unexpected EOF in archive").
# Built images are cached in $IMAGES: bump IMAGES_VERSION (tests/rig.sh) when a recipe
# below changes.

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

build_paced() {   # 3 MiB, 1 MiB and 256 KiB of random bytes: seconds at tests/once/rate.rs's low caps
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
