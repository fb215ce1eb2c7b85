#!/usr/bin/env python3
"""tests/moving_registry.py - a registry whose tag moves when a credential is refused.

    MOVING_AUTH="FIRST:PASS SECOND:PASS" moving_registry.py FIRST_LAYOUT THEN_LAYOUT LOG \\
        --cert CRT --key KEY

Over TLS on 127.0.0.1, serves `moving/os:v1` from two OCI layouts (each with tag v1):
the tag names FIRST_LAYOUT's manifest until a blob is refused, THEN_LAYOUT's after.
Every /v2/ request needs HTTP Basic auth by one of the two users, else 401. The first
user may read manifests but every blob GET it makes is refused with 401 (a credential
that lost its pull rights halfway, as kubelet's keyring meets it); the second may read
everything. Manifests by digest and blobs come from either layout. Appends a JSON line
per request to LOG: user, method, path, status. Prints the port, then serves until killed.
"""

import argparse
import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler

from httpd import serve

REPO = "moving/os"
TAG = "v1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def tagged_manifest(layout):
    """The digest of LAYOUT's manifest tagged v1."""
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    for m in index["manifests"]:
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == TAG:
            return m["digest"]
    raise SystemExit(f"{layout}: no manifest tagged {TAG}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("first")
    p.add_argument("then")
    p.add_argument("log")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    a = p.parse_args()
    users = dict(u.split(":", 1) for u in os.environ["MOVING_AUTH"].split())
    first_user = os.environ["MOVING_AUTH"].split(":", 1)[0]
    tags = [tagged_manifest(a.first), tagged_manifest(a.then)]
    state = {"moved": False}
    lock = threading.Lock()

    def blob(digest):
        algo, _, hexd = digest.partition(":")
        for layout in (a.first, a.then):
            path = os.path.join(layout, "blobs", algo, hexd)
            if hexd.isalnum() and os.path.isfile(path):
                with open(path, "rb") as f:
                    return f.read()
        return None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def user(self):
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Basic "):
                return None
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return None
            return user if users.get(user) == password else None

        def reply(self, user, status, body=b"", ctype="application/json", head=False):
            with lock:
                with open(a.log, "a") as f:
                    f.write(json.dumps({"user": user, "method": self.command,
                                        "path": self.path, "status": status}) + "\n")
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="moving"')
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if body and ctype == OCI_MANIFEST:
                self.send_header("Docker-Content-Digest", self.digest)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def do_GET(self, head=False):
            user = self.user()
            if user is None:
                return self.reply(None, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', head=head)
            prefix = f"/v2/{REPO}/"
            if self.path == "/v2/":
                return self.reply(user, 200, b"{}", head=head)
            if self.path.startswith(prefix + "manifests/"):
                ref = self.path[len(prefix + "manifests/"):]
                with lock:
                    self.digest = tags[state["moved"]] if ref == TAG else ref
                body = blob(self.digest) if self.digest.startswith("sha256:") else None
                if body is None:
                    return self.reply(user, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}',
                                      head=head)
                return self.reply(user, 200, body, OCI_MANIFEST, head)
            if self.path.startswith(prefix + "blobs/"):
                if user == first_user:
                    with lock:
                        state["moved"] = True
                    return self.reply(user, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                                      head=head)
                body = blob(self.path[len(prefix + "blobs/"):])
                if body is None:
                    return self.reply(user, 404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}',
                                      head=head)
                return self.reply(user, 200, body, "application/octet-stream", head)
            return self.reply(user, 404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', head=head)

        def do_HEAD(self):
            self.do_GET(head=True)

    serve(Handler, a.cert, a.key)


if __name__ == "__main__":
    main()
