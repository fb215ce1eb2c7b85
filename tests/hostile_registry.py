#!/usr/bin/env python3
"""tests/hostile_registry.py - a malicious container registry, for tests/worker/hostile.rs.

    HOSTILE_AUTH=USER:PASS hostile_registry.py SCENARIO LOG --cert CRT --key KEY [--port N]

Speaks just enough of the Docker Registry HTTP API v2 for skopeo, over TLS on
127.0.0.1, and serves one small OCI image as `hostile/img:v1` (also by its
manifest digest), altered as SCENARIO says (see SCENARIOS). Every /v2/ request
needs HTTP Basic auth with HOSTILE_AUTH, else 401.

Some scenarios start a second server (same cert, another port) standing for a
host that is not the registry: `foreign-urls` names it in a layer's `urls`,
`redirect` sends blob GETs there with a 307 (by another host name, localhost;
`redirect-port` by the same name, 127.0.0.1; `redirect-addr` to another
address, 127.0.0.2, where it listens then, as S3 or a CDN would). It serves
blobs without auth.

Prints "PORT SECOND_PORT" on one line once both listen (SECOND_PORT is 0 when
there is no second server), then serves until killed. Appends a JSON line per
request to LOG: server ("main" or "second"), method, path, host, auth (whether
an Authorization header came with it).
"""

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler

from httpd import listen, serve_in_background

SCENARIOS = {
    "ok": "the image as it is",
    "pinned-mismatch": "any manifest reference, even a foreign digest, gets the manifest",
    "blob-corrupt": "a layer's bytes differ from its digest (same length)",
    "blob-long": "a layer comes with more bytes than its descriptor's size",
    "blob-short": "a layer comes with fewer bytes than its descriptor's size",
    "manifest-huge": "the manifest is over 4 MiB (a big annotation)",
    "many-layers": "the manifest lists 2000 layers",
    "config-not-json": "the config blob is not JSON (right digest and size)",
    "foreign-urls": "a layer descriptor has urls naming the second server",
    "redirect": "blob GETs answer 307 to the same path on the second server, named localhost",
    "redirect-port": "blob GETs answer 307 to the same path on the second server, as 127.0.0.1",
    "redirect-addr": "blob GETs answer 307 to the same path on the second server, at 127.0.0.2",
    # Parser differentials: Go's encoding/json (skopeo) matches keys regardless
    # of case and lets the last repeated key win. A shadow layer and a shadow
    # config are served too, never named by the honest manifest.
    "case-layers": '"Layers" (the shadow layer) after "layers"',
    "case-config": '"Config" (the shadow config) after "config"',
    "case-digest": 'the last layer\'s descriptor has "Digest" and "Size" of the shadow layer',
    "dup-layers": '"layers" twice, the shadow layer in the second',
    "dup-annotation": 'an annotation key twice, with two values',
    "manifest-and-index": 'the manifest also has "manifests" (CVE-2021-41190)',
    "config-urls": "the config descriptor has urls naming the second server",
    "config-array": "the config blob is [] (right digest and size)",
    "config-deep": "the config nests arrays 10,000 deep",
    "config-bad-utf8": "the config has a byte that is not UTF-8 in a label",
    "index-platform-array": "the tag is an index whose entry's platform is an array",
    # What Go and serde read alike: must be accepted, and read alike.
    "benign-extras": "unknown keys, an escaped key, annotations differing in case, keys reordered",
    "docker-schema2": "the image as a Docker schema2 manifest",
    "referrers-huge": "the referrers tag sha256-HEX holds an index over 4 MiB (a big annotation)",
}

REPO = "hostile/img"
# Where the second server listens when not on 127.0.0.1 (all of 127/8 is loopback).
SECOND_ADDR = {"redirect-addr": "127.0.0.2"}
TAG = "v1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type, data):
    return {"mediaType": media_type, "digest": sha256(data), "size": len(data)}


