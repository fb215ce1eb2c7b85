#!/usr/bin/python3
# tests/lying-worker.py - a compromised worker, through the HOSTPULL_SKOPEO test
# hook. `inspect` runs the real skopeo, so the manifest is honest; as the image
# proxy it speaks the protocol correctly but sends every blob with its bytes
# flipped (the right length) and reports success. Only root's own hashing can
# catch that, which is what the test shows.
import json
import os
import socket
import sys

if "experimental-image-proxy" not in sys.argv:
    os.execv("/usr/bin/skopeo", ["skopeo"] + sys.argv[1:])

sock = socket.socket(fileno=0)  # the orchestrator's SOCK_SEQPACKET end
pipes = {}


def reply(value=None, pipeid=0, fds=()):
    msg = json.dumps({"success": True, "value": value, "pipeid": pipeid, "error": ""})
    socket.send_fds(sock, [msg.encode()], list(fds))


while True:
    data = sock.recv(1 << 16)
    if not data:
        break
    req = json.loads(data)
    method, args = req["method"], req.get("args", [])
    if method == "Initialize":
        reply("0.2.3")
    elif method == "OpenImage":
        reply(1)
    elif method == "GetBlob":
        size = args[2]
        r, w = os.pipe()
        pipeid = len(pipes) + 1
        pipes[pipeid] = (w, size)
        reply(size, pipeid, [r])
        os.close(r)
    elif method == "FinishPipe":
        w, size = pipes.pop(args[0])
        os.write(w, b"\xff" * size)  # the right length, the wrong bytes
        os.close(w)
        reply()
    elif method in ("CloseImage", "Shutdown"):
        if method == "Shutdown":
            break
        reply()
    else:
        sock.sendmsg([json.dumps({"success": False, "value": None, "pipeid": 0,
                                  "error": "unknown method " + method}).encode()])
