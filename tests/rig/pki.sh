# tests/rig/pki.sh - the rig's certificates and credentials, new on every `up`; sourced
# by tests/rig.sh, which defines RIG_DIR, RIG_USER, CLUSTER_NAME and PROXIED_NAME.

# make_certs PORT: a CA, the server certificate of every registry of the rig, and a
# client CA with a client certificate for the mTLS registry.
make_certs() {
    local d=$RIG_DIR/ca port=$1
    mkdir -p "$d" "$RIG_DIR/certs" "$RIG_DIR/certs.d/127.0.0.1:$port"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
        -subj "/CN=hostpull test rig CA" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=localhost" -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
    # 127.0.0.2 stands for a CDN at another address that a registry redirects
    # blob GETs to (tests/hostile_registry.py's redirect-addr); $PROXIED_NAME, for
    # a registry that only the proxy can resolve (tests/worker/proxy.rs).
    printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost,DNS:$CLUSTER_NAME,DNS:$PROXIED_NAME" "basicConstraints=CA:FALSE" \
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

# make_auth PORT: the rig's user, an authfile holding it and one with a wrong password.
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

