#!/usr/bin/env python3
"""Drives Rakazo's MCP endpoint with the official MCP Python client (PyPI `mcp`).

Reads its plan as one JSON object on stdin (tokens never go in argv): `endpoint` (the MCP URL),
`token` (the bearer token for it), `page` (a fixture page with a download link named
"Download CSV"), `csv` (the file's expected name), and `api`, `api_token`, `computer`, `bot` to
look at the bot's lease through the HTTP API while the session is open. Prints one JSON report
on stdout; the Rust test (tests/system/mcp.rs) asserts on it. Every wait has a deadline.
"""

import asyncio
import json
import sys
import time
import urllib.request

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def texts(result):
    return [c.text for c in result.content if c.type == "text"]


def kinds(result):
    return [c.type for c in result.content]


def lease_of(plan):
    req = urllib.request.Request(
        f"{plan['api']}/v1/computers/{plan['computer']}/leases/{plan['bot']}",
        headers={"Authorization": f"Bearer {plan['api_token']}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return {"status": e.code}


async def call(client, name, args=None):
    result = await asyncio.wait_for(client.call_tool(name, args or {}), timeout=90)
    return result


async def flow(plan):
    report = {}
    headers = {"Authorization": f"Bearer {plan['token']}"}
    session_ids = []

    async def remember_session(response):
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in session_ids:
            session_ids.append(sid)

    hooks = {"response": [remember_session]}
    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(90.0), event_hooks=hooks
    ) as http:
        transport = streamable_http_client(plan["endpoint"], http_client=http)
        async with Client(transport, mode="legacy") as client:
            report["protocol"] = client.protocol_version
            tools = await asyncio.wait_for(client.list_tools(), timeout=30)
            report["tools"] = sorted(t.name for t in tools.tools)
            report["descriptions"] = {t.name: t.description for t in tools.tools}
            report["lease_during"] = lease_of(plan)

            shell = await call(client, "shell", {"command": "echo hello from mcp; pwd"})
            report["shell"] = {"error": shell.is_error, "text": texts(shell)}
            timeout = await call(client, "shell", {"command": "sleep 5", "timeout_ms": 300})
            report["shell_timeout"] = {"error": timeout.is_error, "text": texts(timeout)}

            # A detached process: started, listed, its output read until it printed, killed.
            started = await call(
                client, "process_start", {"command": "echo detached from mcp; sleep 600"}
            )
            report["process_start"] = {"error": started.is_error, "text": texts(started)}
            proc = json.loads(texts(started)[0]) if not started.is_error else {"id": 0}
            listed = await call(client, "process_list")
            report["process_list"] = {"error": listed.is_error, "text": texts(listed)}
            logs = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                logs = await call(client, "process_logs", {"id": proc["id"]})
                if logs.is_error or "detached from mcp" in texts(logs)[0]:
                    break
                await asyncio.sleep(0.1)
            report["process_logs"] = {"error": logs.is_error, "text": texts(logs)}
            killed = await call(client, "process_kill", {"id": proc["id"], "signal": "KILL"})
            report["process_kill"] = {"error": killed.is_error, "text": texts(killed)}
            unknown = await call(client, "process_logs", {"id": 9999})
            report["process_unknown"] = {"error": unknown.is_error, "text": texts(unknown)}

            revs = await call(client, "home_revisions")
            report["home_revisions"] = {"error": revs.is_error, "text": texts(revs)}
            diff = await call(client, "home_diff", {"from": 1, "to": 2})
            report["home_diff"] = {"error": diff.is_error, "text": texts(diff)}
            unknown = await call(client, "home_diff", {"from": 1, "to": 99})
            report["home_diff_unknown"] = {"error": unknown.is_error, "text": texts(unknown)}

            nav = await call(client, "browser_navigate", {"url": plan["page"]})
            report["navigate"] = {"error": nav.is_error, "text": texts(nav)}
            snap = await call(client, "browser_snapshot")
            snapshot = json.loads(texts(snap)[0])["snapshot"]
            report["snapshot"] = snapshot
            ref = next(e["ref"] for e in snapshot["elements"] if e["name"] == "Download CSV")
            click = await call(client, "browser_act", {"steps": [{"type": "click", "ref": ref}]})
            report["click"] = {"error": click.is_error, "text": texts(click)}
            stale = await call(client, "browser_act", {"steps": [{"type": "click", "ref": "e9999"}]})
            report["stale"] = json.loads(texts(stale)[0])

            # Observe until two consecutive frames are identical (the page is static once the
            # download is done): the second keeps its metadata and has no image.
            observations = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                obs = await call(client, "computer_observe")
                if obs.is_error:
                    observations.append({"error": texts(obs)})
                    break
                meta = json.loads(texts(obs)[0])
                images = [c for c in obs.content if c.type == "image"]
                observations.append(
                    {
                        "kinds": kinds(obs),
                        "frame_id": meta["frameId"],
                        "unchanged": meta["unchanged"],
                        "note": meta.get("note"),
                        "width": meta["width"],
                        "mime": images[0].mime_type if images else None,
                        "png_magic": images[0].data[:8] if images else None,
                    }
                )
                if len(observations) >= 2 and meta["unchanged"]:
                    break
                await asyncio.sleep(0.5)
            report["observations"] = observations

            # A scaled, marked frame, then a move given in its coordinates, observed scaled.
            marked = await call(
                client, "computer_observe", {"width": 640, "marks": True, "full": True}
            )
            meta = json.loads(texts(marked)[0])
            report["marked"] = {
                "kinds": kinds(marked),
                "size": [meta["width"], meta["height"], meta["screenWidth"]],
                "marks": [m["ref"] for m in meta.get("marks") or []],
            }
            moved = await call(
                client,
                "computer_act",
                {
                    "actions": [{"type": "move", "x": 5, "y": 5}],
                    "frame": {"width": 640, "height": 400},
                    "observe": True,
                    "observe_options": {"width": 320, "full": True},
                },
            )
            after = json.loads(texts(moved)[1]) if not moved.is_error else {}
            report["moved"] = {
                "error": moved.is_error,
                "text": texts(moved)[0],
                "cursor": after.get("cursor"),
                "width": after.get("width"),
            }

            # The download lands in the home's Downloads; wait for it to be complete.
            listing = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ls = await call(client, "list_files", {"path": "Downloads"})
                if not ls.is_error:
                    listing = json.loads(texts(ls)[0])["entries"]
                    names = [e["path"] for e in listing]
                    if any(n.endswith(plan["csv"]) for n in names) and not any(
                        n.endswith(".crdownload") for n in names
                    ):
                        break
                await asyncio.sleep(0.25)
            report["downloads"] = listing
            read = await call(client, "read_file", {"path": f"Downloads/{plan['csv']}"})
            report["read"] = {"error": read.is_error, "text": texts(read)}
            too_big = await call(
                client, "read_file", {"path": f"Downloads/{plan['csv']}", "max_bytes": 3}
            )
            report["read_too_big"] = {"error": too_big.is_error, "text": texts(too_big)}
            wrote = await call(
                client, "write_file", {"path": "notes/mcp.txt", "content": "written over mcp\n"}
            )
            report["write"] = {"error": wrote.is_error, "text": texts(wrote)}

            # The live session's id, sent to another bot's endpoint with the API token: the
            # session belongs to its own endpoint only.
            report["session_ids"] = len(session_ids)
            hijack = await http.post(
                plan["other_endpoint"],
                headers={
                    "Authorization": f"Bearer {plan['api_token']}",
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "mcp-session-id": session_ids[0],
                    "mcp-protocol-version": "2025-11-25",
                },
                json={
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "tools/call",
                    "params": {"name": "shell", "arguments": {"command": "echo hijacked"}},
                },
            )
            report["hijack"] = {"status": hijack.status_code, "body": hijack.text[:500]}
    report["lease_after"] = lease_of(plan)
    return report


async def brief(plan):
    """One shell call in a session that gives the client's own lease (`lease`) and is left
    without a DELETE (`terminate_on_close=False`): the server must end it when it idles."""
    headers = {"Authorization": f"Bearer {plan['token']}", "Rakazo-Lease": plan["lease"]}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(90.0)) as http:
        transport = streamable_http_client(plan["endpoint"], http_client=http, terminate_on_close=False)
        async with Client(transport, mode="legacy") as client:
            shell = await call(client, "shell", {"command": "echo brief"})
            return {"shell": {"error": shell.is_error, "text": texts(shell)}, "lease_during": lease_of(plan)}


def main():
    plan = json.load(sys.stdin)
    run = brief if plan.get("mode") == "brief" else flow
    report = asyncio.run(asyncio.wait_for(run(plan), timeout=300))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
