#!/usr/bin/python3
"""Attach sigstore (cosign) signatures to an image in the rig's registry.

Debian's skopeo cannot make sigstore signatures, so this does what cosign does:
a simple-signing payload, signed with each key (openssl), uploaded as the layers
of an OCI manifest tagged sha256-<hex>.sig in the same repository, through the
registry API with basic auth. The password is read from $RIG_DIR/password.

usage: cosign-attach.py REGISTRY REPO HEX IDENTITY KIND:KEY... [--payload-digest HEX]
        [--cert PEM --chain PEM --rekor KEY --integrated-time SECONDS]
       cosign-attach.py --bundle REGISTRY REPO HEX p256:KEY [--payload-digest HEX]
        [--cert PEM [--chain PEM] [--rekor KEY --integrated-time SECONDS]] [--fault FAULT]
  KIND is p256 or ed25519; HEX is the image's manifest digest (the tag to attach
  to); --payload-digest signs another digest instead (a mismatching signature).
  --cert and --chain add the signing certificate and its chain as annotations, as
  cosign does for Fulcio; --rekor adds a Rekor SET (`dev.sigstore.cosign/bundle`)
  signed by KEY (a P-256 key standing in for Rekor's) that logs the signature,
  its payload and its certificate at --integrated-time.

  --bundle attaches a sigstore bundle as cosign 3 does (cosign's specs/BUNDLE_SPEC.md,
  the referrers tag fallback): a DSSE envelope of an in-toto statement (predicate
  https://sigstore.dev/cosign/sign/v1, subject HEX or --payload-digest) signed with
  KEY; with --cert a v0.3 bundle with that certificate, with --chain a v0.2 bundle with
  x509CertificateChain [cert, the chain but its last (the root)]; --rekor adds a tlog
  entry of kind dsse with a SET by KEY. The bundle is a blob, a referrer manifest
  (artifactType, subject HEX) points at it, and the OCI index tagged sha256-HEX lists
  the referrer. --fault spoils it: `junk-bundle` (not JSON), `huge-bundle` (5 MiB),
  `not-index` (the tag holds an image manifest). (docker-registry 2.8.2 takes no
  manifest over 4 MiB: tests/hostile_registry.py serves a huge index.)
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


def client(registry):
    rig = os.environ["RIG_DIR"]
    user = os.environ.get("RIG_USER", "hostpull")
    password = open(os.path.join(rig, "password")).read().strip()
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    ctx = ssl.create_default_context(cafile=os.path.join(rig, "ca", "ca.crt"))

    def call(method, url, data=None, ctype=None, accept=None):
        if not url.startswith("https://"):
            url = f"https://{registry}{url}"
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", auth)
        if ctype:
            req.add_header("Content-Type", ctype)
        if accept:
            req.add_header("Accept", accept)
        with urllib.request.urlopen(req, context=ctx) as r:
            return r.headers, r.read()

    return call


def upload(call, repo, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    headers, _ = call("POST", f"/v2/{repo}/blobs/uploads/")
    loc = headers["Location"]
    loc += ("&" if "?" in loc else "?") + "digest=" + digest
    call("PUT", loc, data, "application/octet-stream")
    return {"digest": digest, "size": len(data)}


def sign_p256(key, data):
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        cmd = ["openssl", "dgst", "-sha256", "-sign", key, f.name]
        return subprocess.run(cmd, capture_output=True, check=True).stdout


def der_of(pem):
    return subprocess.run(
        ["openssl", "x509", "-outform", "DER"], input=pem, capture_output=True, check=True
    ).stdout


def pem_blocks(path):
    text = open(path).read()
    end = "-----END CERTIFICATE-----"
    return [b + end + "\n" for b in text.split(end) if "-----BEGIN" in b]


def dsse_entry(payload, sig, verifier_pem, envelope):
    """Rekor's dsse 0.0.1 entry, as its canonicalized body."""
    return {
        "apiVersion": "0.0.1",
        "kind": "dsse",
        "spec": {
            "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(envelope).hexdigest()},
            "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
            "signatures": [
                {
                    "signature": base64.b64encode(sig).decode(),
                    "verifier": base64.b64encode(verifier_pem).decode(),
                }
            ],
        },
    }


