#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target under fuzz/corpus/<target>/ (docs/fuzzing.md):
a few small valid inputs each, so a bounded run starts from the formats' real shapes. The tunnel
frames are the golden frames of gateway-proto/tests/golden.rs and the routes the templates of
control-plane/src/route.rs, read from those files, so the seeds follow the code. Deterministic:
run it again after a format change and commit what changed."""
import hashlib
import json
import os
import re
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def write(target, seeds):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for s in seeds:
        name = "seed-" + hashlib.sha1(s).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(s)
    print(f"{target}: {len(seeds)} seeds")


def rfb():
    pixel_format = bytes([0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0])
    encodings = bytes([2, 0]) + struct.pack(">H", 3) + struct.pack(">iii", 0, 7, -223)
    update = bytes([3, 1, 0, 0, 0, 0, 5, 0, 3, 32])
    key = bytes([4, 1, 0, 0, 0, 0, 0, 0x61])
    pointer = bytes([5, 1, 0, 10, 0, 20])
    cut = bytes([6, 0, 0, 0]) + struct.pack(">I", 5) + b"hello"
    cut_ext = bytes([6, 0, 0, 0]) + struct.pack(">i", -4) + b"\x01\x02\x03\x04"
    continuous = bytes([150, 1, 0, 0, 0, 0, 5, 0, 3, 32])
    fence = bytes([248, 0, 0, 0, 0, 0, 0, 3, 2]) + b"ab"
    xvp = bytes([250, 0, 1, 2])
    desktop = bytes([251, 0, 4, 0, 3, 0, 1, 0]) + bytes(16)
    qemu_key = bytes([255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 30])
    everything = (pixel_format + encodings + update + key + pointer + cut + cut_ext + continuous
                  + fence + xvp + desktop + qemu_key)
    seeds = []
    for hs in [b"RFB 003.008\n\x01\x01", b"RFB 003.007\n\x01\x00", b"RFB 003.003\n\x01"]:
        for ctrl in [0, 1]:
            seeds.append(bytes([ctrl]) + hs + everything)
    seeds.append(bytes([0x2a]) + b"RFB 003.008\n\x01\x01" + update + key + update)
    write("rfb_filter", seeds)


def archive_bytes(entries):
    out = b"RKZHOMEA" + struct.pack(">H", 1)
    n, total = 0, 0
    for e in entries:
        n += 1
        if e[0] == "dir":
            out += bytes([1]) + struct.pack(">H", len(e[1])) + e[1]
        else:
            _, path, content, flags = e
            out += bytes([2, flags]) + struct.pack(">H", len(path)) + path
            out += struct.pack(">Q", len(content)) + content
            total += len(content)
    return out + bytes([0xFF]) + struct.pack(">QQ", n, total)


def archive():
    # In the writer's order (depth first, names in byte order), as `cas_ingest` requires.
    home = [
        ("dir", b".config"),
        ("file", b".config/app.toml", b"answer = 42\n", 0),
        ("dir", b"notes"),
        ("file", b"notes/empty", b"", 0),
        ("file", b"run.sh", b"#!/bin/sh\necho hi\n", 1),
    ]
    seeds = [
        bytes([0]) + archive_bytes([]),
        bytes([0]) + archive_bytes(home),
        bytes([0x10]) + archive_bytes(home[:2]),
    ]
    # A delta archive: an unchanged file (tag 3) has no content after its size.
    delta = (b"RKZHOMEA" + struct.pack(">H", 1) + bytes([3, 0]) + struct.pack(">H", 1) + b"a"
             + struct.pack(">Q", 7) + bytes([0xFF]) + struct.pack(">QQ", 1, 7))
    seeds.append(bytes([1]) + delta)
    write("archive", seeds)
    write("cas_ingest", [archive_bytes([]), archive_bytes(home), archive_bytes(home[:2])])


def cas_tree():
    chunk = "ab" * 32
    trees = [
        {"entries": []},
        {"entries": [
            {"name": "a.txt", "mode": 0o644, "mtime_ns": 1700000000000000000, "type": "file",
             "size": 3, "chunks": [chunk]},
            {"name": "bin", "mode": 0o755, "mtime_ns": 0, "type": "dir", "tree": chunk},
            {"name": "link", "mode": 0o777, "mtime_ns": -1, "type": "symlink", "target": "a.txt"},
        ]},
        {"entries": [
            {"name": "\ufffd", "raw": "ff", "mode": 0o600, "mtime_ns": 5, "type": "file",
             "size": 0, "chunks": []},
        ]},
    ]
    write("cas_tree", [json.dumps(t, separators=(",", ":")).encode() for t in trees])


def golden_frames():
    src = open(os.path.join(ROOT, "gateway-proto/tests/golden.rs")).read()
    frames = []
    for m in re.finditer(r"\bgolden\(", src):
        # The call's text up to its closing `);` at the same depth.
        depth, i = 0, m.end() - 1
        while True:
            c = src[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        call = src[m.end():i]
        # Its last argument: the string literals after the value (hex, whitespace ignored).
        lits = re.findall(r'"([0-9a-fA-F ]*)"', call)
        hexed = "".join(lits).replace(" ", "")
        if not hexed or len(hexed) % 2:
            continue
        b = bytes.fromhex(hexed)
        if len(b) >= 4 and struct.unpack(">I", b[:4])[0] == len(b) - 4:
            frames.append(b)
    return frames


def gateway_frames():
    frames = golden_frames()
    assert len(frames) > 20, f"only {len(frames)} golden frames found"
    seeds = [bytes([i % 0x80]) + f for i, f in enumerate(frames)]
    seeds.append(bytes([0x33]) + b"".join(frames[:8]))
    # Terminal frames: input "ls\n", a resize to 80x24, input "exit\n".
    term = (bytes([0]) + struct.pack(">I", 3) + b"ls\n" + bytes([1]) + struct.pack(">I", 4)
            + struct.pack(">HH", 80, 24) + bytes([0]) + struct.pack(">I", 5) + b"exit\n")
    seeds.append(bytes([0x05]) + term)
    write("gateway_frames", seeds)


def route():
    src = open(os.path.join(ROOT, "control-plane/src/route.rs")).read()
    examples = {"computer": "c-1", "bot": "bot-7", "job": "j-3", "home_key": "k-5",
                "token": "t-9", "workspace": "acme", "name": "github", "process": "7",
                "service": "web", "preview": "pv_0123456789ab", "pool": "warm"}
    methods = {"Get": 0, "Post": 1, "Put": 2, "Delete": 3, "Any": 1}
    seeds = []
    for verb, path in re.findall(r'\b(Get|Post|Put|Delete|Any)\s+"(/[^"]*)"', src):
        filled = re.sub(r"\{(\w+)\}", lambda m: examples.get(m.group(1), "x"), path)
        seeds.append(bytes([methods[verb]]) + filled.encode())
    assert len(seeds) > 40, f"only {len(seeds)} routes found"
    seeds.append(bytes([1]) + b"/v1/computers/c-1/screens/bot-7/nope")
    seeds.append(bytes([5]) + b"/att/t-9")
    write("route", seeds)


def preview_host():
    label = "0123456789abcdef0123456789abcdef"
    seeds = [
        f"{label}.preview.localhost:8080".encode(),
        f"{label}.Preview.Localhost.".encode(),
        b"abc.preview.localhost.evil.com",
        b"localhost:8080",
        f"{label}.previews.example.com\npreviews.example.com".encode(),
    ]
    write("preview_host", seeds)


if __name__ == "__main__":
    rfb()
    archive()
    cas_tree()
    gateway_frames()
    route()
    preview_host()
