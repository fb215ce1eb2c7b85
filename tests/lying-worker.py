#!/usr/bin/python3
# tests/lying-worker.py - a compromised or flaky worker, through --skopeo. `inspect`
# runs the real skopeo, so the manifest is honest. As the image proxy it speaks
# exactly the protocol it claims: GetBlob and FinishPipe below 0.2.8, GetRawBlob from
# 0.2.8 on, and the other way of fetching a blob is an unknown method (a real 0.2.8
# proxy would still serve GetBlob: refusing it proves hostpull uses GetRawBlob).
# Beside this script: `real-skopeo` (its path), `protocol` (what it answers), `mode`:
#   lie            every blob comes with its bytes flipped (the right length) and
#                  success. Only root's own hashing can catch that.
#   retryable PORT the blobs are honest, from the real skopeo run as a proxy behind
#                  this one, except one GetRawBlob reply: `error_code: "retryable"`.
#                  Which one: the first, in the session that takes the test's token
#                  (a connection 127.0.0.1:PORT accepts once and answers "1"). A unit
#                  keeps no file from one session to the next, so the token is there.
import json
import os
import socket
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
real = open(os.path.join(here, "real-skopeo")).read().strip()
protocol = open(os.path.join(here, "protocol")).read().strip()
mode = open(os.path.join(here, "mode")).read().split()
if "experimental-image-proxy" not in sys.argv:
    os.execv(real, ["skopeo"] + sys.argv[1:])
raw_blobs = tuple(int(x) for x in protocol.split(".")) >= (0, 2, 8)

sock = socket.socket(fileno=0)  # the orchestrator's SOCK_SEQPACKET end
pipes = {}
sizes = {}

# retryable: the real proxy, with the options this one was started with.
upstream = None
if mode[0] == "retryable":
    upstream, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    subprocess.Popen([real] + sys.argv[1:], stdin=theirs)
    theirs.close()
token = None  # whether this session fails a GetRawBlob; asked at the first


def reply(value=None, pipeid=0, fds=()):
    msg = json.dumps({"success": True, "value": value, "pipeid": pipeid, "error": ""})
    socket.send_fds(sock, [msg.encode()], list(fds))


def failure(error, code=""):
    msg = {"success": False, "value": None, "pipeid": 0, "error": error}
    if code:
        msg["error_code"] = code
    sock.sendmsg([json.dumps(msg).encode()])


def call(method, args):
    """A request to the real proxy: its reply and the fds that came with it."""
    upstream.send(json.dumps({"method": method, "args": args}).encode())
    data, fds, _, _ = socket.recv_fds(upstream, 1 << 16, 2)
    return json.loads(data), fds


def take_token():
    try:
        with socket.create_connection(("127.0.0.1", int(mode[1])), timeout=5) as c:
            return c.recv(1) == b"1"
    except OSError:
        return False


while True:
    data = sock.recv(1 << 16)
    if not data:
        break
    req = json.loads(data)
    method, args = req["method"], req.get("args", [])
    if method == "Initialize":
        if upstream:
            call(method, args)
        reply(protocol)
    elif method == "OpenImage":
        # The blob sizes, for GetRawBlob (which is not told them): from the
        # real manifest, fetched with the options this proxy was started with.
        at = sys.argv.index("experimental-image-proxy")
        raw = subprocess.run([real] + sys.argv[1:at] + ["inspect", "--raw"] + sys.argv[at + 1:]
                             + [args[0]], check=True, capture_output=True).stdout
        m = json.loads(raw)
        sizes = {d["digest"]: d["size"] for d in [m["config"]] + m["layers"]}
        if upstream:
            r, fds = call(method, args)
            sock.sendmsg([json.dumps(r).encode()])
        else:
            reply(1)
    elif method == "GetBlob" and not raw_blobs:
        size = args[2]
        r, w = os.pipe()
        pipeid = len(pipes) + 1
        pipes[pipeid] = (w, size)
        reply(size, pipeid, [r])
        os.close(r)
    elif method == "GetRawBlob" and raw_blobs:  # no FinishPipe; an error pipe
        size = sizes[args[1]]
        if upstream:
            if token is None:
                token = take_token()
                if token:
                    failure("lying-worker refuses this blob once", "retryable")
                    continue
            # The real proxy's GetBlob (any version has it), its pipe handed on.
            r, fds = call("GetBlob", [args[0], args[1], size])
            if not r["success"]:
                sock.sendmsg([json.dumps(r).encode()])
                continue
            er, ew = os.pipe()
            reply(size, 0, [fds[0], er])
            os.close(fds[0])
            os.close(er)
            done, _ = call("FinishPipe", [r["pipeid"]])
            if not done["success"]:
                os.write(ew, json.dumps({"code": done.get("error_code") or "other",
                                         "message": done["error"]}).encode())
            os.close(ew)
            continue
        r, w = os.pipe()
        er, ew = os.pipe()
        reply(size, 0, [r, er])
        os.close(r)
        os.close(er)
        os.write(w, b"\xff" * size)
        os.close(w)
        os.close(ew)
    elif method == "FinishPipe" and not raw_blobs:
        w, size = pipes.pop(args[0])
        os.write(w, b"\xff" * size)  # the right length, the wrong bytes
        os.close(w)
        reply()
    elif method == "CloseImage":
        if upstream:
            call(method, args)
        reply()
    elif method == "Shutdown":  # no reply: the proxy exits
        if upstream:
            upstream.send(data)
        break
    else:
        failure("unknown method " + method)