def tlog_entry(rekor_key, body, integrated_time):
    """A bundle's tlogEntries item: the body and a SET over its canonical payload."""
    log_id = hashlib.sha256(b"hostpull test rekor").digest()
    b64body = base64.b64encode(json.dumps(body).encode()).decode()
    promise = {"body": b64body, "integratedTime": int(integrated_time), "logIndex": 1,
               "logID": log_id.hex()}
    canonical = json.dumps(promise, sort_keys=True, separators=(",", ":")).encode()
    return {
        "logIndex": "1",
        "logId": {"keyId": base64.b64encode(log_id).decode()},
        "kindVersion": {"kind": body["kind"], "version": body["apiVersion"]},
        "integratedTime": str(int(integrated_time)),
        "inclusionPromise": {"signedEntryTimestamp": base64.b64encode(sign_p256(rekor_key, canonical)).decode()},
        "canonicalizedBody": b64body,
    }


BUNDLE_V03 = "application/vnd.dev.sigstore.bundle.v0.3+json"
BUNDLE_V02 = "application/vnd.dev.sigstore.bundle+json;version=0.2"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def make_bundle(hexd, key, cert, chain, rekor, integrated_time):
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"digest": {"sha256": hexd}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    }
    payload = json.dumps(statement).encode()
    ptype = "application/vnd.in-toto+json"
    pae = f"DSSEv1 {len(ptype)} {ptype} {len(payload)} ".encode() + payload
    sig = sign_p256(key, pae)
    envelope = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": ptype,
        "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
    }
    material = {}
    media_type = BUNDLE_V03
    if cert is None:
        material["publicKey"] = {"hint": ""}
        verifier = subprocess.run(["openssl", "pkey", "-in", key, "-pubout"],
                                  capture_output=True, check=True).stdout
    else:
        verifier = open(cert, "rb").read()
        raw = base64.b64encode(der_of(verifier)).decode()
        if chain:
            media_type = BUNDLE_V02
            certs = [raw] + [base64.b64encode(der_of(p.encode())).decode()
                             for p in pem_blocks(chain)[:-1]]
            material["x509CertificateChain"] = {"certificates": [{"rawBytes": c} for c in certs]}
        else:
            material["certificate"] = {"rawBytes": raw}
    if rekor:
        body = dsse_entry(payload, sig, verifier, json.dumps(envelope).encode())
        material["tlogEntries"] = [tlog_entry(rekor, body, integrated_time)]
    return json.dumps({"mediaType": media_type, "verificationMaterial": material,
                       "dsseEnvelope": envelope}).encode()


def bundle_main(args):
    signed = option(args, "--payload-digest")
    cert = option(args, "--cert")
    chain = option(args, "--chain")
    rekor = option(args, "--rekor")
    integrated_time = option(args, "--integrated-time")
    fault = option(args, "--fault")
    registry, repo, hexd, spec = args
    kind, key = spec.split(":", 1)
    if kind != "p256":
        sys.exit(f"unknown key kind {kind}")
    call = client(registry)
    bundle = make_bundle(signed or hexd, key, cert, chain, rekor, integrated_time)
    if fault == "junk-bundle":
        bundle = b"this is not a bundle"
    elif fault == "huge-bundle":
        bundle = bundle[:-1] + b" " * (5 << 20) + b"}"
    accept = f"{OCI_MANIFEST}, {OCI_INDEX}, application/vnd.docker.distribution.manifest.v2+json"
    headers, subject = call("GET", f"/v2/{repo}/manifests/sha256:{hexd}", accept=accept)
    empty = upload(call, repo, b"{}")
    referrer = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_V03,
        "config": dict(empty, mediaType="application/vnd.oci.empty.v1+json"),
        "layers": [dict(upload(call, repo, bundle), mediaType=BUNDLE_V03)],
        "subject": {"mediaType": headers["Content-Type"], "digest": "sha256:" + hexd,
                    "size": len(subject)},
    }
    raw = json.dumps(referrer).encode()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    call("PUT", f"/v2/{repo}/manifests/{digest}", raw, OCI_MANIFEST)
    entry = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(raw),
             "artifactType": BUNDLE_V03}
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
    ctype = OCI_INDEX
    if fault == "not-index":
        index, ctype = referrer, OCI_MANIFEST
    call("PUT", f"/v2/{repo}/manifests/sha256-{hexd}", json.dumps(index).encode(), ctype)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--bundle":
        return bundle_main(args[1:])
    signed = option(args, "--payload-digest")
    cert = option(args, "--cert")
    chain = option(args, "--chain")
    rekor = option(args, "--rekor")
    integrated_time = option(args, "--integrated-time")
    registry, repo, hexd, identity, *keys = args
    call = client(registry)

    def blob(data):
        return upload(call, repo, data)

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
