// The computer list: every computer in the session's scope, refreshed every 2 s, with create,
// stop, start and destroy for the roles allowed them (docs/console.md#computers).
import { html, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { bytes, duration, messageOf, useNow, usePoll } from "./util.js";
import { JobPill, isActive } from "./maintenance.js";

/** Bots (screens) and jobs of computers refreshed at most this often, for this many. */
const DETAIL_EVERY_MS = 10000;
const DETAIL_MAX = 50;

export function StateBadge({ c }) {
  const label = c.state === "running" && !c.connected ? "running, not connected" : c.state;
  return html`<span class=${"badge state-" + c.state + (c.connected ? "" : " disconnected")}>${label}</span>`;
}

export function Idle({ c, now }) {
  // The idle job's last decision only means something while the computer runs.
  const idle = c.state === "running" ? c.idle : null;
  if (!idle) return html`<span class="muted">–</span>`;
  const left = idle.until_ms ? idle.until_ms - now : null;
  return html`<span title=${idle.reason}>${idle.decision}${left != null && left > 0 ? " · " + duration(left) : ""}</span>`;
}

export function Memory({ m }) {
  if (!m || !m.memory_total_bytes) return html`<span class="muted">–</span>`;
  const used = m.memory_total_bytes - m.memory_available_bytes;
  return html`<span>${bytes(used)} / ${bytes(m.memory_total_bytes)}</span>`;
}

/** Lifecycle buttons of one computer, per role; Destroy asks once more in place. */
export function Lifecycle({ c, onDone, compact }) {
  const [busy, setBusy] = useState(null);
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState(null);
  const act = async (what, method, path) => {
    setBusy(what);
    setError(null);
    try {
      await server.api(method, path, method === "POST" ? {} : undefined);
      setConfirming(false);
      if (onDone) onDone(what);
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(null);
    }
  };
  const label = compact ? " " + c.id : "";
  const buttons = [];
  if (server.can("operator") && c.state === "running")
    buttons.push(html`<button type="button" onClick=${() => act("stop", "POST", server.c(c.id, "stop"))} disabled=${busy} aria-label=${"Stop" + label}>${busy === "stop" ? "Stopping…" : "Stop"}</button>`);
  if (server.can("operator") && c.state === "stopped")
    buttons.push(html`<button type="button" onClick=${() => act("start", "POST", server.c(c.id, "start"))} disabled=${busy} aria-label=${"Start" + label}>${busy === "start" ? "Starting…" : "Start"}</button>`);
  if (server.can("admin") && c.state !== "destroyed") {
    if (confirming)
      buttons.push(html`<span class="confirm" role="group" aria-label="Confirm destroy">
        <button type="button" class="danger" onClick=${() => act("destroy", "DELETE", server.c(c.id))} disabled=${busy}>${busy === "destroy" ? "Destroying…" : "Destroy " + c.id}</button>
        <button type="button" onClick=${() => setConfirming(false)}>Cancel</button></span>`);
    else buttons.push(html`<button type="button" class="danger-quiet" onClick=${() => setConfirming(true)} aria-label=${"Destroy" + label}>Destroy</button>`);
  }
  if (!buttons.length && !error) return null;
  return html`<span class="actions">${buttons}${error && html`<span class="error" role="alert">${error}</span>`}</span>`;
}

function CreateForm({ session, onCreated }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const scoped = session.workspaces && session.workspaces.length > 0;
  const submit = async (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const workspace = form.workspace.value.trim();
    const provider = form.provider.value.trim();
    if (!workspace) return setError("Name a workspace.");
    setBusy(true);
    setError(null);
    try {
      const body = { workspace };
      if (provider) body.provider = provider;
      const made = await server.post("/v1/computers", body);
      onCreated(made);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return html`
    <form class="create" onSubmit=${submit} aria-label="Create a computer">
      <div class="field">
        <label for="new-workspace">Workspace</label>
        ${scoped
          ? html`<select id="new-workspace" name="workspace">${session.workspaces.map((w) => html`<option value=${w}>${w}</option>`)}</select>`
          : html`<input id="new-workspace" name="workspace" autocomplete="off" required placeholder="e.g. team-a" />`}
      </div>
      <div class="field">
        <label for="new-provider">Provider <span class="muted">(optional)</span></label>
        <input id="new-provider" name="provider" autocomplete="off" placeholder="server default" />
      </div>
      <button type="submit" class="primary" disabled=${busy}>${busy ? "Creating… (waits for its guest)" : "Create computer"}</button>
      ${error && html`<p class="error" role="alert">${error}</p>`}
    </form>`;
}

export function ComputerList({ session }) {
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  const [details, setDetails] = useState({});
  const now = useNow(1000);
  const refresh = async (signal) => {
    try {
      // With each running computer's machine report (load, memory, home, desktops).
      const v = await server.api("GET", "/v1/computers?machine=true");
      if (signal && signal.aborted) return;
      setList(v.computers.filter((c) => c.state !== "destroyed"));
      setError(null);
    } catch (e) {
      setError(messageOf(e));
    }
  };
  usePoll(refresh, 2000, []);
  // Bots with desktops and jobs: two requests per computer, less often.
  const ids = (list || []).filter((c) => c.state === "running" && c.connected).slice(0, DETAIL_MAX).map((c) => c.id);
  usePoll(
    async (signal) => {
      const all = (list || []).slice(0, DETAIL_MAX).map(async (c) => {
        const running = c.state === "running" && c.connected;
        const [screens, jobs] = await Promise.all([
          running ? server.get(server.c(c.id, "screens")).catch(() => null) : null,
          server.get(server.c(c.id, "jobs")).catch(() => null),
        ]);
        return [c.id, { bots: screens ? screens.screens.map((s) => s.bot) : null, job: jobs && jobs.jobs[0] }];
      });
      const got = Object.fromEntries(await Promise.all(all));
      if (!signal.aborted) setDetails(got);
    },
    DETAIL_EVERY_MS,
    [ids.join(","), (list || []).length],
    list != null,
  );
  const rows = list || [];
  return html`
    <section class="list" aria-labelledby="list-title">
      <div class="section-head">
        <h1 id="list-title">Computers</h1>
        <span class="muted" aria-live="polite">${list ? rows.length + (rows.length === 1 ? " computer" : " computers") : "Loading…"}</span>
      </div>
      ${server.can("operator") && html`<details class="card"><summary>Create a computer</summary><${CreateForm} session=${session} onCreated=${(c) => { location.hash = "#/c/" + encodeURIComponent(c.id); }} /></details>`}
      ${error && html`<p class="error" role="alert">${error}</p>`}
      ${list && rows.length === 0 && html`<p class="empty">No computers${session.workspaces ? " in " + session.workspaces.join(", ") : ""} yet.</p>`}
      ${rows.length > 0 && html`
        <table class="computers">
          <caption class="sr-only">Computers, refreshed every 2 seconds</caption>
          <thead><tr>
            <th scope="col">Computer</th><th scope="col">State</th><th scope="col">Provider</th><th scope="col">Workspace</th>
            <th scope="col">Bots</th><th scope="col">Idle</th><th scope="col">Load</th><th scope="col">Memory</th>
            <th scope="col">Home</th><th scope="col">Job</th><th scope="col"><span class="sr-only">Actions</span></th>
          </tr></thead>
          <tbody>
            ${rows.map((c) => {
              const d = details[c.id] || {};
              const m = c.machine;
              return html`<tr key=${c.id}>
                <td data-label="Computer"><a href=${"#/c/" + encodeURIComponent(c.id)} class="computer-link">${c.id}</a>${c.kind === "private" && html` <span class="muted">private</span>`}</td>
                <td data-label="State"><${StateBadge} c=${c} /></td>
                <td data-label="Provider">${c.provider}${c.placement ? " · " + c.placement : ""}</td>
                <td data-label="Workspace">${c.workspace || (c.bot ? "bot " + c.bot : "–")}</td>
                <td data-label="Bots">${d.bots ? (d.bots.length ? d.bots.join(", ") : html`<span class="muted">no desktop</span>`) : html`<span class="muted">–</span>`}</td>
                <td data-label="Idle"><${Idle} c=${c} now=${now} /></td>
                <td data-label="Load">${m ? m.load[0].toFixed(2) + " / " + m.cpus + " CPU" : html`<span class="muted">–</span>`}</td>
                <td data-label="Memory"><${Memory} m=${m} /></td>
                <td data-label="Home">${m ? bytes(m.home_used_bytes || m.home_total_bytes - m.home_free_bytes) : html`<span class="muted">–</span>`}</td>
                <td data-label="Job">${d.job && isActive(d.job) ? html`<${JobPill} job=${d.job} />` : html`<span class="muted">–</span>`}</td>
                <td data-label="Actions"><${Lifecycle} c=${c} compact=${true} onDone=${() => refresh()} /></td>
              </tr>`;
            })}
          </tbody>
        </table>`}
    </section>`;
}
