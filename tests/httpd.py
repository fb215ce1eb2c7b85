#!/usr/bin/env python3
"""tests/httpd.py - the HTTP(S) servers of the tests, and what they share.

    httpd.py static DIR [--cert CRT --key KEY]

As a program: a static file server of DIR on 127.0.0.1 (a signature lookaside), HTTPS with
CRT and KEY. It logs each request to stderr as `PATH STATUS uid=UID`, with the uid that
owns the client's socket (from /proc/net/tcp): who fetched, root or the worker. Prints
the port, then serves until killed.

As a module: listen() and serve(), which tests/status_registry.py, moving_registry.py
and hostile_registry.py serve their registries with.
"""

import argparse
import functools
import ssl
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


def listen(handler, cert=None, key=None, addr="127.0.0.1", port=0):
    """A threading server of HANDLER on ADDR:PORT (0: a free port), over TLS with CERT
    and KEY when given, not yet serving."""
    httpd = ThreadingHTTPServer((addr, port), handler)
    httpd.daemon_threads = True
    if cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    return httpd


def serve_in_background(httpd):
    """Serve HTTPD on a daemon thread; its port."""
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]


def serve(handler, cert=None, key=None):
    """Serve HANDLER on 127.0.0.1 at a free port: print the port, then serve until
    killed."""
    httpd = listen(handler, cert, key)
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


class Static(SimpleHTTPRequestHandler):
    """Files of a directory; each request logged with the uid of the client's socket."""

    def log_request(self, code="-", size="-"):
        port = "%04X" % self.client_address[1]
        uid = "?"
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[1].endswith(":" + port) and fields[2].endswith(":%04X" % self.server.server_port):
                    uid = fields[7]
        sys.stderr.write("%s %s uid=%s\n" % (self.path, int(code), uid))
        sys.stderr.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    static = sub.add_parser("static")
    static.add_argument("dir")
    static.add_argument("--cert")
    static.add_argument("--key")
    a = p.parse_args()
    serve(functools.partial(Static, directory=a.dir), a.cert, a.key)


if __name__ == "__main__":
    main()
