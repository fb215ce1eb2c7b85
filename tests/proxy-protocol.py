#!/usr/bin/python3
# tests/proxy-protocol.py SKOPEO: print the proxy protocol that SKOPEO's
# experimental-image-proxy answers to Initialize (0.2.3 for Debian 12's 1.9.3).
import json
import socket
import subprocess
import sys

ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
proxy = subprocess.Popen([sys.argv[1], "experimental-image-proxy"], stdin=theirs)
theirs.close()
ours.send(json.dumps({"method": "Initialize", "args": []}).encode())
reply = json.loads(ours.recv(1 << 16))
ours.close()
proxy.wait(timeout=10)
if not reply.get("success"):
    sys.exit(f"proxy-protocol: {sys.argv[1]}: {reply.get('error')}")
print(reply["value"])
