#!/usr/bin/python3
"""Attach sigstore (cosign) signatures to an image in the rig's registry.

Debian's skopeo cannot make sigstore signatures, so this does what cosign does:
a simple-signing payload, signed with each key (openssl), uploaded as the layers
of an OCI manifest tagged sha256-<hex>.sig in the same repository, through the
registry API with basic auth. The password is read from $RIG_DIR/password.

usage: cosign-attach.py REGISTRY REPO HEX IDENTITY KIND:KEY... [--payload-digest HEX]
        [--cert PEM --chain PEM --rekor KEY --integrated-time SECONDS]
  KIND is p256 or ed25519; HEX is the image's manifest digest (the tag to attach
  to); --payload-digest signs another digest instead (a mismatching signature).
  --cert and --chain add the signing certificate and its chain as annotations, as
  cosign does for Fulcio; --rekor adds a Rekor SET (`dev.sigstore.cosign/bundle`)
  signed by KEY (a P-256 key standing in for Rekor's) that logs the signature,
  its payload and its certificate at --integrated-time.
"""

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.request

COSIGN_PAYLOAD = "application/vnd.dev.cosign.simplesigning.v1+json"


def option(args, name):
    if name not in args:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i : i + 2]
    return value


def rekor_set(rekor_key, cert_pem, sig, payload, integrated_time):
    """A SET as Rekor returns it and cosign stores it: the canonical JSON (RFC
    8785; all ASCII here) of the entry's payload, signed with ECDSA-P256-SHA256."""
    entry = {
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}},
            "signature": {
                "content": base64.b64encode(sig).decode(),
                "publicKey": {"content": base64.b64encode(cert_pem).decode()},
            },
        },
    }
    body = {
        "body": base64.b64encode(json.dumps(entry).encode()).decode(),
        "integratedTime": int(integrated_time),
        "logIndex": 1,
        "logID": hashlib.sha256(b"hostpull test rekor").hexdigest(),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    with tempfile.NamedTemporaryFile() as f:
        f.write(canonical)
        f.flush()
        set_sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", rekor_key, f.name],
            capture_output=True,
            check=True,
        ).stdout
    return json.dumps({"SignedEntryTimestamp": base64.b64encode(set_sig).decode(), "Payload": body})


def main():
    args = sys.argv[1:]
    signed = option(args, "--payload-digest")
    cert = option(args, "--cert")
    chain = option(args, "--chain")
    rekor = option(args, "--rekor")
    integrated_time = option(args, "--integrated-time")
    registry, repo, hexd, identity, *keys = args
    rig = os.environ["RIG_DIR"]
    user = os.environ.get("RIG_USER", "hostpull")
    password = open(os.path.join(rig, "password")).read().strip()
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    ctx = ssl.create_default_context(cafile=os.path.join(rig, "ca", "ca.crt"))

    def call(method, url, data=None, ctype=None):
        if not url.startswith("https://"):
            url = f"https://{registry}{url}"
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", auth)
        if ctype:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, context=ctx) as r:
            return r.headers, r.read()

    def blob(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        headers, _ = call("POST", f"/v2/{repo}/blobs/uploads/")
        loc = headers["Location"]
        loc += ("&" if "?" in loc else "?") + "digest=" + digest
        call("PUT", loc, data, "application/octet-stream")
        return {"digest": digest, "size": len(data)}

    payload = json.dumps(
        {
            "critical": {
                "identity": {"docker-reference": identity},
                "image": {"docker-manifest-digest": "sha256:" + (signed or hexd)},
                "type": "cosign container image signature",
            },
            "optional": None,
        }
    ).encode()
    layers = []
    # openssl signs ed25519 only from a file ("oneshot"), not from a pipe.
    payload_file = tempfile.NamedTemporaryFile()
    payload_file.write(payload)
    payload_file.flush()
    for spec in keys:
        kind, key = spec.split(":", 1)
        if kind == "p256":  # ECDSA-P256-SHA256, ASN.1 DER, as cosign writes it
            cmd = ["openssl", "dgst", "-sha256", "-sign", key, payload_file.name]
        elif kind == "ed25519":
            cmd = ["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", key, "-in", payload_file.name]
        else:
            sys.exit(f"unknown key kind {kind}")
        sig = subprocess.run(cmd, capture_output=True, check=True).stdout
        annotations = {"dev.cosignproject.cosign/signature": base64.b64encode(sig).decode()}
        if cert:
            cert_pem = open(cert, "rb").read()
            annotations["dev.sigstore.cosign/certificate"] = cert_pem.decode()
            if chain:
                annotations["dev.sigstore.cosign/chain"] = open(chain).read()
            if rekor:
                annotations["dev.sigstore.cosign/bundle"] = rekor_set(
                    rekor, cert_pem, sig, payload, integrated_time
                )
        layers.append(dict(blob(payload), mediaType=COSIGN_PAYLOAD, annotations=annotations))
    config = json.dumps(
        {"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": dict(blob(config), mediaType="application/vnd.oci.image.config.v1+json"),
        "layers": layers,
    }
    call(
        "PUT",
        f"/v2/{repo}/manifests/sha256-{hexd}.sig",
        json.dumps(manifest).encode(),
        "application/vnd.oci.image.manifest.v1+json",
    )


if __name__ == "__main__":
    main()
