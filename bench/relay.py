#!/usr/bin/env python3
"""bench/relay.py - a TCP relay that puts a link between the rig's registry and a pull.

    relay.py TARGET_HOST:PORT COUNTS_FILE [--delay-ms 20] [--flow-rate 16M]
             [--link-rate 64M] [--init-cwnd 0] [--log FILE]

Listens on 127.0.0.1 (a free port, printed as the first word of the first stdout
line, as bench/countfwd.py does, then "listening" and the settings as KEY=VALUE,
rates in bytes/s) and forwards every connection to TARGET, bytes
untouched: TLS passes through (a TCP relay, not a proxy). On the way:

- every chunk is delayed by DELAY ms each way (20: a 40 ms round trip). Each chunk
  is stamped when it is read and written out at its stamp + DELAY, while the next
  ones are already read: a pipeline, as a real link holds its bandwidth-delay
  product in flight, not a stop-and-wait.
- a new connection pays the TCP handshake's round trip: what the client sends is
  held until one round trip after the accept (the client's connect() returns at
  once on loopback; over a link its first byte leaves one round trip later).
- downloads (registry to client) are paced: each connection to FLOW_RATE, all of
  them together to LINK_RATE (bytes per second; K, M, G are powers of 1000, Ki, Mi,
  Gi of 1024; 0: no limit). A chunk leaves when both the connection and the link
  have sent what was queued before it (a fluid model; 5 ms of credit at most, for
  the event loop's late wakeups), then
  travels DELAY. Uploads (the requests) are delayed only.
- INIT_CWND (segments of 1448 bytes; 0, the default: off) adds TCP slow start to
  each download: in its k-th round trip a connection sends at most
  INIT_CWND * 2^k segments (cumulative, no loss, no restart after idle).

Counters, one line "CONNECTIONS DOWN_BYTES UP_BYTES OPEN" in COUNTS_FILE, replaced
atomically at each accept and close, every 100 ms while bytes move, and on
SIGTERM (then the relay exits): connections accepted, bytes written to clients
and to the registry, connections open. With --log, a line per closed connection:
"ACCEPT_S CLOSE_S DOWN_BYTES UP_BYTES" (seconds since the relay started). The
registry speaks TLS and nothing here resumes sessions, so TLS handshakes = connections.
Python 3 standard library only.
"""
import argparse
import asyncio
import os
import signal
import socket
import sys

CHUNK = 1 << 16
SEGMENT = 1448
BUFFER = 4 << 20  # socket buffers (the kernel caps them at net.core.[rw]mem_max)
SLACK = 0.005  # a pacer idle this long has no credit left: it may catch up on a late wakeup


def rate(text):
    units = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30}
    t = text.strip().upper().removesuffix("B/S").removesuffix("/S")
    num = t.rstrip("KMGI")
    if not num or t[len(num):] not in units:
        raise argparse.ArgumentTypeError(f"not a rate: {text!r}")
    return float(num) * units[t[len(num):]]


