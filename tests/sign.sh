# tests/sign.sh - signed images for the signature tests; sourced by tests/rig.sh `up`
# (uses its REGISTRY, IMAGES, LOGS, run_logged, push, note).
#
# GPG: two ed25519 keys (signer, other); hostpull/signed:v1 is signed by `signer` with
# `skopeo copy --sign-by` into a file:// lookaside; hostpull/copied:v2 (another image)
# carries a copy of that signature, so its signed digest does not match.
# Sigstore: keys made with openssl (P-256 "cosign", P-256 "other", ed25519);
# hostpull/cosigned:v1 has a `sha256-<hex>.sig` attachment with two signatures (P-256,
# ed25519); hostpull/cosign-copied:v2 has one whose payload names cosigned's digest.
# Keyless (make_keyless): a test CA standing in for Fulcio (a P-384 root and
# intermediate, a P-256 leaf for signer@hostpull.test with Fulcio's OIDC issuer
# extensions) and a P-256 Rekor key; hostpull/keyless:v1 is signed with the leaf, with
# the certificate, its chain and a Rekor SET logged now; hostpull/keyless-early:v1 has
# a SET logged a day before the certificate was issued.
# Bundles (make_bundles): cosign 3's sigstore bundles as OCI referrers (tag fallback):
# hostpull/bundled (cosign.key), hostpull/bundled-keyless (the keyless leaf, its chain
# and a Rekor dsse entry logged now), hostpull/bundled-other (names small:v2's digest),
# and the faults junk-bundle, huge-bundle, not-index (hostpull/bundled-FAULT).

# stop_gpg_agent: the agent an earlier `up` started for this rig. Left running, it holds
# the socket of a home that `rm -rf` removed, and the next key generation fails with "No
# agent running".
stop_gpg_agent() {
    [ -d "$RIG_DIR/sig/gnupg" ] || return 0
    gpgconf --homedir "$RIG_DIR/sig/gnupg" --kill gpg-agent 2>/dev/null || true
}

make_signatures() {
    local sig=$RIG_DIR/sig fpr digest copied
    stop_gpg_agent
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
    make_keyless "$sig" "$digest"
    make_bundles "$sig" "$digest" "$copied"
}

# make_bundles DIR HEX OTHER_HEX: images whose only signature is a bundle referrer.
make_bundles() {
    local sig=$1 digest=$2 other=$3 repo fault
    attach() {
        run_logged "$LOGS/sign.log" env RIG_DIR="$RIG_DIR" python3 "$TESTS/cosign-attach.py" \
            --bundle "$REGISTRY" "hostpull/$1" "$digest" "${@:2}"
    }
    note "attaching sigstore bundles as referrers"
    for repo in bundled bundled-keyless bundled-other; do
        push "$IMAGES/small" v1 "hostpull/$repo"
    done
    attach bundled "p256:$sig/cosign.key"
    attach bundled-keyless "p256:$sig/keyless-leaf.key" --cert "$sig/keyless-leaf.crt" \
        --chain "$sig/fulcio-chain.pem" --rekor "$sig/rekor.key" --integrated-time "$(date +%s)"
    attach bundled-other "p256:$sig/cosign.key" --payload-digest "$other"
    for fault in junk-bundle huge-bundle not-index; do
        push "$IMAGES/small" v1 "hostpull/bundled-$fault"
        attach "bundled-$fault" "p256:$sig/cosign.key" --fault "$fault"
    done
}

# make_keyless DIR HEX: the test Fulcio CA, Rekor keys, and the keyless images.
make_keyless() {
    local sig=$1 digest=$2 issuer=https://issuer.hostpull.test ext now
    ext=$sig/fulcio.cnf
    cat >"$ext" <<EXT
[int]
basicConstraints=critical,CA:true,pathlen:0
keyUsage=critical,keyCertSign,cRLSign
extendedKeyUsage=codeSigning
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
[leaf]
keyUsage=critical,digitalSignature
extendedKeyUsage=codeSigning
subjectAltName=critical,email:signer@hostpull.test
1.3.6.1.4.1.57264.1.1=DER:$(printf %s "$issuer" | od -An -tx1 | tr -d ' \n')
1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:$issuer
EXT
    for r in fulcio-root other-root; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -days 3650 \
            -keyout "$sig/$r.key" -out "$sig/$r.crt" -subj "/O=hostpull.test/CN=$r" \
            -addext basicConstraints=critical,CA:true -addext keyUsage=critical,keyCertSign,cRLSign \
            2>>"$LOGS/sign.log"
    done
    issue "$sig" fulcio-intermediate P-384 fulcio-root int 12
    issue "$sig" keyless-leaf P-256 fulcio-intermediate leaf 13
    cat "$sig/fulcio-intermediate.crt" "$sig/fulcio-root.crt" >"$sig/fulcio-chain.pem"
    for k in rekor other-rekor; do
        openssl ecparam -genkey -name prime256v1 -noout -out "$sig/$k.key" 2>/dev/null
        openssl pkey -in "$sig/$k.key" -pubout -out "$sig/$k.pub"
    done
    push "$IMAGES/small" v1 hostpull/keyless
    push "$IMAGES/small" v1 hostpull/keyless-early
    now=$(date +%s)
    for repo in keyless:$now keyless-early:$((now - 86400)); do
        run_logged "$LOGS/sign.log" env RIG_DIR="$RIG_DIR" python3 "$TESTS/cosign-attach.py" \
            "$REGISTRY" "hostpull/${repo%%:*}" "$digest" "$REGISTRY/hostpull/${repo%%:*}:v1" \
            "p256:$sig/keyless-leaf.key" --cert "$sig/keyless-leaf.crt" --chain "$sig/fulcio-chain.pem" \
            --rekor "$sig/rekor.key" --integrated-time "${repo#*:}"
    done
}

# issue DIR NAME CURVE ISSUER SECTION SERIAL: a key and a certificate from ISSUER.
issue() {
    local sig=$1 name=$2 curve=$3 ca=$4 section=$5 serial=$6
    openssl req -new -newkey ec -pkeyopt "ec_paramgen_curve:$curve" -nodes \
        -keyout "$sig/$name.key" -subj "/O=hostpull.test/CN=$name" -out "$sig/$name.csr" \
        2>>"$LOGS/sign.log"
    openssl x509 -req -in "$sig/$name.csr" -CA "$sig/$ca.crt" -CAkey "$sig/$ca.key" \
        -set_serial "$serial" -days 3650 -sha384 -extfile "$sig/fulcio.cnf" -extensions "$section" \
        -out "$sig/$name.crt" 2>>"$LOGS/sign.log"
}

# manifest_hex IMAGE TAG: the hex digest of a built image's manifest.
manifest_hex() {
    python3 -c 'import json,sys; i=json.load(open(sys.argv[1]));
print(next(m["digest"] for m in i["manifests"] if m.get("annotations",{}).get("org.opencontainers.image.ref.name")==sys.argv[2]).split(":")[1])' \
        "$IMAGES/$1/index.json" "$2"
}
