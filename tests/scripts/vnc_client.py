"""A third-party RFB client (vncdotool, from PyPI) driven line by line by
tests/system/rfb_client.rs, to show with a client that is not ours that a view capability shows
the desktop and takes no input, and that a control capability does take it.

Usage: vnc_client.py SOCKET, where SOCKET is a unix socket the test bridges to a capability's
websocket. One connection for the whole session. Commands on stdin, one per line, each answered
by one line on stdout ("ok <command>", or "error <why>" and exit 1):

  expect R G B X Y W H   wait (full, then incremental updates) until the W x H region at X, Y is
                         the colour R G B
  input X Y KEYS         move the pointer to X, Y, click button 1, press each character of KEYS,
                         then a full update request: when it is answered, the server has taken
                         every message sent before it
  quit
"""

import os
import sys
import tempfile

from PIL import Image
from vncdotool import api

# The longest any one command may take; the Rust test bounds the whole session too.
TIMEOUT_S = 60


def main() -> int:
    socket = sys.argv[1]
    client = api.connect(socket, timeout=TIMEOUT_S)
    scratch = tempfile.mkdtemp(prefix="vnc-client-")
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            command = words[0]
            if command == "quit":
                break
            if command == "expect":
                r, g, b, x, y, w, h = (int(v) for v in words[1:8])
                target = os.path.join(scratch, f"{r}-{g}-{b}-{w}x{h}.png")
                Image.new("RGB", (w, h), (r, g, b)).save(target)
                client.expectRegion(target, x, y, 0)
            elif command == "input":
                x, y, keys = int(words[1]), int(words[2]), words[3]
                client.mouseMove(x, y)
                client.mousePress(1)
                for key in keys:
                    client.keyPress(key)
                client.refreshScreen(False)
            else:
                print(f"error unknown command {command!r}", flush=True)
                return 1
            print(f"ok {command}", flush=True)
    except Exception as error:  # the test reads the reason from stdout
        print(f"error {type(error).__name__}: {error}", flush=True)
        return 1
    finally:
        client.disconnect()
        api.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
