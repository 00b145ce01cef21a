//! Scripts a system test runs *inside* a computer (through exec) to attack its boundaries.
//! Each prints one line per finding, in a form the test parses; all need only python3 (on the
//! host and in the computer image).

/// Every listening TCP port this machine's network namespace shows (`/proc/net/tcp{,6}`), each
/// asked `GET /json/version` on loopback: prints `devtools: none` or `devtools: <host:port> ...`
/// for those that answer like Chrome's DevTools endpoint.
pub const DEVTOOLS_SCAN: &str = r#"
import socket
ports = set()
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        for line in open(f).read().splitlines()[1:]:
            p = line.split()
            if p[3] == "0A":
                ports.add(int(p[1].rsplit(":", 1)[1], 16))
    except OSError:
        pass
hits = []
for port in sorted(ports):
    for host in ("127.0.0.1", "::1"):
        data = b""
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.settimeout(2)
            # HTTP/1.1: Chrome's DevTools server does not answer HTTP/1.0.
            s.sendall(b"GET /json/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            while len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except Exception:
            pass  # a timeout keeps what arrived before it
        if b"webSocketDebuggerUrl" in data or b"Protocol-Version" in data or b'"Browser"' in data:
            hits.append("%s:%d" % (host, port))
print("devtools:", " ".join(hits) or "none", "(%d listeners asked)" % len(ports))
"#;

/// Connects to every X display socket in `/tmp/.X11-unix` without a cookie (the X11 connection
/// setup with no authorization): prints `x11 <socket>: refused|open|authenticate`.
pub const X11_WITHOUT_COOKIE: &str = r#"
import os, socket, struct
d = "/tmp/.X11-unix"
names = sorted(os.listdir(d)) if os.path.isdir(d) else []
if not names:
    print("x11: no displays")
for n in names:
    path = os.path.join(d, n)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(path)
        s.sendall(struct.pack("<cxHHHH2x", b"l", 11, 0, 0, 0))
        r = s.recv(8)
        s.close()
    except Exception as e:
        print("x11 %s: unreachable (%s)" % (n, type(e).__name__))
        continue
    status = {0: "refused", 1: "open", 2: "authenticate"}.get(r[0] if r else 0, "refused")
    print("x11 %s: %s" % (n, status))
"#;

/// Tries to read what belongs to the control plane or to another computer, given as argv:
/// `python3 -c PROBE <path>...`. Prints `read <path>: refused|absent|READ`.
pub const READ_PATHS: &str = r#"
import os, sys
for p in sys.argv[1:]:
    try:
        if os.path.isdir(p):
            os.listdir(p)
        else:
            open(p, "rb").read(1)
        print("read %s: READ" % p)
    except FileNotFoundError:
        print("read %s: absent" % p)
    except OSError:
        print("read %s: refused" % p)
"#;

/// Asks the control plane's HTTP API from inside, without a token: `python3 -c PROBE host port`.
/// Prints `api: <status line>`.
pub const API_WITHOUT_TOKEN: &str = r#"
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    s.sendall(b"GET /v1/computers HTTP/1.0\r\nHost: x\r\n\r\n")
    print("api:", s.recv(4096).split(b"\r\n", 1)[0].decode())
except Exception as e:
    print("api: unreachable", type(e).__name__)
"#;