def layer(files):
    """A gzip'd tar of {name: bytes}, reproducible (mtime 0, root owner)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def build_image(scenario, second_port):
    """Returns (manifest bytes, {digest: bytes served for that blob},
    {digest: bytes of another manifest served by digest})."""
    layers = [
        layer({"etc/hostile": b"layer one\n"}),
        layer({"data/hostile.txt": b"hostile registry content\n" * 200}),
    ]
    diff_ids = [sha256(gzip.decompress(l)) for l in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Labels": {"org.hostpull.test": "hostile"}},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()
    if scenario == "config-not-json":
        config = b"this is not JSON {"
    elif scenario == "config-array":
        config = b"[]"
    elif scenario == "config-deep":
        config = config[:-1] + b', "x": ' + b"[" * 10000 + b"]" * 10000 + b"}"
    elif scenario == "config-bad-utf8":
        config = config.replace(b'"hostile"', b'"host\xffile"')
    shadow_layer = layer({"etc/hostile": b"never verified by root\n"})
    shadow_config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Labels": {"org.hostpull.test": "shadow"}},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, config),
        "layers": [descriptor(OCI_LAYER, l) for l in layers],
    }
    if scenario == "docker-schema2":
        manifest["mediaType"] = DOCKER_MANIFEST
        manifest["config"]["mediaType"] = DOCKER_CONFIG
        for l in manifest["layers"]:
            l["mediaType"] = DOCKER_LAYER
    # Every blob is served as it is, unless the scenario tampers with it below.
    blobs = {sha256(b): b for b in [config] + layers + [shadow_layer, shadow_config]}
    extra = {}  # other manifests, by digest
    last = manifest["layers"][-1]["digest"]
    if scenario == "blob-corrupt":
        good = blobs[last]
        blobs[last] = good[:-1] + bytes([good[-1] ^ 0xFF])
    elif scenario == "blob-long":
        blobs[last] += b"\0" * 1024
    elif scenario == "blob-short":
        blobs[last] = blobs[last][:-10]
    elif scenario == "manifest-huge":
        manifest["annotations"] = {"org.hostpull.padding": "x" * (4 << 20)}
    elif scenario == "many-layers":
        # Digests of bytes nobody serves: the client must refuse before fetching.
        manifest["layers"] = [descriptor(OCI_LAYER, b"layer %d" % i) for i in range(2000)]
    elif scenario == "foreign-urls":
        manifest["layers"][-1]["urls"] = [
            f"https://127.0.0.1:{second_port}/v2/{REPO}/blobs/{last}"]
    elif scenario == "config-urls":
        manifest["config"]["urls"] = [
            f"https://127.0.0.1:{second_port}/v2/{REPO}/blobs/{manifest['config']['digest']}"]
    elif scenario == "case-config":
        manifest["Config"] = descriptor(OCI_CONFIG, shadow_config)
    elif scenario == "case-layers":
        manifest["Layers"] = [manifest["layers"][0], descriptor(OCI_LAYER, shadow_layer)]
    elif scenario == "case-digest":
        shadow = descriptor(OCI_LAYER, shadow_layer)
        manifest["layers"][-1]["Digest"] = shadow["digest"]
        manifest["layers"][-1]["Size"] = shadow["size"]
    elif scenario == "manifest-and-index":
        manifest["manifests"] = [{"mediaType": OCI_MANIFEST, "digest": sha256(b"other"),
                                  "size": 5, "platform": {"os": "linux", "architecture": "amd64"}}]
    elif scenario == "benign-extras":
        manifest = {k: manifest[k] for k in reversed(list(manifest))}
        manifest["x-unknown"] = {"Layers": [descriptor(OCI_LAYER, shadow_layer)], "layers": 1}
        manifest["annotations"] = {"org.hostpull.Case": "A", "org.hostpull.case": "a"}
        manifest["layers"][0]["x-extra"] = "ignored by everyone"
    raw = json.dumps(manifest, indent=1).encode()
    # Raw edits, for what a dict cannot hold.
    if scenario == "benign-extras":
        raw = raw.replace(b'"layers"', b'"\\u006cayers"', 1)
    elif scenario == "dup-layers":
        shadow = json.dumps([manifest["layers"][0], descriptor(OCI_LAYER, shadow_layer)])
        raw = raw[:-2] + b',\n "layers": ' + shadow.encode() + b"\n}"
    elif scenario == "dup-annotation":
        raw = raw[:-2] + b',\n "annotations": {"a": "1", "a": "2"}\n}'
    if scenario == "index-platform-array":
        extra[sha256(raw)] = raw
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{
            "mediaType": OCI_MANIFEST, "digest": sha256(raw), "size": len(raw),
            "platform": ["linux", "amd64"]}]}
        raw = json.dumps(index).encode()
    if scenario == "referrers-huge":
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [],
                 "annotations": {"padding": "x" * (5 << 20)}}
        extra["sha256-" + sha256(raw)[len("sha256:"):]] = json.dumps(index).encode()
    return raw, blobs, extra


def media_type(manifest):
    """The manifest's own mediaType, as a registry sends it in Content-Type."""
    try:
        return json.loads(manifest).get("mediaType") or OCI_MANIFEST
    except (ValueError, AttributeError):
        return OCI_MANIFEST


