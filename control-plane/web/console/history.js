// History (docs/console.md#history): the home's revisions, newest first; a revision's files and
// its changes since the revision before it; for operators, restoring it (the server checkpoints a
// running computer first) and forking it into a new computer.
import { html, useEffect, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { bytes, clock, messageOf, useAction, usePoll } from "./util.js";
import { Files } from "./dock.js";

/** How often the list refreshes while shown (checkpoints come from runs, idling, stops). */
const REVISIONS_EVERY_MS = 10000;
/** The most changes a diff lists. */
const DIFF_LIMIT = 500;

/** The message for a History request that failed. */
function problem(e) {
  if (e && e.code === "home_not_incremental")
    return "This server keeps whole-archive checkpoints only (--home-format archive): there is no history to show.";
  return messageOf(e);
}

/** A revision's time: the clock today, else the day too. */
function when(ms) {
  const d = new Date(ms);
  if (d.toDateString() === new Date().toDateString()) return clock(ms);
  return d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + d.toLocaleTimeString([], { hour12: false, hour: "2-digit", minute: "2-digit" });
}

const SIGN = { added: "+", removed: "−", changed: "M" };

/** What changed from revision `from` to `to`. */
function Changes({ computer, from, to }) {
  const [diff, setDiff] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    setDiff(null);
    setError(null);
    if (from == null) return undefined;
    let gone = false;
    server
      .get(server.c(computer, "home", "diff") + "?from=" + from + "&to=" + to + "&limit=" + DIFF_LIMIT)
      .then((v) => !gone && setDiff(v))
      .catch((e) => !gone && setError(problem(e)));
    return () => {
      gone = true;
    };
  }, [computer, from, to]);
  const title = from == null ? "Changes" : "Changes since revision " + from;
  return html`<section class="changes" aria-label=${title}>
    <h3>${title}</h3>
    ${from == null && html`<p class="muted">The oldest revision kept: nothing before it to compare with.</p>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${from != null && !diff && !error && html`<p class="muted" role="status">Comparing…</p>`}
    ${diff && diff.changes.length === 0 && html`<p class="empty">No changes.</p>`}
    ${diff && diff.changes.length > 0 && html`<ul class="diff" aria-label=${"Changed paths, revision " + from + " to " + to}>
      ${diff.changes.map((ch) => html`<li key=${ch.path} class=${"change-" + ch.change}>
        <span class="sign" aria-hidden="true">${SIGN[ch.change] || "?"}</span>
        <code>${ch.path}${ch.dir ? "/" : ""}</code>
        <span class="what">${ch.change}</span>
      </li>`)}
    </ul>`}
    ${diff && diff.truncated && html`<p class="warning">More than ${DIFF_LIMIT} paths changed: the first ${DIFF_LIMIT} are listed.</p>`}
  </section>`;
}

/** Reads an NDJSON answer line by line: `onLine(object)` for each. */
async function eachLine(resp, onLine) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    buf += dec.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onLine(JSON.parse(line));
    }
    if (done) break;
  }
  if (buf.trim()) onLine(JSON.parse(buf));
}

/** A progress line of the restore: its phase and bytes (the total only when it is one). */
function phaseLine(p) {
  if (!p.done && !p.total) return p.phase;
  return p.phase + ": " + bytes(p.done) + (p.total >= p.done ? " of " + bytes(p.total) : "");
}

const plural = (n, one, many) => n + " " + (n === 1 ? one : many);

/** Restoring revision `rev` (after a confirmation click), with the flow's progress and result. */
function Restore({ computer, running, rev, onDone }) {
  const [confirming, setConfirming] = useState(false);
  const [flow, setFlow] = useState(null);
  const busy = flow && !flow.done && !flow.error;
  const run = async () => {
    setConfirming(false);
    setFlow({ phases: [], done: null, error: null });
    const phase = (p) =>
      setFlow((f) => {
        const phases = f.phases.filter((x) => x.phase !== p.phase).concat([p]);
        return Object.assign({}, f, { phases });
      });
    try {
      const resp = await server.request("POST", server.c(computer, "home", "restore") + "?revision=" + rev);
      let ended = false;
      await eachLine(resp, (l) => {
        if (l.type === "progress") phase(l);
        else if (l.type === "done") {
          ended = true;
          setFlow((f) => Object.assign({}, f, { done: l }));
        } else if (l.type === "error") {
          ended = true;
          setFlow((f) => Object.assign({}, f, { error: problem(l) }));
        }
      });
      if (!ended) setFlow((f) => Object.assign({}, f, { error: "The restore's answer ended early: check the history before trying again." }));
    } catch (e) {
      setFlow((f) => Object.assign({}, f, { error: problem(e) }));
    }
    onDone();
  };
  return html`<div class="restore">
    ${confirming
      ? html`<span class="confirm" role="group" aria-label="Confirm restore">
          <span>Put the home back to revision ${rev}? ${running ? "Its present state is checkpointed first, so nothing is lost." : "The computer gets it at its next start."}</span>
          <button type="button" class="danger" onClick=${run}>Restore revision ${rev}</button>
          <button type="button" onClick=${() => setConfirming(false)}>Cancel</button>
        </span>`
      : html`<button type="button" disabled=${busy} onClick=${() => setConfirming(true)}>${busy ? "Restoring…" : "Restore this revision"}</button>`}
    ${flow && html`<ol class="flow" aria-label=${"Restore of revision " + rev} role="status">
      ${flow.phases.map((p) => html`<li key=${p.phase}>${phaseLine(p)}</li>`)}
      ${flow.done && html`<li class="ok">Restored revision ${rev}${flow.done.revision != null ? " as revision " + flow.done.revision : ""}${flow.done.entries != null ? " (" + plural(flow.done.entries, "entry", "entries") + ", " + bytes(flow.done.content_bytes) + ")" : ""}.${running ? "" : " The computer gets it at its next start."}</li>`}
    </ol>`}
    ${flow && flow.error && html`<p class="error" role="alert">Restore failed: ${flow.error}</p>`}
  </div>`;
}

/** Forking revision `rev` into a new computer: a workspace's, or (unlimited tokens) a bot's own. */
function Fork({ computer, rev, onDone }) {
  const s = server.current();
  const limited = !!(s && s.workspaces);
  const [open, setOpen] = useState(false);
  const [kind, setKind] = useState("workspace");
  const [busy, error, act] = useAction(problem);
  const [made, setMade] = useState(null);
  const submit = (e) => {
    e.preventDefault();
    const target = e.currentTarget.target.value.trim();
    if (!target) return;
    setMade(null);
    act(async () => {
      const body = kind === "workspace" ? { workspace: target, revision: rev } : { private_bot: target, revision: rev };
      setMade(await server.post(server.c(computer, "fork"), body));
      setOpen(false);
      onDone();
    });
  };
  const label = kind === "workspace" ? "Workspace" : "Bot id";
  return html`<div class="fork">
    ${!open && html`<button type="button" onClick=${() => setOpen(true)}>Fork…</button>`}
    ${open && html`<form class="fork-form" onSubmit=${submit}>
      <fieldset>
        <legend>Fork revision ${rev} into a new computer</legend>
        ${!limited && html`<div class="kinds" role="radiogroup" aria-label="New computer for">
          <span><input type="radio" id="fork-kind-ws" name="kind" value="workspace" checked=${kind === "workspace"} onChange=${() => setKind("workspace")} />
          <label for="fork-kind-ws" class="inline">a workspace</label></span>
          <span><input type="radio" id="fork-kind-bot" name="kind" value="private" checked=${kind === "private"} onChange=${() => setKind("private")} />
          <label for="fork-kind-bot" class="inline">a bot (private computer)</label></span>
        </div>`}
        <div class="field">
          <label for="fork-target">${label}</label>
          <input id="fork-target" name="target" autocomplete="off" required placeholder=${kind === "workspace" ? "new workspace name" : "bot id"} list=${limited ? "fork-workspaces" : undefined} />
          ${limited && html`<datalist id="fork-workspaces">${s.workspaces.map((w) => html`<option value=${w} />`)}</datalist>`}
        </div>
        <p class="muted">The new computer's home starts from revision ${rev}, signed-in browser sessions included. A ${kind === "workspace" ? "workspace" : "bot"} whose home has checkpoints already is refused.</p>
        <div class="actions">
          <button type="submit" class="primary" disabled=${busy}>${busy ? "Forking…" : "Fork"}</button>
          <button type="button" onClick=${() => setOpen(false)} disabled=${busy}>Cancel</button>
        </div>
      </fieldset>
    </form>`}
    ${error && html`<p class="error" role="alert">Fork failed: ${error}</p>`}
    ${made && html`<p class="notice fork-made" role="status">Forked revision ${rev} into <a href=${"#/c/" + encodeURIComponent(made.id)}>${made.id}</a> (${made.workspace ? "workspace " + made.workspace : "private to " + made.bot}, ${made.state}).</p>`}
  </div>`;
}

/** The History window: the home's revisions and, for the selected one, its files and changes. */
export function History({ computer, running, visible }) {
  const [revs, setRevs] = useState(null);
  const [error, setError] = useState(null);
  const [selected, setSelected] = useState(null);
  const [tick, setTick] = useState(0);
  usePoll(
    async (signal) => {
      try {
        const v = await server.get(server.c(computer, "home", "revisions"));
        if (signal.aborted) return;
        setRevs(v.revisions.slice().reverse());
        setError(null);
      } catch (e) {
        if (signal.aborted) return;
        // No stored home yet is an empty history, not a failure.
        if (e.code === "not_found") {
          setRevs([]);
          setError(null);
        } else setError(problem(e));
      }
    },
    REVISIONS_EVERY_MS,
    [computer, tick],
    visible,
  );
  const refresh = () => setTick((t) => t + 1);
  const at = revs ? revs.findIndex((r) => r.revision === selected) : -1;
  const rev = at >= 0 ? revs[at] : null;
  // The revision before it in the list (retention may have dropped the ones between).
  const before = at >= 0 && at + 1 < revs.length ? revs[at + 1].revision : null;
  return html`<div class="history">
    <div class="files-head">
      <h2 class="window-title">Home revisions <span class="muted">newest first</span></h2>
      <button type="button" class="quiet" onClick=${refresh}>Refresh</button>
    </div>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${!revs && !error && html`<p class="muted" role="status">Loading the history…</p>`}
    ${revs && revs.length === 0 && html`<p class="empty">No revisions yet: this computer's home has no checkpoint.</p>`}
    ${revs && revs.length > 0 && html`<div class="revisions-scroll">
      <table class="revisions">
        <caption class="sr-only">Revisions of the home, newest first</caption>
        <thead><tr><th scope="col">Revision</th><th scope="col">Time</th><th scope="col">Cause</th><th scope="col">Files</th><th scope="col">Size</th><th scope="col">Added</th></tr></thead>
        <tbody>
          ${revs.map((r) => html`<tr key=${r.revision} class=${r.revision === selected ? "selected" : ""} data-revision=${r.revision}>
            <th scope="row"><button type="button" class="link" aria-pressed=${r.revision === selected ? "true" : "false"} aria-label=${"Revision " + r.revision} onClick=${() => setSelected(r.revision === selected ? null : r.revision)}>#${r.revision}</button></th>
            <td><time datetime=${new Date(r.at_ms).toISOString()}>${when(r.at_ms)}</time></td>
            <td class="cause">${r.cause}</td>
            <td>${r.files}</td>
            <td>${bytes(r.size)}</td>
            <td>${bytes(r.new_bytes)}</td>
          </tr>`)}
        </tbody>
      </table>
    </div>`}
    ${revs && revs.length > 0 && !rev && html`<p class="muted">Select a revision to see its files and what changed.</p>`}
    ${rev && html`<section class="revision" aria-label=${"Revision " + rev.revision}>
      <h3>Revision ${rev.revision} <span class="muted">${rev.cause} · ${when(rev.at_ms)} · ${plural(rev.files, "file", "files")}, ${bytes(rev.size)}</span></h3>
      ${server.can("operator") && html`<div class="revision-actions">
        <${Restore} key=${"restore-" + rev.revision} computer=${computer} running=${running} rev=${rev.revision} onDone=${refresh} />
        <${Fork} key=${"fork-" + rev.revision} computer=${computer} rev=${rev.revision} onDone=${refresh} />
      </div>`}
      <${Changes} computer=${computer} from=${before} to=${rev.revision} />
      <h3>Files</h3>
      <${Files} key=${rev.revision} computer=${computer} running=${running} revision=${rev.revision} visible=${visible} />
    </section>`}
  </div>`;
}
