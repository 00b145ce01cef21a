#!/usr/bin/env python3
"""A small dev server for the preview tests (tests/system/previews.rs), run inside a computer.

Standard library only. `python3 preview_app.py PORT [NAME]` serves, on 127.0.0.1:PORT:
  /            a page whose script opens the websocket and the event stream below and shows what
               came back (for a browser and a screenshot)
  /ws          a websocket that echoes every text message, prefixed with "echo:"
  /events      server-sent events: three `tick N` events (ids 1-3, resumed after Last-Event-ID),
               one every 100 ms, then it ends
  /cookie      `?set=V` sets cookie `app=V`; answers the Cookie header it got
  /headers     the request's headers as JSON
  /bytes?n=N   N bytes (streamed in 1 MiB chunks)
  /upload      POST: answers the body's length and SHA-256
"""
import base64
import hashlib
import json
import socket
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT = int(sys.argv[1])
NAME = sys.argv[2] if len(sys.argv) > 2 else "app"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>NAME dev server</title>
<style>body{font:22px sans-serif;margin:40px;background:#f5f7fb;color:#123}
h1{color:#0f766e}.ok{color:#15803d;font-weight:bold}</style></head>
<body><h1>Hello from NAME inside the computer</h1>
<p>websocket: <span id="ws">waiting</span></p>
<p>events: <span id="sse">waiting</span></p>
<script>
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
ws.onopen = () => ws.send("ping over the tunnel");
ws.onmessage = (e) => { const s = document.getElementById("ws"); s.textContent = e.data; s.className = "ok"; ws.close(); };
ws.onerror = () => { document.getElementById("ws").textContent = "error"; };
const got = [];
const es = new EventSource("/events");
es.onmessage = (e) => { got.push(e.data); const s = document.getElementById("sse"); s.textContent = got.join(", ");
  if (got.length === 3) { s.className = "ok"; es.close(); } };
</script></body></html>""".replace("NAME", NAME)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without this, each kept-alive answer waits out
    # the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send(self, status, body, ctype="text/plain", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        q = parse_qs(url.query)
        if url.path == "/":
            self.send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif url.path == "/ws":
            self.websocket()
        elif url.path == "/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            # Event ids let a browser that lost the stream (Chromium drops what is in flight
            # when another test adds a network interface) resume where it was, as SSE intends.
            try:
                first = int(self.headers.get("Last-Event-ID") or "0") + 1
            except ValueError:
                first = 1
            self.wfile.write(b"retry: 100\n\n")
            for i in range(first, 4):
                self.wfile.write(f"id: {i}\ndata: tick {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.1)
            self.close_connection = True
        elif url.path == "/cookie":
            headers = []
            if "set" in q:
                headers.append(("Set-Cookie", f"app={q['set'][0]}; Path=/"))
            self.send(200, (self.headers.get("Cookie") or "").encode(), headers=headers)
        elif url.path == "/headers":
            self.send(200, json.dumps(dict(self.headers.items())).encode(), "application/json")
        elif url.path == "/bytes":
            n = int(q.get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
        else:
            self.send(404, b"not found")

    def do_POST(self):
        if urlparse(self.path).path != "/upload":
            self.send(404, b"not found")
            return
        n = int(self.headers.get("Content-Length", "0"))
        h = hashlib.sha256()
        left = n
        while left > 0:
            b = self.rfile.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
        self.send(200, json.dumps({"bytes": n - left, "sha256": h.hexdigest()}).encode(),
                  "application/json")

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        sock = self.connection
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            op, ln = head[0] & 0x0F, head[1] & 0x7F
            if ln == 126:
                ln = struct.unpack(">H", self.rfile.read(2))[0]
            elif ln == 127:
                ln = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(ln)))
            if op == 8:
                sock.sendall(b"\x88\x00")
                return
            if op == 1:
                out = ("echo:" + data.decode()).encode()
                hdr = bytes([0x81, len(out)]) if len(out) < 126 else \
                    bytes([0x81, 126]) + struct.pack(">H", len(out))
                sock.sendall(hdr + out)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    address_family = socket.AF_INET


Server(("127.0.0.1", PORT), Handler).serve_forever()