class Registry:
    """What one server serves, and where it logs."""

    def __init__(self, name, scenario, manifest, blobs, log, auth, redirect_port=None,
                 extra=None):
        self.name, self.scenario = name, scenario
        self.manifest, self.blobs = manifest, blobs
        self.extra = extra or {}
        self.digest = sha256(manifest)
        self.log, self.log_lock = log, threading.Lock()
        self.auth = auth  # the Authorization header value we accept; None: no auth
        self.redirect_port = redirect_port

    def record(self, handler):
        line = json.dumps({
            "server": self.name, "method": handler.command, "path": handler.path,
            "host": handler.headers.get("Host"),
            "auth": handler.headers.get("Authorization") is not None,
        })
        with self.log_lock, open(self.log, "a") as f:
            f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile-registry/1"

    def log_message(self, *args):  # the JSON log is enough; keep stderr quiet
        pass

    def do_HEAD(self):
        self.handle_request(head=True)

    def do_GET(self):
        self.handle_request(head=False)

    def reply(self, code, body=b"", headers=(), head=False):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def handle_request(self, head):
        reg = self.server.registry
        reg.record(self)
        json_type = [("Content-Type", "application/json")]
        if reg.auth is not None and self.headers.get("Authorization") != reg.auth:
            body = b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
            return self.reply(401, body, json_type + [
                ("WWW-Authenticate", 'Basic realm="hostile-registry"')], head)
        path = self.path.split("?")[0]
        prefix = f"/v2/{REPO}/"
        if path == "/v2/":
            return self.reply(200, b"{}", json_type, head)
        if path.startswith(prefix + "manifests/"):
            ref = path[len(prefix + "manifests/"):]
            if ref in reg.extra:
                return self.reply(200, reg.extra[ref], [
                    ("Content-Type", media_type(reg.extra[ref])),
                    ("Docker-Content-Digest", ref)], head)
            if ref in (TAG, reg.digest) or reg.scenario == "pinned-mismatch":
                return self.reply(200, reg.manifest, [
                    ("Content-Type", media_type(reg.manifest)),
                    ("Docker-Content-Digest", reg.digest)], head)
            # As a registry says it: a tag it lacks (a signature's, say) is unknown.
            body = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
            return self.reply(404, body, json_type, head)
        elif path == prefix + "tags/list":  # for `skopeo inspect` by hand
            body = json.dumps({"name": REPO, "tags": [TAG]}).encode()
            return self.reply(200, body, json_type, head)
        elif path.startswith(prefix + "blobs/"):
            digest = path[len(prefix + "blobs/"):]
            if digest in reg.blobs:
                if reg.redirect_port:
                    name = {"redirect": "localhost", **SECOND_ADDR}.get(reg.scenario, "127.0.0.1")
                    where = f"https://{name}:{reg.redirect_port}{self.path}"
                    return self.reply(307, b"", [("Location", where)], head)
                return self.reply(200, reg.blobs[digest], [
                    ("Content-Type", "application/octet-stream"),
                    ("Docker-Content-Digest", digest)], head)
        body = b'{"errors":[{"code":"NOT_FOUND","message":"not here"}]}'
        self.reply(404, body, json_type, head)


def serve_registry(registry, port, cert, key, addr="127.0.0.1"):
    httpd = listen(Handler, cert, key, addr, port)
    httpd.registry = registry
    return serve_in_background(httpd)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("log")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    user_pass = os.environ.get("HOSTILE_AUTH")
    if not user_pass or ":" not in user_pass:
        sys.exit("hostile_registry: set HOSTILE_AUTH=USER:PASS")
    auth = "Basic " + base64.b64encode(user_pass.encode()).decode()

    open(a.log, "a").close()

    # The second server comes first: the manifest may name its port.
    second_port = 0
    redirects = a.scenario in ("redirect", "redirect-port", "redirect-addr")
    if a.scenario in ("foreign-urls", "config-urls") or redirects:
        # It listens before the image exists; it gets the image's blobs below.
        second = Registry("second", a.scenario, b"", {}, a.log, None)
        second_port = serve_registry(second, 0, a.cert, a.key, SECOND_ADDR.get(a.scenario, "127.0.0.1"))
    manifest, blobs, extra = build_image(a.scenario, second_port)
    if second_port:
        second.manifest, second.digest, second.blobs = manifest, sha256(manifest), blobs
    main_reg = Registry("main", a.scenario, manifest, blobs, a.log, auth,
                        redirect_port=second_port if redirects else None,
                        extra=extra)
    port = serve_registry(main_reg, a.port, a.cert, a.key)
    print(port, second_port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
