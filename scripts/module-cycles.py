#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a circle.

A module is a source file (`a/b.rs` or `a/b/mod.rs` is `a::b`). An edge A -> B is a path
`crate::b::...` or `super::...` in A's code (tests aside) that names module B, taken at the deepest
module that exists. A module and its own ancestors or descendants are one unit here (a parent
declares its children), so only circles between modules that are not nested count, e.g.
`core -> homes::flow -> core`. Usage: module-cycles.py [crate dir ...] (default: every crate).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["gateway-proto", "guest-agent", "control-plane", "homes", "providers"]
PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super)((?:::[a-z_][a-z0-9_]*)*)::\{([^;]*)\}", re.S)


def modules(src):
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if rel and rel[-1] == "tests":
                continue
            if rel and rel[0] == "bin":
                continue
            mods[tuple(rel)] = os.path.join(dirpath, f)
    return mods


def strip_tests(text):
    # Drop `#[cfg(test)] mod x { ... }` bodies: test code may import freely.
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(mods, base, parts):
    path = list(base) + parts
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return ()


def edges(mods):
    out = {m: set() for m in mods}
    for mod, file in mods.items():
        text = strip_tests(open(file).read())
        text = re.sub(r"//[^\n]*", "", text)
        is_dir = file.endswith("mod.rs") or not mod
        found = []
        for g in USE_GROUP.finditer(text):
            prefix = [p for p in g.group(2).split("::") if p]
            for item in re.findall(r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*", g.group(3)):
                found.append((g.group(1), prefix + item.split("::")))
        for m in PATH.finditer(text):
            found.append((m.group(1), [p for p in m.group(2).split("::") if p]))
        for kind, parts in found:
            if kind == "crate":
                base = []
            else:
                # `super` of a file module is its parent; of `x/mod.rs` the grandparent.
                base = list(mod[:-1]) if not is_dir else list(mod[:-1])
                while parts and parts[0] == "super":
                    parts = parts[1:]
                    base = base[:-1]
            target = resolve(mods, base, parts)
            if target != mod:
                out[mod].add(target)
    return out


def nested(a, b):
    return a[: len(b)] == b or b[: len(a)] == a


def cycles(graph):
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if nested(v, w):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return comps


def name(m):
    return "::".join(m) or "crate"


def main():
    crates = sys.argv[1:] or CRATES
    bad = 0
    for crate in crates:
        mods = modules(os.path.join(ROOT, crate, "src"))
        graph = edges(mods)
        for comp in cycles(graph):
            bad += 1
            members = set(comp)
            links = sorted(
                f"{name(a)} -> {name(b)}"
                for a in comp
                for b in graph[a]
                if b in members and not nested(a, b)
            )
            print(f"{crate}: modules in a circle: {', '.join(sorted(map(name, comp)))}")
            for l in links:
                print(f"    {l}")
    if bad:
        sys.exit(1)
    print("no import circles between modules")


if __name__ == "__main__":
    main()