class Relay:
    def __init__(self, args):
        self.target_host, port = args.target.rsplit(":", 1)
        self.target_port = int(port)
        self.counts = args.counts
        self.delay = args.delay_ms / 1000.0
        self.flow_rate = args.flow_rate
        self.link_rate = args.link_rate
        self.init_cwnd = args.init_cwnd * SEGMENT
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.link_free = 0.0  # when the shared link has sent all that was queued on it
        self.accepted = self.down = self.up = self.open = 0
        self.dirty = False
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()

    def write_counts(self):
        tmp = f"{self.counts}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{self.accepted} {self.down} {self.up} {self.open}\n")
        os.replace(tmp, self.counts)
        self.dirty = False

    async def flush_counts(self):
        while True:
            await asyncio.sleep(0.1)
            if self.dirty:
                self.write_counts()

    def depart(self, flow, n, now):
        """When a chunk of n bytes of this flow has crossed the bottleneck."""
        t = now
        if self.link_rate:
            self.link_free = max(now - SLACK, self.link_free) + n / self.link_rate
            t = max(t, self.link_free)
        if self.flow_rate:
            flow["free"] = max(now - SLACK, flow["free"]) + n / self.flow_rate
            t = max(t, flow["free"])
        if self.init_cwnd:
            if flow["first"] is None:
                flow["first"] = now
            # round k may end with INIT_CWND * (2^(k+1) - 1) bytes sent in all
            k, allowed = 0, self.init_cwnd
            while allowed < flow["sent"] + n:
                k += 1
                allowed += self.init_cwnd << k
            t = max(t, flow["first"] + k * 2 * self.delay)
        flow["sent"] += n
        return t

    async def pump(self, reader, source, writer, down, floor, conn):
        """Copy reader to writer, each chunk released DELAY after it left the bottleneck
        (downloads) or after it was read (no earlier than floor: the handshake). If the
        writer's peer goes away, the source (the reader's writer) is closed too."""
        queue = asyncio.Queue()
        space = asyncio.Event()
        space.set()
        limit = max(8 << 20, int(2 * self.delay * max(self.flow_rate, self.link_rate, 1)))
        queued = 0
        broken = []
        flow = {"free": 0.0, "first": None, "sent": 0}

        async def send():
            nonlocal queued
            try:
                while (item := await queue.get()) is not None:
                    at, data = item
                    wait = at - self.loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    writer.write(data)
                    await writer.drain()
                    queued -= len(data)
                    if queued < limit:
                        space.set()
                    if down:
                        self.down += len(data)
                    else:
                        self.up += len(data)
                    conn[down] += len(data)
                    self.dirty = True
                if writer.can_write_eof():
                    writer.write_eof()
            except OSError:
                broken.append(True)
                space.set()
                source.close()

        sender = asyncio.create_task(send())
        last = 0.0
        try:
            while not broken and (data := await reader.read(CHUNK)):
                now = self.loop.time()
                if down:
                    t = self.depart(flow, len(data), now)
                    if t > now:
                        await asyncio.sleep(t - now)   # the bottleneck holds the next chunk
                else:
                    t = max(now, floor)
                last = max(last, t + self.delay)       # in order, as TCP delivers
                queued += len(data)
                queue.put_nowait((last, data))
                if queued >= limit:
                    space.clear()
                    await space.wait()
        except OSError:
            pass
        queue.put_nowait(None)
        await sender

    async def handle(self, creader, cwriter):
        accepted = self.loop.time()
        self.accepted += 1
        self.open += 1
        self.write_counts()
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
            s.setblocking(False)
            await self.loop.sock_connect(s, (self.target_host, self.target_port))
            ureader, uwriter = await asyncio.open_connection(sock=s)
        except OSError as e:
            print(f"relay: connecting to {self.target_host}:{self.target_port}: {e}", file=sys.stderr)
            cwriter.close()
            self.open -= 1
            self.write_counts()
            return
        conn = {True: 0, False: 0}  # bytes down, up
        await asyncio.gather(
            self.pump(creader, cwriter, uwriter, False, accepted + 2 * self.delay, conn),
            self.pump(ureader, uwriter, cwriter, True, 0.0, conn),
        )
        for w in (cwriter, uwriter):
            w.close()
        self.open -= 1
        self.write_counts()
        if self.log:
            self.log.write(f"{accepted - self.t0:.3f} {self.loop.time() - self.t0:.3f} "
                           f"{conn[True]} {conn[False]}\n")


async def main(args):
    relay = Relay(args)
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)  # accepted sockets inherit them
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
    lst.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(relay.handle, sock=lst, backlog=128, limit=CHUNK)
    relay.write_counts()
    print(lst.getsockname()[1], "listening", f"delay_ms={args.delay_ms:g}", f"flow_rate={args.flow_rate:.0f}",
          f"link_rate={args.link_rate:.0f}", f"init_cwnd={args.init_cwnd}", flush=True)
    stop = asyncio.Event()
    relay.loop.add_signal_handler(signal.SIGTERM, stop.set)
    relay.loop.add_signal_handler(signal.SIGINT, stop.set)
    flusher = asyncio.create_task(relay.flush_counts())
    await stop.wait()
    flusher.cancel()
    server.close()
    relay.write_counts()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("target", help="HOST:PORT to forward to")
    p.add_argument("counts", help="file for the counters")
    p.add_argument("--delay-ms", type=float, default=20.0, help="one way (20)")
    p.add_argument("--flow-rate", type=rate, default=rate("16M"), help="per connection (16M)")
    p.add_argument("--link-rate", type=rate, default=rate("64M"), help="all together (64M)")
    p.add_argument("--init-cwnd", type=int, default=0, help="slow start from N segments (0: off)")
    p.add_argument("--log", help="a line per closed connection")
    asyncio.run(main(p.parse_args()))
