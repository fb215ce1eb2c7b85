# tests/sign.sh - signed images for the signature tests; sourced by tests/rig.sh `up`
# (uses its REGISTRY, IMAGES, LOGS, run_logged, push, note).
#
# GPG: two ed25519 keys (signer, other); hostpull/signed:v1 is signed by `signer` with
# `skopeo copy --sign-by` into a file:// lookaside; hostpull/copied:v2 (another image)
# carries a copy of that signature, so its signed digest does not match.
# Sigstore: keys made with openssl (P-256 "cosign", P-256 "other", ed25519);
# hostpull/cosigned:v1 has a `sha256-<hex>.sig` attachment with two signatures (P-256,
# ed25519); hostpull/cosign-copied:v2 has one whose payload names cosigned's digest.

make_signatures() {
    local sig=$RIG_DIR/sig fpr digest copied
    rm -rf "$sig"
    mkdir -p -m 700 "$sig/gnupg"
    mkdir -p "$sig/lookaside" "$sig/registries.d"
    export GNUPGHOME=$sig/gnupg
    run_logged "$LOGS/sign.log" gpg --batch --passphrase '' \
        --quick-gen-key 'hostpull signer <signer@hostpull.test>' ed25519 sign never
    run_logged "$LOGS/sign.log" gpg --batch --passphrase '' \
        --quick-gen-key 'hostpull other <other@hostpull.test>' ed25519 sign never
    fpr=$(gpg --with-colons --list-keys signer@hostpull.test | awk -F: '/^fpr/ {print $10; exit}')
    gpg --armor --export signer@hostpull.test >"$sig/signer.asc"   # armored: hostpull dearmors
    gpg --export other@hostpull.test >"$sig/other.gpg"              # binary
    echo "$fpr" >"$sig/signer.fpr"

    # skopeo writes the signature to the lookaside-staging of the destination.
    printf 'docker:\n  %s:\n    lookaside-staging: file://%s/lookaside\n' \
        "$REGISTRY" "$sig" >"$sig/registries.d/sign.yaml"
    note "signing hostpull/signed:v1 with GPG key $fpr"
    run_logged "$LOGS/push.log" skopeo --registries.d "$sig/registries.d" copy --quiet \
        --preserve-digests --sign-by "$fpr" \
        --dest-cert-dir "$RIG_DIR/certs" --dest-authfile "$RIG_DIR/auth.json" \
        "oci:$IMAGES/small:v1" "docker://$REGISTRY/hostpull/signed:v1"
    push "$IMAGES/small" v2 hostpull/copied
    digest=$(manifest_hex small v1)
    copied=$(manifest_hex small v2)
    [ -f "$sig/lookaside/hostpull/signed@sha256=$digest/signature-1" ] \
        || die "skopeo wrote no signature for hostpull/signed:v1"
    mkdir -p "$sig/lookaside/hostpull/copied@sha256=$copied"
    cp "$sig/lookaside/hostpull/signed@sha256=$digest/signature-1" \
        "$sig/lookaside/hostpull/copied@sha256=$copied/"

    note "attaching sigstore signatures"
    openssl ecparam -genkey -name prime256v1 -noout -out "$sig/cosign.key" 2>/dev/null
    openssl ecparam -genkey -name prime256v1 -noout -out "$sig/other-cosign.key" 2>/dev/null
    openssl genpkey -algorithm ed25519 -out "$sig/ed25519.key"
    for k in cosign other-cosign ed25519; do
        openssl pkey -in "$sig/$k.key" -pubout -out "$sig/$k.pub"
    done
    push "$IMAGES/small" v1 hostpull/cosigned
    push "$IMAGES/small" v2 hostpull/cosign-copied
    run_logged "$LOGS/sign.log" env RIG_DIR="$RIG_DIR" python3 "$TESTS/cosign-attach.py" "$REGISTRY" \
        hostpull/cosigned "$digest" "$REGISTRY/hostpull/cosigned:v1" \
        "p256:$sig/cosign.key" "ed25519:$sig/ed25519.key"
    run_logged "$LOGS/sign.log" env RIG_DIR="$RIG_DIR" python3 "$TESTS/cosign-attach.py" "$REGISTRY" \
        hostpull/cosign-copied "$copied" "$REGISTRY/hostpull/cosigned:v1" \
        "p256:$sig/cosign.key" --payload-digest "$digest"
}

# manifest_hex IMAGE TAG: the hex digest of a built image's manifest.
manifest_hex() {
    python3 -c 'import json,sys; i=json.load(open(sys.argv[1]));
print(next(m["digest"] for m in i["manifests"] if m.get("annotations",{}).get("org.opencontainers.image.ref.name")==sys.argv[2]).split(":")[1])' \
        "$IMAGES/$1/index.json" "$2"
}
