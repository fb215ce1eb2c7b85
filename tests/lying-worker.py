#!/usr/bin/python3
# tests/lying-worker.py - a compromised worker, through --skopeo. `inspect` runs
# the real skopeo, so the manifest is honest; as the image proxy it speaks the
# protocol of the real one (GetBlob, and GetRawBlob from 0.2.8 on) but sends
# every blob with its bytes flipped (the right length) and reports success.
# Only root's own hashing can catch that, which is what the test shows.
# Beside this script: `real-skopeo` (its path) and `protocol` (what it answers).
import json
import os
import socket
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
real = open(os.path.join(here, "real-skopeo")).read().strip()
protocol = open(os.path.join(here, "protocol")).read().strip()
if "experimental-image-proxy" not in sys.argv:
    os.execv(real, ["skopeo"] + sys.argv[1:])

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
        reply(protocol)
    elif method == "OpenImage":
        # The blob sizes, for GetRawBlob (which is not told them): from the
        # real manifest, fetched with the options this proxy was started with.
        at = sys.argv.index("experimental-image-proxy")
        raw = subprocess.run([real] + sys.argv[1:at] + ["inspect", "--raw"] + sys.argv[at + 1:]
                             + [args[0]], check=True, capture_output=True).stdout
        m = json.loads(raw)
        sizes = {d["digest"]: d["size"] for d in [m["config"]] + m["layers"]}
        reply(1)
    elif method == "GetBlob":
        size = args[2]
        r, w = os.pipe()
        pipeid = len(pipes) + 1
        pipes[pipeid] = (w, size)
        reply(size, pipeid, [r])
        os.close(r)
    elif method == "GetRawBlob":  # 0.2.8: no FinishPipe; an error pipe says "fine"
        size = sizes[args[1]]
        r, w = os.pipe()
        er, ew = os.pipe()
        reply(size, 0, [r, er])
        os.close(r)
        os.close(er)
        os.write(w, b"\xff" * size)
        os.close(w)
        os.close(ew)
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
