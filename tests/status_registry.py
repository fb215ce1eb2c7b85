#!/usr/bin/env python3
"""tests/status_registry.py - a registry that fails with the HTTP status a repository names.

    status_registry.py --cert CRT --key KEY

Over TLS on 127.0.0.1, for any repository `…/s<CODE>-<WHERE>[-text][-<N>]`: WHERE `m`
answers the manifest GET with CODE, `b` answers the layer's blob GET with it (the manifest
and config are served); with `-N`, only the first N requests for it, and then serves it.
The error body is a distribution JSON error whose message is full of words an error
classifier might read, cut as Go cuts its errors ("connection reset: eof: certificate"),
or with `-text` plain text saying the same. A 401 carries a bearer challenge with
`error="invalid_token"`, as a registry sends it, which skopeo merges with the body; a 429
says `Retry-After: 0`, so that skopeo's own retries (5, containers/image's
makeRequestToResolvedURL) do not wait. 3xx codes redirect to the same URL, forever. What
comes before the last path component is free: tests put misleading words there too.
Prints the port, then serves until killed.
"""

import argparse
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler

from httpd import serve


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


LAYER = b"0123456789"
CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
MANIFEST = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": sha256(CONFIG), "size": len(CONFIG)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": sha256(LAYER), "size": len(LAYER)}]}).encode()
WORDS = "connection reset: eof: certificate: x509: unauthorized"
CODES = {401: "UNAUTHORIZED", 403: "DENIED", 404: "MANIFEST_UNKNOWN", 429: "TOOMANYREQUESTS"}
SEEN = {}  # path -> requests answered with the error so far (for `-N`)
SEEN_LOCK = threading.Lock()


def fail_this_time(path, limit):
    """True while `path` has had fewer than `limit` (None: no limit) errors."""
    if limit is None:
        return True
    with SEEN_LOCK:
        SEEN[path] = SEEN.get(path, 0) + 1
        return SEEN[path] <= limit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if self.path == "/v2/":
            return self.send(200, b"{}")
        # /v2/<repo…>/(manifests|blobs)/<ref>
        parts = self.path.split("/")
        kind, ref, spec = parts[-2], parts[-1], parts[-3].split("-")
        code, where = int(spec[0][1:]), spec[1]
        text = "text" in spec[2:]
        limit = next((int(s) for s in spec[2:] if s.isdigit()), None)
        ours = (where, kind) == ("m", "manifests") or ((where, kind) == ("b", "blobs") and ref == sha256(LAYER))
        if ours and fail_this_time(self.path, limit):
            if 300 <= code < 400:
                return self.send(code, b"", [("Location", self.path)])
            headers = []
            if code == 401:
                headers.append(("WWW-Authenticate",
                                f'Bearer realm="https://127.0.0.1:{self.server.server_address[1]}/token",'
                                'service="status",error="invalid_token"'))
            if code == 429:
                headers.append(("Retry-After", "0"))
            if text:
                return self.send(code, (WORDS + "\n").encode(), headers + [("Content-Type", "text/plain")])
            body = {"errors": [{"code": CODES.get(code, "UNKNOWN"), "message": WORDS}]}
            return self.send(code, json.dumps(body).encode(), headers + [("Content-Type", "application/json")])
        if kind == "manifests":
            return self.send(200, MANIFEST, [
                ("Content-Type", "application/vnd.oci.image.manifest.v1+json"),
                ("Docker-Content-Digest", sha256(MANIFEST))])
        blob = {sha256(CONFIG): CONFIG, sha256(LAYER): LAYER}.get(ref)
        if blob is None:
            return self.send(404, b"")
        self.send(200, blob, [("Content-Type", "application/octet-stream")])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    a = p.parse_args()
    serve(Handler, a.cert, a.key)


if __name__ == "__main__":
    main()
