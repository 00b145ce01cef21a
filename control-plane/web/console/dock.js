// The dock's windows (docs/console.md#the-dock): Shell, Files and Activity (History: history.js).
import { html, useEffect, useRef, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { basename, bytes, clock, messageOf, usePoll } from "./util.js";
import { capabilityPath } from "./screen.js";

/** The largest file previewed as text. */
const PREVIEW_MAX = 256 * 1024;
/** How often the open folder refreshes while visible. */
const FILES_EVERY_MS = 3000;
/** How often a stored revision's open folder is read again (only to retry a failure, really). */
const REVISION_EVERY_MS = 60000;

/**
 * The Shell: the terminal capability page in an iframe, started on first use under control and
 * kept mounted while other windows are shown (its websocket stays up). Without control, "Open
 * shell" takes control first.
 */
export function Shell({ computer, bot, control, visible, onOpenShell }) {
  const [path, setPath] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [started, setStarted] = useState(false);
  const lease = control && control.lease;
  // Started on first use (the window shown under control), then kept while the lease lives:
  // hiding the window keeps the iframe, so its websocket and shell stay up.
  useEffect(() => {
    if (visible && lease) setStarted(true);
  }, [visible, lease]);
  useEffect(() => {
    setPath(null);
    setError(null);
    if (!lease) {
      setStarted(false);
      return undefined;
    }
    if (!started) return undefined;
    let gone = false;
    capabilityPath(computer, bot, "terminal")
      .then((p) => !gone && setPath(p))
      .catch((e) => !gone && setError(messageOf(e)));
    return () => {
      gone = true;
    };
  }, [computer, bot, lease, started]);
  if (!server.can("operator")) return html`<p class="muted">Your role (viewer) cannot open a shell.</p>`;
  if (!lease)
    return html`<div class="shell-closed">
      <p>A shell on ${bot}'s computer needs control of its screen.</p>
      <button type="button" class="primary" disabled=${busy} onClick=${async () => {
        setBusy(true);
        try {
          await onOpenShell();
        } finally {
          setBusy(false);
        }
      }}>${busy ? "Taking control…" : "Open shell"}</button>
    </div>`;
  return html`<div class="shell">
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${!path && !error && html`<p class="muted" role="status">Starting the shell…</p>`}
    ${path && html`<iframe key=${path} class="shell-frame" title=${"Shell on " + bot + "'s computer"} src=${path} data-bot=${bot} referrerpolicy="no-referrer"></iframe>`}
  </div>`;
}

function Breadcrumbs({ path, go }) {
  const parts = path ? path.split("/") : [];
  return html`<nav class="crumbs" aria-label="Folder">
    <button type="button" class="link" onClick=${() => go("")}>home</button>
    ${parts.map((p, i) => html`<span aria-hidden="true">/</span><button type="button" class="link" aria-current=${i === parts.length - 1 ? "location" : undefined} onClick=${() => go(parts.slice(0, i + 1).join("/"))}>${p}</button>`)}
  </nav>`;
}

/** A directory's direct children from the stored home's recursive entries under `dir`. */
function childrenOf(entries, dir) {
  const prefix = dir ? dir + "/" : "";
  const out = new Map();
  for (const e of entries) {
    if (!e.path.startsWith(prefix) || e.path === dir) continue;
    const rest = e.path.slice(prefix.length);
    const slash = rest.indexOf("/");
    const name = slash < 0 ? rest : rest.slice(0, slash);
    if (!name) continue;
    const isDir = slash >= 0 || e.kind === "dir";
    const prev = out.get(name);
    if (!prev || isDir) out.set(name, { path: prefix + name, kind: isDir ? "dir" : e.kind, size: isDir ? 0 : e.size, executable: e.executable });
  }
  return [...out.values()].sort((a, b) => (a.kind === b.kind ? a.path.localeCompare(b.path) : a.kind === "dir" ? -1 : 1));
}

/**
 * Files: the open folder of a running computer (its guest) or of a stopped one (the stored
 * checkpoint), refreshed every few seconds while visible and after each bot command; a text
 * preview; uploads under control, with progress and drag and drop. With `revision`, that stored
 * revision of the home instead (History), read once per folder: a revision never changes.
 */
export function Files({ computer, running, bot, control, visible, commandTick, revision }) {
  const [dir, setDir] = useState("");
  const [entries, setEntries] = useState(null);
  const [truncated, setTruncated] = useState(false);
  const [error, setError] = useState(null);
  const [preview, setPreview] = useState(null);
  const [upload, setUpload] = useState(null);
  const [dragging, setDragging] = useState(false);
  const picker = useRef(null);
  const live = running && revision == null;
  const at = revision == null ? "" : "&revision=" + revision;
  const load = async (signal) => {
    try {
      let list;
      if (live) {
        const v = await server.get(server.c(computer, "files") + "?path=" + encodeURIComponent(dir));
        list = v.entries.slice().sort((a, b) => (a.kind === b.kind ? a.path.localeCompare(b.path) : a.kind === "dir" ? -1 : 1));
        setTruncated(false);
      } else {
        const q = "?limit=20000" + (dir ? "&prefix=" + encodeURIComponent(dir) : "") + at;
        const v = await server.get(server.c(computer, "home", "entries") + q);
        list = childrenOf(v.entries, dir);
        setTruncated(v.truncated);
      }
      if (signal && signal.aborted) return;
      setEntries(list);
      setError(null);
    } catch (e) {
      if (signal && signal.aborted) return;
      setEntries(null);
      setError(e.code === "not_found" && !running && revision == null ? "No saved home yet: this computer has no checkpoint." : messageOf(e));
    }
  };
  usePoll(load, revision == null ? FILES_EVERY_MS : REVISION_EVERY_MS, [computer, live, dir, revision == null && commandTick, revision], visible);
  useEffect(() => setPreview(null), [dir, live, revision]);

  const open = async (entry) => {
    if (entry.kind === "dir") return setDir(entry.path);
    setPreview({ path: entry.path, text: null, note: "Loading…" });
    try {
      const url = live
        ? server.c(computer, "files", "content") + "?max_bytes=" + PREVIEW_MAX + "&path=" + encodeURIComponent(entry.path)
        : server.c(computer, "home", "content") + "?path=" + encodeURIComponent(entry.path) + at;
      if (!live && entry.size > PREVIEW_MAX) throw Object.assign(new Error(""), { code: "too_large" });
      const resp = await server.request("GET", url);
      const buf = new Uint8Array(await resp.arrayBuffer());
      const text = new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(0, PREVIEW_MAX));
      setPreview({ path: entry.path, text, note: null });
    } catch (e) {
      const note = e.code === "too_large" || e.status === 413 ? "Too large to preview." : e instanceof TypeError ? "Not a text file." : messageOf(e);
      setPreview({ path: entry.path, text: null, note });
    }
  };

  const canUpload = live && server.can("operator") && control;
  const send = async (file) => {
    if (!canUpload || !file) return;
    setUpload({ name: file.name, sent: 0, total: file.size, done: null, error: null });
    try {
      const path = server.c(computer, "uploads", bot) + "?name=" + encodeURIComponent(file.name) + "&control=" + encodeURIComponent(control.lease);
      const v = await server.upload(path, file, (sent, total) => setUpload((u) => Object.assign({}, u, { sent, total })));
      setUpload((u) => Object.assign({}, u, { sent: u.total, done: v.path }));
      const folder = v.path.split("/").slice(0, -1).join("/");
      if (folder === dir) load();
      else setDir(folder);
    } catch (e) {
      setUpload((u) => Object.assign({}, u, { error: messageOf(e) }));
    }
  };
  const drop = (e) => {
    e.preventDefault();
    setDragging(false);
    const f = e.dataTransfer && e.dataTransfer.files && e.dataTransfer.files[0];
    if (f) send(f);
  };
  const over = (e) => {
    if (!canUpload) return;
    e.preventDefault();
    setDragging(true);
  };

  return html`<div class=${"files" + (dragging ? " dragging" : "")} onDragOver=${over} onDragLeave=${() => setDragging(false)} onDrop=${canUpload ? drop : undefined}>
    <div class="files-head">
      <${Breadcrumbs} path=${dir} go=${setDir} />
      <span class="muted">${live ? "live" : revision != null ? "revision " + revision : "stored home (last checkpoint)"}</span>
    </div>
    ${canUpload && html`<div class="upload">
      <input type="file" id="upload-file" class="sr-only" ref=${picker} onChange=${(e) => { send(e.currentTarget.files[0]); e.currentTarget.value = ""; }} />
      <label for="upload-file" class="button">Upload to ${bot}…</label>
      <span class="muted">or drop a file here</span>
      ${upload && html`<div class="progress" role="status">
        <span>${upload.name}</span>
        ${!upload.error && html`<progress max=${upload.total || 1} value=${upload.sent} aria-label=${"Upload of " + upload.name}></progress>`}
        <span>${upload.error ? "" : upload.done ? "uploaded to " + upload.done : bytes(upload.sent) + " / " + bytes(upload.total)}</span>
        ${upload.error && html`<span class="error" role="alert">${upload.error}</span>`}
      </div>`}
    </div>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${truncated && html`<p class="warning">The stored home has more entries than listed.</p>`}
    ${entries && entries.length === 0 && html`<p class="empty">This folder is empty.</p>`}
    ${entries && entries.length > 0 && html`<ul class="entries" aria-label=${"Files in " + (dir || "home") + (revision != null ? " at revision " + revision : "")}>
      ${dir && html`<li><button type="button" class="entry dir" onClick=${() => setDir(dir.split("/").slice(0, -1).join("/"))}>..</button></li>`}
      ${entries.map((e) => html`<li key=${e.path}>
        <button type="button" class=${"entry " + e.kind} onClick=${() => open(e)} aria-label=${(e.kind === "dir" ? "Folder " : "File ") + basename(e.path)}>${basename(e.path)}${e.kind === "dir" ? "/" : ""}</button>
        <span class="size">${e.kind === "dir" ? "" : bytes(e.size)}</span>
        ${live && e.kind === "file" && html`<a class="download" href=${server.c(computer, "files", "content") + "?path=" + encodeURIComponent(e.path)} download=${basename(e.path)} aria-label=${"Download " + basename(e.path)}>Download</a>`}
      </li>`)}
    </ul>`}
    ${preview && html`<section class="preview" aria-label=${"Preview of " + preview.path}>
      <div class="preview-head"><strong>${preview.path}</strong><button type="button" class="quiet" onClick=${() => setPreview(null)}>Close preview</button></div>
      ${preview.note ? html`<p class="muted">${preview.note}</p>` : html`<pre tabindex="0">${preview.text}</pre>`}
    </section>`}
  </div>`;
}

export function describe(e) {
  if (e.type === "computer.command") return e.line;
  if (e.type === "computer.lifecycle") return `${e.event}${e.cause ? " (" + e.cause + ")" : ""}${e.reason ? ": " + e.reason : ""}`;
  if (e.type && e.type.startsWith("network.")) return `${e.domain || e.ip}:${e.port} ${e.reason}${e.count > 1 ? " ×" + e.count : ""}`;
  return e.type;
}

function kindOf(e) {
  if (e.type === "computer.command") return e.action;
  if (e.type === "computer.lifecycle") return "lifecycle";
  return e.type === "network.denied" ? "denied" : "network";
}

/** Activity: history and live events of the computer, filterable by bot. */
export function Activity({ feed, bots }) {
  const [bot, setBot] = useState("");
  const known = [...new Set([...bots, ...feed.events.map((e) => e.bot).filter(Boolean)])].sort();
  const shown = feed.events.filter((e) => !bot || e.bot === bot).slice(-200).reverse();
  return html`<div class="activity">
    <div class="activity-head">
      <label for="activity-bot">Filter by bot</label>
      <select id="activity-bot" value=${bot} onChange=${(e) => setBot(e.currentTarget.value)}>
        <option value="">All bots</option>
        ${known.map((b) => html`<option value=${b}>${b}</option>`)}
      </select>
      <span class=${"live " + feed.live} role="status">${feed.live === "live" ? "live" : feed.live === "error" ? "reconnecting…" : "connecting…"}</span>
    </div>
    ${feed.error && html`<p class="error" role="alert">${feed.error}</p>`}
    ${shown.length === 0 ? html`<p class="empty">No activity${bot ? " for " + bot : ""} yet.</p>` : html`
      <ol class="events" aria-label="Activity, newest first">
        ${shown.map((e) => html`<li key=${e.seq} class=${"event " + e.type.replace(".", "-") + (e.exit_code ? " nonzero" : "")} data-seq=${e.seq}>
          <time datetime=${new Date(e.at_ms).toISOString()}>${clock(e.at_ms)}</time>
          <span class="kind">${kindOf(e)}</span>
          ${e.bot && html`<span class="bot">${e.bot}</span>`}
          <code class="line">${describe(e)}</code>
          ${e.exit_code != null && html`<span class="exit">exit ${e.exit_code}</span>`}
          ${e.error && html`<span class="error">${e.error}</span>`}
        </li>`)}
      </ol>`}
  </div>`;
}

/** The computer's activity feed: the newest history, then the live stream (server-sent events). */
export function useActivity(computer, onCommand) {
  const [feed, setFeed] = useState({ events: [], live: "connecting", error: null });
  const cb = useRef(onCommand);
  cb.current = onCommand;
  useEffect(() => {
    let gone = false;
    let source = null;
    let max = 0;
    const add = (list) => {
      const fresh = list.filter((e) => e.seq > max);
      if (!fresh.length) return;
      max = Math.max(max, ...fresh.map((e) => e.seq));
      setFeed((f) => ({ events: f.events.concat(fresh).slice(-500), live: f.live, error: null }));
      if (fresh.some((e) => e.type === "computer.command") && cb.current) cb.current();
    };
    (async () => {
      let after = 0;
      try {
        const v = await server.get(server.c(computer, "activity") + "?order=desc&limit=200");
        if (gone) return;
        after = v.last_seq || 0;
        add(v.events.slice().reverse());
      } catch (e) {
        if (!gone) setFeed((f) => Object.assign({}, f, { error: messageOf(e) }));
      }
      if (gone) return;
      source = new EventSource(server.c(computer, "activity", "stream") + "?after=" + after, { withCredentials: true });
      source.onopen = () => setFeed((f) => Object.assign({}, f, { live: "live" }));
      source.onerror = () => setFeed((f) => Object.assign({}, f, { live: "error" }));
      // The stream names its events `activity` (docs/api.md#activity).
      const on = (m) => {
        try {
          add([JSON.parse(m.data)]);
        } catch (e) {
          /* not an event */
        }
      };
      source.addEventListener("activity", on);
      source.onmessage = on;
    })();
    return () => {
      gone = true;
      if (source) source.close();
    };
  }, [computer]);
  return feed;
}

