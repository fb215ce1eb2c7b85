#!/usr/bin/env python3
"""bench/countfwd.py - a byte-counting TCP forwarder for bench/rate.sh.

    countfwd.py TARGET_HOST:PORT SAMPLES_FILE

Listens on 127.0.0.1 (a free port, printed as the first word of the first
stdout line), forwards every connection to TARGET, and every 20 ms appends
"SECONDS BYTES" to SAMPLES_FILE: the time since start and the bytes towards
the clients that their side has acknowledged so far (what crossed the "link":
those written less what still waits in this forwarder's send buffers, SIOCOUTQ,
which Linux grows to 4 MiB on loopback). Stops on SIGTERM.
"""
import fcntl
import signal
import socket
import struct
import sys
import termios
import threading
import time

target_host, target_port = sys.argv[1].rsplit(":", 1)
samples_path = sys.argv[2]
down = 0
lock = threading.Lock()
clients = []


def pump(src, dst, count):
    global down
    try:
        while True:
            b = src.recv(1 << 16)
            if not b:
                break
            dst.sendall(b)
            if count:
                with lock:
                    down += len(b)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve(listener):
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection((target_host, int(target_port)))
        with lock:
            clients.append(client)
        threading.Thread(target=pump, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, True), daemon=True).start()


def unacked(s):
    """Bytes written to s that its peer has not acknowledged (SIOCOUTQ)."""
    try:
        return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except OSError:
        return 0


def sample(t0):
    seen = 0
    with open(samples_path, "w") as f:
        while True:
            with lock:
                seen = max(seen, down - sum(unacked(c) for c in clients))
            f.write(f"{time.monotonic() - t0:.3f} {seen}\n")
            f.flush()
            time.sleep(0.02)


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(64)
print(listener.getsockname()[1], "listening", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
threading.Thread(target=serve, args=(listener,), daemon=True).start()
sample(time.monotonic())
